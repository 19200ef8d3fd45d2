//! Resolve: the parsed command line and the environment become a validated plan, for a run
//! ([`resolve`]) or for an operators' command ([`operation`]: its servers).
//!
//! This is the one place usage errors (exit 64) about the options come from after parsing:
//! URLs split and parsed, passwords read, timeouts computed, topology rules checked. What comes
//! after (the run, the operators' commands) only consumes a plan. No network I/O happens here;
//! files named by options (passwords, TLS certificates) are read, since a bad one is a usage
//! error.

use crate::cli::verbs::Verb;
use crate::cli::{Args, Connection, OnLost};
use crate::duration::{Human, Wait};
use crate::lock::backend::Backend;
use crate::lock::redis::{ConnectOptions, RedisLock};
use crate::lock::redlock::Redlock;
use crate::lock::url::{password_from, Credentials, TlsFiles};
use crate::lock::{LockKind, LockSpec, DEFAULT_STANDBYS};
use crate::ping::Target;
use std::ffi::OsString;
use std::time::Duration;
use tracing::warn;

/// A usage error: the message to say (one line), for exit 64.
#[derive(Debug, PartialEq, Eq)]
pub struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<String> for Usage {
    fn from(msg: String) -> Usage {
        Usage(msg)
    }
}

/// Everything one run needs, checked.
pub struct Plan {
    pub spec: LockSpec,
    /// The command and its arguments; the name is not empty.
    pub command: Vec<OsString>,
    pub wait: Wait,
    /// How long the key stays after the acquire when the job ends sooner (see `hold`).
    pub hold: Duration,
    /// `--spread`: the longest random wait before the first attempt (zero: none).
    pub spread: Duration,
    pub conflict_exit_code: u8,
    pub kill_after: Duration,
    /// `--time-limit`: how long the command may run.
    pub time_limit: Option<Duration>,
    pub on_lost: OnLost,
    /// Run the command in its own process group (not `--no-group`).
    pub group: bool,
    pub subreaper: bool,
    /// The lock, parsed and configured, nothing connected yet.
    pub lock: Backend,
    /// `--ping`: where the job's start and end are reported.
    pub ping: Option<Target>,
}

/// The plan for a run. Checked in this order: the command name, the hold, the lock's kind, the
/// spread, the servers, then whether `--shared` and the kind fit the rest.
pub fn resolve(args: &Args) -> Result<Plan, Usage> {
    if args.command[0].is_empty() {
        return Err(Usage("the command name is empty: nothing to run".into()));
    }
    let hold = hold(args.every, args.min_hold, args.wait)?;
    let kind = kind(args, hold)?;
    let spread = spread(args, hold)?;
    let lock = backend(args, kind)?;
    kind_fits(kind, args, &lock)?;
    let ping = ping(args.ping.as_deref(), args.ping_file.as_deref())?;
    Ok(Plan {
        spec: LockSpec {
            key: args.key.clone(),
            ttl: args.ttl,
            kind,
            history: args.history,
            every: args.every,
        },
        command: args.command.clone(),
        wait: args.wait,
        hold,
        spread,
        conflict_exit_code: args.conflict_exit_code,
        kill_after: args.kill_after,
        time_limit: args.time_limit,
        on_lost: args.on_lost,
        group: !args.no_group,
        subreaper: args.subreaper,
        lock,
        ping,
    })
}

/// Each request's bound for the operators' commands when `--node-timeout` does not say: an
/// operator waits longer than a lock's renewal could, but not for the OS's TCP timeout.
const OPERATOR_TIMEOUT: Duration = Duration::from_secs(3);

/// The servers an operators' command asks, once its own rules are checked: `release` deletes
/// only with `--force`.
pub fn operation(verb: &Verb) -> Result<Vec<RedisLock>, Usage> {
    if let Verb::Release(v) = verb {
        if !v.force {
            let key = &v.key;
            return Err(Usage(format!(
                "not deleting '{key}' without --force: a job that still holds it keeps running \
                 until its next renewal (up to TTL/3) while another may start; check with \
                 'lockrun status {key}'"
            )));
        }
    }
    connection(&verb.common().conn)
}

/// The operators' commands' servers: one client per URL (several: Redlock masters), nothing
/// connected yet.
fn connection(conn: &Connection) -> Result<Vec<RedisLock>, Usage> {
    let urls = urls(&conn.redis).map_err(|u| of_urls(conn, u.0))?;
    let timeout = conn.node_timeout.unwrap_or(OPERATOR_TIMEOUT);
    let options = connect_options(conn)?;
    let nodes = urls
        .iter()
        .map(|url| RedisLock::new(url, &options, timeout).map_err(|e| of_url(conn, e)))
        .collect::<Result<Vec<_>, _>>()?;
    crate::lock::redlock::distinct(&nodes).map_err(|e| of_urls(conn, e))?;
    Ok(nodes)
}

/// A usage error about the URLs as a whole (how many, one server twice): it says where they
/// came from when that was `LOCKRUN_REDIS_URL`, as the error about any other variable's value
/// does; `-r` is on the line the user typed.
fn of_urls(conn: &Connection, msg: String) -> Usage {
    if conn.redis_from_env {
        Usage(format!(
            "{msg}, from the environment variable LOCKRUN_REDIS_URL"
        ))
    } else {
        Usage(msg)
    }
}

/// An error from parsing one URL with the options that go with it: [`of_urls`] when it is
/// about the URL itself; one about a password or TLS option names that option already.
fn of_url(conn: &Connection, msg: String) -> Usage {
    if msg.starts_with(crate::lock::url::INVALID) {
        of_urls(conn, msg)
    } else {
        Usage(msg)
    }
}

/// Bound on connecting and on each reply: well below the TTL so a dead server is noticed with
/// time to spare, never the OS's minutes-long TCP default.
pub fn request_timeout(ttl: Duration) -> Duration {
    (ttl / 3).clamp(Duration::from_millis(50), Duration::from_secs(3))
}

/// Bound on each master's reply under Redlock: a tenth of the TTL (10 ms..1 s), so that one
/// dead master costs little of the lease while the others answer.
pub fn node_timeout(ttl: Duration) -> Duration {
    (ttl / 10).clamp(Duration::from_millis(10), Duration::from_secs(1))
}

/// The lock to run on: one server for one URL, Redlock over 3 or more. Every error is a usage
/// error (bad URL, 2 URLs, --limit with several, a --node-timeout that does not fit the TTL).
fn backend(args: &Args, kind: LockKind) -> Result<Backend, Usage> {
    let urls = run_urls(&args.conn.redis, kind).map_err(|u| of_urls(&args.conn, u.0))?;
    let timeout = match args.conn.node_timeout {
        // Below TTL/3: a renewal is due every TTL/3, and one request must not outlast that.
        Some(t) if t.is_zero() || t >= args.ttl / 3 => {
            return Err(Usage(format!(
                "--node-timeout (LOCKRUN_NODE_TIMEOUT) {} must be more than 0 and below TTL/3 ({})",
                Human(t),
                Human(args.ttl / 3)
            )))
        }
        Some(t) => t,
        None if urls.len() == 1 => request_timeout(args.ttl),
        None => node_timeout(args.ttl),
    };
    let options = connect_options(&args.conn)?;
    if options.insecure {
        warn!("--tls-insecure: the server's certificate is not verified; anyone on the network path can impersonate it");
    }
    let mut nodes = urls
        .iter()
        .map(|url| {
            RedisLock::new(url, &options, timeout)
                .map(|l| l.with_acks(args.acks, args.fsync))
                .map_err(|e| of_url(&args.conn, e))
        })
        .collect::<Result<Vec<_>, _>>()?;
    crate::lock::redlock::distinct(&nodes).map_err(|e| of_urls(&args.conn, e))?;
    Ok(match nodes.len() {
        1 => Backend::One(nodes.remove(0)),
        _ => Backend::Quorum(Redlock::new(nodes, timeout)),
    })
}

/// `--ping` (`LOCKRUN_PING_URL`) or the URL in `--ping-file`, checked; the messages never say
/// the URL, a secret.
fn ping(url: Option<&str>, file: Option<&std::path::Path>) -> Result<Option<Target>, Usage> {
    let (url, from) = match (url, file) {
        (Some(_), Some(_)) => {
            return Err(Usage(
                "both --ping (LOCKRUN_PING_URL) and --ping-file are given; use one".into(),
            ))
        }
        (Some(url), None) => (url.to_string(), "--ping URL (LOCKRUN_PING_URL)".to_string()),
        (None, Some(file)) => (
            read_ping_file(file)?,
            format!("URL in --ping-file '{}'", file.display()),
        ),
        (None, None) => return Ok(None),
    };
    Target::parse(&url)
        .map(Some)
        .map_err(|why| Usage(format!("invalid {from}: {why}")))
}

/// The URL in `file` (read by [`crate::option_file::read`]), surrounding whitespace dropped.
/// One line: a second one would be glued to the first by the URL parser, which drops newlines.
fn read_ping_file(file: &std::path::Path) -> Result<String, Usage> {
    let shown = file.display();
    let bytes = crate::option_file::read(file)
        .map_err(|e| Usage(format!("cannot read --ping-file '{shown}': {e}")))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| Usage(format!("--ping-file '{shown}' is not UTF-8 text")))?;
    let url = text.trim();
    if url.is_empty() {
        return Err(Usage(format!("--ping-file '{shown}' is empty")));
    }
    if url.lines().count() > 1 {
        return Err(Usage(format!(
            "--ping-file '{shown}' holds more than one line: give one URL"
        )));
    }
    Ok(url.to_string())
}

/// How to reach and authenticate to the server(s), from the options and the environment
/// (`LOCKRUN_REDIS_PASSWORD`, `LOCKRUN_SENTINEL_PASSWORD`; password files are read here).
fn connect_options(conn: &Connection) -> Result<ConnectOptions, Usage> {
    let env = |name: &str| std::env::var_os(name);
    Ok(ConnectOptions {
        creds: Credentials::from_options(
            conn.redis_user.as_deref(),
            env("LOCKRUN_REDIS_PASSWORD"),
            conn.redis_password_file.as_deref(),
        )?,
        tls: TlsFiles {
            ca: conn.tls_ca.clone(),
            cert: conn.tls_cert.clone(),
            key: conn.tls_key.clone(),
        },
        sentinel_password: password_from(
            "LOCKRUN_SENTINEL_PASSWORD",
            env("LOCKRUN_SENTINEL_PASSWORD"),
            conn.sentinel_password_file.as_deref(),
        )?,
        insecure: conn.tls_insecure,
    })
}

/// The Redis URLs: every `--redis` (or `LOCKRUN_REDIS_URL`), each split by [`split_urls`].
/// One is a single server; 3 or more are Redlock masters; 2 is refused, since a majority of 2
/// is both, so either one failing would stop every lockrun.
fn urls(given: &[String]) -> Result<Vec<String>, Usage> {
    let urls: Vec<String> = given.iter().flat_map(|u| split_urls(u)).collect();
    if urls.len() == 2 {
        return Err(Usage(
            "2 Redis URLs given: Redlock needs a majority that survives a failed node, \
             so give 3 or more independent masters (or 1)"
                .into(),
        ));
    }
    // The same master twice (however it is spelled) is refused once the URLs are parsed:
    // `lock::redlock::distinct`.
    Ok(urls)
}

/// [`urls`] for a run: semaphores need one server (checked with the URLs, before any is
/// parsed; the other kinds' needs are [`kind_fits`]).
fn run_urls(given: &[String], kind: LockKind) -> Result<Vec<String>, Usage> {
    let urls = urls(given)?;
    match (urls.len(), kind) {
        (n, LockKind::Semaphore(_)) if n > 2 => Err(Usage(format!(
            "--limit cannot be used with {n} Redis masters: a majority per holder does not \
             bound the number of holders (with 3 masters and --limit 2, three holders can \
             each hold 2 of the 3)"
        ))),
        _ => Ok(urls),
    }
}

/// Splits a list of URLs at each comma that is immediately followed by a URL scheme
/// (`[a-z][a-z0-9+]*://`). Only there: a Sentinel or Cluster URL has commas of its own in its
/// host list (`redis+sentinel://h1:26379,h2:26379/name`) and stays one URL.
fn split_urls(list: &str) -> Vec<String> {
    let starts_with_scheme = |s: &str| {
        let Some(colon) = s.find("://") else {
            return false;
        };
        let scheme = &s.as_bytes()[..colon];
        scheme.first().is_some_and(u8::is_ascii_lowercase)
            && scheme
                .iter()
                .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'+')
    };
    let mut urls = Vec::new();
    let mut start = 0;
    for (i, _) in list.match_indices(',') {
        if starts_with_scheme(&list[i + 1..]) {
            urls.push(list[start..i].to_string());
            start = i + 1;
        }
    }
    urls.push(list[start..].to_string());
    urls
}

/// How long the key stays after the acquire when the job ends sooner: `--min-hold`, else what
/// `--every` implies ([`hold_for`]), else nothing. Refused: `--every` with a wait (a waiter
/// would run the tick again once the hold ends) and a `--min-hold` that reaches the next tick
/// (every host would find the previous tick's hold and the tick would be lost).
fn hold(
    every: Option<Duration>,
    min_hold: Option<Duration>,
    wait: Wait,
) -> Result<Duration, Usage> {
    let Some(every) = every else {
        return Ok(min_hold.unwrap_or_default());
    };
    if !wait.is_zero() {
        return Err(Usage(
            "--every cannot be used with --wait: a host that waited would run the \
                    tick again once the previous holder's hold ends (a tick is run once, \
                    the other hosts skip it)"
                .into(),
        ));
    }
    match min_hold {
        Some(hold) if hold >= every => Err(Usage(format!(
            "--min-hold {} must be shorter than --every {}: a hold that reaches the next \
             tick makes every host skip it",
            Human(hold),
            Human(every)
        ))),
        Some(hold) => Ok(hold),
        None => Ok(hold_for(every)),
    }
}

/// `--spread`: up to half the hold of `--every`, so that a host that waited the longest still
/// finds the tick taken (the hold counts from the first acquire of the tick).
fn spread(args: &Args, hold: Duration) -> Result<Duration, Usage> {
    let Some(spread) = args.spread else {
        return Ok(Duration::ZERO);
    };
    if args.every.is_none() {
        return Err(Usage(
            "--spread needs --every: without a hold for the tick, a host that waited would \
             run the tick again"
                .into(),
        ));
    }
    if spread > hold / 2 {
        return Err(Usage(format!(
            "--spread {} is more than half the hold of the tick ({}): a host that waited that \
             long could miss the tick's hold and run it again",
            Human(spread),
            Human(hold / 2)
        )));
    }
    Ok(spread)
}

/// The lock's kind, from `--limit`, `--standby` (whose tick is `hold`, the hold of `--every`)
/// and `--shared`, or why the first two cannot go together: `--standby` needs `--every` (a
/// tick to stand by for), and a tick is run once, by one host, so `--every` and `--standby`
/// are refused with `--limit` (each of N slots would be kept for the tick, so the first N
/// hosts to fire would each run it). What `--shared` cannot go with is [`kind_fits`]': those
/// are checked after the spread and the servers.
fn kind(args: &Args, hold: Duration) -> Result<LockKind, Usage> {
    let refused = |msg: &str| Err(Usage(msg.into()));
    if args.standby && args.every.is_none() {
        return refused("--standby needs --every: standby hosts wait for one tick of the schedule");
    }
    if args.standby && args.limit.is_some() {
        return refused("--standby cannot be used with --limit: a tick is run once, by one host");
    }
    if args.standbys.is_some() && !args.standby {
        return refused("--standbys needs --standby: it says how many hosts stand by for a tick");
    }
    if args.every.is_some() && args.limit.is_some() {
        return refused(
            "--every cannot be used with --limit: a tick is run once, by one host (with \
             --limit N, N hosts would run each tick)",
        );
    }
    Ok(match (args.limit, args.standby, args.shared) {
        (Some(slots), _, _) => LockKind::Semaphore(slots),
        (None, true, _) => LockKind::Tick {
            length: hold,
            standbys: args.standbys.unwrap_or(DEFAULT_STANDBYS),
        },
        (None, false, true) => LockKind::Shared,
        (None, false, false) => LockKind::Exclusive,
    })
}

/// Whether `--shared` goes with the other options, and the lock's kind with the servers given.
/// `--shared` with `--limit` means nothing (a semaphore's holders share it already); with
/// `--every` or `--standby` every host would run each tick (and the key, held shared for the
/// tick, would refuse every exclusive run meanwhile). A shared lock and a tick need one server
/// (a Sentinel group or a Cluster is one): under Redlock each master would count shared holders
/// of its own, so an exclusive majority could form beside a shared one, and a tick's record is
/// kept on one server. (A semaphore's need is checked with the URLs: [`run_urls`].)
fn kind_fits(kind: LockKind, args: &Args, lock: &Backend) -> Result<(), Usage> {
    let quorum = matches!(lock, Backend::Quorum(_));
    if args.shared {
        let with = if args.limit.is_some() {
            "--limit: a semaphore's holders share it already"
        } else if args.standby {
            "--standby: a tick is run once, by one host"
        } else if args.every.is_some() {
            "--every: a tick is run once, by one host"
        } else if quorum {
            "several Redis masters: shared holders are kept on one server (a Sentinel group or \
             a Cluster is one)"
        } else {
            return Ok(());
        };
        return Err(Usage(format!("--shared cannot be used with {with}")));
    }
    match kind {
        LockKind::Tick { .. } if quorum => Err(Usage(
            "--standby cannot be used with several Redis masters: a tick's record is kept on \
             one server (a Sentinel group or a Cluster is one)"
                .into(),
        )),
        _ => Ok(()),
    }
}

/// How long the key stays after the acquire when the job is quicker: for `--every P`, P less a
/// tenth of it (at least 1 s). Why that margin: the hold must cover the spread of the hosts'
/// firings of one tick (clock offsets, cron's sub-second start fraction), or a late host runs
/// the tick again; and it must end before the holder's own next firing, or every host finds
/// the previous tick's hold and the tick is lost. Firings are delayed far more often than they
/// come early (a loaded host, a paused VM), so most of the period goes to the first; the tenth
/// left covers cron's sub-second drift, a daily job's 23-hour day at a DST change and a monthly
/// job's short February (`--every 30d`).
fn hold_for(every: Duration) -> Duration {
    every.saturating_sub((every / 10).max(Duration::from_secs(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_lists_split_only_before_a_scheme() {
        assert_eq!(split_urls("redis://a"), ["redis://a"]);
        assert_eq!(
            split_urls("redis://a:1,rediss://b,unix:///s.sock,redis+unix:///t?db=1"),
            [
                "redis://a:1",
                "rediss://b",
                "unix:///s.sock",
                "redis+unix:///t?db=1"
            ]
        );
        // Host lists of Sentinel and Cluster URLs keep their commas.
        assert_eq!(
            split_urls("redis+sentinel://h1:26379,h2:26379/name,redis://c"),
            ["redis+sentinel://h1:26379,h2:26379/name", "redis://c"]
        );
        assert_eq!(
            split_urls("redis+cluster://h1:7000,h2:7001"),
            ["redis+cluster://h1:7000,h2:7001"]
        );
        // A comma in a password, or before something that is no scheme, does not split.
        assert_eq!(
            split_urls("redis://:p,w@a,redis://b"),
            ["redis://:p,w@a", "redis://b"]
        );
        assert_eq!(split_urls("redis://a,Redis://b"), ["redis://a,Redis://b"]);
        assert_eq!(split_urls("redis://a,1x://b"), ["redis://a,1x://b"]);
    }

    #[test]
    fn one_two_or_several_masters() {
        let urls = |given: &[&str]| urls(&given.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            urls(&["redis://a", "redis://b,redis://c"]).unwrap(),
            ["redis://a", "redis://b", "redis://c"]
        );
        assert!(urls(&["redis://a,redis://b"]).is_err());
        assert!(urls(&["redis://a", "redis://b"]).is_err());
        assert_eq!(urls(&["redis://a"]).unwrap(), ["redis://a"]);
        let limited = |given: &[&str]| {
            run_urls(
                &given.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                LockKind::Semaphore(2),
            )
        };
        assert!(limited(&["redis://a,redis://b,redis://c"])
            .unwrap_err()
            .0
            .contains("--limit"));
        assert!(limited(&["redis://a"]).is_ok());
    }

    #[test]
    fn every_gives_the_hold_and_refuses_what_would_lose_or_repeat_a_tick() {
        let secs = Duration::from_secs;
        assert_eq!(hold_for(secs(60)), secs(54));
        assert_eq!(hold_for(secs(86_400)), secs(77_760));
        // At least a second of margin for short periods.
        assert_eq!(hold_for(secs(2)), secs(1));
        assert_eq!(hold_for(secs(5)), secs(4));
        let once = Wait::For(Duration::ZERO);
        assert_eq!(hold(None, None, once), Ok(Duration::ZERO));
        assert_eq!(hold(None, Some(secs(5)), once), Ok(secs(5)));
        assert_eq!(hold(Some(secs(60)), None, once), Ok(secs(54)));
        // --min-hold is the knob under --every: it wins, below the period.
        assert_eq!(hold(Some(secs(60)), Some(secs(50)), once), Ok(secs(50)));
        let reaching = hold(Some(secs(60)), Some(secs(60)), once);
        assert!(reaching.unwrap_err().0.contains("shorter than --every"));
        let waiting = hold(Some(secs(60)), None, Wait::For(secs(10)));
        assert!(waiting.unwrap_err().0.contains("--wait"));
        assert!(hold(Some(secs(60)), None, Wait::Forever).is_err());
    }

    #[test]
    fn timeouts_follow_the_ttl_within_bounds() {
        let ms = Duration::from_millis;
        assert_eq!(request_timeout(ms(100)), ms(50));
        assert_eq!(
            request_timeout(Duration::from_secs(30)),
            Duration::from_secs(3)
        );
        assert_eq!(request_timeout(ms(900)), ms(300));
        assert_eq!(node_timeout(ms(100)), ms(10));
        assert_eq!(
            node_timeout(Duration::from_secs(30)),
            Duration::from_secs(1)
        );
        assert_eq!(node_timeout(ms(2000)), ms(200));
    }
}

#[cfg(test)]
mod shared_tests {
    use super::*;
    use crate::cli::{parse_from, Invocation};

    fn plan(args: &[&str]) -> Result<Plan, Usage> {
        let argv = std::iter::once("lockrun").chain(args.iter().copied());
        let Ok(Invocation::Run(args)) = parse_from(argv) else {
            panic!("{args:?} does not parse")
        };
        resolve(&args)
    }

    #[test]
    fn shared_needs_one_server_and_neither_limit_nor_every() {
        let kind = |args: &[&str]| plan(args).unwrap().spec.kind;
        assert_eq!(kind(&["--shared", "k", "true"]), LockKind::Shared);
        assert_eq!(kind(&["k", "true"]), LockKind::Exclusive);
        assert_eq!(kind(&["--limit", "3", "k", "true"]), LockKind::Semaphore(3));
        let tick = kind(&["--every", "1m", "--standby", "k", "true"]);
        let length = Duration::from_secs(54);
        assert_eq!(
            tick,
            LockKind::Tick {
                length,
                standbys: 2
            }
        );
        let three = kind(&["--every", "1m", "--standby", "--standbys", "3", "k", "true"]);
        assert_eq!(
            three,
            LockKind::Tick {
                length,
                standbys: 3
            }
        );
        let refused = |args: &[&str]| plan(args).err().expect("refused").0;
        let limit = refused(&["--shared", "--limit", "2", "k", "true"]);
        assert!(
            limit.starts_with("--shared cannot be used with --limit"),
            "{limit}"
        );
        let standby = refused(&["--shared", "--every", "1m", "--standby", "k", "true"]);
        assert!(standby.contains("--standby"), "{standby}");
        let every = refused(&["--shared", "--every", "1m", "k", "true"]);
        assert!(every.contains("--every"), "{every}");
        let slots = refused(&["--limit", "2", "--every", "1m", "k", "true"]);
        assert!(
            slots.starts_with("--every cannot be used with --limit"),
            "{slots}"
        );
        let alone = refused(&["--every", "1m", "--standbys", "3", "k", "true"]);
        assert!(alone.starts_with("--standbys needs --standby"), "{alone}");
        let masters = "redis://a:1,redis://b:1,redis://c:1";
        let quorum = refused(&["--shared", "--redis", masters, "k", "true"]);
        assert!(quorum.contains("several Redis masters"), "{quorum}");
    }
}
