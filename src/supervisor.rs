//! Running the command and supervising it until the whole job is gone: process group,
//! terminal hand-over, signal forwarding, reaping (also as PID 1 or a subreaper), and stopping
//! it (SIGTERM, then SIGKILL) when lockrun must.
//!
//! All reaping happens here, in one place: nothing else in lockrun waits for children (no
//! tokio `process`, no `std::process::Child::wait`), so a `waitpid(-1)` for adopted orphans can
//! never steal the command's own exit status.
//!
//! The supervision ([`supervise`], `Supervision`) is written against two seams: the job's
//! processes ([`Processes`]: reap, ask whether any lives, signal) and the signals lockrun
//! receives ([`Incoming`]). The real ones are [`Job`] (`job.rs`, every syscall on the job, and
//! `procfs.rs`) and [`crate::signals::Signals`]; the unit tests drive the same code with a fake
//! job on paused time. How a job is stopped ([`Policy`]) is the run's, given to [`supervise`].

mod job;
mod procfs;

pub use job::{become_subreaper, Job, SpawnError};

use crate::duration::Human;
use crate::ending::{JobEnd, Stopped};
use crate::exit_codes::ExitCode;
use crate::signals::{self, Incoming, Received};
use crate::watchdog::{Deadline, Lost};
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;
use tracing::{debug, error, info, warn};

/// How often to look whether a group's remaining members are gone: they are not our children,
/// so no SIGCHLD tells us.
const GROUP_POLL: Duration = Duration::from_millis(20);

/// How the command is started and its processes reaped.
#[derive(Clone, Debug)]
pub struct Options {
    /// Run the command in its own process group and signal the whole group.
    pub group: bool,
    /// Reap every child we get, adopted orphans included (PID 1 or --subreaper).
    pub reap_all: bool,
    /// The signal mask lockrun was started with, given back to the command.
    pub mask: libc::sigset_t,
}

/// How the supervisor stops a job.
#[derive(Clone, Copy, Debug)]
pub struct Policy {
    /// `--kill-after`: from SIGTERM to SIGKILL.
    pub kill_after: Duration,
    /// `--time-limit`: how long the command may run, from its start.
    pub time_limit: Option<Duration>,
}

/// Whom a signal to the job is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum To {
    /// The job: the whole process group, or (`--no-group`) only the direct child.
    Job,
    /// Once the command has exited: what is left of the job, its group and (as PID 1 or a
    /// subreaper) every adopted process still alive.
    Leftovers,
    /// Every adopted process still alive (as PID 1 or a subreaper), and not the group.
    Adopted,
}

/// The job's processes, as the supervisor drives them: collect exit statuses, ask whether any
/// process of the job lives, signal it. [`Job`] is the real one.
pub trait Processes {
    /// The command's pid (in group mode, its process group's id too).
    fn pid(&self) -> i32;
    /// The command runs in a process group of its own: a signal to [`To::Job`] reaches all of
    /// it.
    fn group(&self) -> bool;
    /// Collects exit statuses without blocking.
    fn reap(&mut self);
    /// The command's exit status, once collected.
    fn status(&self) -> Option<ExitCode>;
    /// Is any process of the job still alive (zombies do not count)?
    fn alive(&self) -> bool;
    /// Whether the end of the job is sure to be told by a SIGCHLD; otherwise the supervisor
    /// looks every [`GROUP_POLL`].
    fn ends_with_sigchld(&self) -> bool;
    /// Sends `sig` to `to`.
    fn signal(&self, to: To, sig: i32);
    /// Gives the terminal the job was handed back to lockrun's group.
    fn take_terminal_back(&mut self);
}

/// What the supervisor needs from the lock while the job runs: the watchdog (a future that
/// resolves when the lock is lost) and the lease's deadline, which the watchdog moves forward.
pub struct Guard<'a, F> {
    pub lost: F,
    pub deadline: &'a Deadline,
    /// `--on-lost terminate` (else: warn and let the job finish).
    pub terminate: bool,
}

/// Why the job is being stopped. Several can hold at once (a stop signal, then the lock lost,
/// then the command exits leaving its group): SIGKILL comes at the earliest of their moments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Why {
    /// The lock is being lost, or can no longer be confirmed: the job must be gone before the
    /// lease can end.
    Lock,
    /// A stop request from outside (SIGTERM from kubelet, systemd, docker stop; SIGINT,
    /// SIGHUP, SIGQUIT), passed on to the job.
    Signal(i32),
    /// The command ran past `--time-limit`.
    TimeLimit,
    /// The command exited and its process group lives on (or processes it left, adopted by
    /// lockrun): draining.
    Leftovers,
}

/// When SIGKILL is due for one reason.
#[derive(Clone, Copy, Debug)]
enum KillAt {
    At(Instant),
    /// At the lease's kill moment ([`Deadline::kill_at`]), which a renewal confirmed meanwhile
    /// moves later: the job gets its grace whenever the lease allows it.
    LeaseEnd,
}

/// The job as the supervisor drives it: running while `stopping` is empty, else being stopped
/// for each reason there, each with its SIGKILL moment.
#[derive(Debug, Default)]
struct JobState {
    stopping: Vec<(Why, KillAt)>,
    /// SIGTERM has reached the whole job: sent by us, or a SIGTERM passed on to its group.
    term_sent: bool,
    /// SIGKILL was sent (once).
    killed: bool,
    /// After a stall: until when the overdue renewal may still save the lease before the job
    /// is told to stop.
    renewal_window: Option<Instant>,
}

impl JobState {
    /// Whether the job is being stopped for a reason of `why`'s kind (any stop signal for
    /// [`Why::Signal`]).
    fn stopping_for(&self, why: Why) -> bool {
        let kind = std::mem::discriminant(&why);
        self.stopping
            .iter()
            .any(|(w, _)| std::mem::discriminant(w) == kind)
    }

    /// The lock is being lost: the run ends 76.
    fn losing(&self) -> bool {
        self.stopping_for(Why::Lock)
    }

    /// Why the job was stopped, for its ending: the lock first (the run ends 76), then
    /// whichever of a stop signal and the time limit came first, then leftovers.
    fn stopped(&self) -> Stopped {
        let first_stop = self.stopping.iter().find_map(|(why, _)| match why {
            Why::Signal(_) => Some(Stopped::Signal),
            Why::TimeLimit => Some(Stopped::TimeLimit),
            Why::Lock | Why::Leftovers => None,
        });
        if self.losing() {
            Stopped::Lock
        } else if let Some(stopped) = first_stop {
            stopped
        } else if self.stopping_for(Why::Leftovers) {
            Stopped::Leftovers
        } else {
            Stopped::No
        }
    }

    /// Stops the job for `why` too, SIGKILL due at `kill` for it. Each kind of reason is noted
    /// once, with its first moment (a second stop signal does not move the SIGKILL).
    fn stop(&mut self, why: Why, kill: KillAt) {
        if !self.stopping_for(why) {
            self.stopping.push((why, kill));
        }
    }

    /// The earliest SIGKILL moment of all the reasons, and the stop signal it is for, if it is
    /// one's.
    fn kill_by(&self, deadline: Option<&Deadline>) -> Option<(Instant, Option<i32>)> {
        let at = |k: &KillAt| match k {
            KillAt::At(t) => Some(*t),
            KillAt::LeaseEnd => deadline.map(Deadline::kill_at),
        };
        let first = self.stopping.iter().filter_map(|(_, k)| at(k)).min()?;
        let signal = self.stopping.iter().find_map(|(w, k)| match w {
            Why::Signal(sig) if at(k) == Some(first) => Some(*sig),
            _ => None,
        });
        Some((first, signal))
    }

    /// When the job is told to stop for the lock if no renewal is confirmed first: the
    /// deadline's SIGTERM moment, or later, to the end of a stalled lockrun's renewal window.
    fn term_at(&self, d: &Deadline) -> Instant {
        match self.renewal_window {
            Some(w) if d.term_at() <= w => w,
            _ => d.term_at(),
        }
    }
}

/// The supervision of one job: the job, its [`JobState`], and what the lock's guard says. Each
/// event the supervisor waits for is one method; [`Supervision::due`] is what the passing of
/// time does.
struct Supervision<'d, P> {
    job: P,
    state: JobState,
    deadline: Option<&'d Deadline>,
    /// `--on-lost terminate`.
    terminate: bool,
    kill_after: Duration,
    /// `--time-limit` and the moment it runs out, counted from the supervision's start (the
    /// command's); `None` without the option, and then nothing of it is ever looked at.
    limit: Option<(Duration, Instant)>,
    /// The watchdog found the lock lost (it is not listened to again).
    lost_seen: bool,
    /// A child of lockrun's ended since the last [`Supervision::due`]: as PID 1 or a subreaper
    /// its own children have come to lockrun with its end (the kernel re-parents them before
    /// it tells the parent), and may not have had a signal sent before they came.
    child_ended: bool,
}

impl<'d, P: Processes> Supervision<'d, P> {
    fn new(job: P, policy: Policy, deadline: Option<&'d Deadline>, terminate: bool) -> Self {
        Supervision {
            kill_after: policy.kill_after,
            // The supervision begins as soon as the command is started: its start is now.
            limit: policy.time_limit.map(|l| (l, Instant::now() + l)),
            job,
            state: JobState::default(),
            deadline,
            terminate,
            lost_seen: false,
            child_ended: false,
        }
    }

    /// Reaps, and says whether every process of the job is gone.
    fn gone(&mut self) -> bool {
        self.job.reap();
        !self.job.alive()
    }

    /// What is due at `now`: stopping leftovers, stopping for the lock, SIGKILL. Returns the
    /// next moment something is due, if any.
    fn due(&mut self, now: Instant) -> Option<Instant> {
        self.leftovers(now);
        self.lock_deadline(now);
        self.time_limit(now);
        let kill_by = self.state.kill_by(self.deadline);
        self.kill(now, kill_by);
        // The next moment something is due: stopping for the lock or the time limit, SIGKILL,
        // or a look at a group whose members are not our children (no SIGCHLD tells us they
        // are gone).
        let state = &self.state;
        let polling =
            (self.job.status().is_some() || state.term_sent) && !self.job.ends_with_sigchld();
        [
            self.deadline
                .filter(|_| self.terminate && !state.losing())
                .map(|d| state.term_at(d)),
            self.limit_pending(),
            kill_by.map(|(at, _)| at).filter(|_| !state.killed),
            polling.then(|| now + GROUP_POLL),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The command has exited and the job lives on: its leftovers get SIGTERM (once), and
    /// SIGKILL after `--kill-after`.
    fn leftovers(&mut self, now: Instant) {
        let (job, state) = (&self.job, &mut self.state);
        if job.status().is_none() || state.stopping_for(Why::Leftovers) {
            return;
        }
        if state.killed {
            // Past the SIGKILL moment: what is left gets SIGKILL (in `kill`), not a SIGTERM
            // that would give it --kill-after more.
            debug!(
                pgid = job.pid(),
                "command exited; what is left of the job gets SIGKILL"
            );
        } else if state.term_sent {
            info!(
                pgid = job.pid(),
                "command exited but its process group lives on (or processes it left, adopted by lockrun); the group has had SIGTERM already"
            );
            // Adopted processes are in no group of ours: they had no SIGTERM yet.
            job.signal(To::Adopted, libc::SIGTERM);
        } else {
            info!(
                pgid = job.pid(),
                "command exited but its process group lives on (or processes it left, adopted by lockrun); sending SIGTERM"
            );
            job.signal(To::Leftovers, libc::SIGTERM);
            state.term_sent = true;
        }
        state.stop(Why::Leftovers, KillAt::At(now + self.kill_after));
    }

    /// With `--on-lost terminate`: the job is stopped ahead of the lease's deadline when no
    /// renewal is confirmed in time.
    fn lock_deadline(&mut self, now: Instant) {
        let (job, state) = (&self.job, &mut self.state);
        let Some(d) = self.deadline.filter(|_| self.terminate && !state.losing()) else {
            return;
        };
        // Past the SIGTERM moment with a renewal that was due long ago and never sent:
        // lockrun itself was stalled (SIGSTOP, a frozen VM), the lease may be intact. The
        // overdue renewal goes first (the watchdog sends it as soon as this loop waits),
        // with half of what is left before SIGKILL; only if it is not confirmed by then
        // does the job get SIGTERM. SIGKILL stays where it was, before the lease can end.
        let stalled = d.renewal_overdue(now);
        if stalled && now >= d.term_at() && now < d.kill_at() && state.renewal_window.is_none() {
            state.renewal_window = Some(now + (d.kill_at() - now) / 2);
            info!(left = %Human(d.get().saturating_duration_since(now)),
                  "lockrun was stalled past the moment to stop the job; renewing first");
        }
        if now >= state.term_at(d) {
            // Signal first, log after: nothing may delay the job's stop.
            if !state.term_sent {
                job.signal(To::Job, libc::SIGTERM);
                state.term_sent = true;
            }
            state.stop(Why::Lock, KillAt::LeaseEnd);
            error!(left = %Human(d.get().saturating_duration_since(now)), grace = %Human(d.grace()),
                   "redis lock lost: no renewal confirmed in time; stopping the job before its lease can expire");
        }
    }

    /// When the time limit runs out, while it still can stop the job: the command runs and
    /// nothing stops it yet. A command that exited under the limit is judged by its own code
    /// (leftovers are already stopped by then), and a job that a stop signal or the lock is
    /// already stopping ends for that reason: the limit is not reached for it.
    fn limit_pending(&self) -> Option<Instant> {
        let (_, at) = self.limit?;
        let state = &self.state;
        let stopping = state.losing()
            || state.stopping_for(Why::Signal(0))
            || state.stopping_for(Why::TimeLimit);
        (self.job.status().is_none() && !stopping).then_some(at)
    }

    /// With `--time-limit`: a command still running when the limit runs out gets SIGTERM (its
    /// whole group), and SIGKILL after `--kill-after`.
    fn time_limit(&mut self, now: Instant) {
        let Some(at) = self.limit_pending() else {
            return;
        };
        if now < at {
            return;
        }
        let (job, state) = (&self.job, &mut self.state);
        // Signal first, log after: the limit is the moment, and nothing may delay it.
        if !state.term_sent {
            job.signal(To::Job, libc::SIGTERM);
            state.term_sent = true;
        }
        state.stop(Why::TimeLimit, KillAt::At(now + self.kill_after));
        let limit = self.limit.map_or(Duration::ZERO, |(l, _)| l);
        warn!(kill_after = %Human(self.kill_after),
              "time limit of {} reached; stopping the job", Human(limit));
    }

    /// SIGKILL when the earliest reason's moment has come; after it, again whenever a child of
    /// lockrun's has ended: a process in a session of its own below the job's (`setsid`, a
    /// double fork) is out of reach of the group's SIGKILL until its parent dies of it and it
    /// comes to lockrun (PID 1 or a subreaper), and its SIGKILL moment has passed by then too.
    /// Nothing else brings lockrun a process: no polling for them.
    fn kill(&mut self, now: Instant, kill_by: Option<(Instant, Option<i32>)>) {
        let child_ended = std::mem::take(&mut self.child_ended);
        let state = &mut self.state;
        let Some((_, signal)) = kill_by.filter(|(at, _)| now >= *at) else {
            return;
        };
        if !state.killed {
            self.job.signal(To::Leftovers, libc::SIGKILL);
            state.killed = true;
            let after = signal.map_or_else(|| "SIGTERM".to_string(), signals::name);
            warn!("job still running after {after}; sending SIGKILL");
        } else if child_ended {
            // The group and whatever was adopted before had theirs: SIGKILL again is a no-op
            // for them, and the only way to reach, without /proc, what came since.
            self.job.signal(To::Leftovers, libc::SIGKILL);
            debug!("a process of the job ended after the SIGKILL; SIGKILL to what it left");
        }
    }

    /// lockrun received `r`.
    fn on_signal(&mut self, r: Received) {
        if r.signo == libc::SIGCHLD {
            self.child_ended = true;
        }
        // A SIGTERM forwarded to the whole group is the one the job gets: when the command
        // exits and leaves members behind, they are not sent another (a trap would run
        // twice); they get --kill-after to finish, then SIGKILL.
        if r.signo != libc::SIGCHLD && self.forward(r) && r.signo == libc::SIGTERM {
            self.state.term_sent = true;
        }
        // Not a terminal's Ctrl-C (sent by the kernel): in an interactive session that
        // interrupts what the job is doing, it does not ask the job to go away.
        let interactive = r.from_kernel && r.signo == libc::SIGINT;
        if signals::STOP_SIGNALS.contains(&r.signo) && !interactive {
            self.state.stop(
                Why::Signal(r.signo),
                KillAt::At(Instant::now() + self.kill_after),
            );
        }
    }

    /// Passes a signal lockrun received on to the job. Returns whether the whole group got it.
    fn forward(&self, r: Received) -> bool {
        // With --no-group the command shares our process group, so a signal from the terminal
        // (Ctrl-C, Ctrl-\, hangup) already reached it; forwarding would deliver it twice.
        if !self.job.group() && r.from_kernel {
            return false;
        }
        debug!(signal = %signals::name(r.signo), "forwarding signal");
        self.job.signal(To::Job, r.signo);
        self.job.group()
    }

    /// The watchdog found the lock lost.
    fn on_lost(&mut self, why: Lost) {
        self.lost_seen = true;
        let state = &mut self.state;
        let already = state.losing();
        if self.terminate && !already {
            if !state.term_sent {
                self.job.signal(To::Job, libc::SIGTERM);
                state.term_sent = true;
            }
            // The server says the key is gone: there is no lease left to wait out.
            let grace = self.deadline.map_or(self.kill_after, Deadline::grace);
            state.stop(Why::Lock, KillAt::At(Instant::now() + grace));
        }
        let why = match why {
            Lost::NotOwner => "redis lock lost: the key expired or now belongs to another holder",
            Lost::Expired => "redis lock lost: no renewal confirmed within the TTL",
        };
        if already {
            debug!("{why}");
        } else {
            error!("{why}");
        }
        if !self.terminate {
            warn!("--on-lost continue: the command keeps running without the lock");
        }
    }

    /// The job is gone: how it ended.
    fn end(mut self) -> JobEnd {
        self.job.take_terminal_back();
        JobEnd {
            status: self.job.status().unwrap_or(ExitCode::Internal),
            stopped: self.state.stopped(),
            lock_lost: self.lost_seen,
        }
    }
}

/// Supervises the job until it is gone, forwarding signals and reaping. With a `guard`, the
/// job is stopped when the lock is lost or can no longer be confirmed, *ahead of* the lease's
/// deadline (SIGTERM at `term_at`, SIGKILL at `kill_at`); its end then says [`Stopped::Lock`].
///
/// After the command itself exits, leftover members of its group get SIGTERM, then SIGKILL
/// after `--kill-after`; this returns only when none is alive, so the caller releases the lock
/// only once the whole job is gone. The lock keeps being renewed meanwhile (the guard's future
/// is still polled), and also while the job shuts down after a loss: a renewal confirmed then
/// moves the SIGKILL later, so the job gets its grace whenever the lease allows it.
///
/// With `--time-limit`, a command still running when it runs out is stopped the same way
/// (SIGTERM, SIGKILL after `--kill-after`), and its end says [`Stopped::TimeLimit`], unless a
/// stop signal or the lock was stopping it already.
///
/// A stop request from outside is passed on to the job, which has `--kill-after` to end before
/// its group gets SIGKILL. Without this a job that ignores the signal ran to its natural end,
/// and the platform's own SIGKILL took lockrun with the lock held, no history and no metrics.
pub async fn supervise<P: Processes, S: Incoming, F: Future<Output = Lost>>(
    job: P,
    policy: Policy,
    signals: &mut S,
    guard: Option<Guard<'_, F>>,
) -> JobEnd {
    let (lost, deadline, terminate) = match guard {
        Some(g) => (Some(g.lost), Some(g.deadline), g.terminate),
        None => (None, None, false),
    };
    let mut lost = std::pin::pin!(lost);
    let mut sup = Supervision::new(job, policy, deadline, terminate);
    loop {
        if sup.gone() {
            break;
        }
        let next = sup.due(Instant::now());
        tokio::select! {
            r = signals.recv() => sup.on_signal(r),
            why = async { lost.as_mut().as_pin_mut().unwrap().await }, if lost.is_some() && !sup.lost_seen => {
                sup.on_lost(why);
            }
            () = async { tokio::time::sleep_until(next.unwrap()).await }, if next.is_some() => {}
            // Our clock was measured slow: the moments above are earlier now.
            () = async { deadline.unwrap().moved_earlier().await }, if deadline.is_some() => {}
        }
    }
    sup.end()
}

#[cfg(test)]
mod tests;
