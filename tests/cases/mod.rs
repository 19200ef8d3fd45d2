mod contention;
mod core;
mod supervision;
