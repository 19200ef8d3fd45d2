//! The core contract: mutual exclusion, exit codes, renewal, loss, release, bad input.

use crate::support::*;
use std::process::Stdio;
use std::thread;
use std::time::Duration;

#[test]
fn exactly_one_of_several_simultaneous_runs_the_command() {
    let redis = Server::start();
    let marker = redis.dir.path().join("ran");
    let children: Vec<_> = (0..5)
        .map(|_| {
            let mut cmd = Lockrun::on(&redis);
            cmd.args(["nightly-report", "--", "sh", "-c"])
                .arg(format!("echo ran >> '{}'; sleep 2", marker.display()))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            cmd.spawn().unwrap()
        })
        .collect();
    let outputs: Vec<_> = children.into_iter().map(wait_output).collect();
    assert_eq!(lines(&marker).len(), 1, "exactly one instance ran the job");
    let winners: Vec<_> = outputs
        .iter()
        .filter(|o| o.status.code() == Some(0))
        .collect();
    assert_eq!(winners.len(), 1);
    assert!(stderr_of(winners[0]).contains("redis lock acquired, starting job"));
    assert!(stderr_of(winners[0]).contains("redis lock released"));
    let losers: Vec<_> = outputs
        .iter()
        .filter(|o| o.status.code() == Some(75))
        .collect();
    assert_eq!(losers.len(), 4, "the others exit 75");
    for o in losers {
        assert!(
            stderr_of(o).contains("redis lock already acquired"),
            "{}",
            stderr_of(o)
        );
    }
    assert!(
        !redis.exists("nightly-report"),
        "the key is gone after the run"
    );
}

#[test]
fn exit_codes_pass_through() {
    let redis = Server::start();
    for (script, code) in [
        ("exit 0", 0),
        ("exit 42", 42),
        ("kill -KILL $$", 128 + 9),
        ("kill -TERM $$", 128 + 15),
    ] {
        let mut cmd = Lockrun::on(&redis);
        cmd.args(["k", "--", "sh", "-c", script]);
        let out = run(cmd);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{script}: {}",
            stderr_of(&out)
        );
        assert!(!redis.exists("k"), "released after {script}");
    }
}

#[test]
fn stdout_belongs_to_the_command() {
    let redis = Server::start();
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["k", "echo", "-n", "hello"]);
    let out = run(cmd);
    assert_eq!(stdout_of(&out), "hello");
    assert!(stderr_of(&out).contains("redis lock acquired, starting job"));
}

#[test]
fn command_not_found_or_not_executable_releases_the_lock() {
    let redis = Server::start();
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["k", "--", "definitely-not-a-command-xyz"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(127));
    assert!(stderr_of(&out).contains("command not found: definitely-not-a-command-xyz"));
    assert!(stderr_of(&out).contains("redis lock released"));
    assert!(!redis.exists("k"));

    let script = redis.dir.path().join("not-executable.sh");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    let mut cmd = Lockrun::on(&redis);
    cmd.arg("k").arg(&script);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(126), "{}", stderr_of(&out));
    assert!(!redis.exists("k"));
}

#[test]
fn environment_names_key_token_and_fence() {
    let redis = Server::start();
    let mut cmd = Lockrun::on(&redis);
    cmd.args([
        "env-key",
        "--",
        "sh",
        "-c",
        "echo $LOCKRUN_KEY $LOCKRUN_TOKEN $LOCKRUN_FENCE; redis_value=1",
    ]);
    let out = run(cmd);
    let stdout = stdout_of(&out);
    let fields: Vec<&str> = stdout.split_whitespace().collect();
    assert_eq!(fields.len(), 3, "{stdout}");
    assert_eq!(fields[0], "env-key");
    assert_eq!(fields[1].len(), 32, "128-bit token in hex");
    assert!(fields[1].chars().all(|c| c.is_ascii_hexdigit()));
    assert!(fields[2].parse::<u64>().unwrap() >= 1);
}

/// lockrun starts the command itself (clone + execvpe, not std's Command): exec must keep
/// execvp's rules. A file without `#!` runs with /bin/sh; a name with a slash is not looked up
/// in PATH; a command found later in PATH after a directory where the name is not executable
/// still runs; the variables lockrun sets replace inherited ones instead of adding duplicates.
#[test]
fn the_command_is_found_and_executed_as_execvp_would() {
    use std::os::unix::fs::PermissionsExt;
    let redis = Server::start();
    let dir = redis.dir.path();
    let plain = dir.join("plain-script");
    std::fs::write(&plain, "echo \"no shebang: $1\"\n").unwrap();
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut cmd = Lockrun::on(&redis);
    cmd.arg("k").arg("--").arg(&plain).arg("arg1");
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out), "no shebang: arg1\n");

    // PATH: a first directory holds a non-executable file of that name, a second the real one.
    let (first, second) = (dir.join("bin1"), dir.join("bin2"));
    std::fs::create_dir_all(&first).unwrap();
    std::fs::create_dir_all(&second).unwrap();
    std::fs::write(first.join("tool-xyz"), "#!/bin/sh\necho wrong\n").unwrap();
    std::fs::write(second.join("tool-xyz"), "#!/bin/sh\necho right\n").unwrap();
    std::fs::set_permissions(
        second.join("tool-xyz"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let path = format!("{}:{}:/usr/bin:/bin", first.display(), second.display());
    let mut cmd = Lockrun::on(&redis);
    cmd.env("PATH", &path).args(["k", "--", "tool-xyz"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out), "right\n");
    // Only the non-executable one: EACCES wins over "not found", as with execvp: 126.
    std::fs::remove_file(second.join("tool-xyz")).unwrap();
    let mut cmd = Lockrun::on(&redis);
    cmd.env("PATH", &path).args(["k", "--", "tool-xyz"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(126), "{}", stderr_of(&out));

    let mut cmd = Lockrun::on(&redis);
    cmd.env("LOCKRUN_FENCE", "stale")
        .env("LOCKRUN_KEY", "stale")
        .args([
            "k",
            "--",
            "sh",
            "-c",
            "env | grep -c '^LOCKRUN_FENCE='; echo $LOCKRUN_KEY $LOCKRUN_FENCE",
        ]);
    let out = run(cmd);
    let stdout = stdout_of(&out);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines.first(),
        Some(&"1"),
        "one LOCKRUN_FENCE in the environment: {stdout}"
    );
    let fields: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(fields[0], "k", "{stdout}");
    assert!(fields[1].parse::<u64>().is_ok(), "{stdout}");
    assert!(!redis.exists("k"));
}

#[test]
fn the_key_tells_an_operator_who_holds_it() {
    let redis = Server::start();
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["held", "--", "sleep", "3"])
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    wait_for_line(&mut child, "redis lock acquired");
    let value: String = redis.cmd(&["GET", "held"]);
    assert!(value.contains(&format!("pid={}", child.id())), "{value}");
    assert!(
        value.contains(" host=") && value.contains(" started="),
        "{value}"
    );
    let pttl: i64 = redis.cmd(&["PTTL", "held"]);
    assert!(pttl > 0 && pttl <= 30_000, "default TTL 30s, got {pttl}");
    kill(child.id(), libc::SIGTERM);
    wait_timeout(&mut child, PATIENCE).unwrap();
}

#[test]
fn fence_strictly_increases_across_runs() {
    let redis = Server::start();
    let mut fences = Vec::new();
    for _ in 0..4 {
        let mut cmd = Lockrun::on(&redis);
        cmd.args(["fenced", "--", "sh", "-c", "echo $LOCKRUN_FENCE"]);
        let out = run(cmd);
        fences.push(stdout_of(&out).trim().parse::<u64>().unwrap());
    }
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
    // The counter shares the key's cluster slot, and expires 40 days after the last lock.
    let ttl = redis.cmd::<i64>(&["TTL", "lockrun:fence:{fenced}"]);
    assert!(ttl > 39 * 86_400 && ttl <= 40 * 86_400, "{ttl}");
}

#[test]
fn a_command_running_three_ttls_keeps_the_lock_throughout() {
    let redis = Server::start();
    let done = redis.dir.path().join("long.done");
    let mut cmd = Lockrun::on(&redis);
    // TTL 1.5 s, renewed every 0.5 s: a renewal can be up to a second late on a loaded machine
    // before the lease would lapse.
    cmd.args(["-t", "1500ms", "long", "--", "sh", "-c"])
        .arg(format!("sleep 5; touch '{}'", done.display()))
        .stderr(Stdio::piped());
    let mut holder = cmd.spawn().unwrap();
    wait_for_line(&mut holder, "redis lock acquired");
    let value: String = redis.cmd(&["GET", "long"]);
    // Sample over three TTLs: the key must never vanish or change hands while the command
    // runs, and a rival must always be refused.
    for _ in 0..9 {
        thread::sleep(Duration::from_millis(500));
        let now: Option<String> = redis.cmd(&["GET", "long"]);
        if now.is_none() {
            // Released: only allowed after the command finished (release follows its exit).
            assert!(done.exists(), "the lock vanished while the command ran");
            break;
        }
        assert_eq!(now.as_deref(), Some(value.as_str()));
        let mut rival = Lockrun::on(&redis);
        rival.args(["long", "true"]);
        let code = run(rival).status.code();
        assert!(
            code == Some(75) || done.exists(),
            "a rival got in: {code:?}"
        );
    }
    let status = wait_timeout(&mut holder, PATIENCE).unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(done.exists());
    assert!(!redis.exists("long"));
}

#[test]
fn a_lock_taken_over_is_lost_the_command_stopped_and_the_intruder_kept() {
    let redis = Server::start();
    let mut cmd = Lockrun::on(&redis);
    cmd.args([
        "-t",
        "600ms",
        "--kill-after",
        "5s",
        "stolen",
        "--",
        "sleep",
        "60",
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut lines = wait_for_line(&mut child, "redis lock acquired");
    redis.cmd::<()>(&["SET", "stolen", "intruder", "PX", "60000"]);
    let status = wait_timeout(&mut child, PATIENCE).expect("lockrun stops after losing the lock");
    assert_eq!(status.code(), Some(76), "{}", lines.rest());
    assert_eq!(
        redis.cmd::<String>(&["GET", "stolen"]),
        "intruder",
        "never delete another's lock"
    );
}

#[test]
fn lock_lost_logs_the_phrase_and_on_lost_continue_keeps_running() {
    let redis = Server::start();
    let mut cmd = Lockrun::on(&redis);
    cmd.args([
        "-t",
        "300ms",
        "--on-lost",
        "continue",
        "cont",
        "--",
        "sh",
        "-c",
    ])
    .arg("sleep 1.5; exit 5");
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = wait_for_line(&mut child, "redis lock acquired");
    redis.cmd::<i64>(&["DEL", "cont"]);
    let lost = lines.wait_for("redis lock lost");
    assert!(lost.contains("ERROR"), "{lost}");
    let status = wait_timeout(&mut child, PATIENCE).unwrap();
    assert_eq!(status.code(), Some(5), "continue: the command's own code");
}

#[test]
fn sigterm_reaches_the_command_and_its_code_passes_through() {
    let redis = Server::start();
    let mut cmd = Lockrun::on(&redis);
    let ready = redis.dir.path().join("ready");
    cmd.args(["term", "--", "sh", "-c"]).arg(format!(
        "trap 'exit 7' TERM; touch '{}'; while :; do sleep 0.05; done",
        ready.display()
    ));
    let mut child = cmd.spawn().unwrap();
    wait_for_file_of(&mut child, &ready);
    kill(child.id(), libc::SIGTERM);
    let status = wait_timeout(&mut child, PATIENCE).unwrap();
    assert_eq!(status.code(), Some(7));
    assert!(!redis.exists("term"));
}

#[test]
fn sigkill_of_lockrun_leaves_a_key_that_expires_by_its_ttl() {
    let redis = Server::start();
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["-t", "1s", "orphan", "--", "sleep", "30"])
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    wait_for_line(&mut child, "redis lock acquired");
    kill(child.id(), libc::SIGKILL);
    wait_timeout(&mut child, PATIENCE).unwrap();
    let pttl: i64 = redis.cmd(&["PTTL", "orphan"]);
    assert!(pttl > 0 && pttl <= 1000, "still held, expiring: {pttl}");
    eventually("the key to expire", || !redis.exists("orphan"));
}

#[test]
fn min_hold_keeps_the_key_after_a_short_command() {
    let redis = Server::start();
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["--min-hold", "20s", "tick", "true"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0));
    assert!(stderr_of(&out).contains("redis lock released"));
    let pttl: i64 = redis.cmd(&["PTTL", "tick"]);
    assert!(
        pttl > 10_000 && pttl <= 20_000,
        "kept for the rest of --min-hold: {pttl}"
    );
    let mut rival = Lockrun::on(&redis);
    rival.args(["tick", "true"]);
    assert_eq!(
        run(rival).status.code(),
        Some(75),
        "the same tick does not run twice"
    );

    // A command that outlives --min-hold is released normally.
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["--min-hold", "100ms", "tock", "sleep", "0.3"]);
    assert_eq!(run(cmd).status.code(), Some(0));
    assert!(!redis.exists("tock"));
}

#[test]
fn conflict_exit_code_and_quiet() {
    let redis = Server::start();
    redis.cmd::<()>(&["SET", "busy", "someone-else", "PX", "60000"]);
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["-q", "-E", "0", "busy", "true"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stderr_of(&out), "", "-q -E 0 is fully silent on conflict");
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["-E", "1", "busy", "true"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr_of(&out).contains("someone-else"), "names the holder");
    assert_eq!(redis.cmd::<String>(&["GET", "busy"]), "someone-else");
}

#[test]
fn json_logs_are_one_object_per_line() {
    let redis = Server::start();
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["--log-format", "json", "j", "true"]);
    let out = run(cmd);
    let err = stderr_of(&out);
    assert!(err.lines().count() >= 2);
    for line in err.lines() {
        assert!(line.starts_with('{') && line.ends_with('}'), "{line}");
        assert!(line.contains("\"message\":"), "{line}");
    }
    assert!(err.contains("\"message\":\"redis lock acquired, starting job\""));
}

#[test]
fn options_read_the_environment() {
    let redis = Server::start();
    redis.cmd::<()>(&["SET", "envkey", "x", "PX", "60000"]);
    let mut cmd = Lockrun::bare();
    cmd.env("LOCKRUN_REDIS_URL", redis.url())
        .env("LOCKRUN_CONFLICT_EXIT_CODE", "9")
        .env("LOCKRUN_LOG_FORMAT", "json")
        .args(["envkey", "true"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(9));
    assert!(stderr_of(&out).starts_with('{'));
}

/// Each bad input: the documented code, one line on stderr, no panic.
fn assert_usage_error(args: &[&str], code: i32, needle: &str) {
    let mut cmd = Lockrun::bare();
    cmd.args(args);
    let out = run(cmd);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "{args:?}: one line, got {err:?}"
    );
    assert!(
        err.contains(needle),
        "{args:?}: {err:?} should mention {needle:?}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn bad_input_gets_one_line_and_exit_64() {
    let url = "redis://127.0.0.1:1";
    assert_usage_error(&["-r", url, "", "true"], 64, "key must not be empty");
    assert_usage_error(&["-r", url, "k"], 64, "<COMMAND>");
    assert_usage_error(&["-r", url], 64, "<KEY>");
    for ttl in ["0", "-5", "abc", "10x", "50ms", "400d"] {
        assert_usage_error(&["-r", url, "--ttl", ttl, "k", "true"], 64, "--ttl");
    }
    assert_usage_error(&["-r", url, "-E", "300", "k", "true"], 64, "300");
    assert_usage_error(&["-r", url, "--bogus", "k", "true"], 64, "--bogus");
    assert_usage_error(
        &["-r", "http://:pw@host", "k", "true"],
        64,
        "invalid Redis URL",
    );
    assert_usage_error(&["-r", "not a url", "k", "true"], 64, "invalid Redis URL");
    assert_usage_error(
        &["-r", "redis://:pw@h:99999", "k", "true"],
        64,
        "invalid Redis URL",
    );
    assert_usage_error(&["--wait", "soon", "k", "true"], 64, "--wait");
}

#[test]
fn help_and_version_exit_zero() {
    for flag in ["--help", "--version"] {
        let mut cmd = Lockrun::bare();
        cmd.arg(flag);
        let out = run(cmd);
        assert_eq!(out.status.code(), Some(0));
        assert!(!out.stdout.is_empty());
    }
}

#[test]
fn unreachable_redis_exits_69_quickly() {
    let mut cmd = Lockrun::bare();
    cmd.args([
        "-r",
        &format!("redis://127.0.0.1:{}", free_port()),
        "k",
        "true",
    ]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(69), "{}", stderr_of(&out));
    assert_eq!(stderr_of(&out).trim_end().lines().count(), 1);
}

#[test]
fn a_server_that_never_answers_times_out_well_below_the_ttl() {
    // Accepts connections and never replies: without our own timeouts this would hang for
    // the OS's TCP defaults. Bounded by PATIENCE in `run`; the real bound is TTL/3.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let _keep = thread::spawn(move || {
        let mut held = Vec::new();
        for s in listener.incoming().take(4).flatten() {
            held.push(s);
        }
        thread::sleep(PATIENCE);
    });
    let mut cmd = Lockrun::bare();
    cmd.args([
        "-r",
        &format!("redis://127.0.0.1:{port}"),
        "-t",
        "1s",
        "k",
        "true",
    ]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(69), "{}", stderr_of(&out));
}

#[test]
fn wrong_password_exits_69_and_never_prints_it() {
    let redis = Server::start_with_password("correct-horse");
    let port = redis.port();
    let mut cmd = Lockrun::bare();
    cmd.args([
        "-r",
        &format!("redis://:wrong-battery@127.0.0.1:{port}"),
        "-v",
        "k",
        "true",
    ]);
    let out = run(cmd);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert!(!err.contains("wrong-battery"), "password leaked: {err}");
    assert!(err.contains("***"), "{err}");

    // And the right one works, over TCP with a password, without printing it either.
    let mut cmd = Lockrun::bare();
    cmd.args(["-r", &redis.url(), "-vv", "k", "true"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert!(!stderr_of(&out).contains("correct-horse"));
}

#[test]
fn a_closed_stderr_does_not_stop_lockrun_from_releasing() {
    // cron's mailer or a log collector going away must not turn into a panic that leaves the
    // key behind.
    let redis = Server::start();
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["closed", "--", "sleep", "0.5"])
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let lines = wait_for_line(&mut child, "redis lock acquired");
    drop(lines); // closes our end of lockrun's stderr
    let status = wait_timeout(&mut child, PATIENCE).unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(!redis.exists("closed"));
}

#[test]
fn rediss_urls_speak_tls_and_check_the_certificate() {
    let redis = Server::start_tls();
    let ca = redis.dir.path().join("ca.crt");
    // Trusting the test CA (rustls reads SSL_CERT_FILE like OpenSSL does): it works.
    let mut cmd = Lockrun::on(&redis);
    cmd.env("SSL_CERT_FILE", &ca)
        .args(["tls-key", "--", "sh", "-c", "echo $LOCKRUN_FENCE"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let fence: u64 = stdout_of(&out).trim().parse().unwrap();
    assert!(fence > 0, "{fence}");
    assert!(!redis.exists("tls-key"));
    // Without it the certificate is refused: Redis unavailable, nothing run.
    let mut cmd = Lockrun::on(&redis);
    cmd.env("SSL_CERT_FILE", redis.dir.path().join("server.key"))
        .args(["tls-key", "--", "echo", "ran"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(69), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out), "");
}

#[test]
fn tls_insecure_skips_verification_loudly_and_only_on_tls() {
    let redis = Server::start_tls();
    // A trust store without the test CA: refused unless verification is turned off.
    let untrusted = redis.dir.path().join("server.key");
    let mut cmd = Lockrun::on(&redis);
    cmd.env("SSL_CERT_FILE", &untrusted).args([
        "--tls-insecure",
        "insecure-key",
        "--",
        "echo",
        "ran",
    ]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out), "ran\n");
    assert!(
        stderr_of(&out).contains("WARN --tls-insecure: the server's certificate is not verified"),
        "{}",
        stderr_of(&out)
    );
    // The environment variable, as a switch.
    let mut cmd = Lockrun::on(&redis);
    cmd.env("SSL_CERT_FILE", &untrusted)
        .env("LOCKRUN_TLS_INSECURE", "yes")
        .args(["insecure-key", "--", "true"]);
    assert_eq!(run(cmd).status.code(), Some(0));
    // Without TLS there is nothing to be insecure about: a usage error, not a silent no-op.
    let mut cmd = Lockrun::bare();
    cmd.args(["-r", "redis://127.0.0.1:1", "--tls-insecure", "k", "true"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(64), "{}", stderr_of(&out));
    assert!(stderr_of(&out).contains("--tls-insecure (LOCKRUN_TLS_INSECURE) needs a TLS URL"));
}

#[test]
fn scripts_go_by_sha_once_the_server_has_them() {
    let redis = Server::start();
    let calls = || (redis.calls("evalsha"), redis.calls("eval"));
    let once = || {
        let mut cmd = Lockrun::on(&redis);
        cmd.args(["sha", "true"]);
        assert_eq!(run(cmd).status.code(), Some(0));
    };
    // A new server: the first EVALSHA is answered NOSCRIPT (the script did not run), then
    // this lockrun sends its scripts whole, and the server keeps them.
    once();
    assert_eq!(
        calls(),
        (1, 2),
        "NOSCRIPT once, then EVAL for acquire and release"
    );
    // From then on: two requests per run, by SHA.
    once();
    once();
    assert_eq!(calls(), (5, 2));
    // The server forgot them (SCRIPT FLUSH, like a restart): one more NOSCRIPT, and it works.
    let _: () = redis.cmd(&["SCRIPT", "FLUSH"]);
    once();
    assert_eq!(calls(), (6, 4));
    assert!(!redis.exists("sha"));
}

/// A holder whose server forgets the scripts mid-run (SCRIPT FLUSH, as a restart or a failover
/// to a replica does) sends each script whole once, which loads it there again, and then goes
/// back to SHA-1: a long run's renewals do not carry the whole text for the rest of its life.
#[test]
fn a_holder_goes_back_to_sha_once_a_forgotten_script_is_loaded_again() {
    let redis = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let calls = || (redis.calls("evalsha"), redis.calls("eval"));
    // TTL 600 ms: a renewal every 200 ms.
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["-t", "600ms", "renewed", "--", "sleep", "3"]);
    let mut holder = cmd.background(dir.path(), "holder");
    holder.until("the lock taken", || redis.exists("renewed"));
    // A few renewals first (the first of them met NOSCRIPT on this new server, and loaded
    // the renewal script there).
    thread::sleep(Duration::from_millis(700));
    let _: () = redis.cmd(&["SCRIPT", "FLUSH"]);
    let (sha, eval) = calls();
    let (code, _, err) = holder.finish();
    assert_eq!(code, Some(0), "{err}");
    let (sha_after, eval_after) = calls();
    // The next renewal: EVALSHA answered NOSCRIPT, then EVAL; the release (forgotten too):
    // EVAL; every later renewal by SHA-1 again.
    assert_eq!(
        eval_after - eval,
        2,
        "sent whole: the renewal that met NOSCRIPT and the release, nothing more"
    );
    assert!(
        sha_after - sha >= 5,
        "the renewals after it go by SHA-1: {} EVALSHA",
        sha_after - sha
    );
    assert!(!redis.exists("renewed"));
}
