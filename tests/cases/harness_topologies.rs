//! The harness's Sentinel and Cluster topologies work as the availability tests will assume:
//! the Sentinels agree on the master and fail over; the cluster serves every slot.

use crate::support::{Cluster, ReplicaSet, Sentinels};

#[test]
fn topology_ports_are_never_handed_out_twice_nor_from_the_ephemeral_range() {
    // Sentinels keep knocking on a killed master's port: were that port handed to another
    // test's server, they would make it their replica (see `port_where`).
    let ports: Vec<u16> = (0..300).map(|_| crate::support::free_port()).collect();
    let distinct: std::collections::HashSet<_> = ports.iter().collect();
    assert_eq!(distinct.len(), ports.len(), "a port was handed out twice");
    let first = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    assert!(
        ports.iter().all(|&p| p < first),
        "ports from the kernel's ephemeral range (from {first}): {ports:?}"
    );
}

#[test]
fn topology_sentinels_name_the_master_and_fail_over() {
    let set = ReplicaSet::start(2);
    let sentinels = Sentinels::start(&set, 3);
    assert_eq!(sentinels.master_port(), set.master.port());
    let new = sentinels.failover();
    assert!(
        set.replicas.iter().any(|r| r.port() == new),
        "promoted {new}, not one of the replicas"
    );
    let promoted = set.nodes().find(|n| n.port() == new).unwrap();
    assert_eq!(promoted.cli(&["SET", "after-failover", "1"]), "OK");
}

#[test]
fn topology_cluster_serves_every_slot() {
    let cluster = Cluster::start(3);
    for key in ["a", "b", "nightly-report", "{tenant}:x"] {
        assert_eq!(cluster.cli(&["SET", key, "1"]), "OK", "{key}");
        let owner = cluster.owner_of(key);
        assert_eq!(
            owner.cli(&["EXISTS", key]),
            "1",
            "{key} on {}",
            owner.port()
        );
    }
}

#[test]
fn topology_password_protected_set_and_sentinels_refuse_strangers_and_fail_over() {
    let set = ReplicaSet::start_with_password(1, "data-pw");
    let sentinels = Sentinels::start_with_password(&set, 3, "sentinel-pw");
    assert_eq!(sentinels.master_port(), set.master.port());
    // Without a password every node refuses (try_cli sees the NOAUTH error as no answer).
    let stranger = |port: u16| {
        std::process::Command::new("redis-cli")
            .args(["-p", &port.to_string(), "PING"])
            .env_remove("REDISCLI_AUTH")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap()
    };
    assert!(stranger(set.master.port()).contains("NOAUTH"));
    assert!(stranger(sentinels.nodes[0].port()).contains("NOAUTH"));
    let new = sentinels.failover();
    assert_eq!(new, set.replicas[0].port());
    assert_eq!(set.node(new).cli(&["SET", "after-failover", "1"]), "OK");
}

#[test]
fn topology_a_replica_can_lose_a_key_the_master_keeps() {
    let set = ReplicaSet::start(1);
    set.master.cli(&["SET", "doomed", "1"]);
    set.wait_replicated("doomed");
    set.replicas[0].lose_key("doomed");
    assert!(set.master.exists("doomed"));
    assert!(!set.replicas[0].exists("doomed"));
    // Still a read-only replica afterwards.
    let refused = set.replicas[0].try_cli(&["SET", "x", "1"]);
    assert!(
        refused.as_deref().is_none_or(|r| r.contains("READONLY")),
        "{refused:?}"
    );
}

#[test]
fn topology_cluster_with_replicas_fails_over_a_shard() {
    let cluster = Cluster::start_with_replicas(3, 1);
    assert_eq!(cluster.masters().count(), 3);
    assert_eq!(cluster.cli(&["SET", "moving", "1"]), "OK");
    let old = cluster.owner_of("moving").port();
    let new = cluster.failover_shard_of("moving");
    assert_ne!(new.port(), old);
    assert_eq!(cluster.owner_of("moving").port(), new.port());
    assert!(new.exists("moving"), "a manual failover loses nothing");
    assert_eq!(cluster.masters().count(), 3);
}

#[test]
fn topology_tls_sentinels_and_cluster_work_over_tls_only() {
    let set = ReplicaSet::start_tls(1);
    let sentinels = Sentinels::start(&set, 3);
    assert_eq!(sentinels.master_port(), set.master.port());
    assert_eq!(set.master.cli(&["SET", "over-tls", "1"]), "OK");
    set.wait_replicated("over-tls");
    let cluster = Cluster::start_tls(3);
    assert_eq!(cluster.cli(&["SET", "over-tls", "1"]), "OK");
    assert!(cluster.owner_of("over-tls").exists("over-tls"));
    // Plain text is refused: the ports speak only TLS.
    let plain = std::process::Command::new("redis-cli")
        .args(["-p", &set.master.port().to_string(), "PING"])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&plain.stdout).contains("PONG"));
}
