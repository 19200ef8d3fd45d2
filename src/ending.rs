//! How a run ended, decided in one place: [`decide`] turns what the run came to (a
//! [`Course`]) into its [`Ending`], and everything that reports the end is rendered from that:
//! the process exit code ([`Ending::code`]), the key's history entry ([`Ending::note`]), the
//! metrics file ([`crate::metrics::RunRecord::finish`]) and the health-check ping
//! ([`crate::ping::end_signal`]).
//!
//! A new way for a run to end is one variant of [`Course`] (or of [`Stopped`], for a new reason
//! lockrun stops a job) and one arm of [`decide`].

use crate::exit_codes::ExitCode;
use crate::lock::{Note, Outcome};
use std::time::Duration;

/// How the supervised job ended, as the supervisor saw it once every process of it was gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobEnd {
    /// The command's wait status: [`ExitCode::Command`] or [`ExitCode::Signaled`]
    /// ([`ExitCode::Internal`] should it never have been collected).
    pub status: ExitCode,
    /// Why lockrun stopped the job, if it did: the reason that decides the run's ending.
    pub stopped: Stopped,
    /// The watchdog found the lock lost (with `--on-lost continue` the job then ran on).
    pub lock_lost: bool,
}

/// Why lockrun stopped the job. Several reasons can hold at once (a stop signal, then the lock
/// lost); the one given is the lock if it is one, else whichever of a stop signal and the time
/// limit came first, else leftovers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// lockrun did not stop it: the command ended by itself, with no process left behind.
    No,
    /// The lock was being lost, or could no longer be confirmed (`--on-lost terminate`).
    Lock,
    /// A stop signal lockrun received and passed on to the job.
    Signal,
    /// The command was still running when `--time-limit` ran out.
    TimeLimit,
    /// The command exited and left processes that lockrun stopped.
    Leftovers,
}

/// What a run came to: the facts its ending is decided from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Course {
    /// Ended before any job could run, with this code: a usage error, a server that could not
    /// be reached or refused lockrun, a limit of the machine, a command that could not be
    /// started. One of the error codes ([`ExitCode::Usage`], [`ExitCode::Unavailable`],
    /// [`ExitCode::Internal`], [`ExitCode::IoError`], [`ExitCode::OsError`],
    /// [`ExitCode::NotExecutable`], [`ExitCode::NotFound`]).
    Failed(ExitCode),
    /// Not run: the lock was held elsewhere; `code` is `-E`'s. `leased`: a lease was taken and
    /// expired before the command could start.
    Skipped { code: u8, leased: bool },
    /// A stop signal (this one) came before the command started.
    Aborted(i32),
    /// The command ran.
    Ran {
        job: JobEnd,
        /// lockrun received a stop signal before the job was gone.
        stop_received: bool,
        /// The release found the key gone or another holder's: the job ran without the lock
        /// for a while.
        key_gone: bool,
    },
}

/// How a run ended: what its exit code, history entry and metrics file say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ending {
    /// lockrun's own exit code.
    pub code: ExitCode,
    /// The `outcome` of the history entry and of the metrics file.
    pub outcome: Outcome,
    /// The lock was lost while the job ran (whatever the exit code: with `--on-lost continue`
    /// it is the job's own).
    pub lost: bool,
    /// What it was decided from.
    pub course: Course,
}

/// The ending of a run that came to `course`.
///
/// The exit code alone cannot tell "stopped from outside" from "finished": a job that traps
/// SIGTERM exits with a code of its choosing (often 0), and one that kills itself with SIGTERM
/// exits 143 with nobody having stopped it. So a signal is judged by what lockrun received,
/// not by the code. A lost lock wins over a signal and over the time limit: it is the one an
/// operator must hear about (the job may have run unprotected). A job stopped at its time limit
/// exits 124 whatever its status says (it may trap SIGTERM and exit 0, or need SIGKILL), as
/// the time limit, not the job, ended it.
pub fn decide(course: Course) -> Ending {
    let (code, outcome, lost) = match course {
        Course::Failed(code) => (code, Outcome::Error, false),
        Course::Skipped { code, .. } => (ExitCode::Conflict(code), Outcome::Skipped, false),
        Course::Aborted(sig) => (ExitCode::Aborted(sig), Outcome::Aborted, false),
        Course::Ran {
            job,
            stop_received,
            key_gone,
        } => {
            let lost = job.lock_lost || job.stopped == Stopped::Lock || key_gone;
            let code = match job.stopped {
                Stopped::Lock => ExitCode::LockLost,
                Stopped::TimeLimit => ExitCode::TimedOut,
                Stopped::No | Stopped::Signal | Stopped::Leftovers => job.status,
            };
            let outcome = match code {
                ExitCode::LockLost => Outcome::Lost,
                ExitCode::TimedOut | ExitCode::Command(_) | ExitCode::Signaled(_) if lost => {
                    Outcome::Lost
                }
                ExitCode::TimedOut => Outcome::Timeout,
                ExitCode::Command(_) | ExitCode::Signaled(_) if stop_received => Outcome::Aborted,
                ExitCode::Command(_) | ExitCode::Signaled(_) => Outcome::Ran,
                _ => Outcome::Error,
            };
            (code, outcome, lost)
        }
    };
    Ending {
        code,
        outcome,
        lost,
        course,
    }
}

impl Ending {
    /// A run that ended with the error `code` before any job could run.
    pub fn failed(code: ExitCode) -> Ending {
        decide(Course::Failed(code))
    }

    /// The same run, its release having found the key gone or another holder's.
    pub fn key_gone(self) -> Ending {
        match self.course {
            Course::Ran {
                job, stop_received, ..
            } => decide(Course::Ran {
                job,
                stop_received,
                key_gone: true,
            }),
            _ => self,
        }
    }

    /// The run's entry in the key's history, `duration` after lockrun started. A skip that
    /// never held a lease has no exit code there, like the one the acquire script writes for a
    /// skip without a wait.
    pub fn note(&self, duration: Duration) -> Note {
        let exit_code = match self.course {
            Course::Skipped { leased: false, .. } => None,
            _ => Some(self.code.code()),
        };
        Note {
            outcome: self.outcome,
            exit_code,
            duration,
            completes_tick: self.completes_tick(),
            reopened: false,
        }
    }

    /// With `--standby`: whether this run completed its tick, so that no other host runs it
    /// again; else the tick is handed on to a standby. A job that exited by itself completed
    /// it, whatever its exit code: it ran, its failure is reported (exit code, history,
    /// alerts), and running a job that failed again on another host is not what a schedule
    /// asked for. So did a job stopped by `--time-limit`: it had all the time it was given.
    /// A job that did not get to its end did not: killed by a signal (the OOM killer, an
    /// operator's kill), stopped because lockrun was told to stop (a node drained, a unit
    /// stopped), its lock lost, or never started.
    pub fn completes_tick(&self) -> bool {
        match self.course {
            Course::Ran {
                job, stop_received, ..
            } => {
                let ended = match job.stopped {
                    Stopped::No | Stopped::Leftovers => matches!(job.status, ExitCode::Command(_)),
                    // It had all the time it was given; another host's run would hang alike.
                    Stopped::TimeLimit => true,
                    Stopped::Lock | Stopped::Signal => false,
                };
                ended && !stop_received && !self.lost
            }
            Course::Failed(_) | Course::Skipped { .. } | Course::Aborted(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ExitCode::*;

    fn job(status: ExitCode, stopped: Stopped, lock_lost: bool) -> JobEnd {
        JobEnd {
            status,
            stopped,
            lock_lost,
        }
    }

    fn ran(job: JobEnd, stop_received: bool, key_gone: bool) -> Course {
        Course::Ran {
            job,
            stop_received,
            key_gone,
        }
    }

    /// A run that ran no job ends with its own code: an error, a skip with `-E`'s code, an
    /// abort with 128+N.
    #[test]
    fn a_run_without_a_job_ends_with_its_own_code() {
        let end = |course| {
            let e = decide(course);
            (e.code, e.outcome, e.lost)
        };
        for code in [
            Usage,
            Unavailable,
            Internal,
            IoError,
            OsError,
            NotExecutable,
            NotFound,
        ] {
            assert_eq!(end(Course::Failed(code)), (code, Outcome::Error, false));
        }
        for (code, leased) in [(75, false), (75, true), (0, false), (3, true)] {
            assert_eq!(
                end(Course::Skipped { code, leased }),
                (Conflict(code), Outcome::Skipped, false)
            );
        }
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT] {
            assert_eq!(
                end(Course::Aborted(sig)),
                (Aborted(sig), Outcome::Aborted, false)
            );
        }
    }

    /// A job that ran: its own code unless the lock or the time limit stopped it.
    #[test]
    fn a_job_that_ran_ends_with_its_code_unless_lockrun_stopped_it() {
        let end = |course| {
            let e = decide(course);
            (e.code, e.outcome, e.lost)
        };
        let plain = |status| job(status, Stopped::No, false);
        assert_eq!(
            end(ran(plain(Command(0)), false, false)),
            (Command(0), Outcome::Ran, false)
        );
        // --on-lost continue: the job's own code, lost.
        assert_eq!(
            end(ran(job(Command(5), Stopped::No, true), false, false)),
            (Command(5), Outcome::Lost, true)
        );
        // --on-lost terminate, the watchdog's verdict or the deadline's.
        for lock_lost in [true, false] {
            assert_eq!(
                end(ran(
                    job(Signaled(15), Stopped::Lock, lock_lost),
                    true,
                    false
                )),
                (LockLost, Outcome::Lost, true)
            );
        }
        // A forwarded SIGTERM.
        assert_eq!(
            end(ran(job(Signaled(15), Stopped::Signal, false), true, false)),
            (Signaled(15), Outcome::Aborted, false)
        );
        // A terminal's Ctrl-C is not a reason to stop the job, yet lockrun received it.
        assert_eq!(
            end(ran(plain(Signaled(2)), true, false)),
            (Signaled(2), Outcome::Aborted, false)
        );
        // The key gone at release after a job that ran.
        assert_eq!(
            end(ran(plain(Command(0)), false, true)),
            (Command(0), Outcome::Lost, true)
        );
        // Leftovers stopped after the command exited: the command's own code.
        for status in [Command(0), Command(3), Signaled(9)] {
            assert_eq!(
                end(ran(job(status, Stopped::Leftovers, false), false, false)),
                (status, Outcome::Ran, false)
            );
        }
        // A stop signal and a lost lock: the lock's ending.
        assert_eq!(
            end(ran(job(Signaled(15), Stopped::Lock, true), true, false)),
            (LockLost, Outcome::Lost, true)
        );
    }

    /// The time limit against the other reasons: the lost lock wins over it, it wins over a
    /// stop signal that came after it (the supervisor says `Stopped::Signal` for one that came
    /// before), and 124 stands whatever the job's status.
    #[test]
    fn a_time_limit_ends_124_timeout_unless_the_lock_was_lost() {
        let end = |course| {
            let e = decide(course);
            (e.code, e.outcome, e.lost)
        };
        let limited = |status| job(status, Stopped::TimeLimit, false);
        // It died of the SIGTERM, trapped it and exited 0, or needed SIGKILL.
        for status in [Signaled(15), Command(0), Signaled(9)] {
            assert_eq!(
                end(ran(limited(status), false, false)),
                (TimedOut, Outcome::Timeout, false),
                "{status:?}"
            );
        }
        // A stop signal after the limit: still the limit's ending.
        assert_eq!(
            end(ran(limited(Signaled(15)), true, false)),
            (TimedOut, Outcome::Timeout, false)
        );
        // A stop signal before it: the supervisor says so, and the run is aborted.
        assert_eq!(
            end(ran(job(Signaled(15), Stopped::Signal, false), true, false)),
            (Signaled(15), Outcome::Aborted, false)
        );
        // --on-lost continue, then the limit: 124, but lost.
        assert_eq!(
            end(ran(
                job(Signaled(15), Stopped::TimeLimit, true),
                false,
                false
            )),
            (TimedOut, Outcome::Lost, true)
        );
        // --on-lost terminate: the lock's ending.
        assert_eq!(
            end(ran(job(Signaled(9), Stopped::Lock, true), false, false)),
            (LockLost, Outcome::Lost, true)
        );
        // The key gone at release.
        let timed_out = decide(ran(limited(Signaled(15)), false, false));
        let gone = timed_out.key_gone();
        assert_eq!(
            (gone.code, gone.outcome, gone.lost),
            (TimedOut, Outcome::Lost, true)
        );
        assert!(timed_out.outcome.lost_if_key_gone());
        assert_eq!(timed_out.note(Duration::ZERO).exit_code, Some(124));
    }

    #[test]
    fn a_key_gone_at_release_makes_only_a_run_that_ran_lost() {
        let ran = decide(ran(job(Command(0), Stopped::No, false), false, false));
        assert_eq!(ran.outcome, Outcome::Ran);
        let gone = ran.key_gone();
        assert_eq!(
            (gone.code, gone.outcome, gone.lost),
            (Command(0), Outcome::Lost, true)
        );
        for course in [
            Course::Failed(NotFound),
            Course::Aborted(libc::SIGTERM),
            Course::Skipped {
                code: 75,
                leased: true,
            },
        ] {
            assert_eq!(decide(course).key_gone(), decide(course), "{course:?}");
        }
    }

    #[test]
    fn the_history_entry_says_the_ending() {
        let d = Duration::from_millis(1500);
        let note = |course| {
            let n = decide(course).note(d);
            assert_eq!(n.duration, d);
            (n.outcome, n.exit_code)
        };
        assert_eq!(
            note(ran(job(Command(3), Stopped::No, false), false, false)),
            (Outcome::Ran, Some(3))
        );
        assert_eq!(
            note(ran(job(Command(0), Stopped::Lock, true), false, false)),
            (Outcome::Lost, Some(76))
        );
        assert_eq!(
            note(Course::Aborted(libc::SIGTERM)),
            (Outcome::Aborted, Some(143))
        );
        assert_eq!(note(Course::Failed(NotFound)), (Outcome::Error, Some(127)));
        // A lease that expired before the start: skipped, with the -E code.
        let leased = Course::Skipped {
            code: 75,
            leased: true,
        };
        assert_eq!(note(leased), (Outcome::Skipped, Some(75)));
        // A wait that ran out in the queue: skipped, no code.
        let queued = Course::Skipped {
            code: 75,
            leased: false,
        };
        assert_eq!(note(queued), (Outcome::Skipped, None));
    }

    #[test]
    fn only_a_job_that_exited_by_itself_with_the_lock_completes_its_tick() {
        let completes = |course| decide(course).completes_tick();
        for code in [0, 1, 3, 126] {
            assert!(completes(ran(
                job(Command(code), Stopped::No, false),
                false,
                false
            )));
        }
        // Its leftovers stopped after it exited: it did exit.
        assert!(completes(ran(
            job(Command(0), Stopped::Leftovers, false),
            false,
            false
        )));
        // Killed by a signal nobody sent through lockrun (the OOM killer, an operator).
        assert!(!completes(ran(
            job(Signaled(9), Stopped::No, false),
            false,
            false
        )));
        // lockrun told to stop: the job exits as it likes, the run did not get to its end.
        assert!(!completes(ran(
            job(Command(0), Stopped::Signal, false),
            true,
            false
        )));
        // The lock lost, seen by the watchdog or at the release.
        assert!(!completes(ran(
            job(Command(0), Stopped::No, true),
            false,
            false
        )));
        assert!(!completes(ran(
            job(LockLost, Stopped::Lock, true),
            false,
            false
        )));
        assert!(!completes(ran(
            job(Command(0), Stopped::No, false),
            false,
            true
        )));
        // Stopped by --time-limit, whatever the SIGTERM made of it.
        assert!(completes(ran(
            job(Signaled(15), Stopped::TimeLimit, false),
            false,
            false
        )));
        assert!(completes(ran(
            job(Command(0), Stopped::TimeLimit, false),
            false,
            false
        )));
        // Never started, stopped before the start, skipped.
        assert!(!completes(Course::Failed(NotFound)));
        assert!(!completes(Course::Aborted(libc::SIGTERM)));
        assert!(!completes(Course::Skipped {
            code: 0,
            leased: false
        }));
    }
}
