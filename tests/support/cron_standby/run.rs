//! Driving one configuration: its files, its daemons started through the schedule, and each
//! tick's fault injected on the host that took the tick, with what the test saw of it.

use super::{fault_of, job_script, parse_runs, tick_at, Config, Fault, Run, THAW_AFTER, TTL};
use crate::support::cron::*;
use crate::support::netns::Net;
use crate::support::{kill, pgrp_and_state, PATIENCE};
use std::path::{Path, PathBuf};
use std::thread;
use std::time::Duration;
use Fault::*;

/// Where in a second each configuration's daemons start, as in cron.rs.
const FRACTIONS: [f64; 3] = [0.05, 0.45, 0.85];

/// What the test did to a tick's host, and saw of it.
#[derive(Clone, Debug)]
pub struct Injected {
    pub tick: i64,
    pub kind: Fault,
    pub host: String,
    pub fence: u64,
    /// When the fault came (real clock).
    pub at: f64,
    /// When the host was thawed or rejoined.
    pub restored: Option<f64>,
    /// The job's end, as the test can tell it: after a SIGKILL to its group the instant of the
    /// kill (no process of it runs again), otherwise the last look (every 10 ms) that found a
    /// process of it alive, so that an overlap found is certain.
    pub died: Option<f64>,
    /// The first look that found none alive: `died` is within this of the real end.
    pub gone: Option<f64>,
    /// The first look that found the job's leader (lockrun's child, the job's shell) dead: with
    /// lockrun alone killed, the rest of its group (a `sleep 1`) may outlive it.
    pub leader_gone: Option<f64>,
}

/// One configuration's files.
pub struct Setup<'a> {
    pub config: &'a Config,
    pub dir: tempfile::TempDir,
    pub crontab: String,
    pub job_log: PathBuf,
    pub maildir: PathBuf,
    pub layer: PathBuf,
}

pub fn setup<'a>(config: &'a Config, block: &str, url: &str) -> Setup<'a> {
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

/// When the daemons start, are ready by, which ticks are observed, when everything stops.
pub struct Schedule {
    pub start: f64,
    pub ready_by: f64,
    pub ticks: Vec<i64>,
    pub stop_at: f64,
}

impl Schedule {
    /// `minutes` ticks from now. The first tick at least 12 s after the last daemon starts (the
    /// +3 s host fires at the real :58); stopping at :40 of the last tick leaves its takeover
    /// (the fault at :06, the lease out by :12, 21 s of job) time to end, and the daemons time
    /// to stop before the next tick's first fire.
    pub fn new(minutes: i64) -> Schedule {
        let start = now().ceil() + 1.0;
        let first = ((start + 1.0 + 12.0 + 3.0) / 60.0).ceil() as i64;
        Schedule {
            start,
            ready_by: start + 6.0,
            ticks: (first..first + minutes).collect(),
            stop_at: ((first + minutes - 1) * 60) as f64 + 40.0,
        }
    }
}

/// What a configuration's thread brings back.
pub struct Observed {
    pub injected: Vec<Injected>,
    pub history: HistoryLog,
    /// Each host's lines that are no log line of its daemon: busybox crond's output, and the
    /// bodies of Debian cron's mails, with the time the mail was sent (for a line of the shell's
    /// own, such as dash's `Killed`, which has no time of its own).
    pub output: Vec<(String, String, Option<f64>)>,
    pub problems: Vec<String>,
}

/// Runs every configuration at once, each on a thread of its own; a thread that panicked
/// brings back its panic as a problem.
pub fn run_all(
    setups: &[Setup],
    sched: &Schedule,
    tools: &Tools,
    net: &Net,
    socket: &Path,
) -> Vec<Observed> {
    thread::scope(|s| {
        let handles: Vec<_> = setups
            .iter()
            .enumerate()
            .map(|(i, setup)| s.spawn(move || run_config(setup, i, sched, tools, net, socket)))
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
    })
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
        problems.extend(d.stop(PATIENCE));
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
    let (lockrun, pgid) = d.lockrun_and_job()?;
    let mut stopped = Vec::new();
    let at = now();
    match kind {
        HostDied => {
            kill(lockrun, libc::SIGKILL);
            // SAFETY: kill(2) of a process group of the test's host.
            unsafe { libc::kill(-(pgid as i32), libc::SIGKILL) };
        }
        Frozen => stopped = d.freeze(),
        JobKilled => unsafe {
            // SAFETY: as above.
            libc::kill(-(pgid as i32), libc::SIGKILL);
        },
        CutOff => net.partition(&[&[d.host.as_str()], &["redis"]]),
        // lockrun alone: its child gets SIGTERM from the parent-death signal it set.
        LockrunKilled => kill(lockrun, libc::SIGKILL),
        Stopped => kill(lockrun, libc::SIGTERM),
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
                    kill(*p, libc::SIGCONT);
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
            if f.leader_gone.is_none() && pgrp_and_state(pgid).is_none_or(|(_, state)| state == 'Z')
            {
                f.leader_gone = Some(looked);
            }
            if d.group_alive(pgid) {
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
