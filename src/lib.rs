//! lockrun: run a command under a distributed lock held in Redis.
//!
//! Module map, one responsibility each:
//! - [`cli`]: the command line and its parsing
//! - [`plan`]: resolve: parsed options and the environment become a validated plan (the one
//!   source of usage errors after parsing)
//! - [`duration`]: `500ms` / `30s` / `forever`
//! - [`lock`]: the lock protocol behind the [`lock::LockService`] seam (Lua scripts on Redis)
//! - [`watchdog`]: lease renewal while the job runs
//! - [`clock_rate`]: our clock's rate against the server's, measured from the lock's replies
//! - [`signals`], [`spawn`], [`supervisor`]: signal capture, starting the command (vfork-style),
//!   its process group, reaping
//! - [`ending`]: how a run ended, decided once; the exit code, history entry, metrics file and
//!   health-check ping are rendered from it
//! - [`exit_codes`]: how every ending maps to a process exit code, and what each code means
//! - [`logging`]: lockrun's own lines on stderr (text or JSON)
//! - [`utc`]: UTC times as text (the holder value, the run history, an error line before logging starts)
//! - [`output`]: lockrun's own output on stdout (reports, help), safe on a full or closed stdout
//! - [`stdio`]: descriptors 0, 1 and 2 closed at start get /dev/null in their place
//! - [`report`]: the one place a run reports to; renders the metrics file and the pings
//! - [`metrics`]: the run's record, and `--metrics-file` (Prometheus text)
//! - [`option_file`]: the files options name (passwords, certificates, the ping URL), read
//!   without ever blocking for good
//! - [`ping`]: `--ping`, the job's start and end reported to a health-check URL
//! - [`runtime`]: the async runtime
//! - [`app`]: one run, start to finish
//! - [`ops`]: the operators' commands (status, list, release, history, doctor)

pub mod app;
pub mod cli;
pub mod clock_rate;
pub mod duration;
pub mod ending;
pub mod exit_codes;
pub mod lock;
pub mod logging;
pub mod metrics;
pub mod ops;
pub mod option_file;
pub mod output;
pub mod ping;
pub mod plan;
pub mod report;
pub mod runtime;
pub mod signals;
pub mod spawn;
pub mod stdio;
pub mod supervisor;
pub mod utc;
pub mod watchdog;

use ending::Ending;
use exit_codes::ExitCode;

/// Everything `main` does; returns the process exit code.
pub fn main() -> i32 {
    // First of all: nothing may open a descriptor while 0, 1 or 2 is free.
    if let Err(why) = stdio::fill_closed() {
        // Before the command line is read: a text line (to a stderr that may be the one closed).
        logging::print_early_error(&why, false);
        logging::flush();
        return ExitCode::OsError.code();
    }
    signals::record_sigpipe();
    pin_host_lookups();
    let code = run().code();
    // Lines still queued for a slow stderr reader; bounded, and after the lock is released.
    logging::flush();
    // Rust's own start-up code is not used (see main.rs), so nothing else flushes stdout.
    let _ = std::io::Write::flush(&mut std::io::stdout());
    code
}

/// parse → logging → (signals) → resolve → runtime → the run or an operators' command.
fn run() -> ExitCode {
    let args = match cli::parse() {
        Ok(cli::Invocation::Run(args)) => *args,
        Ok(cli::Invocation::Verb(verb)) => return output::finish(operate(*verb)),
        Err(code) => return output::finish(code),
    };
    // Before any usage error the plan finds: those are log lines, in the format asked for.
    if let Err(code) = init_logging(&args.logs) {
        return code;
    }
    // From here on every ending is a run to record: the options are known, and a metrics file
    // that cannot be written can be said so in a log line.
    let mut report = report::Report::begin(
        &args.key,
        args.every,
        args.shared,
        args.metrics_file.clone(),
    );
    // Handlers first, before any network I/O (and before reading a password from a pipe): a
    // SIGTERM during start-up must not kill lockrun with the default action while it may
    // already hold the lock.
    let ending = match signals::Signals::install() {
        Ok(mut signals) => match plan::resolve(&args) {
            Ok(plan) => run_with(plan, &mut signals, &mut report),
            Err(usage) => {
                tracing::error!("{usage}");
                Ending::failed(ExitCode::Usage)
            }
        },
        Err(e) => {
            tracing::error!("cannot install signal handlers: {e}");
            Ending::failed(ExitCode::Internal)
        }
    };
    // Last, once the lock is released.
    report.finish(&ending);
    ending.code
}

/// Everything after the signal handlers and the plan: subreaper, the runtime, the run.
fn run_with(
    plan: plan::Plan,
    signals: &mut signals::Signals,
    report: &mut report::Report,
) -> Ending {
    if plan.subreaper {
        if let Err(e) = supervisor::become_subreaper() {
            tracing::error!("cannot become a child subreaper: {e}");
            return Ending::failed(ExitCode::Internal);
        }
    }
    match runtime::build() {
        Ok(runtime) => runtime.block_on(app::run(plan, signals, report)),
        Err(code) => Ending::failed(code),
    }
}

/// An operators' command: logging, its servers resolved, the runtime, the command.
fn operate(verb: cli::verbs::Verb) -> ExitCode {
    if let Err(code) = init_logging(&verb.common().logs) {
        return code;
    }
    let nodes = match plan::operation(&verb) {
        Ok(nodes) => nodes,
        Err(usage) => {
            tracing::error!("{usage}");
            return ExitCode::Usage;
        }
    };
    match runtime::build() {
        Ok(runtime) => runtime.block_on(ops::main(verb, nodes)),
        Err(code) => code,
    }
}

/// Logging as the command line's `-q`, `-v` and `--log-format` say.
fn init_logging(logs: &cli::Logs) -> Result<(), ExitCode> {
    logging::init_logging(logs.quiet, logs.quiet_given, logs.verbose, logs.log_format)
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
