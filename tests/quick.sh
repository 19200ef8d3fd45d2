#!/usr/bin/env bash
# The quick loop while changing lockrun: the unit tests, then the end-to-end tests of the lock's
# core paths (acquire, run, renew, release; conflicts and waiting; signals and the job's group;
# the command line; the operators' commands; Redlock; bad input and broken output) against a
# real redis-server. About a minute here; `bash tests/run.sh` is the whole suite, Valkey and the
# real-program tests included, before a submission.
# Installs redis-server (and openssl, for the TLS test) first if missing, as tests/run.sh does.
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/ensure-redis.sh
# Most end-to-end tests wait on timers, not the CPU: six at a time on two cores.
export RUST_TEST_THREADS=${RUST_TEST_THREADS:-6}
cargo test --locked --lib "$@"
cargo test --locked --test lockrun "$@" -- cases::core:: cases::safety:: cases::contention:: \
  cases::supervision:: cases::schedule:: cases::odd_usage:: cases::operators:: cases::redlock:: \
  cases::broken_output:: cases::closed_stdio:: cases::command_cannot_start:: cases::secrets:: \
  cases::token_secrecy:: cases::unowned_keys:: cases::doc_links::
