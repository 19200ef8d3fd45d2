//! `lockrun status KEY`: who holds it, since when, what is left of the lease, the fence and the
//! queue, or, for a key kept after its run (`--every`, `--min-hold`), how that run ended. Exit 0
//! held (kept too: other runs skip it), 1 free (scriptable like `flock -n`), 69 unavailable, 64
//! not a lock.

use super::{ask_all, combine, print_json, rough, HolderInfo};
use crate::exit_codes::ExitCode;
use crate::lock::failure::Misuse;
use crate::lock::holder::HolderValue;
use crate::lock::inspect::Entry;
use crate::lock::redis::RedisLock;
use crate::lock::scripts::inspect::Inspection;
use crate::lock::LockError;
use crate::logging::escape_controls;
use serde_json::json;
use std::time::Duration;

pub async fn run(nodes: &mut [RedisLock], key: &str, json: bool) -> Result<ExitCode, LockError> {
    let n = nodes.len();
    let views = ask_all(nodes, async |node: &mut RedisLock| node.inspect(key).await).await?;
    let view = combine(n, views);
    if !["none", "string", "zset", "shared"].contains(&view.kind.as_str()) {
        return Err(LockError::misuse(Misuse::NotALock {
            key: key.to_string(),
            found: view.kind,
        }));
    }
    let held = !view.holders.is_empty();
    let finished = finished_run(nodes, key, &view).await;
    if json {
        print_json(&document(key, &view, finished.as_ref()));
    } else {
        crate::output::print(&text(key, &view, finished.as_ref()));
    }
    Ok(if held {
        ExitCode::Command(0)
    } else {
        ExitCode::Command(1)
    })
}

/// How many of the key's newest history entries are searched for the holder's end: after it
/// come only the skips of the runs that found the key kept.
const RECENT: u32 = 100;

/// How the run that holds a lock ended, when it has: with `--every` (or `--min-hold`) the key
/// outlives its run, kept for the rest of the tick, and still names that run as its holder.
struct Finished {
    outcome: String,
    exit_code: Option<i64>,
    duration: Option<Duration>,
}

impl Finished {
    /// The holder's own entry in the key's history: the one with its public id that is not a
    /// skip (a holder never skips its own key; Redlock's masters may each record it).
    fn of(id: &str, entries: &[Entry]) -> Option<Finished> {
        let entry = entries
            .iter()
            .find(|e| e.get("id") == Some(id) && e.get("outcome") != Some("skipped"))?;
        Some(Finished {
            outcome: entry.get("outcome")?.to_string(),
            exit_code: entry.get("exit_code").and_then(|c| c.parse().ok()),
            duration: entry
                .get("duration_ms")
                .and_then(|d| d.parse().ok())
                .map(Duration::from_millis),
        })
    }

    /// `ran, exit 0, after 2m13s`.
    fn describe(&self) -> String {
        let mut s = self.outcome.clone();
        if let Some(code) = self.exit_code {
            s.push_str(&format!(", exit {code}"));
        }
        if let Some(d) = self.duration {
            s.push_str(&format!(", after {}", rough(d)));
        }
        s
    }
}

/// The end of the exclusive holder's run, read from the history the lock scripts write when a
/// run ends (the lock itself records no end: the kept key is the run's own value with a longer
/// TTL). `None` while it runs, for a semaphore or shared holders (their slots go with their
/// runs), and when no history says (`--history 0`, a history that cannot be read): shown as
/// held, as before the run ended.
async fn finished_run(nodes: &mut [RedisLock], key: &str, view: &Inspection) -> Option<Finished> {
    if view.kind != "string" {
        return None;
    }
    let (value, _) = view.holders.first()?;
    let id = HolderValue::parse(value)?.id;
    for node in nodes.iter_mut() {
        if let Ok(entries) = node.history(key, RECENT).await {
            if let Some(finished) = Finished::of(id, &entries) {
                return Some(finished);
            }
        }
    }
    None
}

fn ttl_ms(left: Option<std::time::Duration>) -> serde_json::Value {
    left.map_or(serde_json::Value::Null, |d| (d.as_millis() as u64).into())
}

fn document(key: &str, view: &Inspection, finished: Option<&Finished>) -> serde_json::Value {
    // Several holders, each with a lease of its own.
    let semaphore = view.kind == "zset" || view.kind == "shared";
    let first = view.holders.first();
    let holders = super::holders_json(view);
    let (kind, mode) = super::kind_json(&view.kind, first.is_some());
    json!({
        "key": key,
        "held": first.is_some(),
        "kind": kind,
        "mode": mode,
        "holder": if semaphore { serde_json::Value::Null } else {
            first.map_or(serde_json::Value::Null, |(v, _)| HolderInfo::of(v).json())
        },
        // A semaphore's slots carry no acquisition time the server read (each holder's
        // `started` is its own clock, to the second): null rather than seconds dressed as ms.
        "held_for_ms": first
            .filter(|_| !semaphore)
            .and_then(|(v, _)| view.held_for.or_else(|| HolderInfo::of(v).held_for()))
            .map(|d| d.as_millis() as u64),
        "ttl_ms": if semaphore {
            ttl_ms(view.holders.iter().filter_map(|(_, l)| *l).min())
        } else {
            first.map_or(serde_json::Value::Null, |(_, l)| ttl_ms(*l))
        },
        "fence": view.fence,
        "waiters": view.waiters,
        "next_waiter": view.next.as_ref().map(|(id, since)| json!({
            "id": id,
            "queued_ms": since.as_millis() as u64,
        })),
        "holders": holders,
        "finished": finished.map(|f| json!({
            "outcome": f.outcome,
            "exit_code": f.exit_code,
            "duration_ms": f.duration.map(|d| d.as_millis() as u64),
        })),
        "tick": view.tick.as_ref().map(|t| json!({
            "state": if t.done { "done" } else { "open" },
            "attempt": t.attempt,
            "began_ms_ago": t.began.map(|d| d.as_millis() as u64),
            "ttl_ms": ttl_ms(t.left),
        })),
    })
}

fn text(key: &str, view: &Inspection, finished: Option<&Finished>) -> String {
    let mut out = String::new();
    let mut line = |label: &str, value: String| {
        out.push_str(&format!("{label:<10}{}\n", escape_controls(&value)))
    };
    line("key:", key.to_string());
    let left = |l: Option<std::time::Duration>| l.map_or("no expiry".into(), rough);
    match (view.kind.as_str(), view.holders.as_slice()) {
        (_, []) => line("state:", "free".into()),
        ("shared", holders) => {
            line("state:", format!("held shared ({} holders)", holders.len()));
            for (value, l) in holders {
                line(
                    "holder:",
                    format!("{} ({} left)", HolderInfo::of(value).raw, left(*l)),
                );
            }
        }
        ("zset", holders) => {
            line(
                "state:",
                format!("held (semaphore, {} holders)", holders.len()),
            );
            for (value, l) in holders {
                line(
                    "holder:",
                    format!("{} ({} left)", HolderInfo::of(value).raw, left(*l)),
                );
            }
        }
        (_, [(value, l), ..]) if finished.is_some() => {
            let f = finished.map(Finished::describe).unwrap_or_default();
            line(
                "state:",
                format!("kept for the tick: its run finished ({f})"),
            );
            line("ran by:", HolderInfo::of(value).raw);
            line("ttl:", left(*l));
        }
        (_, [(value, l), ..]) => {
            let h = HolderInfo::of(value);
            line("state:", "held".into());
            line("holder:", h.raw.clone());
            if let Some(d) = view.held_for.or_else(|| h.held_for()) {
                line("held for:", rough(d));
            }
            line("ttl:", left(*l));
        }
    }
    line(
        "fence:",
        view.fence.map_or("none yet".into(), |f| f.to_string()),
    );
    let queue = match &view.next {
        Some((id, since)) => format!(
            "{} (next: {}, queued {} ago)",
            view.waiters,
            // Characters, not bytes: a queue member written by hand may be any text.
            id.chars().take(12).collect::<String>(),
            rough(*since)
        ),
        None => view.waiters.to_string(),
    };
    line("waiters:", queue);
    if let Some(t) = &view.tick {
        let state = if t.done { "done" } else { "under way" };
        let took_over = if t.attempt > 1 { ", taken over" } else { "" };
        line(
            "tick:",
            format!(
                "{state} (attempt {}{took_over}, began {} ago, {} left)",
                t.attempt,
                t.began.map_or("?".into(), rough),
                left(t.left)
            ),
        );
    }
    out
}
