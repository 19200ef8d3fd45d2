//! lockrun: run a command under a distributed lock held in Redis.
//!
//! Module map, one responsibility each:
//! - [`cli`]: the command line and its validation
//! - [`duration`]: `500ms` / `30s` / `forever`
//! - [`lock`]: the lock protocol behind the [`lock::LockService`] seam (Lua scripts on Redis)
//! - [`watchdog`]: lease renewal while the job runs
//! - [`signals`], [`supervisor`]: signal capture, the child, its process group, reaping
//! - [`exit_codes`]: how every ending maps to a process exit code
//! - [`logging`]: lockrun's own lines on stderr (text or JSON)
//! - [`app`]: one run, start to finish

pub mod app;
pub mod cli;
pub mod duration;
pub mod exit_codes;
pub mod lock;
pub mod logging;
pub mod signals;
pub mod supervisor;
pub mod watchdog;

use exit_codes::ExitCode;

/// Everything `main` does; returns the process exit code.
pub fn main() -> i32 {
    signals::record_sigpipe();
    let code = run().code();
    // Lines still queued for a slow stderr reader; bounded, and after the lock is released.
    logging::flush();
    // Rust's own start-up code is not used (see main.rs), so nothing else flushes stdout.
    let _ = std::io::Write::flush(&mut std::io::stdout());
    code
}

fn run() -> ExitCode {
    let args = match cli::parse() {
        Ok(args) => args,
        Err(code) => return code,
    };
    let env_filter = std::env::var("LOCKRUN_LOG").ok();
    if let Err(msg) = logging::init(
        args.quiet,
        args.verbose,
        env_filter.as_deref(),
        args.log_format,
    ) {
        logging::print_early_error(&msg, args.log_format == logging::Format::Json);
        return ExitCode::Usage;
    }
    // Handlers first, before any network I/O: a SIGTERM during start-up must not kill lockrun
    // with the default action while it may already hold the lock.
    let mut signals = match signals::Signals::install() {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("cannot install signal handlers: {e}");
            return ExitCode::Internal;
        }
    };
    if args.subreaper {
        if let Err(e) = supervisor::become_subreaper() {
            tracing::error!("cannot become a child subreaper: {e}");
            return ExitCode::Internal;
        }
    }
    // One thread is plenty for one connection, one timer and one child; it also keeps start-up
    // cheap and guarantees the forking thread (this one) lives as long as lockrun, which the
    // parent-death signal depends on.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("cannot start the async runtime: {e}");
            return ExitCode::Internal;
        }
    };
    runtime.block_on(app::run(args, &mut signals))
}
