//! The message of a lock error: what `Display` says for each kind, in words a user can act
//! on (what to grant, what to fix, which server). Separate from the kinds themselves, which
//! the run and the operators' commands decide by and never read back from the words.

use super::{
    At, Auth, Cause, Denied, Endless, ErrorReply, Kind, Limit, LockError, Misuse, NotRedis, On,
    Unsupported,
};
use crate::duration::Human;
use std::fmt;

impl fmt::Display for ErrorReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.words)
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Limit::Files => "this process may open no more files or sockets (EMFILE, Too many open files): raise its limit (ulimit -n)",
            Limit::SystemFiles => "the system may open no more files (ENFILE): raise fs.file-max or close files",
            Limit::Memory => "out of memory for a socket (ENOMEM/ENOBUFS)",
        })
    }
}

/// The end of every message about an ACL denial.
const GRANT: &str = "grant the user what lockrun needs (docs/availability.md: ACL permissions)";

/// Why the server refused lockrun, after "refused lockrun: ".
fn refusal(f: &mut fmt::Formatter<'_>, kind: &Kind) -> fmt::Result {
    match kind {
        Kind::Auth(Auth::Missing) => f.write_str("authentication required: give a password in the URL, LOCKRUN_REDIS_PASSWORD or --redis-password-file"),
        Kind::Auth(Auth::Wrong) => f.write_str("authentication failed: wrong password or user name"),
        Kind::Denied(Denied::ScriptPublish) => write!(f, "this user may not run PUBLISH to lockrun:wake:{{KEY}} (&lockrun:wake:*), which lockrun's scripts need; {GRANT}"),
        Kind::Denied(Denied::ScriptKey) => write!(f, "this user may not run a key lockrun's scripts use (~KEY ~lockrun:*); {GRANT}"),
        Kind::Denied(Denied::ScriptCommand(Some(c))) => write!(f, "this user may not run {c}, a command lockrun's scripts call; {GRANT}"),
        Kind::Denied(Denied::ScriptCommand(None)) => write!(f, "this user may not run a command lockrun's scripts call; {GRANT}"),
        Kind::Denied(Denied::Command { on, words, .. }) => {
            let needs = match on {
                On::Channel => " (--wait subscribes to lockrun:wake:{KEY}: &lockrun:wake:*)",
                On::Key => " (the lock key and lockrun's own keys: ~KEY ~lockrun:*)",
                On::Command => "",
            };
            write!(f, "{words}{needs}; {GRANT}")
        }
        Kind::Unsupported(Unsupported::Database) => f.write_str("the server has no database of the URL's number (it has as many as its `databases` setting, 16 by default: 0 to 15)"),
        Kind::Unsupported(Unsupported::Eval) => f.write_str("the server does not offer EVAL (disabled with rename-command?); lockrun runs every lock operation as a Lua script"),
        Kind::Unsupported(Unsupported::ScriptCommand(c)) => write!(
            f,
            "the server does not offer {}, which lockrun's scripts call (disabled with rename-command?)",
            c.as_deref().unwrap_or("a command")
        ),
        Kind::Unsupported(Unsupported::WaitAof) => f.write_str("--fsync needs WAITAOF (Redis 7.2 or later, Valkey 8 or later)"),
        Kind::Unsupported(Unsupported::Wait) => f.write_str("--acks needs WAIT, which this server does not offer"),
        Kind::Unsupported(Unsupported::AppendOnly) => f.write_str("--fsync needs the server's append-only file (appendonly yes)"),
        Kind::NotRedis(NotRedis::Protocol) => f.write_str("the server does not speak the Redis protocol (is this the Redis port?)"),
        // Said in messages of their own (see `Display`).
        Kind::Unsupported(Unsupported::Service(_))
        | Kind::NotRedis(_)
        | Kind::Unavailable(_)
        | Kind::Misuse(_)
        | Kind::Local(_)
        | Kind::NoMajority(_) => Ok(()),
    }
}

const TLS_HINT: &str =
    "; is the server's port TLS-enabled? (rediss:// needs TLS; use redis:// for a plain-text port)";

/// Why the server is unavailable, after "unavailable: ".
fn cause(f: &mut fmt::Formatter<'_>, cause: &Cause, server: &str) -> fmt::Result {
    let hint = |tls: bool| if tls { TLS_HINT } else { "" };
    match cause {
        Cause::Timeout {
            missing,
            within,
            tls,
        } => write!(f, "{missing} within {within:?}{}", hint(*tls)),
        Cause::NodeTimeout(limit) => write!(f, "no reply within {} (--node-timeout)", Human(*limit)),
        Cause::Server { words, tls, .. } => write!(f, "{words}{}", hint(*tls)),
        Cause::SentinelsSplit {
            count,
            service,
            named,
        } => write!(
            f,
            "no majority of the {count} sentinels of {server} names one primary for '{service}' \
             (they name {named}): a failover under way, sentinels cut off, or sentinels of \
             another set listed under the same name"
        ),
        Cause::SentinelsFailed { service, words } => write!(
            f,
            "no sentinel of {server} named a primary for '{service}': {words}"
        ),
        Cause::SentinelsSilent(budget) => {
            write!(f, "no sentinel of {server} answered within {budget:?}")
        }
        Cause::NotAcked {
            got,
            want,
            within_ms,
        } => write!(
            f,
            "only {got} of {want} replicas acknowledged the lock within {within_ms}ms (--acks)"
        ),
        Cause::NotSynced { within_ms } => write!(
            f,
            "the server did not fsync the lock within {within_ms}ms (--fsync)"
        ),
        Cause::SlowGrant { took, ttl, drift } => write!(
            f,
            "the Redis masters took {} to grant the lock, too long for its TTL of {} (drift allowance {}); given back",
            Human(*took),
            Human(*ttl),
            Human(*drift)
        ),
        Cause::ProbeLost { ttl } => write!(
            f,
            "Redis at {server} lost the probe lock before its release, within its TTL of {ttl:?} \
             (evicted? a failover?)"
        ),
        Cause::NoAnswer => f.write_str("no answer"),
    }
}

fn misuse(f: &mut fmt::Formatter<'_>, misuse: &Misuse, server: &str) -> fmt::Result {
    match misuse {
        Misuse::Foreign { key, found } => write!(
            f,
            "key '{key}' holds a Redis {found}, not a lock; choose another key"
        ),
        Misuse::ForeignSemaphore { key } => write!(
            f,
            "key '{key}' is a Redis sorted set that is not a lockrun semaphore: lockrun leaves it alone; choose another key"
        ),
        Misuse::IsSemaphore { key } => write!(
            f,
            "key '{key}' is a semaphore (used with --limit); use the same --limit for every lockrun on it"
        ),
        Misuse::IsPlainLock { key } => write!(
            f,
            "key '{key}' is a plain lock (used without --limit); a semaphore needs a key of its own"
        ),
        Misuse::SpoiledFence { helper } => write!(
            f,
            "the fencing counter '{helper}' is not a whole number (changed by hand?); delete it: \
             fencing numbers then resume above the server's clock, so they still increase"
        ),
        Misuse::SpoiledQueue { helper } => write!(
            f,
            "the waiter queue key '{helper}' is not a sorted set (changed by hand?); delete it"
        ),
        Misuse::SpoiledShared { helper } => write!(
            f,
            "the shared holders' key '{helper}' is not a lockrun sorted set (changed by hand?); delete it"
        ),
        Misuse::IsShared { key } => write!(
            f,
            "key '{key}' is held in shared mode (used with --shared); --limit and --standby need a key of their own"
        ),
        Misuse::NoUpgrade { key } => write!(
            f,
            "key '{key}' is held in shared mode by an enclosing lockrun of this job: a nested \
             lockrun of it without --shared would wait for its own holder (no upgrade); take \
             it exclusively outside, or add --shared inside"
        ),
        Misuse::SpoiledTick { helper } => write!(
            f,
            "the --standby tick record '{helper}' is not one lockrun wrote (changed by hand?); \
             delete it"
        ),
        Misuse::SpoiledHistory { key, helper } => write!(
            f,
            "the history key of '{key}' ({helper}) is not a stream: changed by hand?"
        ),
        Misuse::NoSharedSlot { key } => write!(
            f,
            "key '{key}' has a '}}' but no {{hash tag}}: on a Redis Cluster its fencing counter and queue \
             cannot share its slot; use a name without '}}', or one with a {{hash tag}}"
        ),
        Misuse::ForceForeignValue { key } => write!(
            f,
            "key '{key}' holds a value lockrun did not write, not a lockrun lock: release \
             --force deletes only lockrun's locks and semaphores (redis-cli GET it to see \
             whose it is)"
        ),
        Misuse::ForceForeignSemaphore { key } => write!(
            f,
            "key '{key}' is a Redis sorted set that is not a lockrun semaphore: release \
             --force deletes only lockrun's locks and semaphores"
        ),
        Misuse::ForceNotALock { key, found } => write!(
            f,
            "key '{key}' is a Redis {found}, not a lock: lockrun leaves it alone"
        ),
        Misuse::NotALock { key, found } => write!(f, "key '{key}' is a Redis {found}, not a lock"),
        Misuse::ProbeKeyHeld { key } => {
            write!(f, "the probe key {key} is held by someone else")
        }
        Misuse::Answered(answer) => write!(f, "Redis at {server} answered: {answer}"),
    }
}

impl fmt::Display for LockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let server = self.server();
        match (&self.kind, &self.at) {
            (Kind::Unsupported(Unsupported::Service(service)), _) => write!(
                f,
                "the sentinels of {server} know no primary named '{service}' (the name in `sentinel monitor <name>`)"
            ),
            (Kind::NotRedis(NotRedis::Sentinel), _) => write!(
                f,
                "Redis at {server} is a Sentinel, not a data node: give the sentinels as \
                 redis+sentinel://HOST:PORT[,HOST:PORT…]/<service name>"
            ),
            (Kind::NotRedis(NotRedis::Answered(words)), _) => write!(
                f,
                "Redis at {server} is not a usable Redis for lockrun: it answered the lock script \
                 with '{words}'"
            ),
            (Kind::NotRedis(NotRedis::EndlessScan(endless)), _) => {
                write!(f, "Redis at {server} is not a usable Redis for lockrun: its SCAN ")?;
                match endless {
                    Endless::Cycle { cursor, calls } => write!(
                        f,
                        "cursor came back to {cursor} at call {calls}, so the scan would never end"
                    ),
                    Endless::Calls(calls) => write!(
                        f,
                        "did not end within {calls} calls, the most lockrun makes to one \
                         server (at COUNT 1000, about {} million keys): a cursor that never \
                         returns to 0?",
                        calls / 1000
                    ),
                    Endless::Time(limit) => write!(
                        f,
                        "did not end within {}, the most lockrun allows a listing",
                        Human(*limit)
                    ),
                }
            }
            (Kind::NotRedis(NotRedis::Reply(reply)), _) => write!(
                f,
                "the server is not a usable Redis for lockrun: its reply to the lock script was {reply}"
            ),
            (kind, At::Sentinels(_)) if self.is_refusal() => {
                write!(f, "the sentinels of {server} refused lockrun: ")?;
                refusal(f, kind)?;
                f.write_str(" (their password: LOCKRUN_SENTINEL_PASSWORD or --sentinel-password-file)")
            }
            (Kind::Auth(_) | Kind::Denied(_) | Kind::Unsupported(_) | Kind::NotRedis(_), _) => {
                write!(f, "Redis at {server} refused lockrun: ")?;
                refusal(f, &self.kind)
            }
            (
                Kind::Unavailable(
                    c @ (Cause::SlowGrant { .. } | Cause::ProbeLost { .. } | Cause::NoAnswer),
                ),
                _,
            ) => cause(f, c, server),
            (Kind::Unavailable(c), _) => {
                write!(f, "Redis at {server} unavailable: ")?;
                cause(f, c, server)
            }
            (Kind::Misuse(m), _) => misuse(f, m, server),
            (Kind::Local(limit), _) => write!(f, "cannot reach Redis at {server}: {limit}"),
            (Kind::NoMajority(m), _) => {
                write!(
                    f,
                    "no majority of the {} Redis masters {} ({} did, {} needed)",
                    m.masters, m.what, m.got, m.needed
                )?;
                match &m.worst {
                    Some(worst) => write!(f, ": {worst}"),
                    None => Ok(()),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_refusal_names_the_server_or_its_sentinels() {
        let auth = Kind::Auth(Auth::Wrong);
        assert_eq!(
            LockError::on("redis://***@h:1", auth.clone()).to_string(),
            "Redis at redis://***@h:1 refused lockrun: authentication failed: wrong password or user name"
        );
        let sentinels = LockError::new(auth, At::Sentinels("redis+sentinel://s/m".into()));
        assert_eq!(
            sentinels.to_string(),
            "the sentinels of redis+sentinel://s/m refused lockrun: authentication failed: wrong \
             password or user name (their password: LOCKRUN_SENTINEL_PASSWORD or \
             --sentinel-password-file)"
        );
        assert!(sentinels.is_refusal() && !sentinels.is_outage());
    }

    #[test]
    fn an_endless_scan_says_how_it_showed() {
        let said = |e| {
            let e = LockError::on("redis://h:1", Kind::NotRedis(NotRedis::EndlessScan(e)));
            assert_eq!(e.exit_code(), crate::exit_codes::ExitCode::Unavailable);
            e.to_string()
        };
        let prefix = "Redis at redis://h:1 is not a usable Redis for lockrun: its SCAN ";
        assert_eq!(
            said(Endless::Cycle {
                cursor: "5".into(),
                calls: 3
            }),
            format!("{prefix}cursor came back to 5 at call 3, so the scan would never end")
        );
        assert_eq!(
            said(Endless::Calls(250_000)),
            format!(
                "{prefix}did not end within 250000 calls, the most lockrun makes to one server \
                 (at COUNT 1000, about 250 million keys): a cursor that never returns to 0?"
            )
        );
        assert_eq!(
            said(Endless::Time(Duration::from_secs(600))),
            format!("{prefix}did not end within 10m, the most lockrun allows a listing")
        );
    }
}
