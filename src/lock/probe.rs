//! Asking a server about itself, for `lockrun doctor`: a command, or several in one round trip,
//! with the lock's own timeouts and error reporting ([`RedisLock::request`]), but telling apart
//! the answers a doctor reports as findings (a command this user may not run, one the server
//! does not offer) from the failures that end it (the server is unavailable, or refuses us
//! altogether). And the one write doctor makes: a probe lock taken and released through the
//! same [`LockService`] calls a run makes ([`RedisLock::probe_lock`]).

use super::failure::{Cause, ErrorReply, Kind, Misuse};
use super::keys::Keys;
use super::redis::RedisLock;
use super::{Acquire, Holder, LockError, LockService, LockSpec, Release};
use redis::Value;
use std::time::Duration;

/// What one probing command got back.
#[derive(Debug)]
pub enum ProbeReply {
    /// The server's reply.
    Replied(Value),
    /// The ACL does not let this user run it (NOPERM): the check that needed it cannot be made.
    Denied,
    /// The server answered with an error: an unknown (renamed, disabled, too new) command, wrong
    /// arguments for this version. Its words are scrubbed of credentials.
    Error(ErrorReply),
}

impl RedisLock {
    /// One command, at `at` on a Cluster (see [`RedisLock::request`]). `Err` only when the
    /// server cannot be asked at all: unavailable, or it refused lockrun (authentication).
    pub async fn probe(
        &mut self,
        cmd: redis::Cmd,
        at: Option<(&str, u16)>,
    ) -> Result<ProbeReply, LockError> {
        probed(self.request(cmd, at).await)
    }

    /// Several commands in one round trip, each answered as [`Self::probe`] would answer it.
    /// `Err` only when the server cannot be asked at all, or refuses lockrun (authentication).
    pub async fn probe_all(
        &mut self,
        cmds: &[redis::Cmd],
        at: Option<(&str, u16)>,
    ) -> Result<Vec<ProbeReply>, LockError> {
        let replies = match self.request_all(cmds, at).await {
            Ok(replies) => replies,
            // The pipeline as a whole was answered with an error: each command was.
            Err(LockError {
                kind: Kind::Misuse(Misuse::Answered(answer)),
                ..
            }) => {
                return Ok(cmds
                    .iter()
                    .map(|_| ProbeReply::Error(answer.clone()))
                    .collect())
            }
            Err(e) => return Err(e),
        };
        replies.into_iter().map(probed).collect()
    }

    /// Whether the URL is a Redis Cluster's (`redis+cluster://`).
    pub fn probes_cluster(&self) -> bool {
        self.is_cluster()
    }

    /// How long one request may take (connecting, or one reply): `--node-timeout`.
    pub fn request_timeout(&self) -> Duration {
        self.timeout
    }

    /// Takes and releases `key` as a run does (the same [`LockService`] calls, no history),
    /// twice: once as the first run on this server would (scripts by `EVALSHA`, by `EVAL` after
    /// a `NOSCRIPT`), then the other way: by `EVAL` where the first went by `EVALSHA` (a server
    /// that lost its scripts: restarted, failed over), by `EVALSHA` where the first fell back
    /// (the scripts are cached now). Then deletes the key's fencing counter, the one key a run
    /// leaves behind, and the key itself should a release have failed: it is doctor's own.
    pub async fn probe_lock(&mut self, key: &str) -> LockProbe {
        // Long enough for the slowest cycle the request timeout allows (NOSCRIPT, EVAL,
        // release), short enough to be gone soon should the release not arrive.
        let spec = LockSpec::new(key, (self.timeout * 4).max(Duration::from_secs(10)));
        let holder = Holder::new(std::ffi::OsStr::new("lockrun-doctor"));
        self.by_sha_from_now(true);
        let first = self.cycle(&spec, &holder).await.map(|()| self.all_by_sha());
        let second = match first {
            Err(_) => None,
            Ok(by_sha) => {
                self.by_sha_from_now(!by_sha);
                let second = self.cycle(&spec, &holder).await.map(|()| self.all_by_sha());
                Some((!by_sha, second))
            }
        };
        // A run starts afresh: leave the flags as one would find them.
        self.by_sha_from_now(true);
        let keys = Keys::of(key);
        let mut del = redis::cmd("DEL");
        del.arg(key).arg(&keys.fence);
        let cleanup = match self.request(del, None).await {
            Ok(_) => Ok(()),
            Err(e) => Err(e.to_string()),
        };
        LockProbe {
            key: key.to_string(),
            first: first.map_err(|e| e.to_string()),
            second: second.map(|(sha, r)| (sha, r.map_err(|e| e.to_string()))),
            cleanup,
            left: vec![key.to_string(), keys.fence],
        }
    }

    /// Scripts go by `EVALSHA` first from now on (`false`: by `EVAL` only), as for a new
    /// process.
    fn by_sha_from_now(&mut self, by_sha: bool) {
        self.evalsha = by_sha;
        self.reloaded = None;
    }

    /// Whether every script since [`Self::by_sha_from_now`] went by `EVALSHA` alone: none met
    /// `NOSCRIPT`, and `EVALSHA` was not refused.
    fn all_by_sha(&self) -> bool {
        self.evalsha && self.reloaded.is_none()
    }

    /// One acquire and release of the probe key.
    async fn cycle(&mut self, spec: &LockSpec, holder: &Holder) -> Result<(), LockError> {
        let lease = match self.acquire(spec, holder, false).await? {
            Acquire::Acquired(lease) => lease,
            Acquire::Held { .. } | Acquire::Passed { .. } | Acquire::TickEnded { .. } => {
                return Err(self.error(Kind::Misuse(Misuse::ProbeKeyHeld {
                    key: spec.key.clone(),
                })))
            }
        };
        match self.release(spec, &lease, Duration::ZERO, None).await? {
            Release::Deleted | Release::Kept(_) => Ok(()),
            Release::NotOwner => {
                Err(self.error(Kind::Unavailable(Cause::ProbeLost { ttl: spec.ttl })))
            }
        }
    }
}

/// What [`RedisLock::probe_lock`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockProbe {
    pub key: String,
    /// The first cycle, as a run would go: `Ok(true)` when both scripts went by `EVALSHA`,
    /// `Ok(false)` when they fell back to `EVAL` (`NOSCRIPT`, or `EVALSHA` refused); `Err`: what
    /// a run would have said.
    pub first: Result<bool, String>,
    /// The second cycle, after a first that worked: whether it started by `EVALSHA` (`false`:
    /// by `EVAL` from the start), and as `first` how it went.
    pub second: Option<(bool, Result<bool, String>)>,
    /// Deleting what the cycles leave (the fencing counter): `Err` says why it was not.
    pub cleanup: Result<(), String>,
    /// The keys the cycles may have left, should the cleanup have failed.
    pub left: Vec<String>,
}

/// One reply as [`RedisLock::probe`] tells it.
fn probed(reply: Result<Value, LockError>) -> Result<ProbeReply, LockError> {
    match reply {
        Ok(v) => Ok(ProbeReply::Replied(v)),
        Err(LockError {
            kind: Kind::Denied(_),
            ..
        }) => Ok(ProbeReply::Denied),
        Err(LockError {
            kind: Kind::Misuse(Misuse::Answered(answer)),
            ..
        }) => Ok(ProbeReply::Error(answer)),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::failure::{Auth, Denied, NotRedis, On};

    #[test]
    fn a_denied_command_is_not_a_refused_connection() {
        let denied = Kind::Denied(Denied::Command {
            command: Some("CONFIG|GET".into()),
            on: On::Command,
            words: "this user has no permissions to run the 'config|get' command".into(),
        });
        assert!(matches!(
            probed(Err(LockError::on("unix:///s", denied))),
            Ok(ProbeReply::Denied)
        ));
        for refused in [Kind::Auth(Auth::Wrong), Kind::NotRedis(NotRedis::Protocol)] {
            assert!(probed(Err(LockError::on("h", refused))).is_err());
        }
        let answer = ErrorReply {
            code: Some("ERR".into()),
            unknown: true,
            words: "ERR unknown command 'CONFIG'".into(),
        };
        let answered = LockError::on("h", Kind::Misuse(Misuse::Answered(answer.clone())));
        assert_eq!(
            answered.to_string(),
            "Redis at h answered: ERR unknown command 'CONFIG'"
        );
        assert!(matches!(probed(Err(answered)), Ok(ProbeReply::Error(a)) if a == answer));
    }
}
