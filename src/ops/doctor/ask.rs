//! One question to a server, and its reply as a check needs it: a value, or why the check
//! that needed it cannot be made. Shared by every check that asks (the server's, the ACL's,
//! the Cluster's slots).

use crate::lock::probe::ProbeReply;
use crate::lock::redis::RedisLock;
use crate::lock::LockError;
use redis::Value;

/// A reply as text (INFO is a bulk string in RESP2, a verbatim string in RESP3).
pub(super) fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::Okay => Some("OK".into()),
        _ => None,
    }
}

/// A reply, or why the check that needed it cannot be made (`name`: the command, for that).
pub(super) fn answer(probe: ProbeReply, name: &str) -> Result<Value, String> {
    match probe {
        ProbeReply::Replied(v) => Ok(v),
        ProbeReply::Denied => Err(format!("{name} is denied to this user")),
        ProbeReply::Error(e) => Err(format!("{name}: {e}")),
    }
}

/// One command: its reply, or why the check that needs it cannot be made.
pub(super) async fn ask(
    node: &mut RedisLock,
    at: Option<(&str, u16)>,
    args: &[&str],
) -> Result<Result<Value, String>, LockError> {
    let name = args[..args.len().min(2)].join(" ");
    Ok(answer(node.probe(command(args), at).await?, &name))
}

pub(super) fn command(args: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd
}
