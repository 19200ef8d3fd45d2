//! The standard descriptors 0, 1 and 2 as lockrun found them at start.
//!
//! A caller may start lockrun with one of them closed (`lockrun status k >&-`, a daemon that
//! closed its own, a supervisor that passes none). The kernel hands out the lowest free number,
//! so lockrun's first descriptors (its signal pipe, its event loop's, a socket to Redis) would
//! take 0, 1 or 2, and what lockrun writes to stdout or stderr would land there: a log line read
//! back as signals, a report sent to Redis as commands. So the very first thing lockrun does is
//! put /dev/null in place of each closed one, as init systems, tini and Rust's own start-up code
//! (which lockrun does not use: see main.rs) do. The command inherits it: it finds /dev/null
//! rather than a closed descriptor its own first open(2) would take.
//!
//! What was closed is remembered: lockrun's own output to a standard output closed at start
//! cannot reach anyone, and is said to have failed (see `output`).

use std::sync::atomic::{AtomicU8, Ordering};

/// Bit N set: descriptor N was closed at start.
static CLOSED: AtomicU8 = AtomicU8::new(0);

/// Puts /dev/null in place of each of 0, 1 and 2 that is closed. Call first, before anything
/// opens a descriptor, while lockrun has one thread. One fcntl(2) per descriptor and nothing
/// more when all three are open (every run pays for this). Err: /dev/null could not be opened
/// (a chroot or container without it, or a descriptor limit below 3), with what to say.
pub fn fill_closed() -> Result<(), String> {
    let mut closed = 0u8;
    for fd in 0..3 {
        // SAFETY: F_GETFD only reads the descriptor's flags; EBADF means it is not open.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::EBADF)
        {
            closed |= 1 << fd;
        }
    }
    if closed == 0 {
        return Ok(());
    }
    CLOSED.store(closed, Ordering::Relaxed);
    // Lowest first: open(2) returns the lowest free number, and every lower one is open by
    // then, so each open lands on the descriptor it is for.
    for fd in (0..3).filter(|fd| closed & (1 << fd) != 0) {
        // SAFETY: a constant NUL-terminated path. Not close-on-exec: the command inherits it.
        // Read and write, whichever descriptor it stands for, as init systems do.
        let got = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
        if got != fd {
            let why = if got == -1 {
                std::io::Error::last_os_error().to_string()
            } else {
                // Cannot happen with one thread; said rather than run with a stray descriptor.
                format!("it opened as descriptor {got}")
            };
            return Err(format!(
                "descriptor {fd} ({}) is closed and /dev/null cannot take its place: {why}",
                ["standard input", "standard output", "standard error"][fd as usize]
            ));
        }
    }
    Ok(())
}

/// Whether descriptor `fd` (0, 1 or 2) was closed when lockrun started.
pub fn was_closed(fd: u8) -> bool {
    CLOSED.load(Ordering::Relaxed) & (1 << fd) != 0
}
