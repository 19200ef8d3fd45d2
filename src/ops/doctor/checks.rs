//! The verdicts of `lockrun doctor`, from what a server said: no I/O here, so every rule is
//! unit-tested on INFO texts as Redis and Valkey write them.
//!
//! Each check takes what it needs as `Result<_, &str>`: `Err` says why that fact could not be
//! asked (the ACL denies `CONFIG`, the server has no such command), and the check then answers
//! `cannot check` with that reason instead of guessing.

use crate::clock_rate::{Rate, Reading, TOLERANCE};
use crate::lock::probe::LockProbe;
use std::collections::HashMap;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    Info,
    CannotCheck,
    Warn,
    Fail,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Info => "info",
            Verdict::CannotCheck => "cannot check",
            Verdict::Warn => "warn",
            Verdict::Fail => "fail",
        }
    }

    /// What makes doctor exit 1: something to fix. `cannot check` is not: the operator may
    /// have locked the diagnostic commands away on purpose.
    pub fn is_problem(self) -> bool {
        matches!(self, Verdict::Warn | Verdict::Fail)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub check: &'static str,
    pub verdict: Verdict,
    pub detail: String,
}

pub fn finding(check: &'static str, verdict: Verdict, detail: impl Into<String>) -> Finding {
    Finding {
        check,
        verdict,
        detail: detail.into(),
    }
}

/// An `INFO` reply: `field:value` lines (section headers and blank lines skipped).
#[derive(Clone, Debug, Default)]
pub struct Info(HashMap<String, String>);

impl Info {
    pub fn parse(text: &str) -> Info {
        Info(
            text.lines()
                .filter(|l| !l.starts_with('#'))
                .filter_map(|l| l.trim_end().split_once(':'))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    pub fn get(&self, field: &str) -> Option<&str> {
        self.0.get(field).map(String::as_str)
    }

    fn number(&self, field: &str) -> Option<u64> {
        self.get(field)?.parse().ok()
    }
}

/// Which server this is. Valkey also reports a `redis_version` (the Redis it is compatible
/// with), so that alone does not tell them apart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Server {
    pub valkey: bool,
    pub version: String,
}

impl Server {
    pub fn of(info: &Info) -> Option<Server> {
        let valkey =
            info.get("valkey_version").is_some() || info.get("server_name") == Some("valkey");
        let version = if valkey {
            info.get("valkey_version").or(info.get("redis_version"))?
        } else {
            info.get("redis_version")?
        };
        Some(Server {
            valkey,
            version: version.to_string(),
        })
    }

    fn at_least(&self, major: u32, minor: u32) -> bool {
        let mut parts = self
            .version
            .split('.')
            .map(|p| p.parse::<u32>().unwrap_or(0));
        let v = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        v >= (major, minor)
    }

    /// WAITAOF (`--fsync`) came with Redis 7.2 and Valkey 8.0; WAIT (`--acks`) is in every
    /// version lockrun supports. For when `COMMAND INFO` may not be asked.
    pub fn has_waitaof(&self) -> bool {
        if self.valkey {
            self.at_least(8, 0)
        } else {
            self.at_least(7, 2)
        }
    }
}

/// Check 1: Server kind and version.
pub fn server(info: Result<&Info, &str>) -> Finding {
    let info = match info {
        Ok(i) => i,
        Err(why) => return finding("server", Verdict::CannotCheck, why),
    };
    let Some(server) = Server::of(info) else {
        return finding("server", Verdict::CannotCheck, "INFO names no version");
    };
    let mode = info.get("redis_mode").or(info.get("server_mode"));
    if mode == Some("sentinel") {
        return finding(
            "server",
            Verdict::Fail,
            "this is a Sentinel, not a data server: give lockrun a redis+sentinel:// URL naming it",
        );
    }
    let name = if server.valkey {
        format!(
            "Valkey {} (reports redis_version {})",
            server.version,
            info.get("redis_version").unwrap_or("?")
        )
    } else {
        format!("Redis {}", server.version)
    };
    finding(
        "server",
        Verdict::Info,
        format!("{name}, {} mode", mode.unwrap_or("unknown")),
    )
}

/// Check 2: Role and replicas: lockrun writes every lock, so it must talk to a primary.
pub fn role(info: Result<&Info, &str>) -> Finding {
    let info = match info {
        Ok(i) => i,
        Err(why) => return finding("role", Verdict::CannotCheck, why),
    };
    match info.get("role") {
        Some("master") => match info.number("connected_slaves").unwrap_or(0) {
            0 => finding(
                "role",
                Verdict::Info,
                "primary without replicas: a crash loses the lock state unless persisted (see \
                 persistence); --acks needs replicas",
            ),
            n => finding(
                "role",
                Verdict::Ok,
                format!("primary with {n} replica(s) connected"),
            ),
        },
        Some("slave") | Some("replica") => {
            let of = match (info.get("master_host"), info.get("master_port")) {
                (Some(h), Some(p)) => format!(" of {h}:{p}"),
                _ => String::new(),
            };
            finding(
                "role",
                Verdict::Fail,
                format!(
                    "a replica{of}: every lock is a write, and a replica refuses writes; point \
                     lockrun at the primary, or at the Sentinels (redis+sentinel://)"
                ),
            )
        }
        other => finding(
            "role",
            Verdict::CannotCheck,
            format!("INFO replication says role {}", other.unwrap_or("(none)")),
        ),
    }
}

/// Check 3: Persistence. `save` and `appendfsync` come from `CONFIG GET` (INFO does not show them).
pub fn persistence(
    info: Result<&Info, &str>,
    save: Result<&str, &str>,
    appendfsync: Result<&str, &str>,
) -> Finding {
    let info = match info {
        Ok(i) => i,
        Err(why) => return finding("persistence", Verdict::CannotCheck, why),
    };
    let (mut verdict, mut detail) = match (info.get("aof_enabled"), save) {
        (Some("1"), _) => match appendfsync {
            Ok("always") => (
                Verdict::Ok,
                "AOF, appendfsync always: a crash loses no acknowledged lock write".to_string(),
            ),
            Ok("everysec") => (
                Verdict::Ok,
                "AOF, appendfsync everysec: a crash loses at most about the last second of lock writes"
                    .into(),
            ),
            Ok(other) => (
                Verdict::Info,
                format!(
                    "AOF, appendfsync {other}: the OS flushes when it likes, a crash may lose \
                     recent lock writes (everysec bounds that to a second)"
                ),
            ),
            Err(why) => (
                Verdict::Ok,
                format!("AOF on (appendfsync: cannot check, {why})"),
            ),
        },
        (Some(_), Ok(save)) if save.trim().is_empty() => (
            Verdict::Warn,
            "no persistence (no RDB snapshots, no AOF): a restart forgets every lock, and another \
             lockrun may take one whose job still runs until that job's next renewal fails; \
             fencing numbers still increase (they resume above the server clock)"
                .into(),
        ),
        (Some(_), Ok(save)) => (
            Verdict::Info,
            format!(
                "RDB snapshots only (save {save}): a crash loses the locks taken since the last \
                 snapshot; appendonly yes narrows that to a second"
            ),
        ),
        (Some(_), Err(why)) => (
            Verdict::CannotCheck,
            format!("AOF off; RDB snapshots unknown: {why}"),
        ),
        (None, _) => (Verdict::CannotCheck, "INFO shows no aof_enabled".into()),
    };
    if info.get("rdb_last_bgsave_status") == Some("err") {
        verdict = Verdict::Warn;
        detail.push_str(
            "; the last RDB save failed: with stop-writes-on-bgsave-error the server refuses \
             every write, locks included (MISCONF), until it saves again",
        );
    }
    finding("persistence", verdict, detail)
}

/// Check 4: Eviction: lock keys carry a TTL, so both `volatile-*` and `allkeys-*` may evict a held lock.
pub fn eviction(info: Result<&Info, &str>) -> Finding {
    let info = match info {
        Ok(i) => i,
        Err(why) => return finding("eviction", Verdict::CannotCheck, why),
    };
    let Some(policy) = info.get("maxmemory_policy") else {
        return finding(
            "eviction",
            Verdict::CannotCheck,
            "INFO shows no maxmemory_policy",
        );
    };
    let limit = info.number("maxmemory").unwrap_or(0);
    let evicts = policy.starts_with("volatile-") || policy.starts_with("allkeys-");
    match (policy, evicts, limit) {
        ("noeviction", _, _) => finding(
            "eviction",
            Verdict::Ok,
            "noeviction: a full server refuses writes (lockrun reports it unavailable) and never \
             evicts a held lock",
        ),
        (_, true, 0) => finding(
            "eviction",
            Verdict::Info,
            format!(
                "{policy}, but maxmemory is 0 (no limit): nothing is ever evicted; with a limit \
                 a held lock could be"
            ),
        ),
        (_, true, _) => finding(
            "eviction",
            Verdict::Warn,
            format!(
                "{policy} with maxmemory {}: a full server may evict a held lock (lock keys \
                 carry a TTL) and hand it to a second holder; use noeviction",
                info.get("maxmemory_human")
                    .map_or(limit.to_string(), str::to_string)
            ),
        ),
        _ => finding("eviction", Verdict::Info, policy.to_string()),
    }
}

/// Check 5a: `--acks`: WAIT, and replicas to acknowledge. `wait`: whether the server offers WAIT.
pub fn acks(wait: Result<bool, &str>, info: Result<&Info, &str>) -> Finding {
    let replicas = info.ok().and_then(|i| i.number("connected_slaves"));
    match (wait, replicas) {
        (Err(why), _) => finding("acks", Verdict::CannotCheck, why),
        (Ok(false), _) => finding(
            "acks",
            Verdict::Info,
            "the server offers no WAIT: --acks would be refused",
        ),
        (Ok(true), Some(n)) if n > 0 => finding(
            "acks",
            Verdict::Ok,
            format!("--acks 1..{n} usable (WAIT; {n} replica(s) connected)"),
        ),
        (Ok(true), Some(_)) => finding(
            "acks",
            Verdict::Info,
            "WAIT offered, but --acks needs connected replicas and there are none",
        ),
        (Ok(true), None) => finding(
            "acks",
            Verdict::Info,
            "WAIT offered; replicas unknown (INFO not allowed)",
        ),
    }
}

/// Check 5b: `--fsync`: WAITAOF, and an append-only file to sync.
pub fn fsync(waitaof: Result<bool, &str>, info: Result<&Info, &str>) -> Finding {
    let aof = info
        .ok()
        .and_then(|i| i.get("aof_enabled"))
        .map(|a| a == "1");
    match (waitaof, aof) {
        (Err(why), _) => finding("fsync", Verdict::CannotCheck, why),
        (Ok(false), _) => finding(
            "fsync",
            Verdict::Info,
            "--fsync needs WAITAOF (Redis 7.2+, Valkey 8+), which this server does not offer",
        ),
        (Ok(true), Some(true)) => finding(
            "fsync",
            Verdict::Ok,
            "--fsync usable (WAITAOF, appendonly yes)",
        ),
        (Ok(true), Some(false)) => finding(
            "fsync",
            Verdict::Info,
            "WAITAOF offered, but --fsync needs appendonly yes",
        ),
        (Ok(true), None) => finding(
            "fsync",
            Verdict::Info,
            "WAITAOF offered; appendonly unknown (INFO not allowed)",
        ),
    }
}

/// Check 6: A Cluster node behind a plain URL: keys whose slot lives elsewhere would be refused.
/// Only asked of URLs that are not `redis+cluster://`.
pub fn cluster_mode(info: Result<&Info, &str>) -> Finding {
    let info = match info {
        Ok(i) => i,
        Err(why) => return finding("cluster", Verdict::CannotCheck, why),
    };
    match info.get("cluster_enabled") {
        None => finding(
            "cluster",
            Verdict::CannotCheck,
            "INFO shows no cluster_enabled",
        ),
        Some("1") => finding(
            "cluster",
            Verdict::Fail,
            "this server is a Cluster node, but the URL is not redis+cluster://: locks whose \
             slot another node serves would be refused (MOVED)",
        ),
        _ => finding(
            "cluster",
            Verdict::Info,
            "not a Cluster: this server holds every key",
        ),
    }
}

/// The nearest-rank percentile `p` (0..=100) of `samples`; zero for none.
pub fn percentile(samples: &[Duration], p: f64) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Above this, a round trip is a large share of the default renewal interval (TTL/3 = 10 s)
/// and of the default request timeout (TTL/3 within 50 ms..3 s).
pub const SLOW: Duration = Duration::from_secs(1);

/// Check 7: Round-trip latency.
pub fn latency(samples: Result<&[Duration], &str>) -> Finding {
    let samples = match samples {
        Ok(s) if !s.is_empty() => s,
        Ok(_) => return finding("latency", Verdict::CannotCheck, "no round trip measured"),
        Err(why) => return finding("latency", Verdict::CannotCheck, why),
    };
    let (p50, p99) = (percentile(samples, 50.0), percentile(samples, 99.0));
    let figures = format!(
        "p50 {}, p99 {} over {} round trip{}",
        ms(p50),
        ms(p99),
        samples.len(),
        if samples.len() == 1 { "" } else { "s" }
    );
    if p99 > SLOW {
        finding(
            "latency",
            Verdict::Warn,
            format!(
                "{figures}: a large share of the renewal interval (TTL/3) and of the request \
                 timeout; use a longer --ttl and --node-timeout, or a nearer server"
            ),
        )
    } else {
        finding("latency", Verdict::Ok, figures)
    }
}

/// One `TIME` round trip: the server's clock against ours, read when the request was sent.
#[derive(Clone, Copy, Debug)]
pub struct ClockSample {
    pub sent_us: i64,
    /// The send on the monotonic clock, for the rate.
    pub sent: tokio::time::Instant,
    pub rtt: Duration,
    pub server_us: i64,
}

impl ClockSample {
    /// Server minus local, taking the server to have read its clock halfway through the trip.
    pub fn offset_us(&self) -> i64 {
        self.server_us - (self.sent_us + self.rtt.as_micros() as i64 / 2)
    }

    /// As a reading of the server's clock against our monotonic one, for the rate.
    pub fn reading(&self) -> Option<Reading> {
        Some(Reading {
            source: 0,
            server_us: u64::try_from(self.server_us).ok()?,
            sent: self.sent,
            received: self.sent + self.rtt,
        })
    }
}

/// The fastest of `samples` (the tightest bounds).
pub fn fastest(samples: &[ClockSample]) -> Option<&ClockSample> {
    samples.iter().min_by_key(|s| s.rtt)
}

/// How long the rate check waits between its two readings of the server's clock: long enough
/// for round trips of `rtt` to bound the rate to half of [`TOLERANCE`], at least 1 s; `None`
/// when that would be more than [`RATE_WINDOW_MAX`] (the round trips are too slow to tell).
pub fn rate_window(rtt: Duration) -> Option<Duration> {
    let needed = rtt.mul_f64(2.0 / TOLERANCE);
    (needed <= RATE_WINDOW_MAX).then(|| needed.max(Duration::from_secs(1)))
}

/// The longest the rate check waits between its readings.
pub const RATE_WINDOW_MAX: Duration = Duration::from_secs(3);

/// Check 9: the rate of our monotonic clock against the server's clock, over two readings a
/// window apart ([`crate::clock_rate`]). lockrun counts a lease on its monotonic clock while
/// Redis expires it by its own; a clock certainly off by more than 1 % is a warning.
pub fn clock_rate(rate: Result<Rate, &str>) -> Finding {
    let rate = match rate {
        Ok(r) => r,
        Err(why) => return finding("clock-rate", Verdict::CannotCheck, why),
    };
    let figures = format!(
        "local clock runs at {:.4} × the server's (±{:.4})",
        rate.estimate,
        rate.error()
    );
    if rate.is_off() {
        let why = if rate.factor() < 1.0 {
            "slower than the 5 % lockrun's margin absorbs: a run counts its lease at the \
             measured rate from its first renewal on, but a job cut off before that may outlive \
             its lease"
        } else if rate.estimate < 1.0 {
            "slow, within the 5 % lockrun's margin absorbs, but NTP keeps a clock within 0.05 %"
        } else {
            "fast: lockrun stops jobs early by the server's clock, never late"
        };
        return finding(
            "clock-rate",
            Verdict::Warn,
            format!("{figures}: {why}; sync the clocks (NTP)"),
        );
    }
    if rate.error() > TOLERANCE {
        return finding(
            "clock-rate",
            Verdict::CannotCheck,
            format!("{figures}: the round trips were too slow to tell 1 %"),
        );
    }
    finding("clock-rate", Verdict::Ok, figures)
}

/// Above this the times people read (a holder's `started=` against now, history times from
/// the server's clock) disagree visibly.
pub const SKEW: Duration = Duration::from_millis(500);

/// Check 8: Our clock against the server's, from the sample with the shortest round trip (the
/// tightest bound: the true offset is within half its round trip).
pub fn clock(samples: Result<&[ClockSample], &str>) -> Finding {
    let best = match samples {
        Ok(s) => fastest(s),
        Err(why) => return finding("clock", Verdict::CannotCheck, why),
    };
    let Some(best) = best else {
        return finding("clock", Verdict::CannotCheck, "no TIME answer");
    };
    // The true offset is anywhere within half the round trip of the estimate: with round trips
    // this slow, a skew of SKEW can be neither shown nor ruled out.
    if best.rtt / 2 > SKEW {
        return finding(
            "clock",
            Verdict::CannotCheck,
            format!(
                "the fastest TIME round trip took {}: too slow to compare the clocks to within {}",
                ms(best.rtt),
                ms(SKEW)
            ),
        );
    }
    let offset = best.offset_us();
    let size = Duration::from_micros(offset.unsigned_abs());
    let side = if offset > 0 { "behind" } else { "ahead of" };
    let figures = format!(
        "local clock {} {side} the server's (±{})",
        ms(size),
        ms(best.rtt / 2)
    );
    if size > SKEW {
        finding(
            "clock",
            Verdict::Warn,
            format!(
                "{figures}: lockrun's safety never compares clocks (fences and queues use the \
                 server's), but the times operators read do (a holder's started=, history); \
                 sync the clocks (NTP)"
            ),
        )
    } else {
        finding("clock", Verdict::Ok, figures)
    }
}

/// `0.12ms`, `12ms`, `1500ms`.
fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms < 10.0 {
        format!("{ms:.2}ms")
    } else {
        format!("{ms:.0}ms")
    }
}

/// What lockrun needs a command for, and so how bad it is to be without it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Locking itself: `EVAL`, the commands inside the lock scripts, `SUBSCRIBE` for `--wait`.
    Lock,
    /// Recording runs (`XADD`, called with `pcall`: lockrun runs fine without it).
    History,
    /// The operators' commands (`history`, `list`), which may well use another user.
    Operator,
    /// Sending scripts by SHA-1 (`EVALSHA`): without it every script goes whole by `EVAL`
    /// (one refused request more per run).
    Speed,
}

/// The key the ACL checks are asked about (never written: `ACL DRYRUN` and
/// `redis.acl_check_cmd` only check), and a helper key of lockrun's beside it.
pub const PROBE_KEY: &str = "lockrun-doctor-probe";

/// `K`: the command is checked once with the lock key and once with a helper key; `C`: the
/// wake-up channel.
const NEEDED: &[(&str, &[&str], Need)] = &[
    ("EVAL", &["return 1", "1", "K"], Need::Lock),
    (
        "EVALSHA",
        &["e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "1", "K"],
        Need::Speed,
    ),
    ("SUBSCRIBE", &["C"], Need::Lock),
    ("PUBLISH", &["C", "m"], Need::Lock),
    ("DEL", &["K"], Need::Lock),
    ("EXISTS", &["K"], Need::Lock),
    ("GET", &["K"], Need::Lock),
    ("PEXPIRE", &["K", "1000"], Need::Lock),
    ("PTTL", &["K"], Need::Lock),
    ("SET", &["K", "v"], Need::Lock),
    ("TIME", &[], Need::Lock),
    ("TYPE", &["K"], Need::Lock),
    ("ZADD", &["K", "1", "m"], Need::Lock),
    ("ZCARD", &["K"], Need::Lock),
    ("ZCOUNT", &["K", "-inf", "+inf"], Need::Lock),
    ("ZRANGE", &["K", "0", "0"], Need::Lock),
    ("ZRANGEBYSCORE", &["K", "-inf", "+inf"], Need::Lock),
    ("ZRANK", &["K", "m"], Need::Lock),
    ("ZREM", &["K", "m"], Need::Lock),
    ("ZREMRANGEBYSCORE", &["K", "-inf", "+inf"], Need::Lock),
    ("ZSCORE", &["K", "m"], Need::Lock),
    ("XADD", &["K", "*", "f", "v"], Need::History),
    ("XREVRANGE", &["K", "+", "-"], Need::Operator),
    ("SCAN", &["0"], Need::Operator),
];

/// One command line to check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AclProbe {
    pub need: Need,
    /// The command as lockrun sends it (`SPUBLISH` on a Cluster), then its arguments.
    pub line: Vec<String>,
    /// The key or channel it names, if any (for the report).
    pub on: Option<String>,
}

/// Every command line the ACL check asks about. On a Cluster the wake-up hints are sharded
/// (`SPUBLISH`/`SSUBSCRIBE`).
pub fn probes(cluster: bool, helper: &str, channel: &str) -> Vec<AclProbe> {
    let mut out = Vec::new();
    for (command, args, need) in NEEDED {
        let command = match (*command, cluster) {
            ("SUBSCRIBE", true) => "SSUBSCRIBE",
            ("PUBLISH", true) => "SPUBLISH",
            (c, _) => c,
        };
        let keys: &[&str] = if args.contains(&"K") {
            &[PROBE_KEY, helper]
        } else if args.contains(&"C") {
            &[channel]
        } else {
            &[""]
        };
        for key in keys {
            let mut line = vec![command.to_string()];
            line.extend(args.iter().map(|a| match *a {
                "K" | "C" => key.to_string(),
                a => a.to_string(),
            }));
            out.push(AclProbe {
                need: *need,
                line,
                on: (!key.is_empty()).then(|| key.to_string()),
            });
        }
    }
    out
}

/// What the ACL says about one [`AclProbe`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AclVerdict {
    Allowed,
    Denied,
    /// The server does not know the command (renamed or disabled, or too old).
    Unknown,
}

/// Check 9: The ACL verdicts: one finding per kind of need that is not met, or one `ok`.
/// `who`: `user 'NAME'`, or `this user` when ACL WHOAMI is denied; `how`: which method
/// answered (`ACL DRYRUN`, `redis.acl_check_cmd`).
pub fn acl(who: &str, answers: &[(AclProbe, AclVerdict)], how: &str) -> Vec<Finding> {
    let missing = |need: Need, verdict: AclVerdict| -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        let mut commands: Vec<&str> = answers
            .iter()
            .filter(|(p, a)| p.need == need && *a == verdict)
            .map(|(p, _)| p.line[0].as_str())
            .collect();
        commands.dedup();
        for command in commands {
            let all: Vec<&(AclProbe, AclVerdict)> = answers
                .iter()
                .filter(|(p, _)| p.line[0] == command)
                .collect();
            let bad: Vec<&(AclProbe, AclVerdict)> =
                all.iter().copied().filter(|(_, a)| *a == verdict).collect();
            if bad.len() == all.len() {
                names.push(command.to_string());
            } else {
                let on: Vec<&str> = bad.iter().filter_map(|(p, _)| p.on.as_deref()).collect();
                names.push(format!("{command} on {}", on.join(", ")));
            }
        }
        names
    };
    let mut out = Vec::new();
    let denied = missing(Need::Lock, AclVerdict::Denied);
    let unknown = missing(Need::Lock, AclVerdict::Unknown);
    if !denied.is_empty() || !unknown.is_empty() {
        let mut parts = Vec::new();
        if !denied.is_empty() {
            parts.push(format!("{who} may not run {}", denied.join(", ")));
        }
        if !unknown.is_empty() {
            parts.push(format!(
                "the server does not offer {} (renamed or disabled?)",
                unknown.join(", ")
            ));
        }
        out.push(finding(
            "acl",
            Verdict::Fail,
            format!(
                "{}: lockrun needs them to lock (docs/availability.md: ACL permissions)",
                parts.join("; ")
            ),
        ));
    }
    let history = missing(Need::History, AclVerdict::Denied);
    if !history.is_empty() {
        out.push(finding(
            "acl",
            Verdict::Warn,
            format!(
                "{who} may not run {}: runs are not recorded for lockrun history \
                 (locking works without)",
                history.join(", ")
            ),
        ));
    }
    let speed = missing(Need::Speed, AclVerdict::Denied);
    let no_speed = missing(Need::Speed, AclVerdict::Unknown);
    // Said only where EVAL is there to send the scripts instead.
    let eval = answers
        .iter()
        .all(|(p, a)| p.line[0] != "EVAL" || *a == AclVerdict::Allowed);
    if !no_speed.is_empty() && eval {
        out.push(finding(
            "acl",
            Verdict::Info,
            format!(
                "the server does not offer {} (renamed or disabled?): lockrun sends its \
                 scripts whole by EVAL instead",
                no_speed.join(", ")
            ),
        ));
    }
    if !speed.is_empty() {
        out.push(finding(
            "acl",
            Verdict::Info,
            format!(
                "{who} may not run {}: lockrun sends its scripts whole by EVAL instead (one \
                 refused request more per run; add +evalsha)",
                speed.join(", ")
            ),
        ));
    }
    let operator = missing(Need::Operator, AclVerdict::Denied);
    if !operator.is_empty() {
        out.push(finding(
            "acl",
            Verdict::Info,
            format!(
                "{who} may not run {}: lockrun history and list need them (with this \
                 user)",
                operator.join(", ")
            ),
        ));
    }
    if out.is_empty() {
        out.push(finding(
            "acl",
            Verdict::Ok,
            format!(
                "{who} may run every command lockrun uses on {PROBE_KEY} and its helper \
                 keys ({how})"
            ),
        ));
    }
    out
}

/// The Cluster hash slot of `key` (CRC16-XMODEM of the key, or of its `{hash tag}`, mod
/// 16384), as the servers compute it: to put the lock probe on a given primary.
pub fn key_slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let hashed = match bytes.iter().position(|&b| b == b'{') {
        Some(open) => match bytes[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &bytes[open + 1..open + 1 + len],
            _ => bytes,
        },
        None => bytes,
    };
    let mut crc: u16 = 0;
    for &b in hashed {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// The key of the lock probe: `lockrun:doctor:{<random>}`, under lockrun's reserved prefix (no
/// lock of a user's can have that name, and an ACL that grants lockrun `~lockrun:*` covers it
/// and its fencing counter). On a Cluster primary serving `slots` (inclusive ranges), a
/// suffix puts the hash tag in one of them; None if none is found.
pub fn probe_key(random: &str, slots: Option<&[(u16, u16)]>) -> Option<String> {
    let Some(slots) = slots else {
        return Some(format!("lockrun:doctor:{{{random}}}"));
    };
    // A primary with one slot of 16384 needs some 16384 tries on average.
    (0..1_000_000).find_map(|n| {
        let tag = format!("{random}-{n}");
        let slot = key_slot(&tag);
        slots
            .iter()
            .any(|(start, end)| (*start..=*end).contains(&slot))
            .then(|| format!("lockrun:doctor:{{{tag}}}"))
    })
}

/// Check 10: the lock probe ([`LockProbe`]): a lock taken and released as a run does, both
/// ways a run sends its scripts. `fail` where a run fails, with the run's own words.
pub fn lock(probe: &LockProbe) -> Vec<Finding> {
    let left = if probe.cleanup.is_ok() {
        "; nothing left behind"
    } else {
        ""
    };
    let worked = |how: &str| {
        finding(
            "lock",
            Verdict::Ok,
            format!(
                "took and released a probe lock ({}) as runs do, {how}{left}",
                probe.key
            ),
        )
    };
    let mut out = vec![match (&probe.first, &probe.second) {
        (Err(why), _) => finding(
            "lock",
            Verdict::Fail,
            format!("a run fails here now: {why}"),
        ),
        // A first cycle by EVALSHA, a second by EVAL that failed: runs lock while the server
        // keeps the scripts cached.
        (Ok(true), Some((false, Err(why)))) => finding(
            "lock",
            Verdict::Warn,
            format!(
                "runs lock now (by EVALSHA: the server has lockrun's scripts), but once it \
                 has lost them (a restart, a failover, SCRIPT FLUSH) every run fails: {why}"
            ),
        ),
        // The next run goes the way this cycle went.
        (Ok(_), Some((_, Err(why)))) => finding(
            "lock",
            Verdict::Fail,
            format!("a first lock worked (by EVAL), but runs from now on fail: {why}"),
        ),
        (Ok(false), Some((true, Ok(false)))) => worked(
            "by EVAL only: the server refuses EVALSHA (renamed or denied), so each run sends \
             its scripts whole",
        ),
        _ => worked("by EVALSHA and EVAL (as after a restart)"),
    }];
    if let Err(why) = &probe.cleanup {
        out.push(finding(
            "lock",
            Verdict::Warn,
            format!(
                "the probe's keys were not deleted ({why}): delete {} (doctor's own; the lock \
                 key also expires by itself)",
                probe.left.join(" ")
            ),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const REDIS_INFO: &str = "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n\r\n\
        # Memory\r\nmaxmemory:0\r\nmaxmemory_human:0B\r\nmaxmemory_policy:noeviction\r\n\
        # Persistence\r\naof_enabled:0\r\nrdb_last_bgsave_status:ok\r\n\
        # Replication\r\nrole:master\r\nconnected_slaves:0\r\n# Cluster\r\ncluster_enabled:0\r\n";

    const VALKEY_INFO: &str = "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\n\
        valkey_version:8.1.8\r\nredis_mode:standalone\r\n";

    fn info(extra: &str) -> Info {
        Info::parse(&format!("{REDIS_INFO}{extra}"))
    }

    #[test]
    fn info_is_parsed_and_valkey_told_from_redis() {
        let i = Info::parse(REDIS_INFO);
        assert_eq!(i.get("redis_version"), Some("7.0.15"));
        assert_eq!(i.get("# Server"), None);
        let redis = Server::of(&i).unwrap();
        assert!(!redis.valkey && !redis.has_waitaof());
        let valkey = Server::of(&Info::parse(VALKEY_INFO)).unwrap();
        assert_eq!(valkey.version, "8.1.8");
        assert!(valkey.valkey && valkey.has_waitaof());
        let f = server(Ok(&Info::parse(VALKEY_INFO)));
        assert_eq!(f.verdict, Verdict::Info);
        assert!(f.detail.starts_with("Valkey 8.1.8"), "{}", f.detail);
        assert!(Server::of(&Info::parse("redis_version:7.2.0\n"))
            .unwrap()
            .has_waitaof());
        let sentinel = server(Ok(&Info::parse(
            "redis_version:7.0.15\nredis_mode:sentinel\n",
        )));
        assert_eq!(sentinel.verdict, Verdict::Fail);
    }

    #[test]
    fn a_replica_fails_a_lonely_primary_is_told() {
        assert_eq!(role(Ok(&info(""))).verdict, Verdict::Info);
        let replica = Info::parse("role:slave\nmaster_host:10.0.0.1\nmaster_port:6379\n");
        let f = role(Ok(&replica));
        assert_eq!(f.verdict, Verdict::Fail);
        assert!(f.detail.contains("10.0.0.1:6379"), "{}", f.detail);
        let two = Info::parse("role:master\nconnected_slaves:2\n");
        assert_eq!(role(Ok(&two)).verdict, Verdict::Ok);
        assert_eq!(acks(Ok(true), Ok(&two)).verdict, Verdict::Ok);
        assert_eq!(acks(Ok(true), Ok(&info(""))).verdict, Verdict::Info);
        assert_eq!(role(Err("INFO denied")).verdict, Verdict::CannotCheck);
    }

    #[test]
    fn persistence_verdicts() {
        let none = persistence(Ok(&info("")), Ok(""), Ok("everysec"));
        assert_eq!(none.verdict, Verdict::Warn);
        assert!(none.detail.contains("fencing numbers still increase"));
        let aof = info("aof_enabled:1\n");
        assert_eq!(
            persistence(Ok(&aof), Ok(""), Ok("always")).verdict,
            Verdict::Ok
        );
        assert_eq!(
            persistence(Ok(&aof), Ok(""), Ok("everysec")).verdict,
            Verdict::Ok
        );
        assert_eq!(
            persistence(Ok(&aof), Ok(""), Ok("no")).verdict,
            Verdict::Info
        );
        let rdb = persistence(Ok(&info("")), Ok("3600 1 300 100"), Ok("everysec"));
        assert_eq!(rdb.verdict, Verdict::Info);
        let unknown = persistence(Ok(&info("")), Err("CONFIG denied"), Err("CONFIG denied"));
        assert_eq!(unknown.verdict, Verdict::CannotCheck);
        assert!(unknown.detail.contains("CONFIG denied"));
        let failing = persistence(
            Ok(&info("rdb_last_bgsave_status:err\n")),
            Ok("3600 1"),
            Ok("everysec"),
        );
        assert_eq!(failing.verdict, Verdict::Warn);
        assert!(failing.detail.contains("MISCONF"));
    }

    #[test]
    fn eviction_policy_to_verdict() {
        let with = |policy: &str, max: u64| {
            eviction(Ok(&Info::parse(&format!(
                "maxmemory:{max}\nmaxmemory_human:100.00M\nmaxmemory_policy:{policy}\n"
            ))))
            .verdict
        };
        assert_eq!(with("noeviction", 100), Verdict::Ok);
        assert_eq!(with("volatile-lru", 104_857_600), Verdict::Warn);
        assert_eq!(with("allkeys-lfu", 104_857_600), Verdict::Warn);
        assert_eq!(with("volatile-ttl", 0), Verdict::Info);
        assert_eq!(with("allkeys-random", 0), Verdict::Info);
        assert_eq!(eviction(Err("x")).verdict, Verdict::CannotCheck);
    }

    #[test]
    fn fsync_needs_waitaof_and_an_aof() {
        assert_eq!(fsync(Ok(false), Ok(&info(""))).verdict, Verdict::Info);
        assert_eq!(fsync(Ok(true), Ok(&info(""))).verdict, Verdict::Info);
        let aof = info("aof_enabled:1\n");
        assert_eq!(fsync(Ok(true), Ok(&aof)).verdict, Verdict::Ok);
    }

    #[test]
    fn a_cluster_node_behind_a_plain_url_fails() {
        assert_eq!(cluster_mode(Ok(&info(""))).verdict, Verdict::Info);
        let node = Info::parse("cluster_enabled:1\n");
        assert_eq!(cluster_mode(Ok(&node)).verdict, Verdict::Fail);
        // Not a Redis INFO at all (a fake's "OK"): nothing to say.
        let fake = Info::parse("OK");
        assert_eq!(cluster_mode(Ok(&fake)).verdict, Verdict::CannotCheck);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let ms = |v: &[u64]| {
            v.iter()
                .map(|m| Duration::from_millis(*m))
                .collect::<Vec<_>>()
        };
        let twenty = ms(&(1..=20).rev().collect::<Vec<_>>());
        assert_eq!(percentile(&twenty, 50.0), Duration::from_millis(10));
        assert_eq!(percentile(&twenty, 99.0), Duration::from_millis(20));
        assert_eq!(percentile(&ms(&[7]), 99.0), Duration::from_millis(7));
        assert_eq!(percentile(&[], 50.0), Duration::ZERO);
        assert_eq!(latency(Ok(&twenty)).verdict, Verdict::Ok);
        let slow = ms(&[1, 1, 1, 1500]);
        let f = latency(Ok(&slow));
        assert_eq!(f.verdict, Verdict::Warn);
        assert!(
            f.detail.starts_with("p50 1.00ms, p99 1500ms"),
            "{}",
            f.detail
        );
    }

    #[test]
    fn clock_offset_counts_half_the_round_trip() {
        let s = |sent: i64, rtt_ms: u64, server: i64| ClockSample {
            sent_us: sent,
            sent: tokio::time::Instant::now(),
            rtt: Duration::from_millis(rtt_ms),
            server_us: server,
        };
        // Sent at 0, 10 ms there and back, the server read 5 ms: in step.
        assert_eq!(s(0, 10, 5_000).offset_us(), 0);
        let samples = [s(0, 400, 900_000), s(1_000_000, 2, 1_701_000)];
        let f = clock(Ok(&samples));
        assert_eq!(f.verdict, Verdict::Warn, "{}", f.detail);
        assert!(
            f.detail.starts_with("local clock 700ms behind"),
            "{}",
            f.detail
        );
        let near = [s(0, 2, 1_000)];
        assert_eq!(clock(Ok(&near)).verdict, Verdict::Ok);
        // A server answering 2.5 s late: 1250 ms "ahead" within ±1250 ms says nothing.
        let slow = clock(Ok(&[s(0, 2500, 2_500_000)]));
        assert_eq!(slow.verdict, Verdict::CannotCheck, "{}", slow.detail);
        assert!(slow.detail.contains("too slow"), "{}", slow.detail);
        assert_eq!(clock(Err("TIME denied")).verdict, Verdict::CannotCheck);
    }

    #[test]
    fn clock_rate_check() {
        let rate = |estimate: f64, error: f64| Rate {
            estimate,
            low: estimate - error,
            high: estimate + error,
        };
        let ok = clock_rate(Ok(rate(1.0001, 0.0002)));
        assert_eq!(ok.verdict, Verdict::Ok, "{}", ok.detail);
        assert!(
            ok.detail.contains("1.0001 × the server's (±0.0002)"),
            "{}",
            ok.detail
        );
        // Beyond what the margin absorbs, within it, and fast: each a warning that says which.
        let slow = clock_rate(Ok(rate(0.9, 0.001)));
        assert_eq!(slow.verdict, Verdict::Warn);
        assert!(
            slow.detail.contains("may outlive its lease"),
            "{}",
            slow.detail
        );
        let absorbed = clock_rate(Ok(rate(0.98, 0.001)));
        assert_eq!(absorbed.verdict, Verdict::Warn);
        assert!(
            absorbed.detail.contains("within the 5 %"),
            "{}",
            absorbed.detail
        );
        let fast = clock_rate(Ok(rate(1.1, 0.001)));
        assert!(fast.detail.contains("never late"), "{}", fast.detail);
        // 3 % off ± 2.5 %: neither fine nor certainly off.
        let vague = clock_rate(Ok(rate(0.97, 0.025)));
        assert_eq!(vague.verdict, Verdict::CannotCheck, "{}", vague.detail);
        assert_eq!(clock_rate(Err("TIME denied")).verdict, Verdict::CannotCheck);
        // The window: 1 s for fast round trips, longer for slower ones, none beyond 15 ms.
        let ms = Duration::from_millis;
        assert_eq!(rate_window(ms(1)), Some(ms(1000)));
        assert_eq!(rate_window(ms(10)), Some(ms(2000)));
        assert_eq!(rate_window(ms(16)), None);
    }

    #[test]
    fn acl_probes_cover_every_command_of_the_scripts() {
        // Every command any lock script calls (src/lock/scripts/*.lua) is asked about, so a
        // script that starts calling a new command cannot slip past doctor.
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/lock/scripts");
        let mut called = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "lua") {
                let text = std::fs::read_to_string(&path).unwrap();
                for (_, rest) in text
                    .match_indices("call('")
                    .map(|(i, _)| text.split_at(i + 6))
                {
                    called.push(rest.split('\'').next().unwrap().to_string());
                }
            }
        }
        assert!(called.len() > 10, "{called:?}");
        let asked: Vec<&str> = NEEDED.iter().map(|(c, _, _)| *c).collect();
        for c in &called {
            assert!(asked.contains(&c.as_str()), "{c} is not checked");
        }
        let helper = "lockrun:fence:{lockrun-doctor-probe}";
        let plain = probes(false, helper, "lockrun:wake:{lockrun-doctor-probe}");
        assert!(plain.contains(&AclProbe {
            need: Need::Lock,
            line: vec!["GET".into(), helper.into()],
            on: Some(helper.into()),
        }));
        let sharded = probes(true, helper, "ch");
        assert!(sharded.iter().any(|p| p.line == ["SPUBLISH", "ch", "m"]));
        assert!(!sharded.iter().any(|p| p.line[0] == "PUBLISH"));
    }

    #[test]
    fn acl_findings_name_what_is_missing() {
        let all = probes(false, "h", "c");
        let answer = |deny: &[&str], only_on: Option<&str>| -> Vec<(AclProbe, AclVerdict)> {
            all.iter()
                .map(|p| {
                    let hit = deny.contains(&p.line[0].as_str())
                        && only_on.is_none_or(|k| p.on.as_deref() == Some(k));
                    (
                        p.clone(),
                        if hit {
                            AclVerdict::Denied
                        } else {
                            AclVerdict::Allowed
                        },
                    )
                })
                .collect()
        };
        let ok = acl("user 'u'", &answer(&[], None), "ACL DRYRUN");
        assert_eq!(ok.len(), 1);
        assert_eq!(ok[0].verdict, Verdict::Ok);
        let xadd = acl("user 'u'", &answer(&["XADD"], None), "ACL DRYRUN");
        assert_eq!(xadd[0].verdict, Verdict::Warn);
        assert!(
            xadd[0].detail.contains("may not run XADD:"),
            "{}",
            xadd[0].detail
        );
        let zadd = acl("user 'u'", &answer(&["ZADD", "SCAN"], Some("h")), "x");
        assert_eq!(zadd[0].verdict, Verdict::Fail);
        assert!(zadd[0].detail.contains("ZADD on h"), "{}", zadd[0].detail);
        let scan = acl("user 'u'", &answer(&["SCAN"], None), "x");
        assert_eq!(scan[0].verdict, Verdict::Info);
    }

    #[test]
    fn an_evalsha_the_server_does_not_offer_is_said() {
        let all = probes(false, "h", "c");
        let answers: Vec<(AclProbe, AclVerdict)> = all
            .iter()
            .map(|p| {
                let a = if p.line[0] == "EVALSHA" {
                    AclVerdict::Unknown
                } else {
                    AclVerdict::Allowed
                };
                (p.clone(), a)
            })
            .collect();
        let found = acl("user 'u'", &answers, "ACL DRYRUN");
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].verdict, Verdict::Info);
        assert!(
            found[0]
                .detail
                .starts_with("the server does not offer EVALSHA"),
            "{}",
            found[0].detail
        );
        // Without EVAL either, the failure is all there is to say.
        let neither: Vec<(AclProbe, AclVerdict)> = answers
            .iter()
            .map(|(p, a)| {
                (
                    p.clone(),
                    if p.line[0] == "EVAL" {
                        AclVerdict::Unknown
                    } else {
                        *a
                    },
                )
            })
            .collect();
        let found = acl("user 'u'", &neither, "ACL DRYRUN");
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].verdict, Verdict::Fail);
    }

    #[test]
    fn key_slots_are_the_servers() {
        // The Cluster specification's examples, and a hash tag.
        assert_eq!(key_slot("123456789"), 0x31C3);
        assert_eq!(key_slot("foo"), 12182);
        assert_eq!(key_slot("{user1000}.following"), key_slot("user1000"));
        assert_eq!(key_slot("foo{}{bar}"), key_slot("foo{}{bar}"));
        assert_ne!(key_slot("foo{}{bar}"), key_slot("bar"));
        assert_eq!(key_slot("foo{{bar}}zap"), key_slot("{bar"));
    }

    #[test]
    fn the_probe_key_is_reserved_and_lands_on_the_primary_asked_for() {
        assert_eq!(
            probe_key("ab12", None).as_deref(),
            Some("lockrun:doctor:{ab12}")
        );
        for slots in [&[(0u16, 5460u16)][..], &[(10923, 16383)], &[(7000, 7000)]] {
            let key = probe_key("ab12", Some(slots)).unwrap();
            assert!(key.starts_with("lockrun:doctor:{ab12-"), "{key}");
            let slot = key_slot(&key);
            assert!(
                slots.iter().any(|(s, e)| (*s..=*e).contains(&slot)),
                "{key}"
            );
        }
        assert_eq!(probe_key("x", Some(&[])), None);
    }

    fn probe(
        first: Result<bool, &str>,
        second: Option<(bool, Result<bool, &str>)>,
        cleanup: Result<(), &str>,
    ) -> Vec<Finding> {
        lock(&LockProbe {
            key: "lockrun:doctor:{k}".into(),
            first: first.map_err(str::to_string),
            second: second.map(|(s, r)| (s, r.map_err(str::to_string))),
            cleanup: cleanup.map_err(str::to_string),
            left: vec![
                "lockrun:doctor:{k}".into(),
                "lockrun:fence:=lockrun:doctor:{k}".into(),
            ],
        })
    }

    #[test]
    fn the_lock_probe_fails_where_a_run_would() {
        // A fresh server (NOSCRIPT, then EVAL; then EVALSHA), and one with the scripts cached
        // (EVALSHA; then EVAL on purpose): both ways work.
        for (first, second) in [(false, (true, true)), (true, (false, false))] {
            let f = probe(Ok(first), Some((second.0, Ok(second.1))), Ok(()));
            assert_eq!(f.len(), 1);
            assert_eq!(f[0].verdict, Verdict::Ok);
            assert!(
                f[0].detail.contains("by EVALSHA and EVAL"),
                "{}",
                f[0].detail
            );
            assert!(
                f[0].detail.ends_with("nothing left behind"),
                "{}",
                f[0].detail
            );
        }
        // EVALSHA refused both times: EVAL only, which works.
        let f = probe(Ok(false), Some((true, Ok(false))), Ok(()));
        assert_eq!(f[0].verdict, Verdict::Ok);
        assert!(f[0].detail.contains("by EVAL only"), "{}", f[0].detail);
        // The run's own words.
        let f = probe(
            Err("Redis at x unavailable: OOM command not allowed"),
            None,
            Ok(()),
        );
        assert_eq!(f[0].verdict, Verdict::Fail);
        assert!(f[0]
            .detail
            .ends_with("Redis at x unavailable: OOM command not allowed"));
        // EVALSHA works, EVAL does not: until the server loses the scripts.
        let f = probe(Ok(true), Some((false, Err("no EVAL"))), Ok(()));
        assert_eq!(f[0].verdict, Verdict::Warn);
        assert!(f[0].detail.contains("restart"), "{}", f[0].detail);
        // EVAL worked, EVALSHA (as the next runs go) does not.
        let f = probe(Ok(false), Some((true, Err("broken"))), Ok(()));
        assert_eq!(f[0].verdict, Verdict::Fail);
        // What could not be deleted is named.
        let f = probe(Ok(true), Some((false, Ok(false))), Err("gone"));
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].verdict, Verdict::Ok);
        assert!(!f[0].detail.contains("nothing left"), "{}", f[0].detail);
        assert_eq!(f[1].verdict, Verdict::Warn);
        assert!(
            f[1].detail.contains("lockrun:fence:=lockrun:doctor:{k}"),
            "{}",
            f[1].detail
        );
    }
}
