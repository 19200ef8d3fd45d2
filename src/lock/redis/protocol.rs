//! The lock protocol ([`LockService`]) on one server: each operation one script (see
//! `scripts/`), its request built and its reply decoded there.

use super::send::EvalError;
use super::{link::Route, ticket, RedisLock};
use crate::lock::failure::{Kind, Misuse};
use crate::lock::keys::{history_args, wake_channel};
use crate::lock::scripts::acquire::{AcquireReply, AcquireRequest};
use crate::lock::scripts::leave::LeaveRequest;
use crate::lock::scripts::release::{ReleaseReply, ReleaseRequest};
use crate::lock::scripts::renew::{RenewReply, RenewRequest};
use crate::lock::scripts::{held_by, Request};
use crate::lock::{
    public_id, Acquire, Holder, Lease, LockError, LockKind, LockService, LockSpec, Note, Reading,
    Release, Renew,
};
use std::time::Duration;
use tokio::time::Instant;

/// The server's clock (`TIME` in µs, as a script returned it) read between `sent` and
/// `received`: one reading of clock 0 (Redlock renumbers its masters' readings).
fn reading(us: i64, sent: Instant, received: Instant) -> Vec<Reading> {
    u64::try_from(us)
        .ok()
        .map(|server_us| Reading {
            source: 0,
            server_us,
            sent,
            received,
        })
        .into_iter()
        .collect()
}

impl LockService for RedisLock {
    async fn subscribe_wakeups(&mut self, spec: &LockSpec) -> Result<(), LockError> {
        if self.router.wake.is_some() {
            return Ok(());
        }
        let channel = wake_channel(&spec.key);
        // Behind Sentinel, on the primary of the connection for the attempts: connected now if
        // need be, and that answer then serves the first attempt too.
        self.connection().await?;
        let fut = self
            .router
            .connector
            .subscribe(&channel, self.router.link.primary());
        match tokio::time::timeout(self.timeout, fut).await {
            Ok(Ok(wake)) => {
                self.router.wake = Some(wake);
                self.router.subscribed_at = Instant::now();
            }
            Ok(Err(fail)) => return Err(self.failed_connect(fail)),
            Err(_) => return Err(self.timed_out("no SUBSCRIBE reply")),
        }
        Ok(())
    }

    async fn acquire(
        &mut self,
        spec: &LockSpec,
        holder: &Holder,
        queue: bool,
    ) -> Result<Acquire, LockError> {
        self.check_key(&spec.key)?;
        let request = AcquireRequest {
            key: &spec.key,
            kind: spec.kind,
            value: &holder.value,
            ttl: spec.ttl,
            id: &holder.id,
            ticket: queue.then_some(ticket(spec.kind, spec.ttl)),
            // The history cap, read only when this attempt ends the run (not queueing, lock
            // held): the script composes that "skipped" entry from the holder value.
            // A tick's script writes only the entry of an earlier attempt that never released.
            history: match spec.kind {
                LockKind::Tick { .. } => spec.history,
                _ if queue => 0,
                _ => spec.history,
            },
            publish: self.publish(),
            began: holder.since.elapsed(),
        };
        let sent_at = Instant::now();
        self.unsettled = true;
        let (reply, acked) = self.eval_acked(&request.call(), true, Route::Named).await?;
        let confirmed_at = Instant::now();
        let lease = Lease {
            holder: holder.clone(),
            fence: 0,
            sent_at,
            confirmed_at,
            readings: Vec::new(),
            attempt: 1,
        };
        let decoded = match AcquireReply::decode(reply) {
            Ok(decoded) => decoded,
            // Whatever answered ran the request and said something none of the script's
            // replies say: it may have granted the lock. The attempt stays unsettled, so the
            // caller's give-back (token-checked) removes what it may have taken, on a new
            // connection: one that carried a reply no Redis gives may be out of step.
            Err(odd) => {
                self.router.link.forget();
                return Err(self.unexpected(&odd));
            }
        };
        self.unsettled = false;
        let acquired = self.acquired(spec, lease, decoded)?;
        if let (Acquire::Acquired(_), Err(e)) = (&acquired, acked) {
            // Not on enough replicas: a failover now could hand the key to someone else. Give
            // it back (token-checked) rather than hold it half-safely, and without waiting for
            // the replicas a second time: they just failed to answer, and a give-back they miss
            // leaves only our key, until its TTL.
            self.unsettled = true;
            self.give_back(spec, holder).await;
            return Err(e);
        }
        Ok(acquired)
    }

    async fn give_back(&mut self, spec: &LockSpec, holder: &Holder) {
        if !std::mem::take(&mut self.unsettled) {
            return;
        }
        let lease = Lease::phantom(holder);
        if let Err(e) = self
            .release_with(spec, &lease, Duration::ZERO, None, false)
            .await
        {
            tracing::debug!(error = %e, "giving back what the failed acquire may have taken");
        }
    }

    async fn renew(&mut self, spec: &LockSpec, lease: &Lease) -> Result<Renew, LockError> {
        let request = RenewRequest {
            key: &spec.key,
            kind: spec.kind,
            value: &lease.holder.value,
            ttl: spec.ttl,
        };
        let sent = Instant::now();
        let (reply, acked) = self
            // Behind Sentinel on the primary a majority names now, and only then (see
            // `Route::Named`): the token check then runs there, and a key that a failover lost
            // means the lock is lost.
            .eval_acked(&request.call(), true, Route::Named)
            .await?;
        let received = Instant::now();
        match RenewReply::decode(reply) {
            Ok(RenewReply::NotOwner) => Ok(Renew::NotOwner),
            // Renewed: the server's clock. Not acknowledged: the deadline stays where the last
            // acknowledged write put it (the watchdog retries until then).
            Ok(RenewReply::Renewed { server_us }) => {
                acked.map(|()| Renew::Renewed(reading(server_us, sent, received)))
            }
            Err(odd) => Err(self.unexpected(&odd)),
        }
    }

    async fn release(
        &mut self,
        spec: &LockSpec,
        lease: &Lease,
        keep_for: Duration,
        note: Option<&Note>,
    ) -> Result<Release, LockError> {
        self.release_with(spec, lease, keep_for, note, true).await
    }

    async fn is_held_by(&mut self, spec: &LockSpec, token: &str) -> Result<bool, LockError> {
        // Hashed here, not on the server: the token never leaves this process, and an id
        // presented in its place hashes to something else.
        let id = public_id(token);
        let request = held_by::HeldByRequest {
            key: &spec.key,
            id: &id,
            kind: spec.kind,
        };
        let (reply, _) = self
            .eval_acked(&request.call(), false, Route::Named)
            .await?;
        match held_by::decode(reply) {
            Ok(held_by::HeldBy::Holder) => Ok(true),
            Ok(held_by::HeldBy::Nobody) => Ok(false),
            // A shared holder's job may run a shared lockrun of the key within it; an exclusive
            // one would have to wait for its own enclosing holder: no upgrade.
            Ok(held_by::HeldBy::SharedHolder) if spec.kind == LockKind::Shared => Ok(true),
            Ok(held_by::HeldBy::SharedHolder) => Err(self.error(Kind::Misuse(Misuse::NoUpgrade {
                key: spec.key.clone(),
            }))),
            Err(odd) => Err(self.unexpected(&odd)),
        }
    }

    async fn leave_queue(
        &mut self,
        spec: &LockSpec,
        holder: &Holder,
        note: Option<&Note>,
    ) -> Result<(), LockError> {
        let request = LeaveRequest {
            key: &spec.key,
            id: &holder.id,
            kind: spec.kind,
            history: history_args(spec, holder, None, None, note),
            publish: self.publish(),
        };
        // Its reply changes nothing for the waiter that leaves (see `LeaveReply`): a queue
        // spoiled by hand is reported by the next acquire, and a ticket left behind expires.
        self.eval_acked(&request.call(), false, Route::Named)
            .await
            .map(|_| ())
    }

    async fn wait_for_turn(&mut self, holder: &Holder, max: Duration) {
        let Some(wake) = self.router.wake.as_mut() else {
            return tokio::time::sleep(max).await;
        };
        let until = Instant::now() + max;
        let id = holder.id.as_bytes();
        let ours = async {
            // Hints name the waiter whose turn it is (by public id); the others sleep on.
            while let Some(payload) = wake.next().await {
                if payload == id {
                    return true;
                }
            }
            false
        };
        if let Ok(false) = tokio::time::timeout_at(until, ours).await {
            // The subscription died (its connection lost, its shard failed over): a hint
            // sent now would be lost. The waiter looks again and subscribes again (see
            // `subscribe_wakeups`) rather than sleeping out the look interval; a subscription
            // that dies as soon as it is made is not made again sooner than `RESUBSCRIBE`
            // after the last one.
            self.router.wake = None;
            let again = self.router.subscribed_at + RESUBSCRIBE;
            tokio::time::sleep_until(again.min(until)).await;
        }
    }
}

/// The shortest time between two subscriptions to release hints, for a server that takes
/// each and drops it at once: at most a few a second, never a busy loop.
const RESUBSCRIBE: Duration = Duration::from_millis(250);

impl RedisLock {
    /// What the acquire script's reply says: `lease` (its fence still 0) when it granted
    /// the lock.
    fn acquired(
        &self,
        spec: &LockSpec,
        lease: Lease,
        reply: AcquireReply,
    ) -> Result<Acquire, LockError> {
        Ok(match reply {
            AcquireReply::Acquired {
                fence,
                server_us,
                attempt,
            } => Acquire::Acquired(Lease {
                fence,
                readings: server_us.map_or_else(Vec::new, |us| {
                    reading(us, lease.sent_at, lease.confirmed_at)
                }),
                attempt: attempt.unwrap_or(1).max(1),
                ..lease
            }),
            AcquireReply::Held {
                pttl,
                holder,
                rank,
                tick_left,
            } => Acquire::Held {
                holder,
                pttl,
                rank,
                tick_left: tick_left.filter(|_| spec.kind.tick().is_some()),
            },
            // Only a tick's script passes an attempt; to any other kind it reads as held.
            AcquireReply::Passed { pttl, holder } if spec.kind.tick().is_some() => {
                Acquire::Passed { holder, pttl }
            }
            AcquireReply::Passed { pttl, holder } => Acquire::Held {
                holder,
                pttl,
                rank: None,
                tick_left: None,
            },
            AcquireReply::TickEnded { completed } => Acquire::TickEnded { completed },
            AcquireReply::Refused(refusal) => {
                let misuse = refusal.misuse(&spec.key, spec.kind);
                return Err(self.error(Kind::Misuse(misuse)));
            }
        })
    }

    /// [`LockService::release`]; `ack`: with `--acks`/`--fsync`, wait for the replicas (not
    /// for a give-back: see [`LockService::give_back`]).
    async fn release_with(
        &mut self,
        spec: &LockSpec,
        lease: &Lease,
        keep_for: Duration,
        note: Option<&Note>,
        ack: bool,
    ) -> Result<Release, LockError> {
        let fence = (lease.fence > 0).then_some(lease.fence);
        let request = ReleaseRequest {
            key: &spec.key,
            kind: spec.kind,
            value: &lease.holder.value,
            keep: keep_for,
            completes_tick: note.is_some_and(|n| n.completes_tick),
            history: history_args(spec, &lease.holder, fence, Some(lease.attempt), note),
            publish: self.publish(),
        };
        let (reply, acked) = self
            // Behind Sentinel on the primary named now: "released" means deleted where the
            // key lives, not on a replaced primary that still accepts writes.
            .eval_once(&request.call(), ack, Route::Named)
            .await
            .map_err(EvalError::into_error)?;
        if let Some(e) = acked.err().filter(LockError::is_outage) {
            // (A refusal of WAIT/WAITAOF was reported by the acquire already.)
            // The key is deleted on the primary; if a failover loses that, it only lingers
            // until its TTL (ours, and no job of ours runs): nothing unsafe, but say so.
            tracing::warn!(error = %e, "redis lock release not acknowledged by the replicas");
        }
        match ReleaseReply::decode(reply) {
            Ok(ReleaseReply::Deleted) => Ok(Release::Deleted),
            Ok(ReleaseReply::Kept) => Ok(Release::Kept(keep_for)),
            Ok(ReleaseReply::NotOwner) => Ok(Release::NotOwner),
            Err(odd) => Err(self.unexpected(&odd)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::redis::ConnectOptions;
    use crate::lock::scripts::acquire::Refusal;

    fn new_lock() -> RedisLock {
        let options = ConnectOptions::default();
        RedisLock::new("redis://127.0.0.1:6390", &options, Duration::from_secs(1)).unwrap()
    }

    fn spec() -> LockSpec {
        LockSpec::new("job", Duration::from_secs(10))
    }

    fn lease() -> Lease {
        let mut lease = Lease::phantom(&Holder::new("true".as_ref()));
        lease.sent_at = Instant::now();
        lease.confirmed_at = lease.sent_at + Duration::from_millis(3);
        lease
    }

    #[test]
    fn a_grant_fills_in_the_fence_and_the_server_clock() {
        let reply = AcquireReply::Acquired {
            fence: 42,
            server_us: Some(1_000_000),
            attempt: None,
        };
        let lease = lease();
        let Ok(Acquire::Acquired(got)) = new_lock().acquired(&spec(), lease.clone(), reply) else {
            panic!("not acquired")
        };
        assert_eq!(got.fence, 42);
        assert_eq!(got.readings.len(), 1);
        let r = &got.readings[0];
        assert_eq!((r.source, r.server_us), (0, 1_000_000));
        assert_eq!((r.sent, r.received), (lease.sent_at, lease.confirmed_at));
        // No clock in the reply (or one before 1970): no reading.
        for server_us in [None, Some(-5)] {
            let reply = AcquireReply::Acquired {
                fence: 1,
                server_us,
                attempt: None,
            };
            let Ok(Acquire::Acquired(got)) = new_lock().acquired(&spec(), lease.clone(), reply)
            else {
                panic!("not acquired")
            };
            assert!(got.readings.is_empty());
        }
    }

    #[test]
    fn held_says_by_whom_for_how_long_and_our_place() {
        let reply = AcquireReply::Held {
            pttl: Some(Duration::from_millis(900)),
            holder: Some("x host=h".into()),
            rank: Some(1),
            tick_left: None,
        };
        let got = new_lock().acquired(&spec(), lease(), reply);
        let Ok(Acquire::Held {
            holder, pttl, rank, ..
        }) = got
        else {
            panic!("not held")
        };
        assert_eq!(holder.as_deref(), Some("x host=h"));
        assert_eq!((pttl, rank), (Some(Duration::from_millis(900)), Some(1)));
    }

    #[test]
    fn a_refusal_is_a_misuse_of_this_server() {
        let reply = AcquireReply::Refused(Refusal::Misused {
            kind: "zset".into(),
        });
        let Err(e) = new_lock().acquired(&spec(), lease(), reply) else {
            panic!("not refused")
        };
        assert_eq!(
            e.kind,
            Kind::Misuse(Misuse::IsSemaphore { key: "job".into() })
        );
        assert!(e.is_misuse());
    }
}
