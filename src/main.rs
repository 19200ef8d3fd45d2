//! See the library crate: this file only hands the exit code to the OS.

fn main() {
    std::process::exit(lockrun::main());
}
