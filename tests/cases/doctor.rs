//! `lockrun doctor`: its findings against real servers configured the ways it checks for
//! (persistence, eviction, replication, ACL users that may not run what it asks), its probe
//! lock against servers where runs cannot lock (no scripts, full, fake: it fails as a run does),
//! a server that answers slowly (bounded, printed as it goes), and its exit codes: 0 nothing to
//! fix, 1 a `warn` or `fail`, 69 no server, 64 usage. Every test passes on Redis and on Valkey
//! (`LOCKRUN_TEST_SERVER=valkey`).

use crate::support::*;
use std::process::Output;

fn doctor_at(url: &str, args: &[&str]) -> Output {
    let mut cmd = Lockrun::bare();
    cmd.arg("doctor").args(args).arg("-r").arg(url);
    run(cmd)
}

fn doctor(redis: &Server, args: &[&str]) -> Output {
    doctor_at(&redis.url(), args)
}

/// The finding lines of `check`: (verdict, detail).
fn lines_of(out: &Output, check: &str) -> Vec<(String, String)> {
    stdout_of(out)
        .lines()
        .filter(|l| l.len() > 26 && !l.starts_with("server: "))
        .map(|l| (l[..13].trim(), l[13..26].trim(), &l[26..]))
        .filter(|(_, c, _)| *c == check)
        .map(|(v, _, d)| (v.to_string(), d.to_string()))
        .collect()
}

/// The one finding line of `check`, asserted to say `verdict`; its detail.
fn line(out: &Output, check: &str, verdict: &str) -> String {
    let found = lines_of(out, check);
    assert_eq!(found.len(), 1, "one {check} line in:\n{}", stdout_of(out));
    assert_eq!(found[0].0, verdict, "{check}:\n{}", stdout_of(out));
    found[0].1.clone()
}

fn valkey() -> bool {
    std::env::var("LOCKRUN_TEST_SERVER").as_deref() == Ok("valkey")
}

#[test]
fn doctor_on_a_default_server_warns_of_no_persistence_only() {
    let redis = Server::start();
    let out = doctor(&redis, &["nightly"]);
    let err = stderr_of(&out);
    // The harness's servers persist nothing: the one warning, so exit 1.
    assert_eq!(out.status.code(), Some(1), "{}{err}", stdout_of(&out));
    let server = line(&out, "server", "info");
    let kind = if valkey() { "Valkey " } else { "Redis " };
    assert!(server.starts_with(kind), "{server}");
    assert!(line(&out, "role", "info").contains("primary without replicas"));
    let persistence = line(&out, "persistence", "warn");
    assert!(persistence.contains("no persistence"), "{persistence}");
    assert!(persistence.contains("fencing numbers still increase"));
    assert!(line(&out, "eviction", "ok").starts_with("noeviction"));
    line(&out, "cluster", "info");
    assert!(line(&out, "slot", "info").contains("'nightly'"));
    assert!(line(&out, "latency", "ok").contains("over 20 round trips"));
    line(&out, "clock", "ok");
    assert!(line(&out, "acl", "ok").contains("ACL DRYRUN"));
    line(&out, "lock", "ok");
    // The probe lock left nothing behind.
    let keys: Vec<String> = redis.cmd(&["KEYS", "*"]);
    assert!(keys.is_empty(), "{keys:?}");
}

#[test]
fn doctor_warns_when_a_held_lock_may_be_evicted() {
    let redis = Server::start();
    redis.cmd::<()>(&["CONFIG", "SET", "appendonly", "yes"]);
    redis.cmd::<()>(&["CONFIG", "SET", "maxmemory-policy", "volatile-lru"]);
    // Without a memory limit nothing is evicted: info, and nothing else to fix.
    let out = doctor(&redis, &[]);
    assert!(line(&out, "eviction", "info").contains("maxmemory is 0"));
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    redis.cmd::<()>(&["CONFIG", "SET", "maxmemory", "100mb"]);
    let out = doctor(&redis, &[]);
    let eviction = line(&out, "eviction", "warn");
    assert!(
        eviction.starts_with("volatile-lru with maxmemory 100"),
        "{eviction}"
    );
    assert_eq!(out.status.code(), Some(1), "{}", stdout_of(&out));
}

#[test]
fn doctor_with_an_append_only_file_finds_nothing_to_fix() {
    let redis = Server::start();
    redis.cmd::<()>(&["CONFIG", "SET", "appendonly", "yes"]);
    let out = doctor(&redis, &[]);
    let persistence = line(&out, "persistence", "ok");
    assert!(
        persistence.starts_with("AOF, appendfsync everysec"),
        "{persistence}"
    );
    // WAITAOF: Redis 7.2+, Valkey 8+ (the suite's Redis may be 7.0).
    let fsync = &lines_of(&out, "fsync")[0];
    assert!(fsync.0 == "ok" || fsync.1.contains("WAITAOF"), "{fsync:?}");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout_of(&out),
        stderr_of(&out)
    );
}

/// An ACL user on `redis` with these rules; its URL.
fn user(redis: &Server, name: &str, rules: &str) -> String {
    let mut words = vec!["ACL", "SETUSER", name, "on", ">doc-Pw-1", "resetkeys", "~*"];
    words.extend(rules.split_whitespace());
    redis.cmd::<()>(&words);
    format!("redis://{name}:doc-Pw-1@127.0.0.1:{}", redis.port())
}

#[test]
fn doctor_says_cannot_check_what_the_user_may_not_ask() {
    let redis = Server::start_tcp();
    let url = user(&redis, "noconfig", "&* +@all -config");
    let out = doctor_at(&url, &[]);
    let code = out.status.code();
    assert!(
        code == Some(0) || code == Some(1),
        "{code:?}: {}",
        stderr_of(&out)
    );
    let persistence = line(&out, "persistence", "cannot check");
    assert!(
        persistence.contains("CONFIG GET is denied"),
        "{persistence}"
    );
    // What INFO answers is still checked.
    line(&out, "eviction", "ok");
    assert!(!stdout_of(&out).contains("doc-Pw-1"));
    assert!(!stderr_of(&out).contains("doc-Pw-1"));
}

/// The ACL line documented for lockrun releases without the run history and the operators'
/// commands: without +evalsha, +xadd, +xrevrange and +scan.
const LOCKRUN_RULES: &str = "resetchannels &lockrun:wake:* -@all +eval +subscribe +select \
    +del +exists +get +pexpire +pttl +publish +set +time +type +zadd +zcard +zcount +zrange \
    +zrangebyscore +zrank +zrem +zremrangebyscore +zscore";

#[test]
fn doctor_names_the_commands_a_user_lacks() {
    let redis = Server::start_tcp();
    // Without ACL permissions doctor asks redis.acl_check_cmd in a script; with them, ACL DRYRUN.
    let plain = user(&redis, "plain", LOCKRUN_RULES);
    let admin = user(
        &redis,
        "admin",
        &format!("{LOCKRUN_RULES} +acl|whoami +acl|dryrun"),
    );
    for url in [plain, admin] {
        let out = doctor_at(&url, &[]);
        assert_eq!(out.status.code(), Some(1), "{url}: {}", stderr_of(&out));
        let acl = lines_of(&out, "acl");
        assert_eq!(acl.len(), 3, "{}", stdout_of(&out));
        assert_eq!(acl[0].0, "warn");
        assert!(acl[0].1.contains("may not run XADD:"), "{acl:?}");
        assert_eq!(acl[1].0, "info");
        assert!(acl[1].1.contains("may not run EVALSHA:"), "{acl:?}");
        assert_eq!(acl[2].0, "info");
        assert!(acl[2].1.contains("XREVRANGE, SCAN"), "{acl:?}");
        // This user may not run INFO: the checks that need it cannot be made.
        line(&out, "persistence", "cannot check");
        line(&out, "clock", "ok");
        // Nor EVALSHA: its runs, and doctor's probe lock, go by EVAL.
        assert!(line(&out, "lock", "ok").contains("by EVAL only"));
    }
    // A command the scripts need is a failure; the user is named when WHOAMI may be asked.
    let url = user(&redis, "nozadd", "&* +@all -zadd");
    let out = doctor_at(&url, &[]);
    let acl = lines_of(&out, "acl");
    assert_eq!(acl[0].0, "fail", "{acl:?}");
    assert!(
        acl[0].1.starts_with("user 'nozadd' may not run ZADD:"),
        "{acl:?}"
    );
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn doctor_fails_a_replica_and_counts_a_primarys_replicas() {
    let set = ReplicaSet::start(1);
    let replica = format!("redis://{}", set.replicas[0].addr());
    let out = doctor_at(&replica, &[]);
    let role = line(&out, "role", "fail");
    assert!(
        role.contains(&format!("a replica of 127.0.0.1:{}", set.master.port())),
        "{role}"
    );
    assert_eq!(out.status.code(), Some(1));
    let out = doctor_at(&format!("redis://{}", set.master.addr()), &[]);
    assert_eq!(
        line(&out, "role", "ok"),
        "primary with 1 replica(s) connected"
    );
    assert!(line(&out, "acks", "ok").starts_with("--acks 1..1 usable"));
}

#[test]
fn doctor_json_is_one_document() {
    let redis = Server::start();
    let out = doctor(&redis, &["--json", "k"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(doc["server"], redis.url());
    assert_eq!(doc["ok"], false);
    let findings = doc["findings"].as_array().unwrap();
    let of = |check: &str| {
        findings
            .iter()
            .find(|f| f["check"] == check)
            .unwrap_or_else(|| panic!("{check} in {doc}"))
    };
    assert_eq!(of("persistence")["verdict"], "warn");
    assert_eq!(of("eviction")["verdict"], "ok");
    assert!(of("server")["detail"].as_str().unwrap().contains(" mode"));
    for f in findings {
        let v = f["verdict"].as_str().unwrap();
        assert!(
            ["ok", "info", "warn", "fail", "cannot check"].contains(&v),
            "{f}"
        );
    }
}

#[test]
fn doctor_without_a_server_exits_69_and_64_for_usage() {
    let url = format!("redis://127.0.0.1:{}", free_port());
    let out = doctor_at(&url, &[]);
    assert_eq!(out.status.code(), Some(69), "{}", stderr_of(&out));
    assert!(
        stderr_of(&out).contains("unavailable"),
        "{}",
        stderr_of(&out)
    );
    assert_eq!(stdout_of(&out), "");
    let out = doctor_at(&url, &["--no-such-option"]);
    assert_eq!(out.status.code(), Some(64), "{}", stderr_of(&out));
}

#[test]
fn doctor_on_valkey_names_it() {
    let valkey = Server::start_valkey();
    let out = doctor(&valkey, &[]);
    assert!(line(&out, "server", "info").starts_with("Valkey 8"));
    line(&out, "acl", "ok");
}

#[test]
fn doctor_checks_every_cluster_primary_and_names_the_keys_owner() {
    let cluster = Cluster::start(3);
    let mut cmd = Lockrun::bare();
    cmd.args(["doctor", "--json", "nightly", "-r"])
        .arg(format!("redis+cluster://{}", cluster.seeds()));
    let out = run(cmd);
    let doc: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr_of(&out)));
    let nodes = doc["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 3, "{doc}");
    let top = doc["findings"].as_array().unwrap();
    assert_eq!(top[0]["check"], "cluster");
    assert_eq!(top[0]["verdict"], "ok", "{doc}");
    let owner = cluster.owner_of("nightly").port();
    let slot = top[1]["detail"].as_str().unwrap();
    assert!(
        slot.contains(&format!(
            "slot {}, served by 127.0.0.1:{owner}",
            cluster.slot("nightly")
        )),
        "{slot}"
    );
    for node in nodes {
        let findings = node["findings"].as_array().unwrap();
        let acl = findings.iter().find(|f| f["check"] == "acl").unwrap();
        assert_eq!(acl["verdict"], "ok", "{node}");
        assert!(!findings.iter().any(|f| f["check"] == "cluster"), "{node}");
        // A probe lock on each primary, in a slot that primary serves, and nothing left.
        let lock = findings.iter().find(|f| f["check"] == "lock").unwrap();
        assert_eq!(lock["verdict"], "ok", "{node}");
    }
    for node in &cluster.nodes {
        assert!(
            node.cli(&["KEYS", "*"]).trim().is_empty(),
            "{}",
            node.port()
        );
        assert!(node
            .cli(&["INFO", "commandstats"])
            .contains("cmdstat_evalsha:"));
    }
    // No persistence on any node: not ok.
    assert_eq!(doc["ok"], false);
    assert_eq!(out.status.code(), Some(1));
}

/// What a run says on `url`: its exit code and its stderr.
fn a_run_at(url: &str) -> (Option<i32>, String) {
    let mut cmd = Lockrun::bare();
    cmd.args(["-r", url, "doctor-agrees", "--", "true"]);
    let out = run(cmd);
    (out.status.code(), stderr_of(&out))
}

/// The lock finding fails with the words a run on the same server fails with (69, one line).
fn fails_as_a_run_does(url: &str, out: &Output, reason: &str) -> String {
    let lock = line(out, "lock", "fail");
    assert!(lock.contains(reason), "{lock}");
    assert_eq!(out.status.code(), Some(1), "{}", stderr_of(out));
    let (code, err) = a_run_at(url);
    assert_eq!(code, Some(69), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    let said = err.trim_end();
    let said = &said[said.find(reason).expect("the run names the reason")..];
    assert!(lock.ends_with(said), "doctor: {lock}\nrun: {err}");
    lock
}

/// Reading alone cannot tell whether a lock can be taken: doctor takes and releases a probe
/// lock as a run does, by EVALSHA and by EVAL (a fresh server has no script yet: EVALSHA →
/// NOSCRIPT → EVAL, then EVALSHA finds them), and leaves nothing behind: no key, no fencing
/// counter, no history.
#[test]
fn doctor_takes_and_releases_a_probe_lock_and_leaves_nothing_behind() {
    let redis = Server::start();
    redis.cmd::<()>(&["SET", "users-own-key", "v"]);
    for round in 0..2 {
        let (sha, eval) = (redis.calls("evalsha"), redis.calls("eval"));
        let out = doctor(&redis, &[]);
        let lock = line(&out, "lock", "ok");
        assert!(lock.contains("EVALSHA and EVAL"), "{lock}");
        // Both paths ran both scripts (acquire and release): by EVALSHA, and by EVAL (after
        // NOSCRIPT on the fresh server; on purpose once the scripts are there).
        assert!(redis.calls("evalsha") >= sha + 2, "round {round}");
        assert!(redis.calls("eval") >= eval + 2, "round {round}");
        let keys: Vec<String> = redis.cmd(&["KEYS", "*"]);
        assert_eq!(keys, ["users-own-key"], "round {round}");
        assert_eq!(redis.cmd::<i64>(&["DBSIZE"]), 1);
    }
}

/// The server refuses EVALSHA (renamed away): a run sends its scripts by EVAL and works, so
/// the lock finding is ok, and the ACL finding says what the renaming costs instead of an ok
/// that contradicts nothing or a failure that contradicts the runs.
#[test]
fn doctor_without_evalsha_is_ok_as_the_runs_are() {
    let server = Server::start_with_args(&["--rename-command", "EVALSHA", ""]);
    let out = doctor_at(&server.url(), &[]);
    let lock = line(&out, "lock", "ok");
    assert!(lock.contains("EVAL only"), "{lock}");
    assert!(lock.contains("EVALSHA"), "{lock}");
    let acl = lines_of(&out, "acl");
    assert!(acl.iter().all(|(v, _)| v == "ok" || v == "info"), "{acl:?}");
    assert!(
        acl.iter()
            .any(|(_, d)| d.contains("does not offer EVALSHA")),
        "{acl:?}"
    );
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(
            &mut redis::Client::open(server.url())
                .unwrap()
                .get_connection()
                .unwrap(),
        )
        .unwrap();
    assert!(keys.is_empty(), "{keys:?}");
    assert_eq!(a_run_at(&server.url()).0, Some(0));
}

/// Neither EVAL nor EVALSHA: every run exits 69 saying so, and so does doctor's lock finding.
#[test]
fn doctor_fails_a_server_without_scripts_as_a_run_does() {
    let server = Server::start_with_args(&[
        "--rename-command",
        "EVAL",
        "",
        "--rename-command",
        "EVALSHA",
        "",
    ]);
    let out = doctor_at(&server.url(), &[]);
    fails_as_a_run_does(&server.url(), &out, "the server does not offer EVAL");
}

/// A server that is full right now (AOF on, used memory over maxmemory, noeviction): every
/// lock exits 69 with OOM, and doctor's lock finding fails with the same words.
#[test]
fn doctor_fails_a_full_server_as_a_run_does() {
    let redis = Server::start();
    redis.cmd::<()>(&["CONFIG", "SET", "appendonly", "yes"]);
    redis.cmd::<()>(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    redis.cmd::<()>(&["SET", "ballast", &"x".repeat(4 << 20)]);
    redis.cmd::<()>(&["CONFIG", "SET", "maxmemory", "2mb"]);
    let out = doctor(&redis, &[]);
    fails_as_a_run_does(&redis.url(), &out, "OOM");
    let keys: Vec<String> = redis.cmd(&["KEYS", "*"]);
    assert_eq!(keys, ["ballast"]);
}

/// A fake server answering +OK to everything: no run can lock there, and doctor says so.
#[test]
fn doctor_fails_a_fake_server_as_a_run_does() {
    let fake = crate::support::fake::Fake::start(b"+OK\r\n");
    let out = doctor_at(&fake.url(), &[]);
    fails_as_a_run_does(&fake.url(), &out, "not a usable Redis");
    // Nor does it pass the ACL check on the fake's say-so.
    assert!(
        lines_of(&out, "acl").iter().all(|(v, _)| v != "ok"),
        "{}",
        stdout_of(&out)
    );
}

/// How long the slow server takes to answer anything.
const SLOW_REPLY: std::time::Duration = std::time::Duration::from_millis(2500);

/// A server answering every reply 2.5 s late (below the 3 s request timeout, so each request
/// succeeds): each check costs one round trip or a bounded few, and each finding is printed
/// when it is known, not all at the end.
#[test]
fn doctor_on_a_slow_server_is_bounded_and_prints_as_it_goes() {
    use std::io::BufRead;
    use std::time::{Duration, Instant};
    let redis = Server::start_tcp();
    let proxy =
        crate::support::proxy::Proxy::start(format!("127.0.0.1:{}", redis.port()).parse().unwrap());
    proxy.set(crate::support::proxy::Fault::DelayReplies(SLOW_REPLY));
    let mut cmd = Lockrun::bare();
    cmd.args(["doctor", "-r", &proxy.url()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let started = Instant::now();
    let mut child = cmd.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for l in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send((started.elapsed(), l));
        }
    });
    // 9 round trips (22.5 s): the facts (INFO, CONFIG GET twice, COMMAND
    // INFO, ACL WHOAMI in one pipeline), one TIME (the latency sampling stops at the request
    // timeout), the ACL dry runs (one pipeline), and the lock probe's 6 (acquire: EVALSHA,
    // NOSCRIPT, then EVAL; release by EVAL; acquire and release by EVALSHA; the fencing
    // counter deleted). Three more allowed, for connecting and a slow machine.
    let bound = SLOW_REPLY * 12 + Duration::from_secs(5);
    let status = wait_timeout(&mut child, bound);
    let took = started.elapsed();
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    // Every line doctor wrote: the reader reaches the end of the pipe once doctor is gone (its
    // last lines may still be on their way when the exit is seen).
    reader.join().unwrap();
    let lines: Vec<(Duration, String)> = rx.try_iter().collect();
    let shown = format!("{lines:#?}");
    assert!(
        status.is_some(),
        "doctor still running after {took:?}; it printed {shown}"
    );
    assert_eq!(status.unwrap().code(), Some(1), "{shown}");
    let text: String = lines.iter().map(|(_, l)| format!("{l}\n")).collect();
    let out = Output {
        status: status.unwrap(),
        stdout: text.into_bytes(),
        stderr: Vec::new(),
    };
    for check in [
        "server",
        "role",
        "persistence",
        "eviction",
        "acks",
        "fsync",
        "cluster",
        "acl",
    ] {
        assert!(!lines_of(&out, check).is_empty(), "{check}: {shown}");
    }
    assert!(line(&out, "latency", "warn").contains("p99 25"), "{shown}");
    // Half a round trip of 2.5 s is more than the clock check's 500 ms.
    assert!(
        line(&out, "clock", "cannot check").contains("too slow"),
        "{shown}"
    );
    line(&out, "lock", "ok");
    // The first finding was on stdout several round trips before the last one.
    let first = lines
        .iter()
        .find(|(_, l)| !l.starts_with("server: "))
        .unwrap()
        .0;
    let last = lines.last().unwrap().0;
    assert!(first + SLOW_REPLY * 3 < last, "{shown}");
    eprintln!("doctor on a server answering after {SLOW_REPLY:?}: {took:?} ({shown})");
}

/// The rate a clock-rate finding states (`local clock runs at 0.9999 × the server's …`).
fn rate_in(detail: &str) -> f64 {
    detail
        .strip_prefix("local clock runs at ")
        .and_then(|r| r.split(' ').next())
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no rate in {detail:?}"))
}

/// The clock's rate: doctor reads the server's clock twice, about a second apart, against the
/// local monotonic clock. Here both run at the machine's rate; under libfaketime at 0.9 of it
/// (a clock 10 % slow, which would end the job's leases late by lockrun's reckoning), a
/// warning that names the rate.
#[test]
fn doctor_measures_the_clocks_rate_against_the_servers() {
    let redis = Server::start();
    let out = doctor(&redis, &[]);
    let rate = line(&out, "clock-rate", "ok");
    // One machine's clock against itself: the same rate, within the 1 % doctor tells apart
    // (`0.9999` happens: the server reads the wall clock, lockrun the monotonic one).
    assert!((rate_in(&rate) - 1.0).abs() < 0.01, "{rate}");
    let mut cmd = Lockrun::bare();
    crate::support::clockshim::slowed(&mut cmd, "0.9");
    cmd.arg("doctor").arg("-r").arg(redis.url());
    let out = run(cmd);
    let rate = line(&out, "clock-rate", "warn");
    assert!((rate_in(&rate) - 0.9).abs() < 0.01, "{rate}");
    assert_eq!(out.status.code(), Some(1), "{}", stdout_of(&out));
}
