//! The command line: `lockrun [OPTIONS] <KEY> [--] <COMMAND> [ARGS]...`
//!
//! Every option also reads a `LOCKRUN_*` environment variable, so a Kubernetes manifest or a
//! systemd unit can configure lockrun without flags. Flags win over the environment.

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
/// Defaults given as text (clap parses them like any value); `fast` uses the same.
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

#[derive(Debug, PartialEq, Parser)]
#[command(
    name = "lockrun",
    version,
    override_usage = "lockrun [OPTIONS] <KEY> [--] <COMMAND> [ARGS]...",
    about = "Run a command under a distributed lock held in Redis: flock(1) across hosts.",
    after_help = "Exit codes: the command's own; 128+N if it died of signal N; 75 (or -E) lock held \
elsewhere; 76 lock lost; 64 usage error; 69 Redis unavailable; 70 internal error; \
126/127 command not executable / not found.

Other commands (each with --help): lockrun status <KEY>, lockrun list [PATTERN], \
lockrun release <KEY> --force, lockrun history <KEY>, lockrun doctor [KEY]. \
A lock named like one of them: lockrun run <KEY> [--] <COMMAND>..."
)]
pub struct Args {
    #[command(flatten)]
    pub conn: Connection,

    /// Lease length, renewed every TTL/3 while the command runs: 100ms to 24h (500ms, 30s, 5m,
    /// 1h, 1d; a bare number is seconds)
    #[arg(short, long, env = "LOCKRUN_TTL", default_value = DEFAULT_TTL, value_name = "DURATION",
          value_parser = parse_ttl, allow_hyphen_values = true, hide_env_values = true)]
    pub ttl: Duration,

    /// How long to wait for a held lock: 0 = one attempt, a duration, or `forever`
    #[arg(short, long, env = "LOCKRUN_WAIT", default_value = "0", value_name = "DURATION",
          value_parser = Wait::parse, allow_hyphen_values = true, hide_env_values = true)]
    pub wait: Wait,

    /// Exit code when the lock is held elsewhere, 0 to 255 (0 = skip silently, 1 = like flock)
    #[arg(short = 'E', long, env = "LOCKRUN_CONFLICT_EXIT_CODE", default_value_t = crate::exit_codes::DEFAULT_CONFLICT,
          value_name = "N", value_parser = parse_exit_code, allow_negative_numbers = true,
          hide_env_values = true)]
    pub conflict_exit_code: u8,

    /// Grace between SIGTERM and SIGKILL whenever lockrun has to stop the command (at most
    /// TTL/3 when the lock is being lost)
    #[arg(long, env = "LOCKRUN_KILL_AFTER", default_value = DEFAULT_KILL_AFTER, value_name = "DURATION",
          value_parser = duration::parse, allow_hyphen_values = true, hide_env_values = true)]
    pub kill_after: Duration,

    /// What to do with the command when the lock is lost
    #[arg(long, env = "LOCKRUN_ON_LOST", value_enum, default_value_t = OnLost::Terminate, value_name = "ACTION",
          hide_env_values = true)]
    pub on_lost: OnLost,

    /// The job's schedule period: how often cron (a timer, a CronJob) starts it on every host,
    /// 2s to 366d. The lock is then kept for the tick, until 9/10 of the period (at least 1s
    /// less) after acquiring, so hosts that fire a few seconds apart skip it and the next tick
    /// finds it free; given back at once if the command could not be started (126/127).
    /// Recorded in the history and the metrics file. Not with --wait
    #[arg(long, env = "LOCKRUN_EVERY", value_name = "DURATION", value_parser = parse_every,
          allow_hyphen_values = true, hide_env_values = true)]
    pub every: Option<Duration>,

    /// Keep the lock at least this long after acquiring, even if the command finishes sooner
    /// (at most 30d); the low-level knob behind --every, which it overrides (it must then be
    /// shorter than the period)
    #[arg(long, env = "LOCKRUN_MIN_HOLD", value_name = "DURATION",
          value_parser = parse_min_hold, allow_hyphen_values = true, hide_env_values = true)]
    pub min_hold: Option<Duration>,

    /// Count the lock as taken, and each renewal as confirmed, only once N replicas have it
    /// (Redis WAIT), so a failover to a replica cannot lose it; 0 to 100 (0: don't wait)
    #[arg(long, env = "LOCKRUN_ACKS", default_value_t = 0, value_name = "N",
          value_parser = parse_acks, allow_negative_numbers = true, hide_env_values = true)]
    pub acks: u32,

    /// Count the lock and each renewal only once the server has fsynced them to its append-only
    /// file (and N replicas theirs, with --acks): Redis WAITAOF, Redis 7.2+ / Valkey 8+
    #[arg(long, env = "LOCKRUN_FSYNC", value_parser = parse_switch, hide_env_values = true)]
    pub fsync: bool,

    /// Keep about the last N runs of KEY for `lockrun history` (a Redis stream beside the lock,
    /// written by the scripts lockrun runs anyway; gone 39 to 40 days after the key's last run);
    /// 0 to 10000, 0: record nothing
    #[arg(long, env = "LOCKRUN_HISTORY", default_value_t = DEFAULT_HISTORY, value_name = "N",
          value_parser = parse_history, allow_negative_numbers = true, hide_env_values = true)]
    pub history: u32,

    /// Let up to N holders run at once under KEY (a semaphore), 1 to 100000
    #[arg(short, long, env = "LOCKRUN_LIMIT", value_name = "N", value_parser = parse_limit,
          allow_negative_numbers = true, hide_env_values = true)]
    pub limit: Option<u32>,

    /// Signal only the direct child, not its process group
    #[arg(long, env = "LOCKRUN_NO_GROUP", value_parser = parse_switch,
          hide_env_values = true)]
    pub no_group: bool,

    /// Adopt and reap orphaned descendants (automatic when lockrun is PID 1)
    #[arg(long, env = "LOCKRUN_SUBREAPER", value_parser = parse_switch,
          hide_env_values = true)]
    pub subreaper: bool,

    /// When lockrun ends, write how the run went to PATH in Prometheus text format, for
    /// node_exporter's textfile collector (replaced atomically; a failure to write is a warning)
    #[arg(long, env = "LOCKRUN_METRICS_FILE", value_name = "PATH", hide_env_values = true,
          value_parser = clap::value_parser!(std::path::PathBuf))]
    pub metrics_file: Option<std::path::PathBuf>,

    #[command(flatten)]
    pub logs: Logs,

    /// Lock name; used as the Redis key exactly as given (names starting with 'lockrun:' are reserved)
    #[arg(value_name = "KEY", value_parser = parse_key)]
    pub key: String,

    /// The command to run (executed directly, looked up on PATH, never through a shell)
    #[arg(value_name = "COMMAND", required = true, num_args = 1.., trailing_var_arg = true,
          allow_hyphen_values = true, value_parser = clap::value_parser!(OsString))]
    pub command: Vec<OsString>,
}

/// How to reach and authenticate to Redis: shared by the run form and every other command.
#[derive(Debug, PartialEq, clap::Args)]
pub struct Connection {
    /// Redis URL: redis://[user:password@]host[:port][/db], rediss://… (TLS; system trust store
    /// or the PEM bundle in SSL_CERT_FILE), unix:///path/redis.sock[?db=N&user=U&pass=P],
    /// redis+sentinel://[user:password@]host1:port1[,host2:port2…]/<service>[/<db>] (Sentinel),
    /// redis+cluster://[user:password@]host1:port1[,host2:port2…] (Cluster; rediss+… for TLS).
    /// Passwords are never printed. Given 3 or more times (or as URL,URL,URL): Redlock over
    /// that many independent masters, the lock held on a majority
    #[arg(
        short,
        long,
        env = "LOCKRUN_REDIS_URL",
        default_value = DEFAULT_URL,
        value_name = "URL",
        hide_env_values = true,
        action = clap::ArgAction::Append
    )]
    pub redis: Vec<String>,

    /// Bound on each Redis request, below TTL/3. With several masters, per node (default TTL/10
    /// within 10ms..1s); with one, the request timeout (default TTL/3 within 50ms..3s)
    #[arg(long, env = "LOCKRUN_NODE_TIMEOUT", value_name = "DURATION",
          value_parser = duration::parse, allow_hyphen_values = true, hide_env_values = true)]
    pub node_timeout: Option<Duration>,

    /// ACL user to authenticate as; overrides a user in the URL. Needs a password (from the URL,
    /// LOCKRUN_REDIS_PASSWORD or --redis-password-file)
    #[arg(long, env = "LOCKRUN_REDIS_USER", value_name = "NAME", hide_env_values = true,
          value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub redis_user: Option<String>,

    /// Read the Redis password from FILE (one trailing newline stripped), keeping it out of the
    /// crontab and `ps`; overrides a password in the URL. Or set LOCKRUN_REDIS_PASSWORD (not both)
    #[arg(long, env = "LOCKRUN_REDIS_PASSWORD_FILE", value_name = "FILE", hide_env_values = true,
          value_parser = clap::value_parser!(std::path::PathBuf))]
    pub redis_password_file: Option<std::path::PathBuf>,

    /// rediss://: trust only the CA certificates in FILE (PEM) instead of the system store
    #[arg(
        long,
        env = "LOCKRUN_TLS_CA",
        value_name = "FILE",
        hide_env_values = true
    )]
    pub tls_ca: Option<std::path::PathBuf>,

    /// rediss://: present this client certificate (PEM), for servers with tls-auth-clients
    #[arg(
        long,
        env = "LOCKRUN_TLS_CERT",
        value_name = "FILE",
        hide_env_values = true
    )]
    pub tls_cert: Option<std::path::PathBuf>,

    /// rediss://: the client certificate's private key (PEM)
    #[arg(
        long,
        env = "LOCKRUN_TLS_KEY",
        value_name = "FILE",
        hide_env_values = true
    )]
    pub tls_key: Option<std::path::PathBuf>,

    /// TLS without verifying the server's certificate: only for testing, it allows anyone on the
    /// path to impersonate the server (logged as a warning on every run)
    #[arg(long, env = "LOCKRUN_TLS_INSECURE", value_parser = parse_switch, hide_env_values = true)]
    pub tls_insecure: bool,

    /// redis+sentinel://: read the sentinels' own password from FILE (the URL's password is the
    /// data nodes'). Or set LOCKRUN_SENTINEL_PASSWORD (not both)
    #[arg(long, env = "LOCKRUN_SENTINEL_PASSWORD_FILE", value_name = "FILE", hide_env_values = true,
          value_parser = clap::value_parser!(std::path::PathBuf))]
    pub sentinel_password_file: Option<std::path::PathBuf>,
}

/// How lockrun's own lines on stderr look: shared by the run form and every other command.
#[derive(Debug, PartialEq, clap::Args)]
pub struct Logs {
    /// Print errors only (a conflict is not an error: -q -E 0 is silent when the lock is held);
    /// LOCKRUN_QUIET yields to -v
    // With -v as well, -q on the command line conflicts: see `quiet_given`.
    #[arg(short, long, env = "LOCKRUN_QUIET",
          value_parser = parse_switch, hide_env_values = true)]
    pub quiet: bool,

    /// More detail (-vv for trace). Without -q or -v, LOCKRUN_LOG sets the level: error, warn,
    /// info (default), debug, trace, or a tracing filter such as lockrun=debug
    #[arg(short, long, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// Log format for lockrun's own lines on stderr
    #[arg(long, env = "LOCKRUN_LOG_FORMAT", value_enum, default_value_t = Format::Text, value_name = "FORMAT",
          hide_env_values = true)]
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

mod fast;
pub mod verbs;

/// What the command line asks for: a run (the classic form, or `lockrun run …`) or one of the
/// operators' commands.
#[derive(Debug)]
pub enum Invocation {
    Run(Box<Args>),
    Verb(Box<verbs::Verb>),
}

/// Parses the process arguments. Help and version print to stdout; errors print one line to
/// stderr. Either way the caller gets the exit code to use.
pub fn parse() -> Result<Invocation, ExitCode> {
    parse_from(std::env::args_os())
}

/// [`parse`] of given words (the program's name first).
pub fn parse_from<I, T>(args: I) -> Result<Invocation, ExitCode>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let argv: Vec<OsString> = args.into_iter().map(Into::into).collect();
    // The plain run form first, without clap (see `fast`): it gives what clap would, or nothing.
    match fast::parse(&argv) {
        Some(args) => Ok(Invocation::Run(Box::new(args))),
        None => parse_with_clap(argv),
    }
}

/// [`parse_from`] by clap alone. The run form stays exactly as it was: only when the first word
/// that is not an option (or an option's value) is one of [`verbs::VERBS`] is it a command; it
/// moves to the front, so connection options may come before or after it (`lockrun -r URL
/// status KEY`). `run` is dropped and the rest parsed as the run form, for a lock named like a
/// command.
fn parse_with_clap(mut argv: Vec<OsString>) -> Result<Invocation, ExitCode> {
    let verb = first_positional(&Args::command(), &argv)
        .filter(|&i| verbs::VERBS.iter().any(|v| argv[i] == *v));
    match verb {
        Some(i) if argv[i] == "run" => {
            argv.remove(i);
            parse_as::<Args>(argv).map(|a| Invocation::Run(Box::new(a)))
        }
        Some(i) => {
            if let Some(why) = run_line_with_a_verb(&argv, i) {
                crate::logging::print_early_error(&why, json_wanted(&argv));
                return Err(ExitCode::Usage);
            }
            let word = argv.remove(i);
            argv.insert(1.min(argv.len()), word);
            parse_as::<verbs::VerbLine>(argv).map(|v| Invocation::Verb(Box::new(v.verb)))
        }
        None => parse_as::<Args>(argv).map(|a| Invocation::Run(Box::new(a))),
    }
}

/// Whether the line whose word `at` is a verb is really a run of a lock named like it: a `--`
/// (only a run has a command after it) or an option only a run takes (`-E`, `--every`). The
/// verb would read the command as its KEY and exit 0 (`lockrun -q history -- ./rotate.sh`: cron
/// saw success and the job never ran), so it is refused, saying what to write instead.
fn run_line_with_a_verb(argv: &[OsString], at: usize) -> Option<String> {
    let verbs = verbs::VerbLine::command();
    let verb = argv[at].to_string_lossy().into_owned();
    let sub = verbs.find_subcommand(&verb)?;
    let known = |word: &str| {
        let word = word.split('=').next().unwrap_or(word);
        sub.get_arguments().any(|a| {
            word.strip_prefix("--")
                .is_some_and(|l| a.get_long() == Some(l))
                || (word.len() == 2
                    && word.strip_prefix('-').and_then(|c| c.chars().next()) == a.get_short())
        })
    };
    let run_only = Args::command()
        .get_arguments()
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

/// Whether `-q`/`--quiet` is on the command line itself (before the key), not only in
/// `LOCKRUN_QUIET`: with `-v` as well, the two flags conflict, while the variable yields to
/// the flag. Asked only when both are set.
pub fn quiet_given() -> bool {
    let argv: Vec<OsString> = std::env::args_os().collect();
    // A run's options come before its KEY; an operators' command takes them after its word too.
    let end = match first_positional(&Args::command(), &argv) {
        Some(i) if verbs::VERBS.iter().any(|v| argv[i] == *v) => {
            argv.iter().position(|w| w == "--").unwrap_or(argv.len())
        }
        Some(i) => i,
        None => argv.len(),
    };
    argv[1..end].iter().any(|w| {
        let w = w.to_string_lossy();
        w == "--quiet"
            || w.starts_with("--quiet=")
            || (w.len() > 1
                && w.starts_with('-')
                && !w.starts_with("--")
                && w[1..].chars().all(|c| c == 'q' || c == 'v')
                && w.contains('q'))
    })
}

/// Where the first word that is neither an option nor an option's value is, up to `--`.
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
    let subs: Vec<String> = cmd
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    for name in subs {
        cmd = cmd.mut_subcommand(name, without_empty_env);
    }
    cmd
}

fn parse_as<P: CommandFactory + FromArgMatches>(argv: Vec<OsString>) -> Result<P, ExitCode> {
    let mut cmd = without_empty_env(P::command());
    let parsed = cmd
        .try_get_matches_from_mut(argv.clone())
        .and_then(|m| P::from_arg_matches(&m));
    match parsed {
        Ok(args) => Ok(args),
        Err(e) if !e.use_stderr() => {
            // --help / --version, through `output` so a full stdout is exit 74, not 0.
            crate::output::print(&e.render().to_string());
            Err(ExitCode::Command(0))
        }
        Err(e) if e.kind() == clap::error::ErrorKind::InvalidUtf8 => {
            // clap says "invalid UTF-8 was detected in one or more arguments" without saying
            // where: name the variable if one of ours is it.
            let var = cmd
                .get_arguments()
                .filter_map(|a| a.get_env())
                .find(|v| std::env::var_os(v).is_some_and(|x| x.to_str().is_none()));
            let line = match var {
                Some(v) => format!(
                    "the environment variable {} is not valid UTF-8 (see 'lockrun --help')",
                    v.to_string_lossy()
                ),
                None => "an argument is not valid UTF-8 (see 'lockrun --help')".to_string(),
            };
            crate::logging::print_early_error(&line, json_wanted(&argv));
            Err(ExitCode::Usage)
        }
        Err(e) => {
            let mut line = one_line(&e.to_string());
            if let Some(var) = from_environment(&cmd, &e, &argv) {
                line = format!("{line}, from the environment variable {var}");
            }
            line.push_str(" (see 'lockrun --help')");
            crate::logging::print_early_error(
                line.trim_start_matches("error: "),
                json_wanted(&argv),
            );
            Err(ExitCode::Usage)
        }
    }
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
    let a = cmd
        .get_arguments()
        .chain(cmd.get_subcommands().flat_map(|c| c.get_arguments()))
        .find(|a| a.get_long() == Some(long))?;
    let var = a.get_env()?.to_str()?.to_string();
    let on_command_line = argv.iter().any(|x| {
        let x = x.to_string_lossy();
        x == *value || x.ends_with(&format!("={value}"))
    });
    (std::env::var(&var).ok().as_deref() == Some(value.as_str()) && !on_command_line).then_some(var)
}

/// Whether the user asked for JSON log lines, read straight from the arguments and the
/// environment: a usage error happens before the options are known, and a log pipeline that
/// asked for JSON must not get a plain-text line it cannot parse.
fn json_wanted(argv: &[OsString]) -> bool {
    let mut after_flag = false;
    let mut from_args = None;
    for a in argv.iter().skip(1).map(|a| a.to_string_lossy()) {
        if a == "--" {
            break;
        }
        if after_flag {
            from_args = Some(a.eq_ignore_ascii_case("json"));
            after_flag = false;
        } else if a == "--log-format" {
            after_flag = true;
        } else if let Some(v) = a.strip_prefix("--log-format=") {
            from_args = Some(v.eq_ignore_ascii_case("json"));
        }
    }
    from_args.unwrap_or_else(|| {
        std::env::var("LOCKRUN_LOG_FORMAT").is_ok_and(|v| v.trim().eq_ignore_ascii_case("json"))
    })
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

/// Tests that read or set `LOCKRUN_*` variables (every parse does) take this first: the
/// comparison of `fast` with clap sets them, and tests run on several threads.
#[cfg(test)]
static TEST_ENV: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[cfg(test)]
mod tests {
    use super::*;

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
}
