//! Keeps the lease alive while the job runs, and says when the job must be stopped.
//!
//! Every TTL/3 a token-checked renewal is sent. Its answer is one of three:
//! renewed (the local deadline moves to *send time* + TTL − drift), not owner (lost, now), or unknown
//! (timeout, broken connection, server error): then it reconnects and retries with the same
//! token until the local deadline, which is measured on the monotonic clock from when the last
//! successful renewal was *sent*: the server cannot have started that lease any earlier, so the
//! key is guaranteed to outlive the deadline (up to clock-rate differences, see [`margin`]).
//!
//! The job must be gone *before* that deadline, not at it: another holder may start the moment
//! the key expires, and a job that takes its time to shut down after SIGTERM would overlap it.
//! So when no renewal is confirmed the supervisor sends SIGTERM at `deadline − grace − margin`
//! and SIGKILL at `deadline − margin` ([`Deadline`]).
//!
//! Every confirmed acquire and renewal also reads the server's clock: from the second reading on,
//! the rate of our clock against the server's is known within bounds ([`crate::clock_rate`]).
//! A rate certainly 1 % off is said once; one that may be below what the margin absorbs scales
//! the whole schedule (span, grace, margin, renewal interval) by its lower bound, so that our
//! count of the lease still ends before the server's.

use crate::clock_rate::{self, Tracker};
use crate::duration::Human;
use crate::lock::{Lease, LockService, LockSpec, Renew};
use std::cell::Cell;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::{sleep_until, timeout, Instant};
use tracing::{debug, warn};

/// What the margin keeps for the job's end after SIGKILL is due: the signal's delivery, the
/// process group's exit, and the scheduler's lateness in waking lockrun at that moment. SIGKILL
/// to every member reaped, for a group of four processes (one holding 50 MB) on a 2-core VM at
/// load 5 to 10: 4 ms median, 13 ms at the 99th percentile, 28 ms at worst of 150.
pub const DELIVERY: Duration = Duration::from_millis(25);

/// Kept between the job's end and the lease's end on the lock-loss path: TTL/20, which absorbs a
/// clock-rate difference of up to 5 % ([`clock_rate::ABSORBED`]) between our monotonic clock
/// and the server's, plus [`DELIVERY`]. With our clock at rate r ≥ 0.95 of the server's, the
/// SIGKILL due at (TTL − margin) on ours comes at (TTL − margin)/r on the server's, and
/// (TTL − margin)/r + DELIVERY ≤ TTL holds for every TTL.
pub fn margin(ttl: Duration) -> Duration {
    ttl.mul_f64(clock_rate::ABSORBED) + DELIVERY
}

/// The SIGTERM-to-SIGKILL grace on the lock-loss path: `--kill-after`, clamped to TTL/3 so that
/// renewals still get the middle third of the lease to recover from a blip before the job is
/// told to stop, and to TTL/2 − margin, so that at the shortest TTLs (below about 0.2 s, where
/// the margin's fixed part weighs) a renewal still has from TTL/3 to TTL/2.
pub fn loss_grace(ttl: Duration, kill_after: Duration) -> Duration {
    kill_after
        .min(ttl / 3)
        .min((ttl / 2).saturating_sub(margin(ttl)))
}

/// The lease's local deadline, shared by the watchdog (which moves it on every confirmed
/// renewal) and the supervisor (which stops the job ahead of it). Single-threaded: a `Cell`.
pub struct Deadline {
    /// When the last confirmed acquire or renewal was sent.
    from: Cell<Instant>,
    /// How long a confirmed acquire or renewal keeps the lease alive, counted from when it was
    /// sent: the TTL less the backend's clock drift allowance ([`LockService::drift`]: zero for
    /// one server, more for a quorum whose nodes' clocks each run at their own rate).
    span: Duration,
    grace: Duration,
    margin: Duration,
    /// The share of every duration above to count on our clock: 1, or less once our clock is
    /// measured to run slower than the server's by more than the margin absorbs
    /// ([`clock_rate::Rate::factor`]).
    factor: Cell<f64>,
    /// Woken when the deadline moves earlier (a slow clock measured), for a supervisor asleep
    /// until a moment that is now too late.
    earlier: Notify,
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
            from: Cell::new(lease.sent_at),
            span,
            grace: loss_grace(ttl, kill_after),
            margin: margin(ttl),
            factor: Cell::new(1.0),
            earlier: Notify::new(),
            due: Cell::new(None),
        }
    }

    /// `d` of the server's clock, on ours.
    fn local(&self, d: Duration) -> Duration {
        d.mul_f64(self.factor.get())
    }

    /// A renewal sent at `sent` was confirmed, with `factor` from our clock's measured rate.
    fn renewed(&self, sent: Instant, factor: f64) {
        let before = self.kill_at();
        self.from.set(sent);
        self.factor.set(factor);
        if self.kill_at() < before {
            self.earlier.notify_one();
        }
    }

    /// Resolves when the deadline has moved earlier since the last call.
    pub async fn moved_earlier(&self) {
        self.earlier.notified().await;
    }

    /// A renewal was due more than the margin ago and none has been sent: lockrun was stalled.
    pub fn renewal_overdue(&self, now: Instant) -> bool {
        self.due
            .get()
            .is_some_and(|due| now > due + self.local(self.margin))
    }

    /// The lease cannot expire on the server before this (up to clock-rate differences the
    /// margin absorbs).
    pub fn get(&self) -> Instant {
        self.from.get() + self.local(self.span)
    }

    /// Without a renewal confirmed by then, the job gets SIGTERM. Also the latest moment to
    /// start the command at all: a job started later would be told to stop at once.
    pub fn term_at(&self) -> Instant {
        let before = self.span.saturating_sub(self.grace + self.margin);
        self.from.get() + self.local(before)
    }

    /// Without a renewal confirmed by then, the job gets SIGKILL.
    pub fn kill_at(&self) -> Instant {
        self.from.get() + self.local(self.span.saturating_sub(self.margin))
    }

    /// The SIGTERM-to-SIGKILL grace, on our clock.
    pub fn grace(&self) -> Duration {
        self.local(self.grace)
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
    let mut clock = Tracker::new(&lease.readings);
    let mut next = lease.sent_at + interval;
    loop {
        deadline.due.set(Some(next));
        sleep_until(next).await;
        let sent = Instant::now();
        if sent <= next + deadline.local(deadline.margin) {
            deadline.due.set(None);
        }
        if sent >= deadline.get() {
            return Lost::Expired;
        }
        let renewed = timeout(deadline.get() - sent, lock.renew(spec, lease)).await;
        deadline.due.set(None);
        match renewed {
            Ok(Ok(Renew::Renewed(readings))) => {
                debug!(key = %spec.key, ttl = %Human(spec.ttl), "redis lock renewed");
                Stats::bump(&stats.renewals);
                let (factor, off) = clock.observe(&readings);
                deadline.renewed(sent, factor);
                if let Some(rate) = off {
                    warn!(rate = %format!("{:.3}", rate.estimate), within = %format!("±{:.3}", rate.error()),
                    "this machine's clock runs at a different rate from the redis server's (or the server's clock was stepped); {}",
                    if factor < 1.0 {
                        "the lease is counted at the measured rate: the job is stopped that much earlier if renewals fail"
                    } else {
                        "lockrun's margin absorbs this (a clock up to 5 % slow, or fast at any rate); sync the clocks (NTP)"
                    });
                }
                next = sent + deadline.local(interval);
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

    /// A lease sent and confirmed at `now`.
    fn lease_at(now: Instant) -> Lease {
        Lease {
            holder: crate::lock::Holder {
                token: "t".into(),
                id: "i".into(),
                value: "i".into(),
                host: "h".into(),
                pid: 1,
                since: now,
            },
            fence: 1,
            attempt: 1,
            sent_at: now,
            confirmed_at: now,
            readings: Vec::new(),
        }
    }

    #[test]
    fn the_job_is_stopped_ahead_of_the_deadline() {
        let ms = Duration::from_millis;
        assert_eq!(margin(ms(100)), ms(30));
        assert_eq!(margin(Duration::from_secs(30)), ms(1525));
        assert_eq!(margin(Duration::from_secs(2)), ms(125));
        // Default TTL and --kill-after: the grace fits.
        assert_eq!(loss_grace(Duration::from_secs(30), ms(10_000)), ms(10_000));
        // A short TTL clamps it to a third of the lease.
        assert_eq!(loss_grace(ms(900), ms(10_000)), ms(300));
        // The shortest: to TTL/2 − margin, so that renewals get from TTL/3 to TTL/2.
        assert_eq!(loss_grace(ms(100), ms(10_000)), ms(20));
        assert_eq!(loss_grace(ms(100), ms(5)), ms(5));
        let now = Instant::now();
        let lease = lease_at(now);
        let d = Deadline::new(&lease, ms(900), Duration::ZERO, ms(10_000));
        assert_eq!(d.get(), now + ms(900));
        assert_eq!(d.kill_at(), now + ms(830));
        assert_eq!(d.term_at(), now + ms(530));
        // A quorum's drift allowance (TTL/100 + 2 ms) shortens the span, not grace or margin.
        let d = Deadline::new(&lease, ms(900), ms(11), ms(10_000));
        assert_eq!(d.get(), now + ms(889));
        assert_eq!(d.kill_at(), now + ms(819));
        assert_eq!(d.term_at(), now + ms(519));
    }

    /// The margin's promise, at every TTL lockrun accepts (100 ms up): with our clock at 0.95
    /// of the server's, the SIGKILL due at TTL − margin on ours comes at (TTL − margin)/0.95 on
    /// the server's, and the job, gone DELIVERY after that, is gone before the lease ends; at
    /// the shortest TTLs the renewal still has from TTL/3 to TTL/2 before SIGTERM.
    #[test]
    fn the_margin_absorbs_a_clock_5_percent_slow_and_the_delivery_at_every_ttl() {
        let mut ttl = Duration::from_millis(100);
        while ttl <= Duration::from_secs(86_400) {
            let kill = (ttl - margin(ttl)).as_secs_f64() / (1.0 - clock_rate::ABSORBED);
            let gone = kill + DELIVERY.as_secs_f64();
            assert!(gone <= ttl.as_secs_f64(), "TTL {ttl:?}: gone at {gone} s");
            let lease = lease_at(Instant::now());
            let d = Deadline::new(&lease, ttl, Duration::ZERO, Duration::from_secs(10));
            assert!(d.term_at() >= lease.sent_at + ttl / 2, "TTL {ttl:?}");
            ttl = ttl.mul_f64(1.37);
        }
    }

    #[test]
    fn a_slow_clock_measured_scales_the_whole_schedule_and_moves_it_earlier() {
        let ms = Duration::from_millis;
        let now = Instant::now();
        let d = Deadline::new(&lease_at(now), ms(3000), Duration::ZERO, ms(10_000));
        assert_eq!(d.kill_at(), now + ms(2825));
        // A renewal at 1 s finds our clock at half the server's rate: the lease lasts 1.5 s of
        // ours from that renewal, and grace and margin are halved with it.
        d.renewed(now + ms(1000), 0.5);
        assert_eq!(d.get(), now + ms(2500));
        assert_eq!(d.kill_at(), now + ms(2500) - ms(175) / 2);
        assert_eq!(d.grace(), ms(500));
        assert_eq!(d.term_at(), now + ms(2500) - ms(1175) / 2);
        // The supervisor, asleep until the old moments, is woken.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            timeout(ms(100), d.moved_earlier())
                .await
                .expect("woken: the deadline moved earlier");
            // A renewal that moves it later wakes nobody (the supervisor wakes by itself).
            d.renewed(now + ms(2000), 0.5);
            assert!(timeout(ms(20), d.moved_earlier()).await.is_err());
        });
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
            Ok(Renew::Renewed(Vec::new()))
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
            let spec = LockSpec::new("k", ms(900));
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
