//! The job a lease is taken for: started under it (its environment names the lease), and
//! supervised while the watchdog renews it.

use super::reentrancy::held_with;
use super::turn::{Turn, UnderLease};
use crate::duration::Human;
use crate::ending::Course;
use crate::lock::backend::Backend;
use crate::lock::{Holder, Lease, LockService, LockSpec};
use crate::report::Report;
use crate::signals::Signals;
use crate::supervisor::{self, Guard, Job, SpawnError};
use crate::watchdog::{self, Deadline};
use std::cell::Cell;
use std::ffi::OsString;
use std::time::Duration;
use tracing::{error, info};

/// The job a lease is taken for: started under it, supervised with the watchdog renewing it.
pub(super) struct HeldJob<'a> {
    pub(super) spec: &'a LockSpec,
    pub(super) holder: &'a Holder,
    pub(super) command: &'a [OsString],
    pub(super) opts: &'a supervisor::Options,
    pub(super) policy: supervisor::Policy,
    /// `--every` / `--min-hold`: how long the key stays after the acquire.
    pub(super) hold: Duration,
    /// `--on-lost terminate`.
    pub(super) terminate: bool,
    /// The loss grace, when the TTL cuts `--kill-after` short (`watchdog::loss_grace`): said
    /// once, when a job is about to start (a skipped cron tick stays one line).
    pub(super) clamped_grace: Cell<Option<Duration>>,
}

impl UnderLease<Backend, Signals> for HeldJob<'_> {
    /// Runs the job under `lease` until the whole job is gone.
    async fn run(
        &self,
        lock: &mut Backend,
        signals: &mut Signals,
        lease: &Lease,
        report: &mut Report,
    ) -> Turn {
        let spec = self.spec;
        let kill_after = self.policy.kill_after;
        if let Some(grace) = self.clamped_grace.take() {
            info!(kill_after = %Human(kill_after), ttl = %Human(spec.ttl), grace = %Human(grace),
                  "--kill-after is longer than this TTL allows: if the lock is lost, the job gets SIGTERM only this grace before its lease can expire");
        }
        let env = [
            ("LOCKRUN_KEY", spec.key.clone()),
            ("LOCKRUN_TOKEN", self.holder.token.clone()),
            ("LOCKRUN_FENCE", lease.fence.to_string()),
            (
                "LOCKRUN_HELD",
                held_with(&spec.key, &self.holder.token, lease.fence),
            ),
        ];
        let deadline = Deadline::new(lease, spec.ttl, lock.drift(spec.ttl), kill_after);
        // Sent from a thread of its own: the job starts without waiting for it.
        report.job_starting();
        let job = match Job::spawn(self.command, &env, self.opts, Some(deadline.term_at())) {
            Ok(job) => job,
            Err(SpawnError::LeaseExpired) => return Turn::Expired,
            // The hold (--every, --min-hold) keeps the tick from the other hosts only for a
            // job that started: a command that could not be started gives the tick back at
            // once, so a broken host cannot take it from a healthy one.
            Err(e) => {
                error!("{e}");
                return Turn::Done {
                    course: Course::Failed(e.exit_code()),
                    keep: Duration::ZERO,
                    lease_end: deadline.get(),
                };
            }
        };
        report.job_started();
        let stats = watchdog::Stats::default();
        // The watchdog resolves only when the lock is lost.
        let guard = Guard {
            lost: watchdog::run(lock, spec, lease, &deadline, &stats),
            deadline: &deadline,
            terminate: self.terminate,
        };
        let job = supervisor::supervise(job, self.policy, signals, Some(guard)).await;
        report.renewals(&stats);
        Turn::Done {
            course: Course::Ran {
                job,
                stop_received: signals.stop_received().is_some(),
                key_gone: false,
            },
            keep: self.hold.saturating_sub(lease.confirmed_at.elapsed()),
            // As the last confirmed renewal left it: the watchdog stopped with the job.
            lease_end: deadline.get(),
        }
    }
}
