//! The lock probe's key and verdict: where the probe lock goes (a reserved name, on a Cluster
//! in a slot of the primary checked) and what its outcome says. Separate because it judges a
//! lock taken as a run takes it, not a server's facts.

use super::{finding, Finding, Verdict};
use crate::lock::probe::LockProbe;

/// The Cluster hash slot of `key` (CRC16-XMODEM of the key, or of its `{hash tag}`, mod
/// 16384), as the servers compute it: to put the lock probe on a given primary.
pub fn key_slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let hashed = match bytes.iter().position(|&b| b == b'{') {
        Some(open) => match bytes[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &bytes[open + 1..open + 1 + len],
            _ => bytes,
        },
        None => bytes,
    };
    let mut crc: u16 = 0;
    for &b in hashed {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// The key of the lock probe: `lockrun:doctor:{<random>}`, under lockrun's reserved prefix (no
/// lock of a user's can have that name, and an ACL that grants lockrun `~lockrun:*` covers it
/// and its fencing counter). On a Cluster primary serving `slots` (inclusive ranges), a
/// suffix puts the hash tag in one of them; None if none is found.
pub fn probe_key(random: &str, slots: Option<&[(u16, u16)]>) -> Option<String> {
    let Some(slots) = slots else {
        return Some(format!("lockrun:doctor:{{{random}}}"));
    };
    // A primary with one slot of 16384 needs some 16384 tries on average.
    (0..1_000_000).find_map(|n| {
        let tag = format!("{random}-{n}");
        let slot = key_slot(&tag);
        slots
            .iter()
            .any(|(start, end)| (*start..=*end).contains(&slot))
            .then(|| format!("lockrun:doctor:{{{tag}}}"))
    })
}

/// Check 10: the lock probe ([`LockProbe`]): a lock taken and released as a run does, both
/// ways a run sends its scripts. `fail` where a run fails, with the run's own words.
pub fn lock(probe: &LockProbe) -> Vec<Finding> {
    let left = if probe.cleanup.is_ok() {
        "; nothing left behind"
    } else {
        ""
    };
    let worked = |how: &str| {
        finding(
            "lock",
            Verdict::Ok,
            format!(
                "took and released a probe lock ({}) as runs do, {how}{left}",
                probe.key
            ),
        )
    };
    let mut out = vec![match (&probe.first, &probe.second) {
        (Err(why), _) => finding(
            "lock",
            Verdict::Fail,
            format!("a run fails here now: {why}"),
        ),
        // A first cycle by EVALSHA, a second by EVAL that failed: runs lock while the server
        // keeps the scripts cached.
        (Ok(true), Some((false, Err(why)))) => finding(
            "lock",
            Verdict::Warn,
            format!(
                "runs lock now (by EVALSHA: the server has lockrun's scripts), but once it \
                 has lost them (a restart, a failover, SCRIPT FLUSH) every run fails: {why}"
            ),
        ),
        // The next run goes the way this cycle went.
        (Ok(_), Some((_, Err(why)))) => finding(
            "lock",
            Verdict::Fail,
            format!("a first lock worked (by EVAL), but runs from now on fail: {why}"),
        ),
        (Ok(false), Some((true, Ok(false)))) => worked(
            "by EVAL only: the server refuses EVALSHA (renamed or denied), so each run sends \
             its scripts whole",
        ),
        _ => worked("by EVALSHA and EVAL (as after a restart)"),
    }];
    if let Err(why) = &probe.cleanup {
        out.push(finding(
            "lock",
            Verdict::Warn,
            format!(
                "the probe's keys were not deleted ({why}): delete {} (doctor's own; the lock \
                 key also expires by itself)",
                probe.left.join(" ")
            ),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_slots_are_the_servers() {
        // The Cluster specification's examples, and a hash tag.
        assert_eq!(key_slot("123456789"), 0x31C3);
        assert_eq!(key_slot("foo"), 12182);
        assert_eq!(key_slot("{user1000}.following"), key_slot("user1000"));
        assert_eq!(key_slot("foo{}{bar}"), key_slot("foo{}{bar}"));
        assert_ne!(key_slot("foo{}{bar}"), key_slot("bar"));
        assert_eq!(key_slot("foo{{bar}}zap"), key_slot("{bar"));
    }

    #[test]
    fn the_probe_key_is_reserved_and_lands_on_the_primary_asked_for() {
        assert_eq!(
            probe_key("ab12", None).as_deref(),
            Some("lockrun:doctor:{ab12}")
        );
        for slots in [&[(0u16, 5460u16)][..], &[(10923, 16383)], &[(7000, 7000)]] {
            let key = probe_key("ab12", Some(slots)).unwrap();
            assert!(key.starts_with("lockrun:doctor:{ab12-"), "{key}");
            let slot = key_slot(&key);
            assert!(
                slots.iter().any(|(s, e)| (*s..=*e).contains(&slot)),
                "{key}"
            );
        }
        assert_eq!(probe_key("x", Some(&[])), None);
    }

    fn probe(
        first: Result<bool, &str>,
        second: Option<(bool, Result<bool, &str>)>,
        cleanup: Result<(), &str>,
    ) -> Vec<Finding> {
        lock(&LockProbe {
            key: "lockrun:doctor:{k}".into(),
            first: first.map_err(str::to_string),
            second: second.map(|(s, r)| (s, r.map_err(str::to_string))),
            cleanup: cleanup.map_err(str::to_string),
            left: vec![
                "lockrun:doctor:{k}".into(),
                "lockrun:fence:=lockrun:doctor:{k}".into(),
            ],
        })
    }

    #[test]
    fn the_lock_probe_fails_where_a_run_would() {
        // A fresh server (NOSCRIPT, then EVAL; then EVALSHA), and one with the scripts cached
        // (EVALSHA; then EVAL on purpose): both ways work.
        for (first, second) in [(false, (true, true)), (true, (false, false))] {
            let f = probe(Ok(first), Some((second.0, Ok(second.1))), Ok(()));
            assert_eq!(f.len(), 1);
            assert_eq!(f[0].verdict, Verdict::Ok);
            assert!(
                f[0].detail.contains("by EVALSHA and EVAL"),
                "{}",
                f[0].detail
            );
            assert!(
                f[0].detail.ends_with("nothing left behind"),
                "{}",
                f[0].detail
            );
        }
        // EVALSHA refused both times: EVAL only, which works.
        let f = probe(Ok(false), Some((true, Ok(false))), Ok(()));
        assert_eq!(f[0].verdict, Verdict::Ok);
        assert!(f[0].detail.contains("by EVAL only"), "{}", f[0].detail);
        // The run's own words.
        let f = probe(
            Err("Redis at x unavailable: OOM command not allowed"),
            None,
            Ok(()),
        );
        assert_eq!(f[0].verdict, Verdict::Fail);
        assert!(f[0]
            .detail
            .ends_with("Redis at x unavailable: OOM command not allowed"));
        // EVALSHA works, EVAL does not: until the server loses the scripts.
        let f = probe(Ok(true), Some((false, Err("no EVAL"))), Ok(()));
        assert_eq!(f[0].verdict, Verdict::Warn);
        assert!(f[0].detail.contains("restart"), "{}", f[0].detail);
        // EVAL worked, EVALSHA (as the next runs go) does not.
        let f = probe(Ok(false), Some((true, Err("broken"))), Ok(()));
        assert_eq!(f[0].verdict, Verdict::Fail);
        // What could not be deleted is named.
        let f = probe(Ok(true), Some((false, Ok(false))), Err("gone"));
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].verdict, Verdict::Ok);
        assert!(!f[0].detail.contains("nothing left"), "{}", f[0].detail);
        assert_eq!(f[1].verdict, Verdict::Warn);
        assert!(
            f[1].detail.contains("lockrun:fence:=lockrun:doctor:{k}"),
            "{}",
            f[1].detail
        );
    }
}
