mod contention;
mod core;
mod safety;
pub(crate) mod supervision;
