//! Standard descriptors closed when lockrun starts (`lockrun status k >&-`, a daemon that closed
//! its own, a supervisor that passes none). Each closed one gets /dev/null in its place before
//! lockrun opens anything, so none of lockrun's own descriptors (its signal pipe, its event
//! loop's, a socket to Redis) can take number 0, 1 or 2 and receive what is written there.
//! lockrun's own output to a standard output closed at start is a write that failed (exit 74,
//! one line on stderr); the command finds /dev/null where its caller had closed a descriptor.

use crate::support::*;
use std::os::unix::process::CommandExt;
use std::process::Output;

/// `cmd` run to completion with the descriptors `closed` closed (stdin, stdout and stderr are
/// a null device and two pipes before that).
fn closing(mut cmd: Lockrun, closed: &[i32]) -> Output {
    let closed = closed.to_vec();
    // SAFETY: only close(2), async-signal-safe, between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            for &fd in &closed {
                libc::close(fd);
            }
            Ok(())
        });
    }
    run(cmd)
}

/// `lockrun -r URL args…`.
fn on(redis: &Server, args: &[&str]) -> Lockrun {
    let mut cmd = Lockrun::on(redis);
    cmd.args(args);
    cmd
}

/// The ways a caller closes descriptors: each alone, and the usual combinations.
const CLOSINGS: [&[i32]; 5] = [&[0], &[1], &[2], &[1, 2], &[0, 1, 2]];

/// What an output to a stdout closed at start must look like: exit 74, and on stderr (when it
/// is open) one line saying so.
fn assert_unwritable(out: &Output, closed: &[i32], what: &str) {
    let err = stderr_of(out);
    assert_eq!(out.status.code(), Some(74), "{what} {closed:?}: {err}");
    if !closed.contains(&2) {
        assert_eq!(
            err.lines().count(),
            1,
            "{what} {closed:?}: one line: {err:?}"
        );
        assert!(
            err.contains(" ERROR cannot write to standard output: it was closed"),
            "{what} {closed:?}: {err}"
        );
    }
}

/// Counts the errors the server replies with, from a connection of its own opened before
/// counting starts (redis-rs's greeting meets errors of its own on Redis 7.0).
struct ErrorReplies(redis::Connection);

impl ErrorReplies {
    fn on(redis: &Server) -> ErrorReplies {
        ErrorReplies(redis.conn())
    }

    /// From now on.
    fn reset(&mut self) {
        redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .exec(&mut self.0)
            .unwrap();
    }

    /// The errors since [`ErrorReplies::reset`] (`INFO errorstats`), but lockrun's own first
    /// `EVALSHA` of a script the server has not cached yet: bytes that are not lockrun's
    /// requests (a log line, a report) would be read as commands and refused.
    fn stray(&mut self) -> Vec<String> {
        let info: String = redis::cmd("INFO")
            .arg("errorstats")
            .query(&mut self.0)
            .unwrap();
        info.lines()
            .filter(|l| l.starts_with("errorstat_") && !l.starts_with("errorstat_NOSCRIPT:"))
            .map(str::to_string)
            .collect()
    }
}

#[test]
fn help_and_version_to_a_closed_stdout_are_exit_74() {
    for args in [
        &["--help"][..],
        &["-h"],
        &["--version"],
        &["status", "--help"],
    ] {
        let mut open = Lockrun::bare();
        open.args(args);
        let whole = run(open);
        assert_eq!(whole.status.code(), Some(0), "{args:?}");
        assert!(!whole.stdout.is_empty(), "{args:?}");
        for closed in CLOSINGS {
            let mut cmd = Lockrun::bare();
            cmd.args(args);
            let out = closing(cmd, closed);
            if closed.contains(&1) {
                assert_unwritable(&out, closed, &format!("{args:?}"));
            } else {
                // Another descriptor closed: the text is written whole, exit 0.
                assert_eq!(out.status.code(), Some(0), "{args:?} {closed:?}");
                assert_eq!(out.stdout, whole.stdout, "{args:?} {closed:?}");
            }
        }
    }
}

#[test]
fn reports_to_a_closed_stdout_are_exit_74_and_nothing_reaches_redis() {
    let redis = Server::start();
    // A key held (by a finished job's hold) and one history entry: every report has lines.
    let mut holder = Lockrun::on(&redis);
    holder.args(["--min-hold", "60s", "k", "--", "true"]);
    assert_eq!(run(holder).status.code(), Some(0));
    let keys = redis.keys();
    let mut errors = ErrorReplies::on(&redis);
    for args in [&["status", "k"][..], &["list"], &["history", "k"]] {
        let whole = run(on(&redis, args));
        assert_eq!(
            whole.status.code(),
            Some(0),
            "{args:?}: {}",
            stderr_of(&whole)
        );
        let first_line = |o: &Output| stdout_of(o).lines().next().map(str::to_string);
        assert!(first_line(&whole).is_some(), "{args:?}");
        for closed in CLOSINGS {
            errors.reset();
            let out = closing(on(&redis, args), closed);
            if closed.contains(&1) {
                assert_unwritable(&out, closed, &format!("{args:?}"));
            } else {
                assert_eq!(
                    (out.status.code(), first_line(&out)),
                    (Some(0), first_line(&whole)),
                    "{args:?} {closed:?}: {}",
                    stderr_of(&out)
                );
            }
            assert_eq!(errors.stray(), Vec::<String>::new(), "{args:?} {closed:?}");
            assert_eq!(redis.keys(), keys, "{args:?} {closed:?}");
        }
    }
}

/// The run form with 0, 1 or 2 closed: it locks, runs, releases and exits with the command's
/// code; the command finds /dev/null in place of each closed descriptor (not a descriptor its
/// first open(2) would take), and lockrun's log lines go to stderr when it is open.
#[test]
fn a_run_with_closed_descriptors_locks_runs_and_releases() {
    let redis = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let mut errors = ErrorReplies::on(&redis);
    for (i, closed) in CLOSINGS.iter().enumerate() {
        errors.reset();
        let seen = dir.path().join(format!("fds-{i}"));
        // Read in a command substitution, whose redirection is the subshell's: the shell's
        // (the command's) 0, 1 and 2 stay as lockrun handed them over.
        let job = format!(
            "fds=$(readlink /proc/$$/fd/0 /proc/$$/fd/1 /proc/$$/fd/2); echo \"$fds\" > '{}'; \
             echo to stdout; echo to stderr >&2; exit 3",
            seen.display()
        );
        let mut cmd = Lockrun::on(&redis);
        cmd.args(["k", "--", "sh", "-c", &job]);
        let out = closing(cmd, closed);
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(3), "{closed:?}: {err}");
        // First: the test's own new connections meet errors of their own.
        assert_eq!(errors.stray(), Vec::<String>::new(), "{closed:?}");
        assert!(!redis.exists("k"), "{closed:?}: released");
        let fds = std::fs::read_to_string(&seen).unwrap_or_default();
        let fds: Vec<&str> = fds.lines().collect();
        for &fd in *closed {
            assert_eq!(
                fds.get(fd as usize),
                Some(&"/dev/null"),
                "{closed:?}: the command's {fd} is /dev/null: {fds:?}"
            );
        }
        if !closed.contains(&2) {
            assert!(
                err.contains("redis lock acquired") && err.contains("redis lock released"),
                "{closed:?}: {err}"
            );
            assert!(!err.contains("ERROR"), "{closed:?}: {err}");
        }
        if !closed.contains(&1) {
            assert_eq!(stdout_of(&out), "to stdout\n", "{closed:?}");
        }
    }
    let mut history = Lockrun::on(&redis);
    history.args(["history", "k"]);
    let out = run(history);
    let ran = stdout_of(&out)
        .lines()
        .filter(|l| l.contains(" ran ") && l.contains(" 3 "))
        .count();
    assert_eq!(ran, CLOSINGS.len(), "{}", stdout_of(&out));
}

/// No /dev/null to put in place of a closed descriptor (a chroot or container without it):
/// lockrun stops before it opens anything, exit 71 (an OS error) with one line on stderr,
/// rather than run with a free descriptor its own files and sockets would take. Root only (a
/// mount namespace whose /dev is empty).
#[test]
fn without_dev_null_a_closed_descriptor_stops_lockrun() {
    // SAFETY: geteuid(2) has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    assert!(
        root,
        "this test needs root (a mount namespace): run the suite as root (CI does), or leave it \
         out with `--skip without_dev_null`"
    );
    let mut unshare = std::process::Command::new("unshare");
    unshare.args([
        "--mount",
        "sh",
        "-c",
        "mount -t tmpfs none /dev && exec \"$@\"",
        "sh",
    ]);
    unshare.arg(lockrun_bin()).arg("--version");
    let out = closing(Lockrun::via(unshare), &[1]);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(71), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err:?}");
    assert!(
        err.contains(
            " ERROR descriptor 1 (standard output) is closed and /dev/null cannot take its place: \
             No such file or directory"
        ),
        "{err}"
    );
}
