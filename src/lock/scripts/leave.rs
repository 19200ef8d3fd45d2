//! leave.lua: a waiter gives up its place in the queue.

use super::{as_string, Call, Request, LEAVE};
use crate::lock::keys::{wake_channel, Keys};
use crate::lock::LockKind;
use redis::Value;

pub struct LeaveRequest<'a> {
    pub key: &'a str,
    /// The waiter's public id.
    pub id: &'a str,
    pub kind: LockKind,
    /// The run's history entry (see `keys::history_args`).
    pub history: Vec<String>,
    /// The command that publishes a release hint (see `scripts::publish_command`).
    pub publish: &'static str,
}

impl Request for LeaveRequest<'_> {
    /// KEYS[1] lock or semaphore, KEYS[2] queue, KEYS[3] ticket expiries, KEYS[4] history.
    /// ARGV[1] public id, ARGV[2] a semaphore's limit (0: a lock), ARGV[3] wake channel,
    /// ARGV[4] publish command, ARGV[5..] the history entry.
    fn call(&self) -> Call {
        let k = Keys::of(self.key);
        let limit = match self.kind {
            LockKind::Semaphore(limit) => limit,
            LockKind::Exclusive | LockKind::Shared | LockKind::Tick { .. } => 0,
        };
        let mut args = vec![
            self.id.into(),
            limit.to_string(),
            wake_channel(self.key),
            self.publish.into(),
        ];
        args.extend(self.history.iter().cloned());
        Call {
            script: &LEAVE,
            keys: vec![self.key.into(), k.queue, k.tickets, k.history],
            args,
        }
    }
}

/// What leave.lua answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaveReply {
    /// 1: left (or was not queued).
    Left,
    /// `{-2, helper key}`: a queue key spoiled by hand; nothing changed.
    Spoiled { helper: String },
}

impl LeaveReply {
    /// `Err`: the reply is none of the script's, handed back as it came.
    pub fn decode(reply: Value) -> Result<LeaveReply, Value> {
        match reply {
            Value::Int(1) => Ok(LeaveReply::Left),
            Value::Array(items) => match items.as_slice() {
                [Value::Int(-2), helper] if as_string(helper).is_some() => {
                    Ok(LeaveReply::Spoiled {
                        helper: as_string(helper).unwrap_or_default(),
                    })
                }
                _ => Err(Value::Array(items)),
            },
            other => Err(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::mock::*;
    use super::*;

    #[test]
    fn sends_id_limit_channel_publish_then_the_history_entry() {
        let request = LeaveRequest {
            key: "job",
            id: "abc",
            kind: LockKind::Semaphore(4),
            history: vec!["0".into()],
            publish: "PUBLISH",
        };
        let call = request.call();
        let (sent, _) = run(&call, Value::Int(1));
        let keys = [
            "job",
            "lockrun:waiters:{job}",
            "lockrun:tickets:{job}",
            "lockrun:history:{job}",
        ];
        let args = ["abc", "4", "lockrun:wake:{job}", "PUBLISH", "0"];
        assert_eq!(sent, evalsha(&call, &keys, &args));
        assert_eq!(call.script.sha(), LEAVE.sha());
        for kind in [LockKind::Exclusive, LockKind::Shared] {
            let lock = LeaveRequest {
                kind,
                history: vec!["0".into()],
                ..request
            };
            assert_eq!(lock.call().args[1], "0");
        }
    }

    #[test]
    fn decodes_every_reply_of_the_script() {
        assert_eq!(LeaveReply::decode(Value::Int(1)), Ok(LeaveReply::Left));
        assert_eq!(
            LeaveReply::decode(array([Value::Int(-2), bulk("lockrun:waiters:{job}")])),
            Ok(LeaveReply::Spoiled {
                helper: "lockrun:waiters:{job}".into()
            })
        );
    }

    #[test]
    fn malformed_replies_come_back_as_they_came() {
        let odd = [
            Value::Int(0),
            Value::Int(2),
            array([]),
            array([Value::Int(-2)]),
            array([Value::Int(-2), Value::Int(1)]),
            array([Value::Int(-2), bulk("k"), bulk("extra")]),
            array([Value::Int(-1), bulk("k")]),
        ];
        for reply in odd.into_iter().chain(foreign()) {
            assert_eq!(LeaveReply::decode(reply.clone()), Err(reply));
        }
    }
}
