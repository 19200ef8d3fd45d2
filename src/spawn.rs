//! Starting the command: `clone(CLONE_VM | CLONE_VFORK)` and `execvpe`, the way glibc's
//! `posix_spawn` does it, plus the few steps `posix_spawn` cannot take (the parent-death
//! signal, the lease deadline, the terminal).
//!
//! Why not `fork`: fork copies lockrun's page tables, and until the child's exec both
//! processes take a copy-on-write fault for every page either writes; the child's exec then
//! tears that copy down again (a TLB shoot-down across CPUs): a measurable share of every run
//! (docs/benchmarks.md, "Decisions"). With `CLONE_VM` the child borrows our memory and our
//! thread waits (`CLONE_VFORK`) until it has exec'd or exited.
//!
//! The price is discipline in the child, which runs on our memory: no allocation, no locks, no
//! panics (everything it needs is prepared here, before the clone), and no signal handler of
//! ours may act for it. So every signal is blocked across the clone, and a signal that reaches
//! the child between its unblocking and exec is given back its default action
//! (`signals::on_signal`), as if it had come a moment later, after exec.

use crate::cli::WITHHELD_FROM_JOB;
use std::ffi::{c_char, c_int, c_void, CStr, CString, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::ptr;

/// What the child does before exec.
pub struct Setup {
    /// setpgid(0, 0): a process group of its own.
    pub group: bool,
    /// The signal mask to exec with (the one lockrun was started with).
    pub mask: libc::sigset_t,
    /// The caller had SIGPIPE ignored: the command inherits that; otherwise it gets the default.
    pub sigpipe_ignored: bool,
    /// Do not exec at or after this `CLOCK_MONOTONIC` moment.
    pub start_by: Option<libc::timespec>,
    /// Make the job this terminal's foreground group before exec.
    pub tty: Option<c_int>,
}

/// Why the command did not start.
#[derive(Debug)]
pub enum Unstarted {
    /// exec (or a step in the child before it) failed with this error.
    Os(io::Error),
    /// No child could be made (clone(2) or its stack failed): a limit of this machine.
    Start(io::Error),
    /// `start_by` had passed when the child was about to exec.
    Expired,
}

/// The command's environment as execve takes it: lockrun's own entries as they are, minus the
/// names `env` sets and those the options withhold ([`WITHHELD_FROM_JOB`]), then `added` (`env`'s entries). Lockrun's entries are passed as pointers
/// into the process's environment, not copied: copying them (`std::env::vars_os`, then a
/// CString each) was a large share of lockrun's own start-up instructions (docs/benchmarks.md).
fn environment(env: &[(&str, String)], added: &[CString]) -> Vec<*const c_char> {
    extern "C" {
        // POSIX: the process's environment, a NULL-terminated array of "NAME=value" strings.
        static environ: *const *const c_char;
    }
    let mut envp = Vec::with_capacity(64);
    // SAFETY: `environ` is NULL or NULL-terminated, its strings NUL-terminated. Nothing in
    // lockrun changes its own environment (no setenv or putenv: what the command gets in
    // addition goes in through `added`), so the array and its strings stay as they are until
    // the child has exec'd.
    unsafe {
        let mut entry = environ;
        while !entry.is_null() && !(*entry).is_null() {
            let bytes = CStr::from_ptr(*entry).to_bytes();
            let name = bytes.split(|&b| b == b'=').next().unwrap_or(bytes);
            let set = env.iter().any(|(k, _)| k.as_bytes() == name);
            let withheld = WITHHELD_FROM_JOB.iter().any(|w| w.as_bytes() == name);
            if !set && !withheld {
                envp.push(*entry);
            }
            entry = entry.add(1);
        }
    }
    envp.extend(added.iter().map(|v| v.as_ptr()));
    envp.push(ptr::null());
    envp
}

/// The guard page's size (the smallest page on x86_64 and aarch64 Linux).
const GUARD: usize = 4096;

/// Outcomes the child reports through [`Shared::failed`]; errno values are positive.
const EXPIRED: c_int = -1;
const PARENT_GONE: c_int = -2;

/// Everything the child reads, prepared by the parent: plain pointers into memory that stays
/// alive and untouched while the parent waits in clone.
struct Shared {
    setup: *const Setup,
    parent: libc::pid_t,
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    /// Written by the child when it gives up (0: it exec'd); read by the parent after clone.
    failed: c_int,
}

/// Starts `argv` (PATH lookup as execvp does it; no shell) with the environment plus `env`,
/// and returns its pid once it has exec'd. Call from the main thread: the parent-death signal
/// fires when the thread that created the child exits.
pub fn spawn(argv: &[OsString], env: &[(&str, String)], setup: &Setup) -> Result<i32, Unstarted> {
    let nul = |_| {
        Unstarted::Os(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a NUL byte in an argument or in the environment",
        ))
    };
    let args: Vec<CString> = argv
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<_, _>>()
        .map_err(nul)?;
    let added: Vec<CString> = env
        .iter()
        .map(|(k, v)| CString::new(format!("{k}={v}")))
        .collect::<Result<_, _>>()
        .map_err(nul)?;
    let argp: Vec<*const c_char> = args
        .iter()
        .map(|a| a.as_ptr())
        .chain([ptr::null()])
        .collect();
    let envp = environment(env, &added);
    let mut shared = Shared {
        setup,
        // SAFETY: getpid has no preconditions.
        parent: unsafe { libc::getpid() },
        file: args[0].as_ptr(),
        argv: argp.as_ptr(),
        envp: envp.as_ptr(),
        failed: 0,
    };
    let stack = Stack::new(argp.len())?;
    // SAFETY: a full set blocks everything that can be blocked; `old` is restored below on
    // every path. Blocked across the clone, a signal cannot run our handler in the child while
    // it shares our memory; it stays pending for whichever process it was meant for.
    let old = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        old
    };
    // SAFETY: `child` only touches `shared` and what it points to, all alive until clone
    // returns, which with CLONE_VFORK is after the child's exec or exit. SIGCHLD: the child's
    // end is reported like a forked child's (the supervisor reaps it).
    let pid = unsafe {
        libc::clone(
            child,
            stack.top(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            ptr::addr_of_mut!(shared).cast::<c_void>(),
        )
    };
    let clone_error = io::Error::last_os_error();
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, ptr::null_mut()) };
    if pid < 0 {
        return Err(Unstarted::Start(clone_error));
    }
    // SAFETY: the child wrote `failed` before exiting; CLONE_VFORK ordered that before this.
    let failed = unsafe { ptr::read_volatile(ptr::addr_of!(shared.failed)) };
    if failed == 0 {
        return Ok(pid);
    }
    // The child has exited (_exit(127)): reap it here, it never was a job.
    // SAFETY: waitpid on our own child.
    unsafe { libc::waitpid(pid, ptr::null_mut(), 0) };
    Err(match failed {
        EXPIRED => Unstarted::Expired,
        PARENT_GONE => Unstarted::Os(io::Error::other(
            "lockrun exited before the command started",
        )),
        errno => Unstarted::Os(io::Error::from_raw_os_error(errno)),
    })
}

/// The child, on our memory and a stack of its own, with every signal blocked. Only
/// async-signal-safe calls; nothing allocates.
extern "C" fn child(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the parent's `Shared`, alive while the parent waits in clone.
    unsafe {
        let shared = arg.cast::<Shared>();
        let failed = match prepare(&*(*shared).setup, (*shared).parent) {
            Ok(()) => {
                // The mask the command gets; a signal pending from here on is delivered to the
                // child and takes its default action (see `signals::on_signal`).
                libc::pthread_sigmask(libc::SIG_SETMASK, &(*(*shared).setup).mask, ptr::null_mut());
                // execvpe searches PATH as execvp does (and runs a file without `#!` with
                // /bin/sh); glibc's implementation allocates nothing. It looks PATH up in
                // lockrun's environment, not `envp`: the same, as lockrun adds only LOCKRUN_*.
                // Returns only on failure; errno is cleared first, since it can give up without
                // setting it (a PATH entry longer than PATH_MAX), and 0 would read as success.
                *libc::__errno_location() = 0;
                libc::execvpe((*shared).file, (*shared).argv, (*shared).envp);
                match *libc::__errno_location() {
                    0 => libc::ENOENT,
                    e => e,
                }
            }
            Err(code) => code,
        };
        ptr::write_volatile(ptr::addr_of_mut!((*shared).failed), failed);
        libc::_exit(127)
    }
}

/// The steps before exec, in the child; an error is an errno or one of the codes above.
unsafe fn prepare(setup: &Setup, parent: libc::pid_t) -> Result<(), c_int> {
    let errno = || *libc::__errno_location();
    // The last moment before exec: a lockrun delayed since the acquire reply (a stalled
    // machine, swapping, SIGSTOP) must not start a job on a lease that may already belong to
    // someone else.
    if let Some(limit) = setup.start_by {
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now);
        if (now.tv_sec, now.tv_nsec) >= (limit.tv_sec, limit.tv_nsec) {
            return Err(EXPIRED);
        }
    }
    // A process group of its own, so a signal to -pgid reaches `sh -c 'a & b & wait'` and
    // everything it starts. Done here, before the parent resumes, so it can never signal a
    // group that does not exist yet.
    if setup.group && libc::setpgid(0, 0) != 0 {
        return Err(errno());
    }
    // lockrun ignores SIGPIPE for itself, and an ignored signal stays ignored across exec: the
    // command gets the default back unless lockrun's caller had it ignored too. (Caught
    // signals need nothing: exec resets them to the default.)
    let pipe = if setup.sigpipe_ignored {
        libc::SIG_IGN
    } else {
        libc::SIG_DFL
    };
    libc::signal(libc::SIGPIPE, pipe);
    // If lockrun is SIGKILLed, the kernel sends the command SIGTERM, so it does not run on for
    // long without a lock that nobody renews any more.
    if libc::prctl(
        libc::PR_SET_PDEATHSIG,
        libc::SIGTERM as libc::c_ulong,
        0,
        0,
        0,
    ) != 0
    {
        return Err(errno());
    }
    // lockrun may have been killed before prctl; then the signal never comes.
    if libc::getppid() != parent {
        return Err(PARENT_GONE);
    }
    if let Some(fd) = setup.tty {
        // Make the job the terminal's foreground group *before* exec, so its first read cannot
        // race us and be stopped with SIGTTIN. Ctrl-C then reaches the job directly (and only
        // once: lockrun is no longer in the foreground). SIGTTOU, which tcsetpgrp from a
        // background group raises, is blocked (everything is, here). Best effort: a job left
        // in the background still runs, and is stopped only if it reads from the terminal.
        libc::tcsetpgrp(fd, libc::getpid());
    }
    Ok(())
}

/// The child's stack: mapped, not allocated (pages are touched only as used), with a guard
/// page below it (an overflow faults instead of writing into lockrun's memory), and unmapped
/// after the clone.
struct Stack {
    base: *mut c_void,
    len: usize,
}

impl Stack {
    /// Room for our own frames plus execvpe's: the path it builds (PATH_MAX + NAME_MAX) and,
    /// for a file without `#!`, a copy of argv with /bin/sh in front.
    fn new(args: usize) -> Result<Stack, Unstarted> {
        let len = (64 * 1024 + args * std::mem::size_of::<usize>()).next_multiple_of(GUARD) + GUARD;
        // SAFETY: a fresh anonymous private mapping; checked for MAP_FAILED.
        let base = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(Unstarted::Start(io::Error::last_os_error()));
        }
        let stack = Stack { base, len };
        // SAFETY: the lowest page of the mapping made above.
        if unsafe { libc::mprotect(base, GUARD, libc::PROT_NONE) } != 0 {
            return Err(Unstarted::Start(io::Error::last_os_error()));
        }
        Ok(stack)
    }

    /// Stacks grow down: the child starts at the end (page-aligned, so 16-byte aligned).
    fn top(&self) -> *mut c_void {
        // SAFETY: one past the end of the mapping, as clone expects.
        unsafe { self.base.cast::<u8>().add(self.len).cast() }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`; the child is done with it (it exec'd or exited).
        unsafe { libc::munmap(self.base, self.len) };
    }
}
