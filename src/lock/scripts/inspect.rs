//! inspect.lua: what `lockrun status` and `lockrun list` show about one key, read at once.

use super::{as_int, as_string, Call, Request, INSPECT};
use crate::lock::keys::Keys;
use redis::Value;
use std::time::Duration;

pub struct InspectRequest<'a> {
    pub key: &'a str,
}

impl Request for InspectRequest<'_> {
    /// KEYS[1] lock, KEYS[2] fencing counter, KEYS[3] queue, KEYS[4] ticket expiries, KEYS[5]
    /// the tick record, KEYS[6] the shared holders; no ARGV.
    fn call(&self) -> Call {
        let k = Keys::of(self.key);
        let keys = vec![
            self.key.into(),
            k.fence,
            k.queue,
            k.tickets,
            k.tick,
            k.shared,
        ];
        Call {
            script: &INSPECT,
            keys,
            args: Vec::new(),
        }
    }
}

/// One key as one server sees it.
#[derive(Clone, Debug, Default)]
pub struct Inspection {
    /// Redis' type of the key: `none` (free), `string` (a lock), `zset` (a semaphore), or
    /// something lockrun never writes; `shared` for a lock held in shared mode (`--shared`).
    pub kind: String,
    /// The fencing counter: the last fence handed out for this key.
    pub fence: Option<u64>,
    /// Waiters with a live ticket, and the one whose turn is next (public id, time queued).
    pub waiters: u64,
    pub next: Option<(String, Duration)>,
    /// Holder values and what is left of their leases (`None`: no expiry, set by hand).
    pub holders: Vec<(String, Option<Duration>)>,
    /// How long the lock has been held, by the server's clock: now minus the fence, which is
    /// the server's clock in µs when it was handed out. `None` for a semaphore (several
    /// holders, one counter) and for a fence that is not such a time (a counter set by hand, or
    /// one ahead of the clock).
    pub held_for: Option<Duration>,
    /// With `--standby`, the tick under way.
    pub tick: Option<TickView>,
}

/// The tick record of `--standby` (lib/tick.lua), as `status` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TickView {
    /// The tick completed: no host runs it again.
    pub done: bool,
    /// Attempts at it so far (2 or more: taken over).
    pub attempt: u32,
    /// How long ago the tick began by the schedule (when the hosts fired), on the server's
    /// clock; `None` when that clock was not read.
    pub began: Option<Duration>,
    /// Until the tick ends.
    pub left: Option<Duration>,
}

impl TickView {
    /// `<open|done> <start ms> <attempt> <holder>`, read at `now_ms` on the server's clock;
    /// anything else is no tick record.
    pub fn parse(record: &str, left: Option<Duration>, now_ms: Option<u64>) -> Option<TickView> {
        let mut words = record.split(' ');
        let done = match words.next()? {
            "open" => false,
            "done" => true,
            _ => return None,
        };
        let start: u64 = words.next()?.parse().ok()?;
        let attempt = words.next()?.parse().ok()?;
        Some(TickView {
            done,
            attempt,
            began: now_ms
                .and_then(|now| now.checked_sub(start))
                .map(Duration::from_millis),
            left,
        })
    }
}

/// `{type, fence or '', live waiters, next waiter's id or '', ms since it queued, server
/// clock in µs, tick record or '', ms left of it, then holder value and ms left for each
/// holder}`. Read leniently, item by item:
/// an item of another kind reads as absent (and a holder without its time left is not read).
/// `Err`: not an array, handed back as it came.
pub fn decode(reply: Value) -> Result<Inspection, Value> {
    let Value::Array(items) = reply else {
        return Err(reply);
    };
    let text = |i: usize| items.get(i).and_then(as_string).unwrap_or_default();
    let count = |i: usize| as_int(items.get(i)).and_then(|n| u64::try_from(n).ok());
    let mut holders = Vec::new();
    let mut i = 8;
    while i + 1 < items.len() {
        holders.push((text(i), count(i + 1).map(Duration::from_millis)));
        i += 2;
    }
    let next = text(3);
    let (kind, fence) = (text(0), text(1).parse().ok());
    let held_for = match (kind.as_str(), fence, text(5).parse::<u64>()) {
        ("string", Some(f), Ok(now)) => held_since(f, now),
        _ => None,
    };
    Ok(Inspection {
        held_for,
        kind,
        fence,
        waiters: count(2).unwrap_or(0),
        next: (!next.is_empty()).then(|| (next, Duration::from_millis(count(4).unwrap_or(0)))),
        holders,
        tick: TickView::parse(
            &text(6),
            count(7).map(Duration::from_millis),
            text(5).parse::<u64>().ok().map(|us| us / 1000),
        ),
    })
}

/// `now_us - fence` when the fence is a time of the server's clock in µs (after 2017, not
/// ahead of now): see `next_fence` in lib/prelude.lua.
fn held_since(fence: u64, now_us: u64) -> Option<Duration> {
    const Y2017_US: u64 = 1_483_228_800_000_000;
    (fence >= Y2017_US && fence <= now_us).then(|| Duration::from_micros(now_us - fence))
}

#[cfg(test)]
mod tests {
    use super::super::mock::*;
    use super::*;

    #[test]
    fn held_for_only_from_a_fence_that_is_a_clock_reading() {
        let now = 1_795_000_000_000_000;
        assert_eq!(
            held_since(now - 2_500_000, now),
            Some(Duration::from_millis(2500))
        );
        assert_eq!(held_since(42, now), None, "a counter set by hand");
        assert_eq!(held_since(now + 1, now), None, "ahead of the clock");
    }

    #[test]
    fn sends_the_key_and_its_helpers_without_arguments() {
        let call = InspectRequest { key: "job" }.call();
        let (sent, _) = run(&call, array([]));
        let keys = [
            "job",
            "lockrun:fence:{job}",
            "lockrun:waiters:{job}",
            "lockrun:tickets:{job}",
            "lockrun:tick:{job}",
            "lockrun:shared:{job}",
        ];
        assert_eq!(sent, evalsha(&call, &keys, &[]));
        assert_eq!(call.script.sha(), INSPECT.sha());
    }

    const NOW_US: u64 = 1_700_000_000_000_000;

    fn head(kind: &str, fence: &str, waiters: i64, next: &str) -> Vec<Value> {
        vec![
            bulk(kind),
            bulk(fence),
            Value::Int(waiters),
            bulk(next),
            Value::Int(1200),
            bulk(&NOW_US.to_string()),
            bulk(""),
            Value::Int(-2),
        ]
    }

    #[test]
    fn a_tick_record_reads_as_its_state_and_attempt() {
        let mut items = head("string", "7", 0, "");
        let start_ms = NOW_US / 1000 - 12_000;
        items[6] = bulk(&format!("open {start_ms} 2 abc host=h pid=1"));
        items[7] = Value::Int(30_000);
        items.extend([bulk("abc host=h"), Value::Int(900)]);
        let got = decode(array(items)).unwrap();
        assert_eq!(
            got.tick,
            Some(TickView {
                done: false,
                attempt: 2,
                began: Some(Duration::from_secs(12)),
                left: Some(Duration::from_secs(30)),
            })
        );
        assert_eq!(got.holders.len(), 1);
        let mut items = head("none", "7", 0, "");
        items[6] = bulk("done 1700000000000 1 ");
        assert!(decode(array(items)).unwrap().tick.is_some_and(|t| t.done));
        // No record, or one lockrun did not write: no tick.
        assert_eq!(decode(array(head("none", "", 0, ""))).unwrap().tick, None);
        let mut items = head("none", "", 0, "");
        items[6] = bulk("mine");
        assert_eq!(decode(array(items)).unwrap().tick, None);
    }

    #[test]
    fn a_held_lock_with_a_waiter() {
        let fence = (NOW_US - 2_000_000).to_string();
        let mut items = head("string", &fence, 1, "w1");
        items.extend([bulk("abc host=h"), Value::Int(900)]);
        let got = decode(array(items)).unwrap();
        assert_eq!(got.kind, "string");
        assert_eq!(got.fence, Some(NOW_US - 2_000_000));
        assert_eq!(got.waiters, 1);
        assert_eq!(got.next, Some(("w1".into(), Duration::from_millis(1200))));
        assert_eq!(
            got.holders,
            [("abc host=h".to_string(), Some(Duration::from_millis(900)))]
        );
        assert_eq!(got.held_for, Some(Duration::from_secs(2)));
    }

    #[test]
    fn a_free_key_a_key_without_expiry_and_a_semaphore() {
        let got = decode(array(head("none", "", 0, ""))).unwrap();
        assert_eq!(
            (got.kind.as_str(), got.fence, got.waiters),
            ("none", None, 0)
        );
        assert_eq!((got.next, got.holders.len(), got.held_for), (None, 0, None));
        let mut items = head("string", "7", 0, "");
        items.extend([bulk("by hand"), Value::Int(-1)]);
        let got = decode(array(items)).unwrap();
        assert_eq!(got.holders, [("by hand".to_string(), None)]);
        let mut items = head("zset", "9", 0, "");
        items.extend([bulk("a"), Value::Int(1), bulk("b"), Value::Int(2)]);
        let got = decode(array(items)).unwrap();
        assert_eq!(got.holders.len(), 2);
        assert_eq!(got.held_for, None, "a semaphore has several holders");
    }

    #[test]
    fn malformed_replies_read_leniently_or_come_back() {
        // Short, or of the wrong kinds: what is there is read, the rest is absent.
        let got = decode(array([Value::Int(3)])).unwrap();
        assert_eq!((got.kind.as_str(), got.fence, got.waiters), ("", None, 0));
        let mut items = head("string", "x", -4, "");
        items.push(bulk("half a holder"));
        let got = decode(array(items)).unwrap();
        assert_eq!((got.fence, got.waiters, got.holders.len()), (None, 0, 0));
        for reply in [Value::Int(1), bulk("string")].into_iter().chain(foreign()) {
            assert!(matches!(decode(reply.clone()), Err(v) if v == reply));
        }
    }
}
