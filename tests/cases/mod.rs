mod contention;
mod core;
mod faults;
mod faults_net;
mod hardening;
mod safety;
pub(crate) mod supervision;
mod valkey;
