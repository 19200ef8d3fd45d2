//! Every way lockrun can end, the process exit code each one maps to, and what each code means.
//!
//! The numbers follow sysexits(3) where one fits, so scripts and cron wrappers can tell
//! "did not run because someone else holds the lock" from "ran and failed".
//!
//! This is the one place the codes are described: `-h`, `--help`, the man pages and the
//! operators' commands' help take their lines from [`ExitCode::summary`], and the README's table
//! says the same lines (a test holds them to it); every cause of each code is in docs/guide.md.

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
    /// The command ran past `--time-limit`; lockrun stopped it (124, as GNU `timeout` says).
    TimedOut,
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

/// How the docs describe one exit code.
#[derive(Debug)]
pub struct Summary {
    /// The code as written: its number, or how it is made (`its own`, `128+N`).
    pub code: String,
    /// A few words, for the one-sentence lists of `-h` and the operators' commands.
    pub brief: &'static str,
    /// One line, for `--help`, the man page and the README's table.
    pub meaning: &'static str,
}

impl Summary {
    /// The code and its few words (`76 lock lost`); a code that is no number (`its own`) is
    /// said by its words alone.
    pub fn briefly(&self) -> String {
        if self.code.starts_with(|c: char| c.is_ascii_digit()) {
            format!("{} {}", self.code, self.brief)
        } else {
            self.brief.to_string()
        }
    }
}

impl ExitCode {
    /// Every kind of ending once, in the order the docs list them. The values the variants carry
    /// stand for any: [`ExitCode::summary`] does not look at them.
    pub const DOCUMENTED: [ExitCode; 13] = [
        ExitCode::Command(0),
        ExitCode::Signaled(0),
        ExitCode::Conflict(DEFAULT_CONFLICT),
        ExitCode::LockLost,
        ExitCode::TimedOut,
        ExitCode::Usage,
        ExitCode::Unavailable,
        ExitCode::Internal,
        ExitCode::OsError,
        ExitCode::IoError,
        ExitCode::NotExecutable,
        ExitCode::NotFound,
        ExitCode::Aborted(0),
    ];

    pub fn code(self) -> i32 {
        match self {
            ExitCode::Command(c) | ExitCode::Conflict(c) => i32::from(c),
            ExitCode::Signaled(n) | ExitCode::Aborted(n) => 128 + n,
            ExitCode::LockLost => 76,
            ExitCode::TimedOut => 124,
            ExitCode::Usage => 64,
            ExitCode::Unavailable => 69,
            ExitCode::Internal => 70,
            ExitCode::IoError => 74,
            ExitCode::OsError => 71,
            ExitCode::NotExecutable => 126,
            ExitCode::NotFound => 127,
        }
    }

    /// What this kind of ending is documented as. The number of a fixed code is [`Self::code`]'s.
    pub fn summary(self) -> Summary {
        use ExitCode::*;
        let (brief, meaning) = match self {
            Command(_) => ("the command's own", "the command ran and exited with it"),
            Signaled(_) => ("the command killed", "the command died of signal N"),
            Conflict(_) => (
                "held elsewhere",
                "the lock is held elsewhere (no wait, or the wait ran out): the command was not run",
            ),
            LockLost => (
                "lock lost",
                "the lock was lost while the command ran: lockrun stopped it",
            ),
            TimedOut => (
                "time limit reached",
                "the command ran past --time-limit: lockrun stopped it",
            ),
            Usage => (
                "usage error",
                "usage error: a bad option, variable, URL, key or password file",
            ),
            Unavailable => (
                "Redis unavailable",
                "Redis unavailable before the command started, or it refused lockrun \
                 (authentication, ACL)",
            ),
            Internal => ("internal error", "internal error: a bug in lockrun"),
            OsError => (
                "a limit of this machine",
                "a limit of this machine: no process, descriptor or memory left",
            ),
            IoError => (
                "output not written",
                "lockrun's own output could not be written",
            ),
            NotExecutable => ("not executable", "the command is not executable"),
            NotFound => (
                "not found",
                "the command (or its script's #! interpreter) was not found",
            ),
            Aborted(_) => (
                "stopped before the command started",
                "lockrun was stopped by signal N before the command started",
            ),
        };
        let code = match self {
            Command(_) => "its own".to_string(),
            Signaled(_) | Aborted(_) => "128+N".to_string(),
            Conflict(_) => format!("{DEFAULT_CONFLICT} (or -E)"),
            fixed => fixed.code().to_string(),
        };
        Summary {
            code,
            brief,
            meaning,
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
        assert_eq!(ExitCode::TimedOut.code(), 124);
        assert_eq!(ExitCode::Usage.code(), 64);
        assert_eq!(ExitCode::Unavailable.code(), 69);
        assert_eq!(ExitCode::Internal.code(), 70);
        assert_eq!(ExitCode::IoError.code(), 74);
        assert_eq!(ExitCode::OsError.code(), 71);
        assert_eq!(ExitCode::NotExecutable.code(), 126);
        assert_eq!(ExitCode::NotFound.code(), 127);
        assert_eq!(ExitCode::Aborted(2).code(), 130);
    }

    /// Each kind of ending is documented once, in the docs' order, a fixed code under its own
    /// number. A new variant fails to compile here until it has its place in the list.
    #[test]
    fn every_ending_is_documented_once() {
        use ExitCode::*;
        let place = |c: ExitCode| match c {
            Command(_) => 0,
            Signaled(_) => 1,
            Conflict(_) => 2,
            LockLost => 3,
            TimedOut => 4,
            Usage => 5,
            Unavailable => 6,
            Internal => 7,
            OsError => 8,
            IoError => 9,
            NotExecutable => 10,
            NotFound => 11,
            Aborted(_) => 12,
        };
        let places: Vec<usize> = ExitCode::DOCUMENTED.into_iter().map(place).collect();
        assert_eq!(places, (0..13).collect::<Vec<_>>());
        for c in ExitCode::DOCUMENTED {
            let s = c.summary();
            assert!(!s.meaning.is_empty() && !s.brief.is_empty(), "{c:?}");
            if !matches!(c, Command(_) | Signaled(_) | Aborted(_)) {
                assert!(s.code.starts_with(&c.code().to_string()), "{c:?}: {s:?}");
            }
        }
        assert_eq!(ExitCode::Usage.summary().briefly(), "64 usage error");
        assert_eq!(
            ExitCode::Conflict(0).summary().briefly(),
            "75 (or -E) held elsewhere"
        );
        assert_eq!(
            ExitCode::Command(3).summary().briefly(),
            "the command's own"
        );
    }
}
