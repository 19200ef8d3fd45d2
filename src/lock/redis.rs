//! The lock protocol on one Redis server: every operation is one `EVAL` of a short Lua script,
//! so check-and-act is atomic on the server and costs exactly one round trip.

use super::connect::{Conn, Connector, Fail, Primary, Wake};
use super::endpoint;
use super::failure::{Cause, Kind, Misuse, NotRedis};
use super::keys::{has_hash_tag, history_args, wake_channel};
use super::redis_errors::{self, is_dropped, is_transient, refusal, Sent};
use super::scripts::acquire::{AcquireReply, AcquireRequest};
use super::scripts::leave::LeaveRequest;
use super::scripts::release::{ReleaseReply, ReleaseRequest};
use super::scripts::renew::{RenewReply, RenewRequest};
use super::scripts::{self, as_string, held_by, Call, Request};
use super::url::{Credentials, Secrets, TlsFiles};
use super::{
    Acquire, Holder, Lease, LockError, LockService, LockSpec, Note, Reading, Release, Renew,
};
use redis::Value;
use std::time::Duration;
use tokio::time::Instant;

/// Everything besides the URL that decides how to reach and authenticate to the server(s).
#[derive(Default)]
pub struct ConnectOptions {
    pub creds: Credentials,
    pub tls: TlsFiles,
    /// The sentinels' own password (not the data nodes').
    pub sentinel_password: Option<String>,
    /// `--tls-insecure`: no certificate verification.
    pub insecure: bool,
}

/// A waiter's place in the queue lasts this long unless renewed: the longest a waiter that
/// died (SIGKILL) can hold up the queue.
pub const TICKET: Duration = Duration::from_secs(3);

pub struct RedisLock {
    connector: Connector,
    /// Bounds connecting and every reply (`doctor` reads it: see `probe.rs`).
    pub(super) timeout: Duration,
    /// The URL with its credentials replaced, for every message we print.
    shown: String,
    /// Every password we were given, scrubbed from every message we print.
    secrets: Secrets,
    /// Dropped after any failure whose outcome is unknown, so the next call reconnects instead
    /// of queueing behind a half-dead socket (and, behind Sentinel, asks for the primary anew).
    conn: Option<Conn>,
    /// Behind Sentinel: the primary `conn` goes to.
    primary: Option<Primary>,
    /// Behind Sentinel: the sentinels' answer that chose `conn` has not served a script yet
    /// (the first one on a new connection goes without asking again; see
    /// [`Self::lock_connection`]).
    fresh: bool,
    wake: Option<Wake>,
    /// Replicas that must acknowledge an acquire or a renewal (`--acks`); 0: none.
    acks: u32,
    /// The server's own append-only file must have them on disk too (`--fsync`).
    fsync: bool,
    /// Scripts are sent by SHA-1 (`EVALSHA`) until the server refuses that command (`doctor`
    /// sets and reads it to exercise both ways: see `probe.rs`).
    pub(super) evalsha: bool,
    /// The last acquire was sent and its outcome is unknown (no reply, a reply none of the
    /// script's, or abandoned while it waited for one): [`LockService::give_back`] has
    /// something to do.
    unsettled: bool,
}

impl RedisLock {
    /// Validates the URL and credentials without connecting (see [`endpoint::parse`]).
    /// `timeout` bounds connecting and every reply.
    pub fn new(
        url: &str,
        options: &ConnectOptions,
        timeout: Duration,
    ) -> Result<RedisLock, String> {
        let endpoint = endpoint::parse(
            url,
            &options.creds,
            &options.tls,
            options.sentinel_password.clone(),
            options.insecure,
        )?;
        let (shown, secrets) = (endpoint.shown.clone(), endpoint.secrets.clone());
        Ok(RedisLock {
            connector: Connector::new(endpoint, timeout)?,
            timeout,
            shown,
            secrets,
            conn: None,
            primary: None,
            fresh: false,
            wake: None,
            acks: 0,
            fsync: false,
            evalsha: true,
            unsettled: false,
        })
    }

    /// The servers this URL names, each written one way whichever way the URL spells it.
    pub fn servers(&self) -> Vec<String> {
        self.connector.servers()
    }

    /// The URL as it may be shown to people (password redacted).
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// Forgets the connection, so the next request opens a new one: for a caller whose own
    /// timeout cut a request short, leaving this socket possibly half-dead (see `redlock.rs`).
    pub fn disconnect(&mut self) {
        self.conn = None;
    }

    /// The last acquire's outcome counts as unknown, whatever its reply said: under Redlock a
    /// node whose grant did not make a majority (or whose reply came too late) gives back too.
    pub fn abandoned(&mut self) {
        self.unsettled = true;
    }

    /// How many replicas must acknowledge each acquire and renewal (`--acks`).
    pub fn with_acks(mut self, acks: u32, fsync: bool) -> RedisLock {
        self.acks = acks;
        self.fsync = fsync;
        self
    }

    /// Whether writes must be acknowledged (`--acks`, `--fsync`).
    fn acking(&self) -> bool {
        self.acks > 0 || self.fsync
    }

    /// How long `WAIT`/`WAITAOF` may block: two thirds of the longest a reply may take (the
    /// request timeout; a quarter of it in a cluster), so that it answers before the reply
    /// timeout fires (redis-rs's own default would be 500 ms).
    fn ack_wait_ms(&self) -> u64 {
        (self.connector.reply_timeout().as_millis() * 2 / 3).max(1) as u64
    }

    /// `WAIT acks ms`, or `WAITAOF 1 acks ms` with `--fsync`: blocks until that many replicas
    /// (and the server's own disk) have this connection's writes so far, the script just run.
    fn ack_cmd(&self) -> redis::Cmd {
        let mut cmd = if self.fsync {
            let mut c = redis::cmd("WAITAOF");
            c.arg(1);
            c
        } else {
            redis::cmd("WAIT")
        };
        cmd.arg(self.acks).arg(self.ack_wait_ms());
        cmd
    }

    /// The reply to [`Self::ack_cmd`]: fewer acknowledgements than asked means the write may be
    /// lost in a failover, so the caller treats it as not done (unknown outcome).
    fn check_ack(&self, reply: Value) -> Result<(), LockError> {
        let wait_ms = self.ack_wait_ms();
        let got = match reply {
            Value::Int(n) if !self.fsync => n,
            // WAITAOF → [local fsyncs, replica fsyncs].
            Value::Array(v) if self.fsync => match v.as_slice() {
                [Value::Int(local), Value::Int(replicas)] if *local >= 1 => *replicas,
                [Value::Int(_), Value::Int(_)] => {
                    return Err(
                        self.error(Kind::Unavailable(Cause::NotSynced { within_ms: wait_ms }))
                    )
                }
                _ => return Err(self.unexpected(&Value::Array(v))),
            },
            Value::ServerError(e) => {
                return Err(match redis_errors::ack_refusal(&e, self.fsync) {
                    Some(missing) => self.error(Kind::Unsupported(missing)),
                    None => self.unavailable(&e.into()),
                });
            }
            other => return Err(self.unexpected(&other)),
        };
        if got < i64::from(self.acks) {
            return Err(self.error(Kind::Unavailable(Cause::NotAcked {
                got,
                want: self.acks,
                within_ms: wait_ms,
            })));
        }
        Ok(())
    }

    /// On a Cluster, every key a script touches must share the lock's hash slot: refuse the
    /// names whose helpers cannot (a `}` without a hash tag, see [`helper_key`]).
    pub(super) fn check_key(&self, key: &str) -> Result<(), LockError> {
        if self.connector.is_cluster() && key.contains('}') && !has_hash_tag(key) {
            return Err(self.error(Kind::Misuse(Misuse::NoSharedSlot {
                key: key.to_string(),
            })));
        }
        Ok(())
    }

    /// An error of this server, the server's words in it scrubbed of every password.
    pub(super) fn error(&self, kind: Kind) -> LockError {
        LockError::on(&self.shown, kind.scrubbed(|w| self.secrets.scrub(w)))
    }

    /// A TLS client talking to a plain-text port waits for a handshake that never comes (or
    /// gets garbage): its messages say what that usually means instead of a bare "timed out".
    fn tls(&self) -> bool {
        self.connector.endpoint().tls
    }

    /// What a failed request means. Refusals of lockrun itself (authentication, permissions,
    /// not a Redis server) are told apart from an unavailable server: they say what to fix,
    /// and nobody retries them.
    fn unavailable(&self, e: &redis::RedisError) -> LockError {
        self.failure(e, None)
    }

    /// [`Self::unavailable`] for a failed `EVAL` of a script: a refusal can then name the
    /// command inside the script that the server would not run.
    fn failure(&self, e: &redis::RedisError, sent: Option<Sent>) -> LockError {
        if let Some(limit) = redis_errors::local_limit(e) {
            return self.error(Kind::Local(limit));
        }
        self.error(refusal(e, sent).unwrap_or_else(|| {
            Kind::Unavailable(Cause::Server {
                trouble: redis_errors::trouble(e),
                words: e.to_string(),
                tls: self.tls(),
            })
        }))
    }

    async fn connection(&mut self) -> Result<Conn, LockError> {
        if let Some(c) = &self.conn {
            return Ok(c.clone());
        }
        // The outer timeout also covers DNS, AUTH and asking the sentinels.
        let (conn, primary) =
            match tokio::time::timeout(self.timeout, self.connector.connect()).await {
                Ok(Ok(connected)) => connected,
                Ok(Err(fail)) => return Err(self.failed_connect(fail)),
                Err(_) => return Err(self.timed_out("no connection")),
            };
        self.conn = Some(conn.clone());
        self.fresh = primary.is_some();
        self.primary = primary;
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
    async fn lock_connection(&mut self, route: Route) -> Result<Conn, LockError> {
        let ask = route != Route::AsConnected
            && self.conn.is_some()
            && self.primary.is_some()
            && !std::mem::take(&mut self.fresh);
        if ask {
            let named = tokio::time::timeout(self.timeout, self.connector.named_primary()).await;
            match named {
                Ok(Ok(Some(now))) if self.primary.as_ref() != Some(&now) => {
                    self.move_to(now).await?;
                }
                Ok(Ok(_)) => {}
                Ok(Err(fail)) => return Err(self.failed_connect(fail)),
                Err(_) => return Err(self.timed_out("no answer from the sentinels")),
            }
        }
        let conn = self.connection().await?;
        self.fresh = false;
        Ok(conn)
    }

    /// Behind Sentinel: the sentinels name `primary` now. Connects there (the subscription to
    /// release hints follows at the next `subscribe_wakeups`); the next script goes there
    /// without asking again.
    async fn move_to(&mut self, primary: Primary) -> Result<(), LockError> {
        tracing::info!(primary = %format!("{}:{}", primary.0, primary.1),
            "the sentinels name a new primary; moving there");
        self.conn = None;
        self.wake = None;
        self.primary = None;
        let connecting = self.connector.connect_to(Some(&primary));
        let conn = match tokio::time::timeout(self.timeout, connecting).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(fail)) => return Err(self.failed_connect(fail)),
            Err(_) => return Err(self.timed_out("no connection")),
        };
        self.conn = Some(conn);
        self.primary = Some(primary);
        self.fresh = true;
        Ok(())
    }

    /// Behind Sentinel, `request` (one script on the primary `conn` goes to), with the
    /// sentinels asked again every [`Connector::watch_every`] while it has no reply: `Err`
    /// with the primary they name as soon as a majority names another one. The request is
    /// then abandoned (its server no longer counts) and sent there instead. Without this a
    /// renewal sent to a primary that froze waited out the whole request timeout before
    /// asking, and its job was stopped although its key survived on the promoted replica.
    async fn watched<T>(
        &self,
        request: impl std::future::Future<Output = T>,
    ) -> Result<T, Primary> {
        let (Some(every), Some(at)) = (self.connector.watch_every(), self.primary.as_ref()) else {
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

    /// What a failed connection attempt means (see [`Self::unavailable`]).
    fn failed_connect(&self, fail: Fail) -> LockError {
        match fail {
            Fail::Redis(e) => self.unavailable(&e),
            Fail::Topology(e) => e,
        }
    }

    /// Nothing within the request timeout: `missing` says what did not come.
    fn timed_out(&self, missing: &'static str) -> LockError {
        self.error(Kind::Unavailable(Cause::Timeout {
            missing,
            within: self.timeout,
            tls: self.tls(),
        }))
    }

    /// A reply none of lockrun's scripts gives: whatever answered is not a Redis that ran them
    /// (a proxy or a fake answering +OK to everything). Refused, not retried: it will not
    /// change.
    pub(super) fn unexpected(&self, v: &Value) -> LockError {
        let shown: String = format!("{v:?}").chars().take(80).collect();
        self.error(Kind::NotRedis(NotRedis::Reply(shown)))
    }

    /// One command (the operators' commands: reads, `SCAN`, `INFO`), with the same bounds and
    /// error reporting as the lock's own requests. `at`: on a Cluster, the node to ask
    /// (host, port); otherwise the key's node, or the one server.
    pub(super) async fn request(
        &mut self,
        cmd: redis::Cmd,
        at: Option<(&str, u16)>,
    ) -> Result<Value, LockError> {
        let mut conn = self.connection().await?;
        // A slow reply on a Cluster is asked for again, as in `send` (these are all reads).
        let started = std::time::Instant::now();
        let reply = loop {
            let reply = match (&mut conn, at) {
                (Conn::Cluster(c), Some((host, port))) => {
                    use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
                    let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                        host: host.to_string(),
                        port,
                    });
                    let asked = c.route_command(cmd.clone(), routing);
                    tokio::time::timeout(self.timeout, asked).await
                }
                (conn, _) => {
                    tokio::time::timeout(self.timeout, cmd.query_async::<Value>(conn)).await
                }
            };
            match reply {
                Ok(Err(e)) if self.ask_again(&e, started) => {
                    tracing::debug!(error = %e, "slow reply from the shard; asking again");
                }
                other => break other,
            }
        };
        match reply {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.request_failed(&e)),
            Err(_) => {
                self.conn = None;
                Err(self.timed_out("no reply"))
            }
        }
    }

    /// What an error reply to [`Self::request`] means: the server refused lockrun, is gone or
    /// is in trouble (the connection is dropped), or it answered this command with an error.
    fn request_failed(&mut self, e: &redis::RedisError) -> LockError {
        if refusal(e, None).is_some() || is_dropped(e) || is_transient(e) {
            self.conn = None;
            self.unavailable(e)
        } else {
            self.error(Kind::Misuse(Misuse::Answered(redis_errors::answer(e))))
        }
    }

    /// [`Self::request`] of several commands in one round trip (a pipeline): `doctor` asks
    /// dozens of questions, and a server that answers slowly must not cost a round trip each.
    /// Each command's reply, or its error as `request` would return it; `Err`: no reply.
    pub(super) async fn request_all(
        &mut self,
        cmds: &[redis::Cmd],
        at: Option<(&str, u16)>,
    ) -> Result<Vec<Result<Value, LockError>>, LockError> {
        let mut pipe = redis::pipe();
        for cmd in cmds {
            pipe.add_command(cmd.clone());
        }
        pipe.ignore_errors();
        let mut conn = self.connection().await?;
        let started = std::time::Instant::now();
        let reply = loop {
            let reply = match (&mut conn, at) {
                (Conn::Cluster(c), Some((host, port))) => {
                    use redis::cluster_routing::SingleNodeRoutingInfo;
                    let routing = SingleNodeRoutingInfo::ByAddress {
                        host: host.to_string(),
                        port,
                    };
                    let asked = c.route_pipeline(pipe.clone(), 0, cmds.len(), routing);
                    tokio::time::timeout(self.timeout, asked).await
                }
                (conn, _) => {
                    tokio::time::timeout(self.timeout, pipe.query_async::<Vec<Value>>(conn)).await
                }
            };
            match reply {
                Ok(Err(e)) if self.ask_again(&e, started) => {
                    tracing::debug!(error = %e, "slow reply from the shard; asking again");
                }
                other => break other,
            }
        };
        match reply {
            Ok(Ok(replies)) => Ok(replies
                .into_iter()
                .map(|v| v.extract_error().map_err(|e| self.request_failed(&e)))
                .collect()),
            Ok(Err(e)) => Err(self.request_failed(&e)),
            Err(_) => {
                self.conn = None;
                Err(self.timed_out("no reply"))
            }
        }
    }

    /// Whether this is a Redis Cluster (whose keys live on several primaries).
    pub(super) fn is_cluster(&self) -> bool {
        self.connector.is_cluster()
    }

    /// The command the scripts publish release hints with (see [`scripts::publish_command`]).
    pub(super) fn publish(&self) -> &'static str {
        scripts::publish_command(self.is_cluster())
    }

    /// One script run (`EVALSHA`, falling back to `EVAL`; see [`Self::eval_once`]) for the
    /// operators' commands, on the connection as it is ([`Route::AsConnected`]).
    pub(super) async fn eval(&mut self, call: &Call) -> Result<Value, LockError> {
        self.eval_acked(call, false, Route::AsConnected)
            .await
            .map(|(v, _)| v)
    }

    /// [`Self::eval`]; with `ack` and `--acks`/`--fsync`, the `WAIT` is pipelined behind the
    /// `EVAL` (one round trip) and its verdict comes back beside the script's reply.
    async fn eval_acked(
        &mut self,
        call: &Call,
        ack: bool,
        route: Route,
    ) -> Result<(Value, Acked), LockError> {
        match self.eval_once(call, ack, route).await {
            // The connection was dropped under the request (the server closed an idle client,
            // CLIENT KILL, a proxy restart): one more try on a fresh connection, so one broken
            // socket does not fail a run. Safe because every script here is idempotent for its
            // caller (an acquire finding our own value is success; renew and the queue scripts
            // are token-checked). Not after a timeout or a refused connection: the server is
            // slow, black-holed or down, and the budget for this request is spent.
            Err(Failed::Dropped(e)) => {
                tracing::debug!(error = %e, "connection dropped; retrying once on a new one");
                self.eval_once(call, ack, route)
                    .await
                    .map_err(Failed::into_error)
            }
            other => other.map_err(Failed::into_error),
        }
    }

    /// One `EVAL` without the retry: for release, whose caller retries itself and must know
    /// that the first attempt's outcome is unknown (see `app::turn::release`).
    async fn eval_once(
        &mut self,
        call: &Call,
        ack: bool,
        route: Route,
    ) -> Result<(Value, Acked), Failed> {
        let sent = Sent {
            script: call.script.text(),
            publish: self.publish(),
        };
        let watched = route != Route::AsConnected;
        // Behind Sentinel the primary may be replaced while the request waits for its reply
        // (see `watched`): the request is then sent again there, as if new. Three times at
        // most: the sentinels do not fail over that often.
        let mut moves = 0;
        let (reply, mut conn) = loop {
            let mut conn = self.lock_connection(route).await.map_err(Failed::Other)?;
            match self.send_script(&mut conn, call, ack, watched).await {
                Ok(reply) => break (reply, conn),
                Err(now) if moves < 3 => {
                    moves += 1;
                    tracing::debug!("no reply yet, and the sentinels name another primary");
                    self.move_to(now).await.map_err(Failed::Other)?;
                }
                Err(_) => {
                    self.conn = None;
                    return Err(Failed::Other(self.timed_out(
                        "no reply (the sentinels named a new primary three times meanwhile)",
                    )));
                }
            }
        };
        match reply {
            Ok(v) => Ok(v),
            // No EVAL: a Sentinel's port given as redis:// is the likely mistake; say so.
            Err(e) if redis_errors::unknown_command(&e) && self.is_sentinel(&mut conn).await => {
                self.conn = None;
                Err(Failed::Other(
                    self.error(Kind::NotRedis(NotRedis::Sentinel)),
                ))
            }
            Err(e) if refusal(&e, Some(sent)).is_some() => {
                self.conn = None;
                Err(Failed::Other(self.failure(&e, Some(sent))))
            }
            Err(e) if is_dropped(&e) => {
                self.conn = None;
                Err(Failed::Dropped(self.unavailable(&e)))
            }
            Err(e) if is_transient(&e) => {
                self.conn = None;
                Err(Failed::Other(self.unavailable(&e)))
            }
            // Every error a script of lockrun's can meet on a working server is one of the
            // above (refusals, transient trouble): anything else means the server cannot run
            // lockrun, whatever it is. Said with the server's own words, never the request's.
            Err(e) => {
                self.conn = None;
                let words = redis_errors::server_words(&e);
                Err(Failed::Other(
                    self.error(Kind::NotRedis(NotRedis::Answered(words))),
                ))
            }
        }
    }

    /// Whether the server on `conn` is a Sentinel (`ROLE` answers `sentinel` first): asked only
    /// once a script was refused as an unknown command.
    async fn is_sentinel(&self, conn: &mut Conn) -> bool {
        let role = redis::cmd("ROLE");
        match tokio::time::timeout(self.timeout, role.query_async::<Value>(conn)).await {
            Ok(Ok(Value::Array(items))) => items
                .first()
                .and_then(as_string)
                .is_some_and(|r| r.eq_ignore_ascii_case("sentinel")),
            _ => false,
        }
    }
}

impl RedisLock {
    /// `script` on `conn`, by `EVALSHA` or `EVAL` (see [`Self::send`]); `watched`: behind
    /// Sentinel, `Err` with the primary the sentinels name instead, if they name another one
    /// while the reply is late (see [`Self::watched`]).
    async fn send_script(
        &mut self,
        conn: &mut Conn,
        call: &Call,
        ack: bool,
        watched: bool,
    ) -> Result<redis::RedisResult<(Value, Acked)>, Primary> {
        // EVALSHA first: the server hashes and parses nothing but the arguments, and a few KB
        // less travel per request. A server that does not have the script yet (fresh, restarted,
        // failed over) answers NOSCRIPT and gets it by EVAL, which also caches it there; one
        // that refuses EVALSHA itself (an ACL line that grants EVAL alone) gets EVAL from
        // then on. Either way the script runs once: NOSCRIPT means it did not run.
        // Not when a WAIT rides behind the script: after a NOSCRIPT, that WAIT would have
        // blocked for nothing, and the retry would block again (with --acks the WAIT costs
        // far more than the script anyway).
        let by_sha = self.evalsha && !(ack && self.acking());
        let text = call.script.text();
        if !by_sha {
            return self
                .send(conn, call.command("EVAL", text), ack, watched)
                .await;
        }
        let by_sha = call.command("EVALSHA", call.script.sha());
        match self.send(conn, by_sha, ack, watched).await? {
            // A server without one script (new, restarted, failed over) has none of them:
            // the rest of this process sends them whole (each EVAL caches one there, for
            // the next lockrun), so a run pays one extra round trip at most, and a retry
            // under faults never pays two.
            Err(e) if e.code() == Some("NOSCRIPT") => {
                self.evalsha = false;
                self.send(conn, call.command("EVAL", text), ack, watched)
                    .await
            }
            // Refused by an ACL, or not there at all (rename-command): EVAL may still be.
            Err(e) if redis_errors::evalsha_refused(&e) => {
                tracing::debug!("EVALSHA refused; using EVAL");
                self.evalsha = false;
                self.send(conn, call.command("EVAL", text), ack, watched)
                    .await
            }
            other => Ok(other),
        }
    }

    /// One `EVAL`/`EVALSHA` (`cmd`), with `WAIT`/`WAITAOF` pipelined behind it when `ack`
    /// and `--acks`/`--fsync` ask for it: one round trip either way.
    async fn send(
        &self,
        conn: &mut Conn,
        cmd: redis::Cmd,
        ack: bool,
        watched: bool,
    ) -> Result<redis::RedisResult<(Value, Acked)>, Primary> {
        // On a Cluster each attempt has only a quarter of the request timeout (see
        // `connect::cluster_share`); a reply slower than that is asked for again, on the same
        // connection, for as long as the request timeout lasts. Safe to repeat: every script
        // here is idempotent for its caller (see `eval_acked`; a repeated release that did
        // delete answers "not ours"). redis-rs's own retry of a timed-out request never sent
        // it again (redis 1.8.1: seen with CLIENT PAUSE), so the loop is ours. Not when a WAIT
        // rides behind the script: the script has most likely run, and only the WAIT was slow
        // (a promoted replica without replicas of its own waits it out every time); asked
        // again, a release would find its own deletion and report the key as not ours. That
        // request fails as unavailable, and its caller's own retry says what it knows.
        let waits = ack && self.acking();
        let started = std::time::Instant::now();
        loop {
            let attempt = self.send_once(conn, &cmd, ack);
            let reply = if watched {
                self.watched(attempt).await?
            } else {
                attempt.await
            };
            match reply {
                Err(e) if !waits && self.ask_again(&e, started) => {
                    tracing::debug!(error = %e, "slow reply from the shard; asking again");
                }
                other => return Ok(other),
            }
        }
    }

    /// Whether a request that failed with `e`, first sent at `started`, is sent again: on a
    /// Cluster, when its reply took longer than the quarter of the request timeout an attempt
    /// has, and another whole attempt still fits in the request timeout.
    fn ask_again(&self, e: &redis::RedisError, started: std::time::Instant) -> bool {
        self.connector.is_cluster()
            && e.is_timeout()
            && started.elapsed() + self.connector.reply_timeout() <= self.timeout
    }

    /// [`Self::send`], one attempt of `cmd` (the `EVAL`/`EVALSHA`).
    async fn send_once(
        &self,
        conn: &mut Conn,
        cmd: &redis::Cmd,
        ack: bool,
    ) -> redis::RedisResult<(Value, Acked)> {
        if !(ack && self.acking()) {
            return cmd.query_async::<Value>(conn).await.map(|v| (v, Ok(())));
        }
        let mut pipe = redis::pipe();
        pipe.add_command(cmd.clone())
            .add_command(self.ack_cmd())
            .ignore_errors();
        let mut replies = pipe.query_async::<Vec<Value>>(conn).await?;
        if replies.len() != 2 {
            return Ok((Value::Array(replies), Err(self.unexpected(&Value::Nil))));
        }
        let acked = self.check_ack(replies.pop().unwrap_or(Value::Nil));
        replies
            .pop()
            .unwrap_or(Value::Nil)
            .extract_error()
            .map(|v| (v, acked))
    }
}

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

/// Behind Sentinel, which primary a script must go to (elsewhere all alike).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
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

/// Whether the replicas acknowledged a write (always Ok when no acknowledgement was asked).
type Acked = Result<(), LockError>;

/// How one `EVAL` failed: on a connection that was dropped under it, or otherwise.
enum Failed {
    Dropped(LockError),
    Other(LockError),
}

impl Failed {
    fn into_error(self) -> LockError {
        match self {
            Failed::Dropped(e) | Failed::Other(e) => e,
        }
    }
}

impl LockService for RedisLock {
    async fn subscribe_wakeups(&mut self, spec: &LockSpec) -> Result<(), LockError> {
        if self.wake.is_some() {
            return Ok(());
        }
        let channel = wake_channel(&spec.key);
        // Behind Sentinel, on the primary of the connection for the attempts: connected now if
        // need be, and that answer then serves the first attempt too.
        self.connection().await?;
        let fut = self.connector.subscribe(&channel, self.primary.as_ref());
        match tokio::time::timeout(self.timeout, fut).await {
            Ok(Ok(wake)) => self.wake = Some(wake),
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
            value: &holder.value,
            ttl: spec.ttl,
            id: &holder.id,
            ticket: queue.then_some(TICKET),
            limit: spec.limit,
            // The history cap, read only when this attempt ends the run (not queueing, lock
            // held): the script composes that "skipped" entry from the holder value.
            history: if queue { 0 } else { spec.history },
            publish: self.publish(),
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
        };
        let decoded = match AcquireReply::decode(reply) {
            Ok(decoded) => decoded,
            // Whatever answered ran the request and said something none of the script's
            // replies say: it may have granted the lock. The attempt stays unsettled, so the
            // caller's give-back (token-checked) removes what it may have taken, on a new
            // connection: one that carried a reply no Redis gives may be out of step.
            Err(odd) => {
                self.conn = None;
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
            value: &lease.holder.value,
            ttl: spec.ttl,
            semaphore: spec.limit.is_some(),
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
        let id = super::public_id(token);
        let request = held_by::HeldByRequest {
            key: &spec.key,
            id: &id,
        };
        let (reply, _) = self
            .eval_acked(&request.call(), false, Route::Named)
            .await?;
        held_by::decode(reply).map_err(|odd| self.unexpected(&odd))
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
            limit: spec.limit,
            history: history_args(spec, holder, None, note),
            publish: self.publish(),
        };
        // Its reply changes nothing for the waiter that leaves (see `LeaveReply`): a queue
        // spoiled by hand is reported by the next acquire, and a ticket left behind expires.
        self.eval_acked(&request.call(), false, Route::Named)
            .await
            .map(|_| ())
    }

    async fn wait_for_turn(&mut self, holder: &Holder, max: Duration) {
        let Some(wake) = self.wake.as_mut() else {
            return tokio::time::sleep(max).await;
        };
        let id = holder.id.as_bytes();
        let mut dead = false;
        let ours = async {
            // Hints name the waiter whose turn it is (by public id); the others sleep on.
            while let Some(payload) = wake.next().await {
                if payload == id {
                    return;
                }
            }
            // The subscription died: fall back to sleeping (the caller's bound still holds,
            // and the ticket renewal doubles as a poll).
            dead = true;
            std::future::pending::<()>().await
        };
        let _ = tokio::time::timeout(max, ours).await;
        if dead {
            // Subscribe again before the next attempt (see `subscribe_wakeups`).
            self.wake = None;
        }
    }
}

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
            AcquireReply::Acquired { fence, server_us } => Acquire::Acquired(Lease {
                fence,
                readings: server_us.map_or_else(Vec::new, |us| {
                    reading(us, lease.sent_at, lease.confirmed_at)
                }),
                ..lease
            }),
            AcquireReply::Held { pttl, holder, rank } => Acquire::Held { holder, pttl, rank },
            AcquireReply::Refused(refusal) => {
                let misuse = refusal.misuse(&spec.key, spec.limit);
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
            value: &lease.holder.value,
            keep: keep_for,
            semaphore: spec.limit.is_some(),
            history: history_args(spec, &lease.holder, fence, note),
            publish: self.publish(),
        };
        let (reply, acked) = self
            // Behind Sentinel on the primary named now: "released" means deleted where the
            // key lives, not on a replaced primary that still accepts writes.
            .eval_once(&request.call(), ack, Route::Named)
            .await
            .map_err(Failed::into_error)?;
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
