//! Behind Sentinel, which primary a lock script goes to: the connection, asking the sentinels
//! again before a script, following a failover, and watching for one while a reply is late.
//!
//! Separate from the lock protocol, and written against [`Primaries`] (what routing asks of
//! the connector) rather than [`Connector`] itself, so that it is unit-tested against a fake
//! connector: the tests below. `RedisLock` holds a `Router<Connector>` (static dispatch).

use super::link::{Link, Route};
use crate::lock::connect::{Conn, Connector, NoConnection, Primary, Wake};
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
    fn named_primary(&self) -> impl Future<Output = Result<Option<Primary>, NoConnection>>;
    /// See [`Connector::connect`].
    fn connect(&self) -> impl Future<Output = Result<(Self::Conn, Option<Primary>), NoConnection>>;
    /// See [`Connector::connect_to`].
    fn connect_to(
        &self,
        primary: Option<&Primary>,
    ) -> impl Future<Output = Result<Self::Conn, NoConnection>>;
}

impl Primaries for Connector {
    type Conn = Conn;
    type Wake = Wake;

    fn watch_every(&self) -> Option<Duration> {
        Connector::watch_every(self)
    }

    fn named_primary(&self) -> impl Future<Output = Result<Option<Primary>, NoConnection>> {
        Connector::named_primary(self)
    }

    fn connect(&self) -> impl Future<Output = Result<(Conn, Option<Primary>), NoConnection>> {
        Connector::connect(self)
    }

    fn connect_to(
        &self,
        primary: Option<&Primary>,
    ) -> impl Future<Output = Result<Conn, NoConnection>> {
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
    /// When the last subscription was made (see `RedisLock::wait_for_turn`).
    pub(super) subscribed_at: tokio::time::Instant,
    /// Bounds connecting and asking the sentinels: the request timeout.
    timeout: Duration,
}

/// Why routing gave no connection: the connector's failure, or nothing within the timeout
/// (what did not come).
pub(super) enum Unrouted {
    NoConnection(NoConnection),
    TimedOut(&'static str),
}

impl<K: Primaries> Router<K> {
    pub(super) fn new(connector: K, timeout: Duration) -> Router<K> {
        Router {
            connector,
            link: Link::Disconnected,
            wake: None,
            subscribed_at: tokio::time::Instant::now(),
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
                Ok(Err(fail)) => return Err(Unrouted::NoConnection(fail)),
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
                Ok(Err(fail)) => return Err(Unrouted::NoConnection(fail)),
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
            Ok(Err(fail)) => return Err(Unrouted::NoConnection(fail)),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::connect::majority::{Said, Votes};
    use crate::lock::endpoint::{self, Endpoint, Shape};
    use crate::lock::url::{Credentials, TlsFiles};
    use std::cell::{Cell, RefCell};
    use tokio::time::{sleep, Instant};

    const TIMEOUT: Duration = Duration::from_secs(2);
    /// The fake's [`Primaries::watch_every`] behind Sentinel (the real one's for `TIMEOUT`).
    const EVERY: Duration = Duration::from_millis(500);
    const SENTINELS: &str = "redis+sentinel://s1:26379,s2:26379,s3:26379/mymaster";

    fn primary(port: u16) -> Primary {
        ("10.0.0.1".into(), port)
    }

    /// One question's answers: how long they take, and each sentinel's, in the order they come.
    type Answers = (Duration, Vec<Said>);

    /// Every sentinel names the primary on `port`, at once.
    fn all_name(port: u16) -> Answers {
        let said = || Some(Ok(Some(primary(port))));
        (Duration::ZERO, vec![said(), said(), said()])
    }

    /// The sentinels disagree: one names each of two primaries, the third is silent.
    fn split() -> Answers {
        let said = |port| Some(Ok(Some(primary(port))));
        (Duration::ZERO, vec![said(1), said(2), None])
    }

    /// A connector whose sentinels answer from a script and count their answers with the real
    /// majority rule ([`Votes`]); its connections are numbers: the n-th one made is `n`, and
    /// goes where `made[n]` says.
    struct Fake {
        endpoint: Endpoint,
        /// The answers to the n-th question put to the sentinels.
        answers: Box<dyn Fn(usize) -> Answers>,
        /// How many questions were put to the sentinels.
        asked: Cell<usize>,
        made: RefCell<Vec<Option<Primary>>>,
    }

    impl Primaries for Fake {
        type Conn = usize;
        type Wake = &'static str;

        fn watch_every(&self) -> Option<Duration> {
            matches!(self.endpoint.shape, Shape::Sentinel { .. }).then_some(EVERY)
        }

        async fn named_primary(&self) -> Result<Option<Primary>, NoConnection> {
            let n = self.asked.get();
            self.asked.set(n + 1);
            let Shape::Sentinel { service, .. } = &self.endpoint.shape else {
                panic!("a question to the sentinels of a standalone server");
            };
            let (delay, answers) = (self.answers)(n);
            sleep(delay).await;
            let mut votes = Votes::new(answers.len());
            for said in answers {
                if let Some(named) = votes.count(said) {
                    return Ok(Some(named));
                }
            }
            Err(NoConnection::Topology(votes.failure(
                &self.endpoint,
                service,
                TIMEOUT / 2,
            )))
        }

        async fn connect(&self) -> Result<(usize, Option<Primary>), NoConnection> {
            let primary = match self.endpoint.shape {
                Shape::Sentinel { .. } => self.named_primary().await?,
                _ => None,
            };
            Ok((self.connect_to(primary.as_ref()).await?, primary))
        }

        async fn connect_to(&self, primary: Option<&Primary>) -> Result<usize, NoConnection> {
            let mut made = self.made.borrow_mut();
            made.push(primary.cloned());
            Ok(made.len() - 1)
        }
    }

    fn router(url: &str, answers: impl Fn(usize) -> Answers + 'static) -> Router<Fake> {
        let (creds, tls) = (Credentials::default(), TlsFiles::default());
        let fake = Fake {
            endpoint: endpoint::parse(url, &creds, &tls, None, false).unwrap(),
            answers: Box::new(answers),
            asked: Cell::new(0),
            made: RefCell::new(Vec::new()),
        };
        Router::new(fake, TIMEOUT)
    }

    impl Router<Fake> {
        fn asked(&self) -> usize {
            self.connector.asked.get()
        }

        fn made(&self) -> Vec<Option<Primary>> {
            self.connector.made.borrow().clone()
        }
    }

    /// What routing gave: the connection's number, or its failure's words.
    fn said<T>(routed: Result<T, Unrouted>) -> Result<T, String> {
        routed.map_err(|e| match e {
            Unrouted::NoConnection(NoConnection::Topology(e)) => {
                assert!(e.is_outage(), "{e}");
                e.to_string()
            }
            Unrouted::NoConnection(NoConnection::Redis(e)) => e.to_string(),
            Unrouted::TimedOut(missing) => missing.to_string(),
        })
    }

    #[tokio::test(start_paused = true)]
    async fn the_primary_the_majority_names_is_used_and_its_answer_serves_the_first_script() {
        let mut r = router(SENTINELS, |_| all_name(1));
        assert_eq!(said(r.lock_connection(Route::Named).await), Ok(0));
        assert_eq!(r.asked(), 1, "asked once, to connect: that answer serves");
        assert_eq!(r.made(), [Some(primary(1))]);
        assert_eq!(said(r.lock_connection(Route::Named).await), Ok(0));
        assert_eq!(r.asked(), 2, "every later lock script asks first");
        assert_eq!(said(r.lock_connection(Route::AsConnected).await), Ok(0));
        assert_eq!(r.asked(), 2, "the operators' reads go as connected");
        assert_eq!(r.made().len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn when_the_majority_names_a_new_primary_the_connection_and_its_hints_follow() {
        let mut r = router(SENTINELS, |n| all_name(if n < 2 { 1 } else { 2 }));
        assert_eq!(said(r.lock_connection(Route::Named).await), Ok(0));
        r.wake = Some("hints from 10.0.0.1:1");
        assert_eq!(said(r.lock_connection(Route::Named).await), Ok(0));
        // The failover: the next script goes to the new primary, on a new connection, and
        // the subscription is dropped so that the next one is made there.
        assert_eq!(said(r.lock_connection(Route::Named).await), Ok(1));
        assert_eq!(r.made(), [Some(primary(1)), Some(primary(2))]);
        assert_eq!(r.link.primary(), Some(&primary(2)));
        assert_eq!(r.wake, None);
        assert_eq!(
            r.asked(),
            3,
            "the answer that moved serves the script that asked"
        );
        assert_eq!(said(r.lock_connection(Route::Named).await), Ok(1));
        assert_eq!(r.asked(), 4);
        assert_eq!(r.made().len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_majority_no_script_is_sent_and_the_next_one_asks_again() {
        let mut r = router(SENTINELS, |n| if n == 1 { split() } else { all_name(1) });
        assert_eq!(said(r.lock_connection(Route::Named).await), Ok(0));
        let e = said(r.lock_connection(Route::Named).await).unwrap_err();
        assert_eq!(
            e,
            format!(
                "Redis at {SENTINELS} unavailable: no majority of the 3 sentinels of \
                 {SENTINELS} names one primary for 'mymaster' (they name 10.0.0.1:1 (1), \
                 10.0.0.1:2 (1)): a failover under way, sentinels cut off, or sentinels of \
                 another set listed under the same name"
            )
        );
        // Its connection is kept, and not used until a majority names its primary again.
        assert_eq!(r.made().len(), 1);
        assert_eq!(said(r.lock_connection(Route::Named).await), Ok(0));
        assert_eq!(r.asked(), 3);
        // A first connection without a majority: none is made.
        let mut r = router(SENTINELS, |_| split());
        let e = said(r.lock_connection(Route::Named).await).unwrap_err();
        assert!(e.contains("no majority of the 3 sentinels"), "{e}");
        assert_eq!((r.made().len(), r.link.conn()), (0, None));
    }

    #[tokio::test(start_paused = true)]
    async fn sentinels_that_do_not_answer_leave_every_script_unavailable() {
        // They answer nothing within their budget: their error.
        let mut r = router(SENTINELS, |_| (Duration::ZERO, vec![None, None, None]));
        assert_eq!(
            said(r.lock_connection(Route::Named).await),
            Err(format!(
                "Redis at {SENTINELS} unavailable: no sentinel of {SENTINELS} answered within 1s"
            ))
        );
        // The question takes longer than the request timeout: that timeout, on connecting and
        // on asking before a later script alike.
        let late = (TIMEOUT * 2, all_name(1).1);
        let mut r = router(
            SENTINELS,
            move |n| if n == 0 { all_name(1) } else { late.clone() },
        );
        assert_eq!(said(r.lock_connection(Route::Named).await), Ok(0));
        let started = Instant::now();
        assert_eq!(
            said(r.lock_connection(Route::Named).await),
            Err("no answer from the sentinels".into())
        );
        assert_eq!(started.elapsed(), TIMEOUT);
        let mut r = router(SENTINELS, |_| (TIMEOUT * 2, vec![]));
        assert_eq!(said(r.connection().await), Err("no connection".into()));
        assert_eq!(r.made().len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_reply_asks_the_sentinels_again_every_interval_while_it_waits() {
        // They keep naming the same primary, or none by a majority: the reply is awaited.
        let mut r = router(
            SENTINELS,
            |n| if n % 2 == 0 { all_name(1) } else { split() },
        );
        assert_eq!(said(r.lock_connection(Route::Named).await), Ok(0));
        let started = Instant::now();
        let reply = r.watched(async {
            sleep(EVERY * 3 + EVERY / 5).await;
            "reply"
        });
        assert_eq!(reply.await, Ok("reply"));
        assert_eq!(started.elapsed(), EVERY * 3 + EVERY / 5);
        assert_eq!(
            r.asked(),
            1 + 3,
            "once per interval while the reply is late"
        );
        // A reply in time asks nothing.
        assert_eq!(r.watched(async { "at once" }).await, Ok("at once"));
        assert_eq!(r.asked(), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_reply_is_abandoned_as_soon_as_the_majority_names_another_primary() {
        let mut r = router(SENTINELS, |n| all_name(if n < 2 { 1 } else { 2 }));
        assert_eq!(said(r.lock_connection(Route::Named).await), Ok(0));
        let started = Instant::now();
        let reply = r.watched(async {
            sleep(TIMEOUT * 10).await;
            "too late"
        });
        assert_eq!(reply.await, Err(primary(2)));
        assert_eq!(started.elapsed(), EVERY * 2, "the second question named it");
        // The request goes there instead (as `eval_once` does), without asking again.
        assert!(said(r.move_to(primary(2)).await).is_ok());
        assert_eq!(said(r.lock_connection(Route::Named).await), Ok(1));
        assert_eq!(r.asked(), 3);
        assert_eq!(r.made(), [Some(primary(1)), Some(primary(2))]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_standalone_server_never_asks_the_sentinels() {
        let mut r = router("redis://10.0.0.9:6379", |_| panic!("no sentinels here"));
        for route in [Route::Named, Route::Named, Route::AsConnected, Route::Named] {
            assert_eq!(said(r.lock_connection(route).await), Ok(0));
        }
        let reply = r.watched(async {
            sleep(TIMEOUT * 10).await;
            "slow"
        });
        assert_eq!(reply.await, Ok("slow"));
        assert_eq!(r.asked(), 0);
        assert_eq!(r.made(), [None]);
        assert_eq!(r.link.primary(), None);
    }
}
