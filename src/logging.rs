//! lockrun's own log lines. They all go to stderr: stdout belongs to the command.

use std::time::{SystemTime, UNIX_EPOCH};
use tracing_subscriber::filter::{EnvFilter, LevelFilter};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
}

/// `-q` wins, then `-v`, then `LOCKRUN_LOG` (a tracing filter such as `debug`), then `info`.
pub fn init(
    quiet: bool,
    verbose: u8,
    env_filter: Option<&str>,
    format: Format,
) -> Result<(), String> {
    let filter = if quiet {
        EnvFilter::default().add_directive(LevelFilter::ERROR.into())
    } else if verbose > 0 {
        let level = if verbose == 1 {
            LevelFilter::DEBUG
        } else {
            LevelFilter::TRACE
        };
        EnvFilter::default().add_directive(level.into())
    } else {
        match env_filter.map(str::trim).filter(|s| !s.is_empty()) {
            Some(spec) => EnvFilter::try_new(spec)
                .map_err(|e| format!("invalid LOCKRUN_LOG filter '{spec}': {e}"))?,
            None => EnvFilter::default().add_directive(LevelFilter::INFO.into()),
        }
    };
    let builder = tracing_subscriber::fmt()
        .with_writer(|| QuietStderr)
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(false);
    let result = match format {
        Format::Text => builder.try_init(),
        // One object per line with the message and fields at the top level, which is what
        // Kubernetes log pipelines (fluent-bit, vector, Loki) index without extra parsing.
        Format::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
    };
    result.map_err(|e| format!("cannot initialise logging: {e}"))
}

/// stderr that swallows write errors: a closed or full log pipe (cron's mailer gone, a
/// collector restarted) must never stop lockrun from supervising the job and releasing the lock.
struct QuietStderr;

impl std::io::Write for QuietStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The current UTC time as `2026-11-21T23:40:00Z`, for the holder value an operator reads.
pub fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format_utc(secs)
}

fn format_utc(secs: u64) -> String {
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

#[cfg(test)]
mod tests {
    use super::format_utc;

    #[test]
    fn utc_formatting() {
        assert_eq!(format_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(format_utc(1_795_303_845), "2026-11-21T23:30:45Z");
    }
}
