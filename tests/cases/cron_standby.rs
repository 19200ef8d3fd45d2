//! `--standby` on real cron daemons: the guide's standby line ("Standby hosts: a tick survives
//! the host that took it") on three hosts under one key, as `cron.rs` runs the README's line
//! (the same harness, `support::cron`: Debian's `cron` and busybox `crond`, each host a daemon in
//! its own mount, UTS and PID namespace, lockrun where one install channel puts it), and here
//! also each host in its own network namespace (`support::netns`), Redis on a host of its own.
//! Two configurations of three hosts run at once, each with its own key.
//!
//! The job takes about 20 s (20 steps of `sleep 1`) and logs its start, each step and its end
//! with its host, `LOCKRUN_FENCE` and the time. Each minute, about 5 s into the job, the test
//! does one thing to the host that took the tick, in rotation: kills it (SIGKILL to lockrun and
//! its job's group), kills its lockrun alone (SIGKILL, mid-`sleep`: the job's shell gets
//! SIGTERM from the parent-death signal, the `sleep` it leaves in the job's group lives up to a
//! second more, and the key stays until its TTL), freezes it (SIGSTOP to every process of its
//! PID namespace: daemon, lockrun, job; SIGCONT TTL + 10 s later), kills its job alone (SIGKILL
//! to the group), cuts it off from Redis (iptables, lifted TTL + 10 s later), stops lockrun
//! (SIGTERM), or nothing. Every tick must complete exactly once (one run reaching its end), on
//! another host when a fault was injected, with fences only increasing; no two hosts' jobs may
//! be live at once, where a stopped (frozen) process is not live and an orphaned one of the
//! job's group is; a frozen job, thawed, must be stopped by its lockrun before its end, and the
//! time it lived after the thaw is reported (that overlap is the one the safety page says fences
//! are for); cron's mail and busybox crond's output of a tick carry nothing but the takeover's
//! WARN line, and the faulted host's own lines. The time from the fault to the takeover's job
//! start is measured against the TTL, and MONITOR counts what each host asks of Redis on a
//! healthy tick.
//!
//! `LOCKRUN_CRON_MINUTES` sets the ticks observed per configuration (default 4: the seven kinds
//! at least once between the two), `LOCKRUN_CRON_STANDBY_REPORT=<file>` writes the results
//! table there:
//!
//! `LOCKRUN_CRON_MINUTES=30 LOCKRUN_CRON_STANDBY_REPORT=standby.md cargo test --test lockrun cron_standby -- --nocapture`
//!
//! Root only (mounts and namespaces); `bash tests/ensure-cron.sh` and `bash
//! tests/ensure-netns.sh` install what it needs.

use crate::support::cron::*;
use crate::support::netns::Net;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// The lease: short, so that a standby takes over a dead host's tick within seconds (the guide:
/// at most one TTL after the death).
const TTL: &str = "5s";
const TTL_S: f64 = 5.0;
/// The job's steps of one second.
const STEPS: u32 = 20;
/// How far into the job the fault comes.
const FAULT_AFTER: f64 = 5.0;
/// How long a freeze or a cut lasts: well past the lease, so the standby has taken over.
const THAW_AFTER: f64 = TTL_S + 10.0;
/// The takeover's WARN line.
const TAKEOVER: &str = "the host that took this tick did not complete it; running it here";
/// Redis, on a host of the network (its own namespace: no clash with anything on the machine).
const PORT: u16 = 27500;

/// What the test does to the host that took a tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    HostDied,
    LockrunKilled,
    Frozen,
    JobKilled,
    CutOff,
    Stopped,
    Healthy,
}

use Fault::*;

/// One tick of each, in this order, over and over.
const ROTATION: [Fault; 7] = [
    HostDied,
    LockrunKilled,
    Frozen,
    JobKilled,
    CutOff,
    Stopped,
    Healthy,
];

impl Fault {
    fn label(self) -> &'static str {
        match self {
            HostDied => "host died (SIGKILL to lockrun and its job's group)",
            LockrunKilled => {
                "lockrun killed (SIGKILL to lockrun alone; its job gets SIGTERM from the \
                 parent-death signal)"
            }
            Frozen => "host frozen (SIGSTOP to all its processes, SIGCONT after TTL + 10 s)",
            JobKilled => "job killed (SIGKILL to its group)",
            CutOff => "host cut off from Redis (iptables, for TTL + 10 s)",
            Stopped => "lockrun stopped (SIGTERM)",
            Healthy => "none (a healthy tick)",
        }
    }

    /// How far into the job the fault comes. A step is a `sleep 1` and a log line, so
    /// [`FAULT_AFTER`] falls just as a `sleep` ends; lockrun alone is killed half a second
    /// later, mid-`sleep`, so that the `sleep` outlives the job's shell (dead of the
    /// parent-death signal) by about half a second, orphaned in the job's group.
    fn after(self) -> f64 {
        match self {
            LockrunKilled => FAULT_AFTER + 0.5,
            _ => FAULT_AFTER,
        }
    }

    /// The run hands the tick on itself, at once; otherwise only its lease's end does.
    fn at_once(self) -> bool {
        matches!(self, JobKilled | Stopped)
    }
}

/// One host: its name (hostname and network namespace), daemon, where lockrun is, its clock.
#[derive(Clone, Copy)]
struct Host {
    name: &'static str,
    daemon: Daemon,
    channel: Channel,
    skew: i32,
}

use Channel::{Cargo, UsrBin, UsrLocalBin};

struct Config {
    label: &'static str,
    key: &'static str,
    hosts: [Host; 3],
    /// Where in [`ROTATION`] its first tick is: the two configurations inject different
    /// faults in the same minute, and over [`DEFAULT_MINUTES`] ticks each, every fault between
    /// them.
    offset: usize,
}

/// The host that fires first takes each tick (busybox crond fires at :00, Debian's cron at
/// :01): in the first configuration a busybox host, in the second a Debian host whose clock runs
/// 3 s ahead (it fires at the real :58), so the faults meet both daemons.
const CONFIGS: [Config; 2] = [
    Config {
        label: "busybox takes the ticks",
        key: "cron-standby-a",
        hosts: [
            Host {
                name: "a1",
                daemon: Daemon::Busybox { ash: true },
                channel: UsrLocalBin,
                skew: 0,
            },
            Host {
                name: "a2",
                daemon: Daemon::Debian,
                channel: UsrBin,
                skew: 0,
            },
            Host {
                name: "a3",
                daemon: Daemon::Debian,
                channel: Cargo,
                skew: 0,
            },
        ],
        offset: 0,
    },
    Config {
        label: "Debian cron (+3 s) takes the ticks",
        key: "cron-standby-b",
        hosts: [
            Host {
                name: "b1",
                daemon: Daemon::Debian,
                channel: UsrLocalBin,
                skew: 3,
            },
            Host {
                name: "b2",
                daemon: Daemon::Busybox { ash: false },
                channel: Cargo,
                skew: 0,
            },
            Host {
                name: "b3",
                daemon: Daemon::Debian,
                channel: UsrBin,
                skew: 0,
            },
        ],
        offset: 4,
    },
];

/// The ticks observed per configuration unless `LOCKRUN_CRON_MINUTES` says otherwise: with the
/// second configuration's offset, each fault of [`ROTATION`] at least once between the two.
const DEFAULT_MINUTES: usize = 4;

/// Where in a second each configuration's daemons start, as in cron.rs.
const FRACTIONS: [f64; 3] = [0.05, 0.45, 0.85];

// ---------------------------------------------------------------------------------------------
// The pure parts: the job log, ticks, times.

/// The tick (minute since the epoch) a time belongs to: from 5 s before its minute to 5 s
/// before the next. The +3 s host fires at the real :58, and a tick (`--every 1m`: 54 s from
/// its first acquire) is over by :52 of its minute, so every attempt, line and mail of a tick
/// falls in its window.
fn tick_at(t: f64) -> i64 {
    ((t + 5.0) / 60.0).floor() as i64
}

/// One run of the job, from its lines in the job log.
#[derive(Clone, Debug, PartialEq)]
struct Run {
    host: String,
    fence: u64,
    start: f64,
    steps: Vec<f64>,
    end: Option<f64>,
}

/// The job log: `<start|step|end> <host> <fence> <time>` lines, by run (host and fence), in
/// the order the runs started.
fn parse_runs(text: &str) -> Result<Vec<Run>, String> {
    let mut runs: Vec<Run> = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [event, host, fence, t] = f[..] else {
            return Err(format!(
                "job log line {line:?}: not `event host fence time`"
            ));
        };
        let (Ok(fence), Ok(t)) = (fence.parse::<u64>(), t.parse::<f64>()) else {
            return Err(format!("job log line {line:?}: bad fence or time"));
        };
        let run = runs.iter_mut().find(|r| r.host == host && r.fence == fence);
        match (event, run) {
            ("start", None) => runs.push(Run {
                host: host.into(),
                fence,
                start: t,
                steps: Vec::new(),
                end: None,
            }),
            ("step", Some(r)) if r.end.is_none() => r.steps.push(t),
            ("end", Some(r)) if r.end.is_none() => r.end = Some(t),
            _ => return Err(format!("job log line {line:?}: out of order")),
        }
    }
    runs.sort_by(|a, b| a.start.total_cmp(&b.start));
    Ok(runs)
}

/// Seconds since the epoch of a log line's leading UTC timestamp
/// (`2026-11-27T12:32:00.837489Z`), if it has one.
fn line_time(line: &str) -> Option<f64> {
    let ts = line.split_whitespace().next()?;
    // Whole seconds as lockrun reads its own times; the fraction after them.
    let whole = ::lockrun::utc::parse(ts)?;
    let frac = match ts.strip_suffix('Z')?.split_once('.') {
        Some((_, digits)) => format!("0.{digits}").parse::<f64>().ok()?,
        None => 0.0,
    };
    Some(whole as f64 + frac)
}

/// How long two intervals overlap (0 if not).
fn overlap(a: (f64, f64), b: (f64, f64)) -> f64 {
    (a.1.min(b.1) - a.0.max(b.0)).max(0.0)
}

/// The intervals a run was live: from its start to its end (or its death), less the time its
/// host was frozen.
fn live(start: f64, end: f64, frozen: Option<(f64, f64)>) -> Vec<(f64, f64)> {
    match frozen {
        Some((f, t)) if f < end && t > start => [(start, f), (t, end)]
            .into_iter()
            .filter(|(a, b)| b > a)
            .collect(),
        _ => vec![(start, end)],
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

// ---------------------------------------------------------------------------------------------
// Processes of a host.

/// `(pgrp, state)` of a process, from /proc/<pid>/stat (after the command's closing paren).
fn stat(pid: u32) -> Option<(u32, char)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some((f.get(2)?.parse().ok()?, f.first()?.chars().next()?))
}

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// The host's lockrun that runs a job, and the job's process group.
fn lockrun_and_job(d: &CronDaemon) -> Result<(u32, u32), String> {
    let found: Vec<(u32, u32)> = d
        .processes()
        .into_iter()
        .filter(|p| comm(*p) == "lockrun")
        .filter_map(|p| {
            let kid = crate::support::descendants(p).first().copied()?;
            Some((p, stat(kid)?.0))
        })
        .collect();
    match found[..] {
        [one] => Ok(one),
        _ => Err(format!(
            "{}: {} lockruns running a job (one expected):\n{}",
            d.host,
            found.len(),
            d.processes()
                .iter()
                .map(|p| format!("  {p} {}\n", comm(*p)))
                .collect::<String>()
        )),
    }
}

/// Whether a process of the group is alive (a zombie is not: it only waits to be reaped).
fn group_alive(d: &CronDaemon, pgid: u32) -> bool {
    d.processes()
        .into_iter()
        .filter_map(stat)
        .any(|(g, state)| g == pgid && state != 'Z')
}

/// SIGSTOP to every process of the host until no new one appears; returns them.
fn freeze(d: &CronDaemon) -> Vec<u32> {
    let mut stopped: BTreeSet<u32> = BTreeSet::new();
    loop {
        let new: Vec<u32> = d
            .processes()
            .into_iter()
            .filter(|p| !stopped.contains(p))
            .collect();
        if new.is_empty() {
            return stopped.into_iter().collect();
        }
        for p in new {
            // From the parent PID namespace SIGSTOP reaches its init too.
            crate::support::kill(p, libc::SIGSTOP);
            stopped.insert(p);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The run.

/// What the test did to a tick's host, and saw of it.
#[derive(Clone, Debug)]
struct Injected {
    tick: i64,
    kind: Fault,
    host: String,
    fence: u64,
    /// When the fault came (real clock).
    at: f64,
    /// When the host was thawed or rejoined.
    restored: Option<f64>,
    /// The job's end, as the test can tell it: after a SIGKILL to its group the instant of the
    /// kill (no process of it runs again), otherwise the last look (every 10 ms) that found a
    /// process of it alive, so that an overlap found is certain.
    died: Option<f64>,
    /// The first look that found none alive: `died` is within this of the real end.
    gone: Option<f64>,
    /// The first look that found the job's leader (lockrun's child, the job's shell) dead: with
    /// lockrun alone killed, the rest of its group (a `sleep 1`) may outlive it.
    leader_gone: Option<f64>,
}

/// The job: one line per event, each one `printf >>` (one write(2) with O_APPEND: lines of
/// concurrent runs never interleave). It prints nothing, so cron mails nothing unless lockrun
/// itself prints.
fn job_script(dir: &Path, log: &Path) -> PathBuf {
    let path = dir.join("job.sh");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\n\
             log() {{ printf '%s %s %s %s\\n' \"$1\" \"$(uname -n)\" \"$LOCKRUN_FENCE\" \"$(date +%s.%N)\" >> '{}'; }}\n\
             log start\n\
             i=0\n\
             while [ \"$i\" -lt {STEPS} ]; do sleep 1; i=$((i + 1)); log step; done\n\
             log end\n",
            log.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// One configuration's files.
struct Setup<'a> {
    config: &'a Config,
    dir: tempfile::TempDir,
    crontab: String,
    job_log: PathBuf,
    maildir: PathBuf,
    layer: PathBuf,
}

fn setup<'a>(config: &'a Config, block: &str, url: &str) -> Setup<'a> {
    let dir = tempfile::tempdir().unwrap();
    let job_log = dir.path().join("job.log");
    let maildir = dir.path().join("mail");
    let layer = sendmail_layer(dir.path(), &maildir);
    let job = job_script(dir.path(), &job_log);
    let spec = CrontabSpec {
        url,
        key: config.key,
        job: &job,
        line: None,
        control: false,
        extra: &[],
        options: &["--ttl", TTL],
    };
    let crontab = build_crontab(block, &spec).unwrap_or_else(|e| {
        panic!("the guide's standby crontab block cannot be tested as it is: {e}\n{block}")
    });
    Setup {
        config,
        dir,
        crontab,
        job_log,
        maildir,
        layer,
    }
}

struct Schedule {
    start: f64,
    ready_by: f64,
    ticks: Vec<i64>,
    stop_at: f64,
}

/// What a configuration's thread brings back.
struct Observed {
    injected: Vec<Injected>,
    history: HistoryLog,
    /// Each host's lines that are no log line of its daemon: busybox crond's output, and the
    /// bodies of Debian cron's mails, with the time the mail was sent (for a line of the shell's
    /// own, such as dash's `Killed`, which has no time of its own).
    output: Vec<(String, String, Option<f64>)>,
    problems: Vec<String>,
}

/// The fault of a configuration's `i`-th tick.
fn fault_of(c: &Config, i: usize) -> Fault {
    ROTATION[(i + c.offset) % ROTATION.len()]
}

/// Runs one configuration's daemons through the schedule, injecting each tick's fault.
fn run_config(
    setup: &Setup,
    index: usize,
    sched: &Schedule,
    tools: &Tools,
    net: &Net,
    socket: &Path,
) -> Observed {
    let c = setup.config;
    let mut problems = Vec::new();
    let mut daemons = Vec::new();
    for (k, (frac, h)) in FRACTIONS.iter().zip(c.hosts).enumerate() {
        sleep_until(sched.start + frac + 0.02 * index as f64);
        let ns = PathBuf::from(format!("/run/netns/{}", net.host(h.name).ns));
        daemons.push(CronDaemon::start(&DaemonSpec {
            dir: setup.dir.path().join(format!("host{}", k + 1)),
            host: h.name.to_string(),
            daemon: h.daemon,
            channel: h.channel,
            crontab: &setup.crontab,
            sendmail_layer: &setup.layer,
            skew_s: h.skew,
            tools,
            netns: Some(&ns),
        }));
    }
    for d in daemons.iter_mut() {
        if let Err(e) = d.wait_ready(sched.ready_by) {
            problems.push(e);
        }
    }
    // The test's own reads go through the server's unix socket, which no cut touches.
    let url = format!("unix://{}", socket.display());
    let mut history = HistoryLog::default();
    let mut injected = Vec::new();
    for (i, tick) in sched.ticks.iter().enumerate() {
        let kind = fault_of(c, i);
        let window = ((tick * 60) as f64 - 5.0, (tick * 60) as f64 + 20.0);
        // The run that took the tick: the first to start in its window.
        let first = loop {
            let text = std::fs::read_to_string(&setup.job_log).unwrap_or_default();
            let first = parse_runs(&text)
                .ok()
                .and_then(|runs| runs.into_iter().find(|r| tick_at(r.start) == *tick));
            if first.is_some() || now() > window.1 {
                break first;
            }
            thread::sleep(Duration::from_millis(20));
        };
        let Some(first) = first else {
            problems.push(format!("tick {}: no run started by :20", hhmm(*tick)));
            continue;
        };
        if kind != Healthy {
            let d = daemons.iter().find(|d| d.host == first.host).unwrap();
            sleep_until(first.start + kind.after());
            match inject(d, net, kind, *tick, &first) {
                Ok(f) => injected.push(f),
                Err(e) => problems.push(format!("tick {}: {e}", hhmm(*tick))),
            }
        }
        for d in daemons.iter_mut() {
            if let Err(e) = d.check_alive() {
                if !problems.contains(&e) {
                    problems.push(e);
                }
            }
        }
        // The stream keeps about the last 100 entries: read it every tick.
        sleep_until(((tick * 60) as f64 + 50.0).min(sched.stop_at));
        history.read(c.key, &url);
    }
    sleep_until(sched.stop_at);
    for d in daemons.iter_mut() {
        problems.extend(d.stop(crate::support::PATIENCE));
    }
    history.read(c.key, &url);
    let mut output = Vec::new();
    for d in &daemons {
        for l in d.output() {
            output.push((d.host.clone(), l, None));
        }
    }
    // Debian's cron: each mail's body (after the headers), from the host in its name.
    let mut names: Vec<PathBuf> = std::fs::read_dir(&setup.maildir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    names.sort();
    for p in names {
        // `<host>.<pid>.<ns since the epoch>` (`sendmail_layer`).
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        let host = name.split('.').next().unwrap_or("?").to_string();
        let sent = name
            .rsplit('.')
            .next()
            .and_then(|ns| ns.parse::<f64>().ok())
            .map(|ns| ns / 1e9);
        let mail = std::fs::read_to_string(&p).unwrap_or_default();
        let body = mail.split_once("\n\n").map_or("", |(_, b)| b);
        for l in body.lines().filter(|l| !l.trim().is_empty()) {
            output.push((host.clone(), l.to_string(), sent));
        }
    }
    Observed {
        injected,
        history,
        output,
        problems,
    }
}

/// Does `kind` to the host of `first`, a run of `tick`, and waits for its job to be gone (and,
/// for a freeze or a cut, for the host to be back).
fn inject(
    d: &CronDaemon,
    net: &Net,
    kind: Fault,
    tick: i64,
    first: &Run,
) -> Result<Injected, String> {
    let (lockrun, pgid) = lockrun_and_job(d)?;
    let mut stopped = Vec::new();
    let at = now();
    match kind {
        HostDied => {
            crate::support::kill(lockrun, libc::SIGKILL);
            // SAFETY: kill(2) of a process group of the test's host.
            unsafe { libc::kill(-(pgid as i32), libc::SIGKILL) };
        }
        Frozen => stopped = freeze(d),
        JobKilled => unsafe {
            // SAFETY: as above.
            libc::kill(-(pgid as i32), libc::SIGKILL);
        },
        CutOff => net.partition(&[&[d.host.as_str()], &["redis"]]),
        // lockrun alone: its child gets SIGTERM from the parent-death signal it set.
        LockrunKilled => crate::support::kill(lockrun, libc::SIGKILL),
        Stopped => crate::support::kill(lockrun, libc::SIGTERM),
        Healthy => unreachable!(),
    }
    let restore_at = matches!(kind, Frozen | CutOff).then_some(at + THAW_AFTER);
    let mut f = Injected {
        tick,
        kind,
        host: d.host.clone(),
        fence: first.fence,
        at,
        restored: None,
        died: matches!(kind, HostDied | JobKilled).then_some(at),
        gone: None,
        leader_gone: None,
    };
    let mut alive_at = at;
    loop {
        if restore_at.is_some_and(|t| f.restored.is_none() && now() >= t) {
            if kind == Frozen {
                for p in &stopped {
                    crate::support::kill(*p, libc::SIGCONT);
                }
            } else {
                net.uncut(&[d.host.as_str()], &["redis"]);
                net.uncut(&["redis"], &[d.host.as_str()]);
            }
            f.restored = Some(now());
        }
        if f.gone.is_none() {
            let looked = now();
            // The leader's pid is the group's id (lockrun makes its child a group leader).
            if f.leader_gone.is_none() && stat(pgid).is_none_or(|(_, state)| state == 'Z') {
                f.leader_gone = Some(looked);
            }
            if group_alive(d, pgid) {
                alive_at = looked;
            } else {
                f.gone = Some(looked);
                f.died.get_or_insert(alive_at);
            }
        }
        if f.gone.is_some() && (restore_at.is_none() || f.restored.is_some()) {
            return Ok(f);
        }
        if now() > at + 45.0 {
            return Err(format!(
                "{}: the job of fence {} still alive 45 s after the fault ({kind:?})",
                d.host, first.fence
            ));
        }
        thread::sleep(Duration::from_millis(10));
    }
}

// ---------------------------------------------------------------------------------------------
// What each host asks of Redis: MONITOR.

/// One command a client sent: (server time, client address, command).
type Seen = (f64, String, String);

/// MONITOR on the server's unix socket, every command of every client but Lua's own calls.
struct Monitor {
    stream: UnixStream,
    reader: thread::JoinHandle<()>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

/// `+1764258000.123456 [0 10.77.0.2:45678] "EVALSHA" "…" …` → (time, `10.77.0.2`, `EVALSHA`);
/// `None` for Lua's own calls (`[0 lua]`) and anything else.
fn parse_monitor(line: &str) -> Option<Seen> {
    let rest = line.strip_prefix('+')?;
    let (t, rest) = rest.split_once(" [")?;
    let (client, rest) = rest.split_once("] \"")?;
    let (_, client) = client.split_once(' ')?;
    if client == "lua" {
        return None;
    }
    let ip = client.rsplit_once(':').map_or(client, |(ip, _)| ip);
    let cmd = rest.split('"').next()?;
    Some((t.parse().ok()?, ip.to_string(), cmd.to_ascii_uppercase()))
}

impl Monitor {
    fn start(socket: &Path) -> Monitor {
        let mut stream = UnixStream::connect(socket).expect("MONITOR: connect");
        stream.write_all(b"MONITOR\r\n").unwrap();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let (r, s) = (stream.try_clone().unwrap(), seen.clone());
        let reader = thread::spawn(move || {
            let mut r = BufReader::new(r);
            let mut buf = Vec::new();
            while r.read_until(b'\n', &mut buf).is_ok_and(|n| n > 0) {
                if let Some(x) = parse_monitor(String::from_utf8_lossy(&buf).trim_end()) {
                    s.lock().unwrap().push(x);
                }
                buf.clear();
            }
        });
        Monitor {
            stream,
            reader,
            seen,
        }
    }

    fn stop(self) -> Vec<Seen> {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        let _ = self.reader.join();
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

// ---------------------------------------------------------------------------------------------
// The checks.

/// One row of the table: a fault kind, over every tick that had it.
#[derive(Default)]
struct KindRow {
    ticks: usize,
    takeovers: usize,
    lost: usize,
    duplicates: usize,
    overlaps: Vec<f64>,
    to_takeover: Vec<f64>,
    /// A frozen host's job: how long it lived after the thaw, and the steps it did then.
    after_thaw: Vec<f64>,
    steps_after_thaw: usize,
    /// A job whose lockrun alone was killed: how long after the kill its shell was found dead,
    /// and its last process alive.
    leader_after: Vec<f64>,
    job_after: Vec<f64>,
    /// `lockrun history` of the tick, outcomes (attempt) in order.
    histories: BTreeSet<String>,
    /// What the faulted host printed (or cron mailed), without times and fields.
    own_lines: BTreeSet<String>,
    takeover_warns: usize,
}

/// A log line without its time and fields: `WARN message`.
fn gist(line: &str) -> String {
    let line = match line_time(line) {
        Some(_) => line.split_once(' ').map_or("", |(_, r)| r).trim_start(),
        None => line,
    };
    let mut words = Vec::new();
    for w in line.split(' ') {
        let field = w.split_once('=').is_some_and(|(k, _)| {
            !k.is_empty() && k.chars().all(|c| c.is_ascii_lowercase() || c == '_')
        });
        if field {
            break;
        }
        words.push(w);
    }
    words.join(" ").trim().to_string()
}

/// What the checks found for one configuration.
struct Checked {
    rows: BTreeMap<Fault, KindRow>,
    /// Healthy ticks: requests of the host that ran the job, and of each standby.
    winner: Vec<(usize, BTreeMap<String, usize>)>,
    standby: Vec<(usize, BTreeMap<String, usize>)>,
    problems: Vec<String>,
}

fn check(setup: &Setup, sched: &Schedule, seen: Observed, monitor: &[Seen], net: &Net) -> Checked {
    let c = setup.config;
    let mut problems = seen.problems;
    problems.extend(seen.history.problems.iter().cloned());
    let text = std::fs::read_to_string(&setup.job_log).unwrap_or_default();
    let runs = parse_runs(&text).unwrap_or_else(|e| {
        problems.push(e);
        Vec::new()
    });
    let history = seen.history.entries();
    let mut rows: BTreeMap<Fault, KindRow> = BTreeMap::new();
    let (mut winner, mut standby) = (Vec::new(), Vec::new());
    let injected = |tick: i64| seen.injected.iter().find(|f| f.tick == tick);

    // Fences only increase, run after run.
    for w in runs.windows(2) {
        if w[1].fence <= w[0].fence {
            problems.push(format!(
                "fences out of order: {} {} at {:.3}, then {} {} at {:.3}",
                w[0].host, w[0].fence, w[0].start, w[1].host, w[1].fence, w[1].start
            ));
        }
    }
    // When each run was live: start to end, or to its death the test saw, less its freeze.
    let lives: Vec<Vec<(f64, f64)>> = runs
        .iter()
        .map(|r| {
            let f = injected(tick_at(r.start)).filter(|f| f.host == r.host && f.fence == r.fence);
            let end = r.end.or(f.and_then(|f| f.died)).unwrap_or_else(|| {
                if sched.ticks.contains(&tick_at(r.start)) {
                    problems.push(format!(
                        "{} fence {}: a run that never ended and was not killed by the test",
                        r.host, r.fence
                    ));
                }
                r.steps.last().copied().unwrap_or(r.start)
            });
            let frozen = f
                .filter(|f| f.kind == Frozen)
                .map(|f| (f.at, f.restored.unwrap_or(f64::INFINITY)));
            live(r.start, end, frozen)
        })
        .collect();

    for (i, tick) in sched.ticks.iter().enumerate() {
        let kind = fault_of(c, i);
        let row = rows.entry(kind).or_default();
        row.ticks += 1;
        let at = |t: f64| tick_at(t) == *tick;
        let here: Vec<(usize, &Run)> = runs
            .iter()
            .enumerate()
            .filter(|(_, r)| at(r.start))
            .collect();
        let done: Vec<&Run> = here
            .iter()
            .map(|(_, r)| *r)
            .filter(|r| r.end.is_some())
            .collect();
        let name = hhmm(*tick);
        let all = || format!("{:?}", here.iter().map(|(_, r)| r).collect::<Vec<_>>());
        match done.len() {
            0 => {
                row.lost += 1;
                problems.push(format!(
                    "tick {name} ({kind:?}): no run reached its end: {}",
                    all()
                ));
            }
            1 => {}
            n => {
                row.duplicates += n - 1;
                problems.push(format!(
                    "tick {name} ({kind:?}): {n} runs reached their end: {}",
                    all()
                ));
            }
        }
        let expected_runs = if kind == Healthy { 1 } else { 2 };
        if here.len() != expected_runs {
            problems.push(format!(
                "tick {name} ({kind:?}): {} runs started, {expected_runs} expected: {}",
                here.len(),
                all()
            ));
        }
        let f = injected(*tick);
        if let (Some(f), Some(d)) = (f, done.first()) {
            if d.host == f.host || d.fence <= f.fence {
                problems.push(format!(
                    "tick {name} ({kind:?}): the run that completed it is {} fence {}, the faulted \
                     one {} fence {}: another host with a higher fence expected",
                    d.host, d.fence, f.host, f.fence
                ));
            } else {
                row.takeovers += 1;
                let took = d.start - f.at;
                row.to_takeover.push(took);
                let bound = if kind.at_once() { 3.0 } else { TTL_S + 3.0 };
                if took > bound {
                    problems.push(format!(
                        "tick {name} ({kind:?}): the takeover's job started {took:.2} s after the \
                         fault (at most {bound} s expected with a {TTL} TTL)"
                    ));
                }
            }
            if let (LockrunKilled, Some(leader), Some(died)) = (kind, f.leader_gone, f.died) {
                row.leader_after.push(leader - f.at);
                row.job_after.push(died - f.at);
                // The orphaned `sleep` must have been seen: the overlap check counts it live.
                if died - leader < 0.1 {
                    problems.push(format!(
                        "tick {name}: the job on {} was last seen alive {:.3} s after its shell was \
                         found dead: no orphaned `sleep` seen in its group",
                        f.host,
                        died - leader
                    ));
                }
            }
            if let Some(r) = here
                .iter()
                .map(|(_, r)| r)
                .find(|r| r.host == f.host && r.fence == f.fence)
            {
                if r.end.is_some() {
                    problems.push(format!(
                        "tick {name} ({kind:?}): the faulted run on {} reached its end",
                        f.host
                    ));
                }
                if let (Frozen, Some(thaw), Some(gone)) = (kind, f.restored, f.gone) {
                    // At most this long: the first look that found the job gone.
                    let after = gone - thaw;
                    row.after_thaw.push(after);
                    row.steps_after_thaw += r.steps.iter().filter(|t| **t > thaw).count();
                    // SIGTERM, then SIGKILL after --kill-after clamped to TTL/3 on a lost lock.
                    if after > TTL_S / 3.0 + 1.0 {
                        problems.push(format!(
                            "tick {name}: the thawed job on {} lived {after:.3} s after the thaw",
                            f.host
                        ));
                    }
                }
            }
        } else if kind != Healthy && f.is_none() {
            problems.push(format!("tick {name} ({kind:?}): no fault was injected"));
        }
        // No two hosts' jobs live at once: each run of this tick against every other run.
        for (k, r) in &here {
            for (j, o) in runs.iter().enumerate() {
                if j == *k || o.host == r.host || (at(o.start) && j < *k) {
                    continue;
                }
                let both: f64 = lives[*k]
                    .iter()
                    .flat_map(|a| lives[j].iter().map(move |b| overlap(*a, *b)))
                    .sum();
                if both > 0.0 {
                    row.overlaps.push(both);
                    // A thawed job lives until its lockrun, thawed with it, stops it: the
                    // overlap the safety page's fences are for. Anything else is a failure.
                    if kind != Frozen {
                        problems.push(format!(
                            "tick {name} ({kind:?}): {} fence {} and {} fence {} were live at once \
                             for {both:.3} s",
                            r.host, r.fence, o.host, o.fence
                        ));
                    }
                }
            }
        }
        // lockrun's own account of the tick.
        let mut entries: Vec<&HistoryEntry> = history.iter().filter(|e| at(e.start())).collect();
        entries.sort_by_key(|e| e.time_ms);
        let ok_runs: Vec<&&HistoryEntry> = entries
            .iter()
            .filter(|e| e.outcome == "ran" && e.exit_code == Some(0))
            .collect();
        let want_attempt = if kind == Healthy { None } else { Some(2) };
        match (&ok_runs[..], done.first()) {
            ([e], Some(d)) if e.host == d.host && e.attempt == want_attempt => {}
            _ => problems.push(format!(
                "tick {name} ({kind:?}): the history's completed runs {ok_runs:?}, one on the host \
                 whose job ended with attempt {want_attempt:?} expected"
            )),
        }
        if let (Some(f), HostDied | LockrunKilled | Frozen | CutOff) = (f, kind) {
            // A thawed (or healed) host records its own loss too; `history` merges the two
            // entries, each with the attempt.
            let lost = entries
                .iter()
                .any(|e| e.outcome == "lost" && e.attempt == Some(1) && e.host == f.host);
            if !lost {
                problems.push(format!(
                    "tick {name} ({kind:?}): no `lost` entry of attempt 1 on {} in the history",
                    f.host
                ));
            }
        }
        let mut story: Vec<String> = entries
            .iter()
            .map(|e| match e.attempt {
                Some(a) => format!("{} ({a})", e.outcome),
                None => e.outcome.clone(),
            })
            .collect();
        story.sort();
        row.histories.insert(story.join(", "));
        // What each host asked of Redis on a healthy tick.
        if let (Healthy, Some(d)) = (kind, done.first()) {
            for h in &c.hosts {
                let ip = net.addr(h.name);
                let mut by: BTreeMap<String, usize> = BTreeMap::new();
                for (_, _, cmd) in monitor.iter().filter(|(t, a, _)| *a == ip && at(*t)) {
                    *by.entry(cmd.clone()).or_default() += 1;
                }
                let n = by.values().sum();
                if h.name == d.host {
                    winner.push((n, by));
                } else {
                    standby.push((n, by));
                }
            }
        }
    }

    // Cron's mail and busybox crond's output, by tick.
    let mut warns: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    for (host, line, sent) in &seen.output {
        let Some(t) = line_time(line).or(*sent) else {
            problems.push(format!("{host} printed a line without a time: {line:?}"));
            continue;
        };
        let tick = tick_at(t);
        let Some(i) = sched.ticks.iter().position(|m| *m == tick) else {
            continue;
        };
        let kind = fault_of(c, i);
        let f = injected(tick);
        if line.contains(TAKEOVER) && f.is_some_and(|f| f.host != *host) {
            warns.entry(tick).or_default().push(host.clone());
            rows.get_mut(&kind).unwrap().takeover_warns += 1;
        } else if f.is_some_and(|f| f.host == *host) {
            rows.get_mut(&kind).unwrap().own_lines.insert(gist(line));
        } else {
            problems.push(format!(
                "tick {} ({kind:?}): {host} printed (or cron mailed) {line:?}",
                hhmm(tick)
            ));
        }
    }
    for f in &seen.injected {
        let n = warns.get(&f.tick).map_or(0, Vec::len);
        if n != 1 {
            problems.push(format!(
                "tick {} ({:?}): {n} takeover WARN lines in the mail and output (one expected)",
                hhmm(f.tick),
                f.kind
            ));
        }
    }
    if !problems.is_empty() {
        problems.push(format!("the job log:\n{text}"));
        problems.push(format!("the history:\n{history:#?}"));
        problems.push(format!("the faults:\n{:#?}", seen.injected));
    }
    Checked {
        rows,
        winner,
        standby,
        problems,
    }
}

// ---------------------------------------------------------------------------------------------
// The report.

fn seconds(v: &[f64]) -> String {
    if v.is_empty() {
        return "—".into();
    }
    let mut v = v.to_vec();
    let max = v.iter().copied().fold(f64::MIN, f64::max);
    format!("{:.2} / {:.2} s", median(&mut v), max)
}

/// Seconds as `median / max ms`.
fn millis(v: &[f64]) -> String {
    if v.is_empty() {
        return "—".into();
    }
    let mut ms: Vec<f64> = v.iter().map(|s| s * 1000.0).collect();
    let max = ms.iter().copied().fold(f64::MIN, f64::max);
    format!("{:.0} / {max:.0} ms", median(&mut ms))
}

fn requests(v: &[(usize, BTreeMap<String, usize>)]) -> String {
    if v.is_empty() {
        return "—".into();
    }
    let mut n: Vec<f64> = v.iter().map(|(n, _)| *n as f64).collect();
    let (min, max) = (
        n.iter().copied().fold(f64::MAX, f64::min),
        n.iter().copied().fold(f64::MIN, f64::max),
    );
    let mut all: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, by) in v {
        for (cmd, k) in by {
            *all.entry(cmd).or_default() += k;
        }
    }
    let each: Vec<String> = all
        .iter()
        .map(|(cmd, k)| format!("{cmd} {:.1}", *k as f64 / v.len() as f64))
        .collect();
    format!(
        "median {} (min {min}, max {max}; on average {})",
        median(&mut n),
        each.join(", ")
    )
}

fn table(caption: &str, rows: &BTreeMap<Fault, KindRow>) -> String {
    let mut t = format!(
        "{caption}\n\n| fault injected on the host that took the tick, ~{FAULT_AFTER} s into its job | \
         ticks | takeovers | ticks lost | duplicates | overlaps (longest) | fault → takeover's job \
         start, median / max (TTL {TTL}) | `lockrun history` of the tick | the faulted host's own \
         lines (mailed) |\n|---|---|---|---|---|---|---|---|---|\n"
    );
    for (kind, r) in rows {
        let overlaps = match r
            .overlaps
            .iter()
            .copied()
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))))
        {
            None => "0".to_string(),
            Some(m) => format!("{} ({:.1} ms)", r.overlaps.len(), m * 1000.0),
        };
        let mut own: Vec<String> = r.own_lines.iter().map(|l| format!("`{l}`")).collect();
        if own.is_empty() {
            own.push("none".into());
        }
        t += &format!(
            "| {} | {} | {} | {} | {} | {overlaps} | {} | {} | {} |\n",
            kind.label(),
            r.ticks,
            r.takeovers,
            r.lost,
            r.duplicates,
            seconds(&r.to_takeover),
            r.histories.iter().cloned().collect::<Vec<_>>().join("; "),
            own.join(", ")
        );
    }
    t
}

#[test]
fn cron_standby_ticks_survive_their_hosts() {
    let tools = preflight();
    let minutes: i64 = std::env::var("LOCKRUN_CRON_MINUTES")
        .map(|m| {
            m.parse()
                .ok()
                .filter(|m| *m >= 1)
                .unwrap_or_else(|| panic!("LOCKRUN_CRON_MINUTES={m}: a number of minutes, >= 1"))
        })
        .unwrap_or(DEFAULT_MINUTES as i64);
    let heading = "### Standby hosts: a tick survives the host that took it";
    let guide =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/guide.md"))
            .expect("docs/guide.md");
    let block = crontab_block(&guide, "docs/guide.md", heading).unwrap_or_else(|e| panic!("{e}"));
    let line = block
        .lines()
        .find(|l| l.starts_with("* "))
        .unwrap_or("?")
        .to_string();
    assert!(
        line.contains(" --standby ") && line.contains(" --every 1m "),
        "the guide's standby line has no --standby or --every 1m: {line}"
    );
    let mut names: Vec<&str> = CONFIGS
        .iter()
        .flat_map(|c| c.hosts.map(|h| h.name))
        .collect();
    names.push("redis");
    let net = Net::new(&names);
    let redis = net.redis("redis", PORT, "");
    let url = format!("redis://{}", redis.addr());
    let setups: Vec<Setup> = CONFIGS.iter().map(|c| setup(c, &block, &url)).collect();
    let monitor = Monitor::start(&redis.socket);

    // The first tick at least 12 s after the last daemon starts (the +3 s host fires at the
    // real :58); stopping at :40 of the last tick leaves its takeover (the fault at :06, the
    // lease out by :12, 21 s of job) time to end, and the daemons time to stop before the next
    // tick's first fire.
    let start = now().ceil() + 1.0;
    let first = ((start + 1.0 + 12.0 + 3.0) / 60.0).ceil() as i64;
    let sched = Schedule {
        start,
        ready_by: start + 6.0,
        ticks: (first..first + minutes).collect(),
        stop_at: ((first + minutes - 1) * 60) as f64 + 40.0,
    };
    eprintln!(
        "cron standby test: {} configurations of 3 daemons, ticks {} to {}, stopping at {:.0} \
         ({:.0} s from now); line: {line}, with --ttl {TTL}",
        CONFIGS.len(),
        hhmm(first),
        hhmm(first + minutes - 1),
        sched.stop_at,
        sched.stop_at - now(),
    );
    let observed: Vec<Observed> = thread::scope(|s| {
        let handles: Vec<_> = setups
            .iter()
            .enumerate()
            .map(|(i, setup)| {
                let (sched, tools, net, socket) = (&sched, &tools, &net, &redis.socket);
                s.spawn(move || run_config(setup, i, sched, tools, net, socket))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|e| {
                    let why = e
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    Observed {
                        injected: Vec::new(),
                        history: HistoryLog::default(),
                        output: Vec::new(),
                        problems: vec![format!("the configuration's thread panicked: {why}")],
                    }
                })
            })
            .collect()
    });
    let seen = monitor.stop();
    let checked: Vec<Checked> = setups
        .iter()
        .zip(observed)
        .map(|(setup, o)| check(setup, &sched, o, &seen, &net))
        .collect();

    let mut rows: BTreeMap<Fault, KindRow> = BTreeMap::new();
    let (mut winner, mut standby) = (Vec::new(), Vec::new());
    for c in &checked {
        for (kind, r) in &c.rows {
            let row = rows.entry(*kind).or_default();
            row.ticks += r.ticks;
            row.takeovers += r.takeovers;
            row.lost += r.lost;
            row.duplicates += r.duplicates;
            row.overlaps.extend(&r.overlaps);
            row.to_takeover.extend(&r.to_takeover);
            row.after_thaw.extend(&r.after_thaw);
            row.steps_after_thaw += r.steps_after_thaw;
            row.leader_after.extend(&r.leader_after);
            row.job_after.extend(&r.job_after);
            row.histories.extend(r.histories.iter().cloned());
            row.own_lines.extend(r.own_lines.iter().cloned());
            row.takeover_warns += r.takeover_warns;
        }
        winner.extend(c.winner.iter().cloned());
        standby.extend(c.standby.iter().cloned());
    }
    let hosts = CONFIGS
        .iter()
        .map(|c| {
            let h: Vec<String> = c
                .hosts
                .iter()
                .map(|h| {
                    let skew = if h.skew != 0 {
                        format!(" {:+} s", h.skew)
                    } else {
                        String::new()
                    };
                    format!("{}{skew}, {}", h.daemon.label(), h.channel.label())
                })
                .collect();
            format!("{}: {}", c.label, h.join("; "))
        })
        .collect::<Vec<_>>()
        .join(" — ");
    let ticks: usize = rows.values().map(|r| r.ticks).sum();
    let caption = format!(
        "Real cron daemons, Debian cron and busybox crond ({}), each host in its own mount, UTS, \
         PID and network namespace; two configurations of three hosts at once against one Redis, \
         {ticks} ticks in all ({hosts}). Crontab line: the guide's `{line}` with `--ttl {TTL}`; \
         the job: {STEPS} steps of `sleep 1`.",
        tools.busybox_version
    );
    let mut report = table(&caption, &rows);
    let frozen = rows.get(&Frozen);
    let orphaned = rows.get(&LockrunKilled);
    report += &format!(
        "\nA frozen host's job, thawed, was gone {} (median / max, at most: looks every 10 ms) \
         after the thaw, stopped by its lockrun, and did {} step(s) in that time. A job whose \
         lockrun alone was SIGKILLed: its shell was found dead {} after the kill, its last \
         process (the `sleep 1` the shell left in its group) last seen alive {} after the \
         kill. Takeover WARN lines mailed or printed: {} for {} takeovers. Requests to Redis on \
         a healthy tick (MONITOR, by host): the host that ran the job {}; each standby {}.\n",
        millis(frozen.map_or(&[], |r| &r.after_thaw)),
        frozen.map_or(0, |r| r.steps_after_thaw),
        millis(orphaned.map_or(&[], |r| &r.leader_after)),
        millis(orphaned.map_or(&[], |r| &r.job_after)),
        rows.values().map(|r| r.takeover_warns).sum::<usize>(),
        rows.values().map(|r| r.takeovers).sum::<usize>(),
        requests(&winner),
        requests(&standby),
    );
    eprintln!("\n{report}");
    if let Ok(path) = std::env::var("LOCKRUN_CRON_STANDBY_REPORT") {
        std::fs::write(&path, &report)
            .unwrap_or_else(|e| panic!("LOCKRUN_CRON_STANDBY_REPORT={path}: {e}"));
    }
    let failed: Vec<String> = CONFIGS
        .iter()
        .zip(&checked)
        .filter(|(_, c)| !c.problems.is_empty())
        .map(|(cfg, c)| format!("== {} ({}):\n{}", cfg.label, cfg.key, c.problems.join("\n")))
        .collect();
    assert!(
        failed.is_empty(),
        "the standby cron test found problems:\n{}",
        failed.join("\n\n")
    );
    drop(redis);
}

// ---------------------------------------------------------------------------------------------
// The harness's pure parts.

#[test]
fn cron_standby_unit_job_log() {
    let log = "start a1 10 100.0\nstep a1 10 101.0\nstart a2 12 111.0\nstep a2 12 112.0\n\
               end a2 12 131.0\n";
    let runs = parse_runs(log).unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0].steps, [101.0]);
    assert_eq!(runs[0].end, None);
    assert_eq!(runs[1].end, Some(131.0));
    for bad in [
        "step a1 10 1.0\n",
        "start a1 x 1\n",
        "start a1 1 1\nstart a1 1 2\n",
        "x\n",
    ] {
        assert!(parse_runs(bad).is_err(), "{bad}");
    }
}

#[test]
fn cron_standby_unit_times() {
    // 12:30 is tick 750: from 12:29:55 to 12:30:55.
    let m = 750.0 * 60.0;
    for t in [m - 5.0, m - 2.0, m + 54.9] {
        assert_eq!(tick_at(t), 750, "{t}");
    }
    assert_eq!(tick_at(m - 5.1), 749);
    assert_eq!(tick_at(m + 55.0), 751);
    assert_eq!(
        line_time("2026-11-27T12:32:00.837489Z  WARN x key=y"),
        Some(1795782720.837489)
    );
    assert_eq!(line_time("1970-01-01T00:00:01Z x"), Some(1.0));
    assert_eq!(line_time("Killed"), None);
    assert_eq!(
        gist("2026-11-27T12:32:00.837489Z  WARN the host did not; here key=k holder=\"h\""),
        "WARN the host did not; here"
    );
    assert_eq!(overlap((0.0, 10.0), (5.0, 20.0)), 5.0);
    assert_eq!(overlap((0.0, 10.0), (10.0, 20.0)), 0.0);
    // Frozen from 5 to 15: live 0–5 and 15–16.
    assert_eq!(
        live(0.0, 16.0, Some((5.0, 15.0))),
        [(0.0, 5.0), (15.0, 16.0)]
    );
    assert_eq!(live(0.0, 4.0, Some((5.0, 15.0))), [(0.0, 4.0)]);
}

#[test]
fn cron_standby_unit_rotation() {
    // Every fault once in the rotation, and at the default scale in one configuration or the
    // other; never the same fault in both configurations in the same minute.
    let kinds: BTreeSet<Fault> = ROTATION.iter().copied().collect();
    assert_eq!(kinds.len(), ROTATION.len());
    let seen: BTreeSet<Fault> = CONFIGS
        .iter()
        .flat_map(|c| (0..DEFAULT_MINUTES).map(move |i| fault_of(c, i)))
        .collect();
    assert_eq!(seen, kinds);
    for i in 0..ROTATION.len() {
        assert_ne!(fault_of(&CONFIGS[0], i), fault_of(&CONFIGS[1], i), "{i}");
    }
}

#[test]
fn cron_standby_unit_monitor_lines() {
    assert_eq!(
        parse_monitor("+1764258000.123456 [0 10.77.0.2:45678] \"EVALSHA\" \"abc\" \"3\""),
        Some((1764258000.123456, "10.77.0.2".into(), "EVALSHA".into()))
    );
    assert_eq!(parse_monitor("+1764258000.1 [0 lua] \"SET\" \"k\""), None);
    assert_eq!(parse_monitor("+OK"), None);
}

#[test]
fn cron_standby_unit_guide_block() {
    let guide =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/guide.md"))
            .unwrap();
    let block = crontab_block(
        &guide,
        "docs/guide.md",
        "### Standby hosts: a tick survives the host that took it",
    )
    .unwrap();
    assert!(
        block.contains("--standby") && block.contains(README_KEY),
        "{block}"
    );
    let c = setup(&CONFIGS[0], &block, "redis://10.77.0.7:27500");
    let line = c.crontab.lines().find(|l| l.starts_with("* ")).unwrap();
    assert!(
        line.contains("-r redis://10.77.0.7:27500 ")
            && line.contains(&format!(" --ttl {TTL} cron-standby-a -- /")),
        "{line}"
    );
    // A section ends at the next heading of its level or above.
    let doc = "## A\n### B\ntext\n### C\n```cron\nx\n```\n";
    assert!(crontab_block(doc, "d", "### B").is_err());
    assert_eq!(crontab_block(doc, "d", "### C").unwrap(), "x\n");
    assert_eq!(crontab_block(doc, "d", "## A").unwrap(), "x\n");
}
