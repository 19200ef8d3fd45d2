//! Throwaway Redis topologies beyond one server, for the availability tests: a master with
//! replicas watched by Sentinels, and a Redis Cluster of three masters. Every node is a real
//! `redis-server` (Sentinel is `redis-server --sentinel`) on a free loopback TCP port, in a
//! temporary directory, killed when dropped. Nothing is persisted.
//!
//! The timings are short (node timeout 1 s; a forced `SENTINEL FAILOVER` takes about a
//! second), not the production defaults' half minute. Sentinels declare a master down after
//! 2 s without an answer: 500 ms was short enough for a stall of this shared VM to fail a new
//! master over again, demoting it (with `CLIENT KILL` of its clients) under a running test.

use super::{free_port, make_certificates, real_redis_binary, redis_server_binary, PATIENCE};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// One server process on 127.0.0.1:`port`.
pub struct Node {
    child: Child,
    pub port: u16,
    pub dir: tempfile::TempDir,
    /// What `cli` authenticates with (`requirepass` of this node), if anything.
    pub password: Option<String>,
    /// For a node that speaks only TLS: the directory of the test CA (`ca.crt`) and the
    /// server certificate it uses.
    pub tls: Option<PathBuf>,
}

/// A throwaway CA and a certificate for `localhost`/127.0.0.1 signed by it (`ca.crt`,
/// `server.crt`, `server.key`), shared by every node of a TLS topology.
pub fn certificates() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    make_certificates(dir.path());
    dir
}

impl Node {
    /// Starts `redis-server` with `config` (the lines of a config file, written to the node's
    /// directory: Sentinel insists on a writable config file) and `extra` arguments.
    fn start(config: &str, extra: &[&str]) -> Node {
        Node::start_auth(config, extra, None)
    }

    /// [`Node::start`] for a node whose config sets `requirepass password`: the harness's own
    /// `cli` calls authenticate with it (through `REDISCLI_AUTH`, never on a command line).
    fn start_auth(config: &str, extra: &[&str], password: Option<&str>) -> Node {
        Node::launch(config, extra, password, None)
    }

    /// The general form: with `tls` (a [`certificates`] directory), the node's port speaks
    /// only TLS, also to its replicas, Sentinels and cluster peers; it is then Redis whatever
    /// `LOCKRUN_TEST_SERVER` says (the Valkey build the suite fetches has no TLS).
    fn launch(config: &str, extra: &[&str], password: Option<&str>, tls: Option<&Path>) -> Node {
        Node::launch_env(config, extra, password, tls, &[])
    }

    /// [`Node::launch`] with `env` in the server's environment (a `clockshim::Clock`'s).
    fn launch_env(
        config: &str,
        extra: &[&str],
        password: Option<&str>,
        tls: Option<&Path>,
        env: &[(String, std::ffi::OsString)],
    ) -> Node {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = if config.contains("cluster-enabled yes") {
            cluster_port()
        } else {
            free_port()
        };
        let mut config = config.to_string();
        if let Some(certs) = tls {
            let c = |f: &str| certs.join(f).display().to_string();
            config = format!(
                "port 0\ntls-port {port}\ntls-cert-file {}\ntls-key-file {}\n\
                 tls-client-cert-file {}\ntls-client-key-file {}\n\
                 tls-ca-cert-file {}\ntls-auth-clients no\ntls-replication yes\n{config}",
                c("server.crt"),
                c("server.key"),
                // What a node shows when it is the client (replication, Sentinel, and the
                // cluster bus, which always asks for a client certificate).
                c("client.crt"),
                c("client.key"),
                c("ca.crt")
            );
            if config.contains("cluster-enabled yes") {
                config.push_str("\ntls-cluster yes");
            }
        }
        // A data node also listens on a unix socket, for the fault suite's checker (see
        // `Node::socket`); a Sentinel has no data to check.
        if !extra.contains(&"--sentinel") {
            config.push_str(&format!(
                "\nunixsocket {}\nunixsocketperm 700\n",
                dir.path().join("node.sock").display()
            ));
        }
        let conf = dir.path().join("node.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\nsave \"\"\nappendonly no\ndir {}\nlogfile node.log\n{config}\n",
                dir.path().display()
            ),
        )
        .unwrap();
        let binary = if tls.is_some() {
            real_redis_binary()
        } else {
            redis_server_binary()
        };
        let child = Command::new(binary)
            .arg(&conf)
            .args(extra)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        let node = Node {
            child,
            port,
            dir,
            password: password.map(str::to_string),
            tls: tls.map(Path::to_path_buf),
        };
        node.wait_until("answers PING", |n| {
            n.try_cli(&["PING"]).is_some_and(|r| r == "PONG")
        });
        node
    }

    /// `--tls --cacert …` for redis-cli, if this node speaks TLS.
    pub fn tls_args(&self) -> Vec<String> {
        match &self.tls {
            Some(certs) => vec![
                "--tls".into(),
                "--cacert".into(),
                certs.join("ca.crt").display().to_string(),
            ],
            None => Vec::new(),
        }
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// A data node's unix socket (for `Chaos::over`, whose checks must not depend on the
    /// network faults a scenario injects).
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("node.sock")
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `redis-cli -p PORT args…`, its trimmed output, or None if it failed.
    pub fn try_cli(&self, args: &[&str]) -> Option<String> {
        let mut cmd = Command::new("redis-cli");
        cmd.args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(self.tls_args())
            .args(args)
            .env_remove("REDISCLI_AUTH")
            .stdin(Stdio::null());
        if let Some(pw) = &self.password {
            cmd.env("REDISCLI_AUTH", pw);
        }
        let out = cmd.output().ok()?;
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

    /// Polls `cond` until it holds; fails with this node's log after PATIENCE.
    pub fn wait_until(&self, what: &str, mut cond: impl FnMut(&Node) -> bool) {
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

    pub fn exists(&self, key: &str) -> bool {
        self.cli(&["EXISTS", key]) == "1"
    }

    /// Every key on this node (`KEYS *`: the test servers hold a handful).
    pub fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self
            .cli(&["KEYS", "*"])
            .lines()
            .map(str::to_string)
            .filter(|k| !k.is_empty())
            .collect();
        keys.sort();
        keys
    }

    /// How often `command` ran here (`INFO commandstats`; commands a script calls count too).
    pub fn calls(&self, command: &str) -> u64 {
        let info = self.cli(&["INFO", "commandstats"]);
        let prefix = format!("cmdstat_{command}:calls=");
        info.lines()
            .find_map(|l| l.trim().strip_prefix(&prefix))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }

    /// Scripts run here by clients (lockrun's every lock operation is one; replication applies
    /// their effects, never the script, so a replica's count stays 0 until it is promoted).
    pub fn script_calls(&self) -> u64 {
        ["eval", "evalsha", "eval_ro", "evalsha_ro", "fcall"]
            .iter()
            .map(|c| self.calls(c))
            .sum()
    }

    /// Waits until this node replicates from the node on `port` with its link up: what the
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

    /// `args` preceded by `ASKING` on the same connection: how a cluster client reads a key
    /// from the node importing its slot. The reply to `args`, trimmed.
    pub fn cli_asking(&self, args: &[&str]) -> String {
        use std::io::Write;
        let mut child = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
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
            self.port
        );
        replies.collect::<Vec<_>>().join("\n").trim().to_string()
    }

    /// This node's own line of `CLUSTER NODES` (`<id> <addr> myself,master - … <slots>`).
    pub fn myself(&self) -> String {
        self.cli(&["CLUSTER", "NODES"])
            .lines()
            .find(|l| l.contains("myself"))
            .unwrap_or_else(|| panic!("no myself line on {}", self.port))
            .to_string()
    }

    /// The cluster node id.
    pub fn id(&self) -> String {
        self.cli(&["CLUSTER", "MYID"])
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
    /// The CA and certificate of a TLS set (after the nodes: dropped last).
    pub certs: Option<tempfile::TempDir>,
}

impl ReplicaSet {
    pub fn start(replicas: usize) -> ReplicaSet {
        ReplicaSet::launch(replicas, None, false)
    }

    /// Nodes that speak only TLS (also among themselves), with a certificate from a throwaway
    /// CA (`certs/ca.crt`). Sentinels started for this set speak TLS too.
    pub fn start_tls(replicas: usize) -> ReplicaSet {
        ReplicaSet::launch(replicas, None, true)
    }

    /// Data nodes that all need `password` (`requirepass`), and use it to replicate from each
    /// other (`masterauth`, on the master too: after a failover it replicates from a replica).
    pub fn start_with_password(replicas: usize, password: &str) -> ReplicaSet {
        ReplicaSet::launch(replicas, Some(password), false)
    }

    /// A plain set whose replicas run with `env` (a `clockshim::Clock`'s: replicas whose wall
    /// clock is off).
    pub fn start_with_replica_env(
        replicas: usize,
        env: &[(String, std::ffi::OsString)],
    ) -> ReplicaSet {
        ReplicaSet::launch_env(replicas, None, false, env)
    }

    fn launch(replicas: usize, password: Option<&str>, tls: bool) -> ReplicaSet {
        ReplicaSet::launch_env(replicas, password, tls, &[])
    }

    fn launch_env(
        replicas: usize,
        password: Option<&str>,
        tls: bool,
        env: &[(String, std::ffi::OsString)],
    ) -> ReplicaSet {
        let certs = tls.then(certificates);
        let tls = certs.as_ref().map(|d| d.path());
        let auth = password
            .map(|p| format!("requirepass {p}\nmasterauth {p}\n"))
            .unwrap_or_default();
        let master = Node::launch(&auth, &[], password, tls);
        let replicas: Vec<Node> = (0..replicas)
            .map(|_| {
                Node::launch_env(
                    &format!("{auth}replicaof 127.0.0.1 {}", master.port),
                    &[],
                    password,
                    tls,
                    env,
                )
            })
            .collect();
        for r in &replicas {
            r.wait_until("finished its initial sync", |n| {
                n.try_cli(&["INFO", "replication"])
                    .is_some_and(|i| i.contains("master_link_status:up"))
            });
        }
        // The replica's link is up once it has loaded the snapshot, but the master counts it
        // for `WAIT` only once it is `online` there, after it has read the replica's first
        // acknowledgement: until then `WAIT` answers 0 whatever the replica has.
        let n = replicas.len();
        master.wait_until("counted its replicas as online", |m| {
            m.try_cli(&["INFO", "replication"])
                .is_some_and(|i| i.matches("state=online").count() == n)
        });
        ReplicaSet {
            master,
            replicas,
            certs,
        }
    }

    /// Every node, master first.
    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        std::iter::once(&self.master).chain(&self.replicas)
    }

    /// The node listening on `port`.
    pub fn node(&self, port: u16) -> &Node {
        self.nodes()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("no node of the set on port {port}"))
    }

    /// Waits until every replica has `key` (ordinary asynchronous replication catching up).
    pub fn wait_replicated(&self, key: &str) {
        for r in &self.replicas {
            r.wait_until(&format!("received {key}"), |n| n.exists(key));
        }
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
            port = set.master.port
        );
        if let Some(data) = &set.master.password {
            config.push_str(&format!("sentinel auth-pass {MASTER_NAME} {data}\n"));
        }
        if let Some(own) = password {
            config.push_str(&format!("requirepass {own}\n"));
        }
        let nodes: Vec<Node> = (0..count)
            .map(|_| {
                Node::launch(
                    &config,
                    &["--sentinel"],
                    password,
                    set.master.tls.as_deref(),
                )
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
        self.nodes.iter().map(Node::addr).collect()
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
                s.port
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
            text.push_str(&format!("\n  {}: {role}", n.port));
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

    fn master_port_by(&self, sentinel: &Node) -> u16 {
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

/// A Redis Cluster (slots split evenly by `redis-cli --cluster create`), masters only or with
/// replicas.
pub struct Cluster {
    pub nodes: Vec<Node>,
    /// The CA and certificate of a TLS cluster (after the nodes: dropped last).
    pub certs: Option<tempfile::TempDir>,
}

impl Cluster {
    pub fn start(masters: usize) -> Cluster {
        Cluster::start_with_replicas(masters, 0)
    }

    /// `masters` shards of one master and `replicas` replicas each.
    pub fn start_with_replicas(masters: usize, replicas: usize) -> Cluster {
        Cluster::launch(masters, replicas, false)
    }

    /// Masters only, every node speaking only TLS (clients, cluster bus), with a certificate
    /// from a throwaway CA (`certs/ca.crt`).
    pub fn start_tls(masters: usize) -> Cluster {
        Cluster::launch(masters, 0, true)
    }

    fn launch(masters: usize, replicas: usize, tls: bool) -> Cluster {
        let certs = tls.then(certificates);
        assert!(
            masters >= 3,
            "redis-cli --cluster create wants at least 3 masters"
        );
        let total = masters * (1 + replicas);
        let nodes: Vec<Node> = (0..total)
            .map(|_| {
                Node::launch(
                    "cluster-enabled yes\ncluster-config-file nodes.conf\ncluster-node-timeout 1000",
                    &[],
                    None,
                    certs.as_ref().map(|d| d.path()),
                )
            })
            .collect();
        let addrs: Vec<String> = nodes.iter().map(Node::addr).collect();
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
        let status = super::wait_timeout(&mut create, PATIENCE);
        if status.is_none() {
            let _ = create.kill();
            let _ = create.wait();
        }
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
            .map(Node::addr)
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
    pub fn owner_of(&self, key: &str) -> &Node {
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
    pub fn masters(&self) -> impl Iterator<Item = &Node> {
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
        let mut keys: Vec<String> = self.masters().flat_map(Node::keys).collect();
        keys.sort();
        keys
    }

    /// A replica of the master that owns `key`'s slot.
    pub fn replica_of(&self, key: &str) -> &Node {
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
            .unwrap_or_else(|| panic!("no replica of {} (the shard of {key})", owner.port))
    }

    /// `CLUSTER FAILOVER` on a replica of the shard that serves `key` (a manual failover: the
    /// master pauses its clients until the replica has caught up, then the replica takes over).
    /// Waits until the replica serves the slot in every node's view, the old master replicates
    /// from it, and the cluster is ok again. Returns the new master.
    pub fn failover_shard_of(&self, key: &str) -> &Node {
        let slot = self.slot(key);
        let old = self.owner_of(key);
        let replica = self.replica_of(key);
        assert_eq!(replica.cli(&["CLUSTER", "FAILOVER"]), "OK");
        let new_id = replica.id();
        for n in &self.nodes {
            n.wait_until(
                &format!("saw {} take over slot {slot}", replica.port),
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
                    && i.contains(&format!("master_port:{}", replica.port))
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
    pub fn begin_migration(&self, key: &str, to: &Node) -> &Node {
        let slot = self.slot(key).to_string();
        let from = self.owner_of(key);
        assert_ne!(from.port, to.port, "{key} is already on {}", to.port);
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
            let port = to.port.to_string();
            let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
            args.extend(&keys);
            assert_eq!(from.cli(&args), "OK", "MIGRATE {keys:?}");
        }
        from
    }

    /// Ends a migration begun by [`Cluster::begin_migration`]: `to` owns the slot in every
    /// node's view (the old owner now answers `-MOVED`).
    pub fn finish_migration(&self, key: &str, to: &Node) {
        let slot = self.slot(key);
        let to_id = to.id();
        for n in self.masters() {
            n.cli(&["CLUSTER", "SETSLOT", &slot.to_string(), "NODE", &to_id]);
        }
        for n in &self.nodes {
            n.wait_until(&format!("saw {} own slot {slot}", to.port), |n| {
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
                &self.nodes[0].port.to_string(),
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

/// A lockrun started in the background whose stdout and stderr go to files (nothing can block
/// on a full pipe, and a test that fails can show what it said so far). Stopped on drop:
/// SIGTERM (lockrun passes it on to the job), then SIGKILL.
pub struct Job {
    child: Child,
    out: PathBuf,
    err: PathBuf,
}

impl Job {
    /// Spawns `cmd` with its output in `dir/name.out` and `dir/name.err`.
    pub fn spawn(mut cmd: Command, dir: &Path, name: &str) -> Job {
        let out = dir.join(format!("{name}.out"));
        let err = dir.join(format!("{name}.err"));
        cmd.stdout(File::create(&out).unwrap())
            .stderr(File::create(&err).unwrap());
        let child = cmd.spawn().expect("spawn lockrun");
        Job { child, out, err }
    }

    /// lockrun's process id (a job's `$PPID`, and the `pid=` of the lock value it writes).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.out).unwrap_or_default()).into_owned()
    }

    /// Lossy: a log line may quote bytes that are not UTF-8, and losing the whole log to one
    /// of them would hide exactly what a failure needs shown.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.err).unwrap_or_default()).into_owned()
    }

    /// Polls `cond` until it holds; fails at once (with lockrun's output) if lockrun exits
    /// first, or after PATIENCE.
    pub fn until(&mut self, what: &str, cond: impl FnMut() -> bool) {
        self.until_or_explain(what, cond, String::new);
    }

    /// [`Job::until`] whose failure message ends with `explain()` (the state of the servers).
    pub fn until_or_explain(
        &mut self,
        what: &str,
        mut cond: impl FnMut() -> bool,
        explain: impl Fn() -> String,
    ) {
        let start = Instant::now();
        while start.elapsed() < PATIENCE {
            if cond() {
                return;
            }
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                panic!(
                    "lockrun exited ({status}) before {what}\nstdout:\n{}\nstderr:\n{}\n{}",
                    self.stdout(),
                    self.stderr(),
                    explain()
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "timed out waiting for {what}\nstderr so far:\n{}",
            self.stderr()
        );
    }

    /// Waits (at most PATIENCE) for lockrun to exit: its exit code, stdout, stderr.
    pub fn finish(mut self) -> (Option<i32>, String, String) {
        let status = super::wait_timeout(&mut self.child, PATIENCE).unwrap_or_else(|| {
            panic!(
                "lockrun still running after {PATIENCE:?}\n{}",
                self.stderr()
            )
        });
        (status.code(), self.stdout(), self.stderr())
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            super::kill(self.child.id(), libc::SIGTERM);
            if super::wait_timeout(&mut self.child, Duration::from_secs(5)).is_none() {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
    }
}

/// A `sh -c` snippet that waits (at most 30 s, so an orphaned job cannot linger) until `file`
/// exists: the test's way of letting a job end when it chooses.
pub fn wait_for_go(file: &Path) -> String {
    format!(
        "i=0; while [ ! -e '{}' ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done",
        file.display()
    )
}

/// A free port for a cluster node: its bus listens on port + 10000, which must be free too,
/// and below the ephemeral range as well.
fn cluster_port() -> u16 {
    super::port_where(|port| {
        port + 10000 < 32768 && std::net::TcpListener::bind(("127.0.0.1", port + 10000)).is_ok()
    })
}
