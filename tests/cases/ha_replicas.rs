//! Replicated topologies under faults, each scenario one row of the availability table
//! (`support::ha`): a Sentinel-managed primary whose replicas' wall clocks are ahead
//! (`support::clockshim`), failed over while a `--acks` holder runs.

use crate::support::chaos::{Chaos, Job, Mode};
use crate::support::clockshim::{self, Clock};
use crate::support::ha::{Promise, Runs};
use crate::support::*;
use std::time::Duration;

/// How far ahead the replicas' clocks are, and the lease: the key a replica shows expires
/// AHEAD_MS early, 2 s after the write that set it, 2 s before the next renewal (every 4 s).
const AHEAD_MS: i64 = 10_000;
const TTL_MS: i64 = 12_000;

#[test]
fn ha_replicas_clocks_ahead_end_the_lease_early_after_a_failover_despite_acks() {
    // Redis replicates a key's expiry as an absolute time: on a replica whose clock is δ ahead
    // the lease ends δ early. After a failover to it, another holder may acquire while the old
    // one still runs, until the old one's renewal finds the key gone there; availability.md bounds
    // that overlap by δ (the old holder's deadline is at most δ after the key's end there).
    let mut runs = Runs::new(
        &format!(
            "Sentinel, primary + 2 replicas with clocks {} s ahead (TTL {} s, `--acks 1`)",
            AHEAD_MS / 1000,
            TTL_MS / 1000
        ),
        "primary SIGKILLed mid-lease, a replica promoted (documented overlap: at most the clock offset)",
        Promise::AtMost(Duration::from_millis(AHEAD_MS as u64)),
    );
    // Three runs: whether the rival gets in before the holder's renewal reaches the promoted
    // replica is a race (1 overlap in 3 runs has been seen).
    for _ in 0..Runs::count(3) {
        let clock = Clock::new(AHEAD_MS);
        let set = ReplicaSet::with(ReplicaSetOptions {
            replicas: 2,
            replica_env: clock.env(),
            ..ReplicaSetOptions::default()
        });
        for r in &set.replicas {
            let time = r.cli(&["TIME"]);
            let time: Vec<String> = time.lines().map(str::to_string).collect();
            clockshim::assert_offset(&time, AHEAD_MS);
        }
        let sentinels = Sentinels::start(&set, 3);
        let sockets: Vec<_> = set.nodes().map(|n| n.socket.clone()).collect();
        let ch = Chaos::over(runs_name(), &sockets).allowing_overlap();
        let ttl = Duration::from_millis(TTL_MS as u64);
        let key = ch.key("ck", Mode::Exclusive, ttl);
        let ttl_arg = format!("{TTL_MS}ms");
        let mut cmd = Lockrun::bare();
        cmd.args(["-r", &sentinels.url(), "-t", &ttl_arg, "--acks", "1"])
            .arg(&key)
            .arg("--")
            .args(ch.job(&Job::hold(20_000)));
        let holder = ch.spawn(cmd, &[76]);
        assert!(
            ch.recorder
                .wait_until(PATIENCE, |s| s.iter().any(|s| s.key == key)),
            "the holder never started its job"
        );
        // The step is real: the primary shows most of the TTL, a replica at most TTL − δ
        // (or nothing, once that has passed and before the next renewal).
        let on_master: i64 = set.master.cli(&["PTTL", &key]).parse().unwrap();
        assert!(on_master > TTL_MS - 1500, "PTTL on the primary {on_master}");
        for r in &set.replicas {
            let p: i64 = r.cli(&["PTTL", &key]).parse().unwrap();
            assert!(
                p <= TTL_MS - AHEAD_MS,
                "PTTL {p} on a replica {AHEAD_MS} ms ahead"
            );
        }
        let mut cmd = Lockrun::bare();
        cmd.args(["-r", &sentinels.url(), "-t", &ttl_arg, "--acks", "1"])
            .args(["--wait", "30s"])
            .arg(&key)
            .arg("--")
            .args(ch.job(&Job::hold(300)));
        let rival = ch.spawn(cmd, &[0]);
        // Right after a renewal (the key's PTTL on the primary jumps back up): the failover
        // then has until the next one, TTL/3 later, and the key on the replicas ends halfway.
        let pttl =
            |m: &crate::support::Server| -> i64 { m.cli(&["PTTL", &key]).parse().unwrap_or(-2) };
        let mut last = pttl(&set.master);
        set.master.wait_until("ran the holder's next renewal", |m| {
            let now = pttl(m);
            std::mem::replace(&mut last, now) + 500 < now
        });
        ch.fault("primary SIGKILLed");
        set.master.signal(libc::SIGKILL);
        let new = sentinels.failover_away_from(set.master.port());
        ch.fault(&format!("replica {new} promoted"));
        ch.lease_ended(&key);
        ch.finish(holder);
        ch.finish(rival);
        let live: Vec<_> = set.replicas.iter().map(|n| n.socket.clone()).collect();
        runs.add(ch.report_on(&live));
    }
    runs.finish();
}

fn runs_name() -> &'static str {
    "replicas' clocks ahead, failover mid-lease"
}
