//! Throwaway Redis topologies beyond one server, for the availability tests: a master with
//! replicas watched by Sentinels, and a Redis Cluster of three masters. Every node is a real
//! `redis-server` (Sentinel is `redis-server --sentinel`) on a free loopback TCP port, in a
//! temporary directory, killed when dropped. Nothing is persisted.
//!
//! The timings are short (down-after 500 ms, node timeout 1 s) so a failover takes about a
//! second, not the production defaults' half minute.

use super::{free_port, redis_server_binary, PATIENCE};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// One server process on 127.0.0.1:`port`.
pub struct Node {
    child: Child,
    pub port: u16,
    pub dir: tempfile::TempDir,
}

impl Node {
    /// Starts `redis-server` with `config` (the lines of a config file, written to the node's
    /// directory: Sentinel insists on a writable config file) and `extra` arguments.
    fn start(config: &str, extra: &[&str]) -> Node {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        let conf = dir.path().join("node.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\nsave \"\"\nappendonly no\ndir {}\nlogfile node.log\n{config}\n",
                dir.path().display()
            ),
        )
        .unwrap();
        let child = Command::new(redis_server_binary())
            .arg(&conf)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        let node = Node { child, port, dir };
        node.wait_until("answers PING", |n| {
            n.try_cli(&["PING"]).is_some_and(|r| r == "PONG")
        });
        node
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `redis-cli -p PORT args…`, its trimmed output, or None if it failed.
    pub fn try_cli(&self, args: &[&str]) -> Option<String> {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        (out.status.success() && !text.starts_with("ERR") && !text.contains("Could not connect"))
            .then_some(text)
    }

    pub fn cli(&self, args: &[&str]) -> String {
        self.try_cli(args)
            .unwrap_or_else(|| panic!("redis-cli -p {} {args:?} failed\n{}", self.port, self.log()))
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("node.log")).unwrap_or_default()
    }

    fn wait_until(&self, what: &str, mut cond: impl FnMut(&Node) -> bool) {
        let start = Instant::now();
        while start.elapsed() < PATIENCE {
            if cond(self) {
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
        panic!("node {} never {what}; its log:\n{}", self.port, self.log());
    }

    /// SIGSTOP / SIGCONT / SIGKILL: a paused or crashed node.
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A master and its replicas.
pub struct ReplicaSet {
    pub master: Node,
    pub replicas: Vec<Node>,
}

impl ReplicaSet {
    pub fn start(replicas: usize) -> ReplicaSet {
        let master = Node::start("", &[]);
        let replicas: Vec<Node> = (0..replicas)
            .map(|_| Node::start(&format!("replicaof 127.0.0.1 {}", master.port), &[]))
            .collect();
        for r in &replicas {
            r.wait_until("finished its initial sync", |n| {
                n.try_cli(&["INFO", "replication"])
                    .is_some_and(|i| i.contains("master_link_status:up"))
            });
        }
        ReplicaSet { master, replicas }
    }

    /// Every node, master first.
    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        std::iter::once(&self.master).chain(&self.replicas)
    }
}

/// The name the Sentinels monitor the replica set under.
pub const MASTER_NAME: &str = "lockrun-test";

/// Sentinels watching one replica set, with a quorum of a majority of them.
pub struct Sentinels {
    pub nodes: Vec<Node>,
}

impl Sentinels {
    pub fn start(set: &ReplicaSet, count: usize) -> Sentinels {
        let quorum = count / 2 + 1;
        let config = format!(
            "sentinel monitor {MASTER_NAME} 127.0.0.1 {port} {quorum}\n\
             sentinel down-after-milliseconds {MASTER_NAME} 500\n\
             sentinel failover-timeout {MASTER_NAME} 2000\n\
             sentinel parallel-syncs {MASTER_NAME} 1",
            port = set.master.port
        );
        let nodes: Vec<Node> = (0..count)
            .map(|_| Node::start(&config, &["--sentinel"]))
            .collect();
        let s = Sentinels { nodes };
        // Ready when every Sentinel knows the others and the replicas: a failover needs both.
        for n in &s.nodes {
            n.wait_until("discovered its peers and the replicas", |n| {
                let sentinels = n.try_cli(&["SENTINEL", "SENTINELS", MASTER_NAME]);
                let replicas = n.try_cli(&["SENTINEL", "REPLICAS", MASTER_NAME]);
                let peers = sentinels.map_or(0, |t| t.matches("runid").count());
                let seen = replicas.map_or(0, |t| t.matches("runid").count());
                peers + 1 >= count && seen >= set.replicas.len()
            });
        }
        s
    }

    /// `redis+sentinel://` style address list for lockrun: `127.0.0.1:p1,127.0.0.1:p2,…`.
    pub fn addrs(&self) -> Vec<String> {
        self.nodes.iter().map(Node::addr).collect()
    }

    /// The master's port as the first Sentinel reports it.
    pub fn master_port(&self) -> u16 {
        let reply = self.nodes[0].cli(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME]);
        reply
            .lines()
            .nth(1)
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("no master address in {reply:?}"))
    }

    /// Forces a failover and waits until the Sentinels name a different master.
    pub fn failover(&self) -> u16 {
        let old = self.master_port();
        self.nodes[0].cli(&["SENTINEL", "FAILOVER", MASTER_NAME]);
        let start = Instant::now();
        while start.elapsed() < PATIENCE {
            let now = self.master_port();
            if now != old {
                return now;
            }
            thread::sleep(Duration::from_millis(50));
        }
        panic!("no failover away from port {old}");
    }
}

/// A Redis Cluster of masters only (slots split evenly by `redis-cli --cluster create`).
pub struct Cluster {
    pub nodes: Vec<Node>,
}

impl Cluster {
    pub fn start(masters: usize) -> Cluster {
        assert!(
            masters >= 3,
            "redis-cli --cluster create wants at least 3 masters"
        );
        let nodes: Vec<Node> = (0..masters)
            .map(|_| {
                Node::start(
                    "cluster-enabled yes\ncluster-config-file nodes.conf\ncluster-node-timeout 1000",
                    &[],
                )
            })
            .collect();
        let addrs: Vec<String> = nodes.iter().map(Node::addr).collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli --cluster create");
        assert!(
            out.status.success(),
            "cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        for n in &nodes {
            n.wait_until("saw the cluster state ok", |n| {
                n.try_cli(&["CLUSTER", "INFO"])
                    .is_some_and(|i| i.contains("cluster_state:ok"))
            });
        }
        Cluster { nodes }
    }

    /// The node that serves `key`'s slot.
    pub fn owner_of(&self, key: &str) -> &Node {
        let slot: u16 = self.nodes[0]
            .cli(&["CLUSTER", "KEYSLOT", key])
            .parse()
            .expect("a slot number");
        self.nodes
            .iter()
            .find(|n| {
                n.try_cli(&["CLUSTER", "NODES"]).is_some_and(|t| {
                    t.lines()
                        .find(|l| l.contains("myself"))
                        .is_some_and(|l| serves(l, slot))
                })
            })
            .expect("some node serves every slot")
    }

    /// `redis-cli -c` on any node: follows redirections, as a cluster client does.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args([
                "-c",
                "-h",
                "127.0.0.1",
                "-p",
                &self.nodes[0].port.to_string(),
            ])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli -c");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

/// Whether a `CLUSTER NODES` line's slot ranges (`0-5460 10923`) include `slot`.
fn serves(line: &str, slot: u16) -> bool {
    line.split_whitespace().skip(8).any(|range| {
        let mut ends = range.split('-').map(|p| p.parse::<u16>());
        match (ends.next(), ends.next()) {
            (Some(Ok(a)), Some(Ok(b))) => (a..=b).contains(&slot),
            (Some(Ok(a)), None) => a == slot,
            _ => false,
        }
    })
}
