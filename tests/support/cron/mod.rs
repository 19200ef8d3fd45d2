//! Real cron daemons, Debian's `cron` and busybox `crond`, as "hosts" for the crontab tests
//! (tests/cases/cron.rs, tests/cases/cron_standby.rs): each in its own mount, UTS and PID
//! namespace with its own spool, pid file, hostname, lockrun where one install channel puts it,
//! a mail recorder in place of `/usr/sbin/sendmail` and, when asked, a clock skew from
//! libfaketime (`daemon.rs`). Plus the pure parts: a document's crontab block made into a test
//! crontab (`crontab.rs`), the job log, `lockrun history` and the results table (`records.rs`),
//! and here the real clock and the tick a run belongs to.
//!
//! Nothing of the host is modified: every mount lives in the daemon's private mount namespace
//! (and is not written to `/run/mount/utab`), every file is in a temp dir.

mod crontab;
mod daemon;
mod records;

pub use crontab::*;
pub use daemon::*;
pub use records::*;

use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Seconds since the epoch, by the real clock.
pub fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Sleeps until the real clock reads `t` (seconds since the epoch).
pub fn sleep_until(t: f64) {
    let left = t - now();
    if left > 0.0 {
        thread::sleep(Duration::from_secs_f64(left));
    }
}

/// `HH:MM` (UTC) of a tick, for messages.
pub fn hhmm(tick: i64) -> String {
    let m = tick.rem_euclid(24 * 60);
    format!("{:02}:{:02}", m / 60, m % 60)
}

/// The tick (minute since the epoch) a run or an attempt at real time `t` belongs to: the
/// nearest minute. Debian's cron fires at :01 of its own clock's minute plus the fraction of a
/// second it started at; a clock skewed by up to ±25 s moves that to between -24 s and +27 s of
/// the real minute, still nearest to it (the test's skews are ±5 s).
pub fn tick_of(t: f64) -> i64 {
    (t / 60.0).round() as i64
}
