//! The high-availability suite's results: one row per scenario over all of its runs, checked
//! against what the README promises for it, printed, and appended to `LOCKRUN_HA_REPORT` (the
//! README's availability table is that file; `tests/ha-table.sh` regenerates it).
//!
//! Each run of a scenario is a [`Chaos`](super::chaos::Chaos) scenario of its own, whose
//! [`Report`] already checked fences, exit codes and leftover keys; [`Runs`] adds the promise
//! about overlaps across the runs. The partition suites' topologies (servers on a [`Net`])
//! start their client hosts' lockruns through one [`Topology`] trait.

use super::chaos::{append_row, Chaos, Job, Report};
use super::netns::Net;
use super::Lockrun;
use std::time::Duration;

/// Servers on a private network that the client hosts' lockruns are pointed at.
pub trait Topology {
    fn net(&self) -> &Net;

    /// The URLs a lockrun is given, one `-r` each.
    fn urls(&self) -> Vec<String>;

    /// A lockrun on `host` against these servers ([`Net::lockrun`] with [`Topology::urls`]).
    fn lockrun(&self, ch: &Chaos, host: &str, args: &[&str], job: &Job) -> Lockrun {
        self.net().lockrun(ch, host, &self.urls(), args, job)
    }

    /// `lockrun -r <url>…` on `host`, its arguments and job still to come.
    fn client(&self, host: &str) -> Lockrun {
        self.urls().iter().fold(
            Lockrun::via(self.net().command(host, super::lockrun_bin())),
            Lockrun::url,
        )
    }
}

/// What the README promises about overlapping jobs in a scenario.
#[derive(Clone, Copy, Debug)]
pub enum Promise {
    /// No two live jobs overlap.
    NoOverlap,
    /// Jobs may overlap (documented), each overlap at most this long.
    AtMost(Duration),
}

/// The table's columns.
pub const HEADER: &str = "| topology | scenario | promise | runs | overlaps (worst) | fences out of order | exit codes |\n|---|---|---|---|---|---|---|";

/// The runs of one scenario.
pub struct Runs {
    topology: String,
    scenario: String,
    promise: Promise,
    reports: Vec<Report>,
}

impl Runs {
    pub fn new(topology: &str, scenario: &str, promise: Promise) -> Runs {
        Runs {
            topology: topology.to_string(),
            scenario: scenario.to_string(),
            promise,
            reports: Vec::new(),
        }
    }

    /// How many runs LOCKRUN_FAULTS_SCALE asks for (`base` at scale 1, at least 1).
    pub fn count(base: u64) -> u64 {
        let scale = std::env::var("LOCKRUN_FAULTS_SCALE")
            .ok()
            .and_then(|s| s.trim().parse::<f64>().ok())
            .filter(|x| *x > 0.0)
            .unwrap_or(1.0);
        ((base as f64 * scale).round() as u64).max(1)
    }

    /// Adds one run's report; its own violations fail the test at once (with its details).
    pub fn add(&mut self, report: Report) {
        report.assert();
        self.reports.push(report);
    }

    /// The row for the table.
    pub fn row(&self) -> String {
        let overlaps: usize = self.reports.iter().map(|r| r.overlaps).sum();
        let worst = self
            .reports
            .iter()
            .map(|r| r.worst_overlap_ms)
            .fold(0.0, f64::max);
        let disorder: usize = self.reports.iter().map(|r| r.fence_disorder).sum();
        let mut codes = std::collections::BTreeMap::new();
        for r in &self.reports {
            for (code, n) in &r.codes {
                *codes.entry(*code).or_insert(0) += n;
            }
        }
        let codes = codes
            .iter()
            .map(|(c, n)| format!("{c}×{n}"))
            .collect::<Vec<_>>()
            .join(", ");
        let promise = match self.promise {
            Promise::NoOverlap => "none".to_string(),
            Promise::AtMost(d) => format!("≤ {} ms each", d.as_millis()),
        };
        let overlaps = if overlaps == 0 {
            "**0**".to_string()
        } else {
            format!("{overlaps} (worst {worst:.0} ms)")
        };
        format!(
            "| {} | {} | {promise} | {} | {overlaps} | {disorder} | {codes} |",
            self.topology,
            self.scenario,
            self.reports.len()
        )
    }

    /// Checks the promise over all runs, prints the row and appends it to LOCKRUN_HA_REPORT.
    pub fn finish(self) {
        let row = self.row();
        eprintln!("{HEADER}\n{row}");
        append_row("LOCKRUN_HA_REPORT", HEADER, &row);
        for r in &self.reports {
            match self.promise {
                Promise::NoOverlap => assert_eq!(
                    r.overlaps, 0,
                    "{}: the README promises no overlap; run seed {} overlapped:\n{row}",
                    self.scenario, r.seed
                ),
                Promise::AtMost(bound) => assert!(
                    r.worst_overlap_ms <= bound.as_secs_f64() * 1e3,
                    "{}: the README bounds each overlap by {bound:?}; run seed {} overlapped {:.0} ms:\n{row}",
                    self.scenario,
                    r.seed,
                    r.worst_overlap_ms
                ),
            }
        }
    }
}
