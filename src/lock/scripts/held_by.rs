//! held_by.lua: does a holder (by public id) hold the lock? (`--reentrant`)

use super::{Call, Request, HELD_BY};
use crate::lock::keys::Keys;
use crate::lock::LockKind;
use redis::Value;

pub struct HeldByRequest<'a> {
    pub key: &'a str,
    /// The holder's public id (the token never leaves this process).
    pub id: &'a str,
    pub kind: LockKind,
}

impl Request for HeldByRequest<'_> {
    /// KEYS[1] the lock or semaphore; for a lock, KEYS[2] its shared holders. ARGV[1] the
    /// public id.
    fn call(&self) -> Call {
        let mut keys = vec![self.key.into()];
        match self.kind {
            LockKind::Exclusive | LockKind::Shared | LockKind::Tick { .. } => {
                keys.push(Keys::of(self.key).shared)
            }
            LockKind::Semaphore(_) => {}
        }
        Call {
            script: &HELD_BY,
            keys,
            args: vec![self.id.into()],
        }
    }
}

/// How the holder holds the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeldBy {
    /// 1: it holds the lock (exclusively) or a semaphore's slot.
    Holder,
    /// 2: it is one of the lock's shared holders.
    SharedHolder,
    /// Any other integer (the script says 0): it holds nothing of the key.
    Nobody,
}

/// `Err`: the reply is none of the script's, handed back as it came.
pub fn decode(reply: Value) -> Result<HeldBy, Value> {
    match reply {
        Value::Int(1) => Ok(HeldBy::Holder),
        Value::Int(2) => Ok(HeldBy::SharedHolder),
        Value::Int(_) => Ok(HeldBy::Nobody),
        other => Err(other),
    }
}

#[cfg(test)]
mod tests {
    use super::super::mock::*;
    use super::*;

    #[test]
    fn sends_the_key_its_shared_holders_and_the_public_id() {
        let call = HeldByRequest {
            key: "job",
            id: "abc",
            kind: LockKind::Exclusive,
        }
        .call();
        let (sent, got) = run(&call, Value::Int(1));
        assert_eq!(
            sent,
            evalsha(&call, &["job", "lockrun:shared:{job}"], &["abc"])
        );
        assert_eq!(call.script.sha(), HELD_BY.sha());
        assert_eq!(decode(got.unwrap()), Ok(HeldBy::Holder));
        // A semaphore has no shared holders.
        let call = HeldByRequest {
            key: "job",
            id: "abc",
            kind: LockKind::Semaphore(2),
        }
        .call();
        assert_eq!(call.keys, ["job"]);
    }

    #[test]
    fn decodes_every_reply_of_the_script() {
        assert_eq!(decode(Value::Int(1)), Ok(HeldBy::Holder));
        assert_eq!(decode(Value::Int(2)), Ok(HeldBy::SharedHolder));
        assert_eq!(decode(Value::Int(0)), Ok(HeldBy::Nobody));
        assert_eq!(decode(Value::Int(3)), Ok(HeldBy::Nobody));
        for reply in [bulk("1"), array([Value::Int(1)])]
            .into_iter()
            .chain(foreign())
        {
            assert_eq!(decode(reply.clone()), Err(reply));
        }
    }
}
