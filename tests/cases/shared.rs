//! Shared mode (`--shared`): shared holders side by side, an exclusive one alone, one fair queue.
//!
//! Each job writes one line to a log when it ends: its name, the time it started and the time
//! it ended (`date +%s.%N`), so overlaps are read from the jobs' own clocks.

use crate::support::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// A job's run, as it logged it.
#[derive(Debug, Clone)]
struct Span {
    name: String,
    start: f64,
    end: f64,
    fence: String,
}

impl Span {
    fn overlaps(&self, other: &Span) -> bool {
        self.start < other.end && other.start < self.end
    }
}

/// The shell job that logs `name`'s span (and its fence) after holding for `secs`.
fn job(log: &Path, name: &str, secs: f64) -> Vec<String> {
    let script = format!(
        "s=$(date +%s.%N); sleep {secs}; echo \"{name} $s $(date +%s.%N) $LOCKRUN_FENCE\" >> '{}'",
        log.display()
    );
    ["sh", "-c", &script].map(String::from).to_vec()
}

fn spans(log: &Path) -> Vec<Span> {
    lines(log)
        .iter()
        .map(|l| {
            let w: Vec<&str> = l.split(' ').collect();
            Span {
                name: w[0].to_string(),
                start: w[1].parse().unwrap(),
                end: w[2].parse().unwrap(),
                fence: w.get(3).unwrap_or(&"").to_string(),
            }
        })
        .collect()
}

fn span<'a>(all: &'a [Span], name: &str) -> &'a Span {
    all.iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("{name} did not run: {all:?}"))
}

struct Setup {
    redis: Server,
    log: PathBuf,
}

impl Setup {
    fn new() -> Setup {
        let redis = Server::start();
        let log = redis.dir.path().join("spans");
        Setup { redis, log }
    }

    /// Starts `lockrun <args> KEY -- <job name secs>`, its stderr piped.
    fn spawn(&self, args: &[&str], name: &str, secs: f64) -> Child {
        let mut cmd = Lockrun::on(&self.redis);
        cmd.args(args)
            .arg("--")
            .args(job(&self.log, name, secs))
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        cmd.spawn().unwrap()
    }

    /// Starts one and returns once its log says `needle`.
    fn started(&self, args: &[&str], name: &str, secs: f64, needle: &str) -> (Child, Lines) {
        let mut child = self.spawn(args, name, secs);
        let lines = wait_for_line(&mut child, needle);
        (child, lines)
    }
}

fn exit_code(child: &mut Child) -> Option<i32> {
    wait_timeout(child, PATIENCE).expect("lockrun ended").code()
}

#[test]
fn shared_holders_run_at_once_each_with_a_fence() {
    let s = Setup::new();
    let (mut a, mut said) = s.started(&["--shared", "k"], "A", 1.5, "redis lock acquired");
    let line = said.wait_for("redis lock acquired");
    assert!(line.ends_with(" mode=shared"), "{line}");
    let (mut b, _) = s.started(&["--shared", "k"], "B", 1.5, "redis lock acquired");
    let members: u64 = s.redis.cmd(&["ZCARD", "lockrun:shared:{k}"]);
    assert_eq!(members, 2);
    assert!(!s.redis.exists("k"), "the exclusive key stays free");
    assert_eq!(exit_code(&mut a), Some(0));
    assert_eq!(exit_code(&mut b), Some(0));
    let all = spans(&s.log);
    let (a, b) = (span(&all, "A"), span(&all, "B"));
    assert!(a.overlaps(b), "{a:?} {b:?}");
    assert!(!a.fence.is_empty() && !b.fence.is_empty() && a.fence != b.fence);
    assert!(
        !s.redis.exists("lockrun:shared:{k}"),
        "released: nothing left"
    );
}

#[test]
fn an_exclusive_waiter_waits_for_every_shared_holder_then_runs_alone() {
    let s = Setup::new();
    let (mut a, _) = s.started(&["--shared", "k"], "A", 1.0, "redis lock acquired");
    let (mut b, _) = s.started(&["--shared", "k"], "B", 2.0, "redis lock acquired");
    let (mut x, _) = s.started(&["--wait", "30s", "k"], "X", 0.3, "waiting");
    for child in [&mut a, &mut b, &mut x] {
        assert_eq!(exit_code(child), Some(0));
    }
    let all = spans(&s.log);
    let x = span(&all, "X");
    for name in ["A", "B"] {
        let shared = span(&all, name);
        assert!(shared.end <= x.start, "{name} {shared:?} overlaps {x:?}");
    }
}

#[test]
fn shared_and_exclusive_attempts_without_wait_skip_each_other() {
    let s = Setup::new();
    let (mut x, _) = s.started(&["k"], "X", 2.0, "redis lock acquired");
    let mut cmd = Lockrun::on(&s.redis);
    cmd.args(["--shared", "-E", "3", "k", "--", "echo", "ran"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(3), "{}", stderr_of(&out));
    assert!(stderr_of(&out).contains("redis lock already acquired"));
    assert_eq!(stdout_of(&out), "");
    assert_eq!(exit_code(&mut x), Some(0));

    let (mut a, _) = s.started(&["--shared", "k"], "A", 2.0, "redis lock acquired");
    let mut cmd = Lockrun::on(&s.redis);
    cmd.args(["-E", "4", "k", "--", "echo", "ran"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(4), "{}", stderr_of(&out));
    assert!(
        stderr_of(&out).contains("program=sh"),
        "names the shared holder: {}",
        stderr_of(&out)
    );
    assert_eq!(stdout_of(&out), "");
    assert_eq!(exit_code(&mut a), Some(0));
    // Both skipped attempts are in the history.
    let mut cmd = Lockrun::on(&s.redis);
    cmd.args(["history", "k"]);
    let text = stdout_of(&run(cmd));
    assert_eq!(text.matches("skipped").count(), 2, "{text}");
}

#[test]
fn shared_waiters_at_the_head_go_in_together_and_the_queue_keeps_its_order() {
    let s = Setup::new();
    let (mut x1, _) = s.started(&["k"], "X1", 1.0, "redis lock acquired");
    let mut queued = Vec::new();
    for (name, shared) in [("S1", true), ("S2", true), ("X2", false), ("S3", true)] {
        let mut args = vec!["--wait", "30s"];
        if shared {
            args.push("--shared");
        }
        args.push("k");
        queued.push(s.started(&args, name, 0.8, "waiting").0);
    }
    assert_eq!(exit_code(&mut x1), Some(0));
    for child in &mut queued {
        assert_eq!(exit_code(child), Some(0));
    }
    let all = spans(&s.log);
    let get = |n| span(&all, n);
    // S1 and S2 were next in the queue: they run together once X1 is done.
    assert!(get("S1").overlaps(get("S2")), "{all:?}");
    assert!(get("S1").start >= get("X1").end && get("S2").start >= get("X1").end);
    // X2 came before S3: it runs alone after S1 and S2, and S3 only after it.
    assert!(
        get("X2").start >= get("S1").end.max(get("S2").end),
        "{all:?}"
    );
    assert!(get("S3").start >= get("X2").end, "{all:?}");
}

/// The fairness rule under contention: shared runs keep arriving (one every 200 ms, each
/// holding 500 ms, so two or three always hold the key), and an exclusive waiter queued among
/// them still gets the lock within about one shared hold, instead of when the stream stops.
#[test]
fn a_stream_of_shared_runs_does_not_starve_a_queued_exclusive_waiter() {
    let s = Setup::new();
    let stream = Duration::from_secs(6);
    let began = Instant::now();
    let mut shared = Vec::new();
    let mut exclusive: Option<(Child, Instant)> = None;
    let mut n = 0;
    while began.elapsed() < stream {
        n += 1;
        let name = format!("S{n}");
        shared.push(s.spawn(&["--wait", "60s", "--shared", "-t", "5s", "k"], &name, 0.5));
        if exclusive.is_none() && began.elapsed() >= Duration::from_secs(1) {
            let x = s.spawn(&["--wait", "60s", "-t", "5s", "k"], "X", 0.3);
            exclusive = Some((x, Instant::now()));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let (mut x, queued_at) = exclusive.unwrap();
    assert_eq!(exit_code(&mut x), Some(0));
    for child in &mut shared {
        assert_eq!(exit_code(child), Some(0));
    }
    let all = spans(&s.log);
    let x = span(&all, "X");
    for s in all.iter().filter(|s| s.name != "X") {
        assert!(!s.overlaps(x), "{s:?} overlaps the exclusive run {x:?}");
    }
    let before = all.iter().filter(|s| s.name != "X" && s.end <= x.start);
    let after = all.iter().filter(|s| s.name != "X" && s.start >= x.end);
    let (before, after) = (before.count(), after.count());
    let first = all.iter().map(|s| s.start).fold(f64::MAX, f64::min);
    let last = all.iter().map(|s| s.end).fold(0.0, f64::max);
    // When X queued, by the jobs' clock: the stream's first start plus X's arrival in it.
    let arrived = first + (queued_at - began).as_secs_f64();
    let waited = x.start - arrived;
    eprintln!(
        "exclusive waiter waited {waited:.2}s; {before} shared runs before it, {after} after, \
         {} in all over {:.1}s",
        all.len() - 1,
        last - first
    );
    assert_eq!(before + after, all.len() - 1);
    assert!(after > 0, "the stream went on after X: {all:?}");
    // Fair: about one shared hold (0.5 s) after queueing; unfair would be after the stream's
    // end, 5 s later.
    assert!(waited < 3.0, "waited {waited:.2}s: {all:?}");
}

#[test]
fn a_sigkilled_shared_holder_frees_its_place_by_its_ttl() {
    let s = Setup::new();
    let (mut dead, _) = s.started(
        &["--shared", "-t", "1s", "k"],
        "dead",
        30.0,
        "redis lock acquired",
    );
    let (mut x, _) = s.started(&["--wait", "30s", "k"], "X", 0.1, "waiting");
    // The job outlives its lockrun (SIGKILL cannot be passed on): ended by the test afterwards.
    let orphans = descendants(dead.id());
    let killed = Instant::now();
    kill(dead.id(), libc::SIGKILL);
    wait_timeout(&mut dead, PATIENCE).unwrap();
    assert_eq!(exit_code(&mut x), Some(0));
    let waited = killed.elapsed();
    for pid in orphans {
        kill(pid, libc::SIGKILL);
    }
    // Its place ended with its 1 s lease, not with the job.
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    let all = spans(&s.log);
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(all[0].name, "X");
}

#[test]
fn release_force_deletes_the_shared_holders() {
    let s = Setup::new();
    let (mut a, _) = s.started(
        &["--shared", "-t", "1s", "k"],
        "A",
        5.0,
        "redis lock acquired",
    );
    let (mut b, _) = s.started(
        &["--shared", "-t", "1s", "k"],
        "B",
        5.0,
        "redis lock acquired",
    );
    let mut cmd = Lockrun::on(&s.redis);
    cmd.args(["release", "--force", "--json", "k"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout_of(&out)).unwrap();
    assert_eq!(v["mode"], "shared", "{v}");
    assert_eq!(v["holders"].as_array().unwrap().len(), 2, "{v}");
    assert!(!s.redis.exists("lockrun:shared:{k}"));
    // Both find their lease gone at their next renewal: lost (76).
    assert_eq!(exit_code(&mut a), Some(76));
    assert_eq!(exit_code(&mut b), Some(76));
    let mut cmd = Lockrun::on(&s.redis);
    cmd.args(["history", "k"]);
    assert!(stdout_of(&run(cmd)).contains("released"));
}

#[test]
fn status_list_and_history_show_the_mode() {
    let s = Setup::new();
    let (mut a, _) = s.started(&["--shared", "k"], "A", 2.0, "redis lock acquired");
    let (mut b, _) = s.started(&["--shared", "k"], "B", 2.0, "redis lock acquired");
    let cli = |args: &[&str]| {
        let mut cmd = Lockrun::on(&s.redis);
        cmd.args(args);
        run(cmd)
    };
    let out = cli(&["status", "k"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        stdout_of(&out).contains("state:    held shared (2 holders)"),
        "{}",
        stdout_of(&out)
    );
    let v: serde_json::Value =
        serde_json::from_str(&stdout_of(&cli(&["status", "--json", "k"]))).unwrap();
    assert_eq!(
        (v["held"].clone(), v["kind"].clone(), v["mode"].clone()),
        (true.into(), "lock".into(), "shared".into()),
        "{v}"
    );
    assert_eq!(v["holders"].as_array().unwrap().len(), 2);
    let table = stdout_of(&cli(&["list"]));
    assert!(table.contains("(shared)"), "{table}");
    let rows: serde_json::Value =
        serde_json::from_str(&stdout_of(&cli(&["list", "--json"]))).unwrap();
    assert_eq!(rows[0]["mode"], "shared", "{rows}");
    assert_eq!(exit_code(&mut a), Some(0));
    assert_eq!(exit_code(&mut b), Some(0));
    let (mut x, _) = s.started(&["k"], "X", 1.0, "redis lock acquired");
    let v: serde_json::Value =
        serde_json::from_str(&stdout_of(&cli(&["status", "--json", "k"]))).unwrap();
    assert_eq!(v["mode"], "exclusive", "{v}");
    assert_eq!(exit_code(&mut x), Some(0));
    let text = stdout_of(&cli(&["history", "k"]));
    assert_eq!(text.matches("ran (shared)").count(), 2, "{text}");
    let entries: serde_json::Value =
        serde_json::from_str(&stdout_of(&cli(&["history", "--json", "k"]))).unwrap();
    let modes: Vec<&serde_json::Value> = entries
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["mode"])
        .collect();
    assert_eq!(
        modes,
        [&serde_json::Value::Null, &"shared".into(), &"shared".into()],
        "{entries}"
    );
}

#[test]
fn a_nested_lockrun_inside_a_shared_one_may_share_but_not_upgrade() {
    let s = Setup::new();
    let lockrun = format!("{} -r {}", env!("CARGO_BIN_EXE_lockrun"), s.redis.url());
    let mut cmd = Lockrun::on(&s.redis);
    cmd.args(["--shared", "k", "--", "sh", "-c"]).arg(format!(
        "{lockrun} --shared k -- echo nested-shared; {lockrun} k -- echo nested-exclusive; echo \"exclusive $?\""
    ));
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out), "nested-shared\nexclusive 64\n");
    assert!(
        stderr_of(&out).contains("no upgrade"),
        "{}",
        stderr_of(&out)
    );
}

#[test]
fn shared_is_refused_with_limit_standby_and_several_masters() {
    let refused = |args: &[&str], words: &str| {
        let mut cmd = Lockrun::bare();
        cmd.args(args).args(["k", "--", "echo", "ran"]);
        let out = run(cmd);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {}", stderr_of(&out));
        let err = stderr_of(&out);
        assert!(err.contains(words), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert_eq!(stdout_of(&out), "");
    };
    let one = "redis://127.0.0.1:1";
    refused(
        &["-r", one, "--shared", "--limit", "2"],
        "--shared cannot be used with --limit",
    );
    refused(
        &["-r", one, "--shared", "--every", "1m", "--standby"],
        "--shared cannot be used with --standby",
    );
    let masters = "redis://127.0.0.1:1,redis://127.0.0.1:2,redis://127.0.0.1:3";
    refused(
        &["-r", masters, "--shared"],
        "--shared cannot be used with several Redis masters",
    );
}

#[test]
fn a_shared_run_costs_the_requests_of_an_exclusive_one() {
    let s = Setup::new();
    let evalsha = || s.redis.calls("evalsha");
    let once = |args: &[&str]| {
        let mut cmd = Lockrun::on(&s.redis);
        cmd.args(args).args(["k", "--", "true"]);
        assert_eq!(run(cmd).status.code(), Some(0));
    };
    // The scripts loaded first (NOSCRIPT, then EVAL), then counted: acquire and release.
    once(&[]);
    once(&["--shared"]);
    let before = evalsha();
    once(&[]);
    assert_eq!(evalsha() - before, 2, "exclusive");
    once(&["--shared"]);
    assert_eq!(evalsha() - before, 4, "shared");
}

/// On a Cluster the shared holders' set shares the lock's slot (a helper key): every script
/// runs on the shard that owns KEY.
#[test]
fn cluster_shared_holders_run_together_and_never_with_an_exclusive_one() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("spans");
    let url = format!("redis+cluster://{}", cluster.seeds());
    let start = |args: &[&str], name: &str, secs: f64| {
        let mut cmd = Lockrun::bare().url(&url);
        cmd.args(args).arg("--").args(job(&log, name, secs));
        cmd.background(dir.path(), name)
    };
    let a = start(&["--shared", "db"], "A", 1.5);
    let b = start(&["--shared", "db"], "B", 1.5);
    eventually("both shared holders in", || {
        cluster
            .owner_of("db")
            .cli(&["ZCARD", "lockrun:shared:{db}"])
            == "2"
    });
    let x = start(&["--wait", "25s", "db"], "X", 0.3);
    for (name, job) in [("A", a), ("B", b), ("X", x)] {
        let (code, _, err) = job.finish();
        assert_eq!(code, Some(0), "{name}: {err}");
    }
    let all = spans(&log);
    let (a, b, x) = (span(&all, "A"), span(&all, "B"), span(&all, "X"));
    assert!(a.overlaps(b), "{all:?}");
    assert!(!x.overlaps(a) && !x.overlaps(b), "{all:?}");
    let left = cluster.all_keys();
    assert!(
        left.iter()
            .all(|k| k.starts_with("lockrun:fence:") || k.starts_with("lockrun:history:")),
        "{left:?}"
    );
}

#[test]
fn the_metrics_file_says_a_run_was_shared() {
    let s = Setup::new();
    let file = s.redis.dir.path().join("k.prom");
    let once = |args: &[&str]| {
        let mut cmd = Lockrun::on(&s.redis);
        cmd.args(args)
            .arg("--metrics-file")
            .arg(&file)
            .args(["k", "--", "true"]);
        assert_eq!(run(cmd).status.code(), Some(0));
        std::fs::read_to_string(&file).unwrap()
    };
    let text = once(&["--shared"]);
    assert!(
        text.ends_with("lockrun_last_run_shared{key=\"k\"} 1\n"),
        "{text}"
    );
    let text = once(&[]);
    assert!(!text.contains("lockrun_last_run_shared"), "{text}");
}

#[test]
fn a_semaphore_or_a_tick_is_refused_beside_shared_holders_of_its_name() {
    let s = Setup::new();
    let (mut a, _) = s.started(&["--shared", "k"], "A", 2.0, "redis lock acquired");
    for args in [
        &["--limit", "2"][..],
        &["--every", "1m", "--standby", "-t", "5s"][..],
    ] {
        let mut cmd = Lockrun::on(&s.redis);
        cmd.args(args).args(["k", "--", "echo", "ran"]);
        let out = run(cmd);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {}", stderr_of(&out));
        assert!(
            stderr_of(&out).contains("key 'k' is held in shared mode"),
            "{args:?}: {}",
            stderr_of(&out)
        );
        assert_eq!(stdout_of(&out), "");
    }
    assert_eq!(exit_code(&mut a), Some(0));
    assert_eq!(spans(&s.log).len(), 1, "only the shared run ran");
}
