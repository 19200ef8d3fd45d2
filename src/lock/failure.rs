//! Why a lock request failed, as data: what kind of failure it is (what the run and the
//! operators' commands decide by), the server it concerns as users may see it, and whatever
//! words its message needs. `Display` renders the message (`message.rs`); nothing reads it
//! back. (`redis_errors.rs` decides the kind of a redis-rs error; this module only says it.)

use std::time::Duration;

/// Why a request failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockError {
    pub kind: Kind,
    /// Whom it concerns, as shown to users (credentials replaced).
    pub at: At,
}

/// Which server(s) an error concerns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum At {
    /// No one server: a verdict over several, or the answer of none.
    Nowhere,
    /// The server of a URL (its data node, or the primary its sentinels name).
    Server(String),
    /// The sentinels of a URL, which answered for it.
    Sentinels(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The server wants a password that was not given, or refused the one given.
    Auth(Auth),
    /// The ACL does not let this user do something lockrun needs.
    Denied(Denied),
    /// The server lacks something lockrun or its options need.
    Unsupported(Unsupported),
    /// Whatever answered is no Redis that lockrun can use.
    NotRedis(NotRedis),
    /// The server could not be asked, or cannot answer for now: the request's outcome is
    /// unknown, and waiting may fix it.
    Unavailable(Cause),
    /// The server answered, but the key cannot be used the way we asked.
    Misuse(Misuse),
    /// A limit of this machine, not the server, stopped the request.
    Local(Limit),
    /// Several masters (Redlock): no majority of them did what was asked.
    NoMajority(Box<NoMajority>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Auth {
    /// No password given, and the server wants one.
    Missing,
    /// A wrong password or user name.
    Wrong,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Denied {
    /// A command inside one of lockrun's scripts (upper-case), when the server or the script's
    /// line says which.
    ScriptCommand(Option<String>),
    /// Publishing a release hint from a script (the channel, or the command).
    ScriptPublish,
    /// One of the keys a script uses.
    ScriptKey,
    /// A command lockrun sent itself: the command when the server names it, what the denial
    /// concerns, and the server's words.
    Command {
        command: Option<String>,
        on: On,
        words: String,
    },
}

/// What an ACL denial of a command concerns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum On {
    Command,
    Key,
    Channel,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unsupported {
    /// No EVAL (renamed away, disabled).
    Eval,
    /// A command one of lockrun's scripts calls, when the script's line says which.
    ScriptCommand(Option<String>),
    /// `--acks` needs WAIT.
    Wait,
    /// `--fsync` needs WAITAOF.
    WaitAof,
    /// `--fsync` needs the server's append-only file.
    AppendOnly,
    /// The URL's database number.
    Database,
    /// The sentinels know no primary of the URL's service name.
    Service(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotRedis {
    /// Not the Redis protocol (another service's port).
    Protocol,
    /// A Sentinel's port, given as a data node's.
    Sentinel,
    /// An error reply that no working server gives lockrun's scripts: the server's words.
    Answered(String),
    /// A reply that none of lockrun's scripts gives (a proxy or a fake answering +OK to
    /// everything): the reply, shortened.
    Reply(String),
    /// A `SCAN` whose cursor does not come back to 0 (`list`).
    EndlessScan(Endless),
}

/// How a `SCAN` showed that it would not end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endless {
    /// Its cursor came back to one it had given before (shortened), at this call.
    Cycle { cursor: String, calls: u64 },
    /// Not done after this many calls.
    Calls(u64),
    /// Not done after this long.
    Time(Duration),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cause {
    /// No connection or reply within the request timeout: what was missing ("no reply", ...).
    /// `tls`: the URL is rediss://, and a plain-text port would look like this.
    Timeout {
        missing: &'static str,
        within: Duration,
        tls: bool,
    },
    /// One Redlock master did not answer within `--node-timeout`.
    NodeTimeout(Duration),
    /// The connection failed or the server is in trouble: which, and redis-rs's words.
    Server {
        trouble: Trouble,
        words: String,
        tls: bool,
    },
    /// No majority of the sentinels names one primary: how many sentinels, the service, and
    /// what they name.
    SentinelsSplit {
        count: usize,
        service: String,
        named: String,
    },
    /// No sentinel named a primary: the last one's error.
    SentinelsFailed { service: String, words: String },
    /// No sentinel answered within this long.
    SentinelsSilent(Duration),
    /// `--acks`: fewer replicas acknowledged the write than asked for.
    NotAcked { got: i64, want: u32, within_ms: u64 },
    /// `--fsync`: the server did not write the lock to its own disk.
    NotSynced { within_ms: u64 },
    /// The masters granted the lock too slowly for its TTL (Redlock); given back.
    SlowGrant {
        took: Duration,
        ttl: Duration,
        drift: Duration,
    },
    /// `doctor`'s probe lock was gone before its release, within its TTL.
    ProbeLost { ttl: Duration },
    /// No server answered (several masters, none of them with an error of its own).
    NoAnswer,
}

/// Why a connection or a request failed, as far as redis-rs tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trouble {
    /// The connection was refused (nothing listening, or the server refuses clients for now).
    Connect,
    /// The connection broke under the request (reset, closed, killed).
    Dropped,
    /// redis-rs's own timeout.
    Timeout,
    /// The server answered that it cannot serve for now (loading, busy, read-only replica,
    /// failover, full, cannot persist).
    Busy,
    /// Other I/O, or anything else.
    Other,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Misuse {
    /// Acquire: the key holds a Redis type that is no lock.
    Foreign { key: String, found: String },
    /// Acquire: a sorted set that is not a lockrun semaphore.
    ForeignSemaphore { key: String },
    /// Acquire without `--limit` of a semaphore.
    IsSemaphore { key: String },
    /// Acquire with `--limit` of a plain lock.
    IsPlainLock { key: String },
    /// The fencing counter is not a whole number.
    SpoiledFence { helper: String },
    /// A waiter queue key is not a sorted set.
    SpoiledQueue { helper: String },
    /// The tick record of `--standby` is not one lockrun wrote.
    SpoiledTick { helper: String },
    /// The set of a lock's shared holders is not one lockrun wrote.
    SpoiledShared { helper: String },
    /// A semaphore (`--limit`) or a tick (`--standby`) of a key held in shared mode.
    IsShared { key: String },
    /// A nested exclusive lockrun of a key an enclosing lockrun holds in shared mode.
    NoUpgrade { key: String },
    /// The history key is not a stream.
    SpoiledHistory { key: String, helper: String },
    /// On a Cluster, a key whose helper keys cannot share its slot.
    NoSharedSlot { key: String },
    /// `release --force` of a string lockrun did not write.
    ForceForeignValue { key: String },
    /// `release --force` of a sorted set that is not a lockrun semaphore.
    ForceForeignSemaphore { key: String },
    /// `release --force` of a key of another type.
    ForceNotALock { key: String, found: String },
    /// `status` of a key of another type.
    NotALock { key: String, found: String },
    /// `doctor`'s probe key is held by someone else.
    ProbeKeyHeld { key: String },
    /// The server answered a command with an error.
    Answered(ErrorReply),
}

/// A server's error reply to one command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorReply {
    /// Its code (`ERR`, `WRONGTYPE`, ...), when it has one.
    pub code: Option<String>,
    /// The server knows nothing by the name asked about: an unknown command or subcommand, a
    /// user or command `ACL DRYRUN` does not find.
    pub unknown: bool,
    /// redis-rs's words for it (credentials scrubbed).
    pub words: String,
}

/// Which limit of this machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// EMFILE: this process's descriptors.
    Files,
    /// ENFILE: the system's.
    SystemFiles,
    /// ENOMEM, ENOBUFS.
    Memory,
}

/// No majority of the masters did `what`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoMajority {
    /// What the majority did not do: "granted the lock", "released the lock", ...
    pub what: &'static str,
    pub masters: usize,
    pub got: usize,
    pub needed: usize,
    /// The failure that speaks for the rest (see `redlock::Tally::worst`).
    pub worst: Option<LockError>,
    /// The error counts as `worst` does when that is a refusal or a local limit (an acquire:
    /// what to fix, not retried); otherwise it is an outage.
    pub as_worst: bool,
}

impl Kind {
    /// The same, with `scrub` (which replaces every password: `url::Secrets::scrub`) applied
    /// to the words a server or redis-rs said.
    pub fn scrubbed(self, scrub: impl Fn(&str) -> String) -> Kind {
        let scrub = |words: String| scrub(&words);
        match self {
            Kind::Denied(Denied::Command { command, on, words }) => Kind::Denied(Denied::Command {
                command,
                on,
                words: scrub(words),
            }),
            Kind::Unsupported(Unsupported::Service(s)) => {
                Kind::Unsupported(Unsupported::Service(scrub(s)))
            }
            Kind::NotRedis(NotRedis::Answered(w)) => Kind::NotRedis(NotRedis::Answered(scrub(w))),
            Kind::Unavailable(Cause::Server {
                trouble,
                words,
                tls,
            }) => Kind::Unavailable(Cause::Server {
                trouble,
                words: scrub(words),
                tls,
            }),
            Kind::Unavailable(Cause::SentinelsFailed { service, words }) => {
                Kind::Unavailable(Cause::SentinelsFailed {
                    service,
                    words: scrub(words),
                })
            }
            Kind::Misuse(Misuse::Answered(a)) => Kind::Misuse(Misuse::Answered(ErrorReply {
                words: scrub(a.words),
                ..a
            })),
            other => other,
        }
    }
}

/// How the run and the operators' commands treat an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Outage,
    Refusal,
    Misuse,
    Local,
}

impl LockError {
    pub fn new(kind: Kind, at: At) -> LockError {
        LockError { kind, at }
    }

    /// An error of the server shown as `server`.
    pub fn on(server: &str, kind: Kind) -> LockError {
        LockError::new(kind, At::Server(server.to_string()))
    }

    /// A misuse that names its key, not its server.
    pub fn misuse(misuse: Misuse) -> LockError {
        LockError::new(Kind::Misuse(misuse), At::Nowhere)
    }

    /// No server answered, and none said why.
    pub fn no_answer() -> LockError {
        LockError::new(Kind::Unavailable(Cause::NoAnswer), At::Nowhere)
    }

    fn class(&self) -> Class {
        match &self.kind {
            Kind::Auth(_) | Kind::Denied(_) | Kind::Unsupported(_) | Kind::NotRedis(_) => {
                Class::Refusal
            }
            Kind::Unavailable(_) => Class::Outage,
            Kind::Misuse(_) => Class::Misuse,
            Kind::Local(_) => Class::Local,
            Kind::NoMajority(m) => match (&m.worst, m.as_worst) {
                (Some(worst), true) => match worst.class() {
                    c @ (Class::Refusal | Class::Local) => c,
                    Class::Outage | Class::Misuse => Class::Outage,
                },
                _ => Class::Outage,
            },
        }
    }

    /// lockrun's exit code when this error ends a run or an operators' command: 69 for an
    /// unavailable server or a refusal, 64 for a misuse, 71 for a local limit.
    pub fn exit_code(&self) -> crate::exit_codes::ExitCode {
        use crate::exit_codes::ExitCode;
        match self.class() {
            Class::Outage | Class::Refusal => ExitCode::Unavailable,
            Class::Misuse => ExitCode::Usage,
            Class::Local => ExitCode::OsError,
        }
    }

    /// Whether waiting may fix it: an outage (`--wait` retries it), not a refusal, a misuse
    /// or a local limit.
    pub fn is_outage(&self) -> bool {
        self.class() == Class::Outage
    }

    /// Whether the request may have run on the server: it was sent, and no reply says it did
    /// not (the connection broke under it, or no reply came in time). A refused connection, a
    /// server that answered it cannot serve, or sentinels that named no primary: it did not.
    pub fn may_have_run(&self) -> bool {
        !matches!(
            &self.kind,
            Kind::Unavailable(
                Cause::Server {
                    trouble: Trouble::Connect | Trouble::Busy,
                    ..
                } | Cause::SentinelsSplit { .. }
                    | Cause::SentinelsFailed { .. }
                    | Cause::SentinelsSilent(_)
            )
        )
    }

    /// Whether the server refused lockrun's configuration (password, ACL, a missing feature,
    /// not Redis): a configuration mistake, reported like an outage (69) but never retried,
    /// since waiting does not fix it.
    pub fn is_refusal(&self) -> bool {
        self.class() == Class::Refusal
    }

    /// Whether the server answered that the key cannot be used this way.
    pub fn is_misuse(&self) -> bool {
        self.class() == Class::Misuse
    }

    /// Whether a limit of this machine stopped the request (exit 71, not waited out).
    pub fn is_local(&self) -> bool {
        self.class() == Class::Local
    }

    /// The server as shown, or "" where the error concerns none.
    fn server(&self) -> &str {
        match &self.at {
            At::Nowhere => "",
            At::Server(s) | At::Sentinels(s) => s,
        }
    }
}

mod message;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_class_has_its_exit_code() {
        use crate::exit_codes::ExitCode;
        let timeout = Kind::Unavailable(Cause::Timeout {
            missing: "no reply",
            within: Duration::from_millis(1500),
            tls: true,
        });
        let down = LockError::on("h", timeout);
        assert_eq!(
            down.to_string(),
            "Redis at h unavailable: no reply within 1.5s; is the server's port TLS-enabled? \
             (rediss:// needs TLS; use redis:// for a plain-text port)"
        );
        assert!(down.is_outage());
        assert_eq!(down.exit_code(), ExitCode::Unavailable);
        let local = LockError::on("h", Kind::Local(Limit::Files));
        assert_eq!(local.exit_code(), ExitCode::OsError);
        assert!(local.to_string().starts_with("cannot reach Redis at h: "));
        let misuse = LockError::misuse(Misuse::ProbeKeyHeld { key: "k".into() });
        assert_eq!(misuse.exit_code(), ExitCode::Usage);
        assert_eq!(LockError::no_answer().to_string(), "no answer");
    }

    #[test]
    fn no_majority_counts_as_its_worst_failure_only_where_asked() {
        let refused = LockError::on("h", Kind::Auth(Auth::Missing));
        let majority = |as_worst| {
            LockError::new(
                Kind::NoMajority(Box::new(NoMajority {
                    what: "granted the lock",
                    masters: 3,
                    got: 1,
                    needed: 2,
                    worst: Some(refused.clone()),
                    as_worst,
                })),
                At::Nowhere,
            )
        };
        assert!(majority(true).is_refusal());
        assert!(majority(false).is_outage());
        assert_eq!(
            majority(true).to_string(),
            format!(
                "no majority of the 3 Redis masters granted the lock (1 did, 2 needed): {refused}"
            )
        );
    }
}
