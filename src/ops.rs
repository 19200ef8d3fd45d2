//! The operators' commands: `status`, `list`, `release`, `history`, `doctor`.
//!
//! Each takes the run form's connection options, asks the server(s) once, and prints text for
//! people or one JSON document (`--json`) for scripts on stdout; lockrun's own log lines (an
//! unavailable server, what `release --force` deleted) go to stderr as in the run form. With
//! several masters (Redlock) every command asks all of them: a lock is held when a majority
//! shows the same holder, as for the run form.

mod doctor;
mod glob;
mod history;
mod list;
mod release;
mod status;

use crate::cli::verbs::Verb;
use crate::exit_codes::ExitCode;
use crate::lock::holder::{describe_holder, HolderValue};
use crate::lock::redis::RedisLock;
use crate::lock::scripts::inspect::Inspection;
use crate::lock::{quorum, LockError};
use std::time::Duration;
use tracing::error;

/// One operators' command on `nodes`: the servers its connection options name, resolved
/// (`plan::operation`), nothing connected yet.
pub async fn main(verb: Verb, mut nodes: Vec<RedisLock>) -> ExitCode {
    let json = verb.common().json;
    let result = match &verb {
        Verb::Status(v) => status::run(&mut nodes, &v.key, json).await,
        Verb::List(v) => list::run(&mut nodes, &v.pattern, v.all, json).await,
        Verb::Release(v) => release::run(&mut nodes, &v.key, json).await,
        Verb::History(v) => history::run(&mut nodes, &v.key, v.count, json).await,
        Verb::Doctor(v) => doctor::run(&mut nodes, v.key.as_deref(), json).await,
    };
    match result {
        Ok(code) => code,
        Err(e) => failed(&e),
    }
}

fn failed(e: &LockError) -> ExitCode {
    error!("{e}");
    e.exit_code()
}

/// Asks every node; with several masters, nodes that fail are tolerated as long as a majority
/// answers (their errors are logged as warnings), as the run form tolerates them.
async fn ask_all<T, F>(nodes: &mut [RedisLock], mut ask: F) -> Result<Vec<T>, LockError>
where
    F: AsyncFnMut(&mut RedisLock) -> Result<T, LockError>,
{
    let n = nodes.len();
    let mut answers = Vec::new();
    let mut worst = None;
    for node in nodes.iter_mut() {
        match ask(node).await {
            Ok(v) => answers.push(v),
            Err(e) if e.is_misuse() => return Err(e),
            Err(e) if n == 1 => return Err(e),
            Err(e) => {
                tracing::warn!("{e}");
                worst = Some(e);
            }
        }
    }
    if answers.len() < quorum(n) {
        return Err(worst.unwrap_or_else(LockError::no_answer));
    }
    Ok(answers)
}

/// A lock as several masters show it: held when a majority has the same holder value (TTL:
/// the shortest among them; fence: the highest any node handed out).
fn combine(n: usize, views: Vec<Inspection>) -> Inspection {
    if views.len() == 1 && n == 1 {
        return views.into_iter().next().unwrap_or_default();
    }
    let fence = views.iter().filter_map(|v| v.fence).max();
    let mut held: Vec<(String, Option<Duration>)> = Vec::new();
    let firsts: Vec<&(String, Option<Duration>)> =
        views.iter().filter_map(|v| v.holders.first()).collect();
    for (value, _) in &firsts {
        if held.iter().any(|(v, _)| v == value) {
            continue;
        }
        let same: Vec<Option<Duration>> = firsts
            .iter()
            .filter(|(v, _)| v == value)
            .map(|(_, left)| *left)
            .collect();
        if same.len() >= quorum(n) {
            held.push((value.clone(), same.into_iter().flatten().min()));
        }
    }
    let kind = if held.is_empty() { "none" } else { "string" };
    // The shortest any node of the majority saw: each node's fence is its own clock's.
    let held_for = match held.first() {
        Some((value, _)) => views
            .iter()
            .filter(|v| v.holders.first().is_some_and(|(h, _)| h == value))
            .filter_map(|v| v.held_for)
            .min(),
        None => None,
    };
    Inspection {
        kind: kind.into(),
        fence,
        waiters: 0,
        next: None,
        holders: held,
        held_for,
        tick: None,
    }
}

/// A holder value split into what `status` shows: host, pid, started, program, or the raw
/// value when lockrun did not write it.
#[derive(Debug, Default, PartialEq, Eq)]
struct HolderInfo {
    host: Option<String>,
    pid: Option<u32>,
    started: Option<String>,
    program: Option<String>,
    raw: String,
}

impl HolderInfo {
    fn of(value: &str) -> HolderInfo {
        let Some(parts) = HolderValue::parse(value) else {
            // Not lockrun's shape: shown as it is.
            return HolderInfo {
                raw: value.to_string(),
                ..HolderInfo::default()
            };
        };
        HolderInfo {
            host: Some(parts.host.into()),
            pid: parts.pid.parse().ok(),
            started: Some(parts.started.into()),
            program: Some(parts.program.into()),
            raw: describe_holder(value).to_string(),
        }
    }

    fn json(&self) -> serde_json::Value {
        let mut v = serde_json::json!({
            "host": self.host,
            "pid": self.pid,
            "started": self.started,
            "program": self.program,
        });
        if self.host.is_none() {
            v["value"] = self.raw.clone().into();
        }
        v
    }

    /// How long ago `started` was, by our clock (whole seconds): how long a lock has been held
    /// when the server's reading ([`Inspection::held_for`]) is not to be had.
    fn held_for(&self) -> Option<Duration> {
        let started = crate::utc::parse(self.started.as_deref()?)?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?
            .as_secs();
        Some(Duration::from_secs(now.saturating_sub(started)))
    }
}

/// A duration as people read it in a status line: `850ms`, `27.4s`, `2m13s`, `3h05m`, `2d04h`
/// (rounded down; `duration::Human` is exact instead, for values people type back in).
fn rough(d: Duration) -> String {
    let (ms, s) = (d.as_millis(), d.as_secs());
    match s {
        0 => format!("{ms}ms"),
        1..=59 => format!("{}.{}s", s, ms % 1000 / 100),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// A column is at most this wide: a longer cell (a key of 70,000 characters) overflows its own
/// row instead of pushing every other row that far to the right.
const MAX_COLUMN: usize = 64;

/// Rows as aligned columns, two spaces apart, the last one unpadded, each line ending in a
/// newline. Padding is counted in characters and written out by hand: `format!`'s width takes
/// at most 65,535, and one long key made `list` panic.
fn columns<const N: usize>(rows: &[[String; N]]) -> String {
    let widths: Vec<usize> = (0..N)
        .map(|i| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .filter(|&w| w <= MAX_COLUMN)
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if i + 1 < N {
                let pad = widths[i].saturating_sub(cell.chars().count()) + 2;
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// What a key is, as the JSON documents say it (`kind`): a `lock` (exclusive or shared) or a
/// `semaphore`; and for a held lock, how it is held (`mode`): `exclusive` or `shared`.
fn kind_json(kind: &str, held: bool) -> (&'static str, serde_json::Value) {
    match kind {
        "zset" => ("semaphore", serde_json::Value::Null),
        "shared" => ("lock", "shared".into()),
        _ if held => ("lock", "exclusive".into()),
        _ => ("lock", serde_json::Value::Null),
    }
}

/// Every holder of a lock or a semaphore as JSON, with its lease's time left (`ttl_ms`): the
/// same array in `status --json` and `list --json`.
fn holders_json(view: &Inspection) -> Vec<serde_json::Value> {
    view.holders
        .iter()
        .map(|(value, left)| {
            let mut h = HolderInfo::of(value).json();
            h["ttl_ms"] = left.map_or(serde_json::Value::Null, |d| (d.as_millis() as u64).into());
            h
        })
        .collect()
}

/// Prints one JSON document on stdout.
fn print_json(v: &serde_json::Value) {
    crate::output::println(&v.to_string());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holder_values_are_split_into_their_parts() {
        let id = crate::lock::public_id("t");
        let h = HolderInfo::of(&format!(
            "{id} host=web1 pid=42 started=2024-01-02T03:04:05Z program=backup.sh"
        ));
        assert_eq!(h.host.as_deref(), Some("web1"));
        assert_eq!(h.pid, Some(42));
        assert_eq!(h.program.as_deref(), Some("backup.sh"));
        assert_eq!(h.started.as_deref(), Some("2024-01-02T03:04:05Z"));
        let raw = HolderInfo::of("set by hand");
        assert_eq!(raw.host, None);
        assert_eq!(raw.raw, "set by hand");
        assert_eq!(raw.json()["value"], "set by hand");
    }

    #[test]
    fn columns_align_and_a_long_cell_overflows_its_own_row() {
        let row = |a: &str, b: &str, c: &str| [a.to_string(), b.to_string(), c.to_string()];
        let text = columns(&[row("KEY", "TTL", "HOLDER"), row("ключ", "3s", "h")]);
        assert_eq!(text, "KEY   TTL  HOLDER\nключ  3s   h\n");
        let long = "L".repeat(70_000);
        let text = columns(&[
            row("KEY", "TTL", "X"),
            row(&long, "1s", "h"),
            row("k", "", ""),
        ]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "KEY  TTL  X");
        assert_eq!(lines[1], format!("{long}  1s   h"));
        assert_eq!(lines[2], "k");
    }

    #[test]
    fn rough_durations() {
        let ms = Duration::from_millis;
        assert_eq!(rough(ms(850)), "850ms");
        assert_eq!(rough(ms(27_480)), "27.4s");
        assert_eq!(rough(ms(133_000)), "2m13s");
        assert_eq!(rough(ms(3 * 3_600_000 + 5 * 60_000)), "3h05m");
        assert_eq!(rough(ms(2 * 86_400_000 + 4 * 3_600_000)), "2d04h");
    }
}
