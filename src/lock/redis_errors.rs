//! How a redis-rs error becomes something a person can act on: a refusal of lockrun's
//! configuration (say what to fix, never retry), a dropped connection (retry once on a new
//! one), a server that is unavailable for now (retry while `--wait` lasts), or none of these
//! (the server answered and the script failed: misuse of the key).
//!
//! The one place that reads redis-rs's error text: everything after it matches the
//! [`Kind`] decided here. Kept apart from the I/O in `redis.rs` so every rule is unit-tested on
//! the server's real error texts (Redis 7.0 and Valkey 8 word several of them differently).

use super::failure::{Auth, Denied, ErrorReply, Kind, Limit, NotRedis, On, Trouble, Unsupported};
use redis::RedisError;

/// redis-rs's words for a configuration it refused (a URL it cannot use, TLS files it cannot
/// read), without its name for the kind of error (`Invalid database number -
/// InvalidClientConfig`), which tells whoever reads the message nothing.
pub fn config_words(e: &RedisError) -> String {
    let words = e.to_string().replacen(&format!(" - {:?}", e.kind()), "", 1);
    // In lower case, as it follows a colon in lockrun's message: `invalid database number`,
    // while a word such as `TLS` stays as it is.
    let mut chars = words.chars();
    match (chars.next(), chars.next()) {
        (Some(first), Some(second)) if first.is_uppercase() && second.is_lowercase() => {
            first.to_lowercase().chain(words.chars().skip(1)).collect()
        }
        _ => words,
    }
}

/// The script an `EVAL` sent, to name the command inside it that the server refused.
#[derive(Clone, Copy, Debug)]
pub struct Sent<'a> {
    pub script: &'a str,
    /// What the script's `redis.call(publish, …)` runs (its argument: see `scripts.rs`).
    pub publish: &'a str,
}

/// A refusal of lockrun's configuration (authentication, ACL, a server without something
/// lockrun needs, not Redis at all); None for anything else. `sent`: the script of the `EVAL`
/// that failed, if one did, to name the command a script was not allowed to run (Redis 7.0
/// names only the script's line). The words it keeps are the server's, unscrubbed.
pub fn refusal(e: &RedisError, sent: Option<Sent>) -> Option<Kind> {
    let text = e.to_string();
    let code = e.code().unwrap_or_default();
    let lower = text.to_ascii_lowercase();
    // An unauthenticated client's EVAL (more than 10 arguments) meets "Protocol error:
    // unauthenticated multibulk length" before any NOAUTH: both mean "no password given".
    if code == "NOAUTH" || text.contains("unauthenticated") || text.contains("NOAUTH") {
        Some(Kind::Auth(Auth::Missing))
    } else if code == "WRONGPASS"
        || text.contains("WRONGPASS")
        || text.contains("AuthenticationFailed")
    {
        Some(Kind::Auth(Auth::Wrong))
    } else if lower.contains("can't run this command")
        || lower.contains("acl failure in script")
        || lower.contains("user executing the script can't")
    {
        // The EVAL itself was allowed, a command inside the script was not. Redis 7.0 says
        // neither which command nor which user; the URL in front of this message names the user.
        Some(Kind::Denied(
            if lower.contains("publish") || lower.contains("channel") {
                Denied::ScriptPublish
            } else if lower.contains("keys") {
                Denied::ScriptKey
            } else {
                Denied::ScriptCommand(scripted_command(&text, sent))
            },
        ))
    } else if code == "NOPERM"
        || text.contains("NoPerm")
        || text.contains("NOPERM")
        // redis-rs wraps a refused SELECT (a /db URL) in an error of its own that keeps only
        // the server's words.
        || lower.contains("has no permissions to")
    {
        let words = text.rsplit_once(": ").map_or(text.as_str(), |(_, d)| d);
        let on = if lower.contains("channel") {
            On::Channel
        } else if lower.contains("key") {
            On::Key
        } else {
            On::Command
        };
        Some(Kind::Denied(Denied::Command {
            command: named_command(&text),
            on,
            words: words.to_string(),
        }))
    } else if lower.contains("db index is out of range") || lower.contains("invalid db index") {
        // SELECT of the URL's database: waiting will not create it.
        Some(Kind::Unsupported(Unsupported::Database))
    } else if lower.contains("unknown command 'eval'") || lower.contains("unknown command `eval`") {
        Some(Kind::Unsupported(Unsupported::Eval))
    } else if lower.contains("command called from script") {
        Some(Kind::Unsupported(Unsupported::ScriptCommand(
            scripted_command(&text, sent),
        )))
    } else if text.contains("Parse error")
        || text.contains("Incompatible type")
        || text.contains("invalid type")
    {
        Some(Kind::NotRedis(NotRedis::Protocol))
    } else {
        None
    }
}

/// A limit of this machine behind a failed connection or request; None when the server or
/// the network is to blame. Matched on the OS error number, or on redis-rs's rendering of it
/// where it kept only the text.
pub fn local_limit(e: &RedisError) -> Option<Limit> {
    let errno = std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .and_then(std::io::Error::raw_os_error);
    local_limit_of(errno, &e.to_string())
}

/// [`local_limit`] of an OS error number or a message.
pub fn local_limit_of(errno: Option<i32>, text: &str) -> Option<Limit> {
    let is = |n: i32| errno == Some(n) || text.contains(&format!("(os error {n})"));
    if is(libc::EMFILE) {
        Some(Limit::Files)
    } else if is(libc::ENFILE) {
        Some(Limit::SystemFiles)
    } else if is(libc::ENOMEM) || is(libc::ENOBUFS) {
        Some(Limit::Memory)
    } else {
        None
    }
}

/// The command an ACL error names itself ("… no permissions to run the 'set' command …"),
/// upper-cased.
fn named_command(text: &str) -> Option<String> {
    let (_, rest) = text.split_once("to run the '")?;
    let (name, _) = rest.split_once('\'')?;
    Some(name.to_ascii_uppercase())
}

/// The command on the script line an error names (`… on @user_script:119.`), upper-cased.
fn scripted_command(text: &str, sent: Option<Sent>) -> Option<String> {
    // Valkey names the command itself.
    if let Some(name) = named_command(text) {
        return Some(name);
    }
    let (_, rest) = text.rsplit_once("@user_script:")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let sent = sent?;
    let line = sent
        .script
        .lines()
        .nth(digits.parse::<usize>().ok()?.checked_sub(1)?)?;
    let (_, call) = line.split_once("call(")?;
    // The one call whose command is an argument, not a literal.
    if call.starts_with("publish,") {
        return Some(sent.publish.to_string());
    }
    let quote = call.chars().next().filter(|q| *q == '\'' || *q == '"')?;
    let name = call[1..].split(quote).next()?;
    Some(name.to_ascii_uppercase())
}

/// The connection broke (reset, closed, killed) rather than timing out or being refused.
pub fn is_dropped(e: &RedisError) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
    if e.is_timeout() || e.is_connection_refusal() {
        return false;
    }
    e.is_connection_dropped()
        || std::error::Error::source(e)
            .and_then(|s| s.downcast_ref::<std::io::Error>())
            .is_some_and(|io| {
                matches!(
                    io.kind(),
                    BrokenPipe | ConnectionAborted | ConnectionReset | UnexpectedEof
                )
            })
}

/// The server answered that it cannot serve for now, and will again.
fn is_busy(e: &RedisError) -> bool {
    matches!(
        e.code(),
        Some(
            "READONLY"
                | "LOADING"
                | "MASTERDOWN"
                | "BUSY"
                | "TRYAGAIN"
                | "CLUSTERDOWN"
                | "OOM"
                | "NOREPLICAS"
                // The server cannot persist (a failed RDB save with
                // stop-writes-on-bgsave-error): its disk is the problem, not our key, and
                // it writes again once an operator fixes that.
                | "MISCONF"
        )
    )
        // maxclients: the server is full for now, as a busy one is.
        || e.to_string().contains("max number of clients reached")
}

/// Errors after which the request may or may not have taken effect, and a retry on a fresh
/// connection is the right move (never "not owner").
pub fn is_transient(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || is_busy(e)
}

/// What kind of trouble a failed connection or request met (for an unavailable server).
pub fn trouble(e: &RedisError) -> Trouble {
    if e.is_timeout() {
        Trouble::Timeout
    } else if e.is_connection_refusal() {
        Trouble::Connect
    } else if is_dropped(e) {
        Trouble::Dropped
    } else if is_busy(e) {
        Trouble::Busy
    } else {
        Trouble::Other
    }
}

/// The server answered "unknown command" (a command renamed away, or a server of another kind).
pub fn unknown_command(e: &RedisError) -> bool {
    e.to_string()
        .to_ascii_lowercase()
        .contains("unknown command")
}

/// `EVALSHA` itself was refused (an ACL) or is not there (rename-command): `EVAL` may still be.
pub fn evalsha_refused(e: &RedisError) -> bool {
    (refusal(e, None).is_some() || unknown_command(e))
        && e.to_string().to_ascii_lowercase().contains("evalsha")
}

/// A server's error reply to one command, as the operators' commands get it (unscrubbed).
pub fn answer(e: &RedisError) -> ErrorReply {
    let words = e.to_string();
    ErrorReply {
        code: e.code().map(str::to_string),
        // `ACL DRYRUN` says "User … not found" and "Command '…' not found".
        unknown: words.to_ascii_lowercase().contains("unknown command")
            || words.contains("not found"),
        words,
    }
}

/// What the refusal of the `WAIT`/`WAITAOF` behind a script (`fsync`: WAITAOF) means, if it is
/// one: a server without that command, or without the append-only file WAITAOF needs.
pub fn ack_refusal(e: &redis::ServerError, fsync: bool) -> Option<Unsupported> {
    let text = format!("{e:?}").to_ascii_lowercase();
    if text.contains("unknown command") {
        Some(if fsync {
            Unsupported::WaitAof
        } else {
            Unsupported::Wait
        })
    } else if text.contains("appendonly") {
        Some(Unsupported::AppendOnly)
    } else {
        None
    }
}

/// What the server said in an error reply, without the arguments of the request redis-rs
/// quotes after it (a script's SHA, keys, a holder value), and at most 120 characters.
pub fn server_words(e: &RedisError) -> String {
    let words = match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => e.to_string(),
    };
    let words = words
        .split(", with args beginning with")
        .next()
        .unwrap_or_default();
    let words = crate::logging::escape_controls(words);
    words.chars().take(120).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error redis-rs makes of a server's error reply, from the reply's wire bytes.
    fn reply(line: &str) -> RedisError {
        let wire = format!("-{line}\r\n");
        redis::parse_redis_value(wire.as_bytes())
            .unwrap()
            .extract_error()
            .unwrap_err()
    }

    const SCRIPT: &str = "local a = 1\n  redis.call('SET', KEYS[1], 'x')\nredis.call(\"zadd\", k, 1, m)\n  if x then redis.call(publish, channel, x) end\n";
    const SENT: Sent = Sent {
        script: SCRIPT,
        publish: "SPUBLISH",
    };

    /// What a refusal says after "refused lockrun: ", as `failure.rs` renders its kind.
    fn said(e: &RedisError, sent: Option<Sent>) -> Option<String> {
        let kind = refusal(e, sent)?;
        let message = super::super::LockError::on("h", kind).to_string();
        Some(message.replacen("Redis at h refused lockrun: ", "", 1))
    }

    #[test]
    fn authentication_refusals() {
        for line in [
            "NOAUTH Authentication required.",
            "ERR Protocol error: unauthenticated multibulk length",
        ] {
            let why = said(&reply(line), None).unwrap();
            assert!(why.starts_with("authentication required"), "{line}: {why}");
        }
        let why = said(
            &reply("WRONGPASS invalid username-password pair or user is disabled."),
            None,
        )
        .unwrap();
        assert!(why.starts_with("authentication failed"), "{why}");
    }

    #[test]
    fn acl_refusals_say_what_to_grant() {
        let why = said(
            &reply("NOPERM User noeval has no permissions to run the 'eval' command"),
            Some(SENT),
        )
        .unwrap();
        assert!(
            why.contains("no permissions to run the 'eval' command; grant"),
            "{why}"
        );
        let why = said(
            &reply("NOPERM this user has no permissions to access one of the channels used as arguments"),
            None,
        )
        .unwrap();
        assert!(why.contains("&lockrun:wake:*"), "{why}");
        let why = said(
            &reply(
                "NOPERM this user has no permissions to access one of the keys used as arguments",
            ),
            Some(SENT),
        )
        .unwrap();
        assert!(why.contains("~KEY ~lockrun:*"), "{why}");
        // A /db URL whose user may not SELECT: redis-rs wraps the server's reply.
        let select = RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
            "Redis server refused to switch database",
            "Server(ResponseError): this user has no permissions to run the 'select' command"
                .to_string(),
        ));
        let why = said(&select, None).unwrap();
        assert!(
            why.starts_with("this user has no permissions to run the 'select' command; grant"),
            "{why}"
        );
    }

    #[test]
    fn a_command_denied_inside_a_script_is_named() {
        // Redis 7.0 names only the line; the command is read from the script sent.
        let redis70 = reply("ERR The user executing the script can't run this command or subcommand script: c14e, on @user_script:2.");
        assert_eq!(
            said(&redis70, Some(SENT)).unwrap(),
            "this user may not run SET, a command lockrun's scripts call; grant the user what lockrun needs (docs/availability.md: ACL permissions)"
        );
        let line3 = reply("ERR The user executing the script can't run this command or subcommand script: c14e, on @user_script:3.");
        assert!(said(&line3, Some(SENT)).unwrap().contains("ZADD"));
        // Without the script (or a line out of range) it is still a refusal.
        assert!(said(&redis70, None)
            .unwrap()
            .contains("a command lockrun's"));
        let far = reply("ERR The user executing the script can't run this command or subcommand script: c, on @user_script:99.");
        assert!(said(&far, Some(SENT)).is_some());
        // Valkey 8 names the command itself.
        let valkey = reply("ERR ACL failure in script: User noset has no permissions to run the 'set' command script: c14e, on @user_script:2.");
        assert!(said(&valkey, None).unwrap().contains("run SET, a command"));
        let publish = reply("ERR The user executing the script can't publish to the channel mentioned in the command script: 08aa, on @user_script:2.");
        assert!(said(&publish, Some(SENT))
            .unwrap()
            .contains("&lockrun:wake:*"));
    }

    #[test]
    fn a_server_without_eval_or_a_scripted_command() {
        let eval =
            reply("ERR unknown command 'EVAL', with args beginning with: '-- Shared prelude'");
        let why = said(&eval, Some(SENT)).unwrap();
        assert!(why.starts_with("the server does not offer EVAL"), "{why}");
        assert!(
            !why.contains("prelude"),
            "no script text in the message: {why}"
        );
        let inner =
            reply("ERR Unknown Redis command called from script script: fb35, on @user_script:3.");
        assert!(said(&inner, Some(SENT))
            .unwrap()
            .contains("does not offer ZADD"));
        let valkey =
            reply("ERR Unknown command called from script script: fb35, on @user_script:2.");
        assert!(said(&valkey, Some(SENT))
            .unwrap()
            .contains("does not offer SET"));
    }

    #[test]
    fn a_database_the_server_does_not_have() {
        for text in ["DB index is out of range", "invalid DB index"] {
            let why = said(&reply(&format!("ERR {text}")), None).unwrap();
            assert!(why.contains("no database"), "{why}");
        }
    }

    #[test]
    fn the_rest_is_not_a_refusal() {
        for line in [
            "WRONGTYPE Operation against a key holding the wrong kind of value",
            "ERR Error running script: user_script:1: bad argument",
            "LOADING Redis is loading the dataset in memory",
            "ERR max number of clients reached",
            "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk.",
        ] {
            assert_eq!(refusal(&reply(line), Some(SENT)), None, "{line}");
        }
    }

    #[test]
    fn server_trouble_is_transient_misuse_is_not() {
        for line in [
            "LOADING Redis is loading the dataset in memory",
            "BUSY Redis is busy running a script.",
            "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk.",
            "ERR max number of clients reached",
            "READONLY You can't write against a read only replica.",
        ] {
            assert!(is_transient(&reply(line)), "{line}");
        }
        for line in [
            "WRONGTYPE Operation against a key holding the wrong kind of value",
            "ERR Error running script: user_script:1: bad argument",
        ] {
            assert!(!is_transient(&reply(line)), "{line}");
            assert!(!is_dropped(&reply(line)), "{line}");
        }
    }

    #[test]
    fn dropped_is_a_broken_socket_not_a_refused_or_slow_one() {
        use std::io::{Error, ErrorKind};
        let io = |k: ErrorKind| RedisError::from(Error::new(k, "x"));
        assert!(is_dropped(&io(ErrorKind::ConnectionReset)));
        assert!(is_dropped(&io(ErrorKind::BrokenPipe)));
        assert!(is_dropped(&io(ErrorKind::UnexpectedEof)));
        assert!(!is_dropped(&io(ErrorKind::ConnectionRefused)));
        assert!(!is_dropped(&io(ErrorKind::TimedOut)));
    }

    #[test]
    fn each_refusal_has_its_kind() {
        let kind = |line: &str| refusal(&reply(line), Some(SENT));
        assert_eq!(
            kind("NOAUTH Authentication required."),
            Some(Kind::Auth(Auth::Missing))
        );
        assert_eq!(
            kind("WRONGPASS invalid username-password pair or user is disabled."),
            Some(Kind::Auth(Auth::Wrong))
        );
        assert_eq!(
            kind("NOPERM User noeval has no permissions to run the 'eval' command"),
            Some(Kind::Denied(Denied::Command {
                command: Some("EVAL".into()),
                on: On::Command,
                words: "User noeval has no permissions to run the 'eval' command".into(),
            }))
        );
        assert!(matches!(
            kind("NOPERM this user has no permissions to access one of the channels used as arguments"),
            Some(Kind::Denied(Denied::Command { command: None, on: On::Channel, .. }))
        ));
        assert_eq!(
            kind("ERR The user executing the script can't run this command or subcommand script: c14e, on @user_script:2."),
            Some(Kind::Denied(Denied::ScriptCommand(Some("SET".into()))))
        );
        assert_eq!(
            kind("ERR The user executing the script can't publish to the channel mentioned in the command script: 08aa, on @user_script:4."),
            Some(Kind::Denied(Denied::ScriptPublish))
        );
        assert_eq!(
            kind("ERR unknown command 'EVAL', with args beginning with: "),
            Some(Kind::Unsupported(Unsupported::Eval))
        );
        assert_eq!(
            kind("ERR DB index is out of range"),
            Some(Kind::Unsupported(Unsupported::Database))
        );
    }

    #[test]
    fn the_publish_command_is_named_from_the_scripts_argument() {
        // The call on line 4 runs the command the script was given (SPUBLISH on a Cluster).
        let denied = reply("ERR The user executing the script can't run this command or subcommand script: c14e, on @user_script:4.");
        assert_eq!(
            said(&denied, Some(SENT)).unwrap(),
            "this user may not run SPUBLISH, a command lockrun's scripts call; grant the user what lockrun needs (docs/availability.md: ACL permissions)"
        );
        let plain = Sent {
            publish: "PUBLISH",
            ..SENT
        };
        let missing =
            reply("ERR Unknown Redis command called from script script: fb35, on @user_script:4.");
        assert_eq!(
            refusal(&missing, Some(plain)),
            Some(Kind::Unsupported(Unsupported::ScriptCommand(Some(
                "PUBLISH".into()
            ))))
        );
    }

    #[test]
    fn trouble_says_what_failed() {
        use std::io::{Error, ErrorKind};
        let io = |k: ErrorKind| RedisError::from(Error::new(k, "x"));
        assert_eq!(trouble(&io(ErrorKind::ConnectionReset)), Trouble::Dropped);
        assert_eq!(trouble(&io(ErrorKind::ConnectionRefused)), Trouble::Connect);
        assert_eq!(trouble(&io(ErrorKind::TimedOut)), Trouble::Timeout);
        assert_eq!(
            trouble(&reply("LOADING Redis is loading the dataset in memory")),
            Trouble::Busy
        );
        assert_eq!(
            trouble(&reply("ERR max number of clients reached")),
            Trouble::Busy
        );
        assert_eq!(trouble(&reply("ERR something else")), Trouble::Other);
    }

    #[test]
    fn local_limits_by_number_or_by_text() {
        assert_eq!(local_limit_of(Some(libc::EMFILE), ""), Some(Limit::Files));
        assert_eq!(
            local_limit_of(None, "No file descriptors available (os error 23)"),
            Some(Limit::SystemFiles)
        );
        assert_eq!(local_limit_of(Some(libc::ENOBUFS), ""), Some(Limit::Memory));
        assert_eq!(local_limit_of(Some(libc::ECONNREFUSED), "refused"), None);
    }

    #[test]
    fn answers_say_their_code_and_whether_the_name_was_unknown() {
        let wrong = answer(&reply(
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ));
        assert_eq!(wrong.code.as_deref(), Some("WRONGTYPE"));
        assert!(!wrong.unknown);
        for line in [
            "ERR unknown command 'WAITAOF', with args beginning with: ",
            "ERR User nobody not found",
            "ERR Command 'frobnicate' not found",
        ] {
            assert!(answer(&reply(line)).unknown, "{line}");
        }
    }

    #[test]
    fn evalsha_refused_by_an_acl_or_missing() {
        for line in [
            "NOPERM User u has no permissions to run the 'evalsha' command",
            "ERR unknown command 'EVALSHA', with args beginning with: ",
        ] {
            assert!(evalsha_refused(&reply(line)), "{line}");
        }
        assert!(!evalsha_refused(&reply(
            "NOSCRIPT No matching script. Please use EVAL."
        )));
    }

    #[test]
    fn refused_acknowledgements() {
        let server_error =
            |line: &str| match redis::parse_redis_value(format!("-{line}\r\n").as_bytes()) {
                Ok(redis::Value::ServerError(e)) => e,
                other => panic!("{other:?}"),
            };
        let unknown = server_error("ERR unknown command 'WAITAOF', with args beginning with: ");
        assert_eq!(ack_refusal(&unknown, true), Some(Unsupported::WaitAof));
        assert_eq!(ack_refusal(&unknown, false), Some(Unsupported::Wait));
        let aof = server_error(
            "ERR WAITAOF cannot be used when numlocal is set but appendonly is disabled.",
        );
        assert_eq!(ack_refusal(&aof, true), Some(Unsupported::AppendOnly));
        assert_eq!(ack_refusal(&server_error("ERR other"), true), None);
    }
}
