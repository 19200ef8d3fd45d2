#!/usr/bin/env bash
# Benchmarks lockrun against flock and the Redis lock tools people use today, on this machine,
# against a local throwaway redis-server, and prints Markdown tables (see README "Performance").
#
#   bash tests/bench/run.sh            # everything (~5 min)
#   bash tests/bench/run.sh overhead   # one part: overhead | servercost | roundtrips | memory | scale | contention | topologies
#
# Installs what it needs when missing: redis-server, hyperfine, GNU time, etcd, valgrind (Debian packages)
# and redis-py, python-redis-lock, pottery (into a virtualenv under target/bench-venv).
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/ensure-redis.sh
need=()
command -v hyperfine >/dev/null || need+=(hyperfine)
[ -x /usr/bin/time ] || need+=(time)
command -v etcd >/dev/null || need+=(etcd-server)
command -v etcdctl >/dev/null || need+=(etcd-client)
command -v valgrind >/dev/null || need+=(valgrind)
if [ ${#need[@]} -gt 0 ]; then
  echo ">>> installing benchmark tools with apt-get: ${need[*]}" >&2
  sudo=""; [ "$(id -u)" != 0 ] && sudo=sudo
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
venv=target/bench-venv
if [ ! -x "$venv/bin/python" ]; then
  echo ">>> creating $venv with redis-py, python-redis-lock, pottery" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q redis python-redis-lock pottery
fi
cargo build --release --locked
# The lockrun that ships: static glibc (packaging/build-static.sh prints its path last).
BENCH_LOCKRUN=$(bash packaging/build-static.sh | tail -n 1)
export BENCH_LOCKRUN
# The floor program: the least a lock wrapper can do (see floor.c), dynamic and static.
command -v cc >/dev/null || { echo ">>> installing gcc with apt-get" >&2; sudo=""; [ "$(id -u)" != 0 ] && sudo=sudo; $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc libc6-dev >/dev/null; }
cc -O2 -o target/bench-floor tests/bench/floor.c
cc -O2 -static -o target/bench-floor-static tests/bench/floor.c
exec "$venv/bin/python" tests/bench/bench.py "$@"
