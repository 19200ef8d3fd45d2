//! The lock's part of a run: take the lock (the waiting loop: queue, sleep, give up, leave),
//! hand the lease to the job, release once. Generic over the lock ([`LockService`]) and the
//! signals lockrun receives ([`Incoming`]), so that every path is tested against fakes.

use crate::duration::{Human, Wait};
use crate::ending::{decide, Course, Ending};
use crate::exit_codes::ExitCode;
use crate::lock::{
    describe_holder, Acquire, Holder, Lease, LockError, LockKind, LockService, LockSpec, Note,
    Release,
};
use crate::report::Report;
use crate::signals::{self, Incoming};
use crate::watchdog::Deadline;
use std::time::Duration;
use tokio::time::Instant;
use tracing::{debug, error, info, warn};

/// Waits for the next signal: `Some(signo)` for a stop signal (SIGTERM, SIGINT, SIGHUP,
/// SIGQUIT), `None` for any other (they mean nothing before the command starts).
async fn next_stop<S: Incoming>(signals: &mut S) -> Option<i32> {
    let r = signals.recv().await;
    signals::STOP_SIGNALS.contains(&r.signo).then_some(r.signo)
}

/// The next stop signal; the others are passed over.
async fn wait_for_stop<S: Incoming>(signals: &mut S) -> i32 {
    loop {
        if let Some(sig) = next_stop(signals).await {
            return sig;
        }
    }
}

/// What holding the lock came to, once the job's part is over.
#[derive(Debug)]
pub(super) enum Turn {
    /// End as `course` has it (the job ran, or why it did not), keeping the key `keep` longer;
    /// the lease lasts until `lease_end` (its local deadline), and the release is retried
    /// until then.
    Done {
        course: Course,
        keep: Duration,
        lease_end: Instant,
    },
    /// The lease expired before the command could start (lockrun was delayed): not started.
    Expired,
}

/// What runs under a lease a turn took: the job ([`super::held_job::HeldJob`]), or a fake in
/// the tests.
#[allow(async_fn_in_trait)] // Static dispatch only; futures never cross threads.
pub(super) trait UnderLease<L, S> {
    /// Runs under `lease` until the job's part is over.
    async fn run(&self, lock: &mut L, signals: &mut S, lease: &Lease, report: &mut Report) -> Turn;
}

/// The lock's part of a run: acquire → run `job` under the lease → one release. A lease that
/// expired before the job could start is given back and the lock taken again while the wait
/// goes on. `report` is told of the wait, the lease and how long it was held; the run's
/// ending is returned.
pub(super) async fn take_turns<L, S, J>(
    lock: &mut L,
    waiter: &mut Waiter<'_>,
    job: &J,
    stops: &mut S,
    report: &mut Report,
) -> Ending
where
    L: LockService,
    S: Incoming,
    J: UnderLease<L, S>,
{
    let spec = waiter.spec;
    loop {
        let attempt = waiter.acquire(lock, stops).await;
        report.waited();
        let lease = match attempt {
            Ok(lease) => lease,
            Err(Failed::Conflict(ending, holder_started)) => {
                report.holder_started(holder_started);
                return ending;
            }
            Err(Failed::Ended(ending)) => return ending,
        };
        let acquired_at = Instant::now();
        report.took(&lease, spec.kind.tick().is_some());
        if lease.attempt > 1 {
            // Its own target: `-q` lets this warning through (see `logging::init`).
            warn!(target: crate::logging::TAKEOVER, key = %spec.key, attempt = lease.attempt,
                  "the host that took this tick did not complete it; running it here");
        }
        let reopened = lease.attempt == 1 && waiter.stood_by;
        if reopened {
            // It stood by for a tick under way, and then opened the tick itself: the server
            // lost the tick's record (restarted empty, failed over to a replica without it).
            warn!(target: crate::logging::TAKEOVER, key = %spec.key,
                  "the server lost the record of this tick while this host stood by for it (a restart or a failover); running the tick here");
        }
        // `mode` only in shared mode: an exclusive run's line stays the one scripts grep for.
        info!(key = %spec.key, ttl = %Human(spec.ttl), fence = lease.fence,
              mode = (spec.kind == LockKind::Shared).then_some(tracing::field::display("shared")),
              "redis lock acquired, starting job");
        // A signal that arrived while we were acquiring: the job must not start.
        let turn = match stops.take_stop() {
            Some(sig) => {
                info!(signal = %signals::name(sig), "interrupted before the command started");
                Turn::Done {
                    course: Course::Aborted(sig),
                    keep: Duration::ZERO,
                    lease_end: unrenewed_end(lock, spec, &lease),
                }
            }
            None => job.run(lock, stops, &lease, report).await,
        };
        let (ending, keep, lease_end) = match turn {
            Turn::Done {
                course,
                keep,
                lease_end,
            } => (Some(decide(course)), keep, lease_end),
            Turn::Expired => {
                warn!(key = %spec.key, "redis lock lease expired before the command could start (lockrun was delayed); not starting it");
                // Given back and taken again while the wait goes on (its history entry is the
                // run's, written when it ends); else the run is skipped.
                let skipped = (!waiter.goes_on()).then(|| decide(waiter.skipped(true)));
                (skipped, Duration::ZERO, unrenewed_end(lock, spec, &lease))
            }
        };
        let note = ending.map(|ending| Note {
            reopened,
            ..waiter.note(&ending)
        });
        let released = release(lock, stops, spec, &lease, keep, lease_end, note.as_ref()).await;
        report.held_for(acquired_at.elapsed());
        let Some(ending) = ending else { continue };
        if released == Released::Gone {
            // The key was gone or another holder's before the release: the job ran without
            // the lock for a while, like a loss a renewal finds. Its history entry says so
            // already (the release script recorded `lost`); the ending says the same.
            return ending.key_gone();
        }
        return ending;
    }
}

/// The local deadline of `lease` as its acquire left it (no renewal since): see
/// [`Deadline`].
fn unrenewed_end<L: LockService>(lock: &L, spec: &LockSpec, lease: &Lease) -> Instant {
    Deadline::new(lease, spec.ttl, lock.drift(spec.ttl), Duration::ZERO).get()
}

/// What a release found.
#[derive(Debug, PartialEq, Eq)]
enum Released {
    /// Deleted, kept for the hold, or failed (the TTL frees it).
    Done,
    /// The key was no longer ours: lost while the job ran.
    Gone,
}

/// Why no lease came of the waiting loop: how the run ended.
#[derive(Debug)]
enum Failed {
    /// Held elsewhere (skipped); when the holder was started, if its value says (`started=`).
    Conflict(Ending, Option<std::time::SystemTime>),
    /// Stopped by a signal, or an error.
    Ended(Ending),
}

impl Failed {
    /// Ended by the error `code`.
    fn code(code: ExitCode) -> Failed {
        Failed::Ended(Ending::failed(code))
    }
}

pub(super) fn unavailable(e: &LockError) -> ExitCode {
    error!("{e}");
    e.exit_code()
}

/// How often a waiter renews its place in the queue (tickets last `TICKET`, 3 s). Doubles as
/// a poll, so a lost wake-up hint costs at most this much latency.
const HEARTBEAT: Duration = Duration::from_secs(1);

/// The bound on cleaning up after an attempt or a wait that ends early (giving back what an
/// attempt may have taken, leaving the queue): what is not done by then expires by itself.
const CLEANUP: Duration = Duration::from_secs(1);

/// The waiting loop's state: who waits for which lock, until when, and what it has said.
pub(super) struct Waiter<'a> {
    spec: &'a LockSpec,
    holder: &'a Holder,
    /// A wait was asked for (not `--wait 0`), or `--standby`: queue, and retry an outage (a
    /// standby only once the server has answered: `waits_out_outages`).
    waiting: bool,
    /// `--standby`: the wait is for the tick under way, as long as the server says it lasts.
    standby: bool,
    /// When the wait ends; `None`: never.
    until: Option<Instant>,
    /// The run's start, for the history entries' durations.
    started: Instant,
    /// The exit code of a skipped run (`-E`).
    conflict_exit_code: u8,
    /// "already acquired; waiting" was said (once per run).
    announced: bool,
    /// An attempt has been answered (a standby subscribes from then on).
    looked: bool,
    /// With `--standby`: the server said a tick was under way and this run stood by for it.
    stood_by: bool,
    /// The holder the last look found, and when the server said that holder's lease ends.
    ends: Option<(Option<String>, Instant)>,
    /// `--spread`: how long to wait before the first attempt.
    delay: Option<Duration>,
}

impl<'a> Waiter<'a> {
    pub(super) fn new(
        spec: &'a LockSpec,
        holder: &'a Holder,
        wait: Wait,
        started: Instant,
        conflict_exit_code: u8,
    ) -> Waiter<'a> {
        Waiter {
            spec,
            holder,
            waiting: !wait.is_zero() || spec.kind.tick().is_some(),
            standby: spec.kind.tick().is_some(),
            // A standby's wait never outlasts a tick (`--every` goes without `--wait`); each
            // reply then says how much of the tick is left (`stand_by`).
            until: match (spec.kind.tick(), wait) {
                (Some(tick), _) => Some(Instant::now() + tick),
                (None, Wait::For(d)) => Some(Instant::now() + d),
                (None, Wait::Forever) => None,
            },
            started,
            conflict_exit_code,
            announced: false,
            looked: false,
            stood_by: false,
            ends: None,
            delay: None,
        }
    }

    /// Waits `delay` before the first attempt (`--spread`): a stop signal ends the wait.
    pub(super) fn delay_first_attempt(&mut self, delay: Duration) {
        self.delay = Some(delay);
    }

    /// Whether the wait goes on: one was asked for and it has not run out.
    fn goes_on(&self) -> bool {
        self.waiting && self.until.is_none_or(|d| Instant::now() < d)
    }

    /// Tries once; while waiting, queues and sleeps until a hint says it is our turn, the
    /// holder's lease ends (if we are next), the ticket needs renewing, or the wait ends; then
    /// tries again.
    async fn acquire<L: LockService, S: Incoming>(
        &mut self,
        lock: &mut L,
        stops: &mut S,
    ) -> Result<Lease, Failed> {
        let (spec, holder) = (self.spec, self.holder);
        if let Some(delay) = self.delay.take() {
            debug!(delay = %Human(delay), "--spread: waiting before the first attempt");
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                sig = wait_for_stop(stops) => return Err(self.stopped(lock, sig).await),
            }
        }
        loop {
            if let Some(sig) = stops.take_stop() {
                return Err(self.stopped(lock, sig).await);
            }
            // A standby subscribes only once its first attempt finds the tick taken: the host
            // that takes the tick makes the two requests of any run, no SUBSCRIBE.
            if self.waiting && (!self.standby || self.looked) {
                // Before each attempt (a no-op while subscribed): a release between our attempt
                // and our sleep is not missed. A failure here is not the end of the wait: a
                // queued CI job must survive a Redis restart; the attempt below meets the same
                // outage and is retried until the wait ends (the heartbeat poll covers a
                // missing subscription).
                match lock.subscribe_wakeups(spec).await {
                    Ok(()) => {}
                    // A refusal (no SUBSCRIBE, no &lockrun:wake:*, a wrong password) is a
                    // configuration mistake: waiting does not fix it, and a waiter quietly
                    // falling back to polling would hide it until the queue misbehaves.
                    Err(e) if e.is_refusal() => {
                        self.leave(lock, None).await;
                        return Err(Failed::code(unavailable(&e)));
                    }
                    Err(e) => debug!(error = %e, "no subscription to release hints yet"),
                }
            }
            // A stop signal ends lockrun at once, also while the attempt waits for an answer (a
            // server that accepts and never replies kept lockrun for the whole request
            // timeout).
            let attempt = tokio::select! {
                attempt = lock.acquire(spec, holder, self.waiting) => attempt,
                sig = wait_for_stop(stops) => {
                    // The attempt may still land on the server: give back, token-checked, what
                    // it may have taken, within a short bound (the key expires by its TTL if
                    // not).
                    let _ = tokio::time::timeout(CLEANUP, lock.give_back(spec, holder)).await;
                    return Err(self.stopped(lock, sig).await);
                }
            };
            if let Ok(Acquire::Held { tick_left, .. }) = &attempt {
                self.stand_by(*tick_left);
            }
            let remaining = self
                .until
                .map(|d| d.saturating_duration_since(Instant::now()));
            let sleep = match attempt {
                Ok(Acquire::Acquired(lease)) => return Ok(lease),
                Ok(Acquire::TickEnded { completed }) => {
                    let skipped = decide(self.skipped(false));
                    // A run that never stood by ends with its one request (the attempt recorded
                    // the skip); a standby leaves the queue with its run's entry.
                    if self.stood_by {
                        let note = self.note(&skipped);
                        self.leave(lock, Some(&note)).await;
                    }
                    if completed {
                        info!(key = %spec.key, "this tick completed on another host; skipping");
                    } else {
                        info!(key = %spec.key, "this tick is over; skipping");
                    }
                    return Err(Failed::Conflict(skipped, None));
                }
                // Not needed for this tick: the attempt recorded the skip and queued nothing.
                Ok(Acquire::Passed {
                    holder: other,
                    pttl,
                }) => {
                    let holder_started = other.as_deref().and_then(crate::lock::holder_started);
                    let other = other.as_deref().map_or("?", describe_holder);
                    let skipped = decide(self.skipped(false));
                    return Err(self.conflict(skipped, other, pttl, holder_started));
                }
                Ok(Acquire::Held {
                    holder: other,
                    pttl,
                    rank,
                    ..
                }) => {
                    let stale = self.stale(&other, pttl);
                    // Host, pid and start time only: the value's first word names the holder
                    // for lockrun's own checks and has no business in a log.
                    let holder_started = other.as_deref().and_then(crate::lock::holder_started);
                    let other = other.as_deref().map_or("?", describe_holder);
                    if remaining == Some(Duration::ZERO) {
                        let skipped = decide(self.skipped(false));
                        if self.waiting {
                            // (Without waiting, the attempt itself recorded the skip.)
                            let note = self.note(&skipped);
                            self.leave(lock, Some(&note)).await;
                        }
                        return Err(self.conflict(skipped, other, pttl, holder_started));
                    }
                    // Said once per run, at the first look that finds the lock held.
                    let first_look = !std::mem::replace(&mut self.announced, true);
                    if first_look && self.standby {
                        let left = remaining.map(|d| Human(d).to_string());
                        info!(key = %spec.key, holder = other, tick_left = left.as_deref().unwrap_or("none"),
                              "redis lock already acquired; standing by for the rest of this tick");
                    } else if first_look {
                        info!(key = %spec.key, holder = other, "redis lock already acquired; waiting");
                    }
                    if self.standby && !std::mem::replace(&mut self.looked, true) {
                        // Subscribe, then look again at once: a release between this look and
                        // the subscription is then not missed.
                        continue;
                    }
                    let sleep = next_look(pttl, rank, self.standby.then_some(spec.ttl));
                    let sleep = if stale { sleep.max(STALE_LOOK) } else { sleep };
                    debug!(rank, sleep = %Human(sleep), "waiting for the lock");
                    remaining.map_or(sleep, |r| sleep.min(r))
                }
                Err(e)
                    if e.is_outage()
                        && self.waits_out_outages()
                        && remaining != Some(Duration::ZERO) =>
                {
                    warn!(error = %e, "Redis unavailable while waiting for the lock; retrying");
                    remaining.map_or(HEARTBEAT, |r| HEARTBEAT.min(r))
                }
                Err(e) => {
                    // The attempt may have taken the lock (its reply lost, or a script that
                    // failed after writing): give it back, token-checked, so nothing is left
                    // locked. Once: an attempt that gave back what it knew it took leaves
                    // nothing to do here.
                    let _ = tokio::time::timeout(CLEANUP, lock.give_back(spec, holder)).await;
                    return Err(Failed::code(unavailable(&e)));
                }
            };
            tokio::select! {
                () = lock.wait_for_turn(holder, sleep) => {}
                // Any other signal ends the sleep early: the loop looks again at once.
                sig = next_stop(stops) => {
                    if let Some(sig) = sig {
                        return Err(self.stopped(lock, sig).await);
                    }
                }
            }
        }
    }

    /// Whether an outage is retried until the wait ends: a wait was asked for, or a standby has
    /// heard from the server that the tick it stands by for is under way. A standby that never
    /// reached the server knows nothing of the tick, not even that another host took it, so it
    /// reports the outage at once, as a run without `--standby` does: the tick's hold can be
    /// a day long, and cron's mail would come that late.
    fn waits_out_outages(&self) -> bool {
        self.waiting && (!self.standby || self.looked)
    }

    /// With `--standby`, the wait lasts as long as the tick the server says it stands by for
    /// (`tick_left`); an attempt that is not standing by (the lock held by a run of an earlier
    /// tick) ends the wait now, skipped as without `--standby`.
    fn stand_by(&mut self, tick_left: Option<Duration>) {
        if !self.standby {
            return;
        }
        self.stood_by |= tick_left.is_some();
        let end = Instant::now() + tick_left.unwrap_or_default();
        self.until = Some(self.until.map_or(end, |until| until.min(end)));
    }

    /// Whether the lock is still held by `holder`, the holder the last look found, after the
    /// end the server then gave its lease: what the server says of the lease's end did not
    /// hold (a renewal came in between, or the server is wrong). Notes `pttl` for the next look.
    fn stale(&mut self, holder: &Option<String>, pttl: Option<Duration>) -> bool {
        let now = Instant::now();
        let ends = pttl.map(|p| (holder.clone(), now + p));
        let last = std::mem::replace(&mut self.ends, ends);
        last.is_some_and(|(h, end)| h == *holder && now >= end)
    }

    /// The run ends skipped: the lock is held by `holder` (described), its lease ending `pttl`
    /// from now. The line cron-prefix users look for.
    fn conflict(
        &self,
        skipped: Ending,
        holder: &str,
        pttl: Option<Duration>,
        holder_started: Option<std::time::SystemTime>,
    ) -> Failed {
        let left = pttl.map(|d| Human(d).to_string());
        info!(key = %self.spec.key, holder, ttl_left = left.as_deref().unwrap_or("none"),
              "redis lock already acquired");
        Failed::Conflict(skipped, holder_started)
    }

    /// A stop signal ended the wait: leave the queue with the run's history entry.
    async fn stopped<L: LockService>(&self, lock: &mut L, sig: i32) -> Failed {
        info!(signal = %signals::name(sig), "interrupted while waiting for the lock");
        let aborted = decide(Course::Aborted(sig));
        if self.waiting {
            let note = self.note(&aborted);
            self.leave(lock, Some(&note)).await;
        }
        Failed::Ended(aborted)
    }

    /// Best effort: a ticket left behind expires by itself within `TICKET`.
    async fn leave<L: LockService>(&self, lock: &mut L, note: Option<&Note>) {
        let leaving = lock.leave_queue(self.spec, self.holder, note);
        let _ = tokio::time::timeout(CLEANUP, leaving).await;
    }

    /// A run skipped: the lock held elsewhere. `leased`: its lease expired before the start.
    fn skipped(&self, leased: bool) -> Course {
        Course::Skipped {
            code: self.conflict_exit_code,
            leased,
        }
    }

    /// The history entry of a run that ends now, as `ending`.
    fn note(&self, ending: &Ending) -> Note {
        ending.note(self.started.elapsed())
    }
}

/// The shortest sleep after a look that found the holder of the last look still there past
/// the lease end the server gave it: a server that says "the lease ends now" on every look
/// cannot make a waiter spin (at most 20 looks a second). A holder alive and renewing is seen
/// with at least two thirds of the shortest TTL (100 ms) left, so this never delays a look
/// that a real lease end calls for.
const STALE_LOOK: Duration = Duration::from_millis(50);

/// How long a waiter sleeps before it looks again (a release's wake-up comes sooner): a
/// heartbeat; next in line (`rank` 0), never past the holder's lease end (plus a little
/// jitter), so a holder that died without releasing is noticed then. A standby for a tick
/// (`standby`: its TTL) looks only when the holder's lease ends, at most its TTL and a
/// heartbeat apart (its ticket lasts longer: `lock::redis::ticket`): a tick's few standbys
/// cost a request per lease each, not one a second, and any of them takes over a holder that
/// died.
fn next_look(pttl: Option<Duration>, rank: Option<u64>, standby: Option<Duration>) -> Duration {
    let at_lease_end = |p: Duration| p + crate::lock::jitter(Duration::from_millis(5) + p / 100);
    match (standby, rank, pttl) {
        (Some(ttl), _, Some(p)) => at_lease_end(p).min(ttl + HEARTBEAT),
        (None, Some(0), Some(p)) => HEARTBEAT.min(at_lease_end(p)),
        _ => HEARTBEAT,
    }
}

/// The first pause between the tries of a release whose outcome was unknown; each pause
/// doubles, up to [`RELEASE_PAUSE_MAX`].
const RELEASE_PAUSE: Duration = Duration::from_millis(50);

/// The longest pause between two tries of a release: an outage of a few seconds (a failover)
/// is seen over within this of its end, and a long lease is not hammered for its whole rest.
const RELEASE_PAUSE_MAX: Duration = Duration::from_secs(5);

/// Token-checked release; a failure is logged, not fatal: the TTL frees the key. `keep`: how
/// much longer the key stays (the hold), counted from now; `lease_end`: the lease's local
/// deadline, until which a release whose outcome is unknown is tried again.
async fn release<L: LockService, S: Incoming>(
    lock: &mut L,
    stops: &mut S,
    spec: &LockSpec,
    lease: &Lease,
    keep: Duration,
    lease_end: Instant,
    note: Option<&Note>,
) -> Released {
    debug!(key = %spec.key, "releasing redis lock");
    let first = Instant::now();
    // The hold ends at one moment: a later try keeps the key only for what is left of it.
    let hold_end = first + keep;
    let keep = || hold_end.saturating_duration_since(Instant::now());
    let mut result = lock.release(spec, lease, keep(), note).await;
    let (mut tries, mut pause) = (1u32, RELEASE_PAUSE);
    // While the outcome is unknown (an outage: a failover, a server stalled or restarting),
    // tried again after a growing pause, each time on a fresh connection (a failed request
    // drops its connection), until the lease's local deadline: until then the key is still
    // ours, and a tick released late is not run again by a standby. Safe to repeat (token-
    // checked). The history entry goes along again: the first may not have been written (a
    // reader of the history drops an entry repeated by the same run). Past the deadline the
    // key may be gone or another holder's: the TTL ends it. A stop signal that comes while
    // lockrun tries (the job has ended: one that stopped the job came before) ends the tries:
    // whoever sent it wants lockrun gone now, and the TTL frees the key.
    let (mut out_of_lease, mut stopped) = (false, None);
    // Whether a failed try may have deleted the key (its reply lost): a retry that then finds
    // the key not ours is no sign of a lost lock.
    let mut may_have_landed = false;
    while let Err(e) = &result {
        if !e.is_outage() {
            break;
        }
        may_have_landed |= e.may_have_run();
        let next = Instant::now() + pause;
        if next >= lease_end {
            out_of_lease = true;
            break;
        }
        debug!(key = %spec.key, pause = %Human(pause), "redis lock release failed; trying again");
        tokio::select! {
            () = tokio::time::sleep_until(next) => {}
            sig = wait_for_stop(stops) => {
                stopped = Some(sig);
                break;
            }
        }
        pause = (pause * 2).min(RELEASE_PAUSE_MAX);
        tries += 1;
        result = lock.release(spec, lease, keep(), note).await;
    }
    let retried = tries > 1;
    match result {
        Err(e) if stopped.is_some() => {
            let sig = stopped.map(signals::name).unwrap_or_default();
            warn!(key = %spec.key, error = %e, tries, signal = %sig,
                  "redis lock release given up on a stop signal; the key will expire by its TTL")
        }
        // An earlier try's outcome was unknown; most likely it did delete the key and only
        // its reply was lost. Not a stolen lock: say what is known.
        Ok(Release::NotOwner) if retried && may_have_landed => info!(key = %spec.key,
            "redis lock released (the first attempt's reply was lost; on retry the key was no longer ours: deleted by that attempt or expired)"),
        Ok(Release::Deleted) => info!(key = %spec.key, "redis lock released"),
        Ok(Release::Kept(d)) => {
            info!(key = %spec.key, kept_for = %Human(d), "redis lock released (key kept for the rest of the hold)")
        }
        // After a job: it ran without the lock for a while (`take_turns` makes the run `lost`).
        Ok(Release::NotOwner) if note.is_some_and(|n| n.outcome.lost_if_key_gone()) => {
            error!(key = %spec.key, "redis lock lost: the key was gone or another holder's at release (expired, or deleted by release --force); the job ran without it for a while");
            return Released::Gone;
        }
        Ok(Release::NotOwner) => {
            warn!(key = %spec.key, "redis lock was no longer ours at release; nothing deleted")
        }
        Err(e) if out_of_lease && retried => {
            warn!(key = %spec.key, error = %e, tries, retried_for = %Human(first.elapsed()),
                  "redis lock release failed until its lease ran out; the key will expire by its TTL")
        }
        Err(e) => {
            warn!(key = %spec.key, error = %e, "redis lock release failed; the key will expire by its TTL")
        }
    }
    Released::Done
}

#[cfg(test)]
mod tests {
    //! The lock's part of a run against a fake lock and a fake source of stop signals, on
    //! paused time: each case takes milliseconds, however long the waits it goes through.
    use super::*;
    use crate::lock::Outcome;
    use std::cell::RefCell;
    use std::collections::VecDeque;

    /// The errors the fake answers with, made in one place.
    fn outage() -> LockError {
        use crate::lock::failure::{Cause, Kind, Trouble};
        let cause = Cause::Server {
            trouble: Trouble::Connect,
            words: "connection refused".into(),
            tls: false,
        };
        LockError::on("redis://127.0.0.1:1", Kind::Unavailable(cause))
    }
    fn refusal() -> LockError {
        use crate::lock::failure::{Auth, Kind};
        LockError::on("redis://127.0.0.1:1", Kind::Auth(Auth::Wrong))
    }
    /// An outage under a request: it was sent, its outcome is unknown.
    fn dropped() -> LockError {
        use crate::lock::failure::{Cause, Kind, Trouble};
        let cause = Cause::Server {
            trouble: Trouble::Dropped,
            words: "connection reset by peer".into(),
            tls: false,
        };
        LockError::on("redis://127.0.0.1:1", Kind::Unavailable(cause))
    }
    fn misuse() -> LockError {
        use crate::lock::failure::Misuse;
        LockError::misuse(Misuse::Foreign {
            key: "k".into(),
            found: "hash".into(),
        })
    }

    /// What the fake answers an acquire with.
    enum Answer {
        Acquired(u64),
        Held {
            pttl: Option<Duration>,
            rank: Option<u64>,
        },
        /// `--standby`: held, standing by for a tick with this much left.
        StandBy(Duration),
        /// `--standby`: held, and the tick has its standbys.
        Passed,
        /// `--standby`: the tick completed elsewhere (or is over).
        TickEnded(bool),
        /// `--standby`: acquired as this attempt at the tick (fence, attempt).
        TookOver(u64, u32),
        Fail(fn() -> LockError),
    }

    fn held() -> Answer {
        Answer::Held {
            pttl: Some(Duration::from_secs(20)),
            rank: Some(1),
        }
    }

    /// A lock that answers from a script and writes down every call, in order.
    #[derive(Default)]
    struct Fake {
        /// Answers to the acquires, in turn; the last one repeats.
        answers: VecDeque<Answer>,
        /// How long an acquire takes to answer.
        acquire_takes: Duration,
        /// The subscription's error, each time it is asked for.
        subscribe_fails: Option<fn() -> LockError>,
        /// Answers to the releases, in turn; then `Deleted`.
        releases: VecDeque<Result<Release, fn() -> LockError>>,
        calls: Vec<String>,
        /// How long each wait for a turn was allowed to be.
        sleeps: Vec<Duration>,
        /// `keep` of each release.
        keeps: Vec<Duration>,
        /// The exit code of each history entry written (on release or on leaving the queue).
        codes: Vec<Option<i32>>,
        /// Whether each release's entry completed its tick (`--standby`).
        completes: Vec<bool>,
        /// When each release was sent.
        released_at: Vec<Instant>,
    }

    fn outcome(note: Option<&Note>) -> &'static str {
        note.map_or("-", |n| n.outcome.as_str())
    }

    impl LockService for Fake {
        async fn subscribe_wakeups(&mut self, _: &LockSpec) -> Result<(), LockError> {
            self.calls.push("subscribe".into());
            self.subscribe_fails.map_or(Ok(()), |e| Err(e()))
        }
        async fn acquire(
            &mut self,
            _: &LockSpec,
            holder: &Holder,
            _: bool,
        ) -> Result<Acquire, LockError> {
            self.calls.push("acquire".into());
            tokio::time::sleep(self.acquire_takes).await;
            let answer = match self.answers.len() {
                0 => panic!("no answer scripted"),
                1 => &self.answers[0],
                _ => &self.answers.pop_front().unwrap(),
            };
            match answer {
                Answer::Acquired(fence) => {
                    let mut lease = Lease::phantom(holder);
                    lease.fence = *fence;
                    Ok(Acquire::Acquired(lease))
                }
                Answer::Held { pttl, rank } => Ok(Acquire::Held {
                    holder: None,
                    pttl: *pttl,
                    rank: *rank,
                    tick_left: None,
                }),
                Answer::StandBy(left) => Ok(Acquire::Held {
                    holder: None,
                    pttl: Some(Duration::from_secs(20)),
                    rank: Some(0),
                    tick_left: Some(*left),
                }),
                Answer::Passed => Ok(Acquire::Passed {
                    holder: None,
                    pttl: Some(Duration::from_secs(20)),
                }),
                Answer::TickEnded(completed) => Ok(Acquire::TickEnded {
                    completed: *completed,
                }),
                Answer::TookOver(fence, attempt) => {
                    let mut lease = Lease::phantom(holder);
                    lease.fence = *fence;
                    lease.attempt = *attempt;
                    Ok(Acquire::Acquired(lease))
                }
                Answer::Fail(e) => Err(e()),
            }
        }
        async fn give_back(&mut self, _: &LockSpec, _: &Holder) {
            self.calls.push("give_back".into());
        }
        async fn renew(&mut self, _: &LockSpec, _: &Lease) -> Result<Renew, LockError> {
            unreachable!("the job's part is the caller's")
        }
        async fn release(
            &mut self,
            _: &LockSpec,
            _: &Lease,
            keep: Duration,
            note: Option<&Note>,
        ) -> Result<Release, LockError> {
            self.calls.push(format!("release:{}", outcome(note)));
            self.released_at.push(Instant::now());
            self.completes.extend(note.map(|n| n.completes_tick));
            self.codes.extend(note.map(|n| n.exit_code));
            self.keeps.push(keep);
            match self.releases.pop_front() {
                None => Ok(Release::Deleted),
                Some(r) => r.map_err(|e| e()),
            }
        }
        async fn is_held_by(&mut self, _: &LockSpec, _: &str) -> Result<bool, LockError> {
            unreachable!("reentrancy is decided before the lock's part")
        }
        async fn leave_queue(
            &mut self,
            _: &LockSpec,
            _: &Holder,
            note: Option<&Note>,
        ) -> Result<(), LockError> {
            self.calls.push(format!("leave:{}", outcome(note)));
            self.codes.extend(note.map(|n| n.exit_code));
            Ok(())
        }
        async fn wait_for_turn(&mut self, _: &Holder, max: Duration) {
            self.calls.push("wait".into());
            self.sleeps.push(max);
            tokio::time::sleep(max).await;
        }
    }

    use crate::lock::Renew;

    /// One stop signal, `after` the run's start; `quiet`: seen only by `take_stop`, as a
    /// signal that arrived while an attempt was finishing.
    #[derive(Default)]
    struct FakeStops {
        at: Option<(Instant, i32)>,
        quiet: bool,
    }

    impl FakeStops {
        fn after(d: Duration, sig: i32) -> FakeStops {
            FakeStops {
                at: Some((Instant::now() + d, sig)),
                ..FakeStops::default()
            }
        }

        fn deliver(&mut self) -> Option<i32> {
            let (_, sig) = self.at.take()?;
            Some(sig)
        }
    }

    impl Incoming for FakeStops {
        fn take_stop(&mut self) -> Option<i32> {
            match self.at {
                Some((t, _)) if Instant::now() >= t => self.deliver(),
                _ => None,
            }
        }
        async fn recv(&mut self) -> signals::Received {
            match self.at {
                Some((t, _)) if !self.quiet => {
                    tokio::time::sleep_until(t).await;
                    let signo = self.deliver().expect("scripted");
                    signals::Received {
                        signo,
                        from_kernel: false,
                    }
                }
                _ => std::future::pending().await,
            }
        }
    }

    const CONFLICT: u8 = 75;

    /// The job's part of each held turn: the next of its turns (then: the job ran and exited
    /// 0), each noted as a `start` among the lock's calls.
    struct FakeJob(RefCell<VecDeque<Turn>>);

    impl UnderLease<Fake, FakeStops> for FakeJob {
        async fn run(&self, lock: &mut Fake, _: &mut FakeStops, _: &Lease, _: &mut Report) -> Turn {
            lock.calls.push("start".into());
            self.0.borrow_mut().pop_front().unwrap_or(Turn::Done {
                course: exited(0),
                keep: Duration::ZERO,
                lease_end: Instant::now() + SECS(30),
            })
        }
    }

    /// What a case's run came to.
    struct Ran {
        code: ExitCode,
        ending: Ending,
        report: Report,
        took: Duration,
    }

    /// The lock's part of one run of key `k` with `wait`; each held turn's part is the next of
    /// `turns` (then: the job ran and exited 0).
    async fn run(lock: &mut Fake, wait: Wait, stops: &mut FakeStops, turns: Vec<Turn>) -> Ran {
        run_tick(lock, wait, None, stops, turns).await
    }

    /// A `--standby` run of a 54 s tick, without a stop signal.
    async fn standby(lock: &mut Fake, turns: Vec<Turn>) -> Ran {
        run_tick(lock, ONCE, Some(SECS(54)), &mut FakeStops::default(), turns).await
    }

    /// [`run`] with `--standby`'s tick of this length (`None`: without `--standby`).
    async fn run_tick(
        lock: &mut Fake,
        wait: Wait,
        tick: Option<Duration>,
        stops: &mut FakeStops,
        turns: Vec<Turn>,
    ) -> Ran {
        let spec = LockSpec {
            kind: tick.map_or(LockKind::Exclusive, |length| LockKind::Tick {
                length,
                standbys: 2,
            }),
            history: 100,
            ..LockSpec::new("k", Duration::from_secs(30))
        };
        let holder = Holder::new(std::ffi::OsStr::new("job"));
        let began = Instant::now();
        let mut waiter = Waiter::new(&spec, &holder, wait, began, CONFLICT);
        let mut report = Report::begin("k", None, false, None);
        let job = FakeJob(RefCell::new(VecDeque::from(turns)));
        let ending = take_turns(lock, &mut waiter, &job, stops, &mut report).await;
        Ran {
            code: ending.code,
            ending,
            report,
            took: began.elapsed(),
        }
    }

    /// A job that ran and exited with `code`, nobody having stopped it.
    fn exited(code: u8) -> Course {
        let job = crate::ending::JobEnd {
            status: ExitCode::Command(code),
            stopped: crate::ending::Stopped::No,
            lock_lost: false,
        };
        Course::Ran {
            job,
            stop_received: false,
            key_gone: false,
        }
    }

    fn fake(answers: Vec<Answer>) -> Fake {
        Fake {
            answers: answers.into(),
            ..Fake::default()
        }
    }

    const ONCE: Wait = Wait::For(Duration::ZERO);
    const MS: fn(u64) -> Duration = Duration::from_millis;
    const SECS: fn(u64) -> Duration = Duration::from_secs;

    #[tokio::test(start_paused = true)]
    async fn acquired_at_once_the_job_runs_and_the_lock_is_released_once() {
        let mut lock = fake(vec![Answer::Acquired(7)]);
        let ran = run(&mut lock, ONCE, &mut FakeStops::default(), vec![]).await;
        assert_eq!(ran.code, ExitCode::Command(0));
        assert_eq!(lock.calls, ["acquire", "start", "release:ran"]);
        assert_eq!(ran.report.record().fence, 7);
        assert!(!ran.ending.lost);
    }

    #[tokio::test(start_paused = true)]
    async fn the_hold_left_goes_to_the_release() {
        let mut lock = fake(vec![Answer::Acquired(1)]);
        let turns = vec![Turn::Done {
            course: exited(0),
            keep: SECS(50),
            lease_end: Instant::now() + SECS(30),
        }];
        run(&mut lock, ONCE, &mut FakeStops::default(), turns).await;
        assert_eq!(lock.keeps, [SECS(50)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_standby_waits_no_longer_than_the_tick_the_server_says_is_left() {
        let mut lock = fake(vec![Answer::StandBy(SECS(5))]);
        let ran = standby(&mut lock, vec![]).await;
        assert_eq!(ran.code, ExitCode::Conflict(CONFLICT));
        assert!(ran.took >= SECS(5) && ran.took < SECS(6), "{:?}", ran.took);
        assert_eq!(
            lock.calls[..3],
            ["acquire", "subscribe", "acquire"],
            "a standby subscribes once the tick is taken, then looks again"
        );
        assert_eq!(lock.calls.last().unwrap(), "leave:skipped");
        assert!(!lock.calls.iter().any(|c| c == "start"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_standby_waits_out_an_outage_only_once_the_server_said_the_tick_is_taken() {
        // Never reached: nothing is known of the tick; 69 at once, as without --standby.
        let mut lock = fake(vec![Answer::Fail(outage)]);
        let ran = standby(&mut lock, vec![]).await;
        assert_eq!(ran.code, ExitCode::Unavailable);
        assert_eq!(ran.took, Duration::ZERO);
        assert!(
            !lock.calls.iter().any(|c| c == "subscribe"),
            "{:?}",
            lock.calls
        );
        // Standing by for a tick under way: the outage is waited out, the tick taken over.
        let mut lock = fake(vec![
            Answer::StandBy(SECS(50)),
            Answer::Fail(outage),
            Answer::Fail(outage),
            Answer::TookOver(9, 2),
        ]);
        let ran = standby(&mut lock, vec![]).await;
        assert_eq!(ran.code, ExitCode::Command(0));
        assert_eq!(ran.report.record().attempt, Some(2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_tick_completed_elsewhere_ends_the_standby_skipped_at_once() {
        for completed in [true, false] {
            let mut lock = fake(vec![
                Answer::StandBy(SECS(50)),
                Answer::TickEnded(completed),
            ]);
            let ran = standby(&mut lock, vec![]).await;
            assert_eq!(ran.code, ExitCode::Conflict(CONFLICT));
            assert!(ran.took < SECS(2), "{:?}", ran.took);
            assert_eq!(lock.calls.last().unwrap(), "leave:skipped");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_host_firing_after_the_tick_completed_skips_with_one_request() {
        for completed in [true, false] {
            let mut lock = fake(vec![Answer::TickEnded(completed)]);
            let ran = standby(&mut lock, vec![]).await;
            assert_eq!(ran.code, ExitCode::Conflict(CONFLICT));
            // The attempt recorded the skip: nothing to leave.
            assert_eq!(lock.calls, ["acquire"]);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_host_the_tick_does_not_need_skips_with_one_request() {
        let mut lock = fake(vec![Answer::Passed]);
        let ran = standby(&mut lock, vec![]).await;
        assert_eq!(ran.code, ExitCode::Conflict(CONFLICT));
        assert_eq!(ran.took, Duration::ZERO);
        // The attempt recorded the skip and queued nothing: no leave, no subscription.
        assert_eq!(lock.calls, ["acquire"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_standby_looks_when_the_holders_lease_ends_not_every_second() {
        // The fake's holder has 20 s left of its lease at every look.
        let mut lock = fake(vec![
            Answer::StandBy(SECS(50)),
            Answer::StandBy(SECS(50)),
            Answer::StandBy(SECS(30)),
            Answer::TickEnded(true),
        ]);
        let ran = standby(&mut lock, vec![]).await;
        assert_eq!(ran.code, ExitCode::Conflict(CONFLICT));
        for slept in &lock.sleeps {
            assert!(*slept >= SECS(20) && *slept < MS(20_300), "{slept:?}");
        }
        assert_eq!(lock.sleeps.len(), 2, "{:?}", lock.calls);
        // However long the holder's lease, a standby looks at least once per its own TTL (30
        // s here) and a heartbeat, so its ticket never runs out while it lives.
        let hour = Some(SECS(3600));
        assert_eq!(next_look(hour, Some(3), Some(SECS(30))), SECS(31));
        assert_eq!(next_look(None, Some(0), Some(SECS(30))), HEARTBEAT);
    }

    #[tokio::test(start_paused = true)]
    async fn a_standby_skips_a_lock_held_by_a_run_of_an_earlier_tick() {
        let mut lock = fake(vec![held()]);
        let ran = standby(&mut lock, vec![]).await;
        assert_eq!(ran.code, ExitCode::Conflict(CONFLICT));
        assert_eq!(ran.took, Duration::ZERO);
        assert_eq!(lock.calls, ["acquire", "leave:skipped"]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_host_that_takes_the_tick_makes_the_requests_of_any_run() {
        let mut lock = fake(vec![Answer::TookOver(7, 1)]);
        let ran = standby(&mut lock, vec![]).await;
        assert_eq!(ran.code, ExitCode::Command(0));
        assert_eq!(lock.calls, ["acquire", "start", "release:ran"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_takeover_is_recorded_and_its_release_says_whether_the_tick_completed() {
        let killed = Course::Ran {
            job: crate::ending::JobEnd {
                status: ExitCode::Signaled(libc::SIGKILL),
                stopped: crate::ending::Stopped::No,
                lock_lost: false,
            },
            stop_received: false,
            key_gone: false,
        };
        for (course, completes) in [(exited(3), true), (killed, false)] {
            let mut lock = fake(vec![Answer::StandBy(SECS(50)), Answer::TookOver(9, 2)]);
            let turns = vec![Turn::Done {
                course,
                keep: Duration::ZERO,
                lease_end: Instant::now() + SECS(30),
            }];
            let ran = standby(&mut lock, turns).await;
            assert_eq!(ran.report.record().attempt, Some(2));
            assert_eq!(ran.report.record().fence, 9);
            assert_eq!(lock.completes, [completes]);
        }
        // Without --standby no attempt is recorded.
        let mut lock = fake(vec![Answer::Acquired(1)]);
        let ran = run(&mut lock, ONCE, &mut FakeStops::default(), vec![]).await;
        assert_eq!(ran.report.record().attempt, None);
    }

    #[tokio::test(start_paused = true)]
    async fn spread_waits_before_the_first_attempt_and_a_stop_ends_that_wait() {
        let spec = LockSpec {
            history: 100,
            ..LockSpec::new("k", SECS(30))
        };
        let holder = Holder::new(std::ffi::OsStr::new("job"));
        for (stop, code, calls) in [
            (None, ExitCode::Command(0), 3),
            (Some(SECS(1)), ExitCode::Aborted(libc::SIGTERM), 0),
        ] {
            let mut stops =
                stop.map_or_else(FakeStops::default, |d| FakeStops::after(d, libc::SIGTERM));
            let mut lock = fake(vec![Answer::Acquired(1)]);
            let began = Instant::now();
            let mut waiter = Waiter::new(&spec, &holder, ONCE, began, CONFLICT);
            waiter.delay_first_attempt(SECS(3));
            let mut report = Report::begin("k", None, false, None);
            let job = FakeJob(RefCell::new(VecDeque::new()));
            let ending = take_turns(&mut lock, &mut waiter, &job, &mut stops, &mut report).await;
            assert_eq!(ending.code, code);
            assert_eq!(lock.calls.len(), calls, "{:?}", lock.calls);
            if calls > 0 {
                assert_eq!(
                    began.elapsed(),
                    SECS(3),
                    "the first attempt after the delay"
                );
            } else {
                assert_eq!(began.elapsed(), SECS(1), "the stop ends the delay");
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn held_without_a_wait_is_a_conflict_without_queue_or_leave() {
        let mut lock = fake(vec![held()]);
        let ran = run(&mut lock, ONCE, &mut FakeStops::default(), vec![]).await;
        assert_eq!(ran.code, ExitCode::Conflict(CONFLICT));
        // The attempt itself recorded the skip: no subscription, no leave, no release.
        assert_eq!(lock.calls, ["acquire"]);
    }

    #[tokio::test(start_paused = true)]
    async fn held_until_the_wait_runs_out_leaves_the_queue_as_skipped() {
        let mut lock = fake(vec![held()]);
        let ran = run(
            &mut lock,
            Wait::For(MS(2500)),
            &mut FakeStops::default(),
            vec![],
        )
        .await;
        assert_eq!(ran.code, ExitCode::Conflict(CONFLICT));
        // A heartbeat each, the last sleep cut to what is left of the wait.
        assert_eq!(lock.sleeps, [SECS(1), SECS(1), MS(500)]);
        assert_eq!(lock.calls.last().unwrap(), "leave:skipped");
        assert!(!lock.calls.iter().any(|c| c.starts_with("release")));
        assert_eq!(ran.took, MS(2500));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_signal_while_waiting_leaves_the_queue_as_aborted() {
        let mut lock = fake(vec![held()]);
        let mut stops = FakeStops::after(MS(1500), libc::SIGTERM);
        let ran = run(&mut lock, Wait::Forever, &mut stops, vec![]).await;
        assert_eq!(ran.code, ExitCode::Aborted(libc::SIGTERM));
        assert_eq!(ran.took, MS(1500), "at once, not at the next look");
        assert_eq!(lock.calls.last().unwrap(), "leave:aborted");
        assert!(!lock.calls.iter().any(|c| c == "give_back" || c == "start"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_signal_during_the_attempt_gives_back_once_then_leaves() {
        let mut lock = fake(vec![Answer::Acquired(1)]);
        lock.acquire_takes = SECS(5);
        let mut stops = FakeStops::after(MS(100), libc::SIGINT);
        let ran = run(&mut lock, Wait::For(SECS(10)), &mut stops, vec![]).await;
        assert_eq!(ran.code, ExitCode::Aborted(libc::SIGINT));
        assert_eq!(ran.took, MS(100));
        assert_eq!(
            lock.calls,
            ["subscribe", "acquire", "give_back", "leave:aborted"]
        );
        // Without a wait there is no queue to leave.
        let mut lock = fake(vec![Answer::Acquired(1)]);
        lock.acquire_takes = SECS(5);
        let mut stops = FakeStops::after(MS(100), libc::SIGTERM);
        let ran = run(&mut lock, ONCE, &mut stops, vec![]).await;
        assert_eq!(ran.code, ExitCode::Aborted(libc::SIGTERM));
        assert_eq!(lock.calls, ["acquire", "give_back"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_signal_that_lands_with_the_lease_releases_it_unstarted() {
        let mut lock = fake(vec![Answer::Acquired(3)]);
        lock.acquire_takes = MS(100);
        let mut stops = FakeStops {
            quiet: true,
            ..FakeStops::after(MS(50), libc::SIGHUP)
        };
        let ran = run(&mut lock, ONCE, &mut stops, vec![]).await;
        assert_eq!(ran.code, ExitCode::Aborted(libc::SIGHUP));
        assert_eq!(lock.calls, ["acquire", "release:aborted"]);
        assert_eq!(ran.report.record().fence, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn an_outage_while_waiting_is_retried_until_the_lock_is_taken() {
        let mut lock = fake(vec![
            Answer::Fail(outage),
            Answer::Fail(outage),
            Answer::Acquired(9),
        ]);
        let ran = run(
            &mut lock,
            Wait::For(SECS(10)),
            &mut FakeStops::default(),
            vec![],
        )
        .await;
        assert_eq!(ran.code, ExitCode::Command(0));
        assert_eq!(lock.sleeps, [SECS(1), SECS(1)]);
        assert!(!lock.calls.iter().any(|c| c == "give_back"));
        assert_eq!(lock.calls.last().unwrap(), "release:ran");
        assert_eq!(ran.report.record().fence, 9);
    }

    #[tokio::test(start_paused = true)]
    async fn an_outage_without_a_wait_exits_69_and_gives_back() {
        let mut lock = fake(vec![Answer::Fail(outage)]);
        let ran = run(&mut lock, ONCE, &mut FakeStops::default(), vec![]).await;
        assert_eq!(ran.code, ExitCode::Unavailable);
        assert_eq!(lock.calls, ["acquire", "give_back"]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_outage_when_the_wait_has_run_out_exits_69() {
        let mut lock = fake(vec![held(), Answer::Fail(outage)]);
        let ran = run(
            &mut lock,
            Wait::For(SECS(1)),
            &mut FakeStops::default(),
            vec![],
        )
        .await;
        assert_eq!(ran.code, ExitCode::Unavailable);
        assert_eq!(lock.calls.last().unwrap(), "give_back");
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_subscription_while_waiting_leaves_and_exits_69() {
        let mut lock = fake(vec![held()]);
        lock.subscribe_fails = Some(refusal);
        let ran = run(&mut lock, Wait::Forever, &mut FakeStops::default(), vec![]).await;
        assert_eq!(ran.code, ExitCode::Unavailable);
        assert_eq!(lock.calls, ["subscribe", "leave:-"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_subscription_outage_is_no_reason_to_stop_waiting() {
        let mut lock = fake(vec![held(), Answer::Acquired(2)]);
        lock.subscribe_fails = Some(outage);
        let ran = run(&mut lock, Wait::Forever, &mut FakeStops::default(), vec![]).await;
        assert_eq!(ran.code, ExitCode::Command(0));
        assert_eq!(lock.sleeps, [SECS(1)]);
    }

    #[tokio::test(start_paused = true)]
    async fn misuse_is_a_usage_error_at_once_even_while_waiting() {
        let mut lock = fake(vec![Answer::Fail(misuse)]);
        let ran = run(&mut lock, Wait::Forever, &mut FakeStops::default(), vec![]).await;
        assert_eq!(ran.code, ExitCode::Usage);
        assert_eq!(lock.calls, ["subscribe", "acquire", "give_back"]);
    }

    #[tokio::test(start_paused = true)]
    async fn next_in_line_sleeps_no_longer_than_the_holders_lease() {
        let next = Answer::Held {
            pttl: Some(MS(200)),
            rank: Some(0),
        };
        let mut lock = fake(vec![next, Answer::Acquired(4)]);
        let ran = run(&mut lock, Wait::Forever, &mut FakeStops::default(), vec![]).await;
        assert_eq!(ran.code, ExitCode::Command(0));
        let slept = lock.sleeps[0];
        // The lease's end plus a jitter below 5 ms + 1 % of it.
        assert!(slept >= MS(200) && slept < MS(207), "{slept:?}");
        // Further back in the queue, or a holder without a lease end: the heartbeat.
        assert_eq!(next_look(Some(MS(200)), Some(1), None), HEARTBEAT);
        assert_eq!(next_look(None, Some(0), None), HEARTBEAT);
        assert_eq!(next_look(Some(SECS(20)), Some(0), None), HEARTBEAT);
    }

    #[tokio::test(start_paused = true)]
    async fn a_holder_whose_lease_never_ends_paces_the_looks() {
        // Every look: the same holder, its lease ending now. The first sleep follows it (the
        // lease may well end); every later one waits at least STALE_LOOK.
        let now = Answer::Held {
            pttl: Some(Duration::ZERO),
            rank: Some(0),
        };
        let mut lock = fake(vec![now]);
        let wait = Wait::For(SECS(2));
        let ran = run(&mut lock, wait, &mut FakeStops::default(), vec![]).await;
        assert_eq!(ran.code, ExitCode::Conflict(CONFLICT));
        assert!(lock.sleeps[0] < MS(5), "{:?}", lock.sleeps[0]);
        let last = lock.sleeps.len() - 1;
        assert!(
            lock.sleeps[1..last].iter().all(|s| *s == STALE_LOOK),
            "{:?}",
            lock.sleeps
        );
        let looks = lock.calls.iter().filter(|c| *c == "acquire").count();
        assert!(looks <= 2 + 2000 / 50, "{looks} looks in 2 s");
    }

    #[tokio::test(start_paused = true)]
    async fn a_release_that_fails_but_not_for_an_outage_is_tried_once() {
        let mut lock = fake(vec![Answer::Acquired(1)]);
        lock.releases = VecDeque::from([Err(misuse as fn() -> LockError)]);
        let ran = run(&mut lock, ONCE, &mut FakeStops::default(), vec![]).await;
        // The job's code stands; the key expires by its TTL.
        assert_eq!(ran.code, ExitCode::Command(0));
        assert_eq!(lock.calls, ["acquire", "start", "release:ran"]);
        assert!(!ran.ending.lost);
    }

    #[tokio::test(start_paused = true)]
    async fn a_release_is_retried_through_an_outage_with_growing_pauses_until_it_lands() {
        // Redis unreachable for a few seconds as the job ends (a failover): the release lands
        // once it is over, and the tick is recorded completed.
        let mut lock = fake(vec![Answer::Acquired(1)]);
        lock.releases = (0..6).map(|_| Err(outage as fn() -> LockError)).collect();
        let ran = run(&mut lock, ONCE, &mut FakeStops::default(), vec![]).await;
        assert_eq!(ran.code, ExitCode::Command(0));
        assert_eq!(lock.released_at.len(), 7, "{:?}", lock.calls);
        assert!(lock.calls[2..].iter().all(|c| c == "release:ran"));
        let pauses: Vec<Duration> = lock.released_at.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(pauses[0] <= MS(100), "the first retry soon: {pauses:?}");
        assert!(
            pauses.windows(2).all(|p| p[1] > p[0]),
            "growing: {pauses:?}"
        );
        assert!(ran.took < SECS(10), "{:?}", ran.took);
        assert!(!ran.ending.lost);
    }

    #[tokio::test(start_paused = true)]
    async fn a_release_that_meets_an_outage_to_the_end_gives_up_at_the_leases_deadline() {
        let began = Instant::now();
        let mut lock = fake(vec![Answer::Acquired(1)]);
        lock.releases = (0..1000)
            .map(|_| Err(outage as fn() -> LockError))
            .collect();
        let ran = run(&mut lock, ONCE, &mut FakeStops::default(), vec![]).await;
        // The job's code stands; the key expires by its TTL.
        assert_eq!(ran.code, ExitCode::Command(0));
        assert!(!ran.ending.lost);
        // The lease: the TTL (30 s) from the acquire, the job taking no time.
        let tries = &lock.released_at;
        let last = *tries.last().unwrap() - began;
        assert!(last > SECS(20) && last < SECS(30), "{last:?}");
        assert!(ran.took <= SECS(30), "{:?}", ran.took);
        assert!(tries.len() < 30, "{} tries in 30 s", tries.len());
    }

    #[tokio::test(start_paused = true)]
    async fn the_hold_a_retried_release_keeps_is_cut_by_the_time_spent_retrying() {
        let mut lock = fake(vec![Answer::Acquired(1)]);
        lock.releases = (0..4).map(|_| Err(outage as fn() -> LockError)).collect();
        let turns = vec![Turn::Done {
            course: exited(0),
            keep: SECS(50),
            lease_end: Instant::now() + SECS(30),
        }];
        run(&mut lock, ONCE, &mut FakeStops::default(), turns).await;
        assert_eq!(lock.keeps.len(), 5, "{:?}", lock.calls);
        let first = lock.released_at[0];
        for (keep, at) in lock.keeps.iter().zip(&lock.released_at) {
            assert_eq!(*keep + (*at - first), SECS(50), "{:?}", lock.keeps);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_found_not_ours_at_release_after_the_job_ran_is_a_lost_lock() {
        let mut lock = fake(vec![Answer::Acquired(1)]);
        lock.releases = VecDeque::from([Ok(Release::NotOwner)]);
        let ran = run(&mut lock, ONCE, &mut FakeStops::default(), vec![]).await;
        assert_eq!(ran.code, ExitCode::Command(0));
        assert!(ran.ending.lost);
        assert_eq!(ran.ending.outcome, Outcome::Lost);
        assert_eq!(
            release_of(Release::NotOwner, Outcome::Aborted).await,
            Released::Done,
            "only a job that ran can have run without the lock"
        );
    }

    /// What one release that finds `found` comes to, for a run that ended as `outcome`.
    async fn release_of(found: Release, outcome: Outcome) -> Released {
        let mut lock = Fake {
            releases: VecDeque::from([Ok(found)]),
            ..Fake::default()
        };
        let spec = LockSpec::new("k", SECS(30));
        let lease = Lease::phantom(&Holder::new(std::ffi::OsStr::new("job")));
        let note = Note {
            outcome,
            exit_code: Some(0),
            duration: Duration::ZERO,
            completes_tick: false,
            reopened: false,
        };
        let lease_end = Instant::now() + SECS(30);
        release(
            &mut lock,
            &mut FakeStops::default(),
            &spec,
            &lease,
            Duration::ZERO,
            lease_end,
            Some(&note),
        )
        .await
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_not_ours_on_a_retried_release_is_not_a_lost_lock() {
        let mut lock = fake(vec![Answer::Acquired(1)]);
        lock.releases = VecDeque::from([Err(dropped as fn() -> LockError), Ok(Release::NotOwner)]);
        let ran = run(&mut lock, ONCE, &mut FakeStops::default(), vec![]).await;
        assert_eq!(ran.code, ExitCode::Command(0));
        // Most likely the first attempt deleted the key and only its reply was lost.
        assert!(!ran.ending.lost);
        assert_eq!(lock.calls.len(), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_not_ours_after_tries_that_never_reached_the_server_is_a_lost_lock() {
        // Every earlier try was refused its connection (a failover under way): none deleted
        // the key, so a key not ours when one lands was lost while the job ran.
        let mut lock = fake(vec![Answer::Acquired(1)]);
        lock.releases = VecDeque::from([
            Err(outage as fn() -> LockError),
            Err(outage as fn() -> LockError),
            Ok(Release::NotOwner),
        ]);
        let ran = run(&mut lock, ONCE, &mut FakeStops::default(), vec![]).await;
        assert_eq!(ran.code, ExitCode::Command(0));
        assert!(ran.ending.lost);
        assert_eq!(ran.ending.outcome, Outcome::Lost);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_signal_while_a_release_is_retried_ends_the_tries() {
        let mut lock = fake(vec![Answer::Acquired(1)]);
        lock.releases = (0..1000)
            .map(|_| Err(outage as fn() -> LockError))
            .collect();
        let mut stops = FakeStops::after(SECS(1), libc::SIGTERM);
        let ran = run(&mut lock, ONCE, &mut stops, vec![]).await;
        // The job's code stands; the key expires by its TTL.
        assert_eq!(ran.code, ExitCode::Command(0));
        assert!(ran.took >= SECS(1) && ran.took < MS(1100), "{:?}", ran.took);
        assert!(lock.released_at.len() < 8, "{:?}", lock.calls);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_that_expired_before_the_start_while_waiting_is_given_back_and_taken_again() {
        let mut lock = fake(vec![Answer::Acquired(1), Answer::Acquired(2)]);
        let ran = run(
            &mut lock,
            Wait::For(SECS(10)),
            &mut FakeStops::default(),
            vec![Turn::Expired],
        )
        .await;
        assert_eq!(ran.code, ExitCode::Command(0));
        // The first lease goes back without a history entry: the run's is written once.
        assert_eq!(
            lock.calls,
            [
                "subscribe",
                "acquire",
                "start",
                "release:-",
                "subscribe",
                "acquire",
                "start",
                "release:ran"
            ]
        );
        assert_eq!(ran.report.record().fence, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_that_expired_before_the_start_without_a_wait_skips_the_run() {
        let mut lock = fake(vec![Answer::Acquired(1)]);
        let ran = run(
            &mut lock,
            ONCE,
            &mut FakeStops::default(),
            vec![Turn::Expired],
        )
        .await;
        assert_eq!(ran.code, ExitCode::Conflict(CONFLICT));
        assert_eq!(lock.calls, ["acquire", "start", "release:skipped"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_job_that_could_not_start_gives_the_tick_back_as_an_error() {
        let mut lock = fake(vec![Answer::Acquired(1)]);
        let turns = vec![Turn::Done {
            course: Course::Failed(ExitCode::NotFound),
            keep: Duration::ZERO,
            lease_end: Instant::now() + SECS(30),
        }];
        let ran = run(&mut lock, ONCE, &mut FakeStops::default(), turns).await;
        assert_eq!(ran.code, ExitCode::NotFound);
        assert_eq!(lock.calls, ["acquire", "start", "release:error"]);
        assert_eq!(lock.keeps, [Duration::ZERO]);
    }

    #[tokio::test(start_paused = true)]
    async fn each_history_entry_carries_the_runs_exit_code_but_a_skip_from_the_queue() {
        // The job ran; a stop signal while waiting; a lease that expired before the start.
        let mut lock = fake(vec![Answer::Acquired(1)]);
        let turns = vec![Turn::Done {
            course: exited(3),
            keep: Duration::ZERO,
            lease_end: Instant::now() + SECS(30),
        }];
        run(&mut lock, ONCE, &mut FakeStops::default(), turns).await;
        assert_eq!(lock.codes, [Some(3)]);
        let mut lock = fake(vec![held()]);
        let mut stops = FakeStops::after(MS(1500), libc::SIGTERM);
        run(&mut lock, Wait::Forever, &mut stops, vec![]).await;
        assert_eq!(lock.codes, [Some(128 + libc::SIGTERM)]);
        let mut lock = fake(vec![Answer::Acquired(1)]);
        run(
            &mut lock,
            ONCE,
            &mut FakeStops::default(),
            vec![Turn::Expired],
        )
        .await;
        assert_eq!(lock.codes, [Some(i32::from(CONFLICT))]);
        // A wait that ran out in the queue: no exit code, like the acquire script's skip.
        let mut lock = fake(vec![held()]);
        let ran = run(
            &mut lock,
            Wait::For(MS(1500)),
            &mut FakeStops::default(),
            vec![],
        )
        .await;
        assert_eq!(ran.ending.outcome, Outcome::Skipped);
        assert_eq!(lock.codes, [None]);
    }
}
