//! Keeps the lease alive while the job runs.
//!
//! Every TTL/3 a token-checked renewal is sent. Its answer is one of three:
//! renewed (the local deadline moves to *send time* + TTL), not owner (lost, now), or unknown
//! (timeout, broken connection, server error): then it reconnects and retries with the same
//! token until the local deadline, which is measured on the monotonic clock from when the last
//! successful renewal was *sent*: the server cannot have started that lease any earlier, so the
//! key is guaranteed to outlive the deadline (up to clock-rate drift).

use crate::duration::Human;
use crate::lock::{Lease, LockService, LockSpec, Renew};
use std::time::Duration;
use tokio::time::{sleep_until, timeout, Instant};
use tracing::{debug, error, warn};

/// Resolves only when the lock is lost (after logging `redis lock lost`).
pub async fn run<L: LockService>(lock: &mut L, spec: &LockSpec, lease: &Lease) {
    let interval = spec.ttl / 3;
    // Retries after an unknown outcome: often enough to ride out a short blip, rare enough not
    // to hammer a recovering server.
    let retry = (spec.ttl / 10).clamp(Duration::from_millis(20), Duration::from_secs(1));
    let mut deadline = lease.sent_at + spec.ttl;
    let mut next = lease.sent_at + interval;
    loop {
        sleep_until(next).await;
        let sent = Instant::now();
        if sent >= deadline {
            error!(key = %spec.key, "redis lock lost: no renewal confirmed within the TTL");
            return;
        }
        match timeout(deadline - sent, lock.renew(spec, lease)).await {
            Ok(Ok(Renew::Renewed)) => {
                debug!(key = %spec.key, ttl = %Human(spec.ttl), "redis lock renewed");
                deadline = sent + spec.ttl;
                next = sent + interval;
            }
            Ok(Ok(Renew::NotOwner)) => {
                error!(key = %spec.key, "redis lock lost: the key expired or now belongs to another holder");
                return;
            }
            Ok(Err(e)) => {
                warn!(key = %spec.key, error = %e, left = %Human(deadline.saturating_duration_since(Instant::now())),
                      "redis lock renewal failed; retrying");
                next = (Instant::now() + retry).min(deadline);
            }
            Err(_) => {
                warn!(key = %spec.key, "redis lock renewal timed out");
                next = Instant::now();
            }
        }
    }
}
