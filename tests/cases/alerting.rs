//! Metrics and alerts with Prometheus's own programs (Debian's, unpacked by
//! `tests/ensure-prometheus.sh` into target/test-tools/prometheus): the shipped rules pass
//! `promtool check rules` and their unit tests for an every-minute, an hourly and a daily job;
//! the files lockrun writes pass `promtool check metrics`; a real node_exporter, running as
//! another user as Debian runs it, scrapes them whatever lockrun's umask was; and a real
//! Prometheus server evaluates the rules over time while lockrun runs a job that is stopped
//! and resumed.

use crate::support::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A tool of the unpacked Debian packages, or the one the variable names; the test fails (never
/// skips) without it.
fn tool(var: &str, name: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(var) {
        return PathBuf::from(p);
    }
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/test-tools/prometheus/usr/bin")
        .join(name);
    assert!(
        p.is_file(),
        "{} not found: run `bash tests/ensure-prometheus.sh` (or set {var})",
        p.display()
    );
    p
}

fn promtool() -> Command {
    Command::new(tool("LOCKRUN_TEST_PROMTOOL", "promtool"))
}

fn rules_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/prometheus")
}

#[test]
fn alerting_rules_pass_promtool_and_their_unit_tests() {
    let mut check = promtool();
    check
        .args(["check", "rules"])
        .arg(rules_dir().join("lockrun.rules.yml"));
    let out = run(check);
    assert!(
        out.status.success(),
        "{}{}",
        stdout_of(&out),
        stderr_of(&out)
    );
    assert!(
        stdout_of(&out).contains("SUCCESS: 10 rules found"),
        "{}",
        stdout_of(&out)
    );
    // The unit tests: healthy jobs of each schedule are silent, a stopped one fires after its
    // own period and a half, failed / lost / aborted / timed out / unavailable fire (see the
    // file).
    let mut test = promtool();
    test.current_dir(rules_dir())
        .args(["test", "rules", "lockrun.rules.test.yml"]);
    let out = run(test);
    assert!(
        out.status.success(),
        "{}{}",
        stdout_of(&out),
        stderr_of(&out)
    );
    assert!(stdout_of(&out).contains("SUCCESS"), "{}", stdout_of(&out));
}

/// The outcomes [`write_files`] writes a file of, in its order.
const WRITTEN: [&str; 4] = ["ran", "skipped", "timeout", "error"];

/// Metrics files, all with --every 1m and written under umask 077: a run that ran the job
/// (key `<prefix>-ran`), one that skipped it (`<prefix>-skipped`, held by an earlier run's
/// hold), one stopped at its time limit (`<prefix>-timeout`) and one that could not start it
/// (`<prefix>-error`), as `dir/<outcome>.prom`. One key per file, as node_exporter wants (two
/// files with the same series fail its scrape).
fn write_files(redis: &Server, dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    // Each one's options beyond the common ones, and its command.
    let runs: [(&[&str], &str); 4] = [
        (&[], "true"),
        (&[], "true"),
        (&["--time-limit", "200ms"], "sleep 30"),
        (&[], "/nonexistent/job"),
    ];
    for (outcome, (options, command)) in WRITTEN.into_iter().zip(runs) {
        let key = format!("{prefix}-{outcome}");
        if outcome == "skipped" {
            let mut holder = Lockrun::on(redis);
            holder.args(["--every", "1m", &key, "--", "true"]);
            assert_eq!(run(holder).status.code(), Some(0));
        }
        let path = dir.join(format!("{outcome}.prom"));
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "umask 077; exec \"$0\" \"$@\""])
            .arg(lockrun_bin())
            .args(["-q", "-E", "0", "--every", "1m", "-r"])
            .arg(redis.url())
            .arg("--metrics-file")
            .arg(&path)
            .args(options)
            .args([&key, "--"])
            .args(command.split(' '));
        from_a_clean_caller(&mut cmd);
        let out = run(cmd);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{outcome}: {e}; {}", stderr_of(&out)));
        assert!(
            text.contains(&format!("outcome=\"{outcome}\"}} 1")),
            "{text}"
        );
        files.push(path);
    }
    files
}

#[test]
fn alerting_metrics_files_pass_promtool_check_metrics() {
    let redis = Server::start();
    let dir = tempfile::tempdir().unwrap();
    for path in write_files(&redis, dir.path(), "checked") {
        let text = std::fs::read(&path).unwrap();
        let mut check = promtool();
        check
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = check.spawn().unwrap();
        child.stdin.take().unwrap().write_all(&text).unwrap();
        let out = wait_output(child);
        // promtool prints lint findings (names, units, HELP) and exits 3 for them.
        assert!(
            out.status.success() && stdout_of(&out).is_empty() && stderr_of(&out).is_empty(),
            "{}: {}{}\n{}",
            path.display(),
            stdout_of(&out),
            stderr_of(&out),
            String::from_utf8_lossy(&text)
        );
    }
}

/// node_exporter as Debian runs it (its own user; here `nobody`), reading only the textfile
/// collector's directory, on a loopback port; killed when dropped.
struct NodeExporter {
    child: std::process::Child,
    port: u16,
}

impl NodeExporter {
    fn start(textfiles: &Path) -> NodeExporter {
        let port = free_port();
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
            .arg(tool(
                "LOCKRUN_TEST_NODE_EXPORTER",
                "prometheus-node-exporter",
            ))
            .args(["--collector.disable-defaults", "--collector.textfile"])
            .arg(format!(
                "--collector.textfile.directory={}",
                textfiles.display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let child = cmd
            .spawn()
            .expect("setpriv (util-linux) runs node_exporter as nobody");
        let mut exporter = NodeExporter { child, port };
        eventually("node_exporter to listen", || {
            exporter.try_scrape().is_some()
        });
        exporter
    }

    /// GET /metrics, the body; `None` while nothing listens.
    fn try_scrape(&mut self) -> Option<String> {
        assert_running(&mut self.child, "node_exporter");
        http_get(self.port, "/metrics")
    }
}

/// Fails the test with what `child` said if it has exited.
fn assert_running(child: &mut std::process::Child, name: &str) {
    if let Ok(Some(status)) = child.try_wait() {
        let mut err = String::new();
        let _ = child.stderr.take().unwrap().read_to_string(&mut err);
        panic!("{name} exited {status}: {err}");
    }
}

/// GET `path` from a server on a loopback port, the body; `None` while nothing listens.
fn http_get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
        .ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    body.split_once("\r\n\r\n").map(|(_, b)| b.to_string())
}

impl Drop for NodeExporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn alerting_node_exporter_scrapes_what_lockrun_wrote_under_umask_077() {
    let redis = Server::start();
    let dir = tempfile::tempdir().unwrap();
    // The directory node_exporter reads is open to its user; the files are lockrun's business.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let files = write_files(&redis, dir.path(), "scraped");
    for f in &files {
        let mode = std::fs::metadata(f).unwrap().permissions().mode() & 0o777;
        assert_eq!(
            mode,
            0o644,
            "{}: readable by others whatever the umask",
            f.display()
        );
    }
    let mut exporter = NodeExporter::start(dir.path());
    let body = exporter.try_scrape().expect("a scrape");
    // Every file read: an unreadable one (0600, had the umask decided) would set this to 1
    // and its series would be missing.
    assert!(
        body.lines().any(|l| l == "node_textfile_scrape_error 0"),
        "{body}"
    );
    for (f, outcome) in files.iter().zip(WRITTEN) {
        assert!(
            body.contains(&format!(
                "node_textfile_mtime_seconds{{file=\"{}\"}}",
                f.display()
            )),
            "{}: {body}",
            f.display()
        );
        let key = format!("scraped-{outcome}");
        for series in [
            format!("lockrun_last_run_outcome{{key=\"{key}\",outcome=\"{outcome}\"}} 1"),
            format!("lockrun_schedule_period_seconds{{key=\"{key}\"}} 60"),
        ] {
            assert!(body.lines().any(|l| l == series), "{series}: {body}");
        }
    }
    // The run, the skip and the run stopped at its time limit know when the job last started
    // (the skip: the holder's start); only the run succeeded; the run that could not start the
    // command knows neither.
    let has = |family: &str, outcome: &str| {
        body.contains(&format!("{family}{{key=\"scraped-{outcome}\"}} "))
    };
    let started = "lockrun_job_last_start_timestamp_seconds";
    let succeeded = "lockrun_job_last_success_timestamp_seconds";
    assert!(has(started, "ran") && has(succeeded, "ran"), "{body}");
    assert!(
        has(started, "skipped") && !has(succeeded, "skipped"),
        "{body}"
    );
    assert!(
        has(started, "timeout") && !has(succeeded, "timeout"),
        "{body}"
    );
    assert!(!has(started, "error") && !has(succeeded, "error"), "{body}");
}

/// The shipped rules with the one constant that is in minutes scaled to seconds: the least
/// "late" gets beyond a period (`clamp_min(period / 2, 300)`) becomes 1 s, so a job with
/// `--every 4s` is late after 6 s. Everything else is the file as shipped.
fn rules_scaled_to_seconds() -> String {
    let shipped = std::fs::read_to_string(rules_dir().join("lockrun.rules.yml")).unwrap();
    let floors = shipped.matches(", 300)").count();
    assert!(
        floors > 0,
        "no `, 300)` left in the rules: update this test"
    );
    assert_eq!(
        shipped.matches("300").count(),
        floors,
        "every 300 in the rules is the floor of lateness"
    );
    shipped.replace(", 300)", ", 1)")
}

/// Debian's `prometheus` server (2.42) on a loopback port, scraping `targets` every second and
/// evaluating `rules` every second, its TSDB in `dir`; killed when dropped.
struct Prometheus {
    child: std::process::Child,
    port: u16,
    /// Its stderr (a file: a pipe nobody reads could fill up and stop it).
    log: PathBuf,
}

impl Prometheus {
    fn start(dir: &Path, rules: &str, targets: &[u16]) -> Prometheus {
        std::fs::write(dir.join("lockrun.rules.yml"), rules).unwrap();
        let targets: Vec<String> = targets.iter().map(|p| format!("'127.0.0.1:{p}'")).collect();
        let config = format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
             rule_files: [lockrun.rules.yml]\n\
             scrape_configs:\n  - job_name: node\n    static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
        );
        std::fs::write(dir.join("prometheus.yml"), config).unwrap();
        let port = free_port();
        let log = dir.join("prometheus.log");
        let child = Command::new(tool("LOCKRUN_TEST_PROMETHEUS", "prometheus"))
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn")
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut prometheus = Prometheus { child, port, log };
        eventually("prometheus to be ready", || {
            prometheus.assert_running();
            http_get(port, "/-/ready").is_some_and(|b| b.contains("Ready"))
        });
        prometheus
    }

    fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            panic!("prometheus exited {status}: {log}");
        }
    }

    /// GET an API path, the `data` of its answer.
    fn api(&mut self, path: &str) -> serde_json::Value {
        self.assert_running();
        let body = http_get(self.port, path).unwrap_or_else(|| panic!("no answer to {path}"));
        let v: serde_json::Value =
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"));
        assert_eq!(v["status"], "success", "{path}: {body}");
        v["data"].clone()
    }

    /// The result vector of an instant query.
    fn query(&mut self, promql: &str) -> Vec<serde_json::Value> {
        let encoded: String = promql
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' | b'-' => {
                    char::from(b).to_string()
                }
                b => format!("%{b:02X}"),
            })
            .collect();
        let data = self.api(&format!("/api/v1/query?query={encoded}"));
        data["result"].as_array().cloned().unwrap_or_default()
    }

    /// The alerts now pending or firing: `(name, state)`.
    fn alerts(&mut self) -> Vec<(String, String)> {
        let data = self.api("/api/v1/alerts");
        data["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                let name = a["labels"]["alertname"].as_str().unwrap().to_string();
                (name, a["state"].as_str().unwrap().to_string())
            })
            .collect()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A job stopped everywhere until `LockrunJobNotStarted` fires, then resumed: its first run
/// is healthy, and nothing else fires while it runs. Real lockrun runs on two "hosts" (each
/// its own textfile directory and node_exporter) write their files, a real Prometheus scrapes
/// them and evaluates the shipped rules every second; the job runs `--every 4s` for 3 s, so
/// late is 6 s (see [`rules_scaled_to_seconds`]). The host that skips writes the new start at
/// once, the one that runs writes its success 3 s later.
#[test]
fn alerting_prometheus_stays_silent_while_a_resumed_job_runs_its_first_run() {
    const EVERY: u64 = 4;
    let began = Instant::now();
    let redis = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let mut hosts = Vec::new();
    let mut exporters = Vec::new();
    for name in ["a", "b"] {
        let textfiles = dir.path().join(name);
        std::fs::create_dir(&textfiles).unwrap();
        std::fs::set_permissions(&textfiles, std::fs::Permissions::from_mode(0o755)).unwrap();
        exporters.push(NodeExporter::start(&textfiles));
        hosts.push(textfiles.join("recover.prom"));
    }
    let ports: Vec<u16> = exporters.iter().map(|e| e.port).collect();
    let mut prometheus = Prometheus::start(dir.path(), &rules_scaled_to_seconds(), &ports);
    let names: Vec<String> = prometheus.api("/api/v1/rules")["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect();
    assert!(
        names.contains(&"LockrunJobNotStarted".to_string())
            && names.contains(&"LockrunJobNotSucceeding".to_string()),
        "{names:?}"
    );

    // A cron tick: the same line on both hosts at once; one runs the job, the other skips.
    let tick = |at: Instant| {
        let now = Instant::now();
        if at > now {
            std::thread::sleep(at - now);
        }
        let children: Vec<_> = hosts
            .iter()
            .map(|file| {
                let mut cmd = Lockrun::on(&redis);
                cmd.args(["-q", "-E", "0", "--every", &format!("{EVERY}s")])
                    .arg("--metrics-file")
                    .arg(file)
                    .args(["recover", "--", "sleep", "3"])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
                cmd.spawn().unwrap()
            })
            .collect();
        for child in children {
            let out = wait_output(child);
            assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
        }
    };
    // Every alert seen while the test runs, polled 5 times a second.
    let mut seen: Vec<(f64, String, String)> = Vec::new();
    let t0 = Instant::now();
    let setup = (t0 - began).as_secs_f64();
    let poll = |prometheus: &mut Prometheus, seen: &mut Vec<_>| {
        for (name, state) in prometheus.alerts() {
            seen.push((t0.elapsed().as_secs_f64(), name, state));
        }
        std::thread::sleep(Duration::from_millis(200));
    };

    // Prometheus applies its targets 5 s after it starts: the first tick does not wait for
    // that (the alert below cannot fire before its first scrapes anyway).
    tick(t0);
    // Stopped: the alert for a job not started fires once 6 s have passed since its start.
    let deadline = Instant::now() + PATIENCE;
    while !seen
        .iter()
        .any(|(_, n, s)| n == "LockrunJobNotStarted" && s == "firing")
    {
        assert!(
            Instant::now() < deadline,
            "LockrunJobNotStarted never fired: {seen:?}"
        );
        poll(&mut prometheus, &mut seen);
    }
    let fired_at = t0.elapsed().as_secs_f64();
    // Resumed at the next tick of the schedule, which is after the alert fired.
    let resume = t0 + Duration::from_secs((fired_at / EVERY as f64).ceil() as u64 * EVERY);
    std::thread::scope(|s| {
        let run = s.spawn(|| tick(resume));
        while !run.is_finished() {
            poll(&mut prometheus, &mut seen);
        }
    });
    // Until the first run's success has been scraped and the rules evaluated twice more.
    let resumed = (resume - t0).as_secs_f64();
    let after_resume = format!(
        "lockrun_job_last_success_timestamp_seconds > {}",
        unix_now() - (Instant::now() - resume).as_secs_f64()
    );
    let deadline = Instant::now() + PATIENCE;
    while prometheus.query(&after_resume).is_empty() {
        assert!(Instant::now() < deadline, "the success was never scraped");
        poll(&mut prometheus, &mut seen);
    }
    for _ in 0..10 {
        poll(&mut prometheus, &mut seen);
    }

    let seen = spans(&seen);
    assert!(
        !seen.contains("LockrunJobNotSucceeding"),
        "a healthy recovery raised LockrunJobNotSucceeding (resumed at {resumed:.1} s): {seen}"
    );
    assert_eq!(prometheus.query("up == 1").len(), 2, "both hosts scraped");
    let not_started = prometheus.query("ALERTS{alertname=\"LockrunJobNotStarted\"}");
    assert!(
        not_started.is_empty(),
        "LockrunJobNotStarted did not clear after the resume at {resumed:.1} s: {seen}"
    );
    // What Prometheus recorded agrees with what was polled: ALERTS has every state an alert
    // was in, at every evaluation.
    let history = |p: &mut Prometheus, name: &str| {
        p.query(&format!(
            "count_over_time(ALERTS{{alertname=\"{name}\"}}[5m])"
        ))
    };
    assert!(history(&mut prometheus, "LockrunJobNotSucceeding").is_empty());
    assert!(!history(&mut prometheus, "LockrunJobNotStarted").is_empty());
    eprintln!(
        "set up in {setup:.1} s; resumed at {resumed:.1} s; {:.1} s in all; alerts: {seen}",
        began.elapsed().as_secs_f64()
    );
}

/// Each alert state polled, with when it was first and last seen (seconds): one line each.
fn spans(seen: &[(f64, String, String)]) -> String {
    let mut spans: Vec<(String, f64, f64)> = Vec::new();
    for (at, name, state) in seen {
        let what = format!("{name} {state}");
        match spans.iter_mut().find(|(w, _, _)| *w == what) {
            Some(span) => span.2 = *at,
            None => spans.push((what, *at, *at)),
        }
    }
    let lines: Vec<String> = spans
        .iter()
        .map(|(what, first, last)| format!("{what} {first:.1}..{last:.1} s"))
        .collect();
    lines.join("; ")
}

fn unix_now() -> f64 {
    std::time::UNIX_EPOCH.elapsed().unwrap().as_secs_f64()
}
