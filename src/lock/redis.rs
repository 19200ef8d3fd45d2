//! The lock protocol on one Redis server: every operation is one `EVAL` of a short Lua script,
//! so check-and-act is atomic on the server and costs exactly one round trip.

use super::errors::{is_dropped, is_transient, refusal};
use super::url::{self, Credentials, Secrets};
use super::{Acquire, Holder, Lease, LockError, LockService, LockSpec, Release, Renew};
use redis::aio::{MultiplexedConnection, PubSub};
use redis::{AsyncConnectionConfig, Client, Value};
use std::time::Duration;
use tokio::time::Instant;

/// The scripts that touch the waiter queue start with its shared Lua functions.
macro_rules! queue_script {
    ($file:literal) => {
        concat!(include_str!("queue.lua"), include_str!($file))
    };
}

const ACQUIRE: &str = queue_script!("acquire.lua");
const RELEASE: &str = queue_script!("release.lua");
const SEM_ACQUIRE: &str = queue_script!("sem_acquire.lua");
const SEM_RELEASE: &str = queue_script!("sem_release.lua");
const LEAVE: &str = queue_script!("leave.lua");
const RENEW: &str = include_str!("renew.lua");
const SEM_RENEW: &str = include_str!("sem_renew.lua");
const HELD_BY: &str = include_str!("held_by.lua");

/// A waiter's place in the queue lasts this long unless renewed: the longest a waiter that
/// died (SIGKILL) can hold up the queue.
pub const TICKET: Duration = Duration::from_secs(3);

pub struct RedisLock {
    client: Client,
    config: AsyncConnectionConfig,
    timeout: Duration,
    /// The URL with its credentials replaced, for every message we print.
    shown: String,
    /// Every password we were given, scrubbed from every message we print.
    secrets: Secrets,
    /// Dropped after any failure whose outcome is unknown, so the next call reconnects instead
    /// of queueing behind a half-dead socket.
    conn: Option<MultiplexedConnection>,
    wake: Option<PubSub>,
    /// Replicas that must acknowledge an acquire or a renewal (`--acks`); 0: none.
    acks: u32,
    /// The server's own append-only file must have them on disk too (`--fsync`).
    fsync: bool,
}

impl RedisLock {
    /// Validates the URL and credentials without connecting (see [`url::target`]).
    /// `timeout` bounds connecting and every reply.
    pub fn new(
        url: &str,
        creds: &Credentials,
        tls: &url::TlsFiles,
        timeout: Duration,
    ) -> Result<RedisLock, String> {
        let url::Target {
            info,
            shown,
            secrets,
        } = url::target(url, creds)?;
        let client = match tls.load(shown.starts_with("rediss://"))? {
            Some(certs) => Client::build_with_tls(info, certs),
            None => Client::open(info),
        }
        .map_err(|e| secrets.scrub(&format!("invalid Redis URL '{shown}' or TLS files: {e}")))?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout));
        Ok(RedisLock {
            client,
            config,
            timeout,
            shown,
            secrets,
            conn: None,
            wake: None,
            acks: 0,
            fsync: false,
        })
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

    /// How many replicas must acknowledge each acquire and renewal (`--acks`).
    pub fn with_acks(mut self, acks: u32, fsync: bool) -> RedisLock {
        self.acks = acks;
        self.fsync = fsync;
        self
    }

    /// `WAIT acks`: blocks until that many replicas have this connection's writes so far (the
    /// script just run). Fewer within the time left of the request timeout means the write may
    /// be lost in a failover, so the caller treats it as not done (unknown).
    async fn replicated(&mut self) -> Result<(), LockError> {
        if self.acks == 0 && !self.fsync {
            return Ok(());
        }
        let mut conn = self.connection().await?;
        // Two thirds of the request timeout: WAIT must answer before the reply timeout fires.
        let wait_ms = (self.timeout.as_millis() * 2 / 3).max(1) as u64;
        let got: i64 = if self.fsync {
            // WAITAOF numlocal numreplicas timeout → [local fsyncs, replica fsyncs].
            let reply: Result<(i64, i64), _> = redis::cmd("WAITAOF")
                .arg(1)
                .arg(self.acks)
                .arg(wait_ms)
                .query_async(&mut conn)
                .await;
            match reply {
                Ok((local, replicas)) if local >= 1 => replicas,
                Ok(_) => {
                    return Err(LockError::Unavailable(format!(
                        "Redis at {} unavailable: the server did not fsync the lock within {wait_ms}ms (--fsync)",
                        self.shown
                    )))
                }
                Err(e) => {
                    let text = e.to_string();
                    let why = if text.contains("unknown command") {
                        "--fsync needs WAITAOF (Redis 7.2 or later, Valkey 8 or later)"
                    } else if text.contains("appendonly") {
                        "--fsync needs the server's append-only file (appendonly yes)"
                    } else {
                        self.conn = None;
                        return Err(self.unavailable(&e));
                    };
                    return Err(LockError::Refused(format!(
                        "Redis at {} refused lockrun: {why}",
                        self.shown
                    )));
                }
            }
        } else {
            redis::cmd("WAIT")
                .arg(self.acks)
                .arg(wait_ms)
                .query_async(&mut conn)
                .await
                .map_err(|e| {
                    self.conn = None;
                    self.unavailable(&e)
                })?
        };
        if got < i64::from(self.acks) {
            return Err(LockError::Unavailable(format!(
                "Redis at {} unavailable: only {got} of {} replicas acknowledged the lock within {wait_ms}ms (--acks)",
                self.shown, self.acks
            )));
        }
        Ok(())
    }

    /// A TLS client talking to a plain-text port waits for a handshake that never comes (or
    /// gets garbage): say what that usually means instead of a bare "timed out".
    fn tls_hint(&self) -> &'static str {
        if self.shown.starts_with("rediss://") {
            "; is the server's port TLS-enabled? (rediss:// needs TLS; use redis:// for a plain-text port)"
        } else {
            ""
        }
    }

    /// What a failed request means. Refusals of lockrun itself (authentication, permissions,
    /// not a Redis server) are told apart from an unavailable server: they say what to fix,
    /// and nobody retries them.
    fn unavailable(&self, e: &redis::RedisError) -> LockError {
        self.failure(e, None)
    }

    /// [`Self::unavailable`] for a failed `EVAL` of `script`: a refusal can then name the
    /// command inside the script that the server would not run.
    fn failure(&self, e: &redis::RedisError, script: Option<&str>) -> LockError {
        let scrub = |m: String| self.secrets.scrub(&m);
        match refusal(e, script) {
            Some(why) => LockError::Refused(scrub(format!(
                "Redis at {} refused lockrun: {why}",
                self.shown
            ))),
            None => LockError::Unavailable(scrub(format!(
                "Redis at {} unavailable: {e}{}",
                self.shown,
                self.tls_hint()
            ))),
        }
    }

    /// Awaits `fut` for at most the request timeout; both a failure and the timeout mean
    /// "unavailable", the latter described by `what` (e.g. "no connection").
    async fn bounded<T>(
        &self,
        what: &str,
        fut: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, LockError> {
        match tokio::time::timeout(self.timeout, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.unavailable(&e)),
            Err(_) => Err(LockError::Unavailable(self.secrets.scrub(&format!(
                "Redis at {} unavailable: {what} within {:?}{}",
                self.shown,
                self.timeout,
                self.tls_hint()
            )))),
        }
    }

    async fn connection(&mut self) -> Result<MultiplexedConnection, LockError> {
        if let Some(c) = &self.conn {
            return Ok(c.clone());
        }
        // The outer timeout also covers DNS and AUTH, which the config's timeouts may not.
        let fut = self
            .client
            .get_multiplexed_async_connection_with_config(&self.config);
        let conn = self.bounded("no connection", fut).await?;
        self.conn = Some(conn.clone());
        Ok(conn)
    }

    /// One `EVAL`. Plain EVAL rather than EVALSHA: the scripts are a few hundred bytes, and a
    /// short-lived process would otherwise pay NOSCRIPT + SCRIPT LOAD on a fresh server.
    async fn eval(
        &mut self,
        script: &str,
        keys: &[&str],
        args: &[&str],
    ) -> Result<Value, LockError> {
        match self.eval_once(script, keys, args).await {
            // The connection was dropped under the request (the server closed an idle client,
            // CLIENT KILL, a proxy restart): one more try on a fresh connection, so one broken
            // socket does not fail a run. Safe because every script here is idempotent for its
            // caller (an acquire finding our own value is success; renew and the queue scripts
            // are token-checked). Not after a timeout or a refused connection: the server is
            // slow, black-holed or down, and the budget for this request is spent.
            Err(Failed::Dropped(e)) => {
                tracing::debug!(error = %e, "connection dropped; retrying once on a new one");
                self.eval_once(script, keys, args)
                    .await
                    .map_err(Failed::into_error)
            }
            other => other.map_err(Failed::into_error),
        }
    }

    /// One `EVAL` without the retry: for release, whose caller retries itself and must know
    /// that the first attempt's outcome is unknown (see `app::release`).
    async fn eval_once(
        &mut self,
        script: &str,
        keys: &[&str],
        args: &[&str],
    ) -> Result<Value, Failed> {
        let mut conn = self.connection().await.map_err(Failed::Other)?;
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(script).arg(keys.len()).arg(keys).arg(args);
        match cmd.query_async::<Value>(&mut conn).await {
            Ok(v) => Ok(v),
            Err(e) if refusal(&e, Some(script)).is_some() => {
                self.conn = None;
                Err(Failed::Other(self.failure(&e, Some(script))))
            }
            Err(e) if is_dropped(&e) => {
                self.conn = None;
                Err(Failed::Dropped(self.unavailable(&e)))
            }
            Err(e) if is_transient(&e) => {
                self.conn = None;
                Err(Failed::Other(self.unavailable(&e)))
            }
            Err(e) => Err(Failed::Other(LockError::Misuse(
                self.secrets
                    .scrub(&format!("Redis rejected the lock script: {e}")),
            ))),
        }
    }
}

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
        let fut = self.client.get_async_pubsub();
        let mut pubsub = self.bounded("no connection", fut).await?;
        let channel = wake_channel(&spec.key);
        self.bounded("no SUBSCRIBE reply", pubsub.subscribe(channel))
            .await?;
        self.wake = Some(pubsub);
        Ok(())
    }

    async fn acquire(
        &mut self,
        spec: &LockSpec,
        holder: &Holder,
        queue: bool,
    ) -> Result<Acquire, LockError> {
        let keys = Keys::of(&spec.key);
        let ttl = spec.ttl.as_millis().to_string();
        let ticket = if queue {
            TICKET.as_millis().to_string()
        } else {
            "0".into()
        };
        let sent_at = Instant::now();
        let key_args = [spec.key.as_str(), &keys.fence, &keys.queue, &keys.tickets];
        let reply = match spec.limit {
            None => {
                self.eval(
                    ACQUIRE,
                    &key_args,
                    &[&holder.value, &ttl, &holder.id, &ticket],
                )
                .await?
            }
            Some(n) => {
                let n = n.to_string();
                let args = [&holder.value, &ttl, &holder.id, &ticket, &n, &keys.channel];
                self.eval(SEM_ACQUIRE, &key_args, &args.map(String::as_str))
                    .await?
            }
        };
        let confirmed_at = Instant::now();
        let items = match reply {
            Value::Array(items) => items,
            other => return Err(unexpected(&other)),
        };
        match (items.first(), items.get(1)) {
            (Some(Value::Int(1)), Some(Value::Int(fence))) => {
                let lease = Lease {
                    key: spec.key.clone(),
                    holder: holder.clone(),
                    fence: *fence as u64,
                    sent_at,
                    confirmed_at,
                };
                if let Err(e) = self.replicated().await {
                    // Not on enough replicas: a failover now could hand the key to someone
                    // else. Give it back (token-checked) rather than hold it half-safely.
                    let _ = self.release(spec, &lease, Duration::ZERO).await;
                    return Err(e);
                }
                Ok(Acquire::Acquired(lease))
            }
            (Some(Value::Int(0)), Some(Value::Int(pttl))) => Ok(Acquire::Held {
                holder: items.get(2).and_then(as_string),
                // PTTL is -1 for a key without expiry (set by hand), -2 for a lock that is
                // free but promised to a queued waiter: no lease end to sleep by.
                pttl: u64::try_from(*pttl).ok().map(Duration::from_millis),
                rank: match items.get(3) {
                    Some(Value::Int(r)) => u64::try_from(*r).ok(),
                    _ => None,
                },
            }),
            (Some(Value::Int(-1)), Some(kind)) => {
                let kind = as_string(kind).unwrap_or_default();
                Err(LockError::Misuse(match (spec.limit, kind.as_str()) {
                    (None, "zset") => format!(
                        "key '{}' is a semaphore (used with --limit); use the same --limit for every lockrun on it",
                        spec.key
                    ),
                    (Some(_), "string") => format!(
                        "key '{}' is a plain lock (used without --limit); a semaphore needs a key of its own",
                        spec.key
                    ),
                    _ => format!(
                        "key '{}' holds a Redis {kind}, not a lock; choose another key",
                        spec.key
                    ),
                }))
            }
            (Some(Value::Int(-2)), Some(key)) => {
                let key = as_string(key).unwrap_or_default();
                Err(LockError::Misuse(if key == keys.fence {
                    format!(
                        "the fencing counter '{key}' is not a whole number (changed by hand?); delete it: \
                         fencing numbers then resume above the server's clock, so they still increase"
                    )
                } else {
                    format!("the waiter queue key '{key}' is not a sorted set (changed by hand?); delete it")
                }))
            }
            _ => Err(unexpected(&Value::Array(items))),
        }
    }

    async fn renew(&mut self, spec: &LockSpec, lease: &Lease) -> Result<Renew, LockError> {
        let ttl = spec.ttl.as_millis().to_string();
        let script = if spec.limit.is_some() {
            SEM_RENEW
        } else {
            RENEW
        };
        match self
            .eval(script, &[&spec.key], &[&lease.holder.value, &ttl])
            .await?
        {
            Value::Int(1) => {
                self.replicated().await?;
                Ok(Renew::Renewed)
            }
            Value::Int(0) => Ok(Renew::NotOwner),
            other => Err(unexpected(&other)),
        }
    }

    async fn release(
        &mut self,
        spec: &LockSpec,
        lease: &Lease,
        keep_for: Duration,
    ) -> Result<Release, LockError> {
        // Round up: keeping a millisecond too long is harmless, too short is not.
        let keep = keep_for.as_micros().div_ceil(1000).to_string();
        let script = if spec.limit.is_some() {
            SEM_RELEASE
        } else {
            RELEASE
        };
        let keys = Keys::of(&spec.key);
        match self
            .eval_once(
                script,
                &[&spec.key, &keys.queue, &keys.tickets],
                &[&lease.holder.value, &keep, &keys.channel],
            )
            .await
            .map_err(Failed::into_error)?
        {
            Value::Int(1) => Ok(Release::Deleted),
            Value::Int(2) => Ok(Release::Kept(keep_for)),
            Value::Int(0) => Ok(Release::NotOwner),
            other => Err(unexpected(&other)),
        }
    }

    async fn is_held_by(&mut self, spec: &LockSpec, token: &str) -> Result<bool, LockError> {
        // Hashed here, not on the server: the token never leaves this process, and an id
        // presented in its place hashes to something else.
        let id = super::public_id(token);
        match self.eval(HELD_BY, &[&spec.key], &[&id]).await? {
            Value::Int(n) => Ok(n == 1),
            other => Err(unexpected(&other)),
        }
    }

    async fn leave_queue(&mut self, spec: &LockSpec, holder: &Holder) -> Result<(), LockError> {
        let keys = Keys::of(&spec.key);
        let limit = spec.limit.unwrap_or(0).to_string();
        self.eval(
            LEAVE,
            &[&spec.key, &keys.queue, &keys.tickets],
            &[&holder.id, &limit, &keys.channel],
        )
        .await
        .map(|_| ())
    }

    async fn wait_for_turn(&mut self, holder: &Holder, max: Duration) {
        use futures_core::Stream;
        let Some(pubsub) = self.wake.as_mut() else {
            return tokio::time::sleep(max).await;
        };
        let dead = std::cell::Cell::new(false);
        {
            let stream = pubsub.on_message();
            let mut stream = std::pin::pin!(stream);
            let id = holder.id.as_bytes();
            let ours = async {
                // Hints name the waiter whose turn it is (by public id); the others sleep on.
                while let Some(msg) = std::future::poll_fn(|cx| stream.as_mut().poll_next(cx)).await
                {
                    if msg.get_payload_bytes() == id {
                        return;
                    }
                }
                // The subscription connection died: fall back to sleeping (the caller's bound
                // still holds, and the ticket renewal doubles as a poll).
                dead.set(true);
                std::future::pending::<()>().await
            };
            let _ = tokio::time::timeout(max, ours).await;
        }
        if dead.get() {
            // Subscribe again before the next attempt (see `subscribe_wakeups`).
            self.wake = None;
        }
    }
}

fn unexpected(v: &Value) -> LockError {
    LockError::Misuse(format!("unexpected reply from the lock script: {v:?}"))
}

fn as_string(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Okay => Some("OK".into()),
        _ => None,
    }
}

/// Where release hints for `key` are published.
pub fn wake_channel(key: &str) -> String {
    format!("lockrun:wake:{key}")
}

/// The keys that go with a lock key.
struct Keys {
    /// Fencing counter; never expires.
    fence: String,
    /// Waiters in arrival order, and their tickets' expiry.
    queue: String,
    tickets: String,
    channel: String,
}

impl Keys {
    fn of(key: &str) -> Keys {
        Keys {
            fence: helper_key(key, "fence"),
            queue: helper_key(key, "waiters"),
            tickets: helper_key(key, "tickets"),
            channel: wake_channel(key),
        }
    }
}

/// Every key lockrun keeps beside a lock starts with this; lock names may not (see
/// `cli::parse_key`), so no lock can ever be another lock's counter or queue.
pub const RESERVED_PREFIX: &str = "lockrun:";

/// `lockrun:<what>:{KEY}` for a plain key, `lockrun:<what>:=KEY` for one that has a hash tag of
/// its own (or a `}` that makes wrapping impossible). The character after `<what>:` tells the two
/// forms apart, so different lock names never share a helper key. Either form lives in the
/// same Redis Cluster hash slot as KEY where that is possible: `{KEY}` hashes like KEY, and in
/// the raw form KEY's own tag is the first `{...}` of the helper key. (A key with a `}` but no
/// tag, like `a}b`, hashes whole; its helpers cannot share its slot, which only matters on a
/// Cluster.)
pub fn helper_key(key: &str, what: &str) -> String {
    if has_hash_tag(key) || key.contains('}') {
        format!("{RESERVED_PREFIX}{what}:={key}")
    } else {
        format!("{RESERVED_PREFIX}{what}:{{{key}}}")
    }
}

fn has_hash_tag(key: &str) -> bool {
    match key.find('{') {
        Some(open) => matches!(key[open + 1..].find('}'), Some(len) if len > 0),
        None => false,
    }
}

impl Holder {
    /// A fresh holder identity: 128 random bits from the OS (the secret token), the public id
    /// derived from it, plus who and where we are.
    pub fn new() -> Holder {
        let token = uuid::Uuid::new_v4().simple().to_string();
        let id = super::public_id(&token);
        let host = nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_else(|| "unknown".into());
        let value = format!(
            "{id} host={host} pid={} started={}",
            std::process::id(),
            crate::logging::utc_now()
        );
        Holder { token, id, value }
    }
}

impl Default for Holder {
    fn default() -> Self {
        Holder::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helper_keys_share_the_slot_and_never_collide() {
        assert_eq!(helper_key("nightly", "fence"), "lockrun:fence:{nightly}");
        assert_eq!(
            helper_key("job:{tenant1}:x", "fence"),
            "lockrun:fence:=job:{tenant1}:x"
        );
        assert_eq!(helper_key("a{}b", "waiters"), "lockrun:waiters:=a{}b");
        assert_eq!(helper_key("a}b", "fence"), "lockrun:fence:=a}b");
        assert_eq!(helper_key("a{b", "fence"), "lockrun:fence:{a{b}");
        // The old scheme gave `a` and `{a}` one counter; the marker keeps them apart.
        assert_ne!(helper_key("a", "fence"), helper_key("{a}", "fence"));
        assert_ne!(helper_key("a", "fence"), helper_key("{a}:fence", "fence"));
    }

    #[test]
    fn holder_value_starts_with_the_public_id_and_never_shows_the_token() {
        let h = Holder::new();
        assert_eq!(h.token.len(), 32);
        assert_eq!(h.id, crate::lock::public_id(&h.token));
        assert!(h.value.starts_with(&format!("{} host=", h.id)));
        assert!(!h.value.contains(&h.token));
        assert_ne!(Holder::new().token, h.token);
    }
}
