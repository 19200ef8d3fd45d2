//! Keeps the lease alive while the job runs, and says when the job must be stopped.
//!
//! Every TTL/3 a token-checked renewal is sent. Its answer is one of three:
//! renewed (the local deadline moves to *send time* + TTL − drift), not owner (lost, now), or unknown
//! (timeout, broken connection, server error): then it reconnects and retries with the same
//! token until the local deadline, which is measured on the monotonic clock from when the last
//! successful renewal was *sent*: the server cannot have started that lease any earlier, so the
//! key is guaranteed to outlive the deadline (up to clock-rate drift, see [`margin`]).
//!
//! The job must be gone *before* that deadline, not at it: another holder may start the moment
//! the key expires, and a job that takes its time to shut down after SIGTERM would overlap it.
//! So when no renewal is confirmed the supervisor sends SIGTERM at `deadline − grace − margin`
//! and SIGKILL at `deadline − margin` ([`Deadline`]).

use crate::duration::Human;
use crate::lock::{Lease, LockService, LockSpec, Renew};
use std::cell::Cell;
use std::time::Duration;
use tokio::time::{sleep_until, timeout, Instant};
use tracing::{debug, warn};

/// Kept between the job's end and the lease's end on the lock-loss path. It covers the rate
/// difference between our monotonic clock and the server's (Redlock's analysis allows ~1 %),
/// SIGKILL delivery and the scheduler's lateness in waking us, on a loaded machine.
pub fn margin(ttl: Duration) -> Duration {
    (ttl / 20).clamp(Duration::from_millis(5), Duration::from_secs(1))
}

/// The SIGTERM-to-SIGKILL grace on the lock-loss path: `--kill-after`, clamped to TTL/3 so that
/// renewals still get the middle third of the lease to recover from a blip before the job is
/// told to stop.
pub fn loss_grace(ttl: Duration, kill_after: Duration) -> Duration {
    kill_after.min(ttl / 3)
}

/// The lease's local deadline, shared by the watchdog (which moves it on every confirmed
/// renewal) and the supervisor (which stops the job ahead of it). Single-threaded: a `Cell`.
pub struct Deadline {
    at: Cell<Instant>,
    /// How long a confirmed acquire or renewal keeps the lease alive, counted from when it was
    /// sent: the TTL less the backend's clock drift allowance ([`LockService::drift`]: zero for
    /// one server, more for a quorum whose nodes' clocks each run at their own rate).
    span: Duration,
    grace: Duration,
    margin: Duration,
    /// When the watchdog means to send its next renewal, while it waits to, and while a renewal
    /// that went out late is under way; `None` while one sent on time is. A moment long past
    /// means lockrun itself did not run (a stall: SIGSTOP, a frozen VM), not that renewals
    /// fail: see [`Deadline::renewal_overdue`].
    due: Cell<Option<Instant>>,
}

impl Deadline {
    /// `drift`: what the backend allows for clock drift ([`LockService::drift`]); the span of a
    /// lease is `ttl − drift`. The grace and margin stay functions of the TTL.
    pub fn new(lease: &Lease, ttl: Duration, drift: Duration, kill_after: Duration) -> Deadline {
        let span = ttl.saturating_sub(drift);
        Deadline {
            at: Cell::new(lease.sent_at + span),
            span,
            grace: loss_grace(ttl, kill_after),
            margin: margin(ttl),
            due: Cell::new(None),
        }
    }

    /// A renewal was due more than the margin ago and none has been sent: lockrun was stalled.
    pub fn renewal_overdue(&self, now: Instant) -> bool {
        self.due.get().is_some_and(|due| now > due + self.margin)
    }

    /// The lease cannot expire on the server before this (up to clock-rate drift).
    pub fn get(&self) -> Instant {
        self.at.get()
    }

    /// Without a renewal confirmed by then, the job gets SIGTERM. Also the latest moment to
    /// start the command at all: a job started later would be told to stop at once.
    pub fn term_at(&self) -> Instant {
        self.at.get() - self.grace - self.margin
    }

    /// Without a renewal confirmed by then, the job gets SIGKILL.
    pub fn kill_at(&self) -> Instant {
        self.at.get() - self.margin
    }

    pub fn grace(&self) -> Duration {
        self.grace
    }
}

/// What the watchdog did, for the run's record (`--metrics-file`). Counted as it goes, so the
/// numbers are there however the watchdog ends (dropped when the job exits, or lost).
/// Single-threaded like [`Deadline`]: plain `Cell`s.
#[derive(Debug, Default)]
pub struct Stats {
    /// Renewals the server confirmed.
    pub renewals: Cell<u64>,
    /// Renewal attempts that failed (error, broken connection) or timed out. A renewal that
    /// finds the key gone or taken is not one: the watchdog returns [`Lost::NotOwner`].
    pub failures: Cell<u64>,
}

impl Stats {
    fn bump(c: &Cell<u64>) {
        c.set(c.get() + 1);
    }
}

/// Why the watchdog gave up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lost {
    /// The server says the key is gone or names another holder: another job may run now.
    NotOwner,
    /// No renewal was confirmed before the local deadline.
    Expired,
}

/// Renews until the lock is lost; resolves only then. Logs nothing about the loss itself: the
/// supervisor signals the job first and logs after. Counts into `stats`.
pub async fn run<L: LockService>(
    lock: &mut L,
    spec: &LockSpec,
    lease: &Lease,
    deadline: &Deadline,
    stats: &Stats,
) -> Lost {
    let interval = spec.ttl / 3;
    // Retries after an unknown outcome: often enough to ride out a short blip, rare enough not
    // to hammer a recovering server.
    let retry = (spec.ttl / 10).clamp(Duration::from_millis(20), Duration::from_secs(1));
    let mut next = lease.sent_at + interval;
    loop {
        deadline.due.set(Some(next));
        sleep_until(next).await;
        let sent = Instant::now();
        if sent <= next + deadline.margin {
            deadline.due.set(None);
        }
        if sent >= deadline.get() {
            return Lost::Expired;
        }
        let renewed = timeout(deadline.get() - sent, lock.renew(spec, lease)).await;
        deadline.due.set(None);
        match renewed {
            Ok(Ok(Renew::Renewed)) => {
                debug!(key = %spec.key, ttl = %Human(spec.ttl), "redis lock renewed");
                Stats::bump(&stats.renewals);
                deadline.at.set(sent + deadline.span);
                next = sent + interval;
            }
            Ok(Ok(Renew::NotOwner)) => return Lost::NotOwner,
            Ok(Err(e)) => {
                Stats::bump(&stats.failures);
                warn!(key = %spec.key, error = %e, left = %Human(deadline.get().saturating_duration_since(Instant::now())),
                      "redis lock renewal failed; retrying");
                next = (Instant::now() + retry).min(deadline.get());
            }
            Err(_) => {
                Stats::bump(&stats.failures);
                warn!(key = %spec.key, "redis lock renewal timed out");
                next = Instant::now();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lease of key `k` sent and confirmed at `now`.
    fn lease_at(now: Instant) -> Lease {
        Lease {
            key: "k".into(),
            holder: crate::lock::Holder {
                token: "t".into(),
                id: "i".into(),
                value: "i".into(),
                host: "h".into(),
                pid: 1,
            },
            fence: 1,
            sent_at: now,
            confirmed_at: now,
        }
    }

    #[test]
    fn the_job_is_stopped_ahead_of_the_deadline() {
        let ms = Duration::from_millis;
        assert_eq!(margin(ms(100)), ms(5));
        assert_eq!(margin(Duration::from_secs(30)), ms(1000));
        assert_eq!(margin(Duration::from_secs(2)), ms(100));
        // Default TTL and --kill-after: the grace fits.
        assert_eq!(loss_grace(Duration::from_secs(30), ms(10_000)), ms(10_000));
        // A short TTL clamps it to a third of the lease.
        assert_eq!(loss_grace(ms(900), ms(10_000)), ms(300));
        let now = Instant::now();
        let lease = lease_at(now);
        let d = Deadline::new(&lease, ms(900), Duration::ZERO, ms(10_000));
        assert_eq!(d.get(), now + ms(900));
        assert_eq!(d.kill_at(), now + ms(855));
        assert_eq!(d.term_at(), now + ms(555));
        // A quorum's drift allowance (TTL/100 + 2 ms) shortens the span, not grace or margin.
        let d = Deadline::new(&lease, ms(900), ms(11), ms(10_000));
        assert_eq!(d.get(), now + ms(889));
        assert_eq!(d.kill_at(), now + ms(844));
        assert_eq!(d.term_at(), now + ms(544));
    }

    /// A lock whose every renewal is confirmed at once, with a drift allowance; it notes when
    /// the last renewal reached it (just after the watchdog took its send time).
    struct Drifting(Cell<Option<Instant>>);

    impl LockService for Drifting {
        async fn subscribe_wakeups(&mut self, _: &LockSpec) -> Result<(), crate::lock::LockError> {
            Ok(())
        }
        async fn acquire(
            &mut self,
            _: &LockSpec,
            _: &crate::lock::Holder,
            _: bool,
        ) -> Result<crate::lock::Acquire, crate::lock::LockError> {
            unreachable!()
        }
        async fn renew(
            &mut self,
            _: &LockSpec,
            _: &Lease,
        ) -> Result<Renew, crate::lock::LockError> {
            self.0.set(Some(Instant::now()));
            Ok(Renew::Renewed)
        }
        async fn give_back(&mut self, _: &LockSpec, _: &crate::lock::Holder) {
            unreachable!()
        }
        async fn release(
            &mut self,
            _: &LockSpec,
            _: &Lease,
            _: Duration,
            _: Option<&crate::lock::Note>,
        ) -> Result<crate::lock::Release, crate::lock::LockError> {
            unreachable!()
        }
        async fn is_held_by(
            &mut self,
            _: &LockSpec,
            _: &str,
        ) -> Result<bool, crate::lock::LockError> {
            unreachable!()
        }
        async fn leave_queue(
            &mut self,
            _: &LockSpec,
            _: &crate::lock::Holder,
            _: Option<&crate::lock::Note>,
        ) -> Result<(), crate::lock::LockError> {
            Ok(())
        }
        async fn wait_for_turn(&mut self, _: &crate::lock::Holder, _: Duration) {}
        fn drift(&self, ttl: Duration) -> Duration {
            ttl / 10
        }
    }

    #[test]
    fn a_confirmed_renewal_moves_the_deadline_to_send_time_plus_the_span() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            let ms = Duration::from_millis;
            let now = Instant::now();
            let lease = lease_at(now);
            let spec = LockSpec {
                key: "k".into(),
                ttl: ms(900),
                limit: None,
                history: 0,
                every: None,
            };
            let mut lock = Drifting(Cell::new(None));
            let d = Deadline::new(&lease, spec.ttl, lock.drift(spec.ttl), ms(10_000));
            assert_eq!(d.get(), now + ms(810));
            // The first renewal goes out at TTL/3: the deadline becomes its send time + 810 ms
            // (TTL − drift), not + 900 ms. The send time is a moment before the mock saw it.
            let stats = Stats::default();
            let _ = timeout(ms(450), run(&mut lock, &spec, &lease, &d, &stats)).await;
            let seen = lock.0.get().expect("a renewal was sent");
            assert_eq!((stats.renewals.get(), stats.failures.get()), (1, 0));
            assert!(d.get() <= seen + ms(810), "{:?}", d.get() - seen);
            assert!(d.get() + ms(20) > seen + ms(810), "{:?}", seen - d.get());
        });
    }
}
