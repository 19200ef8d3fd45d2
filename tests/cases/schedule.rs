//! `--every`: a cron tick runs on exactly one host. The key is kept for most of the schedule
//! period, so hosts that fire a little later skip it, and is free again for the next tick; a
//! command that could not be started gives the tick back at once.

use crate::support::*;
use std::time::{Duration, Instant};

/// PTTL of `key` in ms (-2: no key).
fn pttl(redis: &Server, key: &str) -> i64 {
    redis.cmd(&["PTTL", key])
}

#[test]
fn every_keeps_the_tick_from_later_hosts_and_frees_it_for_the_next() {
    let redis = Server::start();
    // --every 3s: the hold is 3s less a second (the margin is a tenth, at least 1 s): 2 s.
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["-q", "-E", "0", "--every", "3s", "tick", "--", "true"]);
    let t0 = Instant::now();
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(stderr_of(&out), "", "-q: a run says nothing");
    let left = pttl(&redis, "tick");
    assert!(
        left > 2000 - t0.elapsed().as_millis() as i64 - 100 && left <= 2000,
        "kept for the rest of the 2 s hold: {left}"
    );
    // A host firing the same tick a little later skips it, silently with -q -E 0.
    let mut later = Lockrun::on(&redis);
    later.args([
        "-q",
        "-E",
        "0",
        "--every",
        "3s",
        "tick",
        "--",
        "echo",
        "ran-twice",
    ]);
    let out = run(later);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout_of(&out), "", "the tick did not run twice");
    assert_eq!(stderr_of(&out), "", "nothing for cron to mail");
    // The next tick finds it free: the hold ended before the period did.
    eventually("the hold to end", || !redis.exists("tick"));
    assert!(
        t0.elapsed() < Duration::from_secs(3),
        "free before the next tick"
    );
    let mut next = Lockrun::on(&redis);
    next.args([
        "-q", "-E", "0", "--every", "3s", "tick", "--", "echo", "next",
    ]);
    assert_eq!(stdout_of(&run(next)), "next\n");

    // The period is in the run's history entry.
    let mut history = Lockrun::on(&redis);
    history.args(["history", "--json", "tick"]);
    let out = run(history);
    let runs: serde_json::Value = serde_json::from_str(&stdout_of(&out)).unwrap();
    let ran: Vec<&serde_json::Value> = runs
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["outcome"] == "ran")
        .collect();
    assert_eq!(ran.len(), 2, "{runs}");
    assert!(ran.iter().all(|r| r["every_ms"] == 3000), "{runs}");
}

#[test]
fn a_job_longer_than_the_hold_is_released_when_it_ends() {
    let redis = Server::start();
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["--every", "2s", "long", "--", "sleep", "1.3"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert!(!redis.exists("long"), "the 1 s hold was over: deleted");
}

/// A host whose command is missing or not executable must not take the tick from a healthy
/// host that fires later: the key goes at once, whatever the hold.
#[test]
fn a_command_that_could_not_start_gives_the_tick_back() {
    let redis = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let not_executable = dir.path().join("report.sh");
    std::fs::write(&not_executable, "#!/bin/sh\necho hi\n").unwrap();
    for (hold, command, code) in [
        (["--min-hold", "30s"], "/nonexistent/report.sh", 127),
        (["--every", "1m"], "/nonexistent/report.sh", 127),
        (["--every", "1m"], not_executable.to_str().unwrap(), 126),
    ] {
        let mut cmd = Lockrun::on(&redis);
        cmd.args(hold).args(["broken-host", "--", command]);
        let out = run(cmd);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{hold:?}: {}",
            stderr_of(&out)
        );
        assert!(
            !redis.exists("broken-host"),
            "{hold:?} {command}: the tick was given back (PTTL {})",
            pttl(&redis, "broken-host")
        );
        let mut healthy = Lockrun::on(&redis);
        healthy
            .args(hold)
            .args(["broken-host", "--", "echo", "ran"]);
        let out = run(healthy);
        assert_eq!(stdout_of(&out), "ran\n", "{}", stderr_of(&out));
        redis.cmd::<()>(&["DEL", "broken-host"]);
    }
}

#[test]
fn every_refuses_a_wait_and_a_hold_that_reaches_the_next_tick() {
    let redis = Server::start();
    for (args, says) in [
        (&["--every", "1m", "--wait", "10s"][..], "--wait"),
        // Both would let several hosts run one tick: N with --limit N, every host with
        // --shared (and keep the key from exclusive runs for the tick).
        (
            &["--every", "1m", "--limit", "2"][..],
            "--every cannot be used with --limit",
        ),
        (
            &["--every", "1m", "--shared"][..],
            "--shared cannot be used with --every",
        ),
        (
            &["--every", "1m", "--min-hold", "1m"][..],
            "shorter than --every",
        ),
        (&["--every", "1s"][..], "between 2s and 366d"),
    ] {
        let mut cmd = Lockrun::on(&redis);
        cmd.args(args).args(["refused", "--", "echo", "ran"]);
        let out = run(cmd);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {}", stderr_of(&out));
        assert!(
            stderr_of(&out).contains(says),
            "{args:?}: {}",
            stderr_of(&out)
        );
        assert_eq!(stdout_of(&out), "", "{args:?}: never ran");
        assert_eq!(stderr_of(&out).lines().count(), 1, "{args:?}: one line");
        assert!(!redis.exists("refused"));
        assert!(!redis.exists("lockrun:shared:{refused}"));
    }
    // From the environment too, the variable named.
    let mut cmd = Lockrun::on(&redis);
    cmd.env("LOCKRUN_EVERY", "soon")
        .args(["refused", "--", "true"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(64));
    assert!(
        stderr_of(&out).contains("LOCKRUN_EVERY"),
        "{}",
        stderr_of(&out)
    );
}
