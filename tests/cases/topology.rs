//! The harness's Sentinel and Cluster topologies work as the availability tests will assume:
//! the Sentinels agree on the master and fail over; the cluster serves every slot.

use crate::support::topology::{Cluster, ReplicaSet, Sentinels};

#[test]
fn topology_sentinels_name_the_master_and_fail_over() {
    let set = ReplicaSet::start(2);
    let sentinels = Sentinels::start(&set, 3);
    assert_eq!(sentinels.master_port(), set.master.port);
    let new = sentinels.failover();
    assert!(
        set.replicas.iter().any(|r| r.port == new),
        "promoted {new}, not one of the replicas"
    );
    let promoted = set.nodes().find(|n| n.port == new).unwrap();
    assert_eq!(promoted.cli(&["SET", "after-failover", "1"]), "OK");
}

#[test]
fn topology_cluster_serves_every_slot() {
    let cluster = Cluster::start(3);
    for key in ["a", "b", "nightly-report", "{tenant}:x"] {
        assert_eq!(cluster.cli(&["SET", key, "1"]), "OK", "{key}");
        let owner = cluster.owner_of(key);
        assert_eq!(owner.cli(&["EXISTS", key]), "1", "{key} on {}", owner.port);
    }
}
