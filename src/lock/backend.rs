//! The lock `app.rs` runs on: one Redis server, or a Redlock quorum of several masters.
//! A plain delegation, so neither the watchdog nor the supervisor learns which one it is.

use super::redis::RedisLock;
use super::redlock::Redlock;
use super::{Acquire, Holder, Lease, LockError, LockService, LockSpec, Note, Release, Renew};
use std::time::Duration;

// One per process, made once and never moved around: its size does not matter.
#[allow(clippy::large_enum_variant)]
pub enum Backend {
    One(RedisLock),
    Quorum(Redlock),
}

/// `on!(self, l => expr)`: `expr` with `l` bound to whichever lock this is.
macro_rules! on {
    ($self:ident, $l:ident => $e:expr) => {
        match $self {
            Backend::One($l) => $e,
            Backend::Quorum($l) => $e,
        }
    };
}

impl LockService for Backend {
    async fn subscribe_wakeups(&mut self, spec: &LockSpec) -> Result<(), LockError> {
        on!(self, l => l.subscribe_wakeups(spec).await)
    }

    async fn acquire(
        &mut self,
        spec: &LockSpec,
        holder: &Holder,
        queue: bool,
    ) -> Result<Acquire, LockError> {
        on!(self, l => l.acquire(spec, holder, queue).await)
    }

    async fn give_back(&mut self, spec: &LockSpec, holder: &Holder) {
        on!(self, l => l.give_back(spec, holder).await)
    }

    async fn renew(&mut self, spec: &LockSpec, lease: &Lease) -> Result<Renew, LockError> {
        on!(self, l => l.renew(spec, lease).await)
    }

    async fn release(
        &mut self,
        spec: &LockSpec,
        lease: &Lease,
        keep_for: Duration,
        note: Option<&Note>,
    ) -> Result<Release, LockError> {
        on!(self, l => l.release(spec, lease, keep_for, note).await)
    }

    async fn is_held_by(&mut self, spec: &LockSpec, token: &str) -> Result<bool, LockError> {
        on!(self, l => l.is_held_by(spec, token).await)
    }

    async fn leave_queue(
        &mut self,
        spec: &LockSpec,
        holder: &Holder,
        note: Option<&Note>,
    ) -> Result<(), LockError> {
        on!(self, l => l.leave_queue(spec, holder, note).await)
    }

    async fn wait_for_turn(&mut self, holder: &Holder, max: Duration) {
        on!(self, l => l.wait_for_turn(holder, max).await)
    }

    fn drift(&self, ttl: Duration) -> Duration {
        on!(self, l => l.drift(ttl))
    }
}
