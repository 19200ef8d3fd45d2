//! A private network of Linux network namespaces for the availability suites: real servers on
//! real addresses that a test can partition from each other with iptables, while the test
//! itself observes and controls every server through unix sockets that no partition touches.
//!
//! Each [`Net`] is one "switch" namespace holding a bridge, plus one namespace per host, each
//! joined to the bridge by a veth pair (`eth0` inside the host, `h<i>` in the switch) and given
//! `10.77.0.<i+1>/24`. Nothing is created in the test's own namespace (no interface, no
//! iptables rule), so instances never see each other and concurrent tests reuse the subnet.
//! Names are `lr<pid>-<n>-<host>`; namespaces left behind by a test process that is gone are
//! deleted when the next [`Net`] starts. Dropping a [`Net`] kills every process it started and
//! deletes its namespaces.
//!
//! - Hosts: [`Net::new`] with their names; [`Net::addr`] is a host's address.
//! - Servers: [`Net::redis`] (a data node: `replicaof`, `appendonly`, `min-replicas-*`, cluster
//!   mode: any config lines), [`Net::sentinel`]; both listen on the host's address and on a
//!   unix socket ([`Server::socket`]) for the test; [`Server::kill`] ends one. Independent
//!   masters (Redlock): one `net.redis(h, 6379, "")` per host, URLs `redis://<addr>:6379`. A
//!   Cluster: `cluster-enabled yes` (and `cluster-node-timeout`) in `config`, then slots and
//!   roles set over the unix sockets (`CLUSTER ADDSLOTSRANGE`, `MEET`, `REPLICATE`).
//! - Clients: [`Net::command`] runs any program inside a host's namespace
//!   (`nsenter --net=/run/netns/<ns> -- program`: nsenter execs, so the child's pid is the
//!   program's). [`Net::home`] is the prefix that brings a process back into the test's own
//!   namespace (for a lockrun job that reports to the recorder on the test's loopback).
//! - Faults: [`Net::partition`] (groups that cannot reach each other; hosts in no group reach
//!   everyone: `partition(&[&["client"], &["b", "c"]])` cuts a client off from `b` and `c`
//!   only), [`Net::cut`] (one way), [`Net::uncut`] (lifts those cuts only), [`Net::heal`].
//!   Rules are iptables DROPs inside the host namespaces (INPUT from and OUTPUT to the cut-off
//!   addresses): a black hole, not a refusal.
//!
//! Root and `ip`, `iptables-restore`, `nsenter` are needed (tests/ensure-netns.sh installs
//! them); without them a test fails saying so, it never skips.

use super::chaos::{Chaos, Job};
use super::server::{self, ServerOptions, Tls};
use super::{lockrun_bin, Lockrun, PATIENCE};
use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// One host of the network.
#[derive(Clone, Debug)]
pub struct Host {
    pub name: String,
    /// The namespace's name (`ip netns` lists it).
    pub ns: String,
    pub addr: String,
}

/// Every process a [`Net`] started, by pid, so that Drop can kill them all.
type Procs = Arc<Mutex<HashMap<u32, Child>>>;

pub struct Net {
    switch: String,
    hosts: Vec<Host>,
    pub dir: tempfile::TempDir,
    procs: Procs,
    /// The DROP rules in force, per host namespace (applied whole by iptables-restore).
    rules: Mutex<HashMap<String, Vec<String>>>,
}

/// Runs `program args` and fails the test with its output if it fails.
fn sh(program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{program} {args:?}: {e} (tests/ensure-netns.sh installs it)"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What the harness needs, checked once: root, and the tools.
fn check_environment() {
    // SAFETY: geteuid(2) has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    assert!(
        root,
        "the network-namespace tests (ha_*) need root: run the suite as root (CI does), or \
         leave these tests out with `--skip ha_`"
    );
    for tool in ["ip", "iptables-restore", "nsenter"] {
        let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .chain(["/usr/sbin".into(), "/sbin".into()])
            .any(|d| d.join(tool).is_file());
        assert!(
            found,
            "{tool} not found: the network-namespace tests need iproute2, iptables and \
             util-linux (`bash tests/ensure-netns.sh` installs them)"
        );
    }
}

/// Deletes namespaces named `lr<pid>-…` whose process is gone (a test killed before Drop).
fn sweep_leftovers() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        let Some(pid) = name
            .strip_prefix("lr")
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            // Its servers outlive it (a killed test runs no Drop), and deleting the namespace
            // would not end them: it lives on while a process is inside. Kill them first.
            if let Ok(pids) = Command::new("ip").args(["netns", "pids", name]).output() {
                for p in String::from_utf8_lossy(&pids.stdout).split_whitespace() {
                    if let Ok(p) = p.parse::<i32>() {
                        // SAFETY: kill(2) of a process inside a namespace of a dead test run.
                        unsafe { libc::kill(p, libc::SIGKILL) };
                    }
                }
            }
            let _ = Command::new("ip").args(["netns", "del", name]).output();
        }
    }
}

impl Net {
    /// A network with these hosts (at most 250), all up and reachable from each other.
    pub fn new(hosts: &[&str]) -> Net {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        static SWEPT: std::sync::Once = std::sync::Once::new();
        check_environment();
        SWEPT.call_once(sweep_leftovers);
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let id = format!("lr{}-{n}", std::process::id());
        let switch = format!("{id}-sw");
        let mut net = Net {
            switch: switch.clone(),
            hosts: Vec::new(),
            dir: tempfile::tempdir().expect("tempdir"),
            procs: Procs::default(),
            rules: Mutex::default(),
        };
        sh("ip", &["netns", "add", &switch]);
        sh("ip", &["-n", &switch, "link", "set", "lo", "up"]);
        sh(
            "ip",
            &["-n", &switch, "link", "add", "br0", "type", "bridge"],
        );
        sh("ip", &["-n", &switch, "link", "set", "br0", "up"]);
        for (i, name) in hosts.iter().enumerate() {
            assert!(i < 250, "at most 250 hosts");
            let ns = format!("{id}-{name}");
            // Pushed first: Drop deletes it even if a step below fails.
            net.hosts.push(Host {
                name: name.to_string(),
                ns: ns.clone(),
                addr: format!("10.77.0.{}", i + 1),
            });
            sh("ip", &["netns", "add", &ns]);
            let port = format!("h{i}");
            // Both ends are created inside the namespaces: nothing appears in the test's own.
            sh(
                "ip",
                &[
                    "-n", &switch, "link", "add", &port, "type", "veth", "peer", "name", "eth0",
                    "netns", &ns,
                ],
            );
            sh(
                "ip",
                &["-n", &switch, "link", "set", &port, "master", "br0", "up"],
            );
            let cidr = format!("10.77.0.{}/24", i + 1);
            sh("ip", &["-n", &ns, "addr", "add", &cidr, "dev", "eth0"]);
            sh("ip", &["-n", &ns, "link", "set", "eth0", "up"]);
            sh("ip", &["-n", &ns, "link", "set", "lo", "up"]);
        }
        net
    }

    pub fn host(&self, name: &str) -> &Host {
        self.hosts
            .iter()
            .find(|h| h.name == name)
            .unwrap_or_else(|| panic!("no host {name} in this network"))
    }

    pub fn addr(&self, name: &str) -> String {
        self.host(name).addr.clone()
    }

    /// `program` to be run inside `host`'s namespace (arguments to be added by the caller).
    pub fn command(&self, host: &str, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net=/run/netns/{}", self.host(host).ns))
            .arg("--")
            .arg(program);
        cmd
    }

    /// `lockrun -r <url>… <args> -- <job>` on `host` (one `-r` per URL), without the caller's
    /// LOCKRUN_* environment, the job run back in the test's namespace so that it reaches the
    /// scenario's recorder.
    pub fn lockrun(
        &self,
        ch: &Chaos,
        host: &str,
        urls: &[String],
        args: &[&str],
        job: &Job,
    ) -> Lockrun {
        let mut cmd = urls.iter().fold(
            Lockrun::via(self.command(host, lockrun_bin())),
            Lockrun::url,
        );
        cmd.args(args).arg("--").args(Net::home()).args(ch.job(job));
        cmd
    }

    /// The words that run a command back in the test's own network namespace (its loopback,
    /// where the chaos recorder listens): `nsenter --net=/proc/<test pid>/ns/net --`, which
    /// execs, so the command keeps its parent.
    pub fn home() -> [String; 3] {
        [
            "nsenter".into(),
            format!("--net=/proc/{}/ns/net", std::process::id()),
            "--".into(),
        ]
    }

    /// Hosts in different groups can no longer reach each other (both ways); a host in no
    /// group still reaches everyone. Adds to the cuts already in force.
    pub fn partition(&self, groups: &[&[&str]]) {
        for (i, a) in groups.iter().enumerate() {
            for b in &groups[i + 1..] {
                self.cut(a, b);
                self.cut(b, a);
            }
        }
    }

    /// One way: packets from `from` to `to` are dropped (replies the other way still pass,
    /// but a TCP connection needs both, so in effect neither side connects).
    pub fn cut(&self, from: &[&str], to: &[&str]) {
        let mut rules = self.rules.lock().unwrap();
        for f in from {
            for t in to {
                let (f, t) = (self.host(f), self.host(t));
                rules
                    .entry(f.ns.clone())
                    .or_default()
                    .push(format!("-A OUTPUT -d {} -j DROP", t.addr));
                rules
                    .entry(t.ns.clone())
                    .or_default()
                    .push(format!("-A INPUT -s {} -j DROP", f.addr));
            }
        }
        self.apply(&rules);
    }

    /// The cuts [`Net::cut`] made from `from` to `to` are lifted; any other stays.
    pub fn uncut(&self, from: &[&str], to: &[&str]) {
        let mut rules = self.rules.lock().unwrap();
        for f in from {
            for t in to {
                let (f, t) = (self.host(f), self.host(t));
                let out = format!("-A OUTPUT -d {} -j DROP", t.addr);
                let input = format!("-A INPUT -s {} -j DROP", f.addr);
                if let Some(r) = rules.get_mut(&f.ns) {
                    r.retain(|l| *l != out);
                }
                if let Some(r) = rules.get_mut(&t.ns) {
                    r.retain(|l| *l != input);
                }
            }
        }
        self.apply(&rules);
    }

    /// Every cut is lifted.
    pub fn heal(&self) {
        let mut rules = self.rules.lock().unwrap();
        for r in rules.values_mut() {
            r.clear();
        }
        self.apply(&rules);
        rules.clear();
    }

    /// Writes each namespace's filter table whole (iptables-restore: atomic per host).
    fn apply(&self, rules: &HashMap<String, Vec<String>>) {
        for (ns, lines) in rules {
            let table = format!(
                "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n{}\nCOMMIT\n",
                lines.join("\n")
            );
            let mut child = Command::new("ip")
                .args(["netns", "exec", ns, "iptables-restore", "-w"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("iptables-restore (tests/ensure-netns.sh installs iptables)");
            child
                .stdin
                .take()
                .unwrap()
                .write_all(table.as_bytes())
                .unwrap();
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "iptables-restore in {ns}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    /// A `redis-server` (the suite's binary: Redis or Valkey) on `host`'s address, `port`, and
    /// on a unix socket; `config`: more config lines (`replicaof 10.77.0.1 6379`,
    /// `appendonly yes`, `min-replicas-to-write 1`, `cluster-enabled yes`…).
    pub fn redis(&self, host: &str, port: u16, config: &str) -> Server {
        self.server(
            host,
            port,
            ServerOptions {
                config: config.into(),
                ..ServerOptions::default()
            },
        )
    }

    /// `redis-server --sentinel` on `host`'s address and a unix socket; `config`: its
    /// `sentinel monitor …` lines and the like.
    pub fn sentinel(&self, host: &str, port: u16, config: &str) -> Server {
        self.server(
            host,
            port,
            ServerOptions {
                config: config.into(),
                args: vec!["--sentinel".into()],
                ..ServerOptions::default()
            },
        )
    }

    /// A server on `host`'s address and `port`, and on a unix socket, as `options` say: its
    /// `config` lines, `args` (`--sentinel`), `binary` and `env`. (Transport, password and TLS
    /// are the loopback harness's; a namespace's servers are plain.)
    pub fn server(&self, host: &str, port: u16, options: ServerOptions) -> Server {
        let h = self.host(host).clone();
        let sentinel = options.args.iter().any(|a| a == "--sentinel");
        let kind = if sentinel { "sentinel" } else { "redis" };
        let dir = self.dir.path().join(format!("{host}-{kind}-{port}"));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("s.sock");
        let conf = dir.join("node.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind {addr}\nprotected-mode no\nunixsocket {sock}\nunixsocketperm 700\n\
                 save \"\"\nappendonly no\ndir {dir}\nlogfile node.log\n{config}\n",
                addr = h.addr,
                sock = socket.display(),
                dir = dir.display(),
                config = options.config
            ),
        )
        .unwrap();
        let server = Server {
            host: h,
            port,
            socket,
            dir,
            conf,
            sentinel,
            binary: server::binary(options.binary, Tls::None),
            args: options.args,
            env: options.env,
            procs: self.procs.clone(),
            pid: Mutex::new(0),
        };
        server.launch();
        server
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for (_, mut child) in self.procs.lock().unwrap().drain() {
            let _ = child.kill();
            let _ = child.wait();
        }
        for h in &self.hosts {
            let _ = Command::new("ip").args(["netns", "del", &h.ns]).output();
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.switch])
            .output();
    }
}

/// How long the test's own commands to a namespace's server may take: a paused server must not
/// hang the test.
const TIMEOUT: Duration = Duration::from_secs(1);

/// A server process started by a [`Net`]; the [`Net`] kills it when dropped. It shares its
/// options ([`ServerOptions`]) and the test's own commands over the unix socket with
/// [`super::Server`]; what differs is where it runs (a host's namespace, through `nsenter`)
/// and who owns the process (the [`Net`], so that a partition test can restart it in place).
pub struct Server {
    pub host: Host,
    pub port: u16,
    /// For the test's own commands: reached through the file system, never the network.
    pub socket: PathBuf,
    pub dir: PathBuf,
    conf: PathBuf,
    sentinel: bool,
    binary: PathBuf,
    args: Vec<String>,
    env: Vec<(String, std::ffi::OsString)>,
    procs: Procs,
    pid: Mutex<u32>,
}

impl Server {
    fn launch(&self) {
        let _ = std::fs::remove_file(&self.socket);
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net=/run/netns/{}", self.host.ns))
            .arg("--")
            .arg(&self.binary)
            .arg(&self.conf)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server in a namespace");
        let pid = child.id();
        self.procs.lock().unwrap().insert(pid, child);
        *self.pid.lock().unwrap() = pid;
        let deadline = Instant::now() + PATIENCE;
        while !server::answers_ping(&self.socket, None, Some(TIMEOUT)) {
            assert!(
                Instant::now() < deadline,
                "{} on {} never answered PING; its log:\n{}",
                self.kind(),
                self.host.name,
                self.log()
            );
            thread::sleep(Duration::from_millis(10));
        }
    }

    fn kind(&self) -> &'static str {
        if self.sentinel {
            "sentinel"
        } else {
            "redis-server"
        }
    }

    /// `host:port` as other servers and lockrun reach it.
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host.addr, self.port)
    }

    pub fn pid(&self) -> u32 {
        *self.pid.lock().unwrap()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("node.log")).unwrap_or_default()
    }

    /// A command over the unix socket (bounded by [`TIMEOUT`]); None if it fails or the
    /// server is down.
    pub fn try_cmd<T: redis::FromRedisValue>(&self, args: &[&str]) -> Option<T> {
        server::socket_cmd(&self.socket, None, Some(TIMEOUT), args).ok()
    }

    pub fn cmd<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        self.try_cmd(args).unwrap_or_else(|| {
            panic!(
                "{args:?} on {} {} failed; its log:\n{}",
                self.kind(),
                self.host.name,
                self.log()
            )
        })
    }

    /// SIGKILL, and reaped.
    pub fn kill(&self) {
        let pid = self.pid();
        if let Some(mut child) = self.procs.lock().unwrap().remove(&pid) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Polls `cond` until it holds; fails with the log after PATIENCE.
    pub fn wait_until(&self, what: &str, mut cond: impl FnMut(&Server) -> bool) {
        let deadline = Instant::now() + PATIENCE;
        while !cond(self) {
            assert!(
                Instant::now() < deadline,
                "{} on {} never {what}; its log:\n{}",
                self.kind(),
                self.host.name,
                self.log()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// `INFO replication` (empty if no answer).
    /// Writes `key` through the unix socket every 20 ms until the server refuses (a cut-off
    /// primary's NOREPLICAS or CLUSTERDOWN); returns the ms from `since` to the refusal.
    pub fn accepts_writes_since(&self, key: &str, since: Instant) -> u64 {
        loop {
            let ok: Option<String> = self.try_cmd(&["SET", key, "x"]);
            if ok.is_none() {
                return since.elapsed().as_millis() as u64;
            }
            assert!(since.elapsed() < PATIENCE, "writes still accepted");
            thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn replication(&self) -> String {
        self.try_cmd(&["INFO", "replication"]).unwrap_or_default()
    }
}
