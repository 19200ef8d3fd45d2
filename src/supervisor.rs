//! Running the command and supervising it until the whole job is gone: process group,
//! terminal hand-over, signal forwarding, reaping (also as PID 1 or a subreaper), and stopping
//! it (SIGTERM, then SIGKILL) when lockrun must.
//!
//! All reaping happens here, in one place: nothing else in lockrun waits for children (no
//! tokio `process`, no `std::process::Child::wait`), so a `waitpid(-1)` for adopted orphans can
//! never steal the command's own exit status.

use crate::duration::Human;
use crate::ending::{JobEnd, Stopped};
use crate::exit_codes::ExitCode;
use crate::signals::{self, Received, Signals};
use crate::spawn;
use crate::watchdog::{Deadline, Lost};
use nix::errno::Errno;
use nix::sys::signal::{self as nsig, SigSet, SigmaskHow, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{self, Pid};
use std::ffi::OsString;
use std::future::Future;
use std::io;
use std::os::fd::{BorrowedFd, RawFd};
use std::time::Duration;
use tokio::time::Instant;
use tracing::{debug, error, info, warn};

/// How often to look whether a group's remaining members are gone: they are not our children,
/// so no SIGCHLD tells us.
const GROUP_POLL: Duration = Duration::from_millis(20);

#[derive(Clone, Debug)]
pub struct Options {
    /// Run the command in its own process group and signal the whole group.
    pub group: bool,
    /// Reap every child we get, adopted orphans included (PID 1 or --subreaper).
    pub reap_all: bool,
    pub kill_after: Duration,
    /// The signal mask lockrun was started with, given back to the command.
    pub mask: libc::sigset_t,
}

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
    kill_after: Duration,
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
            spawn::Failure::Expired => SpawnError::LeaseExpired,
            spawn::Failure::Os(e) if e.kind() == io::ErrorKind::NotFound => {
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
            spawn::Failure::Start(e) => SpawnError::NoProcess(match e.raw_os_error() {
                Some(libc::EAGAIN) => format!(
                    "cannot start {program}: the process limit is reached (fork: {e}; see ulimit -u)"
                ),
                _ => format!("cannot start {program}: no process could be made ({e})"),
            }),
            spawn::Failure::Os(e) if e.raw_os_error() == Some(libc::E2BIG) => {
                SpawnError::NotExecutable(format!(
                    "cannot execute {program}: its arguments and environment (LOCKRUN_KEY among \
                     them) are larger than the kernel takes ({e})"
                ))
            }
            spawn::Failure::Os(e) => {
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
            kill_after: opts.kill_after,
            stop_said: false,
            children: true,
            proc_ours: std::cell::OnceCell::new(),
            unreachable_said: std::cell::Cell::new(false),
        })
    }

    pub fn pid(&self) -> i32 {
        self.pid.as_raw()
    }

    /// Sends `sig` to the job: the whole process group, or only the direct child.
    pub fn signal(&self, sig: i32) {
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

    /// Passes a signal lockrun received on to the job. Returns whether the whole group got it.
    fn forward(&self, r: Received) -> bool {
        // With --no-group the command shares our process group, so a signal from the terminal
        // (Ctrl-C, Ctrl-\, hangup) already reached it; forwarding would deliver it twice.
        if !self.group && r.from_kernel {
            return false;
        }
        debug!(signal = %signals::name(r.signo), "forwarding signal");
        self.signal(r.signo);
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

    fn finished(&mut self, code: ExitCode) {
        debug!(code = code.code(), "command exited");
        self.status = Some(code);
        self.take_terminal_back();
    }

    /// The shell gave the terminal to lockrun's group; give it back there before we print or
    /// exit, so the shell's prompt and line discipline are not left with a dead group.
    fn take_terminal_back(&mut self) {
        if let Some(fd) = self.tty.take() {
            let _ = give_terminal(fd, unistd::getpgrp());
        }
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
        self.signal(libc::SIGCONT);
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
    /// every [`GROUP_POLL`].
    fn ends_with_sigchld(&self) -> bool {
        self.reap_all && self.children
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
        self.signal(sig);
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

/// Whether /proc is this PID namespace's own: /proc/self names this process by its pid here.
/// The /proc of another namespace (the host's, in a namespace that did not mount its own)
/// names it by another pid, or not at all; an empty or absent /proc has no /proc/self.
fn proc_is_ours() -> bool {
    let link = std::fs::read_link("/proc/self");
    let ours = link
        .as_ref()
        .ok()
        .and_then(|l| l.to_str()?.parse::<u32>().ok())
        == Some(std::process::id());
    if !ours {
        debug!(proc_self = ?link, "/proc is not this PID namespace's own: the job's liveness is the kernel's answer alone");
    }
    ours
}

/// What the supervisor reads of a process in `/proc/<pid>/stat`.
struct ProcStat {
    pid: i32,
    /// One letter: `R`, `S`, `D`, `T`, `Z` (zombie), `X` (dead)...
    state: String,
    ppid: i32,
    pgrp: i32,
}

impl ProcStat {
    /// `"pid (comm) state ppid pgrp ..."`: parsed from the last ')', as comm may hold anything
    /// (spaces and parentheses included).
    fn parse(pid: i32, stat: &str) -> Option<ProcStat> {
        let rest = &stat[stat.rfind(')')? + 1..];
        let mut fields = rest.split_whitespace();
        let state = fields.next()?.to_string();
        let ppid = fields.next()?.parse().ok()?;
        let pgrp = fields.next()?.parse().ok()?;
        Some(ProcStat {
            pid,
            state,
            ppid,
            pgrp,
        })
    }

    /// Not a zombie (nor dead): a process that still runs, or can.
    fn live(&self) -> bool {
        self.state != "Z" && self.state != "X"
    }
}

/// Every process /proc shows, as far as it can be read (one that ends meanwhile is skipped);
/// `None` if /proc itself cannot be read.
fn processes() -> Option<impl Iterator<Item = ProcStat>> {
    let dir = std::fs::read_dir("/proc").ok()?;
    Some(dir.flatten().filter_map(|entry| {
        let pid = entry.file_name().to_str()?.parse::<i32>().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        ProcStat::parse(pid, &stat)
    }))
}

/// lockrun's live children other than zombies and members of `group`, from /proc (this
/// namespace's own): after the command has exited, the processes it left that were re-parented
/// to lockrun (PID 1, or a subreaper) and that a signal to the group does not reach.
fn adopted(group: Option<i32>) -> Vec<i32> {
    let me = std::process::id() as i32;
    let Some(all) = processes() else {
        return Vec::new();
    };
    all.filter(|p| p.ppid == me && p.live() && Some(p.pgrp) != group)
        .map(|p| p.pid)
        .collect()
}

/// True while the process group has a member that is not a zombie. kill(-pgid, 0) answers
/// "any member at all", but a zombie whose parent never reaps it (a container whose PID 1 does
/// not reap) would then hold the lock forever; /proc tells the two apart, when it is this PID
/// namespace's own (`proc_ours`, asked only when kill(2) finds a member). Any other /proc
/// numbers its processes differently, and an empty one lists none: then a group kill(2) still
/// reaches is taken to be alive.
fn group_has_live_member(pgid: i32, proc_ours: impl FnOnce() -> bool) -> bool {
    // SAFETY: signal 0 only checks for existence and permission.
    if unsafe { libc::kill(-pgid, 0) } != 0 && Errno::last() == Errno::ESRCH {
        return false;
    }
    if !proc_ours() {
        return true;
    }
    let Some(mut all) = processes() else {
        return true;
    };
    all.any(|p| p.pgrp == pgid && p.live())
}

/// What the supervisor needs from the lock while the job runs: the watchdog (a future that
/// resolves when the lock is lost) and the lease's deadline, which the watchdog moves forward.
pub struct Guard<'a, F> {
    pub lost: F,
    pub deadline: &'a Deadline,
    /// `--on-lost terminate` (else: warn and let the job finish).
    pub terminate: bool,
}

/// Why the job is being stopped. Several can hold at once (a stop signal, then the lock lost,
/// then the command exits leaving its group): SIGKILL comes at the earliest of their moments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Why {
    /// The lock is being lost, or can no longer be confirmed: the job must be gone before the
    /// lease can end.
    Lock,
    /// A stop request from outside (SIGTERM from kubelet, systemd, docker stop; SIGINT,
    /// SIGHUP, SIGQUIT), passed on to the job.
    Signal(i32),
    /// The command exited and its process group lives on (or processes it left, adopted by
    /// lockrun): draining.
    Leftovers,
}

/// When SIGKILL is due for one reason.
#[derive(Clone, Copy, Debug)]
enum KillAt {
    At(Instant),
    /// At the lease's kill moment ([`Deadline::kill_at`]), which a renewal confirmed meanwhile
    /// moves later: the job gets its grace whenever the lease allows it.
    LeaseEnd,
}

/// The job as the supervisor drives it: running while `stopping` is empty, else being stopped
/// for each reason there, each with its SIGKILL moment.
#[derive(Debug, Default)]
struct JobState {
    stopping: Vec<(Why, KillAt)>,
    /// SIGTERM has reached the whole job: sent by us, or a SIGTERM passed on to its group.
    term_sent: bool,
    /// SIGKILL was sent (once).
    killed: bool,
    /// After a stall: until when the overdue renewal may still save the lease before the job
    /// is told to stop.
    renewal_window: Option<Instant>,
}

impl JobState {
    /// Whether the job is being stopped for a reason of `why`'s kind (any stop signal for
    /// [`Why::Signal`]).
    fn stopping_for(&self, why: Why) -> bool {
        let kind = std::mem::discriminant(&why);
        self.stopping
            .iter()
            .any(|(w, _)| std::mem::discriminant(w) == kind)
    }

    /// The lock is being lost: the run ends 76.
    fn losing(&self) -> bool {
        self.stopping_for(Why::Lock)
    }

    /// Why the job was stopped, for its ending: the lock first (the run ends 76), then a stop
    /// signal, then leftovers.
    fn stopped(&self) -> Stopped {
        if self.losing() {
            Stopped::Lock
        } else if self.stopping_for(Why::Signal(0)) {
            Stopped::Signal
        } else if self.stopping_for(Why::Leftovers) {
            Stopped::Leftovers
        } else {
            Stopped::No
        }
    }

    /// Stops the job for `why` too, SIGKILL due at `kill` for it. Each kind of reason is noted
    /// once, with its first moment (a second stop signal does not move the SIGKILL).
    fn stop(&mut self, why: Why, kill: KillAt) {
        if !self.stopping_for(why) {
            self.stopping.push((why, kill));
        }
    }

    /// The earliest SIGKILL moment of all the reasons, and the stop signal it is for, if it is
    /// one's.
    fn kill_by(&self, deadline: Option<&Deadline>) -> Option<(Instant, Option<i32>)> {
        let at = |k: &KillAt| match k {
            KillAt::At(t) => Some(*t),
            KillAt::LeaseEnd => deadline.map(Deadline::kill_at),
        };
        let first = self.stopping.iter().filter_map(|(_, k)| at(k)).min()?;
        let signal = self.stopping.iter().find_map(|(w, k)| match w {
            Why::Signal(sig) if at(k) == Some(first) => Some(*sig),
            _ => None,
        });
        Some((first, signal))
    }

    /// When the job is told to stop for the lock if no renewal is confirmed first: the
    /// deadline's SIGTERM moment, or later, to the end of a stalled lockrun's renewal window.
    fn term_at(&self, d: &Deadline) -> Instant {
        match self.renewal_window {
            Some(w) if d.term_at() <= w => w,
            _ => d.term_at(),
        }
    }
}

/// Supervises the job until it is gone, forwarding signals and reaping. With a `guard`, the
/// job is stopped when the lock is lost or can no longer be confirmed, *ahead of* the lease's
/// deadline (SIGTERM at `term_at`, SIGKILL at `kill_at`); its end then says [`Stopped::Lock`].
///
/// After the command itself exits, leftover members of its group get SIGTERM, then SIGKILL
/// after `--kill-after`; this returns only when none is alive, so the caller releases the lock
/// only once the whole job is gone. The lock keeps being renewed meanwhile (the guard's future
/// is still polled), and also while the job shuts down after a loss: a renewal confirmed then
/// moves the SIGKILL later, so the job gets its grace whenever the lease allows it.
///
/// A stop request from outside is passed on to the job, which has `--kill-after` to end before
/// its group gets SIGKILL. Without this a job that ignores the signal ran to its natural end,
/// and the platform's own SIGKILL took lockrun with the lock held, no history and no metrics.
pub async fn supervise<F: Future<Output = Lost>>(
    mut job: Job,
    signals: &mut Signals,
    guard: Option<Guard<'_, F>>,
) -> JobEnd {
    let kill_after = job.kill_after;
    let (lost, deadline, terminate) = match guard {
        Some(g) => (Some(g.lost), Some(g.deadline), g.terminate),
        None => (None, None, false),
    };
    let mut lost = std::pin::pin!(lost);
    let mut lost_seen = false;
    let mut state = JobState::default();
    loop {
        job.reap();
        if !job.alive() {
            break;
        }
        let now = Instant::now();
        if job.status.is_some() && !state.stopping_for(Why::Leftovers) {
            if state.term_sent {
                info!(
                    pgid = job.pid(),
                    "command exited but its process group lives on (or processes it left, adopted by lockrun); the group has had SIGTERM already"
                );
                // Adopted processes are in no group of ours: they had no SIGTERM yet.
                job.signal_adopted(libc::SIGTERM);
            } else {
                info!(
                    pgid = job.pid(),
                    "command exited but its process group lives on (or processes it left, adopted by lockrun); sending SIGTERM"
                );
                job.signal_leftovers(libc::SIGTERM);
                state.term_sent = true;
            }
            state.stop(Why::Leftovers, KillAt::At(now + kill_after));
        }
        if let (Some(d), true, false) = (deadline, terminate, state.losing()) {
            // Past the SIGTERM moment with a renewal that was due long ago and never sent:
            // lockrun itself was stalled (SIGSTOP, a frozen VM), the lease may be intact. The
            // overdue renewal goes first (the watchdog sends it as soon as this loop waits),
            // with half of what is left before SIGKILL; only if it is not confirmed by then
            // does the job get SIGTERM. SIGKILL stays where it was, before the lease can end.
            let stalled = d.renewal_overdue(now);
            if stalled && now >= d.term_at() && now < d.kill_at() && state.renewal_window.is_none()
            {
                state.renewal_window = Some(now + (d.kill_at() - now) / 2);
                info!(left = %Human(d.get().saturating_duration_since(now)),
                      "lockrun was stalled past the moment to stop the job; renewing first");
            }
            if now >= state.term_at(d) {
                // Signal first, log after: nothing may delay the job's stop.
                if !state.term_sent {
                    job.signal(libc::SIGTERM);
                    state.term_sent = true;
                }
                state.stop(Why::Lock, KillAt::LeaseEnd);
                error!(left = %Human(d.get().saturating_duration_since(now)), grace = %Human(d.grace()),
                       "redis lock lost: no renewal confirmed in time; stopping the job before its lease can expire");
            }
        }
        let kill_by = state.kill_by(deadline);
        if let Some((_, signal)) = kill_by.filter(|(at, _)| !state.killed && now >= *at) {
            job.signal_leftovers(libc::SIGKILL);
            state.killed = true;
            let after = signal.map_or_else(|| "SIGTERM".to_string(), signals::name);
            warn!("job still running after {after}; sending SIGKILL");
        }
        // The next moment something is due: stopping for the lock, SIGKILL, or a look at a
        // group whose members are not our children (no SIGCHLD tells us they are gone).
        let polling = (job.status.is_some() || state.term_sent) && !job.ends_with_sigchld();
        let next = [
            deadline
                .filter(|_| terminate && !state.losing())
                .map(|d| state.term_at(d)),
            kill_by.map(|(at, _)| at).filter(|_| !state.killed),
            polling.then(|| now + GROUP_POLL),
        ]
        .into_iter()
        .flatten()
        .min();
        tokio::select! {
            r = signals.recv() => {
                // A SIGTERM forwarded to the whole group is the one the job gets: when the
                // command exits and leaves members behind, they are not sent another (a trap
                // would run twice); they get --kill-after to finish, then SIGKILL.
                if r.signo != libc::SIGCHLD && job.forward(r) && r.signo == libc::SIGTERM {
                    state.term_sent = true;
                }
                // Not a terminal's Ctrl-C (sent by the kernel): in an interactive session that
                // interrupts what the job is doing, it does not ask the job to go away.
                let interactive = r.from_kernel && r.signo == libc::SIGINT;
                if signals::ABORTING.contains(&r.signo) && !interactive {
                    state.stop(Why::Signal(r.signo), KillAt::At(Instant::now() + kill_after));
                }
            }
            why = async { lost.as_mut().as_pin_mut().unwrap().await }, if lost.is_some() && !lost_seen => {
                lost_seen = true;
                let already = state.losing();
                if terminate && !already {
                    if !state.term_sent {
                        job.signal(libc::SIGTERM);
                        state.term_sent = true;
                    }
                    // The server says the key is gone: there is no lease left to wait out.
                    let grace = deadline.map_or(kill_after, Deadline::grace);
                    state.stop(Why::Lock, KillAt::At(Instant::now() + grace));
                }
                let why = match why {
                    Lost::NotOwner => "redis lock lost: the key expired or now belongs to another holder",
                    Lost::Expired => "redis lock lost: no renewal confirmed within the TTL",
                };
                if already {
                    debug!("{why}");
                } else {
                    error!("{why}");
                }
                if !terminate {
                    warn!("--on-lost continue: the command keeps running without the lock");
                }
            }
            () = async { tokio::time::sleep_until(next.unwrap()).await }, if next.is_some() => {}
            // Our clock was measured slow: the moments above are earlier now.
            () = async { deadline.unwrap().moved_earlier().await }, if deadline.is_some() => {}
        }
    }
    job.take_terminal_back();
    JobEnd {
        status: job.status.unwrap_or(ExitCode::Internal),
        stopped: state.stopped(),
        lock_lost: lost_seen,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_is_read_past_any_command_name() {
        let p = ProcStat::parse(42, "42 (a) b (c)) S 7 42 42 0 -1 4194560").unwrap();
        assert_eq!((p.pid, p.state.as_str(), p.ppid, p.pgrp), (42, "S", 7, 42));
        assert!(p.live());
        let z = ProcStat::parse(43, "43 (sh) Z 1 40 40").unwrap();
        assert!(!z.live());
        assert!(ProcStat::parse(1, "1 no parenthesis S 0 1").is_none());
        assert!(ProcStat::parse(1, "1 (cut) S").is_none());
    }

    #[test]
    fn this_process_is_found_live_in_its_group() {
        let me = std::process::id() as i32;
        let mine = processes()
            .expect("/proc is readable")
            .find(|p| p.pid == me)
            .expect("this process is listed");
        assert!(mine.live());
        assert_eq!(mine.pgrp, nix::unistd::getpgrp().as_raw());
        assert!(group_has_live_member(mine.pgrp, proc_is_ours));
        assert!(proc_is_ours(), "the tests' /proc is their namespace's own");
    }

    #[test]
    fn sigkill_comes_at_the_earliest_reason_and_names_a_stop_signal() {
        let now = Instant::now();
        let s = |secs| now + Duration::from_secs(secs);
        let mut state = JobState::default();
        assert!(state.kill_by(None).is_none(), "running: nothing due");
        assert_eq!(state.stopped(), Stopped::No);
        state.stop(Why::Leftovers, KillAt::At(s(10)));
        assert_eq!(state.stopped(), Stopped::Leftovers);
        state.stop(Why::Signal(libc::SIGTERM), KillAt::At(s(5)));
        // A second stop signal does not move the first one's moment.
        state.stop(Why::Signal(libc::SIGINT), KillAt::At(s(1)));
        assert_eq!(state.kill_by(None), Some((s(5), Some(libc::SIGTERM))));
        assert!(!state.losing());
        assert_eq!(state.stopped(), Stopped::Signal);
        state.stop(Why::Lock, KillAt::At(s(2)));
        assert!(state.losing());
        assert_eq!(state.stopped(), Stopped::Lock);
        assert_eq!(state.kill_by(None), Some((s(2), None)));
    }
}
