//! force_release.lua: `lockrun release --force` deletes a lock or a whole semaphore.

use super::{as_string, Call, Request, FORCE_RELEASE};
use crate::lock::keys::{wake_channel, Keys};
use redis::Value;

pub struct ForceReleaseRequest<'a> {
    pub key: &'a str,
    /// The operator's history entry (see `keys::history_args`).
    pub history: Vec<String>,
    /// The command that publishes a release hint (see `scripts::publish_command`).
    pub publish: &'static str,
}

impl Request for ForceReleaseRequest<'_> {
    /// KEYS[1] lock, KEYS[2] queue, KEYS[3] ticket expiries, KEYS[4] fencing counter,
    /// KEYS[5] history, KEYS[6] the shared holders. ARGV[1] wake channel, ARGV[2] publish
    /// command, ARGV[3..] the history entry.
    fn call(&self) -> Call {
        let k = Keys::of(self.key);
        let keys = vec![
            self.key.into(),
            k.queue,
            k.tickets,
            k.fence,
            k.history,
            k.shared,
        ];
        let mut args = vec![wake_channel(self.key), self.publish.into()];
        args.extend(self.history.iter().cloned());
        Call {
            script: &FORCE_RELEASE,
            keys,
            args,
        }
    }
}

/// What `release --force` deleted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Deleted {
    pub kind: String,
    pub fence: Option<u64>,
    pub holders: Vec<String>,
}

/// What force_release.lua answers: `{type, fence or '', deleted holder values...}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ForceReleaseReply {
    /// `none`: there was nothing to delete.
    Nothing,
    /// `string`, `zset` or `shared` (a lock held in shared mode): deleted.
    Deleted(Deleted),
    /// Any other type (`foreign-string`, `foreign-zset`, `hash`, ...): not lockrun's, nothing
    /// touched.
    Refused { kind: String },
}

impl ForceReleaseReply {
    /// Items that are not text read as empty text. `Err`: not an array, or a deletion without
    /// its fence item, handed back as it came.
    pub fn decode(reply: Value) -> Result<ForceReleaseReply, Value> {
        let Value::Array(items) = reply else {
            return Err(reply);
        };
        let mut text = items.iter().map(|v| as_string(v).unwrap_or_default());
        let kind = text.next().unwrap_or_default();
        match kind.as_str() {
            "none" => Ok(ForceReleaseReply::Nothing),
            "string" | "zset" | "shared" if items.len() >= 2 => {
                let fence = text.next().and_then(|f| f.parse().ok());
                Ok(ForceReleaseReply::Deleted(Deleted {
                    kind,
                    fence,
                    holders: text.collect(),
                }))
            }
            "string" | "zset" | "shared" => Err(Value::Array(items)),
            _ => Ok(ForceReleaseReply::Refused { kind }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::mock::*;
    use super::*;

    #[test]
    fn sends_channel_publish_then_the_history_entry() {
        let request = ForceReleaseRequest {
            key: "job",
            history: vec!["100".into(), "outcome".into(), "forced".into()],
            publish: "SPUBLISH",
        };
        let call = request.call();
        let (sent, _) = run(&call, array([]));
        let keys = [
            "job",
            "lockrun:waiters:{job}",
            "lockrun:tickets:{job}",
            "lockrun:fence:{job}",
            "lockrun:history:{job}",
            "lockrun:shared:{job}",
        ];
        let args = ["lockrun:wake:{job}", "SPUBLISH", "100", "outcome", "forced"];
        assert_eq!(sent, evalsha(&call, &keys, &args));
        assert_eq!(call.script.sha(), FORCE_RELEASE.sha());
    }

    #[test]
    fn decodes_every_reply_of_the_script() {
        let decode = ForceReleaseReply::decode;
        assert_eq!(
            decode(array([bulk("none"), bulk("")])),
            Ok(ForceReleaseReply::Nothing)
        );
        assert_eq!(
            decode(array([bulk("string"), bulk("42"), bulk("abc host=h")])),
            Ok(ForceReleaseReply::Deleted(Deleted {
                kind: "string".into(),
                fence: Some(42),
                holders: vec!["abc host=h".into()]
            }))
        );
        assert_eq!(
            decode(array([bulk("zset"), bulk(""), bulk("a"), bulk("b")])),
            Ok(ForceReleaseReply::Deleted(Deleted {
                kind: "zset".into(),
                fence: None,
                holders: vec!["a".into(), "b".into()]
            }))
        );
        // A lock held in shared mode: its shared holders were deleted.
        assert_eq!(
            decode(array([bulk("shared"), bulk("7"), bulk("a"), bulk("b")])),
            Ok(ForceReleaseReply::Deleted(Deleted {
                kind: "shared".into(),
                fence: Some(7),
                holders: vec!["a".into(), "b".into()]
            }))
        );
        for kind in ["foreign-string", "foreign-zset", "hash"] {
            assert_eq!(
                decode(array([bulk(kind), bulk("3")])),
                Ok(ForceReleaseReply::Refused { kind: kind.into() })
            );
        }
    }

    #[test]
    fn malformed_replies_read_leniently_or_come_back() {
        // A deletion without its fence item would have nothing to say about it.
        for items in [vec![bulk("string")], vec![bulk("zset")]] {
            let reply = array(items);
            assert_eq!(ForceReleaseReply::decode(reply.clone()), Err(reply));
        }
        // Items that are not text read as empty text.
        assert_eq!(
            ForceReleaseReply::decode(array([bulk("string"), Value::Int(5), Value::Nil])),
            Ok(ForceReleaseReply::Deleted(Deleted {
                kind: "string".into(),
                fence: None,
                holders: vec!["".into()]
            }))
        );
        assert_eq!(
            ForceReleaseReply::decode(array([])),
            Ok(ForceReleaseReply::Refused { kind: "".into() })
        );
        for reply in [Value::Int(1), bulk("none")].into_iter().chain(foreign()) {
            assert_eq!(ForceReleaseReply::decode(reply.clone()), Err(reply));
        }
    }
}
