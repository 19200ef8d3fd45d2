mod contention;
mod core;
mod faults;
mod faults_net;
mod hardening;
mod safety;
mod secrets;
pub(crate) mod supervision;
mod valkey;
