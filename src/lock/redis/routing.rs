//! Behind Sentinel, which primary a lock script goes to: the connection, asking the sentinels
//! again before a script, following a failover, and watching for one while a reply is late.
//!
//! Separate from the lock protocol, and written against [`Primaries`] (what routing asks of
//! the connector) rather than [`Connector`] itself, so that it is unit-tested against a fake
//! connector: the tests below. `RedisLock` holds a `Router<Connector>` (static dispatch).

use super::{link::Link, RedisLock};
use crate::lock::connect::{Conn, Connector, Fail, Primary, Wake};
use crate::lock::LockError;
use std::future::Future;
use std::time::Duration;

/// What routing asks of the connector: the seam between the routing and the connections.
/// [`Connector`] is the real one (each method is its own, described there).
pub(super) trait Primaries {
    /// One connection for lock requests.
    type Conn: Clone;
    /// A subscription to release hints.
    type Wake;
    /// See [`Connector::watch_every`].
    fn watch_every(&self) -> Option<Duration>;
    /// See [`Connector::named_primary`].
    fn named_primary(&self) -> impl Future<Output = Result<Option<Primary>, Fail>>;
    /// See [`Connector::connect`].
    fn connect(&self) -> impl Future<Output = Result<(Self::Conn, Option<Primary>), Fail>>;
    /// See [`Connector::connect_to`].
    fn connect_to(
        &self,
        primary: Option<&Primary>,
    ) -> impl Future<Output = Result<Self::Conn, Fail>>;
}

impl Primaries for Connector {
    type Conn = Conn;
    type Wake = Wake;

    fn watch_every(&self) -> Option<Duration> {
        Connector::watch_every(self)
    }

    fn named_primary(&self) -> impl Future<Output = Result<Option<Primary>, Fail>> {
        Connector::named_primary(self)
    }

    fn connect(&self) -> impl Future<Output = Result<(Conn, Option<Primary>), Fail>> {
        Connector::connect(self)
    }

    fn connect_to(&self, primary: Option<&Primary>) -> impl Future<Output = Result<Conn, Fail>> {
        Connector::connect_to(self, primary)
    }
}

/// The connection for lock requests and the subscription to release hints, and the primary
/// they go to: what changes when the sentinels name another primary.
pub(super) struct Router<K: Primaries> {
    pub(super) connector: K,
    /// The connection, and where it goes (see [`Link`]).
    pub(super) link: Link<K::Conn>,
    /// The subscription to release hints (made by `subscribe_wakeups` beside the connection);
    /// dropped on moving to another primary, so that the next one is made there.
    pub(super) wake: Option<K::Wake>,
    /// Bounds connecting and asking the sentinels: the request timeout.
    timeout: Duration,
}

/// Why routing gave no connection: the connector's failure, or nothing within the timeout
/// (what did not come).
pub(super) enum Unrouted {
    Failed(Fail),
    TimedOut(&'static str),
}

impl<K: Primaries> Router<K> {
    pub(super) fn new(connector: K, timeout: Duration) -> Router<K> {
        Router {
            connector,
            link: Link::Disconnected,
            wake: None,
            timeout,
        }
    }

    /// The connection, made now if there is none (behind Sentinel, to the primary a majority
    /// of them names: see [`Self::lock_connection`]).
    pub(super) async fn connection(&mut self) -> Result<K::Conn, Unrouted> {
        if let Some(c) = self.link.conn() {
            return Ok(c.clone());
        }
        // The outer timeout also covers DNS, AUTH and asking the sentinels.
        let (conn, primary) =
            match tokio::time::timeout(self.timeout, self.connector.connect()).await {
                Ok(Ok(connected)) => connected,
                Ok(Err(fail)) => return Err(Unrouted::Failed(fail)),
                Err(_) => return Err(Unrouted::TimedOut("no connection")),
            };
        self.link = Link::connected(conn.clone(), primary);
        Ok(conn)
    }

    /// The connection for one script of `route`. Behind Sentinel, a lock script goes to the
    /// primary that the sentinels' majority names for it: the answer that chose a new
    /// connection serves that connection's first script; every later one asks them again
    /// first (one question to all of them at once), and moves to the primary they name if it
    /// is another one. Acquire, renew and release alike: a waiting lockrun follows a failover
    /// with its next attempt, and a release deletes the key where it now lives (not on a
    /// replaced primary that still accepts writes, reporting "released" for a key the new
    /// primary keeps). Without a majority every lock script is unavailable, as a new
    /// connection would be: a renewal too (see [`Route::Named`]).
    pub(super) async fn lock_connection(&mut self, route: Route) -> Result<K::Conn, Unrouted> {
        if self.link.must_ask(route) {
            let named = tokio::time::timeout(self.timeout, self.connector.named_primary()).await;
            match named {
                Ok(Ok(Some(now))) if self.link.elsewhere(&now) => {
                    self.move_to(now).await?;
                }
                Ok(Ok(_)) => {}
                Ok(Err(fail)) => return Err(Unrouted::Failed(fail)),
                Err(_) => return Err(Unrouted::TimedOut("no answer from the sentinels")),
            }
        }
        let conn = self.connection().await?;
        self.link.serve();
        Ok(conn)
    }

    /// Behind Sentinel: the sentinels name `primary` now. Connects there (the subscription to
    /// release hints follows at the next `subscribe_wakeups`); the next script goes there
    /// without asking again.
    pub(super) async fn move_to(&mut self, primary: Primary) -> Result<(), Unrouted> {
        tracing::info!(primary = %format!("{}:{}", primary.0, primary.1),
            "the sentinels name a new primary; moving there");
        self.link.forget();
        self.wake = None;
        let connecting = self.connector.connect_to(Some(&primary));
        let conn = match tokio::time::timeout(self.timeout, connecting).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(fail)) => return Err(Unrouted::Failed(fail)),
            Err(_) => return Err(Unrouted::TimedOut("no connection")),
        };
        self.link = Link::connected(conn, Some(primary));
        Ok(())
    }

    /// Behind Sentinel, `request` (one script on the primary `conn` goes to), with the
    /// sentinels asked again every [`Connector::watch_every`] while it has no reply: `Err`
    /// with the primary they name as soon as a majority names another one. The request is
    /// then abandoned (its server no longer counts) and sent there instead. Without this a
    /// renewal sent to a primary that froze waited out the whole request timeout before
    /// asking, and its job was stopped although its key survived on the promoted replica.
    pub(super) async fn watched<T>(&self, request: impl Future<Output = T>) -> Result<T, Primary> {
        let (Some(every), Some(at)) = (self.connector.watch_every(), self.link.primary()) else {
            return Ok(request.await);
        };
        let watch = async {
            loop {
                tokio::time::sleep(every).await;
                if let Ok(Some(now)) = self.connector.named_primary().await {
                    if now != *at {
                        return now;
                    }
                }
            }
        };
        tokio::select! {
            biased;
            reply = request => Ok(reply),
            now = watch => Err(now),
        }
    }
}

/// The routing's failures in `RedisLock`'s words.
impl RedisLock {
    /// [`Router::connection`].
    pub(super) async fn connection(&mut self) -> Result<Conn, LockError> {
        let routed = self.router.connection().await;
        routed.map_err(|e| self.unrouted(e))
    }

    /// [`Router::lock_connection`].
    pub(super) async fn lock_connection(&mut self, route: Route) -> Result<Conn, LockError> {
        let routed = self.router.lock_connection(route).await;
        routed.map_err(|e| self.unrouted(e))
    }

    /// [`Router::move_to`].
    pub(super) async fn move_to(&mut self, primary: Primary) -> Result<(), LockError> {
        let moved = self.router.move_to(primary).await;
        moved.map_err(|e| self.unrouted(e))
    }

    fn unrouted(&self, e: Unrouted) -> LockError {
        match e {
            Unrouted::Failed(fail) => self.failed_connect(fail),
            Unrouted::TimedOut(missing) => self.timed_out(missing),
        }
    }
}

/// Behind Sentinel, which primary a script must go to (elsewhere all alike).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Route {
    /// The operators' commands: the connection's primary, as it was named when connecting
    /// (one process, a few reads).
    AsConnected,
    /// The lock's scripts: the primary the sentinels' majority names for this one; without a
    /// majority, unavailable (retried by the waiting loop, by the release, and by the
    /// watchdog until the lease's deadline).
    ///
    /// Renewals too. A renewal that only the primary it is connected to confirms, while no
    /// majority of the sentinels names that primary, proves nothing about the lease: that
    /// primary may be the old one, cut off on the minority side of a partition with this
    /// lockrun and one sentinel, while the majority has promoted a replica on which the key
    /// expires by its last replicated renewal and a waiter acquires. Counted, such renewals
    /// would keep the job running for as long as the partition lasts. So the
    /// deadline moves only for a renewal confirmed by the primary a majority named just before
    /// it was sent, and without a majority the renewal is not sent at all: it could not move
    /// the deadline, its token check on that primary could only say what the primary the
    /// majority follows may no longer hold, and a key it extended there would only outlive the
    /// job the watchdog is about to stop (the release cannot reach it without a majority
    /// either). The watchdog asks again until the deadline; the job is stopped before it ends
    /// unless a majority answers by then.
    Named,
}
