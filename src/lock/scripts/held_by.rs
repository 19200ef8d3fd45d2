//! held_by.lua: does a holder (by public id) hold the lock? (`--reentrant`)

use super::{Request, Script, HELD_BY};
use redis::Value;

pub struct HeldByRequest<'a> {
    pub key: &'a str,
    /// The holder's public id (the token never leaves this process).
    pub id: &'a str,
}

impl Request for HeldByRequest<'_> {
    fn script(&self) -> &'static Script {
        &HELD_BY
    }

    /// KEYS[1] the lock or semaphore.
    fn keys(&self) -> Vec<String> {
        vec![self.key.into()]
    }

    /// ARGV[1] the public id.
    fn args(&self) -> Vec<String> {
        vec![self.id.into()]
    }
}

/// 1: held by that holder; any other integer (the script says 0): not.
/// `Err`: the reply is none of the script's, handed back as it came.
pub fn decode(reply: Value) -> Result<bool, Value> {
    match reply {
        Value::Int(n) => Ok(n == 1),
        other => Err(other),
    }
}

#[cfg(test)]
mod tests {
    use super::super::mock::*;
    use super::*;

    #[test]
    fn sends_the_key_and_the_public_id() {
        let call = HeldByRequest {
            key: "job",
            id: "abc",
        }
        .call();
        let (sent, got) = run(&call, Value::Int(1));
        assert_eq!(sent, evalsha(&call, &["job"], &["abc"]));
        assert_eq!(call.script.sha(), HELD_BY.sha());
        assert_eq!(decode(got.unwrap()), Ok(true));
    }

    #[test]
    fn decodes_every_reply_of_the_script() {
        assert_eq!(decode(Value::Int(1)), Ok(true));
        assert_eq!(decode(Value::Int(0)), Ok(false));
        assert_eq!(decode(Value::Int(2)), Ok(false));
        for reply in [bulk("1"), array([Value::Int(1)])]
            .into_iter()
            .chain(foreign())
        {
            assert_eq!(decode(reply.clone()), Err(reply));
        }
    }
}
