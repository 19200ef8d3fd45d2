//! Sending: one command or pipeline (the operators' reads), and one script by `EVALSHA` or
//! `EVAL`, with `WAIT`/`WAITAOF` pipelined behind it, retried where that is safe, and every
//! failure turned into what it means.

use super::{routing::Route, RedisLock};
use crate::lock::connect::{Conn, Primary};
use crate::lock::failure::{Kind, Misuse, NotRedis};
use crate::lock::redis_errors::{self, is_dropped, is_transient, refusal, Sent};
use crate::lock::scripts::{as_string, Call};
use crate::lock::LockError;
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
                self.link.forget();
                Err(self.timed_out("no reply"))
            }
        }
    }

    /// What an error reply to [`Self::request`] means: the server refused lockrun, is gone or
    /// is in trouble (the connection is dropped), or it answered this command with an error.
    pub(super) fn request_failed(&mut self, e: &redis::RedisError) -> LockError {
        if refusal(e, None).is_some() || is_dropped(e) || is_transient(e) {
            self.link.forget();
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
                self.link.forget();
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
    pub(super) async fn eval_once(
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
                    self.link.forget();
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
                self.link.forget();
                Err(Failed::Other(
                    self.error(Kind::NotRedis(NotRedis::Sentinel)),
                ))
            }
            Err(e) if refusal(&e, Some(sent)).is_some() => {
                self.link.forget();
                Err(Failed::Other(self.failure(&e, Some(sent))))
            }
            Err(e) if is_dropped(&e) => {
                self.link.forget();
                Err(Failed::Dropped(self.unavailable(&e)))
            }
            Err(e) if is_transient(&e) => {
                self.link.forget();
                Err(Failed::Other(self.unavailable(&e)))
            }
            // Every error a script of lockrun's can meet on a working server is one of the
            // above (refusals, transient trouble): anything else means the server cannot run
            // lockrun, whatever it is. Said with the server's own words, never the request's.
            Err(e) => {
                self.link.forget();
                let words = redis_errors::server_words(&e);
                Err(Failed::Other(
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
}

impl RedisLock {
    /// `script` on `conn`, by `EVALSHA` or `EVAL` (see [`Self::send`]); `watched`: behind
    /// Sentinel, `Err` with the primary the sentinels name instead, if they name another one
    /// while the reply is late (see [`Self::watched`]).
    pub(super) async fn send_script(
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
    pub(super) async fn send(
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
    pub(super) fn ask_again(&self, e: &redis::RedisError, started: std::time::Instant) -> bool {
        self.connector.is_cluster()
            && e.is_timeout()
            && started.elapsed() + self.connector.reply_timeout() <= self.timeout
    }

    /// [`Self::send`], one attempt of `cmd` (the `EVAL`/`EVALSHA`).
    pub(super) async fn send_once(
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

/// Whether the replicas acknowledged a write (always Ok when no acknowledgement was asked).
pub(super) type Acked = Result<(), LockError>;

/// How one `EVAL` failed: on a connection that was dropped under it, or otherwise.
pub(super) enum Failed {
    Dropped(LockError),
    Other(LockError),
}

impl Failed {
    pub(super) fn into_error(self) -> LockError {
        match self {
            Failed::Dropped(e) | Failed::Other(e) => e,
        }
    }
}
