//! How an [`Endpoint`] becomes connections: to the one server, to whichever server the
//! sentinels name as primary *now*, or to a Cluster (which follows MOVED/ASK itself).
//!
//! The lock scripts are the same everywhere; only this differs. Every call to [`Connector::connect`]
//! starts from scratch (the caller drops its connection after any failure whose outcome is
//! unknown), so a failover is followed by the next request: Sentinel is asked again, the
//! Cluster's slot map is refreshed on MOVED. Behind Sentinel the caller also asks before each
//! lock request on a connection it keeps ([`Connector::named_primary`]), and again while a
//! reply is late ([`Connector::watch_every`]): see `Router::lock_connection` in
//! `redis/routing.rs`.

use super::endpoint::{Endpoint, Shape};
use super::redis_errors::is_dropped;
use super::url::Certs;
use super::LockError;
use majority::Votes;
use redis::aio::{ConnectionLike, MultiplexedConnection, PubSub};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::{
    AsyncConnectionConfig, Client, Cmd, ConnectionAddr, ConnectionInfo, Pipeline, PushInfo,
    PushKind, RedisError, RedisFuture, Value,
};
use std::time::Duration;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

pub(in crate::lock) mod majority;

/// One connection for lock requests, whatever the topology.
#[derive(Clone)]
pub enum Conn {
    Node(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Node(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Node(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Node(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// Why no connection: the server's own error (the caller classifies it), or something only
/// the topology can say (no sentinel answered, none knows the service).
pub enum NoConnection {
    Redis(RedisError),
    Topology(LockError),
}

impl From<RedisError> for NoConnection {
    fn from(e: RedisError) -> NoConnection {
        NoConnection::Redis(e)
    }
}

/// A subscription to release hints.
pub enum Wake {
    /// `SUBSCRIBE` on one server (scripts `PUBLISH`).
    Plain(PubSub),
    /// `SSUBSCRIBE` through the Cluster (scripts `SPUBLISH`): the hint stays on the lock's
    /// shard instead of being broadcast to every node. Messages arrive as RESP3 pushes.
    Sharded {
        _conn: ClusterConnection,
        rx: UnboundedReceiver<PushInfo>,
    },
}

impl Wake {
    /// The next hint's payload; None once the subscription is dead.
    pub async fn next(&mut self) -> Option<Vec<u8>> {
        match self {
            Wake::Plain(pubsub) => {
                use futures_core::Stream;
                let stream = pubsub.on_message();
                let mut stream = std::pin::pin!(stream);
                let msg = std::future::poll_fn(|cx| stream.as_mut().poll_next(cx)).await?;
                Some(msg.get_payload_bytes().to_vec())
            }
            Wake::Sharded { rx, .. } => loop {
                let push = rx.recv().await?;
                match push.kind {
                    PushKind::SMessage => {
                        if let Some(Value::BulkString(payload)) = push.data.get(1) {
                            return Some(payload.clone());
                        }
                    }
                    // A node's connection lost (the shard's master died), or the shard's
                    // channels dropped by a node that no longer serves their slot (a
                    // failover, a migration): the Cluster connection would subscribe again
                    // only on the node its old slot map names, which it refreshes only when a
                    // request of its own meets a MOVED. The subscription counts as dead: a
                    // new one reads the slot map afresh.
                    PushKind::Disconnection | PushKind::SUnsubscribe => return None,
                    // The subscription's confirmation.
                    _ => {}
                }
            },
        }
    }
}

pub struct Connector {
    endpoint: Endpoint,
    config: AsyncConnectionConfig,
    timeout: Duration,
    /// Built once: a `Client` only holds the address and settings.
    node: Option<Client>,
    sentinels: Vec<Client>,
    cluster: Option<ClusterClient>,
    /// Behind Sentinel: one connection per listed sentinel (in list order), kept between
    /// questions; None before the first and after one failed. Every lock request asks them,
    /// and a new connection each time would cost every sentinel a handshake (TCP, TLS, AUTH)
    /// per request: a waiting lockrun asks about once a second.
    kept: Kept,
}

/// The connections to the sentinels kept between questions (see `Connector::kept`).
type Kept = std::sync::Arc<std::sync::Mutex<Vec<Option<MultiplexedConnection>>>>;

/// A primary as the sentinels name it: host and port.
pub type Primary = (String, u16);

impl Connector {
    /// Builds the clients (no I/O). `timeout` bounds connecting and each reply.
    pub fn new(endpoint: Endpoint, timeout: Duration) -> Result<Connector, String> {
        let certs = endpoint.certs.clone();
        let client = |info: &ConnectionInfo| -> Result<Client, String> {
            open_client(info.clone(), certs.as_ref()).map_err(|e| {
                endpoint.secrets.scrub(&format!(
                    "{} '{}' or TLS files: {}",
                    super::url::INVALID,
                    endpoint.shown,
                    super::redis_errors::config_words(&e)
                ))
            })
        };
        let (mut node, mut sentinels, mut cluster) = (None, Vec::new(), None);
        match &endpoint.shape {
            Shape::Node(info) => node = Some(client(info)?),
            Shape::Sentinel { sentinels: s, .. } => {
                sentinels = s.iter().map(client).collect::<Result<_, _>>()?;
            }
            Shape::Cluster(seeds) => cluster = Some(cluster_client(&endpoint, seeds, timeout)?),
        }
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout));
        Ok(Connector {
            endpoint,
            config,
            timeout,
            node,
            sentinels,
            cluster,
            kept: Kept::default(),
        })
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The servers the endpoint names (see `endpoint::server_of`).
    pub fn servers(&self) -> Vec<String> {
        self.endpoint.servers()
    }

    pub fn is_cluster(&self) -> bool {
        self.cluster.is_some()
    }

    /// The longest one reply may take before the client gives up on it: the whole request
    /// timeout on one server, a quarter of it in a cluster (see [`cluster_share`]). A `WAIT`
    /// must answer within it.
    pub fn reply_timeout(&self) -> Duration {
        if self.is_cluster() {
            cluster_share(self.timeout)
        } else {
            self.timeout
        }
    }

    /// Behind Sentinel: how long a lock request may wait for its reply before the sentinels
    /// are asked again whether its server is still the primary (and again after as long,
    /// while it waits): a quarter of the request timeout, at most a second. A primary that
    /// stopped answering (a frozen host, SIGSTOP) is then left for the promoted replica
    /// within about a second of the sentinels naming it, instead of after the whole timeout,
    /// which a renewal cannot always afford. A reply that is merely slow (a `WAIT` of
    /// `--acks`) costs one sentinel question per interval. None for other topologies.
    pub fn watch_every(&self) -> Option<Duration> {
        matches!(self.endpoint.shape, Shape::Sentinel { .. })
            .then(|| (self.timeout / 4).min(Duration::from_secs(1)))
    }

    /// Behind Sentinel: the primary that a majority of the listed sentinels names now (see
    /// [`Self::ask_sentinels`]); None for other topologies.
    pub async fn named_primary(&self) -> Result<Option<Primary>, NoConnection> {
        match &self.endpoint.shape {
            Shape::Sentinel { service, .. } => self.ask_sentinels(service).await.map(Some),
            _ => Ok(None),
        }
    }

    /// A new connection for lock requests, and behind Sentinel the primary it goes to (the
    /// one the sentinels' majority names now: they are asked first).
    pub async fn connect(&self) -> Result<(Conn, Option<Primary>), NoConnection> {
        if let Some(cluster) = &self.cluster {
            return Ok((Conn::Cluster(cluster.get_async_connection().await?), None));
        }
        let primary = self.named_primary().await?;
        let conn = self.connect_to(primary.as_ref()).await?;
        Ok((conn, primary))
    }

    /// A new connection to the one server, or (`primary`) to the primary the sentinels named.
    pub async fn connect_to(&self, primary: Option<&Primary>) -> Result<Conn, NoConnection> {
        Ok(Conn::Node(
            self.data_node(primary)?
                .get_multiplexed_async_connection_with_config(&self.config)
                .await?,
        ))
    }

    /// A new subscription to `channel`: on the Cluster's shard of it, or on the one server,
    /// or on `primary` (the one the sentinels named; asked for if None).
    pub async fn subscribe(
        &self,
        channel: &str,
        primary: Option<&Primary>,
    ) -> Result<Wake, NoConnection> {
        if let Shape::Cluster(seeds) = &self.endpoint.shape {
            let (tx, rx) = unbounded_channel();
            let client = cluster_builder(&self.endpoint, seeds, self.timeout)
                .use_protocol(redis::ProtocolVersion::RESP3)
                .push_sender(tx)
                .build()
                .map_err(NoConnection::Redis)?;
            let mut conn = client.get_async_connection().await?;
            conn.ssubscribe(channel).await?;
            return Ok(Wake::Sharded { _conn: conn, rx });
        }
        let named = match primary {
            Some(_) => None,
            None => self.named_primary().await?,
        };
        let mut pubsub = self
            .data_node(primary.or(named.as_ref()))?
            .get_async_pubsub()
            .await?;
        pubsub.subscribe(channel).await?;
        Ok(Wake::Plain(pubsub))
    }

    /// The client of the one server, or behind Sentinel of `primary`.
    fn data_node(&self, primary: Option<&Primary>) -> Result<Client, NoConnection> {
        if let Some(node) = &self.node {
            return Ok(node.clone());
        }
        let (Shape::Sentinel { node, .. }, Some((host, port))) = (&self.endpoint.shape, primary)
        else {
            unreachable!("a Cluster has no single data node; behind Sentinel, the caller asks")
        };
        let (host, port) = (host.clone(), *port);
        let addr = match node.addr() {
            ConnectionAddr::TcpTls { insecure, .. } => ConnectionAddr::TcpTls {
                host,
                port,
                insecure: *insecure,
                tls_params: None,
            },
            _ => ConnectionAddr::Tcp(host, port),
        };
        let info = node.clone().set_addr(addr);
        open_client(info, self.endpoint.certs.as_ref()).map_err(NoConnection::Redis)
    }

    /// Asks every sentinel at once and takes the primary that a majority of the listed
    /// sentinels name, as soon as that many agree: a dead or black-holed sentinel costs nothing
    /// while a majority answers. Not the first answer: while a failover is under way the
    /// sentinels disagree (the leader names the promoted replica before the others have heard),
    /// and a sentinel cut off with the old primary on the minority side of a partition still
    /// names it, writable; a lock taken or renewed there is one the majority's primary knows
    /// nothing of. Without a majority lockrun reports the server unavailable and tries again
    /// (a waiting lockrun and the watchdog retry), as Sentinel itself needs a quorum to fail
    /// over. (The redis crate's own Sentinel client asks in list order, so a stalled first
    /// sentinel would stall every connection; and it connects to the primary twice to check
    /// its role. A primary that is no longer one answers our first write with READONLY, which
    /// reconnects and asks again.)
    async fn ask_sentinels(&self, service: &str) -> Result<Primary, NoConnection> {
        let mut asks = tokio::task::JoinSet::new();
        // Half the budget: the primary still has to be connected to within the rest.
        let budget = self.timeout / 2;
        let count = self.sentinels.len();
        for (i, sentinel) in self.sentinels.iter().enumerate() {
            let (sentinel, service, config) =
                (sentinel.clone(), service.to_string(), self.config.clone());
            let all_kept = self.kept.clone();
            let kept = all_kept
                .lock()
                .ok()
                .and_then(|k| k.get(i).cloned().flatten());
            asks.spawn(async move {
                let ask = async {
                    let question = redis::cmd("SENTINEL")
                        .arg("GET-MASTER-ADDR-BY-NAME")
                        .arg(&service)
                        .clone();
                    if let Some(mut conn) = kept {
                        match question.query_async::<Option<Primary>>(&mut conn).await {
                            Ok(named) => return Ok((named, conn)),
                            // Closed since (a restarted sentinel, an idle client dropped):
                            // asked again on a new connection, within the same budget.
                            Err(e) if is_dropped(&e) || e.is_io_error() => {}
                            Err(e) => return Err(e),
                        }
                    }
                    let mut conn = sentinel
                        .get_multiplexed_async_connection_with_config(&config)
                        .await?;
                    let named = question.query_async::<Option<Primary>>(&mut conn).await?;
                    Ok((named, conn))
                };
                // The connection of a sentinel that answered is kept, one that failed is
                // forgotten (the next question connects anew).
                let answer = match tokio::time::timeout(budget, ask).await {
                    Ok(Ok((named, conn))) => Ok((Ok(named), Some(conn))),
                    Ok(Err(e)) => Ok((Err(e), None)),
                    Err(elapsed) => Err(elapsed),
                };
                if let Ok(mut kept) = all_kept.lock() {
                    kept.resize(count, None);
                    kept[i] = answer.as_ref().ok().and_then(|(_, conn)| conn.clone());
                }
                answer.map(|(named, _)| named)
            });
        }
        let mut votes = Votes::new(count);
        while let Some(joined) = asks.join_next().await {
            let Ok(answer) = joined else { continue };
            if let Some(primary) = votes.count(answer.ok()) {
                // The others finish in the background (within the budget), so that their
                // connections are kept for the next question too.
                asks.detach_all();
                return Ok(primary);
            }
        }
        Err(NoConnection::Topology(votes.failure(
            &self.endpoint,
            service,
            budget,
        )))
    }
}

/// A cluster client's bound on each connection attempt and each reply: a quarter of the
/// request timeout (at least 100 ms, for a TLS handshake, but never more than half), not all
/// of it. redis-rs connects to every seed, then to every node of the slot map, and waits for
/// each attempt to end (a PING each). A node that accepts and never answers (a hung host, a
/// black-holed address, a stopped process) would use up the whole budget twice over, and no
/// key could be locked anywhere in the cluster while one node of any shard hangs. With a
/// quarter it costs at most half. A script whose reply takes longer than a quarter is sent
/// again until the whole timeout is used (`RedisLock::send`).
fn cluster_share(timeout: Duration) -> Duration {
    (timeout / 4).max(Duration::from_millis(100).min(timeout / 2))
}

fn cluster_builder(
    endpoint: &Endpoint,
    seeds: &[ConnectionInfo],
    timeout: Duration,
) -> ClusterClientBuilder {
    let share = cluster_share(timeout);
    let builder = ClusterClientBuilder::new(seeds.to_vec())
        .connection_timeout(share)
        .response_timeout(share)
        // Our own bound covers a whole request; redis-rs's default of 16 retries with
        // backoff would outlast it and hide a dead shard behind a generic timeout.
        .retries(2);
    match &endpoint.certs {
        #[cfg(feature = "tls")]
        Some(certs) => builder.certs(certs.clone()),
        #[cfg(not(feature = "tls"))]
        Some(c) => match *c {},
        None => builder,
    }
}

/// A client of one node, with the `--tls-*` certificates when there are any.
fn open_client(info: ConnectionInfo, certs: Option<&Certs>) -> redis::RedisResult<Client> {
    match certs {
        #[cfg(feature = "tls")]
        Some(c) => Client::build_with_tls(info, c.clone()),
        #[cfg(not(feature = "tls"))]
        Some(c) => match *c {},
        None => Client::open(info),
    }
}

fn cluster_client(
    endpoint: &Endpoint,
    seeds: &[ConnectionInfo],
    timeout: Duration,
) -> Result<ClusterClient, String> {
    cluster_builder(endpoint, seeds, timeout)
        .build()
        .map_err(|e| {
            endpoint.secrets.scrub(&format!(
                "{} '{}' or TLS files: {}",
                super::url::INVALID,
                endpoint.shown,
                super::redis_errors::config_words(&e)
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::cluster_share;
    use std::time::Duration;

    #[test]
    fn a_cluster_attempt_gets_a_quarter_of_the_timeout_at_least_100ms_at_most_half() {
        let ms = Duration::from_millis;
        assert_eq!(cluster_share(ms(3000)), ms(750));
        assert_eq!(cluster_share(ms(1000)), ms(250));
        assert_eq!(cluster_share(ms(333)), ms(100));
        assert_eq!(cluster_share(ms(100)), ms(50));
        assert_eq!(cluster_share(ms(10)), ms(5));
    }
}
