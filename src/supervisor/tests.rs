//! The supervision against a fake job ([`TestJob`]: scripted exits, members that ignore
//! SIGTERM, leftovers, adopted processes, a process that never dies) and a fake source of
//! signals, on paused time: each case takes milliseconds, however long the job it plays.

use super::*;
use crate::lock::{Holder, Lease};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

const MS: fn(u64) -> Duration = Duration::from_millis;
const SECS: fn(u64) -> Duration = Duration::from_secs;
const KILL_AFTER: Duration = Duration::from_secs(10);
const TERM: i32 = libc::SIGTERM;
const KILL: i32 = libc::SIGKILL;

#[test]
fn sigkill_comes_at_the_earliest_reason_and_names_a_stop_signal() {
    let now = Instant::now();
    let s = |secs| now + Duration::from_secs(secs);
    let mut state = JobState::default();
    assert!(state.kill_by(None).is_none(), "running: nothing due");
    assert_eq!(state.stopped(), Stopped::No);
    state.stop(Why::Leftovers, KillAt::At(s(10)));
    assert_eq!(state.stopped(), Stopped::Leftovers);
    state.stop(Why::Signal(libc::SIGTERM), KillAt::At(s(5)));
    // A second stop signal does not move the first one's moment.
    state.stop(Why::Signal(libc::SIGINT), KillAt::At(s(1)));
    assert_eq!(state.kill_by(None), Some((s(5), Some(libc::SIGTERM))));
    assert!(!state.losing());
    assert_eq!(state.stopped(), Stopped::Signal);
    state.stop(Why::Lock, KillAt::At(s(2)));
    assert!(state.losing());
    assert_eq!(state.stopped(), Stopped::Lock);
    assert_eq!(state.kill_by(None), Some((s(2), None)));
}

#[test]
fn the_first_of_a_stop_signal_and_the_time_limit_is_why_the_job_was_stopped() {
    let now = Instant::now();
    let at = KillAt::At(now + KILL_AFTER);
    let mut limit_first = JobState::default();
    limit_first.stop(Why::Leftovers, at);
    limit_first.stop(Why::TimeLimit, at);
    limit_first.stop(Why::Signal(libc::SIGTERM), at);
    assert_eq!(limit_first.stopped(), Stopped::TimeLimit);
    let mut signal_first = JobState::default();
    signal_first.stop(Why::Signal(libc::SIGTERM), at);
    signal_first.stop(Why::TimeLimit, at);
    assert_eq!(signal_first.stopped(), Stopped::Signal);
    // The lock wins over both.
    limit_first.stop(Why::Lock, at);
    assert_eq!(limit_first.stopped(), Stopped::Lock);
}

/// One process of the fake job. The first one of a [`World`] is the command.
#[derive(Clone, Debug)]
struct Proc {
    /// In the job's process group; otherwise adopted by lockrun (a daemon in a session of its
    /// own, which only PID 1 or a subreaper gets).
    in_group: bool,
    /// When it ends (by itself, or as a signal had it); `None`: not yet.
    ends_at: Option<Instant>,
    /// How long it takes to end after SIGTERM; `None`: it ignores SIGTERM.
    on_term: Option<Duration>,
    /// It survives SIGKILL too (stuck in the kernel, say).
    unkillable: bool,
    /// In a session of its own below another process of the job (`procs[i]`): it comes to
    /// lockrun (PID 1 or a subreaper) only when that one ends, and until then no signal of
    /// lockrun's reaches it.
    parent: Option<usize>,
    /// SIGKILL ended it.
    killed: bool,
    /// The SIGCHLD for its end has been delivered.
    told: bool,
}

impl Proc {
    /// A member of the command's group that runs until a signal ends it.
    fn member() -> Proc {
        Proc {
            in_group: true,
            ends_at: None,
            on_term: None,
            unkillable: false,
            parent: None,
            killed: false,
            told: false,
        }
    }

    fn adopted() -> Proc {
        Proc {
            in_group: false,
            ..Proc::member()
        }
    }

    /// `setsid sh -c '…' &` in the command `procs[parent]` runs: a process in a session of
    /// its own, adopted by lockrun once `parent` ends.
    fn orphan_of(parent: usize) -> Proc {
        Proc {
            parent: Some(parent),
            ..Proc::adopted()
        }
    }

    fn ends_after(mut self, d: Duration) -> Proc {
        self.ends_at = Some(Instant::now() + d);
        self
    }

    fn ends_on_term_after(mut self, d: Duration) -> Proc {
        self.on_term = Some(d);
        self
    }

    fn unkillable(mut self) -> Proc {
        self.unkillable = true;
        self
    }

    fn live(&self, now: Instant) -> bool {
        self.ends_at.is_none_or(|t| now < t)
    }

    fn end_by(&mut self, t: Instant) {
        self.ends_at = Some(self.ends_at.map_or(t, |e| e.min(t)));
    }

    fn take(&mut self, sig: i32, now: Instant) {
        if !self.live(now) {
            return;
        }
        match sig {
            TERM => {
                if let Some(d) = self.on_term {
                    self.end_by(now + d);
                }
            }
            KILL if !self.unkillable => {
                self.end_by(now);
                self.killed = true;
            }
            _ => {}
        }
    }
}

/// What the fake job and the fake signals share: the processes, and everything the supervisor
/// did to them.
struct World {
    /// The command runs in a group of its own.
    group: bool,
    /// lockrun is PID 1 or a subreaper: every process left is its child.
    reap_all: bool,
    /// The command first, then the other processes of the job.
    procs: Vec<Proc>,
    /// The command's exit code when it ends by itself or on SIGTERM.
    code: u8,
    status: Option<ExitCode>,
    start: Instant,
    /// Every signal sent to the job: when (since the start), to whom, which.
    sent: Vec<(Duration, To, i32)>,
    /// How many times the supervisor asked whether the job lives.
    looks: u32,
    /// Signals lockrun receives from outside, in order: when, which.
    incoming: VecDeque<(Instant, Received)>,
    /// `--time-limit`.
    time_limit: Option<Duration>,
}

impl World {
    fn new(command: Proc, code: u8) -> World {
        World {
            group: true,
            reap_all: false,
            procs: vec![command],
            code,
            status: None,
            start: Instant::now(),
            sent: Vec::new(),
            looks: 0,
            incoming: VecDeque::new(),
            time_limit: None,
        }
    }

    fn time_limit(mut self, limit: Duration) -> World {
        self.time_limit = Some(limit);
        self
    }

    fn with(mut self, p: Proc) -> World {
        self.procs.push(p);
        self
    }

    fn no_group(mut self) -> World {
        self.group = false;
        self
    }

    fn reap_all(mut self) -> World {
        self.reap_all = true;
        self
    }

    /// A signal lockrun receives `after` the start; `from_kernel` as a terminal's.
    fn receives(mut self, after: Duration, signo: i32, from_kernel: bool) -> World {
        let at = self.start + after;
        self.incoming
            .push_back((at, Received { signo, from_kernel }));
        self
    }

    /// Whether `p` is lockrun's child: the command, and every process as PID 1 or a
    /// subreaper (the orphans come to lockrun).
    fn child(&self, i: usize) -> bool {
        i == 0 || (self.reap_all && self.adopted(i, Instant::now()))
    }

    /// Whether `procs[i]` is lockrun's by adoption at `now`: not below a process still alive.
    fn adopted(&self, i: usize, now: Instant) -> bool {
        self.procs[i]
            .parent
            .is_none_or(|parent| !self.procs[parent].live(now))
    }

    fn any_live(&self, now: Instant, which: impl Fn(&Proc) -> bool) -> bool {
        self.procs.iter().any(|p| which(p) && p.live(now))
    }

    /// The next signal lockrun receives, and when: one from outside, or a SIGCHLD for a
    /// child's end.
    fn next_incoming(&self) -> Option<(Instant, Option<usize>)> {
        let outside = self.incoming.front().map(|(t, _)| (*t, None));
        let ends = (0..self.procs.len())
            .filter(|&i| self.child(i) && !self.procs[i].told)
            .filter_map(|i| Some((self.procs[i].ends_at?, Some(i))));
        outside.into_iter().chain(ends).min_by_key(|(t, _)| *t)
    }
}

/// The fake job, a [`Processes`] on a [`World`].
struct TestJob(Rc<RefCell<World>>);

/// The fake source of signals, on the same [`World`].
struct TestSignals(Rc<RefCell<World>>);

impl Processes for TestJob {
    fn pid(&self) -> i32 {
        100
    }
    fn group(&self) -> bool {
        self.0.borrow().group
    }
    fn reap(&mut self) {
        let mut w = self.0.borrow_mut();
        let command = &w.procs[0];
        if w.status.is_none() && !command.live(Instant::now()) {
            w.status = Some(if command.killed {
                ExitCode::Signaled(KILL)
            } else {
                ExitCode::Command(w.code)
            });
        }
    }
    fn status(&self) -> Option<ExitCode> {
        self.0.borrow().status
    }
    fn alive(&self) -> bool {
        let mut w = self.0.borrow_mut();
        w.looks += 1;
        let now = Instant::now();
        w.status.is_none()
            || (w.reap_all && w.any_live(now, |_| true))
            || (w.group && w.any_live(now, |p| p.in_group))
    }
    fn ends_with_sigchld(&self) -> bool {
        let w = self.0.borrow();
        w.reap_all && w.any_live(Instant::now(), |_| true)
    }
    fn signal(&self, to: To, sig: i32) {
        let mut w = self.0.borrow_mut();
        let now = Instant::now();
        let since = now - w.start;
        w.sent.push((since, to, sig));
        let (group, reap_all) = (w.group, w.reap_all);
        let adopted: Vec<bool> = (0..w.procs.len()).map(|i| w.adopted(i, now)).collect();
        for (i, p) in w.procs.iter_mut().enumerate() {
            let in_job = if group { p.in_group } else { i == 0 };
            let ours = reap_all && !p.in_group && adopted[i];
            let reached = match to {
                To::Job => in_job,
                To::Leftovers => in_job || ours,
                To::Adopted => ours,
            };
            if reached {
                p.take(sig, now);
            }
        }
    }
    fn take_terminal_back(&mut self) {}
}

impl Incoming for TestSignals {
    // The supervisor reads every signal as it comes.
    fn take_stop(&mut self) -> Option<i32> {
        None
    }

    async fn recv(&mut self) -> Received {
        let next = self.0.borrow().next_incoming();
        let Some((at, which)) = next else {
            return std::future::pending().await;
        };
        tokio::time::sleep_until(at).await;
        let mut w = self.0.borrow_mut();
        match which {
            None => w.incoming.pop_front().expect("scripted").1,
            Some(i) => {
                w.procs[i].told = true;
                Received {
                    signo: libc::SIGCHLD,
                    from_kernel: false,
                }
            }
        }
    }
}

/// How a supervision of a fake job went.
struct Ran {
    end: JobEnd,
    /// From the start until `supervise` returned.
    took: Duration,
    world: Rc<RefCell<World>>,
}

impl Ran {
    fn sent(&self) -> Vec<(Duration, To, i32)> {
        self.world.borrow().sent.clone()
    }
    fn looks(&self) -> u32 {
        self.world.borrow().looks
    }
}

/// The lock's side of a supervision: when the watchdog says the lock is lost (never: `None`),
/// the lease's deadline, `--on-lost terminate`.
struct Lock<'d> {
    lost: Option<(Duration, Lost)>,
    deadline: &'d Deadline,
    terminate: bool,
}

/// A lease taken now, with a TTL of 30 s and no renewal ever confirmed.
fn deadline() -> Deadline {
    let lease = Lease::phantom(&Holder::new("job".as_ref()));
    Deadline::new(&lease, SECS(30), Duration::ZERO, KILL_AFTER)
}

/// `--kill-after` [`KILL_AFTER`], and the world's time limit.
fn policy(world: &World) -> Policy {
    Policy {
        kill_after: KILL_AFTER,
        time_limit: world.time_limit,
    }
}

async fn supervise_fake(world: World, lock: Option<Lock<'_>>) -> Ran {
    let start = world.start;
    let world = Rc::new(RefCell::new(world));
    let guard = lock.map(|l| Guard {
        lost: async move {
            match l.lost {
                Some((after, why)) => {
                    tokio::time::sleep_until(start + after).await;
                    why
                }
                None => std::future::pending().await,
            }
        },
        deadline: l.deadline,
        terminate: l.terminate,
    });
    let mut signals = TestSignals(world.clone());
    let policy = policy(&world.borrow());
    let end = supervise(TestJob(world.clone()), policy, &mut signals, guard).await;
    Ran {
        end,
        took: start.elapsed(),
        world,
    }
}

fn end(status: ExitCode, stopped: Stopped, lock_lost: bool) -> JobEnd {
    JobEnd {
        status,
        stopped,
        lock_lost,
    }
}

#[tokio::test(start_paused = true)]
async fn a_command_that_exits_ends_the_job_with_its_status_and_no_signal() {
    let world = World::new(Proc::member().ends_after(SECS(1)), 3);
    let ran = supervise_fake(world, None).await;
    assert_eq!(ran.end, end(ExitCode::Command(3), Stopped::No, false));
    assert_eq!(ran.took, SECS(1), "told by its SIGCHLD");
    assert!(ran.sent().is_empty());
    // One look at the start, one at the SIGCHLD: nothing in between.
    assert_eq!(ran.looks(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_stop_signal_goes_once_to_the_group_and_the_members_left_get_sigkill_after_kill_after() {
    // The command traps SIGTERM and exits 0 at once; a member of its group ignores it.
    let world = World::new(Proc::member().ends_on_term_after(MS(100)), 0)
        .with(Proc::member())
        .receives(SECS(1), TERM, false);
    let ran = supervise_fake(world, None).await;
    assert_eq!(ran.end, end(ExitCode::Command(0), Stopped::Signal, false));
    assert_eq!(
        ran.sent(),
        [
            (SECS(1), To::Job, TERM),
            // The group had its SIGTERM: only adopted processes (none here) get one.
            (MS(1100), To::Adopted, TERM),
            // --kill-after from the stop signal, not from the command's exit.
            (SECS(11), To::Leftovers, KILL),
        ]
    );
    // The member's end is seen at the next look at the group.
    assert!(
        ran.took >= SECS(11) && ran.took <= SECS(11) + GROUP_POLL,
        "{:?}",
        ran.took
    );
}

#[tokio::test(start_paused = true)]
async fn a_terminals_ctrl_c_is_not_forwarded_to_a_job_in_lockruns_own_group() {
    // --no-group: the terminal's SIGINT reached the command already; it is not a stop
    // request either (interactive).
    let world = World::new(Proc::member().ends_after(SECS(2)), 0)
        .no_group()
        .receives(SECS(1), libc::SIGINT, true);
    let ran = supervise_fake(world, None).await;
    assert!(ran.sent().is_empty());
    assert_eq!(ran.end, end(ExitCode::Command(0), Stopped::No, false));
    // From another process it is forwarded, to the command alone, and stops the job.
    let world = World::new(Proc::member().ends_after(SECS(2)), 0)
        .no_group()
        .receives(SECS(1), libc::SIGINT, false);
    let ran = supervise_fake(world, None).await;
    assert_eq!(ran.sent(), [(SECS(1), To::Job, libc::SIGINT)]);
    assert_eq!(ran.end, end(ExitCode::Command(0), Stopped::Signal, false));
}

#[tokio::test(start_paused = true)]
async fn a_lost_lock_gets_the_job_sigterm_then_sigkill_after_the_grace() {
    let d = deadline();
    let world = World::new(Proc::member(), 0);
    let lock = Lock {
        lost: Some((SECS(5), Lost::NotOwner)),
        deadline: &d,
        terminate: true,
    };
    let ran = supervise_fake(world, Some(lock)).await;
    assert_eq!(
        d.grace(),
        KILL_AFTER,
        "a 30 s TTL leaves --kill-after whole"
    );
    assert_eq!(
        ran.sent(),
        [(SECS(5), To::Job, TERM), (SECS(15), To::Leftovers, KILL)]
    );
    assert_eq!(ran.end, end(ExitCode::Signaled(KILL), Stopped::Lock, true));
    assert_eq!(ran.took, SECS(15));
}

#[tokio::test(start_paused = true)]
async fn a_job_told_to_stop_is_not_sent_sigterm_again_when_the_lock_is_lost() {
    let d = deadline();
    let world = World::new(Proc::member(), 0).receives(SECS(2), TERM, false);
    let lock = Lock {
        lost: Some((SECS(5), Lost::NotOwner)),
        deadline: &d,
        terminate: true,
    };
    let ran = supervise_fake(world, Some(lock)).await;
    // SIGKILL at the earliest reason's moment: the stop signal's (2 s + --kill-after), not
    // the lock's (5 s + grace).
    assert_eq!(
        ran.sent(),
        [(SECS(2), To::Job, TERM), (SECS(12), To::Leftovers, KILL)]
    );
    // The lock decides the ending.
    assert_eq!(ran.end, end(ExitCode::Signaled(KILL), Stopped::Lock, true));
}

#[tokio::test(start_paused = true)]
async fn with_no_renewal_confirmed_the_job_is_stopped_ahead_of_the_deadline() {
    let d = deadline();
    let start = Instant::now();
    let world = World::new(Proc::member(), 0);
    let lock = Lock {
        lost: None,
        deadline: &d,
        terminate: true,
    };
    let ran = supervise_fake(world, Some(lock)).await;
    assert_eq!(
        ran.sent(),
        [
            (d.term_at() - start, To::Job, TERM),
            (d.kill_at() - start, To::Leftovers, KILL),
        ]
    );
    assert!(d.kill_at() < d.get(), "SIGKILL before the lease can end");
    assert_eq!(ran.end, end(ExitCode::Signaled(KILL), Stopped::Lock, false));
}

#[tokio::test(start_paused = true)]
async fn with_on_lost_continue_the_job_runs_on_and_the_loss_is_noted() {
    let d = deadline();
    let world = World::new(Proc::member().ends_after(SECS(8)), 0);
    let lock = Lock {
        lost: Some((SECS(5), Lost::Expired)),
        deadline: &d,
        terminate: false,
    };
    let ran = supervise_fake(world, Some(lock)).await;
    assert!(ran.sent().is_empty());
    assert_eq!(ran.end, end(ExitCode::Command(0), Stopped::No, true));
    assert_eq!(ran.took, SECS(8));
}

#[tokio::test(start_paused = true)]
async fn leftovers_of_a_command_that_exited_get_sigterm_then_sigkill() {
    let world = World::new(Proc::member().ends_after(SECS(1)), 0)
        .with(Proc::member().ends_on_term_after(MS(200)))
        .with(Proc::member());
    let ran = supervise_fake(world, None).await;
    assert_eq!(
        ran.sent(),
        [
            (SECS(1), To::Leftovers, TERM),
            (SECS(11), To::Leftovers, KILL)
        ]
    );
    assert_eq!(
        ran.end,
        end(ExitCode::Command(0), Stopped::Leftovers, false)
    );
    // Members are not lockrun's children: the group is looked at every GROUP_POLL, no more.
    let polls = (KILL_AFTER.as_millis() / GROUP_POLL.as_millis()) as u32;
    assert!(
        (polls..=polls + 3).contains(&ran.looks()),
        "{} looks",
        ran.looks()
    );
}

#[tokio::test(start_paused = true)]
async fn leftovers_that_end_on_sigterm_get_no_sigkill() {
    let world = World::new(Proc::member().ends_after(SECS(1)), 0)
        .with(Proc::member().ends_on_term_after(MS(200)));
    let ran = supervise_fake(world, None).await;
    assert_eq!(ran.sent(), [(SECS(1), To::Leftovers, TERM)]);
    assert_eq!(
        ran.end,
        end(ExitCode::Command(0), Stopped::Leftovers, false)
    );
    assert!(ran.took >= MS(1200) && ran.took <= MS(1200) + GROUP_POLL);
}

#[tokio::test(start_paused = true)]
async fn as_pid_1_or_a_subreaper_adopted_processes_are_stopped_and_waited_for_by_sigchld() {
    // A double-forked daemon, in no group of ours, that ignores SIGTERM.
    let world = World::new(Proc::member().ends_after(SECS(1)), 0)
        .with(Proc::adopted())
        .reap_all();
    let ran = supervise_fake(world, None).await;
    assert_eq!(
        ran.sent(),
        [
            (SECS(1), To::Leftovers, TERM),
            (SECS(11), To::Leftovers, KILL)
        ]
    );
    assert_eq!(
        ran.end,
        end(ExitCode::Command(0), Stopped::Leftovers, false)
    );
    // Every process left is lockrun's child: its end comes as a SIGCHLD, with no polling.
    assert_eq!(ran.took, SECS(11));
    assert!(ran.looks() <= 4, "{} looks", ran.looks());
}

#[tokio::test(start_paused = true)]
async fn adopted_processes_get_their_own_sigterm_after_the_group_had_a_forwarded_one() {
    let world = World::new(Proc::member().ends_on_term_after(MS(500)), 0)
        .with(Proc::adopted())
        .reap_all()
        .receives(SECS(1), TERM, false);
    let ran = supervise_fake(world, None).await;
    assert_eq!(
        ran.sent(),
        [
            (SECS(1), To::Job, TERM),
            (MS(1500), To::Adopted, TERM),
            (SECS(11), To::Leftovers, KILL),
        ]
    );
    assert_eq!(ran.end, end(ExitCode::Command(0), Stopped::Signal, false));
}

#[tokio::test(start_paused = true)]
async fn a_member_that_never_dies_is_looked_at_every_poll_and_killed_once() {
    let world = World::new(Proc::member().ends_after(SECS(1)), 0).with(Proc::member().unkillable());
    let world = Rc::new(RefCell::new(world));
    let mut signals = TestSignals(world.clone());
    let job = TestJob(world.clone());
    let guard = None::<Guard<'_, std::future::Pending<Lost>>>;
    let policy = policy(&world.borrow());
    let gone = tokio::time::timeout(SECS(61), supervise(job, policy, &mut signals, guard)).await;
    assert!(
        gone.is_err(),
        "the job never ends, nor does its supervision"
    );
    let w = world.borrow();
    assert_eq!(
        w.sent,
        [
            (SECS(1), To::Leftovers, TERM),
            (SECS(11), To::Leftovers, KILL)
        ]
    );
    // 60 s of looks every 20 ms: no spin.
    let polls = (SECS(60).as_millis() / GROUP_POLL.as_millis()) as u32;
    assert!((polls..=polls + 3).contains(&w.looks), "{} looks", w.looks);
}

#[tokio::test(start_paused = true)]
async fn an_adopted_process_that_never_dies_is_waited_for_without_looking() {
    let world = World::new(Proc::member().ends_after(SECS(1)), 0)
        .with(Proc::adopted().unkillable())
        .reap_all();
    let world = Rc::new(RefCell::new(world));
    let mut signals = TestSignals(world.clone());
    let job = TestJob(world.clone());
    let guard = None::<Guard<'_, std::future::Pending<Lost>>>;
    let policy = policy(&world.borrow());
    let gone = tokio::time::timeout(SECS(61), supervise(job, policy, &mut signals, guard)).await;
    assert!(gone.is_err());
    let w = world.borrow();
    assert_eq!(w.sent.len(), 2, "{:?}", w.sent);
    // lockrun has a child: its end will come as a SIGCHLD; until then lockrun only sleeps.
    assert!(w.looks <= 4, "{} looks", w.looks);
}

#[tokio::test(start_paused = true)]
async fn an_orphan_adopted_after_the_sigkill_gets_a_sigkill_of_its_own() {
    // `sh -c 'trap "" TERM; setsid sh -c "trap \"\" TERM; sleep 60" & sleep 60'` under a
    // stop: the SIGKILL ends the command, and only then is its child (in a session of its own,
    // ignoring SIGTERM too) re-parented to lockrun, out of reach of the SIGKILL already sent.
    let world = World::new(Proc::member(), 0)
        .with(Proc::orphan_of(0))
        .reap_all()
        .receives(SECS(1), TERM, false);
    let ran = supervise_limited(world, None).await;
    assert_eq!(
        ran.sent(),
        [
            (SECS(1), To::Job, TERM),
            (SECS(11), To::Leftovers, KILL),
            // The command's SIGCHLD: whatever came to lockrun with its end is past its
            // SIGKILL moment too.
            (SECS(11), To::Leftovers, KILL),
        ]
    );
    assert_eq!(ran.took, SECS(11));
    assert_eq!(
        ran.end,
        end(ExitCode::Signaled(KILL), Stopped::Signal, false)
    );
}

#[tokio::test(start_paused = true)]
async fn at_the_time_limit_an_orphan_adopted_after_the_sigkill_gets_one_too() {
    let world = World::new(Proc::member(), 0)
        .with(Proc::orphan_of(0))
        .with(Proc::orphan_of(1))
        .reap_all()
        .time_limit(SECS(5));
    let ran = supervise_limited(world, None).await;
    // A chain: each orphan comes to lockrun when the one above it ends of its SIGKILL.
    assert_eq!(
        ran.sent(),
        [
            (SECS(5), To::Job, TERM),
            (SECS(15), To::Leftovers, KILL),
            (SECS(15), To::Leftovers, KILL),
            (SECS(15), To::Leftovers, KILL),
        ]
    );
    assert_eq!(ran.took, SECS(15));
    assert_eq!(
        ran.end,
        end(ExitCode::Signaled(KILL), Stopped::TimeLimit, false)
    );
}

/// A supervision of a job with a time limit, given 10 minutes (of paused time) to end: a job
/// that nothing stops fails the test instead of hanging it.
async fn supervise_limited(world: World, lock: Option<Lock<'_>>) -> Ran {
    tokio::time::timeout(SECS(600), supervise_fake(world, lock))
        .await
        .expect("the job was never stopped")
}

#[tokio::test(start_paused = true)]
async fn at_the_time_limit_the_group_gets_sigterm_then_sigkill_after_kill_after() {
    // The command ignores SIGTERM.
    let world = World::new(Proc::member(), 0).time_limit(SECS(5));
    let ran = supervise_limited(world, None).await;
    assert_eq!(
        ran.sent(),
        [(SECS(5), To::Job, TERM), (SECS(15), To::Leftovers, KILL)]
    );
    assert_eq!(
        ran.end,
        end(ExitCode::Signaled(KILL), Stopped::TimeLimit, false)
    );
    assert_eq!(ran.took, SECS(15));
}

#[tokio::test(start_paused = true)]
async fn a_job_that_ends_on_the_limits_sigterm_gets_no_sigkill() {
    // It traps SIGTERM and exits 0: stopped all the same.
    let world = World::new(Proc::member().ends_on_term_after(MS(300)), 0).time_limit(SECS(5));
    let ran = supervise_limited(world, None).await;
    assert_eq!(ran.sent(), [(SECS(5), To::Job, TERM)]);
    assert_eq!(
        ran.end,
        end(ExitCode::Command(0), Stopped::TimeLimit, false)
    );
    assert_eq!(ran.took, MS(5300));
}

#[tokio::test(start_paused = true)]
async fn a_member_left_after_the_limit_is_killed_after_kill_after_from_the_limit() {
    // The command ends on SIGTERM; a member of its group ignores it.
    let world = World::new(Proc::member().ends_on_term_after(MS(100)), 0)
        .with(Proc::member())
        .time_limit(SECS(5));
    let ran = supervise_limited(world, None).await;
    assert_eq!(
        ran.sent(),
        [
            (SECS(5), To::Job, TERM),
            // The group had its SIGTERM: only adopted processes (none here) get one.
            (MS(5100), To::Adopted, TERM),
            (SECS(15), To::Leftovers, KILL),
        ]
    );
    assert_eq!(
        ran.end,
        end(ExitCode::Command(0), Stopped::TimeLimit, false)
    );
    assert!(
        ran.took >= SECS(15) && ran.took <= SECS(15) + GROUP_POLL,
        "{:?}",
        ran.took
    );
}

#[tokio::test(start_paused = true)]
async fn a_command_that_exits_just_before_or_at_the_limit_ends_with_its_own_code() {
    for ends in [SECS(5) - MS(1), SECS(5)] {
        let world = World::new(Proc::member().ends_after(ends), 3).time_limit(SECS(5));
        let ran = supervise_limited(world, None).await;
        assert!(ran.sent().is_empty(), "{ends:?}: {:?}", ran.sent());
        assert_eq!(ran.end, end(ExitCode::Command(3), Stopped::No, false));
        assert_eq!(ran.took, ends);
        // The limit adds no look at the job: one at the start, one at the SIGCHLD.
        assert_eq!(ran.looks(), 2, "{ends:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn leftovers_of_a_command_that_exited_under_the_limit_are_not_a_timeout() {
    let world = World::new(Proc::member().ends_after(SECS(4)), 3)
        .with(Proc::member())
        .time_limit(SECS(5));
    let ran = supervise_limited(world, None).await;
    // The leftovers' own SIGTERM and SIGKILL, nothing at the limit.
    assert_eq!(
        ran.sent(),
        [
            (SECS(4), To::Leftovers, TERM),
            (SECS(14), To::Leftovers, KILL)
        ]
    );
    assert_eq!(
        ran.end,
        end(ExitCode::Command(3), Stopped::Leftovers, false)
    );
}

#[tokio::test(start_paused = true)]
async fn a_stop_signal_before_the_limit_decides_and_the_limit_adds_nothing() {
    let world = World::new(Proc::member(), 0)
        .time_limit(SECS(5))
        .receives(SECS(2), TERM, false);
    let ran = supervise_limited(world, None).await;
    assert_eq!(
        ran.sent(),
        [(SECS(2), To::Job, TERM), (SECS(12), To::Leftovers, KILL)]
    );
    assert_eq!(
        ran.end,
        end(ExitCode::Signaled(KILL), Stopped::Signal, false)
    );
}

#[tokio::test(start_paused = true)]
async fn a_stop_signal_after_the_limit_is_passed_on_and_the_limit_decides() {
    let world = World::new(Proc::member(), 0)
        .time_limit(SECS(5))
        .receives(SECS(7), TERM, false);
    let ran = supervise_limited(world, None).await;
    // SIGKILL stays at the limit's moment plus --kill-after.
    assert_eq!(
        ran.sent(),
        [
            (SECS(5), To::Job, TERM),
            (SECS(7), To::Job, TERM),
            (SECS(15), To::Leftovers, KILL)
        ]
    );
    assert_eq!(
        ran.end,
        end(ExitCode::Signaled(KILL), Stopped::TimeLimit, false)
    );
}

#[tokio::test(start_paused = true)]
async fn with_on_lost_continue_the_limit_still_stops_the_job() {
    let d = deadline();
    let world = World::new(Proc::member().ends_on_term_after(MS(100)), 0).time_limit(SECS(5));
    let lock = Lock {
        lost: Some((SECS(2), Lost::NotOwner)),
        deadline: &d,
        terminate: false,
    };
    let ran = supervise_limited(world, Some(lock)).await;
    assert_eq!(ran.sent(), [(SECS(5), To::Job, TERM)]);
    // The ending is the lock's to say (lost), with the limit's code: see ending.rs.
    assert_eq!(ran.end, end(ExitCode::Command(0), Stopped::TimeLimit, true));
}

#[tokio::test(start_paused = true)]
async fn a_lock_being_lost_before_the_limit_keeps_its_own_moments() {
    let d = deadline();
    let world = World::new(Proc::member(), 0).time_limit(SECS(7));
    let lock = Lock {
        lost: Some((SECS(5), Lost::NotOwner)),
        deadline: &d,
        terminate: true,
    };
    let ran = supervise_limited(world, Some(lock)).await;
    assert_eq!(
        ran.sent(),
        [(SECS(5), To::Job, TERM), (SECS(15), To::Leftovers, KILL)]
    );
    assert_eq!(ran.end, end(ExitCode::Signaled(KILL), Stopped::Lock, true));
}
