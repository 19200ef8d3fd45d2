//! A Redis Cluster of [`Server`]s on loopback ports (slots split evenly by `redis-cli --cluster
//! create`), masters only or with replicas. Node timeout 1 s, not the production default's 15.

use super::server::{certificates, wait_bounded, Server, ServerOptions, Tls};
use std::fs::File;
use std::process::{Command, Stdio};

/// A Redis Cluster (slots split evenly by `redis-cli --cluster create`), masters only or with
/// replicas.
pub struct Cluster {
    pub nodes: Vec<Server>,
    /// The CA and certificate of a TLS cluster (after the nodes: dropped last).
    pub certs: Option<tempfile::TempDir>,
}

/// How to start a [`Cluster`].
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    /// At least 3 (`redis-cli --cluster create` wants them).
    pub masters: usize,
    /// Replicas per master.
    pub replicas: usize,
    /// [`Tls::Server`]: every node speaks only TLS (clients, cluster bus), with certificates
    /// from one throwaway CA (`certs/ca.crt`).
    pub tls: Tls,
}

impl Cluster {
    pub fn start(masters: usize) -> Cluster {
        Cluster::start_with_replicas(masters, 0)
    }

    /// `masters` shards of one master and `replicas` replicas each.
    pub fn start_with_replicas(masters: usize, replicas: usize) -> Cluster {
        Cluster::with(ClusterOptions {
            masters,
            replicas,
            tls: Tls::None,
        })
    }

    /// Masters only, speaking only TLS: see [`ClusterOptions::tls`].
    pub fn start_tls(masters: usize) -> Cluster {
        Cluster::with(ClusterOptions {
            masters,
            replicas: 0,
            tls: Tls::Server,
        })
    }

    pub fn with(options: ClusterOptions) -> Cluster {
        let ClusterOptions {
            masters, replicas, ..
        } = options;
        let certs = (options.tls != Tls::None).then(certificates);
        assert!(
            masters >= 3,
            "redis-cli --cluster create wants at least 3 masters"
        );
        let total = masters * (1 + replicas);
        let nodes: Vec<Server> = (0..total)
            .map(|_| {
                Server::with(ServerOptions {
                    config: "cluster-enabled yes\ncluster-config-file nodes.conf\n\
                             cluster-node-timeout 1000"
                        .into(),
                    tls: options.tls,
                    certs: certs.as_ref().map(|d| d.path().to_path_buf()),
                    ..ServerOptions::tcp()
                })
            })
            .collect();
        let addrs: Vec<String> = nodes.iter().map(Server::addr).collect();
        // Bounded: it waits without limit for nodes that cannot reach each other.
        let log = nodes[0].dir.path().join("cluster-create.log");
        let mut create = Command::new("redis-cli")
            .args(nodes[0].tls_args())
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .stdout(File::create(&log).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-cli --cluster create");
        let status = wait_bounded(&mut create);
        assert!(
            status.is_some_and(|s| s.success()),
            "cluster create failed ({status:?}): {}\nfirst node's log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default(),
            nodes[0].log()
        );
        let cluster = Cluster { nodes, certs };
        cluster.wait_settled();
        cluster
    }

    /// Every node says the cluster is ok and knows every other node (no handshake, no
    /// failure flags), and every replica's link to its master is up.
    pub fn wait_settled(&self) {
        let total = self.nodes.len();
        for n in &self.nodes {
            n.wait_until("saw the whole cluster ok", |n| {
                let ok = n
                    .try_cli(&["CLUSTER", "INFO"])
                    .is_some_and(|i| i.contains("cluster_state:ok"));
                let known = n.try_cli(&["CLUSTER", "NODES"]).is_some_and(|t| {
                    t.lines().count() == total
                        && !t.contains("handshake")
                        && !t.contains("fail")
                        && !t.contains("noaddr")
                });
                let linked = n.try_cli(&["INFO", "replication"]).is_some_and(|i| {
                    i.contains("role:master") || i.contains("master_link_status:up")
                });
                ok && known && linked
            });
        }
    }

    /// `127.0.0.1:p1,127.0.0.1:p2,…` (every node) for a `redis+cluster://` URL.
    pub fn seeds(&self) -> String {
        self.nodes
            .iter()
            .map(Server::addr)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `CLUSTER KEYSLOT key`.
    pub fn slot(&self, key: &str) -> u16 {
        self.nodes[0]
            .cli(&["CLUSTER", "KEYSLOT", key])
            .parse()
            .expect("a slot number")
    }

    /// The node that serves `key`'s slot.
    pub fn owner_of(&self, key: &str) -> &Server {
        let slot = self.slot(key);
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

    /// The nodes that are masters now.
    pub fn masters(&self) -> impl Iterator<Item = &Server> {
        self.nodes.iter().filter(|n| {
            n.try_cli(&["CLUSTER", "NODES"]).is_some_and(|t| {
                t.lines()
                    .find(|l| l.contains("myself"))
                    .is_some_and(|l| l.contains("master"))
            })
        })
    }

    /// Every key on every master, sorted.
    pub fn all_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.masters().flat_map(Server::keys).collect();
        keys.sort();
        keys
    }

    /// A replica of the master that owns `key`'s slot.
    pub fn replica_of(&self, key: &str) -> &Server {
        let owner = self.owner_of(key);
        let owner_id = owner.id();
        self.nodes
            .iter()
            .find(|n| {
                let me = n.myself();
                let fields: Vec<&str> = me.split_whitespace().collect();
                fields.get(2).is_some_and(|f| f.contains("slave"))
                    && fields.get(3) == Some(&owner_id.as_str())
            })
            .unwrap_or_else(|| panic!("no replica of {} (the shard of {key})", owner.port()))
    }

    /// `CLUSTER FAILOVER` on a replica of the shard that serves `key` (a manual failover: the
    /// master pauses its clients until the replica has caught up, then the replica takes over).
    /// Waits until the replica serves the slot in every node's view, the old master replicates
    /// from it, and the cluster is ok again. Returns the new master.
    pub fn failover_shard_of(&self, key: &str) -> &Server {
        let slot = self.slot(key);
        let old = self.owner_of(key);
        let replica = self.replica_of(key);
        assert_eq!(replica.cli(&["CLUSTER", "FAILOVER"]), "OK");
        let new_id = replica.id();
        for n in &self.nodes {
            n.wait_until(
                &format!("saw {} take over slot {slot}", replica.port()),
                |n| {
                    n.try_cli(&["CLUSTER", "NODES"]).is_some_and(|t| {
                        t.lines().any(|l| {
                            l.starts_with(&new_id) && l.contains("master") && serves(l, slot)
                        })
                    })
                },
            );
        }
        old.wait_until("became a replica of the new master", |n| {
            n.try_cli(&["INFO", "replication"]).is_some_and(|i| {
                i.contains("role:slave")
                    && i.contains(&format!("master_port:{}", replica.port()))
                    && i.contains("master_link_status:up")
            })
        });
        self.wait_settled();
        replica
    }

    /// Starts moving `key`'s slot to the master `to` (`CLUSTER SETSLOT … IMPORTING/MIGRATING`)
    /// and `MIGRATE`s every key of the slot there: until [`Cluster::finish_migration`], the old
    /// owner answers commands for those keys with `-ASK` (the client must ask `to`, with
    /// `ASKING`). Returns the old owner.
    pub fn begin_migration(&self, key: &str, to: &Server) -> &Server {
        let slot = self.slot(key).to_string();
        let from = self.owner_of(key);
        assert_ne!(from.port(), to.port(), "{key} is already on {}", to.port());
        let (from_id, to_id) = (from.id(), to.id());
        assert_eq!(
            to.cli(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id]),
            "OK"
        );
        assert_eq!(
            from.cli(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id]),
            "OK"
        );
        let keys = from.cli(&["CLUSTER", "GETKEYSINSLOT", &slot, "1000"]);
        let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
        if !keys.is_empty() {
            let port = to.port().to_string();
            let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
            args.extend(&keys);
            assert_eq!(from.cli(&args), "OK", "MIGRATE {keys:?}");
        }
        from
    }

    /// Ends a migration begun by [`Cluster::begin_migration`]: `to` owns the slot in every
    /// node's view (the old owner now answers `-MOVED`).
    pub fn finish_migration(&self, key: &str, to: &Server) {
        let slot = self.slot(key);
        let to_id = to.id();
        for n in self.masters() {
            n.cli(&["CLUSTER", "SETSLOT", &slot.to_string(), "NODE", &to_id]);
        }
        for n in &self.nodes {
            n.wait_until(&format!("saw {} own slot {slot}", to.port()), |n| {
                n.try_cli(&["CLUSTER", "NODES"]).is_some_and(|t| {
                    t.lines().any(|l| l.starts_with(&to_id) && serves(l, slot))
                        && !t.contains("->-")
                        && !t.contains("-<-")
                })
            });
        }
        self.wait_settled();
    }

    /// `redis-cli -c` on any node: follows redirections, as a cluster client does.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args([
                "-c",
                "-h",
                "127.0.0.1",
                "-p",
                &self.nodes[0].port().to_string(),
            ])
            .args(self.nodes[0].tls_args())
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

/// A server's part in a cluster.
impl Server {
    /// `args` preceded by `ASKING` on the same connection: how a cluster client reads a key
    /// from the node importing its slot. The reply to `args`, trimmed.
    pub fn cli_asking(&self, args: &[&str]) -> String {
        use std::io::Write;
        let mut child = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port().to_string()])
            .args(self.tls_args())
            .env_remove("REDISCLI_AUTH")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("redis-cli");
        let quoted: Vec<String> = args.iter().map(|a| format!("\"{a}\"")).collect();
        let input = format!("ASKING\n{}\n", quoted.join(" "));
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        let out = child.wait_with_output().expect("redis-cli");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut replies = text.lines();
        assert_eq!(
            replies.next(),
            Some("OK"),
            "ASKING on {}: {text}",
            self.port()
        );
        replies.collect::<Vec<_>>().join("\n").trim().to_string()
    }

    /// This node's own line of `CLUSTER NODES` (`<id> <addr> myself,master - … <slots>`).
    pub fn myself(&self) -> String {
        self.cli(&["CLUSTER", "NODES"])
            .lines()
            .find(|l| l.contains("myself"))
            .unwrap_or_else(|| panic!("no myself line on {}", self.port()))
            .to_string()
    }

    /// The cluster node id.
    pub fn id(&self) -> String {
        self.cli(&["CLUSTER", "MYID"])
    }
}
