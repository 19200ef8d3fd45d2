//! The checks of one configuration, each a named step: fences only increase; every tick
//! completes exactly once, on another host with a higher fence after a fault, within the TTL;
//! no two hosts' jobs are live at once; `lockrun history` tells the tick as it happened; what
//! the hosts printed or cron mailed is the takeover's WARN line and the faulted host's own
//! lines. What they found fills one row per fault kind.

use super::{
    fault_of, line_time, parse_runs, tick_at, Fault, Injected, Observed, Run, Schedule, Setup,
    TAKEOVER, TTL, TTL_S,
};
use crate::support::cron::{hhmm, HistoryEntry};
use crate::support::netns::Net;
use crate::support::redis_monitor::Seen;
use std::collections::{BTreeMap, BTreeSet};
use Fault::*;

/// One row of the table: a fault kind, over every tick that had it.
#[derive(Default)]
pub struct KindRow {
    pub ticks: usize,
    pub takeovers: usize,
    pub lost: usize,
    pub duplicates: usize,
    pub overlaps: Vec<f64>,
    pub to_takeover: Vec<f64>,
    /// A frozen host's job: how long it lived after the thaw, and the steps it did then.
    pub after_thaw: Vec<f64>,
    pub steps_after_thaw: usize,
    /// A job whose lockrun alone was killed: how long after the kill its shell was found dead,
    /// and its last process alive.
    pub leader_after: Vec<f64>,
    pub job_after: Vec<f64>,
    /// `lockrun history` of the tick, outcomes (attempt) in order.
    pub histories: BTreeSet<String>,
    /// What the faulted host printed (or cron mailed), without times and fields.
    pub own_lines: BTreeSet<String>,
    pub takeover_warns: usize,
}

/// What the checks found for one configuration.
pub struct Checked {
    pub rows: BTreeMap<Fault, KindRow>,
    /// Healthy ticks: requests of the host that ran the job, and of each standby.
    pub winner: Vec<(usize, BTreeMap<String, usize>)>,
    pub standby: Vec<(usize, BTreeMap<String, usize>)>,
    pub problems: Vec<String>,
}

/// A log line without its time and fields: `WARN message`.
pub fn gist(line: &str) -> String {
    let line = match line_time(line) {
        Some(_) => line.split_once(' ').map_or("", |(_, r)| r).trim_start(),
        None => line,
    };
    let mut words = Vec::new();
    for w in line.split(' ') {
        let field = w.split_once('=').is_some_and(|(k, _)| {
            !k.is_empty() && k.chars().all(|c| c.is_ascii_lowercase() || c == '_')
        });
        if field {
            break;
        }
        words.push(w);
    }
    words.join(" ").trim().to_string()
}

/// How long two intervals overlap (0 if not).
pub fn overlap(a: (f64, f64), b: (f64, f64)) -> f64 {
    (a.1.min(b.1) - a.0.max(b.0)).max(0.0)
}

/// The intervals a run was live: from its start to its end (or its death), less the time its
/// host was frozen.
pub fn live(start: f64, end: f64, frozen: Option<(f64, f64)>) -> Vec<(f64, f64)> {
    match frozen {
        Some((f, t)) if f < end && t > start => [(start, f), (t, end)]
            .into_iter()
            .filter(|(a, b)| b > a)
            .collect(),
        _ => vec![(start, end)],
    }
}

/// Everything one configuration left, read once, and the problems found in it so far.
struct Evidence<'a> {
    setup: &'a Setup<'a>,
    sched: &'a Schedule,
    injected: &'a [Injected],
    runs: Vec<Run>,
    /// When each run of `runs` was live.
    lives: Vec<Vec<(f64, f64)>>,
    history: Vec<HistoryEntry>,
    monitor: &'a [Seen],
    net: &'a Net,
    problems: Vec<String>,
}

/// One tick: its runs and the fault injected in it.
struct Tick<'a> {
    tick: i64,
    kind: Fault,
    /// `HH:MM`, for messages.
    name: String,
    /// The runs that started in it, with their index in [`Evidence::runs`].
    here: Vec<(usize, &'a Run)>,
    /// Those that reached their end.
    done: Vec<&'a Run>,
    fault: Option<&'a Injected>,
}

impl Tick<'_> {
    fn at(&self, t: f64) -> bool {
        tick_at(t) == self.tick
    }

    /// Its runs, for messages.
    fn all(&self) -> String {
        format!("{:?}", self.here.iter().map(|(_, r)| r).collect::<Vec<_>>())
    }
}

pub fn check(
    setup: &Setup,
    sched: &Schedule,
    seen: Observed,
    monitor: &[Seen],
    net: &Net,
) -> Checked {
    let mut problems = seen.problems;
    problems.extend(seen.history.problems.iter().cloned());
    let text = std::fs::read_to_string(&setup.job_log).unwrap_or_default();
    let runs = parse_runs(&text).unwrap_or_else(|e| {
        problems.push(e);
        Vec::new()
    });
    let mut ev = Evidence {
        setup,
        sched,
        injected: &seen.injected,
        runs,
        lives: Vec::new(),
        history: seen.history.entries(),
        monitor,
        net,
        problems,
    };
    let mut checked = Checked {
        rows: BTreeMap::new(),
        winner: Vec::new(),
        standby: Vec::new(),
        problems: Vec::new(),
    };
    ev.fences_increase();
    ev.lives = ev.lives();
    for (i, tick) in sched.ticks.iter().enumerate() {
        let t = ev.tick(i, *tick);
        let mut problems = Vec::new();
        let row = checked.rows.entry(t.kind).or_default();
        row.ticks += 1;
        ev.completed_once(&t, row, &mut problems);
        ev.taken_over(&t, row, &mut problems);
        ev.never_live_at_once(&t, row, &mut problems);
        ev.history_tells(&t, row, &mut problems);
        ev.requests(&t, &mut checked);
        ev.problems.extend(problems);
    }
    ev.only_expected_lines(&seen.output, &mut checked.rows);
    if !ev.problems.is_empty() {
        ev.problems.push(format!("the job log:\n{text}"));
        ev.problems.push(format!("the history:\n{:#?}", ev.history));
        ev.problems
            .push(format!("the faults:\n{:#?}", seen.injected));
    }
    checked.problems = ev.problems;
    checked
}

impl<'a> Evidence<'a> {
    fn injected(&self, tick: i64) -> Option<&'a Injected> {
        self.injected.iter().find(|f| f.tick == tick)
    }

    fn tick(&'a self, i: usize, tick: i64) -> Tick<'a> {
        let here: Vec<(usize, &Run)> = self
            .runs
            .iter()
            .enumerate()
            .filter(|(_, r)| tick_at(r.start) == tick)
            .collect();
        let done = here
            .iter()
            .map(|(_, r)| *r)
            .filter(|r| r.end.is_some())
            .collect();
        Tick {
            tick,
            kind: fault_of(self.setup.config, i),
            name: hhmm(tick),
            here,
            done,
            fault: self.injected(tick),
        }
    }

    /// Fences only increase, run after run.
    fn fences_increase(&mut self) {
        for w in self.runs.windows(2) {
            if w[1].fence <= w[0].fence {
                self.problems.push(format!(
                    "fences out of order: {} {} at {:.3}, then {} {} at {:.3}",
                    w[0].host, w[0].fence, w[0].start, w[1].host, w[1].fence, w[1].start
                ));
            }
        }
    }

    /// When each run was live: start to end, or to its death the test saw, less its freeze.
    fn lives(&mut self) -> Vec<Vec<(f64, f64)>> {
        let mut problems = Vec::new();
        let lives = self
            .runs
            .iter()
            .map(|r| {
                let f = self
                    .injected(tick_at(r.start))
                    .filter(|f| f.host == r.host && f.fence == r.fence);
                let end = r.end.or(f.and_then(|f| f.died)).unwrap_or_else(|| {
                    if self.sched.ticks.contains(&tick_at(r.start)) {
                        problems.push(format!(
                            "{} fence {}: a run that never ended and was not killed by the test",
                            r.host, r.fence
                        ));
                    }
                    r.steps.last().copied().unwrap_or(r.start)
                });
                let frozen = f
                    .filter(|f| f.kind == Frozen)
                    .map(|f| (f.at, f.restored.unwrap_or(f64::INFINITY)));
                live(r.start, end, frozen)
            })
            .collect();
        self.problems.extend(problems);
        lives
    }

    /// Exactly one run reaches its end; one run starts on a healthy tick, two after a fault.
    fn completed_once(&self, t: &Tick, row: &mut KindRow, problems: &mut Vec<String>) {
        let (name, kind) = (&t.name, t.kind);
        match t.done.len() {
            0 => {
                row.lost += 1;
                problems.push(format!(
                    "tick {name} ({kind:?}): no run reached its end: {}",
                    t.all()
                ));
            }
            1 => {}
            n => {
                row.duplicates += n - 1;
                problems.push(format!(
                    "tick {name} ({kind:?}): {n} runs reached their end: {}",
                    t.all()
                ));
            }
        }
        let expected_runs = if kind == Healthy { 1 } else { 2 };
        if t.here.len() != expected_runs {
            problems.push(format!(
                "tick {name} ({kind:?}): {} runs started, {expected_runs} expected: {}",
                t.here.len(),
                t.all()
            ));
        }
    }

    /// After a fault, another host with a higher fence completes the tick, within the TTL (at
    /// once when the run handed the tick on itself); the faulted run never reaches its end; a
    /// lockrun killed alone leaves its orphaned `sleep` for a moment; a thawed job is stopped
    /// by its lockrun.
    fn taken_over(&self, t: &Tick, row: &mut KindRow, problems: &mut Vec<String>) {
        let (name, kind) = (&t.name, t.kind);
        let Some(f) = t.fault else {
            if kind != Healthy {
                problems.push(format!("tick {name} ({kind:?}): no fault was injected"));
            }
            return;
        };
        let Some(d) = t.done.first() else {
            return;
        };
        if d.host == f.host || d.fence <= f.fence {
            problems.push(format!(
                "tick {name} ({kind:?}): the run that completed it is {} fence {}, the faulted \
                 one {} fence {}: another host with a higher fence expected",
                d.host, d.fence, f.host, f.fence
            ));
        } else {
            row.takeovers += 1;
            let took = d.start - f.at;
            row.to_takeover.push(took);
            let bound = if kind.at_once() { 3.0 } else { TTL_S + 3.0 };
            if took > bound {
                problems.push(format!(
                    "tick {name} ({kind:?}): the takeover's job started {took:.2} s after the \
                     fault (at most {bound} s expected with a {TTL} TTL)"
                ));
            }
        }
        if let (LockrunKilled, Some(leader), Some(died)) = (kind, f.leader_gone, f.died) {
            row.leader_after.push(leader - f.at);
            row.job_after.push(died - f.at);
            // The orphaned `sleep` must have been seen: the overlap check counts it live.
            if died - leader < 0.1 {
                problems.push(format!(
                    "tick {name}: the job on {} was last seen alive {:.3} s after its shell was \
                     found dead: no orphaned `sleep` seen in its group",
                    f.host,
                    died - leader
                ));
            }
        }
        let Some(r) = t
            .here
            .iter()
            .map(|(_, r)| r)
            .find(|r| r.host == f.host && r.fence == f.fence)
        else {
            return;
        };
        if r.end.is_some() {
            problems.push(format!(
                "tick {name} ({kind:?}): the faulted run on {} reached its end",
                f.host
            ));
        }
        if let (Frozen, Some(thaw), Some(gone)) = (kind, f.restored, f.gone) {
            // At most this long: the first look that found the job gone.
            let after = gone - thaw;
            row.after_thaw.push(after);
            row.steps_after_thaw += r.steps.iter().filter(|t| **t > thaw).count();
            // SIGTERM, then SIGKILL after --kill-after clamped to TTL/3 on a lost lock.
            if after > TTL_S / 3.0 + 1.0 {
                problems.push(format!(
                    "tick {name}: the thawed job on {} lived {after:.3} s after the thaw",
                    f.host
                ));
            }
        }
    }

    /// No two hosts' jobs live at once: each run of this tick against every other run. A
    /// thawed job lives until its lockrun, thawed with it, stops it: the overlap the safety
    /// page's fences are for, measured but allowed. Anything else is a failure.
    fn never_live_at_once(&self, t: &Tick, row: &mut KindRow, problems: &mut Vec<String>) {
        let (name, kind) = (&t.name, t.kind);
        for (k, r) in &t.here {
            for (j, o) in self.runs.iter().enumerate() {
                if j == *k || o.host == r.host || (t.at(o.start) && j < *k) {
                    continue;
                }
                let both: f64 = self.lives[*k]
                    .iter()
                    .flat_map(|a| self.lives[j].iter().map(move |b| overlap(*a, *b)))
                    .sum();
                if both > 0.0 {
                    row.overlaps.push(both);
                    if kind != Frozen {
                        problems.push(format!(
                            "tick {name} ({kind:?}): {} fence {} and {} fence {} were live at once \
                             for {both:.3} s",
                            r.host, r.fence, o.host, o.fence
                        ));
                    }
                }
            }
        }
    }

    /// lockrun's own account of the tick: one completed run, on the host whose job ended,
    /// attempt 2 after a fault; a `lost` attempt 1 on a host that never released.
    fn history_tells(&self, t: &Tick, row: &mut KindRow, problems: &mut Vec<String>) {
        let (name, kind) = (&t.name, t.kind);
        let mut entries: Vec<&HistoryEntry> =
            self.history.iter().filter(|e| t.at(e.start())).collect();
        entries.sort_by_key(|e| e.time_ms);
        let ok_runs: Vec<&&HistoryEntry> = entries
            .iter()
            .filter(|e| e.outcome == "ran" && e.exit_code == Some(0))
            .collect();
        let want_attempt = if kind == Healthy { None } else { Some(2) };
        match (&ok_runs[..], t.done.first()) {
            ([e], Some(d)) if e.host == d.host && e.attempt == want_attempt => {}
            _ => problems.push(format!(
                "tick {name} ({kind:?}): the history's completed runs {ok_runs:?}, one on the host \
                 whose job ended with attempt {want_attempt:?} expected"
            )),
        }
        if let (Some(f), HostDied | LockrunKilled | Frozen | CutOff) = (t.fault, kind) {
            // A thawed (or healed) host records its own loss too; `history` merges the two
            // entries, each with the attempt.
            let lost = entries
                .iter()
                .any(|e| e.outcome == "lost" && e.attempt == Some(1) && e.host == f.host);
            if !lost {
                problems.push(format!(
                    "tick {name} ({kind:?}): no `lost` entry of attempt 1 on {} in the history",
                    f.host
                ));
            }
        }
        let mut story: Vec<String> = entries
            .iter()
            .map(|e| match e.attempt {
                Some(a) => format!("{} ({a})", e.outcome),
                None => e.outcome.clone(),
            })
            .collect();
        story.sort();
        row.histories.insert(story.join(", "));
    }

    /// What each host asked of Redis on a healthy tick.
    fn requests(&self, t: &Tick, checked: &mut Checked) {
        let (Healthy, Some(d)) = (t.kind, t.done.first()) else {
            return;
        };
        for h in &self.setup.config.hosts {
            let ip = self.net.addr(h.name);
            let mut by: BTreeMap<String, usize> = BTreeMap::new();
            for (_, _, cmd) in self.monitor.iter().filter(|(s, a, _)| *a == ip && t.at(*s)) {
                *by.entry(cmd.clone()).or_default() += 1;
            }
            let n = by.values().sum();
            if h.name == d.host {
                checked.winner.push((n, by));
            } else {
                checked.standby.push((n, by));
            }
        }
    }

    /// Cron's mail and busybox crond's output, by tick: one takeover WARN line per takeover,
    /// from another host than the faulted one; otherwise only the faulted host's own lines.
    fn only_expected_lines(
        &mut self,
        output: &[(String, String, Option<f64>)],
        rows: &mut BTreeMap<Fault, KindRow>,
    ) {
        let mut warns: BTreeMap<i64, Vec<String>> = BTreeMap::new();
        for (host, line, sent) in output {
            let Some(t) = line_time(line).or(*sent) else {
                self.problems
                    .push(format!("{host} printed a line without a time: {line:?}"));
                continue;
            };
            let tick = tick_at(t);
            let Some(i) = self.sched.ticks.iter().position(|m| *m == tick) else {
                continue;
            };
            let kind = fault_of(self.setup.config, i);
            let f = self.injected(tick);
            if line.contains(TAKEOVER) && f.is_some_and(|f| f.host != *host) {
                warns.entry(tick).or_default().push(host.clone());
                rows.get_mut(&kind).unwrap().takeover_warns += 1;
            } else if f.is_some_and(|f| f.host == *host) {
                rows.get_mut(&kind).unwrap().own_lines.insert(gist(line));
            } else {
                self.problems.push(format!(
                    "tick {} ({kind:?}): {host} printed (or cron mailed) {line:?}",
                    hhmm(tick)
                ));
            }
        }
        for f in self.injected {
            let n = warns.get(&f.tick).map_or(0, Vec::len);
            if n != 1 {
                self.problems.push(format!(
                    "tick {} ({:?}): {n} takeover WARN lines in the mail and output (one expected)",
                    hhmm(f.tick),
                    f.kind
                ));
            }
        }
    }
}
