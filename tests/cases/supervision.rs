//! Supervision: signals, process groups, parent death, reaping, terminals.

use crate::support::*;
use nix::sys::termios::LocalFlags;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::Duration;

/// `sh -c` script that traps `sig`, records each delivery in `log`, says it is ready, and keeps
/// running for a while (so a test can see whether the signal arrives once or twice).
fn trapping(sig: &str, log: &Path, ready: &Path) -> String {
    format!(
        "trap 'echo {sig} >> \"{log}\"' {sig}; touch '{ready}'; i=0; while [ $i -lt 15 ]; do sleep 0.1; i=$((i+1)); done",
        log = log.display(),
        ready = ready.display()
    )
}

#[test]
fn forwards_term_int_hup_quit_usr1_usr2() {
    let redis = Server::start();
    for (name, signo) in [
        ("TERM", libc::SIGTERM),
        ("INT", libc::SIGINT),
        ("HUP", libc::SIGHUP),
        ("QUIT", libc::SIGQUIT),
        ("USR1", libc::SIGUSR1),
        ("USR2", libc::SIGUSR2),
    ] {
        let log = redis.dir.path().join(format!("{name}.log"));
        let ready = redis.dir.path().join(format!("{name}.ready"));
        let mut cmd = Lockrun::on(&redis);
        cmd.args(["fwd", "--", "sh", "-c"])
            .arg(trapping(name, &log, &ready));
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_for_file_of(&mut child, &ready);
        kill(child.id(), signo);
        let status = wait_timeout(&mut child, PATIENCE).unwrap();
        assert_eq!(
            status.code(),
            Some(0),
            "{name}: the trap handled it, so the command exits 0"
        );
        assert_eq!(lines(&log), [name], "{name} delivered exactly once");
        assert!(!redis.exists("fwd"));
    }
}

#[test]
fn signals_reach_grandchildren_through_the_process_group() {
    let redis = Server::start();
    let log = redis.dir.path().join("gc.log");
    let ready = redis.dir.path().join("gc.ready");
    let inner = format!(
        "trap 'echo grandchild-got-TERM >> \"{}\"; exit 0' TERM; touch '{}'; while :; do sleep 0.05; done",
        log.display(),
        ready.display()
    );
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["grp", "--", "sh", "-c"])
        .arg(format!("sh -c \"{}\" & wait", inner.replace('"', "\\\"")));
    let mut child = cmd.stderr(Stdio::null()).spawn().unwrap();
    wait_for_file_of(&mut child, &ready);
    kill(child.id(), libc::SIGTERM);
    wait_timeout(&mut child, PATIENCE).unwrap();
    assert_eq!(lines(&log), ["grandchild-got-TERM"]);
}

#[test]
fn a_forwarded_sigterm_is_not_sent_again_to_the_group_when_the_command_exits() {
    // The command (sh) handles the forwarded SIGTERM and exits 0.3 s later; its child handles
    // the same SIGTERM and goes on for ~1 s. When the command exits, lockrun sweeps the group
    // it leaves behind: that child must not get a second SIGTERM, the job already has it.
    let redis = Server::start();
    let log = redis.dir.path().join("once.log");
    let ready = redis.dir.path().join("once.ready");
    let inner = format!(
        "trap 'echo got-TERM >> \"{}\"' TERM; touch '{}'; for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do sleep 0.05; done",
        log.display(),
        ready.display()
    );
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["--kill-after", "10s", "once", "--", "sh", "-c"])
        .arg(format!(
            "trap 'sleep 0.3; exit 0' TERM; sh -c \"{}\" & wait",
            inner.replace('"', "\\\"")
        ));
    let mut child = cmd.stderr(Stdio::null()).spawn().unwrap();
    wait_for_file_of(&mut child, &ready);
    kill(child.id(), libc::SIGTERM);
    wait_timeout(&mut child, PATIENCE).unwrap();
    assert_eq!(lines(&log), ["got-TERM"], "SIGTERM delivered exactly once");
    assert!(!redis.exists("once"));
}

#[test]
fn no_group_signals_only_the_direct_child() {
    let redis = Server::start();
    let log = redis.dir.path().join("ng.log");
    let ready = redis.dir.path().join("ng.ready");
    // The grandchild would record a TERM if it got one; with --no-group only `sh` is signalled.
    // `sh` sets its trap before it starts the grandchild, whose file says both traps are set.
    let script = format!(
        "trap 'echo child-got-TERM >> \"{log}\"; wait; exit 3' TERM; (trap 'echo grandchild-got-TERM >> \"{log}\"' TERM; touch '{ready}'; sleep 1.5) & wait",
        log = log.display(),
        ready = ready.display()
    );
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["--no-group", "ng", "--", "sh", "-c"]).arg(script);
    let mut child = cmd.stderr(Stdio::null()).spawn().unwrap();
    wait_for_file_of(&mut child, &ready);
    kill(child.id(), libc::SIGTERM);
    let status = wait_timeout(&mut child, PATIENCE).unwrap();
    assert_eq!(status.code(), Some(3));
    assert_eq!(lines(&log), ["child-got-TERM"]);
}

#[test]
fn lock_is_held_until_a_backgrounded_grandchild_is_gone() {
    let redis = Server::start();
    let log = redis.dir.path().join("bg.log");
    // The direct child exits at once; its background grandchild ignores the SIGTERM lockrun then
    // sends and works for ~3.6 s more (three TTLs). The lock must stay held, and renewed, until
    // it is gone.
    // (The child exits only once the grandchild's trap is set, or SIGTERM could beat it.)
    let ready = redis.dir.path().join("bg.ready");
    let script = format!(
        "(trap 'echo got-TERM >> \"{log}\"' TERM; touch '{ready}'; i=0; while [ $i -lt 36 ]; do sleep 0.1; i=$((i+1)); done; echo finished >> \"{log}\") & \
         while [ ! -e '{ready}' ]; do sleep 0.01; done; exit 4",
        log = log.display(),
        ready = ready.display()
    );
    let mut cmd = Lockrun::on(&redis);
    cmd.args([
        "-t",
        "1200ms",
        "--kill-after",
        "20s",
        "bg",
        "--",
        "sh",
        "-c",
    ])
    .arg(script);
    let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
    let mut lines_ = wait_for_line(&mut child, "process group lives on");
    let value: String = redis.cmd(&["GET", "bg"]);
    for _ in 0..8 {
        thread::sleep(Duration::from_millis(400));
        // Read the key first: the release comes strictly after the grandchild wrote "finished"
        // and exited, so a missing key with no "finished" yet means it was released too early.
        let now: Option<String> = redis.cmd(&["GET", "bg"]);
        if now.is_none() {
            assert!(
                lines(&log).contains(&"finished".to_string()),
                "released while the grandchild ran"
            );
            break;
        }
        assert_eq!(
            now.as_deref(),
            Some(value.as_str()),
            "still held, by the same holder"
        );
    }
    let status = wait_timeout(&mut child, PATIENCE).unwrap();
    assert_eq!(
        status.code(),
        Some(4),
        "the direct child's code: {}",
        lines_.rest()
    );
    assert_eq!(lines(&log), ["got-TERM", "finished"]);
    assert!(!redis.exists("bg"), "released once the group is empty");
}

#[test]
fn leftover_group_members_are_killed_after_kill_after() {
    let redis = Server::start();
    let ready = redis.dir.path().join("stubborn.ready");
    let script = format!(
        "(trap '' TERM; touch '{r}'; while :; do sleep 0.1; done) & while [ ! -e '{r}' ]; do sleep 0.01; done; exit 0",
        r = ready.display()
    );
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["--kill-after", "500ms", "stubborn", "--", "sh", "-c"])
        .arg(script);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert!(stderr_of(&out).contains("sending SIGKILL"));
    assert!(!redis.exists("stubborn"));
}

#[test]
fn lock_loss_sigkills_a_command_that_ignores_sigterm_and_exits_76() {
    let redis = Server::start();
    let ready = redis.dir.path().join("ign.ready");
    let mut cmd = Lockrun::on(&redis);
    // TTL 1.5 s, not less: the acquire must answer within TTL/3, which a loaded CI machine can
    // miss with a shorter one.
    cmd.args([
        "-t",
        "1500ms",
        "--kill-after",
        "1s",
        "ign",
        "--",
        "sh",
        "-c",
    ])
    .arg(format!(
        "trap '' TERM; touch '{}'; while :; do sleep 0.1; done",
        ready.display()
    ));
    let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
    let mut log = Lines::of(&mut child);
    wait_for_file_of(&mut child, &ready);
    redis.cmd::<i64>(&["DEL", "ign"]);
    let status = wait_timeout(&mut child, PATIENCE).unwrap();
    let log = log.rest();
    assert_eq!(status.code(), Some(76), "{log}");
    assert!(
        log.contains("redis lock lost") && log.contains("sending SIGKILL"),
        "{log}"
    );
}

#[test]
fn sigkill_of_lockrun_sends_the_command_its_parent_death_signal() {
    let redis = Server::start();
    let log = redis.dir.path().join("pd.log");
    let ready = redis.dir.path().join("pd.ready");
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["pdeath", "--", "sh", "-c"]).arg(format!(
        "trap 'echo got-TERM > \"{}\"; exit 0' TERM; touch '{}'; while :; do sleep 0.05; done",
        log.display(),
        ready.display()
    ));
    let mut child = cmd.stderr(Stdio::null()).spawn().unwrap();
    wait_for_file_of(&mut child, &ready);
    kill(child.id(), libc::SIGKILL);
    wait_timeout(&mut child, PATIENCE).unwrap();
    eventually("the command to get SIGTERM", || lines(&log) == ["got-TERM"]);
}

#[test]
fn a_signal_during_wait_aborts_and_the_command_never_starts() {
    let redis = Server::start();
    redis.cmd::<()>(&["SET", "waited", "other-holder", "PX", "60000"]);
    for (signo, code) in [
        (libc::SIGINT, 130),
        (libc::SIGTERM, 143),
        (libc::SIGHUP, 129),
        (libc::SIGQUIT, 131),
    ] {
        let marker = redis.dir.path().join(format!("started-{signo}"));
        let mut cmd = Lockrun::on(&redis);
        cmd.args(["--wait", "60s", "waited", "touch"]).arg(&marker);
        let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
        wait_for_line(&mut child, "waiting");
        kill(child.id(), signo);
        let status = wait_timeout(&mut child, PATIENCE).unwrap();
        assert_eq!(status.code(), Some(code));
        assert!(!marker.exists(), "the command must not start");
        assert_eq!(redis.cmd::<String>(&["GET", "waited"]), "other-holder");
    }
}

/// Counts zombies among `parent`'s children.
pub(crate) fn zombie_children(parent: u32) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter(|stat| {
            let rest = &stat[stat.rfind(')').unwrap() + 1..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            f[0] == "Z" && f[1] == parent.to_string()
        })
        .count()
}

fn child_pids(parent: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let rest = &stat[stat.rfind(')')? + 1..];
            (rest.split_whitespace().nth(1)? == parent.to_string()).then_some(pid)
        })
        .collect()
}

#[test]
fn signals_ignored_on_entry_stay_ignored_for_the_command() {
    // `nohup lockrun ...` must still mean "the job survives SIGHUP": a signal ignored when
    // lockrun starts is neither caught nor forwarded, and the job inherits SIG_IGN.
    let redis = Server::start();
    let script = format!(
        "trap '' USR1; exec '{}' -r '{}' ign-entry -- sh -c 'kill -USR1 $$; echo survived'",
        lockrun_bin().display(),
        redis.url()
    );
    let mut cmd = Command::new("sh");
    cmd.args(["-c", &script]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out).trim(), "survived");
}

#[test]
fn subreaper_adopts_and_reaps_orphans() {
    let redis = Server::start();
    let ready = redis.dir.path().join("orphan.ready");
    // The inner shell starts a background `sleep` and exits: the sleep is orphaned, adopted by
    // lockrun (not init), and must be reaped when it exits while the job still runs.
    let script = format!("sh -c 'sleep 1.5 & touch \"{}\"'; sleep 6", ready.display());
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["--subreaper", "reap", "--", "sh", "-c"])
        .arg(script);
    let mut child = cmd.stderr(Stdio::null()).spawn().unwrap();
    let me = child.id();
    wait_for_file_of(&mut child, &ready);
    eventually("the orphan to be adopted by lockrun", || {
        child_pids(me).len() >= 2
    });
    thread::sleep(Duration::from_millis(2500));
    assert_eq!(child_pids(me).len(), 1, "only the direct child is left");
    assert_eq!(zombie_children(me), 0);
    assert_eq!(wait_timeout(&mut child, PATIENCE).unwrap().code(), Some(0));
}

#[test]
fn as_pid_1_it_reaps_zombies_and_keeps_the_exit_code() {
    let redis = Server::start();
    // unshare(1) makes lockrun PID 1 of a new PID namespace, as in a container. The job leaves
    // an orphan behind, waits for it to die, then counts zombies in the namespace.
    let script = "sh -c 'sleep 0.3 &'; sleep 2; \
                  z=0; for s in /proc/[0-9]*/stat; do case $(cut -d' ' -f3 $s 2>/dev/null) in Z) z=$((z+1));; esac; done; \
                  echo zombies=$z; exit 42";
    let mut cmd = Command::new("unshare");
    cmd.args(["--pid", "--fork", "--mount-proc"])
        .arg(lockrun_bin())
        .args(["-r", &redis.url(), "pid1", "--", "sh", "-c", script]);
    from_a_clean_caller(&mut cmd);
    let out = run(cmd);
    assert_eq!(stdout_of(&out).trim(), "zombies=0", "{}", stderr_of(&out));
    assert_eq!(out.status.code(), Some(42), "{}", stderr_of(&out));
    assert!(!redis.exists("pid1"));
}

/// A pseudo-terminal with a (non-interactive) bash as its session leader and controlling
/// process, the way a terminal emulator runs a shell; the shell runs `lockrun` in the
/// terminal's foreground process group and writes lockrun's exit code to `rc`.
struct Terminal {
    master: std::fs::File,
    output: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    child: std::process::Child,
}

impl Terminal {
    fn run(lockrun_args: &[&str], rc: &Path) -> Terminal {
        Self::start(lockrun_args, rc, LocalFlags::empty())
    }

    /// A terminal that stops a background process that writes to it (`stty tostop`), so
    /// output from a process that is not in the foreground shows as a hang.
    fn run_tostop(lockrun_args: &[&str], rc: &Path) -> Terminal {
        Self::start(lockrun_args, rc, LocalFlags::TOSTOP)
    }

    /// `flags`: terminal modes set on top of the defaults.
    fn start(lockrun_args: &[&str], rc: &Path, flags: LocalFlags) -> Terminal {
        let pty = nix::pty::openpty(None, None).expect("openpty");
        let slave: OwnedFd = pty.slave;
        if !flags.is_empty() {
            use nix::sys::termios::{tcgetattr, tcsetattr, SetArg};
            let mut t = tcgetattr(&slave).expect("tcgetattr");
            t.local_flags.insert(flags);
            tcsetattr(&slave, SetArg::TCSANOW, &t).expect("tcsetattr");
        }
        let slave_fd = slave.as_raw_fd();
        let quoted: Vec<String> = lockrun_args
            .iter()
            .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
            .collect();
        let script = format!(
            "'{}' {}; echo $? > '{}'",
            lockrun_bin().display(),
            quoted.join(" "),
            rc.display()
        );
        // bash, not dash: on Ctrl-C a non-interactive bash waits for its foreground child and
        // carries on unless the child died of SIGINT, as an interactive shell would.
        let mut cmd = Command::new("bash");
        cmd.args(["-c", &script])
            .stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave));
        from_a_clean_caller(&mut cmd);
        // SAFETY: setsid and ioctl are async-signal-safe; nothing allocates.
        unsafe {
            cmd.pre_exec(move || {
                // A new session whose controlling terminal is the pty: the shell becomes the
                // session leader and its process group the terminal's foreground group.
                nix::unistd::setsid()?;
                if libc::ioctl(0, libc::TIOCSCTTY as _, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let _ = slave_fd;
                Ok(())
            });
        }
        let child = cmd.spawn().expect("spawn shell on pty");
        let master = std::fs::File::from(pty.master);
        let output = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (mut reader, sink) = (master.try_clone().unwrap(), output.clone());
        thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Terminal {
            master,
            output,
            child,
        }
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.output.lock().unwrap()).into_owned()
    }

    fn wait_for(&self, needle: &str) {
        eventually(&format!("{needle:?} on the terminal"), || {
            self.screen().contains(needle)
        });
    }

    fn type_keys(&mut self, bytes: &[u8]) {
        self.master.write_all(bytes).unwrap();
    }

    fn finish(mut self, rc: &Path) -> (i32, String) {
        eventually("the shell to record lockrun's exit code", || {
            !lines(rc).is_empty()
        });
        let _ = wait_timeout(&mut self.child, PATIENCE);
        (lines(rc)[0].parse().unwrap(), self.screen())
    }
}

#[test]
fn terminal_ctrl_c_reaches_the_job_exactly_once() {
    let redis = Server::start();
    for group_flag in [None, Some("--no-group")] {
        let tag = group_flag.unwrap_or("group").trim_start_matches('-');
        let log = redis.dir.path().join(format!("ctrlc-{tag}.log"));
        let ready = redis.dir.path().join(format!("ctrlc-{tag}.ready"));
        let rc = redis.dir.path().join(format!("ctrlc-{tag}.rc"));
        let url = redis.url();
        let script = trapping("INT", &log, &ready);
        let mut args = vec!["-r", url.as_str()];
        args.extend(group_flag);
        args.extend(["tty", "--", "sh", "-c", script.as_str()]);
        let mut term = Terminal::run(&args, &rc);
        wait_for_file(&ready);
        term.type_keys(b"\x03");
        let (code, screen) = term.finish(&rc);
        assert_eq!(code, 0, "{screen}");
        assert_eq!(
            lines(&log),
            ["INT"],
            "{group_flag:?}: Ctrl-C delivered once; screen:\n{screen}"
        );
        assert!(screen.contains("redis lock released"), "{screen}");
    }
}

#[test]
fn terminal_job_can_read_from_the_tty_and_the_shell_gets_it_back() {
    let redis = Server::start();
    let out = redis.dir.path().join("read.out");
    let rc = redis.dir.path().join("read.rc");
    let url = redis.url();
    let script = format!(
        "printf 'name? '; read line; echo \"got:$line\" > '{}'; exit 5",
        out.display()
    );
    let mut term = Terminal::run(&["-r", &url, "tty-read", "--", "sh", "-c", &script], &rc);
    term.wait_for("name? ");
    term.type_keys(b"world\n");
    let (code, screen) = term.finish(&rc);
    assert_eq!(code, 5, "{screen}");
    assert_eq!(
        lines(&out),
        ["got:world"],
        "not stopped by SIGTTIN; screen:\n{screen}"
    );
    assert!(!redis.exists("tty-read"));
}

/// A command that cannot be executed after the terminal was handed to its group: lockrun must
/// take the terminal back before it says so, or its error line comes from the background (with
/// `stty tostop`, that stops lockrun, holding the lock, until someone kills it).
#[test]
fn terminal_comes_back_when_the_command_cannot_be_executed() {
    let redis = Server::start();
    let rc = redis.dir.path().join("missing.rc");
    let url = redis.url();
    let term = Terminal::run_tostop(
        &[
            "-r",
            &url,
            "tty-missing",
            "--",
            "definitely-not-a-command-xyz",
        ],
        &rc,
    );
    let (code, screen) = term.finish(&rc);
    assert_eq!(code, 127, "{screen}");
    assert!(screen.contains("command not found"), "{screen}");
    assert!(!redis.exists("tty-missing"));
}

fn process_state(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(
        stat[stat.rfind(')')? + 1..]
            .split_whitespace()
            .next()?
            .to_string(),
    )
}

#[test]
fn terminal_ctrl_z_stops_lockrun_with_the_job_and_continue_resumes_both() {
    let redis = Server::start();
    let ready = redis.dir.path().join("tstp.ready");
    let out = redis.dir.path().join("tstp.out");
    let rc = redis.dir.path().join("tstp.rc");
    let go = redis.dir.path().join("tstp.go");
    let url = redis.url();
    // The job runs until the test says go: however slow the terminal is to deliver Ctrl-Z,
    // the job is still there to be stopped.
    let script = format!(
        "echo $$ > '{}'; {}; echo done > '{}'",
        ready.display(),
        wait_for_go(&go),
        out.display()
    );
    let mut term = Terminal::run(&["-r", &url, "tstp", "--", "sh", "-c", &script], &rc);
    wait_for_file(&ready);
    let value: String = redis.cmd(&["GET", "tstp"]);
    let pid: u32 = value
        .split(" pid=")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    term.type_keys(b"\x1a");
    eventually("lockrun to stop along with its job", || {
        process_state(pid).as_deref() == Some("T")
    });
    let job: u32 = lines(&ready)[0].parse().unwrap();
    eventually("the job to be stopped too", || {
        process_state(job).as_deref() == Some("T")
    });
    std::fs::write(&go, "").unwrap();
    thread::sleep(Duration::from_millis(500));
    assert!(lines(&out).is_empty(), "the job stays stopped");
    kill(pid, libc::SIGCONT); // what the shell's `fg` does (plus handing the terminal back)
    let (code, screen) = term.finish(&rc);
    assert_eq!(code, 0, "{screen}");
    assert_eq!(lines(&out), ["done"], "{screen}");
    assert!(screen.contains("stopping lockrun with it"), "{screen}");
}

/// A SIGTERM from outside (kubelet, systemd, docker stop) forwarded to a job that ignores it
/// escalates: a forwarded stop signal starts the --kill-after clock, the job's group gets
/// SIGKILL when it runs out, and lockrun releases, records and exits with the job's end (137).
/// Without that the job would run to its natural end, and the platform's own SIGKILL would
/// then take lockrun with the lock held.
#[test]
fn a_forwarded_sigterm_escalates_to_sigkill_after_kill_after() {
    let redis = Server::start();
    let metrics = redis.dir.path().join("stop.prom");
    for signal in [libc::SIGTERM, libc::SIGINT] {
        let mut cmd = Lockrun::on(&redis);
        cmd.args(["--kill-after", "2s", "--metrics-file"])
            .arg(&metrics)
            .args([
                "stopped",
                "--",
                "sh",
                "-c",
                "trap '' TERM INT; sleep 8; echo natural-end",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let mut lines = wait_for_line(&mut child, "redis lock acquired");
        std::thread::sleep(Duration::from_millis(300));
        let sent = std::time::Instant::now();
        kill(child.id(), signal);
        let status = wait_timeout(&mut child, PATIENCE).expect("lockrun ends");
        let took = sent.elapsed();
        let err = lines.rest();
        assert_eq!(status.code(), Some(137), "{signal}: {err}");
        assert!(
            took >= Duration::from_millis(1900) && took < Duration::from_secs(6),
            "{signal}: SIGKILL after --kill-after (2 s), not the job's natural end (8 s): {took:?}"
        );
        let mut out = String::new();
        std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out).unwrap();
        assert!(!out.contains("natural-end"), "{signal}: {out}");
        assert!(err.contains("sending SIGKILL"), "{signal}: {err}");
        assert!(!redis.exists("stopped"), "{signal}: released");
        let text = std::fs::read_to_string(&metrics).unwrap();
        assert!(text.contains("outcome=\"aborted\"} 1"), "{signal}: {text}");
    }
}

/// SIGTERM while an acquire is in flight (a server that accepts and never answers) ends
/// lockrun at once with 128+N, not once the request times out: a stop signal before the
/// command starts gives back (token-checked, briefly bounded) whatever the attempt may have
/// taken, and exits.
#[test]
fn a_sigterm_during_an_acquire_in_flight_ends_lockrun_at_once() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "redis://127.0.0.1:{}",
        listener.local_addr().unwrap().port()
    );
    // Accepts (the kernel's backlog does) and never answers.
    let mut cmd = Lockrun::bare();
    cmd.args(["-r", &url, "-t", "9s", "-v", "silent", "--", "echo", "ran"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    thread::sleep(Duration::from_millis(500));
    let sent = std::time::Instant::now();
    kill(child.id(), libc::SIGTERM);
    let status = wait_timeout(&mut child, PATIENCE).expect("lockrun ends");
    let took = sent.elapsed();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(143), "{err}");
    assert!(
        took < Duration::from_millis(1500),
        "at once, not after the request timeout: {took:?}: {err}"
    );
    drop(listener);
}

/// A job that stops itself (SIGSTOP, no terminal to resume it from) would keep the lock
/// renewed forever, silently: it is said once, naming the pid; the lock stays held and
/// renewed until the job is continued or ends.
#[test]
fn a_job_that_stops_itself_is_said_once() {
    let redis = Server::start();
    let mut cmd = Lockrun::on(&redis);
    cmd.args([
        "-t",
        "1500ms",
        "stopped-self",
        "--",
        "sh",
        "-c",
        "kill -STOP $$; echo resumed",
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut lines = wait_for_line(&mut child, "redis lock acquired");
    let line = lines.wait_for("is stopped");
    assert!(line.contains("WARN"), "{line}");
    let pid: u32 = line
        .split("pid=")
        .nth(1)
        .and_then(|p| p.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("names the pid: {line}"));
    // Still held, still renewed across two TTLs.
    thread::sleep(Duration::from_secs(3));
    assert!(redis.exists("stopped-self"));
    kill(pid, libc::SIGCONT);
    let status = wait_timeout(&mut child, PATIENCE).expect("ends once continued");
    let rest = lines.rest();
    assert_eq!(status.code(), Some(0), "{rest}");
    assert_eq!(rest.matches("is stopped").count(), 1, "said once: {rest}");
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert_eq!(out, "resumed\n");
}

/// A job that is stopped (`kill -STOP`, a debugger) when lockrun stops it gets SIGCONT right
/// after the SIGTERM, as systemd and timeout(1) send it: it runs its own cleanup at once, instead
/// of staying stopped until the SIGKILL after --kill-after. Both ways lockrun stops a job: a stop
/// signal passed on, and --time-limit.
#[test]
fn a_stopped_job_is_continued_after_sigterm_to_clean_up() {
    let redis = Server::start();
    for (how, limit, code) in [
        ("SIGTERM to lockrun", None, 7),
        ("--time-limit", Some("1s"), 124),
    ] {
        let cleaned = redis.dir.path().join(format!("cleaned-{code}"));
        let script = format!(
            "trap 'echo cleaned > {}; exit 7' TERM; kill -STOP $$; sleep 30",
            cleaned.display()
        );
        let mut cmd = Lockrun::on(&redis);
        cmd.args(["--kill-after", "20s"]);
        if let Some(limit) = limit {
            cmd.args(["--time-limit", limit]);
        }
        cmd.args(["stopped-job", "--", "sh", "-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let started = std::time::Instant::now();
        let mut child = cmd.spawn().unwrap();
        let mut lines = wait_for_line(&mut child, "redis lock acquired");
        lines.wait_for("is stopped");
        if limit.is_none() {
            kill(child.id(), libc::SIGTERM);
        }
        let status = wait_timeout(&mut child, PATIENCE).expect("lockrun ends");
        let took = started.elapsed();
        let err = lines.rest();
        assert_eq!(status.code(), Some(code), "{how}: {err}");
        assert!(cleaned.exists(), "{how}: the job's trap never ran: {err}");
        assert!(!err.contains("SIGKILL"), "{how}: {err}");
        assert!(
            took < Duration::from_secs(10),
            "{how}: ended by its trap, not by SIGKILL after --kill-after (20 s): {took:?}"
        );
        assert!(!redis.exists("stopped-job"), "{how}: released");
    }
}

/// A double-forked daemon (its own session, so not in the job's group) adopted under
/// `--subreaper` is part of the job: once the command exits adopted descendants get SIGTERM,
/// SIGKILL after --kill-after, and the lock is held until they are gone, never released while
/// the daemon runs.
#[test]
fn subreaper_holds_the_lock_until_adopted_daemons_are_gone() {
    let redis = Server::start();
    for (trap, at_least) in [("", 0), ("trap '' TERM; ", 1)] {
        let pidfile = redis.dir.path().join(format!("daemon{}.pid", trap.len()));
        // The daemon lives 30 s at most, and leaves lockrun's stdout and stderr (or the test
        // would wait for it to close them).
        let daemon = format!(
            "( setsid sh -c \"{trap}echo \\$\\$ > '{}'; exec sleep 30\" >/dev/null 2>&1 & ); \
             while [ ! -s '{}' ]; do sleep 0.01; done; exit 0",
            pidfile.display(),
            pidfile.display()
        );
        let started = std::time::Instant::now();
        let mut cmd = Lockrun::on(&redis);
        cmd.args([
            "--subreaper",
            "--kill-after",
            "1s",
            "daemonized",
            "--",
            "sh",
            "-c",
            &daemon,
        ]);
        let out = run(cmd);
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(0), "{trap}: {err}");
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // SAFETY: signal 0 only checks for existence.
        let alive = unsafe { libc::kill(pid, 0) } == 0;
        if alive {
            kill(pid as u32, libc::SIGKILL);
        }
        assert!(
            !alive,
            "{trap}: the adopted daemon {pid} is gone when lockrun ends: {err}"
        );
        assert!(!redis.exists("daemonized"));
        assert!(
            started.elapsed() >= Duration::from_secs(at_least),
            "{trap}: {err}"
        );
        if at_least > 0 {
            assert!(err.contains("sending SIGKILL"), "{err}");
        }
    }
}

/// A short stall of lockrun (a VM freeze, SIGSTOP) past the moment it would stop the job
/// does not kill a job whose lease is intact (exit 76 while the key is still ours): waking
/// past that moment with the lease not over, lockrun renews first and stops the job only if
/// that renewal is not confirmed in time; SIGKILL still comes before the lease can end.
#[test]
fn a_short_stall_of_lockrun_does_not_cost_an_intact_lease() {
    let redis = Server::start();
    let mut cmd = Lockrun::on(&redis);
    cmd.args([
        "-t",
        "3s",
        "stalled",
        "--",
        "sh",
        "-c",
        "sleep 3; echo finished",
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut lines = wait_for_line(&mut child, "redis lock acquired");
    thread::sleep(Duration::from_millis(500));
    kill(child.id(), libc::SIGSTOP);
    thread::sleep(Duration::from_millis(1500));
    // A rival during the stall finds the key held: the lease is intact.
    let mut rival = Lockrun::on(&redis);
    rival.args(["stalled", "--", "true"]);
    assert_eq!(run(rival).status.code(), Some(75));
    kill(child.id(), libc::SIGCONT);
    let status = wait_timeout(&mut child, PATIENCE).expect("ends");
    let err = lines.rest();
    assert_eq!(status.code(), Some(0), "{err}");
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert_eq!(out, "finished\n", "{err}");
    assert!(!err.contains("redis lock lost"), "{err}");
    assert!(err.contains("renewing first"), "{err}");
    assert!(!redis.exists("stalled"));
}
