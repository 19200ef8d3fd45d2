//! lockrun's own output on stdout: the operators' commands' reports, `--help`, `--version`.
//!
//! Standard output is input too: a reader that went away (`lockrun list | grep -q x`) and a full
//! disk are facts of life, and lockrun must not panic on them (std's `print!` does). lockrun
//! ignores SIGPIPE for itself (see `signals::record_sigpipe`), so a closed pipe is an EPIPE
//! error here: the rest of the output is dropped and the command ends quietly with its own exit
//! code, as ripgrep and fd do. Any other failure is said in one line on stderr and makes the
//! exit code 74 (EX_IOERR): a script that saved the output must not take a truncated file for a
//! whole one. A stdout that was closed when lockrun started (`lockrun status k >&-`) is such a
//! failure too.

use crate::exit_codes::ExitCode;
use std::io::Write;
use std::sync::Mutex;

/// The first write that failed (its error kind and message); later writes are skipped.
static FAILED: Mutex<Option<(std::io::ErrorKind, String)>> = Mutex::new(None);

/// Writes `text` to stdout and flushes it; a failure is kept for [`finish`].
pub fn print(text: &str) {
    let mut failed = FAILED.lock().unwrap_or_else(|e| e.into_inner());
    if failed.is_some() {
        return;
    }
    // Closed by the caller: /dev/null stands in for it (see `stdio`), and a write there would
    // succeed, but nobody can read it. It is a write that failed, as it would have been with
    // the descriptor left closed.
    if crate::stdio::was_closed(1) {
        *failed = Some((
            std::io::ErrorKind::Other,
            "it was closed when lockrun started".into(),
        ));
        return;
    }
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        *failed = Some((e.kind(), e.to_string()));
    }
}

/// [`print`] of a line.
pub fn println(line: &str) {
    print(&format!("{line}\n"));
}

/// The exit code, once everything is written: `code` itself, unless a write failed other
/// than by a closed pipe (said on stderr, exit 74).
pub fn finish(code: ExitCode) -> ExitCode {
    let failed = FAILED.lock().unwrap_or_else(|e| e.into_inner()).take();
    match failed {
        None => code,
        Some((std::io::ErrorKind::BrokenPipe, _)) => code,
        Some((_, why)) => {
            crate::logging::print_early_error(
                &format!("cannot write to standard output: {why}"),
                false,
            );
            ExitCode::IoError
        }
    }
}
