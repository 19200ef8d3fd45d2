//! Redis Cluster under faults, each scenario one row of the availability table
//! (`support::ha`): the lock's primary SIGKILLed right after an acquire, the cluster promoting
//! its replica by itself (one replica per shard, cluster node timeout 1 s).

use crate::support::chaos::{Chaos, Job, Mode};
use crate::support::ha::{Promise, Runs};
use crate::support::*;
use std::time::Duration;

/// Renewals every 4 s, a lease that outlasts the failover (2–3 s); the holder's job (4 s)
/// ends well before its first lease would (SIGTERM at 12 − 4 − 0.6 s).
const TTL_ARG: &str = "12s";
const TTL: Duration = Duration::from_secs(12);

/// `holder`: the exit codes the holder may end with; `rival`: the rival's `--wait` and codes.
fn scenario(name: &str, promise: Promise, flags: &[&str], holder: &[i32], rival: (&str, &[i32])) {
    let mut runs = Runs::new(
        "Cluster, 3 shards × (primary + 1 replica) (TTL 12 s)",
        name,
        promise,
    );
    for _ in 0..Runs::count(1) {
        let cluster = Cluster::start_with_replicas(3, 1);
        let sockets: Vec<_> = cluster.nodes.iter().map(|n| n.socket.clone()).collect();
        let ch = Chaos::over(name, &sockets).allowing_overlap();
        let key = ch.key("ak", Mode::Exclusive, TTL);
        let url = format!("redis+cluster://{}", cluster.seeds());
        let mut cmd = Lockrun::bare();
        cmd.args(["-r", &url, "-t", TTL_ARG])
            .args(flags)
            .arg(&key)
            .arg("--")
            .args(ch.job(&Job::hold(4000)));
        let holder = ch.spawn(cmd, holder);
        assert!(
            ch.recorder
                .wait_until(PATIENCE, |s| s.iter().any(|s| s.key == key)),
            "the holder never started its job"
        );
        let owner = cluster.owner_of(&key);
        let replica = cluster.replica_of(&key);
        ch.fault("the key's primary SIGKILLed right after the acquire");
        owner.signal(libc::SIGKILL);
        let mut cmd = Lockrun::bare();
        cmd.args(["-r", &url, "-t", TTL_ARG, "--wait", rival.0])
            .args(flags)
            .arg(&key)
            .arg("--")
            .args(ch.job(&Job::hold(300)));
        let waiter = ch.spawn(cmd, rival.1);
        replica.wait_until("promoted by the cluster", Server::is_master);
        ch.fault("its replica promoted");
        ch.finish(holder);
        ch.finish(waiter);
        let live: Vec<_> = cluster
            .nodes
            .iter()
            .filter(|n| n.port() != owner.port())
            .map(|n| n.socket.clone())
            .collect();
        runs.add(ch.report_on(&live));
    }
    runs.finish();
}

#[test]
fn ha_cluster_primary_killed_right_after_an_acquire() {
    // Without --acks the replica has the key only if replication got it there before the
    // primary died (on loopback it usually does: the holder's job ends 0). If not, the write
    // is lost: the rival acquires on the promoted replica, the holder's next renewal finds the
    // key gone and its job is stopped (76), and availability.md bounds the overlap by TTL/3 + one
    // request timeout (TTL/3, at most 3 s) + the grace (min(--kill-after, TTL/3)).
    scenario(
        "the key's primary SIGKILLed right after an acquire, no `--acks` (documented overlap)",
        Promise::AtMost(TTL / 3 + Duration::from_secs(3) + TTL / 3),
        &[],
        &[0, 76],
        ("20s", &[0]),
    );
}

#[test]
fn ha_cluster_primary_killed_right_after_an_acks_acquire() {
    // With --acks 1 the replica had the key: no overlap. The promoted replica has no replica
    // of its own: the holder's job (shorter than its acknowledged lease) ends with its own
    // code, but nobody else can acquire with --acks 1 until the shard has a replica again:
    // the rival exits 69 when its wait ends (availability.md: `--acks N` needs N replicas after a
    // failover too).
    scenario(
        "the key's primary SIGKILLed right after an acquire, `--acks 1`",
        Promise::NoOverlap,
        &["--acks", "1"],
        &[0],
        ("8s", &[69]),
    );
}
