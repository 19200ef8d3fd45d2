//! A tick survives faults of the lock server too: the tick a run belongs to, and the hold that
//! makes later hosts skip it, are the schedule's (when the hosts fired), never moved by a
//! takeover or by a tick record rebuilt after the server lost it. So a fault of one tick never
//! costs the next.

use crate::support::*;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

/// A host firing `lockrun -q --every 10s --ttl 2s --standby k` for a tick, its job logging
/// `<name> start`, sleeping `secs`, then `<name> end` to `out`.
fn fire(redis: &Server, dir: &Path, name: &str, secs: f64) -> Background {
    let out = dir.join("out");
    let job = format!(
        "echo {name} start >> '{o}'; sleep {secs}; echo {name} end >> '{o}'",
        o = out.display()
    );
    let mut cmd = Lockrun::on(redis);
    cmd.args([
        "-q",
        "--every",
        "10s",
        "--ttl",
        "2s",
        "--standby",
        "k",
        "--",
        "sh",
        "-c",
        &job,
    ]);
    cmd.background(dir, name)
}

/// Redis (no persistence) killed 2.5 s into a tick and started again empty: the winner stops
/// its job (its renewal finds the key gone), a standby takes the tick over and completes it,
/// and the next tick, fired 10 s after the first, runs exactly once.
#[test]
fn a_redis_restarted_empty_mid_tick_costs_neither_that_tick_nor_the_next() {
    let mut redis = Server::start_tcp();
    let dir = tempfile::tempdir().unwrap();
    let fired = Instant::now();
    let mut tick1 = vec![fire(&redis, dir.path(), "a", 5.0)];
    thread::sleep(Duration::from_millis(100));
    tick1.push(fire(&redis, dir.path(), "b", 5.0));
    tick1.push(fire(&redis, dir.path(), "c", 5.0));
    thread::sleep(Duration::from_millis(2500).saturating_sub(fired.elapsed()));
    redis.respawn(&[]);
    thread::sleep(Duration::from_secs(10).saturating_sub(fired.elapsed()));
    let tick2: Vec<Background> = ["a2", "b2", "c2"]
        .iter()
        .map(|n| fire(&redis, dir.path(), n, 1.0))
        .collect();
    let ended1: Vec<(Option<i32>, String, String)> =
        tick1.into_iter().map(Background::finish).collect();
    for host in tick2 {
        host.finish();
    }
    let out = lines(&dir.path().join("out"));
    let ends1 = out
        .iter()
        .filter(|l| ["a end", "b end", "c end"].contains(&l.as_str()))
        .count();
    let starts2 = out
        .iter()
        .filter(|l| ["a2 start", "b2 start", "c2 start"].contains(&l.as_str()))
        .count();
    assert_eq!(ends1, 1, "tick 1 completes once: {out:?}");
    assert_eq!(starts2, 1, "tick 2 runs exactly once: {out:?}");
    // The winner stopped its job when its renewal found the key gone; the host that rebuilt
    // the tick says so in one line (cron mails it, -q or not).
    let codes: Vec<Option<i32>> = ended1.iter().map(|(code, _, _)| *code).collect();
    assert!(codes.contains(&Some(76)), "the winner's exit: {codes:?}");
    let reopened = ended1
        .iter()
        .filter(|(_, _, err)| err.contains("the server lost the record of this tick"))
        .count();
    assert_eq!(
        reopened, 1,
        "one WARN line for the rebuilt tick: {ended1:?}"
    );
}
