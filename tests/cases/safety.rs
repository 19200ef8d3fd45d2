//! Mutual exclusion and fencing under faults, one test (case 1–8) per fault that could break
//! them: a stalled stderr reader, a stall between the acquire and exec, a server that lost its
//! data, a job slow to exit, signals blocked at start, a script that fails after writing, a
//! lock named like lockrun's own keys, an inherited child-subreaper flag.

use crate::support::*;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// A pipe whose buffer is already full: whoever writes to it next blocks, like a log shipper
/// or cron mailer that stopped reading. Returns (read end, write end).
fn full_pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills `fds`; O_NONBLOCK only on our filling writes (cleared below).
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: fresh descriptors we own.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: fcntl on our own descriptor. The smallest buffer (one page) fills fastest.
    unsafe {
        libc::fcntl(w.as_raw_fd(), libc::F_SETPIPE_SZ, 4096);
        let flags = libc::fcntl(w.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(w.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK);
        let junk = [b'x'; 512];
        while libc::write(w.as_raw_fd(), junk.as_ptr().cast(), junk.len()) > 0 {}
        libc::fcntl(w.as_raw_fd(), libc::F_SETFL, flags);
    }
    (r, w)
}

fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => {
            let state = stat[stat.rfind(')').unwrap() + 1..]
                .split_whitespace()
                .next();
            state == Some("Z") || state == Some("X")
        }
    }
}

fn read_pid(path: &Path) -> u32 {
    wait_for_file(path);
    let mut pid = None;
    eventually("a pid in the file", || {
        pid = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok());
        pid.is_some()
    });
    pid.unwrap()
}

/// Case 1: a stalled stderr reader must not freeze supervision. A log write that blocked would
/// block the only runtime thread: the command would never start (or, later, never be stopped).
#[test]
fn a_full_stderr_pipe_never_stops_supervision() {
    let redis = Server::start();
    let pidfile = redis.dir.path().join("job.pid");
    let (read_end, write_end) = full_pipe();
    let mut cmd = Lockrun::on(&redis);
    // -v: every renewal logs a line, so the pipe stays full however long this runs.
    // TTL 2 s: the job is stopped when no renewal is confirmed for about 1.2 s, so a stall of
    // this shared VM between two renewals (every 667 ms) cannot pass for a lost lease; at
    // 600 ms a 170 ms stall in a full CI run does.
    cmd.args(["-v", "-t", "2s", "stalled", "--", "sh", "-c"])
        .arg(format!("echo $$ > '{}'; exec sleep 30", pidfile.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::from(write_end));
    let mut child = cmd.spawn().unwrap();
    // Our copy of the write end would keep the reader below from ever seeing EOF.
    drop(cmd);
    let job = read_pid(&pidfile);
    // Renewals keep the lease alive although nothing is logged: the key outlives its TTL.
    thread::sleep(Duration::from_millis(2600));
    if !redis.exists("stalled") {
        // Say why: drain the pipe and show what lockrun logged.
        let _ = child.kill();
        // SAFETY: kill(2) on the job's pid; it too holds the pipe's write end open.
        unsafe { libc::kill(job as i32, libc::SIGKILL) };
        let mut f = std::fs::File::from(read_end);
        let mut log = Vec::new();
        let _ = std::io::Read::read_to_end(&mut f, &mut log);
        panic!(
            "the lease must be renewed; lockrun: {:?}, its log:\n{}",
            child.wait(),
            String::from_utf8_lossy(&log)
        );
    }
    let mut rival = Lockrun::on(&redis);
    rival.args(["stalled", "true"]);
    assert_eq!(run(rival).status.code(), Some(75));
    // The lock is taken away: the job must be stopped at once, with nobody reading stderr.
    redis.cmd::<i64>(&["DEL", "stalled"]);
    let lost_at = Instant::now();
    eventually("the job to be stopped", || process_gone(job));
    assert!(
        lost_at.elapsed() < Duration::from_secs(3),
        "stopped only after {:?}",
        lost_at.elapsed()
    );
    // Drain: lockrun finishes, and its lines were kept, not lost. (Dropping and counting lines
    // when the queue overflows is a unit test in src/logging.rs.)
    let reader = thread::spawn(move || {
        let mut f = std::fs::File::from(read_end);
        let mut s = Vec::new();
        let _ = std::io::Read::read_to_end(&mut f, &mut s);
        String::from_utf8_lossy(&s).into_owned()
    });
    let status = wait_timeout(&mut child, PATIENCE).expect("lockrun exits");
    assert_eq!(status.code(), Some(76));
    let log = reader.join().unwrap();
    assert!(log.contains("redis lock lost"), "{log}");
}

/// A shared object that delays every `fork` and `clone` by `ms`: preloaded into lockrun, it
/// stalls it in the last step before exec, as a loaded machine, swapping or a stop signal can.
fn fork_staller(dir: &Path, ms: u32) -> std::path::PathBuf {
    let src = dir.join("stall_fork.c");
    let lib = dir.join("stall_fork.so");
    std::fs::write(
        &src,
        format!(
            "#define _GNU_SOURCE\n#include <dlfcn.h>\n#include <sched.h>\n#include <time.h>\n\
             #include <unistd.h>\n\
             static void stall(void) {{\n\
               struct timespec t = {{ {ms} / 1000, ({ms} % 1000) * 1000000L }};\n\
               nanosleep(&t, 0);\n}}\n\
             pid_t fork(void) {{\n\
               stall();\n\
               pid_t (*real)(void) = (pid_t (*)(void))dlsym(RTLD_NEXT, \"fork\");\n\
               return real();\n}}\n\
             int clone(int (*fn)(void *), void *stack, int flags, void *arg, ...) {{\n\
               stall();\n\
               int (*real)(int (*)(void *), void *, int, void *, ...) =\n\
                 (int (*)(int (*)(void *), void *, int, void *, ...))dlsym(RTLD_NEXT, \"clone\");\n\
               return real(fn, stack, flags, arg);\n}}\n"
        ),
    )
    .unwrap();
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&src)
        .arg("-ldl")
        .output()
        .expect("cc is needed for this test (apt-get install gcc)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    lib
}

/// Case 2: a lease that expired between the acquire reply and exec must not start the command.
#[test]
fn the_command_never_starts_on_a_lease_that_already_expired() {
    let redis = Server::start();
    let marker = redis.dir.path().join("started");
    let mut cmd = Lockrun::on(&redis);
    cmd.env("LD_PRELOAD", fork_staller(redis.dir.path(), 400))
        .args(["-t", "200ms", "expired", "--", "touch"])
        .arg(&marker);
    let out = run(cmd);
    assert!(!marker.exists(), "the command ran on an expired lease");
    assert_eq!(out.status.code(), Some(75), "{}", stderr_of(&out));
    assert!(stderr_of(&out).contains("lease expired before the command could start"));
    assert!(!redis.exists("expired"));

    // With --wait, lockrun tries again (and here stalls again, until the wait is over).
    let mut cmd = Lockrun::on(&redis);
    cmd.env("LD_PRELOAD", fork_staller(redis.dir.path(), 400))
        .args(["-t", "200ms", "--wait", "1s", "expired", "--", "touch"])
        .arg(&marker);
    let out = run(cmd);
    assert!(!marker.exists(), "the command ran on an expired lease");
    assert_eq!(out.status.code(), Some(75), "{}", stderr_of(&out));
    assert!(stderr_of(&out).matches("lease expired before").count() >= 2);

    // A stall shorter than the lease changes nothing.
    let mut cmd = Lockrun::on(&redis);
    cmd.env("LD_PRELOAD", fork_staller(redis.dir.path(), 20))
        .args(["-t", "2s", "expired", "--", "touch"])
        .arg(&marker);
    assert_eq!(run(cmd).status.code(), Some(0));
    assert!(marker.exists());
}

/// Case 3: fencing numbers keep increasing when the server lost its data (restart without
/// persistence, failover to a lagging replica, restored snapshot; FLUSHALL stands in for all).
#[test]
fn fences_never_go_backwards_after_the_server_lost_its_data() {
    let redis = Server::start();
    let fence = |redis: &Server| {
        let mut cmd = Lockrun::on(redis);
        cmd.args(["fenced-restart", "--", "sh", "-c", "echo $LOCKRUN_FENCE"]);
        let out = run(cmd);
        assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
        stdout_of(&out).trim().parse::<u64>().unwrap()
    };
    let before = [fence(&redis), fence(&redis), fence(&redis)];
    redis.cmd::<()>(&["FLUSHALL"]);
    let after = fence(&redis);
    assert!(
        before.windows(2).all(|w| w[0] < w[1]) && after > before[2],
        "{before:?} then {after}"
    );
}

/// Case 4: when renewals fail, the job must be gone before the lease can expire, even one
/// that takes its time to exit after SIGTERM (default --kill-after 10s, longer than TTL/3).
/// TTL 2 s: the job's 0.3 s exit must fit in the grace (TTL/3) to write its end time; at
/// 1 s (grace 333 ms) a slow day here lets SIGKILL come first, and the test has no end time.
#[test]
fn a_slow_exiting_job_is_gone_before_the_next_holder_starts() {
    let redis = Server::start();
    let dir = redis.dir.path();
    let (job_end, next_start) = (dir.join("job.end"), dir.join("next.start"));
    let ready = dir.join("ready");
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["-t", "2s", "slow-exit", "--", "bash", "-c"])
        .arg(format!(
            "trap 'sleep 0.3; date +%s%N > {}; exit 0' TERM; touch {}; sleep 30 & wait",
            job_end.display(),
            ready.display()
        ))
        .stderr(Stdio::piped());
    let mut holder = cmd.spawn().unwrap();
    let mut lines = Lines::of(&mut holder);
    wait_for_file_of(&mut holder, &ready);
    // Cut the holder off: its socket path disappears (reconnects fail) and its connection is
    // killed; the next holder uses the server's new path.
    let moved = dir.join("moved.sock");
    std::fs::rename(&redis.socket, &moved).unwrap();
    let mut c = redis::Client::open(format!("unix://{}", moved.display()))
        .unwrap()
        .get_connection()
        .unwrap();
    redis::cmd("CLIENT")
        .arg(&["KILL", "TYPE", "normal"][..])
        .query::<i64>(&mut c)
        .unwrap();
    let mut next = Lockrun::bare();
    next.arg("-r")
        .arg(format!("unix://{}", moved.display()))
        .args(["--wait", "20s", "slow-exit", "--", "sh", "-c"])
        .arg(format!("date +%s%N > {}", next_start.display()));
    let out = run(next);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(
        wait_timeout(&mut holder, PATIENCE).unwrap().code(),
        Some(76)
    );
    let ns = |p: &Path| -> i128 { std::fs::read_to_string(p).unwrap().trim().parse().unwrap() };
    let gap_ms = (ns(&next_start) - ns(&job_end)) / 1_000_000;
    assert!(
        gap_ms > 0,
        "the job ran {}ms into the next holder's turn: {}",
        -gap_ms,
        lines.rest()
    );
}

/// Case 5: a parent that starts lockrun with signals blocked (the mask survives exec).
fn with_blocked(cmd: &mut Command, signals: &'static [i32]) {
    // SAFETY: only sigprocmask between fork and exec (async-signal-safe); std has just reset
    // the mask, so this is what lockrun inherits.
    unsafe {
        cmd.pre_exec(move || {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for &s in signals {
                libc::sigaddset(&mut set, s);
            }
            libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            Ok(())
        });
    }
}

#[test]
fn signals_blocked_at_start_are_still_handled_and_the_mask_goes_back_to_the_command() {
    let redis = Server::start();
    // SIGCHLD blocked: the end of the command must still be noticed.
    let mut cmd = Lockrun::on(&redis);
    // grep itself, not `sh -c`: dash clears its signal mask when it starts.
    cmd.args([
        "-t",
        "300ms",
        "masked",
        "--",
        "grep",
        "SigBlk",
        "/proc/self/status",
    ]);
    with_blocked(&mut cmd, &[libc::SIGCHLD, libc::SIGTERM]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert!(!redis.exists("masked"), "released");
    // The command gets the mask lockrun was started with.
    let blk = u64::from_str_radix(stdout_of(&out).split_whitespace().nth(1).unwrap(), 16).unwrap();
    let bit = |s: i32| 1u64 << (s - 1);
    assert_eq!(
        blk & (bit(libc::SIGCHLD) | bit(libc::SIGTERM)),
        bit(libc::SIGCHLD) | bit(libc::SIGTERM),
        "{blk:x}"
    );

    // SIGTERM blocked: a SIGTERM to lockrun must still reach the job.
    let ready = redis.dir.path().join("ready");
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["masked", "--", "sh", "-c"]).arg(format!(
        "trap 'exit 7' TERM; touch '{}'; while :; do sleep 0.05; done",
        ready.display()
    ));
    with_blocked(&mut cmd, &[libc::SIGTERM]);
    let mut child = cmd.stderr(Stdio::null()).spawn().unwrap();
    wait_for_file_of(&mut child, &ready);
    kill(child.id(), libc::SIGTERM);
    let status = wait_timeout(&mut child, Duration::from_secs(10));
    if status.is_none() {
        let _ = child.kill();
    }
    assert_eq!(status.and_then(|s| s.code()), Some(7));
}

/// Case 6: a script that fails after writing must not leave the lock behind. A fencing counter
/// that is not a number makes the acquire script fail after its SET. Both `{spoiled}:fence`
/// and lockrun's counter `lockrun:fence:{spoiled}` hold a non-number: only the second is
/// lockrun's (case 7), and either way the key must not stay.
#[test]
fn a_failing_acquire_leaves_no_orphan_lock() {
    let redis = Server::start();
    for counter in ["{spoiled}:fence", "lockrun:fence:{spoiled}"] {
        redis.cmd::<()>(&["SET", counter, "not-a-number"]);
    }
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["-t", "1h", "spoiled", "true"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(64), "{}", stderr_of(&out));
    assert!(
        stderr_of(&out).contains("fencing counter"),
        "{}",
        stderr_of(&out)
    );
    assert!(
        !redis.exists("spoiled"),
        "orphan lock left for the whole TTL"
    );
}

/// Case 7: lock names cannot reach lockrun's own keys.
#[test]
fn lock_names_never_collide_with_lockruns_own_keys() {
    let redis = Server::start();
    let fence_of = |key: &str| {
        let mut cmd = Lockrun::on(&redis);
        cmd.args([key, "--", "sh", "-c", "echo $LOCKRUN_FENCE"]);
        let out = run(cmd);
        assert_eq!(out.status.code(), Some(0), "{key}: {}", stderr_of(&out));
        stdout_of(&out).trim().parse::<u64>().unwrap()
    };
    let first = fence_of("a");
    // A lock named `{a}:fence` (what a helper key of `a` would be named if helper keys shared
    // the lock names' namespace), held while `a` is used.
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["{a}:fence", "--", "sleep", "1"]);
    let mut other = cmd.stderr(Stdio::piped()).spawn().unwrap();
    wait_for_line(&mut other, "redis lock acquired");
    let second = fence_of("a");
    assert_eq!(wait_timeout(&mut other, PATIENCE).unwrap().code(), Some(0));
    assert!(second > first, "{first} then {second}");
    assert!(
        fence_of("a") > second,
        "a's counter survived the other lock's release"
    );
    assert!(!redis.exists("a") && !redis.exists("{a}:fence"));

    // Names in lockrun's own namespace are refused before anything is touched.
    for key in ["lockrun:fence:{a}", "lockrun:x"] {
        let mut cmd = Lockrun::on(&redis);
        cmd.args([key, "true"]);
        let out = run(cmd);
        assert_eq!(out.status.code(), Some(64), "{key}");
        let err = stderr_of(&out);
        assert!(
            err.contains("reserved") && err.lines().count() == 1,
            "{err}"
        );
    }
}

/// Case 8: started by a process that made itself a child subreaper (the flag survives exec),
/// lockrun adopts orphans and must reap them.
#[test]
fn an_inherited_subreaper_flag_means_orphans_are_reaped() {
    let redis = Server::start();
    let ready = redis.dir.path().join("orphans.ready");
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["inherited-reaper", "--", "sh", "-c"])
        .arg(format!(
            "for i in 1 2 3 4 5 6 7 8 9 10; do sh -c 'sleep 0.05 &'; done; touch '{}'; sleep 3",
            ready.display()
        ));
    // SAFETY: prctl only, between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
            Ok(())
        });
    }
    let mut child = cmd.stderr(Stdio::null()).spawn().unwrap();
    wait_for_file_of(&mut child, &ready);
    thread::sleep(Duration::from_millis(800));
    let zombies = crate::cases::supervision::zombie_children(child.id());
    assert_eq!(zombies, 0, "orphans adopted but never reaped");
    assert_eq!(wait_timeout(&mut child, PATIENCE).unwrap().code(), Some(0));
}
