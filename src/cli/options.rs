//! Every option of the run form ([`Args`]) and the parts the operators' commands share with it
//! ([`Connection`], [`Logs`]): each described once, with its variable, default, help text and
//! the parser that checks its value. Parsing, `--help`, the man pages, the completions and the
//! guide's options table all read these definitions.

use crate::duration::{self, Wait};
use crate::lock::keys::RESERVED_PREFIX;
use crate::logging::Format;
use clap::Parser;
use std::ffi::OsString;
use std::time::Duration;

/// Shortest lease: below this, one slow round trip or scheduler hiccup loses the lock.
pub const MIN_TTL: Duration = Duration::from_millis(100);
/// Runs a key's history keeps by default (`--history`), and at most.
pub const DEFAULT_HISTORY: u32 = 100;
/// Defaults given as text: clap parses them like any value.
const DEFAULT_URL: &str = "redis://127.0.0.1:6379";
const DEFAULT_TTL: &str = "30s";
const DEFAULT_KILL_AFTER: &str = "10s";
pub const MAX_HISTORY: u32 = 10_000;
/// Longest lease: a crashed holder blocks everyone else for up to one TTL.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
/// Shortest and longest `--every` (their message says them as typed: 2s, 366d): below 2 s no
/// hold is left once the margin is taken; a year is the longest schedule worth a lock (a
/// monthly job is `--every 30d`).
const MIN_EVERY: Duration = Duration::from_secs(2);
const MAX_EVERY: Duration = Duration::from_secs(366 * 86_400);

/// The variables of lockrun's own that the command does not get (`spawn` leaves them out of
/// its environment): where the run reports to is the run's own. The ping URL is a secret, and
/// a lockrun inside the job (a wrapper, a step under the same or another key) would report to
/// the same check and write the same metrics file. Each is the `env` of an option below and
/// spelled only here; that option's help says its variable "is not passed on to the command"
/// (a unit test holds the two together).
pub const WITHHELD_FROM_JOB: [&str; 3] = [PING_URL_ENV, PING_FILE_ENV, METRICS_FILE_ENV];
const METRICS_FILE_ENV: &str = "LOCKRUN_METRICS_FILE";
const PING_URL_ENV: &str = "LOCKRUN_PING_URL";
const PING_FILE_ENV: &str = "LOCKRUN_PING_FILE";

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OnLost {
    /// Stop the command (SIGTERM, then SIGKILL after --kill-after) and exit 76.
    Terminate,
    /// Log a warning, let the command finish, and exit with its code.
    Continue,
}

/// The headings options are grouped under in `--help` and `-h`, in this order (clap orders them
/// by their first option: [`Args`]' fields come in that order).
const LOCK: &str = "Lock";
const JOB: &str = "Job";
const CONNECTION: &str = "Redis connection";
const TLS: &str = "TLS";
const DURABILITY: &str = "Durability";
pub(super) const OUTPUT: &str = "Output";

#[derive(Debug, PartialEq, Parser)]
#[command(
    name = "lockrun",
    version,
    override_usage = "lockrun [OPTIONS] <KEY> [--] <COMMAND> [ARGS]...\n       \
                      lockrun <status|list|release|history|doctor|run> ...  (each with -h)",
    about = "Run a command under a distributed lock held in Redis: flock(1) across hosts."
)]
pub struct Args {
    /// Lease length, renewed every TTL/3
    ///
    /// The lease is renewed while the command runs. 100ms to 24h (500ms, 30s, 5m, 1h, 1d; a bare
    /// number is seconds).
    #[arg(short, long, env = "LOCKRUN_TTL", default_value = DEFAULT_TTL, value_name = "DURATION",
          value_parser = parse_ttl, allow_hyphen_values = true, hide_env_values = true,
          help_heading = LOCK)]
    pub ttl: Duration,

    /// How long to wait for a held lock
    ///
    /// 0 = one attempt, a duration (10m), or `forever`.
    #[arg(short, long, env = "LOCKRUN_WAIT", default_value = "0", value_name = "DURATION",
          value_parser = Wait::parse, allow_hyphen_values = true, hide_env_values = true,
          help_heading = LOCK)]
    pub wait: Wait,

    /// Exit code when the lock is held
    ///
    /// Used when another holder has the lock: 0 to 255 (0 = skip silently, 1 = like flock).
    #[arg(short = 'E', long, env = "LOCKRUN_CONFLICT_EXIT_CODE", default_value_t = crate::exit_codes::DEFAULT_CONFLICT,
          value_name = "N", value_parser = parse_exit_code, allow_negative_numbers = true,
          hide_env_values = true, help_heading = LOCK)]
    pub conflict_exit_code: u8,

    /// Let up to N holders run at once (a semaphore)
    ///
    /// 1 to 100000 holders under KEY.
    #[arg(short, long, env = "LOCKRUN_LIMIT", value_name = "N", value_parser = parse_limit,
          allow_negative_numbers = true, hide_env_values = true, help_heading = LOCK)]
    pub limit: Option<u32>,

    /// Take KEY in shared mode: shared runs go side by side, never with an exclusive one
    ///
    /// Like flock -s: any number of runs with --shared hold KEY at once, while a run without it
    /// holds KEY alone. Waiters take turns in arrival order: a shared run that arrives while
    /// someone waits queues behind it (with --wait; else it is skipped), so a waiting exclusive
    /// run is never starved. A nested lockrun of KEY inside a shared run must use --shared too
    /// (no upgrade: exit 64). One Redis server (or Sentinel group, or Cluster); not with
    /// --limit or --every.
    #[arg(long, env = "LOCKRUN_SHARED", value_parser = parse_switch, hide_env_values = true,
          help_heading = LOCK, hide_short_help = true)]
    pub shared: bool,

    /// The job's period: keep the lock for the tick
    ///
    /// How often cron (a timer, a CronJob) starts the job on every host, 2s to 366d. The lock is
    /// then kept for the tick, until 9/10 of the period (at least 1s less) after acquiring, so
    /// hosts that fire a few seconds apart skip it and the next tick finds it free; given back at
    /// once if the command could not be started (126/127). Recorded in the history and the
    /// metrics file. Not with --wait, --limit or --shared.
    ///
    /// Alerts judge each job by its period. With a --wait other than 0, --limit or --shared
    /// (each would let a tick run more than once), exit 64.
    #[arg(long, env = "LOCKRUN_EVERY", value_name = "DURATION", value_parser = parse_every,
          allow_hyphen_values = true, hide_env_values = true, help_heading = LOCK)]
    pub every: Option<Duration>,

    /// With --every: stay ready to run this tick if the host that took it cannot finish it
    ///
    /// The first hosts that find the tick taken (--standbys, 2) do not skip at once: they stand
    /// by for the rest of the tick (until the hold of --every ends), and exit as skipped (-E)
    /// once the run completes there; the hosts after them skip at once. If that run cannot
    /// complete (its host gone or cut off until its lease expires, lockrun stopped, the job
    /// killed by a signal, the command not startable), one standby takes the lock and runs the
    /// job in the same tick. A job that exits by itself, whatever its exit code, completes the
    /// tick. Use it on every host of the job; one Redis server (or Sentinel group, or Cluster);
    /// not with --limit.
    #[arg(long, env = "LOCKRUN_STANDBY", value_parser = parse_switch, hide_env_values = true,
          help_heading = LOCK, hide_short_help = true)]
    pub standby: bool,

    /// With --standby: how many hosts stand by for a tick [default: 2]
    ///
    /// A tick then survives the loss of the host that took it and of N - 1 standbys. A standby
    /// that dies is replaced by the next host that fires for the tick, if one does. 1 to 100.
    #[arg(long, env = "LOCKRUN_STANDBYS", value_name = "N", value_parser = parse_standbys,
          allow_negative_numbers = true, hide_env_values = true, help_heading = LOCK,
          hide_short_help = true)]
    pub standbys: Option<u32>,

    /// With --every: wait a random time up to DURATION before trying, so that the hosts take
    /// turns running the ticks
    ///
    /// Without it the host whose cron fires first (the fastest clock) runs nearly every tick.
    /// Each run waits a random time from 0 to DURATION (evenly spread: DURATION/2 on average)
    /// before its first attempt; the tick is still run once. At most half of the hold of
    /// --every (27s for --every 1m), so that the last host still finds the tick taken.
    #[arg(long, env = "LOCKRUN_SPREAD", value_name = "DURATION", value_parser = duration::parse,
          hide_env_values = true, help_heading = LOCK, hide_short_help = true)]
    pub spread: Option<Duration>,

    /// Keep the lock at least this long after acquiring, even if the command finishes sooner
    /// (at most 30d); the low-level knob behind --every, which it overrides (it must then be
    /// shorter than the period)
    ///
    /// When the command ends sooner, the key keeps the remaining time as its TTL instead of
    /// being deleted. A command that could not be started (126/127) gives the key back at once
    /// whatever the hold. At or beyond the --every period, exit 64.
    #[arg(long, env = "LOCKRUN_MIN_HOLD", value_name = "DURATION",
          value_parser = parse_min_hold, allow_hyphen_values = true, hide_env_values = true,
          help_heading = LOCK, hide_short_help = true)]
    pub min_hold: Option<Duration>,

    /// Keep about the last N runs of KEY for `lockrun history` (a Redis stream beside the lock,
    /// written by the scripts lockrun runs anyway; gone 39 to 40 days after the key's last run);
    /// 0 to 10000, 0: record nothing
    #[arg(long, env = "LOCKRUN_HISTORY", default_value_t = DEFAULT_HISTORY, value_name = "N",
          value_parser = parse_history, allow_negative_numbers = true, hide_env_values = true,
          help_heading = LOCK, hide_short_help = true)]
    pub history: u32,

    /// Stop the command after this long (exit 124)
    ///
    /// Counted from the command's start: a --wait is not part of it. When it runs out, the job's
    /// process group gets SIGTERM, and SIGKILL after --kill-after; the lock is released once
    /// every process of the job is gone, and the run is recorded as timeout. More than 0 (10m,
    /// 2h); none by default.
    #[arg(long, env = "LOCKRUN_TIME_LIMIT", value_name = "DURATION",
          value_parser = parse_time_limit, allow_hyphen_values = true, hide_env_values = true,
          help_heading = JOB, hide_short_help = true)]
    pub time_limit: Option<Duration>,

    /// Grace between SIGTERM and SIGKILL
    ///
    /// Used whenever lockrun has to stop the command; at most TTL/3 when the lock is being lost.
    #[arg(long, env = "LOCKRUN_KILL_AFTER", default_value = DEFAULT_KILL_AFTER, value_name = "DURATION",
          value_parser = duration::parse, allow_hyphen_values = true, hide_env_values = true,
          help_heading = JOB)]
    pub kill_after: Duration,

    /// What to do with the command when the lock is lost
    #[arg(long, env = "LOCKRUN_ON_LOST", value_enum, default_value_t = OnLost::Terminate, value_name = "ACTION",
          hide_env_values = true, help_heading = JOB, hide_short_help = true)]
    pub on_lost: OnLost,

    /// Signal only the direct child, not its process group
    ///
    /// The command then runs in lockrun's own process group.
    #[arg(long, env = "LOCKRUN_NO_GROUP", value_parser = parse_switch,
          hide_env_values = true, help_heading = JOB, hide_short_help = true)]
    pub no_group: bool,

    /// Adopt and reap orphaned descendants (automatic when lockrun is PID 1)
    ///
    /// They are part of the job: the lock is held until they are gone (SIGTERM once the command
    /// exits, SIGKILL after --kill-after).
    #[arg(long, env = "LOCKRUN_SUBREAPER", value_parser = parse_switch,
          hide_env_values = true, help_heading = JOB, hide_short_help = true)]
    pub subreaper: bool,

    /// Write how the run ended to PATH, for Prometheus
    ///
    /// Written when lockrun ends, in Prometheus text format, for node_exporter's textfile collector
    /// (replaced atomically; a failure to write is a warning). A relative PATH is from lockrun's
    /// working directory. A directory that does not exist is not a usage error: the write fails
    /// at the end with a warning, and the exit code stays the run's. LOCKRUN_METRICS_FILE is
    /// not passed on to the command.
    #[arg(long, env = METRICS_FILE_ENV, value_name = "PATH", hide_env_values = true,
          value_parser = clap::value_parser!(std::path::PathBuf), help_heading = JOB)]
    pub metrics_file: Option<std::path::PathBuf>,

    /// Report the job's start and end to a health-check URL (healthchecks.io's convention)
    ///
    /// URL/start when this host takes the lock and starts the job; when it ends, URL itself on
    /// exit 0, URL/<code> on a failure (URL/fail for a lost lock or a stop after which the job
    /// exited 0). Both carry the run's id (?rid=<uuid>), which pairs a start with its end.
    /// Hosts that skip, and runs that end before taking the lock, send nothing. The end ping is
    /// sent after the release; lockrun waits for it at most 5s (retrying after connection
    /// errors and 5xx) and says in one warning if it was not delivered: the exit code stays the
    /// run's. The URL is a secret: lines show only its scheme and host; prefer LOCKRUN_PING_URL
    /// or --ping-file to the option (a command line is visible in ps). LOCKRUN_PING_URL is not
    /// passed on to the command. Written http://HOST/… or https://HOST/…; a URL whose host
    /// cannot be right (none, a UUID, a top-level domain with digits: a path glued to the host)
    /// is exit 64.
    #[arg(long, env = PING_URL_ENV, value_name = "URL", hide_env_values = true,
          value_parser = clap::builder::NonEmptyStringValueParser::new(), help_heading = JOB,
          hide_short_help = true)]
    pub ping: Option<String>,

    /// Read the --ping URL from FILE
    ///
    /// Keeps the URL out of the crontab and ps where no variable can be set (busybox crond passes
    /// none of a crontab's variables on). One line; surrounding whitespace is dropped. Not with
    /// --ping (exit 64); an unreadable or empty file, a FIFO nothing writes to and a second line
    /// are exit 64. LOCKRUN_PING_FILE is not passed on to the command.
    #[arg(long, env = PING_FILE_ENV, value_name = "FILE", hide_env_values = true,
          value_parser = clap::value_parser!(std::path::PathBuf), help_heading = JOB,
          hide_short_help = true)]
    pub ping_file: Option<std::path::PathBuf>,

    #[command(flatten)]
    pub conn: Connection,

    /// Count the lock only once N replicas have it
    ///
    /// The lock counts as taken, and each renewal as confirmed, only once N replicas have it
    /// (Redis WAIT), so a failover to a replica cannot lose it; 0 to 100 (0: don't wait).
    ///
    /// WAIT N waits within two thirds of the request timeout (in a Cluster, a quarter of it).
    /// Fewer replicas: the key is given back and the run is unavailable (exit 69; retried while
    /// --wait lasts), or the renewal is unconfirmed (if that lasts, the command is stopped before
    /// its lease can end). Needs +wait in a Redis ACL.
    #[arg(long, env = "LOCKRUN_ACKS", default_value_t = 0, value_name = "N",
          value_parser = parse_acks, allow_negative_numbers = true, hide_env_values = true,
          help_heading = DURABILITY)]
    pub acks: u32,

    /// Count the lock only once it is on disk (WAITAOF)
    ///
    /// The lock and each renewal count only once the server has fsynced them to its append-only
    /// file (and N replicas theirs, with --acks): Redis WAITAOF, Redis 7.2+ / Valkey 8+.
    ///
    /// The server needs appendonly yes; without it, or on an older server, exit 69 saying which is
    /// missing. Needs +waitaof in a Redis ACL.
    #[arg(long, env = "LOCKRUN_FSYNC", value_parser = parse_switch, hide_env_values = true,
          help_heading = DURABILITY)]
    pub fsync: bool,

    #[command(flatten)]
    pub logs: Logs,

    /// Lock name: the Redis key, exactly as given
    ///
    /// Names starting with 'lockrun:' are reserved.
    #[arg(value_name = "KEY", value_parser = parse_key)]
    pub key: String,

    /// The command to run: looked up on PATH, never through a shell
    ///
    /// Executed directly; write `-- sh -c '...'` for a shell.
    #[arg(value_name = "COMMAND", required = true, num_args = 1.., trailing_var_arg = true,
          allow_hyphen_values = true, value_parser = clap::value_parser!(OsString))]
    pub command: Vec<OsString>,
}

/// How to reach and authenticate to Redis: shared by the run form and every other command.
#[derive(Debug, PartialEq, clap::Args)]
pub struct Connection {
    /// Redis URL (default redis://127.0.0.1:6379)
    ///
    /// redis://[user:password@]host[:port][/db], rediss://… (TLS; system trust store or the PEM
    /// bundle in SSL_CERT_FILE), valkey:// and valkeys:// (the same as redis:// and rediss://),
    /// unix:///path/redis.sock[?db=N&user=U&pass=P] (also redis+unix://, valkey+unix://),
    /// redis+sentinel://[user:password@]h1:p1[,h2:p2…]/<service>[/<db>] (Sentinel),
    /// redis+cluster://[user:password@]h1:p1[,h2:p2…] (Cluster; rediss+… for TLS).
    /// Passwords are never printed. Given 3 or more times (or as URL,URL,URL): Redlock over
    /// that many independent masters, the lock held on a majority.
    ///
    /// Sentinel: the primary the sentinels name (default port 26379); Cluster: seed nodes (default
    /// port 6379). In messages the URL's password and its query's pass=, password= and user=
    /// values (every query value but db and protocol) show as ***.
    /// Percent-encode @ (%40), / (%2F), ?, # and % in a password and : in a user name: a URL that
    /// is ambiguous without it is refused (exit 64) and not echoed. A list is split only where a
    /// comma is followed by scheme://, so a Sentinel or Cluster host list stays whole. Exactly 2
    /// URLs, or one server twice (however spelled), is exit 64.
    #[arg(
        short,
        long,
        env = "LOCKRUN_REDIS_URL",
        default_value = DEFAULT_URL,
        hide_default_value = true,
        value_name = "URL",
        hide_env_values = true,
        action = clap::ArgAction::Append,
        help_heading = CONNECTION
    )]
    pub redis: Vec<String>,

    /// Whether the URLs came from `LOCKRUN_REDIS_URL` rather than `-r`: a URL refused later,
    /// once parsed, names the variable, as a value clap refuses does. Filled from clap's record
    /// of where the value came from, once the line is parsed.
    #[arg(skip)]
    pub redis_from_env: bool,

    /// Bound on each Redis request, below TTL/3. With several masters, per node (default TTL/10
    /// within 10ms..1s); with one, the request timeout (default TTL/3 within 50ms..3s)
    ///
    /// Above 0 and below TTL/3, or exit 64.
    #[arg(long, env = "LOCKRUN_NODE_TIMEOUT", value_name = "DURATION",
          value_parser = duration::parse, allow_hyphen_values = true, hide_env_values = true,
          help_heading = CONNECTION, hide_short_help = true)]
    pub node_timeout: Option<Duration>,

    /// ACL user to authenticate as
    ///
    /// Overrides a user in the URL. Needs a password (from the URL, LOCKRUN_REDIS_PASSWORD or
    /// --redis-password-file); without one, exit 64.
    #[arg(long, env = "LOCKRUN_REDIS_USER", value_name = "NAME", hide_env_values = true,
          value_parser = clap::builder::NonEmptyStringValueParser::new(),
          help_heading = CONNECTION)]
    pub redis_user: Option<String>,

    /// Read the Redis password from FILE
    ///
    /// One trailing newline stripped; keeps it out of the crontab and `ps`; overrides a password
    /// in the URL. Or set LOCKRUN_REDIS_PASSWORD (not both).
    ///
    /// An unreadable or empty file is exit 64, and so is LOCKRUN_REDIS_PASSWORD as well.
    #[arg(long, env = "LOCKRUN_REDIS_PASSWORD_FILE", value_name = "FILE", hide_env_values = true,
          value_parser = clap::value_parser!(std::path::PathBuf), help_heading = CONNECTION)]
    pub redis_password_file: Option<std::path::PathBuf>,

    /// Trust only the CA certificates in FILE (PEM)
    ///
    /// For rediss://, instead of the system store: a private CA, without changing the machine's
    /// trust store. rediss:// here and in the options below includes valkeys://,
    /// rediss+sentinel:// and rediss+cluster://.
    #[arg(long, env = "LOCKRUN_TLS_CA", value_name = "FILE", hide_env_values = true,
          help_heading = TLS)]
    pub tls_ca: Option<std::path::PathBuf>,

    /// Present this client certificate (PEM)
    ///
    /// For rediss:// servers with tls-auth-clients. With --tls-key: both or neither.
    #[arg(long, env = "LOCKRUN_TLS_CERT", value_name = "FILE", hide_env_values = true,
          help_heading = TLS)]
    pub tls_cert: Option<std::path::PathBuf>,

    /// The client certificate's private key (PEM)
    ///
    /// With --tls-cert: both or neither.
    #[arg(long, env = "LOCKRUN_TLS_KEY", value_name = "FILE", hide_env_values = true,
          help_heading = TLS)]
    pub tls_key: Option<std::path::PathBuf>,

    /// TLS without verifying the server's certificate: only for testing, it allows anyone on the
    /// path to impersonate the server (logged as a warning on every run)
    ///
    /// Without a TLS URL, exit 64.
    #[arg(long, env = "LOCKRUN_TLS_INSECURE", value_parser = parse_switch, hide_env_values = true,
          help_heading = TLS, hide_short_help = true)]
    pub tls_insecure: bool,

    /// redis+sentinel://: read the sentinels' own password from FILE (the URL's password is the
    /// data nodes'). Or set LOCKRUN_SENTINEL_PASSWORD (not both)
    ///
    /// The sentinels' requirepass (sentinel.conf), read like --redis-password-file.
    #[arg(long, env = "LOCKRUN_SENTINEL_PASSWORD_FILE", value_name = "FILE", hide_env_values = true,
          value_parser = clap::value_parser!(std::path::PathBuf), help_heading = CONNECTION,
          hide_short_help = true)]
    pub sentinel_password_file: Option<std::path::PathBuf>,
}

/// How lockrun's own lines on stderr look: shared by the run form and every other command.
#[derive(Debug, PartialEq, clap::Args)]
pub struct Logs {
    /// Print errors only
    ///
    /// A conflict is not an error: -q -E 0 is silent when the lock is held. A --standby host
    /// that takes a tick over still says so (one WARN line), so cron mails it. LOCKRUN_QUIET
    /// yields to -v.
    #[arg(short, long, env = "LOCKRUN_QUIET",
          value_parser = parse_switch, hide_env_values = true, help_heading = OUTPUT)]
    pub quiet: bool,

    /// Whether `-q` was on the command line itself (a run's: before its key), not only in
    /// `LOCKRUN_QUIET`: with `-v` as well, the two flags conflict, while the variable yields to
    /// the flag. Filled from clap's record of where the value came from, once the line is parsed.
    #[arg(skip)]
    pub quiet_given: bool,

    /// More detail (-vv for trace)
    ///
    /// Without -q or -v, LOCKRUN_LOG sets the level: error, warn, info (default), debug, trace,
    /// or a tracing filter such as lockrun=debug.
    #[arg(short, long, action = clap::ArgAction::Count, help_heading = OUTPUT)]
    pub verbose: u8,

    /// Log line format: text or json
    ///
    /// For lockrun's own lines on stderr. json: one object per line (timestamp, level, message,
    /// fields), for log pipelines.
    #[arg(long, env = "LOCKRUN_LOG_FORMAT", value_enum, default_value_t = Format::Text, value_name = "FORMAT",
          hide_env_values = true, hide_possible_values = true, help_heading = OUTPUT)]
    pub log_format: Format,
}

fn parse_ttl(s: &str) -> Result<Duration, String> {
    let ttl = duration::parse(s)?;
    if ttl < MIN_TTL || ttl > MAX_TTL {
        return Err(format!(
            "TTL must be between {} and {}",
            duration::Human(MIN_TTL),
            duration::Human(MAX_TTL)
        ));
    }
    Ok(ttl)
}

fn parse_every(s: &str) -> Result<Duration, String> {
    let d = duration::parse(s)?;
    if d < MIN_EVERY || d > MAX_EVERY {
        return Err("--every must be between 2s and 366d".into());
    }
    Ok(d)
}

fn parse_time_limit(s: &str) -> Result<Duration, String> {
    let d = duration::parse(s)?;
    if d.is_zero() {
        return Err("--time-limit must be more than 0 (leave it out for no limit)".into());
    }
    Ok(d)
}

fn parse_min_hold(s: &str) -> Result<Duration, String> {
    let d = duration::parse(s)?;
    if d > Duration::from_secs(30 * 86_400) {
        return Err("--min-hold must be at most 30d".into());
    }
    Ok(d)
}

/// A switch's environment variable: the usual spellings, and empty means not set (a Kubernetes
/// manifest often has `value: ""`).
fn parse_switch(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "y" | "on" => Ok(true),
        "" | "0" | "false" | "no" | "n" | "off" => Ok(false),
        _ => Err("not a switch: use 1/0, yes/no, on/off or true/false (empty = off)".into()),
    }
}

/// A whole number within `lo..=hi`; out-of-range and negative values say the range (clap would
/// otherwise call `-1` an unexpected argument).
fn parse_bounded(s: &str, lo: i64, hi: i64, what: &str) -> Result<i64, String> {
    match s.trim().parse::<i64>() {
        Ok(n) if (lo..=hi).contains(&n) => Ok(n),
        Ok(n) => Err(format!("{n} is out of range: {what} is {lo} to {hi}")),
        Err(_) => Err(format!("not a whole number: {what} is {lo} to {hi}")),
    }
}

fn parse_acks(s: &str) -> Result<u32, String> {
    parse_bounded(s, 0, 100, "--acks").map(|n| n as u32)
}

fn parse_history(s: &str) -> Result<u32, String> {
    parse_bounded(s, 0, MAX_HISTORY.into(), "--history").map(|n| n as u32)
}

fn parse_exit_code(s: &str) -> Result<u8, String> {
    parse_bounded(s, 0, 255, "an exit code").map(|n| n as u8)
}

fn parse_limit(s: &str) -> Result<u32, String> {
    parse_bounded(s, 1, 100_000, "--limit").map(|n| n as u32)
}

fn parse_standbys(s: &str) -> Result<u32, String> {
    parse_bounded(s, 1, 100, "--standbys").map(|n| n as u32)
}

/// The longest key: the command gets it as `LOCKRUN_KEY=<key>`, and Linux takes no
/// environment entry longer than 128 KiB with its NUL (MAX_ARG_STRLEN).
const MAX_KEY: usize = 128 * 1024 - "LOCKRUN_KEY=".len() - 1;

pub(super) fn parse_key(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        return Err("the lock key must not be empty".into());
    }
    if s.len() > MAX_KEY {
        return Err(format!(
            "the lock key is {} bytes: at most {MAX_KEY}, since the command gets it as \
             LOCKRUN_KEY and Linux takes no longer environment entry",
            s.len()
        ));
    }
    // lockrun's own keys (fencing counter, waiter queue) live under this prefix; a lock there
    // could be, or corrupt, another lock's bookkeeping.
    if s.starts_with(RESERVED_PREFIX) {
        return Err(format!(
            "lock names starting with '{RESERVED_PREFIX}' are reserved for lockrun's own keys"
        ));
    }
    Ok(s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// `--standbys`' help names the default the plan uses without it.
    #[test]
    fn the_standbys_help_names_the_default() {
        let command = Args::command();
        let arg = command
            .get_arguments()
            .find(|a| a.get_id() == "standbys")
            .unwrap();
        let help = arg.get_help().unwrap().to_string();
        let default = format!("[default: {}]", crate::lock::DEFAULT_STANDBYS);
        assert!(help.contains(&default), "{help}");
    }

    /// The variables the command does not get are those whose options' help says so.
    #[test]
    fn the_withheld_variables_are_those_the_help_says() {
        for arg in Args::command().get_arguments() {
            let Some(env) = arg.get_env().and_then(|e| e.to_str()) else {
                continue;
            };
            let help = arg
                .get_long_help()
                .map(|h| h.to_string())
                .unwrap_or_default();
            let says = help
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .contains(&format!("{env} is not passed on to the command"));
            assert_eq!(says, WITHHELD_FROM_JOB.contains(&env), "{env}: {help}");
        }
    }
}
