//! `--acks N`: a lock (and each renewal) counts only once N replicas have it, so a failover to
//! a replica cannot hand the key to a second holder. Real master + replicas (support::replication).

use crate::support::*;
use std::process::Stdio;

fn on(set: &ReplicaSet) -> Lockrun {
    Lockrun::bare().url(format!("redis://{}", set.master.addr()))
}

#[test]
fn acks_from_live_replicas_let_the_job_run_and_the_key_reaches_them() {
    let set = ReplicaSet::start(2);
    let mut cmd = on(&set);
    cmd.args(["--acks", "2", "replicated", "sh", "-c"])
        .arg(format!(
            "redis-cli -p {} GET replicated",
            set.replicas[0].port()
        ));
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    // The replica had the holder's value while the job ran: WAIT returned after it did.
    assert!(stdout_of(&out).contains("host="), "{}", stdout_of(&out));
    assert_eq!(set.master.cli(&["EXISTS", "replicated"]), "0");
}

#[test]
fn acks_cost_no_extra_round_trip() {
    // The WAIT rides in the same round trip as the script it acknowledges: an uncontended run
    // is still exactly two (acquire, release), counted at a proxy in front of the master.
    let set = ReplicaSet::start(1);
    let master: std::net::SocketAddr = set.master.addr().parse().unwrap();
    let proxy = crate::support::proxy::Proxy::start(master);
    // A first run on a fresh server also loads the scripts there (EVALSHA answered NOSCRIPT,
    // then EVAL): two more round trips, once per server. Counted from the second run on.
    let mut warm = Lockrun::bare();
    warm.args(["-r", &proxy.url(), "trips", "true"]);
    assert_eq!(run(warm).status.code(), Some(0));
    for acks in ["0", "1"] {
        let before = proxy.round_trips();
        let mut cmd = Lockrun::bare();
        cmd.args(["-r", &proxy.url(), "--acks", acks, "trips", "true"]);
        let out = run(cmd);
        assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
        assert_eq!(proxy.round_trips() - before, 2, "--acks {acks}");
    }
    // And the WAIT did run: the master counted one per write.
    let stats = set.master.cli(&["INFO", "commandstats"]);
    assert!(stats.contains("cmdstat_wait:calls=2,"), "{stats}");
}

#[test]
fn too_few_replicas_means_not_acquired_and_nothing_left_locked() {
    let set = ReplicaSet::start(1);
    for wait in [&[][..], &["--wait", "1500ms"]] {
        let mut cmd = on(&set);
        // A lease of 3 s gives WAIT ~667 ms (two thirds of the 1 s request timeout), not the
        // 200 ms of a 900 ms lease: the one replica answers well within that even on a loaded
        // machine, so the count it reports is exactly 1.
        cmd.args(["-t", "3s", "--acks", "2"])
            .args(wait)
            .args(["short", "echo", "ran"]);
        assert_unacknowledged(&run(cmd), 1, 2);
        assert_eq!(
            set.master.cli(&["EXISTS", "short"]),
            "0",
            "given back at once"
        );
    }
}

#[test]
fn a_stopped_replica_means_not_acquired_and_nothing_left_locked() {
    // The replica is attached but frozen (SIGSTOP): the master has it, WAIT gets no answer
    // from it. The acquire must fail cleanly, not hang, and leave no key on the master.
    let set = ReplicaSet::start(1);
    let replica = &set.replicas[0];
    replica.signal(libc::SIGSTOP);
    let mut cmd = on(&set);
    cmd.args(["-t", "900ms", "--acks", "1", "frozen", "echo", "ran"]);
    let out = run(cmd);
    replica.signal(libc::SIGCONT);
    assert_unacknowledged(&out, 0, 1);
    assert_eq!(set.master.cli(&["EXISTS", "frozen"]), "0", "given back");
}

#[test]
fn renewals_that_no_replica_confirms_stop_the_job_before_its_lease_ends() {
    let set = ReplicaSet::start(1);
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    let mut cmd = on(&set);
    // TTL 3 s: the acquire's WAIT may take up to 666 ms (two thirds of the TTL/3 request
    // timeout). With 900 ms (200 ms) a replica starved of CPU by a loaded machine missed it and
    // the job never started.
    cmd.args(["-t", "3s", "--acks", "1", "renewed", "sh", "-c"])
        .arg(format!("touch '{}'; exec sleep 30", ready.display()))
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    wait_for_file_of(&mut child, &ready);
    // The replica stops acknowledging: the master still renews, but lockrun may not count it.
    let replica = &set.replicas[0];
    replica.signal(libc::SIGSTOP);
    let status = wait_timeout(&mut child, PATIENCE);
    replica.signal(libc::SIGCONT);
    let out = wait_output(child);
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(76),
        "{}",
        stderr_of(&out)
    );
    assert!(
        stderr_of(&out).contains("no renewal confirmed in time"),
        "{}",
        stderr_of(&out)
    );
}

#[test]
fn fsync_waits_for_the_append_only_file_or_says_what_is_missing() {
    // Valkey 8 has WAITAOF; with its append-only file on, the lock counts once it is on disk.
    let valkey = Server::start_valkey();
    let mut cmd = Lockrun::on(&valkey);
    cmd.args(["--fsync", "no-aof", "echo", "ran"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(69), "{}", stderr_of(&out));
    assert!(
        stderr_of(&out).contains("appendonly yes"),
        "{}",
        stderr_of(&out)
    );
    assert!(!valkey.exists("no-aof"), "given back");
    valkey.cmd::<()>(&["CONFIG", "SET", "appendonly", "yes"]);
    eventually("the append-only file to be written", || {
        let info: String = valkey.cmd(&["INFO", "persistence"]);
        info.contains("aof_rewrite_in_progress:0") && info.contains("aof_enabled:1")
    });
    let mut cmd = Lockrun::on(&valkey);
    cmd.args(["--fsync", "-t", "3s", "aof", "echo", "ran"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out), "ran\n");
    // Redis 7.0 has no WAITAOF: a clear refusal, nothing left locked.
    let redis = Server::start_redis();
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["--fsync", "old", "echo", "ran"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(69), "{}", stderr_of(&out));
    assert!(
        stderr_of(&out).contains("--fsync needs WAITAOF"),
        "{}",
        stderr_of(&out)
    );
    assert_eq!(stdout_of(&out), "");
    assert!(!redis.exists("old"));
}

#[test]
fn a_failed_acks_acquire_waits_for_the_replicas_once_and_says_so_once() {
    // The replica is frozen: the acquire's WAIT gets no acknowledgement. What the acquire took
    // is given back without waiting for replicas again (a give-back that does not reach them
    // leaves only a key of ours that expires by its TTL, and no job of ours runs), and the
    // run says one thing: why it did not start. (One WAIT, the acquire's, not three with its
    // own give-back's and the caller's cleanup's, ~2.0 s at TTL 3 s, and no "release not
    // acknowledged" line.)
    let set = ReplicaSet::start(1);
    let replica = &set.replicas[0];
    let waits_before = set.master.calls("wait");
    replica.signal(libc::SIGSTOP);
    let mut cmd = on(&set);
    // TTL 3 s: request timeout 1 s, WAIT 666 ms.
    cmd.args(["-t", "3s", "--acks", "1", "once", "echo", "ran"]);
    let started = std::time::Instant::now();
    let out = run(cmd);
    let took = started.elapsed();
    replica.signal(libc::SIGCONT);
    let err = stderr_of(&out);
    assert_unacknowledged(&out, 0, 1);
    assert_eq!(
        set.master.calls("wait") - waits_before,
        1,
        "WAITs sent\n{err}"
    );
    assert!(!err.contains("not acknowledged"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        took < std::time::Duration::from_millis(1300),
        "{took:?}\n{err}"
    );
    assert_eq!(set.master.cli(&["EXISTS", "once"]), "0", "given back");
}
