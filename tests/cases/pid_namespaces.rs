//! lockrun as PID 1 of a PID namespace (a container; here `unshare --pid --fork`) whatever /proc
//! it finds: the namespace's own (`--mount-proc`), the host's (no `--mount-proc`), an empty one
//! (a tmpfs over it, in a private mount namespace) or none at all (a chroot without it); and
//! lockrun below PID 1 of a namespace that sees the host's, plain and with `--subreaper`. In
//! each it must exit with the command's code as soon as the job is gone, hold the lock while a
//! backgrounded member of the job or a daemon it left lives, SIGKILL what is left after
//! `--kill-after` where it can reach it, and never busy-wait. Root only: PID and mount
//! namespaces, chroot.

use crate::support::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// The /proc lockrun finds in its PID namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Proc {
    /// The namespace's own (`unshare --mount-proc`).
    Own,
    /// The host's: the namespace never mounted its own.
    Hosts,
    /// A tmpfs over /proc: the directory is there, with nothing in it.
    Empty,
    /// No /proc at all: a chroot holding lockrun, its libraries and a static busybox.
    Absent,
}

/// Where lockrun runs in the new PID namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    Pid1,
    /// The child of a shell that is PID 1 and waits for it.
    BelowPid1,
    /// The same, with `--subreaper`.
    SubreaperBelowPid1,
}

/// A PID namespace for lockrun; `dir` holds the job's files (and, for [`Proc::Absent`], is the
/// root of the chroot).
struct Sandbox {
    proc: Proc,
    place: Place,
    dir: tempfile::TempDir,
}

fn require_root() {
    // SAFETY: geteuid(2) has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    assert!(
        root,
        "the PID-namespace tests make PID and mount namespaces and a chroot: that takes root. \
         Run them as root (CI does), or leave them out with `--skip pid_namespaces`"
    );
}

impl Sandbox {
    fn new(proc: Proc, place: Place) -> Sandbox {
        require_root();
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("job")).unwrap();
        if proc == Proc::Absent {
            make_chroot(dir.path());
        }
        Sandbox { proc, place, dir }
    }

    /// What a failure message says of the sandbox.
    fn what(&self) -> String {
        format!("/proc {:?}, lockrun {:?}", self.proc, self.place)
    }

    /// The job's directory, as the test sees it.
    fn job(&self) -> PathBuf {
        self.dir.path().join("job")
    }

    /// The job's directory, as the job sees it.
    fn job_inside(&self) -> PathBuf {
        match self.proc {
            Proc::Absent => PathBuf::from("/job"),
            _ => self.job(),
        }
    }

    /// `lockrun -r <redis> <args>` in the namespace, stderr to `name.err` in the job's
    /// directory. unshare's `--kill-child` takes the namespace down with it, so a test that
    /// gives up leaves nothing behind.
    fn start(&self, redis: &Server, args: &[&str], name: &str) -> Run {
        let mut cmd = Command::new("unshare");
        from_a_clean_caller(&mut cmd);
        cmd.args(["--pid", "--fork", "--kill-child"]);
        let (program, url): (PathBuf, String) = match self.proc {
            Proc::Own => {
                cmd.arg("--mount-proc");
                (lockrun_bin().into(), redis.url())
            }
            Proc::Hosts => (lockrun_bin().into(), redis.url()),
            Proc::Empty => {
                cmd.args(["--mount", "sh", "-c"])
                    .arg(r#"mount -t tmpfs lockrun-empty /proc && exec "$0" "$@""#);
                (lockrun_bin().into(), redis.url())
            }
            Proc::Absent => {
                // The server's directory (its unix socket) bound into the chroot, in a mount
                // namespace of the test's own.
                cmd.args(["--mount", "sh", "-c"])
                    .arg(concat!(
                        r#"mount --bind "$1" "$2/srv" && r=$2 && shift 2 && "#,
                        r#"c=$(command -v chroot) && export PATH=/bin && exec "$c" "$r" "$@""#
                    ))
                    .arg("sh")
                    .arg(redis.dir.path())
                    .arg(self.dir.path());
                let socket = redis.socket.file_name().unwrap().to_str().unwrap();
                ("/lockrun".into(), format!("unix:///srv/{socket}"))
            }
        };
        if self.place != Place::Pid1 {
            // A shell is PID 1 and waits for lockrun.
            cmd.args(["sh", "-c", r#""$@"; exit $?"#, "sh"]);
        }
        cmd.arg(program).arg("-r").arg(url);
        if self.place == Place::SubreaperBelowPid1 {
            cmd.arg("--subreaper");
        }
        cmd.args(args);
        let err = self.job().join(format!("{name}.err"));
        cmd.stdout(Stdio::null())
            .stderr(std::fs::File::create(&err).unwrap());
        let started = Instant::now();
        let child = cmd.spawn().expect("spawn unshare");
        Run {
            child: Some(child),
            err,
            started,
        }
    }
}

/// A root for chroot(2) with `/lockrun` and the libraries `ldd` names for it, busybox (static)
/// as `/bin/sh`, `/bin/sleep` and `/bin/setsid`, `/dev/null`, `/srv` (for the server's socket) and `/job`; and no `/proc`.
fn make_chroot(root: &Path) {
    let copy = |from: &Path, to: &Path| {
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(from, to)
            .unwrap_or_else(|e| panic!("{} -> {}: {e}", from.display(), to.display()));
    };
    copy(lockrun_bin(), &root.join("lockrun"));
    let ldd = Command::new("ldd")
        .arg(lockrun_bin())
        .output()
        .expect("ldd");
    // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)", "/lib64/ld-linux-x86-64.so.2 (0x…)";
    // nothing for a static build ("not a dynamic executable").
    for lib in String::from_utf8_lossy(&ldd.stdout)
        .split_whitespace()
        .filter(|w| w.starts_with('/'))
    {
        copy(Path::new(lib), &root.join(&lib[1..]));
    }
    let busybox = Path::new("/usr/bin/busybox");
    assert!(
        busybox.is_file(),
        "the test without /proc runs the job with busybox's static sh in a chroot: install \
         busybox-static"
    );
    copy(busybox, &root.join("bin/busybox"));
    for applet in ["sh", "sleep", "setsid"] {
        std::os::unix::fs::symlink("busybox", root.join("bin").join(applet)).unwrap();
    }
    std::fs::create_dir(root.join("srv")).unwrap();
    // A non-interactive shell runs a background job with its stdin from /dev/null.
    std::fs::create_dir(root.join("dev")).unwrap();
    let null = std::ffi::CString::new(root.join("dev/null").into_os_string().into_encoded_bytes())
        .unwrap();
    // SAFETY: mknod(2) with a NUL-terminated path; /dev/null is character device 1:3.
    let rc = unsafe { libc::mknod(null.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) };
    assert_eq!(
        rc,
        0,
        "mknod /dev/null: {}",
        std::io::Error::last_os_error()
    );
    assert!(!root.join("proc").exists());
}

/// unshare, running lockrun in its namespace.
struct Run {
    child: Option<Child>,
    err: PathBuf,
    started: Instant,
}

/// How a run ended: lockrun's exit code (unshare passes it on), how long it took, the CPU time
/// of the whole run (unshare, lockrun and the job: getrusage of the reaped child), stderr.
struct Ended {
    code: Option<i32>,
    took: Duration,
    cpu: Duration,
    err: String,
}

impl Run {
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.err).unwrap_or_default()).into_owned()
    }

    /// lockrun's pid as the test sees it: the process below unshare that runs the binary.
    fn lockrun_pid(&self) -> u32 {
        let unshare = self.child.as_ref().unwrap().id();
        let mut found = None;
        eventually("lockrun to run in the namespace", || {
            found = descendants(unshare).into_iter().find(|&p| {
                std::fs::read_to_string(format!("/proc/{p}/comm"))
                    .is_ok_and(|c| c.trim() == "lockrun")
            });
            found.is_some()
        });
        found.unwrap()
    }

    /// Waits for lockrun to say `needle`; fails at once if it has ended first.
    fn wait_for_log(&self, needle: &str) {
        let start = Instant::now();
        while !self.stderr().contains(needle) {
            assert!(
                !self.ended(),
                "lockrun ended before it said {needle:?} (the job was still running):\n{}",
                self.stderr()
            );
            assert!(
                start.elapsed() < PATIENCE,
                "no {needle:?} from lockrun:\n{}",
                self.stderr()
            );
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Whether unshare has ended, without reaping it (`finish` does).
    fn ended(&self) -> bool {
        let pid = self.child.as_ref().unwrap().id();
        // SAFETY: siginfo_t is plain data waitid fills; WNOWAIT leaves the child waitable.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let rc = unsafe {
            libc::waitid(
                libc::P_PID,
                pid,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        // SAFETY: si_pid is set by a waitid that found a child, and 0 otherwise.
        rc == 0 && unsafe { info.si_pid() } != 0
    }

    /// Waits at most PATIENCE for unshare (and so lockrun) to end; a run still going then is
    /// killed (the namespace with it) and fails the test.
    fn finish(mut self) -> Ended {
        let pid = self.child.as_ref().unwrap().id() as i32;
        loop {
            let mut status = 0;
            // SAFETY: rusage is plain data wait4 fills; the pid is our own child.
            let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
            let rc = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
            assert!(rc >= 0, "wait4: {}", std::io::Error::last_os_error());
            if rc == pid {
                // Reaped here: the Child must not be waited for again.
                std::mem::forget(self.child.take());
                let time = |t: libc::timeval| {
                    Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
                };
                return Ended {
                    code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
                    took: self.started.elapsed(),
                    cpu: time(usage.ru_utime) + time(usage.ru_stime),
                    err: self.stderr(),
                };
            }
            if self.started.elapsed() > PATIENCE {
                panic!(
                    "lockrun still running after {PATIENCE:?}:\n{}",
                    self.stderr()
                );
            }
            thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // unshare's --kill-child takes lockrun, and with it the namespace, along.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// CPU time `pid` has used itself (not its children), from /proc/<pid>/stat.
fn cpu_of(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("lockrun's stat");
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    // utime and stime: fields 14 and 15 of the line, 11 and 12 after the command's name.
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_millis(ticks * 1000 / hz)
}

/// What a waiting lockrun may use of a CPU in a second: a busy loop uses all of it.
const IDLE_CPU: Duration = Duration::from_millis(100);

/// The command exits 3 and leaves nothing: lockrun exits 3 at once, with the key released.
fn exits_with_the_command(sandbox: &Sandbox, redis: &Server) {
    let key = "pidns-exit";
    let run = sandbox.start(redis, &[key, "--", "sh", "-c", "exit 3"], "exit");
    let end = run.finish();
    let what = sandbox.what();
    assert_eq!(end.code, Some(3), "{what}: the command's code: {}", end.err);
    assert!(
        end.took < Duration::from_secs(5),
        "{what}: exits promptly, not in {:?}: {}",
        end.took,
        end.err
    );
    assert!(
        end.cpu < Duration::from_millis(500),
        "{what}: CPU {:?}: {}",
        end.cpu,
        end.err
    );
    assert!(
        !end.err.contains("lives on"),
        "{what}: nothing was left: {}",
        end.err
    );
    assert!(!redis.exists(key), "{what}: the key is released");
}

/// The command backgrounds a member of its group (which ignores the SIGTERM lockrun sends once
/// the command exits, then works until the test says go) and exits 5: the lock stays held, by
/// the same holder, with lockrun idle, until the member is gone; then lockrun exits 5.
fn holds_the_lock_while_a_backgrounded_member_lives(sandbox: &Sandbox, redis: &Server) {
    let key = "pidns-bg";
    let (job, inside) = (sandbox.job(), sandbox.job_inside());
    let script = format!(
        "(trap 'echo got-TERM >> {j}/bg.log' TERM; : > {j}/bg.ready; {wait}; echo finished >> {j}/bg.log) & \
         {ready}; exit 5",
        j = inside.display(),
        wait = wait_for_go(&inside.join("bg.go")),
        ready = wait_for_go(&inside.join("bg.ready")),
    );
    let args = [key, "--kill-after", "20s", "--", "sh", "-c", &script];
    let run = sandbox.start(redis, &args, "bg");
    let what = sandbox.what();
    let lockrun = run.lockrun_pid();
    run.wait_for_log("process group lives on");
    let holder: String = redis.cmd(&["GET", key]);
    let before = cpu_of(lockrun);
    thread::sleep(Duration::from_secs(1));
    let used = cpu_of(lockrun) - before;
    assert_eq!(
        redis.try_cmd::<String>(&["GET", key]).as_deref(),
        Some(holder.as_str()),
        "{what}: held by the same holder while the member lives: {}",
        run.stderr()
    );
    assert!(
        !lines(&job.join("bg.log")).contains(&"finished".to_string()),
        "{what}: the member still runs"
    );
    assert!(
        used < IDLE_CPU,
        "{what}: lockrun used {used:?} of CPU in 1 s of waiting: {}",
        run.stderr()
    );
    std::fs::write(job.join("bg.go"), "").unwrap();
    let end = run.finish();
    assert_eq!(end.code, Some(5), "{what}: the command's code: {}", end.err);
    assert_eq!(
        lines(&job.join("bg.log")),
        ["got-TERM", "finished"],
        "{what}: one SIGTERM: {}",
        end.err
    );
    assert!(
        !redis.exists(key),
        "{what}: released once the member is gone"
    );
    assert!(
        end.err.contains("redis lock released"),
        "{what}: {}",
        end.err
    );
}

/// The command leaves a daemon (its own session, so in no group of lockrun's) that ignores
/// SIGTERM, and exits 6: lockrun, PID 1, adopts it, holds the lock until `--kill-after` has run
/// out and its SIGKILL has reached the daemon, then exits 6.
fn sigkills_an_adopted_daemon_after_kill_after(sandbox: &Sandbox, redis: &Server) {
    let key = "pidns-daemon";
    let inside = sandbox.job_inside();
    let script = format!(
        "( setsid sh -c \"trap '' TERM; : > {j}/daemon.ready; exec sleep 30\" >/dev/null 2>&1 & ); \
         {ready}; exit 6",
        j = inside.display(),
        ready = wait_for_go(&inside.join("daemon.ready")),
    );
    let kill_after = Duration::from_secs(1);
    let args = [key, "--kill-after", "1s", "--", "sh", "-c", &script];
    let run = sandbox.start(redis, &args, "daemon");
    let lockrun = run.lockrun_pid();
    let what = sandbox.what();
    run.wait_for_log("lives on");
    let before = cpu_of(lockrun);
    thread::sleep(kill_after / 2);
    let used = cpu_of(lockrun) - before;
    assert!(
        redis.exists(key),
        "{what}: held while the daemon lives: {}",
        run.stderr()
    );
    assert!(
        used < IDLE_CPU / 2,
        "{what}: lockrun used {used:?} of CPU in 0.5 s of waiting: {}",
        run.stderr()
    );
    let end = run.finish();
    assert_eq!(end.code, Some(6), "{what}: the command's code: {}", end.err);
    assert!(
        end.took >= kill_after,
        "{what}: held until --kill-after ran out: {:?}: {}",
        end.took,
        end.err
    );
    assert!(
        end.took < kill_after + Duration::from_secs(5),
        "{what}: its SIGKILL ended the daemon: {:?}: {}",
        end.took,
        end.err
    );
    assert!(end.err.contains("sending SIGKILL"), "{what}: {}", end.err);
    assert!(
        !redis.exists(key),
        "{what}: released once the daemon is gone"
    );
}

/// `--subreaper` below PID 1, with the host's /proc: the command leaves a daemon (its own
/// session) that ignores SIGTERM, and exits 7. lockrun adopts it but has no way to name it to
/// kill(2) (and kill(-1) would reach every process of the user's): it says so, and holds the
/// lock, idle, until the daemon ends by itself; then it exits 7.
fn holds_the_lock_until_a_daemon_it_cannot_signal_ends(sandbox: &Sandbox, redis: &Server) {
    let key = "pidns-unreachable";
    let (job, inside) = (sandbox.job(), sandbox.job_inside());
    let script = format!(
        "( setsid sh -c \"trap '' TERM; : > {j}/unreachable.ready; {wait}; echo finished >> {j}/unreachable.log\" >/dev/null 2>&1 & ); \
         {ready}; exit 7",
        j = inside.display(),
        // Inside double quotes: its variables are the daemon's, not the command's.
        wait = wait_for_go(&inside.join("unreachable.go")).replace('$', "\\$"),
        ready = wait_for_go(&inside.join("unreachable.ready")),
    );
    let args = [key, "--kill-after", "500ms", "--", "sh", "-c", &script];
    let run = sandbox.start(redis, &args, "unreachable");
    let lockrun = run.lockrun_pid();
    let what = sandbox.what();
    run.wait_for_log("sending SIGKILL");
    let before = cpu_of(lockrun);
    thread::sleep(Duration::from_secs(1));
    let used = cpu_of(lockrun) - before;
    assert!(
        redis.exists(key),
        "{what}: held while the daemon lives: {}",
        run.stderr()
    );
    assert!(
        lines(&job.join("unreachable.log")).is_empty(),
        "{what}: the daemon still runs"
    );
    assert!(
        used < IDLE_CPU,
        "{what}: lockrun used {used:?} of CPU in 1 s of waiting: {}",
        run.stderr()
    );
    assert!(
        run.stderr().contains("cannot be listed, nor signalled"),
        "{what}: says why the daemon lives on: {}",
        run.stderr()
    );
    std::fs::write(job.join("unreachable.go"), "").unwrap();
    let end = run.finish();
    assert_eq!(end.code, Some(7), "{what}: the command's code: {}", end.err);
    assert_eq!(lines(&job.join("unreachable.log")), ["finished"], "{what}");
    assert!(
        !redis.exists(key),
        "{what}: released once the daemon is gone"
    );
}

/// As PID 1 of the namespace, whatever /proc it sees: the command's code, the lock held while
/// a backgrounded member lives, an adopted daemon SIGKILLed after --kill-after.
fn as_pid_1_every_promise_holds(proc: Proc) {
    let redis = Server::start();
    let sandbox = Sandbox::new(proc, Place::Pid1);
    exits_with_the_command(&sandbox, &redis);
    holds_the_lock_while_a_backgrounded_member_lives(&sandbox, &redis);
    sigkills_an_adopted_daemon_after_kill_after(&sandbox, &redis);
}

#[test]
fn pid_namespace_pid_1_with_its_own_proc() {
    as_pid_1_every_promise_holds(Proc::Own);
}

#[test]
fn pid_namespace_pid_1_with_the_hosts_proc() {
    as_pid_1_every_promise_holds(Proc::Hosts);
}

#[test]
fn pid_namespace_pid_1_with_an_empty_proc() {
    as_pid_1_every_promise_holds(Proc::Empty);
}

#[test]
fn pid_namespace_pid_1_without_proc() {
    as_pid_1_every_promise_holds(Proc::Absent);
}

/// Below PID 1 (no subreaper), with the host's /proc: the group is the kernel's answer alone.
#[test]
fn pid_namespace_below_pid_1_with_the_hosts_proc() {
    let redis = Server::start();
    let sandbox = Sandbox::new(Proc::Hosts, Place::BelowPid1);
    exits_with_the_command(&sandbox, &redis);
    holds_the_lock_while_a_backgrounded_member_lives(&sandbox, &redis);
}

#[test]
fn pid_namespace_subreaper_below_pid_1_with_the_hosts_proc() {
    let redis = Server::start();
    let sandbox = Sandbox::new(Proc::Hosts, Place::SubreaperBelowPid1);
    exits_with_the_command(&sandbox, &redis);
    holds_the_lock_while_a_backgrounded_member_lives(&sandbox, &redis);
    holds_the_lock_until_a_daemon_it_cannot_signal_ends(&sandbox, &redis);
}
