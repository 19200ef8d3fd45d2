//! End-to-end tests: the real `lockrun` binary against real `redis-server` processes.

mod cases;
mod support;
