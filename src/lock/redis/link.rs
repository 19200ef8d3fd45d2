//! What the client knows about its connection, as one value: none, one to a server or a
//! Cluster, or one to the primary the sentinels' majority named (and whether that answer has
//! served a script yet), and which primary a script must go to ([`Route`]), the one thing that
//! decides whether the connection must be checked with the sentinels first. Generic over the
//! connection so that its transitions are tested without one.

use crate::lock::connect::Primary;

/// The connection of a `RedisLock` and what is known about where it goes.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Link<C> {
    /// No connection: none yet, or dropped after a failure whose outcome is unknown, so that
    /// the next request opens a new one instead of queueing behind a half-dead socket (and,
    /// behind Sentinel, asks for the primary anew).
    Disconnected,
    /// To the one server, or to a Cluster: nothing to ask before a script.
    Direct(C),
    /// Behind Sentinel, to `primary`, which a majority of the sentinels named when this
    /// connection was made: on connecting, or on moving there after they named another one.
    Named {
        conn: C,
        primary: Primary,
        naming: Naming,
    },
}

/// Behind Sentinel: whether the sentinels' naming of the primary that chose the connection has served a
/// script yet. The first script on a new connection goes without asking again; every later
/// one asks first (see `Router::lock_connection`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Naming {
    Fresh,
    Served,
}

impl<C> Link<C> {
    /// A new connection: to `primary` when the sentinels named one, else direct.
    pub(super) fn connected(conn: C, primary: Option<Primary>) -> Link<C> {
        match primary {
            Some(primary) => Link::Named {
                conn,
                primary,
                naming: Naming::Fresh,
            },
            None => Link::Direct(conn),
        }
    }

    pub(super) fn conn(&self) -> Option<&C> {
        match self {
            Link::Disconnected => None,
            Link::Direct(conn) | Link::Named { conn, .. } => Some(conn),
        }
    }

    /// Behind Sentinel, the primary the connection goes to.
    pub(super) fn primary(&self) -> Option<&Primary> {
        match self {
            Link::Named { primary, .. } => Some(primary),
            _ => None,
        }
    }

    /// Drops the connection (see [`Link::Disconnected`]).
    pub(super) fn forget(&mut self) {
        *self = Link::Disconnected;
    }

    /// Whether a script of `route` asks the sentinels before it goes: a lock script, on a
    /// connection whose answer has served a script already.
    pub(super) fn must_ask(&self, route: Route) -> bool {
        route != Route::AsConnected
            && matches!(
                self,
                Link::Named {
                    naming: Naming::Served,
                    ..
                }
            )
    }

    /// A script is about to go on this connection: its answer has served.
    pub(super) fn serve(&mut self) {
        if let Link::Named { naming, .. } = self {
            *naming = Naming::Served;
        }
    }

    /// Whether the sentinels, naming `now`, name another primary than this connection's.
    pub(super) fn elsewhere(&self, now: &Primary) -> bool {
        self.primary() != Some(now)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn primary(port: u16) -> Primary {
        ("10.0.0.1".into(), port)
    }

    #[test]
    fn disconnected_knows_nothing_and_asks_nothing() {
        let link: Link<&str> = Link::Disconnected;
        assert_eq!((link.conn(), link.primary()), (None, None));
        assert!(!link.must_ask(Route::Named));
        assert!(link.elsewhere(&primary(1)));
    }

    #[test]
    fn a_direct_connection_never_asks() {
        let mut link = Link::connected("c", None);
        assert_eq!(link, Link::Direct("c"));
        assert_eq!((link.conn(), link.primary()), (Some(&"c"), None));
        link.serve();
        assert!(!link.must_ask(Route::Named));
        link.forget();
        assert_eq!(link, Link::Disconnected);
    }

    #[test]
    fn a_named_primary_serves_its_first_script_then_every_lock_script_asks() {
        let mut link = Link::connected("c", Some(primary(1)));
        assert_eq!(link.primary(), Some(&primary(1)));
        assert!(
            !link.must_ask(Route::Named),
            "the answer that chose it serves"
        );
        link.serve();
        assert!(link.must_ask(Route::Named));
        assert!(
            !link.must_ask(Route::AsConnected),
            "operators' reads never ask"
        );
        assert!(!link.elsewhere(&primary(1)));
        assert!(link.elsewhere(&primary(2)));
    }

    #[test]
    fn moving_to_another_primary_is_a_fresh_answer_again() {
        let mut link = Link::connected("old", Some(primary(1)));
        link.serve();
        // What `move_to` does: the old connection goes first, so a failed move leaves none.
        link.forget();
        assert_eq!((link.conn(), link.primary()), (None, None));
        link = Link::connected("new", Some(primary(2)));
        assert_eq!(
            link,
            Link::Named {
                conn: "new",
                primary: primary(2),
                naming: Naming::Fresh
            }
        );
        assert!(!link.must_ask(Route::Named));
        link.serve();
        assert!(link.must_ask(Route::Named));
    }

    #[test]
    fn a_dropped_connection_forgets_its_primary_and_the_next_one_starts_fresh() {
        let mut link = Link::connected("c", Some(primary(1)));
        link.serve();
        link.forget();
        assert!(!link.must_ask(Route::Named), "a new connection asks anyway");
        link.serve();
        assert_eq!(link, Link::Disconnected);
    }
}
