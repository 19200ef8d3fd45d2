//! `--time-limit`: a job that runs too long is stopped (SIGTERM to its group, SIGKILL after
//! `--kill-after`), the lock is released only once every process of it is gone, and lockrun
//! exits 124 with the run recorded as `timeout`; a job under the limit keeps its own code; the
//! limit counts from the command's start (a `--wait` is not part of it); a timed-out `--every`
//! run keeps its tick; a nested lockrun's limit stops its own command.

use crate::support::*;
use std::process::Stdio;
use std::thread;
use std::time::{Duration, Instant};

/// `lockrun history KEY --json`: each run's (outcome, exit code), newest first.
fn runs(redis: &Server, key: &str) -> Vec<(String, Option<i64>)> {
    history(redis, key)
        .iter()
        .map(|r| {
            (
                r["outcome"].as_str().unwrap().to_string(),
                r["exit_code"].as_i64(),
            )
        })
        .collect()
}

fn entry(outcome: &str, code: i64) -> (String, Option<i64>) {
    (outcome.to_string(), Some(code))
}

/// Whether process `pid` is gone: no such process, or a zombie (it runs nothing).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

#[test]
fn time_limit_stops_a_job_that_runs_too_long_and_exits_124() {
    let redis = Server::start();
    let metrics = redis.dir.path().join("limited.prom");
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["--time-limit", "1s", "--metrics-file"])
        .arg(&metrics)
        .args([
            "limited",
            "--",
            "sh",
            "-c",
            "echo started; sleep 30; echo natural-end",
        ]);
    let start = Instant::now();
    let out = run(cmd);
    let took = start.elapsed();
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(124), "{err}");
    assert!(
        took >= Duration::from_millis(950) && took < Duration::from_secs(10),
        "stopped at the limit (1 s), not at the job's end (30 s): {took:?}"
    );
    assert_eq!(stdout_of(&out), "started\n", "{err}");
    let said: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("time limit of 1s reached; stopping the job"))
        .collect();
    assert_eq!(said.len(), 1, "one line says why: {err}");
    assert!(said[0].contains(" WARN "), "{err}");
    // `sleep` died of the SIGTERM: no SIGKILL was needed.
    assert!(!err.contains("SIGKILL"), "{err}");
    assert!(!redis.exists("limited"), "released");
    assert_eq!(runs(&redis, "limited"), [entry("timeout", 124)]);
    let text = std::fs::read_to_string(&metrics).unwrap();
    for line in [
        "lockrun_last_run_outcome{key=\"limited\",outcome=\"timeout\"} 1",
        "lockrun_last_run_outcome{key=\"limited\",outcome=\"ran\"} 0",
        "lockrun_last_run_exit_code{key=\"limited\"} 124",
    ] {
        assert!(text.lines().any(|l| l == line), "{line}: {text}");
    }
}

/// The whole group gets the SIGTERM; a member that ignores it keeps the lock held (and
/// renewed) until SIGKILL after `--kill-after`, and the key goes only once it is gone.
#[test]
fn time_limit_releases_the_key_only_after_a_child_ignoring_sigterm_is_killed() {
    let redis = Server::start();
    let dir = redis.dir.path();
    let pid_file = dir.join("stubborn.pid");
    let stubborn = dir.join("stubborn.sh");
    std::fs::write(
        &stubborn,
        format!(
            "trap '' TERM; echo $$ > '{}.tmp'; mv '{0}.tmp' '{0}'; while :; do sleep 0.05; done\n",
            pid_file.display()
        ),
    )
    .unwrap();
    let mut cmd = Lockrun::on(&redis);
    // TTL 1.5 s: renewals every 500 ms keep the lock through the 2 s of --kill-after.
    cmd.args([
        "-t",
        "1500ms",
        "--time-limit",
        "1s",
        "--kill-after",
        "2s",
        "stubborn",
        "--",
        "sh",
        "-c",
    ])
    .arg(format!("sh '{}' & wait", stubborn.display()))
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = cmd.spawn().unwrap();
    let mut lines = Lines::of(&mut child);
    wait_for_file_of(&mut child, &pid_file);
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    lines.wait_for("time limit of 1s reached");
    let value: String = redis.cmd(&["GET", "stubborn"]);
    let mut released = None;
    while start.elapsed() < PATIENCE {
        // The key first: a key gone while the member still runs is a release too early.
        let now: Option<String> = redis.cmd(&["GET", "stubborn"]);
        match now {
            None => {
                assert!(gone(pid), "the key was released while {pid} still ran");
                released = Some(start.elapsed());
                break;
            }
            Some(v) => assert_eq!(v, value, "held by the same holder meanwhile"),
        }
        thread::sleep(Duration::from_millis(20));
    }
    let released = released.expect("the key is released");
    let status = wait_timeout(&mut child, PATIENCE).expect("lockrun ends");
    let err = lines.rest();
    assert_eq!(status.code(), Some(124), "{err}");
    assert!(
        released >= Duration::from_millis(2900),
        "released after the limit (1 s) and --kill-after (2 s): {released:?}\n{err}"
    );
    assert!(
        err.contains("job still running after SIGTERM; sending SIGKILL"),
        "{err}"
    );
    assert!(gone(pid));
    assert_eq!(runs(&redis, "stubborn"), [entry("timeout", 124)]);
}

#[test]
fn time_limit_a_job_that_finishes_under_it_exits_with_its_own_code() {
    let redis = Server::start();
    let mut cmd = Lockrun::on(&redis);
    cmd.args([
        "--time-limit",
        "5s",
        "under",
        "--",
        "sh",
        "-c",
        "sleep 0.3; exit 3",
    ]);
    let out = run(cmd);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(!err.contains("time limit"), "{err}");
    assert_eq!(runs(&redis, "under"), [entry("ran", 3)]);
}

/// A timed-out run ran: with `--every` its tick's hold stays, so no other host runs the job
/// again in the same tick.
#[test]
fn time_limit_with_every_a_timed_out_run_keeps_its_tick() {
    let redis = Server::start();
    let line = |command: &str| {
        let mut cmd = Lockrun::on(&redis);
        cmd.args(["--every", "1m", "--time-limit", "500ms", "tick", "--"])
            .args(command.split(' '));
        run(cmd)
    };
    let out = line("sleep 30");
    assert_eq!(out.status.code(), Some(124), "{}", stderr_of(&out));
    let left: i64 = redis.cmd(&["PTTL", "tick"]);
    assert!(
        left > 40_000 && left <= 54_000,
        "the key is kept for the rest of the tick (54 s from the acquire): {left} ms"
    );
    // Another host firing in the same tick skips it.
    let out = line("true");
    assert_eq!(out.status.code(), Some(75), "{}", stderr_of(&out));
    assert_eq!(
        runs(&redis, "tick")
            .into_iter()
            .map(|(o, _)| o)
            .collect::<Vec<_>>(),
        ["skipped", "timeout"]
    );
}

/// The limit is the job's run time: a run that waited longer than the limit for the lock
/// still gets the whole limit for its command.
#[test]
fn time_limit_does_not_count_the_wait() {
    let redis = Server::start();
    let dir = redis.dir.path();
    let go = dir.join("go");
    let mut holder = Lockrun::on(&redis);
    holder
        .args(["queued", "--", "sh", "-c"])
        .arg(wait_for_go(&go));
    let mut holder = holder.background(dir, "holder");
    holder.until("the holder has the lock", || redis.exists("queued"));
    let mut waiter = Lockrun::on(&redis);
    waiter
        .args([
            "--wait",
            "30s",
            "--time-limit",
            "2s",
            "queued",
            "--",
            "sh",
            "-c",
            "sleep 0.5; exit 7",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let start = Instant::now();
    let mut waiter = waiter.spawn().unwrap();
    let mut lines = wait_for_line(&mut waiter, "redis lock already acquired; waiting");
    // Longer in the queue than the limit allows the job.
    thread::sleep(Duration::from_millis(2500));
    std::fs::write(&go, "").unwrap();
    assert_eq!(holder.finish().0, Some(0));
    let status = wait_timeout(&mut waiter, PATIENCE).expect("the waiter ends");
    let took = start.elapsed();
    let err = lines.rest();
    assert_eq!(status.code(), Some(7), "its own code, not 124: {err}");
    assert!(took >= Duration::from_secs(3), "it waited: {took:?}");
    assert!(!err.contains("time limit"), "{err}");
    assert_eq!(runs(&redis, "queued")[0], entry("ran", 7));
}

/// A nested lockrun of the same key runs reentrantly; its own limit stops its own command,
/// and the enclosing run sees its command exit 124.
#[test]
fn time_limit_applies_to_a_nested_run() {
    let redis = Server::start();
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["nested", "--"])
        .arg(lockrun_bin())
        .arg("-r")
        .arg(redis.url())
        .args(["--time-limit", "500ms", "nested", "--", "sleep", "30"]);
    let start = Instant::now();
    let out = run(cmd);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(124), "{err}");
    assert!(start.elapsed() < Duration::from_secs(10), "{err}");
    assert!(
        err.contains("redis lock already held by this job (reentrant)")
            && err.contains("time limit of 500ms reached"),
        "{err}"
    );
    // The outer run ran its command, which exited 124.
    assert_eq!(runs(&redis, "nested"), [entry("ran", 124)]);
}

/// A timed-out run whose release finds its key gone (deleted by `release --force` while the
/// job shut down) is lost, in the history as in the exit code's own record.
#[test]
fn time_limit_a_key_gone_at_release_makes_the_run_lost() {
    let redis = Server::start();
    let dir = redis.dir.path();
    let stopping = dir.join("stopping");
    let go = dir.join("go");
    let metrics = dir.join("gone.prom");
    // On SIGTERM the job says so, and ends (exit 0) only when the test lets it.
    let script = dir.join("gone.sh");
    std::fs::write(
        &script,
        format!(
            "stop() {{ touch '{}'; {}; exit 0; }}\ntrap stop TERM\nwhile :; do sleep 0.05; done\n",
            stopping.display(),
            wait_for_go(&go)
        ),
    )
    .unwrap();
    let mut cmd = Lockrun::on(&redis);
    cmd.args([
        "--time-limit",
        "500ms",
        "--kill-after",
        "20s",
        "--metrics-file",
    ])
    .arg(&metrics)
    .args(["gone", "--", "sh"])
    .arg(&script)
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut lines = Lines::of(&mut child);
    wait_for_file_of(&mut child, &stopping);
    let mut force = Lockrun::bare();
    force
        .args(["release", "--force", "-r"])
        .arg(redis.url())
        .arg("gone");
    assert_eq!(run(force).status.code(), Some(0));
    std::fs::write(&go, "").unwrap();
    let status = wait_timeout(&mut child, PATIENCE).expect("lockrun ends");
    let err = lines.rest();
    assert_eq!(status.code(), Some(124), "{err}");
    assert!(err.contains("ERROR redis lock lost"), "{err}");
    assert_eq!(
        runs(&redis, "gone"),
        [entry("lost", 124), ("released".to_string(), None)]
    );
    let text = std::fs::read_to_string(&metrics).unwrap();
    assert!(
        text.contains("lockrun_last_run_outcome{key=\"gone\",outcome=\"lost\"} 1"),
        "{text}"
    );
}

/// With `--on-lost continue` a job that lost its lock runs on, but not past its limit: 124,
/// and the run is lost (the lost lock is the one to hear about).
#[test]
fn time_limit_still_stops_a_job_that_runs_on_after_losing_its_lock() {
    let redis = Server::start();
    let mut cmd = Lockrun::on(&redis);
    cmd.args([
        "-t",
        "1500ms",
        "--on-lost",
        "continue",
        "--time-limit",
        "2s",
        "on-lost",
        "--",
        "sleep",
        "30",
    ])
    .stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = cmd.spawn().unwrap();
    let mut lines = wait_for_line(&mut child, "redis lock acquired");
    redis.cmd::<i64>(&["DEL", "on-lost"]);
    lines.wait_for("--on-lost continue: the command keeps running without the lock");
    let status = wait_timeout(&mut child, PATIENCE).expect("lockrun ends");
    let err = lines.rest();
    assert_eq!(status.code(), Some(124), "{err}");
    assert!(start.elapsed() < Duration::from_secs(10), "{err}");
    assert!(err.contains("time limit of 2s reached"), "{err}");
    assert_eq!(runs(&redis, "on-lost"), [entry("lost", 124)]);
}

/// `--time-limit` and `LOCKRUN_TIME_LIMIT`: 0, negative, empty on the line, garbage are usage
/// errors, one line each, and nothing is locked.
#[test]
fn time_limit_refuses_zero_negative_and_garbage() {
    let redis = Server::start();
    let marker = redis.dir.path().join("ran");
    let job = format!("touch '{}'", marker.display());
    for (value, says) in [
        ("0", "--time-limit must be more than 0"),
        ("0s", "--time-limit must be more than 0"),
        ("-1s", "invalid duration '-1s'"),
        ("10x", "invalid unit 'x'"),
        ("soon", "invalid duration 'soon'"),
        ("", "empty duration"),
    ] {
        for from_env in [false, true] {
            let mut cmd = Lockrun::on(&redis);
            if from_env {
                if value.is_empty() {
                    continue; // An empty variable counts as unset.
                }
                cmd.env("LOCKRUN_TIME_LIMIT", value);
            } else {
                cmd.args(["--time-limit", value]);
            }
            cmd.args(["refused", "--", "sh", "-c", &job]);
            let out = run(cmd);
            let err = stderr_of(&out);
            let case = format!("{value:?} (from the environment: {from_env})");
            assert_eq!(out.status.code(), Some(64), "{case}: {err}");
            assert_eq!(err.lines().count(), 1, "{case}: {err}");
            assert!(
                err.contains(" ERROR ") && err.contains("--time-limit") && err.contains(says),
                "{case}: {err}"
            );
            assert_eq!(
                err.contains("LOCKRUN_TIME_LIMIT"),
                from_env,
                "{case}: {err}"
            );
            assert!(!marker.exists(), "{case}: the command never ran");
            assert!(redis.keys().is_empty(), "{case}: {:?}", redis.keys());
        }
    }
}
