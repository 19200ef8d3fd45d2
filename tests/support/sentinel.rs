//! Sentinels watching a [`ReplicaSet`]: each a [`Server`] run as `redis-server --sentinel` on a
//! loopback port, with a quorum of a majority of them.
//!
//! The timings are short (a forced `SENTINEL FAILOVER` takes about a second), not the
//! production defaults' half minute. Sentinels declare a master down after 2 s without an
//! answer: at 500 ms a stall of this shared VM can fail a new master over again, demoting it
//! (with `CLIENT KILL` of its clients) under a running test.

use super::replication::ReplicaSet;
use super::server::{Server, ServerOptions, Tls};
use super::PATIENCE;
use std::thread;
use std::time::{Duration, Instant};

/// The name the Sentinels monitor the replica set under.
pub const MASTER_NAME: &str = "lockrun-test";

/// Sentinels watching one replica set, with a quorum of a majority of them.
pub struct Sentinels {
    pub nodes: Vec<Server>,
}

impl Sentinels {
    pub fn start(set: &ReplicaSet, count: usize) -> Sentinels {
        Sentinels::launch(set, count, None)
    }

    /// Sentinels that require `password` of their clients (sentinel `requirepass`; they use it
    /// among themselves too). If the set's data nodes have a password, every variant of
    /// `start` tells the Sentinels (`sentinel auth-pass`).
    pub fn start_with_password(set: &ReplicaSet, count: usize, password: &str) -> Sentinels {
        Sentinels::launch(set, count, Some(password))
    }

    fn launch(set: &ReplicaSet, count: usize, password: Option<&str>) -> Sentinels {
        let quorum = count / 2 + 1;
        let mut config = format!(
            "sentinel monitor {MASTER_NAME} 127.0.0.1 {port} {quorum}\n\
             sentinel down-after-milliseconds {MASTER_NAME} 2000\n\
             sentinel failover-timeout {MASTER_NAME} 10000\n\
             sentinel parallel-syncs {MASTER_NAME} 1\n",
            port = set.master.port()
        );
        if let Some(data) = &set.master.password {
            config.push_str(&format!("sentinel auth-pass {MASTER_NAME} {data}\n"));
        }
        let nodes: Vec<Server> = (0..count)
            .map(|_| {
                Server::with(ServerOptions {
                    config: config.clone(),
                    args: vec!["--sentinel".into()],
                    password: password.map(str::to_string),
                    tls: if set.master.tls.is_some() {
                        Tls::Server
                    } else {
                        Tls::None
                    },
                    certs: set.master.tls.clone(),
                    ..ServerOptions::tcp()
                })
            })
            .collect();
        let s = Sentinels { nodes };
        // Ready when every Sentinel knows the others and the replicas: a failover needs both.
        for n in &s.nodes {
            n.wait_until("discovered its peers and the replicas", |n| {
                let sentinels = n.try_cli(&["SENTINEL", "SENTINELS", MASTER_NAME]);
                let replicas = n.try_cli(&["SENTINEL", "REPLICAS", MASTER_NAME]);
                // Connected to each peer as well (no `disconnected` flag): a link still to
                // come is a connection a test counting connections would see.
                let linked = sentinels
                    .as_deref()
                    .is_some_and(|t| !t.contains("disconnected"));
                let peers = sentinels.map_or(0, |t| t.matches("runid").count());
                let seen = replicas.map_or(0, |t| t.matches("runid").count());
                peers + 1 >= count && linked && seen >= set.replicas.len()
            });
        }
        s
    }

    /// `redis+sentinel://` style address list for lockrun: `127.0.0.1:p1,127.0.0.1:p2,…`.
    pub fn addrs(&self) -> Vec<String> {
        self.nodes.iter().map(Server::addr).collect()
    }

    /// `redis+sentinel://127.0.0.1:p1,…/lockrun-test`, no credentials.
    pub fn url(&self) -> String {
        format!("redis+sentinel://{}/{MASTER_NAME}", self.addrs().join(","))
    }

    /// What each Sentinel says (named master, config epoch) and each node of `set` is (role,
    /// link to its master), never failing on a dead process: for a failed test's message.
    pub fn describe(&self, set: &ReplicaSet) -> String {
        let mut text = String::from("sentinels:");
        for s in &self.nodes {
            let named = s
                .try_cli(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME])
                .map(|r| r.split_whitespace().collect::<Vec<_>>().join(":"))
                .unwrap_or_else(|| "no answer".into());
            let epoch = s
                .try_cli(&["SENTINEL", "MASTER", MASTER_NAME])
                .and_then(|r| {
                    let mut lines = r.lines().map(str::trim);
                    lines.find(|l| *l == "config-epoch")?;
                    lines.next().map(str::to_string)
                })
                .unwrap_or_else(|| "?".into());
            text.push_str(&format!(
                "\n  {}: names {named}, config-epoch {epoch}",
                s.port()
            ));
        }
        text.push_str("\nnodes:");
        for n in set.nodes() {
            let role = n
                .try_cli(&["INFO", "replication"])
                .map(|i| {
                    i.lines()
                        .filter(|l| {
                            l.starts_with("role:")
                                || l.starts_with("master_port:")
                                || l.starts_with("master_link_status:")
                                || l.starts_with("connected_slaves:")
                        })
                        .map(str::trim)
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap_or_else(|| "no answer (dead?)".into());
            text.push_str(&format!("\n  {}: {role}", n.port()));
        }
        text
    }

    /// The master's port as the first Sentinel reports it.
    pub fn master_port(&self) -> u16 {
        self.master_port_by(&self.nodes[0])
    }

    /// The failover epoch of the monitored master as the first sentinel knows it: it grows
    /// with every failover, so a test can tell whether another one happened meanwhile.
    pub fn config_epoch(&self) -> u64 {
        let reply = self.nodes[0].cli(&["SENTINEL", "MASTER", MASTER_NAME]);
        let mut lines = reply.lines().map(str::trim);
        lines
            .by_ref()
            .find(|l| *l == "config-epoch")
            .and_then(|_| lines.next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no config-epoch in {reply:?}"))
    }

    fn master_port_by(&self, sentinel: &Server) -> u16 {
        let reply = sentinel.cli(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME]);
        reply
            .lines()
            .nth(1)
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("no master address in {reply:?}"))
    }

    /// The port that a majority of the Sentinels name as the master, if a majority agree
    /// (a Sentinel that does not answer names nothing).
    pub fn majority_port(&self) -> Option<u16> {
        let named: Vec<u16> = self
            .nodes
            .iter()
            .filter_map(|s| {
                let reply = s.try_cli(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME])?;
                reply.lines().nth(1)?.trim().parse().ok()
            })
            .collect();
        named
            .iter()
            .copied()
            .find(|p| named.iter().filter(|q| *q == p).count() > self.nodes.len() / 2)
    }

    /// Asks the first Sentinel to fail over now (`SENTINEL FAILOVER`, without waiting for the
    /// master to answer: a stopped master is left behind), tolerating a failover the Sentinels
    /// started by themselves, and waits until a majority of them name another master than
    /// `old`. Returns its port.
    pub fn failover_away_from(&self, old: u16) -> u16 {
        let _ = self.nodes[0].try_cli(&["SENTINEL", "FAILOVER", MASTER_NAME]);
        let start = Instant::now();
        while start.elapsed() < PATIENCE {
            match self.majority_port() {
                Some(now) if now != old => return now,
                _ => thread::sleep(Duration::from_millis(50)),
            }
        }
        panic!("no majority of the Sentinels named another master than {old}");
    }

    /// Forces a failover (`SENTINEL FAILOVER`: no agreement needed, no waiting for the replica
    /// to catch up) and waits until every Sentinel names a different master, and that node says
    /// it is one. Returns its port.
    pub fn failover(&self) -> u16 {
        let old = self.master_port();
        self.nodes[0].cli(&["SENTINEL", "FAILOVER", MASTER_NAME]);
        let start = Instant::now();
        while start.elapsed() < PATIENCE {
            let now = self.master_port();
            if now != old {
                for s in &self.nodes {
                    s.wait_until(&format!("named the new master {now}"), |_| {
                        self.master_port_by(s) == now
                    });
                }
                return now;
            }
            thread::sleep(Duration::from_millis(50));
        }
        panic!("no failover away from port {old}");
    }
}
