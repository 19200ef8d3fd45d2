//! The operators' commands end to end: `status`, `list`, `release`, `history`, and the run
//! history the lock scripts record; `lockrun run` for a lock named like a command.

use crate::support::*;
use std::path::PathBuf;
use std::process::{Child, Output, Stdio};
use std::time::Duration;

/// `lockrun <verb> -r URL args…`, output captured.
fn verb(redis: &Server, verb: &str, args: &[&str]) -> Output {
    let mut cmd = Lockrun::bare();
    cmd.arg(verb).arg("-r").arg(redis.url()).args(args);
    run(cmd)
}

fn json_of(out: &Output) -> serde_json::Value {
    let text = stdout_of(out);
    serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "not one JSON document ({e}): {text:?}\nstderr: {}",
            stderr_of(out)
        )
    })
}

/// A background `lockrun [extra] KEY -- <job>` whose job runs until `release()` (or is killed).
struct Held {
    child: Child,
    lines: Lines,
    go: PathBuf,
}

impl Held {
    fn start(redis: &Server, extra: &[&str], key: &str) -> Held {
        // Each holder its own files: a `go` left by an earlier holder would end this job at once.
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = redis.dir.path();
        let (ready, go) = (
            dir.join(format!("held{n}.ready")),
            dir.join(format!("held{n}.go")),
        );
        let script = format!(
            "touch '{}'; while [ ! -e '{}' ]; do sleep 0.02; done",
            ready.display(),
            go.display()
        );
        let mut cmd = Lockrun::on(redis);
        cmd.args(extra)
            .args([key, "--", "sh", "-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let lines = wait_for_line(&mut child, "redis lock acquired");
        wait_for_file_of(&mut child, &ready);
        Held { child, lines, go }
    }

    fn finish(mut self) -> (Option<i32>, String) {
        std::fs::write(&self.go, "").unwrap();
        let status = wait_timeout(&mut self.child, Duration::from_secs(20)).expect("exits");
        (status.code(), self.lines.rest())
    }

    /// Waits for lockrun to exit on its own (not told to finish).
    fn wait(mut self) -> (Option<i32>, String) {
        let status = wait_timeout(&mut self.child, Duration::from_secs(20)).expect("exits");
        let rest = self.lines.rest();
        let _ = std::fs::write(&self.go, "");
        (status.code(), rest)
    }
}

fn outcomes(entries: &[serde_json::Value]) -> Vec<String> {
    entries
        .iter()
        .map(|e| e["outcome"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn status_of_a_held_lock_says_who_since_when_and_the_fence() {
    let redis = Server::start();
    let held = Held::start(&redis, &[], "nightly");
    let out = verb(&redis, "status", &["nightly", "--json"]);
    assert_eq!(out.status.code(), Some(0), "held: exit 0");
    let v = json_of(&out);
    assert_eq!(v["key"], "nightly");
    assert_eq!(v["held"], true);
    assert_eq!(v["holder"]["program"], "sh");
    assert_eq!(v["holder"]["pid"], held.child.id());
    assert!(v["holder"]["host"].as_str().is_some_and(|h| !h.is_empty()));
    assert!(v["holder"]["started"].as_str().unwrap().ends_with('Z'));
    let ttl = v["ttl_ms"].as_u64().unwrap();
    assert!(ttl > 20_000 && ttl <= 30_000, "{ttl}");
    assert!(v["fence"].as_u64().unwrap() > 0);
    assert_eq!(v["waiters"], 0);
    // The same in text, for people.
    let out = verb(&redis, "status", &["nightly"]);
    let text = stdout_of(&out);
    assert!(text.contains("state:    held"), "{text}");
    assert!(text.contains(&format!("pid={}", held.child.id())), "{text}");
    assert!(text.contains("program=sh"), "{text}");
    let (code, _) = held.finish();
    assert_eq!(code, Some(0));
    let out = verb(&redis, "status", &["nightly", "--json"]);
    assert_eq!(out.status.code(), Some(1), "free: exit 1, like flock -n");
    let v = json_of(&out);
    assert_eq!(v["held"], false);
    assert_eq!(v["holder"], serde_json::Value::Null);
    assert!(
        v["fence"].as_u64().unwrap() > 0,
        "the last fence stays known"
    );
}

#[test]
fn status_of_a_finished_every_run_says_it_finished_and_the_key_is_kept_for_the_tick() {
    let redis = Server::start();
    // Running: held, and no run finished yet.
    let held = Held::start(&redis, &["--every", "1h"], "hourly");
    let v = json_of(&verb(&redis, "status", &["hourly", "--json"]));
    assert_eq!(v["held"], true, "{v}");
    assert_eq!(v["finished"], serde_json::Value::Null, "{v}");
    let (code, _) = held.finish();
    assert_eq!(code, Some(0));
    // Finished: the key stays for the rest of the hour's hold, and says why.
    let out = verb(&redis, "status", &["hourly"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "kept: still held for other runs"
    );
    let text = stdout_of(&out);
    assert!(
        text.contains("state:    kept for the tick: its run finished (ran, exit 0"),
        "{text}"
    );
    assert!(text.contains("ran by:   "), "{text}");
    assert!(!text.contains("held for:"), "{text}");
    let v = json_of(&verb(&redis, "status", &["hourly", "--json"]));
    assert_eq!(v["held"], true, "{v}");
    assert_eq!(v["finished"]["outcome"], "ran", "{v}");
    assert_eq!(v["finished"]["exit_code"], 0, "{v}");
    assert!(v["finished"]["duration_ms"].as_u64().is_some(), "{v}");
    let ttl = v["ttl_ms"].as_u64().unwrap();
    assert!(
        ttl > 3_000_000 && ttl <= 3_240_000,
        "the rest of the 54 min hold: {ttl}"
    );
    // A failed run is kept the same way, and says how it ended.
    let out = run({
        let mut cmd = Lockrun::on(&redis);
        cmd.args(["--every", "1h", "failing", "--", "sh", "-c", "exit 3"]);
        cmd
    });
    assert_eq!(out.status.code(), Some(3));
    let text = stdout_of(&verb(&redis, "status", &["failing"]));
    assert!(text.contains("its run finished (ran, exit 3"), "{text}");
}

#[test]
fn status_held_for_counts_from_the_acquisition_not_from_the_wait() {
    // The second holder waits ~3 s in the queue; `held for` must not count that wait.
    let redis = Server::start();
    let first = Held::start(&redis, &[], "since");
    let go = first.go.clone();
    let opener = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(3));
        std::fs::write(go, "").unwrap();
    });
    let second = Held::start(&redis, &["--wait", "20s"], "since");
    opener.join().unwrap();
    let out = verb(&redis, "status", &["since", "--json"]);
    let v = json_of(&out);
    assert_eq!(v["holder"]["pid"], second.child.id(), "{v}");
    let held_for = v["held_for_ms"].as_u64().expect("held_for_ms");
    assert!(
        held_for < 2000,
        "held for {held_for} ms just after acquiring (it waited ~3 s before): {v}"
    );
    let (code, _) = first.wait();
    assert_eq!(code, Some(0));
    let (code, _) = second.finish();
    assert_eq!(code, Some(0));
}

#[test]
fn status_shows_the_queue_and_semaphore_holders() {
    let redis = Server::start();
    let held = Held::start(&redis, &[], "queued");
    let mut waiter = Lockrun::on(&redis);
    waiter
        .args(["--wait", "30s", "queued", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut waiter = waiter.spawn().unwrap();
    wait_for_line(&mut waiter, "waiting");
    let v = json_of(&verb(&redis, "status", &["queued", "--json"]));
    assert_eq!(v["waiters"], 1, "{v}");
    assert!(v["next_waiter"]["id"].as_str().unwrap().len() == 40, "{v}");
    held.finish();
    assert_eq!(wait_output(waiter).status.code(), Some(0));

    let one = Held::start(&redis, &["--limit", "3"], "slots");
    let two = Held::start(&redis, &["--limit", "3", "-t", "20s"], "slots");
    let out = verb(&redis, "status", &["slots", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let v = json_of(&out);
    assert_eq!(v["kind"], "semaphore");
    let holders = v["holders"].as_array().unwrap();
    let pids: Vec<u64> = holders.iter().map(|h| h["pid"].as_u64().unwrap()).collect();
    assert_eq!(pids.len(), 2, "{v}");
    assert!(pids.contains(&u64::from(one.child.id())) && pids.contains(&u64::from(two.child.id())));
    one.finish();
    two.finish();
}

#[test]
fn status_of_an_unavailable_redis_is_69_and_of_a_foreign_key_64() {
    let mut cmd = Lockrun::bare();
    cmd.args(["status", "-r", "redis://127.0.0.1:1", "k"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(69));
    let err = stderr_of(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("unavailable"), "{err}");
    let redis = Server::start();
    let _: i64 = redis.cmd(&["LPUSH", "a-list", "x"]);
    let out = verb(&redis, "status", &["a-list"]);
    assert_eq!(out.status.code(), Some(64), "{}", stderr_of(&out));
    assert!(stderr_of(&out).contains("not a lock"));
}

#[test]
fn list_finds_lockrun_locks_among_thousands_of_other_keys() {
    let redis = Server::start();
    // Thousands of keys that are not lockrun's, some named like locks: list must neither show
    // nor read them (it scans lockrun's own fencing counters).
    let mut conn = redis.conn();
    let mut pipe = redis::pipe();
    for i in 0..5000 {
        pipe.set(format!("cache:{i}"), "v").ignore();
    }
    pipe.set("deploy-fake", "not a lock").ignore();
    let () = pipe.query(&mut conn).unwrap();
    let a = Held::start(&redis, &[], "deploy-eu");
    let b = Held::start(&redis, &[], "deploy-us");
    let c = Held::start(&redis, &[], "backup");
    let out = run({
        let mut cmd = Lockrun::on(&redis);
        cmd.args(["old-job", "true"]);
        cmd
    });
    assert_eq!(out.status.code(), Some(0));

    let out = verb(&redis, "list", &["--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let keys: Vec<String> = json_of(&out)
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        keys,
        ["backup", "deploy-eu", "deploy-us"],
        "held only, sorted"
    );
    let v = json_of(&verb(&redis, "list", &["deploy-*", "--json"]));
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 2, "{v}");
    assert_eq!(rows[0]["holder"]["pid"], a.child.id());
    assert!(rows[0]["ttl_ms"].as_u64().unwrap() > 0);
    let v = json_of(&verb(&redis, "list", &["--all", "--json"]));
    let all: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap())
        .collect();
    assert_eq!(
        all,
        ["backup", "deploy-eu", "deploy-us", "old-job"],
        "with --all, free ones too"
    );
    let text = stdout_of(&verb(&redis, "list", &[]));
    assert!(text.starts_with("KEY"), "{text}");
    assert!(
        text.contains("deploy-us") && !text.contains("cache:"),
        "{text}"
    );
    // SCAN, never KEYS: KEYS blocks the server for the whole keyspace.
    assert_eq!(redis.calls("keys"), 0);
    assert!(redis.calls("scan") > 0);
    for h in [a, b, c] {
        h.finish();
    }
}

#[test]
fn release_needs_force_and_the_running_holder_then_exits_76() {
    let redis = Server::start();
    // TTL 1.5 s: the holder renews every 0.5 s and finds the key gone at the next renewal.
    let held = Held::start(&redis, &["-t", "1500ms"], "stuck");
    let out = verb(&redis, "release", &["stuck"]);
    assert_eq!(out.status.code(), Some(64), "no --force: refused");
    assert!(stderr_of(&out).contains("--force"), "{}", stderr_of(&out));
    assert!(redis.exists("stuck"), "nothing deleted without --force");

    let fence: String = redis.cmd(&["GET", "lockrun:fence:{stuck}"]);
    let out = verb(&redis, "release", &["stuck", "--force"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let err = stderr_of(&out);
    // Auditable: what was deleted, on stderr.
    assert!(
        err.contains("redis lock deleted by release --force"),
        "{err}"
    );
    assert!(err.contains(&format!("pid={}", held.child.id())), "{err}");
    assert!(err.contains(&fence), "{err}");
    assert!(!redis.exists("stuck"));
    let (code, rest) = held.wait();
    assert_eq!(
        code,
        Some(76),
        "the holder noticed at its next renewal: {rest}"
    );
    assert!(rest.contains("redis lock lost"), "{rest}");

    let out = verb(&redis, "release", &["stuck", "--force"]);
    assert_eq!(out.status.code(), Some(1), "nothing left to delete");
    let entries = history(&redis, "stuck");
    assert_eq!(outcomes(&entries), ["lost", "released"], "{entries:?}");
}

/// `release --force` of a key with the most holders a key can have (`--limit`'s maximum, or
/// as many shared holders) lists each once and finishes: the holders the servers answer are
/// merged in linear time. Bounded by `run`'s patience (30 s); merging them pairwise took
/// minutes in a debug build.
#[test]
fn release_force_deletes_a_hundred_thousand_holders() {
    const HOLDERS: usize = 100_000;
    let redis = Server::start();
    let time: Vec<String> = redis.cmd(&["TIME"]);
    let expiry = (time[0].parse::<u64>().unwrap() * 1000 + 600_000).to_string();
    // Shared holders as lockrun writes them: holder values scored by their lease's expiry (ms).
    let members: Vec<String> = (0..HOLDERS)
        .map(|i| format!("{i:040x} host=h{i} pid={i} started=2024-01-02T03:04:05Z program=x"))
        .collect();
    let mut conn = redis.conn();
    for chunk in members.chunks(10_000) {
        let mut zadd = redis::cmd("ZADD");
        zadd.arg("lockrun:shared:{crowd}");
        for m in chunk {
            zadd.arg(&expiry).arg(m);
        }
        let _: () = zadd.query(&mut conn).unwrap();
    }
    let out = verb(&redis, "release", &["crowd", "--force", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let doc = json_of(&out);
    assert_eq!(doc["mode"], "shared", "{}", doc["mode"]);
    let holders = doc["holders"].as_array().unwrap();
    assert_eq!(holders.len(), HOLDERS);
    assert_eq!(holders[HOLDERS - 1]["host"], format!("h{}", HOLDERS - 1));
    assert!(!redis.exists("lockrun:shared:{crowd}"));
}

#[test]
fn history_records_runs_skips_losses_and_aborts_newest_first() {
    let redis = Server::start();
    let ok = run({
        let mut cmd = Lockrun::on(&redis);
        cmd.args(["job", "sh", "-c", "exit 3"]);
        cmd
    });
    assert_eq!(ok.status.code(), Some(3));
    let held = Held::start(&redis, &[], "job");
    let skipped = run({
        let mut cmd = Lockrun::on(&redis);
        cmd.args(["-E", "0", "job", "true"]);
        cmd
    });
    assert_eq!(skipped.status.code(), Some(0));
    let timed_out = run({
        let mut cmd = Lockrun::on(&redis);
        cmd.args(["--wait", "300ms", "job", "true"]);
        cmd
    });
    assert_eq!(timed_out.status.code(), Some(75));
    held.finish();
    // Lost: the key deleted under a running job.
    // TTL 1.5 s: long enough for the acquire (TTL/3) on a loaded machine, short to notice the loss.
    let lost = Held::start(&redis, &["-t", "1500ms"], "job");
    let _: i64 = redis.cmd(&["DEL", "job"]);
    assert_eq!(lost.wait().0, Some(76));
    // Aborted: SIGTERM to lockrun while the job runs.
    let aborted = Held::start(&redis, &[], "job");
    kill(aborted.child.id(), libc::SIGTERM);
    assert_eq!(aborted.wait().0, Some(143));

    let entries = history(&redis, "job");
    assert_eq!(
        outcomes(&entries),
        ["aborted", "lost", "ran", "skipped", "skipped", "ran"],
        "{entries:#?}"
    );
    let first_run = &entries[5];
    assert_eq!(first_run["exit_code"], 3);
    assert!(first_run["fence"].as_u64().unwrap() > 0);
    assert!(first_run["duration_ms"].as_u64().is_some());
    assert!(first_run["host"].as_str().is_some_and(|h| !h.is_empty()));
    assert!(first_run["pid"].as_u64().unwrap() > 0);
    assert!(first_run["time"].as_str().unwrap().ends_with('Z'));
    // The skipped attempt's entry is composed by the server from the holder value: who it was.
    let skip = &entries[4];
    assert_eq!(skip["host"], first_run["host"], "{entries:#?}");
    assert!(skip["pid"].as_u64().unwrap() > 0, "{entries:#?}");
    assert_ne!(skip["pid"], first_run["pid"], "{entries:#?}");
    assert_eq!(skip["duration_ms"], 0, "{entries:#?}");
    // The public id is in the stream (not in the JSON): every entry names its run.
    let raw: Vec<(String, Vec<String>)> = redis.cmd(&["XRANGE", "lockrun:history:{job}", "-", "+"]);
    for (_, fields) in &raw {
        let id = fields
            .iter()
            .position(|f| f == "id")
            .map(|i| &fields[i + 1]);
        assert!(id.is_some_and(|id| id.len() >= 8), "{raw:?}");
    }
    assert_eq!(entries[0]["exit_code"], 143);
    assert_eq!(entries[1]["exit_code"], 76);
    // The waiter that gave up says how long it waited.
    assert!(
        entries[3]["duration_ms"].as_u64().unwrap() >= 300,
        "{entries:#?}"
    );
    // Text for people, newest first.
    let text = stdout_of(&verb(&redis, "history", &["job"]));
    let rows: Vec<&str> = text.lines().skip(1).collect();
    assert!(
        rows[0].contains("aborted") && rows[5].contains("ran"),
        "{text}"
    );
    // Bounded: expires 40 days after the last run.
    let ttl: i64 = redis.cmd(&["PTTL", "lockrun:history:{job}"]);
    assert!(ttl > 39 * 86_400_000 && ttl <= 40 * 86_400_000, "{ttl}");
}

/// The history stream's expiry costs one command a day, not one per run: a release appends
/// without touching it, the day's first lock moves it 40 days ahead, and a stream that is
/// missing is created with its expiry, so none is ever left without one.
#[test]
fn history_expiry_moves_with_the_days_first_lock_and_a_stream_never_lacks_one() {
    let redis = Server::start();
    let stream = "lockrun:history:{daily}";
    let ran = |redis: &Server| {
        let out = run({
            let mut cmd = Lockrun::on(redis);
            cmd.args(["daily", "true"]);
            cmd
        });
        assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    };
    let forty_days = 40 * 86_400_000_i64;
    let pttl = |redis: &Server| redis.cmd::<i64>(&["PTTL", stream]);
    ran(&redis);
    assert!(
        pttl(&redis) > forty_days - 60_000,
        "created with its expiry"
    );
    // Later the same day: appended, the expiry untouched (by the release and by the acquire).
    let _: i64 = redis.cmd(&["PEXPIRE", stream, "100000"]);
    let before = redis.calls("pexpire");
    ran(&redis);
    assert!(pttl(&redis) <= 100_000, "moved by a run of the same day");
    assert_eq!(redis.calls("pexpire"), before, "a PEXPIRE per run");
    assert_eq!(redis.cmd::<i64>(&["XLEN", stream]), 2);
    // The previous lock was yesterday (its fence, microseconds of the server clock, says so):
    // this run's acquire moves the expiry.
    let fence: String = redis.cmd(&["GET", "lockrun:fence:{daily}"]);
    let yesterday = fence.parse::<u64>().unwrap() - 86_400_000_000;
    let _: () = redis.cmd(&["SET", "lockrun:fence:{daily}", &yesterday.to_string()]);
    ran(&redis);
    assert!(pttl(&redis) > forty_days - 60_000, "the day's first lock");
    // Gone (evicted, deleted by hand): the next release creates it again, with its expiry.
    let _: i64 = redis.cmd(&["DEL", stream]);
    ran(&redis);
    assert!(
        pttl(&redis) > forty_days - 60_000,
        "re-created with its expiry"
    );
    assert_eq!(redis.cmd::<i64>(&["XLEN", stream]), 1);
}

/// What one uncontended run costs the server, command by command inside the two scripts: the
/// acquire's queue check, fence read, SET NX PX, clock and fence write; the release's
/// compare, history entry, delete and queue check. (Timings live in the benchmarks; this pins
/// the work.)
#[test]
fn an_uncontended_run_costs_the_server_nine_commands_inside_two_scripts() {
    let redis = Server::start();
    let once = || {
        let out = run({
            let mut cmd = Lockrun::on(&redis);
            cmd.args(["cheap", "true"]);
            cmd
        });
        assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    };
    // One connection of our own, opened first: a new one would count its own handshake (the
    // test client's CLIENT SETINFO, on servers that have it) after the reset.
    let mut conn = redis.client().get_connection().unwrap();
    // The first run loads the scripts and creates the fence and the history.
    once();
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut conn)
        .unwrap();
    once();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut conn)
        .unwrap();
    let mut calls: Vec<(String, u64)> = info
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(":calls=")?;
            Some((name.to_string(), rest.split(',').next()?.parse().ok()?))
        })
        .filter(|(name, _)| name != "info" && name != "config|resetstat")
        .collect();
    calls.sort();
    let want: Vec<(String, u64)> = [
        ("del", 1),
        ("evalsha", 2),
        ("exists", 2),
        ("get", 2),
        ("set", 2),
        ("time", 1),
        ("xadd", 1),
    ]
    .iter()
    .map(|(n, c)| (n.to_string(), *c))
    .collect();
    assert_eq!(calls, want);
}

#[test]
fn history_is_capped_and_can_be_turned_off() {
    let redis = Server::start();
    for _ in 0..250 {
        let out = run({
            let mut cmd = Lockrun::on(&redis);
            cmd.args(["--history", "10", "capped", "true"]);
            cmd
        });
        assert_eq!(out.status.code(), Some(0));
    }
    // Approximate trimming drops whole stream nodes (100 entries by default): about the cap.
    let len: i64 = redis.cmd(&["XLEN", "lockrun:history:{capped}"]);
    assert!((10..=110).contains(&len), "{len}");
    let out = verb(&redis, "history", &["capped", "-n", "5", "--json"]);
    assert_eq!(json_of(&out).as_array().unwrap().len(), 5);

    let out = run({
        let mut cmd = Lockrun::on(&redis);
        cmd.env("LOCKRUN_HISTORY", "0").args(["silent", "true"]);
        cmd
    });
    assert_eq!(out.status.code(), Some(0));
    assert!(!redis.exists("lockrun:history:{silent}"));
    let text = stdout_of(&verb(&redis, "history", &["silent"]));
    assert!(text.contains("no runs recorded"), "{text}");
}

#[test]
fn release_force_never_trims_a_long_history_and_is_recorded_even_without_one() {
    let redis = Server::start();
    // A key run with --history 300: its 250 entries stay (the forced release adds one).
    for i in 0..250 {
        let _: String = redis.cmd(&[
            "XADD",
            "lockrun:history:{long}",
            "*",
            "outcome",
            "ran",
            "n",
            &i.to_string(),
        ]);
    }
    // A holder as lockrun writes it (release --force deletes nothing else).
    let holder = "0123456789abcdef0123456789abcdef01234567 host=h pid=1 started=2024-01-02T03:04:05Z program=x";
    let _: () = redis.cmd(&["SET", "long", holder, "PX", "60000"]);
    let out = verb(&redis, "release", &["long", "--force"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let len: i64 = redis.cmd(&["XLEN", "lockrun:history:{long}"]);
    assert_eq!(len, 251, "the forced release trimmed the key's history");

    // A key whose runs record nothing (--history 0): the deletion itself is still audited,
    // and nothing else is recorded.
    let held = Held::start(&redis, &["--history", "0", "-t", "1500ms"], "quiet");
    let out = verb(&redis, "release", &["quiet", "--force"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let (code, _) = held.wait();
    assert_eq!(code, Some(76));
    assert_eq!(outcomes(&history(&redis, "quiet")), ["released"]);
}

#[test]
fn a_history_key_spoiled_by_hand_never_changes_a_run() {
    let redis = Server::start();
    let _: () = redis.cmd(&["SET", "lockrun:history:{spoiled}", "oops"]);
    let out = run({
        let mut cmd = Lockrun::on(&redis);
        cmd.args(["spoiled", "sh", "-c", "exit 4"]);
        cmd
    });
    assert_eq!(out.status.code(), Some(4), "{}", stderr_of(&out));
    assert!(!redis.exists("spoiled"), "released");
    let out = verb(&redis, "history", &["spoiled"]);
    assert_eq!(out.status.code(), Some(64));
    assert!(
        stderr_of(&out).contains("not a stream"),
        "{}",
        stderr_of(&out)
    );
}

#[test]
fn a_lock_named_like_a_command_runs_with_run() {
    let redis = Server::start();
    for name in ["status", "list", "release", "history", "doctor", "run"] {
        let mut cmd = Lockrun::on(&redis);
        cmd.args(["run", name, "--", "sh", "-c", "echo \"$LOCKRUN_KEY\""]);
        let out = run(cmd);
        assert_eq!(out.status.code(), Some(0), "{name}: {}", stderr_of(&out));
        assert_eq!(stdout_of(&out), format!("{name}\n"));
        assert!(redis.exists(&format!("lockrun:fence:{{{name}}}")));
    }
    // Options may come before the command word, as in the run form.
    let mut cmd = Lockrun::bare();
    cmd.args(["-r", &redis.url(), "status", "run", "--json"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));
    assert_eq!(json_of(&out)["key"], "run");
    // The run form is untouched for any other name, options first or not.
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["-t", "5s", "statuses", "true"]);
    assert_eq!(run(cmd).status.code(), Some(0));
}

#[test]
fn command_help_and_usage_errors() {
    for (args, code) in [
        (&["status", "--help"][..], 0),
        (&["status"][..], 64),
        (&["list", "--bogus"][..], 64),
        (&["history", "k", "-n", "x"][..], 64),
        (&["status", "lockrun:fence:{k}"][..], 64),
    ] {
        let mut cmd = Lockrun::bare();
        cmd.args(args);
        let out = run(cmd);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{args:?}: {}",
            stderr_of(&out)
        );
        if code == 64 {
            assert_eq!(stderr_of(&out).lines().count(), 1, "{args:?}");
        }
    }
    // Both tiers: the usage names them.
    for flag in ["--help", "-h"] {
        let mut cmd = Lockrun::bare();
        cmd.arg(flag);
        let help = stdout_of(&run(cmd));
        assert!(
            help.contains("lockrun <status|list|release|history|doctor|run>"),
            "the run form's help names the commands: {help}"
        );
    }
}

#[test]
fn with_several_masters_each_run_shows_once_and_a_majority_holds() {
    let servers = [Server::start(), Server::start(), Server::start()];
    let urls = servers
        .iter()
        .map(Server::url)
        .collect::<Vec<_>>()
        .join(",");
    let with_urls = |args: &[&str]| {
        let mut cmd = Lockrun::bare();
        cmd.args(&args[..1]).arg("-r").arg(&urls).args(&args[1..]);
        cmd
    };
    let mut holder = with_urls(&["run", "multi", "sh", "-c", "sleep 1"]);
    holder.stdout(Stdio::null()).stderr(Stdio::piped());
    let mut holder = holder.spawn().unwrap();
    wait_for_line(&mut holder, "redis lock acquired");
    let out = run(with_urls(&["status", "multi", "--json"]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let v = json_of(&out);
    assert_eq!(v["holder"]["pid"], holder.id());
    // One master without the key: still held by the majority.
    let _: i64 = servers[0].cmd(&["DEL", "multi"]);
    let v = json_of(&run(with_urls(&["status", "multi", "--json"])));
    assert_eq!(v["held"], true, "{v}");
    let skipped = run(with_urls(&["run", "-E", "0", "multi", "true"]));
    assert_eq!(skipped.status.code(), Some(0));
    assert_eq!(wait_output(holder).status.code(), Some(0));
    let out = run(with_urls(&["history", "multi", "--json"]));
    let entries = json_of(&out);
    let outcomes: Vec<&str> = entries
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["outcome"].as_str().unwrap())
        .collect();
    // The holder's run, recorded by each master (one of them found its key deleted: still
    // "ran" overall), and the skip, recorded where the lock was held.
    assert_eq!(outcomes, ["ran", "skipped"], "{entries}");
    let list = json_of(&run(with_urls(&["list", "--all", "--json"])));
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
}

#[test]
fn text_output_keeps_one_line_per_lock_whatever_the_name() {
    let redis = Server::start();
    let held = Held::start(&redis, &[], "evil\nname\u{1b}[31m");
    let text = stdout_of(&verb(&redis, "list", &[]));
    assert_eq!(text.lines().count(), 2, "{text:?}");
    assert!(text.contains("evil\\nname\\u{1b}[31m"), "{text:?}");
    assert!(!text.contains('\u{1b}'), "{text:?}");
    let text = stdout_of(&verb(&redis, "status", &["evil\nname\u{1b}[31m"]));
    assert!(
        !text.contains('\u{1b}') && text.contains("evil\\nname"),
        "{text:?}"
    );
    held.finish();
}

/// A verb's line with `--` and a command after it, or with options only a run takes, is
/// refused (64) and says how to run it: read as the verb, `lockrun -q history -- ./rotate.sh`
/// would print "no runs recorded for './rotate.sh'" and exit 0, so cron would see success
/// while the job never ran.
#[test]
fn a_lock_named_like_a_verb_with_a_command_is_refused_not_misread() {
    let redis = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let touch = format!("touch {}", ran.display());
    for line in [
        &["-q", "history", "--", "sh", "-c", &touch][..],
        &["-q", "-E", "0", "status", "--", "sh", "-c", &touch],
        &["list", "--every", "1m", "sh", "-c", &touch],
        &["doctor", "-E", "0", "--", "sh", "-c", &touch],
    ] {
        let mut cmd = Lockrun::bare();
        cmd.arg("-r").arg(redis.url()).args(line);
        let out = run(cmd);
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(64), "{line:?}: {err}");
        assert!(err.contains("lockrun run "), "{line:?} says how: {err}");
        assert_eq!(err.lines().count(), 1, "{line:?}: one line: {err}");
        assert_eq!(stdout_of(&out), "", "{line:?}");
        assert!(!ran.exists(), "{line:?}");
    }
    // The way it says: runs.
    let mut cmd = Lockrun::bare();
    cmd.arg("-r")
        .arg(redis.url())
        .args(["run", "history", "--", "sh", "-c", &touch]);
    assert_eq!(run(cmd).status.code(), Some(0));
    assert!(ran.exists());
}

/// A fence counter expires with the key's history, 40 days after its last lock, so
/// per-pipeline names (`deploy-$BRANCH`) do not pile up in Redis and in `list --all` forever;
/// fences stay increasing after that (they are floored by the server's clock).
#[test]
fn fence_counters_expire_and_fences_still_increase() {
    let redis = Server::start();
    let fence_of = |out: &Output| -> u64 {
        let err = stderr_of(out);
        let at = err.find("fence=").expect("a fence") + 6;
        err[at..]
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["deploy-feature-x", "--", "true"]);
    let first = fence_of(&run(cmd));
    let pttl: i64 = redis.cmd(&["PTTL", "lockrun:fence:{deploy-feature-x}"]);
    let day = 86_400_000;
    assert!(
        pttl > 39 * day && pttl <= 40 * day,
        "expires in 40 days: {pttl}"
    );
    // Gone (as after 40 days): the next fence is still above the last.
    redis.cmd::<()>(&["DEL", "lockrun:fence:{deploy-feature-x}"]);
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["deploy-feature-x", "--", "true"]);
    assert!(fence_of(&run(cmd)) > first);
}

/// `holders` is the same array in `status --json` and `list --json`, and a semaphore's
/// `held_for_ms` is null, not whole seconds dressed as milliseconds.
#[test]
fn status_and_list_json_agree_on_holders() {
    let redis = Server::start();
    let held = Held::start(&redis, &["--limit", "3"], "pool");
    let status = json_of(&verb(&redis, "status", &["--json", "pool"]));
    let list = json_of(&verb(&redis, "list", &["--json"]));
    let row = &list.as_array().unwrap()[0];
    assert!(
        status["holders"].is_array() && row["holders"].is_array(),
        "{status} {row}"
    );
    assert_eq!(status["holders"].as_array().unwrap().len(), 1);
    assert_eq!(row["holders"][0]["host"], status["holders"][0]["host"]);
    assert!(status["held_for_ms"].is_null(), "{status}");
    assert_eq!(held.finish().0, Some(0));
}
