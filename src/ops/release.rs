//! `lockrun release KEY --force`: delete a stuck lock (or a whole semaphore), whoever holds
//! it, and say what was deleted (holder, fence) on stderr and in the key's history, so the
//! action can be audited. A holder that is still running finds its key gone at its next
//! renewal (within TTL/3), stops its job and exits 76: the lock is never held twice for long,
//! but for up to that renewal interval two jobs may run, which is why `--force` is required.

use super::{ask_all, print_json, HolderInfo};
use crate::exit_codes::ExitCode;
use crate::lock::redis::RedisLock;
use crate::lock::scripts::force_release::Deleted;
use crate::lock::{Holder, LockError, Note, Outcome};
use serde_json::json;
use std::collections::HashSet;
use std::time::Duration;
use tracing::info;

/// The trimming cap of the entry a forced release adds to a key's history: the largest any run
/// may ask for (`--history`), so the entry never cuts a history shorter than its runs keep it.
/// (The entry is recorded even for a key whose runs record nothing: the deletion is audited.)
const HISTORY: u32 = crate::cli::MAX_HISTORY;

/// Deletes `key` whoever holds it: asked with `--force` (checked with the options, in
/// `plan::operation`).
pub async fn run(nodes: &mut [RedisLock], key: &str, json: bool) -> Result<ExitCode, LockError> {
    let operator = Holder::new(std::ffi::OsStr::new("lockrun-release"));
    let note = Note {
        outcome: Outcome::Released,
        exit_code: None,
        duration: Duration::ZERO,
        completes_tick: false,
        reopened: false,
    };
    let deleted = ask_all(nodes, async |node: &mut RedisLock| {
        node.force_release(key, HISTORY, &operator, &note).await
    })
    .await?;
    let Some(what) = merge(deleted) else {
        info!(key, "no lock to delete");
        if json {
            print_json(&json!({"key": key, "deleted": false}));
        }
        return Ok(ExitCode::Command(1));
    };
    let holders: Vec<HolderInfo> = what.holders.iter().map(|h| HolderInfo::of(h)).collect();
    let shown: Vec<&str> = holders.iter().map(|h| h.raw.as_str()).collect();
    info!(
        key,
        holder = shown.join(", "),
        fence = what.fence,
        by = operator.host,
        "redis lock deleted by release --force"
    );
    if json {
        print_json(&json!({
            "key": key,
            "deleted": true,
            "kind": if what.kind == "zset" { "semaphore" } else { "lock" },
            "mode": match what.kind.as_str() {
                "shared" => "shared".into(),
                "string" => "exclusive".into(),
                _ => serde_json::Value::Null,
            },
            "holders": holders.iter().map(HolderInfo::json).collect::<Vec<_>>(),
            "fence": what.fence,
        }));
    }
    Ok(ExitCode::Command(0))
}

/// What the nodes deleted, together (several masters: each may have had a different holder),
/// each holder once, in the order first answered. Linear in the holders: a semaphore or a
/// shared lock can have 100,000 of them.
fn merge(deleted: Vec<Option<Deleted>>) -> Option<Deleted> {
    let mut out: Option<Deleted> = None;
    let mut seen: HashSet<String> = HashSet::new();
    for d in deleted.into_iter().flatten() {
        let o = out.get_or_insert_with(|| Deleted {
            kind: d.kind.clone(),
            ..Deleted::default()
        });
        o.fence = o.fence.max(d.fence);
        for h in d.holders {
            if seen.insert(h.clone()) {
                o.holders.push(h);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deleted(fence: u64, holders: &[&str]) -> Option<Deleted> {
        Some(Deleted {
            kind: "zset".into(),
            fence: Some(fence),
            holders: holders.iter().map(|h| h.to_string()).collect(),
        })
    }

    #[test]
    fn merge_lists_each_holder_once_in_the_order_first_answered() {
        let merged = merge(vec![
            deleted(7, &["a", "b"]),
            None,
            deleted(9, &["b", "c", "a"]),
        ])
        .unwrap();
        assert_eq!(merged.holders, ["a", "b", "c"]);
        assert_eq!(merged.fence, Some(9));
        assert_eq!(merged.kind, "zset");
        assert!(merge(vec![None, None]).is_none());
    }
}
