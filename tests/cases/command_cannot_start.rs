//! When the command cannot be started, or a limit of this machine stops lockrun: say what
//! failed where it failed (the command, the process table, the descriptor table), with the
//! documented exit code, and never blame Redis for a local limit; an empty command name, a
//! CRLF script and a key too long for the command's environment are named for what they are.

use crate::support::*;
use std::process::Command;

/// `lockrun …` run by `bash -c 'ulimit …; exec lockrun …'`, as user `as_user` if given.
fn limited(redis: &Server, ulimit: &str, as_user: Option<&str>, args: &[&str]) -> Command {
    let mut cmd = match as_user {
        Some(user) => {
            let mut c = Command::new("setpriv");
            c.args([
                &format!("--reuid={user}"),
                "--regid=nogroup",
                "--clear-groups",
                "bash",
            ]);
            c
        }
        None => Command::new("bash"),
    };
    cmd.arg("-c")
        .arg(format!("ulimit {ulimit} && exec \"$0\" \"$@\""))
        .arg(lockrun_bin())
        .arg("-r")
        .arg(redis.url())
        .args(args);
    from_a_clean_caller(&mut cmd);
    cmd
}

/// Under `ulimit -u` the fork fails with EAGAIN: that is no "cannot execute sh" (126) but the
/// process limit (71, EX_OSERR), and the lock is released.
#[test]
fn a_process_limit_is_said_and_is_71() {
    let redis = Server::start_tcp();
    // Root is exempt from RLIMIT_NPROC: the run is nobody's, whose processes are few.
    let out = run(limited(
        &redis,
        "-u 1",
        Some("nobody"),
        &["k", "--", "true"],
    ));
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(71), "{err}");
    assert!(
        err.contains("process limit") && err.contains("ulimit -u"),
        "{err}"
    );
    assert!(!redis.exists("k"), "released");
}

/// Under `ulimit -n` lockrun cannot open a socket: that is the descriptor limit (71), not
/// "Redis unavailable" (69), and `--wait` does not retry it as if it were an outage.
#[test]
fn a_descriptor_limit_is_said_and_is_not_waited_out() {
    let redis = Server::start_tcp();
    let started = std::time::Instant::now();
    for wait in [&[][..], &["--wait", "20s"]] {
        let mut args = wait.to_vec();
        args.extend(["k", "--", "true"]);
        let out = run(limited(&redis, "-n 8", None, &args));
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(71), "{wait:?}: {err}");
        assert!(err.contains("ulimit -n"), "{wait:?}: {err}");
        assert!(
            !err.contains("unavailable"),
            "{wait:?}: not Redis's fault: {err}"
        );
    }
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "not waited out"
    );
    assert!(!redis.exists("k"));
}

/// An empty command name is refused (64) before locking, rather than taking the lock for a
/// command that can only fail to start (127).
#[test]
fn an_empty_command_name_is_refused_before_locking() {
    let redis = Server::start();
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["k", "--", ""]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(64), "{}", stderr_of(&out));
    assert!(stderr_of(&out).contains("empty"), "{}", stderr_of(&out));
    assert!(!stderr_of(&out).contains("acquired"), "never locked");
    let fence: Option<String> = redis.cmd(&["GET", "lockrun:fence:{k}"]);
    assert_eq!(fence, None, "never locked");
}

/// A script saved with Windows line endings (`#!/bin/sh\r`) names the missing interpreter,
/// its CR shown escaped, rather than "command not found: ./crlf.sh".
#[test]
fn a_crlf_shebang_names_its_interpreter() {
    let redis = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("crlf.sh");
    std::fs::write(&script, "#!/bin/sh\r\necho hi\r\n").unwrap();
    let mut perms = std::fs::metadata(&script).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&script, perms).unwrap();
    let mut cmd = Lockrun::on(&redis);
    cmd.arg("k").arg("--").arg(&script);
    let out = run(cmd);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(127), "{err}");
    assert!(err.contains(r"/bin/sh\r"), "{err}");
    assert!(err.contains("Windows line endings"), "{err}");
    assert!(!redis.exists("k"));
}

/// A key longer than one environment entry may be cannot reach the command as LOCKRUN_KEY:
/// refused (64) at once, rather than "cannot execute echo: Argument list too long", which
/// blames the command.
#[test]
fn a_key_too_long_for_the_commands_environment_is_refused() {
    let redis = Server::start();
    let key = "K".repeat(131_066);
    let mut cmd = Lockrun::on(&redis);
    cmd.args([key.as_str(), "--", "echo", "ran"]);
    let out = run(cmd);
    let err = stderr_of(&out);
    assert_eq!(
        out.status.code(),
        Some(64),
        "{}",
        &err[..err.len().min(300)]
    );
    assert!(
        err.contains("LOCKRUN_KEY"),
        "{}",
        &err[..err.len().min(300)]
    );
    assert!(
        err.len() < 1000,
        "the key is not echoed whole: {} bytes",
        err.len()
    );
    assert_eq!(stdout_of(&out), "");
}
