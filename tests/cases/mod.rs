mod core;
mod supervision;
