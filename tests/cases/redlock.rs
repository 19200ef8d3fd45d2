//! Redlock: lockrun over 3 or 5 independent redis-servers, the lock held on a majority.
//! Real servers, paused (SIGSTOP) or killed to make nodes fail; every wait is bounded.

use crate::support::*;
use std::process::Stdio;
use std::time::{Duration, Instant};

fn masters(n: usize) -> Vec<Server> {
    (0..n).map(|_| Server::start()).collect()
}

/// `lockrun -r <url> -r <url> …`, one `-r` per master.
fn redlock(nodes: &[Server]) -> Lockrun {
    Lockrun::to(&nodes.iter().map(Server::url).collect::<Vec<_>>())
}

fn joined(nodes: &[Server]) -> String {
    nodes.iter().map(Server::url).collect::<Vec<_>>().join(",")
}

fn get(r: &Server, key: &str) -> Option<String> {
    r.cmd(&["GET", key])
}

/// The fencing counter each node keeps for `key`.
fn counters(nodes: &[Server], key: &str) -> Vec<u64> {
    let counter = format!("lockrun:fence:{{{key}}}");
    nodes
        .iter()
        .map(|r| get(r, &counter).map_or(0, |v| v.parse().unwrap()))
        .collect()
}

fn assert_gone_everywhere(nodes: &[Server], key: &str) {
    for (i, r) in nodes.iter().enumerate() {
        assert!(!r.exists(key), "key {key} left on node {i}");
    }
}

/// A server paused with SIGSTOP until this is dropped, whatever the test's outcome: a
/// stopped server would outlive the test (its Drop's SIGKILL still works, but a failed
/// assertion must not leave anything paused either).
struct Paused(u32);

impl Paused {
    fn new(r: &Server) -> Paused {
        kill(r.pid(), libc::SIGSTOP);
        Paused(r.pid())
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        kill(self.0, libc::SIGCONT);
    }
}

#[test]
fn acquires_renews_and_releases_on_3_and_5_masters() {
    for n in [3, 5] {
        let nodes = masters(n);
        let mut fences = Vec::new();
        for _ in 0..2 {
            // TTL 1.5 s, a 1.2 s job: renewals every 500 ms must carry it. (Tests whose job must
            // outlive a renewal use TTLs of 1.5 s or more: with 600 ms, a 170 ms stall of a loaded
            // CI machine between two renewals passes for a lost lease and stops the job.)
            let mut cmd = redlock(&nodes);
            cmd.args(["-v", "-t", "1500ms", "rl", "--", "sh", "-c"])
                .arg("echo $LOCKRUN_FENCE; sleep 1.2")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let mut child = cmd.spawn().unwrap();
            let mut lines = wait_for_line(&mut child, "redis lock acquired");
            // Held on every node meanwhile, with our value and a lease.
            for (i, r) in nodes.iter().enumerate() {
                let v = get(r, "rl").unwrap_or_else(|| panic!("node {i} of {n} lacks the key"));
                assert!(v.contains(" host="), "{v}");
                assert!(r.cmd::<i64>(&["PTTL", "rl"]) > 0);
            }
            let out = wait_output(child);
            let err = lines.rest();
            assert_eq!(out.status.code(), Some(0), "{err}");
            assert!(err.contains("redis lock renewed"), "{err}");
            assert!(err.contains("redis lock released"), "{err}");
            assert!(!err.contains("WARN"), "{err}");
            assert_gone_everywhere(&nodes, "rl");
            let fence: u64 = stdout_of(&out).trim().parse().unwrap();
            // Every node granted it: the fence is the largest of their counters.
            assert_eq!(fence, *counters(&nodes, "rl").iter().max().unwrap());
            fences.push(fence);
        }
        assert!(fences[1] > fences[0], "{fences:?}");
    }
}

#[test]
fn the_fence_is_the_largest_of_the_granting_nodes() {
    let nodes = masters(3);
    // Far above any TIME in µs, and a whole number to Lua (below 2^53).
    let far = 1u64 << 52;
    nodes[1].cmd::<()>(&["SET", "lockrun:fence:{f}", &far.to_string()]);
    let mut cmd = redlock(&nodes);
    cmd.args(["f", "--", "sh", "-c", "echo $LOCKRUN_FENCE"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out).trim(), (far + 1).to_string());
}

#[test]
fn acquires_exactly_when_a_majority_is_free() {
    let nodes = masters(3);
    for mask in 0u32..8 {
        let key = format!("mask{mask}");
        let taken: Vec<bool> = (0..3).map(|i| mask & (1 << i) != 0).collect();
        for (r, _) in nodes.iter().zip(&taken).filter(|(_, t)| **t) {
            r.cmd::<()>(&["SET", &key, "someone else", "PX", "60000"]);
        }
        let mut cmd = redlock(&nodes);
        cmd.args(["-t", "2s", &key, "--", "echo", "ran"]);
        let out = run(cmd);
        let err = stderr_of(&out);
        let free = taken.iter().filter(|t| !**t).count();
        if free >= 2 {
            assert_eq!(out.status.code(), Some(0), "mask {mask:03b}: {err}");
            assert_eq!(stdout_of(&out), "ran\n");
        } else {
            assert_eq!(out.status.code(), Some(75), "mask {mask:03b}: {err}");
            assert_eq!(stdout_of(&out), "", "mask {mask:03b}");
            assert!(err.contains("redis lock already acquired"), "{err}");
        }
        // Ours is on no node afterwards; the other holder's values are untouched.
        for (i, (r, t)) in nodes.iter().zip(&taken).enumerate() {
            let v = get(r, &key);
            if *t {
                assert_eq!(
                    v.as_deref(),
                    Some("someone else"),
                    "mask {mask:03b} node {i}"
                );
            } else {
                assert_eq!(v, None, "mask {mask:03b} node {i}");
            }
        }
    }
}

#[test]
fn one_paused_node_does_not_stop_the_lock() {
    let nodes = masters(3);
    let _paused = Paused::new(&nodes[2]);
    let start = Instant::now();
    let mut cmd = redlock(&nodes);
    // Node timeout: TTL/10 = 150 ms.
    cmd.args(["-t", "1500ms", "p", "--", "sh", "-c", "sleep 0.7; echo ran"]);
    let out = run(cmd);
    let took = start.elapsed();
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(stdout_of(&out), "ran\n");
    // A few node timeouts (acquire, renewals, release) on top of the job, never the OS's.
    assert!(
        took < Duration::from_millis(700 + 4 * 150 + 2000),
        "{took:?}"
    );
    // Named once: "no reply within 150ms", or the client's own timeout, whichever fired first.
    let named: Vec<_> = err
        .lines()
        .filter(|l| l.contains("the lock holds on the majority"))
        .collect();
    assert_eq!(named.len(), 1, "{err}");
    assert!(named[0].contains(&nodes[2].url()), "{err}");
    assert_gone_everywhere(&nodes[..2], "p");
}

#[test]
fn a_paused_majority_is_unavailable_and_leaves_nothing() {
    let nodes = masters(3);
    let _a = Paused::new(&nodes[0]);
    let _b = Paused::new(&nodes[1]);
    let mut cmd = redlock(&nodes);
    cmd.args(["-t", "1s", "p", "--", "echo", "ran"]);
    let out = run(cmd);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert_eq!(stdout_of(&out), "");
    assert!(err.contains("no majority of the 3 Redis masters"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(!nodes[2].exists("p"), "our key left on the live node");
}

#[test]
fn a_node_killed_mid_run_keeps_the_lock() {
    let nodes = masters(3);
    let mut cmd = redlock(&nodes);
    cmd.args([
        "-t",
        "1500ms",
        "k",
        "--",
        "sh",
        "-c",
        "sleep 1.2; echo done",
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut lines = wait_for_line(&mut child, "redis lock acquired");
    kill(nodes[0].pid(), libc::SIGKILL);
    let out = wait_output(child);
    let err = lines.rest();
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(stdout_of(&out), "done\n");
    assert!(err.contains("the lock holds on the majority"), "{err}");
    assert!(err.contains("redis lock released"), "{err}");
    assert_gone_everywhere(&nodes[1..], "k");
}

#[test]
fn a_majority_killed_mid_run_loses_the_lock() {
    let nodes = masters(3);
    let mut cmd = redlock(&nodes);
    cmd.args(["-t", "600ms", "k", "--", "sleep", "20"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = cmd.spawn().unwrap();
    let mut lines = wait_for_line(&mut child, "redis lock acquired");
    kill(nodes[0].pid(), libc::SIGKILL);
    kill(nodes[1].pid(), libc::SIGKILL);
    let out = wait_output(child);
    let err = lines.rest();
    assert_eq!(out.status.code(), Some(76), "{err}");
    assert!(err.contains("redis lock lost"), "{err}");
    assert!(start.elapsed() < Duration::from_secs(10), "{err}");
}

#[test]
fn a_node_that_lost_its_data_does_not_let_a_second_holder_in() {
    // A restart without persistence, as far as the lock can tell: the node forgets the key.
    // One forgetful node of three leaves our majority intact: a rival gets it there only,
    // gives it back, and our renewals carry on with the other two.
    let nodes = masters(3);
    let mut cmd = redlock(&nodes);
    cmd.args([
        "-t",
        "1500ms",
        "k",
        "--",
        "sh",
        "-c",
        "sleep 1.2; echo done",
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut lines = wait_for_line(&mut child, "redis lock acquired");
    nodes[0].cmd::<()>(&["FLUSHALL"]);
    let mut rival = redlock(&nodes);
    rival.args(["-t", "600ms", "k", "--", "echo", "rival ran"]);
    let rival = run(rival);
    assert_eq!(rival.status.code(), Some(75), "{}", stderr_of(&rival));
    assert_eq!(stdout_of(&rival), "");
    assert!(!nodes[0].exists("k"), "the rival's key left on the node");
    let out = wait_output(child);
    let err = lines.rest();
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(stdout_of(&out), "done\n");
    assert_gone_everywhere(&nodes, "k");
}

#[test]
fn two_urls_and_semaphores_are_refused() {
    let nodes = masters(3);
    let mut cmd = redlock(&nodes[..2]);
    cmd.args(["k", "--", "echo", "ran"]);
    let out = run(cmd);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(err.contains("3 or more"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    // One master given twice: three URLs, but a "majority" of two could be that one server.
    let mut cmd = Lockrun::bare();
    for r in [&nodes[0], &nodes[1], &nodes[0]] {
        cmd.arg("-r").arg(r.url());
    }
    cmd.args(["k", "--", "echo", "ran"]);
    let out = run(cmd);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(err.contains("the same server"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(!nodes[0].exists("k"), "nothing locked");

    let mut cmd = redlock(&nodes);
    cmd.args(["--limit", "2", "k", "--", "echo", "ran"]);
    let out = run(cmd);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(err.contains("--limit"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert_eq!(stdout_of(&out), "");

    // A --node-timeout that does not fit in TTL/3.
    let mut cmd = redlock(&nodes);
    cmd.args([
        "-t",
        "300ms",
        "--node-timeout",
        "100ms",
        "k",
        "--",
        "echo",
        "ran",
    ]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(64), "{}", stderr_of(&out));
    assert!(stderr_of(&out).contains("below TTL/3"));
}

#[test]
fn a_comma_separated_environment_variable_names_the_masters() {
    let nodes = masters(3);
    let mut cmd = Lockrun::bare();
    cmd.env("LOCKRUN_REDIS_URL", joined(&nodes))
        .env("LOCKRUN_NODE_TIMEOUT", "150ms")
        .args(["e", "--", "sh", "-c", "echo $LOCKRUN_FENCE"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let fence: u64 = stdout_of(&out).trim().parse().unwrap();
    // All three handed out a fence: each was asked.
    let c = counters(&nodes, "e");
    assert!(c.iter().all(|&f| f > 0), "{c:?}");
    assert_eq!(fence, *c.iter().max().unwrap());
}

#[test]
fn a_waiter_runs_after_the_holder() {
    let nodes = masters(3);
    let log = nodes[0].dir.path().join("log");
    let mut holder = redlock(&nodes);
    holder
        .args(["-t", "1500ms", "w", "--", "sh", "-c"])
        .arg(format!(
            "echo holder >> '{0}'; sleep 1; echo holder done >> '{0}'",
            log.display()
        ))
        .stderr(Stdio::piped());
    let mut holder = holder.spawn().unwrap();
    let _lines = wait_for_line(&mut holder, "redis lock acquired");
    let mut waiter = redlock(&nodes);
    waiter
        .args(["-t", "1s", "--wait", "20s", "w", "--", "sh", "-c"])
        .arg(format!("echo waiter >> '{}'", log.display()));
    let out = run(waiter);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("waiting"), "{err}");
    assert_eq!(wait_timeout(&mut holder, PATIENCE).unwrap().code(), Some(0));
    assert_eq!(lines(&log), ["holder", "holder done", "waiter"]);
    assert_gone_everywhere(&nodes, "w");
}

#[test]
fn a_nested_lockrun_of_the_same_key_is_reentrant() {
    let nodes = masters(3);
    let urls = joined(&nodes);
    let mut cmd = redlock(&nodes);
    cmd.args(["-t", "2s", "n", "--"]).arg(lockrun_bin()).args([
        "-r",
        &urls,
        "n",
        "--",
        "echo",
        "inner ran",
    ]);
    let start = Instant::now();
    let out = run(cmd);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(stdout_of(&out), "inner ran\n");
    assert!(err.contains("(reentrant)"), "{err}");
    assert!(start.elapsed() < Duration::from_secs(5), "{err}");
    assert_gone_everywhere(&nodes, "n");
}

#[test]
fn passwords_never_show_and_a_refusing_node_is_named_once() {
    let nodes: Vec<Server> = (0..3)
        .map(|_| Server::start_with_password("s3cret-Pw"))
        .collect();
    let mut cmd = redlock(&nodes);
    cmd.args(["-vv", "-t", "1500ms", "s", "--", "sleep", "0.7"]);
    let out = run(cmd);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("s3cret-Pw"), "password leaked: {err}");

    // One node given a wrong password: the majority carries the lock, and the refusing node
    // is named (redacted) once, not on every renewal.
    let port = |i: usize| nodes[i].port();
    let wrong = format!("redis://:wr0ng-Pw@127.0.0.1:{}", port(2));
    let mut cmd = Lockrun::bare();
    cmd.args(["-r", &nodes[0].url(), "-r", &nodes[1].url(), "-r", &wrong])
        .args(["-t", "1500ms", "s", "--", "sleep", "1.2"]);
    let out = run(cmd);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        !err.contains("wr0ng-Pw") && !err.contains("s3cret-Pw"),
        "{err}"
    );
    let named: Vec<_> = err
        .lines()
        .filter(|l| l.contains("authentication failed"))
        .collect();
    assert_eq!(named.len(), 1, "{err}");
    assert!(named[0].contains(&format!("redis://:***@127.0.0.1:{}", port(2))));

    // A majority refusing: exit 69, as with one server, passwords still hidden.
    let wrong = |i: usize| format!("redis://:wr0ng-Pw@127.0.0.1:{}", port(i));
    let mut cmd = Lockrun::bare();
    cmd.args(["-r", &nodes[0].url(), "-r", &wrong(1), "-r", &wrong(2)])
        .args(["--wait", "10s", "s", "--", "echo", "ran"]);
    let start = Instant::now();
    let out = run(cmd);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert!(err.contains("authentication failed"), "{err}");
    assert!(
        !err.contains("wr0ng-Pw") && !err.contains("s3cret-Pw"),
        "{err}"
    );
    // A refusal is not waited out.
    assert!(start.elapsed() < Duration::from_secs(5), "{err}");
    assert_gone_everywhere(&nodes[..1], "s");
}

#[test]
fn a_misused_key_on_any_node_is_a_usage_error() {
    let nodes = masters(3);
    nodes[1].cmd::<()>(&["RPUSH", "l", "x"]);
    let mut cmd = redlock(&nodes);
    cmd.args(["l", "--", "echo", "ran"]);
    let out = run(cmd);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(err.contains("not a lock"), "{err}");
    assert_eq!(stdout_of(&out), "");
    assert!(!nodes[0].exists("l") && !nodes[2].exists("l"));
}

#[test]
fn a_conflict_costs_one_request_per_node() {
    // The crontab case: the lock is held, every node says so. Nothing of ours was set
    // anywhere, so there is nothing to give back (compare one server: 1 EVAL).
    let nodes = masters(3);
    for r in &nodes {
        r.cmd::<()>(&["SET", "c", "someone else", "PX", "60000"]);
    }
    let before: Vec<u64> = nodes.iter().map(|r| r.calls("eval")).collect();
    let mut cmd = redlock(&nodes);
    cmd.args(["c", "--", "echo", "ran"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(75), "{}", stderr_of(&out));
    let after: Vec<u64> = nodes.iter().map(|r| r.calls("eval")).collect();
    let spent: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    assert_eq!(spent, [1, 1, 1]);
}

#[test]
fn a_refusal_that_costs_the_majority_is_reported_not_hidden_as_a_conflict() {
    // One master held by someone else, one free, one refusing our password: the refusal may be
    // what kept us from a majority, so it is reported (69, a configuration mistake), not a
    // conflict (75), which -q -E 0 would silence.
    let nodes: Vec<Server> = (0..3)
        .map(|_| Server::start_with_password("pw-1"))
        .collect();
    nodes[0].cmd::<()>(&["SET", "r", "someone else", "PX", "60000"]);
    let wrong = format!("redis://:nope-2@127.0.0.1:{}", nodes[2].port());
    let mut cmd = Lockrun::bare();
    cmd.args(["-r", &nodes[0].url(), "-r", &nodes[1].url(), "-r", &wrong])
        .args(["-q", "-E", "0", "r", "--", "echo", "ran"]);
    let out = run(cmd);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert!(err.contains("authentication failed"), "{err}");
    assert!(!nodes[1].exists("r"));
    // With the majority held elsewhere it is a conflict whatever the third master says.
    nodes[1].cmd::<()>(&["SET", "r", "someone else", "PX", "60000"]);
    let mut cmd = Lockrun::bare();
    cmd.args(["-r", &nodes[0].url(), "-r", &nodes[1].url(), "-r", &wrong])
        .args(["r", "--", "echo", "ran"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(75), "{}", stderr_of(&out));
}

#[test]
fn with_one_server_node_timeout_is_the_request_timeout() {
    // A paused server: by default lockrun gives up after TTL/3 (1 s for 3 s) per request;
    // --node-timeout 100ms replaces that bound.
    let redis = Server::start();
    let _paused = Paused::new(&redis);
    let mut cmd = Lockrun::on(&redis);
    cmd.args([
        "-t",
        "3s",
        "--node-timeout",
        "100ms",
        "o",
        "--",
        "echo",
        "ran",
    ]);
    let start = Instant::now();
    let out = run(cmd);
    let took = start.elapsed();
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(69), "{err}");
    // Connect + acquire + the cleanup release, 100 ms each, far below the default's seconds.
    assert!(took < Duration::from_millis(900), "{took:?}: {err}");
}

/// The same server spelled several ways (`$U,$U/,$U/0`, `localhost` for `127.0.0.1`, a default
/// port written out) is one master, so it cannot make a "majority" alone: compared as endpoints
/// (host, port, database), such a list is refused (64) before anything is locked; a Sentinel
/// listed twice in one URL likewise.
#[test]
fn the_same_server_spelled_differently_is_one_master() {
    let nodes = [Server::start_tcp()];
    let port = nodes[0].port();
    let u = format!("redis://127.0.0.1:{port}");
    for list in [
        format!("{u},{u}/,{u}/0"),
        format!("{u},redis://localhost:{port},redis://LOCALHOST:{port}/0"),
        format!("{u},redis://[::1]:{port},redis://127.0.0.1:{port}/1"),
    ] {
        let mut cmd = Lockrun::bare();
        cmd.args(["-r", &list, "k", "--", "echo", "ran"]);
        let out = run(cmd);
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(64), "{list}: {err}");
        assert!(err.contains("the same server"), "{list}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert_eq!(stdout_of(&out), "");
        assert!(!nodes[0].exists("k"), "nothing locked");
    }
    // Other databases of one server are other keyspaces, but still one server: refused too
    // (the list above ends with /1). Distinct servers are accepted (the other tests).
    let mut cmd = Lockrun::bare();
    cmd.args([
        "-r",
        "redis+sentinel://127.0.0.1:26379,localhost:26379/mymaster",
        "k",
        "--",
        "echo",
        "ran",
    ]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(64), "{}", stderr_of(&out));
    assert!(
        stderr_of(&out).contains("listed twice"),
        "{}",
        stderr_of(&out)
    );
}
