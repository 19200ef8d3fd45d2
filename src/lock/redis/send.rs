//! Sending: one command or pipeline (the operators' reads), and one script by `EVALSHA` or
//! `EVAL`, with `WAIT`/`WAITAOF` pipelined behind it, retried where that is safe, and every
//! failure turned into what it means.

use super::{link::Route, RedisLock};
use crate::lock::connect::{Conn, Primary};
use crate::lock::failure::{Cause, Kind, Misuse, NotRedis};
use crate::lock::redis_errors::{self, is_dropped, is_transient, refusal, Sent};
use crate::lock::scripts::{as_string, Call};
use crate::lock::LockError;
use redis::aio::ConnectionLike;
use redis::Value;

impl RedisLock {
    /// One command (the operators' commands: reads, `SCAN`, `INFO`), with the same bounds and
    /// error reporting as the lock's own requests. `at`: on a Cluster, the node to ask
    /// (host, port); otherwise the key's node, or the one server.
    pub(in crate::lock) async fn request(
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
                self.router.link.forget();
                Err(self.timed_out("no reply"))
            }
        }
    }

    /// What an error reply to [`Self::request`] means: the server refused lockrun, is gone or
    /// is in trouble (the connection is dropped), or it answered this command with an error.
    pub(super) fn request_failed(&mut self, e: &redis::RedisError) -> LockError {
        if refusal(e, None).is_some() || is_dropped(e) || is_transient(e) {
            self.router.link.forget();
            self.unavailable(e)
        } else {
            self.error(Kind::Misuse(Misuse::Answered(redis_errors::answer(e))))
        }
    }

    /// [`Self::request`] of several commands in one round trip (a pipeline): `doctor` asks
    /// dozens of questions, and a server that answers slowly must not cost a round trip each.
    /// Each command's reply, or its error as `request` would return it; `Err`: no reply.
    pub(in crate::lock) async fn request_all(
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
                self.router.link.forget();
                Err(self.timed_out("no reply"))
            }
        }
    }

    /// One script run (`EVALSHA`, falling back to `EVAL`; see [`Self::eval_once`]) for the
    /// operators' commands, on the connection as it is ([`Route::AsConnected`]).
    pub(in crate::lock) async fn eval(&mut self, call: &Call) -> Result<Value, LockError> {
        self.eval_acked(call, false, Route::AsConnected)
            .await
            .map(|(v, _)| v)
    }

    /// [`Self::eval`]; with `ack` and `--acks`/`--fsync`, the `WAIT` is pipelined behind the
    /// `EVAL` (one round trip) and its verdict comes back beside the script's reply.
    pub(super) async fn eval_acked(
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
            Err(EvalError::Dropped(e)) => {
                tracing::debug!(error = %e, "connection dropped; retrying once on a new one");
                self.eval_once(call, ack, route)
                    .await
                    .map_err(EvalError::into_error)
            }
            other => other.map_err(EvalError::into_error),
        }
    }

    /// One `EVAL` without the retry: for release, whose caller retries itself and must know
    /// that the first attempt's outcome is unknown (see `app::turn::release`).
    pub(super) async fn eval_once(
        &mut self,
        call: &Call,
        ack: bool,
        route: Route,
    ) -> Result<(Value, Acked), EvalError> {
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
            let mut conn = self
                .lock_connection(route)
                .await
                .map_err(EvalError::Other)?;
            match self.send_script(&mut conn, call, ack, watched).await {
                Ok(reply) => break (reply, conn),
                Err(now) if moves < 3 => {
                    moves += 1;
                    tracing::debug!("no reply yet, and the sentinels name another primary");
                    self.move_to(now).await.map_err(EvalError::Other)?;
                }
                Err(_) => {
                    self.router.link.forget();
                    return Err(EvalError::Other(self.timed_out(
                        "no reply (the sentinels named a new primary three times meanwhile)",
                    )));
                }
            }
        };
        match reply {
            Ok(v) => Ok(v),
            // No EVAL: a Sentinel's port given as redis:// is the likely mistake; say so.
            Err(e) if redis_errors::unknown_command(&e) && self.is_sentinel(&mut conn).await => {
                self.router.link.forget();
                Err(EvalError::Other(
                    self.error(Kind::NotRedis(NotRedis::Sentinel)),
                ))
            }
            Err(e) if refusal(&e, Some(sent)).is_some() => {
                self.router.link.forget();
                Err(EvalError::Other(self.failure(&e, Some(sent))))
            }
            Err(e) if is_dropped(&e) => {
                self.router.link.forget();
                Err(EvalError::Dropped(self.unavailable(&e)))
            }
            Err(e) if is_transient(&e) => {
                self.router.link.forget();
                Err(EvalError::Other(self.unavailable(&e)))
            }
            // Every error a script of lockrun's can meet on a working server is one of the
            // above (refusals, transient trouble): anything else means the server cannot run
            // lockrun, whatever it is. Said with the server's own words, never the request's.
            Err(e) => {
                self.router.link.forget();
                let words = redis_errors::server_words(&e);
                Err(EvalError::Other(
                    self.error(Kind::NotRedis(NotRedis::Answered(words))),
                ))
            }
        }
    }

    /// Whether the server on `conn` is a Sentinel (`ROLE` answers `sentinel` first): asked only
    /// once a script was refused as an unknown command.
    pub(super) async fn is_sentinel(&self, conn: &mut Conn) -> bool {
        let role = redis::cmd("ROLE");
        match tokio::time::timeout(self.timeout, role.query_async::<Value>(conn)).await {
            Ok(Ok(Value::Array(items))) => items
                .first()
                .and_then(as_string)
                .is_some_and(|r| r.eq_ignore_ascii_case("sentinel")),
            _ => false,
        }
    }

    /// `script` on `conn`, by `EVALSHA` or `EVAL` (see [`Self::send`]); `watched`: behind
    /// Sentinel, `Err` with the primary the sentinels name instead, if they name another one
    /// while the reply is late (see `Router::watched`).
    pub(super) async fn send_script<C: ConnectionLike + Send>(
        &mut self,
        conn: &mut C,
        call: &Call,
        ack: bool,
        watched: bool,
    ) -> Result<redis::RedisResult<(Value, Acked)>, Primary> {
        // EVALSHA first: the server hashes and parses nothing but the arguments, and a few KB
        // less travel per request. A server that does not have the script (fresh, restarted,
        // failed over) answers NOSCRIPT and gets it by EVAL, which also caches it there; it has
        // lost the other scripts too, so each is sent whole the first time after that (one
        // round trip, which caches it), then by SHA-1 again: a run pays one extra round trip
        // per NOSCRIPT at most, and a retry under faults never pays two. A server that refuses
        // EVALSHA itself (an ACL line that grants EVAL alone) gets EVAL from then on. Either way
        // the script runs once: NOSCRIPT means it did not run.
        // Not when a WAIT rides behind the script: after a NOSCRIPT, that WAIT would have
        // blocked for nothing, and the retry would block again (with --acks the WAIT costs
        // far more than the script anyway).
        let by_sha = self.evalsha && !(ack && self.acking());
        let (text, sha) = (call.script.text(), call.script.sha());
        let lost = self.reloaded.as_ref().is_some_and(|r| !r.contains(&sha));
        if !by_sha || lost {
            return self.send_whole(conn, call, ack, watched).await;
        }
        match self
            .send(conn, call.command("EVALSHA", sha), ack, watched)
            .await?
        {
            Err(e) if e.code() == Some("NOSCRIPT") => {
                self.reloaded = Some(Vec::new());
                self.send_whole(conn, call, ack, watched).await
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

    /// `call` on `conn` by `EVAL`, its script's whole text. Once the server has answered, it has
    /// the script cached (also when the script itself failed), so after a NOSCRIPT the script
    /// goes by SHA-1 again.
    async fn send_whole<C: ConnectionLike + Send>(
        &mut self,
        conn: &mut C,
        call: &Call,
        ack: bool,
        watched: bool,
    ) -> Result<redis::RedisResult<(Value, Acked)>, Primary> {
        let sent = self
            .send(conn, call.command("EVAL", call.script.text()), ack, watched)
            .await;
        // An error reply is the server's answer too (a script that failed at run time was
        // cached before it ran); a connection's failure is not.
        let answered = match &sent {
            Ok(Ok(_)) => true,
            Ok(Err(e)) => e.code().is_some(),
            Err(_) => false,
        };
        if let (true, Some(reloaded)) = (answered, self.reloaded.as_mut()) {
            if !reloaded.contains(&call.script.sha()) {
                reloaded.push(call.script.sha());
            }
        }
        sent
    }

    /// One `EVAL`/`EVALSHA` (`cmd`), with `WAIT`/`WAITAOF` pipelined behind it when `ack`
    /// and `--acks`/`--fsync` ask for it: one round trip either way.
    pub(super) async fn send<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
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
                self.router.watched(attempt).await?
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
    pub(super) fn ask_again(&self, e: &redis::RedisError, started: std::time::Instant) -> bool {
        self.router.connector.is_cluster()
            && e.is_timeout()
            && started.elapsed() + self.router.connector.reply_timeout() <= self.timeout
    }

    /// [`Self::send`], one attempt of `cmd` (the `EVAL`/`EVALSHA`).
    pub(super) async fn send_once<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
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

    /// Whether writes must be acknowledged (`--acks`, `--fsync`).
    pub(super) fn acking(&self) -> bool {
        self.acks > 0 || self.fsync
    }

    /// How long `WAIT`/`WAITAOF` may block: two thirds of the longest a reply may take (the
    /// request timeout; a quarter of it in a cluster), so that it answers before the reply
    /// timeout fires (redis-rs's own default would be 500 ms).
    fn ack_wait_ms(&self) -> u64 {
        (self.router.connector.reply_timeout().as_millis() * 2 / 3).max(1) as u64
    }

    /// `WAIT acks ms`, or `WAITAOF 1 acks ms` with `--fsync`: blocks until that many replicas
    /// (and the server's own disk) have this connection's writes so far, the script just run.
    pub(super) fn ack_cmd(&self) -> redis::Cmd {
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
}

/// Whether the replicas acknowledged a write (always Ok when no acknowledgement was asked).
pub(super) type Acked = Result<(), LockError>;

/// How one `EVAL` failed: on a connection that was dropped under it, or otherwise.
pub(super) enum EvalError {
    Dropped(LockError),
    Other(LockError),
}

impl EvalError {
    pub(super) fn into_error(self) -> LockError {
        match self {
            EvalError::Dropped(e) | EvalError::Other(e) => e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::failure::Cause;
    use crate::lock::redis::ConnectOptions;
    use crate::lock::scripts::mock::{array, error_reply, MockConnection};
    use crate::lock::scripts::RENEW_EXCLUSIVE;
    use std::time::Duration;

    fn new_lock() -> RedisLock {
        let options = ConnectOptions::default();
        RedisLock::new("redis://127.0.0.1:6390", &options, Duration::from_secs(2)).unwrap()
    }

    fn call() -> Call {
        Call {
            script: &RENEW_EXCLUSIVE,
            keys: vec!["job".into()],
            args: vec!["v".into(), "1000".into()],
        }
    }

    fn run<T>(f: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
            .block_on(f)
    }

    /// `call` sent on `conn` as `lock` sends a lock script: its reply, and the verdict on
    /// the replicas' acknowledgement.
    fn send(
        lock: &mut RedisLock,
        conn: &mut MockConnection,
        ack: bool,
    ) -> redis::RedisResult<(Value, Acked)> {
        run(lock.send_script(conn, &call(), ack, false)).expect("not watched")
    }

    #[test]
    fn by_sha1_first_and_after_a_noscript_each_script_whole_once_then_by_sha1_again() {
        let mut lock = new_lock();
        let mut conn = MockConnection::answering([
            error_reply("NOSCRIPT No matching script"),
            Value::Int(5),
            Value::Int(0),
            Value::Int(1),
            Value::Int(1),
        ]);
        let (reply, acked) = send(&mut lock, &mut conn, false).unwrap();
        assert_eq!((reply, acked), (Value::Int(5), Ok(())));
        assert_eq!(conn.sent[0][..2], ["EVALSHA", RENEW_EXCLUSIVE.sha()]);
        assert_eq!(conn.sent[1][..2], ["EVAL", RENEW_EXCLUSIVE.text()]);
        assert_eq!(
            conn.sent[0][2..],
            conn.sent[1][2..],
            "the same KEYS and ARGV"
        );
        assert!(lock.evalsha);
        // The server has it again: by SHA-1 from then on.
        let (_, acked) = send(&mut lock, &mut conn, false).unwrap();
        assert_eq!(acked, Ok(()));
        assert_eq!(conn.sent.len(), 3);
        assert_eq!(conn.sent[2][..2], ["EVALSHA", RENEW_EXCLUSIVE.sha()]);
        // The server lost the others too: another script goes whole once (no NOSCRIPT round
        // trip), then by SHA-1.
        let release = Call {
            script: &crate::lock::scripts::RELEASE_EXCLUSIVE,
            ..call()
        };
        for _ in 0..2 {
            let sent = run(lock.send_script(&mut conn, &release, false, false));
            let (_, acked) = sent.expect("not watched").unwrap();
            assert_eq!(acked, Ok(()));
        }
        assert_eq!(conn.sent.len(), 5);
        assert_eq!(conn.sent[3][0], "EVAL");
        assert_eq!(conn.sent[4][0], "EVALSHA");
    }

    #[test]
    fn a_refused_evalsha_falls_back_to_eval_and_other_errors_do_not() {
        let mut lock = new_lock();
        let refused = error_reply("NOPERM User u has no permissions to run the 'evalsha' command");
        let mut conn = MockConnection::answering([refused, Value::Int(0)]);
        assert_eq!(send(&mut lock, &mut conn, false).unwrap().0, Value::Int(0));
        assert_eq!(conn.sent[1][0], "EVAL");
        assert!(!lock.evalsha);

        let mut lock = new_lock();
        let busy = error_reply("BUSY Redis is busy running a script");
        let mut conn = MockConnection::answering([busy]);
        let e = send(&mut lock, &mut conn, false).unwrap_err();
        assert_eq!(e.code(), Some("BUSY"));
        assert_eq!(conn.sent.len(), 1, "sent once");
        assert!(lock.evalsha);
    }

    #[test]
    fn with_acks_the_wait_rides_behind_the_whole_text_in_one_round_trip() {
        let mut lock = new_lock().with_acks(2, false);
        let mut conn = MockConnection::answering([Value::Int(7), Value::Int(2)]);
        let (reply, acked) = send(&mut lock, &mut conn, true).unwrap();
        assert_eq!((reply, acked), (Value::Int(7), Ok(())));
        assert_eq!(
            conn.sent[0][0], "EVAL",
            "no EVALSHA: a NOSCRIPT would waste the WAIT"
        );
        assert_eq!(conn.sent[1][..2], ["WAIT", "2"]);
        // Too few replicas: the script's reply, and a verdict that it may be lost.
        let mut conn = MockConnection::answering([Value::Int(7), Value::Int(1)]);
        let (reply, acked) = send(&mut lock, &mut conn, true).unwrap();
        assert_eq!(reply, Value::Int(7));
        let e = acked.unwrap_err();
        assert!(
            matches!(
                e.kind,
                Kind::Unavailable(Cause::NotAcked {
                    got: 1,
                    want: 2,
                    ..
                })
            ),
            "{e:?}"
        );
        // Not asked for this request: no WAIT at all.
        let mut conn = MockConnection::answering([Value::Int(7)]);
        let (_, acked) = send(&mut lock, &mut conn, false).unwrap();
        assert_eq!(acked, Ok(()));
        assert_eq!(conn.sent.len(), 1);
    }

    #[test]
    fn with_fsync_waitaof_counts_the_servers_own_disk() {
        let mut lock = new_lock().with_acks(1, true);
        let replies = |local, replicas| {
            [
                Value::Int(1),
                array([Value::Int(local), Value::Int(replicas)]),
            ]
        };
        let mut conn = MockConnection::answering(replies(1, 1));
        assert_eq!(send(&mut lock, &mut conn, true).unwrap().1, Ok(()));
        assert_eq!(conn.sent[1][..3], ["WAITAOF", "1", "1"]);
        let mut conn = MockConnection::answering(replies(0, 1));
        let e = send(&mut lock, &mut conn, true).unwrap().1.unwrap_err();
        assert!(
            matches!(e.kind, Kind::Unavailable(Cause::NotSynced { .. })),
            "{e:?}"
        );
        let mut conn = MockConnection::answering([Value::Int(1), Value::Int(1)]);
        let e = send(&mut lock, &mut conn, true).unwrap().1.unwrap_err();
        assert!(
            matches!(e.kind, Kind::NotRedis(NotRedis::Reply(_))),
            "{e:?}"
        );
    }

    #[test]
    fn the_script_s_error_comes_back_beside_the_wait() {
        let mut lock = new_lock().with_acks(1, false);
        let oom = error_reply("OOM command not allowed when used memory > 'maxmemory'");
        let mut conn = MockConnection::answering([oom, Value::Int(1)]);
        let e = send(&mut lock, &mut conn, true).unwrap_err();
        assert_eq!(e.code(), Some("OOM"));
    }
}
