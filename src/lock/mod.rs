//! The lock protocol behind one seam.
//!
//! Everything the supervisor needs from "a lock" is the [`LockService`] trait: acquire, renew,
//! release, ask whether a token still holds a key, and wait for a release hint. Today one Redis
//! server implements it ([`redis::RedisLock`]); a Redlock quorum, Sentinel or Cluster backend
//! implements the same trait and the supervisor, watchdog and waiting loop do not change.

pub mod redis;
pub mod url;

use std::fmt;
use std::time::Duration;
use tokio::time::Instant;

/// What to ask for: a key, a lease length, and how many holders may share it.
#[derive(Clone, Debug)]
pub struct LockSpec {
    pub key: String,
    pub ttl: Duration,
    /// `None`: an exclusive lock (a string key). `Some(n)`: a semaphore of n slots (a sorted set).
    pub limit: Option<u32>,
}

/// Who we are: the unguessable token plus what an operator reading the key wants to know.
#[derive(Clone, Debug)]
pub struct Holder {
    /// 128 random bits (UUID v4, hex). Ownership is decided by this alone.
    pub token: String,
    /// `<token> host=<h> pid=<p> started=<utc>`: what `redis-cli GET <KEY>` shows.
    pub value: String,
}

/// A lock we hold.
#[derive(Clone, Debug)]
pub struct Lease {
    pub key: String,
    pub holder: Holder,
    /// Strictly increasing per key across all holders (LOCKRUN_FENCE).
    pub fence: u64,
    /// When the acquiring request was sent: the lease cannot have started earlier than this,
    /// so `sent + ttl` is a safe local deadline (monotonic clock).
    pub sent_at: Instant,
    /// When the acquire reply arrived: the lease cannot have started later than this, so
    /// `--min-hold` counted from here keeps the key at least that long.
    pub confirmed_at: Instant,
}

/// The answer to one acquire attempt.
#[derive(Debug)]
pub enum Acquire {
    Acquired(Lease),
    /// Someone else holds it. `holder` is their value (for the log), `pttl` what is left of
    /// their lease, so a waiter never sleeps past it.
    Held {
        holder: Option<String>,
        pttl: Option<Duration>,
        /// Our place in the waiter queue (0: next), when we queued.
        rank: Option<u64>,
    },
}

#[derive(Debug, PartialEq, Eq)]
pub enum Renew {
    Renewed,
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

/// Why a request failed.
#[derive(Debug)]
pub enum LockError {
    /// Could not talk to the server, or it refused us (connect, auth, I/O, timeout). The outcome
    /// of the request is unknown: it may or may not have taken effect.
    Unavailable(String),
    /// The server answered, but the key cannot be used the way we asked (wrong type, mixing a
    /// semaphore and a plain lock, a script error).
    Misuse(String),
}

impl fmt::Display for LockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockError::Unavailable(m) | LockError::Misuse(m) => f.write_str(m),
        }
    }
}

/// The seam between the lock protocol and everything else.
///
/// Implementations must be safe to call again with the same holder after an `Unavailable`
/// error: a retried acquire that finds its own value counts as success, a retried release of an
/// already-deleted key answers `NotOwner` without touching anyone else's lock.
#[allow(async_fn_in_trait)] // Used with static dispatch only; futures never cross threads.
pub trait LockService {
    /// Subscribe to release hints before the first attempt, so that no release between an
    /// attempt and the wait that follows it can be missed. Called before every attempt while
    /// waiting: a no-op while subscribed, a new subscription after the old one died.
    async fn subscribe_wakeups(&mut self, spec: &LockSpec) -> Result<(), LockError>;
    /// One attempt. With `queue`, an attempt that fails leaves (or renews) a place in the
    /// waiter queue: waiters take turns in arrival order and nobody barges past them.
    async fn acquire(
        &mut self,
        spec: &LockSpec,
        holder: &Holder,
        queue: bool,
    ) -> Result<Acquire, LockError>;
    async fn renew(&mut self, spec: &LockSpec, lease: &Lease) -> Result<Renew, LockError>;
    async fn release(
        &mut self,
        spec: &LockSpec,
        lease: &Lease,
        keep_for: Duration,
    ) -> Result<Release, LockError>;
    /// Does `token` hold `spec.key` right now? (Reentrancy: a nested lockrun asks this.)
    async fn is_held_by(&mut self, spec: &LockSpec, token: &str) -> Result<bool, LockError>;
    /// Give up a place in the waiter queue (wait timed out or aborted).
    async fn leave_queue(&mut self, spec: &LockSpec, holder: &Holder) -> Result<(), LockError>;
    /// Resolves when a hint says it is `holder`'s turn, or after `max`, whichever is first. A
    /// hint is only a hint: the caller always re-checks with `acquire`.
    async fn wait_for_turn(&mut self, holder: &Holder, max: Duration);
}
