//! The lock protocol behind one seam.
//!
//! Everything the supervisor needs from "a lock" is the [`LockService`] trait: acquire, renew,
//! release, ask whether a token still holds a key, and wait for a release hint. One Redis
//! server implements it ([`redis::RedisLock`]), and so does a Redlock quorum of several masters
//! built from those ([`redlock::Redlock`]); [`backend::Backend`] is whichever was asked for.
//! The supervisor, watchdog and waiting loop do not know which.

pub mod backend;
pub mod connect;
pub mod endpoint;
pub mod failure;
pub mod holder;
pub mod inspect;
pub mod keys;
pub mod probe;
pub mod redis;
pub mod redis_errors;
pub mod redlock;
pub mod scripts;
pub mod url;

pub use crate::clock_rate::Reading;
pub use failure::LockError;
pub use holder::{describe_holder, holder_started, public_id, Holder};
use std::time::Duration;
use tokio::time::Instant;

/// Up to `max` of randomness, from the clock's low bits: good enough to spread waiters apart.
pub fn jitter(max: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0)
        ^ std::process::id().wrapping_mul(2_654_435_761);
    let max = max.as_micros().max(1) as u64;
    Duration::from_micros(u64::from(nanos) % max)
}

/// How many of `n` voters make a majority (1 of 1, 2 of 3, 3 of 5): the Redlock masters that
/// must agree on a lock, the sentinels that must name one primary.
pub fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// What to ask for: a key, a lease length, and what kind of lock it is.
#[derive(Clone, Debug)]
pub struct LockSpec {
    pub key: String,
    pub ttl: Duration,
    pub kind: LockKind,
    /// How many runs the key's history keeps (about; see [`Note`]); 0: none recorded.
    pub history: u32,
    /// The job's schedule period (`--every`), recorded with each run's history entry.
    pub every: Option<Duration>,
}

impl LockSpec {
    /// An exclusive lock on `key` with leases of `ttl`, no history kept, no schedule.
    pub fn new(key: impl Into<String>, ttl: Duration) -> LockSpec {
        LockSpec {
            key: key.into(),
            ttl,
            kind: LockKind::Exclusive,
            history: 0,
            every: None,
        }
    }
}

/// What kind of lock a key is: who may hold it beside whom. Parsed once from the options
/// (`plan::kind`); each script request (`scripts/`) chooses its script, `KEYS` and `ARGV` by
/// it, so a new kind is one variant here and its scripts there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockKind {
    /// One holder at a time: a string key whose value names it.
    Exclusive,
    /// `--shared`: held alongside other shared holders, never with an exclusive one; the
    /// holders are a sorted set beside the key (see acquire/shared.lua).
    Shared,
    /// `--limit N`: up to N holders at once, the slots of a sorted set.
    Semaphore(u32),
    /// `--standby`: exclusive, for one tick of `length` (`--every`'s hold). Every attempt is
    /// for the tick under way: up to `standbys` attempts wait for it to complete, and take it
    /// over when its holder cannot; later ones end their run skipped at once.
    Tick { length: Duration, standbys: u32 },
}

/// How many hosts stand by for a tick without `--standbys`: a tick then survives the loss of
/// the host that took it and of one standby, and costs two hosts' waiting, whatever the fleet.
pub const DEFAULT_STANDBYS: u32 = 2;

impl LockKind {
    /// The tick's length, for a [`LockKind::Tick`].
    pub fn tick(self) -> Option<Duration> {
        match self {
            LockKind::Tick { length, .. } => Some(length),
            LockKind::Exclusive | LockKind::Shared | LockKind::Semaphore(_) => None,
        }
    }
}

/// How a run ended, as its entry in the key's history says (`lockrun history`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The command ran under the lock and exited (any exit code, or killed by a signal that
    /// did not come through lockrun).
    Ran,
    /// Not run: the lock was held elsewhere (at once, or until `--wait` ran out).
    Skipped,
    /// The lock was lost while the command ran.
    Lost,
    /// lockrun was told to stop (SIGTERM, SIGINT, SIGHUP, SIGQUIT) while waiting or running.
    Aborted,
    /// The command ran past `--time-limit` and lockrun stopped it.
    Timeout,
    /// Acquired, but the command could not be started (not found, not executable, too late).
    Error,
    /// An operator deleted the lock (`lockrun release --force`).
    Released,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ran => "ran",
            Outcome::Skipped => "skipped",
            Outcome::Lost => "lost",
            Outcome::Aborted => "aborted",
            Outcome::Timeout => "timeout",
            Outcome::Error => "error",
            Outcome::Released => "released",
        }
    }

    /// Whether a run that ended so, and whose release then finds its key gone or another
    /// holder's, is `lost` instead: its job ran to that end, for a while without the lock.
    /// `note` in lib/prelude.lua rewrites the history entry by the same rule.
    pub fn lost_if_key_gone(self) -> bool {
        matches!(self, Outcome::Ran | Outcome::Timeout)
    }
}

/// One entry of a key's run history. Written by the script that ends the run anyway (release,
/// leave the queue, or the acquire that finds the lock held), so history costs no round trip.
#[derive(Clone, Debug)]
pub struct Note {
    pub outcome: Outcome,
    /// lockrun's exit code for the run, when it is known at that point.
    pub exit_code: Option<i32>,
    /// From lockrun's start (waiting included) to the end of the run.
    pub duration: Duration,
    /// With `--standby`: the run completed its tick (see [`crate::ending::Ending::completes_tick`]);
    /// a release without it hands the tick on.
    pub completes_tick: bool,
    /// With `--standby`: the run opened its tick again, the server having lost the tick's
    /// record while this host stood by for it (a restart, a failover).
    pub reopened: bool,
}

/// A lock we hold.
#[derive(Clone, Debug)]
pub struct Lease {
    pub holder: Holder,
    /// Strictly increasing per key across all holders (LOCKRUN_FENCE).
    pub fence: u64,
    /// When the acquiring request was sent: the lease cannot have started earlier than this,
    /// so `sent + ttl` is a safe local deadline (monotonic clock).
    pub sent_at: Instant,
    /// When the acquire reply arrived: the lease cannot have started later than this, so
    /// `--min-hold` counted from here keeps the key at least that long.
    pub confirmed_at: Instant,
    /// The server's clock as the acquire read it (one per Redlock master that granted it), for
    /// the watchdog's measure of our clock's rate ([`crate::clock_rate`]).
    pub readings: Vec<Reading>,
    /// With `--standby`: which attempt at the tick this lease is (1: the tick's first; more: it
    /// took the tick over from an attempt that did not complete it). 1 otherwise.
    pub attempt: u32,
}

impl Lease {
    /// A lease for `holder` whose acquire reply we never saw (or could not count), for a
    /// token-checked give-back: the release scripts read only the key and the holder's value.
    pub(crate) fn phantom(holder: &Holder) -> Lease {
        let now = Instant::now();
        Lease {
            holder: holder.clone(),
            fence: 0,
            sent_at: now,
            confirmed_at: now,
            readings: Vec::new(),
            attempt: 1,
        }
    }
}

/// The answer to one acquire attempt.
#[derive(Debug)]
pub enum Acquire {
    Acquired(Lease),
    /// Someone else holds it. `holder` is their value (log it through [`describe_holder`]),
    /// `pttl` what is left of their lease, so a waiter never sleeps past it.
    Held {
        holder: Option<String>,
        pttl: Option<Duration>,
        /// Our place in the waiter queue (0: next), when we queued.
        rank: Option<u64>,
        /// With `--standby`: this attempt stands by for the tick under way, which ends this
        /// much later. `None`: not this attempt's to stand by for (held by a run of an earlier
        /// tick), or not a tick at all.
        tick_left: Option<Duration>,
    },
    /// With `--standby`: held, and this attempt not needed (the tick has all the standbys it
    /// asks for, or a run of an earlier tick holds the lock). The run ends, skipped; the
    /// attempt recorded that in the history, and queued nothing.
    Passed {
        holder: Option<String>,
        pttl: Option<Duration>,
    },
    /// With `--standby`: the tick completed elsewhere (`completed`), or the tick this attempt
    /// stood by for is over. The run ends, skipped.
    TickEnded {
        completed: bool,
    },
}

#[derive(Debug, PartialEq, Eq)]
pub enum Renew {
    /// With the server's clock as the renewal read it (one per Redlock master that confirmed).
    Renewed(Vec<Reading>),
    /// The key is gone or names another holder: the lock is lost, now.
    NotOwner,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Release {
    Deleted,
    /// `--min-hold`: the key stays and expires after this long.
    Kept(Duration),
    /// The key was no longer ours; nothing was touched.
    NotOwner,
}

/// The seam between the lock protocol and everything else.
///
/// Implementations must be safe to call again with the same holder after an outage
/// ([`LockError::is_outage`]): a retried acquire that finds its own value counts as success, a
/// retried release of an already-deleted key answers `NotOwner` without touching anyone else's
/// lock.
#[allow(async_fn_in_trait)] // Used with static dispatch only; futures never cross threads.
pub trait LockService {
    /// Subscribe to release hints before the first attempt, so that no release between an
    /// attempt and the wait that follows it can be missed. Called before every attempt while
    /// waiting: a no-op while subscribed, a new subscription after the old one died.
    async fn subscribe_wakeups(&mut self, spec: &LockSpec) -> Result<(), LockError>;
    /// One attempt. With `queue`, an attempt that fails leaves (or renews) a place in the
    /// waiter queue: waiters take turns in arrival order and nobody barges past them. Without
    /// `queue`, an attempt that finds the lock held is the run's end: the script records a
    /// `skipped` entry in the key's history (when `spec.history` > 0).
    async fn acquire(
        &mut self,
        spec: &LockSpec,
        holder: &Holder,
        queue: bool,
    ) -> Result<Acquire, LockError>;
    /// After an attempt that failed (`Err`, not retried) or was abandoned (a stop signal while
    /// it waited for its reply): removes, token-checked, whatever that attempt may have taken.
    /// Once: an attempt that already gave back what it knew it took (a majority not reached,
    /// replicas that did not acknowledge) leaves nothing to do. Without waiting for replicas
    /// (a give-back that misses them leaves a key of ours that expires by its TTL, and no job
    /// of ours runs) and without a history entry. Best effort: the caller bounds it.
    async fn give_back(&mut self, spec: &LockSpec, holder: &Holder);
    async fn renew(&mut self, spec: &LockSpec, lease: &Lease) -> Result<Renew, LockError>;
    /// `note`: the run's history entry, written by the same script (also when the key is no
    /// longer ours: a lost lock is history too).
    async fn release(
        &mut self,
        spec: &LockSpec,
        lease: &Lease,
        keep_for: Duration,
        note: Option<&Note>,
    ) -> Result<Release, LockError>;
    /// Does the holder whose secret is `token` hold `spec.key` right now? (Reentrancy: a nested
    /// lockrun asks this.) A public id in place of the token must not pass, and the token must
    /// not be sent anywhere other clients can read it (compare [`public_id`] of it instead).
    async fn is_held_by(&mut self, spec: &LockSpec, token: &str) -> Result<bool, LockError>;
    /// Give up a place in the waiter queue (wait timed out or aborted); `note` is the run's
    /// history entry.
    async fn leave_queue(
        &mut self,
        spec: &LockSpec,
        holder: &Holder,
        note: Option<&Note>,
    ) -> Result<(), LockError>;
    /// Resolves when a hint says it is `holder`'s turn, or after `max`, whichever is first. A
    /// hint is only a hint: the caller always re-checks with `acquire`.
    async fn wait_for_turn(&mut self, holder: &Holder, max: Duration);
    /// How much shorter than the TTL a confirmed lease must be counted, for the rate at which
    /// the servers' clocks may drift from ours. One server: none (the watchdog's margin
    /// already covers it); a quorum: Redlock's allowance, so the caller's deadline (see
    /// `watchdog::Deadline`) never needs to know what sits behind this trait.
    fn drift(&self, ttl: Duration) -> Duration {
        let _ = ttl;
        Duration::ZERO
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quorum_is_more_than_half() {
        let quorums: Vec<usize> = (1..=6).map(quorum).collect();
        assert_eq!(quorums, [1, 2, 2, 3, 3, 4]);
    }
}
