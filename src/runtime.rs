//! The async runtime that the run and the operators' commands are driven by.

use crate::exit_codes::ExitCode;

/// One thread is plenty for one connection, one timer and one child; it also keeps start-up
/// cheap and guarantees the forking thread (this one) lives as long as lockrun, which the
/// parent-death signal depends on.
pub fn build() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(
            |e| match crate::lock::redis_errors::local_limit_of(e.raw_os_error(), "") {
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
