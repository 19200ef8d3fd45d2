//! lockrun's Lua scripts (`scripts/`), each with the name `EVALSHA` sends for it, and each
//! operation's Rust side beside its Lua: a typed request that builds its `KEYS` and `ARGV` in
//! the order the script reads them, and a typed reply decoded in one function (`decode`, which
//! hands back a reply none of the script's as it came, for the caller to report). Acquire,
//! release and renew have one script per kind of lock (`acquire.rs` beside `acquire/*.lua`),
//! chosen by the request's [`crate::lock::LockKind`]; `lib/` holds what several scripts share.
//!
//! Every text is fixed at compile time: what differs between deployments (the publish command
//! on a Cluster) is a script argument, so a script has one SHA-1 wherever it runs. `build.rs`
//! assembles each script from its files and computes its SHA-1 (its table says which files make
//! up which script); the statics below are its output.

pub mod acquire;
pub mod force_release;
pub mod held_by;
pub mod inspect;
pub mod leave;
pub mod release;
pub mod renew;

use redis::Value;

/// One script: its text and the lowercase hex SHA-1 of it, as `SCRIPT LOAD` and `EVALSHA`
/// spell it.
pub struct Script {
    text: &'static str,
    sha: &'static str,
}

impl Script {
    const fn new(text: &'static str, sha: &'static str) -> Script {
        Script { text, sha }
    }

    pub fn text(&self) -> &'static str {
        self.text
    }

    pub fn sha(&self) -> &'static str {
        self.sha
    }
}

include!(concat!(env!("OUT_DIR"), "/scripts.rs"));

/// One run of a script, as a request builds it: the script, its `KEYS` and its `ARGV`.
pub struct Call {
    pub script: &'static Script,
    pub keys: Vec<String>,
    pub args: Vec<String>,
}

/// What each script's request says: which script, and its `KEYS` and `ARGV` in the order the
/// script reads them (each `.lua` file's header lists them), built in one place, so that the
/// script and its arguments are chosen together.
pub trait Request {
    fn call(&self) -> Call;
}

impl Call {
    /// The command that runs it: `eval` is `EVAL` (`body`: the script's text) or `EVALSHA`
    /// (`body`: its SHA-1).
    pub fn command(&self, eval: &str, body: &str) -> redis::Cmd {
        let mut cmd = redis::cmd(eval);
        cmd.arg(body)
            .arg(self.keys.len())
            .arg(&self.keys)
            .arg(&self.args);
        cmd
    }
}

/// The command that publishes a release hint: sharded pub/sub on a Cluster, so the hint stays
/// on the lock's shard (its channel shares the lock's slot, see `keys::wake_channel`) instead
/// of being broadcast to every node. Passed to the scripts that wake waiters.
pub fn publish_command(cluster: bool) -> &'static str {
    if cluster {
        "SPUBLISH"
    } else {
        "PUBLISH"
    }
}

/// A reply item as text (a bulk or simple string); `None` for anything else.
pub(crate) fn as_string(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Okay => Some("OK".into()),
        _ => None,
    }
}

/// A reply item as an integer; `None` for anything else.
fn as_int(v: Option<&Value>) -> Option<i64> {
    match v {
        Some(Value::Int(n)) => Some(*n),
        _ => None,
    }
}

/// A connection without a server, in the spirit of redis-test's `MockRedisConnection`: it
/// records every command sent and answers each with the next canned reply, so a script's
/// request and the decoding of its replies are tested without a server.
#[cfg(test)]
pub(crate) mod mock {
    use super::Call;
    use redis::{aio::ConnectionLike, Arg, Cmd, Pipeline, RedisFuture, RedisResult, Value};
    use std::collections::VecDeque;

    #[derive(Default)]
    pub struct MockConnection {
        /// Each command sent, as its words.
        pub sent: Vec<Vec<String>>,
        replies: VecDeque<Value>,
    }

    impl MockConnection {
        pub fn answering(replies: impl IntoIterator<Item = Value>) -> MockConnection {
            MockConnection {
                sent: Vec::new(),
                replies: replies.into_iter().collect(),
            }
        }

        fn record(&mut self, cmd: &Cmd) -> Value {
            self.sent.push(
                cmd.args_iter()
                    .map(|a| match a {
                        Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                        _ => "<cursor>".into(),
                    })
                    .collect(),
            );
            self.replies
                .pop_front()
                .expect("a canned reply for every command")
        }
    }

    impl ConnectionLike for MockConnection {
        fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
            let reply = self.record(cmd);
            Box::pin(async move { Ok(reply) })
        }

        fn req_packed_commands<'a>(
            &'a mut self,
            pipeline: &'a Pipeline,
            offset: usize,
            count: usize,
        ) -> RedisFuture<'a, Vec<Value>> {
            let replies: Vec<Value> = pipeline.cmd_iter().map(|c| self.record(c)).collect();
            Box::pin(async move { Ok(replies.into_iter().skip(offset).take(count).collect()) })
        }

        fn get_db(&self) -> i64 {
            0
        }
    }

    /// `call` sent by `EVALSHA` to a connection that answers `reply`: the words sent, and the
    /// reply as the lock's requests receive it (an error reply comes back as `Err`).
    pub fn run(call: &Call, reply: Value) -> (Vec<String>, RedisResult<Value>) {
        let mut conn = MockConnection::answering([reply]);
        let cmd = call.command("EVALSHA", call.script.sha());
        let got = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime")
            .block_on(cmd.query_async::<Value>(&mut conn));
        (conn.sent.remove(0), got)
    }

    /// The words `EVALSHA <sha> <number of keys> KEYS... ARGV...` for `call`'s script.
    pub fn evalsha(call: &Call, keys: &[&str], args: &[&str]) -> Vec<String> {
        let mut words = vec![
            "EVALSHA".to_string(),
            call.script.sha().to_string(),
            keys.len().to_string(),
        ];
        words.extend(keys.iter().chain(args).map(|s| s.to_string()));
        words
    }

    /// An error reply, as the server sends it (`-CODE words`).
    pub fn error_reply(words: &str) -> Value {
        redis::parse_redis_value(format!("-{words}\r\n").as_bytes()).expect("an error reply")
    }

    pub fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    pub fn array(items: impl IntoIterator<Item = Value>) -> Value {
        Value::Array(items.into_iter().collect())
    }

    /// Replies none of lockrun's scripts gives, whatever the script: each decoder hands these
    /// back as they came.
    pub fn foreign() -> Vec<Value> {
        vec![
            Value::Nil,
            Value::Okay,
            Value::SimpleString("QUEUED".into()),
            Value::Double(1.5),
            Value::Boolean(true),
            Value::Map(vec![(bulk("a"), Value::Int(1))]),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::mock::*;
    use super::*;

    #[test]
    fn a_script_is_named_by_the_sha1_of_its_text() {
        // build.rs's names agree with the same digest computed here, at run time.
        for script in [
            &ACQUIRE_EXCLUSIVE,
            &RELEASE_EXCLUSIVE,
            &RENEW_EXCLUSIVE,
            &INSPECT,
        ] {
            let sha = sha1_smol::Sha1::from(script.text()).digest().to_string();
            assert_eq!(script.sha(), sha);
        }
        assert_ne!(ACQUIRE_EXCLUSIVE.sha(), RELEASE_EXCLUSIVE.sha());
        assert!(ACQUIRE_EXCLUSIVE
            .text()
            .starts_with(include_str!("scripts/lib/prelude.lua")));
    }

    #[test]
    fn every_scripts_sha1_is_pinned() {
        // Servers cache scripts by SHA-1 and every request names one: a text that changes (a
        // file moved into another script, a comment edited) is a new script to every server.
        #[rustfmt::skip]
        let pinned: [(&Script, &str); 13] = [
            (&ACQUIRE_EXCLUSIVE, "dd278dfe2de4cdfbfad828e8c91b2e357f4738bd"),
            (&RELEASE_EXCLUSIVE, "c6e3b083776a41c16fb27aff6cbc033b3da87cc7"),
            (&ACQUIRE_TICK, "cf103e17c3729f050df12fc0a49d7a840ead396f"),
            (&RELEASE_TICK, "b050dd13a86f0372684cb0238efcd3fcdd924938"),
            (&ACQUIRE_SEMAPHORE, "4d1c80a00e12bb580a2c43123b57c44a7aa3221a"),
            (&ACQUIRE_SHARED, "c9d6972e1d15ba3cda0ad1bcf1b3c17738e80261"),
            (&RELEASE_SEMAPHORE, "902f615ed85a31583ca91c7c079010453daff907"),
            (&LEAVE, "5c2fcebd9cfd252a08ab65a430983f33d68942db"),
            (&FORCE_RELEASE, "c779d9725efb772e82dffba744571302378ab6dc"),
            (&RENEW_EXCLUSIVE, "fca9b9126a7f00c7faf91546a29f94c89d22dda7"),
            (&RENEW_SEMAPHORE, "df1d7ef1b09b976e4342958c091bb1e6a312da98"),
            (&HELD_BY, "f9668a328bb5d368f9922f9053c3d7ed75a91702"),
            (&INSPECT, "fab1f3b18997074f393fefb70765d248e8241ab4"),
        ];
        for (script, sha) in pinned {
            assert_eq!(script.sha(), sha, "{}", &script.text()[..80]);
        }
    }

    #[test]
    fn no_script_names_its_publish_command() {
        // The command comes from an argument: a text that named one would be rewritten or
        // wrong on a Cluster.
        for script in [
            &ACQUIRE_EXCLUSIVE,
            &RELEASE_EXCLUSIVE,
            &ACQUIRE_SEMAPHORE,
            &RELEASE_SEMAPHORE,
            &LEAVE,
            &FORCE_RELEASE,
        ] {
            assert!(!script.text().contains("PUBLISH'"), "{}", script.text());
        }
    }

    #[test]
    fn a_call_is_sent_as_script_key_count_keys_then_args() {
        let call = Call {
            script: &HELD_BY,
            keys: vec!["k1".into(), "k2".into()],
            args: vec!["a".into()],
        };
        let (sent, _) = run(&call, Value::Int(0));
        assert_eq!(sent, evalsha(&call, &["k1", "k2"], &["a"]));
        let eval: Vec<String> = call
            .command("EVAL", HELD_BY.text())
            .args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                _ => String::new(),
            })
            .collect();
        assert_eq!(eval[..2], ["EVAL".to_string(), HELD_BY.text().to_string()]);
        assert_eq!(eval[2..], sent[2..]);
    }

    #[test]
    fn an_error_reply_never_reaches_a_decoder() {
        // The server's error replies come back as errors (redis_errors reads them), not as a
        // reply for a script's decoder.
        let call = Call {
            script: &RENEW_EXCLUSIVE,
            keys: vec!["k".into()],
            args: vec![],
        };
        let refused = error_reply("NOSCRIPT No matching script");
        let (_, got) = run(&call, refused);
        assert_eq!(got.unwrap_err().code(), Some("NOSCRIPT"));
    }

    #[test]
    fn as_string_reads_text_only() {
        assert_eq!(as_string(&bulk("a b")).as_deref(), Some("a b"));
        assert_eq!(
            as_string(&Value::SimpleString("x".into())).as_deref(),
            Some("x")
        );
        assert_eq!(as_string(&Value::Okay).as_deref(), Some("OK"));
        assert_eq!(as_string(&Value::Int(1)), None);
        assert_eq!(as_string(&Value::Nil), None);
    }
}
