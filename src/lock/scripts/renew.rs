//! renew.lua (a lock) and sem_renew.lua (a semaphore's slot, a shared holder's place): one
//! request, one reply.

use super::{Request, Script, RENEW_EXCLUSIVE, RENEW_SEMAPHORE};
use crate::lock::keys::Keys;
use redis::Value;
use std::time::Duration;

/// One renewal of a lease.
pub struct RenewRequest<'a> {
    pub key: &'a str,
    /// Our holder value: only that is ever extended.
    pub value: &'a str,
    pub ttl: Duration,
    /// A semaphore's slot (sem_renew.lua) rather than a lock (renew.lua).
    pub semaphore: bool,
    /// `--shared`: our place among the lock's shared holders (sem_renew.lua on that set).
    pub shared: bool,
}

impl Request for RenewRequest<'_> {
    fn script(&self) -> &'static Script {
        if self.semaphore || self.shared {
            &RENEW_SEMAPHORE
        } else {
            &RENEW_EXCLUSIVE
        }
    }

    /// KEYS[1] the lock (shared: its shared holders).
    fn keys(&self) -> Vec<String> {
        if self.shared {
            vec![Keys::of(self.key).shared]
        } else {
            vec![self.key.into()]
        }
    }

    /// ARGV[1] holder value, ARGV[2] ttl ms.
    fn args(&self) -> Vec<String> {
        vec![self.value.into(), self.ttl.as_millis().to_string()]
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

    fn request(semaphore: bool) -> RenewRequest<'static> {
        RenewRequest {
            key: "job",
            value: "abc host=h pid=1",
            ttl: Duration::from_secs(30),
            semaphore,
            shared: false,
        }
    }

    #[test]
    fn a_shared_holder_renews_its_place_in_the_shared_set() {
        let call = RenewRequest {
            shared: true,
            ..request(false)
        }
        .call();
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
            let call = request(semaphore).call();
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
    }

    #[test]
    fn decodes_every_reply_of_the_script() {
        let decode = |v| RenewReply::decode(run(&request(false).call(), v).1.unwrap());
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
