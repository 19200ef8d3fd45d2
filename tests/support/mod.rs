//! Test harness: throwaway servers, one topology per module (`server`: one server, the type
//! every topology is built from; `replication`, `sentinel`, `cluster`, `netns`: Linux network
//! namespaces, `netns_sentinel`: a Sentinel set in them), the real binary (`lockrun`), fault
//! injection (`chaos`, `proxy`, `clockshim`), what faults cost a `--standby` tick (`ticks`),
//! and helpers for the processes a test starts.
//!
//! The server binary comes from `LOCKRUN_TEST_REDIS_SERVER` or `PATH`; if there is none the
//! test fails and says how to get one: a lock test that silently skips proves nothing.

pub mod chaos;
pub mod clockshim;
pub mod cluster;
pub mod cron;
pub mod cron_standby;
pub mod doc_blocks;
pub mod fake;
pub mod fleet;
pub mod ha;
pub mod lockrun;
pub mod monitor;
pub mod netns;
pub mod netns_sentinel;
pub mod proxy;
pub mod redis_monitor;
pub mod replication;
pub mod sentinel;
pub mod server;
pub mod ticks;

pub use cluster::Cluster;
pub use lockrun::{from_a_clean_caller, history, lockrun_bin, wait_for_go, Background, Lockrun};
pub use replication::{ReplicaSet, ReplicaSetOptions};
pub use sentinel::{Sentinels, MASTER_NAME};
pub use server::{Server, ServerOptions};

use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

/// Generous bound for anything a test waits on: the machines are shared and slow at times.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// `n` milliseconds: the fault scenarios write their timings in them.
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

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

/// Redis 6.0, the oldest Redis with ACLs (and without channel ACLs), for the test of the ACL line
/// docs/availability.md gives it: `LOCKRUN_TEST_REDIS6_SERVER`, `redis-server-6.0` on PATH, or
/// the copy `tests/ensure-redis6.sh` keeps in target/test-tools/ (never plain `redis-server`,
/// whatever Redis the machine has).
pub fn redis6_server_binary() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        find_server(
            "LOCKRUN_TEST_REDIS6_SERVER",
            "redis-server-6.0",
            "The Redis 6.0 ACL test needs Redis 6.0: `bash tests/ensure-redis6.sh` (or `bash \
             tests/run.sh`) fetches Redis 6.0.9 into target/test-tools/, or point \
             LOCKRUN_TEST_REDIS6_SERVER at a binary.",
        )
    })
    .clone()
}

/// A loopback port nobody listens on right now, and one this test process has not handed out
/// before: see [`port_where`].
pub fn free_port() -> u16 {
    port_where(|_| true)
}

/// Where [`port_where`] takes ports from: below the kernel's ephemeral range (32768 and up
/// here), so no client connection's source port can sit on a server's port either.
/// `LOCKRUN_TEST_PORTS=<first>-<last>` narrows it, for suites that share a machine with
/// others that have their own ranges.
const PORTS: std::ops::Range<u16> = 20000..32000;

/// [`PORTS`], or the range `LOCKRUN_TEST_PORTS` says; a malformed value fails the test.
fn port_range() -> std::ops::Range<u16> {
    let Some(v) = std::env::var_os("LOCKRUN_TEST_PORTS") else {
        return PORTS;
    };
    let v = v.to_string_lossy();
    let range = v.split_once('-').and_then(|(a, b)| {
        Some(a.trim().parse::<u16>().ok()?..b.trim().parse::<u16>().ok()?.checked_add(1)?)
    });
    match range {
        Some(r) if !r.is_empty() => r,
        _ => panic!("LOCKRUN_TEST_PORTS={v}: want <first>-<last>, e.g. 25000-25999"),
    }
}

/// A free loopback port that also satisfies `also` (e.g. "port + 10000 is free too"), never
/// the same one twice in one test process. Ports are not recycled because a topology test
/// kills servers on purpose, and whoever watched a dead server keeps knocking on its port:
/// Sentinels that find a stranger there make it a replica of their master (`SLAVEOF`, then
/// `CLIENT KILL` of its clients), so a recycled port lets one test reconfigure another's
/// server (it shows as a lockrun whose release meets "broken pipe" three times in a row, or
/// one whose renewals no replica acknowledges). The walk starts at a place chosen by the process
/// id, so two suites running at once start far apart; a port that is taken is skipped.
pub fn port_where(also: impl Fn(u16) -> bool) -> u16 {
    static NEXT: std::sync::Mutex<Option<u16>> = std::sync::Mutex::new(None);
    let mut next = NEXT.lock().unwrap_or_else(|e| e.into_inner());
    let ports = port_range();
    let span = ports.end - ports.start;
    let mut port = next.unwrap_or(ports.start + (std::process::id() % u32::from(span)) as u16);
    for _ in 0..span {
        let candidate = port;
        port = if port + 1 >= ports.end {
            ports.start
        } else {
            port + 1
        };
        if also(candidate) && TcpListener::bind(("127.0.0.1", candidate)).is_ok() {
            *next = Some(port);
            return candidate;
        }
    }
    panic!("no free loopback port in {ports:?}")
}

/// Runs to completion (bounded by PATIENCE, then killed and failed) and captures output.
pub fn run(cmd: impl Into<Command>) -> Output {
    let mut cmd = cmd.into();
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

/// `(pgrp, state)` of a process, from /proc/<pid>/stat (after the command's closing paren).
pub fn pgrp_and_state(pid: u32) -> Option<(u32, char)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some((f.get(2)?.parse().ok()?, f.first()?.chars().next()?))
}

/// A process's command name (/proc/<pid>/comm), empty once it is gone.
pub fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string()
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
