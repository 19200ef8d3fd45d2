//! Standard output and standard error are input too: a full disk (`/dev/full`) or a reader
//! that went away (`| true`, `| grep -q`) never makes lockrun panic (exit 134 with a
//! backtrace). A closed pipe ends quietly, as command-line tools do; a write that fails
//! otherwise is one line on stderr (if stderr can take it) and exit 74 (EX_IOERR).

use crate::support::*;
use std::io::Read;
use std::process::Stdio;

/// `cmd` with stdout (`out`) and/or stderr (`err`) on /dev/full.
fn with_full(mut cmd: Lockrun, out: bool, err: bool) -> std::process::Output {
    let full = || {
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap()
    };
    cmd.stdout(if out { full().into() } else { Stdio::piped() });
    cmd.stderr(if err { full().into() } else { Stdio::piped() });
    cmd.spawn().expect("spawn").wait_with_output().unwrap()
}

fn not_a_panic(out: &std::process::Output, what: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("panicked") && out.status.code().is_some(),
        "{what}: {:?} {err}",
        out.status
    );
}

#[test]
fn a_full_stderr_never_panics_and_keeps_the_exit_code() {
    let redis = Server::start();
    let mut bad_ttl = Lockrun::bare();
    bad_ttl.args(["--ttl", "abc", "k", "--", "true"]);
    let out = with_full(bad_ttl, false, true);
    assert_eq!(out.status.code(), Some(64), "{:?}", out.status);

    let mut no_command = Lockrun::on(&redis);
    no_command.arg("k");
    assert_eq!(with_full(no_command, false, true).status.code(), Some(64));

    // A run whose log lines cannot be written still runs, releases and exits with the job's code.
    let mut job = Lockrun::on(&redis);
    job.args(["-v", "k", "--", "sh", "-c", "exit 3"]);
    let out = with_full(job, false, true);
    assert_eq!(out.status.code(), Some(3), "{:?}", out.status);
    assert!(!redis.exists("k"));
}

#[test]
fn a_full_stdout_is_one_line_and_exit_74() {
    let redis = Server::start();
    let mut holder = Lockrun::on(&redis);
    holder.args(["--min-hold", "30s", "k", "--", "true"]);
    assert_eq!(run(holder).status.code(), Some(0));
    for args in [
        &["status", "k"][..],
        &["status", "--json", "k"],
        &["history", "--json", "k"],
        &["history", "k"],
        &["list", "--all"],
        &["doctor"],
    ] {
        let mut cmd = Lockrun::bare();
        cmd.args(args).arg("-r").arg(redis.url());
        let out = with_full(cmd, true, false);
        not_a_panic(&out, &format!("{args:?}"));
        assert_eq!(out.status.code(), Some(74), "{args:?}: {}", stderr_of(&out));
        let err = stderr_of(&out);
        assert!(
            err.contains("cannot write to standard output") && err.lines().count() == 1,
            "{args:?}: {err}"
        );
        // Both full: still no panic, still 74.
        let mut cmd = Lockrun::bare();
        cmd.args(args).arg("-r").arg(redis.url());
        let out = with_full(cmd, true, true);
        not_a_panic(&out, &format!("{args:?} (both full)"));
        assert_eq!(out.status.code(), Some(74), "{args:?} (both full)");
    }
    for help in ["--help", "--version", "-h"] {
        let mut cmd = Lockrun::bare();
        cmd.arg(help);
        let out = with_full(cmd, true, false);
        assert_eq!(out.status.code(), Some(74), "{help}: {}", stderr_of(&out));
    }
}

/// `lockrun list --all | grep -q x` (or `| true`): the reader leaves after a line; lockrun
/// stops quietly, exit 0.
#[test]
fn a_reader_that_goes_away_ends_the_listing_quietly() {
    let redis = Server::start();
    let mut pipe = redis.conn();
    let mut batch = redis::pipe();
    for i in 0..1500 {
        batch
            .cmd("SET")
            .arg(format!("lockrun:fence:{{k{i}}}"))
            .arg(1)
            .ignore();
    }
    batch.exec(&mut pipe).unwrap();
    let mut cmd = Lockrun::bare();
    cmd.args(["list", "--all", "-r"])
        .arg(redis.url())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    // Read nothing and close the pipe at once: every write lockrun makes meets EPIPE.
    drop(child.stdout.take());
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = wait_timeout(&mut child, PATIENCE).expect("ends");
    assert_eq!(status.code(), Some(0), "{status:?}: {err}");
    assert_eq!(err, "", "quietly");
}

/// One key of 70,000 characters is listed whole, never a panic ("Formatting argument out of
/// range"): its fence counter stays, so a panic would break `list` for everyone, for good.
#[test]
fn a_very_long_key_is_listed_not_a_panic() {
    let redis = Server::start();
    let long = "L".repeat(70_000);
    let mut cmd = Lockrun::on(&redis);
    cmd.args([long.as_str(), "--", "true"]);
    assert_eq!(run(cmd).status.code(), Some(0));
    let mut short = Lockrun::on(&redis);
    short.args(["short", "--", "true"]);
    assert_eq!(run(short).status.code(), Some(0));
    let mut list = Lockrun::bare();
    list.args(["list", "--all", "-r"]).arg(redis.url());
    let out = run(list);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let text = stdout_of(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "header and two rows");
    assert!(lines[1].starts_with(&long), "the long key, whole");
    // The other rows stay aligned to the short names, not pushed 70,000 columns right.
    assert!(
        lines[2].starts_with("short ") && lines[2].len() < 100,
        "{:?}",
        lines[2]
    );
}

/// History entries are anyone's to write: an ESC or a newline in one is shown escaped, as
/// `list` and `status` do.
#[test]
fn history_escapes_control_characters() {
    let redis = Server::start();
    let _: String = redis.cmd(&[
        "XADD",
        "lockrun:history:{k}",
        "*",
        "outcome",
        "ran\u{1b}[31m",
        "host",
        "web1\n2026-01-01T00:00:00Z  ran  0  1s  fake",
        "pid",
        "1",
    ]);
    let mut cmd = Lockrun::bare();
    cmd.args(["history", "-r"]).arg(redis.url()).arg("k");
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let text = stdout_of(&out);
    assert!(!text.contains('\u{1b}'), "no raw ESC: {text:?}");
    assert_eq!(text.lines().count(), 2, "one entry, one row: {text}");
    assert!(
        text.contains(r"ran\u{1b}[31m") && text.contains(r"web1\n2026"),
        "{text}"
    );
}
