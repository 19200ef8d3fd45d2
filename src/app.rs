//! One run of lockrun, in the order tini's `main` has it: take the lock (waiting if asked),
//! run the held job under the watchdog, release once, and report how it ended.
//!
//! [`run`] wires the real pieces together. The turn (`turn.rs`: take the lock, run the job
//! under it, release; the waiting loop, give-up and leave) is tested against fakes; the job
//! under a lease is `held_job.rs`, a reentrant run `nested.rs`, and what a job is told of the
//! holders around it `reentrancy.rs`.

mod held_job;
mod nested;
mod reentrancy;
mod turn;

use crate::cli::OnLost;
use crate::ending::Ending;
use crate::lock::{Holder, LockService};
use crate::plan::Plan;
use crate::report::Report;
use crate::signals::Signals;
use crate::supervisor;
use crate::watchdog;
use held_job::HeldJob;
use nested::Nested;
use reentrancy::reentrant_token;
use std::cell::Cell;
use tracing::debug;
use turn::{take_turns, unavailable, Waiter};

/// One run of `plan`, and how it ended; `report` is told what happened along the way (wait,
/// fence, the job's start, renewals, held), and the caller tells it the ending, once the lock
/// is released.
pub async fn run(plan: Plan, signals: &mut Signals, report: &mut Report) -> Ending {
    let started = report.started();
    let Plan {
        spec,
        command,
        wait,
        hold,
        spread,
        conflict_exit_code,
        kill_after,
        time_limit,
        on_lost,
        group,
        subreaper,
        mut lock,
        ping,
    } = plan;
    report.ping_to(ping);
    let opts = supervisor::Options {
        group,
        // A subreaper bit inherited across exec (from a supervisor that set it and exec'd us)
        // makes orphans ours too: they must be reaped or they pile up as zombies.
        reap_all: subreaper
            || std::process::id() == 1
            || nix::sys::prctl::get_child_subreaper().unwrap_or(false),
        mask: signals.original_mask(),
    };
    let policy = supervisor::Policy {
        kill_after,
        time_limit,
    };

    if let Some((token, fence)) = reentrant_token(&spec.key) {
        match lock.is_held_by(&spec, &token).await {
            Ok(true) => {
                let nested = Nested {
                    spec: &spec,
                    token,
                    fence,
                    command: &command,
                    opts: &opts,
                    policy,
                };
                return nested.run(signals, report).await;
            }
            Ok(false) => debug!("LOCKRUN_TOKEN no longer holds the key; locking normally"),
            Err(e) => return Ending::failed(unavailable(&e)),
        }
    }

    let holder = Holder::new(&command[0]);
    let mut waiter = Waiter::new(&spec, &holder, wait, started, conflict_exit_code);
    if !spread.is_zero() {
        waiter.delay_first_attempt(crate::lock::jitter(spread));
    }
    let grace = watchdog::loss_grace(spec.ttl, kill_after);
    let terminate = on_lost == OnLost::Terminate;
    let job = HeldJob {
        spec: &spec,
        holder: &holder,
        command: &command,
        opts: &opts,
        policy,
        hold,
        terminate,
        clamped_grace: Cell::new((grace < kill_after && terminate).then_some(grace)),
    };
    take_turns(&mut lock, &mut waiter, &job, signals, report).await
}
