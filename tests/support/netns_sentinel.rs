//! A Sentinel-managed replica set in a private network ([`Net`]): three hosts `a`, `b`, `c`,
//! each with one data node and one sentinel (the primary on `a` at first, quorum 2), and the
//! client hosts a test asks for. The test watches and steers the servers through their unix
//! sockets, so no partition hides what they hold.

use super::ha::Topology;
use super::netns::{Net, Server};
use std::path::PathBuf;

/// The name the sentinels monitor the set under.
pub const SERVICE: &str = "ha";
const PORT: u16 = 6379;
const SENTINEL_PORT: u16 = 26379;

/// The replica set and its sentinels in their network.
pub struct Set {
    pub net: Net,
    /// On `a` (the primary at first), `b`, `c`.
    pub data: Vec<Server>,
    pub sentinels: Vec<Server>,
}

impl Set {
    /// `config`: more config lines for every data node (any of them may be promoted);
    /// `down_after`: the sentinels' `down-after-milliseconds`; `clients`: the client hosts.
    pub fn start(config: &str, down_after: u64, clients: &[&str]) -> Set {
        let hosts: Vec<&str> = ["a", "b", "c"].iter().chain(clients).copied().collect();
        let net = Net::new(&hosts);
        let primary = net.redis("a", PORT, config);
        let replicaof = format!("replicaof {} {PORT}\n{config}", net.addr("a"));
        let mut data = vec![primary];
        for host in ["b", "c"] {
            data.push(net.redis(host, PORT, &replicaof));
        }
        for r in &data[1..] {
            r.wait_until("finished its initial sync", |s| {
                s.replication().contains("master_link_status:up")
            });
        }
        data[0].wait_until("counted both replicas online", |s| {
            s.replication().matches("state=online").count() == 2
        });
        let monitor = format!(
            "sentinel monitor {SERVICE} {} {PORT} 2\n\
             sentinel down-after-milliseconds {SERVICE} {down_after}\n\
             sentinel failover-timeout {SERVICE} 4000\n\
             sentinel parallel-syncs {SERVICE} 2\n",
            net.addr("a")
        );
        let sentinels: Vec<Server> = ["a", "b", "c"]
            .iter()
            .map(|h| net.sentinel(h, SENTINEL_PORT, &monitor))
            .collect();
        for s in &sentinels {
            s.wait_until("knew its two peers and the two replicas", |s| {
                let count = |what: &str| {
                    s.try_cmd::<Vec<redis::Value>>(&["SENTINEL", what, SERVICE])
                        .map_or(0, |v| v.len())
                };
                count("SENTINELS") == 2 && count("REPLICAS") == 2
            });
        }
        Set {
            net,
            data,
            sentinels,
        }
    }

    pub fn sockets(&self) -> Vec<PathBuf> {
        self.data.iter().map(|s| s.socket.clone()).collect()
    }

    /// The primary a majority of the sentinels names now (asked through their unix sockets).
    pub fn named(&self) -> Option<String> {
        let named: Vec<String> = self
            .sentinels
            .iter()
            .filter_map(|s| {
                let a: Vec<String> =
                    s.try_cmd(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE])?;
                Some(a.join(":"))
            })
            .collect();
        named
            .iter()
            .find(|n| named.iter().filter(|m| m == n).count() >= 2)
            .cloned()
    }
}

impl Topology for Set {
    fn net(&self) -> &Net {
        &self.net
    }

    fn urls(&self) -> Vec<String> {
        let addrs: Vec<String> = self.sentinels.iter().map(Server::addr).collect();
        vec![format!("redis+sentinel://{}/{SERVICE}", addrs.join(","))]
    }
}
