//! See the library crate: this file only hands the exit code to the OS.
//!
//! A C `main` instead of Rust's: Rust's start-up code sets SIGPIPE to "ignored" before a Rust
//! `main` runs, which erases whether lockrun's caller had ignored it, and the command must get
//! the caller's disposition (see `signals::record_sigpipe`). The one other thing that start-up
//! code does, /dev/null in place of a closed descriptor 0, 1 or 2, lockrun does itself
//! (`stdio::fill_closed`); arguments and environment are read through libc on Linux either way.
#![no_main]

#[no_mangle]
pub extern "C" fn main(
    _argc: std::ffi::c_int,
    _argv: *const *const std::ffi::c_char,
) -> std::ffi::c_int {
    lockrun::main()
}
