//! One release (or give-back) of a lease, by the script of the lock's kind (`release/*.lua`):
//! one request, one reply.

use super::{Call, Request, RELEASE_EXCLUSIVE, RELEASE_SEMAPHORE, RELEASE_TICK};
use crate::lock::keys::{wake_channel, Keys};
use crate::lock::LockKind;
use redis::Value;
use std::time::Duration;

/// One release (or give-back) of a lease.
pub struct ReleaseRequest<'a> {
    pub key: &'a str,
    pub kind: LockKind,
    /// Our holder value: only that is ever deleted.
    pub value: &'a str,
    /// How long the key is kept before it goes (`--min-hold`); zero: deleted now. Not for a
    /// tick: its record keeps the tick.
    pub keep: Duration,
    /// For a tick: whether the run completed it (else the tick is handed on).
    pub completes_tick: bool,
    /// The run's history entry (see `keys::history_args`).
    pub history: Vec<String>,
    /// The command that publishes a release hint (see `scripts::publish_command`).
    pub publish: &'static str,
}

impl Request for ReleaseRequest<'_> {
    /// KEYS[1] lock, semaphore or (`--shared`) the lock's shared holders, KEYS[2] queue,
    /// KEYS[3] ticket expiries, KEYS[4] history; for a tick, KEYS[5] its record.
    /// ARGV[1] holder value, ARGV[2] ms to keep the key (for a tick: 1 completed, 0 handed
    /// on), ARGV[3] wake channel, ARGV[4] publish command, ARGV[5..] the history entry.
    fn call(&self) -> Call {
        let k = Keys::of(self.key);
        let keep = self.keep.as_micros().div_ceil(1000);
        let (script, first, keep, tick) = match self.kind {
            LockKind::Exclusive => (&RELEASE_EXCLUSIVE, self.key.into(), keep, None),
            LockKind::Semaphore(_) => (&RELEASE_SEMAPHORE, self.key.into(), keep, None),
            // The shared holders are kept as a semaphore's slots are: a sorted set of holder
            // values, given back by the semaphore's script.
            LockKind::Shared => (&RELEASE_SEMAPHORE, k.shared, keep, None),
            LockKind::Tick { .. } => (
                &RELEASE_TICK,
                self.key.into(),
                u128::from(self.completes_tick),
                Some(k.tick),
            ),
        };
        let mut keys = vec![first, k.queue, k.tickets, k.history];
        keys.extend(tick);
        let mut args = vec![
            self.value.into(),
            keep.to_string(),
            wake_channel(self.key),
            self.publish.into(),
        ];
        args.extend(self.history.iter().cloned());
        Call { script, keys, args }
    }
}

/// What a release script answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReleaseReply {
    /// 1: deleted (a semaphore: our slot given back).
    Deleted,
    /// 2: kept for the time asked.
    Kept,
    /// 0: not ours (nothing else touched).
    NotOwner,
}

impl ReleaseReply {
    /// `Err`: the reply is none of the script's, handed back as it came.
    pub fn decode(reply: Value) -> Result<ReleaseReply, Value> {
        match reply {
            Value::Int(1) => Ok(ReleaseReply::Deleted),
            Value::Int(2) => Ok(ReleaseReply::Kept),
            Value::Int(0) => Ok(ReleaseReply::NotOwner),
            other => Err(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::mock::*;
    use super::*;

    fn request(kind: LockKind, keep: Duration) -> ReleaseRequest<'static> {
        ReleaseRequest {
            key: "job",
            kind,
            value: "abc host=h pid=1",
            keep,
            completes_tick: false,
            history: vec!["5".into(), "outcome".into(), "ran".into()],
            publish: "SPUBLISH",
        }
    }

    #[test]
    fn a_shared_holder_gives_back_its_place_in_the_shared_set() {
        let call = request(LockKind::Shared, Duration::ZERO).call();
        let (sent, _) = run(&call, Value::Int(1));
        let keys = [
            "lockrun:shared:{job}",
            "lockrun:waiters:{job}",
            "lockrun:tickets:{job}",
            "lockrun:history:{job}",
        ];
        let args = [
            "abc host=h pid=1",
            "0",
            "lockrun:wake:{job}",
            "SPUBLISH",
            "5",
            "outcome",
            "ran",
        ];
        assert_eq!(sent, evalsha(&call, &keys, &args));
        assert_eq!(call.script.sha(), RELEASE_SEMAPHORE.sha());
    }

    #[test]
    fn a_tick_sends_its_record_and_whether_it_completed() {
        for (completed, flag) in [(true, "1"), (false, "0")] {
            let call = ReleaseRequest {
                completes_tick: completed,
                ..request(
                    LockKind::Tick {
                        length: Duration::from_secs(54),
                        standbys: 2,
                    },
                    Duration::from_secs(9),
                )
            }
            .call();
            let (sent, _) = run(&call, Value::Int(1));
            let keys = [
                "job",
                "lockrun:waiters:{job}",
                "lockrun:tickets:{job}",
                "lockrun:history:{job}",
                "lockrun:tick:{job}",
            ];
            let args = [
                "abc host=h pid=1",
                flag,
                "lockrun:wake:{job}",
                "SPUBLISH",
                "5",
                "outcome",
                "ran",
            ];
            assert_eq!(sent, evalsha(&call, &keys, &args));
            assert_eq!(call.script.sha(), RELEASE_TICK.sha());
        }
    }

    #[test]
    fn sends_value_keep_channel_publish_then_the_history_entry() {
        for semaphore in [false, true] {
            let kind = if semaphore {
                LockKind::Semaphore(2)
            } else {
                LockKind::Exclusive
            };
            let call = request(kind, Duration::from_micros(1_001)).call();
            let (sent, _) = run(&call, Value::Int(1));
            let keys = [
                "job",
                "lockrun:waiters:{job}",
                "lockrun:tickets:{job}",
                "lockrun:history:{job}",
            ];
            let args = [
                "abc host=h pid=1",
                "2",
                "lockrun:wake:{job}",
                "SPUBLISH",
                "5",
                "outcome",
                "ran",
            ];
            assert_eq!(sent, evalsha(&call, &keys, &args));
            let script = if semaphore {
                &RELEASE_SEMAPHORE
            } else {
                &RELEASE_EXCLUSIVE
            };
            assert_eq!(call.script.sha(), script.sha());
        }
        // The time to keep rounds up to whole milliseconds.
        let keep = |d| request(LockKind::Exclusive, d).call().args[1].clone();
        assert_eq!(keep(Duration::ZERO), "0");
        assert_eq!(keep(Duration::from_millis(250)), "250");
    }

    #[test]
    fn decodes_every_reply_of_the_script() {
        let decode = |v| {
            ReleaseReply::decode(
                run(&request(LockKind::Exclusive, Duration::ZERO).call(), v)
                    .1
                    .unwrap(),
            )
        };
        assert_eq!(decode(Value::Int(1)), Ok(ReleaseReply::Deleted));
        assert_eq!(decode(Value::Int(2)), Ok(ReleaseReply::Kept));
        assert_eq!(decode(Value::Int(0)), Ok(ReleaseReply::NotOwner));
    }

    #[test]
    fn malformed_replies_come_back_as_they_came() {
        let odd = [
            Value::Int(3),
            Value::Int(-1),
            bulk("1"),
            array([Value::Int(1)]),
            array([]),
        ];
        for reply in odd.into_iter().chain(foreign()) {
            assert_eq!(ReleaseReply::decode(reply.clone()), Err(reply));
        }
    }
}
