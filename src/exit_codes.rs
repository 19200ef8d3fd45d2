//! Every way lockrun can end, and the process exit code each one maps to.
//!
//! The numbers follow sysexits(3) where one fits, so scripts and cron wrappers can tell
//! "did not run because someone else holds the lock" from "ran and failed".

/// Default code when the lock is held elsewhere (EX_TEMPFAIL: try again later).
pub const DEFAULT_CONFLICT: u8 = 75;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitCode {
    /// The command ran and exited with this code.
    Command(u8),
    /// The command was killed by this signal: 128 + N, as shells report it.
    Signaled(i32),
    /// The lock is held elsewhere; the command was not run. Carries the `-E` code.
    Conflict(u8),
    /// The lock was lost while the command ran; lockrun terminated it.
    LockLost,
    /// Bad flags, durations, URLs, a missing command (EX_USAGE).
    Usage,
    /// Redis could not be reached or refused us before the command started (EX_UNAVAILABLE).
    Unavailable,
    /// A bug or an impossible state in lockrun itself (EX_SOFTWARE).
    Internal,
    /// The command exists but cannot be executed (as POSIX shells report it).
    NotExecutable,
    /// The command was not found on PATH (as POSIX shells report it).
    NotFound,
    /// lockrun was told to stop by signal N before the command started.
    Aborted(i32),
    /// lockrun's own output could not be written (a full disk; EX_IOERR).
    IoError,
    /// A limit of this machine stopped lockrun: no process or descriptor left (EX_OSERR).
    OsError,
}

impl ExitCode {
    pub fn code(self) -> i32 {
        match self {
            ExitCode::Command(c) | ExitCode::Conflict(c) => i32::from(c),
            ExitCode::Signaled(n) | ExitCode::Aborted(n) => 128 + n,
            ExitCode::LockLost => 76,
            ExitCode::Usage => 64,
            ExitCode::Unavailable => 69,
            ExitCode::Internal => 70,
            ExitCode::IoError => 74,
            ExitCode::OsError => 71,
            ExitCode::NotExecutable => 126,
            ExitCode::NotFound => 127,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documented_numbers() {
        assert_eq!(ExitCode::Command(0).code(), 0);
        assert_eq!(ExitCode::Command(42).code(), 42);
        assert_eq!(ExitCode::Signaled(15).code(), 143);
        assert_eq!(ExitCode::Signaled(9).code(), 137);
        assert_eq!(ExitCode::Conflict(DEFAULT_CONFLICT).code(), 75);
        assert_eq!(ExitCode::Conflict(0).code(), 0);
        assert_eq!(ExitCode::LockLost.code(), 76);
        assert_eq!(ExitCode::Usage.code(), 64);
        assert_eq!(ExitCode::Unavailable.code(), 69);
        assert_eq!(ExitCode::Internal.code(), 70);
        assert_eq!(ExitCode::IoError.code(), 74);
        assert_eq!(ExitCode::OsError.code(), 71);
        assert_eq!(ExitCode::NotExecutable.code(), 126);
        assert_eq!(ExitCode::NotFound.code(), 127);
        assert_eq!(ExitCode::Aborted(2).code(), 130);
    }
}
