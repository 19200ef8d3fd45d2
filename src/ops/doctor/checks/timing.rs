//! The verdicts on time: the round trips' latency, the server's clock against ours, and the
//! two clocks' rates. Separate from the server's facts because these judge measurements
//! (round trips, readings of `TIME`) rather than what `INFO` says.

use super::{finding, Finding, Verdict};
use crate::clock_rate::{Rate, Reading, TOLERANCE};
use std::time::Duration;

/// The nearest-rank percentile `p` (0..=100) of `samples`; zero for none.
pub fn percentile(samples: &[Duration], p: f64) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Above this, a round trip is a large share of the default renewal interval (TTL/3 = 10 s)
/// and of the default request timeout (TTL/3 within 50 ms..3 s).
pub const SLOW: Duration = Duration::from_secs(1);

/// Check 7: Round-trip latency.
pub fn latency(samples: Result<&[Duration], &str>) -> Finding {
    let samples = match samples {
        Ok(s) if !s.is_empty() => s,
        Ok(_) => return finding("latency", Verdict::CannotCheck, "no round trip measured"),
        Err(why) => return finding("latency", Verdict::CannotCheck, why),
    };
    let (p50, p99) = (percentile(samples, 50.0), percentile(samples, 99.0));
    let figures = format!(
        "p50 {}, p99 {} over {} round trip{}",
        ms(p50),
        ms(p99),
        samples.len(),
        if samples.len() == 1 { "" } else { "s" }
    );
    if p99 > SLOW {
        finding(
            "latency",
            Verdict::Warn,
            format!(
                "{figures}: a large share of the renewal interval (TTL/3) and of the request \
                 timeout; use a longer --ttl and --node-timeout, or a nearer server"
            ),
        )
    } else {
        finding("latency", Verdict::Ok, figures)
    }
}

/// One `TIME` round trip: the server's clock against ours, read when the request was sent.
#[derive(Clone, Copy, Debug)]
pub struct ClockSample {
    pub sent_us: i64,
    /// The send on the monotonic clock, for the rate.
    pub sent: tokio::time::Instant,
    pub rtt: Duration,
    pub server_us: i64,
}

impl ClockSample {
    /// Server minus local, taking the server to have read its clock halfway through the trip.
    pub fn offset_us(&self) -> i64 {
        self.server_us - (self.sent_us + self.rtt.as_micros() as i64 / 2)
    }

    /// As a reading of the server's clock against our monotonic one, for the rate.
    pub fn reading(&self) -> Option<Reading> {
        Some(Reading {
            source: 0,
            server_us: u64::try_from(self.server_us).ok()?,
            sent: self.sent,
            received: self.sent + self.rtt,
        })
    }
}

/// The fastest of `samples` (the tightest bounds).
pub fn fastest(samples: &[ClockSample]) -> Option<&ClockSample> {
    samples.iter().min_by_key(|s| s.rtt)
}

/// How long the rate check waits between its two readings of the server's clock: long enough
/// for round trips of `rtt` to bound the rate to half of [`TOLERANCE`], at least 1 s; `None`
/// when that would be more than [`RATE_WINDOW_MAX`] (the round trips are too slow to tell).
pub fn rate_window(rtt: Duration) -> Option<Duration> {
    let needed = rtt.mul_f64(2.0 / TOLERANCE);
    (needed <= RATE_WINDOW_MAX).then(|| needed.max(Duration::from_secs(1)))
}

/// The longest the rate check waits between its readings.
pub const RATE_WINDOW_MAX: Duration = Duration::from_secs(3);

/// Check 9: the rate of our monotonic clock against the server's clock, over two readings a
/// window apart ([`crate::clock_rate`]). lockrun counts a lease on its monotonic clock while
/// Redis expires it by its own; a clock certainly off by more than 1 % is a warning.
pub fn clock_rate(rate: Result<Rate, &str>) -> Finding {
    let rate = match rate {
        Ok(r) => r,
        Err(why) => return finding("clock-rate", Verdict::CannotCheck, why),
    };
    let figures = format!(
        "local clock runs at {:.4} × the server's (±{:.4})",
        rate.estimate,
        rate.error()
    );
    if rate.is_off() {
        let why = if rate.factor() < 1.0 {
            "slower than the 5 % lockrun's margin absorbs: a run counts its lease at the \
             measured rate from its first renewal on, but a job cut off before that may outlive \
             its lease"
        } else if rate.estimate < 1.0 {
            "slow, within the 5 % lockrun's margin absorbs, but NTP keeps a clock within 0.05 %"
        } else {
            "fast: lockrun stops jobs early by the server's clock, never late"
        };
        return finding(
            "clock-rate",
            Verdict::Warn,
            format!("{figures}: {why}; sync the clocks (NTP)"),
        );
    }
    if rate.error() > TOLERANCE {
        return finding(
            "clock-rate",
            Verdict::CannotCheck,
            format!("{figures}: the round trips were too slow to tell 1 %"),
        );
    }
    finding("clock-rate", Verdict::Ok, figures)
}

/// Above this the times people read (a holder's `started=` against now, history times from
/// the server's clock) disagree visibly.
pub const SKEW: Duration = Duration::from_millis(500);

/// Check 8: Our clock against the server's, from the sample with the shortest round trip (the
/// tightest bound: the true offset is within half its round trip).
pub fn clock(samples: Result<&[ClockSample], &str>) -> Finding {
    let best = match samples {
        Ok(s) => fastest(s),
        Err(why) => return finding("clock", Verdict::CannotCheck, why),
    };
    let Some(best) = best else {
        return finding("clock", Verdict::CannotCheck, "no TIME answer");
    };
    // The true offset is anywhere within half the round trip of the estimate: with round trips
    // this slow, a skew of SKEW can be neither shown nor ruled out.
    if best.rtt / 2 > SKEW {
        return finding(
            "clock",
            Verdict::CannotCheck,
            format!(
                "the fastest TIME round trip took {}: too slow to compare the clocks to within {}",
                ms(best.rtt),
                ms(SKEW)
            ),
        );
    }
    let offset = best.offset_us();
    let size = Duration::from_micros(offset.unsigned_abs());
    let side = if offset > 0 { "behind" } else { "ahead of" };
    let figures = format!(
        "local clock {} {side} the server's (±{})",
        ms(size),
        ms(best.rtt / 2)
    );
    if size > SKEW {
        finding(
            "clock",
            Verdict::Warn,
            format!(
                "{figures}: lockrun's safety never compares clocks (fences and queues use the \
                 server's), but the times operators read do (a holder's started=, history); \
                 sync the clocks (NTP)"
            ),
        )
    } else {
        finding("clock", Verdict::Ok, figures)
    }
}

/// `0.12ms`, `12ms`, `1500ms`.
fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms < 10.0 {
        format!("{ms:.2}ms")
    } else {
        format!("{ms:.0}ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let ms = |v: &[u64]| {
            v.iter()
                .map(|m| Duration::from_millis(*m))
                .collect::<Vec<_>>()
        };
        let twenty = ms(&(1..=20).rev().collect::<Vec<_>>());
        assert_eq!(percentile(&twenty, 50.0), Duration::from_millis(10));
        assert_eq!(percentile(&twenty, 99.0), Duration::from_millis(20));
        assert_eq!(percentile(&ms(&[7]), 99.0), Duration::from_millis(7));
        assert_eq!(percentile(&[], 50.0), Duration::ZERO);
        assert_eq!(latency(Ok(&twenty)).verdict, Verdict::Ok);
        let slow = ms(&[1, 1, 1, 1500]);
        let f = latency(Ok(&slow));
        assert_eq!(f.verdict, Verdict::Warn);
        assert!(
            f.detail.starts_with("p50 1.00ms, p99 1500ms"),
            "{}",
            f.detail
        );
    }

    #[test]
    fn clock_offset_counts_half_the_round_trip() {
        let s = |sent: i64, rtt_ms: u64, server: i64| ClockSample {
            sent_us: sent,
            sent: tokio::time::Instant::now(),
            rtt: Duration::from_millis(rtt_ms),
            server_us: server,
        };
        // Sent at 0, 10 ms there and back, the server read 5 ms: in step.
        assert_eq!(s(0, 10, 5_000).offset_us(), 0);
        let samples = [s(0, 400, 900_000), s(1_000_000, 2, 1_701_000)];
        let f = clock(Ok(&samples));
        assert_eq!(f.verdict, Verdict::Warn, "{}", f.detail);
        assert!(
            f.detail.starts_with("local clock 700ms behind"),
            "{}",
            f.detail
        );
        let near = [s(0, 2, 1_000)];
        assert_eq!(clock(Ok(&near)).verdict, Verdict::Ok);
        // A server answering 2.5 s late: 1250 ms "ahead" within ±1250 ms says nothing.
        let slow = clock(Ok(&[s(0, 2500, 2_500_000)]));
        assert_eq!(slow.verdict, Verdict::CannotCheck, "{}", slow.detail);
        assert!(slow.detail.contains("too slow"), "{}", slow.detail);
        assert_eq!(clock(Err("TIME denied")).verdict, Verdict::CannotCheck);
    }

    #[test]
    fn clock_rate_check() {
        let rate = |estimate: f64, error: f64| Rate {
            estimate,
            low: estimate - error,
            high: estimate + error,
        };
        let ok = clock_rate(Ok(rate(1.0001, 0.0002)));
        assert_eq!(ok.verdict, Verdict::Ok, "{}", ok.detail);
        assert!(
            ok.detail.contains("1.0001 × the server's (±0.0002)"),
            "{}",
            ok.detail
        );
        // Beyond what the margin absorbs, within it, and fast: each a warning that says which.
        let slow = clock_rate(Ok(rate(0.9, 0.001)));
        assert_eq!(slow.verdict, Verdict::Warn);
        assert!(
            slow.detail.contains("may outlive its lease"),
            "{}",
            slow.detail
        );
        let absorbed = clock_rate(Ok(rate(0.98, 0.001)));
        assert_eq!(absorbed.verdict, Verdict::Warn);
        assert!(
            absorbed.detail.contains("within the 5 %"),
            "{}",
            absorbed.detail
        );
        let fast = clock_rate(Ok(rate(1.1, 0.001)));
        assert!(fast.detail.contains("never late"), "{}", fast.detail);
        // 3 % off ± 2.5 %: neither fine nor certainly off.
        let vague = clock_rate(Ok(rate(0.97, 0.025)));
        assert_eq!(vague.verdict, Verdict::CannotCheck, "{}", vague.detail);
        assert_eq!(clock_rate(Err("TIME denied")).verdict, Verdict::CannotCheck);
        // The window: 1 s for fast round trips, longer for slower ones, none beyond 15 ms.
        let ms = Duration::from_millis;
        assert_eq!(rate_window(ms(1)), Some(ms(1000)));
        assert_eq!(rate_window(ms(10)), Some(ms(2000)));
        assert_eq!(rate_window(ms(16)), None);
    }
}
