#!/usr/bin/env bash
# The whole test suite: unit tests plus end-to-end tests of the real binary against real
# redis-server processes (each test starts its own on a unix socket in a temp dir).
# Installs redis-server first if it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/ensure-redis.sh
cargo test --locked "$@"
