//! lockrun: run a command under a distributed lock held in Redis.
//!
//! Module map, one responsibility each:
//! - [`cli`]: the command line and its validation
//! - [`duration`]: `500ms` / `30s` / `forever`
//! - [`lock`]: the lock protocol behind the [`lock::LockService`] seam (Lua scripts on Redis)
//! - [`watchdog`]: lease renewal while the job runs
//! - [`signals`], [`spawn`], [`supervisor`]: signal capture, starting the command (vfork-style),
//!   its process group, reaping
//! - [`exit_codes`]: how every ending maps to a process exit code
//! - [`logging`]: lockrun's own lines on stderr (text or JSON)
//! - [`output`]: lockrun's own output on stdout (reports, help), safe on a full or closed stdout
//! - [`metrics`]: the run's record, and `--metrics-file` (Prometheus text)
//! - [`app`]: one run, start to finish
//! - [`ops`]: the operators' commands (status, list, release, history, doctor)

pub mod app;
pub mod cli;
pub mod duration;
pub mod exit_codes;
pub mod lock;
pub mod logging;
pub mod metrics;
pub mod ops;
pub mod output;
pub mod signals;
pub mod spawn;
pub mod supervisor;
pub mod watchdog;

use exit_codes::ExitCode;

/// Everything `main` does; returns the process exit code.
pub fn main() -> i32 {
    signals::record_sigpipe();
    pin_host_lookups();
    let code = run().code();
    // Lines still queued for a slow stderr reader; bounded, and after the lock is released.
    logging::flush();
    // Rust's own start-up code is not used (see main.rs), so nothing else flushes stdout.
    let _ = std::io::Write::flush(&mut std::io::stdout());
    code
}

fn run() -> ExitCode {
    let args = match cli::parse() {
        Ok(cli::Invocation::Run(args)) => *args,
        Ok(cli::Invocation::Verb(verb)) => return output::finish(ops::main(*verb)),
        Err(code) => return output::finish(code),
    };
    if let Err(code) = init_logging(&args.logs) {
        return code;
    }
    // From here on every ending is a run to record: the options are known, and a metrics file
    // that cannot be written can be said so in a log line.
    let metrics_file = args.metrics_file.clone();
    let mut record = metrics::RunRecord::begin(&args.key);
    // Handlers first, before any network I/O: a SIGTERM during start-up must not kill lockrun
    // with the default action while it may already hold the lock.
    let (code, interrupted) = match signals::Signals::install() {
        Ok(mut signals) => {
            let code = run_with(args, &mut signals, &mut record);
            (code, signals.interrupted())
        }
        Err(e) => {
            tracing::error!("cannot install signal handlers: {e}");
            (ExitCode::Internal, None)
        }
    };
    // Last, once the lock is released: a slow disk must not hold it.
    if let Some(path) = metrics_file {
        record.finish(code, interrupted.is_some());
        metrics::write(&path, &record);
    }
    code
}

/// Everything after the signal handlers: subreaper, the runtime, the run.
fn run_with(
    args: cli::Args,
    signals: &mut signals::Signals,
    record: &mut metrics::RunRecord,
) -> ExitCode {
    if args.subreaper {
        if let Err(e) = supervisor::become_subreaper() {
            tracing::error!("cannot become a child subreaper: {e}");
            return ExitCode::Internal;
        }
    }
    match runtime() {
        Ok(runtime) => runtime.block_on(app::run(args, signals, record)),
        Err(code) => code,
    }
}

/// Host names resolve from /etc/hosts and DNS only, in the static build (what packaging ships,
/// `packaging/build-static.sh`): glibc's built-in `files` and `dns` backends, never a `libnss_*`
/// module from /etc/nsswitch.conf.
///
/// Why: a statically linked glibc still honours nsswitch.conf by dlopen()ing `libnss_*.so`, and
/// those are the host's modules, built against the host's glibc rather than the one linked into
/// lockrun: a mismatch can crash the process. `files` and `dns` are compiled into libc.a and need
/// no dlopen.
/// What is lost: the other hosts backends (`mdns4_minimal`, LDAP/`sss`, `resolve` (nss-resolve),
/// `myhostname`); with systemd-resolved, its stub resolver in resolv.conf (127.0.0.53) still
/// answers, through `dns`. This is how musl builds of any program behave anyway (hosts file +
/// DNS, no NSS). The dynamic build (`cargo build`) keeps the system's full nsswitch.conf.
///
/// Called once, at the start of `main`: before any name resolution (Redis URLs, Sentinel names,
/// for the run form and every other command) and while lockrun is still single-threaded
/// (`__nss_configure_lookup` is not thread-safe). glibc only: musl (static by default) has no NSS.
#[cfg(all(target_env = "gnu", target_feature = "crt-static"))]
fn pin_host_lookups() {
    extern "C" {
        // <nss.h>; not in the libc crate. Overrides nsswitch.conf's line for one database.
        fn __nss_configure_lookup(
            dbname: *const std::ffi::c_char,
            service_line: *const std::ffi::c_char,
        ) -> std::ffi::c_int;
    }
    // SAFETY: two NUL-terminated constants; no other thread exists yet. It fails only for an
    // unknown database or a malformed line, neither possible with these constants, so the
    // result is not checked (nor could it be logged: logging starts after the command line).
    unsafe {
        __nss_configure_lookup(c"hosts".as_ptr(), c"files dns".as_ptr());
    }
}

/// The dynamic build uses the system's NSS as configured (see the static build's version).
#[cfg(not(all(target_env = "gnu", target_feature = "crt-static")))]
fn pin_host_lookups() {}

/// Logging as `-q`/`-v`/`--log-format` and `LOCKRUN_LOG` say (the run form and every other
/// command); a bad `LOCKRUN_LOG` is a usage error, said in one line.
pub fn init_logging(logs: &cli::Logs) -> Result<(), ExitCode> {
    let env_filter = std::env::var("LOCKRUN_LOG").ok();
    let json = logs.log_format == logging::Format::Json;
    // -v wins over LOCKRUN_QUIET (a flag over a variable); -q -v on one line conflict.
    let quiet = logs.quiet && (logs.verbose == 0 || logs.quiet_given);
    if quiet && logs.verbose > 0 {
        logging::print_early_error(
            "-q (--quiet) and -v (--verbose) cannot be used together (see 'lockrun --help')",
            json,
        );
        return Err(ExitCode::Usage);
    }
    logging::init(quiet, logs.verbose, env_filter.as_deref(), logs.log_format).map_err(|msg| {
        logging::print_early_error(&msg, json);
        ExitCode::Usage
    })
}

/// The async runtime. One thread is plenty for one connection, one timer and one child; it also
/// keeps start-up cheap and guarantees the forking thread (this one) lives as long as lockrun,
/// which the parent-death signal depends on.
pub fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(
            |e| match lock::errors::local_limit_of(e.raw_os_error(), "") {
                // Its epoll and event descriptors are lockrun's first: a descriptor limit shows here.
                Some(why) => {
                    tracing::error!("cannot start: {why}");
                    ExitCode::OsError
                }
                None => {
                    tracing::error!("cannot start the async runtime: {e}");
                    ExitCode::Internal
                }
            },
        )
}
