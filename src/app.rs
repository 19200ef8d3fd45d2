//! One run of lockrun, in the order tini's `main` has it: take the lock (waiting if asked),
//! run the held job under the watchdog, release once, and report how it ended.
//!
//! [`run`] wires the real pieces together; the lock's part (the waiting loop, give-up, leave
//! and release) is `turn`, tested against fakes.

mod turn;

use crate::cli::OnLost;
use crate::duration::Human;
use crate::ending::{decide, Course, Ending};
use crate::lock::backend::Backend;
use crate::lock::{Holder, Lease, LockService, LockSpec};
use crate::plan::Plan;
use crate::report::Report;
use crate::signals::Signals;
use crate::supervisor::{self, Guard, Job, SpawnError};
use crate::watchdog::{self, Deadline, Lost};
use std::cell::Cell;
use std::ffi::OsString;
use std::time::Duration;
use tracing::{debug, error, info};
use turn::{take_turns, unavailable, Turn, Waiter};

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
    let start =
        async |lock: &mut Backend, signals: &mut Signals, lease: &Lease, report: &mut Report| {
            job.run(lock, signals, lease, report).await
        };
    take_turns(&mut lock, &mut waiter, signals, report, start).await
}

/// A nested lockrun of a key an enclosing lockrun holds: the job runs under that holder's
/// lock, with no lock of its own to take, renew or release.
struct Nested<'a> {
    spec: &'a LockSpec,
    /// The enclosing holder's token and fence, passed on to the job.
    token: String,
    fence: String,
    command: &'a [OsString],
    opts: &'a supervisor::Options,
    policy: supervisor::Policy,
}

impl Nested<'_> {
    async fn run(self, signals: &mut Signals, report: &mut Report) -> Ending {
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

/// The job a lease is taken for: started under it, supervised with the watchdog renewing it.
struct HeldJob<'a> {
    spec: &'a LockSpec,
    holder: &'a Holder,
    command: &'a [OsString],
    opts: &'a supervisor::Options,
    policy: supervisor::Policy,
    /// `--every` / `--min-hold`: how long the key stays after the acquire.
    hold: Duration,
    /// `--on-lost terminate`.
    terminate: bool,
    /// The loss grace, when the TTL cuts `--kill-after` short (`watchdog::loss_grace`): said
    /// once, when a job is about to start (a skipped cron tick stays one line).
    clamped_grace: Cell<Option<Duration>>,
}

impl HeldJob<'_> {
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
        }
    }
}

/// A nested lockrun of a key that one of its enclosing lockruns holds gets that one's token
/// and fence: the nearest's from `LOCKRUN_KEY`/`LOCKRUN_TOKEN`/`LOCKRUN_FENCE`, any other's from
/// `LOCKRUN_HELD` (so A → B → A is reentrant, not a deadlock with its own ancestor).
fn reentrant_token(key: &str) -> Option<(String, String)> {
    let var = |name: &str| std::env::var(name).ok();
    let nearest = var("LOCKRUN_KEY").filter(|k| k == key).and_then(|_| {
        Some((
            var("LOCKRUN_TOKEN")?,
            var("LOCKRUN_FENCE").unwrap_or_default(),
        ))
    });
    let wanted = key_digest(key);
    let (token, fence) = nearest
        .or_else(|| held_entries().find_map(|e| (e.key == wanted).then_some((e.token, e.fence))))?;
    (!token.is_empty()).then_some((token, fence))
}

/// One enclosing holder in `LOCKRUN_HELD`: `<SHA-1 of the key>:<token>:<fence>`, the entries
/// comma-separated. A digest, not the key: any key is one plain word of 40 characters that way
/// (newlines and commas included), and a long key (up to 128 KiB) would not fit twice in the
/// command's environment.
struct HeldEntry {
    key: String,
    token: String,
    fence: String,
}

fn held_entries() -> impl Iterator<Item = HeldEntry> {
    let held = std::env::var("LOCKRUN_HELD").unwrap_or_default();
    let entries: Vec<HeldEntry> = held
        .split(',')
        .filter_map(|e| {
            let mut parts = e.splitn(3, ':');
            Some(HeldEntry {
                key: parts.next()?.to_string(),
                token: parts.next()?.to_string(),
                fence: parts.next().unwrap_or_default().to_string(),
            })
        })
        .collect();
    entries.into_iter()
}

/// `LOCKRUN_HELD` for the job: every enclosing holder's entry (the nearest one's
/// `LOCKRUN_KEY`/`LOCKRUN_TOKEN` too, when a job passed on only those, as the guide's
/// reentrancy section has it), then this one's. A list that would outgrow one
/// environment entry drops its oldest entries first.
fn held_with(key: &str, token: &str, fence: u64) -> String {
    let own = key_digest(key);
    let mut entries: Vec<HeldEntry> = held_entries().filter(|e| e.key != own).collect();
    if let (Ok(k), Ok(t)) = (std::env::var("LOCKRUN_KEY"), std::env::var("LOCKRUN_TOKEN")) {
        let k = key_digest(&k);
        if k != own && !entries.iter().any(|e| e.key == k) {
            let fence = std::env::var("LOCKRUN_FENCE").unwrap_or_default();
            entries.push(HeldEntry {
                key: k,
                token: t,
                fence,
            });
        }
    }
    entries.push(HeldEntry {
        key: own,
        token: token.to_string(),
        fence: fence.to_string(),
    });
    let mut text: Vec<String> = entries
        .into_iter()
        .map(|e| format!("{}:{}:{}", e.key, e.token, e.fence))
        .collect();
    while text.iter().map(|e| e.len() + 1).sum::<usize>() > 64 * 1024 && text.len() > 1 {
        text.remove(0);
    }
    text.join(",")
}

fn key_digest(key: &str) -> String {
    crate::lock::public_id(key)
}
