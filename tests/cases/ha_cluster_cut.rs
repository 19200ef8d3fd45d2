//! Redis Cluster under a real network partition: three primaries `a1`, `a2`, `a3`,
//! each with one replica (`b1` of `a1`…), one node per host, each host a network namespace
//! (support::netns); client hosts `h` (the holder) and `w` (a `--wait` lockrun on the majority
//! side). The lock's primary is cut off from every other node (and from `w`) until its replica
//! is promoted, then the partition heals and the old primary rejoins as the new one's replica.
//! The holder's host either reaches every node, or stays on the cut-off primary's side.
//!
//! `cluster-node-timeout` is 1 s, so the failover comes about 2–3 s after the cut. The test
//! watches the nodes through their unix sockets; the jobs report to the chaos recorder on the
//! test's own loopback. Each test is one row of the availability table (support::ha).
//!
//! `LOCKRUN_FAULTS_SCALE=N` runs each scenario N times; `LOCKRUN_HA_REPORT=<file>` collects the
//! rows.

use crate::support::chaos::{Chaos, Job, Mode, Report, Rng};
use crate::support::ha::{Promise, Runs, Topology};
use crate::support::netns::{Net, Server};
use crate::support::{ms, PATIENCE};
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

const PORT: u16 = 6379;
/// `cluster-node-timeout`: a node unreachable this long is suspected, then failed over.
const NODE_TIMEOUT: u64 = 1000;
const PRIMARIES: [&str; 3] = ["a1", "a2", "a3"];
const REPLICAS: [&str; 3] = ["b1", "b2", "b3"];
/// Slots per shard, in order (a1 gets the first range).
const RANGES: [(u16, u16); 3] = [(0, 5460), (5461, 10922), (10923, 16383)];

/// availability.md's bound on an overlap after a failover lost a write ("When a failover loses
/// the key"): TTL/3 + one request timeout (TTL/3 by default, at most 3 s) + the grace
/// (min(--kill-after, TTL/3)); in a Cluster, for a holder that reaches only the cut-off primary,
/// TTL/3 + 1.5 × `cluster-node-timeout` + 100 ms if that is more (availability.md, "Cluster
/// under a partition": the cut-off primary accepts renewals until it flags the others as
/// failing).
fn lost_write_bound(ttl: u64, kill_after: u64, node_timeout: u64) -> Duration {
    let general = ttl / 3 + (ttl / 3).min(3000) + kill_after.min(ttl / 3);
    ms(general.max(ttl / 3 + node_timeout * 3 / 2 + 100))
}

/// lockrun's default `--kill-after`.
const KILL_AFTER: u64 = 10_000;

/// The cluster in its network: `nodes` are a1, a2, a3, b1, b2, b3 in that order.
struct Cluster {
    net: Net,
    nodes: Vec<Server>,
}

fn node_id(s: &Server) -> String {
    s.cmd::<String>(&["CLUSTER", "MYID"])
}

impl Cluster {
    fn start(node_timeout: u64) -> Cluster {
        let hosts: Vec<&str> = PRIMARIES
            .iter()
            .chain(REPLICAS.iter())
            .copied()
            .chain(["h", "w"])
            .collect();
        let net = Net::new(&hosts);
        let nodes: Vec<Server> = PRIMARIES
            .iter()
            .chain(REPLICAS.iter())
            .map(|h| {
                net.redis(
                    h,
                    PORT,
                    &format!(
                        "cluster-enabled yes\ncluster-config-file nodes.conf\n\
                         cluster-node-timeout {node_timeout}\ncluster-announce-ip {}\n\
                         repl-diskless-sync-delay 0",
                        net.addr(h)
                    ),
                )
            })
            .collect();
        for (node, (lo, hi)) in nodes.iter().zip(RANGES) {
            let _: () = node.cmd(&["CLUSTER", "ADDSLOTSRANGE", &lo.to_string(), &hi.to_string()]);
        }
        for n in &nodes[1..] {
            let _: () = nodes[0].cmd(&["CLUSTER", "MEET", &n.host.addr, &PORT.to_string()]);
        }
        for n in &nodes {
            n.wait_until("knew all six nodes", |s| {
                s.try_cmd::<String>(&["CLUSTER", "NODES"]).is_some_and(|t| {
                    t.lines().count() == 6 && !t.contains("handshake") && !t.contains("noaddr")
                })
            });
        }
        for i in 0..3 {
            let id = node_id(&nodes[i]);
            let _: () = nodes[3 + i].cmd(&["CLUSTER", "REPLICATE", &id]);
        }
        let cluster = Cluster { net, nodes };
        cluster.wait_settled();
        cluster
    }

    /// Every node sees the cluster ok, knows every node without failure flags, and every
    /// replica's link is up.
    fn wait_settled(&self) {
        for n in &self.nodes {
            n.wait_until("saw the whole cluster ok", |s| {
                let ok = s
                    .try_cmd::<String>(&["CLUSTER", "INFO"])
                    .is_some_and(|i| i.contains("cluster_state:ok"));
                let known = s.try_cmd::<String>(&["CLUSTER", "NODES"]).is_some_and(|t| {
                    t.lines().count() == 6 && !t.contains("fail") && !t.contains("handshake")
                });
                // A primary counts its replica only once the link is up on both sides, and
                // --acks (WAIT 1) needs exactly that from the first acquire.
                let r = s.replication();
                let linked = if r.contains("role:master") {
                    r.contains("connected_slaves:1")
                } else {
                    r.contains("master_link_status:up")
                };
                ok && known && linked
            });
        }
    }

    fn sockets(&self) -> Vec<PathBuf> {
        self.nodes.iter().map(|s| s.socket.clone()).collect()
    }

    /// The shard (0, 1, 2) that serves `key`.
    fn shard_of(&self, key: &str) -> usize {
        let slot: u16 = self.nodes[0].cmd(&["CLUSTER", "KEYSLOT", key]);
        RANGES
            .iter()
            .position(|(lo, hi)| (*lo..=*hi).contains(&slot))
            .unwrap()
    }
}

impl Topology for Cluster {
    fn net(&self) -> &Net {
        &self.net
    }

    fn urls(&self) -> Vec<String> {
        let seeds: Vec<String> = self.nodes.iter().map(Server::addr).collect();
        vec![format!("redis+cluster://{}", seeds.join(","))]
    }
}

fn is_master(s: &Server) -> bool {
    s.replication().contains("role:master")
}

/// Where the holder's host sits in the partition.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Holder {
    /// Reaches every node, the cut-off primary included.
    Everywhere,
    /// With the cut-off primary, cut off from every other node.
    WithPrimary,
}

struct Cut {
    holder: Holder,
    /// `--acks 1` for both lockruns.
    acks: bool,
    ttl: u64,
    /// `--kill-after` for the holder (None: the default, so the grace is TTL/3).
    kill_after: Option<&'static str>,
    /// The holder's exit codes this scenario allows.
    holder_codes: &'static [i32],
    node_timeout: u64,
    /// Cut right after a renewal reached the primary (else at a random moment).
    after_renewal: bool,
    /// How long the cut stays after the promotion (ms).
    keep_cut: u64,
    /// The holder's job (ms).
    hold: u64,
}

impl Cut {
    /// The common shape: TTL 6 s, the default grace, the default node timeout, the cut at any
    /// moment and healed at the promotion, a 12 s job that may end either way.
    fn with(holder: Holder) -> Cut {
        Cut {
            holder,
            acks: false,
            ttl: TTL,
            kill_after: None,
            holder_codes: &[0, 76],
            node_timeout: NODE_TIMEOUT,
            after_renewal: false,
            keep_cut: 0,
            hold: 12_000,
        }
    }

    /// [`Cut::with`] and the holder run with `--acks 1`.
    fn acked(holder: Holder) -> Cut {
        Cut {
            acks: true,
            ..Cut::with(holder)
        }
    }
}

/// The key's primary is cut off from every other node and from `w` until its replica is
/// promoted, then healed; a holder on `h`, a waiter on `w`.
fn cut_run(name: &str, c: &Cut) -> Report {
    let cluster = Cluster::start(c.node_timeout);
    let ch = Chaos::over(name, &cluster.sockets()).allowing_overlap();
    let key = ch.key("ha", Mode::Exclusive, ms(c.ttl));
    let shard = cluster.shard_of(&key);
    let (primary, replica) = (&cluster.nodes[shard], &cluster.nodes[3 + shard]);
    let ttl = format!("{}ms", c.ttl);
    let acks: &[&str] = if c.acks { &["--acks", "1"] } else { &[] };
    let kill: Vec<&str> = c.kill_after.map_or(vec![], |k| vec!["--kill-after", k]);
    // The holder may wait for its first acquire: on a loaded machine a fresh replica's first
    // acknowledgement can miss the Cluster's --acks window (a third of a second at TTL 6 s),
    // and that attempt is given back (69), which is not what these scenarios are about.
    let holder_args = [
        &["--wait", "20s", "-t", ttl.as_str(), key.as_str()][..],
        acks,
        &kill,
    ]
    .concat();
    let waiter_args = [&["--wait", "60s", "-t", &ttl, &key][..], acks].concat();
    // The holder's job spans the cut, the failover and the rejoin.
    let hold = Job::hold(c.hold).writing_every(100);
    let holder = ch.spawn(
        cluster.lockrun(&ch, "h", &holder_args, &hold),
        c.holder_codes,
    );
    ch.wait_begin(&holder);
    let waiter = ch.spawn(
        // Longer than any overlap when the cut outlasts the promotion.
        cluster.lockrun(
            &ch,
            "w",
            &waiter_args,
            &Job::hold(if c.keep_cut > 0 { c.ttl + 3000 } else { 2000 }),
        ),
        &[0, 76],
    );
    if c.after_renewal {
        // The key's PTTL on its primary jumps back up when a renewal lands.
        let pttl = || primary.try_cmd::<i64>(&["PTTL", &key]).unwrap_or(-1);
        let mut last = pttl();
        let deadline = Instant::now() + PATIENCE;
        loop {
            assert!(Instant::now() < deadline, "{name}: no renewal seen");
            let now = pttl();
            if now > last + 100 {
                break;
            }
            last = now;
            thread::sleep(ms(5));
        }
    } else {
        // Any phase of the holder's renewal cycle.
        let mut rng = ch.rng();
        thread::sleep(ms(rng.range(300, 300 + c.ttl / 3)));
    }
    let p = PRIMARIES[shard];
    let others: Vec<&str> = PRIMARIES
        .iter()
        .chain(REPLICAS.iter())
        .copied()
        .filter(|h| *h != p)
        .chain(["w"])
        .collect();
    match c.holder {
        Holder::Everywhere => cluster.net.partition(&[&[p], &others]),
        Holder::WithPrimary => cluster.net.partition(&[&[p, "h"], &others]),
    }
    let cut_at = Instant::now();
    ch.fault(&format!("{p} (the key's primary) cut off"));
    replica.wait_until("was promoted", is_master);
    let took = cut_at.elapsed().as_millis();
    eprintln!("{name}: replica promoted {took} ms after the cut");
    ch.fault(&format!("replica promoted {took} ms after the cut"));
    thread::sleep(ms(c.keep_cut));
    cluster.net.heal();
    ch.fault("healed");
    primary.wait_until("rejoined as the new primary's replica", |s| {
        s.replication().contains("master_link_status:up")
    });
    let took = cut_at.elapsed().as_millis();
    eprintln!("{name}: old primary a replica again {took} ms after the cut");
    ch.fault(&format!(
        "old primary a replica again {took} ms after the cut"
    ));
    ch.finish_noting(holder, "holder");
    ch.finish_noting(waiter, "waiter");
    ch.report_on(&cluster.sockets())
}

fn cut_row(name: &str, scenario: &str, promise: Promise, c: &Cut) {
    let mut runs = Runs::new("Cluster, 3 primaries + 1 replica each", scenario, promise);
    for _ in 0..Runs::count(1) {
        runs.add(cut_run(name, c));
    }
    runs.finish();
}

const TTL: u64 = 6000;

#[test]
fn ha_cluster_cut_primary_holder_everywhere() {
    cut_row(
        "ha_cluster_cut_primary_holder_everywhere",
        "key's primary cut off until failover, holder reaches all (TTL 6 s)",
        Promise::AtMost(lost_write_bound(TTL, KILL_AFTER, NODE_TIMEOUT)),
        &Cut::with(Holder::Everywhere),
    );
}

#[test]
fn ha_cluster_cut_primary_holder_with_primary() {
    cut_row(
        "ha_cluster_cut_primary_holder_with_primary",
        "key's primary cut off until failover, holder on its side (TTL 6 s)",
        Promise::AtMost(lost_write_bound(TTL, KILL_AFTER, NODE_TIMEOUT)),
        &Cut::with(Holder::WithPrimary),
    );
}

#[test]
fn ha_cluster_cut_primary_holder_everywhere_acks() {
    cut_row(
        "ha_cluster_cut_primary_holder_everywhere_acks",
        "key's primary cut off until failover, holder reaches all, `--acks 1` (TTL 6 s)",
        Promise::NoOverlap,
        &Cut::acked(Holder::Everywhere),
    );
}

#[test]
fn ha_cluster_cut_primary_holder_with_primary_acks() {
    cut_row(
        "ha_cluster_cut_primary_holder_with_primary_acks",
        "key's primary cut off until failover, holder on its side, `--acks 1` (TTL 6 s)",
        Promise::NoOverlap,
        &Cut::acked(Holder::WithPrimary),
    );
}

/// With `--acks 1` the promoted replica has no replica of its own until the old primary
/// rejoins as one; from then on its renewals are acknowledged again. Here the holder's last
/// acknowledged lease (TTL 9 s, a 500 ms grace) outlasts the failover and the rejoin, so the
/// holder keeps the lock and its job ends with its own code.
#[test]
fn ha_cluster_cut_primary_holder_everywhere_acks_outlasts_rejoin() {
    cut_row(
        "ha_cluster_cut_primary_holder_everywhere_acks_outlasts_rejoin",
        "key's primary cut off until failover, holder reaches all, `--acks 1`, lease outlasts the old primary's rejoin (TTL 9 s, `--kill-after 500ms`)",
        Promise::NoOverlap,
        &Cut {
            ttl: 9000,
            kill_after: Some("500ms"),
            holder_codes: &[0],
            ..Cut::acked(Holder::Everywhere)
        },
    );
}

/// How long after being cut off from every other node a Cluster primary still accepts writes
/// (`SET` through its unix socket every 20 ms until `CLUSTERDOWN`), in ms since the cut.
fn accepts_writes_for(node_timeout: u64) -> u64 {
    let cluster = Cluster::start(node_timeout);
    let key = (0..)
        .map(|i| format!("probe{i}"))
        .find(|k| cluster.shard_of(k) == 0)
        .unwrap();
    let primary = &cluster.nodes[0];
    // Any moment of the nodes' pings.
    thread::sleep(ms(Rng::from_clock().range(0, node_timeout)));
    let others: Vec<&str> = PRIMARIES[1..]
        .iter()
        .chain(REPLICAS.iter())
        .copied()
        .collect();
    cluster.net.partition(&[&["a1"], &others]);
    primary.accepts_writes_since(&key, Instant::now())
}

/// A primary cut off from the rest of the cluster refuses writes (`CLUSTERDOWN`) once it has
/// flagged a majority of the primaries as failing: a node-timeout after its unanswered ping,
/// which it sends once the last answer is half a node-timeout old, so within 1.5 ×
/// `cluster-node-timeout` of the cut (and the cron's 100 ms). Until then a holder on its side
/// is renewed there: writes the failover loses.
#[test]
fn ha_cluster_cut_primary_refuses_writes_within_node_timeout() {
    for node_timeout in [1000, 3000] {
        let took = accepts_writes_for(node_timeout);
        eprintln!(
            "cluster-node-timeout {node_timeout}: writes accepted for {took} ms after the cut"
        );
        assert!(
            took <= node_timeout * 3 / 2 + 300,
            "cluster-node-timeout {node_timeout}: writes accepted for {took} ms after the cut"
        );
    }
}

/// The holder on the cut-off primary's side, `cluster-node-timeout` half the TTL: that
/// primary accepts the holder's renewals for up to 1.5 × node-timeout after the cut
/// (`ha_cluster_cut_primary_refuses_writes_within_node_timeout`), writes the failover loses;
/// the cut lasts a TTL past the promotion, so the holder learns nothing until the deadline
/// those renewals gave it. The cut comes right after a renewal, so that the last one it
/// accepts lands shortly before it refuses writes.
#[test]
fn ha_cluster_cut_primary_holder_with_primary_long_node_timeout() {
    cut_row(
        "ha_cluster_cut_primary_holder_with_primary_long_node_timeout",
        "key's primary cut off with the holder until a TTL past failover, `cluster-node-timeout` 3 s (TTL 6 s, `--kill-after 100ms`)",
        Promise::AtMost(lost_write_bound(6000, 100, 3000)),
        &Cut {
            ttl: 6000,
            kill_after: Some("100ms"),
            node_timeout: 3000,
            after_renewal: true,
            keep_cut: 6000,
            hold: 24_000,
            ..Cut::with(Holder::WithPrimary)
        },
    );
}
