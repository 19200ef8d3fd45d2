//! Every stop ends: the race between the group's SIGKILL and the adoption of a process in a
//! session of its own. The job `sh -c 'trap "" TERM; setsid sh -c "trap \"\" TERM; sleep 60" &
//! sleep 60'` ignores SIGTERM, and so does the child it put in a session of its own; when the
//! SIGKILL after `--kill-after` ends the shell, that child is re-parented to lockrun (PID 1 or a
//! subreaper) only then, after the SIGKILL was sent. It must get one too: each run ends within
//! the stop + `--kill-after` + a small bound, with the key released.
//!
//! Shapes, each run [`RUNS`] times (the race is the kernel's, so many times, some at once):
//! lockrun as PID 1 of a PID namespace, stopped by SIGTERM and by `--time-limit`; lockrun with
//! `--subreaper` below tini and below dumb-init as PID 1 (`docker run --init`), stopped by a
//! SIGTERM to the init, which passes it on, and by `--time-limit`. Root only: PID namespaces.

use crate::support::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How many runs of each shape.
const RUNS: usize = 50;
/// How many runs of a shape at once.
const AT_ONCE: usize = 10;
/// `--kill-after`, and `--time-limit` where a run uses it.
const KILL_AFTER: Duration = Duration::from_millis(300);
/// From the stop to lockrun's exit, past `--kill-after`: process starts and exits on a busy
/// 2-core machine. A run that misses the orphan lasts until its `sleep 60` ends.
const BOUND: Duration = Duration::from_secs(5);

/// What runs as PID 1 of the namespace.
#[derive(Clone, Copy, Debug)]
enum Pid1 {
    /// lockrun itself.
    Lockrun,
    /// tini, lockrun (`--subreaper`) its child.
    Tini,
    /// dumb-init, lockrun (`--subreaper`) its child.
    DumbInit,
}

/// What stops the run.
#[derive(Clone, Copy, Debug)]
enum Stop {
    /// SIGTERM to PID 1 of the namespace (an init passes it on to lockrun).
    Sigterm,
    /// `--time-limit`, no signal at all.
    TimeLimit,
}

fn require_root() {
    // SAFETY: geteuid(2) has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    assert!(
        root,
        "the stop-race tests make PID namespaces: that takes root. Run them as root (CI does), \
         or leave them out with `--skip stop_races`"
    );
}

fn init_binary(name: &str) -> PathBuf {
    let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join(name))
        .find(|p| p.is_file());
    found.unwrap_or_else(|| {
        panic!("{name} is not installed: bash tests/ensure-inits.sh installs tini and dumb-init")
    })
}

/// One run: `unshare` holding the namespace, the job's files.
struct Run {
    child: Child,
    key: String,
    err: PathBuf,
    /// The job's child in a session of its own writes its pid here (as the namespace numbers
    /// it): the orphan existed, or the run proves nothing.
    orphan: PathBuf,
}

impl Run {
    fn start(init: Pid1, stop: Stop, redis: &Server, dir: &Path, n: usize) -> Run {
        let key = format!("race-{init:?}-{stop:?}-{n}");
        let err = dir.join(format!("{n}.err"));
        let orphan = dir.join(format!("{n}.orphan"));
        let mut cmd = Command::new("unshare");
        cmd.args(["--pid", "--fork", "--kill-child", "--mount-proc"]);
        match init {
            Pid1::Lockrun => {}
            Pid1::Tini => {
                cmd.arg(init_binary("tini")).arg("--");
            }
            Pid1::DumbInit => {
                cmd.arg(init_binary("dumb-init"));
            }
        }
        cmd.arg(lockrun_bin()).arg("-r").arg(redis.url());
        if !matches!(init, Pid1::Lockrun) {
            cmd.arg("--subreaper");
        }
        let ms = format!("{}ms", KILL_AFTER.as_millis());
        cmd.args(["--kill-after", &ms]);
        if let Stop::TimeLimit = stop {
            cmd.args(["--time-limit", &ms]);
        }
        let job = format!(
            r#"trap "" TERM; setsid sh -c 'trap "" TERM; echo $$ > {}; sleep 60' & sleep 60"#,
            orphan.display()
        );
        cmd.args([key.as_str(), "--", "sh", "-c", &job]);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err).unwrap());
        Run {
            child: cmd.spawn().expect("spawn unshare"),
            key,
            err,
            orphan,
        }
    }

    fn stderr(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.err).unwrap_or_default()).into_owned()
    }

    /// PID 1 of the namespace, as the test sees it.
    fn init_pid(&self) -> u32 {
        let unshare = self.child.id();
        let mut found = None;
        eventually("PID 1 of the namespace to run", || {
            found = descendants(unshare).first().copied();
            found.is_some()
        });
        found.unwrap()
    }
}

/// Runs one shape [`RUNS`] times, [`AT_ONCE`] at a time, and fails if any run did not end in
/// time with its exit code, a SIGKILL for its job and the key released.
fn race(init: Pid1, stop: Stop) {
    require_root();
    let redis = Server::start_tcp();
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    let mut slowest = Duration::ZERO;
    for batch in 0..RUNS.div_ceil(AT_ONCE) {
        let runs: Vec<Run> = (0..AT_ONCE)
            .map(|i| batch * AT_ONCE + i)
            .filter(|&n| n < RUNS)
            .map(|n| Run::start(init, stop, &redis, dir.path(), n))
            .collect();
        // Every run's orphan is there before the stop: the race is what follows it.
        for run in &runs {
            eventually("the job's orphan to start", || run.orphan.is_file());
        }
        let stopped = Instant::now();
        if let Stop::Sigterm = stop {
            for run in &runs {
                kill(run.init_pid(), libc::SIGTERM);
            }
        }
        // A time limit counts from the job's start, a little before `stopped`.
        let deadline = stopped + KILL_AFTER * 2 + BOUND;
        for mut run in runs {
            let left = deadline.saturating_duration_since(Instant::now());
            let status = wait_timeout(&mut run.child, left);
            let took = stopped.elapsed();
            let Some(status) = status else {
                let _ = run.child.kill();
                let _ = run.child.wait();
                failures.push(format!(
                    "{}: still running {took:?} after the stop (--kill-after {KILL_AFTER:?}):\n{}",
                    run.key,
                    run.stderr()
                ));
                continue;
            };
            slowest = slowest.max(took);
            // After a stop signal lockrun exits as the job ended, SIGKILLed (guide.md's
            // signals table); the time limit is 124 whatever ended the job (as GNU timeout).
            let want = match stop {
                Stop::Sigterm => 137,
                Stop::TimeLimit => 124,
            };
            let err = run.stderr();
            if status.code() != Some(want) {
                failures.push(format!("{}: exit {status}, not {want}:\n{err}", run.key));
            } else if redis.exists(&run.key) {
                failures.push(format!("{}: the key is still held:\n{err}", run.key));
            } else if !err.contains("sending SIGKILL") {
                failures.push(format!("{}: the job never needed SIGKILL:\n{err}", run.key));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{init:?}, {stop:?}: {} of {RUNS} runs failed; the first:\n{}",
        failures.len(),
        failures[0]
    );
    eprintln!("{init:?}, {stop:?}: {RUNS} runs, the slowest ended {slowest:?} after the stop");
}

#[test]
fn stop_races_as_pid_1_a_sigterm_ends_the_run_and_the_orphan() {
    race(Pid1::Lockrun, Stop::Sigterm);
}

#[test]
fn stop_races_as_pid_1_the_time_limit_ends_the_run_and_the_orphan() {
    race(Pid1::Lockrun, Stop::TimeLimit);
}

#[test]
fn stop_races_under_tini_a_sigterm_ends_the_run_and_the_orphan() {
    race(Pid1::Tini, Stop::Sigterm);
}

#[test]
fn stop_races_under_tini_the_time_limit_ends_the_run_and_the_orphan() {
    race(Pid1::Tini, Stop::TimeLimit);
}

#[test]
fn stop_races_under_dumb_init_a_sigterm_ends_the_run_and_the_orphan() {
    race(Pid1::DumbInit, Stop::Sigterm);
}

#[test]
fn stop_races_under_dumb_init_the_time_limit_ends_the_run_and_the_orphan() {
    race(Pid1::DumbInit, Stop::TimeLimit);
}
