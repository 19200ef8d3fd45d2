//! lockrun's own log lines. They all go to stderr: stdout belongs to the command. Where stderr
//! is the journal, each line starts with its syslog priority (sd-daemon(3)).

use std::collections::VecDeque;
use std::io::Write;
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};
use tracing::{Level, Metadata};
use tracing_subscriber::filter::{EnvFilter, LevelFilter};
use tracing_subscriber::fmt::MakeWriter;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
}

/// Logging as `-q`/`-v`/`--log-format` and `LOCKRUN_LOG` say (the run form and every other
/// command); a bad `LOCKRUN_LOG` is a usage error, said in one line. `quiet` is `-q` or
/// `LOCKRUN_QUIET`, `quiet_given` whether `-q` was on the command line itself, `verbose` how
/// many `-v`.
pub fn init_logging(
    quiet: bool,
    quiet_given: bool,
    verbose: u8,
    format: Format,
) -> Result<(), crate::exit_codes::ExitCode> {
    use crate::exit_codes::ExitCode;
    let env_filter = std::env::var("LOCKRUN_LOG").ok();
    let json = format == Format::Json;
    // -v wins over LOCKRUN_QUIET (a flag over a variable); -q -v on one line conflict.
    let quiet = quiet && (verbose == 0 || quiet_given);
    if quiet && verbose > 0 {
        print_early_error(
            "-q (--quiet) and -v (--verbose) cannot be used together (see 'lockrun --help')",
            json,
        );
        return Err(ExitCode::Usage);
    }
    init(quiet, verbose, env_filter.as_deref(), format).map_err(|msg| {
        print_early_error(&msg, json);
        ExitCode::Usage
    })
}

/// The target of a `--standby` host's takeover warning, which `-q` lets through: a tick its
/// first host did not complete is what the guide's `-q -E 0` crontab line has cron mail (a host
/// that died cannot say anything itself), while every skip stays silent.
pub const TAKEOVER: &str = "lockrun::takeover";

/// `-q` wins, then `-v`, then `LOCKRUN_LOG` (a tracing filter such as `debug`), then `info`.
pub fn init(
    quiet: bool,
    verbose: u8,
    env_filter: Option<&str>,
    format: Format,
) -> Result<(), String> {
    let filter = if quiet {
        let takeover = format!("{TAKEOVER}=warn")
            .parse()
            .expect("a valid directive");
        EnvFilter::default()
            .add_directive(LevelFilter::ERROR.into())
            .add_directive(takeover)
    } else if verbose > 0 {
        let level = if verbose == 1 {
            LevelFilter::DEBUG
        } else {
            LevelFilter::TRACE
        };
        EnvFilter::default().add_directive(level.into())
    } else {
        match env_filter.map(str::trim).filter(|s| !s.is_empty()) {
            Some(spec) => {
                check_filter(spec)?;
                let filter = EnvFilter::try_new(spec)
                    .map_err(|e| format!("LOCKRUN_LOG='{spec}' is not a log filter: {e}"))?;
                // Errors are always printed, whatever the filter says: a filter for some
                // targets only gets a default level of ERROR. Not when it has a default level
                // of its own (`info`, `warn,lockrun=debug`): that level already lets errors
                // through ("off" is refused above), and a second default would replace it.
                if has_default_level(spec) {
                    filter
                } else {
                    filter.add_directive(LevelFilter::ERROR.into())
                }
            }
            None => EnvFilter::default().add_directive(LevelFilter::INFO.into()),
        }
    };
    let builder = tracing_subscriber::fmt()
        .with_writer(Stderr {
            escape: format == Format::Text,
            journal: stderr_is_journal(),
        })
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

/// Lines waiting for the writer thread; beyond this many, the oldest are dropped (and counted),
/// so memory stays bounded however long stderr stays blocked.
const QUEUE_LINES: usize = 512;

/// If stderr accepts nothing for this long, lockrun exits without the rest of its lines.
const EXIT_FLUSH_STALL: Duration = Duration::from_secs(1);

/// lockrun's log output. Lines are handed to a writer thread and never written by the thread
/// that supervises the job: when whatever reads stderr stalls (a log shipper, a cron mailer, a
/// pipe nobody drains), a write blocks, and a blocked supervisor would stop renewing the lease
/// and stop terminating the job when the lock is lost. A full queue drops its oldest lines (the
/// latest say how the run ended) and the writer reports how many when it catches up.
struct Sink {
    state: Mutex<Queue>,
    /// Signalled when a line is queued (for the writer) and when one is written (for flush).
    changed: Condvar,
}

#[derive(Default)]
struct Queue {
    lines: VecDeque<Vec<u8>>,
    dropped: u64,
    /// A line is being written right now (taken from `lines` but not finished).
    writing: bool,
    /// Counts finished writes, so `flush` can tell a slow reader from a stalled one.
    written: u64,
    writer_started: bool,
}

static SINK: Sink = Sink {
    state: Mutex::new(Queue {
        lines: VecDeque::new(),
        dropped: 0,
        writing: false,
        written: 0,
        writer_started: false,
    }),
    changed: Condvar::new(),
};

impl Queue {
    /// Queues one line, dropping (and counting) the oldest when the queue is full.
    fn enqueue(&mut self, line: &[u8]) {
        if self.lines.len() >= QUEUE_LINES {
            self.lines.pop_front();
            self.dropped += 1;
        }
        self.lines.push_back(line.to_vec());
    }
}

fn queue() -> MutexGuard<'static, Queue> {
    // A panic while holding the lock cannot leave the queue inconsistent; keep logging.
    SINK.state.lock().unwrap_or_else(|p| p.into_inner())
}

impl Sink {
    fn push(&self, line: &[u8]) {
        let mut q = queue();
        q.enqueue(line);
        if !q.writer_started {
            // Started on the first line, not at start-up: a run that logs nothing (`-q` and a
            // conflict) never pays for the thread.
            q.writer_started = std::thread::Builder::new()
                .name("log".into())
                .stack_size(64 * 1024)
                .spawn(writer)
                .is_ok();
            if !q.writer_started {
                // No thread (resource limits): fall back to writing here; better a log line
                // that may block than no log at all.
                let lines: Vec<_> = q.lines.drain(..).collect();
                drop(q);
                for l in lines {
                    let _ = std::io::stderr().write_all(&l);
                }
                return;
            }
        }
        drop(q);
        self.changed.notify_all();
    }
}

/// The writer thread: the only place that blocks on stderr.
fn writer() {
    let mut stderr = std::io::stderr();
    loop {
        let (line, dropped) = {
            let mut q = queue();
            while q.lines.is_empty() {
                q = SINK.changed.wait(q).unwrap_or_else(|p| p.into_inner());
            }
            q.writing = true;
            (q.lines.pop_front(), std::mem::take(&mut q.dropped))
        };
        if dropped > 0 {
            // Logged through tracing so it has the run's format (text or JSON); it lands in
            // the queue behind the lines that follow the gap, close enough to show where it was.
            tracing::warn!(dropped, "log lines dropped: stderr was not being read");
        }
        if let Some(line) = line {
            // Errors are swallowed: a closed stderr must not stop anything either.
            let _ = stderr.write_all(&line);
        }
        let mut q = queue();
        q.writing = false;
        q.written += 1;
        drop(q);
        SINK.changed.notify_all();
    }
}

/// Waits until every queued line is written, giving up when stderr accepts nothing for
/// [`EXIT_FLUSH_STALL`]: lockrun's own lines must not be lost on a slow reader, and a dead one
/// must not keep it from exiting. Called once, at exit, after the lock is released.
pub fn flush() {
    let mut q = queue();
    let mut seen = q.written;
    let mut since = Instant::now();
    while q.writer_started && (!q.lines.is_empty() || q.writing || q.dropped > 0) {
        if q.written != seen {
            seen = q.written;
            since = Instant::now();
        }
        let left = EXIT_FLUSH_STALL.saturating_sub(since.elapsed());
        if left.is_zero() {
            return;
        }
        q = SINK
            .changed
            .wait_timeout(q, left)
            .unwrap_or_else(|p| p.into_inner())
            .0;
    }
}

/// Whether stderr is the journal: systemd sets `JOURNAL_STREAM=<st_dev>:<st_ino>` for a unit
/// whose stderr (or stdout) is connected to journald (systemd.exec(5)). The variable is
/// inherited by everything the unit starts, also where stderr was redirected since (`2>>file`
/// in an `sh -c`), so it is compared with what fd 2 is (sd_journal_stream_fd(3) says to).
/// Decided once: one getenv, and an fstat only when the variable is set.
fn stderr_is_journal() -> bool {
    static JOURNAL: OnceLock<bool> = OnceLock::new();
    *JOURNAL.get_or_init(|| {
        let Some(value) = std::env::var_os("JOURNAL_STREAM") else {
            return false;
        };
        let Some((dev, ino)) = value.to_str().and_then(|v| v.split_once(':')) else {
            return false;
        };
        let (Ok(dev), Ok(ino)) = (dev.parse::<libc::dev_t>(), ino.parse::<libc::ino_t>()) else {
            return false;
        };
        // fstat(2) of fd 2: the device and inode of the stream journald gave the unit, if fd 2
        // is still that stream. Failing (fd 2 closed): not the journal.
        nix::sys::stat::fstat(std::io::stderr())
            .is_ok_and(|st| st.st_dev == dev && st.st_ino == ino)
    })
}

/// The sd-daemon(3) prefix journald reads a line's priority from (and strips): `<3>` error,
/// `<4>` warning, `<6>` info, `<7>` debug (trace too). Without it every line is stored at the
/// unit's default, info, and `journalctl -p warning` finds no error.
fn priority(level: &Level) -> &'static [u8] {
    match *level {
        Level::ERROR => b"<3>",
        Level::WARN => b"<4>",
        Level::INFO => b"<6>",
        Level::DEBUG | Level::TRACE => b"<7>",
    }
}

/// lockrun's stderr as tracing-subscriber writes to it: a [`QueuedStderr`] per event, which
/// knows the event's level.
#[derive(Clone, Copy)]
struct Stderr {
    /// Text format: control characters inside the line are escaped (JSON escapes its own).
    escape: bool,
    /// stderr is the journal: each line starts with its [`priority`].
    journal: bool,
}

impl<'a> MakeWriter<'a> for Stderr {
    type Writer = QueuedStderr;

    fn make_writer(&'a self) -> QueuedStderr {
        QueuedStderr {
            escape: self.escape,
            prefix: b"",
        }
    }

    fn make_writer_for(&'a self, meta: &Metadata<'_>) -> QueuedStderr {
        QueuedStderr {
            escape: self.escape,
            prefix: if self.journal {
                priority(meta.level())
            } else {
                b""
            },
        }
    }
}

/// What tracing-subscriber writes each formatted event to: one `write_all` per event, so one
/// call is one whole line.
struct QueuedStderr {
    escape: bool,
    /// Written before the line: its priority where stderr is the journal, else nothing.
    prefix: &'static [u8],
}

impl std::io::Write for QueuedStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let escaped = if self.escape { escape_line(buf) } else { None };
        let line = escaped.as_deref().map_or(buf, str::as_bytes);
        if self.prefix.is_empty() {
            SINK.push(line);
        } else {
            SINK.push(&[self.prefix, line].concat());
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `line` with its control characters escaped, if it has any: a key or a value from the
/// server may hold a newline (which would forge a second log line) or a terminal escape
/// sequence (which would rewrite the operator's screen). The line's own final newline stays.
fn escape_line(line: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(line);
    let body = text.strip_suffix('\n').unwrap_or(&text);
    match escape_controls(body) {
        // The common case: nothing to escape, no copy.
        std::borrow::Cow::Borrowed(_) => None,
        std::borrow::Cow::Owned(mut escaped) => {
            if body.len() < text.len() {
                escaped.push('\n');
            }
            Some(escaped)
        }
    }
}

/// Whether a filter (already checked by [`check_filter`]) sets a level for every target.
fn has_default_level(spec: &str) -> bool {
    spec.split(',')
        .map(str::trim)
        .any(|d| !d.is_empty() && !d.contains('=') && !d.contains('['))
}

/// tracing reads a bare word as a *target* name, so `LOCKRUN_LOG=information` would silently
/// select a target that does not exist and print nothing at all. A bare word must be a level;
/// anything else needs the explicit `target=level` form.
fn check_filter(spec: &str) -> Result<(), String> {
    const LEVELS: [&str; 5] = ["error", "warn", "info", "debug", "trace"];
    for directive in spec.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        if directive.contains('=') || directive.contains('[') {
            continue;
        }
        let word = directive.to_ascii_lowercase();
        if word == "off" {
            return Err(
                "LOCKRUN_LOG=off would hide errors too: use -q (or LOCKRUN_QUIET=1) for errors only"
                    .into(),
            );
        }
        if !LEVELS.contains(&word.as_str()) {
            return Err(format!(
                "LOCKRUN_LOG: '{}' is not a level (error, warn, info, debug, trace) or a filter like lockrun=debug",
                escape_controls(directive)
            ));
        }
    }
    Ok(())
}

/// An error before logging is set up (a usage error, a bad LOCKRUN_LOG): one line on stderr in
/// the shape of every other error line, `<UTC time> ERROR <message>` (one JSON object when JSON
/// log lines were asked for), so one grep finds every error whatever stage found it. The text
/// line is made by the same formatter, with the same escaping, as the log lines: a one-off
/// subscriber for this one event, since the run's own may not exist yet.
pub fn print_early_error(message: &str, json: bool) {
    let journal = stderr_is_journal();
    if json {
        let line = serde_json::json!({
            "timestamp": crate::utc::now(),
            "level": "ERROR",
            "message": message,
        });
        let prefix = if journal { "<3>" } else { "" };
        // A full or closed stderr: nothing more can be said, and nothing to panic over.
        let _ = writeln!(std::io::stderr(), "{prefix}{line}");
    } else {
        let once = tracing_subscriber::fmt()
            .with_writer(Stderr {
                escape: true,
                journal,
            })
            .with_target(false)
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(once, || tracing::error!("{message}"));
    }
}

/// Control characters as visible escapes (`\n`, `\t`, `\r`, `\u{1b}`): text log lines stay
/// one line each and cannot carry terminal escape sequences.
pub fn escape_controls(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::{escape_controls, Queue, QUEUE_LINES};

    #[test]
    fn log_filters_are_levels_or_target_directives() {
        for ok in [
            "info",
            "DEBUG",
            "warn,lockrun=trace",
            "lockrun::app=debug",
            " trace ",
        ] {
            assert!(super::check_filter(ok).is_ok(), "{ok}");
        }
        for bad in ["information", "verbose", "info,loud", "off"] {
            assert!(super::check_filter(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(escape_controls("plain key"), "plain key");
        assert_eq!(
            escape_controls("a\nb\x1b[31mred\tc\r"),
            "a\\nb\\u{1b}[31mred\\tc\\r"
        );
    }

    #[test]
    fn a_full_queue_drops_the_oldest_lines_and_counts_them() {
        let mut q = Queue::default();
        for i in 0..QUEUE_LINES + 3 {
            q.enqueue(format!("{i}\n").as_bytes());
        }
        assert_eq!(q.lines.len(), QUEUE_LINES);
        assert_eq!(q.dropped, 3);
        // The newest lines survive: they say how the run ended.
        assert_eq!(q.lines.front().unwrap(), b"3\n");
        assert_eq!(
            q.lines.back().unwrap(),
            format!("{}\n", QUEUE_LINES + 2).as_bytes()
        );
    }
}
