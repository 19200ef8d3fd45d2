//! The harness of the standby cron test (tests/cases/cron_standby.rs, which holds its
//! configurations and what it asserts): the faults and hosts it is described by (here), the
//! job and its log (`job.rs`), driving the daemons through the ticks and injecting each tick's
//! fault (`run.rs`), the checks of what the runs, the history and the mail show (`check.rs`),
//! and the results table (`report.rs`). The daemons are `support::cron`'s.

mod check;
mod job;
mod report;
mod run;

pub use check::*;
pub use job::*;
pub use report::*;
pub use run::*;

use crate::support::cron::{Channel, Daemon};

/// The lease: short, so that a standby takes over a dead host's tick within seconds (the guide:
/// at most one TTL after the death).
pub const TTL: &str = "5s";
pub const TTL_S: f64 = 5.0;
/// The job's steps of one second.
pub const STEPS: u32 = 20;
/// How far into the job the fault comes.
pub const FAULT_AFTER: f64 = 5.0;
/// How long a freeze or a cut lasts: well past the lease, so the standby has taken over.
pub const THAW_AFTER: f64 = TTL_S + 10.0;
/// The takeover's WARN line.
pub const TAKEOVER: &str = "the host that took this tick did not complete it; running it here";

/// What the test does to the host that took a tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    HostDied,
    LockrunKilled,
    Frozen,
    JobKilled,
    CutOff,
    Stopped,
    Healthy,
}

use Fault::*;

/// One tick of each, in this order, over and over.
pub const ROTATION: [Fault; 7] = [
    HostDied,
    LockrunKilled,
    Frozen,
    JobKilled,
    CutOff,
    Stopped,
    Healthy,
];

impl Fault {
    pub fn label(self) -> &'static str {
        match self {
            HostDied => "host died (SIGKILL to lockrun and its job's group)",
            LockrunKilled => {
                "lockrun killed (SIGKILL to lockrun alone; its job gets SIGTERM from the \
                 parent-death signal)"
            }
            Frozen => "host frozen (SIGSTOP to all its processes, SIGCONT after TTL + 10 s)",
            JobKilled => "job killed (SIGKILL to its group)",
            CutOff => "host cut off from Redis (iptables, for TTL + 10 s)",
            Stopped => "lockrun stopped (SIGTERM)",
            Healthy => "none (a healthy tick)",
        }
    }

    /// How far into the job the fault comes. A step is a `sleep 1` and a log line, so
    /// [`FAULT_AFTER`] falls just as a `sleep` ends; lockrun alone is killed half a second
    /// later, mid-`sleep`, so that the `sleep` outlives the job's shell (dead of the
    /// parent-death signal) by about half a second, orphaned in the job's group.
    pub fn after(self) -> f64 {
        match self {
            LockrunKilled => FAULT_AFTER + 0.5,
            _ => FAULT_AFTER,
        }
    }

    /// The run hands the tick on itself, at once; otherwise only its lease's end does.
    pub fn at_once(self) -> bool {
        matches!(self, JobKilled | Stopped)
    }
}

/// One host: its name (hostname and network namespace), daemon, where lockrun is, its clock.
#[derive(Clone, Copy)]
pub struct Host {
    pub name: &'static str,
    pub daemon: Daemon,
    pub channel: Channel,
    pub skew: i32,
}

/// Three hosts under one key.
pub struct Config {
    pub label: &'static str,
    pub key: &'static str,
    pub hosts: [Host; 3],
    /// Where in [`ROTATION`] its first tick is: configurations that run at once inject
    /// different faults in the same minute.
    pub offset: usize,
}

/// The fault of a configuration's `i`-th tick.
pub fn fault_of(c: &Config, i: usize) -> Fault {
    ROTATION[(i + c.offset) % ROTATION.len()]
}

/// The tick (minute since the epoch) a time belongs to: from 5 s before its minute to 5 s
/// before the next. The +3 s host fires at the real :58, and a tick (`--every 1m`: 54 s from
/// its first acquire) is over by :52 of its minute, so every attempt, line and mail of a tick
/// falls in its window.
pub fn tick_at(t: f64) -> i64 {
    ((t + 5.0) / 60.0).floor() as i64
}

/// Seconds since the epoch of a log line's leading UTC timestamp
/// (`2026-11-27T12:32:00.837489Z`), if it has one.
pub fn line_time(line: &str) -> Option<f64> {
    let ts = line.split_whitespace().next()?;
    // Whole seconds as lockrun reads its own times; the fraction after them.
    let whole = ::lockrun::utc::parse(ts)?;
    let frac = match ts.strip_suffix('Z')?.split_once('.') {
        Some((_, digits)) => format!("0.{digits}").parse::<f64>().ok()?,
        None => 0.0,
    };
    Some(whole as f64 + frac)
}
