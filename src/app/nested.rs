//! A reentrant run: a lockrun of a key that an enclosing lockrun (this job's ancestor) holds.

use crate::ending::{decide, Course, Ending};
use crate::lock::LockSpec;
use crate::report::Report;
use crate::signals::Signals;
use crate::supervisor::{self, Guard, Job};
use crate::watchdog::Lost;
use std::ffi::OsString;
use tracing::{error, info};

/// A nested lockrun of a key an enclosing lockrun holds: the job runs under that holder's
/// lock, with no lock of its own to take, renew or release.
pub(super) struct Nested<'a> {
    pub(super) spec: &'a LockSpec,
    /// The enclosing holder's token and fence, passed on to the job.
    pub(super) token: String,
    pub(super) fence: String,
    pub(super) command: &'a [OsString],
    pub(super) opts: &'a supervisor::Options,
    pub(super) policy: supervisor::Policy,
}

impl Nested<'_> {
    pub(super) async fn run(self, signals: &mut Signals, report: &mut Report) -> Ending {
        let spec = self.spec;
        info!(key = %spec.key, "redis lock already held by this job (reentrant)");
        // The outer lockrun holds the lock (and records its fence and renewals). The job runs
        // under that holder's key, token and fence, whichever enclosing lockrun it is (A → B →
        // A: A's, not B's).
        report.waited();
        let env = [
            ("LOCKRUN_KEY", spec.key.clone()),
            ("LOCKRUN_TOKEN", self.token),
            ("LOCKRUN_FENCE", self.fence),
        ];
        report.job_starting();
        let job = match Job::spawn(self.command, &env, self.opts, None) {
            Ok(job) => job,
            Err(e) => {
                error!("{e}");
                return Ending::failed(e.exit_code());
            }
        };
        type Unguarded = std::future::Pending<Lost>;
        let job =
            supervisor::supervise(job, self.policy, signals, None::<Guard<'_, Unguarded>>).await;
        decide(Course::Ran {
            job,
            stop_received: signals.stop_received().is_some(),
            key_gone: false,
        })
    }
}
