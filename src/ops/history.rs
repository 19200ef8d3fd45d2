//! `lockrun history KEY`: the key's last runs, newest first, from the stream the lock scripts
//! append to (`--history`): when, which host and pid, fence, outcome, exit code, duration
//! (and, with `--standby`, which attempt at its tick a run was).

use super::{ask_all, print_json, rough};
use crate::exit_codes::ExitCode;
use crate::lock::inspect::Entry;
use crate::lock::redis::RedisLock;
use crate::lock::LockError;
use crate::logging::escape_controls;
use crate::utc;
use serde_json::json;
use std::time::Duration;

pub async fn run(
    nodes: &mut [RedisLock],
    key: &str,
    count: u32,
    json: bool,
) -> Result<ExitCode, LockError> {
    let lists = ask_all(nodes, async |node: &mut RedisLock| {
        node.history(key, count).await
    })
    .await?;
    let entries = merge(lists, count as usize);
    if json {
        print_json(&serde_json::Value::Array(
            entries.iter().map(document).collect(),
        ));
    } else if entries.is_empty() {
        crate::output::println(&format!("no runs recorded for '{key}'"));
    } else {
        crate::output::print(&table(&entries));
    }
    Ok(ExitCode::Command(0))
}

/// Newest first, each run once. One run can be recorded more than once: a release retried
/// after its reply was lost (the retry finds the key gone and says "lost"), or several masters
/// (Redlock) each recording it, one of them maybe "skipped" (held there while a majority
/// granted it) or "lost" (its copy expired; a run that ran or timed out is recorded so where
/// its key was gone at release). A run's entries share its id; the one kept says what the run
/// did: ran, then timeout/aborted/error/released, then lost, then skipped. A standby's takeover
/// records the run it took over from as lost with its attempt at the tick when that run never
/// released, and that run's own host (thawed, healed) may record it too: the attempt is the
/// run's, whichever entry carries it.
fn merge(lists: Vec<Vec<Entry>>, count: usize) -> Vec<Entry> {
    let rank = |e: &Entry| match e.get("outcome") {
        Some("ran") => 0,
        Some("lost") => 2,
        Some("skipped") => 3,
        _ => 1,
    };
    let mut best: Vec<Entry> = Vec::new();
    for mut e in lists.into_iter().flatten() {
        let same = e
            .get("id")
            .and_then(|id| best.iter().position(|o| o.get("id") == Some(id)));
        let Some(i) = same else {
            best.push(e);
            continue;
        };
        if rank(&e) < rank(&best[i]) {
            std::mem::swap(&mut best[i], &mut e);
        }
        if best[i].get("attempt").is_none() {
            if let Some(attempt) = e.get("attempt") {
                best[i].fields.push(("attempt".into(), attempt.into()));
            }
        }
    }
    best.sort_by_key(|e| std::cmp::Reverse(e.time_ms));
    best.truncate(count);
    best
}

fn number(e: &Entry, name: &str) -> serde_json::Value {
    e.get(name)
        .and_then(|v| v.parse::<i64>().ok())
        .map_or(serde_json::Value::Null, Into::into)
}

fn document(e: &Entry) -> serde_json::Value {
    json!({
        "time": utc::format(e.time_ms / 1000),
        "time_ms": e.time_ms,
        "host": e.get("host"),
        "pid": number(e, "pid"),
        "fence": number(e, "fence"),
        "outcome": e.get("outcome"),
        "exit_code": number(e, "exit_code"),
        "duration_ms": number(e, "duration_ms"),
        "every_ms": number(e, "every_ms"),
        "attempt": number(e, "attempt"),
        "mode": e.get("mode"),
        "tick": e.get("tick"),
    })
}

fn table(entries: &[Entry]) -> String {
    let mut lines = vec![[
        "TIME", "OUTCOME", "EXIT", "DURATION", "HOST", "PID", "FENCE",
    ]
    .map(String::from)];
    for e in entries {
        // Entries are anyone's to write (XADD by hand): a control character must neither
        // reach the terminal nor fake a row, as in `list` and `status`.
        let field = |name: &str| escape_controls(e.get(name).unwrap_or("-")).into_owned();
        let duration = e
            .get("duration_ms")
            .and_then(|d| d.parse().ok())
            .map_or("-".into(), |ms| rough(Duration::from_millis(ms)));
        // With --standby, either side of a takeover: the attempt that did not complete its
        // tick, and the one that took it over.
        let mut outcome = match e.get("attempt") {
            Some(_) => format!("{} (attempt {})", field("outcome"), field("attempt")),
            None => field("outcome"),
        };
        // With --standby, a run that opened its tick again after the server lost its record.
        if e.get("tick").is_some() {
            outcome = format!("{outcome} (tick {})", field("tick"));
        }
        // A run that held the key in shared mode (`--shared`), beside others.
        if e.get("mode").is_some() {
            outcome = format!("{outcome} ({})", field("mode"));
        }
        lines.push([
            utc::format(e.time_ms / 1000),
            outcome,
            field("exit_code"),
            duration,
            field("host"),
            field("pid"),
            field("fence"),
        ]);
    }
    super::columns(&lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(t: u64, id: &str, outcome: &str) -> Entry {
        Entry {
            time_ms: t,
            fields: vec![("id".into(), id.into()), ("outcome".into(), outcome.into())],
        }
    }

    #[test]
    fn runs_are_merged_newest_first_and_once() {
        let a = vec![entry(3, "x", "ran"), entry(1, "y", "skipped")];
        let b = vec![
            entry(3, "x", "ran"),
            entry(2, "x", "skipped"),
            entry(1, "y", "skipped"),
        ];
        let merged = merge(vec![a, b], 10);
        let shown: Vec<(u64, &str)> = merged
            .iter()
            .map(|e| (e.time_ms, e.get("outcome").unwrap()))
            .collect();
        assert_eq!(shown, [(3, "ran"), (1, "skipped")]);
        // A timed-out run on three masters, one of whose copies had expired.
        let masters = vec![
            vec![entry(4, "t", "lost")],
            vec![entry(4, "t", "timeout")],
            vec![entry(4, "t", "timeout")],
        ];
        let merged = merge(masters, 10);
        assert_eq!(merged.len(), 1);
        assert_eq!(merged[0].get("outcome"), Some("timeout"));
        assert_eq!(
            merge(vec![vec![entry(5, "a", "ran"), entry(4, "b", "ran")]], 1).len(),
            1
        );
    }

    #[test]
    fn a_run_recorded_twice_keeps_what_either_record_says() {
        // A standby's takeover records the attempt it took over from as lost, with its attempt;
        // that host, thawed or healed, records its own run as lost too, without one.
        let mut by_takeover = entry(4, "x", "lost");
        by_takeover.fields.push(("attempt".into(), "1".into()));
        let own = entry(5, "x", "lost");
        for lists in [
            vec![vec![own.clone(), by_takeover.clone()]],
            vec![vec![by_takeover.clone(), own.clone()]],
        ] {
            let merged = merge(lists, 10);
            assert_eq!(merged.len(), 1);
            assert_eq!(merged[0].get("outcome"), Some("lost"));
            assert_eq!(merged[0].get("attempt"), Some("1"));
        }
        // The outcome kept is still the one that says what the run did.
        let mut lost = entry(4, "y", "lost");
        lost.fields.push(("attempt".into(), "1".into()));
        let merged = merge(vec![vec![lost], vec![entry(4, "y", "ran")]], 10);
        assert_eq!(merged[0].get("outcome"), Some("ran"));
        assert_eq!(merged[0].get("attempt"), Some("1"));
    }
}
