//! Sentinel: `redis+sentinel://host1:port1,…/<service>` finds the master through the Sentinels,
//! follows a failover, and never silently re-acquires a lock the failover lost. Real master,
//! replicas and Sentinels on loopback (support::sentinel).

use crate::support::proxy::{Fault, Proxy};
use crate::support::*;
use std::process::Command;

/// `lockrun -r <url>` with a clean environment.
fn via(url: &str) -> Lockrun {
    Lockrun::bare().url(url)
}

fn redis_cli(port: u16) -> Vec<String> {
    ["redis-cli", "-p", &port.to_string()]
        .map(str::to_string)
        .to_vec()
}

#[test]
fn sentinel_url_finds_the_master_and_the_lock_lives_there_while_the_job_runs() {
    let set = ReplicaSet::start(1);
    let sentinels = Sentinels::start(&set, 3);
    let mut cmd = via(&sentinels.url());
    cmd.args(["sentinel-job", "--"])
        .args(redis_cli(set.master.port()))
        .args(["GET", "sentinel-job"]);
    let out = run(cmd);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        stdout_of(&out).contains("host="),
        "the master had the holder's value while the job ran: {:?}\n{err}",
        stdout_of(&out)
    );
    assert!(err.contains("redis lock acquired, starting job"), "{err}");
    assert!(err.contains("redis lock released"), "{err}");
    assert!(!set.master.exists("sentinel-job"), "released on the master");
    assert!(set.master.exists("lockrun:fence:{sentinel-job}"));

    // The operators' commands take the same URL: status from inside the job sees it held,
    // history afterwards has the run.
    let mut cmd = via(&sentinels.url());
    cmd.args(["sentinel-job", "--"]).arg(lockrun_bin()).args([
        "-r",
        &sentinels.url(),
        "status",
        "--json",
        "sentinel-job",
    ]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let status: serde_json::Value = serde_json::from_str(&stdout_of(&out)).unwrap();
    assert_eq!(status["held"], true, "{status}");
    assert!(status["fence"].as_u64().is_some(), "{status}");
    let mut cmd = via(&sentinels.url());
    cmd.args(["history", "--json", "sentinel-job"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let runs: serde_json::Value = serde_json::from_str(&stdout_of(&out)).unwrap();
    assert_eq!(runs.as_array().map(Vec::len), Some(2), "{runs}");
    assert_eq!(runs[0]["outcome"], "ran", "{runs}");
}

#[test]
fn sentinel_a_dead_sentinel_first_in_the_list_is_skipped() {
    let set = ReplicaSet::start(1);
    let sentinels = Sentinels::start(&set, 3);
    let dead = free_port();
    let url = format!(
        "redis+sentinel://127.0.0.1:{dead},{}/{MASTER_NAME}",
        sentinels.addrs().join(",")
    );
    let mut cmd = via(&url);
    cmd.args(["skip-dead", "--"])
        .args(redis_cli(set.master.port()))
        .args(["EXISTS", "skip-dead"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out).trim(), "1", "{}", stderr_of(&out));
    assert!(!set.master.exists("skip-dead"));
}

#[test]
fn sentinel_unknown_service_is_unavailable_and_named_in_one_line() {
    let set = ReplicaSet::start(1);
    let sentinels = Sentinels::start(&set, 3);
    let url = format!(
        "redis+sentinel://{}/no-such-service",
        sentinels.addrs().join(",")
    );
    let mut cmd = via(&url);
    cmd.args(["unknown-service", "echo", "ran"]);
    let out = run(cmd);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert_eq!(stdout_of(&out), "", "the command never ran");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.contains("no-such-service"), "names the service: {err}");
    assert!(!set.master.exists("unknown-service"));
}

/// Renewals every TTL/3 = 1 s: several of them fall after the failover.
const SHORT_TTL: &str = "3s";

#[test]
fn sentinel_failover_with_acks_keeps_the_lock_on_the_new_master_and_the_job_finishes() {
    // Two replicas: whichever is promoted, the other one follows it at once, so `--acks 1`
    // renewals can be confirmed on the new master.
    let set = ReplicaSet::start(2);
    let sentinels = Sentinels::start(&set, 3);
    let dir = tempfile::tempdir().unwrap();
    let (ready, go) = (dir.path().join("ready"), dir.path().join("go"));
    let mut cmd = via(&sentinels.url());
    cmd.args(["-t", SHORT_TTL, "--acks", "1", "survives", "sh", "-c"])
        .arg(format!(
            "echo \"$LOCKRUN_FENCE\" > '{d}/fence'; touch '{r}'; {w}; exit 7",
            d = dir.path().display(),
            r = ready.display(),
            w = wait_for_go(&go)
        ));
    let mut job = cmd.background(dir.path(), "lockrun");
    job.until("the job started", || ready.exists());
    let value = set.master.cli(&["GET", "survives"]);
    assert!(value.contains("host="), "{value:?}");
    // Acknowledged by one replica; wait for the other too, so the test does not depend on
    // which one the Sentinels promote.
    set.wait_replicated("survives");

    let old_scripts = set.master.script_calls();
    let new_port = sentinels.failover();
    assert_ne!(new_port, set.master.port());
    let new = set.node(new_port);
    // A renewal ran on the new master (a replica runs no scripts of its own before), and the
    // key there is still this holder's.
    job.until_or_explain(
        "a renewal on the new master",
        || new.script_calls() > 0,
        || explain_failover(&set, &sentinels, old_scripts),
    );
    assert_eq!(new.cli(&["GET", "survives"]), value, "{}", job.stderr());
    let fence = std::fs::read_to_string(dir.path().join("fence")).unwrap();
    assert_eq!(
        new.cli(&["EXISTS", "lockrun:fence:{survives}"]),
        "1",
        "the fence counter survived (fence {fence})"
    );

    std::fs::write(&go, "").unwrap();
    let (code, _, err) = job.finish();
    assert_eq!(code, Some(7), "the job's own exit code: {err}");
    assert!(err.contains("redis lock released"), "{err}");
    assert!(!err.contains("redis lock lost"), "{err}");
    assert!(!new.exists("survives"), "released on the new master");
}

/// Where the scripts ran after a failover, and what each node thinks it is: the old master of
/// a forced failover stays up, and says it is a master, until the Sentinels reconfigure it.
fn explain_failover(set: &ReplicaSet, sentinels: &Sentinels, old_scripts_before: u64) -> String {
    let mut text = format!(
        "the Sentinels name {} the master; old master {} ran {} scripts since the failover",
        sentinels.master_port(),
        set.master.port(),
        set.master.script_calls() - old_scripts_before
    );
    for n in set.nodes() {
        let role = n
            .try_cli(&["ROLE"])
            .and_then(|r| r.lines().next().map(str::to_string))
            .unwrap_or_default();
        text.push_str(&format!(
            "\n  node {}: role {role}, {} scripts, {} keys {:?}",
            n.port(),
            n.script_calls(),
            n.keys().len(),
            n.keys()
        ));
    }
    text
}

#[test]
fn sentinel_master_crash_with_acks_keeps_the_lock_and_the_job_finishes() {
    // A real failure: the master is killed, the Sentinels notice (down-after 2 s), agree and
    // promote a replica. The TTL leaves room for that; renewals resume on the new master. Not
    // before the other replica has resynchronised from it, though (--acks 1): on Valkey that
    // takes up to ~6 s after the kill here, so 15 s leases with a 1 s grace (SIGTERM comes
    // 1.75 s before the deadline of the last acknowledged write).
    let set = ReplicaSet::start(2);
    let sentinels = Sentinels::start(&set, 3);
    let dir = tempfile::tempdir().unwrap();
    let (ready, go) = (dir.path().join("ready"), dir.path().join("go"));
    let mut cmd = via(&sentinels.url());
    cmd.args([
        "-t",
        "15s",
        "--kill-after",
        "1s",
        "--acks",
        "1",
        "crash",
        "sh",
        "-c",
    ])
    .arg(format!(
        "touch '{}'; {}; exit 3",
        ready.display(),
        wait_for_go(&go)
    ));
    let mut job = cmd.background(dir.path(), "lockrun");
    job.until("the job started", || ready.exists());
    let value = set.master.cli(&["GET", "crash"]);
    set.wait_replicated("crash");

    set.master.signal(libc::SIGKILL);
    let mut new_port = set.master.port();
    job.until("the Sentinels promoted a replica", || {
        new_port = sentinels.master_port();
        new_port != set.master.port()
    });
    let new = set.node(new_port);
    let epoch = sentinels.config_epoch();
    job.until("a renewal on the new master", || new.script_calls() > 0);
    assert_eq!(new.cli(&["GET", "crash"]), value, "{}", job.stderr());

    std::fs::write(&go, "").unwrap();
    let (code, _, err) = job.finish();
    let state = sentinels.describe(&set);
    assert_eq!(code, Some(3), "the job's own exit code: {err}\n{state}");
    assert!(!err.contains("redis lock lost"), "{err}\n{state}");
    if sentinels.config_epoch() == epoch {
        assert!(err.contains("redis lock released"), "{err}\n{state}");
        assert!(
            !new.exists("crash"),
            "released on the new master {new_port}: {err}\n{state}"
        );
    } else {
        // On a loaded machine the Sentinels can fail over a second time (the shorter their
        // down-after, the likelier): the release goes to a master that is then demoted, or
        // meets its connections killed by the demotion ("broken pipe"). The key left on the
        // current master is then only a lease that expires by its TTL, never a second holder.
        let now = set.node(sentinels.master_port());
        let left: i64 = now.cli(&["PTTL", "crash"]).trim().parse().unwrap_or(-2);
        assert!(
            left == -2 || (0..=15_000).contains(&left),
            "{left}: {err}\n{state}"
        );
    }
}

#[test]
fn sentinel_failover_to_a_replica_that_lost_the_key_ends_the_job_with_76() {
    // One replica: the Sentinels can only promote it. It loses the key, as a write the master
    // acknowledged but had not yet replicated when it failed would be lost.
    let set = ReplicaSet::start(1);
    let sentinels = Sentinels::start(&set, 3);
    let dir = tempfile::tempdir().unwrap();
    let (ready, finished) = (dir.path().join("ready"), dir.path().join("finished"));
    let mut cmd = via(&sentinels.url());
    cmd.args(["-t", SHORT_TTL, "--kill-after", "1s", "lost", "sh", "-c"])
        .arg(format!(
            "touch '{r}'; sleep 25; touch '{f}'",
            r = ready.display(),
            f = finished.display()
        ));
    let mut job = cmd.background(dir.path(), "lockrun");
    job.until("the job started", || ready.exists());
    set.wait_replicated("lost");
    let replica = &set.replicas[0];
    replica.lose_key("lost");

    let new_port = sentinels.failover();
    assert_eq!(new_port, replica.port());
    let (code, _, err) = job.finish();
    assert_eq!(code, Some(76), "the lock was lost: {err}");
    assert!(err.contains("redis lock lost"), "{err}");
    assert!(!finished.exists(), "the job was terminated");
    assert!(
        !replica.exists("lost"),
        "never re-acquired on the new master: {}",
        replica.cli(&["GET", "lost"])
    );
}

#[test]
fn sentinel_failover_never_lets_a_second_holder_in_while_the_first_job_runs() {
    // No --acks: the key reached the replica by ordinary replication before the failover. A
    // forced failover leaves the old master up (still saying it is a master until the Sentinels
    // reconfigure it): renewals must go to the node that is primary now, or the key there
    // expires and a second lockrun, which does ask the Sentinels, takes it.
    let set = ReplicaSet::start(1);
    let sentinels = Sentinels::start(&set, 3);
    let dir = tempfile::tempdir().unwrap();
    let (ready, go, second) = (
        dir.path().join("ready"),
        dir.path().join("go"),
        dir.path().join("second-ran"),
    );
    let mut cmd = via(&sentinels.url());
    cmd.args(["-t", SHORT_TTL, "one-holder", "sh", "-c"])
        .arg(format!(
            "touch '{}'; {}; exit 5",
            ready.display(),
            wait_for_go(&go)
        ));
    let mut first = cmd.background(dir.path(), "first");
    first.until("the first job started", || ready.exists());
    set.wait_replicated("one-holder");
    let old_scripts = set.master.script_calls();
    sentinels.failover();

    // Longer than the TTL: the key would expire on the new master unless renewed there.
    let mut cmd = via(&sentinels.url());
    cmd.args(["-t", SHORT_TTL, "--wait", "8s", "one-holder", "touch"])
        .arg(&second);
    let out = run(cmd);
    assert!(
        !second.exists(),
        "a second holder ran while the first job still held the lock: {}\nfirst: {}\n{}",
        stderr_of(&out),
        first.stderr(),
        explain_failover(&set, &sentinels, old_scripts)
    );
    assert_eq!(out.status.code(), Some(75), "{}", stderr_of(&out));
    std::fs::write(&go, "").unwrap();
    let (code, _, err) = first.finish();
    assert_eq!(code, Some(5), "the first job's own exit code: {err}");
}

#[test]
fn sentinel_after_a_failover_a_new_lockrun_locks_on_the_new_master() {
    let set = ReplicaSet::start(1);
    let sentinels = Sentinels::start(&set, 3);
    let old = set.master.port();
    let new = sentinels.failover();
    let mut cmd = via(&sentinels.url());
    cmd.args(["after", "sh", "-c"]).arg(format!(
        "redis-cli -p {new} EXISTS after; redis-cli -p {old} EXISTS after"
    ));
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(
        stdout_of(&out),
        "1\n0\n",
        "held on the new master {new}, not the old one {old}: {}",
        stderr_of(&out)
    );
    assert!(!set.node(new).exists("after"));
}

const DATA_PW: &str = "data-Pw-91";
const SENTINEL_PW: &str = "sentinel-Pw-27";
const WRONG_PW: &str = "wrong-Pw-55";

#[test]
fn sentinel_passwords_data_nodes_in_the_url_sentinels_apart_and_never_printed() {
    let set = ReplicaSet::start_with_password(1, DATA_PW);
    let sentinels = Sentinels::start_with_password(&set, 3, SENTINEL_PW);
    let addrs = sentinels.addrs().join(",");
    let url = format!("redis+sentinel://:{DATA_PW}@{addrs}/{MASTER_NAME}");
    let dir = tempfile::tempdir().unwrap();
    let pw_file = dir.path().join("sentinel.pw");
    std::fs::write(&pw_file, format!("{SENTINEL_PW}\n")).unwrap();
    let mut outputs = Vec::new();
    let check_job = |cmd: &mut Command, key: &str| {
        cmd.env("REDISCLI_AUTH", DATA_PW)
            .args(["-v", key, "--"])
            .args(redis_cli(set.master.port()))
            .args(["EXISTS", key]);
    };

    // The sentinels' password from the environment.
    let mut cmd = via(&url);
    cmd.env("LOCKRUN_SENTINEL_PASSWORD", SENTINEL_PW);
    check_job(&mut cmd, "pw-env");
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out).trim(), "1", "{}", stderr_of(&out));
    outputs.push(("env", out));

    // … and from a file.
    let mut cmd = via(&url);
    cmd.arg("--sentinel-password-file").arg(&pw_file);
    check_job(&mut cmd, "pw-file");
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out).trim(), "1", "{}", stderr_of(&out));
    outputs.push(("file", out));

    // No sentinel password, or a wrong one: refused, never retried (a long --wait would
    // otherwise outlast `run`'s bound), the command never runs.
    for (what, pw) in [("missing", None), ("wrong", Some(WRONG_PW))] {
        let mut cmd = via(&url);
        if let Some(pw) = pw {
            cmd.env("LOCKRUN_SENTINEL_PASSWORD", pw);
        }
        cmd.args(["-v", "--wait", "10m", "refused", "echo", "ran"]);
        let out = run(cmd);
        assert_eq!(
            out.status.code(),
            Some(69),
            "{what} sentinel password: {}",
            stderr_of(&out)
        );
        assert_eq!(stdout_of(&out), "", "{what}: the command never ran");
        outputs.push((what, out));
    }

    // The URL's credentials are the data nodes': without them the master refuses.
    let mut cmd = via(&format!("redis+sentinel://{addrs}/{MASTER_NAME}"));
    cmd.env("LOCKRUN_SENTINEL_PASSWORD", SENTINEL_PW)
        .args(["-v", "--wait", "10m", "refused", "echo", "ran"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(69), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out), "");
    outputs.push(("no data password", out));

    for (what, out) in &outputs {
        let text = format!("{}{}", stdout_of(out), stderr_of(out));
        for pw in [DATA_PW, SENTINEL_PW, WRONG_PW] {
            assert!(!text.contains(pw), "{what}: output shows {pw}:\n{text}");
        }
    }
    assert!(!set.master.exists("refused"));
}

#[test]
fn sentinel_over_tls_rediss_sentinel_url_with_the_test_ca() {
    let set = ReplicaSet::start_tls(1);
    let sentinels = Sentinels::start(&set, 3);
    let ca = set.certs.as_ref().unwrap().path().join("ca.crt");
    let url = format!(
        "rediss+sentinel://{}/{MASTER_NAME}",
        sentinels.addrs().join(",")
    );
    let mut cmd = via(&url);
    cmd.arg("--tls-ca")
        .arg(&ca)
        .args(["tls-sentinel", "--", "redis-cli"])
        .args(set.master.tls_args())
        .args([
            "-p",
            &set.master.port().to_string(),
            "EXISTS",
            "tls-sentinel",
        ]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out).trim(), "1", "{}", stderr_of(&out));
    assert!(!set.master.exists("tls-sentinel"));
    // Without the test CA the certificates are not trusted: unavailable, nothing ran.
    let mut cmd = via(&url);
    cmd.args(["tls-sentinel", "echo", "ran"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(69), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out), "");
}

#[test]
fn sentinel_the_primary_is_the_one_a_majority_of_the_sentinels_names_not_the_first_answer() {
    // Three sentinels listed; one of them (the fastest to answer) names another primary than
    // the other two: a sentinel cut off with an old, still writable primary looks like this,
    // and so does one of another set under the same service name. lockrun waits for a
    // majority: taking the first answer would put the lock on that primary.
    let (set, stray) = (ReplicaSet::start(1), ReplicaSet::start(0));
    let (sentinels, stray_sentinel) = (Sentinels::start(&set, 2), Sentinels::start(&stray, 1));
    let slow: Vec<Proxy> = sentinels
        .nodes
        .iter()
        .map(|n| {
            let p = Proxy::start(format!("127.0.0.1:{}", n.port()).parse().unwrap());
            p.set(Fault::DelayReplies(std::time::Duration::from_millis(150)));
            p
        })
        .collect();
    let url = format!(
        "redis+sentinel://{},127.0.0.1:{},127.0.0.1:{}/{MASTER_NAME}",
        stray_sentinel.addrs()[0],
        slow[0].port,
        slow[1].port
    );
    for i in 0..3 {
        let mut cmd = via(&url);
        cmd.args([&format!("majority{i}"), "true"]);
        let out = run(cmd);
        assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
        let history = format!("lockrun:history:{{majority{i}}}");
        assert!(
            set.master.exists(&history),
            "run {i} did not lock on the majority's primary: {}",
            stderr_of(&out)
        );
        assert!(
            !stray.master.exists(&history),
            "run {i} locked on the primary a single sentinel named"
        );
    }

    // No majority at all (the two agreeing sentinels gone): unavailable, named in one line.
    drop(slow);
    let mut cmd = via(&url);
    cmd.args(["majority-none", "true"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(69), "{}", stderr_of(&out));
    assert!(!stray.master.exists("lockrun:history:{majority-none}"));
}

#[test]
fn sentinel_failover_during_the_job_the_release_deletes_the_key_on_the_new_primary() {
    // The holder's connection still goes to the old primary when its job ends (before its
    // first renewal): a forced failover leaves that server up, and writable, until the
    // Sentinels reconfigure it several seconds later. The release must go to the primary the
    // sentinel majority names now: deleting the key on the old one and logging "released"
    // would leave the key on the new primary, and a waiter would time out (75).
    let set = ReplicaSet::start(1);
    let sentinels = Sentinels::start(&set, 3);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (ready, go) = (d.join("ready"), d.join("go"));
    // 30 s: the first renewal would come 10 s after the acquire, long after the job ends, so
    // only the release itself can go to the new primary.
    let mut cmd = via(&sentinels.url());
    cmd.args(["-t", "30s", "s-key", "sh", "-c"]).arg(format!(
        "echo \"$LOCKRUN_FENCE\" > '{d}/holder-fence'; touch '{r}'; {w}; exit 4",
        d = d.display(),
        r = ready.display(),
        w = wait_for_go(&go)
    ));
    let mut holder = cmd.background(d, "holder");
    holder.until("the job started", || ready.exists());
    let old = set.master.port();
    set.wait_replicated("s-key");
    let new_port = sentinels.failover();
    assert_ne!(new_port, old);
    let new = set.node(new_port);
    assert!(new.exists("s-key"), "the key reached the new primary");

    // A waiter on the new primary: with the holder's key left behind there (30 s), its 20 s
    // wait would run out.
    let mut cmd = via(&sentinels.url());
    cmd.args(["-t", "10s", "--wait", "20s", "s-key", "sh", "-c"])
        .arg(format!(
            "echo \"fence=$LOCKRUN_FENCE\"; redis-cli -p {new_port} GET s-key"
        ));
    let waiter = cmd.background(d, "waiter");
    eventually("the waiter queued", || waiter.stderr().contains("waiting"));

    std::fs::write(&go, "").unwrap();
    let (code, _, err) = holder.finish();
    assert_eq!(code, Some(4), "the job's own exit code: {err}");
    assert!(err.contains("redis lock released"), "{err}");
    assert!(!err.contains("redis lock lost"), "{err}");
    let waiter_pid = waiter.pid();
    let (code, out, werr) = waiter.finish();
    assert_eq!(
        code,
        Some(0),
        "the waiter got the lock within its wait: {werr}\nholder: {err}\n{}",
        sentinels.describe(&set)
    );
    assert!(
        out.contains(&format!("pid={waiter_pid} ")),
        "the waiter held the key on the new primary {new_port}: {out}"
    );
    assert_waiter_fence_above_holders(d, &out);

    // No key left anywhere: released on the new primary, and the old one, once the Sentinels
    // have made it a replica of the new one, holds a copy of that.
    assert!(!new.exists("s-key"), "released on the new primary");
    set.master.wait_replica_of(new_port);
    assert!(!set.master.exists("s-key"), "{}", sentinels.describe(&set));
}

#[test]
fn sentinel_a_waiter_queued_before_a_failover_acquires_on_the_new_primary_only() {
    // The waiter queues on the old primary; after the failover the holder renews on the new
    // one, and its copy on the old one (3 s TTL) expires there while the old primary still
    // accepts writes (the Sentinels reconfigure it seconds later). Every acquire must go to
    // the primary the sentinel majority names now: a waiter that kept polling the old primary
    // would take the lock there while the holder's job still runs.
    let set = ReplicaSet::start(1);
    let sentinels = Sentinels::start(&set, 3);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (ready, go, running, ran) = (
        d.join("ready"),
        d.join("go"),
        d.join("holder-running"),
        d.join("waiter-ran"),
    );
    let mut cmd = via(&sentinels.url());
    cmd.args(["-t", SHORT_TTL, "w-key", "sh", "-c"]).arg(format!(
        "echo \"$LOCKRUN_FENCE\" > '{d}/holder-fence'; touch '{run}' '{r}'; {w}; rm '{run}'; exit 5",
        d = d.display(),
        run = running.display(),
        r = ready.display(),
        w = wait_for_go(&go)
    ));
    let mut holder = cmd.background(d, "holder");
    holder.until("the job started", || ready.exists());
    let old = set.master.port();

    let mut cmd = via(&sentinels.url());
    cmd.args(["-t", "10s", "--wait", "40s", "w-key", "sh", "-c"])
        .arg(format!(
            "[ -e '{run}' ] && echo overlap; echo \"fence=$LOCKRUN_FENCE\"; touch '{ran}'",
            run = running.display(),
            ran = ran.display()
        ));
    let waiter = cmd.background(d, "waiter");
    eventually("the waiter queued", || waiter.stderr().contains("waiting"));
    set.wait_replicated("w-key");
    let new_port = sentinels.failover();
    assert_ne!(new_port, old);
    let new = set.node(new_port);

    // Longer than the TTL twice over: the holder's copy on the old primary has expired.
    let waiter_pid = waiter.pid();
    let mine = format!("pid={waiter_pid} ");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(8);
    while std::time::Instant::now() < until {
        assert!(
            !ran.exists(),
            "the waiter ran while the holder's job still held the lock\nwaiter: {}\nholder: {}\n{}",
            waiter.stderr(),
            holder.stderr(),
            sentinels.describe(&set)
        );
        // The old primary, while it still is one, never gets the waiter's lock.
        if let Some(v) = set.master.try_cli(&["GET", "w-key"]) {
            if set.master.is_master() {
                assert!(!v.contains(&mine), "locked on the old primary {old}: {v}");
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(
        new.cli(&["GET", "w-key"])
            .contains(&format!("pid={} ", holder.pid())),
        "the holder keeps its lock on the new primary: {}",
        holder.stderr()
    );

    std::fs::write(&go, "").unwrap();
    let (code, _, err) = holder.finish();
    assert_eq!(code, Some(5), "the holder's own exit code: {err}");
    let (code, out, werr) = waiter.finish();
    assert_eq!(
        code,
        Some(0),
        "the waiter got the lock after the holder: {werr}"
    );
    assert!(!out.contains("overlap"), "{out}\n{werr}");
    let waiter_fence = assert_waiter_fence_above_holders(d, &out);
    // The waiter's fence came from the new primary's counter.
    assert_eq!(
        new.cli(&["GET", "lockrun:fence:{w-key}"]),
        waiter_fence.to_string()
    );
    assert!(!new.exists("w-key"), "released on the new primary");
}

#[test]
fn sentinel_a_renewal_stuck_on_a_frozen_primary_moves_to_the_promoted_replica() {
    // A primary that stops answering (SIGSTOP) while a renewal waits for its reply, and a
    // replica promoted well within the lease. The renewal asks the sentinels again while it
    // waits, and goes to the new primary: waiting out the whole request timeout first would
    // stop the holder (76) although its key survives there. Several runs: the outcome must be
    // the same every time.
    const RUNS: usize = 3;
    let lost: Vec<String> = (0..RUNS).filter_map(frozen_primary_run).collect();
    assert!(
        lost.is_empty(),
        "the holder lost its lock in {} of {RUNS} runs:\n\n{}",
        lost.len(),
        lost.join("\n\n")
    );
}

/// One run of the frozen-primary test: None if the job finished with its own exit code, or
/// what went wrong.
fn frozen_primary_run(run: usize) -> Option<String> {
    use std::time::{Duration, Instant};
    let set = ReplicaSet::start(1);
    let sentinels = Sentinels::start(&set, 3);
    let dir = tempfile::tempdir().unwrap();
    let (ready, go) = (dir.path().join("ready"), dir.path().join("go"));
    // A 30 s lease renewed every 10 s; the job is stopped 11 s before its end (the grace,
    // TTL/3, and the margin). A request timeout of 9 s (the default is 3 s) makes a renewal
    // that waits it out end after that moment, whenever the failover completes: the outcome
    // then does not depend on how fast the Sentinels are on a loaded machine.
    let mut cmd = via(&sentinels.url());
    cmd.args(["-t", "30s", "--node-timeout", "9s", "frozen", "sh", "-c"])
        .arg(format!(
            "touch '{}'; {}; exit 3",
            ready.display(),
            wait_for_go(&go)
        ));
    let mut job = cmd.background(dir.path(), "lockrun");
    job.until("the job started", || ready.exists());
    let acquired = Instant::now();
    let value = set.master.cli(&["GET", "frozen"]);
    set.wait_replicated("frozen");
    let old = set.master.port();

    // Frozen about a second before the first renewal, which is then sent to it and waits;
    // the failover is forced once it does (the Sentinels would also start one by themselves,
    // 2 s after the freeze).
    std::thread::sleep(
        (acquired + Duration::from_secs(9)).saturating_duration_since(Instant::now()),
    );
    set.master.signal(libc::SIGSTOP);
    std::thread::sleep(Duration::from_millis(1500));
    let new_port = sentinels.failover_away_from(old);
    let new = set.node(new_port);
    let failed_over = acquired.elapsed();
    let start = Instant::now();
    while new.script_calls() == 0 && start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let moved = acquired.elapsed();
    let held = new.try_cli(&["GET", "frozen"]);
    std::fs::write(&go, "").unwrap();
    let (code, _, err) = job.finish();
    // Awake again, so that describing the nodes does not wait on it forever.
    set.master.signal(libc::SIGCONT);
    if code == Some(3) && held.as_deref() == Some(value.as_str()) {
        // For the record (--nocapture): how much of the lease was left. The job would have
        // been stopped 19 s after the acquire.
        eprintln!(
            "run {run}: a majority named {new_port} {failed_over:.1?} after the acquire, \
             the renewal ran there by {moved:.1?}"
        );
        return None;
    }
    Some(format!(
        "run {run}: exit {code:?}, the key on the new primary {new_port}: {held:?} (ours: {value:?}); \
         a majority named it {failed_over:?} after the acquire\n{err}\n{}",
        sentinels.describe(&set)
    ))
}

#[test]
fn sentinel_a_run_keeps_one_connection_per_sentinel_however_often_it_asks() {
    // Every renewal and the release ask the sentinels which primary is current (a waiting
    // lockrun asks before every attempt): over connections kept for the run, not a new
    // connection (TCP, TLS, AUTH) to every sentinel per question.
    let set = ReplicaSet::start(1);
    let sentinels = Sentinels::start(&set, 3);
    let received = |s: &crate::support::Server| -> u64 {
        s.cli(&["INFO", "stats"])
            .lines()
            .find_map(|l| l.trim().strip_prefix("total_connections_received:"))
            .and_then(|n| n.parse().ok())
            .expect("total_connections_received")
    };
    let before: Vec<u64> = sentinels.nodes.iter().map(received).collect();
    let renewals = set.master.script_calls();
    // 3 s: renewals every second, three of them before the job ends, then the release.
    let mut cmd = via(&sentinels.url());
    cmd.args(["-t", SHORT_TTL, "kept", "sleep", "3.5"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert!(
        set.master.script_calls() - renewals >= 3,
        "acquire, release and at least one renewal: {}",
        stderr_of(&out)
    );
    // Each reading of the counter is a connection of its own.
    let opened: Vec<u64> = sentinels
        .nodes
        .iter()
        .zip(&before)
        .map(|(s, b)| received(s) - b - 1)
        .collect();
    assert!(
        opened.iter().all(|n| *n <= 1),
        "connections lockrun opened to each sentinel: {opened:?}"
    );
}

/// The waiter's `fence=` line in `out` exceeds the fence the holder wrote to `holder-fence`.
fn assert_waiter_fence_above_holders(d: &std::path::Path, out: &str) -> u64 {
    let holder_fence: u64 = std::fs::read_to_string(d.join("holder-fence"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let waiter_fence: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("fence="))
        .and_then(|f| f.trim().parse().ok())
        .unwrap_or_else(|| panic!("no fence in {out:?}"));
    assert!(
        waiter_fence > holder_fence,
        "{waiter_fence} > {holder_fence}"
    );
    waiter_fence
}
