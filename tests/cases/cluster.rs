//! Redis Cluster: `redis+cluster://seed1,seed2,…` locks each key on the shard that owns it,
//! keeps every helper key in the lock's hash slot, wakes waiters with sharded pub/sub, and
//! follows a failover. Real cluster nodes on loopback (support::cluster).

use crate::support::*;
use std::path::Path;
use std::time::{Duration, Instant};

/// What a finished run leaves behind on purpose: the fencing counter and the run history.
fn bookkeeping(key: &str) -> bool {
    key.starts_with("lockrun:fence:") || key.starts_with("lockrun:history:")
}

fn via(seeds: &str) -> Lockrun {
    Lockrun::bare().url(format!("redis+cluster://{seeds}"))
}

#[test]
fn cluster_locks_keys_of_every_shard_through_one_seed_and_leaves_only_fences() {
    let cluster = Cluster::start(3);
    let seed = cluster.nodes[0].addr();
    let keys: Vec<String> = (0..20).map(|i| format!("slot-key-{i}")).collect();
    let mut owners = std::collections::BTreeSet::new();
    for key in &keys {
        let owner = cluster.owner_of(key).port();
        owners.insert(owner);
        let fence = format!("lockrun:fence:{{{key}}}");
        let mut cmd = via(&seed);
        cmd.args([key.as_str(), "--", "redis-cli", "-p", &owner.to_string()])
            .args(["EXISTS", key.as_str(), fence.as_str()]);
        let out = run(cmd);
        assert_eq!(out.status.code(), Some(0), "{key}: {}", stderr_of(&out));
        assert_eq!(
            stdout_of(&out).trim(),
            "2",
            "{key} and its fence on their owner {owner} during the run: {}",
            stderr_of(&out)
        );
    }
    assert_eq!(owners.len(), 3, "the keys cover every shard: {owners:?}");
    let left = cluster.all_keys();
    assert!(
        left.iter().all(|k| bookkeeping(k)),
        "only fence counters and run histories stay: {left:?}"
    );
    assert_eq!(left.len(), 2 * keys.len(), "{left:?}");

    // The operators' commands see every shard: list scans each primary.
    let mut cmd = Lockrun::bare();
    cmd.args(["list", "--all", "--json", "-r"])
        .arg(format!("redis+cluster://{seed}"));
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let listed: serde_json::Value = serde_json::from_str(&stdout_of(&out)).unwrap();
    let mut names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap())
        .collect();
    let mut expected: Vec<&str> = keys.iter().map(String::as_str).collect();
    names.sort();
    expected.sort();
    assert_eq!(names, expected);
    let mut cmd = Lockrun::bare();
    cmd.args(["history", "--json", "-r"])
        .arg(format!("redis+cluster://{seed}"))
        .arg(&keys[7]);
    let out = run(cmd);
    let runs: serde_json::Value = serde_json::from_str(&stdout_of(&out)).unwrap();
    assert_eq!(runs[0]["outcome"], "ran", "{runs}");
}

/// A holder that runs until the test lets it go, and a `--wait` waiter queued behind it; both
/// must exit 0. `check_while_waiting` runs while the waiter is queued.
fn holder_and_waiter(
    new_cmd: impl Fn() -> Lockrun,
    key: &str,
    dir: &Path,
    check_while_waiting: impl FnOnce(),
) {
    let (ready, go) = (dir.join("ready"), dir.join("go"));
    let mut cmd = new_cmd();
    cmd.args([key, "sh", "-c"])
        .arg(format!("touch '{}'; {}", ready.display(), wait_for_go(&go)));
    let mut holder = cmd.background(dir, "holder");
    holder.until("the holder's job started", || ready.exists());
    let mut cmd = new_cmd();
    cmd.args(["--wait", "20s", key, "echo", "waited"]);
    let mut waiter = cmd.background(dir, "waiter");
    waiter.until("the waiter queued", || {
        waiter_said(dir, "redis lock already acquired; waiting")
    });
    check_while_waiting();
    std::fs::write(&go, "").unwrap();
    let (code, _, err) = holder.finish();
    assert_eq!(code, Some(0), "holder: {err}");
    let (code, out, err) = waiter.finish();
    assert_eq!(code, Some(0), "waiter: {err}");
    assert_eq!(out, "waited\n", "{err}");
}

fn waiter_said(dir: &Path, line: &str) -> bool {
    std::fs::read_to_string(dir.join("waiter.err")).is_ok_and(|t| t.contains(line))
}

#[test]
fn cluster_hash_tagged_key_keeps_its_helpers_in_its_slot() {
    let cluster = Cluster::start(3);
    let key = "job:{tenant1}:x";
    let slot = cluster.slot(key);
    assert_eq!(slot, cluster.slot("tenant1"));
    for what in ["fence", "waiters", "tickets", "wake"] {
        let helper = format!("lockrun:{what}:={key}");
        assert_eq!(cluster.slot(&helper), slot, "{helper}");
    }
    let owner = cluster.owner_of(key);
    let dir = tempfile::tempdir().unwrap();
    holder_and_waiter(
        || via(&cluster.nodes[1].addr()),
        key,
        dir.path(),
        || {
            for helper in [
                format!("lockrun:fence:={key}"),
                format!("lockrun:waiters:={key}"),
                format!("lockrun:tickets:={key}"),
            ] {
                assert!(
                    owner.exists(&helper),
                    "{helper} on the owner {}",
                    owner.port()
                );
            }
        },
    );
    let mut left = cluster.all_keys();
    left.sort();
    assert_eq!(
        left,
        [
            format!("lockrun:fence:={key}"),
            format!("lockrun:history:={key}")
        ]
    );
}

#[test]
fn cluster_wake_ups_use_sharded_pub_sub_on_the_owning_shard() {
    let cluster = Cluster::start(3);
    let key = "wake-me";
    let owner = cluster.owner_of(key);
    let dir = tempfile::tempdir().unwrap();
    holder_and_waiter(|| via(&cluster.seeds()), key, dir.path(), || {});
    assert!(
        owner.calls("spublish") >= 1,
        "the release SPUBLISHed on the owner {}: {}",
        owner.port(),
        owner.cli(&["INFO", "commandstats"])
    );
    assert!(
        owner.calls("ssubscribe") >= 1,
        "the waiter SSUBSCRIBEd on the owner {}",
        owner.port()
    );
    for n in &cluster.nodes {
        assert_eq!(n.calls("publish"), 0, "a plain PUBLISH on {}", n.port());
    }
}

#[test]
fn wake_up_channel_shares_the_key_slot_in_standalone_mode_too() {
    let redis = Server::start();
    for (key, channel) in [
        ("plain-wake", "lockrun:wake:{plain-wake}"),
        ("job:{t9}:wake", "lockrun:wake:=job:{t9}:wake"),
    ] {
        let mut conn = redis.conn();
        conn.set_read_timeout(Some(PATIENCE)).unwrap();
        let mut pubsub = conn.as_pubsub();
        pubsub.psubscribe("lockrun:wake:*").unwrap();
        let dir = tempfile::tempdir().unwrap();
        holder_and_waiter(|| Lockrun::on(&redis), key, dir.path(), || {});
        let msg = pubsub.get_message().expect("a wake-up message");
        assert_eq!(msg.get_channel_name(), channel);
    }
}

#[test]
fn cluster_semaphore_never_runs_more_than_its_limit() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let jobs: Vec<Background> = (0..3)
        .map(|i| {
            let mut cmd = via(&cluster.seeds());
            cmd.args(["--limit", "2", "--wait", "25s", "sem", "sh", "-c"])
                .arg(format!(
                    "echo start >> '{l}'; sleep 1; echo end >> '{l}'",
                    l = log.display()
                ));
            cmd.background(dir.path(), &format!("sem{i}"))
        })
        .collect();
    for (i, job) in jobs.into_iter().enumerate() {
        let (code, _, err) = job.finish();
        assert_eq!(code, Some(0), "sem{i}: {err}");
    }
    let events = lines(&log);
    let (mut running, mut most) = (0, 0);
    for e in &events {
        running += if e == "start" { 1 } else { -1 };
        most = most.max(running);
    }
    assert_eq!(events.len(), 6, "all three ran: {events:?}");
    assert!(most <= 2, "{most} jobs at once: {events:?}");
    let left = cluster.all_keys();
    assert!(left.iter().all(|k| bookkeeping(k)), "{left:?}");
}

#[test]
fn cluster_refuses_a_key_whose_helpers_cannot_share_its_slot() {
    let cluster = Cluster::start(3);
    let mut cmd = via(&cluster.seeds());
    cmd.args(["a}b", "echo", "ran"]);
    let out = run(cmd);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.contains("a}b"), "names the key: {err}");
    assert_eq!(stdout_of(&out), "");
    assert_eq!(cluster.all_keys(), Vec::<String>::new());
    // The same URL with a key that can share its helpers' slot works (so it was the key that
    // was refused), and `a}b` is fine without a Cluster.
    let mut cmd = via(&cluster.seeds());
    cmd.args(["a-b", "echo", "ran"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let redis = Server::start();
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["a}b", "echo", "ran"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out), "ran\n");
}

/// A job holding `key` (with `flags`) through `failover`, which returns the shard's new
/// master: a renewal reaches it and finds the key, the job ends with its own exit code, and the
/// key is released there, never reported lost.
fn holds_through_failover<'c>(
    cluster: &'c Cluster,
    key: &str,
    flags: &[&str],
    failover: impl FnOnce() -> &'c Server,
) -> &'c Server {
    let dir = tempfile::tempdir().unwrap();
    let (ready, go) = (dir.path().join("ready"), dir.path().join("go"));
    let mut cmd = via(&cluster.seeds());
    cmd.args(flags).args([key, "sh", "-c"]).arg(format!(
        "touch '{}'; {}; exit 7",
        ready.display(),
        wait_for_go(&go)
    ));
    let mut job = cmd.background(dir.path(), "lockrun");
    job.until("the job started", || ready.exists());
    let old = cluster.owner_of(key);
    let value = old.cli(&["GET", key]);
    assert!(value.contains("host="), "{value:?}");

    let new = failover();
    assert_ne!(new.port(), old.port());
    job.until("a renewal on the new master", || new.script_calls() > 0);
    assert_eq!(new.cli(&["GET", key]), value, "{}", job.stderr());

    std::fs::write(&go, "").unwrap();
    let (code, _, err) = job.finish();
    assert_eq!(code, Some(7), "the job's own exit code: {err}");
    assert!(err.contains("redis lock released"), "{err}");
    assert!(!err.contains("redis lock lost"), "{err}");
    assert!(!new.exists(key), "released on the new master");
    new
}

#[test]
fn cluster_manual_failover_of_the_lock_shard_keeps_the_lock() {
    let cluster = Cluster::start_with_replicas(3, 1);
    let key = "failover-job";
    // Renewals every second: several fall after the failover.
    let new = holds_through_failover(&cluster, key, &["-t", "3s"], || {
        cluster.failover_shard_of(key)
    });
    assert!(new.exists(&format!("lockrun:fence:{{{key}}}")));
}

#[test]
fn cluster_automatic_failover_after_the_lock_masters_death_keeps_the_lock() {
    // The key's master is SIGKILLed while the job runs; the cluster itself promotes its replica
    // (node timeout 1 s here). With --acks 1 the replica had the key and every renewal, so the
    // job runs on without an overlap: renewals move to the promoted replica and find the key.
    // TTL 12 s: a renewal every 4 s, and a lease that outlasts the failover (about 2–3 s).
    let cluster = Cluster::start_with_replicas(3, 1);
    let key = "auto-failover-job";
    holds_through_failover(&cluster, key, &["-t", "12s", "--acks", "1"], || {
        let replica = cluster.replica_of(key);
        cluster.owner_of(key).signal(libc::SIGKILL);
        replica.wait_until("promoted by the cluster", Server::is_master);
        replica
    });
}

#[test]
fn cluster_a_shard_that_stalls_for_less_than_the_request_timeout_still_locks() {
    // The key's own master holds every write for 1 s (`CLIENT PAUSE ... WRITE`, what a manual
    // failover does while the replica catches up; `PING` still answers, so connecting is
    // unaffected). Within the 2 s request timeout of TTL 6 s lockrun must wait it out: each
    // attempt is given a quarter of the timeout, the request all of it.
    let cluster = Cluster::start(3);
    let key = "stalled-shard";
    let owner = cluster.owner_of(key);
    assert_eq!(owner.cli(&["CLIENT", "PAUSE", "1000", "WRITE"]), "OK");
    let mut cmd = via(&cluster.seeds());
    cmd.args(["-t", "6s", key, "echo", "ran"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out), "ran\n");
    assert!(!owner.exists(key), "released");
}

#[test]
fn cluster_acks_waits_for_the_replicas_of_the_keys_own_shard() {
    // One replica per shard: `--acks 1` holds through a renewal (each WAIT goes to the master
    // that ran the script); `--acks 2` asks for more replicas than the shard has; a frozen
    // replica of the key's shard gets the lock given back. Either way nothing stays locked.
    let cluster = Cluster::start_with_replicas(3, 1);
    let key = "acked-job";
    let mut cmd = via(&cluster.seeds());
    // TTL 12 s: a renewal every 4 s; in a cluster each reply may take a quarter of the 3 s
    // request timeout, and each WAIT two thirds of that, 500 ms: time enough for the one
    // replica's answer on a loaded machine.
    cmd.args([
        "-t",
        "12s",
        "--acks",
        "1",
        key,
        "sh",
        "-c",
        "sleep 4.5; echo ran",
    ]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out), "ran\n");
    assert!(!cluster.owner_of(key).exists(key), "released");

    // The same 500 ms: the one replica's answer is counted, and the count is exactly 1.
    let mut cmd = via(&cluster.seeds());
    cmd.args(["-t", "12s", "--acks", "2", key, "echo", "ran"]);
    assert_unacknowledged(&run(cmd), 1, 2);
    assert!(!cluster.owner_of(key).exists(key), "given back");

    let replica = cluster.replica_of(key);
    replica.signal(libc::SIGSTOP);
    let mut cmd = via(&cluster.seeds());
    cmd.args(["-t", "12s", "--acks", "1", key, "echo", "ran"]);
    let out = run(cmd);
    replica.signal(libc::SIGCONT);
    assert_unacknowledged(&out, 0, 1);
    assert!(!cluster.owner_of(key).exists(key), "given back");
}

#[test]
fn cluster_a_frozen_node_elsewhere_does_not_stop_locks_on_healthy_shards() {
    // A node that accepts connections and never answers (SIGSTOP here; a hung host or a
    // black-holed address alike) must not cost more than part of the request timeout: a key
    // whose shard is healthy still locks, whether the frozen node is another shard's replica or
    // its master, and is listed among the seeds or learnt from the slot map.
    let cluster = Cluster::start_with_replicas(3, 1);
    // A frozen master stays a master: without this, after the harness's node timeout of 1 s its
    // replica would take over, and the cases below would run on another topology each time.
    for node in &cluster.nodes {
        node.cli(&["CONFIG", "SET", "cluster-node-timeout", "60000"]);
    }
    let key = "healthy-shard";
    let owner = cluster.owner_of(key).port();
    let replica = cluster.replica_of(key).port();
    let elsewhere: Vec<&Server> = cluster
        .nodes
        .iter()
        .filter(|n| n.port() != owner && n.port() != replica)
        .collect();
    let other_master = elsewhere.iter().find(|n| n.is_master()).unwrap();
    let other_replica = elsewhere.iter().find(|n| !n.is_master()).unwrap();
    for (frozen, seeds) in [
        (other_replica, cluster.seeds()),
        (other_master, cluster.seeds()),
        (other_master, cluster.owner_of(key).addr()),
    ] {
        frozen.signal(libc::SIGSTOP);
        let mut cmd = via(&seeds);
        // TTL 6 s: requests of 2 s, enough for a frozen node's share and the lock itself.
        cmd.args(["-t", "6s", key, "echo", "ran"]);
        let out = run(cmd);
        frozen.signal(libc::SIGCONT);
        let err = stderr_of(&out);
        assert_eq!(
            out.status.code(),
            Some(0),
            "node {} frozen, seeds {seeds}: {err}",
            frozen.port()
        );
        assert_eq!(stdout_of(&out), "ran\n");
    }
    assert!(!cluster.owner_of(key).exists(key));
}

#[test]
fn cluster_slot_migration_while_holding_is_followed_through_ask_and_moved() {
    let cluster = Cluster::start(3);
    let key = "resharded";
    let dir = tempfile::tempdir().unwrap();
    let (ready, go) = (dir.path().join("ready"), dir.path().join("go"));
    let mut cmd = via(&cluster.seeds());
    // Renewals every second: some while the slot is half moved, some after.
    cmd.args(["-t", "3s", key, "sh", "-c"]).arg(format!(
        "touch '{}'; {}; exit 9",
        ready.display(),
        wait_for_go(&go)
    ));
    let mut job = cmd.background(dir.path(), "lockrun");
    job.until("the job started", || ready.exists());
    let from = cluster.owner_of(key);
    let value = from.cli(&["GET", key]);
    let to = cluster
        .masters()
        .find(|n| n.port() != from.port())
        .expect("another master");
    let before = to.script_calls();

    // Half moved: the keys are on `to`, the old owner answers -ASK.
    cluster.begin_migration(key, to);
    assert_eq!(to.cli_asking(&["EXISTS", key]), "1");
    assert!(
        from.cli(&["EXISTS", key]).starts_with("ASK "),
        "-ASK from the old owner"
    );
    job.until("a renewal on the new owner (after -ASK)", || {
        to.script_calls() > before
    });
    assert_eq!(to.cli_asking(&["GET", key]), value, "{}", job.stderr());

    // Moved: every node names the new owner, the old one answers -MOVED.
    cluster.finish_migration(key, to);
    let after_ask = to.script_calls();
    job.until("a renewal on the new owner (after -MOVED)", || {
        to.script_calls() > after_ask
    });
    assert_eq!(to.cli(&["GET", key]), value, "{}", job.stderr());

    std::fs::write(&go, "").unwrap();
    let (code, _, err) = job.finish();
    assert_eq!(code, Some(9), "the job's own exit code: {err}");
    assert!(err.contains("redis lock released"), "{err}");
    assert!(!err.contains("redis lock lost"), "{err}");
    assert!(!to.exists(key) && !from.exists(key), "released");
    assert!(to.exists(&format!("lockrun:fence:{{{key}}}")));
}

#[test]
fn cluster_a_dead_seed_first_in_the_list_is_skipped() {
    let cluster = Cluster::start(3);
    let key = "dead-seed";
    let owner = cluster.owner_of(key).port();
    let mut cmd = via(&format!(
        "127.0.0.1:{},{}",
        free_port(),
        cluster.nodes[0].addr()
    ));
    cmd.args([key, "--", "redis-cli", "-p", &owner.to_string()])
        .args(["EXISTS", key]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out).trim(), "1", "{}", stderr_of(&out));
    assert!(cluster.all_keys().iter().all(|k| bookkeeping(k)));
}

#[test]
fn cluster_over_tls_rediss_cluster_url_with_the_test_ca() {
    let cluster = Cluster::start_tls(3);
    let ca = cluster.certs.as_ref().unwrap().path().join("ca.crt");
    let url = format!("rediss+cluster://{}", cluster.nodes[0].addr());
    for key in ["tls-a", "tls-b", "tls-c", "tls-d"] {
        let owner = cluster.owner_of(key);
        let mut cmd = Lockrun::bare();
        cmd.arg("-r")
            .arg(&url)
            .arg("--tls-ca")
            .arg(&ca)
            .args([key, "--", "redis-cli"])
            .args(owner.tls_args())
            .args(["-p", &owner.port().to_string(), "EXISTS", key]);
        let out = run(cmd);
        assert_eq!(out.status.code(), Some(0), "{key}: {}", stderr_of(&out));
        assert_eq!(stdout_of(&out).trim(), "1", "{key}: {}", stderr_of(&out));
    }
    assert!(cluster.all_keys().iter().all(|k| bookkeeping(k)));
    let mut cmd = Lockrun::bare();
    cmd.arg("-r").arg(&url).args(["tls-a", "echo", "ran"]);
    let out = run(cmd);
    assert_eq!(
        out.status.code(),
        Some(69),
        "untrusted: {}",
        stderr_of(&out)
    );
    assert_eq!(stdout_of(&out), "");
}

/// `--standby` on a Cluster: the tick record lives in the lock's slot (the scripts touch it with
/// the lock), standbys wait on the owning shard, and a killed job hands the tick on there.
#[test]
fn cluster_standby_hands_a_tick_on_within_the_locks_slot() {
    let cluster = Cluster::start(3);
    let seed = cluster.nodes[0].addr();
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let pid = dir.path().join("pid");
    let host = |name: &str, rest: &str| {
        let mut cmd = via(&seed);
        let job = format!(
            "echo {name} >> '{}'; echo $$ > '{}'; {rest}",
            ran.display(),
            pid.display()
        );
        cmd.args(["--standby", "-E", "0", "--every", "1m", "tick-{t}", "--"])
            .args(["sh", "-c", &job]);
        cmd.background(dir.path(), name)
    };
    let a = host("a", "sleep 60");
    wait_for_file(&pid);
    eventually("a's pid", || !lines(&pid).is_empty());
    let job: u32 = lines(&pid)[0].parse().unwrap();
    let owner = cluster.owner_of("tick-{t}").port().to_string();
    let tick_key = "lockrun:tick:=tick-{t}";
    let exists = |key: &str| -> String {
        let out = std::process::Command::new("redis-cli")
            .args(["-p", &owner, "EXISTS", key])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(exists(tick_key), "1", "the tick record on the lock's owner");
    let b = host("b", "true");
    eventually("b stands by", || {
        b.stderr().contains("standing by for the rest of this tick")
    });
    kill(job, libc::SIGKILL);
    assert_eq!(a.finish().0, Some(137));
    let (code, _, err) = b.finish();
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("running it here"), "{err}");
    assert_eq!(lines(&ran), ["a", "b"]);
}

/// A standby's wake-ups survive a failover of the lock's shard: after it, a killed job's
/// hand-on reaches the standby at once (its subscription made again where the slot now
/// lives), not at its next look, when the holder's lease (`ttl`: long enough for the holder
/// to renew through the failover) would end. `failover` fails the shard of `key` over.
fn standby_hears_a_hand_on_after(cluster: &Cluster, key: &str, ttl: &str, failover: impl FnOnce()) {
    let seeds = cluster.seeds();
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let host = |name: &str, rest: &str| {
        let mut cmd = via(&seeds);
        let pid = dir.path().join(format!("{name}.pid"));
        let job = format!(
            "echo {name} >> '{}'; echo $$ > '{}'; {rest}",
            ran.display(),
            pid.display()
        );
        cmd.args([
            "-v",
            "--standby",
            "-E",
            "0",
            "--every",
            "1m",
            "--ttl",
            ttl,
            key,
            "--",
        ])
        .args(["sh", "-c", &job]);
        cmd.background(dir.path(), name)
    };
    let a = host("a", "sleep 60");
    let pid = dir.path().join("a.pid");
    wait_for_file(&pid);
    eventually("a's pid", || !lines(&pid).is_empty());
    let job: u32 = lines(&pid)[0].parse().unwrap();
    let b = host("b", "true");
    eventually("b stands by", || {
        b.stderr().contains("standing by for the rest of this tick")
    });
    failover();
    // Each of b's looks that finds the tick under way says so (a debug line), once per renewal
    // of a's lease (every TTL/3) or less often.
    let looks = || b.stderr().matches("DEBUG waiting for the lock").count();
    let n = looks();
    eventually("b looks twice after the failover", || looks() >= n + 2);
    // Right after one of b's looks, its next a second or more away: only a hint can wake it
    // sooner.
    let n = looks();
    eventually("one more look", || looks() > n);
    let killed = Instant::now();
    kill(job, libc::SIGKILL);
    eventually("b runs the tick", || lines(&ran).len() == 2);
    let took = killed.elapsed();
    assert_eq!(a.finish().0, Some(137));
    let (code, _, err) = b.finish();
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("running it here"), "{err}");
    assert_eq!(lines(&ran), ["a", "b"]);
    assert!(
        took < Duration::from_millis(300),
        "the hand-on reached b {took:?} after the kill: {err}"
    );
}

#[test]
fn cluster_standby_hears_a_hand_on_after_a_manual_failover() {
    let cluster = Cluster::start_with_replicas(3, 1);
    let key = "tick-{manual}";
    standby_hears_a_hand_on_after(&cluster, key, "3s", || {
        cluster.failover_shard_of(key);
    });
}

#[test]
fn cluster_standby_hears_a_hand_on_after_its_master_died() {
    let cluster = Cluster::start_with_replicas(3, 1);
    let key = "tick-{died}";
    // The promotion comes about 2.5 s after the kill: a's lease outlasts it.
    standby_hears_a_hand_on_after(&cluster, key, "8s", || {
        let owner = cluster.owner_of(key);
        let replica = cluster.replica_of(key);
        // The tick's record and the lock on the replica before its master dies.
        assert_eq!(owner.cli(&["WAIT", "1", "2000"]), "1");
        owner.signal(libc::SIGKILL);
        replica.wait_until("promoted by the cluster", Server::is_master);
    });
}
