//! What lockrun keeps beside a lock and how it is named: the helper keys (fencing counter,
//! waiter queue, tickets, wake-up channel, run history) and the history entry a script appends
//! (the lock's own value, the holder's, is [`super::holder`]'s). No I/O: the single-node
//! protocol (redis.rs) and the operators' reads (inspect.rs) both build on these names.

use super::{Holder, LockKind, LockSpec, Note};

/// Where release hints for `key` are published: named like the helper keys, so that on a
/// Cluster the channel is in the lock's slot (sharded pub/sub from inside the scripts).
pub fn wake_channel(key: &str) -> String {
    helper_key(key, "wake")
}

/// The keys that go with a lock key (its release-hint channel is [`wake_channel`]'s).
pub(super) struct Keys {
    /// Fencing counter; never expires.
    pub(super) fence: String,
    /// Waiters in arrival order, and their tickets' expiry.
    pub(super) queue: String,
    pub(super) tickets: String,
    /// The run history stream (`lockrun history`).
    pub(super) history: String,
    /// The tick record of `--standby` (see lib/tick.lua).
    pub(super) tick: String,
    /// The shared holders of `--shared` (see acquire/shared.lua).
    pub(super) shared: String,
}

impl Keys {
    pub(super) fn of(key: &str) -> Keys {
        Keys {
            fence: helper_key(key, "fence"),
            queue: helper_key(key, "waiters"),
            tickets: helper_key(key, "tickets"),
            history: helper_key(key, "history"),
            tick: helper_key(key, "tick"),
            shared: helper_key(key, "shared"),
        }
    }
}

/// The script arguments that record `note` in the key's history: the cap (0: record nothing),
/// then the entry's field/value pairs (see `note` in lib/prelude.lua). The fields are public: the
/// holder's public id (which run this was, also across several masters), host and pid; never
/// the token. `attempt`: the released lease's attempt at its tick (`None`: no lease, as for a
/// skip or an operator's entry). With `--standby` both sides of a takeover say theirs: a run
/// that took its tick over (attempt 2 or more), and one that handed its tick on (it did not
/// complete it: killed, stopped, not startable), whose takeover follows; a first attempt that
/// completed its tick, the healthy case, says nothing.
pub(super) fn history_args(
    spec: &LockSpec,
    holder: &Holder,
    fence: Option<u64>,
    attempt: Option<u32>,
    note: Option<&Note>,
) -> Vec<String> {
    let Some(note) = note.filter(|_| spec.history > 0) else {
        return vec!["0".into()];
    };
    let mut args = vec![
        spec.history.to_string(),
        "outcome".into(),
        note.outcome.as_str().into(),
        "host".into(),
        holder.host.clone(),
        "pid".into(),
        holder.pid.to_string(),
        "id".into(),
        holder.id.clone(),
        "duration_ms".into(),
        note.duration.as_millis().to_string(),
    ];
    if let Some(fence) = fence {
        args.extend(["fence".into(), fence.to_string()]);
    }
    if let Some(code) = note.exit_code {
        args.extend(["exit_code".into(), code.to_string()]);
    }
    if let Some(every) = spec.every {
        args.extend(["every_ms".into(), every.as_millis().to_string()]);
    }
    let taken_over_or_handed_on = |&a: &u32| a > 1 || !note.completes_tick;
    match spec.kind {
        LockKind::Tick { .. } => {
            if let Some(attempt) = attempt.filter(taken_over_or_handed_on) {
                args.extend(["attempt".into(), attempt.to_string()]);
            }
            if note.reopened {
                args.extend(["tick".into(), "reopened".into()]);
            }
        }
        LockKind::Shared => args.extend(["mode".into(), "shared".into()]),
        LockKind::Exclusive | LockKind::Semaphore(_) => {}
    }
    args
}

/// Every key lockrun keeps beside a lock starts with this; lock names may not (see
/// `cli::parse_key`), so no lock can ever be another lock's counter or queue.
pub const RESERVED_PREFIX: &str = "lockrun:";

/// `lockrun:<what>:{KEY}` for a plain key, `lockrun:<what>:=KEY` for one that has a hash tag of
/// its own (or a `}` that makes wrapping impossible). The character after `<what>:` tells the two
/// forms apart, so different lock names never share a helper key. Either form lives in the
/// same Redis Cluster hash slot as KEY where that is possible: `{KEY}` hashes like KEY, and in
/// the raw form KEY's own tag is the first `{...}` of the helper key. (A key with a `}` but no
/// tag, like `a}b`, hashes whole; its helpers cannot share its slot, which only matters on a
/// Cluster.)
pub fn helper_key(key: &str, what: &str) -> String {
    if has_hash_tag(key) || key.contains('}') {
        format!("{RESERVED_PREFIX}{what}:={key}")
    } else {
        format!("{RESERVED_PREFIX}{what}:{{{key}}}")
    }
}

pub(super) fn has_hash_tag(key: &str) -> bool {
    match key.find('{') {
        Some(open) => matches!(key[open + 1..].find('}'), Some(len) if len > 0),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helper_keys_share_the_slot_and_never_collide() {
        assert_eq!(helper_key("nightly", "fence"), "lockrun:fence:{nightly}");
        assert_eq!(
            helper_key("job:{tenant1}:x", "fence"),
            "lockrun:fence:=job:{tenant1}:x"
        );
        assert_eq!(helper_key("a{}b", "waiters"), "lockrun:waiters:=a{}b");
        assert_eq!(helper_key("a}b", "fence"), "lockrun:fence:=a}b");
        assert_eq!(helper_key("a{b", "fence"), "lockrun:fence:{a{b}");
        // The old scheme gave `a` and `{a}` one counter; the marker keeps them apart.
        assert_ne!(helper_key("a", "fence"), helper_key("{a}", "fence"));
        assert_ne!(helper_key("a", "fence"), helper_key("{a}:fence", "fence"));
    }
}
