mod contention;
mod core;
mod faults_net;
mod supervision;
