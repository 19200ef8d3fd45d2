//! lockrun against Valkey 8.1 (the BSD fork of Redis): every script and every path of the lock
//! (acquire, conflict, fence, renewal, loss, waiting queue and wake-ups, semaphores,
//! reentrancy) through the real binary, on a real valkey-server.

use crate::support::*;
use std::process::Stdio;
use std::thread;
use std::time::Duration;

#[test]
fn valkey_runs_the_job_fences_it_and_releases() {
    let valkey = Server::start_valkey();
    let info: String = valkey.cmd(&["INFO", "server"]);
    assert!(
        info.contains("valkey_version:"),
        "not a Valkey server: {info}"
    );
    let mut fences = Vec::new();
    for _ in 0..3 {
        let mut cmd = Lockrun::on(&valkey);
        cmd.args(["vk", "--", "sh", "-c", "echo $LOCKRUN_FENCE"]);
        let out = run(cmd);
        assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
        fences.push(stdout_of(&out).trim().parse::<u64>().unwrap());
    }
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
    assert!(!valkey.exists("vk"));
}

#[test]
fn valkey_conflict_wait_and_renewal() {
    let valkey = Server::start_valkey();
    let ready = valkey.dir.path().join("held");
    // A holder that spans two renewals (TTL 3 s, one every second; 2.5 s of work). A shorter TTL
    // lets one stall of a loaded CI machine pass for a lost lease, or fail the acquire itself
    // (each request has TTL/3).
    let mut holder = Lockrun::on(&valkey);
    holder
        .args(["-t", "3s", "vkq", "--", "sh", "-c"])
        .arg(format!("touch '{}'; sleep 2.5", ready.display()))
        .stderr(Stdio::piped());
    let mut holder = holder.spawn().unwrap();
    wait_for_file_of(&mut holder, &ready);
    // No wait: a conflict, 75.
    let mut cmd = Lockrun::on(&valkey);
    cmd.args(["vkq", "true"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(75), "{}", stderr_of(&out));
    assert!(stderr_of(&out).contains("redis lock already acquired"));
    // Waiting: queued, woken when the holder releases, runs.
    let mut cmd = Lockrun::on(&valkey);
    cmd.args(["--wait", "10s", "vkq", "echo", "waited"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out), "waited\n");
    let holder = wait_output(holder);
    assert_eq!(holder.status.code(), Some(0), "{}", stderr_of(&holder));
    assert!(!valkey.exists("vkq"));
    assert!(!valkey.exists("lockrun:waiters:{vkq}"));
}

#[test]
fn valkey_lock_loss_stops_the_job() {
    let valkey = Server::start_valkey();
    let ready = valkey.dir.path().join("lost.ready");
    let mut cmd = Lockrun::on(&valkey);
    // TTL 1.5 s: long enough for the acquire (TTL/3) on a loaded machine, short to notice the loss.
    cmd.args(["-t", "1500ms", "vklost", "--", "sh", "-c"])
        .arg(format!("touch '{}'; exec sleep 30", ready.display()))
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    wait_for_file_of(&mut child, &ready);
    valkey.cmd::<i64>(&["DEL", "vklost"]);
    let status = wait_timeout(&mut child, PATIENCE).expect("lockrun exits");
    assert_eq!(status.code(), Some(76));
}

#[test]
fn valkey_semaphore_and_reentrancy() {
    let valkey = Server::start_valkey();
    let dir = valkey.dir.path();
    let mut children = Vec::new();
    for i in 0..2 {
        let mut cmd = Lockrun::on(&valkey);
        cmd.args(["--limit", "2", "vksem", "--", "sh", "-c"])
            .arg(format!("touch '{}/in{i}'; sleep 1", dir.display()))
            .stderr(Stdio::piped());
        children.push(cmd.spawn().unwrap());
    }
    for (i, child) in children.iter_mut().enumerate() {
        wait_for_file_of(child, &dir.join(format!("in{i}")));
    }
    // Full: a third holder conflicts.
    let mut cmd = Lockrun::on(&valkey);
    cmd.args(["--limit", "2", "vksem", "true"]);
    assert_eq!(run(cmd).status.code(), Some(75));
    for c in children {
        let out = wait_output(c);
        assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    }
    assert!(!valkey.exists("vksem"));
    // A nested lockrun of the same key runs inside the outer one.
    let bin = lockrun_bin().display().to_string();
    let mut cmd = Lockrun::on(&valkey);
    cmd.args(["vkre", "--", "sh", "-c"])
        .arg(format!("'{bin}' -r '{}' vkre echo inner", valkey.url()));
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out), "inner\n");
    assert!(stderr_of(&out).contains("reentrant"));
    thread::sleep(Duration::from_millis(10));
    assert!(!valkey.exists("vkre"));
}
