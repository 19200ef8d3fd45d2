//! UTC times as text, `2024-01-02T03:04:05Z`: in the holder value an operator reads, in the
//! run history, and in the one error line printed before logging is set up.

use std::time::{SystemTime, UNIX_EPOCH};

/// The current UTC time as `2026-11-21T23:40:00Z`.
pub fn now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format(secs)
}

/// Unix seconds → `2024-01-02T03:04:05Z`.
pub fn format(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil-from-days (proleptic Gregorian), valid for any date after 1970.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// `2024-01-02T03:04:05Z` (or with fractional seconds) → Unix seconds.
pub fn parse(s: &str) -> Option<u64> {
    let s = s.strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>());
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let mut t = time.split(':');
    let (h, min) = (
        t.next()?.parse::<i64>().ok()?,
        t.next()?.parse::<i64>().ok()?,
    );
    let sec = t.next()?.split('.').next()?.parse::<i64>().ok()?;
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days * 86_400 + h * 3600 + min * 60 + sec).ok()
}

#[cfg(test)]
mod tests {
    use super::{format, parse};

    #[test]
    fn formatting() {
        assert_eq!(format(0), "1970-01-01T00:00:00Z");
        assert_eq!(format(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(format(1_795_303_845), "2026-11-21T23:30:45Z");
    }

    #[test]
    fn times_round_trip() {
        assert_eq!(parse("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse("2024-01-02T03:04:05Z"), Some(1_704_164_645));
        assert_eq!(parse("2024-01-02T03:04:05.250Z"), Some(1_704_164_645));
        assert_eq!(format(1_704_164_645), "2024-01-02T03:04:05Z");
        assert_eq!(parse("2000-02-29T00:00:00Z"), Some(951_782_400));
        assert_eq!(parse("yesterday"), None);
    }
}
