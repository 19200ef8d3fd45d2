//! How a redis-rs error becomes something a person can act on: a refusal of lockrun's
//! configuration (say what to fix, never retry), a dropped connection (retry once on a new
//! one), a server that is unavailable for now (retry while `--wait` lasts), or none of these
//! (the server answered and the script failed: misuse of the key).
//!
//! Kept apart from the I/O in `redis.rs` so every rule is unit-tested on the server's real
//! error texts (Redis 7.0 and Valkey 8 word several of them differently).

use redis::RedisError;

/// A refusal of lockrun's configuration, with what to do about it; None for anything else.
/// `script`: the Lua source of the EVAL that failed, if one did, to name the command a script
/// was not allowed to run (Redis 7.0 names only the script's line).
pub fn refusal(e: &RedisError, script: Option<&str>) -> Option<String> {
    let text = e.to_string();
    let code = e.code().unwrap_or_default();
    let lower = text.to_ascii_lowercase();
    // An unauthenticated client's EVAL (more than 10 arguments) meets "Protocol error:
    // unauthenticated multibulk length" before any NOAUTH: both mean "no password given".
    if code == "NOAUTH" || text.contains("unauthenticated") || text.contains("NOAUTH") {
        Some("authentication required: give a password in the URL, LOCKRUN_REDIS_PASSWORD or --redis-password-file".into())
    } else if code == "WRONGPASS"
        || text.contains("WRONGPASS")
        || text.contains("AuthenticationFailed")
    {
        Some("authentication failed: wrong password or user name".into())
    } else if lower.contains("can't run this command")
        || lower.contains("acl failure in script")
        || lower.contains("user executing the script can't")
    {
        // The EVAL itself was allowed, a command inside the script was not. Redis 7.0 says
        // neither which command nor which user; the URL in front of this message names the user.
        let what = scripted_command(&text, script)
            .map_or("a command".to_string(), |c| format!("{c}, a command"));
        let what = if lower.contains("publish") || lower.contains("channel") {
            "PUBLISH to lockrun:wake:{KEY} (&lockrun:wake:*), which lockrun's scripts need".into()
        } else if lower.contains("keys") {
            "a key lockrun's scripts use (~KEY ~lockrun:*)".into()
        } else {
            format!("{what} lockrun's scripts call")
        };
        Some(format!(
            "this user may not run {what}; grant the user what lockrun needs (README: ACL permissions)"
        ))
    } else if code == "NOPERM"
        || text.contains("NoPerm")
        || text.contains("NOPERM")
        // redis-rs wraps a refused SELECT (a /db URL) in an error of its own that keeps only
        // the server's words.
        || lower.contains("has no permissions to")
    {
        let detail = text.rsplit_once(": ").map_or(text.as_str(), |(_, d)| d);
        let needs = if lower.contains("channel") {
            " (--wait subscribes to lockrun:wake:{KEY}: &lockrun:wake:*)"
        } else if lower.contains("key") {
            " (the lock key and lockrun's own keys: ~KEY ~lockrun:*)"
        } else {
            ""
        };
        Some(format!(
            "{detail}{needs}; grant the user what lockrun needs (README: ACL permissions)"
        ))
    } else if lower.contains("db index is out of range") || lower.contains("invalid db index") {
        // SELECT of the URL's database: waiting will not create it.
        Some("the server has no database of the URL's number (it has as many as its `databases` setting, 16 by default: 0 to 15)".into())
    } else if lower.contains("unknown command 'eval'") || lower.contains("unknown command `eval`") {
        Some("the server does not offer EVAL (disabled with rename-command?); lockrun runs every lock operation as a Lua script".into())
    } else if lower.contains("command called from script") {
        let what = scripted_command(&text, script).unwrap_or_else(|| "a command".into());
        Some(format!(
            "the server does not offer {what}, which lockrun's scripts call (disabled with rename-command?)"
        ))
    } else if text.contains("Parse error")
        || text.contains("Incompatible type")
        || text.contains("invalid type")
    {
        Some("the server does not speak the Redis protocol (is this the Redis port?)".into())
    } else {
        None
    }
}

/// A limit of this machine behind a failed connection or request, said with what to raise;
/// None when the server or the network is to blame. Matched on the OS error number, or on
/// redis-rs's rendering of it where it kept only the text.
pub fn local_limit(e: &RedisError) -> Option<String> {
    let errno = std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .and_then(std::io::Error::raw_os_error);
    local_limit_of(errno, &e.to_string())
}

/// [`local_limit`] of an OS error number or a message.
pub fn local_limit_of(errno: Option<i32>, text: &str) -> Option<String> {
    let is = |n: i32| errno == Some(n) || text.contains(&format!("(os error {n})"));
    if is(libc::EMFILE) {
        Some("this process may open no more files or sockets (EMFILE, Too many open files): raise its limit (ulimit -n)".into())
    } else if is(libc::ENFILE) {
        Some("the system may open no more files (ENFILE): raise fs.file-max or close files".into())
    } else if is(libc::ENOMEM) || is(libc::ENOBUFS) {
        Some("out of memory for a socket (ENOMEM/ENOBUFS)".into())
    } else {
        None
    }
}

/// The command on the script line an error names (`… on @user_script:119.`), upper-cased.
fn scripted_command(text: &str, script: Option<&str>) -> Option<String> {
    // Valkey names the command itself: "… no permissions to run the 'set' command …".
    if let Some((_, rest)) = text.split_once("to run the '") {
        if let Some((name, _)) = rest.split_once('\'') {
            return Some(name.to_ascii_uppercase());
        }
    }
    let (_, rest) = text.rsplit_once("@user_script:")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let line = script?
        .lines()
        .nth(digits.parse::<usize>().ok()?.checked_sub(1)?)?;
    let (_, call) = line.split_once("call(")?;
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

/// Errors after which the request may or may not have taken effect, and a retry on a fresh
/// connection is the right move (never "not owner").
pub fn is_transient(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || matches!(
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

    const SCRIPT: &str =
        "local a = 1\n  redis.call('SET', KEYS[1], 'x')\nredis.call(\"zadd\", k, 1, m)\n";

    #[test]
    fn authentication_refusals() {
        for line in [
            "NOAUTH Authentication required.",
            "ERR Protocol error: unauthenticated multibulk length",
        ] {
            let why = refusal(&reply(line), None).unwrap();
            assert!(why.starts_with("authentication required"), "{line}: {why}");
        }
        let why = refusal(
            &reply("WRONGPASS invalid username-password pair or user is disabled."),
            None,
        )
        .unwrap();
        assert!(why.starts_with("authentication failed"), "{why}");
    }

    #[test]
    fn acl_refusals_say_what_to_grant() {
        let why = refusal(
            &reply("NOPERM User noeval has no permissions to run the 'eval' command"),
            Some(SCRIPT),
        )
        .unwrap();
        assert!(
            why.contains("no permissions to run the 'eval' command; grant"),
            "{why}"
        );
        let why = refusal(
            &reply("NOPERM this user has no permissions to access one of the channels used as arguments"),
            None,
        )
        .unwrap();
        assert!(why.contains("&lockrun:wake:*"), "{why}");
        let why = refusal(
            &reply(
                "NOPERM this user has no permissions to access one of the keys used as arguments",
            ),
            Some(SCRIPT),
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
        let why = refusal(&select, None).unwrap();
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
            refusal(&redis70, Some(SCRIPT)).unwrap(),
            "this user may not run SET, a command lockrun's scripts call; grant the user what lockrun needs (README: ACL permissions)"
        );
        let line3 = reply("ERR The user executing the script can't run this command or subcommand script: c14e, on @user_script:3.");
        assert!(refusal(&line3, Some(SCRIPT)).unwrap().contains("ZADD"));
        // Without the script (or a line out of range) it is still a refusal.
        assert!(refusal(&redis70, None)
            .unwrap()
            .contains("a command lockrun's"));
        let far = reply("ERR The user executing the script can't run this command or subcommand script: c, on @user_script:99.");
        assert!(refusal(&far, Some(SCRIPT)).is_some());
        // Valkey 8 names the command itself.
        let valkey = reply("ERR ACL failure in script: User noset has no permissions to run the 'set' command script: c14e, on @user_script:2.");
        assert!(refusal(&valkey, None)
            .unwrap()
            .contains("run SET, a command"));
        let publish = reply("ERR The user executing the script can't publish to the channel mentioned in the command script: 08aa, on @user_script:2.");
        assert!(refusal(&publish, Some(SCRIPT))
            .unwrap()
            .contains("&lockrun:wake:*"));
    }

    #[test]
    fn a_server_without_eval_or_a_scripted_command() {
        let eval =
            reply("ERR unknown command 'EVAL', with args beginning with: '-- Shared prelude'");
        let why = refusal(&eval, Some(SCRIPT)).unwrap();
        assert!(why.starts_with("the server does not offer EVAL"), "{why}");
        assert!(
            !why.contains("prelude"),
            "no script text in the message: {why}"
        );
        let inner =
            reply("ERR Unknown Redis command called from script script: fb35, on @user_script:3.");
        assert!(refusal(&inner, Some(SCRIPT))
            .unwrap()
            .contains("does not offer ZADD"));
        let valkey =
            reply("ERR Unknown command called from script script: fb35, on @user_script:2.");
        assert!(refusal(&valkey, Some(SCRIPT))
            .unwrap()
            .contains("does not offer SET"));
    }

    #[test]
    fn a_database_the_server_does_not_have() {
        for text in ["DB index is out of range", "invalid DB index"] {
            let why = refusal(&reply(&format!("ERR {text}")), None).unwrap();
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
            assert_eq!(refusal(&reply(line), Some(SCRIPT)), None, "{line}");
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
}
