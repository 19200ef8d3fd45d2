//! Odd usage: forgiving configuration, messages that say what is wrong, log lines that stay
//! one line, and the command's signal dispositions.

use crate::support::*;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// A failing run's stderr: the documented code, one line, mentioning `needle`.
fn assert_one_line(cmd: Lockrun, code: i32, needle: &str) -> String {
    let out = run(cmd);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(code), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
    assert!(err.contains(needle), "{err:?} should mention {needle:?}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

/// Every error line has one shape, whatever stage found it: what clap refuses, what resolving
/// the options refuses, what the server does. `grep -E '^[^ ]+ ERROR '` (text) or
/// `"level":"ERROR"` (JSON) catches them all.
#[test]
fn every_error_line_matches_one_grep() {
    let unreachable = format!("redis://127.0.0.1:{}", free_port());
    for (args, code) in [
        (vec!["-t", "0", "k", "true"], 64),
        (
            vec!["-r", "redis://a:1", "-r", "redis://b:1", "k", "true"],
            64,
        ),
        (vec!["-r", &unreachable, "k", "true"], 69),
        (vec!["-r", &unreachable, "status", "k"], 69),
    ] {
        for json in [false, true] {
            let mut cmd = Lockrun::bare();
            if json {
                cmd.args(["--log-format", "json"]);
            }
            cmd.args(&args);
            let err = assert_one_line(cmd, code, "");
            let line = err.trim_end();
            if json {
                assert!(line.contains(r#""level":"ERROR""#), "{args:?}: {line}");
            } else {
                let (stamp, rest) = line.split_once(' ').unwrap_or_default();
                assert!(
                    !stamp.is_empty() && rest.starts_with("ERROR "),
                    "{args:?}: {line}"
                );
            }
        }
    }
}

#[test]
fn negative_numbers_are_out_of_range_not_unknown_flags() {
    for (args, needle) in [
        (&["-E", "-1"][..], "out of range: an exit code is 0 to 255"),
        (&["--conflict-exit-code=-1"], "out of range"),
        (&["--limit", "-1"], "out of range: --limit is 1 to 100000"),
        (&["-l", "0"], "out of range"),
    ] {
        let mut cmd = Lockrun::bare();
        cmd.args(["-r", "redis://127.0.0.1:1"])
            .args(args)
            .args(["k", "true"]);
        assert_one_line(cmd, 64, needle);
    }
}

#[test]
fn switches_in_the_environment_take_the_usual_spellings() {
    let redis = Server::start();
    for value in ["1", "yes", "on", "TRUE", "0", "no", "off", "false", ""] {
        let mut cmd = Lockrun::on(&redis);
        cmd.env("LOCKRUN_NO_GROUP", value)
            .env("LOCKRUN_SUBREAPER", value)
            .args(["switch", "true"]);
        let out = run(cmd);
        assert_eq!(out.status.code(), Some(0), "{value:?}: {}", stderr_of(&out));
    }
    // A value that is not a switch names the variable, not the flag only.
    let mut cmd = Lockrun::on(&redis);
    cmd.env("LOCKRUN_NO_GROUP", "maybe")
        .args(["switch", "true"]);
    assert_one_line(cmd, 64, "from the environment variable LOCKRUN_NO_GROUP");
    // The same for any option's variable.
    let mut cmd = Lockrun::on(&redis);
    cmd.env("LOCKRUN_TTL", "soon").args(["switch", "true"]);
    assert_one_line(cmd, 64, "from the environment variable LOCKRUN_TTL");
    // A flag on the command line wins, so an invalid variable does not matter then.
    let mut cmd = Lockrun::on(&redis);
    cmd.env("LOCKRUN_TTL", "soon")
        .args(["-t", "5s", "switch", "true"]);
    assert_eq!(run(cmd).status.code(), Some(0));
    // `run` names the variable too.
    let mut cmd = Lockrun::on(&redis);
    cmd.env("LOCKRUN_EVERY", "1s")
        .args(["run", "switch", "true"]);
    assert_one_line(cmd, 64, "from the environment variable LOCKRUN_EVERY");
}

/// A Redis URL lockrun refuses names `LOCKRUN_REDIS_URL` when it came from there, as every
/// other variable's bad value does, for the run form and the operators' commands; the same URL
/// given with `-r` does not. redis-rs's own name for the error (`InvalidClientConfig`) never
/// shows, nor a password.
#[test]
fn a_bad_url_in_the_environment_names_the_variable() {
    let var = "from the environment variable LOCKRUN_REDIS_URL";
    for url in [
        " redis://127.0.0.1:6379",
        ":abc",
        "redis://:hunter2@127.0.0.1:abc",
        "http://127.0.0.1:6379",
        "redis://127.0.0.1:1,redis://127.0.0.1:2",
        "redis://:hunter2@127.0.0.1:6379/?protocol=resp9",
        "/run/redis/redis.sock",
        "redis://:hunter2@127.0.0.1:6379/queue/3",
        "redis://u:hunter2@127.0.0.1:99999",
        "unix:///run/redis.sock?db=two&pass=hunter2",
        "redis+sentinel://:hunter2@s1:26379,s1:26379/mymaster",
        "redis+cluster://:hunter2@c1:99999",
        "redis://a:1,redis://A:1,redis://b:1",
    ] {
        for form in [&["k", "true"][..], &["status", "k"], &["run", "k", "true"]] {
            let mut cmd = Lockrun::bare();
            cmd.env("LOCKRUN_REDIS_URL", url).args(form);
            let err = assert_one_line(cmd, 64, var);
            assert!(
                !err.contains("InvalidClientConfig") && !err.contains("hunter2"),
                "{url:?} {form:?}: {err}"
            );
            let mut cmd = Lockrun::bare();
            cmd.arg("-r").arg(url).args(form);
            let err = assert_one_line(cmd, 64, "");
            assert!(
                !err.contains("LOCKRUN_REDIS_URL")
                    && !err.contains("InvalidClientConfig")
                    && !err.contains("hunter2"),
                "{url:?} -r {form:?}: {err}"
            );
        }
    }
    // `-r` wins over the variable, as every flag does: a bad variable is then not read.
    let redis = Server::start();
    let mut cmd = Lockrun::on(&redis);
    cmd.env("LOCKRUN_REDIS_URL", ":abc").args(["k", "true"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
}

/// The run form's variables are not an operators' command's: an environment set up for runs
/// (a unit, a manifest), even with a value a run refuses, does not make `status` exit 64.
#[test]
fn an_operators_command_ignores_the_runs_variables() {
    let redis = Server::start();
    let mut cmd = Lockrun::on(&redis);
    cmd.env("LOCKRUN_EVERY", "1s")
        .env("LOCKRUN_TTL", "soon")
        .args(["status", "free-key"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));
    assert!(stdout_of(&out).contains("free"), "{}", stdout_of(&out));
    // Its own variables still name themselves.
    let mut cmd = Lockrun::on(&redis);
    cmd.env("LOCKRUN_LOG_FORMAT", "bogus")
        .args(["status", "free-key"]);
    assert_one_line(cmd, 64, "from the environment variable LOCKRUN_LOG_FORMAT");
}

#[test]
fn an_empty_variable_counts_as_unset() {
    let redis = Server::start();
    let mut cmd = Lockrun::on(&redis);
    for var in [
        "LOCKRUN_TTL",
        "LOCKRUN_WAIT",
        "LOCKRUN_KILL_AFTER",
        "LOCKRUN_CONFLICT_EXIT_CODE",
        "LOCKRUN_LIMIT",
        "LOCKRUN_ON_LOST",
        "LOCKRUN_LOG_FORMAT",
        "LOCKRUN_QUIET",
        "LOCKRUN_LOG",
    ] {
        cmd.env(var, "");
    }
    cmd.args(["empty", "sh", "-c", "echo $LOCKRUN_FENCE"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert!(stderr_of(&out).contains("ttl=30s"), "{}", stderr_of(&out));
}

#[test]
fn quiet_has_a_variable_too() {
    let redis = Server::start();
    let mut cmd = Lockrun::on(&redis);
    cmd.env("LOCKRUN_QUIET", "1").args(["hush", "true"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stderr_of(&out), "", "nothing but errors");
}

#[test]
fn an_unknown_log_level_is_refused_and_errors_are_always_printed() {
    // `information` is not a level: refused, not taken as a target name, which would silence
    // everything, fatal errors included (exit 69 with an empty stderr).
    let mut cmd = Lockrun::bare();
    cmd.env("LOCKRUN_LOG", "information")
        .args(["-r", "redis://127.0.0.1:1", "k", "true"]);
    assert_one_line(cmd, 64, "'information' is not a level");
    let mut cmd = Lockrun::bare();
    cmd.env("LOCKRUN_LOG", "off")
        .args(["-r", "redis://127.0.0.1:1", "k", "true"]);
    assert_one_line(cmd, 64, "use -q");
    // A filter for some other target still lets lockrun's errors through.
    let mut cmd = Lockrun::bare();
    cmd.env("LOCKRUN_LOG", "tokio=trace")
        .args(["-r", "redis://127.0.0.1:1", "k", "true"]);
    assert_one_line(cmd, 69, "unavailable");
}

#[test]
fn a_log_level_in_lockrun_log_shows_that_level() {
    // The "errors are always printed" directive is added to the level, never in its place:
    // LOCKRUN_LOG=info, =debug and =trace each print that level, not errors only.
    let redis = Server::start();
    for (level, expect, absent) in [
        ("info", "redis lock acquired", "DEBUG"),
        ("debug", "DEBUG", "TRACE"),
        ("warn,lockrun=info", "redis lock released", "DEBUG"),
        ("warn", "", "INFO"),
    ] {
        let mut cmd = Lockrun::on(&redis);
        cmd.env("LOCKRUN_LOG", level).args(["levels", "true"]);
        let out = run(cmd);
        assert_eq!(out.status.code(), Some(0), "{level}");
        let err = stderr_of(&out);
        assert!(err.contains(expect), "LOCKRUN_LOG={level}: {err}");
        assert!(!err.contains(absent), "LOCKRUN_LOG={level}: {err}");
    }
}

#[test]
fn usage_errors_are_json_when_json_was_asked_for() {
    let check = |mut cmd: Lockrun| {
        cmd.args(["-t", "0", "k", "true"]);
        let out = run(cmd);
        assert_eq!(out.status.code(), Some(64));
        let err = stderr_of(&out);
        let v: serde_json::Value = serde_json::from_str(err.trim_end())
            .unwrap_or_else(|e| panic!("not one JSON object ({e}): {err:?}"));
        assert_eq!(v["level"], "ERROR");
        assert!(v["message"]
            .as_str()
            .unwrap()
            .contains("TTL must be between"));
    };
    let mut cmd = Lockrun::bare();
    cmd.args(["--log-format", "json"]);
    check(cmd);
    let mut cmd = Lockrun::bare();
    cmd.env("LOCKRUN_LOG_FORMAT", "json");
    check(cmd);
    // A bad LOCKRUN_LOG is reported the same way.
    let mut cmd = Lockrun::bare();
    cmd.env("LOCKRUN_LOG", "loud").args([
        "--log-format=json",
        "-r",
        "redis://127.0.0.1:1",
        "k",
        "true",
    ]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(64));
    assert!(stderr_of(&out).starts_with("{\""), "{}", stderr_of(&out));
}

#[test]
fn control_characters_in_a_key_cannot_forge_log_lines() {
    let redis = Server::start();
    let key = "evil\n2026-01-01T00:00:00Z  INFO redis lock released key=x\x1b[2J";
    redis.cmd::<()>(&["SET", key, "someone", "PX", "60000"]);
    let mut cmd = Lockrun::on(&redis);
    cmd.args([key, "true"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(75));
    let err = stderr_of(&out);
    assert_eq!(err.trim_end().lines().count(), 1, "{err:?}");
    assert!(!err.contains('\x1b'), "{err:?}");
    assert!(err.contains("evil\\n2026"), "{err:?}");
}

#[test]
fn a_script_whose_interpreter_is_missing_names_the_interpreter() {
    let redis = Server::start();
    let script = redis.dir.path().join("job.sh");
    std::fs::write(&script, "#!/nonexistent/bin/interp -x\necho hi\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut cmd = Lockrun::on(&redis);
    cmd.arg("interp").arg(&script);
    let out = run(cmd);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(127), "{err}");
    assert!(
        err.contains("its interpreter /nonexistent/bin/interp"),
        "{err}"
    );
    assert!(!redis.exists("interp"), "released");
}

#[test]
fn a_release_whose_reply_was_lost_is_not_reported_as_a_stolen_lock() {
    // Replies are dropped by a proxy from shortly before the job ends: the release is executed
    // but its reply never arrives; it times out after TTL/3 (1 s), and by then the replies flow
    // again, so the retry's answer ("not ours": the first attempt deleted it) is seen.
    use crate::support::proxy::{Fault, Proxy};
    let redis = Server::start_tcp();
    let proxy = Proxy::start(std::net::SocketAddr::from(([127, 0, 0, 1], redis.port())));
    // The server has lockrun's scripts already (as after any earlier run): a release by
    // EVALSHA is then executed at once, not answered NOSCRIPT (a lost NOSCRIPT reply is a
    // lost request, which is another test).
    let mut warm = Lockrun::bare();
    warm.arg("-r").arg(proxy.url()).args(["slowrel", "true"]);
    assert_eq!(run(warm).status.code(), Some(0));
    let mut cmd = Lockrun::bare();
    cmd.arg("-r")
        .arg(proxy.url())
        .args(["-t", "3s", "slowrel", "sleep", "0.4"]);
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().unwrap();
    eventually("the lock to be taken", || redis.exists("slowrel"));
    std::thread::sleep(std::time::Duration::from_millis(200));
    proxy.set(Fault::DropReplies);
    // The job ends at 0.4 s and the release is sent then; its timeout ends at 1.4 s.
    eventually("the release to be executed", || !redis.exists("slowrel"));
    std::thread::sleep(std::time::Duration::from_millis(300));
    proxy.set(Fault::None);
    let out = wait_output(child);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("redis lock released (the first attempt's reply was lost"),
        "{err}"
    );
    assert!(!err.contains("no longer ours at release"), "{err}");
}

/// SigIgn of the command, as lockrun started with `ignore_pipe` would give it.
fn command_sigign(redis: &Server, ignore_pipe: bool) -> u64 {
    let mut cmd = Lockrun::on(redis);
    cmd.args(["pipe", "grep", "SigIgn", "/proc/self/status"]);
    // SAFETY: only signal(2) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let action = if ignore_pipe {
                libc::SIG_IGN
            } else {
                libc::SIG_DFL
            };
            libc::signal(libc::SIGPIPE, action);
            Ok(())
        });
    }
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let field = stdout_of(&out);
    u64::from_str_radix(field.split_whitespace().nth(1).unwrap(), 16).unwrap()
}

#[test]
fn sigpipe_ignored_by_the_caller_stays_ignored_for_the_command() {
    let redis = Server::start();
    let pipe = 1u64 << (libc::SIGPIPE - 1);
    assert_eq!(
        command_sigign(&redis, true) & pipe,
        pipe,
        "inherited ignored"
    );
    assert_eq!(
        command_sigign(&redis, false) & pipe,
        0,
        "default stays default"
    );
}

#[test]
fn help_says_what_the_readme_says() {
    let mut cmd = Lockrun::bare();
    cmd.arg("--help");
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0));
    let help = stdout_of(&out);
    for needle in [
        "rediss://",
        "SSL_CERT_FILE",
        "100ms to 24h",
        "0 to 255",
        "1 to 100000",
        "at most 30d",
        "[env: LOCKRUN_TTL]",
        "[env: LOCKRUN_QUIET]",
    ] {
        assert!(help.contains(needle), "--help lacks {needle:?}:\n{help}");
    }
    // `[env: LOCKRUN_TTL=]` read as "set to empty".
    assert!(!help.contains("=]"), "{help}");
}

/// The guide's Options table (docs/guide.md) and `--help` name the same options and variables: a
/// flag added to one and forgotten in the other fails here.
#[test]
fn the_readme_options_table_lists_every_option_in_help() {
    let mut cmd = Lockrun::bare();
    cmd.arg("--help");
    let help = stdout_of(&run(cmd));
    let guide =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/guide.md")).unwrap();
    let table: String = guide
        .split("## Options")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .unwrap()
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .map(|l| format!("{l}\n"))
        .collect();
    // `--long` flags and `[env: NAME]` in help, `--long` and `LOCKRUN_*` in the table's
    // first two columns.
    let longs = |text: &str| -> std::collections::BTreeSet<String> {
        text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .filter(|w| w.starts_with("--") && w.len() > 2 && !w.ends_with('-'))
            .map(str::to_string)
            .collect()
    };
    let vars = |text: &str| -> std::collections::BTreeSet<String> {
        text.split(|c: char| !(c.is_ascii_uppercase() || c == '_'))
            .filter(|w| w.starts_with("LOCKRUN_") && w.len() > 8)
            .map(str::to_string)
            .collect()
    };
    let help_flags: String = help
        .lines()
        .filter(|l| l.trim_start().starts_with('-'))
        .map(|l| format!("{l}\n"))
        .collect();
    let mut help_longs = longs(&help_flags);
    help_longs.remove("--help");
    help_longs.remove("--version");
    let columns: String = table
        .lines()
        .map(|l| l.split(" | ").take(2).collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(
        help_longs,
        longs(&columns),
        "--help vs the guide's Options table"
    );
    let help_vars: std::collections::BTreeSet<String> = help
        .split("[env: ")
        .skip(1)
        .filter_map(|s| s.split(']').next())
        .map(str::to_string)
        .collect();
    let mut table_vars = vars(&columns);
    // Read from the environment only (no flag), documented in the table all the same.
    for env_only in [
        "LOCKRUN_REDIS_PASSWORD",
        "LOCKRUN_SENTINEL_PASSWORD",
        "LOCKRUN_LOG",
    ] {
        assert!(
            table_vars.remove(env_only),
            "{env_only} missing from the guide's Options table"
        );
    }
    assert_eq!(help_vars, table_vars, "--help vs the guide's Options table");
}

/// The exit codes have one source, `ExitCode::summary`: `--help` says its lines, the README's
/// table says the same lines, and the guide's Exit codes section gives every cause of the same
/// codes, in the same order. A code or a meaning changed in one place and not the others fails
/// here.
#[test]
fn the_readme_and_the_guide_list_the_exit_codes_help_says() {
    use ::lockrun::exit_codes::ExitCode;
    let documented: Vec<(String, String)> = ExitCode::DOCUMENTED
        .into_iter()
        .map(|c| {
            let s = c.summary();
            (s.code, s.meaning.to_string())
        })
        .collect();
    let codes = |rows: &[(String, String)]| -> Vec<String> {
        rows.iter().map(|(code, _)| code.clone()).collect()
    };

    // `--help`: a row is "  <code>  <meaning>", its meaning wrapped onto indented lines.
    let mut cmd = Lockrun::bare();
    cmd.arg("--help");
    let help = stdout_of(&run(cmd));
    let mut in_help: Vec<(String, String)> = Vec::new();
    let section = help
        .split("\nExit codes:\n")
        .nth(1)
        .expect("--help's Exit codes");
    for line in section.lines().take_while(|l| !l.is_empty()) {
        let text = line.trim_start();
        if line.len() - text.len() == 2 {
            let (code, meaning) = text.split_once("  ").expect(line);
            in_help.push((code.to_string(), meaning.trim_start().to_string()));
        } else {
            let (_, meaning) = in_help.last_mut().expect(line);
            meaning.push(' ');
            meaning.push_str(text);
        }
    }
    assert_eq!(in_help, documented, "--help vs ExitCode::summary");

    // A markdown file's `## Exit codes` section, without code spans' backticks.
    let section_of = |path: &str| -> String {
        let text = std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR")))
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        let after = text
            .split("\n## Exit codes\n")
            .nth(1)
            .unwrap_or_else(|| panic!("{path} has no Exit codes section"));
        after.split("\n## ").next().unwrap().replace('`', "")
    };

    // The README: one table row per code, the same line.
    let readme: Vec<(String, String)> = section_of("README.md")
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| code |"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split(" | ").collect();
            assert_eq!(cells.len(), 2, "{l}");
            (cells[0].trim().to_string(), cells[1].trim().to_string())
        })
        .collect();
    assert_eq!(
        readme, documented,
        "README.md's Exit codes table vs ExitCode::summary"
    );

    // The guide: one item per code, `- **<code>**: every cause`.
    let guide: Vec<String> = section_of("docs/guide.md")
        .lines()
        .filter_map(|l| l.strip_prefix("- **"))
        .map(|l| l.split("**").next().unwrap().to_string())
        .collect();
    assert_eq!(
        guide,
        codes(&documented),
        "docs/guide.md's Exit codes vs ExitCode::summary"
    );
}

#[test]
fn a_waiter_outlasts_a_redis_that_is_not_up_yet() {
    // A CI job queued with --wait while its Redis restarts: lockrun starts first, the server
    // a second later. A first subscribe that fails is retried while the wait lasts, not fatal
    // (exit 69 within milliseconds).
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("later.sock");
    let mut cmd = Lockrun::bare();
    cmd.arg("-r")
        .arg(format!("unix://{}", sock.display()))
        .args(["--wait", "15s", "later", "echo", "ran"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1000));
    let mut server = Command::new(redis_server_binary())
        .args(["--port", "0", "--save", "", "--unixsocket"])
        .arg(&sock)
        .arg("--dir")
        .arg(dir.path())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let out = wait_output(child);
    let _ = server.kill();
    let _ = server.wait();
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(stdout_of(&out), "ran\n");
    assert!(
        err.contains("Redis unavailable while waiting for the lock; retrying"),
        "{err}"
    );
}

#[test]
fn a_waiter_whose_subscription_is_killed_subscribes_again() {
    let redis = Server::start();
    redis.cmd::<()>(&["SET", "resub", "other", "PX", "4000"]);
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["--wait", "15s", "resub", "true"]);
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().unwrap();
    let pubsub = |r: &Server| -> usize {
        let list: String = r.cmd(&["CLIENT", "LIST", "TYPE", "pubsub"]);
        list.lines().count()
    };
    eventually("the waiter to subscribe", || pubsub(&redis) == 1);
    redis.cmd::<i64>(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    eventually("the subscription to be gone", || pubsub(&redis) == 0);
    eventually("the waiter to subscribe again", || pubsub(&redis) == 1);
    let out = wait_output(child);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
}

#[test]
fn a_connection_the_server_closed_costs_no_failed_renewal() {
    // The server drops clients idle for a second; renewals come every 2 s (TTL 6 s), each on a
    // connection the server has closed: one silent retry on a new connection, not a failure.
    let redis = Server::start();
    redis.cmd::<()>(&["CONFIG", "SET", "timeout", "1"]);
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["-t", "6s", "idle", "sleep", "4.5"]);
    let out = run(cmd);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("renewal failed"), "{err}");
    assert!(!err.contains("WARN"), "{err}");
    assert!(!redis.exists("idle"), "released");
}

#[test]
fn refusals_exit_69_with_what_to_fix_with_or_without_wait() {
    let redis = Server::start_with_password("right-Pw-8");
    let port = redis.port();
    redis.cmd::<()>(&[
        "ACL",
        "SETUSER",
        "noeval",
        "on",
        ">other-Pw-9",
        "~*",
        "&*",
        "+@all",
        "-eval",
    ]);
    // A listener that answers like a web server, not Redis.
    let http = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let http_port = http.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut c in http.incoming().flatten() {
            let _ = std::io::Read::read(&mut c, &mut [0u8; 512]);
            let _ = std::io::Write::write_all(&mut c, b"HTTP/1.1 400 Bad Request\r\n\r\n");
        }
    });
    for (url, needle) in [
        (
            format!("redis://127.0.0.1:{port}"),
            "authentication required",
        ),
        (
            format!("redis://:wrong-Pw@127.0.0.1:{port}"),
            "authentication failed",
        ),
        (
            format!("redis://noeval:other-Pw-9@127.0.0.1:{port}"),
            "no permissions to run the 'eval' command; grant",
        ),
        (
            format!("redis://127.0.0.1:{http_port}"),
            "does not speak the Redis protocol",
        ),
    ] {
        for wait in [&[][..], &["--wait", "20s"]] {
            let mut cmd = Lockrun::bare();
            cmd.arg("-r").arg(&url).args(wait).args(["refused", "true"]);
            let started = std::time::Instant::now();
            let err = assert_one_line(cmd, 69, needle);
            // A configuration mistake is not waited out.
            assert!(
                started.elapsed() < std::time::Duration::from_secs(10),
                "{url} {wait:?}: {err}"
            );
            assert!(!err.contains("-Pw"), "{err}");
        }
    }
}

#[test]
fn rediss_against_a_plain_text_port_says_so() {
    let redis = Server::start_tcp();
    let mut cmd = Lockrun::bare();
    cmd.arg("-r")
        .arg(format!("rediss://127.0.0.1:{}", redis.port()))
        .args(["-t", "1s", "tls-mismatch", "true"]);
    assert_one_line(cmd, 69, "is the server's port TLS-enabled?");
    assert!(!redis.exists("tls-mismatch"));
}

#[test]
fn tls_options_trust_a_private_ca_and_present_a_client_certificate() {
    let redis = Server::start_tls_mutual();
    let file = |f: &str| redis.dir.path().join(f);
    // No client certificate: the server refuses the handshake.
    let mut cmd = Lockrun::on(&redis);
    cmd.arg("--tls-ca")
        .arg(file("ca.crt"))
        .args(["-t", "1s", "mtls", "true"]);
    assert_eq!(run(cmd).status.code(), Some(69));
    // CA and client certificate by option (no SSL_CERT_FILE): the job runs.
    let mut cmd = Lockrun::on(&redis);
    cmd.arg("--tls-ca")
        .arg(file("ca.crt"))
        .arg("--tls-cert")
        .arg(file("client.crt"))
        .env("LOCKRUN_TLS_KEY", file("client.key"))
        .args(["mtls", "echo", "ran"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out), "ran\n");
    // Misuse: one line, exit 64, never a key's content.
    let key_text = std::fs::read_to_string(file("client.key")).unwrap();
    for (args, needle) in [
        (vec!["--tls-cert", "client.crt"], "go together"),
        (
            vec!["--tls-ca", "missing.pem"],
            "cannot read the --tls-ca file",
        ),
    ] {
        let mut cmd = Lockrun::on(&redis);
        cmd.current_dir(redis.dir.path())
            .args(args)
            .args(["mtls", "true"]);
        let err = assert_one_line(cmd, 64, needle);
        assert!(!err.contains(key_text.lines().nth(1).unwrap()), "{err}");
    }
    let mut cmd = Lockrun::bare();
    cmd.args([
        "-r",
        "redis://127.0.0.1:1",
        "--tls-ca",
        "x.pem",
        "k",
        "true",
    ]);
    assert_one_line(cmd, 64, "need a rediss:// URL");
}

/// The example `--help` and `-h` (and the man page) end with is the command of the README's
/// crontab recipe, with the same options: the recipe works as pasted on every cron and install
/// channel (the real-cron test installs it), and the help must not show a crontab line of its
/// own that no test runs (one without the recipe's `PATH=` prefix fails under Debian's cron).
#[test]
fn the_help_example_is_the_readmes_crontab_command() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let line = readme
        .split("```cron\n")
        .nth(1)
        .and_then(|block| block.split("```").next())
        .and_then(|block| block.lines().find(|l| l.starts_with("* * * * * ")))
        .expect("README.md has a ```cron block with a crontab line");
    // The options and their values, without the URL, the key and the job, which differ.
    let options = |cmd: &str| -> Vec<String> {
        let words: Vec<&str> = cmd.split_whitespace().collect();
        let mut out = Vec::new();
        let mut i = 0;
        while i < words.len() && words[i] != "--" {
            match words[i] {
                "-r" => i += 1,
                "-E" | "--every" => {
                    out.push(format!("{} {}", words[i], words[i + 1]));
                    i += 1;
                }
                w if w.starts_with('-') => out.push(w.to_string()),
                _ => {}
            }
            i += 1;
        }
        out
    };
    let recipe = &line[line.find(" lockrun ").expect("the line runs lockrun") + 1..];
    for flag in ["--help", "-h"] {
        let mut cmd = Lockrun::bare();
        cmd.arg(flag);
        let help = stdout_of(&run(cmd));
        let example = help
            .lines()
            .map(str::trim)
            .find(|l| l.starts_with("lockrun -r "))
            .unwrap_or_else(|| panic!("lockrun {flag} ends with an example command:\n{help}"));
        assert!(
            !help.contains("* * * * *"),
            "lockrun {flag} shows a crontab line of its own:\n{help}"
        );
        assert_eq!(
            options(example),
            options(recipe),
            "lockrun {flag}'s example vs the README's crontab line"
        );
    }
}
