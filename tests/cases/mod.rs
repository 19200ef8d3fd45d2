mod core;
