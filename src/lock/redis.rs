//! The lock protocol on one Redis server: every operation is one `EVAL` of a short Lua script,
//! so check-and-act is atomic on the server and costs exactly one round trip.
//!
//! Here: the client's state and what a failure means. The protocol's operations are in
//! `protocol.rs` (each script's request and reply in `scripts/`), which primary a script goes
//! to behind Sentinel in `routing.rs`, and sending it (`EVALSHA`/`EVAL`, acknowledgements,
//! retries) in `send.rs`.

use super::connect::{Conn, Connector, NoConnection, Primary};
use super::endpoint;
use super::failure::{Cause, Kind, Misuse, NotRedis};
use super::keys::has_hash_tag;
use super::redis_errors::{self, refusal, Sent};
use super::scripts;
use super::url::{Credentials, Secrets, TlsFiles};
use super::{LockError, LockKind};
use link::Route;
use redis::Value;
use routing::{Router, Unrouted};
use std::time::Duration;

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

/// How long a place in the queue lasts for a lock of `kind` with `ttl`: a waiter renews its
/// ticket every second; a standby for a tick looks once per lease of the holder (at most its
/// TTL and a second apart: `turn::next_look`), so its ticket lasts that much longer. A standby
/// that died frees its place for a later host within this.
pub fn ticket(kind: LockKind, ttl: Duration) -> Duration {
    match kind {
        LockKind::Tick { .. } => ttl + TICKET,
        LockKind::Exclusive | LockKind::Shared | LockKind::Semaphore(_) => TICKET,
    }
}

pub struct RedisLock {
    /// The connection, the subscription to release hints, and which primary they go to.
    router: Router<Connector>,
    /// Bounds connecting and every reply (`doctor` reads it: see `probe.rs`).
    pub(super) timeout: Duration,
    /// The URL with its credentials replaced, for every message we print.
    shown: String,
    /// Every password we were given, scrubbed from every message we print.
    secrets: Secrets,
    /// Replicas that must acknowledge an acquire or a renewal (`--acks`); 0: none.
    acks: u32,
    /// The server's own append-only file must have them on disk too (`--fsync`).
    fsync: bool,
    /// Scripts are sent by SHA-1 (`EVALSHA`) until the server refuses that command (`doctor`
    /// sets and reads it, with `reloaded`, to exercise both ways: see `probe.rs`).
    pub(super) evalsha: bool,
    /// After a NOSCRIPT (the server lost every script: new, restarted, failed over): the
    /// scripts sent whole since, which the server has again (by SHA-1). `None`: no NOSCRIPT
    /// met, every script goes by SHA-1 first. A dozen scripts at most: a list.
    pub(super) reloaded: Option<Vec<&'static str>>,
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
            router: Router::new(Connector::new(endpoint, timeout)?, timeout),
            timeout,
            shown,
            secrets,
            acks: 0,
            fsync: false,
            evalsha: true,
            reloaded: None,
            unsettled: false,
        })
    }

    /// The servers this URL names, each written one way whichever way the URL spells it.
    pub fn servers(&self) -> Vec<String> {
        self.router.connector.servers()
    }

    /// The URL as it may be shown to people (password redacted).
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// Forgets the connection, so the next request opens a new one: for a caller whose own
    /// timeout cut a request short, leaving this socket possibly half-dead (see `redlock.rs`).
    pub fn disconnect(&mut self) {
        self.router.link.forget();
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

    /// On a Cluster, every key a script touches must share the lock's hash slot: refuse the
    /// names whose helpers cannot (a `}` without a hash tag, see [`helper_key`]).
    pub(super) fn check_key(&self, key: &str) -> Result<(), LockError> {
        if self.router.connector.is_cluster() && key.contains('}') && !has_hash_tag(key) {
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
        self.router.connector.endpoint().tls
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

    /// What a failed connection attempt means (see [`Self::unavailable`]).
    fn failed_connect(&self, fail: NoConnection) -> LockError {
        match fail {
            NoConnection::Redis(e) => self.unavailable(&e),
            NoConnection::Topology(e) => e,
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

    /// Whether this is a Redis Cluster (whose keys live on several primaries).
    pub(super) fn is_cluster(&self) -> bool {
        self.router.connector.is_cluster()
    }

    /// The command the scripts publish release hints with (see [`scripts::publish_command`]).
    pub(super) fn publish(&self) -> &'static str {
        scripts::publish_command(self.is_cluster())
    }

    // The connection, as the router (routing.rs) finds it; its failures in this server's words.
    /// [`Router::connection`].
    async fn connection(&mut self) -> Result<Conn, LockError> {
        let routed = self.router.connection().await;
        routed.map_err(|e| self.unrouted(e))
    }

    /// [`Router::lock_connection`].
    async fn lock_connection(&mut self, route: Route) -> Result<Conn, LockError> {
        let routed = self.router.lock_connection(route).await;
        routed.map_err(|e| self.unrouted(e))
    }

    /// [`Router::move_to`].
    async fn move_to(&mut self, primary: Primary) -> Result<(), LockError> {
        let moved = self.router.move_to(primary).await;
        moved.map_err(|e| self.unrouted(e))
    }

    fn unrouted(&self, e: Unrouted) -> LockError {
        match e {
            Unrouted::NoConnection(fail) => self.failed_connect(fail),
            Unrouted::TimedOut(missing) => self.timed_out(missing),
        }
    }
}

mod link;
mod protocol;
mod routing;
mod send;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::failure::At;

    fn new_lock(url: &str) -> RedisLock {
        RedisLock::new(url, &ConnectOptions::default(), Duration::from_secs(1)).unwrap()
    }

    #[test]
    fn a_new_client_is_disconnected_and_sends_by_sha1() {
        let lock = new_lock("redis://:secret@127.0.0.1:6390");
        assert!(matches!(lock.router.link, link::Link::Disconnected));
        assert!(lock.evalsha && !lock.unsettled && !lock.acking());
        assert_eq!(lock.shown(), "redis://:***@127.0.0.1:6390");
    }

    #[test]
    fn errors_name_the_server_and_never_a_password() {
        let lock = new_lock("redis://:secret@127.0.0.1:6390");
        let words = "ERR the password secret is wrong".to_string();
        let e = lock.error(Kind::NotRedis(NotRedis::Answered(words)));
        assert_eq!(e.at, At::Server("redis://:***@127.0.0.1:6390".into()));
        assert!(!format!("{e}").contains("secret"), "{e}");
    }

    #[test]
    fn an_unexpected_reply_is_shown_in_80_characters_at_most() {
        let lock = new_lock("redis://127.0.0.1:6390");
        let long = Value::BulkString(vec![b'x'; 500]);
        match lock.unexpected(&long).kind {
            Kind::NotRedis(NotRedis::Reply(shown)) => assert_eq!(shown.chars().count(), 80),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn only_a_cluster_refuses_a_key_whose_helpers_cannot_share_its_slot() {
        let cluster = new_lock("redis+cluster://127.0.0.1:7000");
        assert!(cluster.check_key("a}b").is_err());
        assert!(cluster.check_key("a{t}b").is_ok());
        assert!(cluster.check_key("plain").is_ok());
        assert!(new_lock("redis://127.0.0.1:6390").check_key("a}b").is_ok());
        assert_eq!(cluster.publish(), "SPUBLISH");
    }

    #[test]
    fn acknowledgements_wait_two_thirds_of_a_reply_s_time() {
        let lock = new_lock("redis://127.0.0.1:6390").with_acks(2, false);
        assert!(lock.acking());
        let words: Vec<String> = lock
            .ack_cmd()
            .args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                _ => String::new(),
            })
            .collect();
        assert_eq!(words, ["WAIT", "2", "666"]);
        let fsync = new_lock("redis://127.0.0.1:6390").with_acks(0, true);
        assert!(fsync.acking());
        assert_eq!(fsync.ack_cmd().args_iter().count(), 4, "WAITAOF 1 0 666");
    }
}
