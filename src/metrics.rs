//! `--metrics-file`: how the run ended, as Prometheus text (exposition format 0.0.4), for cron
//! jobs watched through node_exporter's textfile collector.
//!
//! The metric names and labels are a contract: alert rules are written against them. The file
//! is replaced atomically (a temporary file in the same directory, renamed over it), so the
//! collector, which may read at any moment, sees the previous run's file or this one's, never
//! half of one.

use crate::ending::Ending;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use crate::lock::Outcome;

/// The outcomes the `outcome` label takes, in the order the file lists them (`released` is
/// an operator's action in a key's history, never how a run ends).
pub const OUTCOMES: [Outcome; 6] = [
    Outcome::Ran,
    Outcome::Skipped,
    Outcome::Lost,
    Outcome::Aborted,
    Outcome::Timeout,
    Outcome::Error,
];

/// What one run did, filled in as it goes ([`crate::app`]) and finished when it ends
/// ([`RunRecord::finish`]). Plain data: the metrics file is one rendering of it.
#[derive(Clone, Debug)]
pub struct RunRecord {
    /// The lock name (`KEY`): what the lines are labelled with.
    pub key: String,
    pub outcome: Outcome,
    /// lockrun's own exit code.
    pub exit_code: i32,
    /// From the start until the lock was acquired, or given up.
    pub wait: Duration,
    /// How long this lockrun held the lock (zero when it never did); summed if it had to give
    /// a lease back and take the lock again while waiting.
    pub held: Duration,
    /// Renewals the server confirmed.
    pub renewals: u64,
    /// Renewal attempts that failed or timed out (retried until the lease's deadline).
    pub renewal_failures: u64,
    /// `LOCKRUN_FENCE` of the lease the command ran under; zero when never acquired.
    pub fence: u64,
    /// With `--standby`, when it acquired: which attempt at its tick this run was (1: the
    /// tick's first; more: it took the tick over). `None` otherwise.
    pub attempt: Option<u32>,
    /// The job's schedule period (`--every`).
    pub every: Option<Duration>,
    /// `--shared`: the run took the key in shared mode (held, or tried to).
    pub shared: bool,
    /// When the job last started under this lock, as this run saw it: its own start of the
    /// command ([`RunRecord::command_started`]), or the holder's `started=` when it found the
    /// lock held. Kept from the previous file when this run saw neither (see [`write`]).
    pub job_started: Option<SystemTime>,
    /// The start this host knew before `job_started`: filled in by [`write`] from the file it
    /// replaces. With `job_started` it tells a start after a pause from one on schedule.
    pub job_previous_start: Option<SystemTime>,
    /// When a run of the job on this host last ended with exit code 0: this one's end if it
    /// did, else kept from the previous file.
    pub job_succeeded: Option<SystemTime>,
    /// When a run of the job on this host last ended, whatever its exit: this one's end if it
    /// started the command, else kept from the previous file. Older than `job_started`: the
    /// run that started last has not ended (yet).
    pub job_ended: Option<SystemTime>,
    /// This run started the command.
    started_command: bool,
    pub start: SystemTime,
    pub end: SystemTime,
    /// `start` on the monotonic clock, for the durations (a wall clock can jump).
    started: Instant,
}

impl RunRecord {
    /// A run of `key` starting now; until [`RunRecord::finish`] it reads as an error.
    pub fn begin(key: &str) -> RunRecord {
        let now = SystemTime::now();
        RunRecord {
            key: key.to_string(),
            outcome: Outcome::Error,
            exit_code: 0,
            wait: Duration::ZERO,
            held: Duration::ZERO,
            renewals: 0,
            renewal_failures: 0,
            fence: 0,
            attempt: None,
            every: None,
            shared: false,
            job_started: None,
            job_previous_start: None,
            job_succeeded: None,
            job_ended: None,
            started_command: false,
            start: now,
            end: now,
            started: Instant::now(),
        }
    }

    /// Time since the run started, on the monotonic clock.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// When the run started, on the monotonic clock.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// The command has just started: the job's start, and this run's end will be the job's.
    pub fn command_started(&mut self) {
        self.job_started = Some(SystemTime::now());
        self.started_command = true;
    }

    /// The run ended as `ending` says.
    pub fn finish(&mut self, ending: &Ending) {
        self.exit_code = ending.code.code();
        self.outcome = ending.outcome;
        self.end = SystemTime::now();
        if self.outcome == Outcome::Ran && self.exit_code == 0 {
            self.job_succeeded = Some(self.end);
        }
        if self.started_command {
            self.job_ended = Some(self.end);
        }
    }
}

/// Writes `record` to `path` atomically; a failure is one warning line and nothing else: the
/// job's exit code is what cron and the caller act on, the file is only for monitoring (a
/// file that stops being updated is what an alert on its end timestamp catches).
///
/// Only a regular file is ever replaced (or a path where nothing is): whatever else is there
/// (a device, a FIFO, a directory; `/dev/null` given to silence the file) is the user's, and
/// renaming over it would destroy it. A symbolic link is followed to the regular file it
/// names, which is replaced in its own directory, so the link stays.
///
/// The fleet-wide times (`job_started`, `job_succeeded`, `job_ended`) are carried over from the
/// file being replaced when this run has none of its own: each host's file is replaced by
/// every run, and most runs skip, yet an alert must still know when the job last started,
/// succeeded and ended. `job_previous_start` is the file's start when this run knows a later
/// one, else the file's own previous start.
pub fn write(path: &Path, record: &RunRecord) {
    let target = match replaceable(path) {
        Ok(target) => target,
        Err(why) => {
            tracing::warn!(
                "cannot write metrics file {}: {why}; left as it is",
                path.display()
            );
            return;
        }
    };
    let mut record = record.clone();
    let previous = previous_times(&target, &record.key);
    carry_over(&mut record, previous);
    if let Err(e) = write_atomically(&target, render(&record).as_bytes()) {
        tracing::warn!("cannot write metrics file {}: {e}", path.display());
    }
}

/// The path to replace: `path` itself if nothing or a regular file is there, the file a
/// symbolic link resolves to if that is a regular file; anything else is refused with why.
fn replaceable(path: &Path) -> Result<PathBuf, String> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        // Nothing there (or a directory we cannot look into): the write says what is wrong.
        Err(_) => return Ok(path.to_path_buf()),
    };
    let kind = meta.file_type();
    if kind.is_file() {
        return Ok(path.to_path_buf());
    }
    if kind.is_symlink() {
        return match std::fs::canonicalize(path) {
            Ok(real) if real.is_file() => Ok(real),
            Ok(real) => Err(format!(
                "it links to {}, not a regular file",
                real.display()
            )),
            Err(e) => Err(format!("it is a link that does not resolve ({e})")),
        };
    }
    use std::os::unix::fs::FileTypeExt;
    let what = if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    };
    Err(format!("it is {what}, not a regular file"))
}

/// `record`'s job times, given what the file it replaces says.
fn carry_over(record: &mut RunRecord, previous: Carried) {
    let started = later(record.job_started, previous.started);
    record.job_previous_start = if started != previous.started {
        previous.started
    } else {
        previous.previous_start
    };
    record.job_started = started;
    record.job_succeeded = later(record.job_succeeded, previous.succeeded);
    record.job_ended = later(record.job_ended, previous.ended);
}

/// The job times a metrics file carries from run to run.
#[derive(Debug, Default, PartialEq)]
struct Carried {
    started: Option<SystemTime>,
    previous_start: Option<SystemTime>,
    succeeded: Option<SystemTime>,
    ended: Option<SystemTime>,
}

/// The later of two optional times.
fn later(a: Option<SystemTime>, b: Option<SystemTime>) -> Option<SystemTime> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// The carried-over times in the file at `path` for `key`, if it is lockrun's file of the same
/// key. At most 64 KiB are read (lockrun's file is ~3 KiB), and the open does not block
/// (`O_NONBLOCK`) should something else be swapped in.
fn previous_times(path: &Path, key: &str) -> Carried {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt;
    let mut text = String::new();
    let read = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .and_then(|f| {
            if !f.metadata()?.is_file() {
                return Ok(0);
            }
            f.take(64 * 1024).read_to_string(&mut text)
        });
    if read.is_err() {
        return Carried::default();
    }
    let labels = format!("{{key=\"{}\"}} ", escape_label_value(key));
    let value = |name: &str| {
        let prefix = format!("{name}{labels}");
        let line = text.lines().find(|l| l.starts_with(&prefix))?;
        let secs: f64 = line[prefix.len()..].trim().parse().ok()?;
        (secs.is_finite() && secs > 0.0).then(|| UNIX_EPOCH + Duration::from_secs_f64(secs))
    };
    Carried {
        started: value(JOB_STARTED),
        previous_start: value(JOB_PREVIOUS_START),
        succeeded: value(JOB_SUCCEEDED),
        ended: value(JOB_ENDED),
    }
}

/// A temporary file beside `path` (same directory, hence same file system, so `rename` is
/// atomic), then renamed over it. Not fsynced: after a crash the collector may miss one run,
/// which costs less than a disk flush on every cron tick. Readable by everyone (0644) whatever
/// the umask: node_exporter runs as its own user, and the file holds nothing secret.
fn write_atomically(path: &Path, text: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let tmp = temporary_path(path)?;
    let result = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        // Never through a link someone left at the temporary name.
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o644)
        .open(&tmp)
        .and_then(|mut f| {
            // fchmod: the mode given to open() is cut by the umask (077 leaves 0600).
            f.set_permissions(std::fs::Permissions::from_mode(0o644))?;
            f.write_all(text).and_then(|()| f.flush())
        })
        .and_then(|()| std::fs::rename(&tmp, path));
    if result.is_err() {
        // Nothing half-written may stay behind (the collector ignores dot files, but a full
        // directory would not).
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// `dir/.<name>.tmp.<pid>`: hidden (the collector only reads `*.prom`), and unique per process.
fn temporary_path(path: &Path) -> std::io::Result<PathBuf> {
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file name"))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".tmp.{}", std::process::id()));
    Ok(path.with_file_name(tmp_name))
}

/// A metric family with one line: name, help text, and its value for a record.
type Gauge = (&'static str, &'static str, fn(&RunRecord) -> String);

/// The carried-over families: names shared by [`render`] and [`previous_times`].
const JOB_STARTED: &str = "lockrun_job_last_start_timestamp_seconds";
const JOB_PREVIOUS_START: &str = "lockrun_job_previous_start_timestamp_seconds";
const JOB_SUCCEEDED: &str = "lockrun_job_last_success_timestamp_seconds";
const JOB_ENDED: &str = "lockrun_job_last_end_timestamp_seconds";

/// Families written only when their value is known: name, help text, value.
type Optional = (&'static str, &'static str, fn(&RunRecord) -> Option<String>);

/// After [`GAUGES`], in this order. With these an alert can judge any schedule: how often the
/// job should start, when it last started, succeeded and ended anywhere (the newest value
/// across hosts), and whether its last start came after a pause (see
/// packaging/prometheus/lockrun.rules.yml).
const SCHEDULE: [Optional; 5] = [
    (
        "lockrun_schedule_period_seconds",
        "The job's schedule period (--every): how often it is started on every host.",
        |r| r.every.map(seconds),
    ),
    (
        JOB_STARTED,
        "Unix time the job last started under this lock, as this host knows it: its own start, or the holder's when it found the lock held.",
        |r| r.job_started.map(timestamp),
    ),
    (
        JOB_PREVIOUS_START,
        "Unix time the job started before its last start, as this host knows it.",
        |r| r.job_previous_start.map(timestamp),
    ),
    (
        JOB_SUCCEEDED,
        "Unix time a run of the job on this host last ended with exit code 0.",
        |r| r.job_succeeded.map(timestamp),
    ),
    (
        JOB_ENDED,
        "Unix time a run of the job on this host last ended, whatever its exit code.",
        |r| r.job_ended.map(timestamp),
    ),
];

/// After [`SCHEDULE`]: written by a `--standby` run that acquired.
const STANDBY: [Optional; 1] = [(
    "lockrun_last_run_tick_attempt",
    "With --standby: which attempt at its tick the last run was (1: the tick's first; 2 or more: it took over a tick that another host did not complete).",
    |r| r.attempt.map(|a| a.to_string()),
)];

/// After [`STANDBY`]: written by a `--shared` run, whatever its outcome.
const SHARED: [Optional; 1] = [(
    "lockrun_last_run_shared",
    "With --shared: 1, the last run took the key in shared mode (beside other shared runs, never beside an exclusive one).",
    |r| r.shared.then(|| "1".to_string()),
)];

/// The families after `lockrun_last_run_outcome` (which has a line per outcome), in the order
/// written.
const GAUGES: [Gauge; 8] = [
    (
        "lockrun_last_run_exit_code",
        "lockrun's own exit code in the last run.",
        |r| r.exit_code.to_string(),
    ),
    (
        "lockrun_last_run_wait_seconds",
        "Seconds from the start of the last run until the lock was acquired or given up.",
        |r| seconds(r.wait),
    ),
    (
        "lockrun_last_run_held_seconds",
        "Seconds the last run held the lock (0 if it never acquired it).",
        |r| seconds(r.held),
    ),
    (
        "lockrun_last_run_renewals",
        "Lease renewals the server confirmed in the last run.",
        |r| r.renewals.to_string(),
    ),
    (
        "lockrun_last_run_renewal_failures",
        "Lease renewal attempts that failed or timed out in the last run.",
        |r| r.renewal_failures.to_string(),
    ),
    (
        "lockrun_last_run_fence",
        "Fencing number of the lease the last run held (0 if it never acquired the lock).",
        |r| r.fence.to_string(),
    ),
    (
        "lockrun_last_run_start_timestamp_seconds",
        "Unix time the last run started.",
        |r| timestamp(r.start),
    ),
    (
        "lockrun_last_run_end_timestamp_seconds",
        "Unix time the last run ended.",
        |r| timestamp(r.end),
    ),
];

/// The file's text: every family with `# HELP` and `# TYPE … gauge`, every line ending in `\n`.
pub fn render(record: &RunRecord) -> String {
    let key = escape_label_value(&record.key);
    let mut out = String::with_capacity(2048);
    let name = "lockrun_last_run_outcome";
    let _ = writeln!(
        out,
        "# HELP {name} How the last run ended: 1 for its outcome, 0 for the others."
    );
    let _ = writeln!(out, "# TYPE {name} gauge");
    for o in OUTCOMES {
        let v = u8::from(o == record.outcome);
        let _ = writeln!(
            out,
            "{name}{{key=\"{key}\",outcome=\"{}\"}} {v}",
            o.as_str()
        );
    }
    let known = SCHEDULE
        .iter()
        .chain(&STANDBY)
        .chain(&SHARED)
        .filter_map(|(name, help, value)| Some((*name, *help, value(record)?)));
    let all = GAUGES
        .iter()
        .map(|(name, help, value)| (*name, *help, value(record)))
        .chain(known);
    for (name, help, value) in all {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
        let _ = writeln!(out, "{name}{{key=\"{key}\"}} {value}");
    }
    out
}

/// A label value as the text format wants it: `\`, `"` and newline escaped, nothing else.
pub fn escape_label_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// Seconds as a float; Rust prints f64 without an exponent, which every parser reads.
fn seconds(d: Duration) -> String {
    d.as_secs_f64().to_string()
}

fn timestamp(t: SystemTime) -> String {
    // A clock before 1970 is a broken clock; 0 says so plainly instead of failing the write.
    seconds(t.duration_since(UNIX_EPOCH).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ending::{decide, Course, JobEnd, Stopped};
    use crate::exit_codes::ExitCode;

    fn record(key: &str) -> RunRecord {
        let start = UNIX_EPOCH + Duration::from_millis(1_700_000_000_250);
        RunRecord {
            key: key.into(),
            outcome: Outcome::Ran,
            exit_code: 3,
            wait: Duration::from_millis(1500),
            held: Duration::from_millis(2250),
            renewals: 7,
            renewal_failures: 1,
            fence: 42,
            attempt: None,
            every: None,
            shared: false,
            job_started: None,
            job_previous_start: None,
            job_succeeded: None,
            job_ended: None,
            started_command: false,
            start,
            end: start + Duration::from_millis(3750),
            started: Instant::now(),
        }
    }

    #[test]
    fn the_file_byte_for_byte() {
        let expected = "\
# HELP lockrun_last_run_outcome How the last run ended: 1 for its outcome, 0 for the others.
# TYPE lockrun_last_run_outcome gauge
lockrun_last_run_outcome{key=\"nightly\",outcome=\"ran\"} 1
lockrun_last_run_outcome{key=\"nightly\",outcome=\"skipped\"} 0
lockrun_last_run_outcome{key=\"nightly\",outcome=\"lost\"} 0
lockrun_last_run_outcome{key=\"nightly\",outcome=\"aborted\"} 0
lockrun_last_run_outcome{key=\"nightly\",outcome=\"timeout\"} 0
lockrun_last_run_outcome{key=\"nightly\",outcome=\"error\"} 0
# HELP lockrun_last_run_exit_code lockrun's own exit code in the last run.
# TYPE lockrun_last_run_exit_code gauge
lockrun_last_run_exit_code{key=\"nightly\"} 3
# HELP lockrun_last_run_wait_seconds Seconds from the start of the last run until the lock was acquired or given up.
# TYPE lockrun_last_run_wait_seconds gauge
lockrun_last_run_wait_seconds{key=\"nightly\"} 1.5
# HELP lockrun_last_run_held_seconds Seconds the last run held the lock (0 if it never acquired it).
# TYPE lockrun_last_run_held_seconds gauge
lockrun_last_run_held_seconds{key=\"nightly\"} 2.25
# HELP lockrun_last_run_renewals Lease renewals the server confirmed in the last run.
# TYPE lockrun_last_run_renewals gauge
lockrun_last_run_renewals{key=\"nightly\"} 7
# HELP lockrun_last_run_renewal_failures Lease renewal attempts that failed or timed out in the last run.
# TYPE lockrun_last_run_renewal_failures gauge
lockrun_last_run_renewal_failures{key=\"nightly\"} 1
# HELP lockrun_last_run_fence Fencing number of the lease the last run held (0 if it never acquired the lock).
# TYPE lockrun_last_run_fence gauge
lockrun_last_run_fence{key=\"nightly\"} 42
# HELP lockrun_last_run_start_timestamp_seconds Unix time the last run started.
# TYPE lockrun_last_run_start_timestamp_seconds gauge
lockrun_last_run_start_timestamp_seconds{key=\"nightly\"} 1700000000.25
# HELP lockrun_last_run_end_timestamp_seconds Unix time the last run ended.
# TYPE lockrun_last_run_end_timestamp_seconds gauge
lockrun_last_run_end_timestamp_seconds{key=\"nightly\"} 1700000004
";
        let text = render(&record("nightly"));
        assert_eq!(text, expected);
        // Every line, the last included, ends in a newline; no carriage returns, no blank lines.
        assert!(text.ends_with('\n'));
        assert!(text.split_terminator('\n').all(|l| !l.is_empty()));
        assert!(!text.contains('\r'));
    }

    #[test]
    fn each_family_has_help_and_type_before_its_samples() {
        let text = render(&record("k"));
        let mut families = Vec::new();
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            if let Some(rest) = l.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().unwrap();
                assert_eq!(lines[i + 1], format!("# TYPE {name} gauge"));
                assert!(lines[i + 2].starts_with(&format!("{name}{{key=\"k\"")));
                families.push(name.to_string());
            }
        }
        assert_eq!(families.len(), 9, "{families:?}");
    }

    #[test]
    fn exactly_one_outcome_is_one() {
        for o in OUTCOMES {
            let mut r = record("k");
            r.outcome = o;
            let text = render(&r);
            let ones: Vec<&str> = text
                .lines()
                .filter(|l| l.starts_with("lockrun_last_run_outcome{") && l.ends_with(" 1"))
                .collect();
            assert_eq!(
                ones,
                [format!(
                    "lockrun_last_run_outcome{{key=\"k\",outcome=\"{}\"}} 1",
                    o.as_str()
                )]
            );
            assert_eq!(
                text.lines()
                    .filter(|l| l.starts_with("lockrun_last_run_outcome{"))
                    .count(),
                6
            );
        }
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label_value("plain-key:1"), "plain-key:1");
        assert_eq!(escape_label_value(r#"a\b"c"#), r#"a\\b\"c"#);
        assert_eq!(escape_label_value("line\nbreak"), "line\\nbreak");
        // Only those three: tabs, braces, commas and non-ASCII are fine inside quotes.
        assert_eq!(escape_label_value("t\t{x},ü"), "t\t{x},ü");
        let text = render(&record("we\"ird\\\nkey"));
        assert!(text.contains("lockrun_last_run_fence{key=\"we\\\"ird\\\\\\nkey\"} 42\n"));
        assert_eq!(text.lines().count(), 6 + 2 + 8 * 3, "no line was split");
    }

    /// The ending of a job that ran and exited with `status`; `lost`: with `--on-lost
    /// continue`.
    fn ran(status: ExitCode, lost: bool, stop_received: bool) -> Ending {
        let job = JobEnd {
            status,
            stopped: Stopped::No,
            lock_lost: lost,
        };
        decide(Course::Ran {
            job,
            stop_received,
            key_gone: false,
        })
    }

    /// The ending of a job stopped at its time limit, which then ended with `status`.
    fn timed_out(status: ExitCode) -> Ending {
        let job = JobEnd {
            status,
            stopped: Stopped::TimeLimit,
            lock_lost: false,
        };
        decide(Course::Ran {
            job,
            stop_received: false,
            key_gone: false,
        })
    }

    #[test]
    fn finish_sets_outcome_code_and_end() {
        let mut r = RunRecord::begin("k");
        r.finish(&ran(ExitCode::Command(5), true, false));
        assert_eq!((r.outcome, r.exit_code), (Outcome::Lost, 5));
        assert!(r.end >= r.start);
    }

    #[test]
    fn the_schedule_families_follow_when_known() {
        let mut r = record("k");
        let at = |s: u64| UNIX_EPOCH + Duration::from_secs(s);
        r.every = Some(Duration::from_secs(60));
        r.job_started = Some(at(1_700_000_100));
        let text = render(&r);
        assert!(text.ends_with(
            "# HELP lockrun_schedule_period_seconds The job's schedule period (--every): how often it is started on every host.
# TYPE lockrun_schedule_period_seconds gauge
lockrun_schedule_period_seconds{key=\"k\"} 60
# HELP lockrun_job_last_start_timestamp_seconds Unix time the job last started under this lock, as this host knows it: its own start, or the holder's when it found the lock held.
# TYPE lockrun_job_last_start_timestamp_seconds gauge
lockrun_job_last_start_timestamp_seconds{key=\"k\"} 1700000100
"
        ));
        assert!(!text.contains("success"), "unknown: not written");
    }

    #[test]
    fn a_shared_run_says_so_last_and_an_exclusive_one_says_nothing() {
        let mut r = record("k");
        assert!(!render(&r).contains("shared"));
        r.shared = true;
        assert!(render(&r).ends_with(
            "# TYPE lockrun_last_run_shared gauge\nlockrun_last_run_shared{key=\"k\"} 1\n"
        ));
    }

    #[test]
    fn finish_records_a_success_only_for_a_run_that_exited_0() {
        let skipped = decide(Course::Skipped {
            code: 0,
            leased: false,
        });
        for (ending, success) in [
            (ran(ExitCode::Command(0), false, false), true),
            (ran(ExitCode::Command(1), false, false), false),
            (ran(ExitCode::Command(0), true, false), false),
            (skipped, false),
            // Stopped at its time limit: it trapped SIGTERM and exited 0, yet did not finish.
            (timed_out(ExitCode::Command(0)), false),
        ] {
            let mut r = RunRecord::begin("k");
            r.finish(&ending);
            assert_eq!(r.job_succeeded.is_some(), success, "{ending:?}");
        }
    }

    #[test]
    fn finish_records_an_end_only_for_a_run_that_started_the_command() {
        // Failed, lost, stopped by a signal: each ended the job's run.
        let stopped_for_the_lock = decide(Course::Ran {
            job: JobEnd {
                status: ExitCode::Signaled(15),
                stopped: Stopped::Lock,
                lock_lost: true,
            },
            stop_received: false,
            key_gone: false,
        });
        for ending in [
            ran(ExitCode::Command(0), false, false),
            ran(ExitCode::Command(1), false, false),
            stopped_for_the_lock,
            ran(ExitCode::Signaled(15), false, true),
        ] {
            let mut r = RunRecord::begin("k");
            r.command_started();
            r.finish(&ending);
            assert_eq!(r.job_ended, Some(r.end), "{ending:?}");
            assert!(r.job_started.unwrap() <= r.end);
        }
        // A skip (it saw the holder's start), a stop while waiting, a command not found.
        for course in [
            Course::Skipped {
                code: 75,
                leased: false,
            },
            Course::Aborted(15),
            Course::Failed(ExitCode::NotFound),
        ] {
            let mut r = RunRecord::begin("k");
            r.job_started = Some(UNIX_EPOCH + Duration::from_secs(1_000));
            r.finish(&decide(course));
            assert_eq!(r.job_ended, None, "{course:?}");
        }
    }

    #[test]
    fn the_previous_start_moves_only_with_a_later_start() {
        let at = |s: u64| Some(UNIX_EPOCH + Duration::from_secs(s));
        let file = |started, previous_start| Carried {
            started,
            previous_start,
            succeeded: at(5),
            ended: at(6),
        };
        let carried = |job_started, previous: Carried| {
            let mut r = record("k");
            r.job_started = job_started;
            carry_over(&mut r, previous);
            (
                r.job_started,
                r.job_previous_start,
                r.job_succeeded,
                r.job_ended,
            )
        };
        // A later start: the file's start becomes the previous one.
        assert_eq!(
            carried(at(200), file(at(100), at(40))),
            (at(200), at(100), at(5), at(6))
        );
        // The same start seen again (a second skip during one run), none seen, or an older
        // one: nothing moves.
        for seen in [at(100), None, at(50)] {
            assert_eq!(
                carried(seen, file(at(100), at(40))),
                (at(100), at(40), at(5), at(6)),
                "{seen:?}"
            );
        }
        // The first start this file hears of: none before it.
        assert_eq!(
            carried(at(100), Carried::default()),
            (at(100), None, None, None)
        );
    }

    #[test]
    fn the_job_times_carry_over_from_the_previous_file_of_the_same_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("job.prom");
        let at = |s: u64| UNIX_EPOCH + Duration::from_secs(s);
        let secs = |t: Option<SystemTime>| t.map(|t| t.duration_since(UNIX_EPOCH).unwrap());
        let mut ran = record("we\"ird");
        ran.job_started = Some(at(1_000));
        ran.job_succeeded = Some(at(1_010));
        ran.job_ended = Some(at(1_010));
        write(&path, &ran);
        // A skip that saw no holder keeps both; one that saw a newer holder moves the start.
        let skipped = record("we\"ird");
        write(&path, &skipped);
        let c = previous_times(&path, "we\"ird");
        assert_eq!(
            (secs(c.started), secs(c.succeeded), secs(c.ended)),
            (
                secs(Some(at(1_000))),
                secs(Some(at(1_010))),
                secs(Some(at(1_010)))
            )
        );
        assert_eq!(c.previous_start, None);
        let mut saw = record("we\"ird");
        saw.job_started = Some(at(2_000));
        write(&path, &saw);
        let c = previous_times(&path, "we\"ird");
        assert_eq!(secs(c.started), secs(Some(at(2_000))));
        assert_eq!(secs(c.previous_start), secs(Some(at(1_000))));
        assert_eq!(secs(c.succeeded), secs(Some(at(1_010))));
        assert_eq!(secs(c.ended), secs(Some(at(1_010))));
        // Another key's file, or no file, carries nothing.
        assert_eq!(previous_times(&path, "other"), Carried::default());
        assert_eq!(
            previous_times(&dir.path().join("none"), "k"),
            Carried::default()
        );
    }

    #[test]
    fn only_a_regular_file_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo.prom");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(replaceable(&fifo).unwrap_err().contains("a FIFO"));
        write(&fifo, &record("k"));
        use std::os::unix::fs::FileTypeExt;
        assert!(std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo());
        assert!(replaceable(dir.path()).unwrap_err().contains("a directory"));
        assert!(replaceable(Path::new("/dev/null"))
            .unwrap_err()
            .contains("character device"));
        // A link to a regular file: the file is replaced, the link stays.
        let real = dir.path().join("real.prom");
        std::fs::write(&real, "old\n").unwrap();
        let link = dir.path().join("link.prom");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        write(&link, &record("k"));
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert!(std::fs::read_to_string(&real)
            .unwrap()
            .contains("lockrun_last_run_fence"));
        let dangling = dir.path().join("dangling.prom");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).unwrap();
        assert!(replaceable(&dangling).is_err());
        // Nothing there: written.
        assert_eq!(
            replaceable(&dir.path().join("new.prom")).unwrap(),
            dir.path().join("new.prom")
        );
    }

    #[test]
    fn written_atomically_and_nothing_left_behind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("job.prom");
        std::fs::write(&path, "old\n").unwrap();
        write_atomically(&path, b"new\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new\n");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["job.prom"]);
        assert_eq!(
            temporary_path(Path::new("d/job.prom")).unwrap(),
            Path::new(&format!("d/.job.prom.tmp.{}", std::process::id()))
        );
        assert_eq!(
            temporary_path(Path::new("job.prom")).unwrap(),
            Path::new(&format!(".job.prom.tmp.{}", std::process::id()))
        );
        // A directory that does not exist: an error, no file anywhere.
        assert!(write_atomically(&dir.path().join("missing/job.prom"), b"x\n").is_err());
        assert!(temporary_path(Path::new("/")).is_err());
    }
}
