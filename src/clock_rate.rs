//! How fast this machine's monotonic clock runs against a Redis server's clock.
//!
//! A lease is counted twice: by the server on its clock (Redis expires keys by it), and by
//! lockrun on its monotonic clock (the deadline that stops the job). When lockrun's clock runs
//! at rate r of the server's, r < 1, lockrun's count ends late: a lease of TTL on the server
//! lasts TTL·r on lockrun's clock. The watchdog's margin absorbs r ≥ 1 − [`ABSORBED`]; beyond
//! that only a measurement helps.
//!
//! Each confirmed acquire and renewal reads the server's clock (`TIME`, in its script) between
//! two local moments: the request's send and its reply's arrival ([`Reading`]). Two readings
//! bound the rate: the server's clock moved by Δ between them, ours by at least (second send −
//! first reply) and at most (second reply − first send). Nothing is assumed about the network
//! but that the script ran between send and reply, so the bounds hold however slow a round
//! trip was (a slow one only widens them).

use tokio::time::Instant;

/// A clock rate off by more than this (beyond the measurement's bounds) is said: lockrun warns
/// once per run, `doctor` warns. NTP slews a clock by at most 500 ppm (0.05 %): a clock 1 % off
/// is broken, even while the margin still absorbs it.
pub const TOLERANCE: f64 = 0.01;

/// The clock-rate difference the watchdog's margin absorbs without a measurement: the margin
/// is TTL × this plus a delivery allowance (`watchdog::margin`).
pub const ABSORBED: f64 = 0.05;

/// The server's clock as one confirmed request's script read it, and the local moments that
/// bracket the read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    /// Which server's clock: 0 for one server, the master's position under Redlock (each has
    /// its own clock; readings of different clocks are never compared).
    pub source: usize,
    /// `TIME`, in microseconds.
    pub server_us: u64,
    pub sent: Instant,
    pub received: Instant,
}

/// Our clock's rate against the server's over two readings: the midpoint estimate and the
/// bounds it is certainly within.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rate {
    pub estimate: f64,
    pub low: f64,
    pub high: f64,
}

impl Rate {
    /// From an earlier reading `a` to a later one `b` of the same clock; `None` when the
    /// server's clock did not move forward between them (it was stepped back).
    pub fn between(a: &Reading, b: &Reading) -> Option<Rate> {
        let server = b.server_us.checked_sub(a.server_us).filter(|d| *d > 0)? as f64 / 1e6;
        let secs = |later: Instant, earlier: Instant| {
            later.saturating_duration_since(earlier).as_secs_f64()
        };
        let mid = |r: &Reading| r.sent + (r.received - r.sent) / 2;
        Some(Rate {
            estimate: secs(mid(b), mid(a)) / server,
            low: secs(b.sent, a.received) / server,
            high: secs(b.received, a.sent) / server,
        })
    }

    /// Half the width of the bounds: the estimate is within this of the truth.
    pub fn error(&self) -> f64 {
        (self.high - self.low) / 2.0
    }

    /// Certainly off by more than [`TOLERANCE`], either way.
    pub fn is_off(&self) -> bool {
        self.high < 1.0 - TOLERANCE || self.low > 1.0 + TOLERANCE
    }

    /// What share of a lease's span (and of everything scheduled in it) to count on our clock:
    /// 1 while the rate is certainly at least what the margin absorbs; else its lower bound, so
    /// that our count of the lease ends no later than the server's.
    pub fn factor(&self) -> f64 {
        if self.low >= 1.0 - ABSORBED {
            1.0
        } else {
            self.low
        }
    }
}

/// The readings of one lease: the first of each server's clock, which every later one is
/// compared with (the longest baseline, the tightest bounds), and the factor each comparison
/// gave.
#[derive(Debug, Default)]
pub struct Tracker {
    first: Vec<Reading>,
    factors: Vec<(usize, f64)>,
    said: bool,
}

impl Tracker {
    /// From the acquire's readings.
    pub fn new(readings: &[Reading]) -> Tracker {
        let mut t = Tracker::default();
        t.observe(readings);
        t
    }

    /// A confirmed renewal's readings. Returns the factor to count the lease with from now on
    /// (the smallest over the servers' clocks; see [`Rate::factor`]), and, the first time a rate
    /// is certainly off ([`Rate::is_off`]), that rate, to be said once.
    pub fn observe(&mut self, readings: &[Reading]) -> (f64, Option<Rate>) {
        let mut say = None;
        for r in readings {
            let Some(first) = self.first.iter().find(|f| f.source == r.source) else {
                self.first.push(*r);
                continue;
            };
            let Some(rate) = Rate::between(first, r) else {
                continue;
            };
            match self.factors.iter_mut().find(|(s, _)| *s == r.source) {
                Some((_, f)) => *f = rate.factor(),
                None => self.factors.push((r.source, rate.factor())),
            }
            if rate.is_off() && !self.said {
                self.said = true;
                say = Some(rate);
            }
        }
        (self.factor(), say)
    }

    pub fn factor(&self) -> f64 {
        self.factors.iter().map(|(_, f)| *f).fold(1.0, f64::min)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A reading of clock `source` at `server_ms`, sent at `sent_ms` after `t0` and answered
    /// `rtt_ms` later.
    fn at(t0: Instant, source: usize, server_ms: u64, sent_ms: u64, rtt_ms: u64) -> Reading {
        let sent = t0 + Duration::from_millis(sent_ms);
        Reading {
            source,
            server_us: server_ms * 1000,
            sent,
            received: sent + Duration::from_millis(rtt_ms),
        }
    }

    #[test]
    fn two_readings_bound_the_rate_by_their_round_trips() {
        let t0 = Instant::now();
        // Our clock at half the server's: 1 s of ours while 2 s of the server's.
        let r = Rate::between(&at(t0, 0, 0, 0, 10), &at(t0, 0, 2000, 1000, 10)).unwrap();
        assert!((r.estimate - 0.5).abs() < 1e-9, "{r:?}");
        assert!(
            (r.low - 0.495).abs() < 1e-9 && (r.high - 0.505).abs() < 1e-9,
            "{r:?}"
        );
        assert!((r.error() - 0.005).abs() < 1e-9);
        assert!(r.is_off());
        assert!((r.factor() - 0.495).abs() < 1e-9);
        // A server clock stepped back: no rate.
        assert_eq!(
            Rate::between(&at(t0, 0, 5000, 0, 1), &at(t0, 0, 4000, 1000, 1)),
            None
        );
    }

    #[test]
    fn small_differences_are_neither_said_nor_acted_on() {
        let t0 = Instant::now();
        // NTP's slew (0.05 %) and a 3 % difference the margin absorbs: factor 1. The 3 % is
        // said (beyond 1 %, for certain); the 0.05 % is not.
        let ntp = Rate::between(&at(t0, 0, 0, 0, 1), &at(t0, 0, 10_000, 10_005, 1)).unwrap();
        assert!(!ntp.is_off());
        assert_eq!(ntp.factor(), 1.0);
        let slow = Rate::between(&at(t0, 0, 0, 0, 1), &at(t0, 0, 10_000, 9_700, 1)).unwrap();
        assert!(slow.is_off());
        assert_eq!(slow.factor(), 1.0);
        // 3 % off but with round trips too slow to be sure of 1 %: not said.
        let vague = Rate::between(&at(t0, 0, 0, 0, 200), &at(t0, 0, 10_000, 9_700, 200)).unwrap();
        assert!(!vague.is_off(), "{vague:?}");
        // A clock 10 % fast is said, and needs nothing: our count of the lease ends early.
        let fast = Rate::between(&at(t0, 0, 0, 0, 1), &at(t0, 0, 10_000, 11_000, 1)).unwrap();
        assert!(fast.is_off());
        assert_eq!(fast.factor(), 1.0);
    }

    #[test]
    fn a_tracker_compares_each_clock_with_its_own_first_reading_and_says_once() {
        let t0 = Instant::now();
        let mut t = Tracker::new(&[at(t0, 0, 0, 0, 1), at(t0, 1, 50_000, 0, 1)]);
        assert_eq!(t.factor(), 1.0);
        // Clock 1 is a minute ahead of clock 0: an offset, not a rate. Clock 1 runs at our
        // rate, clock 0 twice as fast as ours: we count the lease at (at most) half.
        let (f, say) = t.observe(&[at(t0, 0, 2000, 1000, 1), at(t0, 1, 51_000, 1000, 1)]);
        assert!((f - 0.499).abs() < 1e-3, "{f}");
        assert!(say.is_some_and(|r| (r.estimate - 0.5).abs() < 1e-3));
        let (f, say) = t.observe(&[at(t0, 0, 4000, 2000, 1)]);
        assert!((f - 0.4995).abs() < 1e-3, "{f}");
        assert_eq!(say, None, "said once");
        // A new clock (a renewal's first reading of it) changes nothing yet.
        let (f2, _) = t.observe(&[at(t0, 2, 7, 3000, 1)]);
        assert_eq!(f2, f);
    }
}
