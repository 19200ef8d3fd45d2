//! Human durations on the command line: `500ms`, `30s`, `5m`, `1h`, a bare number of seconds,
//! and `forever` where a wait may be unbounded.

use std::fmt;
use std::time::Duration;

/// Parses `500ms`, `1.5s`, `30s`, `5m`, `1h`, `2d` or a bare (possibly fractional) number of
/// seconds. Negative, NaN, unit-less garbage and values that overflow are rejected with a message
/// that says what was expected, because clap prints it verbatim on one line.
pub fn parse(input: &str) -> Result<Duration, String> {
    let s = input.trim();
    if s.is_empty() {
        return Err("empty duration (expected e.g. 500ms, 30s, 5m, 1h)".into());
    }
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    if number.is_empty() {
        return Err(format!(
            "invalid duration '{input}' (expected a non-negative number with an optional unit ms, s, m, h or d)"
        ));
    }
    let value: f64 = number
        .parse()
        .map_err(|_| format!("invalid number in duration '{input}'"))?;
    let scale_ms = match unit.trim() {
        "ms" => 1.0,
        "" | "s" | "sec" | "secs" => 1_000.0,
        "m" | "min" | "mins" => 60_000.0,
        "h" => 3_600_000.0,
        "d" => 86_400_000.0,
        other => {
            return Err(format!(
                "invalid unit '{other}' in duration '{input}' (use ms, s, m, h or d)"
            ))
        }
    };
    let ms = value * scale_ms;
    // 100 years is far beyond any lease; the bound keeps the conversion below exact.
    if !ms.is_finite() || ms > 100.0 * 365.0 * 86_400_000.0 {
        return Err(format!("duration '{input}' is too large"));
    }
    Ok(Duration::from_micros((ms * 1_000.0).round() as u64))
}

/// How long to wait for a held lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Give up after this long (zero: a single attempt).
    For(Duration),
    /// Wait until the lock is ours or a stop signal comes.
    Forever,
}

impl Wait {
    pub fn parse(input: &str) -> Result<Wait, String> {
        match input.trim() {
            "forever" | "inf" | "infinity" => Ok(Wait::Forever),
            _ => parse(input).map(Wait::For),
        }
    }

    pub fn is_zero(&self) -> bool {
        matches!(self, Wait::For(d) if d.is_zero())
    }
}

/// Formats a duration the way `parse` reads it, shortest exact unit first (for logs).
pub struct Human(pub Duration);

impl fmt::Display for Human {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        if ms == 0 && !self.0.is_zero() {
            return write!(f, "{}us", self.0.as_micros());
        }
        match ms {
            0 => write!(f, "0s"),
            ms if ms % 3_600_000 == 0 => write!(f, "{}h", ms / 3_600_000),
            ms if ms % 60_000 == 0 => write!(f, "{}m", ms / 60_000),
            ms if ms % 1_000 == 0 => write!(f, "{}s", ms / 1_000),
            ms => write!(f, "{ms}ms"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("2d"), Ok(Duration::from_secs(172_800)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse(" 7 "), Ok(Duration::from_secs(7)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("0.25"), Ok(Duration::from_millis(250)));
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "",
            "abc",
            "-5",
            "10x",
            "s",
            "1..2s",
            "1e3",
            "5 parsecs",
            "NaN",
            "+3s",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} should be rejected");
        }
        assert!(parse("99999999999999h").unwrap_err().contains("too large"));
        assert!(parse("10x").unwrap_err().contains("unit 'x'"));
    }

    #[test]
    fn wait_forever() {
        assert_eq!(Wait::parse("forever"), Ok(Wait::Forever));
        assert_eq!(Wait::parse("10m"), Ok(Wait::For(Duration::from_secs(600))));
        assert!(Wait::parse("0").unwrap().is_zero());
        assert!(!Wait::Forever.is_zero());
    }

    #[test]
    fn human_round_trips() {
        for s in ["500ms", "30s", "5m", "1h", "0s", "1500ms"] {
            assert_eq!(Human(parse(s).unwrap()).to_string(), s);
        }
    }
}
