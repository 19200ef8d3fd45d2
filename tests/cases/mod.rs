mod contention;
mod core;
mod faults;
mod faults_net;
mod holder_id;
mod safety;
pub(crate) mod supervision;
