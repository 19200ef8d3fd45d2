//! One throwaway server process: `redis-server` (or Valkey, or `redis-server --sentinel`) in a
//! temporary directory, with persistence off, killed when dropped. Every topology is built from
//! it: a single server here, replica sets (`replication.rs`), Sentinels (`sentinel.rs`) and
//! clusters (`cluster.rs`).
//!
//! Every server listens on a unix socket in its directory (no port clashes between parallel
//! tests), through which the test checks readiness and runs its own commands ([`Server::cmd`]),
//! whatever network fault a test injects. [`Transport::Tcp`] adds a free loopback TCP port,
//! which [`Server::cli`] (`redis-cli`, a client as any other) and lockrun use. Its settings are
//! written to a config file (Sentinel insists on a writable one), so a [respawned](Server::respawn)
//! server comes back as it was.

use super::valkey_server_binary;
use super::{free_port, port_where, real_redis_binary, redis6_server_binary, redis_server_binary};
use super::{wait_timeout, PATIENCE};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// How lockrun reaches the server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Transport {
    /// The unix socket only (`unix://` URLs).
    #[default]
    Unix,
    /// A free loopback TCP port as well (`redis://127.0.0.1:port`).
    Tcp,
}

/// What the TCP port speaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Tls {
    #[default]
    None,
    /// Only TLS, with a certificate for `localhost` signed by a throwaway CA (`ca.crt`); also
    /// to its replicas, Sentinels and cluster peers. The unix socket stays plain.
    Server,
    /// [`Tls::Server`] that also requires a client certificate from the test CA (`client.crt`,
    /// `client.key`).
    Mutual,
}

/// Which server program runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Binary {
    /// The suite's server (Redis, or Valkey when `LOCKRUN_TEST_SERVER=valkey`); Redis when the
    /// server speaks TLS (the Valkey build the suite fetches has none).
    #[default]
    Default,
    /// Redis itself, whatever `LOCKRUN_TEST_SERVER` says.
    Redis,
    Valkey,
    /// Redis 6.0 (the oldest Redis with ACLs), for its ACL line.
    Redis6,
}

/// How to start a [`Server`]; `ServerOptions::default()` is a plain server on a unix socket.
#[derive(Clone, Debug, Default)]
pub struct ServerOptions {
    pub transport: Transport,
    /// `requirepass`; the test's own commands authenticate with it too.
    pub password: Option<String>,
    pub tls: Tls,
    pub binary: Binary,
    /// More config-file lines (`replicaof …`, `cluster-enabled yes`, `sentinel monitor …`).
    pub config: String,
    /// Command-line arguments after the config file (`--sentinel`, `--appendonly yes`…).
    pub args: Vec<String>,
    /// The server's environment (a `clockshim::Clock`'s).
    pub env: Vec<(String, OsString)>,
    /// A [`certificates`] directory shared by every server of a TLS topology; without it a TLS
    /// server makes its own in its directory.
    pub certs: Option<PathBuf>,
}

impl ServerOptions {
    /// A plain server that lockrun reaches over loopback TCP.
    pub fn tcp() -> ServerOptions {
        ServerOptions {
            transport: Transport::Tcp,
            ..ServerOptions::default()
        }
    }
}

pub struct Server {
    child: Child,
    pub dir: tempfile::TempDir,
    /// For the test's own commands.
    pub socket: PathBuf,
    /// The loopback TCP port of a [`Transport::Tcp`] server.
    pub tcp: Option<u16>,
    pub password: Option<String>,
    /// The directory of the test CA (`ca.crt`) of a server that speaks TLS.
    pub tls: Option<PathBuf>,
    conf: PathBuf,
    binary: PathBuf,
    args: Vec<String>,
    env: Vec<(String, OsString)>,
}

impl Server {
    /// A server on a unix socket only.
    pub fn start() -> Server {
        Server::with(ServerOptions::default())
    }

    /// A server on a unix socket and a free loopback TCP port.
    pub fn start_tcp() -> Server {
        Server::with(ServerOptions::tcp())
    }

    /// A TCP server that requires `password`.
    pub fn start_with_password(password: &str) -> Server {
        Server::with(ServerOptions {
            password: Some(password.to_string()),
            ..ServerOptions::tcp()
        })
    }

    /// A server whose TCP port speaks only TLS (see [`Tls::Server`]); its CA is `dir/ca.crt`.
    pub fn start_tls() -> Server {
        Server::with(ServerOptions {
            tls: Tls::Server,
            ..ServerOptions::tcp()
        })
    }

    /// [`Server::start_tls`] that also requires a client certificate from the test CA
    /// (`dir/client.crt`, `dir/client.key`).
    pub fn start_tls_mutual() -> Server {
        Server::with(ServerOptions {
            tls: Tls::Mutual,
            ..ServerOptions::tcp()
        })
    }

    /// Redis itself on a unix socket, also when the suite runs against Valkey.
    pub fn start_redis() -> Server {
        Server::with(ServerOptions {
            binary: Binary::Redis,
            ..ServerOptions::default()
        })
    }

    /// A Valkey server on a unix socket (the same options as redis-server).
    pub fn start_valkey() -> Server {
        Server::with(ServerOptions {
            binary: Binary::Valkey,
            ..ServerOptions::default()
        })
    }

    /// A server on a unix socket with more command-line arguments (`--rename-command EVAL ""`).
    pub fn start_with_args(args: &[&str]) -> Server {
        Server::with(ServerOptions {
            args: args.iter().map(|a| a.to_string()).collect(),
            ..ServerOptions::default()
        })
    }

    /// Starts a server as `options` say and waits until it answers.
    pub fn with(options: ServerOptions) -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("server.sock");
        let cluster = options.config.contains("cluster-enabled yes");
        let tcp = match options.transport {
            Transport::Unix => None,
            Transport::Tcp if cluster => Some(cluster_port()),
            Transport::Tcp => Some(free_port()),
        };
        let tls = match options.tls {
            Tls::None => None,
            Tls::Server | Tls::Mutual => Some(options.certs.clone().unwrap_or_else(|| {
                make_certificates(dir.path());
                dir.path().to_path_buf()
            })),
        };
        let mut conf = format!(
            "bind 127.0.0.1\nsave \"\"\nappendonly no\ndir {}\nlogfile server.log\n\
             unixsocket {}\nunixsocketperm 700\n",
            dir.path().display(),
            socket.display()
        );
        match (&tls, tcp) {
            (Some(certs), Some(port)) => {
                let c = |f: &str| certs.join(f).display().to_string();
                conf += &format!(
                    "port 0\ntls-port {port}\ntls-cert-file {}\ntls-key-file {}\n\
                     tls-client-cert-file {}\ntls-client-key-file {}\ntls-ca-cert-file {}\n\
                     tls-auth-clients {}\ntls-replication yes\n",
                    c("server.crt"),
                    c("server.key"),
                    // What the server shows when it is the client (replication, Sentinel, and
                    // the cluster bus, which always asks for a client certificate).
                    c("client.crt"),
                    c("client.key"),
                    c("ca.crt"),
                    if options.tls == Tls::Mutual {
                        "yes"
                    } else {
                        "no"
                    }
                );
                if cluster {
                    conf += "tls-cluster yes\n";
                }
            }
            (Some(_), None) => panic!("TLS is for a server with a TCP port"),
            (None, port) => conf += &format!("port {}\n", port.unwrap_or(0)),
        }
        if let Some(p) = &options.password {
            conf += &format!("requirepass {p}\n");
        }
        conf += &options.config;
        conf += "\n";
        let conf_path = dir.path().join("server.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let binary = binary(options.binary, options.tls);
        let child = spawn(&binary, &conf_path, &options.args, &options.env);
        let server = Server {
            child,
            dir,
            socket,
            tcp,
            password: options.password,
            tls,
            conf: conf_path,
            binary,
            args: options.args,
            env: options.env,
        };
        server.wait_ready();
        server
    }

    fn wait_ready(&self) {
        self.wait_until("answered PING", |s| {
            answers_ping(&s.socket, s.password.as_deref(), None)
        });
    }

    /// Kills the server (SIGKILL) and waits for it: down until [`Server::respawn`].
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Kills the server and starts it again from its config file (which Sentinel and `CONFIG
    /// REWRITE` may have rewritten), on the same socket and port, with the arguments and
    /// environment it was started with and then `extra`: empty unless it persisted to its
    /// directory.
    pub fn respawn(&mut self, extra: &[&str]) {
        self.stop();
        let args: Vec<String> = self
            .args
            .iter()
            .cloned()
            .chain(extra.iter().map(|s| s.to_string()))
            .collect();
        self.child = spawn(&self.binary, &self.conf, &args, &self.env);
        self.wait_ready();
    }

    /// The loopback TCP port (a [`Transport::Tcp`] server's).
    pub fn port(&self) -> u16 {
        self.tcp.expect("a server started with Transport::Tcp")
    }

    /// `127.0.0.1:port`, as its peers and lockrun reach it.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port())
    }

    /// The URL lockrun is given.
    pub fn url(&self) -> String {
        match (self.tcp, &self.password) {
            (Some(port), _) if self.tls.is_some() => format!("rediss://localhost:{port}"),
            (Some(port), Some(pw)) => format!("redis://:{pw}@127.0.0.1:{port}"),
            (Some(port), None) => format!("redis://127.0.0.1:{port}"),
            _ => format!("unix://{}", self.socket.display()),
        }
    }

    /// A client of the unix socket, authenticated if the server has a password.
    pub fn client(&self) -> redis::Client {
        redis::Client::open(socket_url(&self.socket, self.password.as_deref())).expect("client")
    }

    pub fn conn(&self) -> redis::Connection {
        self.client()
            .get_connection()
            .expect("connect to test redis")
    }

    /// Runs one command over the unix socket and returns its reply.
    pub fn cmd<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        socket_cmd(&self.socket, self.password.as_deref(), None, args).unwrap_or_else(|e| {
            panic!("{args:?}: {e}");
        })
    }

    /// A command that may fail (the server may be paused or restarting): None then.
    pub fn try_cmd<T: redis::FromRedisValue>(&self, args: &[&str]) -> Option<T> {
        socket_cmd(&self.socket, self.password.as_deref(), None, args).ok()
    }

    /// Whether `key` exists here; false on a cluster node that does not serve it.
    pub fn exists(&self, key: &str) -> bool {
        exists(&self.socket, self.password.as_deref(), key)
    }

    /// How often `command` ran here (`INFO commandstats`; commands a script calls count too).
    pub fn calls(&self, command: &str) -> u64 {
        calls(&self.cmd::<String>(&["INFO", "commandstats"]), command)
    }

    /// Scripts run here by clients (lockrun's every lock operation is one; replication applies
    /// their effects, never the script, so a replica's count stays 0 until it is promoted).
    pub fn script_calls(&self) -> u64 {
        let info: String = self.cmd(&["INFO", "commandstats"]);
        ["eval", "evalsha", "eval_ro", "evalsha_ro", "fcall"]
            .iter()
            .map(|c| calls(&info, c))
            .sum()
    }

    /// `connected_clients` from `INFO clients`.
    pub fn connected_clients(&self) -> Option<u64> {
        let info: String = self.try_cmd(&["INFO", "clients"])?;
        info.lines()
            .find_map(|l| l.strip_prefix("connected_clients:"))
            .and_then(|n| n.trim().parse().ok())
    }

    /// Every key on this server (`KEYS *`: the test servers hold a handful), sorted.
    pub fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.cmd(&["KEYS", "*"]);
        keys.sort();
        keys
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGSTOP / SIGCONT / SIGKILL: a paused or crashed server.
    pub fn signal(&self, sig: i32) {
        super::kill(self.child.id(), sig);
    }

    /// SIGSTOP: a process pause (GC, swap, VM steal) as the server's clients see it.
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
    }

    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// Polls `cond` until it holds; fails with this server's log after PATIENCE.
    pub fn wait_until(&self, what: &str, mut cond: impl FnMut(&Server) -> bool) {
        let start = Instant::now();
        while start.elapsed() < PATIENCE {
            if cond(self) {
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "server {} never {what}; its log:\n{}",
            self.name(),
            self.log()
        );
    }

    /// Its TCP port, else its socket: for messages.
    fn name(&self) -> String {
        match self.tcp {
            Some(port) => port.to_string(),
            None => self.socket.display().to_string(),
        }
    }

    /// `--tls --cacert …` for redis-cli, if this server speaks TLS.
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

    /// `redis-cli -p PORT args…` (through the TCP port, as a client would), its trimmed output,
    /// or None if it failed.
    pub fn try_cli(&self, args: &[&str]) -> Option<String> {
        let mut cmd = Command::new("redis-cli");
        cmd.args(["-h", "127.0.0.1", "-p", &self.port().to_string()])
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
        self.try_cli(args).unwrap_or_else(|| {
            panic!(
                "redis-cli -p {} {args:?} failed\n{}",
                self.port(),
                self.log()
            )
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The program for `binary`; Redis for a server that speaks TLS (the Valkey build the suite
/// fetches has none).
pub(super) fn binary(binary: Binary, tls: Tls) -> PathBuf {
    match (binary, tls != Tls::None) {
        (Binary::Valkey, _) => valkey_server_binary(),
        (Binary::Redis6, _) => redis6_server_binary(),
        (Binary::Redis, _) | (Binary::Default, true) => real_redis_binary(),
        (Binary::Default, false) => redis_server_binary(),
    }
}

/// Whether the server on `socket` answers PING: how every server's readiness is checked.
pub(super) fn answers_ping(
    socket: &Path,
    password: Option<&str>,
    timeout: Option<Duration>,
) -> bool {
    socket_cmd::<String>(socket, password, timeout, &["PING"]).is_ok_and(|r| r == "PONG")
}

fn spawn(binary: &Path, conf: &Path, args: &[String], env: &[(String, OsString)]) -> Child {
    Command::new(binary)
        .arg(conf)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()))
}

/// The URL of a unix socket, with the password as a query value: that is percent-decoded (and
/// `+` read as a space), so a password with `%`, `&`, `+` or `#` is escaped to arrive unchanged.
fn socket_url(socket: &Path, password: Option<&str>) -> String {
    match password {
        Some(pw) => {
            let escaped: String = pw
                .bytes()
                .map(|b| match b {
                    b'%' | b'&' | b'+' | b'#' | b' ' | b'=' => format!("%{b:02X}"),
                    _ => (b as char).to_string(),
                })
                .collect();
            format!("redis+unix://{}?pass={escaped}", socket.display())
        }
        None => format!("unix://{}", socket.display()),
    }
}

/// One command over a unix socket (connecting and each reply bounded by `timeout`, if given):
/// the test's own commands, shared by [`Server`] and the network namespaces' servers.
pub(super) fn socket_cmd<T: redis::FromRedisValue>(
    socket: &Path,
    password: Option<&str>,
    timeout: Option<Duration>,
    args: &[&str],
) -> redis::RedisResult<T> {
    let client = redis::Client::open(socket_url(socket, password))?;
    let mut conn = match timeout {
        Some(limit) => {
            let conn = client.get_connection_with_timeout(limit)?;
            conn.set_read_timeout(Some(limit))?;
            conn
        }
        None => client.get_connection()?,
    };
    let mut c = redis::cmd(args[0]);
    c.arg(&args[1..]);
    c.query(&mut conn)
}

/// `EXISTS key` over a unix socket; false where a cluster node does not serve the key (it
/// redirects: `MOVED`, `ASK`).
pub(super) fn exists(socket: &Path, password: Option<&str>, key: &str) -> bool {
    match socket_cmd::<i64>(socket, password, None, &["EXISTS", key]) {
        Ok(n) => n == 1,
        Err(e) if matches!(e.code(), Some("MOVED" | "ASK")) => false,
        Err(e) => panic!("EXISTS {key}: {e}"),
    }
}

/// From `INFO commandstats`: how often `command` ran.
fn calls(info: &str, command: &str) -> u64 {
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.trim().strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// A throwaway CA and a certificate for `localhost`/127.0.0.1 signed by it (`ca.crt`,
/// `server.crt`, `server.key`, and `client.crt`/`client.key` for servers that require one),
/// shared by every server of a TLS topology.
pub fn certificates() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    make_certificates(dir.path());
    dir
}

/// A CA, a server certificate for localhost/127.0.0.1 and a client certificate, made with the
/// openssl CLI in `dir`.
fn make_certificates(dir: &Path) {
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap_or_else(|e| {
                panic!("openssl is needed for the TLS test (apt-get install openssl): {e}")
            });
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    openssl(
        &[
            &["req", "-x509"][..],
            &ec,
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "2",
                "-subj",
                "/CN=lockrun test CA",
            ],
        ]
        .concat(),
    );
    // A certificate signed by the CA: `name.crt`/`name.key`, with extensions `ext`.
    let signed = |name: &str, subject: &str, ext: &str| {
        let (key, csr, crt, extfile) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.crt"),
            format!("{name}.ext"),
        );
        openssl(
            &[
                &["req"][..],
                &ec,
                &["-keyout", &key, "-out", &csr, "-subj", subject],
            ]
            .concat(),
        );
        std::fs::write(dir.join(&extfile), ext).unwrap();
        openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &crt,
            "-days",
            "2",
            "-extfile",
            &extfile,
        ]);
    };
    signed(
        "server",
        "/CN=localhost",
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    );
    // For servers that require a client certificate.
    signed(
        "client",
        "/CN=lockrun client",
        "extendedKeyUsage=clientAuth\n",
    );
}

/// A free port for a cluster node: its bus listens on port + 10000, which must be free too,
/// and below the ephemeral range as well.
fn cluster_port() -> u16 {
    port_where(|port| {
        port + 10000 < 32768 && std::net::TcpListener::bind(("127.0.0.1", port + 10000)).is_ok()
    })
}

/// Waits (at most PATIENCE) for `child`, killing it if it does not end: a bounded helper run.
pub(super) fn wait_bounded(child: &mut Child) -> Option<std::process::ExitStatus> {
    let status = wait_timeout(child, PATIENCE);
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    status
}
