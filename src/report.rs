//! The one place a run reports to. It is told what happens as the run goes (the wait over, the
//! lock taken, the job started, its renewals, how long the lock was held) and, at the end, how
//! the run ended ([`Ending`]); the metrics file and the health-check pings are rendered from
//! that. (The key's history entry is the release's: [`Ending::note`].)

use crate::ending::Ending;
use crate::lock::Lease;
use crate::metrics::{self, RunRecord};
use crate::ping::{Pinger, Target};
use crate::watchdog::Stats;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// What one run reports, and where to.
pub struct Report {
    record: RunRecord,
    /// `--metrics-file`.
    metrics_file: Option<PathBuf>,
    /// `--ping`, once the plan has its target.
    pinger: Option<Pinger>,
}

impl Report {
    /// A run of `key` starting now. `every`, `shared`: its options, which label the metrics.
    pub fn begin(
        key: &str,
        every: Option<Duration>,
        shared: bool,
        metrics_file: Option<PathBuf>,
    ) -> Report {
        let mut record = RunRecord::begin(key);
        record.every = every;
        record.shared = shared;
        Report {
            record,
            metrics_file,
            pinger: None,
        }
    }

    /// The job's start and end are pinged to `target` (`--ping`).
    pub fn ping_to(&mut self, target: Option<Target>) {
        self.pinger = target.map(Pinger::new);
    }

    /// When the run started, on the monotonic clock: history durations and metrics agree.
    pub fn started(&self) -> Instant {
        Instant::from_std(self.record.started())
    }

    /// The wait for the lock is over: taken, given up, or (nested) not needed.
    pub fn waited(&mut self) {
        self.record.wait = self.record.elapsed();
    }

    /// The lock was found held by a holder that started the job then (its `started=`): with
    /// the same crontab everywhere, this tick's run.
    pub fn holder_started(&mut self, at: Option<SystemTime>) {
        self.record.job_started = at;
    }

    /// The lock was taken: `lease`; `tick`: for one tick (`--standby`), whose attempt it is.
    pub fn took(&mut self, lease: &Lease, tick: bool) {
        self.record.fence = lease.fence;
        self.record.attempt = tick.then_some(lease.attempt);
    }

    /// The job is about to start: `/start` is sent (without waiting for it).
    pub fn job_starting(&self) {
        if let Some(pinger) = &self.pinger {
            pinger.start();
        }
    }

    /// The command has just started.
    pub fn job_started(&mut self) {
        self.record.command_started();
    }

    /// What the watchdog did while the job ran.
    pub fn renewals(&mut self, stats: &Stats) {
        self.record.renewals = stats.renewals.get();
        self.record.renewal_failures = stats.failures.get();
    }

    /// The lock was held `d` longer (a run that gave a lease back holds it more than once).
    pub fn held_for(&mut self, d: Duration) {
        self.record.held += d;
    }

    /// What the report holds so far, for the tests of the parts that tell it.
    #[cfg(test)]
    pub(crate) fn record(&self) -> &RunRecord {
        &self.record
    }

    /// The run ended as `ending` says: the metrics file, then the end ping. Called once the
    /// lock is released: a slow disk or monitor must not hold it.
    pub fn finish(mut self, ending: &Ending) {
        if let Some(path) = &self.metrics_file {
            self.record.finish(ending);
            metrics::write(path, &self.record);
        }
        // After the metrics file: the ping may wait on the network (bounded,
        // `ping::END_BOUND`).
        if let Some(pinger) = &self.pinger {
            pinger.finish(ending);
        }
    }
}
