//! Metrics and alerts with Prometheus's own programs (Debian's, unpacked by
//! `tests/ensure-prometheus.sh` into target/test-tools/prometheus): the shipped rules pass
//! `promtool check rules` and their unit tests for an every-minute, an hourly and a daily job;
//! the files lockrun writes pass `promtool check metrics`; and a real node_exporter, running as
//! another user as Debian runs it, scrapes them whatever lockrun's umask was.

use crate::support::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

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
        stdout_of(&out).contains("SUCCESS: 9 rules found"),
        "{}",
        stdout_of(&out)
    );
    // The unit tests: healthy jobs of each schedule are silent, a stopped one fires after its
    // own period and a half, failed / lost / aborted / unavailable fire (see the file).
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

/// Metrics files, all with --every 1m and written under umask 077: a run that ran the job
/// (key `<prefix>-ran`), one that skipped it (`<prefix>-skipped`, held by an earlier run's
/// hold) and one that could not start it (`<prefix>-error`), as `dir/<outcome>.prom`. One key
/// per file, as node_exporter wants (two files with the same series fail its scrape).
fn write_files(redis: &Server, dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for (outcome, command) in [
        ("ran", "true"),
        ("skipped", "true"),
        ("error", "/nonexistent/job"),
    ] {
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
            .args([&key, "--", command]);
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
        if let Ok(Some(status)) = self.child.try_wait() {
            let mut err = String::new();
            let _ = self.child.stderr.take().unwrap().read_to_string(&mut err);
            panic!("node_exporter exited {status}: {err}");
        }
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
            .ok()?;
        let mut body = String::new();
        s.read_to_string(&mut body).ok()?;
        body.split_once("\r\n\r\n").map(|(_, b)| b.to_string())
    }
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
    // Every file read: an unreadable one (0600 from a umask, before) sets this to 1 and its
    // series are missing.
    assert!(
        body.lines().any(|l| l == "node_textfile_scrape_error 0"),
        "{body}"
    );
    for (f, outcome) in files.iter().zip(["ran", "skipped", "error"]) {
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
    // The run and the skip know when the job last started (the skip: the holder's start); only
    // the run succeeded; the run that could not start the command knows neither.
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
    assert!(!has(started, "error") && !has(succeeded, "error"), "{body}");
}
