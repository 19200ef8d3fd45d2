//! A master and its replicas: [`Server`]s on loopback TCP, the replicas started with
//! `replicaof`, ready once every replica is in sync and counted by the master.

use super::server::{certificates, Server, ServerOptions, Tls};
use std::ffi::OsString;

/// How to start a [`ReplicaSet`]; the default is a master alone.
#[derive(Clone, Debug, Default)]
pub struct ReplicaSetOptions {
    pub replicas: usize,
    /// Every data node needs it (`requirepass`), and uses it to replicate from the others
    /// (`masterauth`, on the master too: after a failover it replicates from a replica).
    pub password: Option<String>,
    /// [`Tls::Server`]: nodes that speak only TLS (also among themselves), with certificates
    /// from one throwaway CA (`certs/ca.crt`); Sentinels started for the set speak TLS too.
    pub tls: Tls,
    /// The replicas' environment (a `clockshim::Clock`'s: replicas whose wall clock is off).
    pub replica_env: Vec<(String, OsString)>,
}

/// A master and its replicas.
pub struct ReplicaSet {
    pub master: Server,
    pub replicas: Vec<Server>,
    /// The CA and certificates of a TLS set (after the nodes: dropped last).
    pub certs: Option<tempfile::TempDir>,
}

impl ReplicaSet {
    pub fn start(replicas: usize) -> ReplicaSet {
        ReplicaSet::with(ReplicaSetOptions {
            replicas,
            ..ReplicaSetOptions::default()
        })
    }

    /// See [`ReplicaSetOptions::tls`].
    pub fn start_tls(replicas: usize) -> ReplicaSet {
        ReplicaSet::with(ReplicaSetOptions {
            replicas,
            tls: Tls::Server,
            ..ReplicaSetOptions::default()
        })
    }

    /// See [`ReplicaSetOptions::password`].
    pub fn start_with_password(replicas: usize, password: &str) -> ReplicaSet {
        ReplicaSet::with(ReplicaSetOptions {
            replicas,
            password: Some(password.to_string()),
            ..ReplicaSetOptions::default()
        })
    }

    pub fn with(options: ReplicaSetOptions) -> ReplicaSet {
        let certs = (options.tls != Tls::None).then(certificates);
        let node = |config: String, env: &[(String, OsString)]| {
            let masterauth = options
                .password
                .as_ref()
                .map(|p| format!("masterauth {p}\n"))
                .unwrap_or_default();
            Server::with(ServerOptions {
                password: options.password.clone(),
                tls: options.tls,
                certs: certs.as_ref().map(|d| d.path().to_path_buf()),
                config: format!("{masterauth}{config}"),
                env: env.to_vec(),
                ..ServerOptions::tcp()
            })
        };
        let master = node(String::new(), &[]);
        let replicas: Vec<Server> = (0..options.replicas)
            .map(|_| {
                node(
                    format!("replicaof 127.0.0.1 {}", master.port()),
                    &options.replica_env,
                )
            })
            .collect();
        for r in &replicas {
            r.wait_until("finished its initial sync", |n| {
                n.try_cmd::<String>(&["INFO", "replication"])
                    .is_some_and(|i| i.contains("master_link_status:up"))
            });
        }
        // The replica's link is up once it has loaded the snapshot, but the master counts it
        // for `WAIT` only once it is `online` there, after it has read the replica's first
        // acknowledgement: until then `WAIT` answers 0 whatever the replica has.
        let n = replicas.len();
        master.wait_until("counted its replicas as online", |m| {
            m.try_cmd::<String>(&["INFO", "replication"])
                .is_some_and(|i| i.matches("state=online").count() == n)
        });
        ReplicaSet {
            master,
            replicas,
            certs,
        }
    }

    /// Every node, master first.
    pub fn nodes(&self) -> impl Iterator<Item = &Server> {
        std::iter::once(&self.master).chain(&self.replicas)
    }

    /// The node listening on `port`.
    pub fn node(&self, port: u16) -> &Server {
        self.nodes()
            .find(|n| n.port() == port)
            .unwrap_or_else(|| panic!("no node of the set on port {port}"))
    }

    /// Waits until every replica has `key` (ordinary asynchronous replication catching up).
    pub fn wait_replicated(&self, key: &str) {
        for r in &self.replicas {
            r.wait_until(&format!("received {key}"), |n| n.exists(key));
        }
    }
}

/// A server's part in replication.
impl Server {
    /// Waits until this server replicates from the one on `port` with its link up: what the
    /// Sentinels do to an old primary some seconds after a failover (it then holds a copy of
    /// the new primary's data, its own writes gone).
    pub fn wait_replica_of(&self, port: u16) {
        self.wait_until(&format!("became a replica of {port}"), |n| {
            n.try_cli(&["INFO", "replication"]).is_some_and(|i| {
                i.contains("role:slave")
                    && i.contains(&format!("master_port:{port}"))
                    && i.contains("master_link_status:up")
            })
        });
    }

    /// `role:master` in `INFO replication`.
    pub fn is_master(&self) -> bool {
        self.try_cli(&["INFO", "replication"])
            .is_some_and(|i| i.contains("role:master"))
    }

    /// A replica that lost `key`: what a write acknowledged by the master but not yet replicated
    /// when the master failed looks like after the failover. The replica is briefly made
    /// writable and the key deleted there only (a replica's own writes are not propagated).
    pub fn lose_key(&self, key: &str) {
        assert!(!self.is_master(), "lose_key is for a replica");
        self.cli(&["CONFIG", "SET", "replica-read-only", "no"]);
        assert_eq!(self.cli(&["DEL", key]), "1", "{key} was not on the replica");
        self.cli(&["CONFIG", "SET", "replica-read-only", "yes"]);
    }
}
