#!/usr/bin/env bash
# The whole test suite: unit tests plus end-to-end tests of the real binary against real
# redis-server processes (each test starts its own on a unix socket in a temp dir).
# Installs redis-server first if it is missing.
# Fault-injection scenarios (tests/cases/faults.rs, `faults_*`): LOCKRUN_FAULTS_SEED=<n> replays a
# run's random choices, LOCKRUN_FAULTS_SCALE=<x> multiplies the work, LOCKRUN_FAULTS_REPORT=<file>
# collects the results table, e.g. LOCKRUN_FAULTS_SCALE=10 LOCKRUN_FAULTS_REPORT=f.md bash tests/run.sh faults_
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/ensure-redis.sh
source tests/ensure-valkey.sh
cargo test --locked "$@"
