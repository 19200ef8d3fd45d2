//! The verdicts of `lockrun doctor`, from what a server said: no I/O here, so every rule is
//! unit-tested on INFO texts as Redis and Valkey write them.
//!
//! Each check takes what it needs as `Result<_, &str>`: `Err` says why that fact could not be
//! asked (the ACL denies `CONFIG`, the server has no such command), and the check then answers
//! `cannot check` with that reason instead of guessing.
//!
//! Here: the verdict's words and the server's facts (`INFO`, `CONFIG`: checks 1 to 6). The
//! verdicts on round trips and clocks are in `timing.rs`, on the ACL in `acl.rs`, on the lock
//! probe in `lock_probe.rs`.

mod acl;
mod lock_probe;
mod timing;

pub use acl::{acl, probes, AclProbe, AclVerdict, PROBE_KEY};
pub use lock_probe::{lock, probe_key};
pub use timing::{clock, clock_rate, fastest, latency, rate_window, ClockSample, RATE_WINDOW_MAX};

use std::collections::HashMap;

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
}
