//! Redis passwords: never printed, in any URL form or output mode; ambiguous URLs refused
//! without echoing them; passwords and ACL users given outside the URL (environment, file).

use crate::support::*;
use std::path::Path;
use std::process::{Command, Output};

/// Every way lockrun can print: text and JSON, quiet, normal and chatty.
const MODES: [&[&str]; 6] = [
    &[],
    &["-q"],
    &["-vv"],
    &["--log-format", "json"],
    &["-q", "--log-format", "json"],
    &["-vv", "--log-format", "json"],
];

/// `lockrun <mode> <args>`: the mode flags go first so `args` can end with the command.
fn lockrun_with(mode: &[&str], args: &[&str]) -> Lockrun {
    let mut cmd = Lockrun::bare();
    cmd.args(mode).args(args);
    cmd
}

fn assert_never_printed(out: &Output, secrets: &[&str], what: &str) {
    let (err, stdout) = (stderr_of(out), stdout_of(out));
    for s in secrets {
        assert!(!err.contains(s), "{what}: {s:?} leaked on stderr: {err}");
        assert!(
            !stdout.contains(s),
            "{what}: {s:?} leaked on stdout: {stdout}"
        );
    }
    assert!(!err.contains("panicked"), "{what}: {err}");
}

fn unix_url(redis: &Server) -> String {
    format!("unix://{}", redis.socket.display())
}

#[test]
fn a_password_in_the_url_query_is_never_printed() {
    // A socket that does not exist, so the "unavailable" line quotes the URL.
    for scheme in ["redis+unix", "unix", "valkey+unix"] {
        let url = format!("{scheme}:///var/run/lockrun-no-such.sock?pass=TopSecret42");
        for mode in MODES {
            let out = run(lockrun_with(mode, &["-r", &url, "k", "--", "true"]));
            let what = format!("{url} {mode:?}");
            assert_eq!(out.status.code(), Some(69), "{what}: {}", stderr_of(&out));
            assert_never_printed(&out, &["TopSecret42"], &what);
            // An error, so printed with -q too, redacted.
            assert!(
                stderr_of(&out).contains("pass=***"),
                "{what}: {}",
                stderr_of(&out)
            );
        }
    }

    // A real server that wants a password, given the wrong one in every query spelling redis-rs
    // reads (and `password=`, which it does not, but which is just as secret), plus a user name.
    let redis = Server::start_with_password("right-Pw-7");
    let sock = redis.socket.display().to_string();
    for url in [
        format!("redis+unix://{sock}?pass=Wr0ngPass%21word"),
        format!("unix://{sock}?db=0&user=default&pass=Wr0ngPass%21word"),
        format!("unix://{sock}?pass=Wr0ngPass!word&password=Wr0ngPass!word"),
        format!("unix://{sock}?p%61ss=Wr0ngPass!word"),
    ] {
        for mode in MODES {
            let out = run(lockrun_with(mode, &["-r", &url, "k", "--", "true"]));
            let what = format!("{url} {mode:?}");
            assert_eq!(out.status.code(), Some(69), "{what}: {}", stderr_of(&out));
            assert_never_printed(&out, &["Wr0ngPass", "Pass%21word", "Pass!word"], &what);
        }
    }

    // The right one in the query works and is not printed either.
    let url = format!("redis+unix://{sock}?pass=right-Pw-7");
    for mode in MODES {
        let out = run(lockrun_with(mode, &["-r", &url, "k", "--", "true"]));
        assert_eq!(out.status.code(), Some(0), "{mode:?}: {}", stderr_of(&out));
        assert_never_printed(&out, &["right-Pw-7"], &format!("{mode:?}"));
    }
}

#[test]
fn an_unencoded_at_or_slash_in_the_password_is_refused_without_echoing_it() {
    // The server's password really is `Qx@Zy:w/Vb%41`: written into the URL unencoded, no
    // parser can tell where it ends.
    let redis = Server::start_with_password("Qx@Zy:w/Vb%41");
    let port = redis.port();
    let fragments = ["Qx", "Zy", "Vb", "%41"];
    for url in [
        format!("redis://:Qx@Zy:w/Vb%41@127.0.0.1:{port}"),
        format!("redis://:Qx@Zy@127.0.0.1:{port}"),
        format!("redis://usr:Qx@Zy@127.0.0.1:{port}/0"),
        format!("redis://:Qx/Zy@127.0.0.1:{port}"),
        format!("rediss://:Qx?Zy@127.0.0.1:{port}"),
        format!("redis://:Qx#Zy@127.0.0.1:{port}"),
        // No scheme separator at all: nothing about it can be shown safely.
        format!(":Qx@Zy@127.0.0.1:{port}"),
        // A unix socket URL has no place for user info; redis-rs would ignore it silently.
        format!("unix://:Qx@localhost{}", redis.socket.display()),
        format!("unix://:Qx/Zy@localhost{}", redis.socket.display()),
    ] {
        for mode in MODES {
            let out = run(lockrun_with(mode, &["-r", &url, "k", "--", "true"]));
            let err = stderr_of(&out);
            let what = format!("{url} {mode:?}");
            assert_eq!(out.status.code(), Some(64), "{what}: {err}");
            assert_eq!(err.trim_end().lines().count(), 1, "{what}: one line: {err}");
            assert!(err.contains("invalid Redis URL"), "{what}: {err}");
            assert_never_printed(&out, &fragments, &what);
        }
    }
    // The hint names the encodings, and following it works.
    let out = run(lockrun_with(
        &[],
        &[
            "-r",
            &format!("redis://:Qx@Zy@127.0.0.1:{port}"),
            "k",
            "true",
        ],
    ));
    let err = stderr_of(&out);
    for enc in ["%40", "%2F", "%3A"] {
        assert!(err.contains(enc), "hint should mention {enc}: {err}");
    }
    let url = format!("redis://:Qx%40Zy:w%2FVb%2541@127.0.0.1:{port}");
    let out = run(lockrun_with(&["-vv"], &["-r", &url, "k", "--", "true"]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_never_printed(&out, &fragments, "encoded");
}

#[test]
fn password_from_environment_or_file_authenticates_and_is_never_printed() {
    let redis = Server::start_with_password("env-Secret-99");
    let port = redis.port();
    let dir = redis.dir.path();
    let file = dir.join("redis.pw");
    std::fs::write(&file, "env-Secret-99\n").unwrap();
    let file = file.to_str().unwrap();

    for url in [
        unix_url(&redis),
        format!("redis://127.0.0.1:{port}"),
        // The password from the environment or the file wins over the URL's.
        format!("redis://:stale-url-pw@127.0.0.1:{port}"),
        format!("redis+unix://{}?pass=stale-url-pw", redis.socket.display()),
    ] {
        let ok = |mut cmd: Lockrun, what: &str| {
            cmd.args(["-r", &url, "-vv", "k", "--", "true"]);
            let out = run(cmd);
            let what = format!("{url} {what}");
            assert_eq!(out.status.code(), Some(0), "{what}: {}", stderr_of(&out));
            assert_never_printed(&out, &["env-Secret-99", "stale-url-pw"], &what);
            assert!(!redis.exists("k"), "{what}: released");
        };
        let mut cmd = Lockrun::bare();
        cmd.env("LOCKRUN_REDIS_PASSWORD", "env-Secret-99");
        ok(cmd, "LOCKRUN_REDIS_PASSWORD");
        let mut cmd = Lockrun::bare();
        cmd.args(["--redis-password-file", file]);
        ok(cmd, "--redis-password-file");
        let mut cmd = Lockrun::bare();
        cmd.env("LOCKRUN_REDIS_PASSWORD_FILE", file);
        ok(cmd, "LOCKRUN_REDIS_PASSWORD_FILE");
    }

    // Only one trailing newline is stripped: a password that ends in a newline keeps the rest.
    std::fs::write(dir.join("two-newlines"), "env-Secret-99\n\n").unwrap();
    let mut cmd = Lockrun::bare();
    cmd.arg("--redis-password-file")
        .arg(dir.join("two-newlines"))
        .args(["-r", &unix_url(&redis), "k", "true"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(69), "{}", stderr_of(&out));

    // A wrong one: exit 69, and never printed, whatever the output mode.
    std::fs::write(dir.join("wrong.pw"), "wrong-File-Pw\n").unwrap();
    for mode in MODES {
        let mut cmd = lockrun_with(mode, &["-r", &unix_url(&redis), "k", "true"]);
        cmd.env("LOCKRUN_REDIS_PASSWORD", "wrong-Env-Pw");
        let out = run(cmd);
        assert_eq!(out.status.code(), Some(69), "{mode:?}: {}", stderr_of(&out));
        assert_never_printed(&out, &["wrong-Env-Pw"], &format!("env {mode:?}"));

        let mut cmd = lockrun_with(mode, &["-r", &format!("redis://127.0.0.1:{port}")]);
        cmd.arg("--redis-password-file")
            .arg(dir.join("wrong.pw"))
            .args(["k", "true"]);
        let out = run(cmd);
        assert_eq!(out.status.code(), Some(69), "{mode:?}: {}", stderr_of(&out));
        assert_never_printed(&out, &["wrong-File-Pw"], &format!("file {mode:?}"));
    }
}

#[test]
fn a_bad_password_file_is_a_usage_error_that_names_the_file_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name);
    std::fs::write(path("empty"), "").unwrap();
    std::fs::write(path("newline-only"), "\n").unwrap();
    std::fs::write(path("not-utf8"), b"Bin\xffSecret\n").unwrap();
    std::fs::write(path("good"), "Good-File-Secret\n").unwrap();
    let missing = path("missing");
    for (file, env_password) in [
        (path("empty"), None),
        (path("newline-only"), None),
        (missing.clone(), None),
        (dir.path().to_path_buf(), None), // a directory
        (path("not-utf8"), None),
        // Two sources of one password: refused rather than silently picking one.
        (path("good"), Some("Env-Secret-Too")),
    ] {
        for mode in MODES {
            let mut cmd = lockrun_with(mode, &["-r", "redis://127.0.0.1:1"]);
            cmd.arg("--redis-password-file")
                .arg(&file)
                .args(["k", "--", "touch"])
                .arg(path("ran"));
            if let Some(p) = env_password {
                cmd.env("LOCKRUN_REDIS_PASSWORD", p);
            }
            let out = run(cmd);
            let err = stderr_of(&out);
            let what = format!("{} {mode:?}", file.display());
            assert_eq!(out.status.code(), Some(64), "{what}: {err}");
            assert_eq!(err.trim_end().lines().count(), 1, "{what}: one line: {err}");
            let name = file.file_name().unwrap().to_str().unwrap();
            assert!(err.contains(name), "{what}: should name the file: {err}");
            assert_never_printed(&out, &["Bin", "Good-File-Secret", "Env-Secret-Too"], &what);
            assert!(!path("ran").exists(), "{what}: the command must not run");
        }
    }
    // The same through LOCKRUN_REDIS_PASSWORD_FILE.
    let mut cmd = lockrun_with(&[], &["-r", "redis://127.0.0.1:1", "k", "true"]);
    cmd.env("LOCKRUN_REDIS_PASSWORD_FILE", &missing);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(64), "{}", stderr_of(&out));
    assert!(stderr_of(&out).contains("missing"), "{}", stderr_of(&out));
}

/// An ACL user that may do what lockrun does (scripts on any key, publish the release hint).
fn add_acl_user(redis: &Server, user: &str, password: &str) {
    let pw = format!(">{password}");
    let _: String = redis.cmd(&["ACL", "SETUSER", user, "on", &pw, "~*", "&*", "+@all"]);
}

#[test]
fn an_acl_user_from_environment_or_flag_authenticates() {
    let redis = Server::start_with_password("default-Pw-1");
    add_acl_user(&redis, "lockrun-acl", "acl-User-Pw");
    let dir = redis.dir.path();
    std::fs::write(dir.join("acl.pw"), "acl-User-Pw\n").unwrap();
    let url = unix_url(&redis);
    let port = redis.port();

    let check = |mut cmd: Lockrun, code: i32, what: &str| {
        cmd.args(["-vv", "k", "--", "true"]);
        let out = run(cmd);
        assert_eq!(out.status.code(), Some(code), "{what}: {}", stderr_of(&out));
        assert_never_printed(&out, &["acl-User-Pw", "default-Pw-1"], what);
    };
    let mut cmd = lockrun_with(&[], &["-r", &url]);
    cmd.env("LOCKRUN_REDIS_USER", "lockrun-acl")
        .env("LOCKRUN_REDIS_PASSWORD", "acl-User-Pw");
    check(cmd, 0, "LOCKRUN_REDIS_USER + LOCKRUN_REDIS_PASSWORD");

    let mut cmd = lockrun_with(&[], &["-r", &url, "--redis-user", "lockrun-acl"]);
    cmd.arg("--redis-password-file").arg(dir.join("acl.pw"));
    check(cmd, 0, "--redis-user + --redis-password-file");

    // The user overrides the URL's (userinfo or `user=`), with the URL's password.
    let tcp = format!("redis://someone:acl-User-Pw@127.0.0.1:{port}");
    let cmd = lockrun_with(&[], &["-r", &tcp, "--redis-user", "lockrun-acl"]);
    check(cmd, 0, "--redis-user over the URL's user");

    // The user really is used: the same password as the default user fails for it.
    let mut cmd = lockrun_with(&[], &["-r", &url, "--redis-user", "lockrun-acl"]);
    cmd.env("LOCKRUN_REDIS_PASSWORD", "default-Pw-1");
    check(cmd, 69, "the default user's password for the ACL user");

    // A user without any password would be ignored by the client: refused instead.
    let out = run(lockrun_with(
        &[],
        &["-r", &url, "--redis-user", "lockrun-acl", "k", "true"],
    ));
    assert_eq!(out.status.code(), Some(64), "{}", stderr_of(&out));
    assert_eq!(stderr_of(&out).trim_end().lines().count(), 1);
    assert!(stderr_of(&out).contains("password"), "{}", stderr_of(&out));
}

#[test]
fn help_describes_the_password_options_without_showing_their_values() {
    let mut cmd = Lockrun::bare();
    cmd.arg("--help")
        .env("LOCKRUN_REDIS_PASSWORD", "help-Env-Pw")
        .env("LOCKRUN_REDIS_USER", "help-User")
        .env("LOCKRUN_REDIS_PASSWORD_FILE", Path::new("/help-file-path"))
        .env("LOCKRUN_REDIS_URL", "redis://:help-Url-Pw@h");
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0));
    let help = stdout_of(&out);
    for needle in [
        "--redis-password-file",
        "--redis-user",
        "LOCKRUN_REDIS_PASSWORD",
        "LOCKRUN_REDIS_USER",
    ] {
        assert!(
            help.contains(needle),
            "--help should mention {needle}: {help}"
        );
    }
    assert_never_printed(
        &out,
        &["help-Env-Pw", "help-User", "help-file-path", "help-Url-Pw"],
        "--help",
    );
}

/// A password file that is a FIFO nobody writes to is refused at once, rather than blocking
/// lockrun in the read (where SIGTERM would not end it); a pipe that does carry the password
/// (`--redis-password-file <(vault read …)`) still works.
#[test]
fn a_password_pipe_without_a_writer_is_refused_at_once() {
    let redis = Server::start_with_password("Pipe-Secret-7");
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("pw.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let started = std::time::Instant::now();
    let mut cmd = lockrun_with(&[], &["-r", &unix_url(&redis)]);
    cmd.arg("--redis-password-file")
        .arg(&fifo)
        .args(["k", "--", "true"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(64), "{}", stderr_of(&out));
    assert!(stderr_of(&out).contains("pw.fifo"), "{}", stderr_of(&out));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "bounded"
    );

    // Process substitution: bash hands lockrun /dev/fd/N, a pipe with a writer.
    let mut cmd = Command::new("bash");
    cmd.args([
        "-c",
        r#"exec "$0" -r "$1" --redis-password-file <(printf 'Pipe-Secret-7\n') k -- true"#,
    ])
    .arg(lockrun_bin())
    .arg(unix_url(&redis));
    from_a_clean_caller(&mut cmd);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
}

/// A Kubernetes Secret made with `echo` ends in a newline: the variable loses one trailing
/// newline, as the password file does.
#[test]
fn a_password_variable_loses_one_trailing_newline() {
    let redis = Server::start_with_password("Env-Secret-8");
    let mut cmd = lockrun_with(&[], &["-r", &unix_url(&redis), "k", "--", "true"]);
    cmd.env("LOCKRUN_REDIS_PASSWORD", "Env-Secret-8\n");
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
}
