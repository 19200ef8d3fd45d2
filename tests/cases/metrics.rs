//! `--metrics-file`: every ending writes the documented metrics, read back by a real Prometheus
//! parser (Python's prometheus_client, which `tests/ensure-pytools.sh` installs into
//! target/test-tools/python); atomically, and without changing the exit code when it cannot.

use crate::support::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

const OUTCOMES: [&str; 6] = ["ran", "skipped", "lost", "aborted", "timeout", "error"];

/// Parses a metrics file with prometheus_client and prints every sample as JSON. Fails (never
/// skips) when the parser is missing: a format check that silently passes proves nothing.
const PARSE: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = {}
for f in text_string_to_metric_families(open(sys.argv[1], encoding="utf-8").read()):
    out[f.name] = {"type": f.type, "help": f.documentation,
                   "samples": [[s.name, s.labels, s.value] for s in f.samples]}
print(json.dumps(out))
"#;

/// A metrics file as prometheus_client read it.
struct Metrics {
    key: String,
    families: serde_json::Map<String, serde_json::Value>,
}

impl Metrics {
    fn parse(path: &Path, key: &str) -> Metrics {
        let pythonpath = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-tools/python");
        let out = Command::new("python3")
            .env("PYTHONPATH", &pythonpath)
            .args(["-c", PARSE])
            .arg(path)
            .output()
            .expect("python3 is needed to check the metrics file with prometheus_client");
        assert!(
            out.status.success(),
            "prometheus_client could not read {} (is it installed? `bash tests/ensure-pytools.sh` \
             puts it in {}): {}\nthe file:\n{}",
            path.display(),
            pythonpath.display(),
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(path).unwrap_or_default()
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        Metrics {
            key: key.to_string(),
            families: v.as_object().unwrap().clone(),
        }
    }

    /// The one sample of a family (labelled with the key and nothing else).
    fn get(&self, name: &str) -> f64 {
        let samples = self.samples(name);
        assert_eq!(samples.len(), 1, "{name}: {samples:?}");
        let (labels, value) = &samples[0];
        assert_eq!(labels.len(), 1, "{name}: {labels:?}");
        *value
    }

    /// (labels other than `key`, value) of each sample, after checking the family's shape.
    fn samples(&self, name: &str) -> Vec<(BTreeMap<String, String>, f64)> {
        let f = self
            .families
            .get(name)
            .unwrap_or_else(|| panic!("no {name} in {:?}", self.families.keys()));
        assert_eq!(f["type"], "gauge", "{name}");
        assert!(!f["help"].as_str().unwrap().is_empty(), "{name} has HELP");
        f["samples"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                assert_eq!(s[0], name);
                let labels: BTreeMap<String, String> =
                    serde_json::from_value(s[1].clone()).unwrap();
                assert_eq!(labels["key"], self.key, "{name}: the key label");
                (labels, s[2].as_f64().unwrap())
            })
            .collect()
    }

    /// Checks that `outcome` is 1 and the five others 0, each listed once.
    fn assert_outcome(&self, outcome: &str) {
        let mut seen: Vec<(String, f64)> = self
            .samples("lockrun_last_run_outcome")
            .into_iter()
            .map(|(l, v)| (l["outcome"].clone(), v))
            .collect();
        seen.sort_by(|a, b| a.0.cmp(&b.0));
        let mut want: Vec<(String, f64)> = OUTCOMES
            .iter()
            .map(|o| (o.to_string(), if *o == outcome { 1.0 } else { 0.0 }))
            .collect();
        want.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(seen, want);
    }

    /// The checks every file must pass: all families there, timestamps within the run, no
    /// negative durations, and the exit code lockrun really exited with.
    fn assert_sane(&self, status: Option<i32>, before: f64, after: f64) {
        // The nine of every run, and the ones written only when known (--every, and when the
        // job last started / started before that / succeeded / ended).
        let optional = [
            "lockrun_schedule_period_seconds",
            "lockrun_job_last_start_timestamp_seconds",
            "lockrun_job_previous_start_timestamp_seconds",
            "lockrun_job_last_success_timestamp_seconds",
            "lockrun_job_last_end_timestamp_seconds",
        ];
        let always = self
            .families
            .keys()
            .filter(|k| !optional.contains(&k.as_str()))
            .count();
        assert_eq!(always, 9, "{:?}", self.families.keys());
        assert_eq!(
            Some(self.get("lockrun_last_run_exit_code") as i32),
            status,
            "the exit code"
        );
        let start = self.get("lockrun_last_run_start_timestamp_seconds");
        let end = self.get("lockrun_last_run_end_timestamp_seconds");
        // The float has microsecond resolution; allow that much.
        assert!(
            before - 0.001 <= start && start <= end && end <= after + 0.001,
            "{before} <= {start} <= {end} <= {after}"
        );
        let wait = self.get("lockrun_last_run_wait_seconds");
        let held = self.get("lockrun_last_run_held_seconds");
        assert!(wait >= 0.0 && held >= 0.0, "wait {wait}, held {held}");
        assert!(
            wait + held <= end - start + 0.001,
            "wait {wait} + held {held} within the run ({})",
            end - start
        );
        assert!(self.get("lockrun_last_run_renewals") >= 0.0);
        assert!(self.get("lockrun_last_run_renewal_failures") >= 0.0);
    }
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// A directory for the metrics file, and the file's path in it.
fn metrics_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("job.prom");
    (dir, path)
}

/// Only `job.prom` in the directory: no temporary file was left behind.
fn assert_only_the_file(dir: &Path) {
    let names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["job.prom"], "nothing else is left in the directory");
}

/// Runs `cmd` (a lockrun with --metrics-file already given) to completion; returns its output
/// and the parsed file, with the common checks done.
fn run_and_read(cmd: Lockrun, dir: &Path, path: &Path, key: &str) -> (Output, Metrics) {
    let before = now();
    let out = run(cmd);
    let after = now();
    assert!(path.is_file(), "no metrics file; {}", stderr_of(&out));
    assert_only_the_file(dir);
    let m = Metrics::parse(path, key);
    m.assert_sane(out.status.code(), before, after);
    (out, m)
}

#[test]
fn metrics_ran_with_the_commands_exit_code_renewals_and_fence() {
    let redis = Server::start();
    let (dir, path) = metrics_dir();
    // A key the label must escape: quote, backslash, newline.
    let key = "nightly \"report\" C:\\x\nsecond line";
    let mut cmd = Lockrun::on(&redis);
    // TTL 1.5 s: a renewal every 500 ms, so a 700 ms job sees one (a shorter TTL lets a stall
    // of a loaded CI machine pass for a lost lease).
    cmd.args(["-t", "1500ms", "--metrics-file"])
        .arg(&path)
        .args([key, "--", "sh", "-c", "sleep 0.7; exit 3"]);
    let (out, m) = run_and_read(cmd, dir.path(), &path, key);
    assert_eq!(out.status.code(), Some(3), "{}", stderr_of(&out));
    m.assert_outcome("ran");
    assert!(m.get("lockrun_last_run_renewals") >= 1.0);
    assert_eq!(m.get("lockrun_last_run_renewal_failures"), 0.0);
    assert!(m.get("lockrun_last_run_fence") > 0.0);
    assert!(m.get("lockrun_last_run_held_seconds") >= 0.7);
    assert!(m.get("lockrun_last_run_wait_seconds") < 5.0);
    // Written only after the release.
    assert!(!redis.exists(key));

    // The next run replaces the file: a higher fence, no renewals for a short job.
    let first_fence = m.get("lockrun_last_run_fence");
    let mut cmd = Lockrun::on(&redis);
    cmd.arg("--metrics-file")
        .arg(&path)
        .args([key, "--", "true"]);
    let (_, m) = run_and_read(cmd, dir.path(), &path, key);
    m.assert_outcome("ran");
    assert_eq!(m.get("lockrun_last_run_exit_code"), 0.0);
    assert_eq!(m.get("lockrun_last_run_renewals"), 0.0);
    assert!(m.get("lockrun_last_run_fence") > first_fence);
}

#[test]
fn metrics_skipped_when_held_elsewhere_with_e0_by_default_and_after_a_wait() {
    let redis = Server::start();
    redis.cmd::<()>(&["SET", "busy", "someone-else", "PX", "60000"]);
    let (dir, path) = metrics_dir();
    for (extra, code) in [
        (&["-q", "-E", "0"][..], 0),
        (&[][..], 75),
        (&["--wait", "300ms"][..], 75),
    ] {
        let mut cmd = Lockrun::on(&redis);
        cmd.args(extra)
            .arg("--metrics-file")
            .arg(&path)
            .args(["busy", "--", "echo", "ran"]);
        let (out, m) = run_and_read(cmd, dir.path(), &path, "busy");
        assert_eq!(
            out.status.code(),
            Some(code),
            "{extra:?}: {}",
            stderr_of(&out)
        );
        assert_eq!(stdout_of(&out), "", "the command did not run");
        m.assert_outcome("skipped");
        assert_eq!(m.get("lockrun_last_run_fence"), 0.0, "{extra:?}");
        assert_eq!(m.get("lockrun_last_run_held_seconds"), 0.0, "{extra:?}");
        assert_eq!(m.get("lockrun_last_run_renewals"), 0.0, "{extra:?}");
        if extra.contains(&"--wait") {
            assert!(m.get("lockrun_last_run_wait_seconds") >= 0.3, "waited");
        }
        if extra.contains(&"-q") {
            assert_eq!(stderr_of(&out), "", "-q -E 0 stays silent");
        }
    }
}

#[test]
fn metrics_lost_when_the_key_vanishes_also_with_on_lost_continue() {
    let redis = Server::start();
    let (dir, path) = metrics_dir();
    for (extra, job, code) in [
        (&[][..], "sleep 30", 76),
        (&["--on-lost", "continue"][..], "sleep 3; exit 5", 5),
    ] {
        let mut cmd = Lockrun::on(&redis);
        // -v: the debug line of each confirmed renewal says when one has been counted.
        // TTL 1.5 s: a first renewal must be confirmed before the key is deleted, and at 600 ms
        // a stall of ~400 ms of the loaded test machine (a spawn that takes 190 ms, then a late
        // renewal) loses the lock before any renewal.
        cmd.args(["-v", "-t", "1500ms"])
            .args(extra)
            .arg("--metrics-file")
            .arg(&path)
            .args(["vanishing", "--", "sh", "-c", job])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let before = now();
        let mut child = cmd.spawn().unwrap();
        let mut lines = wait_for_line(&mut child, "redis lock renewed");
        redis.cmd::<i64>(&["DEL", "vanishing"]);
        lines.wait_for("redis lock lost");
        let status = wait_timeout(&mut child, PATIENCE).expect("lockrun ends");
        let after = now();
        assert_eq!(status.code(), Some(code), "{extra:?}: {}", lines.rest());
        assert_only_the_file(dir.path());
        let m = Metrics::parse(&path, "vanishing");
        m.assert_sane(status.code(), before, after);
        m.assert_outcome("lost");
        assert!(m.get("lockrun_last_run_renewals") >= 1.0, "{extra:?}");
        assert!(m.get("lockrun_last_run_fence") > 0.0);
        assert!(m.get("lockrun_last_run_held_seconds") > 0.0);
    }
}

#[test]
fn metrics_aborted_by_sigterm_while_the_job_runs_or_while_waiting() {
    let redis = Server::start();
    let (dir, path) = metrics_dir();
    // Beside the server's files: the metrics directory must hold nothing but the metrics file.
    let ready = redis.dir.path().join("ready");
    // The job dies of the forwarded SIGTERM (143), or traps it and exits 0: aborted either way,
    // since the exit code cannot tell a job stopped from outside from one that finished.
    for (job, code) in [
        (format!("touch '{}'; exec sleep 30", ready.display()), 143),
        (
            format!(
                "trap 'exit 0' TERM; touch '{}'; while :; do sleep 0.05; done",
                ready.display()
            ),
            0,
        ),
    ] {
        let _ = std::fs::remove_file(&ready);
        let mut cmd = Lockrun::on(&redis);
        cmd.arg("--metrics-file")
            .arg(&path)
            .args(["stopped", "--", "sh", "-c", &job])
            .stderr(Stdio::null());
        let before = now();
        let mut child = cmd.spawn().unwrap();
        wait_for_file_of(&mut child, &ready);
        kill(child.id(), libc::SIGTERM);
        let status = wait_timeout(&mut child, PATIENCE).expect("lockrun ends");
        let after = now();
        assert_eq!(status.code(), Some(code), "{job}");
        assert_only_the_file(dir.path());
        let m = Metrics::parse(&path, "stopped");
        m.assert_sane(status.code(), before, after);
        m.assert_outcome("aborted");
        assert!(m.get("lockrun_last_run_fence") > 0.0);
        assert!(m.get("lockrun_last_run_held_seconds") > 0.0);
    }

    // Stopped while waiting for a held lock: 128+15, the command never ran.
    redis.cmd::<()>(&["SET", "stopped", "someone-else", "PX", "60000"]);
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["--wait", "30s", "--metrics-file"])
        .arg(&path)
        .args(["stopped", "--", "echo", "ran"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let before = now();
    let mut child = cmd.spawn().unwrap();
    let mut lines = wait_for_line(&mut child, "waiting");
    kill(child.id(), libc::SIGTERM);
    let status = wait_timeout(&mut child, PATIENCE).expect("lockrun ends");
    let after = now();
    assert_eq!(status.code(), Some(143), "{}", lines.rest());
    let m = Metrics::parse(&path, "stopped");
    m.assert_sane(status.code(), before, after);
    m.assert_outcome("aborted");
    assert_eq!(m.get("lockrun_last_run_fence"), 0.0);
    assert_eq!(m.get("lockrun_last_run_held_seconds"), 0.0);
    assert_only_the_file(dir.path());
}

#[test]
fn metrics_timeout_when_the_time_limit_stops_the_job() {
    let redis = Server::start();
    let (dir, path) = metrics_dir();
    // The job traps SIGTERM and exits 0: stopped at its limit all the same, no success.
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["--time-limit", "500ms", "--metrics-file"])
        .arg(&path)
        .args([
            "limited",
            "--",
            "sh",
            "-c",
            "trap 'exit 0' TERM; while :; do sleep 0.05; done",
        ]);
    let (out, m) = run_and_read(cmd, dir.path(), &path, "limited");
    assert_eq!(out.status.code(), Some(124), "{}", stderr_of(&out));
    m.assert_outcome("timeout");
    assert!(m.get("lockrun_last_run_held_seconds") >= 0.5);
    assert!(m.get("lockrun_last_run_fence") > 0.0);
    assert!(m.get("lockrun_job_last_end_timestamp_seconds") > 0.0);
    assert!(!m
        .families
        .contains_key("lockrun_job_last_success_timestamp_seconds"));
}

#[test]
fn metrics_a_job_that_kills_itself_ran_nobody_stopped_it() {
    let redis = Server::start();
    let (dir, path) = metrics_dir();
    let mut cmd = Lockrun::on(&redis);
    cmd.arg("--metrics-file")
        .arg(&path)
        .args(["selfkill", "--", "sh", "-c", "kill -TERM $$"]);
    let (out, m) = run_and_read(cmd, dir.path(), &path, "selfkill");
    assert_eq!(out.status.code(), Some(143));
    m.assert_outcome("ran");
}

#[test]
fn metrics_error_when_redis_is_unavailable_or_the_command_is_missing() {
    let (dir, path) = metrics_dir();
    let mut cmd = Lockrun::bare();
    cmd.args(["-r", &format!("redis://127.0.0.1:{}", free_port())])
        .arg("--metrics-file")
        .arg(&path)
        .args(["nowhere", "--", "true"]);
    let (out, m) = run_and_read(cmd, dir.path(), &path, "nowhere");
    assert_eq!(out.status.code(), Some(69), "{}", stderr_of(&out));
    m.assert_outcome("error");
    assert_eq!(m.get("lockrun_last_run_fence"), 0.0);
    assert_eq!(m.get("lockrun_last_run_held_seconds"), 0.0);

    // Not found: the lock was taken (a fence) and given back; the command never ran.
    let redis = Server::start();
    let mut cmd = Lockrun::on(&redis);
    cmd.arg("--metrics-file")
        .arg(&path)
        .args(["missing", "--", "definitely-not-a-command-xyz"]);
    let (out, m) = run_and_read(cmd, dir.path(), &path, "missing");
    assert_eq!(out.status.code(), Some(127), "{}", stderr_of(&out));
    m.assert_outcome("error");
    assert!(m.get("lockrun_last_run_fence") > 0.0);
    assert!(!redis.exists("missing"));
}

#[test]
fn metrics_file_that_cannot_be_written_is_a_warning_and_the_exit_code_stays() {
    let redis = Server::start();
    let dir = tempfile::tempdir().unwrap();
    // A directory that does not exist, and a path that is a directory: rename cannot replace it.
    // (Not a read-only directory: the tests may run as root, which writes there anyway.)
    let occupied = dir.path().join("occupied.prom");
    std::fs::create_dir(&occupied).unwrap();
    std::fs::write(occupied.join("inside"), "x").unwrap();
    for path in [dir.path().join("missing/job.prom"), occupied.clone()] {
        let mut cmd = Lockrun::on(&redis);
        cmd.arg("--metrics-file")
            .arg(&path)
            .args(["unwritable", "--", "sh", "-c", "exit 3"]);
        let out = run(cmd);
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(3), "unchanged: {err}");
        let warning = format!("WARN cannot write metrics file {}: ", path.display());
        assert_eq!(
            err.lines().filter(|l| l.contains(&warning)).count(),
            1,
            "one warning line: {err}"
        );
        assert!(err.contains("redis lock released"), "{err}");
    }
    // No temporary file left beside them.
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["occupied.prom"]);
    assert!(occupied.join("inside").is_file());
}

#[test]
fn metrics_file_from_the_environment_relative_to_the_working_directory() {
    let redis = Server::start();
    let (dir, path) = metrics_dir();
    let mut cmd = Lockrun::on(&redis);
    cmd.current_dir(dir.path())
        .env("LOCKRUN_METRICS_FILE", "job.prom")
        .args(["from-env", "--", "true"]);
    let (out, m) = run_and_read(cmd, dir.path(), &path, "from-env");
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    m.assert_outcome("ran");
}

#[test]
fn metrics_no_file_for_a_usage_error_on_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("job.prom");
    let mut cmd = Lockrun::bare();
    cmd.args(["--ttl", "soon", "--metrics-file"])
        .arg(&path)
        .args(["k", "--", "true"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(64));
    assert!(!path.exists(), "the options were never known");
}

/// A device, a FIFO or a link to one at the path is the user's: lockrun warns and leaves it,
/// never renames its file over it (`--metrics-file /dev/null` as root would replace the
/// system's /dev/null). A link to a regular file is followed and the file replaced, the link
/// kept.
#[test]
fn metrics_file_replaces_only_a_regular_file() {
    use std::os::unix::fs::FileTypeExt;
    let redis = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo.prom");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let mut targets = vec![(fifo.clone(), "a FIFO")];
    // A character device like /dev/null (1, 3) of our own; creating one needs root, which CI is.
    let device = dir.path().join("null.prom");
    let made = nix::sys::stat::mknod(
        &device,
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o666),
        nix::sys::stat::makedev(1, 3),
    );
    match made {
        Ok(()) => targets.push((device.clone(), "a character device")),
        Err(e) => eprintln!("not root ({e}): the character-device case needs mknod; FIFO only"),
    }
    let link_to_fifo = dir.path().join("link.prom");
    std::os::unix::fs::symlink(&fifo, &link_to_fifo).unwrap();
    targets.push((link_to_fifo.clone(), "not a regular file"));
    for (path, what) in &targets {
        let mut cmd = Lockrun::on(&redis);
        cmd.arg("--metrics-file")
            .arg(path)
            .args(["special", "--", "sh", "-c", "exit 3"]);
        let out = run(cmd);
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(3), "the run's own code: {err}");
        assert!(
            err.contains(&format!("cannot write metrics file {}", path.display()))
                && err.contains(what)
                && err.contains("left as it is"),
            "{what}: {err}"
        );
    }
    let kind = |p: &Path| std::fs::symlink_metadata(p).unwrap().file_type();
    assert!(kind(&fifo).is_fifo());
    assert!(kind(&link_to_fifo).is_symlink());
    if device.exists() {
        assert!(kind(&device).is_char_device());
    }
    // Nothing else was left in the directory (no temporary file).
    let count = std::fs::read_dir(dir.path()).unwrap().count();
    assert_eq!(count, targets.len(), "only what was there");

    let real = dir.path().join("real.prom");
    std::fs::write(&real, "old\n").unwrap();
    let link = dir.path().join("to-real.prom");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let mut cmd = Lockrun::on(&redis);
    cmd.arg("--metrics-file")
        .arg(&link)
        .args(["special", "--", "true"]);
    assert_eq!(run(cmd).status.code(), Some(0));
    assert!(kind(&link).is_symlink(), "the link stays");
    Metrics::parse(&real, "special").assert_outcome("ran");
}

/// A skipping host knows when the job last started (the holder's start), and a host's file
/// keeps when the job last started and succeeded across the runs that skip: the fleet-wide
/// alerts of packaging/prometheus/lockrun.rules.yml take the newest of these.
#[test]
fn metrics_a_skip_knows_the_holders_start_and_keeps_the_last_success() {
    let redis = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.prom"), dir.path().join("b.prom"));
    let every = ["-q", "-E", "0", "--every", "1m", "--metrics-file"];
    let before = now();
    let mut host_a = Lockrun::on(&redis);
    host_a.args(every).arg(&a).args(["tick", "--", "true"]);
    assert_eq!(run(host_a).status.code(), Some(0));
    let ma = Metrics::parse(&a, "tick");
    ma.assert_outcome("ran");
    assert_eq!(ma.get("lockrun_schedule_period_seconds"), 60.0);
    let started = ma.get("lockrun_job_last_start_timestamp_seconds");
    let succeeded = ma.get("lockrun_job_last_success_timestamp_seconds");
    assert!(before - 0.001 <= started && started <= succeeded && succeeded <= now());

    // Host b fires the same tick later and skips: it saw a's start (to the second).
    let mut host_b = Lockrun::on(&redis);
    host_b.args(every).arg(&b).args(["tick", "--", "true"]);
    assert_eq!(run(host_b).status.code(), Some(0));
    let mb = Metrics::parse(&b, "tick");
    mb.assert_outcome("skipped");
    let seen = mb.get("lockrun_job_last_start_timestamp_seconds");
    assert!(
        (started - seen).abs() < 2.0,
        "a started {started}, b saw {seen}"
    );
    assert!(!mb
        .families
        .contains_key("lockrun_job_last_success_timestamp_seconds"));

    // Host a fires again within the hold: it skips, and its file keeps its last success.
    let mut again = Lockrun::on(&redis);
    again.args(every).arg(&a).args(["tick", "--", "true"]);
    assert_eq!(run(again).status.code(), Some(0));
    let ma = Metrics::parse(&a, "tick");
    ma.assert_outcome("skipped");
    assert_eq!(
        ma.get("lockrun_job_last_success_timestamp_seconds"),
        succeeded
    );
    assert!(ma.get("lockrun_job_last_start_timestamp_seconds") >= started - 1.0);
}

/// A host's file says when a run of the job there last ended, success or not, and the start
/// before the last one: with them the fleet-wide alert tells the first run after a pause, still
/// going, from a job that does not succeed (packaging/prometheus/lockrun.rules.yml).
#[test]
fn metrics_the_last_end_and_the_previous_start_follow_the_runs() {
    let redis = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.prom"), dir.path().join("b.prom"));
    // One host's cron line: the job exits `exit`; lockrun's exit code, the file.
    let tick = |file: &Path, exit: u8| {
        let mut cmd = Lockrun::on(&redis);
        cmd.args(["-q", "-E", "0", "--every", "3s", "--metrics-file"])
            .arg(file)
            .args(["resumed", "--", "sh", "-c", &format!("exit {exit}")]);
        let code = run(cmd).status.code();
        (code, Metrics::parse(file, "resumed"))
    };
    let has = |m: &Metrics, family: &str| m.families.contains_key(family);
    let started = "lockrun_job_last_start_timestamp_seconds";
    let previous = "lockrun_job_previous_start_timestamp_seconds";
    let succeeded = "lockrun_job_last_success_timestamp_seconds";
    let ended = "lockrun_job_last_end_timestamp_seconds";

    // Host a runs the job, which fails: an end, no success, no start known before this one.
    let (code, ma) = tick(&a, 3);
    assert_eq!(code, Some(3));
    ma.assert_outcome("ran");
    let first = ma.get(started);
    assert!(first <= ma.get(ended) && ma.get(ended) <= now());
    assert!(!has(&ma, succeeded) && !has(&ma, previous));
    // Host b skips: it saw the start (to the second); it ended nothing.
    let (code, mb) = tick(&b, 0);
    assert_eq!(code, Some(0));
    mb.assert_outcome("skipped");
    assert!((mb.get(started) - first).abs() < 1.0);
    assert!(!has(&mb, ended) && !has(&mb, previous));

    // The next tick, once the 2.7 s hold is over: a succeeds; both know the start before.
    std::thread::sleep(std::time::Duration::from_secs(3));
    let (code, ma) = tick(&a, 0);
    assert_eq!(code, Some(0));
    ma.assert_outcome("ran");
    let second = ma.get(started);
    assert!(second > first + 2.5, "{first} then {second}");
    assert_eq!(ma.get(previous), first);
    assert_eq!(ma.get(ended), ma.get(succeeded));
    let (code, mb) = tick(&b, 0);
    assert_eq!(code, Some(0));
    mb.assert_outcome("skipped");
    assert!((mb.get(started) - second).abs() < 1.0);
    assert!((mb.get(previous) - first).abs() < 1.0);
    assert!(!has(&mb, ended));
}

/// `release --force` during a 1.5 s job (TTL 30 s, so no renewal notices). A run whose release
/// finds its key gone lost its lock while the job ran: `lost` in the log, the history and the
/// metrics alike, so the lost-lock alert fires; the exit code is the job's own (it ran to its
/// end, as with --on-lost continue).
#[test]
fn metrics_a_key_gone_at_release_is_lost_everywhere() {
    let redis = Server::start();
    let (dir, path) = metrics_dir();
    let mut cmd = Lockrun::on(&redis);
    cmd.arg("--metrics-file")
        .arg(&path)
        .args(["forced", "--", "sh", "-c", "sleep 1.5; exit 3"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut lines = wait_for_line(&mut child, "redis lock acquired");
    let mut force = Lockrun::bare();
    force
        .args(["release", "--force", "-r"])
        .arg(redis.url())
        .arg("forced");
    assert_eq!(run(force).status.code(), Some(0));
    let status = wait_timeout(&mut child, PATIENCE).expect("lockrun ends");
    let err = lines.rest();
    assert_eq!(status.code(), Some(3), "the job's own code: {err}");
    assert!(err.contains("ERROR redis lock lost"), "{err}");
    assert_only_the_file(dir.path());
    Metrics::parse(&path, "forced").assert_outcome("lost");
    let mut history = Lockrun::bare();
    history
        .args(["history", "--json", "-r"])
        .arg(redis.url())
        .arg("forced");
    let runs: serde_json::Value = serde_json::from_str(&stdout_of(&run(history))).unwrap();
    let outcomes: Vec<&str> = runs
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["lost", "released"], "{runs}");
}

/// A lockrun inside the job (a wrapper's, a reentrant step under the same lock) does not write
/// the outer run's file: `LOCKRUN_METRICS_FILE` is not passed on to the command. Else the inner
/// run's success would be the file's last success, kept when the outer job then fails: the
/// alert on a job that never succeeds would never fire.
#[test]
fn metrics_a_lockrun_inside_the_job_does_not_write_the_same_file() {
    let redis = Server::start();
    let (dir, path) = metrics_dir();
    let inner = r#"echo "${LOCKRUN_METRICS_FILE-unset}"; "$0" -r "$1" outer -- true; exit 3"#;
    let mut cmd = Lockrun::on(&redis);
    cmd.env("LOCKRUN_METRICS_FILE", &path)
        .args(["outer", "--", "sh", "-c", inner])
        .arg(lockrun_bin())
        .arg(redis.url());
    let (out, m) = run_and_read(cmd, dir.path(), &path, "outer");
    assert_eq!(out.status.code(), Some(3), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out).trim(), "unset", "the job's variable");
    m.assert_outcome("ran");
    assert!(
        !m.families
            .contains_key("lockrun_job_last_success_timestamp_seconds"),
        "the outer job failed and never succeeded: {:?}",
        m.families.keys()
    );
}
