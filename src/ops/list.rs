//! `lockrun list [PATTERN]`: every lock lockrun holds now (with `--all`, also every key it has
//! locked before), with holder and TTL, sorted by name.
//!
//! The names come from lockrun's fencing counters (`lockrun:fence:{KEY}`, which outlive their
//! locks), found by `SCAN` on every primary: never `KEYS`, which blocks the server, and no
//! look at keys that are not lockrun's, however many the database holds.

use super::{ask_all, combine, glob, print_json, rough, HolderInfo};
use crate::exit_codes::ExitCode;
use crate::lock::redis::RedisLock;
use crate::lock::scripts::inspect::Inspection;
use crate::lock::LockError;
use crate::logging::escape_controls;
use serde_json::json;

pub async fn run(
    nodes: &mut [RedisLock],
    pattern: &str,
    all: bool,
    json: bool,
) -> Result<ExitCode, LockError> {
    let n = nodes.len();
    let names = ask_all(nodes, async |node: &mut RedisLock| node.known_keys().await).await?;
    let mut names: Vec<String> = names
        .into_iter()
        .flatten()
        .filter(|name| glob::matches(pattern, name))
        .collect();
    names.sort();
    names.dedup();
    let mut rows = Vec::new();
    for name in names {
        let views = ask_all(nodes, async |node: &mut RedisLock| {
            node.inspect(&name).await
        })
        .await?;
        let view = combine(n, views);
        if all || !view.holders.is_empty() {
            rows.push((name, view));
        }
    }
    if json {
        print_json(&serde_json::Value::Array(
            rows.iter().map(|(k, v)| row(k, v)).collect(),
        ));
    } else {
        crate::output::print(&table(&rows));
    }
    Ok(ExitCode::Command(0))
}

fn row(key: &str, view: &Inspection) -> serde_json::Value {
    let first = view.holders.first();
    let (kind, mode) = super::kind_json(&view.kind, first.is_some());
    json!({
        "key": key,
        "kind": kind,
        "mode": mode,
        "holder": first.map(|(v, _)| HolderInfo::of(v).json()),
        "holders": super::holders_json(view),
        "ttl_ms": first.and_then(|(_, l)| *l).map(|d| d.as_millis() as u64),
        "fence": view.fence,
        "waiters": view.waiters,
    })
}

fn table(rows: &[(String, Inspection)]) -> String {
    let mut lines = vec![[
        "KEY".to_string(),
        "TTL".into(),
        "FENCE".into(),
        "WAITERS".into(),
        "HOLDER".into(),
    ]];
    for (key, view) in rows {
        let (ttl, holder) = match view.holders.as_slice() {
            [] => ("-".to_string(), "(free)".to_string()),
            [(v, l)] => (l.map_or("no expiry".into(), rough), HolderInfo::of(v).raw),
            [(v, l), more @ ..] => (
                l.map_or("no expiry".into(), rough),
                format!("{} (+{} more)", HolderInfo::of(v).raw, more.len()),
            ),
        };
        let fence = view.fence.map_or("-".into(), |f| f.to_string());
        // Names and values set by hand may hold control characters: one row stays one line.
        let key = escape_controls(key).into_owned();
        let holder = escape_controls(&holder).into_owned();
        let holder = if view.kind == "shared" {
            format!("(shared) {holder}")
        } else {
            holder
        };
        lines.push([key, ttl, fence, view.waiters.to_string(), holder]);
    }
    super::columns(&lines)
}
