//! The real job: the command started with `spawn`, and its processes as the kernel (and, when
//! it is this PID namespace's own, /proc) shows them. Every syscall the supervisor makes on the
//! job is here or, for what /proc says, in `procfs.rs`.

use super::procfs::{adopted, group_has_live_member, proc_is_ours};
use super::{Options, Processes, To};
use crate::exit_codes::ExitCode;
use crate::signals;
use crate::spawn;
use nix::errno::Errno;
use nix::sys::signal::{self as nsig, SigSet, SigmaskHow, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{self, Pid};
use std::ffi::OsString;
use std::io;
use std::os::fd::{BorrowedFd, RawFd};
use std::time::Duration;
use tokio::time::Instant;
use tracing::{debug, info, warn};

/// exec(2) reports ENOENT both for a missing program and for a script whose `#!` interpreter is
/// missing; the second reads as nonsense ("command not found" for a file that is there), so
/// find the script the way exec did and name what is really missing.
fn missing_interpreter(program: &std::ffi::OsStr) -> Option<String> {
    use std::io::Read;
    use std::os::unix::ffi::OsStrExt;
    use std::path::PathBuf;
    let path = if program.as_bytes().contains(&b'/') {
        PathBuf::from(program)
    } else {
        let dirs = std::env::var_os("PATH")?;
        std::env::split_paths(&dirs)
            .map(|d| d.join(program))
            .find(|p| p.is_file())?
    };
    let mut head = [0u8; 256];
    let n = std::fs::File::open(&path).ok()?.read(&mut head).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = &line[..line.iter().position(|&b| b == b'\n').unwrap_or(line.len())];
    // The kernel ends the interpreter's path at a space or a tab only: a CR (a script saved with
    // Windows line endings) is part of it, and is why it was not found.
    let interp = String::from_utf8_lossy(line)
        .trim_start_matches([' ', '\t'])
        .split([' ', '\t'])
        .next()?
        .to_string();
    (!std::path::Path::new(&interp).exists()).then_some(interp)
}

#[derive(Debug)]
pub enum SpawnError {
    NotFound(String),
    NotExecutable(String),
    /// No process could be made for the command (the process limit, no memory).
    NoProcess(String),
    /// The `start_by` moment had passed when the command was about to be executed.
    LeaseExpired,
}

impl SpawnError {
    pub fn exit_code(&self) -> ExitCode {
        match self {
            SpawnError::NotFound(_) => ExitCode::NotFound,
            SpawnError::NotExecutable(_) => ExitCode::NotExecutable,
            SpawnError::NoProcess(_) => ExitCode::OsError,
            SpawnError::LeaseExpired => ExitCode::Internal,
        }
    }
}

impl std::fmt::Display for SpawnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpawnError::NotFound(m) | SpawnError::NotExecutable(m) | SpawnError::NoProcess(m) => {
                f.write_str(m)
            }
            SpawnError::LeaseExpired => {
                f.write_str("the lease expired before the command could start")
            }
        }
    }
}

/// `CLOCK_MONOTONIC` now, the clock `Instant` reads on Linux.
fn monotonic_now() -> libc::timespec {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills `ts`.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts
}

fn timespec_after(ts: libc::timespec, d: Duration) -> libc::timespec {
    let nanos = ts.tv_nsec as u64 + u64::from(d.subsec_nanos());
    libc::timespec {
        tv_sec: ts.tv_sec + d.as_secs() as libc::time_t + (nanos / 1_000_000_000) as libc::time_t,
        tv_nsec: (nanos % 1_000_000_000) as libc::c_long,
    }
}

/// A running command and, in group mode, its process group.
pub struct Job {
    pid: Pid,
    group: bool,
    reap_all: bool,
    /// The terminal we handed to the job's group (and must take back).
    tty: Option<RawFd>,
    status: Option<ExitCode>,
    /// A stop of the command without a terminal was said (once).
    stop_said: bool,
    /// As PID 1 or a subreaper: lockrun still had children at its last reaping, the kernel's
    /// answer to `waitpid(-1, WNOHANG)` (0 while unwaited children exist, ECHILD once none).
    children: bool,
    /// Whether /proc is this PID namespace's own ([`proc_is_ours`]), asked once, when the
    /// job's leftovers first need it.
    proc_ours: std::cell::OnceCell<bool>,
    /// That adopted processes cannot be signalled was said (once).
    unreachable_said: std::cell::Cell<bool>,
}

/// Makes this process a child subreaper: orphaned descendants are re-parented to us instead of
/// to init, so we can reap them and so `kill(-pgid)` still reaches them.
pub fn become_subreaper() -> io::Result<()> {
    nix::sys::prctl::set_child_subreaper(true).map_err(io::Error::from)
}

/// The first of stdin/stdout/stderr that is a terminal whose foreground process group is ours:
/// then the job must become the foreground group, or it is stopped by SIGTTIN when it reads.
fn foreground_terminal() -> Option<RawFd> {
    let ours = unistd::getpgrp();
    (0..=2).find(|&fd| {
        // SAFETY: fds 0-2 stay open for the life of the process; the borrow is used at once.
        let bfd = unsafe { BorrowedFd::borrow_raw(fd) };
        unistd::isatty(bfd).unwrap_or(false) && unistd::tcgetpgrp(bfd) == Ok(ours)
    })
}

/// tcsetpgrp from a background group raises SIGTTOU unless it is blocked; block it around the
/// call. (The child does its own hand-over before exec: see `spawn`.)
fn give_terminal(fd: RawFd, pgrp: Pid) -> nix::Result<()> {
    let mut ttou = SigSet::empty();
    ttou.add(Signal::SIGTTOU);
    let mut old = SigSet::empty();
    nsig::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&ttou), Some(&mut old))?;
    // SAFETY: fds 0-2 stay open for the life of the process.
    let result = unistd::tcsetpgrp(unsafe { BorrowedFd::borrow_raw(fd) }, pgrp);
    nsig::pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None)?;
    result
}

impl Job {
    /// Starts `argv` (PATH lookup, no shell) with inherited stdio and `env` added. With
    /// `start_by`, the command is not executed if that moment has passed when it is about to be
    /// (checked in the child, immediately before exec: nothing lockrun does later can delay
    /// it); the error is then [`SpawnError::LeaseExpired`].
    ///
    /// Must be called from the thread that lives as long as lockrun (the main thread): the
    /// parent-death signal fires when the *thread* that started the child exits, not the
    /// process.
    pub fn spawn(
        argv: &[OsString],
        env: &[(&str, String)],
        opts: &Options,
        start_by: Option<Instant>,
    ) -> Result<Job, SpawnError> {
        let program = argv[0].to_string_lossy().into_owned();
        let tty = if opts.group {
            foreground_terminal()
        } else {
            None
        };
        let setup = spawn::Setup {
            group: opts.group,
            // The command gets the mask lockrun was started with (a caller's blocked signals
            // are the caller's business).
            mask: opts.mask,
            sigpipe_ignored: signals::sigpipe_was_ignored(),
            // The monotonic clock as a raw timespec the child can compare with no allocation.
            start_by: start_by.map(|at| {
                timespec_after(
                    monotonic_now(),
                    at.saturating_duration_since(Instant::now()),
                )
            }),
            tty,
        };
        // By the time this returns the command has really started (or exec has failed).
        let started = spawn::spawn(argv, env, &setup);
        if let (Err(_), Some(fd)) = (&started, tty) {
            // The child may have handed the terminal to its group before exec failed: take it
            // back before saying why, or the error line is written from the background (and
            // with `stty tostop` that stops lockrun, holding the lock).
            let _ = give_terminal(fd, unistd::getpgrp());
        }
        let pid = started.map_err(|e| match e {
            spawn::Unstarted::Expired => SpawnError::LeaseExpired,
            spawn::Unstarted::Os(e) if e.kind() == io::ErrorKind::NotFound => {
                SpawnError::NotFound(match missing_interpreter(&argv[0]) {
                    Some(interp) if interp.ends_with('\r') => format!(
                        "cannot run {program}: its interpreter {} (named on its #! line) was not found: the script has Windows line endings (CRLF; convert it, e.g. with dos2unix)",
                        crate::logging::escape_controls(&interp)
                    ),
                    Some(interp) => format!(
                        "cannot run {program}: its interpreter {} (named on its #! line) was not found",
                        crate::logging::escape_controls(&interp)
                    ),
                    None => format!("command not found: {program}"),
                })
            }
            spawn::Unstarted::Start(e) => SpawnError::NoProcess(match e.raw_os_error() {
                Some(libc::EAGAIN) => format!(
                    "cannot start {program}: the process limit is reached (fork: {e}; see ulimit -u)"
                ),
                _ => format!("cannot start {program}: no process could be made ({e})"),
            }),
            spawn::Unstarted::Os(e) if e.raw_os_error() == Some(libc::E2BIG) => {
                SpawnError::NotExecutable(format!(
                    "cannot execute {program}: its arguments and environment (LOCKRUN_KEY among \
                     them) are larger than the kernel takes ({e})"
                ))
            }
            spawn::Unstarted::Os(e) => {
                SpawnError::NotExecutable(format!("cannot execute {program}: {e}"))
            }
        })?;
        let pid = Pid::from_raw(pid);
        debug!(pid = pid.as_raw(), group = opts.group, "command started");
        Ok(Job {
            pid,
            group: opts.group,
            reap_all: opts.reap_all,
            tty,
            status: None,
            stop_said: false,
            children: true,
            proc_ours: std::cell::OnceCell::new(),
            unreachable_said: std::cell::Cell::new(false),
        })
    }

    /// Sends `sig` to the job: the whole process group, or only the direct child.
    fn signal_job(&self, sig: i32) {
        // kill(2) with a negative pid targets the process group; the group id is the child's
        // pid because the child made itself leader with setpgid(0, 0).
        let target = if self.group {
            -self.pid.as_raw()
        } else {
            self.pid.as_raw()
        };
        // SAFETY: plain kill(2); ESRCH (already gone) is the only expected failure.
        let rc = unsafe { libc::kill(target, sig) };
        if rc != 0 {
            debug!(signal = %signals::name(sig), error = %io::Error::last_os_error(), "signal not delivered");
        }
    }

    fn finished(&mut self, code: ExitCode) {
        debug!(code = code.code(), "command exited");
        self.status = Some(code);
        self.take_terminal_back();
    }

    /// Ctrl-Z stopped the job (it is the foreground group). Stop lockrun too, so the shell sees
    /// its job stopped and prints its prompt; `fg` continues lockrun, which hands the terminal
    /// back and continues the job. While stopped nothing renews the lock: a stop longer than
    /// the TTL loses it, and --on-lost applies on resume.
    fn suspend_with_job(&mut self) {
        let Some(fd) = self.tty else { return };
        info!("command stopped; stopping lockrun with it (resume with fg)");
        let _ = give_terminal(fd, unistd::getpgrp());
        // SIGSTOP cannot be caught, so this stops every thread of lockrun right here.
        let _ = nsig::raise(Signal::SIGSTOP);
        let _ = give_terminal(fd, self.pid);
        self.signal_job(libc::SIGCONT);
    }

    fn proc_ours(&self) -> bool {
        *self.proc_ours.get_or_init(proc_is_ours)
    }

    /// PID 1 of a PID namespace whose /proc does not list it (absent, empty, the host's): then
    /// `kill(-1)` is the way to reach the processes lockrun adopted. It reaches every process
    /// of the namespace but lockrun, and each of them is the job's: lockrun started them all.
    /// Never elsewhere: for a subreaper that is not PID 1, kill(-1) is every process of the
    /// user's.
    fn reaches_all_by_kill_minus_1(&self) -> bool {
        self.reap_all && !self.proc_ours() && std::process::id() == 1
    }

    /// Once the command has exited: `sig` to what is left of the job, its group and (as PID 1
    /// or a subreaper) every adopted process still alive.
    fn signal_leftovers(&self, sig: i32) {
        if self.reaches_all_by_kill_minus_1() {
            // SAFETY: plain kill(2); it reaches the group too, which must not get `sig` twice.
            let rc = unsafe { libc::kill(-1, sig) };
            if rc != 0 {
                debug!(signal = %signals::name(sig), error = %io::Error::last_os_error(), "signal not delivered");
            }
            return;
        }
        self.signal_job(sig);
        self.signal_adopted(sig);
    }

    /// `sig` to every adopted process still alive (as PID 1 or a subreaper), and not to the
    /// group.
    fn signal_adopted(&self, sig: i32) {
        if !self.reap_all {
            return;
        }
        if self.proc_ours() {
            // Members of the group among them have had `sig` with it.
            let group = self.group.then_some(self.pid.as_raw());
            for pid in adopted(group) {
                // SAFETY: plain kill(2) of a child of ours (it cannot be reaped and its pid
                // reused before we wait for it); ESRCH if it just ended.
                unsafe { libc::kill(pid, sig) };
            }
        } else if self.reaches_all_by_kill_minus_1() {
            // kill(-1) cannot leave the group out, and the group has had this signal: adopted
            // processes get none of their own, and SIGKILL after --kill-after.
            debug!(signal = %signals::name(sig), "no /proc of this PID namespace: adopted processes cannot be signalled apart from the group");
        } else if self.children && !self.unreachable_said.replace(true) {
            warn!("/proc is not this PID namespace's own: the processes lockrun adopted cannot be listed, nor signalled; the lock is held until they end");
        }
    }
}

impl Processes for Job {
    fn pid(&self) -> i32 {
        self.pid.as_raw()
    }

    fn group(&self) -> bool {
        self.group
    }

    /// Collects exit statuses without blocking. Reaps only the command, or, as PID 1 /
    /// subreaper, every child (adopted orphans too) so none lingers as a zombie.
    fn reap(&mut self) {
        if self.status.is_some() && !self.reap_all {
            return;
        }
        let target = if self.reap_all {
            Pid::from_raw(-1)
        } else {
            self.pid
        };
        // WUNTRACED: a stopped command is reported too (Ctrl-Z on a terminal; a job that stops
        // itself without one).
        let flags = WaitPidFlag::WNOHANG | WaitPidFlag::WUNTRACED;
        loop {
            match waitpid(target, Some(flags)) {
                // For `waitpid(-1)`: children remain, or none does; either way nothing more to
                // collect now. (Only read as PID 1 or a subreaper.)
                Ok(WaitStatus::StillAlive) => {
                    self.children = true;
                    return;
                }
                Err(Errno::ECHILD) => {
                    self.children = false;
                    return;
                }
                Err(Errno::EINTR) => continue,
                Err(e) => {
                    warn!(error = %e, "waitpid failed");
                    return;
                }
                Ok(WaitStatus::Exited(pid, code)) if pid == self.pid => {
                    self.finished(ExitCode::Command(code as u8))
                }
                Ok(WaitStatus::Signaled(pid, sig, _)) if pid == self.pid => {
                    self.finished(ExitCode::Signaled(sig as i32))
                }
                Ok(WaitStatus::Stopped(pid, _)) if pid == self.pid && self.tty.is_some() => {
                    self.suspend_with_job()
                }
                // No terminal, no shell to `fg` it: it stays stopped until someone sends it
                // SIGCONT, and the lock stays held and renewed meanwhile. Said once.
                Ok(WaitStatus::Stopped(pid, sig)) if pid == self.pid => {
                    if !std::mem::replace(&mut self.stop_said, true) {
                        warn!(pid = pid.as_raw(), signal = %sig,
                              "the command is stopped; the lock stays held and renewed until it is continued (kill -CONT) or ends");
                    }
                }
                Ok(other) => debug!(status = ?other, "reaped an adopted process"),
            }
            if self.status.is_some() && !self.reap_all {
                return;
            }
        }
    }

    fn status(&self) -> Option<ExitCode> {
        self.status
    }

    /// Is any process of the job still alive (zombies do not count)? As PID 1 or a subreaper
    /// the job's adopted orphans are part of it (a double-forked daemon has its own session, so
    /// it is in no group of ours): the lock is held until they are gone too.
    fn alive(&self) -> bool {
        if self.status.is_none() {
            return true;
        }
        // As PID 1 or a subreaper every process of the job descends from lockrun (an orphan
        // comes to lockrun, not to init), so while one lives lockrun has a child; reap() has
        // just asked the kernel, and collected every zombie. No /proc needed.
        if self.reap_all && self.children {
            return true;
        }
        self.group && group_has_live_member(self.pid.as_raw(), || self.proc_ours())
    }

    /// Whether the end of the job is sure to be told by a SIGCHLD: as PID 1 or a subreaper,
    /// while lockrun has children (the last process of the job to end is a child of lockrun's,
    /// as every other one descends from it). Otherwise the rest of the group is looked at
    /// every [`super::GROUP_POLL`].
    fn ends_with_sigchld(&self) -> bool {
        self.reap_all && self.children
    }

    fn signal(&self, to: To, sig: i32) {
        let send = |sig| match to {
            To::Job => self.signal_job(sig),
            To::Leftovers => self.signal_leftovers(sig),
            To::Adopted => self.signal_adopted(sig),
        };
        send(sig);
        // A stopped process (kill -STOP, a debugger) acts on a signal that asks it to end only
        // once it is continued: SIGCONT follows, as systemd and timeout(1) send it, so the job
        // runs its own cleanup now instead of waiting, stopped, for SIGKILL after --kill-after.
        // (A process that is not stopped ignores SIGCONT unless it handles it.)
        if signals::STOP_SIGNALS.contains(&sig) {
            send(libc::SIGCONT);
        }
    }

    /// The shell gave the terminal to lockrun's group; give it back there before we print or
    /// exit, so the shell's prompt and line discipline are not left with a dead group.
    fn take_terminal_back(&mut self) {
        if let Some(fd) = self.tty.take() {
            let _ = give_terminal(fd, unistd::getpgrp());
        }
    }
}
