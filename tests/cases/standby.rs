//! `--standby`: hosts that find the tick taken stand by for the rest of it, exit as skipped
//! once the run completes there, and take the tick over (a higher fence, the same tick) when
//! the run that took it cannot complete it: its host gone, its job killed. A job that exits by
//! itself, whatever its code, completes the tick; a host firing late never runs a completed
//! tick again.

use crate::support::*;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// A host of the fleet: `lockrun --standby -E 0 --every <every> KEY -- sh -c <job>`, its job
/// appending `<name> <fence>` to `ran` when it starts, then running `rest`.
fn host(redis: &Server, dir: &Path, name: &str, every: &str, ttl: &str, rest: &str) -> Background {
    host_with(redis, dir, name, every, ttl, rest, &[])
}

/// [`host`] with more options.
fn host_with(
    redis: &Server,
    dir: &Path,
    name: &str,
    every: &str,
    ttl: &str,
    rest: &str,
    more: &[&str],
) -> Background {
    let ran = dir.join("ran");
    let job = format!(
        "echo \"{name} $LOCKRUN_FENCE\" >> '{}'; echo $$ > '{}'; {rest}",
        ran.display(),
        dir.join(format!("{name}.job")).display()
    );
    let mut cmd = Lockrun::on(redis);
    cmd.args(more);
    cmd.args([
        "--standby",
        "-E",
        "0",
        "--ttl",
        ttl,
        "--every",
        every,
        "tick",
        "--",
        "sh",
        "-c",
        &job,
    ]);
    cmd.background(dir, name)
}

/// The runs so far: `(host, fence)` in the order they started.
fn runs(dir: &Path) -> Vec<(String, u64)> {
    lines(&dir.join("ran"))
        .iter()
        .map(|l| {
            let (h, f) = l.split_once(' ').unwrap();
            (h.to_string(), f.parse().unwrap())
        })
        .collect()
}

/// The tick key's history, oldest first.
fn tick_history(redis: &Server) -> Vec<serde_json::Value> {
    let mut runs = history(redis, "tick");
    runs.reverse();
    runs
}

fn outcomes(redis: &Server) -> Vec<(String, Option<i64>)> {
    tick_history(redis)
        .iter()
        .map(|r| {
            (
                r["outcome"].as_str().unwrap().to_string(),
                r["attempt"].as_i64(),
            )
        })
        .collect()
}

/// `lockrun status tick`'s `tick:` line.
fn tick_status(redis: &Server) -> String {
    let mut cmd = Lockrun::on(redis);
    cmd.args(["status", "tick"]);
    let out = stdout_of(&run(cmd));
    out.lines()
        .find(|l| l.starts_with("tick:"))
        .unwrap_or_else(|| panic!("no tick line: {out}"))
        .to_string()
}

/// The process id a host's job wrote.
fn job_pid(dir: &Path, name: &str) -> u32 {
    let path = dir.join(format!("{name}.job"));
    wait_for_file(&path);
    eventually("the job's pid", || !lines(&path).is_empty());
    lines(&path)[0].parse().unwrap()
}

/// A tick under way: `a` took it (its job waits for `go`), `b` and `c` stand by for it.
struct UnderWay {
    a: Background,
    b: Background,
    c: Background,
    go: std::path::PathBuf,
}

/// Hosts `a`, `b`, `c` (each name followed by `suffix`) fire `--every every --ttl ttl` one
/// after the other, once the one before took the tick or stood by: an [`UnderWay`] tick.
fn under_way(redis: &Server, dir: &Path, suffix: &str, every: &str, ttl: &str) -> UnderWay {
    let go = dir.join(format!("go{suffix}"));
    let mut a = host(
        redis,
        dir,
        &format!("a{suffix}"),
        every,
        ttl,
        &wait_for_go(&go),
    );
    a.until("a holds the tick", || redis.exists("tick"));
    let b = host(redis, dir, &format!("b{suffix}"), every, ttl, "true");
    let c = host(redis, dir, &format!("c{suffix}"), every, ttl, "true");
    standing_by(&[&b, &c]);
    UnderWay { a, b, c, go }
}

/// Lets `a`'s job end (`go`): `a` exits 0, and each of `standbys` ends its run skipped (0 with
/// `-E 0`) because the tick completed, printing nothing on stdout.
fn complete(a: Background, go: &Path, standbys: impl IntoIterator<Item = Background>) {
    std::fs::write(go, "").unwrap();
    let (code, _, err) = a.finish();
    assert_eq!(code, Some(0), "{err}");
    for h in standbys {
        let (code, out, err) = h.finish();
        assert_eq!(code, Some(0), "skipped with -E 0: {err}");
        assert_eq!(out, "");
        assert!(
            err.contains("this tick completed on another host; skipping"),
            "{err}"
        );
    }
}

/// The requests clients sent while `f` ran, counted at the server: EVALSHA, EVAL, SUBSCRIBE.
fn requests_during<T>(redis: &Server, f: impl FnOnce() -> T) -> ([u64; 3], T) {
    let count = || ["evalsha", "eval", "subscribe"].map(|c| redis.calls(c));
    let before = count();
    let out = f();
    let after = count();
    (std::array::from_fn(|i| after[i] - before[i]), out)
}

/// Every one of `hosts` is standing by: running, and said so.
fn standing_by(hosts: &[&Background]) {
    for h in hosts {
        eventually("a standby", || {
            h.stderr().contains("standing by for the rest of this tick")
        });
    }
}

#[test]
fn a_completed_tick_ends_every_standby_as_skipped() {
    let redis = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let UnderWay { a, b, c, go } = under_way(&redis, dir.path(), "", "1m", "10s");
    assert!(
        tick_status(&redis).starts_with("tick:     under way (attempt 1, "),
        "{}",
        tick_status(&redis)
    );
    let t = Instant::now();
    complete(a, &go, [b, c]);
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "the standbys were woken: {:?}",
        t.elapsed()
    );
    assert_eq!(runs(dir.path()).len(), 1, "one run: {:?}", runs(dir.path()));
    let mut outcomes = outcomes(&redis);
    outcomes.sort();
    assert_eq!(
        outcomes,
        [
            ("ran".into(), None),
            ("skipped".into(), None),
            ("skipped".into(), None)
        ]
    );
    // A host firing late for the same tick finds it done at once: one request, its skip
    // recorded by it.
    let (sent, (code, _, err)) = requests_during(&redis, || {
        host(&redis, dir.path(), "late", "1m", "10s", "true").finish()
    });
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(sent, [1, 0, 0], "EVALSHA, EVAL, SUBSCRIBE");
    assert_eq!(
        tick_history(&redis).len(),
        4,
        "the late host's skip recorded once"
    );
    assert_eq!(
        runs(dir.path()).len(),
        1,
        "a completed tick is never run again"
    );
}

#[test]
fn a_job_that_fails_completes_its_tick() {
    let redis = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let mut a = host(
        &redis,
        dir.path(),
        "a",
        "1m",
        "10s",
        &format!("{}; exit 3", wait_for_go(&go)),
    );
    a.until("a holds the tick", || redis.exists("tick"));
    let b = host(&redis, dir.path(), "b", "1m", "10s", "true");
    standing_by(&[&b]);
    std::fs::write(&go, "").unwrap();
    assert_eq!(a.finish().0, Some(3));
    let (code, _, err) = b.finish();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        runs(dir.path()).len(),
        1,
        "not run again: {:?}",
        runs(dir.path())
    );
}

#[test]
fn a_standby_takes_over_the_tick_of_a_host_that_died() {
    let redis = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let mut a = host(&redis, dir.path(), "a", "1m", "3s", "sleep 60");
    a.until("a holds the tick", || redis.exists("tick"));
    let job = job_pid(dir.path(), "a");
    let b = host(&redis, dir.path(), "b", "1m", "3s", "true");
    standing_by(&[&b]);
    // The host is gone: lockrun and its whole job, at once.
    let died = Instant::now();
    kill(a.pid(), libc::SIGKILL);
    unsafe { libc::kill(-(job as i32), libc::SIGKILL) };
    let (code, _, err) = b.finish();
    let took = died.elapsed();
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("the host that took this tick did not complete it; running it here"),
        "{err}"
    );
    let runs = runs(dir.path());
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(runs[1].0, "b");
    assert!(runs[1].1 > runs[0].1, "a higher fence: {runs:?}");
    // The standby waits out the dead holder's lease (3 s), no more than a heartbeat longer.
    assert!(
        took < Duration::from_secs(5),
        "took over {took:?} after the death"
    );
    assert_eq!(
        outcomes(&redis),
        [("lost".into(), Some(1)), ("ran".into(), Some(2))],
        "the lost attempt and the takeover"
    );
    let status = tick_status(&redis);
    assert!(
        status.starts_with("tick:     done (attempt 2, taken over, "),
        "{status}"
    );
    drop(a);
}

#[test]
fn a_job_killed_by_a_signal_hands_the_tick_on_at_once() {
    let redis = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let mut a = host(&redis, dir.path(), "a", "1m", "30s", "sleep 60");
    a.until("a holds the tick", || redis.exists("tick"));
    let job = job_pid(dir.path(), "a");
    let metrics = dir.path().join("b.prom");
    let b = host_with(
        &redis,
        dir.path(),
        "b",
        "1m",
        "30s",
        "true",
        &["--metrics-file", metrics.to_str().unwrap()],
    );
    standing_by(&[&b]);
    let killed = Instant::now();
    kill(job, libc::SIGKILL);
    let (code, _, err) = a.finish();
    assert_eq!(code, Some(137), "{err}");
    let (code, _, err) = b.finish();
    assert_eq!(code, Some(0), "{err}");
    assert!(
        killed.elapsed() < Duration::from_secs(5),
        "handed on at once, not after the 30 s lease: {:?}",
        killed.elapsed()
    );
    let runs = runs(dir.path());
    assert_eq!(
        runs.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    assert_eq!(
        outcomes(&redis),
        [("ran".into(), Some(1)), ("ran".into(), Some(2))],
        "both sides of the takeover carry their attempt"
    );
    // The metrics of a takeover say which attempt at the tick it was.
    let text = std::fs::read_to_string(&metrics).unwrap();
    assert!(
        text.contains("lockrun_last_run_tick_attempt{key=\"tick\"} 2\n"),
        "{text}"
    );
}

#[test]
fn a_standby_never_runs_into_the_next_tick() {
    let redis = Server::start();
    let dir = tempfile::tempdir().unwrap();
    // --every 3s: a tick of 2 s. The job outlasts it; the standby gives up when it ends.
    let go = dir.path().join("go");
    let mut a = host(&redis, dir.path(), "a", "3s", "10s", &wait_for_go(&go));
    a.until("a holds the tick", || redis.exists("tick"));
    let t = Instant::now();
    let b = host(&redis, dir.path(), "b", "3s", "10s", "true");
    standing_by(&[&b]);
    let (code, _, err) = b.finish();
    assert_eq!(code, Some(0), "{err}");
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    // A host of the next tick finds the long run still going: it skips, as without --standby.
    let c = host(&redis, dir.path(), "c", "3s", "10s", "true");
    let (code, _, err) = c.finish();
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("redis lock already acquired"), "{err}");
    std::fs::write(&go, "").unwrap();
    assert_eq!(a.finish().0, Some(0));
    assert_eq!(runs(dir.path()).len(), 1);
}

#[test]
fn standby_needs_every_one_server_and_no_limit() {
    let redis = Server::start();
    for (args, says) in [
        (
            vec!["--standby", "k", "--", "true"],
            "--standby needs --every",
        ),
        (
            vec![
                "--standby",
                "--every",
                "1m",
                "--limit",
                "2",
                "k",
                "--",
                "true",
            ],
            "--standby cannot be used with --limit",
        ),
        (
            vec!["--every", "1m", "--standbys", "3", "k", "--", "true"],
            "--standbys needs --standby",
        ),
        (
            vec![
                "--standby",
                "--every",
                "1m",
                "--standbys",
                "0",
                "k",
                "--",
                "true",
            ],
            "0 is out of range: --standbys is 1 to 100",
        ),
    ] {
        let mut cmd = Lockrun::on(&redis);
        cmd.args(&args);
        let out = run(cmd);
        assert_eq!(out.status.code(), Some(64), "{args:?}");
        assert!(stderr_of(&out).contains(says), "{}", stderr_of(&out));
    }
    let mut cmd = Lockrun::to(&[
        redis.url(),
        "redis://127.0.0.1:1".into(),
        "redis://127.0.0.1:2".into(),
    ]);
    cmd.args(["--standby", "--every", "1m", "k", "--", "true"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(64));
    assert!(
        stderr_of(&out).contains("several Redis masters"),
        "{}",
        stderr_of(&out)
    );
}

/// A standby that never reached Redis learned nothing of the tick: it reports the outage at
/// once (exit 69), as a run without `--standby` does, not after the tick's whole hold (54 s
/// here, a day less 2.4 h for `--every 1d`), when cron's mail would come a tick late.
#[test]
fn a_standby_that_cannot_reach_redis_at_first_reports_it_at_once() {
    let nobody = format!("redis://127.0.0.1:{}", free_port());
    for standby in [&[][..], &["--standby"][..]] {
        let mut cmd = Lockrun::to(&[&nobody]);
        cmd.args(standby).args([
            "-q", "-E", "0", "--every", "1m", "tick", "--", "echo", "ran",
        ]);
        let t0 = Instant::now();
        let out = run(cmd);
        let took = t0.elapsed();
        assert_eq!(
            out.status.code(),
            Some(69),
            "{standby:?}: {}",
            stderr_of(&out)
        );
        assert!(
            took < Duration::from_secs(5),
            "{standby:?}: reported at once, not at the end of the tick: {took:?}"
        );
        let err = stderr_of(&out);
        assert_eq!(err.lines().count(), 1, "{standby:?}: one line: {err}");
        assert!(err.contains("ERROR"), "{standby:?}: {err}");
        assert_eq!(stdout_of(&out), "", "{standby:?}: never ran");
    }
}

/// A node drained, a unit stopped: lockrun told to stop, its job stopped with it, hands the
/// tick on.
#[test]
fn a_run_told_to_stop_hands_the_tick_on() {
    let redis = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let a = host(&redis, dir.path(), "a", "1m", "30s", "sleep 60");
    eventually("a holds the tick", || redis.exists("tick"));
    job_pid(dir.path(), "a");
    let b = host(&redis, dir.path(), "b", "1m", "30s", "true");
    standing_by(&[&b]);
    kill(a.pid(), libc::SIGTERM);
    let (code, _, err) = a.finish();
    assert_eq!(code, Some(143), "{err}");
    let (code, _, err) = b.finish();
    assert_eq!(code, Some(0), "{err}");
    let hosts: Vec<String> = runs(dir.path()).into_iter().map(|r| r.0).collect();
    assert_eq!(hosts, ["a", "b"]);
    assert_eq!(
        outcomes(&redis),
        [("aborted".into(), Some(1)), ("ran".into(), Some(2))],
        "both sides of the takeover carry their attempt"
    );
}

/// A command that cannot be started on the host that took the tick hands the tick on at once;
/// the history says which attempt each side was, in text and JSON.
#[test]
fn a_command_not_found_hands_the_tick_on_and_both_attempts_are_recorded() {
    let redis = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let mut broken = Lockrun::on(&redis);
    broken.args([
        "--standby",
        "-q",
        "-E",
        "0",
        "--every",
        "1m",
        "tick",
        "--",
        "/nonexistent/job",
    ]);
    let out = run(broken);
    assert_eq!(out.status.code(), Some(127), "{}", stderr_of(&out));
    let b = host(&redis, dir.path(), "b", "1m", "30s", "true");
    let (code, _, err) = b.finish();
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("did not complete it; running it here"),
        "{err}"
    );
    let entries = tick_history(&redis);
    assert_eq!(
        entries
            .iter()
            .map(|e| (e["exit_code"].as_i64(), e["attempt"].as_i64()))
            .collect::<Vec<_>>(),
        [(Some(127), Some(1)), (Some(0), Some(2))],
        "both sides of the takeover carry their attempt: {entries:?}"
    );
    let mut text = Lockrun::on(&redis);
    text.args(["history", "tick"]);
    let text = stdout_of(&run(text));
    assert!(text.contains("(attempt 1)"), "{text}");
    assert!(text.contains("ran (attempt 2)"), "{text}");
}

/// A host frozen whole (every process of it stopped) is gone for the others: its lease
/// expires and a standby runs the tick. When it thaws, its lock is lost: its job is stopped
/// and the run recorded lost.
#[test]
fn a_frozen_host_loses_its_tick_to_a_standby() {
    let redis = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let mut a = host(&redis, dir.path(), "a", "1m", "2s", "sleep 60");
    a.until("a holds the tick", || redis.exists("tick"));
    let job = job_pid(dir.path(), "a");
    let b = host(&redis, dir.path(), "b", "1m", "2s", "true");
    standing_by(&[&b]);
    kill(a.pid(), libc::SIGSTOP);
    unsafe { libc::kill(-(job as i32), libc::SIGSTOP) };
    let (code, _, err) = b.finish();
    assert_eq!(code, Some(0), "{err}");
    kill(a.pid(), libc::SIGCONT);
    unsafe { libc::kill(-(job as i32), libc::SIGCONT) };
    let (code, _, err) = a.finish();
    assert_eq!(code, Some(76), "lock lost: {err}");
    let hosts: Vec<String> = runs(dir.path()).into_iter().map(|r| r.0).collect();
    assert_eq!(hosts, ["a", "b"]);
    // The thawed host records its own loss too (one entry per run: `history` merges them).
    let mut outcomes: Vec<String> = outcomes(&redis)
        .into_iter()
        .map(|(o, a)| format!("{o} {a:?}"))
        .collect();
    outcomes.sort();
    assert_eq!(outcomes, ["lost Some(1)", "ran Some(2)"]);
}

/// Redis stalled as the job ends (SIGSTOP for 2 s: a failover, a host frozen for a moment):
/// the release is tried again until it lands, so the tick is recorded completed and the
/// standby skips it instead of running it again once the lease ends.
#[test]
fn a_release_that_meets_a_stalled_redis_lands_once_it_answers() {
    let redis = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    // TTL 8 s: the lease outlasts the stall. Each request gives up after 200 ms, so every try
    // the release makes during the stall fails.
    let more = ["--node-timeout", "200ms"];
    let rest = wait_for_go(&go);
    let mut a = host_with(&redis, dir.path(), "a", "1m", "8s", &rest, &more);
    a.until("a holds the tick", || redis.exists("tick"));
    let b = host_with(&redis, dir.path(), "b", "1m", "8s", "true", &more);
    standing_by(&[&b]);
    redis.signal(libc::SIGSTOP);
    std::fs::write(&go, "").unwrap();
    std::thread::sleep(Duration::from_secs(2));
    redis.signal(libc::SIGCONT);
    let (code, _, a_err) = a.finish();
    assert_eq!(code, Some(0), "{a_err}");
    assert!(a_err.contains("redis lock released"), "{a_err}");
    let (code, _, err) = b.finish();
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("this tick completed on another host; skipping"),
        "b: {err}\na: {a_err}"
    );
    let hosts: Vec<String> = runs(dir.path()).into_iter().map(|r| r.0).collect();
    assert_eq!(hosts, ["a"], "the tick ran once");
}

/// `--spread`: hosts that fire in the same order every tick (the fastest clock first) take
/// turns running the ticks, and each tick still runs once. Without it the first host runs them
/// all.
#[test]
fn spread_lets_the_hosts_take_turns_and_each_tick_runs_once() {
    let redis = Server::start();
    let winners = |spread: Option<&str>, ticks: usize| -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        let ran = dir.path().join("ran");
        for tick in 0..ticks {
            let hosts: Vec<Background> = ["a", "b", "c"]
                .iter()
                .map(|name| {
                    let mut cmd = Lockrun::on(&redis);
                    // --every 2s: a hold of 1 s; --spread at most half of it.
                    cmd.args(["-q", "-E", "0", "--every", "2s"]);
                    if let Some(spread) = spread {
                        cmd.args(["--spread", spread]);
                    }
                    let job = format!("echo {name} >> '{}'", ran.display());
                    cmd.args(["turns", "--", "sh", "-c", &job]);
                    let host = cmd.background(dir.path(), &format!("{name}{tick}"));
                    // The same order every tick, 100 ms apart, as cron on clocks apart.
                    std::thread::sleep(Duration::from_millis(100));
                    host
                })
                .collect();
            for h in hosts {
                let (code, _, err) = h.finish();
                assert_eq!(code, Some(0), "{err}");
            }
            assert_eq!(lines(&ran).len(), tick + 1, "one run per tick");
            eventually("the tick's hold to end", || !redis.exists("turns"));
        }
        lines(&ran)
    };
    let first_always = winners(None, 3);
    assert_eq!(first_always, ["a", "a", "a"]);
    let spread = winners(Some("500ms"), 10);
    let distinct: std::collections::BTreeSet<&String> = spread.iter().collect();
    assert!(
        distinct.len() >= 2,
        "the same host ran every tick: {spread:?}"
    );
}

#[test]
fn spread_needs_every_and_at_most_half_its_hold() {
    let redis = Server::start();
    for (args, says) in [
        (
            vec!["--spread", "1s", "k", "--", "true"],
            "--spread needs --every",
        ),
        (
            vec!["--every", "1m", "--spread", "28s", "k", "--", "true"],
            "--spread 28s is more than half the hold of the tick (27s)",
        ),
    ] {
        let mut cmd = Lockrun::on(&redis);
        cmd.args(&args);
        let out = run(cmd);
        assert_eq!(out.status.code(), Some(64), "{args:?}");
        assert!(stderr_of(&out).contains(says), "{}", stderr_of(&out));
    }
}

/// A tick record changed by hand is named as what it is, and nothing is run or written.
#[test]
fn a_tick_record_changed_by_hand_is_named() {
    let redis = Server::start();
    redis.cmd::<()>(&["SET", "lockrun:tick:{tick}", "not a tick"]);
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["--standby", "--every", "1m", "tick", "--", "echo", "ran"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(64), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out), "");
    assert!(
        stderr_of(&out).contains(
            "the --standby tick record 'lockrun:tick:{tick}' is not one lockrun wrote (changed by hand?); delete it"
        ),
        "{}",
        stderr_of(&out)
    );
    assert!(!redis.exists("tick"));
}

/// The host that takes a tick makes the requests of any run: its acquire and its release, no
/// SUBSCRIBE; a standby subscribes once it finds the tick taken.
#[test]
fn the_host_that_takes_the_tick_makes_two_requests() {
    let redis = Server::start();
    let once = |key: &str| {
        let mut cmd = Lockrun::on(&redis);
        cmd.args(["--standby", "--every", "1m", key, "--", "true"]);
        assert_eq!(run(cmd).status.code(), Some(0));
    };
    // The scripts loaded first (NOSCRIPT, then EVAL), then counted.
    once("warm");
    let (sent, ()) = requests_during(&redis, || once("tick"));
    assert_eq!(sent, [2, 0, 0], "EVALSHA, EVAL, SUBSCRIBE");
}

/// The guide's line has `-q` (errors only): the takeover's WARN line is printed all the same,
/// so that cron mails it; the standbys' skips stay silent.
#[test]
fn a_takeover_is_said_under_q() {
    let redis = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let mut a = host_with(&redis, dir.path(), "a", "1m", "30s", "sleep 60", &["-q"]);
    a.until("a holds the tick", || redis.exists("tick"));
    let job = job_pid(dir.path(), "a");
    let b = host_with(&redis, dir.path(), "b", "1m", "30s", "true", &["-q"]);
    let c = host_with(&redis, dir.path(), "c", "1m", "30s", "true", &["-q"]);
    eventually("b and c queued", || {
        redis.cmd::<u64>(&["ZCARD", "lockrun:waiters:{tick}"]) == 2
    });
    kill(job, libc::SIGKILL);
    let (code, _, err) = a.finish();
    assert_eq!(code, Some(137), "{err}");
    let (b, c) = (b.finish(), c.finish());
    assert_eq!((b.0, c.0), (Some(0), Some(0)), "{} {}", b.2, c.2);
    let said: Vec<&str> = [b.2.as_str(), c.2.as_str()]
        .into_iter()
        .flat_map(str::lines)
        .collect();
    assert_eq!(said.len(), 1, "one line in all, the takeover's: {said:?}");
    assert!(
        said[0].contains(" WARN ")
            && said[0]
                .contains("the host that took this tick did not complete it; running it here"),
        "{said:?}"
    );
}

/// Only as many hosts stand by as `--standbys` asks (2 by default): the ones after them skip
/// at once, as without `--standby`, each with one request and its skip in the history. The
/// cost of a tick does not grow with the hosts that fire for it.
#[test]
fn hosts_beyond_the_standbys_skip_at_once_with_one_request() {
    let redis = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let UnderWay { a, b, c, go } = under_way(&redis, dir.path(), "", "1m", "10s");
    for name in ["d", "e"] {
        let (sent, (code, _, err)) = requests_during(&redis, || {
            host(&redis, dir.path(), name, "1m", "10s", "true").finish()
        });
        assert_eq!(code, Some(0), "skipped with -E 0: {err}");
        assert!(err.contains("redis lock already acquired"), "{err}");
        assert!(!err.contains("standing by"), "{err}");
        // b and c look now and then meanwhile; d and e send one EVALSHA each, no SUBSCRIBE.
        assert!(
            sent[0] <= 3 && sent[1] == 0 && sent[2] == 0,
            "{sent:?}: {err}"
        );
    }
    complete(a, &go, [b, c]);
    let mut outcomes = outcomes(&redis);
    outcomes.sort();
    assert_eq!(
        outcomes,
        [
            ("ran".into(), None),
            ("skipped".into(), None),
            ("skipped".into(), None),
            ("skipped".into(), None),
            ("skipped".into(), None)
        ]
    );
}

/// A standby that dies leaves the queue when its ticket ends (its TTL and 3 s); a host that
/// fires later in the tick then stands by in its place.
#[test]
fn a_standby_that_died_is_replaced_by_a_later_host() {
    let redis = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let UnderWay { a, b, c, go } = under_way(&redis, dir.path(), "", "1m", "1s");
    let died = Instant::now();
    kill(c.pid(), libc::SIGKILL);
    drop(c);
    // Until c's ticket ends, a host that fires is not needed; from then on it stands by.
    let replaced = (0..).find_map(|n| {
        assert!(died.elapsed() < Duration::from_secs(10), "never replaced");
        let mut d = host(&redis, dir.path(), &format!("d{n}"), "1m", "1s", "true");
        if stands_by_or_ends(&mut d) {
            return Some(d);
        }
        std::thread::sleep(Duration::from_millis(300));
        None
    });
    let replaced = replaced.unwrap();
    let after = died.elapsed();
    assert!(
        after >= Duration::from_secs(3),
        "c's ticket outlives its death: {after:?}"
    );
    complete(a, &go, [b, replaced]);
    assert_eq!(runs(dir.path()).len(), 1);
}

/// Whether `host` stands by (true) or ends its run at once (false).
fn stands_by_or_ends(host: &mut Background) -> bool {
    let mut stands_by = false;
    eventually("standing by or gone", || {
        stands_by = host
            .stderr()
            .contains("standing by for the rest of this tick");
        stands_by || !host.is_running()
    });
    stands_by
}

/// With two standbys, a tick survives the loss of its host and of one standby in the same
/// tick: the other standby takes it over when the dead host's lease ends.
#[test]
fn a_tick_survives_its_host_and_a_standby_dying() {
    let redis = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let mut a = host(&redis, dir.path(), "a", "1m", "2s", "sleep 60");
    a.until("a holds the tick", || redis.exists("tick"));
    let job = job_pid(dir.path(), "a");
    let b = host(&redis, dir.path(), "b", "1m", "2s", "true");
    let c = host(&redis, dir.path(), "c", "1m", "2s", "true");
    standing_by(&[&b, &c]);
    let died = Instant::now();
    kill(a.pid(), libc::SIGKILL);
    unsafe { libc::kill(-(job as i32), libc::SIGKILL) };
    kill(b.pid(), libc::SIGKILL);
    let (code, _, err) = c.finish();
    let took = died.elapsed();
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("running it here"), "{err}");
    assert!(
        took < Duration::from_secs(4),
        "took over {took:?} after the deaths"
    );
    let runs = runs(dir.path());
    assert_eq!(
        runs.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(),
        ["a", "c"]
    );
    drop((a, b));
}

/// The server loses the tick's keys while a standby stands by (as a restart without
/// persistence does): the holder stops its job (76), the standby opens the tick again, says so
/// in one WARN line, and `history` marks that run; `status` shows when the tick began.
#[test]
fn a_tick_whose_record_the_server_lost_is_reopened_and_marked() {
    let redis = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let mut a = host(&redis, dir.path(), "a", "1m", "2s", "sleep 60");
    a.until("a holds the tick", || redis.exists("tick"));
    let b = host(&redis, dir.path(), "b", "1m", "2s", "true");
    standing_by(&[&b]);
    let status = tick_status(&redis);
    assert!(
        status.starts_with("tick:     under way (attempt 1, began ") && status.ends_with(" left)"),
        "{status}"
    );
    let keys: Vec<String> = redis.cmd(&["KEYS", "*"]);
    let mut del = vec!["DEL"];
    del.extend(keys.iter().map(String::as_str));
    let _: i64 = redis.cmd(&del);
    let (code, _, err) = a.finish();
    assert_eq!(code, Some(76), "{err}");
    let (code, _, err) = b.finish();
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("the server lost the record of this tick while this host stood by for it"),
        "{err}"
    );
    let reopened: Vec<_> = tick_history(&redis)
        .into_iter()
        .filter(|r| r["tick"] == "reopened")
        .collect();
    assert_eq!(reopened.len(), 1, "{:?}", tick_history(&redis));
    assert_eq!(reopened[0]["outcome"], "ran");
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["history", "tick"]);
    let table = stdout_of(&run(cmd));
    assert!(table.contains("ran (tick reopened)"), "{table}");
}

/// A standby that died in one tick keeps its place in the queue until its ticket ends (its TTL
/// and 3 s), which can be into the next tick: there it takes no place, and the next tick's
/// hosts stand by as many as they should.
#[test]
fn a_standby_that_died_in_an_earlier_tick_takes_no_place_in_the_next() {
    let redis = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let first = Instant::now();
    let UnderWay { a, b, c, go } = under_way(&redis, dir.path(), "", "4s", "3s");
    kill(c.pid(), libc::SIGKILL);
    drop(c);
    complete(a, &go, [b]);
    // The next tick (the hold of --every 4s is 3 s), within c's ticket.
    eventually("the first tick over", || {
        !redis.exists("lockrun:tick:{tick}")
    });
    assert!(
        first.elapsed() < Duration::from_secs(5),
        "{:?}",
        first.elapsed()
    );
    let next = under_way(&redis, dir.path(), "2", "4s", "3s");
    complete(next.a, &next.go, [next.b, next.c]);
}

/// A standby's connections, its wake-up subscription among them, probe a silent server (TCP
/// keepalive): a subscription that only listens for the whole job learns that its server is
/// gone without a word, and a NAT that drops idle connections sees traffic.
#[test]
fn a_standbys_connections_probe_a_silent_server() {
    let redis = Server::start_tcp();
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let mut a = host(&redis, dir.path(), "a", "1m", "10s", &wait_for_go(&go));
    a.until("a holds the tick", || redis.exists("tick"));
    let b = host(&redis, dir.path(), "b", "1m", "10s", "true");
    standing_by(&[&b]);
    let filter = format!("( dport = :{} )", redis.port());
    let out = Command::new("ss")
        .args(["-tnpo", "state", "established", &filter])
        .output()
        .expect("ss (iproute2: tests/ensure-netns.sh installs it)");
    let text = String::from_utf8_lossy(&out.stdout);
    let mine: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(&format!("pid={},", b.pid())))
        .collect();
    assert_eq!(mine.len(), 2, "its attempts and its subscription:\n{text}");
    for line in mine {
        assert!(line.contains("timer:(keepalive,"), "{line}");
    }
    complete(a, &go, [b]);
}
