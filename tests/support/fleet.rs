//! A fleet on one tick: `hosts` real lockruns with one `--every --standby` line against one real
//! server over loopback TCP, fired over one second as the cron daemons of as many hosts fire,
//! the host that takes the tick killed as a host dies (lockrun and its job's group, SIGKILL)
//! partway into its job, and standbys with it if asked. What it leaves: the job log, each
//! lockrun's exit, `lockrun history`, and what the server was asked (requests, from `INFO
//! commandstats`; connections held, sampled from `connected_clients`). The checks of those are
//! [`Tick::problems`] (what the tick promises) and [`Tick::cost_problems`] (what it may cost).
//!
//! Each host is named `h000`, `h001`… in firing order (`FLEET_HOST` in its environment); its
//! job logs `start`, one `step` per second and `end` with its name, `LOCKRUN_FENCE` and the
//! time, in the format `support::cron_standby` reads (`parse_runs`).

use super::cron_standby::{overlap, parse_runs, Run};
use super::redis_monitor::RedisMonitor;
use super::{lockrun::history_n, lockrun_bin, pgrp_and_state, Server, PATIENCE};
use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The tick's period: long enough for the job, the death, a takeover and its job (about 14 s)
/// to fit in one tick with room to spare, short enough that a test waits no more than it.
pub const EVERY: &str = "20s";
pub const EVERY_S: f64 = 20.0;
/// The lease: short, so that a standby takes over within seconds of the death.
pub const TTL: &str = "3s";
pub const TTL_S: f64 = 3.0;
/// More than the runs of one tick, so that `history` holds every one of them.
const HISTORY: usize = 1000;
/// How long the hosts take to fire, first to last: cron daemons fire within a second of each
/// other on synchronised clocks.
pub const FIRING: Duration = Duration::from_secs(1);
/// The threads that start the hosts.
const FIRING_THREADS: usize = 4;
/// After the last host fired, how long before the connections count as held: a host that
/// fired last is still starting, connecting, or on its way out.
const SETTLE: Duration = Duration::from_secs(1);
/// Connections of the test's own: the one that reads `INFO`, and MONITOR's.
const OURS: u64 = 2;

/// The commands a client sends itself (`INFO commandstats` names subcommands `client|setinfo`):
/// everything else there was run by a script, under its own name. The test's own `INFO` is
/// left out.
pub const CLIENT_COMMANDS: &[&str] = &[
    "eval",
    "evalsha",
    "eval_ro",
    "evalsha_ro",
    "fcall",
    "script",
    "subscribe",
    "unsubscribe",
    "ssubscribe",
    "sunsubscribe",
    "psubscribe",
    "punsubscribe",
    "ping",
    "client",
    "hello",
    "select",
    "auth",
    "quit",
    "reset",
];

/// One tick of a fleet, as the test asks for it.
#[derive(Clone, Copy)]
pub struct Fleet {
    pub hosts: usize,
    /// The job's steps of one second.
    pub job_steps: u32,
    /// How far into its job the host that took the tick dies (once every host has fired, at
    /// the earliest).
    pub kill_after: Duration,
    /// How many standbys die with it (the first ones found standing by, in firing order).
    pub standbys_killed: usize,
}

/// How one host ended.
pub struct Exit {
    pub host: String,
    /// Seconds since the epoch.
    pub at: f64,
    pub status: ExitStatus,
}

/// What one tick left.
pub struct Tick {
    pub fleet: Fleet,
    /// The hosts' output (`<host>.err`), the job and its log.
    pub dir: tempfile::TempDir,
    pub first_fire: f64,
    pub last_fire: f64,
    /// The host whose job started first, and when it was killed.
    pub winner: String,
    pub killed_at: f64,
    pub standbys_killed: Vec<String>,
    /// Job runs, in the order they started.
    pub runs: Vec<Run>,
    /// Every host that ended, and the ones still running at the end of the tick.
    pub exits: Vec<Exit>,
    pub leftover: Vec<String>,
    /// Requests by command (`INFO commandstats` delta, [`CLIENT_COMMANDS`] only).
    pub requests: BTreeMap<String, u64>,
    /// Commands a host sent (MONITOR) that [`CLIENT_COMMANDS`] does not list: the count above
    /// would miss them.
    pub uncounted: Vec<String>,
    /// `connected_clients` less ours, sampled from [`SETTLE`] after the last host fired until
    /// the run that completes the tick ended.
    pub connections: Vec<u64>,
    /// `INFO` `used_cpu_user` + `used_cpu_sys` over the tick, seconds.
    pub server_cpu: f64,
    pub history: Vec<serde_json::Value>,
    /// Each host's lockrun pid, by name.
    pub pids: BTreeMap<String, u32>,
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// One fleet on this machine at a time: each is hundreds of processes, and two at once would
/// slow each other's takeovers.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The hosts' lockruns, by firing order; those still running when it is dropped (the tick
/// over, or the test failed) are killed with their jobs.
struct Hosts(Vec<Option<Child>>);

impl Drop for Hosts {
    fn drop(&mut self) {
        for child in self.0.iter_mut().flatten() {
            // Its job first: a job whose lockrun is gone first may outlive it.
            for pid in super::descendants(child.id()) {
                super::kill(pid, libc::SIGKILL);
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The job: its pid (its group's id: lockrun makes it the leader) in `<host>.job`, then its
/// lines in `jobs.log`, each one `printf >>` (one write(2) with O_APPEND: lines of concurrent
/// runs never interleave).
fn job_script(dir: &Path, steps: u32) -> PathBuf {
    let path = dir.join("job.sh");
    let log = dir.join("jobs.log");
    std::fs::write(
        &path,
        format!(
            "log() {{ printf '%s %s %s %s\\n' \"$1\" \"$FLEET_HOST\" \"$LOCKRUN_FENCE\" \"$(date +%s.%N)\" >> '{log}'; }}\n\
             echo $$ > '{dir}/'\"$FLEET_HOST\".job\n\
             log start\n\
             i=0\n\
             while [ \"$i\" -lt {steps} ]; do sleep 1; i=$((i + 1)); log step; done\n\
             log end\n",
            log = log.display(),
            dir = dir.display(),
        ),
    )
    .unwrap();
    path
}

/// The line every host runs: `lockrun -r URL -E 0 --every 20s --ttl 3s --standby --history
/// 1000 KEY -- sh JOB`. Without `Lockrun`'s signal reset between fork and exec: a `pre_exec`
/// makes every start a fork of the whole test process, 10 ms and more each on a busy machine,
/// which would spread the firing over seconds; the test sends the hosts SIGKILL only, which no
/// disposition changes.
fn line(server: &Server, job: &Path, key: &str) -> Command {
    let mut cmd = Command::new(lockrun_bin());
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("LOCKRUN_") {
            cmd.env_remove(k);
        }
    }
    cmd.stdin(Stdio::null())
        .arg("-r")
        .arg(server.url())
        .args([
            "-E",
            "0",
            "--every",
            EVERY,
            "--ttl",
            TTL,
            "--standby",
            "--history",
            &HISTORY.to_string(),
            key,
            "--",
            "sh",
        ])
        .arg(job);
    cmd
}

/// Client-sent commands by name, from `INFO commandstats`.
fn client_calls(info: &str) -> BTreeMap<String, u64> {
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.trim().strip_prefix("cmdstat_")?.split_once(":calls=")?;
            let first = name.split('|').next()?;
            CLIENT_COMMANDS.contains(&first).then(|| {
                let n = rest.split(',').next()?.parse().ok()?;
                Some((name.to_string(), n))
            })?
        })
        .collect()
}

/// A field of `INFO`, as a number.
fn info_field(info: &str, field: &str) -> f64 {
    info.lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{field}:")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("INFO has no {field}"))
}

/// The test's one connection for `INFO`, opened before the tick so that its own set-up is not
/// counted.
struct Probe(redis::Connection);

impl Probe {
    fn info(&mut self, section: &str) -> String {
        redis::cmd("INFO")
            .arg(section)
            .query(&mut self.0)
            .expect("INFO")
    }
}

impl Fleet {
    /// Runs the tick on `server` under `key`.
    pub fn run(self, server: &Server, key: &str) -> Tick {
        let files = tempfile::tempdir().unwrap();
        let dir = files.path();
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let mut probe = Probe(server.conn());
        let monitor = RedisMonitor::start(&server.socket);
        let calls0 = client_calls(&probe.info("commandstats"));
        let cpu = |p: &mut Probe| {
            let info = p.info("cpu");
            info_field(&info, "used_cpu_user") + info_field(&info, "used_cpu_sys")
        };
        let cpu0 = cpu(&mut probe);

        // Fire: host i at i/hosts of FIRING, from a few threads, so that a slow spawn (a
        // loaded machine) delays no host but its own.
        let names: Vec<String> = (0..self.hosts).map(|i| format!("h{i:03}")).collect();
        let job = job_script(dir, self.job_steps);
        let start = Instant::now();
        let first_fire = now();
        let mut children = Hosts((0..self.hosts).map(|_| None).collect());
        thread::scope(|s| {
            let firing: Vec<_> = (0..FIRING_THREADS)
                .map(|t| {
                    let (names, job) = (&names, &job);
                    s.spawn(move || {
                        (t..self.hosts)
                            .step_by(FIRING_THREADS)
                            .map(|i| {
                                let at = FIRING.mul_f64(i as f64 / self.hosts as f64);
                                if let Some(wait) = at.checked_sub(start.elapsed()) {
                                    thread::sleep(wait);
                                }
                                let name = &names[i];
                                let mut cmd = line(server, job, key);
                                cmd.env("FLEET_HOST", name)
                                    .stdout(File::create(dir.join(format!("{name}.out"))).unwrap())
                                    .stderr(File::create(dir.join(format!("{name}.err"))).unwrap());
                                (i, cmd.spawn().expect("spawn lockrun"))
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            for t in firing {
                for (i, child) in t.join().unwrap() {
                    children.0[i] = Some(child);
                }
            }
        });
        let pids: BTreeMap<String, u32> = names
            .iter()
            .zip(&children.0)
            .map(|(n, c)| (n.clone(), c.as_ref().unwrap().id()))
            .collect();
        let last_fire = now();
        let fired = Instant::now();

        let log = dir.join("jobs.log");
        let mut exits = Vec::new();
        let mut connections = Vec::new();
        let mut winner: Option<(String, f64)> = None;
        let mut killed_at = None;
        let mut standbys_killed = Vec::new();
        let mut leftover = Vec::new();
        let tick_ends = first_fire + EVERY_S;
        loop {
            for (i, slot) in children.0.iter_mut().enumerate() {
                if let Some(child) = slot {
                    if let Some(status) = child.try_wait().expect("try_wait") {
                        exits.push(Exit {
                            host: names[i].clone(),
                            at: now(),
                            status,
                        });
                        *slot = None;
                    }
                }
            }
            let running = children.0.iter().filter(|c| c.is_some()).count();
            let runs = parse_runs(&std::fs::read_to_string(&log).unwrap_or_default())
                .unwrap_or_else(|e| panic!("{e}"));
            if winner.is_none() {
                winner = runs.first().map(|r| (r.host.clone(), r.start));
            }
            if let (Some((host, started)), None) = (&winner, killed_at) {
                if now() >= started + self.kill_after.as_secs_f64() {
                    // The standbys to kill are found first, so that the winner's death is not
                    // yet seen by any of them.
                    let standbys: Vec<usize> = (0..self.hosts)
                        .filter(|&i| names[i] != *host && children.0[i].is_some())
                        .filter(|&i| {
                            std::fs::read_to_string(dir.join(format!("{}.err", names[i])))
                                .unwrap_or_default()
                                .contains("standing by")
                        })
                        .take(self.standbys_killed)
                        .collect();
                    let job: u32 = std::fs::read_to_string(dir.join(format!("{host}.job")))
                        .unwrap()
                        .trim()
                        .parse()
                        .unwrap();
                    let Some((group, _)) = pgrp_and_state(job) else {
                        panic!(
                            "{host}'s job ended before its host was to die; {host} said:\n{}",
                            std::fs::read_to_string(dir.join(format!("{host}.err")))
                                .unwrap_or_default()
                        )
                    };
                    // The host is gone: lockrun and its whole job, at once; the standbys' hosts
                    // too.
                    super::kill(pids[host], libc::SIGKILL);
                    // SAFETY: kill(2) of the process group of a job this test started.
                    unsafe { libc::kill(-(group as i32), libc::SIGKILL) };
                    for &i in &standbys {
                        super::kill(pids[&names[i]], libc::SIGKILL);
                        standbys_killed.push(names[i].clone());
                    }
                    killed_at = Some(now());
                }
            }
            let completed = runs.iter().any(|r| r.end.is_some());
            if fired.elapsed() >= SETTLE && !completed && running > 0 {
                let n = info_field(&probe.info("clients"), "connected_clients");
                connections.push((n as u64).saturating_sub(OURS));
            }
            if running == 0 {
                break;
            }
            if now() >= tick_ends && leftover.is_empty() {
                leftover = (0..self.hosts)
                    .filter(|&i| children.0[i].is_some())
                    .map(|i| names[i].clone())
                    .collect();
            }
            if now() >= tick_ends + PATIENCE.as_secs_f64() {
                break;
            }
            thread::sleep(Duration::from_millis(50));
        }
        let calls1 = client_calls(&probe.info("commandstats"));
        let server_cpu = cpu(&mut probe) - cpu0;
        let seen = monitor.stop();
        let mut uncounted: Vec<String> = seen
            .iter()
            .filter(|(_, client, _)| client == "127.0.0.1")
            .map(|(_, _, cmd)| cmd.to_ascii_lowercase())
            .filter(|cmd| !CLIENT_COMMANDS.contains(&cmd.as_str()))
            .collect();
        uncounted.sort();
        uncounted.dedup();
        let requests = calls1
            .iter()
            .map(|(k, v)| (k.clone(), v - calls0.get(k).copied().unwrap_or(0)))
            .filter(|(_, v)| *v > 0)
            .collect();
        let runs = parse_runs(&std::fs::read_to_string(&log).unwrap_or_default()).unwrap();
        let (winner, _) = winner.unwrap_or_else(|| {
            panic!(
                "no host's job started; the first host said:\n{}",
                std::fs::read_to_string(dir.join(format!("{}.err", names[0]))).unwrap_or_default()
            )
        });
        Tick {
            fleet: self,
            dir: files,
            first_fire,
            last_fire,
            winner,
            killed_at: killed_at.expect("the winner was never killed"),
            standbys_killed,
            runs,
            exits,
            leftover,
            requests,
            uncounted,
            connections,
            server_cpu,
            history: history_n(server, key, HISTORY),
            pids,
        }
    }
}

impl Tick {
    pub fn request_count(&self) -> u64 {
        self.requests.values().sum()
    }

    pub fn peak_connections(&self) -> u64 {
        self.connections.iter().copied().max().unwrap_or(0)
    }

    /// What a host's lockrun printed.
    pub fn said(&self, host: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{host}.err"))).unwrap_or_default()
    }

    /// The samples of the connections, in short: how many, their least, median and most.
    pub fn connection_samples(&self) -> String {
        let mut c = self.connections.clone();
        c.sort_unstable();
        match c.len() {
            0 => "no samples".into(),
            n => format!(
                "{n} samples: least {}, median {}, most {}",
                c[0],
                c[n / 2],
                c[n - 1]
            ),
        }
    }

    /// The run that completed the tick (its job logged `end`).
    pub fn completed(&self) -> Vec<&Run> {
        self.runs.iter().filter(|r| r.end.is_some()).collect()
    }

    /// From the death to the start of the first run after it, seconds.
    pub fn to_takeover(&self) -> Option<f64> {
        self.runs
            .iter()
            .find(|r| r.host != self.winner && r.start >= self.killed_at)
            .map(|r| r.start - self.killed_at)
    }

    /// What the tick promises, whatever it costs: one run completes it, on another host within
    /// `takeover` of the death (if given); no two jobs live at once; every lockrun gone before
    /// the next tick, each with 0 (`-E 0`: skipped, or ran) but those killed; `history` records
    /// one run that ran, the one that completed.
    pub fn problems(&self, takeover: Option<f64>) -> Vec<String> {
        let mut problems = Vec::new();
        let completed = self.completed();
        if completed.len() != 1 {
            problems.push(format!(
                "{} runs completed the tick, not 1: {:?}",
                completed.len(),
                self.runs
            ));
        }
        if completed.iter().any(|r| r.host == self.winner) {
            problems.push(format!(
                "the killed host {} completed its run: {:?}",
                self.winner, self.runs
            ));
        }
        match (self.to_takeover(), takeover) {
            (None, _) => problems.push(format!(
                "no run after the death at {:.3}: {:?}",
                self.killed_at, self.runs
            )),
            (Some(took), Some(bound)) if took > bound => problems.push(format!(
                "taken over {took:.2} s after the death, more than {bound} s"
            )),
            _ => {}
        }
        // A run is live from its start to its end; the killed one until its death; one that
        // neither ended nor was killed, for good.
        let live = |r: &Run| {
            let end = match r.end {
                Some(end) => end,
                None if r.host == self.winner => self.killed_at,
                None => f64::INFINITY,
            };
            (r.start, end)
        };
        for (i, a) in self.runs.iter().enumerate() {
            for b in &self.runs[i + 1..] {
                let o = overlap(live(a), live(b));
                if o > 0.0 {
                    problems.push(format!(
                        "{} (fence {}) and {} (fence {}) ran at once for {o:.2} s",
                        a.host, a.fence, b.host, b.fence
                    ));
                }
            }
        }
        if let Some(w) = self.runs.iter().find(|r| r.host == self.winner) {
            if let Some(late) = w.steps.iter().find(|&&t| t > self.killed_at + 0.1) {
                problems.push(format!(
                    "the killed host's job went on: a step at {:.2} s after the death",
                    late - self.killed_at
                ));
            }
        }
        if !self.leftover.is_empty() {
            problems.push(format!(
                "{} lockruns still running {EVERY_S} s after the first host fired (the next \
                 tick): {:?}",
                self.leftover.len(),
                self.leftover
            ));
        }
        let killed: Vec<&String> = std::iter::once(&self.winner)
            .chain(&self.standbys_killed)
            .collect();
        let mut ended: BTreeMap<String, Vec<&str>> = BTreeMap::new();
        for e in &self.exits {
            let ok = if killed.contains(&&e.host) {
                e.status.signal() == Some(libc::SIGKILL)
            } else {
                e.status.code() == Some(0)
            };
            if !ok {
                ended.entry(e.status.to_string()).or_default().push(&e.host);
            }
        }
        for (status, hosts) in ended {
            problems.push(format!(
                "{} hosts ended {status} (the first said: {:?}): {hosts:?}",
                hosts.len(),
                self.said(hosts[0])
            ));
        }
        let ran: Vec<&serde_json::Value> = self
            .history
            .iter()
            .filter(|e| e["outcome"] == "ran")
            .collect();
        let completer = completed.first().map(|r| self.pids[&r.host]);
        let ran_ok = ran.len() == 1
            && ran[0]["exit_code"] == 0
            && completer.is_some_and(|pid| ran[0]["pid"] == pid);
        if !ran_ok {
            problems.push(format!(
                "history: not one `ran` entry with exit 0 by the host that completed the tick \
                 (pid {completer:?}): {ran:?}"
            ));
        }
        if !self.uncounted.is_empty() {
            problems.push(format!(
                "the hosts sent commands the request count does not know: {:?} (add them to \
                 CLIENT_COMMANDS)",
                self.uncounted
            ));
        }
        problems
    }

    /// What the tick may cost: at most `hosts + 60` requests in all, and at most 10
    /// connections held while the job runs after the last host fired.
    pub fn cost_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let bound = self.fleet.hosts as u64 + 60;
        if self.request_count() > bound {
            problems.push(format!(
                "{} requests in all, more than {bound} (N + 60): {:?}",
                self.request_count(),
                self.requests
            ));
        }
        if self.connections.is_empty() {
            problems.push("no sample of the connections was taken".into());
        } else if self.peak_connections() > 10 {
            problems.push(format!(
                "up to {} connections held mid-job, more than 10 ({})",
                self.peak_connections(),
                self.connection_samples()
            ));
        }
        problems
    }

    /// One line of figures, for the test's output.
    pub fn summary(&self) -> String {
        format!(
            "{} hosts fired over {:.2} s; requests {} {:?}; connections mid-job: {}; {} killed \
             {:.2} s into the tick, standbys {:?} with it; taken over {:?} s after; the last \
             lockrun gone {:.1} s after the first fired; server CPU {:.2} s; runs {:?}",
            self.fleet.hosts,
            self.last_fire - self.first_fire,
            self.request_count(),
            self.requests,
            self.connection_samples(),
            self.winner,
            self.killed_at - self.first_fire,
            self.standbys_killed,
            self.to_takeover().map(|t| (t * 100.0).round() / 100.0),
            self.exits.iter().map(|e| e.at).fold(0.0, f64::max) - self.first_fire,
            self.server_cpu,
            self.runs
                .iter()
                .map(|r| format!("{} fence {} ended {}", r.host, r.fence, r.end.is_some()))
                .collect::<Vec<_>>(),
        )
    }
}
