//! Contention: waiting, the waiter queue, semaphores, reentrancy.

use crate::support::*;
use std::process::{Child, Stdio};
use std::time::Instant;

fn now_secs() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Starts a waiter and returns once it has queued (logged that it is waiting).
fn queued_waiter(redis: &Server, args: &[&str]) -> (Child, Lines) {
    let mut cmd = Lockrun::on(redis);
    cmd.args(args).stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let lines = wait_for_line(&mut child, "waiting");
    (child, lines)
}

#[test]
fn a_waiter_starts_promptly_after_release() {
    let redis = Server::start();
    let stamp = redis.dir.path().join("stamps");
    let mut holder = Lockrun::on(&redis);
    holder
        .args(["-t", "10s", "handoff", "--", "sh", "-c"])
        .arg(format!(
            "sleep 1; date +%s.%N > '{}.released'",
            stamp.display()
        ))
        .stderr(Stdio::piped());
    let mut holder = holder.spawn().unwrap();
    wait_for_line(&mut holder, "redis lock acquired");
    let (mut waiter, _) = queued_waiter(
        &redis,
        &[
            "--wait",
            "30s",
            "handoff",
            "--",
            "sh",
            "-c",
            &format!("date +%s.%N > '{}.started'", stamp.display()),
        ],
    );
    assert_eq!(wait_timeout(&mut holder, PATIENCE).unwrap().code(), Some(0));
    assert_eq!(wait_timeout(&mut waiter, PATIENCE).unwrap().code(), Some(0));
    let read = |suffix: &str| -> f64 {
        lines(&redis.dir.path().join(format!("stamps.{suffix}")))[0]
            .parse()
            .unwrap()
    };
    let gap = read("started") - read("released");
    // The pub/sub hint makes this milliseconds; the bound is generous for loaded machines
    // (without the hint, the pre-existing poll would take the holder's remaining TTL of ~9 s).
    assert!(gap < 1.0, "waiter started {gap:.3}s after the release");
}

#[test]
fn a_waiter_gets_the_lock_after_a_sigkilled_holder_expires() {
    let redis = Server::start();
    let mut holder = Lockrun::on(&redis);
    holder
        .args(["-t", "1s", "dead", "--", "sleep", "30"])
        .stderr(Stdio::piped());
    let mut holder = holder.spawn().unwrap();
    wait_for_line(&mut holder, "redis lock acquired");
    let (mut waiter, _) = queued_waiter(&redis, &["--wait", "30s", "dead", "--", "echo", "mine"]);
    let killed = Instant::now();
    kill(holder.id(), libc::SIGKILL);
    wait_timeout(&mut holder, PATIENCE).unwrap();
    assert_eq!(wait_timeout(&mut waiter, PATIENCE).unwrap().code(), Some(0));
    assert!(killed.elapsed() < PATIENCE);
}

#[test]
fn wait_timeout_exits_75_and_leaves_the_queue() {
    let redis = Server::start();
    redis.cmd::<()>(&["SET", "busy", "other", "PX", "60000"]);
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["--wait", "700ms", "busy", "--", "echo", "ran"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(75), "{}", stderr_of(&out));
    assert!(stderr_of(&out).contains("redis lock already acquired"));
    assert_eq!(stdout_of(&out), "");
    assert!(!redis.exists("lockrun:waiters:{busy}"), "gave its place up");
    assert_eq!(redis.cmd::<String>(&["GET", "busy"]), "other");
}

#[test]
fn waiters_take_turns_in_arrival_order() {
    let redis = Server::start();
    let order = redis.dir.path().join("order");
    let mut holder = Lockrun::on(&redis);
    holder
        .args(["fifo", "--", "sleep", "1"])
        .stderr(Stdio::piped());
    let mut holder = holder.spawn().unwrap();
    wait_for_line(&mut holder, "redis lock acquired");
    let mut waiters = Vec::new();
    for name in ["first", "second", "third", "fourth"] {
        let script = format!("echo {name} >> '{}'", order.display());
        waiters.push(queued_waiter(
            &redis,
            &["--wait", "60s", "fifo", "--", "sh", "-c", &script],
        ));
    }
    for (mut w, _) in waiters {
        assert_eq!(wait_timeout(&mut w, PATIENCE).unwrap().code(), Some(0));
    }
    wait_timeout(&mut holder, PATIENCE).unwrap();
    assert_eq!(lines(&order), ["first", "second", "third", "fourth"]);
}

#[test]
fn a_waiter_that_dies_in_the_queue_does_not_block_it() {
    let redis = Server::start();
    let mut holder = Lockrun::on(&redis);
    holder
        .args(["q", "--", "sleep", "0.5"])
        .stderr(Stdio::piped());
    let mut holder = holder.spawn().unwrap();
    wait_for_line(&mut holder, "redis lock acquired");
    let (mut doomed, _) = queued_waiter(&redis, &["--wait", "60s", "q", "true"]);
    let (mut patient, _) = queued_waiter(&redis, &["--wait", "60s", "q", "echo", "got-it"]);
    kill(doomed.id(), libc::SIGKILL); // no chance to leave the queue: its ticket must expire
    wait_timeout(&mut doomed, PATIENCE).unwrap();
    let status =
        wait_timeout(&mut patient, PATIENCE).expect("the queue moves on past a dead waiter");
    assert_eq!(status.code(), Some(0));
    wait_timeout(&mut holder, PATIENCE).unwrap();
}

#[test]
fn semaphore_never_runs_more_than_limit_and_runs_everyone() {
    let redis = Server::start();
    let log = redis.dir.path().join("sem.log");
    let script = format!(
        "echo start >> '{log}'; sleep 0.4; echo end >> '{log}'",
        log = log.display()
    );
    let children: Vec<_> = (0..6)
        .map(|_| {
            let mut cmd = Lockrun::on(&redis);
            cmd.args([
                "--limit", "3", "--wait", "60s", "sem", "--", "sh", "-c", &script,
            ])
            .stderr(Stdio::piped());
            cmd.spawn().unwrap()
        })
        .collect();
    for c in children {
        let out = wait_output(c);
        assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    }
    let events = lines(&log);
    assert_eq!(events.len(), 12, "all six ran");
    let (mut running, mut peak) = (0i32, 0i32);
    for e in &events {
        running += if e == "start" { 1 } else { -1 };
        peak = peak.max(running);
    }
    assert!(peak <= 3, "at most 3 at once, saw {peak}");
    assert!(
        peak >= 2,
        "the semaphore lets several run at once, saw {peak}"
    );
    assert!(!redis.exists("sem"));
}

#[test]
fn semaphore_holders_get_increasing_fences_and_conflict_when_full() {
    let redis = Server::start();
    let mut holders = Vec::new();
    for _ in 0..2 {
        let mut cmd = Lockrun::on(&redis);
        cmd.args([
            "-l",
            "2",
            "pool",
            "--",
            "sh",
            "-c",
            "echo $LOCKRUN_FENCE; sleep 4",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let mut c = cmd.spawn().unwrap();
        wait_for_line(&mut c, "redis lock acquired");
        holders.push(c);
    }
    assert_eq!(redis.cmd::<i64>(&["ZCARD", "pool"]), 2);
    let mut third = Lockrun::on(&redis);
    third.args(["-l", "2", "pool", "true"]);
    let out = run(third);
    assert_eq!(out.status.code(), Some(75));
    assert!(stderr_of(&out).contains("redis lock already acquired"));
    let fences: Vec<u64> = holders
        .into_iter()
        .map(|c| stdout_of(&wait_output(c)).trim().parse().unwrap())
        .collect();
    assert_ne!(fences[0], fences[1]);
    assert!(!redis.exists("pool"));
}

#[test]
fn mixing_limit_and_plain_on_one_key_is_an_error() {
    let redis = Server::start();
    redis.cmd::<()>(&["SET", "plain", "someone", "PX", "60000"]);
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["--limit", "2", "plain", "true"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(64));
    assert!(
        stderr_of(&out).contains("is a plain lock"),
        "{}",
        stderr_of(&out)
    );

    // A holder as a semaphore's member looks when lockrun wrote it.
    let member = "0123456789abcdef0123456789abcdef01234567 host=h pid=1 started=2024-01-02T03:04:05Z program=x";
    redis.cmd::<()>(&["ZADD", "semkey", "99999999999999", member]);
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["semkey", "true"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(64));
    assert!(
        stderr_of(&out).contains("is a semaphore"),
        "{}",
        stderr_of(&out)
    );

    redis.cmd::<()>(&["LPUSH", "alist", "x"]);
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["alist", "true"]);
    assert_eq!(run(cmd).status.code(), Some(64));
}

#[test]
fn nested_lockrun_on_the_same_key_is_reentrant() {
    let redis = Server::start();
    let marker = redis.dir.path().join("inner-done");
    let bin = lockrun_bin().display().to_string();
    let url = redis.url();
    // The inner lockrun inherits LOCKRUN_KEY/LOCKRUN_TOKEN; then the outer command lingers so
    // the test can check the outer lock survived the inner one.
    let script = format!(
        "'{bin}' -r '{url}' outer -- sh -c 'echo inner-ran' && touch '{m}' && sleep 1",
        m = marker.display()
    );
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["-t", "2s", "outer", "--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let outer_value: Option<String> = {
        wait_for_file_of(&mut child, &marker);
        redis.cmd(&["GET", "outer"])
    };
    assert!(
        outer_value.is_some(),
        "the inner lockrun did not release the outer lock"
    );
    let out = wait_output(child);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out).trim(), "inner-ran");
    let err = stderr_of(&out);
    assert!(
        err.contains("redis lock already held by this job (reentrant)"),
        "{err}"
    );
    assert_eq!(
        err.matches("redis lock released").count(),
        1,
        "only the outer releases: {err}"
    );
    assert!(!redis.exists("outer"));
}

#[test]
fn nested_lockrun_on_another_key_locks_normally() {
    let redis = Server::start();
    let bin = lockrun_bin().display().to_string();
    let url = redis.url();
    let script = format!("'{bin}' -r '{url}' inner-key -- sh -c 'echo $LOCKRUN_KEY'");
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["outer-key", "--", "sh", "-c", &script]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out).trim(), "inner-key");
    let err = stderr_of(&out);
    assert_eq!(
        err.matches("redis lock acquired, starting job").count(),
        2,
        "{err}"
    );
    assert!(!err.contains("reentrant"));
    assert!(!redis.exists("inner-key") && !redis.exists("outer-key"));
}

#[test]
fn a_forged_or_stale_token_is_not_reentrant() {
    let redis = Server::start();
    redis.cmd::<()>(&["SET", "guarded", "abc host=x", "PX", "60000"]);
    for token in ["forged", "ab"] {
        let mut cmd = Lockrun::on(&redis);
        cmd.env("LOCKRUN_KEY", "guarded")
            .env("LOCKRUN_TOKEN", token)
            .args(["guarded", "echo", "ran"]);
        let out = run(cmd);
        assert_eq!(out.status.code(), Some(75), "{token}: {}", stderr_of(&out));
        assert_eq!(stdout_of(&out), "");
    }
}

#[test]
fn wait_forever_waits() {
    let redis = Server::start();
    let mut holder = Lockrun::on(&redis);
    holder
        .args(["fv", "--", "sleep", "1"])
        .stderr(Stdio::piped());
    let mut holder = holder.spawn().unwrap();
    wait_for_line(&mut holder, "redis lock acquired");
    let started = now_secs();
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["--wait", "forever", "fv", "true"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert!(now_secs() - started > 0.3, "it did wait for the holder");
    wait_timeout(&mut holder, PATIENCE).unwrap();
}

/// A → B → A is reentrant: every enclosing holder is recognised, for plain locks and
/// semaphores. An innermost lockrun of A that saw only B's key and token would wait for A,
/// held by its own ancestor: exit 75, or a deadlock with `--wait forever`.
#[test]
fn nesting_a_b_a_is_reentrant_for_every_enclosing_lock() {
    let redis = Server::start();
    let url = redis.url();
    for limit in [&[][..], &["--limit", "2"]] {
        let limit = limit.join(" ");
        let inner = format!(
            "exec \"$0\" -r '{url}' {limit} --wait 2s a -- sh -c 'echo INNER $LOCKRUN_KEY'"
        );
        let middle = format!("exec \"$0\" -r '{url}' b -- sh -c \"$1\" \"$0\"");
        let mut cmd = Lockrun::on(&redis);
        cmd.args(limit.split_whitespace())
            .args(["a", "--", "sh", "-c", &middle])
            .arg(lockrun_bin())
            .arg(&inner);
        let out = run(cmd);
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(0), "{limit}: {err}");
        assert_eq!(stdout_of(&out), "INNER a\n", "{limit}: {err}");
        assert!(
            err.contains("already held by this job (reentrant)"),
            "{limit}: {err}"
        );
        assert!(!redis.exists("a") && !redis.exists("b"));
    }
}

/// The requests clients sent `redis` so far (`INFO commandstats`; the commands a script runs
/// are not requests, and lockrun sends nothing but these).
fn client_requests(redis: &Server) -> u64 {
    ["eval", "evalsha", "subscribe", "unsubscribe", "ping"]
        .iter()
        .map(|c| redis.calls(c))
        .sum()
}

/// Seconds into the day of a text log line's timestamp (`2026-01-02T03:04:05.678901Z  INFO …`).
fn logged_at(line: &str) -> f64 {
    let time = line.split('T').nth(1).and_then(|t| t.split('Z').next());
    let time = time.unwrap_or_else(|| panic!("no timestamp in {line:?}"));
    time.split(':')
        .map(|f| f.parse::<f64>().unwrap())
        .fold(0.0, |acc, f| acc * 60.0 + f)
}

/// What docs/benchmarks.md's contention note states: a run that waits W seconds sends
/// 4 + ⌊W / 1 s⌋ requests (SUBSCRIBE, an attempt on arrival, one attempt a second renewing its
/// ticket, the attempt the release hint wakes, its release), so a queue's cost grows with the
/// time its waiters spend in it. Counted at the server, for a wait under a second and one of
/// over two.
#[test]
fn a_waiter_sends_four_requests_and_one_for_each_second_it_waits() {
    let redis = Server::start();
    for hold in ["0.6", "2.5"] {
        let mut holder = Lockrun::on(&redis);
        holder
            .args(["-t", "30s", "law", "--", "sleep", hold])
            .stderr(Stdio::piped());
        let mut holder = holder.spawn().unwrap();
        wait_for_line(&mut holder, "redis lock acquired");
        let before = client_requests(&redis);
        let mut waiter = Lockrun::on(&redis);
        waiter.args(["--wait", "20s", "law", "true"]);
        let out = run(waiter);
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(0), "{err}");
        assert_eq!(wait_timeout(&mut holder, PATIENCE).unwrap().code(), Some(0));
        // The holder's release is the one request of its that falls in the count.
        let sent = client_requests(&redis) - before - 1;
        // From the reply to its first attempt, when it starts sleeping, to its acquire.
        let at = |needle: &str| logged_at(err.lines().find(|l| l.contains(needle)).unwrap());
        let waited = at("redis lock acquired, starting job") - at("already acquired; waiting");
        eprintln!("held {hold} s: waited {waited:.3} s, sent {sent} requests");
        let whole = waited.floor() as u64;
        // A wake-up within a hair of a whole second may come just before or after that
        // second's renewal.
        let near = (waited - waited.round()).abs() < 0.05;
        assert!(
            sent == 4 + whole || (near && sent == 4 + waited.round() as u64 - 1),
            "waited {waited:.3} s and sent {sent} requests, expected {}:\n{err}",
            4 + whole
        );
    }
}

/// docs/benchmarks.md states that law and its measurement at 10, 100 and 300 waiters
/// (`bash tests/bench/run.sh --update waiting`), and the measured requests per acquisition
/// agree with what the law predicts for the runs measured.
#[test]
fn benchmarks_md_states_the_waiting_law_as_measured() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/benchmarks.md"))
        .unwrap();
    assert!(
        doc.contains("A run that waits W seconds sends 4 + ⌊W / 1 s⌋ requests"),
        "docs/benchmarks.md (tests/bench/decisions.md) must state the law"
    );
    let header = "| waiters | acquisitions | acq/s | mean wait s | requests / acquisition | \
                  4 + mean whole seconds waited |";
    let table: Vec<Vec<f64>> = doc
        .lines()
        .skip_while(|l| !l.starts_with(header))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().parse().unwrap())
                .collect()
        })
        .collect();
    let waiters: Vec<f64> = table.iter().map(|r| r[0]).collect();
    assert_eq!(waiters, [10.0, 100.0, 300.0], "the waiting table's rows");
    for row in &table {
        let (measured, law) = (row[4], row[5]);
        assert!(
            (measured - law).abs() <= 0.1 * law,
            "{} waiters: {measured} requests per acquisition, the law says {law}",
            row[0]
        );
    }
}
