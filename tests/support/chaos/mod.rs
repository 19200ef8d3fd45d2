//! Fault injection: run many real lockruns against a real redis-server, break things (kill
//! lockrun, pause it, pause or restart Redis, kill connections, block its stderr), and check the
//! history the jobs reported to a fenced toy resource (`recorder.rs`).
//!
//! A scenario is a [`Chaos`]: it starts the recorder and a watcher of key expiries, spawns
//! lockruns (each one's stderr drained on a thread, exit code checked against the set the
//! scenario expects), counts the faults it injects, and ends with [`Chaos::report`], which
//! runs the checks and prints one results line:
//!
//! - (a) no two live critical sections on an exclusive key overlap (with `--limit N`, never
//!   more than N at once), unless the scenario declares the overlap expected
//!   ([`Chaos::allowing_overlap`]): then overlaps are measured and reported;
//! - (b) fences strictly increase in begin order on an exclusive key (all distinct for a
//!   semaphore), and after a Redis restart every new fence exceeds every older one;
//! - (c) every lockrun's exit code is one the scenario expects, or 128+N for a signal N the
//!   scenario sent it; (d) no panic; (e) no lock key outlives its TTL after the scenario.
//!
//! Random choices come from a seeded PRNG: every scenario prints `scenario=<name> seed=<n>`,
//! `LOCKRUN_FAULTS_SEED=<n>` replays its choices (timing still varies), and
//! `LOCKRUN_FAULTS_SCALE` (default 1) multiplies the amount of work.

mod procs;
mod recorder;
mod report;

pub use procs::{Log, Running};
pub use recorder::{Job, Mode, OnTerm, Recorder, Section};
pub use report::{append_row, Report};

use super::{Lockrun, Server, PATIENCE};
use report::{Outcome, Violation};
use std::collections::{HashMap, HashSet};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// splitmix64: tiny, seedable, good enough to pick hold times and fault moments.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// Seeded from the clock: for choices that need no replay (a moment to cut at).
    pub fn from_clock() -> Rng {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        Rng(now.as_nanos() as u64)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..hi` (hi exclusive; `lo` if the range is empty).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.next_u64() % (hi - lo)
    }

    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        (!items.is_empty()).then(|| &items[self.range(0, items.len() as u64) as usize])
    }
}

/// One fault-injection scenario; see the module documentation.
pub struct Chaos {
    pub name: String,
    pub seed: u64,
    pub scale: f64,
    pub recorder: Recorder,
    start: Instant,
    allow_overlap: bool,
    faults: AtomicU64,
    fault_log: Mutex<Vec<String>>,
    /// Lockruns not yet reaped. Signals are sent and children reaped under this lock, so a
    /// signal can never hit a recycled pid.
    live: Mutex<HashSet<u32>>,
    sent: Mutex<HashMap<u32, Vec<i32>>>,
    outcomes: Mutex<Vec<Outcome>>,
    keys: Mutex<Vec<(String, Duration)>>,
    /// Moments a lease certainly ended without its holder's doing: key expiries seen by the
    /// watcher, plus those the scenario marks (a hand DEL, a restart).
    lease_ends: Arc<Mutex<Vec<(String, Instant)>>>,
    restarts: Mutex<Vec<Instant>>,
    problems: Mutex<Vec<Violation>>,
    /// The data nodes' unix sockets: the expiry watchers and check (e) use every one.
    sockets: Vec<PathBuf>,
    stop_watch: Arc<AtomicBool>,
    streams: AtomicU64,
}

impl Chaos {
    pub fn new(name: &str, redis: &Server) -> Chaos {
        Chaos::over(name, std::slice::from_ref(&redis.socket))
    }

    /// A scenario over several data nodes (a replica set, a cluster, Redlock masters), each
    /// reached by the test through its unix socket, so that no network fault the scenario
    /// injects hides what the servers hold.
    pub fn over(name: &str, sockets: &[PathBuf]) -> Chaos {
        let seed = match std::env::var("LOCKRUN_FAULTS_SEED") {
            Ok(s) => s
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("LOCKRUN_FAULTS_SEED={s:?} is not a number")),
            Err(_) => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap();
                Rng::new(now.as_nanos() as u64 ^ name.len() as u64 ^ (std::process::id() as u64))
                    .next_u64()
                    % 1_000_000_000
            }
        };
        let scale = match std::env::var("LOCKRUN_FAULTS_SCALE") {
            Ok(s) => s
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|x| *x > 0.0)
                .unwrap_or_else(|| panic!("LOCKRUN_FAULTS_SCALE={s:?}: want a number > 0")),
            Err(_) => 1.0,
        };
        eprintln!("scenario={name} seed={seed} scale={scale}");
        let ch = Chaos {
            name: name.to_string(),
            seed,
            scale,
            recorder: Recorder::start(),
            start: Instant::now(),
            allow_overlap: false,
            faults: AtomicU64::new(0),
            fault_log: Mutex::default(),
            live: Mutex::default(),
            sent: Mutex::default(),
            outcomes: Mutex::default(),
            keys: Mutex::default(),
            lease_ends: Arc::default(),
            restarts: Mutex::default(),
            problems: Mutex::default(),
            sockets: sockets.to_vec(),
            stop_watch: Arc::new(AtomicBool::new(false)),
            streams: AtomicU64::new(0),
        };
        for socket in &ch.sockets {
            ch.watch_expiries(socket.clone());
        }
        ch
    }

    /// The scenario expects overlapping sections (a process pause, a server that forgot the
    /// lock): measure and report them instead of failing.
    pub fn allowing_overlap(mut self) -> Chaos {
        self.allow_overlap = true;
        self
    }

    /// An independent random stream (one per thread keeps replays deterministic per thread).
    pub fn rng(&self) -> Rng {
        let n = self.streams.fetch_add(1, Ordering::SeqCst);
        Rng::new(self.seed ^ n.wrapping_mul(0xd1b5_4a32_d192_ed03))
    }

    /// `x` multiplied by LOCKRUN_FAULTS_SCALE (at least 1).
    pub fn scaled(&self, x: u64) -> u64 {
        ((x as f64 * self.scale).round() as u64).max(1)
    }

    pub fn scaled_duration(&self, d: Duration) -> Duration {
        d.mul_f64(self.scale)
    }

    /// Declares a lock key the scenario uses, its mode, and the longest TTL any holder of it
    /// uses (for check (e)).
    pub fn key(&self, key: &str, mode: Mode, ttl: Duration) -> String {
        self.recorder.key(key, mode);
        self.keys.lock().unwrap().push((key.to_string(), ttl));
        key.to_string()
    }

    /// `bash -c <script>` for a job.
    pub fn job(&self, job: &Job) -> [String; 3] {
        ["bash".into(), "-c".into(), job.script(self.recorder.port)]
    }

    /// `lockrun -r URL <args> -- bash -c <job>`.
    pub fn command(&self, redis: &Server, args: &[&str], job: &Job) -> Lockrun {
        let mut cmd = Lockrun::on(redis);
        cmd.args(args).arg("--").args(self.job(job));
        cmd
    }

    /// Starts a lockrun with its stderr drained. `expected`: the exit codes that are fine.
    pub fn spawn(&self, cmd: impl Into<Command>, expected: &[i32]) -> Running {
        let mut cmd: Command = cmd.into();
        cmd.stdout(Stdio::null()).stderr(Stdio::piped());
        let mut lr = self.start(cmd, expected);
        lr.log = Log::drain(lr.child.stderr.take().unwrap());
        lr
    }

    /// Starts a lockrun whose stderr is a pipe nobody reads (until [`Running::drain_stderr`],
    /// or [`Chaos::finish`], which drains it so the lockrun can end).
    pub fn spawn_undrained(&self, cmd: impl Into<Command>, expected: &[i32]) -> Running {
        let mut cmd: Command = cmd.into();
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills two fresh descriptors on success.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: both are fresh descriptors that nothing else owns.
        let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        cmd.stdout(Stdio::null()).stderr(Stdio::from(w));
        let mut lr = self.start(cmd, expected);
        lr.undrained = Some(r);
        lr
    }

    fn start(&self, mut cmd: Command, expected: &[i32]) -> Running {
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        // Whatever runs lockrun (`nsenter … --` for a lockrun in a network namespace) and
        // `-r URL` are not part of the label.
        let from = args.iter().position(|a| a == "-r").map_or(0, |i| i + 2);
        let label = args[from.min(args.len())..]
            .iter()
            .take_while(|a| *a != "--")
            .cloned()
            .collect::<Vec<_>>()
            .join(" ");
        let mut live = self.live.lock().unwrap();
        let child = cmd.spawn().expect("spawn lockrun");
        let pid = child.id();
        live.insert(pid);
        drop(cmd); // the parent's copy of an undrained pipe's write end goes away here
        Running {
            child,
            pid,
            log: Log::empty(),
            label,
            expected: expected.to_vec(),
            undrained: None,
        }
    }

    /// Sends `sig` to a lockrun that has not been reaped yet; false if it is gone.
    pub fn signal(&self, pid: u32, sig: i32) -> bool {
        let live = self.live.lock().unwrap();
        if !live.contains(&pid) {
            return false;
        }
        // Pausing and resuming do not end a process: they add no acceptable exit code.
        if sig != libc::SIGSTOP && sig != libc::SIGCONT {
            self.sent.lock().unwrap().entry(pid).or_default().push(sig);
        }
        // SAFETY: kill(2) on our own unreaped child (the lock keeps it from being reaped).
        unsafe { libc::kill(pid as i32, sig) == 0 }
    }

    /// Counts and logs one injected fault.
    pub fn fault(&self, what: &str) {
        self.faults.fetch_add(1, Ordering::SeqCst);
        let at = self.start.elapsed().as_millis();
        self.fault_log
            .lock()
            .unwrap()
            .push(format!("{at} ms: {what}"));
    }

    /// A scenario-specific check failed.
    pub fn problem(&self, text: String) {
        self.problems
            .lock()
            .unwrap()
            .push(Violation::new(text, &[]));
    }

    /// The lease on `key` certainly ended now (the scenario deleted the key, or the server
    /// forgot it): for the lease-expiry→job-gone column.
    pub fn lease_ended(&self, key: &str) {
        self.lease_ends
            .lock()
            .unwrap()
            .push((key.to_string(), Instant::now()));
    }

    /// Lockruns whose job is inside its critical section right now.
    pub fn holders(&self) -> Vec<u32> {
        let now = Instant::now();
        let sections = self.recorder.sections();
        let live = self.live.lock().unwrap();
        sections
            .iter()
            .filter(|s| s.live_at(now) && live.contains(&(s.lockrun as u32)))
            .map(|s| s.lockrun as u32)
            .collect()
    }

    pub fn live(&self) -> Vec<u32> {
        self.live.lock().unwrap().iter().copied().collect()
    }

    /// Waits for the lockrun to exit (bounded by PATIENCE, then SIGKILLed and failed), drains
    /// whatever it still has to say, and checks its exit code. Returns the code (128+N for a
    /// signal).
    pub fn finish(&self, lr: Running) -> i32 {
        self.finish_with_log(lr).0
    }

    /// [`Chaos::finish`], also returning what the lockrun wrote to stderr.
    pub fn finish_with_log(&self, mut lr: Running) -> (i32, String) {
        lr.drain_stderr();
        let deadline = Instant::now() + PATIENCE;
        let status = loop {
            {
                let mut live = self.live.lock().unwrap();
                if let Some(s) = lr.child.try_wait().expect("try_wait") {
                    live.remove(&lr.pid);
                    break Some(s);
                }
                if Instant::now() > deadline {
                    let _ = lr.child.kill();
                    let _ = lr.child.wait();
                    live.remove(&lr.pid);
                    break None;
                }
            }
            thread::sleep(Duration::from_millis(5));
        };
        // Its last lines may still be in flight; an orphaned job can keep the pipe open, so
        // do not wait for EOF for long.
        lr.log.wait_closed(Duration::from_secs(2));
        let stderr = lr.log.text();
        let code = match status {
            Some(s) => s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0)),
            None => {
                self.problem(format!(
                    "lockrun {} ({}) still running after {PATIENCE:?}; killed. stderr:\n{stderr}",
                    lr.pid, lr.label
                ));
                -1
            }
        };
        let mut allowed = lr.expected.clone();
        if let Some(sigs) = self.sent.lock().unwrap().get(&lr.pid) {
            allowed.extend(sigs.iter().map(|s| 128 + s));
        }
        self.outcomes.lock().unwrap().push(Outcome {
            pid: lr.pid,
            label: lr.label,
            code,
            allowed,
            stderr: stderr.clone(),
        });
        (code, stderr)
    }

    /// [`Chaos::finish_with_log`], printing the exit code and, unless 0, the end of what the
    /// lockrun (`who`) said: for scenarios whose rows a reader compares with the log.
    pub fn finish_noting(&self, lr: Running, who: &str) -> (i32, String) {
        let (code, text) = self.finish_with_log(lr);
        eprintln!("{}: {who} exited {code}", self.name);
        if code != 0 {
            let tail: Vec<&str> = text.lines().rev().take(8).collect();
            for line in tail.into_iter().rev() {
                eprintln!("  {who}: {line}");
            }
        }
        (code, text)
    }

    /// Waits for the job of `lr` to begin its critical section; fails the test with the
    /// lockrun's log if it never does.
    pub fn wait_begin(&self, lr: &Running) {
        let pid = lr.pid as i32;
        let begun = self
            .recorder
            .wait_until(PATIENCE, |s| s.iter().any(|s| s.lockrun == pid));
        assert!(
            begun,
            "scenario={}: the job of lockrun {pid} never began; stderr:\n{}",
            self.name,
            lr.log.text()
        );
    }

    /// `n` contenders, each looping until `until`: `round` says the lockrun arguments and the
    /// job for one round. Every lockrun's exit code must be in `expected`.
    pub fn contenders(
        &self,
        redis: &Server,
        n: usize,
        until: Instant,
        expected: &[i32],
        round: impl Fn(usize, &mut Rng) -> (Vec<String>, Job) + Sync,
    ) {
        thread::scope(|s| {
            for i in 0..n {
                let mut rng = self.rng();
                let round = &round;
                s.spawn(move || {
                    while Instant::now() < until {
                        let (args, job) = round(i, &mut rng);
                        let args: Vec<&str> = args.iter().map(String::as_str).collect();
                        let lr = self.spawn(self.command(redis, &args, &job), expected);
                        self.finish(lr);
                    }
                });
            }
        });
    }

    /// Kills the server and starts an empty one on the same socket and port (a crash of a
    /// server without persistence). Fences handed out from then on must exceed all older ones.
    pub fn restart_redis(&self, redis: &mut Server, extra: &[&str]) {
        self.restarts.lock().unwrap().push(Instant::now());
        for (key, _) in self.keys.lock().unwrap().iter() {
            self.lease_ended(key);
        }
        redis.respawn(extra);
    }

    /// Keyspace notifications for expired keys, timestamped on the recorder's clock. Hz 100
    /// makes Redis's active expiry run every 10 ms, so an event is at most ~10 ms late (an
    /// access, such as a waiter's attempt, expires the key at once).
    fn watch_expiries(&self, socket: PathBuf) {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let stop = self.stop_watch.clone();
        let out = self.lease_ends.clone();
        thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let Ok(mut conn) = redis::Client::open(format!("unix://{}", socket.display()))
                    .and_then(|c| c.get_connection())
                else {
                    thread::sleep(Duration::from_millis(5));
                    continue;
                };
                let setup = [
                    &["CLIENT", "SETNAME", WATCHER_NAME][..],
                    &["CONFIG", "SET", "notify-keyspace-events", "Kx"],
                    &["CONFIG", "SET", "hz", "100"],
                ];
                if setup.iter().any(|c| {
                    redis::cmd(c[0])
                        .arg(&c[1..])
                        .query::<()>(&mut conn)
                        .is_err()
                }) {
                    continue;
                }
                let mut ps = conn.as_pubsub();
                if ps.psubscribe("__keyspace@*__:*").is_err()
                    || ps
                        .set_read_timeout(Some(Duration::from_millis(50)))
                        .is_err()
                {
                    continue;
                }
                let _ = ready_tx.send(());
                while !stop.load(Ordering::SeqCst) {
                    match ps.get_message() {
                        Ok(msg) => {
                            let channel = msg.get_channel_name().to_string();
                            let payload: String = msg.get_payload().unwrap_or_default();
                            if let Some((_, key)) = channel.split_once("__:") {
                                if payload == "expired" {
                                    out.lock().unwrap().push((key.to_string(), Instant::now()));
                                }
                            }
                        }
                        Err(e) if e.is_timeout() => {}
                        Err(_) => break, // killed or restarted: reconnect
                    }
                }
            }
        });
        ready_rx
            .recv_timeout(PATIENCE)
            .expect("keyspace notification watcher ready");
    }
}

impl Drop for Chaos {
    fn drop(&mut self) {
        self.stop_watch.store(true, Ordering::SeqCst);
        // Lockruns a failed scenario left behind must not run on into other tests.
        for pid in self.live() {
            self.signal(pid, libc::SIGKILL);
        }
    }
}

const WATCHER_NAME: &str = "chaos-expiry-watcher";

/// The client name of the test's own notification watcher (exclude it when killing clients).
pub fn watcher_name() -> &'static str {
    WATCHER_NAME
}
