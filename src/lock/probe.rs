//! Asking a server about itself, for `lockrun doctor`: one command at a time, with the lock's
//! own timeouts and error reporting ([`RedisLock::request`]), but telling apart the answers a
//! doctor reports as findings (a command this user may not run, one the server does not offer)
//! from the failures that end it (the server is unavailable, or refuses us altogether).

use super::redis::RedisLock;
use super::LockError;
use redis::Value;

/// What one probing command got back.
#[derive(Debug)]
pub enum Probe {
    Answer(Value),
    /// The ACL does not let this user run it (NOPERM): the check that needed it cannot be made.
    Denied,
    /// The server answered with an error: an unknown (renamed, disabled, too new) command, wrong
    /// arguments for this version. The server's words, credentials scrubbed.
    Error(String),
}

impl RedisLock {
    /// One command, at `at` on a Cluster (see [`RedisLock::request`]). `Err` only when the
    /// server cannot be asked at all: unavailable, or it refused lockrun (authentication).
    pub async fn probe(
        &mut self,
        cmd: redis::Cmd,
        at: Option<(&str, u16)>,
    ) -> Result<Probe, LockError> {
        match self.request(cmd, at).await {
            Ok(v) => Ok(Probe::Answer(v)),
            Err(LockError::Refused(m)) if is_denied(&m) => Ok(Probe::Denied),
            Err(LockError::Misuse(m)) => Ok(Probe::Error(server_words(&m))),
            Err(e) => Err(e),
        }
    }

    /// Whether the URL is a Redis Cluster's (`redis+cluster://`).
    pub fn probes_cluster(&self) -> bool {
        self.is_cluster()
    }
}

/// A refusal of one command by the ACL, as `errors::refusal` words it (Redis and Valkey), as
/// opposed to a refusal of the connection (authentication) or of the protocol.
fn is_denied(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    lower.contains("no permissions") || lower.contains("may not run")
}

/// `Redis at <url> answered: <error>` → `<error>`.
fn server_words(message: &str) -> String {
    message
        .split_once(" answered: ")
        .map_or(message, |(_, e)| e)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_denied_command_is_not_a_refused_connection() {
        assert!(is_denied(
            "Redis at unix:///s refused lockrun: this user has no permissions to run the 'config|get' command; grant the user what lockrun needs (README: ACL permissions)"
        ));
        assert!(!is_denied(
            "Redis at redis://***@h:1 refused lockrun: authentication failed: wrong password or user name"
        ));
        assert!(!is_denied(
            "Redis at h refused lockrun: the server does not speak the Redis protocol (is this the Redis port?)"
        ));
        assert_eq!(
            server_words("Redis at h answered: ERR unknown command 'CONFIG'"),
            "ERR unknown command 'CONFIG'"
        );
    }
}
