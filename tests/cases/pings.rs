//! `--ping` / `LOCKRUN_PING_URL`: the host that runs the job reports its start and end to a
//! health-check monitor (the HTTP server of `support::monitor`, recording each request), in
//! healthchecks.io's convention; hosts that skip and runs that fail before the lock stay
//! silent; a monitor that fails, refuses or never answers costs a bounded wait and one warning,
//! never the exit code; the URL, a secret, is never printed whole.

use crate::support::monitor::{refusing_url, without_rid, Answer, ConnectProxy, Monitor};
use crate::support::*;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The part of the ping URLs that must never show: healthchecks.io's check UUID.
const SECRET: &str = "5e1f-secret-uuid";

fn ping_path() -> String {
    format!("ping/{SECRET}")
}

/// A monitor whose records say whether `key` existed on `redis` when each ping came.
fn watching(redis: &Server, key: &str, answer: Answer) -> Monitor {
    let client = redis.client();
    let key = key.to_string();
    Monitor::answering(
        answer,
        Box::new(move || {
            let mut conn = client.get_connection().unwrap();
            let n: i64 = redis::cmd("EXISTS").arg(&key).query(&mut conn).unwrap();
            if n == 1 { "held" } else { "free" }.to_string()
        }),
    )
}

/// `lockrun` on `redis` with `LOCKRUN_PING_URL=url`, output captured.
fn pinging(redis: &Server, url: &str, args: &[&str]) -> Output {
    let mut cmd = Lockrun::on(redis);
    cmd.env("LOCKRUN_PING_URL", url).args(args);
    run(cmd)
}

/// The warnings about pings in `stderr`.
fn ping_warnings(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("health-check"))
        .collect()
}

fn assert_no_secret(stderr: &str) {
    assert!(
        !stderr.contains(SECRET),
        "the ping URL was printed: {stderr}"
    );
}

/// Three hosts start the same job at once: the one that runs it pings /start while it holds
/// the lock and the plain URL (success) once it has released it; the two that skip send
/// nothing.
#[test]
fn the_winner_pings_start_then_success_and_the_skipped_stay_silent() {
    let redis = Server::start();
    let monitor = watching(&redis, "tick", Answer::Statuses(vec![200]));
    let url = monitor.url(&ping_path());
    let children: Vec<_> = (0..3)
        .map(|_| {
            let mut cmd = Lockrun::on(&redis);
            cmd.env("LOCKRUN_PING_URL", &url)
                .args(["tick", "--", "sleep", "1"])
                .stdout(Stdio::null())
                .stderr(Stdio::piped());
            cmd.spawn().unwrap()
        })
        .collect();
    let outs: Vec<Output> = children.into_iter().map(wait_output).collect();
    let mut codes: Vec<i32> = outs.iter().map(|o| o.status.code().unwrap()).collect();
    codes.sort();
    let stderr: String = outs.iter().map(stderr_of).collect();
    assert_eq!(codes, [0, 75, 75], "{stderr}");
    let requests = monitor.requests();
    let seen: Vec<(String, String)> = requests
        .iter()
        .map(|r| {
            (
                format!("{} {}", r.method, r.without_rid()),
                r.probed.clone(),
            )
        })
        .collect();
    let base = format!("/{}", ping_path());
    assert_eq!(
        seen,
        [
            (format!("GET {base}/start"), "held".to_string()),
            (format!("GET {base}"), "free".to_string()),
        ],
        "{stderr}"
    );
    assert!(requests[1].at.duration_since(requests[0].at) >= Duration::from_millis(900));
    assert!(ping_warnings(&stderr).is_empty(), "{stderr}");
    assert_no_secret(&stderr);
}

/// A job that fails pings its exit code; one that cannot be started (the lock was taken for
/// it) pings lockrun's 127.
#[test]
fn a_failing_job_pings_its_exit_code() {
    let redis = Server::start();
    let monitor = Monitor::start();
    let url = monitor.url(&ping_path());
    let base = format!("/{}", ping_path());
    let out = pinging(&redis, &url, &["k", "--", "sh", "-c", "exit 3"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr_of(&out));
    let out = pinging(&redis, &url, &["k", "--", "/nonexistent/job"]);
    assert_eq!(out.status.code(), Some(127), "{}", stderr_of(&out));
    assert_eq!(
        monitor.lines(),
        [
            format!("GET {base}/start"),
            format!("GET {base}/3"),
            format!("GET {base}/start"),
            format!("GET {base}/127"),
        ]
    );
}

/// A lock lost while the job runs is a failure: exit 76 pings /76; with --on-lost continue and
/// a job that exits 0, /fail (the exit code 0 is no success here).
#[test]
fn a_lost_lock_pings_a_failure() {
    let redis = Server::start();
    let monitor = Monitor::start();
    let url = monitor.url(&ping_path());
    let base = format!("/{}", ping_path());
    for (extra, job, code, end) in [
        (&[][..], "sleep 30", 76, "/76"),
        (&["--on-lost", "continue"][..], "sleep 3", 0, "/fail"),
    ] {
        let before = monitor.requests().len();
        let mut cmd = Lockrun::on(&redis);
        // -v: the first confirmed renewal's line; TTL 1.5 s as in the metrics tests (a loaded
        // machine must not lose the lease before the test deletes it).
        cmd.env("LOCKRUN_PING_URL", &url)
            .args(["-v", "-t", "1500ms"])
            .args(extra)
            .args(["vanishing", "--", "sh", "-c", job])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let mut lines = wait_for_line(&mut child, "redis lock renewed");
        redis.cmd::<i64>(&["DEL", "vanishing"]);
        lines.wait_for("redis lock lost");
        let status = wait_timeout(&mut child, PATIENCE).expect("lockrun ends");
        let rest = lines.rest();
        assert_eq!(status.code(), Some(code), "{extra:?}: {rest}");
        assert_eq!(
            monitor.lines()[before..],
            [format!("GET {base}/start"), format!("GET {base}{end}")],
            "{extra:?}: {rest}"
        );
        assert_no_secret(&rest);
    }
}

/// A monitor that accepts and never answers: the exit code is the job's, lockrun waits for the
/// pings at most its bound (5 s) after the job, and says so in one warning that names the
/// monitor's host and not the URL. The lock was released before that wait.
#[test]
fn a_monitor_that_never_answers_costs_a_bounded_wait_and_one_warning() {
    let redis = Server::start();
    let monitor = watching(&redis, "k", Answer::Never);
    let url = monitor.url(&ping_path());
    let mut cmd = Lockrun::on(&redis);
    cmd.env("LOCKRUN_PING_URL", &url)
        .args(["k", "--", "sh", "-c", "exit 4"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let child = cmd.spawn().unwrap();
    // The job is over at once: from here only the pings keep lockrun.
    eventually("the start ping", || !monitor.requests().is_empty());
    eventually("the lock released", || !redis.exists("k"));
    let out = wait_output(child);
    let took = started.elapsed();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(took < Duration::from_secs(8), "took {took:?}: {stderr}");
    let warnings = ping_warnings(&stderr);
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(warnings[0].contains(&monitor.url("…")), "{stderr}");
    assert_no_secret(&stderr);
}

/// Nothing listens at the URL: the connection is refused, tried again a few times within the
/// bound, one warning, the exit code unchanged.
#[test]
fn a_refused_connection_is_one_warning_and_the_exit_code_stays() {
    let redis = Server::start();
    let url = refusing_url(&ping_path());
    let started = Instant::now();
    let out = pinging(&redis, &url, &["k", "--", "true"]);
    let took = started.elapsed();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(took < Duration::from_secs(7), "took {took:?}: {stderr}");
    let warnings = ping_warnings(&stderr);
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(warnings[0].contains("refused"), "{stderr}");
    assert!(!redis.exists("k"));
    assert_no_secret(&stderr);
}

/// A monitor that answers 503, then 502, then 200: the start ping is tried again (while the
/// job runs) until it gets through; no warning. A 404 (no such check) is not tried again, and
/// is the warning; so is a redirect, which is not followed.
#[test]
fn a_5xx_is_tried_again_and_a_404_or_a_redirect_is_not() {
    let redis = Server::start();
    let monitor = Monitor::answering(Answer::Statuses(vec![503, 502, 200]), Box::new(String::new));
    let url = monitor.url(&ping_path());
    let base = format!("/{}", ping_path());
    let out = pinging(&redis, &url, &["k", "--", "sleep", "2"]);
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        monitor.lines(),
        [
            format!("GET {base}/start"),
            format!("GET {base}/start"),
            format!("GET {base}/start"),
            format!("GET {base}"),
        ],
        "{stderr}"
    );
    assert!(ping_warnings(&stderr).is_empty(), "{stderr}");

    let missing = Monitor::answering(Answer::Statuses(vec![404]), Box::new(String::new));
    let out = pinging(&redis, &missing.url(&ping_path()), &["k", "--", "true"]);
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(missing.lines().len(), 2, "one try each: {stderr}");
    let warnings = ping_warnings(&stderr);
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(warnings[0].contains("HTTP 404"), "{stderr}");
    assert_no_secret(&stderr);

    // A redirect is not followed (nor tried again): no ping counts as delivered by it.
    let moved = Monitor::answering(Answer::Statuses(vec![301]), Box::new(String::new));
    let out = pinging(&redis, &moved.url(&ping_path()), &["k", "--", "true"]);
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(moved.lines().len(), 2, "one try each: {stderr}");
    let warnings = ping_warnings(&stderr);
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(warnings[0].contains("HTTP 301"), "{stderr}");
}

/// The threads of process `pid`.
fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .count()
}

/// Without --ping nothing is sent and no thread is started; a run that ends before taking the
/// lock (Redis unreachable, exit 69) sends nothing either; the job does not get the URL.
#[test]
fn no_ping_without_the_option_nor_before_the_lock_and_not_for_the_job() {
    let redis = Server::start();
    let monitor = Monitor::start();
    let url = monitor.url(&ping_path());
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    let job = format!(
        "echo \"${{LOCKRUN_PING_URL-unset}}\"; touch {}; sleep 1",
        ready.display()
    );
    let mut counted = Vec::new();
    for with_ping in [false, true] {
        let _ = std::fs::remove_file(&ready);
        let mut cmd = Lockrun::on(&redis);
        if with_ping {
            cmd.env("LOCKRUN_PING_URL", &url);
        }
        cmd.args(["k", "--", "sh", "-c", &job])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        wait_for_file_of(&mut child, &ready);
        counted.push(threads(child.id()));
        let out = wait_output(child);
        assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
        assert_eq!(
            stdout_of(&out).trim(),
            "unset",
            "the job's LOCKRUN_PING_URL"
        );
        let sent = if with_ping { 2 } else { 0 };
        assert_eq!(monitor.lines().len(), sent, "with_ping: {with_ping}");
    }
    assert_eq!(
        counted[1],
        counted[0] + 1,
        "threads without and with --ping"
    );

    let down = refusing_url("");
    let mut cmd = Lockrun::bare();
    cmd.env("LOCKRUN_PING_URL", &url).args([
        "-r",
        &down.replace("http://", "redis://"),
        "k",
        "--",
        "true",
    ]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(69), "{}", stderr_of(&out));
    assert_eq!(monitor.lines().len(), 2, "nothing more");
}

/// A URL lockrun cannot ping is a usage error (64) before anything runs, and its message does
/// not echo the URL; the option's own form works like the variable.
#[test]
fn a_bad_ping_url_is_a_usage_error_that_does_not_echo_it() {
    let redis = Server::start();
    for bad in [
        format!("hc-ping.com/{SECRET}"),
        format!("ftp://hc-ping.com/{SECRET}"),
    ] {
        for via_env in [true, false] {
            let mut cmd = Lockrun::on(&redis);
            if via_env {
                cmd.env("LOCKRUN_PING_URL", &bad);
            } else {
                cmd.args(["--ping", &bad]);
            }
            cmd.args(["k", "--", "true"]);
            let out = run(cmd);
            let stderr = stderr_of(&out);
            assert_eq!(out.status.code(), Some(64), "{bad}: {stderr}");
            assert_eq!(stderr.lines().count(), 1, "{stderr}");
            assert!(stderr.contains("--ping"), "{stderr}");
            assert_no_secret(&stderr);
            assert!(!redis.exists("k"));
        }
    }
    let monitor = Monitor::start();
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["--ping", &monitor.url(&ping_path()), "k", "--", "true"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(monitor.lines().len(), 2);
}

/// `--ping-file`: the URL from a file (a trailing newline dropped), for a crontab line that
/// cannot set a variable; not with --ping; an empty file or a bad URL in it is exit 64 without
/// the URL.
#[test]
fn the_ping_url_read_from_a_file() {
    let redis = Server::start();
    let monitor = Monitor::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("report.ping");
    std::fs::write(&file, format!("{}\n", monitor.url(&ping_path()))).unwrap();
    let file = file.to_str().unwrap();
    let out = run({
        let mut cmd = Lockrun::on(&redis);
        cmd.args(["--ping-file", file, "k", "--", "true"]);
        cmd
    });
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let base = format!("/{}", ping_path());
    assert_eq!(
        monitor.lines(),
        [format!("GET {base}/start"), format!("GET {base}")]
    );

    let bad = dir.path().join("bad.ping");
    std::fs::write(&bad, format!("ftp://hc-ping.com/{SECRET}\n")).unwrap();
    let empty = dir.path().join("empty.ping");
    std::fs::write(&empty, "\n").unwrap();
    let url = monitor.url(&ping_path());
    for args in [
        vec!["--ping-file", file, "--ping", &url],
        vec!["--ping-file", bad.to_str().unwrap()],
        vec!["--ping-file", empty.to_str().unwrap()],
        vec!["--ping-file", "/nonexistent/ping"],
    ] {
        let mut cmd = Lockrun::on(&redis);
        cmd.args(&args).args(["k", "--", "true"]);
        let out = run(cmd);
        let stderr = stderr_of(&out);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert_no_secret(&stderr);
    }
    assert_eq!(monitor.lines().len(), 2, "nothing sent by the refused runs");
}

/// A `--ping-file` that is a FIFO nobody writes to is refused at once (exit 64, one line that
/// names the file), rather than blocking lockrun in open(2) for good, where SIGTERM would not
/// end it; a pipe that does carry the URL (`--ping-file <(…)`) works. The password files'
/// reader, one for both.
#[test]
fn a_ping_file_that_is_a_fifo_nobody_writes_to_is_refused_at_once() {
    let redis = Server::start();
    let monitor = Monitor::start();
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("report.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let mut cmd = Lockrun::on(&redis);
    cmd.arg("--ping-file")
        .arg(&fifo)
        .args(["k", "--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    if wait_timeout(&mut child, Duration::from_secs(10)).is_none() {
        // Blocked: SIGTERM must end it at least.
        kill(child.id(), libc::SIGTERM);
        let ended = wait_timeout(&mut child, Duration::from_secs(2)).is_some();
        let _ = child.kill();
        let _ = child.wait();
        panic!("lockrun still running 10 s after start with a FIFO as --ping-file (SIGTERM ended it: {ended})");
    }
    let out = wait_output(child);
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("report.fifo"), "{stderr}");
    assert!(!redis.exists("k"));

    // Process substitution: bash hands lockrun /dev/fd/N, a pipe with a writer.
    let mut cmd = Command::new("bash");
    cmd.args([
        "-c",
        r#"exec "$0" -r "$1" --ping-file <(printf '%s\n' "$2") k -- true"#,
    ])
    .arg(lockrun_bin())
    .arg(redis.url())
    .arg(monitor.url(&ping_path()));
    from_a_clean_caller(&mut cmd);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(monitor.lines().len(), 2, "{}", stderr_of(&out));
}

/// A URL whose host is missing, or whose secret would become the host, is a usage error (64)
/// that does not echo it, and nothing is sent or looked up: `https://$HC_HOST/<uuid>` with
/// HC_HOST unset (`https:///<uuid>`), `http:<uuid>`, a base URL glued to the uuid without a
/// `/`, and a `--ping-file` holding two URLs. Every form of a legitimate host still works.
#[test]
fn a_ping_url_whose_secret_would_be_the_host_is_refused() {
    let redis = Server::start();
    let monitor = Monitor::start();
    let dir = tempfile::tempdir().unwrap();
    let url = monitor.url(&ping_path());
    let two = dir.path().join("two.ping");
    std::fs::write(&two, format!("{url}\n{url}\n")).unwrap();
    let refused: Vec<(&str, String)> = vec![
        ("--ping", format!("https:///{SECRET}")),
        ("--ping", format!("http:///{SECRET}")),
        ("--ping", format!("http:{SECRET}")),
        ("--ping", format!("https:/{SECRET}")),
        ("--ping", format!("https:\\\\{SECRET}")),
        ("--ping", format!("https://hc-ping.com{SECRET}")),
        ("--ping", format!("https://hc-ping.com{SECRET}/start")),
        ("--ping-file", two.display().to_string()),
    ];
    for (option, value) in &refused {
        let mut cmd = Lockrun::on(&redis);
        cmd.args([option, value.as_str(), "k", "--", "true"]);
        let out = run(cmd);
        let stderr = stderr_of(&out);
        assert_eq!(out.status.code(), Some(64), "{option} {value}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains("--ping"), "{stderr}");
        assert_no_secret(&stderr);
        assert!(!redis.exists("k"), "{option} {value}");
    }
    assert!(monitor.lines().is_empty(), "{:?}", monitor.lines());

    // An address, and a single-label name that is looked up (localhost), with a query.
    let port = url.split(':').nth(2).unwrap().split('/').next().unwrap();
    for good in [
        url.clone(),
        format!("http://localhost:{port}/{}", ping_path()),
        format!("http://localhost:{port}/{}?create=1", ping_path()),
    ] {
        let mut cmd = Lockrun::on(&redis);
        cmd.args(["--ping", &good, "k", "--", "true"]);
        let out = run(cmd);
        assert_eq!(out.status.code(), Some(0), "{good}: {}", stderr_of(&out));
        assert!(
            ping_warnings(&stderr_of(&out)).is_empty(),
            "{good}: {}",
            stderr_of(&out)
        );
    }
    assert_eq!(monitor.lines().len(), 6, "{:?}", monitor.lines());
}

/// The job gets neither LOCKRUN_PING_URL nor LOCKRUN_PING_FILE: a lockrun inside it (another
/// key, a wrapper) does not report to the same check, which gets one /start and one end.
#[test]
fn a_lockrun_inside_the_job_does_not_ping_the_same_check() {
    let redis = Server::start();
    let monitor = Monitor::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("report.ping");
    std::fs::write(&file, format!("{}\n", monitor.url(&ping_path()))).unwrap();
    let base = format!("/{}", ping_path());
    let inner = r#"echo "${LOCKRUN_PING_URL-unset} ${LOCKRUN_PING_FILE-unset}"; exec "$0" -r "$1" inner -- sh -c 'exit 3'"#;
    for (name, value) in [
        ("LOCKRUN_PING_FILE", file.display().to_string()),
        ("LOCKRUN_PING_URL", monitor.url(&ping_path())),
    ] {
        let before = monitor.lines().len();
        let mut cmd = Lockrun::on(&redis);
        cmd.env(name, &value)
            .args(["outer", "--", "sh", "-c", inner])
            .arg(lockrun_bin())
            .arg(redis.url());
        let out = run(cmd);
        let stderr = stderr_of(&out);
        assert_eq!(out.status.code(), Some(3), "{name}: {stderr}");
        assert_eq!(
            stdout_of(&out).trim(),
            "unset unset",
            "{name}: the job's variables"
        );
        assert_eq!(
            monitor.lines()[before..],
            [format!("GET {base}/start"), format!("GET {base}/3")],
            "{name}: {stderr}"
        );
    }
}

/// Each run sends a run id (healthchecks.io's `rid`, a UUID v4) on its /start and on its end
/// ping, the same on both and another for the next run, so that a monitor pairs each start
/// with its end when runs overlap (--shared, --limit, standby hand-ons); a query of the URL's
/// own is kept.
#[test]
fn each_run_pairs_its_start_and_end_by_a_run_id() {
    let redis = Server::start();
    let monitor = Monitor::start();
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let started = dir.path().join("started");
    // Two overlapping runs of one --limit 2 key: start, start, end, end.
    let job = format!(
        "touch {}.$$; while [ ! -e {} ]; do sleep 0.05; done",
        started.display(),
        go.display()
    );
    let url = format!("{}?create=1", monitor.url(&ping_path()));
    let children: Vec<_> = (0..2)
        .map(|_| {
            let mut cmd = Lockrun::on(&redis);
            cmd.env("LOCKRUN_PING_URL", &url)
                .args(["--limit", "2", "k", "--", "sh", "-c", &job])
                .stdout(Stdio::null())
                .stderr(Stdio::piped());
            cmd.spawn().unwrap()
        })
        .collect();
    eventually("both /start pings", || monitor.requests().len() == 2);
    std::fs::write(&go, "").unwrap();
    for child in children {
        let out = wait_output(child);
        assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    }
    let requests = monitor.requests();
    assert_eq!(requests.len(), 4, "{:?}", monitor.lines());
    let base = format!("/{}", ping_path());
    let rids: Vec<&str> = requests
        .iter()
        .map(|r| r.rid().unwrap_or_else(|| panic!("no rid: {}", r.path)))
        .collect();
    for (r, rid) in requests.iter().zip(&rids) {
        let uuid = uuid::Uuid::parse_str(rid).unwrap_or_else(|e| panic!("{}: {e}", r.path));
        assert_eq!(uuid.get_version_num(), 4, "{}", r.path);
        assert!(
            [
                format!("{base}/start?create=1&rid={rid}"),
                format!("{base}?create=1&rid={rid}"),
            ]
            .contains(&r.path),
            "{}",
            r.path
        );
    }
    assert_ne!(rids[0], rids[1], "two runs, two ids");
    let mut starts = rids[..2].to_vec();
    let mut ends = rids[2..].to_vec();
    starts.sort();
    ends.sort();
    assert_eq!(starts, ends, "each end carries its start's id");
}

/// An HTTP proxy from the environment carries the pings through a CONNECT tunnel, unless
/// NO_PROXY names the host; a proxy that refuses the tunnel is the warning, with its status.
#[test]
fn pings_go_through_the_proxy_the_environment_names() {
    let redis = Server::start();
    let monitor = Monitor::start();
    let url = monitor.url(&ping_path());
    let port = url.split(':').nth(2).unwrap().split('/').next().unwrap();
    let base = format!("/{}", ping_path());
    let proxy = ConnectProxy::start(200);
    for (var, no_proxy, tunnelled) in [
        ("HTTPS_PROXY", None, true),
        ("http_proxy", None, true),
        ("ALL_PROXY", Some("localhost,127.0.0.1"), false),
    ] {
        let before = (monitor.lines().len(), proxy.lines().len());
        let mut cmd = Lockrun::on(&redis);
        cmd.env("LOCKRUN_PING_URL", &url)
            .env(var, proxy.url())
            .args(["k", "--", "true"]);
        if let Some(hosts) = no_proxy {
            cmd.env("NO_PROXY", hosts);
        }
        let out = run(cmd);
        let stderr = stderr_of(&out);
        assert_eq!(out.status.code(), Some(0), "{var}: {stderr}");
        assert!(ping_warnings(&stderr).is_empty(), "{var}: {stderr}");
        assert_eq!(
            monitor.lines()[before.0..],
            [format!("GET {base}/start"), format!("GET {base}")],
            "{var}"
        );
        let connects = match tunnelled {
            true => vec![format!("CONNECT 127.0.0.1:{port} HTTP/1.1"); 2],
            false => vec![],
        };
        assert_eq!(proxy.lines()[before.1..], connects, "{var}");
    }

    let refusing = ConnectProxy::start(403);
    let mut cmd = Lockrun::on(&redis);
    cmd.env("LOCKRUN_PING_URL", &url)
        .env("HTTPS_PROXY", refusing.url())
        .args(["k", "--", "true"]);
    let out = run(cmd);
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let warnings = ping_warnings(&stderr);
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(warnings[0].contains("proxy answered HTTP 403"), "{stderr}");
    assert_no_secret(&stderr);
}

/// Where lockrun's stdout and stderr go does not matter to the pings: on /dev/full or closed,
/// the pings are sent, a failed one's warning is lost quietly, and the exit code is the job's.
#[test]
fn a_full_or_closed_stderr_changes_nothing() {
    use std::os::unix::process::CommandExt;
    let redis = Server::start();
    let monitor = Monitor::start();
    let url = monitor.url(&ping_path());
    let full = || {
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap()
    };
    for closed in [false, true] {
        for refused in [false, true] {
            let before = monitor.requests().len();
            let target = if refused {
                refusing_url(&ping_path())
            } else {
                url.clone()
            };
            let mut cmd = Lockrun::on(&redis);
            cmd.env("LOCKRUN_PING_URL", &target)
                .args(["k", "--", "sh", "-c", "exit 5"])
                .stdout(full())
                .stderr(full());
            if closed {
                // SAFETY: only close(2), async-signal-safe, between fork and exec.
                unsafe {
                    cmd.pre_exec(|| {
                        libc::close(1);
                        libc::close(2);
                        Ok(())
                    });
                }
            }
            let started = Instant::now();
            let out = run(cmd);
            let what = format!("closed: {closed}, refused: {refused}");
            assert_eq!(out.status.code(), Some(5), "{what}");
            assert!(started.elapsed() < Duration::from_secs(7), "{what}");
            let sent = if refused { 0 } else { 2 };
            assert_eq!(monitor.requests().len() - before, sent, "{what}");
            assert!(!redis.exists("k"), "{what}");
        }
    }
}

/// An https monitor: Python's http.server behind its ssl module (OpenSSL), with the test CA's
/// certificate for 127.0.0.1; prints its port, then each request's path as it comes.
const HTTPS_MONITOR: &str = r#"
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        print(self.path, flush=True)
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers()
        self.wfile.write(b"OK")
    def log_message(self, *a): pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1] + "/server.crt", sys.argv[1] + "/server.key")
server.socket = ctx.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

/// https pings go through lockrun's rustls with the system's trust store, here SSL_CERT_FILE
/// naming the test CA (as for rediss://): delivered. Without it the monitor's certificate is
/// not trusted: one warning that says TLS, nothing delivered, the exit code unchanged.
#[test]
fn https_pings_verify_the_monitor_against_the_trust_store() {
    use std::io::BufRead;
    let redis = Server::start();
    let certs = crate::support::server::certificates();
    let mut monitor = Killed(
        std::process::Command::new("python3")
            .args(["-c", HTTPS_MONITOR])
            .arg(certs.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 for the https monitor"),
    );
    let mut lines = std::io::BufReader::new(monitor.0.stdout.take().unwrap()).lines();
    let port = lines.next().unwrap().unwrap();
    // A name, not an address: the lookup is part of what is tested.
    let url = format!("https://localhost:{port}/{}", ping_path());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let ca = certs.path().join("ca.crt");
    for trusted in [true, false] {
        let mut cmd = Lockrun::on(&redis);
        cmd.env("LOCKRUN_PING_URL", &url)
            .args(["k", "--", "sh", "-c", "exit 2"]);
        if trusted {
            cmd.env("SSL_CERT_FILE", &ca);
        } else {
            // An empty store: no system CA signs the test's certificate anyway.
            cmd.env("SSL_CERT_FILE", "/dev/null");
        }
        let out = run(cmd);
        let stderr = stderr_of(&out);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert_no_secret(&stderr);
        let got: Vec<String> = rx.try_iter().map(|p| without_rid(&p)).collect();
        let base = format!("/{}", ping_path());
        if trusted {
            assert_eq!(
                got,
                [format!("{base}/start"), format!("{base}/2")],
                "{stderr}"
            );
            assert!(ping_warnings(&stderr).is_empty(), "{stderr}");
        } else {
            assert!(got.is_empty(), "{got:?}");
            let warnings = ping_warnings(&stderr);
            assert_eq!(warnings.len(), 1, "{stderr}");
            assert!(warnings[0].contains("TLS"), "{stderr}");
        }
    }
}

/// A child process killed when the test ends, however it ends.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
