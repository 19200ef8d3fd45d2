//! Looking at locks from outside, for the operators' commands (`status`, `list`, `release`,
//! `history`): what one server says about a key. Composing several masters is `ops`' business.
//!
//! Like the lock protocol, every read of one key is one `EVAL`, so what it shows is one
//! consistent moment (holder, TTL, fence and queue read together).

use super::failure::{Endless, Kind, Misuse, NotRedis};
use super::keys::{history_args, Keys};
use super::redis::RedisLock;
use super::scripts::force_release::{Deleted, ForceReleaseReply, ForceReleaseRequest};
use super::scripts::inspect::{InspectRequest, Inspection};
use super::scripts::{self, as_string, Request};
use super::{Holder, LockError, LockSpec, Note};
use redis::Value;
use std::time::Duration;

/// One run in a key's history (see `note` in lib/prelude.lua).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Entry {
    /// When it was written, in ms of the server's clock (the stream entry's id).
    pub time_ms: u64,
    pub fields: Vec<(String, String)>,
}

impl Entry {
    pub fn get(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

impl RedisLock {
    pub async fn inspect(&mut self, key: &str) -> Result<Inspection, LockError> {
        self.check_key(key)?;
        let reply = self.eval(&InspectRequest { key }.call()).await?;
        scripts::inspect::decode(reply).map_err(|odd| self.unexpected(&odd))
    }

    /// Deletes `key` whoever holds it, and records `note` (by `operator`) in its history.
    /// `None`: there was no lock to delete.
    pub async fn force_release(
        &mut self,
        key: &str,
        history: u32,
        operator: &Holder,
        note: &Note,
    ) -> Result<Option<Deleted>, LockError> {
        self.check_key(key)?;
        let spec = LockSpec {
            history,
            ..LockSpec::new(key, Duration::ZERO)
        };
        let request = ForceReleaseRequest {
            key,
            history: history_args(&spec, operator, None, None, Some(note)),
            publish: self.publish(),
        };
        let reply = self.eval(&request.call()).await?;
        match ForceReleaseReply::decode(reply) {
            Ok(ForceReleaseReply::Nothing) => Ok(None),
            Ok(ForceReleaseReply::Deleted(deleted)) => Ok(Some(deleted)),
            Ok(ForceReleaseReply::Refused { kind }) => {
                let key = key.to_string();
                Err(self.error(Kind::Misuse(match kind.as_str() {
                    "foreign-string" => Misuse::ForceForeignValue { key },
                    "foreign-zset" => Misuse::ForceForeignSemaphore { key },
                    _ => Misuse::ForceNotALock { key, found: kind },
                })))
            }
            Err(odd) => Err(self.unexpected(&odd)),
        }
    }

    /// The newest `count` entries of `key`'s history, newest first.
    pub async fn history(&mut self, key: &str, count: u32) -> Result<Vec<Entry>, LockError> {
        self.check_key(key)?;
        let mut cmd = redis::cmd("XREVRANGE");
        cmd.arg(Keys::of(key).history)
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(count);
        let reply = match self.request(cmd, None).await {
            Err(LockError {
                kind: Kind::Misuse(Misuse::Answered(answer)),
                ..
            }) if answer.code.as_deref() == Some("WRONGTYPE") => {
                return Err(self.error(Kind::Misuse(Misuse::SpoiledHistory {
                    key: key.to_string(),
                    helper: Keys::of(key).history,
                })))
            }
            other => other?,
        };
        let Value::Array(entries) = reply else {
            return Err(self.unexpected(&reply));
        };
        let mut out = Vec::new();
        for entry in entries {
            let Value::Array(parts) = entry else { continue };
            let (Some(id), Some(Value::Array(flat))) =
                (parts.first().and_then(as_string), parts.get(1))
            else {
                continue;
            };
            let time_ms = id
                .split('-')
                .next()
                .and_then(|ms| ms.parse().ok())
                .unwrap_or(0);
            let fields = flat
                .chunks_exact(2)
                .filter_map(|kv| Some((as_string(&kv[0])?, as_string(&kv[1])?)))
                .collect();
            out.push(Entry { time_ms, fields });
        }
        Ok(out)
    }

    /// The names of every lock this server has handed a fence for (the fencing counters
    /// outlive the locks), by `SCAN` (never `KEYS`: it blocks the server) on every primary.
    /// Each primary's walk is bounded (see [`Walk`]): a cursor that never comes back to 0 ends
    /// it with an error instead of keeping lockrun asking forever.
    pub async fn known_keys(&mut self) -> Result<Vec<String>, LockError> {
        let prefix = format!("{}fence:", super::keys::RESERVED_PREFIX);
        let started = std::time::Instant::now();
        let mut names = Vec::new();
        for node in self.primaries().await? {
            let at = node.as_ref().map(|(h, p)| (h.as_str(), *p));
            let mut walk = Walk::new(started);
            let mut cursor = "0".to_string();
            loop {
                let mut cmd = redis::cmd("SCAN");
                cmd.arg(&cursor)
                    .arg("MATCH")
                    .arg(format!("{prefix}*"))
                    .arg("COUNT")
                    .arg(SCAN_COUNT);
                let reply = self.request(cmd, at).await?;
                // [cursor, [key, ...]]; anything else is no SCAN reply.
                let page = match &reply {
                    Value::Array(parts) => match parts.as_slice() {
                        [c, Value::Array(keys)] => as_string(c).map(|c| (c, keys)),
                        _ => None,
                    },
                    _ => None,
                };
                let Some((next, keys)) = page else {
                    return Err(self.unexpected(&reply));
                };
                for k in keys.iter().filter_map(as_string) {
                    if let Some(name) = k.strip_prefix(&prefix).and_then(lock_name) {
                        names.push(name);
                    }
                }
                match walk.next(&next, std::time::Instant::now()) {
                    Ok(true) => break,
                    Ok(false) => cursor = next,
                    Err(endless) => {
                        return Err(self.error(Kind::NotRedis(NotRedis::EndlessScan(endless))))
                    }
                }
            }
        }
        // SCAN may return a key more than once.
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// Every primary to scan: the one server (`None`), or each Cluster primary's address.
    async fn primaries(&mut self) -> Result<Vec<Option<(String, u16)>>, LockError> {
        if !self.is_cluster() {
            return Ok(vec![None]);
        }
        let reply = self
            .request(redis::cmd("CLUSTER").arg("SLOTS").clone(), None)
            .await?;
        let Value::Array(ranges) = reply else {
            return Err(self.unexpected(&reply));
        };
        let mut out = Vec::new();
        for range in ranges {
            // [start, end, [host, port, id, ...], replicas...]: the first node is the primary.
            let Value::Array(parts) = range else { continue };
            let Some(Value::Array(primary)) = parts.get(2) else {
                continue;
            };
            let host = primary.first().and_then(as_string);
            let port = match primary.get(1) {
                Some(Value::Int(p)) => u16::try_from(*p).ok(),
                _ => None,
            };
            if let (Some(host), Some(port)) = (host, port) {
                let node = Some((host, port));
                if !out.contains(&node) {
                    out.push(node);
                }
            }
        }
        Ok(out)
    }
}

/// How many keys each `SCAN` call looks at (a hint to the server): enough that a large
/// keyspace takes few round trips, few enough that no call holds the server up for long
/// (under a millisecond of its time, measured with 2 million keys).
const SCAN_COUNT: u64 = 1000;

/// The most `SCAN` calls one server's walk may take. At COUNT 1000 every call but the last has
/// the server look at 1,000 keys or 10,000 buckets of its hash table (Redis stops at ten times
/// COUNT buckets), and the table has fewer than 10 buckets per key (it shrinks below 10% full):
/// 250,000 calls are at least 125 million keys on one server, and about 250 million at the
/// usual fill, the most Redis's FAQ reports testing on one instance; walking that many takes
/// minutes. The cursors a walk keeps to see a cycle stay within a few MB.
const SCAN_CALLS: u64 = 250_000;

/// The longest the walks over every server may take together, whatever the number of calls:
/// a server that answers each one just within the request timeout cannot keep `list` going
/// for days.
const SCAN_TIME: Duration = Duration::from_secs(600);

/// One server's `SCAN` walk, from cursor 0 until the server hands 0 back. A Redis cursor is a
/// position in the server's hash table that only moves forward (the reversed bits of a bucket
/// number, incremented), so within one walk no cursor comes back: one that does is a cycle.
/// A cursor that always moves on without reaching 0 is stopped by [`SCAN_CALLS`] and
/// [`SCAN_TIME`].
struct Walk {
    seen: std::collections::HashSet<String>,
    calls: u64,
    /// When the first walk of this listing began.
    started: std::time::Instant,
}

impl Walk {
    fn new(started: std::time::Instant) -> Walk {
        Walk {
            seen: std::collections::HashSet::new(),
            calls: 0,
            started,
        }
    }

    /// After a call whose reply named `cursor`, at `now`: whether the walk is done (`Ok(true)`),
    /// goes on (`Ok(false)`), or must stop.
    fn next(&mut self, cursor: &str, now: std::time::Instant) -> Result<bool, Endless> {
        self.calls += 1;
        if cursor == "0" {
            return Ok(true);
        }
        if !self.seen.insert(cursor.to_string()) {
            let cursor = cursor.chars().take(40).collect();
            return Err(Endless::Cycle {
                cursor,
                calls: self.calls,
            });
        }
        if self.calls >= SCAN_CALLS {
            return Err(Endless::Calls(self.calls));
        }
        if now.duration_since(self.started) >= SCAN_TIME {
            return Err(Endless::Time(SCAN_TIME));
        }
        Ok(false)
    }
}

/// The lock name inside a helper key's suffix: `{KEY}` or `=KEY` (see `helper_key`).
fn lock_name(suffix: &str) -> Option<String> {
    if let Some(raw) = suffix.strip_prefix('=') {
        return Some(raw.to_string());
    }
    suffix
        .strip_prefix('{')
        .and_then(|s| s.strip_suffix('}'))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::lock::keys::helper_key;

    #[test]
    fn a_scan_walk_ends_at_0_and_stops_at_a_cycle_or_a_bound() {
        let t0 = std::time::Instant::now();
        let mut walk = Walk::new(t0);
        assert_eq!(walk.next("12", t0), Ok(false));
        assert_eq!(walk.next("0", t0), Ok(true));
        let mut walk = Walk::new(t0);
        for c in ["5", "7"] {
            assert_eq!(walk.next(c, t0), Ok(false));
        }
        assert_eq!(
            walk.next("5", t0),
            Err(Endless::Cycle {
                cursor: "5".into(),
                calls: 3
            })
        );
        let mut walk = Walk::new(t0);
        for c in 1..SCAN_CALLS {
            assert_eq!(walk.next(&c.to_string(), t0), Ok(false));
        }
        assert_eq!(
            walk.next("x", t0),
            Err(Endless::Calls(SCAN_CALLS)),
            "the last call allowed"
        );
        // The time bound counts from the listing's start, over every server's walk.
        let mut walk = Walk::new(t0);
        assert_eq!(walk.next("1", t0 + SCAN_TIME / 2), Ok(false));
        assert_eq!(
            walk.next("2", t0 + SCAN_TIME),
            Err(Endless::Time(SCAN_TIME))
        );
    }

    #[test]
    fn lock_names_come_back_from_their_helper_keys() {
        for name in [
            "nightly",
            "job:{tenant}:x",
            "a}b",
            "a{b",
            "{x}",
            "with space",
        ] {
            let fence = helper_key(name, "fence");
            let suffix = fence.strip_prefix("lockrun:fence:").unwrap();
            assert_eq!(lock_name(suffix).as_deref(), Some(name), "{fence}");
        }
        assert_eq!(lock_name("garbage"), None);
    }
}
