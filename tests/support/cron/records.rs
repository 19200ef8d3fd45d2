//! What the runs left: the job log, `lockrun history`, and the results table.

use super::{hhmm, tick_of};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// One line of the job log: a job ran on `host` from `start` to `end` (real clock, seconds).
#[derive(Clone, Debug, PartialEq)]
pub struct JobRun {
    pub host: String,
    pub start: f64,
    pub end: f64,
}

/// The job log: one `<hostname> <start> <end>` line per run.
pub fn parse_job_log(text: &str) -> Result<Vec<JobRun>, String> {
    text.lines()
        .map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let num = |s: &str| s.parse::<f64>().ok();
            match f[..] {
                [host, start, end] => match (num(start), num(end)) {
                    (Some(start), Some(end)) if start <= end => Ok(JobRun {
                        host: host.to_string(),
                        start,
                        end,
                    }),
                    _ => Err(format!("job log line {line:?}: bad times")),
                },
                _ => Err(format!("job log line {line:?}: not `host start end`")),
            }
        })
        .collect()
}

/// One entry of `lockrun history --json`.
#[derive(Clone, Debug, PartialEq)]
pub struct HistoryEntry {
    pub outcome: String,
    pub host: String,
    /// When it was recorded (server clock, ms): the end of a run, the attempt of a skip.
    pub time_ms: u64,
    /// From lockrun's start (waiting included) to `time_ms`.
    pub duration_ms: u64,
    pub exit_code: Option<i64>,
    /// `--standby`: which attempt at its tick the run was (absent for a first attempt that
    /// completed it, and for skips).
    pub attempt: Option<i64>,
    pub fence: Option<u64>,
}

impl HistoryEntry {
    /// When the lockrun that wrote it started (seconds).
    pub fn start(&self) -> f64 {
        self.time_ms.saturating_sub(self.duration_ms) as f64 / 1000.0
    }
}

pub fn parse_history(json: &str) -> Result<Vec<HistoryEntry>, String> {
    let v: serde_json::Value =
        serde_json::from_str(json).map_err(|e| format!("history --json: {e}: {json:?}"))?;
    let arr = v
        .as_array()
        .ok_or(format!("history --json: not a list: {json:?}"))?;
    arr.iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().map(str::to_string);
            let n = |k: &str| e[k].as_u64();
            match (s("outcome"), s("host"), n("time_ms"), n("duration_ms")) {
                (Some(outcome), Some(host), Some(time_ms), Some(duration_ms)) => Ok(HistoryEntry {
                    outcome,
                    host,
                    time_ms,
                    duration_ms,
                    exit_code: e["exit_code"].as_i64(),
                    attempt: e["attempt"].as_i64(),
                    fence: e["fence"].as_u64(),
                }),
                _ => Err(format!(
                    "history entry without outcome/host/time_ms/duration_ms: {e}"
                )),
            }
        })
        .collect()
}

/// The key's `lockrun history`, every entry once: read after each tick and at the end, as the
/// stream keeps only about the last 100 runs (`--history`, which the README's line leaves at its
/// default) and a long run has more.
#[derive(Default)]
pub struct HistoryLog {
    entries: BTreeMap<(u64, String, u64, String), HistoryEntry>,
    pub problems: Vec<String>,
}

impl HistoryLog {
    pub fn read(&mut self, key: &str, url: &str) {
        let mut cmd = crate::support::Lockrun::bare();
        cmd.args(["history", key, "--json", "-n", "10000", "-r", url]);
        let out = crate::support::run(cmd);
        if !out.status.success() {
            self.problems.push(format!(
                "lockrun history failed: {}",
                crate::support::stderr_of(&out)
            ));
            return;
        }
        match parse_history(&crate::support::stdout_of(&out)) {
            Ok(entries) => {
                for e in entries {
                    let id = (e.time_ms, e.host.clone(), e.duration_ms, e.outcome.clone());
                    self.entries.insert(id, e);
                }
            }
            Err(e) => self.problems.push(e),
        }
    }

    /// Newest first, as `lockrun history` prints them.
    pub fn entries(&self) -> Vec<HistoryEntry> {
        self.entries.values().rev().cloned().collect()
    }
}

/// How far apart a `ran` entry's start and its job-log line's may be (lockrun starting up and
/// connecting before the job's first `date`, on a loaded machine).
pub const MATCH_SECS: f64 = 2.0;

/// Checks that `lockrun history` and the job log tell the same story: each `ran` entry (exit 0)
/// is one job-log line of the same host starting within [`MATCH_SECS`], and no line is left
/// over; no outcome other than `ran` and `skipped`. Returns the disagreements.
pub fn match_history(runs: &[JobRun], history: &[HistoryEntry]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut matched = vec![false; runs.len()];
    let ran: Vec<&HistoryEntry> = history.iter().filter(|e| e.outcome == "ran").collect();
    for e in &ran {
        let best = runs
            .iter()
            .enumerate()
            .filter(|(i, r)| !matched[*i] && r.host == e.host)
            .map(|(i, r)| (i, (r.start - e.start()).abs()))
            .filter(|(_, d)| *d <= MATCH_SECS)
            .min_by(|a, b| a.1.total_cmp(&b.1));
        match best {
            Some((i, _)) => matched[i] = true,
            None => problems.push(format!(
                "tick {}: history has a run on {} started at {:.3} with no job-log line",
                hhmm(tick_of(e.start())),
                e.host,
                e.start()
            )),
        }
        if e.exit_code != Some(0) {
            problems.push(format!(
                "history: a run ended with exit code {:?}: {e:?}",
                e.exit_code
            ));
        }
    }
    for (r, _) in runs.iter().zip(&matched).filter(|(_, m)| !**m) {
        problems.push(format!(
            "tick {}: job-log line {} {:.3} has no `ran` entry in the history",
            hhmm(tick_of(r.start)),
            r.host,
            r.start
        ));
    }
    if ran.len() != runs.len() {
        problems.push(format!(
            "{} `ran` entries in the history, {} job-log lines",
            ran.len(),
            runs.len()
        ));
    }
    for e in history
        .iter()
        .filter(|e| e.outcome != "ran" && e.outcome != "skipped")
    {
        problems.push(format!(
            "history: unexpected outcome {:?}: {e:?}",
            e.outcome
        ));
    }
    problems
}

/// Runs per tick → number of ticks, over `ticks` (a tick without runs counts as 0).
pub fn histogram(runs: &[JobRun], ticks: &BTreeSet<i64>) -> BTreeMap<usize, usize> {
    let mut per_tick: BTreeMap<i64, usize> = ticks.iter().map(|t| (*t, 0)).collect();
    for r in runs {
        if let Some(n) = per_tick.get_mut(&tick_of(r.start)) {
            *n += 1;
        }
    }
    let mut hist = BTreeMap::new();
    for n in per_tick.values() {
        *hist.entry(*n).or_insert(0) += 1;
    }
    hist
}

/// One row of the results table.
#[derive(Clone)]
pub struct Row {
    pub configuration: String,
    /// Each host's daemon and where lockrun is.
    pub hosts: String,
    pub minutes: usize,
    pub histogram: BTreeMap<usize, usize>,
    pub mails: String,
}

/// The results table (markdown), after a caption line.
pub fn table(caption: &str, rows: &[Row]) -> String {
    let mut t = format!(
        "{caption}\n\n| configuration | hosts (daemon, where lockrun is) | minutes observed | runs per minute (runs: minutes) | mails |\n|---|---|---|---|---|\n"
    );
    for r in rows {
        writeln!(
            t,
            "| {} | {} | {} | {:?} | {} |",
            r.configuration, r.hosts, r.minutes, r.histogram, r.mails
        )
        .unwrap();
    }
    t
}
