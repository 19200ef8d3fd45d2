//! One renewal of a lease, by the script of the lock's kind (`renew/*.lua`): one request, one
//! reply.

use super::{Call, Request, RENEW_EXCLUSIVE, RENEW_SEMAPHORE};
use crate::lock::keys::Keys;
use crate::lock::LockKind;
use redis::Value;
use std::time::Duration;

/// One renewal of a lease.
pub struct RenewRequest<'a> {
    pub key: &'a str,
    pub kind: LockKind,
    /// Our holder value: only that is ever extended.
    pub value: &'a str,
    pub ttl: Duration,
}

impl Request for RenewRequest<'_> {
    /// KEYS[1] the lock, the semaphore or (`--shared`) the lock's shared holders; ARGV[1]
    /// holder value, ARGV[2] ttl ms.
    fn call(&self) -> Call {
        let (script, key) = match self.kind {
            LockKind::Exclusive | LockKind::Tick { .. } => (&RENEW_EXCLUSIVE, self.key.into()),
            LockKind::Semaphore(_) => (&RENEW_SEMAPHORE, self.key.into()),
            // A sorted set of holder values, as a semaphore's slots (see `ReleaseRequest`).
            LockKind::Shared => (&RENEW_SEMAPHORE, Keys::of(self.key).shared),
        };
        let args = vec![self.value.into(), self.ttl.as_millis().to_string()];
        Call {
            script,
            keys: vec![key],
            args,
        }
    }
}

/// What a renewal script answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RenewReply {
    /// The server's clock in µs (positive): renewed.
    Renewed { server_us: i64 },
    /// 0: not ours (gone, another holder, or another type).
    NotOwner,
}

impl RenewReply {
    /// `Err`: the reply is none of the script's, handed back as it came.
    pub fn decode(reply: Value) -> Result<RenewReply, Value> {
        match reply {
            Value::Int(0) => Ok(RenewReply::NotOwner),
            Value::Int(us) if us > 0 => Ok(RenewReply::Renewed { server_us: us }),
            other => Err(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::mock::*;
    use super::*;

    fn request(kind: LockKind) -> RenewRequest<'static> {
        RenewRequest {
            key: "job",
            kind,
            value: "abc host=h pid=1",
            ttl: Duration::from_secs(30),
        }
    }

    #[test]
    fn a_shared_holder_renews_its_place_in_the_shared_set() {
        let call = request(LockKind::Shared).call();
        let (sent, _) = run(&call, Value::Int(0));
        assert_eq!(
            sent,
            evalsha(
                &call,
                &["lockrun:shared:{job}"],
                &["abc host=h pid=1", "30000"]
            )
        );
        assert_eq!(call.script.sha(), RENEW_SEMAPHORE.sha());
    }

    #[test]
    fn sends_the_key_then_value_and_ttl() {
        for semaphore in [false, true] {
            let kind = if semaphore {
                LockKind::Semaphore(2)
            } else {
                LockKind::Exclusive
            };
            let call = request(kind).call();
            let (sent, _) = run(&call, Value::Int(0));
            assert_eq!(
                sent,
                evalsha(&call, &["job"], &["abc host=h pid=1", "30000"])
            );
            let script = if semaphore {
                &RENEW_SEMAPHORE
            } else {
                &RENEW_EXCLUSIVE
            };
            assert_eq!(call.script.sha(), script.sha());
        }
        // A tick's lease is an exclusive lock's.
        let call = request(LockKind::Tick {
            length: Duration::from_secs(54),
            standbys: 2,
        })
        .call();
        assert_eq!(call.script.sha(), RENEW_EXCLUSIVE.sha());
        assert_eq!(call.keys, ["job"]);
    }

    #[test]
    fn decodes_every_reply_of_the_script() {
        let decode =
            |v| RenewReply::decode(run(&request(LockKind::Exclusive).call(), v).1.unwrap());
        assert_eq!(decode(Value::Int(0)), Ok(RenewReply::NotOwner));
        assert_eq!(
            decode(Value::Int(1_700_000_000_000_000)),
            Ok(RenewReply::Renewed {
                server_us: 1_700_000_000_000_000
            })
        );
    }

    #[test]
    fn malformed_replies_come_back_as_they_came() {
        let odd = [Value::Int(-1), bulk("5"), array([Value::Int(5)])];
        for reply in odd.into_iter().chain(foreign()) {
            assert_eq!(RenewReply::decode(reply.clone()), Err(reply));
        }
    }
}
