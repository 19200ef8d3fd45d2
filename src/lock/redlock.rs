//! Redlock: one lock over N ≥ 3 independent Redis masters, held while a majority has it.
//!
//! Each master runs the single-server protocol unchanged ([`RedisLock`], one EVAL per
//! operation); this file only asks all of them at once and counts. The rules (Redis's Redlock
//! algorithm, with lockrun's renewals and fences on top):
//!
//! - **Acquire**: every node at once, each bounded by the node timeout. The lock holds only
//!   with a majority (N/2+1) *and* time left: validity = TTL − elapsed − drift > 0, where
//!   elapsed runs from before the first request to after the last reply (monotonic clock) and
//!   drift = TTL/100 + 2 ms allows for the nodes' clocks running at other rates than ours. The
//!   lease's local deadline is then send time + TTL − drift ([`LockService::drift`]).
//! - **Failure** gives back what was taken on *every* node, also those whose reply was lost: a
//!   request that timed out may still have set the key.
//! - **Renew**: confirmed by a majority, or lost once a majority has become impossible.
//! - **No queue**: a fair queue would need a majority of its own; waiters retry after a jittered
//!   delay instead (no FIFO order under Redlock).

use super::failure::{At, Cause, Kind, NoMajority};
use super::redis::RedisLock;
use super::{
    Acquire, Holder, Lease, LockError, LockService, LockSpec, Note, Reading, Release, Renew,
};
use futures_util::future::join_all;
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

/// A waiter's retry delay while the lock is held elsewhere: random within [RETRY/2, RETRY],
/// so contenders that failed together do not retry together and split the votes again.
const RETRY: Duration = Duration::from_millis(200);

/// Refuses masters that are one server spelled twice (`redis://h:6379`, `redis://h:6379/0`,
/// `redis://localhost:6379/1`): a majority made of one server's votes protects nothing. The
/// message names the positions and the server (host and port carry no secret).
pub fn distinct(nodes: &[RedisLock]) -> Result<(), String> {
    let mut seen: Vec<(usize, String)> = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        for server in node.servers() {
            // Within one URL a repeated seed is harmless (sentinels are checked where parsed).
            if let Some((j, _)) = seen.iter().find(|(j, s)| *j != i && *s == server) {
                return Err(format!(
                    "masters {} and {} are the same server ({server}): Redlock needs \
                     independent masters",
                    j + 1,
                    i + 1
                ));
            }
            seen.push((i, server));
        }
    }
    Ok(())
}

pub struct Redlock {
    nodes: Vec<RedisLock>,
    /// Bound on each node's reply; well below TTL/3, so a dead node costs little of the lease.
    node_timeout: Duration,
    /// Nodes already named in a warning while the majority carried on: each is named once.
    warned: Vec<bool>,
    /// The last attempt found no majority because nodes failed, not because of a holder: then
    /// the waiting loop's next try waits the caller's full pace, not the short retry delay.
    outage: bool,
    /// An acquire was abandoned before it settled (granted, or given back): see
    /// [`LockService::give_back`].
    unsettled: bool,
}

/// How the nodes answered one request.
struct Tally<T> {
    ok: Vec<T>,
    /// Failures, by node index: unknown outcomes, refusals, misuse.
    failed: Vec<(usize, LockError)>,
}

impl<T> Tally<T> {
    fn first_misuse(&mut self) -> Option<LockError> {
        let i = self.failed.iter().position(|(_, e)| e.is_misuse())?;
        Some(self.failed.swap_remove(i).1)
    }

    /// The failure to report when the majority was not reached: a local limit or a refusal
    /// first (they say what to fix and must not be retried), else the first unknown outcome.
    fn worst(&self) -> Option<&LockError> {
        self.failed
            .iter()
            .map(|(_, e)| e)
            .find(|e| e.is_local())
            .or_else(|| self.failed.iter().map(|(_, e)| e).find(|e| e.is_refusal()))
            .or_else(|| self.failed.first().map(|(_, e)| e))
    }
}

/// Runs `op` on every node at once, each bounded by `limit`; `None`: no reply in time.
async fn on_all<'a, T, Fut>(
    nodes: &'a mut [RedisLock],
    limit: Duration,
    op: impl FnMut(&'a mut RedisLock) -> Fut,
) -> Vec<Option<Result<T, LockError>>>
where
    Fut: Future<Output = Result<T, LockError>>,
{
    let bounded = nodes
        .iter_mut()
        .map(op)
        .map(|f| tokio::time::timeout(limit, f));
    join_all(bounded)
        .await
        .into_iter()
        .map(Result::ok)
        .collect()
}

/// `all!(self, n => n.renew(…))`: the request on every node at once, settled ([`Redlock::settle`]).
macro_rules! all {
    ($self:ident, $n:ident => $e:expr) => {{
        let replies = on_all(&mut $self.nodes, $self.node_timeout, |$n| $e).await;
        $self.settle(replies)
    }};
}

impl Redlock {
    /// `nodes`: 3 or more independent masters (`cli` refuses 2: no majority survives a failure).
    pub fn new(nodes: Vec<RedisLock>, node_timeout: Duration) -> Redlock {
        assert!(nodes.len() >= 3, "Redlock needs at least 3 nodes");
        let warned = vec![false; nodes.len()];
        Redlock {
            nodes,
            node_timeout,
            warned,
            outage: false,
            unsettled: false,
        }
    }

    fn quorum(&self) -> usize {
        super::quorum(self.nodes.len())
    }

    /// Counts a node whose reply did not come within the node timeout ([`on_all`]) as
    /// unavailable, and disconnects it: its socket may be half-dead.
    fn settle<T>(
        &mut self,
        replies: Vec<Option<Result<T, LockError>>>,
    ) -> Vec<Result<T, LockError>> {
        let limit = self.node_timeout;
        replies
            .into_iter()
            .zip(self.nodes.iter_mut())
            .map(|(reply, node)| {
                reply.unwrap_or_else(|| {
                    node.disconnect();
                    Err(LockError::on(
                        node.shown(),
                        Kind::Unavailable(Cause::NodeTimeout(limit)),
                    ))
                })
            })
            .collect()
    }

    fn tally<T>(replies: Vec<Result<T, LockError>>) -> Tally<T> {
        let mut t = Tally {
            ok: Vec::new(),
            failed: Vec::new(),
        };
        for (i, r) in replies.into_iter().enumerate() {
            match r {
                Ok(v) => t.ok.push(v),
                Err(e) => t.failed.push((i, e)),
            }
        }
        t
    }

    /// While a majority carries on, a failing node is named once, not on every renewal: a
    /// refusal (wrong password, ACL) needs fixing even though the lock works without it.
    fn warn_once(&mut self, failed: &[(usize, LockError)]) {
        for (i, e) in failed {
            if !std::mem::replace(&mut self.warned[*i], true) {
                tracing::warn!(error = %e, "a Redis master failed; the lock holds on the majority");
            }
        }
    }

    /// A conflict that a minority reported, the majority failing (a lockrun cut off from most
    /// masters): each failing node is named once, without claiming a majority that nobody saw.
    fn warn_once_no_majority(&mut self, failed: &[(usize, LockError)]) {
        for (i, e) in failed {
            if !std::mem::replace(&mut self.warned[*i], true) {
                tracing::warn!(
                    error = %e,
                    "a Redis master failed; no majority answered, and those that did say the lock is held"
                );
            }
        }
    }

    /// Token-checked give-back of `holder`'s value on every node that may have it: all but
    /// those that answered "held by someone else" (`held`, by node), which set nothing of ours.
    /// All at once, each bounded by the node timeout: one node timeout more when a node did not
    /// answer the acquire (the give-back is most needed there, the request may have run).
    /// Answers are ignored: a node without our value says "not owner", one that is down keeps
    /// it until its TTL. Without waiting for replicas (see [`LockService::give_back`]).
    async fn give_back_where(&mut self, spec: &LockSpec, holder: &Holder, held: &[bool]) {
        let limit = self.node_timeout;
        let releases = self
            .nodes
            .iter_mut()
            .zip(held)
            .filter(|(_, held)| !**held)
            .map(|(node, _)| async move {
                // Marked unsettled first: the node's own give-back then runs whatever its last
                // acquire's reply said.
                node.abandoned();
                if tokio::time::timeout(limit, node.give_back(spec, holder))
                    .await
                    .is_err()
                {
                    node.disconnect();
                }
            });
        join_all(releases).await;
        self.unsettled = false;
    }

    /// No majority did `what` (`got` did), `worst` speaking for the failures; `as_worst`: the
    /// error counts as that failure does (see [`NoMajority::as_worst`]).
    fn no_majority(
        &self,
        what: &'static str,
        got: usize,
        worst: Option<&LockError>,
        as_worst: bool,
    ) -> LockError {
        let verdict = NoMajority {
            what,
            masters: self.nodes.len(),
            got,
            needed: self.quorum(),
            worst: worst.cloned(),
            as_worst,
        };
        LockError::new(Kind::NoMajority(Box::new(verdict)), At::Nowhere)
    }
}

/// Each master's readings of its clock (by position, in order), as readings of clock <position>:
/// the masters' clocks are independent, and each is compared only with itself.
fn renumbered<'a>(per_node: impl Iterator<Item = &'a [Reading]>) -> Vec<Reading> {
    per_node
        .enumerate()
        .flat_map(|(i, readings)| readings.iter().map(move |r| Reading { source: i, ..*r }))
        .collect()
}

impl LockService for Redlock {
    /// No wake-up hints: a hint from one node means nothing for the majority.
    async fn subscribe_wakeups(&mut self, _: &LockSpec) -> Result<(), LockError> {
        Ok(())
    }

    async fn acquire(
        &mut self,
        spec: &LockSpec,
        holder: &Holder,
        _queue: bool,
    ) -> Result<Acquire, LockError> {
        let sent_at = Instant::now();
        self.unsettled = true;
        // Nodes never queue: a place in one node's queue would block others' majorities.
        let replies = all!(self, n => n.acquire(spec, holder, false));
        let confirmed_at = Instant::now();
        // Which nodes answered that someone else holds it: nothing of ours to give back there.
        let held_by_other: Vec<bool> = replies
            .iter()
            .map(|r| matches!(r, Ok(Acquire::Held { .. })))
            .collect();
        let readings = renumbered(replies.iter().map(|r| match r {
            Ok(Acquire::Acquired(lease)) => lease.readings.as_slice(),
            _ => &[],
        }));
        let mut t = Self::tally(replies);
        let mut fences = Vec::new();
        let mut held = None;
        for a in t.ok.drain(..) {
            match a {
                Acquire::Acquired(lease) => fences.push(lease.fence),
                Acquire::Held { holder, pttl, .. } => {
                    held.get_or_insert((holder, pttl));
                }
                // `--standby` is refused with several masters (`plan::resolve`): no tick is
                // asked for here, and no master answers one.
                Acquire::Passed { .. } | Acquire::TickEnded { .. } => {}
            }
        }
        let elapsed = confirmed_at - sent_at;
        let validity = spec
            .ttl
            .checked_sub(elapsed)
            .and_then(|v| v.checked_sub(self.drift(spec.ttl)))
            .filter(|v| !v.is_zero());
        let misuse = t.first_misuse();
        if let (None, Some(&fence), Some(_)) = (&misuse, fences.iter().max(), validity) {
            if fences.len() >= self.quorum() {
                self.warn_once(&t.failed);
                self.outage = false;
                self.unsettled = false;
                return Ok(Acquire::Acquired(Lease {
                    holder: holder.clone(),
                    // Any two majorities share a node, whose counter grew between their
                    // holders: the maximum is above every fence an earlier majority handed out
                    // on that node (docs/availability.md: Several masters).
                    fence,
                    sent_at,
                    confirmed_at,
                    readings,
                    attempt: 1,
                }));
            }
        }
        self.give_back_where(spec, holder, &held_by_other).await;
        if let Some(e) = misuse {
            return Err(e);
        }
        let granted = fences.len();
        if granted >= self.quorum() {
            self.outage = true;
            let slow = Cause::SlowGrant {
                took: elapsed,
                ttl: spec.ttl,
                drift: self.drift(spec.ttl),
            };
            return Err(LockError::new(Kind::Unavailable(slow), At::Nowhere));
        }
        let refused = t.failed.iter().any(|(_, e)| e.is_refusal());
        let others = held_by_other.iter().filter(|h| **h).count();
        // A conflict only when it is one for sure, or when no refusal could have made the
        // difference: a refusal is a configuration mistake, and hiding it behind "held
        // elsewhere" (silent with -q -E 0) would leave that master broken unnoticed.
        if let Some((holder, pttl)) = held.filter(|_| !refused || others >= self.quorum()) {
            if self.nodes.len() - t.failed.len() >= self.quorum() {
                self.warn_once(&t.failed);
            } else {
                self.warn_once_no_majority(&t.failed);
            }
            self.outage = false;
            return Ok(Acquire::Held {
                holder,
                pttl,
                rank: None,
                tick_left: None,
            });
        }
        self.outage = true;
        // A refusal or a local limit behind it is what to fix, not an outage to wait out.
        Err(self.no_majority("granted the lock", granted, t.worst(), true))
    }

    /// Nothing to do after a failed acquire: it gave back on every node before it returned.
    /// After one abandoned mid-way (a stop signal), on every node.
    async fn give_back(&mut self, spec: &LockSpec, holder: &Holder) {
        if self.unsettled {
            let everywhere = vec![false; self.nodes.len()];
            self.give_back_where(spec, holder, &everywhere).await;
        }
    }

    async fn renew(&mut self, spec: &LockSpec, lease: &Lease) -> Result<Renew, LockError> {
        let replies = all!(self, n => n.renew(spec, lease));
        let readings = renumbered(replies.iter().map(|r| match r {
            Ok(Renew::Renewed(readings)) => readings.as_slice(),
            _ => &[],
        }));
        let t = Self::tally(replies);
        let renewed =
            t.ok.iter()
                .filter(|r| matches!(r, Renew::Renewed(_)))
                .count();
        let not_owner = t.ok.len() - renewed;
        if renewed >= self.quorum() {
            self.warn_once(&t.failed);
            return Ok(Renew::Renewed(readings));
        }
        // More "not owner" answers than nodes that may fail: no majority can have it any more.
        if not_owner > self.nodes.len() - self.quorum() {
            return Ok(Renew::NotOwner);
        }
        Err(self.no_majority("confirmed the renewal", renewed, t.worst(), false))
    }

    async fn release(
        &mut self,
        spec: &LockSpec,
        lease: &Lease,
        keep_for: Duration,
        note: Option<&Note>,
    ) -> Result<Release, LockError> {
        let replies = all!(self, n => n.release(spec, lease, keep_for, note));
        let t = Self::tally(replies);
        // Any node that deleted (or kept) our value proves we held it; the rest expire by TTL.
        if let Some(kept) = t.ok.iter().find(|r| matches!(r, Release::Kept(_))) {
            return Ok(match kept {
                Release::Kept(d) => Release::Kept(*d),
                _ => unreachable!(),
            });
        }
        if t.ok.contains(&Release::Deleted) {
            return Ok(Release::Deleted);
        }
        match t.worst() {
            None => Ok(Release::NotOwner),
            Some(_) => Err(self.no_majority("released the lock", 0, t.worst(), false)),
        }
    }

    /// Reentrancy is granted only as the lock is: when a majority says the token holds it.
    async fn is_held_by(&mut self, spec: &LockSpec, token: &str) -> Result<bool, LockError> {
        let replies = all!(self, n => n.is_held_by(spec, token));
        let t = Self::tally(replies);
        let yes = t.ok.iter().filter(|h| **h).count();
        let no = t.ok.len() - yes;
        if yes >= self.quorum() {
            return Ok(true);
        }
        if no > self.nodes.len() - self.quorum() {
            return Ok(false);
        }
        Err(self.no_majority(
            "answered whether this job holds the lock",
            yes,
            t.worst(),
            false,
        ))
    }

    /// No queue to leave; the history entry goes to every node, as a release's does.
    async fn leave_queue(
        &mut self,
        spec: &LockSpec,
        holder: &Holder,
        note: Option<&Note>,
    ) -> Result<(), LockError> {
        if note.is_some() && spec.history > 0 {
            let _ = all!(self, n => n.leave_queue(spec, holder, note));
        }
        Ok(())
    }

    /// No hints to wait for: sleep a random delay, short while someone holds the lock, the
    /// caller's whole pace (`max`) while nodes are failing.
    async fn wait_for_turn(&mut self, _: &Holder, max: Duration) {
        let cap = if self.outage { max } else { max.min(RETRY) };
        tokio::time::sleep(cap / 2 + super::jitter(cap / 2)).await;
    }

    /// Redlock's clock drift allowance: 1 % of the TTL plus 2 ms.
    fn drift(&self, ttl: Duration) -> Duration {
        ttl / 100 + Duration::from_millis(2)
    }
}
