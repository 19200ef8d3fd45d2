//! The command line: `lockrun [OPTIONS] <KEY> [--] <COMMAND> [ARGS]...`, and the operators'
//! commands ([`verbs`]), described once ([`command`]) and read by clap alone.
//!
//! Every option also reads a `LOCKRUN_*` environment variable, so a Kubernetes manifest or a
//! systemd unit can configure lockrun without flags. Flags win over the environment.
//!
//! Help comes in two tiers: `-h` fits a screen (each option's first paragraph, one line, the
//! common options only), `--help` has everything (the later paragraphs, the rare options, the
//! variables, every exit code).

use crate::duration::{self, Wait};
use crate::exit_codes::ExitCode;
use crate::lock::keys::RESERVED_PREFIX;
use crate::logging::Format;
use clap::{CommandFactory, FromArgMatches, Parser};
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
const OUTPUT: &str = "Output";

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

    /// The job's period: keep the lock for the tick
    ///
    /// How often cron (a timer, a CronJob) starts the job on every host, 2s to 366d. The lock is
    /// then kept for the tick, until 9/10 of the period (at least 1s less) after acquiring, so
    /// hosts that fire a few seconds apart skip it and the next tick finds it free; given back at
    /// once if the command could not be started (126/127). Recorded in the history and the
    /// metrics file. Not with --wait.
    ///
    /// Alerts judge each job by its period. With a --wait other than 0, exit 64.
    #[arg(long, env = "LOCKRUN_EVERY", value_name = "DURATION", value_parser = parse_every,
          allow_hyphen_values = true, hide_env_values = true, help_heading = LOCK)]
    pub every: Option<Duration>,

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
    /// at the end with a warning, and the exit code stays the run's.
    #[arg(long, env = "LOCKRUN_METRICS_FILE", value_name = "PATH", hide_env_values = true,
          value_parser = clap::value_parser!(std::path::PathBuf), help_heading = JOB)]
    pub metrics_file: Option<std::path::PathBuf>,

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
    /// A conflict is not an error: -q -E 0 is silent when the lock is held. LOCKRUN_QUIET yields
    /// to -v.
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

/// The longest key: the command gets it as `LOCKRUN_KEY=<key>`, and Linux takes no
/// environment entry longer than 128 KiB with its NUL (MAX_ARG_STRLEN).
const MAX_KEY: usize = 128 * 1024 - "LOCKRUN_KEY=".len() - 1;

fn parse_key(s: &str) -> Result<String, String> {
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

pub mod verbs;

/// What the command line asks for: a run (the classic form, or `lockrun run …`) or one of the
/// operators' commands.
#[derive(Debug)]
pub enum Invocation {
    Run(Box<Args>),
    Verb(Box<verbs::Verb>),
}

/// The command line, described once: the run form ([`Args`]) with the operators' commands
/// ([`verbs::Verb`]) and `run`, the explicit run form, as its subcommands. Parsing uses it, and
/// so do `--help`, the man pages, the completions and docs/guide.md's options table
/// (`examples/gen-docs.rs`).
///
/// A subcommand is taken only as the first word (`args_conflicts_with_subcommands`), so a
/// run's KEY and COMMAND can be any word; [`parse_from`] brings a command word that follows
/// options to the front. No `help` subcommand: `lockrun help …` runs a lock named "help".
pub fn command() -> clap::Command {
    use clap::{Args as _, Subcommand as _};
    let run = Args::augment_args(clap::Command::new("run"))
        .about("Run COMMAND under KEY, for a lock named like one of these commands")
        .override_usage("lockrun run [OPTIONS] <KEY> [--] <COMMAND> [ARGS]...")
        // `lockrun run --version` says what `lockrun --version` says.
        .display_name("lockrun");
    verbs::Verb::augment_subcommands(run_form(Args::command()))
        .subcommand(run_form(run))
        .mut_subcommands(|c| match c.get_name() {
            "run" => c,
            _ => verbs::for_a_verb(c),
        })
        .args_conflicts_with_subcommands(true)
        .disable_help_subcommand(true)
        // clap wraps at the terminal's width: never wider than this, whatever the terminal.
        .max_term_width(HELP_WIDTH)
}

/// The widest help line, and where [`hang`] wraps.
const HELP_WIDTH: usize = 80;

/// What the run form's help says besides its options: the help and version flags under the
/// Output heading (`-V` in `--help` only), an example, the exit codes and the variables.
fn run_form(cmd: clap::Command) -> clap::Command {
    use clap::{Arg, ArgAction};
    cmd.disable_help_flag(true)
        .disable_version_flag(true)
        .arg(help_flag())
        .arg(
            Arg::new("version")
                .short('V')
                .long("version")
                .action(ArgAction::Version)
                .help("Print version")
                .help_heading(OUTPUT)
                .hide_short_help(true),
        )
        .after_help(format!(
            "Example ({}):\n  {}\n\n\
             Exit codes: {}; the others, and the variables, in --help.",
            EXAMPLE.0,
            EXAMPLE.1,
            briefly(&[
                ExitCode::Command(0),
                ExitCode::Conflict(0),
                ExitCode::LockLost,
                ExitCode::Usage,
                ExitCode::Unavailable,
            ])
        ))
        .after_long_help(after_long_help())
}

/// clap's help flag, under the Output heading rather than alone under "Options" (clap's own
/// is off for every command: the setting is global).
fn help_flag() -> clap::Arg {
    clap::Arg::new("help")
        .short('h')
        .long("help")
        .action(clap::ArgAction::Help)
        .help("Print help (see more with '--help')")
        .long_help("Print help (see a summary with '-h')")
        .help_heading(OUTPUT)
}

/// The one example `-h` and `--help` (and the man page) end with: the commonest use.
pub const EXAMPLE: (&str, &str) = (
    "crontab, the same line on every host; one runs the job each minute",
    "* * * * * lockrun -q -E 0 --every 1m -r redis://db1 report -- /opt/report.sh",
);

/// The codes in a few words each, comma-separated (`76 lock lost, 64 usage error`).
fn briefly(codes: &[ExitCode]) -> String {
    let words: Vec<String> = codes.iter().map(|c| c.summary().briefly()).collect();
    words.join(", ")
}

/// How every option's variable works, said once for all of them (each option names its own).
pub const ENV_RULES: &str = "Every option also reads a LOCKRUN_* variable of its own: a \
flag wins over the variable, an empty variable counts as unset, switches take 1/0, yes/no, \
on/off, true/false.";

/// Variables read without an option of their own: (variable, default, what it does).
pub const ENV_ONLY: [(&str, &str, &str); 3] = [
    (
        "LOCKRUN_REDIS_PASSWORD",
        "none",
        "The Redis password itself (empty = unset); overrides a password in the URL. Not with \
         --redis-password-file (exit 64)",
    ),
    (
        "LOCKRUN_SENTINEL_PASSWORD",
        "none",
        "The sentinels' password itself. Not with --sentinel-password-file (exit 64)",
    ),
    (
        "LOCKRUN_LOG",
        "info",
        "The log level or filter when neither -q nor -v is given: error, warn, info, debug, \
         trace, or target=level filters (lockrun=debug). Any other word is a usage error; errors \
         are always printed whatever the filter says (off is refused: use -q)",
    ),
];

/// What the command finds in its environment: (variable, what it holds).
pub const COMMAND_ENV: [(&str, &str); 4] = [
    ("LOCKRUN_KEY", "The lock key"),
    (
        "LOCKRUN_TOKEN",
        "This holder's secret token; a lockrun of the same key nested inside uses it \
         (reentrancy)",
    ),
    (
        "LOCKRUN_FENCE",
        "A fencing number, strictly increasing per key: a resource can refuse writes that carry \
         a smaller number than one it has seen",
    ),
    (
        "LOCKRUN_HELD",
        "Every enclosing holder's <SHA-1 of its key>:<token>:<fence>, comma-separated, this one's \
         last: a lockrun nested anywhere inside runs reentrantly under a lock an ancestor holds \
         instead of waiting for it. Secret, like the token",
    ),
];

/// `--help`'s end: the example, every exit code, the variables lockrun reads beyond the options'
/// own, and what the command gets.
fn after_long_help() -> String {
    let codes = ExitCode::DOCUMENTED.map(ExitCode::summary);
    let code_width = codes.iter().map(|s| s.code.len()).max().unwrap_or(0);
    let mut text = format!("Example ({}):\n  {}\n\nExit codes:", EXAMPLE.0, EXAMPLE.1);
    for s in codes {
        text.push('\n');
        text.push_str(&hang(&format!("  {}", s.code), code_width + 4, s.meaning));
    }
    text.push_str("\n\nEnvironment:\n");
    text.push_str(&hang(
        "",
        2,
        &format!("{ENV_RULES} Read without an option of their own:"),
    ));
    for (var, _, what) in ENV_ONLY {
        text.push('\n');
        text.push_str(&hang(&format!("  {var}"), 10, what));
    }
    text.push_str("\n\nWhat the command gets in its environment:");
    for (var, what) in COMMAND_ENV {
        text.push('\n');
        text.push_str(&hang(&format!("  {var}"), 10, what));
    }
    text
}

/// `label`, then `text` from column `indent` on, wrapped at [`HELP_WIDTH`] with every line
/// indented as far (the label alone on its line when it reaches the column), as clap lays out
/// an option's help.
fn hang(label: &str, indent: usize, text: &str) -> String {
    let mut out = label.to_string();
    let mut col = label.chars().count();
    let mut fresh = true;
    if col >= indent {
        out.push('\n');
        col = 0;
    }
    for word in text.split_whitespace() {
        let width = word.chars().count();
        if !fresh && col + 1 + width > HELP_WIDTH {
            out.push('\n');
            col = 0;
            fresh = true;
        }
        if fresh {
            out.push_str(&" ".repeat(indent - col));
            col = indent;
            fresh = false;
        } else {
            out.push(' ');
            col += 1;
        }
        out.push_str(word);
        col += width;
    }
    out
}

/// Parses the process arguments. Help and version print to stdout; errors print one line to
/// stderr. Either way the caller gets the exit code to use.
pub fn parse() -> Result<Invocation, ExitCode> {
    parse_from(std::env::args_os())
}

/// [`parse`] of given words (the program's name first). The run form stays exactly as it was:
/// only when the first word that is not an option (or an option's value) names a subcommand of
/// [`command`] is it a command; it moves to the front, so the connection and log options may
/// come before it as well as after (`lockrun -r URL status KEY`). `run` is the run form again,
/// for a lock named like a command.
pub fn parse_from<I, T>(args: I) -> Result<Invocation, ExitCode>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let argv: Vec<OsString> = args.into_iter().map(Into::into).collect();
    match plain_run(&argv) {
        Some(run) => Ok(run),
        None => parse_whole(argv),
    }
}

/// [`parse_from`] by the whole [`command`].
fn parse_whole(mut argv: Vec<OsString>) -> Result<Invocation, ExitCode> {
    let mut cmd = without_empty_env(command());
    let word = first_positional(&cmd, &argv).filter(|&i| cmd.find_subcommand(&argv[i]).is_some());
    if let Some(at) = word {
        if let Some(why) = run_line_with_a_verb(&cmd, &argv, at) {
            // The line is a run: its log format is read as one.
            let mut run = argv.clone();
            run.remove(at);
            crate::logging::print_early_error(&why, json_wanted(&run));
            return Err(ExitCode::Usage);
        }
        let word = argv.remove(at);
        argv.insert(1, word);
        // The line is the command's alone: the run form's variables at the top (LOCKRUN_TTL,
        // LOCKRUN_EVERY…) are not its, and clap would still read and check them (a value a run
        // refuses made `lockrun status KEY` exit 64). The command reads its own.
        cmd = cmd.mut_args(|a| a.env(None));
    }
    let parsed = cmd
        .try_get_matches_from_mut(argv.clone())
        .and_then(|m| match m.subcommand() {
            None => run_from(&m),
            Some(("run", sub)) => run_from(sub),
            Some((_, sub)) => verbs::Verb::from_arg_matches(&m).map(|mut verb| {
                let common = verb.common_mut();
                common.logs.quiet_given = quiet_given(sub);
                common.conn.redis_from_env = from_env(sub, "redis");
                Invocation::Verb(Box::new(verb))
            }),
        });
    parsed.map_err(|e| said(&cmd, e, &argv))
}

/// The common line, a run that parses, read by the run form's own part of [`command`] alone: the
/// same definition without its subcommands (each a copy of the connection and log options) and
/// their help texts, which a run does not need and every cron tick would pay to build. `None` for
/// everything else (an operators' command or `run` as the first word, help, version, any error),
/// which [`parse_whole`] reads with the whole command: a line with no command word parses to the
/// same [`Args`] either way (the test `a_plain_run_is_read_as_the_whole_command_reads_it`).
fn plain_run(argv: &[OsString]) -> Option<Invocation> {
    use clap::Subcommand as _;
    let mut cmd = without_empty_env(Args::command());
    let word = first_positional(&cmd, argv).map(|i| argv[i].to_string_lossy());
    if word.is_some_and(|w| w == "run" || verbs::Verb::has_subcommand(&w)) {
        return None;
    }
    let m = cmd.try_get_matches_from_mut(argv).ok()?;
    run_from(&m).ok()
}

/// The run form from its matches (the whole line's, or `run`'s).
fn run_from(m: &clap::ArgMatches) -> Result<Invocation, clap::Error> {
    let mut args = Args::from_arg_matches(m)?;
    // Before the key, as it has always been counted: a `-q` between the key and the command
    // yields to `-v` like the variable does.
    args.logs.quiet_given = quiet_given(m) && m.index_of("quiet") < m.index_of("key");
    args.conn.redis_from_env = from_env(m, "redis");
    Ok(Invocation::Run(Box::new(args)))
}

/// Whether option `id`'s value came from its environment variable.
fn from_env(m: &clap::ArgMatches, id: &str) -> bool {
    m.value_source(id) == Some(clap::parser::ValueSource::EnvVariable)
}

/// Whether `-q` came from the command line rather than `LOCKRUN_QUIET` (see [`Logs::quiet_given`]).
fn quiet_given(m: &clap::ArgMatches) -> bool {
    m.value_source("quiet") == Some(clap::parser::ValueSource::CommandLine)
}

/// Whether the line whose word `at` is an operator's command is really a run of a lock named
/// like it: a `--` (only a run has a command after it) or an option only a run takes (`-E`,
/// `--every`). The command would read the run's command as its KEY and exit 0 (`lockrun -q
/// history -- ./rotate.sh`: cron saw success and the job never ran), so it is refused, saying
/// what to write instead. `run` itself takes all of them.
fn run_line_with_a_verb(cmd: &clap::Command, argv: &[OsString], at: usize) -> Option<String> {
    let verb = argv[at].to_string_lossy().into_owned();
    let sub = cmd
        .find_subcommand(&verb)
        .filter(|s| s.get_name() != "run")?;
    let known = |word: &str| {
        let word = word.split('=').next().unwrap_or(word);
        sub.get_arguments().any(|a| {
            word.strip_prefix("--")
                .is_some_and(|l| a.get_long() == Some(l))
                || (word.len() == 2
                    && word.strip_prefix('-').and_then(|c| c.chars().next()) == a.get_short())
        })
    };
    // Help and version are every command's (clap adds a verb's own when it is built).
    let run_only = cmd
        .get_arguments()
        .filter(|a| !is_help_or_version(a))
        .flat_map(|a| {
            let long = a.get_long().map(|l| format!("--{l}"));
            let short = a.get_short().map(|c| format!("-{c}"));
            long.into_iter().chain(short)
        })
        .collect::<Vec<_>>();
    let runs = argv[1..].iter().map(|w| w.to_string_lossy()).any(|w| {
        w == "--" || {
            let name = w.split('=').next().unwrap_or(&w);
            w.starts_with('-') && !known(&w) && run_only.iter().any(|o| o == name)
        }
    });
    runs.then(|| {
        format!(
            "'{verb}' is an operators' command (lockrun {verb} --help), and this line has a \
             command or options for a run: to run a command under a lock named '{verb}', \
             write 'lockrun run {verb} -- COMMAND…'"
        )
    })
}

/// The help and version flags: clap's actions, not options of lockrun's.
fn is_help_or_version(a: &clap::Arg) -> bool {
    use clap::ArgAction::{Help, HelpLong, HelpShort, Version};
    matches!(a.get_action(), Help | HelpShort | HelpLong | Version)
}

/// Where the first word that is neither an option nor an option's value is, up to `--`: the
/// dispatch above, which clap cannot do while a subcommand is only taken first. Which options
/// take a value comes from `cmd`'s own arguments.
fn first_positional(cmd: &clap::Command, argv: &[OsString]) -> Option<usize> {
    let takes_value = |a: &clap::Arg| a.get_action().takes_values();
    let long_takes = |name: &str| {
        cmd.get_arguments()
            .any(|a| a.get_long() == Some(name) && takes_value(a))
    };
    let short_takes = |c: char| {
        cmd.get_arguments()
            .any(|a| a.get_short() == Some(c) && takes_value(a))
    };
    let mut i = 1;
    while i < argv.len() {
        let word = argv[i].to_string_lossy();
        if word == "--" {
            return None;
        } else if let Some(long) = word.strip_prefix("--") {
            if !long.contains('=') && long_takes(long) {
                i += 1;
            }
        } else if let Some(shorts) = word.strip_prefix('-').filter(|s| !s.is_empty()) {
            // A cluster like `-vq`, or `-t5s` / `-t 5s`: the first short option that takes a
            // value ends the cluster, and takes the next word when nothing follows it.
            let chars: Vec<char> = shorts.chars().collect();
            if let Some(at) = chars.iter().position(|&c| short_takes(c)) {
                if at + 1 == chars.len() {
                    i += 1;
                }
            }
        } else {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// An environment variable set to the empty string counts as unset (its default applies):
/// templated manifests and `VAR= lockrun …` produce empty values that mean "nothing here".
fn without_empty_env(mut cmd: clap::Command) -> clap::Command {
    let empty: Vec<clap::Id> = cmd
        .get_arguments()
        .filter(|a| {
            a.get_env()
                .and_then(std::env::var_os)
                .is_some_and(|v| v.is_empty())
        })
        .map(|a| a.get_id().clone())
        .collect();
    for id in empty {
        cmd = cmd.mut_arg(id, |a| a.env(None));
    }
    cmd.mut_subcommands(without_empty_env)
}

/// What a clap error becomes: help and version printed (exit 0), anything else one line on
/// stderr (exit 64).
fn said(cmd: &clap::Command, e: clap::Error, argv: &[OsString]) -> ExitCode {
    if !e.use_stderr() {
        // --help / --version, through `output` so a full stdout is exit 74, not 0.
        let text = match e.kind() {
            clap::error::ErrorKind::DisplayHelp => help_text(cmd, &e, argv),
            _ => e.render().to_string(),
        };
        crate::output::print(&text);
        return ExitCode::Command(0);
    }
    let line = if e.kind() == clap::error::ErrorKind::InvalidUtf8 {
        // clap says "invalid UTF-8 was detected in one or more arguments" without saying
        // where: name the variable if one of ours is it.
        let var = cmd
            .get_arguments()
            .filter_map(|a| a.get_env())
            .find(|v| std::env::var_os(v).is_some_and(|x| x.to_str().is_none()));
        match var {
            Some(v) => format!(
                "the environment variable {} is not valid UTF-8 (see 'lockrun --help')",
                v.to_string_lossy()
            ),
            None => "an argument is not valid UTF-8 (see 'lockrun --help')".to_string(),
        }
    } else {
        let mut line = one_line(&e.to_string());
        if let Some(var) = from_environment(cmd, &e, argv) {
            line = format!("{line}, from the environment variable {var}");
        }
        line.push_str(" (see 'lockrun --help')");
        line.trim_start_matches("error: ").to_string()
    };
    crate::logging::print_early_error(&line, json_wanted(argv));
    ExitCode::Usage
}

/// The help asked for. `--help` is clap's own. `-h`, the short tier, leaves out what would not
/// fit a screen: each option's `[env: …]` (`--help` has them) and the list of commands (the
/// usage names them). clap does not say which tier it rendered: the short one is what the same
/// command (the line's first word, when that is a subcommand) renders short.
fn help_text(cmd: &clap::Command, e: &clap::Error, argv: &[OsString]) -> String {
    let rendered = e.render().to_string();
    let sub = argv.get(1).and_then(|w| w.to_str());
    let short = |mut cmd: clap::Command| {
        cmd.build();
        match sub.and_then(|name| cmd.find_subcommand_mut(name)) {
            Some(sub) => sub.render_help().to_string(),
            None => cmd.render_help().to_string(),
        }
    };
    if short(cmd.clone()) != rendered {
        return rendered;
    }
    let no_env = |c: clap::Command| c.mut_args(|a| a.hide_env(true));
    short(no_env(cmd.clone()).mut_subcommands(|s| no_env(s).hide(true)))
}

/// The environment variable an invalid value came from, when it did not come from the command
/// line: the user must be told where to look.
fn from_environment(cmd: &clap::Command, e: &clap::Error, argv: &[OsString]) -> Option<String> {
    use clap::error::{ContextKind, ContextValue};
    let (Some(ContextValue::String(arg)), Some(ContextValue::String(value))) = (
        e.get(ContextKind::InvalidArg),
        e.get(ContextKind::InvalidValue),
    ) else {
        return None;
    };
    let long = arg.split_whitespace().next()?.trim_start_matches('-');
    // The first option of that name that reads a variable (an operators' command's line has
    // the run form's variables taken off at the top).
    let var = cmd
        .get_arguments()
        .chain(cmd.get_subcommands().flat_map(|c| c.get_arguments()))
        .filter(|a| a.get_long() == Some(long))
        .find_map(|a| a.get_env())?
        .to_str()?
        .to_string();
    let on_command_line = argv.iter().any(|x| {
        let x = x.to_string_lossy();
        x == *value || x.ends_with(&format!("={value}"))
    });
    (std::env::var(&var).ok().as_deref() == Some(value.as_str()) && !on_command_line).then_some(var)
}

/// Whether the user asked for JSON log lines: a usage error is said before the options are
/// known, and a log pipeline that asked for JSON must not get a plain-text line it cannot
/// parse. clap reads the line again, leniently: every value taken as written (another option's
/// refused value must not hide the wish), no variable but `--log-format`'s (nor another's bad
/// value), a word it does not know left out, and what remains read as far as it goes.
fn json_wanted(argv: &[OsString]) -> bool {
    fn lenient(cmd: clap::Command) -> clap::Command {
        cmd.mut_args(|a| {
            let a = if a.get_id() == "log_format" {
                a
            } else {
                a.env(None)
            };
            if a.get_action().takes_values() {
                a.value_parser(clap::builder::OsStringValueParser::new())
            } else {
                a
            }
        })
        .mut_subcommands(lenient)
    }
    let mut cmd = lenient(without_empty_env(command()));
    let mut words = argv.to_vec();
    // Each round leaves out one unknown word; a line has only so many.
    for _ in 0..argv.len() {
        let Err(e) = cmd.try_get_matches_from_mut(&words) else {
            break;
        };
        let unknown = match e.get(clap::error::ContextKind::InvalidArg) {
            Some(clap::error::ContextValue::String(arg))
                if e.kind() == clap::error::ErrorKind::UnknownArgument =>
            {
                words.iter().position(|w| w == arg.as_str())
            }
            _ => None,
        };
        let Some(at) = unknown else {
            break;
        };
        words.remove(at);
    }
    let Ok(matches) = cmd.ignore_errors(true).try_get_matches_from(words) else {
        return false;
    };
    let mut m = &matches;
    while let Some((_, sub)) = m.subcommand() {
        m = sub;
    }
    m.get_one::<OsString>("log_format")
        .is_some_and(|v| v.to_string_lossy().trim().eq_ignore_ascii_case("json"))
}

/// clap's errors span several lines (problem, usage, hint); cron mail and log pipelines want
/// one. Keep the first paragraph, joined, and point at --help.
/// Long values are cut (clap quotes the value it refused, and a key can be 100 KiB).
fn one_line(rendered: &str) -> String {
    const MOST: usize = 400;
    let first: Vec<&str> = rendered
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .collect();
    let line = first.join(" ");
    if line.chars().count() <= MOST {
        return line;
    }
    let head: String = line.chars().take(MOST / 2).collect();
    let tail: String = {
        let rev: String = line.chars().rev().take(MOST / 2).collect();
        rev.chars().rev().collect()
    };
    format!("{head}…{tail}")
}

/// Tests that read or set `LOCKRUN_*` variables (every parse does) take this first: tests run
/// on several threads.
#[cfg(test)]
static TEST_ENV: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[cfg(test)]
mod tests {
    use super::*;

    /// Each line (after `lockrun`) parsed with `vars` set, one test at a time.
    fn parse_with_vars(
        vars: &[(&str, &str)],
        lines: &[&[&str]],
    ) -> Vec<Result<Invocation, ExitCode>> {
        let _env = TEST_ENV.lock().unwrap_or_else(|e| e.into_inner());
        for (k, v) in vars {
            std::env::set_var(k, v);
        }
        let parsed = lines
            .iter()
            .map(|args| parse_from(std::iter::once("lockrun").chain(args.iter().copied())))
            .collect();
        for (k, _) in vars {
            std::env::remove_var(k);
        }
        parsed
    }

    #[test]
    fn a_plain_run_is_read_as_the_whole_command_reads_it() {
        let _env = TEST_ENV.lock().unwrap_or_else(|e| e.into_inner());
        let argv = |line: &[&str]| -> Vec<OsString> {
            std::iter::once("lockrun")
                .chain(line.iter().copied())
                .map(OsString::from)
                .collect()
        };
        for line in [
            &["k", "--", "true"][..],
            &[
                "-q",
                "-E",
                "0",
                "--every",
                "1m",
                "nightly",
                "--",
                "/bin/report.sh",
                "-x",
            ],
            &[
                "-r",
                "redis://a:1",
                "-r",
                "redis://b,redis://c",
                "-t5s",
                "-vv",
                "k",
                "ls",
                "-la",
            ],
            &[
                "-w",
                "forever",
                "--limit",
                "3",
                "--log-format=json",
                "k",
                "--",
                "-q",
            ],
            &["k", "-q", "--", "cmd"],
            &[
                "--metrics-file",
                "/tmp/m.prom",
                "--kill-after",
                "3s",
                "--no-group",
                "k",
                "x",
            ],
        ] {
            let Some(Invocation::Run(fast)) = plain_run(&argv(line)) else {
                panic!("{line:?}: not read as a plain run");
            };
            match parse_whole(argv(line)) {
                Ok(Invocation::Run(whole)) => assert_eq!(fast, whole, "{line:?}"),
                other => panic!("{line:?}: the whole command read {other:?}"),
            }
        }
        // Everything else is left to the whole command.
        for line in [
            &["status", "k"][..],
            &["-r", "redis://a", "list"],
            &["run", "status", "--", "true"],
            &["-h"],
            &["--version"],
            &["k"],
            &["-t", "0", "k", "true"],
            &["--bogus", "k", "true"],
        ] {
            assert!(plain_run(&argv(line)).is_none(), "{line:?}");
        }
    }

    fn parse(args: &[&str]) -> Result<Args, ExitCode> {
        match parse_any(args)? {
            Invocation::Run(a) => Ok(*a),
            Invocation::Verb(v) => panic!("{args:?} parsed as {v:?}"),
        }
    }

    fn parse_any(args: &[&str]) -> Result<Invocation, ExitCode> {
        let _env = TEST_ENV.lock().unwrap_or_else(|e| e.into_inner());
        parse_from(std::iter::once("lockrun").chain(args.iter().copied()))
    }

    #[test]
    fn command_after_key_with_and_without_separator() {
        let a = parse(&["k", "--", "echo", "-n", "hi"]).unwrap();
        assert_eq!(a.key, "k");
        assert_eq!(a.command, ["echo", "-n", "hi"]);
        let a = parse(&["-t", "5s", "k", "ls", "-la"]).unwrap();
        assert_eq!(a.command, ["ls", "-la"]);
        assert_eq!(a.ttl, Duration::from_secs(5));
    }

    #[test]
    fn bad_input_is_a_usage_error() {
        for args in [
            &["", "true"][..],
            &["k"],
            &["-t", "0", "k", "true"],
            &["-t", "50ms", "k", "true"],
            &["-t", "2d", "k", "true"],
            &["-E", "300", "k", "true"],
            &["--on-lost", "explode", "k", "true"],
            &["--limit", "0", "k", "true"],
            &["lockrun:fence:{k}", "true"],
        ] {
            assert_eq!(parse(args).err(), Some(ExitCode::Usage), "{args:?}");
        }
    }

    #[test]
    fn every_out_of_range_is_a_usage_error() {
        for bad in ["1s", "0", "367d", "soon"] {
            assert_eq!(
                parse(&["--every", bad, "k", "true"]).err(),
                Some(ExitCode::Usage),
                "{bad}"
            );
        }
    }

    #[test]
    fn one_line_errors() {
        let s = one_line("error: the following required arguments were not provided:\n  <COMMAND>...\n\nUsage: x\n");
        assert_eq!(
            s,
            "error: the following required arguments were not provided: <COMMAND>..."
        );
    }

    fn verb(args: &[&str]) -> verbs::Verb {
        match parse_any(args) {
            Ok(Invocation::Verb(v)) => *v,
            other => panic!("{args:?} parsed as {other:?}"),
        }
    }

    /// Every option can be set through a variable (`-v` alone counts, `LOCKRUN_LOG` is its
    /// variable): a Kubernetes manifest or a systemd unit configures lockrun without flags.
    #[test]
    fn every_option_has_a_variable() {
        for a in command().get_arguments() {
            if a.is_positional() || a.get_id() == "verbose" || is_help_or_version(a) {
                continue;
            }
            let var = a.get_env().map(|v| v.to_string_lossy().into_owned());
            let long = a.get_long().unwrap_or_default();
            let expected = format!("LOCKRUN_{}", long.to_uppercase().replace('-', "_"));
            // The one variable not named after its flag: what a URL is, not a verb.
            let expected = if long == "redis" {
                "LOCKRUN_REDIS_URL".to_string()
            } else {
                expected
            };
            assert_eq!(var.as_deref(), Some(expected.as_str()), "--{long}");
        }
    }

    #[test]
    fn an_operators_command_does_not_read_the_runs_variables() {
        // A unit or manifest that configures runs (LOCKRUN_EVERY, LOCKRUN_TTL…) must not
        // break `lockrun status KEY` in the same environment, even with a value a run refuses.
        let vars = [
            ("LOCKRUN_EVERY", "1s"),
            ("LOCKRUN_TTL", "forever"),
            ("LOCKRUN_LIMIT", "0"),
            ("LOCKRUN_REDIS_URL", "redis://h:1"),
        ];
        let [status, after_options, run, plain] = parse_with_vars(
            &vars,
            &[
                &["status", "k"],
                &["-r", "redis://x", "history", "k"],
                &["run", "k", "true"],
                &["k", "true"],
            ],
        )
        .try_into()
        .unwrap();
        let Ok(Invocation::Verb(v)) = status else {
            panic!("{status:?}")
        };
        // Its own variables it still reads.
        assert_eq!(v.common().conn.redis, ["redis://h:1"]);
        let Ok(Invocation::Verb(v)) = after_options else {
            panic!("{after_options:?}")
        };
        assert_eq!(v.common().conn.redis, ["redis://x"]);
        // A run reads them, and refuses the bad ones.
        assert_eq!(run.err(), Some(ExitCode::Usage));
        assert_eq!(plain.err(), Some(ExitCode::Usage));
    }

    #[test]
    fn variables_set_options_flags_win_and_empty_counts_as_unset() {
        let vars = [
            ("LOCKRUN_TTL", "1m"),
            ("LOCKRUN_REDIS_URL", "redis://h:1"),
            ("LOCKRUN_QUIET", "yes"),
            ("LOCKRUN_WAIT", ""),
            ("LOCKRUN_CONFLICT_EXIT_CODE", ""),
            ("LOCKRUN_LOG_FORMAT", ""),
        ];
        let [from_env, flags, status] = parse_with_vars(
            &vars,
            &[
                &["k", "true"],
                &["-t", "2m", "-r", "redis://x", "k", "true"],
                &["status", "k"],
            ],
        )
        .try_into()
        .unwrap();
        let Ok(Invocation::Run(a)) = from_env else {
            panic!("{from_env:?}")
        };
        assert_eq!(a.ttl, Duration::from_secs(60));
        assert_eq!(a.conn.redis, ["redis://h:1"]);
        assert!(a.logs.quiet && !a.logs.quiet_given);
        assert!(a.wait.is_zero());
        assert_eq!(a.conflict_exit_code, crate::exit_codes::DEFAULT_CONFLICT);
        assert_eq!(a.logs.log_format, Format::Text);
        let Ok(Invocation::Run(a)) = flags else {
            panic!("{flags:?}")
        };
        assert_eq!(a.ttl, Duration::from_secs(120));
        assert_eq!(a.conn.redis, ["redis://x"]);
        // The operators' commands read the same variables.
        let Ok(Invocation::Verb(v)) = status else {
            panic!("{status:?}")
        };
        assert_eq!(v.common().conn.redis, ["redis://h:1"]);
    }

    #[test]
    fn redis_from_env_says_where_the_urls_came_from() {
        let from_env = |r: &Result<Invocation, ExitCode>| match r {
            Ok(Invocation::Run(a)) => a.conn.redis_from_env,
            Ok(Invocation::Verb(v)) => v.common().conn.redis_from_env,
            Err(_) => panic!("parse failed"),
        };
        let var = [("LOCKRUN_REDIS_URL", "redis://from-env:1")];
        let parsed = parse_with_vars(
            &var,
            &[
                &["k", "true"],
                &["run", "k", "true"],
                &["status", "k"],
                &["-r", "redis://h:1", "k", "true"],
                &["status", "-r", "redis://h:1", "k"],
            ],
        );
        let said: Vec<bool> = parsed.iter().map(from_env).collect();
        assert_eq!(said, [true, true, true, false, false]);
        assert!(!from_env(&parse_with_vars(&[], &[&["k", "true"]])[0]));
    }

    #[test]
    fn quiet_given_says_where_quiet_came_from() {
        assert!(parse(&["-q", "k", "true"]).unwrap().logs.quiet_given);
        assert!(parse(&["-vq", "k", "true"]).unwrap().logs.quiet_given);
        // Counted before the key only; after the command it is the command's.
        assert!(!parse(&["k", "-q", "true"]).unwrap().logs.quiet_given);
        assert!(parse(&["k", "-q", "true"]).unwrap().logs.quiet);
        assert!(!parse(&["k", "true", "-q"]).unwrap().logs.quiet_given);
        assert!(verb(&["-q", "status", "k"]).common().logs.quiet_given);
        assert!(verb(&["status", "k", "-q"]).common().logs.quiet_given);
        assert!(!verb(&["status", "k"]).common().logs.quiet_given);
    }

    /// A command word is one only as the first word that is not an option or its value; the
    /// run form takes any other word as KEY or COMMAND.
    #[test]
    fn command_words_and_the_run_form() {
        let v = verb(&["-r", "redis://h:1", "-q", "status", "k", "--json"]);
        assert!(matches!(&v, verbs::Verb::Status(s) if s.key == "k"));
        assert_eq!(v.common().conn.redis, ["redis://h:1"]);
        assert!(v.common().json && v.common().logs.quiet);
        let v = verb(&["-vv", "--log-format=json", "history", "k", "-n", "5"]);
        assert!(matches!(&v, verbs::Verb::History(h) if h.count == 5));
        assert_eq!(v.common().logs.verbose, 2);
        assert!(matches!(verb(&["list"]), verbs::Verb::List(l) if l.pattern == "*"));
        for (line, key, command) in [
            (
                &["-t", "5s", "run", "status", "--", "true"][..],
                "status",
                "true",
            ),
            (&["run", "-E", "0", "run", "true"], "run", "true"),
            (&["k", "status"], "k", "status"),
            (&["-t", "5s", "k", "run", "x"], "k", "run"),
            (&["--", "status", "true"], "status", "true"),
            (&["help", "true"], "help", "true"),
            (&["statuses", "true"], "statuses", "true"),
            (&["-r", "status", "k", "true"], "k", "true"),
        ] {
            let a = parse(line).unwrap();
            assert_eq!(
                (a.key.as_str(), a.command[0].to_str().unwrap()),
                (key, command),
                "{line:?}"
            );
        }
        let a = parse(&["-t", "5s", "run", "-E", "0", "k", "true"]).unwrap();
        assert_eq!((a.ttl, a.conflict_exit_code), (Duration::from_secs(5), 0));
    }

    /// A verb's line with a command after `--`, or with an option only a run takes, is refused
    /// (the verb would read the command as its KEY and exit 0).
    #[test]
    fn a_run_line_with_a_command_word_is_refused() {
        for line in [
            &["-q", "history", "--", "./rotate.sh"][..],
            &["-E", "0", "status", "--", "sh"],
            &["list", "--every", "1m", "sh", "-c", "x"],
            &["doctor", "-E", "0", "--", "sh"],
            &["status", "k", "--"],
            &["release", "--ttl=5s", "k"],
        ] {
            assert_eq!(parse_any(line).err(), Some(ExitCode::Usage), "{line:?}");
        }
    }

    /// What `lockrun <words>` prints for help, through the path a real line takes.
    fn help_of(words: &[&str], pin_width: bool) -> String {
        let argv: Vec<OsString> = std::iter::once("lockrun")
            .chain(words.iter().copied())
            .map(Into::into)
            .collect();
        let _env = TEST_ENV.lock().unwrap_or_else(|e| e.into_inner());
        let mut cmd = without_empty_env(command());
        if pin_width {
            // The line count is judged at 80 columns, not at the width of whatever terminal
            // runs the tests.
            cmd = cmd.term_width(HELP_WIDTH);
        }
        let e = cmd.try_get_matches_from_mut(&argv).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::DisplayHelp, "{words:?}");
        help_text(&cmd, &e, &argv)
    }

    fn assert_fits(text: &str, words: &[&str]) {
        for line in text.lines() {
            assert!(line.chars().count() <= HELP_WIDTH, "{words:?}: {line:?}");
        }
    }

    #[test]
    fn short_help_fits_a_screen_under_headings_with_an_example() {
        for words in [&["-h"][..], &["run", "-h"]] {
            assert_fits(&help_of(words, false), words);
            let help = help_of(words, true);
            assert!(help.lines().count() <= 45, "{words:?}: {help}");
            for heading in [
                "Lock:",
                "Job:",
                "Redis connection:",
                "TLS:",
                "Durability:",
                "Output:",
                "Example (",
                "Exit codes:",
            ] {
                assert!(
                    help.lines().any(|l| l.starts_with(heading)),
                    "{words:?} lacks {heading}: {help}"
                );
            }
            // Each option on one line: the variables and the command list are --help's.
            assert!(!help.contains("[env:"), "{help}");
            assert!(!help.contains("Commands:"), "{help}");
            assert!(!help.contains("--min-hold"), "{help}");
        }
        assert!(help_of(&["run", "-h"], true).contains("Usage: lockrun run "));
        assert!(help_of(&["-h"], true).contains("status|list|release|history|doctor"));
    }

    #[test]
    fn long_help_has_every_option_variable_and_what_the_command_gets() {
        let help = help_of(&["--help"], true);
        for needle in [
            "Commands:",
            "--min-hold",
            "[env: LOCKRUN_TTL]",
            "[env: LOCKRUN_REDIS_URL]",
            "LOCKRUN_REDIS_PASSWORD\n",
            "LOCKRUN_SENTINEL_PASSWORD\n",
            "LOCKRUN_LOG\n",
            "LOCKRUN_KEY\n",
            "LOCKRUN_TOKEN\n",
            "LOCKRUN_FENCE\n",
            "LOCKRUN_HELD\n",
            "valkey://",
            "valkeys://",
        ] {
            assert!(help.contains(needle), "--help lacks {needle:?}: {help}");
        }
        // The text lockrun wraps itself (exit codes, variables) fits as well.
        let end = &help[help.find("Exit codes:").unwrap()..];
        assert_fits(end, &["--help"]);
        for code in ExitCode::DOCUMENTED {
            let line = format!("\n  {} ", code.summary().code);
            assert!(end.contains(&line), "--help lacks {line:?}: {end}");
        }
    }

    /// Each operators' command's help speaks of that command: its own exit codes, no option
    /// only a run has (`-E`, a TTL).
    #[test]
    fn each_command_has_its_own_short_help() {
        for verb in ["status", "list", "release", "history", "doctor"] {
            let words = [verb, "-h"];
            assert_fits(&help_of(&words, false), &words);
            let help = help_of(&words, true);
            assert!(help.lines().count() <= 45, "{verb}: {help}");
            assert!(help.contains(&format!("Usage: lockrun {verb} ")), "{help}");
            assert!(help.contains("Exit codes: 0"), "{verb}: {help}");
            assert!(!help.contains("[env:"), "{verb}: {help}");
            let long = help_of(&[verb, "--help"], true);
            for run_only in ["-E", "TTL/3", "--every"] {
                assert!(
                    !long.contains(run_only),
                    "{verb} --help: {run_only}: {long}"
                );
            }
            assert!(long.contains("[env: LOCKRUN_QUIET]"), "{verb}: {long}");
        }
    }

    #[test]
    fn a_usage_error_is_said_in_json_when_json_was_asked_for() {
        let words = |args: &[&str]| -> Vec<OsString> {
            std::iter::once("lockrun")
                .chain(args.iter().copied())
                .map(Into::into)
                .collect()
        };
        let _env = TEST_ENV.lock().unwrap_or_else(|e| e.into_inner());
        for (line, json) in [
            (&["--log-format", "json", "-t", "0", "k", "true"][..], true),
            (&["-t", "0", "--log-format=json", "k", "true"], true),
            (&["--log-format", "JSON", "k", "true"], true),
            (&["-E", "300", "k", "true"], false),
            (&["--bogus", "--log-format", "json", "k", "true"], true),
            (
                &["-x", "--bogus", "--log-format", "json", "k", "true"],
                true,
            ),
            (&["status", "--log-format", "json"], true),
            (&["--log-format", "json", "status"], true),
            // After the command, the words are the command's.
            (&["k", "--log-format", "json"], true),
            (&["k", "true", "--log-format", "json"], false),
        ] {
            assert_eq!(json_wanted(&words(line)), json, "{line:?}");
        }
        std::env::set_var("LOCKRUN_LOG_FORMAT", " json");
        std::env::set_var("LOCKRUN_TTL", "0");
        let from_env = json_wanted(&words(&["k", "true"]));
        let flag_wins = json_wanted(&words(&["--log-format", "text", "k", "true"]));
        std::env::remove_var("LOCKRUN_LOG_FORMAT");
        std::env::remove_var("LOCKRUN_TTL");
        assert!(from_env && !flag_wins);
    }
}
