//! One acquire attempt, by the script of the lock's kind (`acquire/*.lua`): one request, one
//! reply, since all answer alike.

use super::{
    as_int, as_string, Call, Request, ACQUIRE_EXCLUSIVE, ACQUIRE_SEMAPHORE, ACQUIRE_SHARED,
    ACQUIRE_TICK,
};
use crate::lock::failure::Misuse;
use crate::lock::keys::{wake_channel, Keys};
use crate::lock::LockKind;
use redis::Value;
use std::time::Duration;

/// One acquire attempt.
pub struct AcquireRequest<'a> {
    pub key: &'a str,
    pub kind: LockKind,
    /// The holder value written as the lock's value (or as the semaphore's member).
    pub value: &'a str,
    pub ttl: Duration,
    /// The holder's public id, its name in the queue.
    pub id: &'a str,
    /// How long a place in the queue lasts; `None`: not waiting, do not queue.
    pub ticket: Option<Duration>,
    /// The history cap for the "skipped" entry of an attempt that ends its run (0: none).
    pub history: u32,
    /// The command that publishes a release hint (see `scripts::publish_command`).
    pub publish: &'static str,
    /// How long ago this run began: a tick it opens ends that much sooner.
    pub began: Duration,
}

impl Request for AcquireRequest<'_> {
    /// KEYS[1] lock, KEYS[2] fencing counter, KEYS[3] queue, KEYS[4] ticket expiries,
    /// KEYS[5] history; for a tick, KEYS[6] its record; then the shared holders of a lock of
    /// that name (`--shared`), which every kind of acquire must see.
    /// ARGV[1] holder value, ARGV[2] ttl ms, ARGV[3] public id, ARGV[4] ticket ms (0: none);
    /// then, by kind, what its script reads after those (its file's header lists them).
    fn call(&self) -> Call {
        let k = Keys::of(self.key);
        let mut keys = vec![self.key.into(), k.fence, k.queue, k.tickets, k.history];
        let ticket = self.ticket.map_or(0, |t| t.as_millis());
        let mut args = vec![
            self.value.into(),
            self.ttl.as_millis().to_string(),
            self.id.into(),
            ticket.to_string(),
        ];
        let history = self.history.to_string();
        let script = match self.kind {
            // ARGV[5] the history cap.
            LockKind::Exclusive => {
                args.push(history);
                &ACQUIRE_EXCLUSIVE
            }
            // ARGV[5] wake channel, ARGV[6] publish command, ARGV[7] the history cap.
            LockKind::Shared => {
                args.extend([wake_channel(self.key), self.publish.into(), history]);
                &ACQUIRE_SHARED
            }
            // ARGV[5] the limit, ARGV[6] wake channel, ARGV[7] publish command, ARGV[8] the
            // history cap.
            LockKind::Semaphore(limit) => {
                args.extend([
                    limit.to_string(),
                    wake_channel(self.key),
                    self.publish.into(),
                    history,
                ]);
                &ACQUIRE_SEMAPHORE
            }
            // KEYS[6] the tick's record; ARGV[5] the history cap, ARGV[6] the tick's length ms,
            // ARGV[7] ms since this run began, ARGV[8] how many stand by.
            LockKind::Tick { length, standbys } => {
                keys.push(k.tick);
                args.extend([
                    history,
                    length.as_millis().to_string(),
                    self.began.as_millis().to_string(),
                    standbys.to_string(),
                ]);
                &ACQUIRE_TICK
            }
        };
        keys.push(k.shared);
        Call { script, keys, args }
    }
}

/// What an acquire script answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AcquireReply {
    /// `{1, fence, server clock in µs}`: acquired (the clock is absent from a script older
    /// than the reading of it); for a tick, `{1, fence, clock, attempt}`.
    Acquired {
        fence: u64,
        server_us: Option<i64>,
        /// For a tick: which attempt at it this is (1: the tick's first; more: a takeover).
        attempt: Option<u32>,
    },
    /// `{0, pttl, holder, rank}`: held (or promised to a queued waiter); for a tick a fifth
    /// item, what is left of it, says this attempt stands by for it.
    Held {
        /// What is left of the lease; `None` for a key without expiry (PTTL -1, set by hand)
        /// and for a lock that is free but promised to a queued waiter (-2): no lease end to
        /// sleep by.
        pttl: Option<Duration>,
        holder: Option<String>,
        /// Our place in the queue.
        rank: Option<u64>,
        /// Standing by for a tick, which ends this much later.
        tick_left: Option<Duration>,
    },
    /// `{3, pttl, holder}`: held, and a tick's attempt not needed (the tick has its standbys,
    /// or a run of an earlier tick holds the lock): the run ends skipped, recorded by the script.
    Passed {
        pttl: Option<Duration>,
        holder: Option<String>,
    },
    /// `{2, 'done'}`: the tick completed elsewhere; `{2, 'over'}`: the tick this attempt stood
    /// by for has ended.
    TickEnded { completed: bool },
    /// `{-1, type}` or `{-2, helper key}`: refused, nothing written.
    Refused(Refusal),
}

/// Why an acquire script refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `{-1, type}`: the key is of a type the request does not use (or a sorted set that is
    /// not a semaphore of lockrun's).
    Misused { kind: String },
    /// `{-2, helper key}`: a helper key spoiled by hand.
    Spoiled { helper: String },
}

impl AcquireReply {
    /// `Err`: the reply is none of the script's, handed back as it came. The first two items
    /// decide; items after those a shape names are not read.
    pub fn decode(reply: Value) -> Result<AcquireReply, Value> {
        let Value::Array(items) = reply else {
            return Err(reply);
        };
        Ok(match (items.first(), items.get(1)) {
            // Fences are at least the server's clock in µs, attempts count from 1: anything
            // else (a negative fence would wrap to near 2^64 as u64, and reach the job as
            // LOCKRUN_FENCE) is no script's reply.
            (Some(Value::Int(1)), Some(&Value::Int(fence))) if fence > 0 => {
                let attempt = match as_int(items.get(3)) {
                    None => None,
                    Some(a) => match u32::try_from(a) {
                        Ok(a) if a > 0 => Some(a),
                        _ => return Err(Value::Array(items)),
                    },
                };
                AcquireReply::Acquired {
                    fence: fence as u64,
                    server_us: as_int(items.get(2)),
                    attempt,
                }
            }
            (Some(Value::Int(0)), Some(Value::Int(pttl))) => AcquireReply::Held {
                pttl: u64::try_from(*pttl).ok().map(Duration::from_millis),
                holder: items.get(2).and_then(as_string),
                rank: as_int(items.get(3)).and_then(|r| u64::try_from(r).ok()),
                tick_left: as_int(items.get(4))
                    .and_then(|r| u64::try_from(r).ok())
                    .map(Duration::from_millis),
            },
            (Some(Value::Int(3)), Some(Value::Int(pttl))) => AcquireReply::Passed {
                pttl: u64::try_from(*pttl).ok().map(Duration::from_millis),
                holder: items.get(2).and_then(as_string),
            },
            (Some(Value::Int(2)), Some(end)) => match as_string(end).as_deref() {
                Some("done") => AcquireReply::TickEnded { completed: true },
                Some("over") => AcquireReply::TickEnded { completed: false },
                _ => return Err(Value::Array(items)),
            },
            (Some(Value::Int(-1)), Some(kind)) => AcquireReply::Refused(Refusal::Misused {
                kind: as_string(kind).unwrap_or_default(),
            }),
            (Some(Value::Int(-2)), Some(key)) => AcquireReply::Refused(Refusal::Spoiled {
                helper: as_string(key).unwrap_or_default(),
            }),
            _ => return Err(Value::Array(items)),
        })
    }
}

impl Refusal {
    /// What the refusal says about `key`, taken as a lock of kind `asked`.
    pub fn misuse(&self, key: &str, asked: LockKind) -> Misuse {
        let key = key.to_string();
        let semaphore = matches!(asked, LockKind::Semaphore(_));
        match self {
            Refusal::Misused { kind } => match (semaphore, kind.as_str()) {
                (_, "foreign-zset") => Misuse::ForeignSemaphore { key },
                (_, "shared") => Misuse::IsShared { key },
                (false, "zset") => Misuse::IsSemaphore { key },
                (true, "string") => Misuse::IsPlainLock { key },
                _ => Misuse::Foreign {
                    key,
                    found: kind.clone(),
                },
            },
            Refusal::Spoiled { helper } if *helper == Keys::of(&key).fence => {
                Misuse::SpoiledFence {
                    helper: helper.clone(),
                }
            }
            Refusal::Spoiled { helper } if *helper == Keys::of(&key).tick => Misuse::SpoiledTick {
                helper: helper.clone(),
            },
            Refusal::Spoiled { helper } if *helper == Keys::of(&key).shared => {
                Misuse::SpoiledShared {
                    helper: helper.clone(),
                }
            }
            Refusal::Spoiled { helper } => Misuse::SpoiledQueue {
                helper: helper.clone(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::mock::*;
    use super::*;

    fn request(kind: LockKind, ticket: Option<Duration>) -> AcquireRequest<'static> {
        AcquireRequest {
            key: "job",
            kind,
            value: "abc host=h pid=1",
            ttl: Duration::from_millis(1500),
            id: "abc",
            ticket,
            history: 7,
            publish: "PUBLISH",
            began: Duration::from_millis(2500),
        }
    }

    const KEYS: [&str; 5] = [
        "job",
        "lockrun:fence:{job}",
        "lockrun:waiters:{job}",
        "lockrun:tickets:{job}",
        "lockrun:history:{job}",
    ];

    #[test]
    fn a_lock_sends_value_ttl_id_ticket_and_history_cap() {
        let call = request(LockKind::Exclusive, Some(Duration::from_secs(3))).call();
        let (sent, _) = run(&call, Value::Nil);
        let args = ["abc host=h pid=1", "1500", "abc", "3000", "7"];
        // An exclusive attempt names the shared holders too: it must see them.
        let mut keys = KEYS.to_vec();
        keys.push("lockrun:shared:{job}");
        assert_eq!(sent, evalsha(&call, &keys, &args));
        assert_eq!(call.script.sha(), ACQUIRE_EXCLUSIVE.sha());
        let call = request(LockKind::Exclusive, None).call();
        assert_eq!(call.args, ["abc host=h pid=1", "1500", "abc", "0", "7"]);
    }

    #[test]
    fn a_semaphore_sends_its_limit_channel_and_publish_command_before_the_cap() {
        let call = request(LockKind::Semaphore(3), None).call();
        let (sent, _) = run(&call, Value::Nil);
        let mut keys = KEYS.to_vec();
        keys.push("lockrun:shared:{job}");
        let args = [
            "abc host=h pid=1",
            "1500",
            "abc",
            "0",
            "3",
            "lockrun:wake:{job}",
            "PUBLISH",
            "7",
        ];
        assert_eq!(sent, evalsha(&call, &keys, &args));
        assert_eq!(call.script.sha(), ACQUIRE_SEMAPHORE.sha());
    }

    #[test]
    fn a_shared_attempt_sends_its_set_then_channel_and_publish_command_before_the_cap() {
        let call = request(LockKind::Shared, Some(Duration::from_secs(3))).call();
        let (sent, _) = run(&call, Value::Nil);
        let mut keys = KEYS.to_vec();
        keys.push("lockrun:shared:{job}");
        let args = [
            "abc host=h pid=1",
            "1500",
            "abc",
            "3000",
            "lockrun:wake:{job}",
            "PUBLISH",
            "7",
        ];
        assert_eq!(sent, evalsha(&call, &keys, &args));
        assert_eq!(call.script.sha(), ACQUIRE_SHARED.sha());
        // Its replies are a lock's: held shared reads as held by the earliest lease's holder.
        let (_, got) = run(
            &call,
            array([
                Value::Int(0),
                Value::Int(400),
                bulk("s host=h"),
                Value::Int(1),
            ]),
        );
        assert_eq!(
            AcquireReply::decode(got.unwrap()),
            Ok(AcquireReply::Held {
                pttl: Some(Duration::from_millis(400)),
                holder: Some("s host=h".into()),
                rank: Some(1),
                tick_left: None,
            })
        );
    }

    fn decode(items: Vec<Value>) -> Result<AcquireReply, Value> {
        let (_, got) = run(&request(LockKind::Exclusive, None).call(), array(items));
        AcquireReply::decode(got.expect("a reply"))
    }

    #[test]
    fn acquired_with_and_without_the_server_clock() {
        let got = decode(vec![Value::Int(1), Value::Int(42), Value::Int(7_000)]);
        assert_eq!(
            got,
            Ok(AcquireReply::Acquired {
                fence: 42,
                server_us: Some(7_000),
                attempt: None,
            })
        );
        let got = decode(vec![Value::Int(1), Value::Int(42)]);
        let want = AcquireReply::Acquired {
            fence: 42,
            server_us: None,
            attempt: None,
        };
        assert_eq!(got, Ok(want.clone()));
        // A clock that is not an integer is no clock.
        assert_eq!(
            decode(vec![Value::Int(1), Value::Int(42), bulk("7")]),
            Ok(want)
        );
    }

    #[test]
    fn held_by_a_holder_by_nobody_and_without_expiry() {
        let got = decode(vec![
            Value::Int(0),
            Value::Int(900),
            bulk("x host=h"),
            Value::Int(2),
        ]);
        assert_eq!(
            got,
            Ok(AcquireReply::Held {
                pttl: Some(Duration::from_millis(900)),
                holder: Some("x host=h".into()),
                rank: Some(2),
                tick_left: None,
            })
        );
        for pttl in [-1, -2] {
            let got = decode(vec![
                Value::Int(0),
                Value::Int(pttl),
                bulk("r"),
                Value::Int(0),
            ]);
            assert!(
                matches!(
                    got,
                    Ok(AcquireReply::Held {
                        pttl: None,
                        rank: Some(0),
                        ..
                    })
                ),
                "{got:?}"
            );
        }
        let got = decode(vec![Value::Int(0), Value::Int(5)]);
        assert_eq!(
            got,
            Ok(AcquireReply::Held {
                pttl: Some(Duration::from_millis(5)),
                holder: None,
                rank: None,
                tick_left: None,
            })
        );
    }

    #[test]
    fn a_tick_sends_its_record_its_length_when_its_run_began_and_its_standbys() {
        let tick = LockKind::Tick {
            length: Duration::from_secs(54),
            standbys: 2,
        };
        let call = request(tick, Some(Duration::from_secs(3))).call();
        let (sent, _) = run(&call, Value::Nil);
        let mut keys = KEYS.to_vec();
        keys.push("lockrun:tick:{job}");
        keys.push("lockrun:shared:{job}");
        let args = [
            "abc host=h pid=1",
            "1500",
            "abc",
            "3000",
            "7",
            "54000",
            "2500",
            "2",
        ];
        assert_eq!(sent, evalsha(&call, &keys, &args));
        assert_eq!(call.script.sha(), ACQUIRE_TICK.sha());
    }

    #[test]
    fn a_ticks_replies_say_the_attempt_the_time_left_and_how_it_ended() {
        let got = decode(vec![
            Value::Int(1),
            Value::Int(42),
            Value::Int(7),
            Value::Int(2),
        ]);
        assert_eq!(
            got,
            Ok(AcquireReply::Acquired {
                fence: 42,
                server_us: Some(7),
                attempt: Some(2),
            })
        );
        let got = decode(vec![
            Value::Int(0),
            Value::Int(900),
            bulk("x host=h"),
            Value::Int(0),
            Value::Int(50_000),
        ]);
        assert_eq!(
            got,
            Ok(AcquireReply::Held {
                pttl: Some(Duration::from_millis(900)),
                holder: Some("x host=h".into()),
                rank: Some(0),
                tick_left: Some(Duration::from_secs(50)),
            })
        );
        let passed = decode(vec![Value::Int(3), Value::Int(900), bulk("x host=h")]);
        assert_eq!(
            passed,
            Ok(AcquireReply::Passed {
                pttl: Some(Duration::from_millis(900)),
                holder: Some("x host=h".into()),
            })
        );
        assert!(decode(vec![Value::Int(3), bulk("900")]).is_err());
        let ended = |word: &str| decode(vec![Value::Int(2), bulk(word)]);
        assert_eq!(
            ended("done"),
            Ok(AcquireReply::TickEnded { completed: true })
        );
        assert_eq!(
            ended("over"),
            Ok(AcquireReply::TickEnded { completed: false })
        );
        // Anything else after a 2 is none of the script's replies.
        assert!(ended("later").is_err());
        assert!(decode(vec![Value::Int(2), Value::Int(1)]).is_err());
    }

    #[test]
    fn refusals_name_the_misuse() {
        let refusal = |items| match decode(items) {
            Ok(AcquireReply::Refused(r)) => r,
            other => panic!("{other:?}"),
        };
        let misused =
            |kind: &str, asked| refusal(vec![Value::Int(-1), bulk(kind)]).misuse("job", asked);
        let key = "job".to_string();
        assert_eq!(
            misused("zset", LockKind::Exclusive),
            Misuse::IsSemaphore { key: key.clone() }
        );
        assert_eq!(
            misused("string", LockKind::Semaphore(2)),
            Misuse::IsPlainLock { key: key.clone() }
        );
        // A semaphore or a tick refused beside shared holders of a lock of that name.
        assert_eq!(
            misused("shared", LockKind::Semaphore(2)),
            Misuse::IsShared { key: key.clone() }
        );
        assert_eq!(
            misused("foreign-zset", LockKind::Semaphore(2)),
            Misuse::ForeignSemaphore { key: key.clone() }
        );
        assert_eq!(
            misused("hash", LockKind::Exclusive),
            Misuse::Foreign {
                key: key.clone(),
                found: "hash".into()
            }
        );
        let spoiled = |helper: &str| {
            refusal(vec![Value::Int(-2), bulk(helper)]).misuse("job", LockKind::Exclusive)
        };
        assert_eq!(
            spoiled("lockrun:fence:{job}"),
            Misuse::SpoiledFence {
                helper: "lockrun:fence:{job}".into()
            }
        );
        assert_eq!(
            spoiled("lockrun:tickets:{job}"),
            Misuse::SpoiledQueue {
                helper: "lockrun:tickets:{job}".into()
            }
        );
        assert_eq!(
            spoiled("lockrun:tick:{job}"),
            Misuse::SpoiledTick {
                helper: "lockrun:tick:{job}".into()
            }
        );
        // A refusal whose second item is not text still refuses, naming nothing.
        assert_eq!(
            decode(vec![Value::Int(-1), Value::Int(3)]),
            Ok(AcquireReply::Refused(Refusal::Misused { kind: "".into() }))
        );
    }

    #[test]
    fn malformed_replies_come_back_as_they_came() {
        let odd = [
            vec![],
            vec![Value::Int(1)],
            vec![Value::Int(0)],
            vec![Value::Int(-1)],
            vec![Value::Int(1), bulk("42")],
            vec![Value::Int(0), Value::Nil],
            vec![Value::Int(4), Value::Int(1)],
            vec![Value::Int(3), Value::Nil],
            vec![bulk("1"), Value::Int(1)],
            vec![Value::Nil, Value::Nil],
            // A grant's numbers out of range: no fence below 1 (unsigned, -5 would wrap to
            // near 2^64), no attempt below 1 or beyond u32.
            vec![Value::Int(1), Value::Int(-5), Value::Int(7)],
            vec![Value::Int(1), Value::Int(0), Value::Int(7)],
            vec![Value::Int(1), Value::Int(i64::MIN)],
            vec![Value::Int(1), Value::Int(42), Value::Int(7), Value::Int(-1)],
            vec![Value::Int(1), Value::Int(42), Value::Int(7), Value::Int(0)],
            vec![
                Value::Int(1),
                Value::Int(42),
                Value::Int(7),
                Value::Int(1 << 32),
            ],
        ];
        for items in odd {
            let reply = array(items);
            assert_eq!(AcquireReply::decode(reply.clone()), Err(reply));
        }
        for reply in foreign().into_iter().chain([Value::Int(1), bulk("OK")]) {
            assert_eq!(AcquireReply::decode(reply.clone()), Err(reply));
        }
    }
}
