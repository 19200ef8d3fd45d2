//! Test harness: throwaway `redis-server` processes and helpers to run the real binary.
//!
//! Servers listen on a unix socket in a temporary directory (no port clashes between parallel
//! tests), with persistence off, and are killed when dropped. The binary comes from
//! `LOCKRUN_TEST_REDIS_SERVER` or `PATH`; if there is none the test fails and says how to get
//! one: a lock test that silently skips proves nothing.

#![allow(dead_code)] // Each test module uses a different subset.

pub mod chaos;
pub mod clockshim;
pub mod cron;
pub mod fake;
pub mod ha;
pub mod netns;
pub mod proxy;
pub mod topology;

use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

/// Generous bound for anything a test waits on: the machines are shared and slow at times.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// A server binary: the path in `var`, else `name` on PATH, else the cached copy in
/// target/test-tools/; if none, the test fails with `how` (a lock test never skips).
fn find_server(var: &str, name: &str, how: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(var) {
        return PathBuf::from(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let cached = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/test-tools")
        .join(name);
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .chain([cached])
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} not found on PATH. {how}"))
}

/// The server every test starts: Redis, or Valkey for the whole suite when
/// `LOCKRUN_TEST_SERVER=valkey` (CI runs the suite both ways).
pub fn redis_server_binary() -> PathBuf {
    match std::env::var("LOCKRUN_TEST_SERVER").as_deref() {
        Ok("valkey") => valkey_server_binary(),
        Ok("redis") | Ok("") | Err(_) => real_redis_binary(),
        Ok(other) => panic!("LOCKRUN_TEST_SERVER={other}: use redis or valkey"),
    }
}

/// Redis itself, whatever `LOCKRUN_TEST_SERVER` says: for the tests of TLS (the Valkey build
/// the suite fetches has no TLS) and of what Redis 7.0 lacks.
pub fn real_redis_binary() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        find_server(
            "LOCKRUN_TEST_REDIS_SERVER",
            "redis-server",
            "The tests need a real Redis: install it (Debian/Ubuntu: `sudo apt-get install -y \
             redis-server`, macOS: `brew install redis`) or point LOCKRUN_TEST_REDIS_SERVER at a \
             redis-server binary. `bash .ci/run` installs it for you.",
        )
    })
    .clone()
}

/// Valkey, for the tests that run lockrun against it: `LOCKRUN_TEST_VALKEY_SERVER`,
/// `valkey-server` on PATH, or the copy `tests/ensure-valkey.sh` keeps in target/test-tools/.
pub fn valkey_server_binary() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        find_server(
            "LOCKRUN_TEST_VALKEY_SERVER",
            "valkey-server",
            "Some tests run lockrun against Valkey: `bash tests/ensure-valkey.sh` (or `bash \
             tests/run.sh`) fetches Valkey 8.1.8 into target/test-tools/, or point \
             LOCKRUN_TEST_VALKEY_SERVER at a binary.",
        )
    })
    .clone()
}

pub struct Redis {
    child: Child,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub port: Option<u16>,
    pub password: Option<String>,
    pub tls: bool,
    /// Extra arguments and environment it was started with, kept for [`Redis::respawn`].
    pub extra: Vec<String>,
    pub env: Vec<(String, std::ffi::OsString)>,
}

impl Redis {
    /// A server on a unix socket only.
    pub fn start() -> Redis {
        Redis::launch(false, None, false)
    }

    /// A server on a unix socket and a free loopback TCP port.
    pub fn start_tcp() -> Redis {
        Redis::launch(true, None, false)
    }

    pub fn start_with_password(password: &str) -> Redis {
        Redis::launch(true, Some(password), false)
    }

    /// A server whose TCP port speaks only TLS, with a certificate for `localhost` signed by a
    /// throwaway CA (`dir/ca.crt`); the unix socket stays plain for the test's own checks.
    pub fn start_tls() -> Redis {
        Redis::launch_with(&real_redis_binary(), true, None, true)
    }

    /// Redis itself, also when the suite runs against Valkey.
    pub fn start_redis() -> Redis {
        Redis::launch_with(&real_redis_binary(), false, None, false)
    }

    /// [`Redis::start_tls`] that also requires a client certificate from the test CA
    /// (`dir/client.crt`, `dir/client.key`).
    pub fn start_tls_mutual() -> Redis {
        let redis = Redis::start_tls();
        redis.cmd::<()>(&["CONFIG", "SET", "tls-auth-clients", "yes"]);
        redis
    }

    /// A Valkey server on a unix socket (the same options as redis-server).
    pub fn start_valkey() -> Redis {
        Redis::launch_with(&valkey_server_binary(), false, None, false)
    }

    /// A server on a unix socket with `extra` arguments (`--appendonly yes`…) and `env` (a
    /// [`clockshim::Clock`]'s), both kept when it is [respawned](Redis::respawn).
    pub fn start_with(extra: &[&str], env: &[(String, std::ffi::OsString)]) -> Redis {
        let mut redis = Redis::launch_full(&redis_server_binary(), false, None, false, extra, env);
        redis.extra = extra.iter().map(|s| s.to_string()).collect();
        redis
    }

    fn launch(tcp: bool, password: Option<&str>, tls: bool) -> Redis {
        Redis::launch_with(&redis_server_binary(), tcp, password, tls)
    }

    fn launch_with(bin: &Path, tcp: bool, password: Option<&str>, tls: bool) -> Redis {
        Redis::launch_full(bin, tcp, password, tls, &[], &[])
    }

    fn launch_full(
        bin: &Path,
        tcp: bool,
        password: Option<&str>,
        tls: bool,
        extra: &[&str],
        env: &[(String, std::ffi::OsString)],
    ) -> Redis {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("redis.sock");
        let port = if tcp { Some(free_port()) } else { None };
        let mut cmd = Command::new(bin);
        if tls {
            make_certificates(dir.path());
            let path = |f: &str| dir.path().join(f);
            cmd.arg("--tls-port")
                .arg(port.unwrap().to_string())
                .arg("--tls-cert-file")
                .arg(path("server.crt"))
                .arg("--tls-key-file")
                .arg(path("server.key"))
                .arg("--tls-ca-cert-file")
                .arg(path("ca.crt"))
                .args(["--tls-auth-clients", "no"]);
        }
        cmd.arg("--port")
            .arg(if tls { 0 } else { port.unwrap_or(0) }.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--unixsocket")
            .arg(&socket)
            .args(["--unixsocketperm", "700", "--dir"])
            .arg(dir.path())
            .args(["--logfile", "redis.log", "--daemonize", "no"])
            .args(extra)
            .envs(env.iter().map(|(k, v)| (k, v)));
        if let Some(p) = password {
            cmd.args(["--requirepass", p]);
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let redis = Redis {
            child,
            dir,
            socket,
            port,
            password: password.map(str::to_string),
            tls,
            extra: Vec::new(),
            env: env.to_vec(),
        };
        redis.wait_ready();
        redis
    }

    fn wait_ready(&self) {
        let start = Instant::now();
        while start.elapsed() < PATIENCE {
            if let Ok(mut c) = self.client().get_connection() {
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    return;
                }
            }
            thread::sleep(Duration::from_millis(10));
        }
        let log = std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default();
        panic!("redis-server did not become ready; its log:\n{log}");
    }

    /// The URL lockrun is given.
    pub fn url(&self) -> String {
        match (self.port, &self.password) {
            (Some(port), _) if self.tls => format!("rediss://localhost:{port}"),
            (Some(port), Some(pw)) => format!("redis://:{pw}@127.0.0.1:{port}"),
            (Some(port), None) => format!("redis://127.0.0.1:{port}"),
            _ => format!("unix://{}", self.socket.display()),
        }
    }

    pub fn client(&self) -> redis::Client {
        let url = match &self.password {
            Some(pw) => format!(
                "redis+unix://{}?pass={}",
                self.socket.display(),
                query_escape(pw)
            ),
            None => format!("unix://{}", self.socket.display()),
        };
        redis::Client::open(url).expect("client")
    }

    pub fn conn(&self) -> redis::Connection {
        self.client()
            .get_connection()
            .expect("connect to test redis")
    }

    /// Runs one command and returns its reply.
    pub fn cmd<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        let mut c = redis::cmd(args[0]);
        for a in &args[1..] {
            c.arg(*a);
        }
        c.query(&mut self.conn())
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    /// The server's process id (to pause it with SIGSTOP, say).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn exists(&self, key: &str) -> bool {
        self.cmd::<i64>(&["EXISTS", key]) == 1
    }

    /// `INFO commandstats` as (command, calls) pairs.
    pub fn command_calls(&self, command: &str) -> u64 {
        let info: String = self.cmd(&["INFO", "commandstats"]);
        let prefix = format!("cmdstat_{command}:calls=");
        info.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }
}

/// A query value is percent-decoded (and `+` read as a space): a password with `%`, `&`, `+`
/// or `#` must be escaped to arrive unchanged.
fn query_escape(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'%' | b'&' | b'+' | b'#' | b' ' | b'=' => format!("%{b:02X}"),
            _ => (b as char).to_string(),
        })
        .collect()
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A CA and a server certificate for localhost/127.0.0.1, made with the openssl CLI.
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

/// A loopback port nobody listens on right now, and one this test process has not handed out
/// before: see [`port_where`].
pub fn free_port() -> u16 {
    port_where(|_| true)
}

/// Where [`port_where`] takes ports from: below the kernel's ephemeral range (32768 and up
/// here), so no client connection's source port can sit on a server's port either.
const PORTS: std::ops::Range<u16> = 20000..32000;

/// A free loopback port that also satisfies `also` (e.g. "port + 10000 is free too"), never
/// the same one twice in one test process. Ports are not recycled because a topology test
/// kills servers on purpose, and whoever watched a dead server keeps knocking on its port:
/// Sentinels that find a stranger there make it a replica of their master (`SLAVEOF`, then
/// `CLIENT KILL` of its clients), so a recycled port let one test reconfigure another's
/// server (seen as a lockrun whose release met "broken pipe" three times in a row, and one
/// whose renewals no replica acknowledged). The walk starts at a place chosen by the process
/// id, so two suites running at once start far apart; a port that is taken is skipped.
pub fn port_where(also: impl Fn(u16) -> bool) -> u16 {
    static NEXT: std::sync::Mutex<Option<u16>> = std::sync::Mutex::new(None);
    let mut next = NEXT.lock().unwrap_or_else(|e| e.into_inner());
    let span = PORTS.end - PORTS.start;
    let mut port = next.unwrap_or(PORTS.start + (std::process::id() % u32::from(span)) as u16);
    for _ in 0..span {
        let candidate = port;
        port = if port + 1 >= PORTS.end {
            PORTS.start
        } else {
            port + 1
        };
        if also(candidate) && TcpListener::bind(("127.0.0.1", candidate)).is_ok() {
            *next = Some(port);
            return candidate;
        }
    }
    panic!("no free loopback port in {PORTS:?}")
}

pub fn lockrun_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_lockrun"))
}

/// `lockrun -r <url>` with a clean environment: no LOCKRUN_* leaks in from whatever runs the
/// tests (which might itself run under lockrun).
pub fn lockrun(redis: &Redis) -> Command {
    let mut cmd = bare_lockrun();
    cmd.arg("-r").arg(redis.url());
    cmd
}

pub fn bare_lockrun() -> Command {
    let mut cmd = Command::new(lockrun_bin());
    without_lockrun_env(&mut cmd);
    cmd.stdin(Stdio::null());
    cmd
}

/// Removes every LOCKRUN_* variable the test process itself may have inherited.
pub fn without_lockrun_env(cmd: &mut Command) {
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("LOCKRUN_") {
            cmd.env_remove(k);
        }
    }
}

/// Runs to completion (bounded by PATIENCE, then killed and failed) and captures output.
pub fn run(mut cmd: Command) -> Output {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd.spawn().expect("spawn lockrun");
    wait_output(child)
}

pub fn wait_output(mut child: Child) -> Output {
    let mut out = child.stdout.take();
    let mut err = child.stderr.take();
    let out_t = thread::spawn(move || read_all(out.as_mut()));
    let err_t = thread::spawn(move || read_all(err.as_mut()));
    let status = wait_timeout(&mut child, PATIENCE).unwrap_or_else(|| {
        let tree = process_tree(child.id(), 0);
        for pid in descendants(child.id()) {
            kill(pid, libc::SIGKILL);
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("process did not finish within {PATIENCE:?}; it was:\n{tree}");
    });
    Output {
        status,
        stdout: out_t.join().unwrap(),
        stderr: err_t.join().unwrap(),
    }
}

fn read_all<R: Read>(r: Option<&mut R>) -> Vec<u8> {
    let mut v = Vec::new();
    if let Some(r) = r {
        let _ = r.read_to_end(&mut v);
    }
    v
}

pub fn wait_timeout(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            return Some(s);
        }
        if start.elapsed() > limit {
            return None;
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// Polls `cond` until it holds or PATIENCE runs out.
pub fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while start.elapsed() < PATIENCE {
        if cond() {
            return;
        }
        thread::sleep(Duration::from_millis(10));
    }
    panic!("timed out waiting for: {what}");
}

/// A run that `--acks` turned down: exit 69 saying how many replicas acknowledged out of how
/// many, and the command never ran.
pub fn assert_unacknowledged(out: &Output, got: u32, wanted: u32) {
    let err = stderr_of(out);
    assert_eq!(out.status.code(), Some(69), "{err}");
    let said = format!("only {got} of {wanted} replicas acknowledged");
    assert!(err.contains(&said), "{err}");
    assert_eq!(stdout_of(out), "", "the command never ran");
}

pub fn stderr_of(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout_of(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A child's stderr, read line by line on a thread, so a test can wait for a log line without
/// sleeping blindly (and the child never blocks on a full pipe).
pub struct Lines {
    rx: std::sync::mpsc::Receiver<String>,
    pub seen: Vec<String>,
}

impl Lines {
    pub fn of(child: &mut Child) -> Lines {
        let stderr = child.stderr.take().expect("stderr piped");
        let (tx, rx) = std::sync::mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Lines {
            rx,
            seen: Vec::new(),
        }
    }

    /// Waits until a line containing `needle` arrives; returns it.
    pub fn wait_for(&mut self, needle: &str) -> String {
        let start = Instant::now();
        if let Some(l) = self.seen.iter().find(|l| l.contains(needle)) {
            return l.clone();
        }
        while start.elapsed() < PATIENCE {
            match self.rx.recv_timeout(Duration::from_millis(50)) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(_) => break,
            }
        }
        panic!("never saw {needle:?}; stderr so far: {:#?}", self.seen);
    }

    /// Everything until the child closes stderr.
    pub fn rest(&mut self) -> String {
        while let Ok(line) = self.rx.recv_timeout(PATIENCE) {
            self.seen.push(line);
        }
        self.seen.join("\n")
    }
}

/// Shorthand: start reading `child`'s stderr and wait for `needle`.
pub fn wait_for_line(child: &mut Child, needle: &str) -> Lines {
    let mut lines = Lines::of(child);
    lines.wait_for(needle);
    lines
}

/// Waits for a file to exist (a command's way of saying "my traps are set").
pub fn wait_for_file(path: &Path) {
    eventually(&format!("{} to exist", path.display()), || path.exists());
}

/// Waits for the file `child`'s command creates. If the child exits first, or PATIENCE runs
/// out, fails with the child's exit status and (when piped) its stderr: a ready-file that never
/// comes says nothing else about why.
pub fn wait_for_file_of(child: &mut Child, path: &Path) {
    let start = Instant::now();
    let why = loop {
        if path.exists() {
            return;
        }
        if let Some(status) = child.try_wait().expect("try_wait") {
            if path.exists() {
                return;
            }
            break format!("the process exited first ({status})");
        }
        if start.elapsed() > PATIENCE {
            // Where everything was stuck, before the kill erases it.
            let tree = process_tree(child.id(), 0);
            // The whole tree: a job left running would hold the stderr pipe open.
            for pid in descendants(child.id()) {
                kill(pid, libc::SIGKILL);
            }
            let _ = child.kill();
            let _ = child.wait();
            break format!("timed out after {PATIENCE:?}; the process was killed; it was:\n{tree}");
        }
        thread::sleep(Duration::from_millis(10));
    };
    // Bounded: whatever still holds the pipe open (a job that outlived lockrun) must not turn
    // a failure into a hang.
    let stderr = match child.stderr.take() {
        None => "(not piped, or already taken by the test's own reader)".to_string(),
        Some(mut pipe) => {
            let (tx, rx) = std::sync::mpsc::channel();
            thread::spawn(move || tx.send(read_all(Some(&mut pipe))));
            match rx.recv_timeout(Duration::from_secs(5)) {
                Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                Err(_) => "(still open after 5 s; not read)".to_string(),
            }
        }
    };
    panic!(
        "{} never appeared: {why}; its stderr:\n{stderr}",
        path.display()
    );
}

/// `pid` and its descendants, one per line: state, kernel wait channel and command line (from
/// /proc), for saying where a process that should have moved on was waiting.
pub fn process_tree(pid: u32, depth: usize) -> String {
    let read =
        |what: &str| std::fs::read_to_string(format!("/proc/{pid}/{what}")).unwrap_or_default();
    let state = read("status")
        .lines()
        .find_map(|l| l.strip_prefix("State:"))
        .unwrap_or("gone")
        .trim()
        .to_string();
    let cmdline = read("cmdline").replace('\0', " ");
    let mut out = format!(
        "{:indent$}{pid} [{state}, waiting in {}] {}\n",
        "",
        read("wchan"),
        cmdline.trim_end(),
        indent = 2 * depth
    );
    for kid in children(pid) {
        out += &process_tree(kid, depth + 1);
    }
    out
}

/// The pids of every process below `pid`.
pub fn descendants(pid: u32) -> Vec<u32> {
    children(pid)
        .into_iter()
        .flat_map(|kid| std::iter::once(kid).chain(descendants(kid)))
        .collect()
}

/// `pid`'s children, of every one of its threads: a child forked by a tokio worker thread is
/// listed under that thread, not the main one.
fn children(pid: u32) -> Vec<u32> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten();
    tasks
        .flatten()
        .flat_map(|task| {
            let kids = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            kids.split_whitespace()
                .filter_map(|k| k.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// A file in `dir` the test's commands append to; returns its lines.
pub fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

pub fn kill(pid: u32, sig: i32) {
    // SAFETY: plain kill(2) on a pid this test started.
    unsafe {
        libc::kill(pid as i32, sig);
    }
}
