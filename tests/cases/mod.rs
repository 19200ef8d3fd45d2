mod contention;
mod core;
mod faults;
mod supervision;
