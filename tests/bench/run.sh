#!/usr/bin/env bash
# Benchmarks lockrun against flock and the Redis lock tools people use today, on this machine,
# against a local throwaway redis-server.
#
#   bash tests/bench/run.sh            # everything: writes docs/benchmarks.md (~15 min)
#   bash tests/bench/run.sh overhead   # one part, its table on stdout: overhead | servercost |
#                                      # roundtrips | memory | scale | contention | waiting |
#                                      # topologies | fleet
#   bash tests/bench/run.sh --update waiting
#                                      # one part measured again into docs/benchmarks.md, in
#                                      # place of its old tables (which say when they were measured)
#   BENCH_BASELINE=/path/to/other/lockrun bash tests/bench/run.sh overhead
#                                      # another build side by side with this one (overhead,
#                                      # memory, fleet)
#
# Installs what the parts asked for need when missing: redis-server, hyperfine, GNU time, etcd,
# valgrind (Debian packages) and redis-py, python-redis-lock, pottery (into a virtualenv under
# target/bench-venv).
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/ensure-redis.sh
# Whether one of the parts named is among those asked for (all of them when none is).
wants() {
  local asked=" ${*:$#} " part
  [ "$asked" = "  " ] && return 0
  for part in "${@:1:$#-1}"; do [[ "$asked" == *" $part "* ]] && return 0; done
  return 1
}
asked="$*"
need=()
if wants overhead memory topologies "$asked"; then
  command -v hyperfine >/dev/null || need+=(hyperfine)
  [ -x /usr/bin/time ] || need+=(time)
fi
if wants overhead memory "$asked"; then
  command -v etcd >/dev/null || need+=(etcd-server)
  command -v etcdctl >/dev/null || need+=(etcd-client)
fi
if wants servercost "$asked"; then
  command -v valgrind >/dev/null || need+=(valgrind)
fi
if [ ${#need[@]} -gt 0 ]; then
  echo ">>> installing benchmark tools with apt-get: ${need[*]}" >&2
  sudo=""; [ "$(id -u)" != 0 ] && sudo=sudo
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
# The Python lock libraries, for the parts that compare lockrun with them.
py=python3
if wants overhead memory "$asked"; then
  venv=target/bench-venv
  if [ ! -x "$venv/bin/python" ]; then
    echo ">>> creating $venv with redis-py, python-redis-lock, pottery" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q redis python-redis-lock pottery
  fi
  py=$venv/bin/python
fi
cargo build --release --locked
# The fleet part's load generator, for fleets larger than this machine runs as processes.
if wants fleet "$asked"; then
  cargo build --release --locked --example tick-load >&2
fi
# The lockrun that ships: static-pie glibc (packaging/build-static.sh prints its path last).
BENCH_LOCKRUN=$(bash packaging/build-static.sh | tail -n 1)
export BENCH_LOCKRUN
# The same static build at a fixed address, to show what shipping a static-pie costs at start
# (overhead only; a target directory of its own, so the shipped build is not overwritten).
if wants overhead "$asked"; then
  triple=$(rustc -vV | sed -n 's/^host: //p')
  RUSTFLAGS="-C target-feature=+crt-static -C relocation-model=static --cfg getrandom_backend=\"linux_getrandom\"" \
    cargo build --release --locked --target "$triple" --bin lockrun --target-dir target/bench-fixed >&2
  BENCH_LOCKRUN_FIXED=$PWD/target/bench-fixed/$triple/release/lockrun
  export BENCH_LOCKRUN_FIXED
fi
# The floor program: the least a lock wrapper can do (see floor.c), dynamic and static.
command -v cc >/dev/null || { echo ">>> installing gcc with apt-get" >&2; sudo=""; [ "$(id -u)" != 0 ] && sudo=sudo; $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc libc6-dev >/dev/null; }
cc -O2 -o target/bench-floor tests/bench/floor.c
cc -O2 -static -o target/bench-floor-static tests/bench/floor.c
if [ $# = 0 ]; then
  mkdir -p docs
  "$py" tests/bench/bench.py > docs/benchmarks.md.tmp
  mv docs/benchmarks.md.tmp docs/benchmarks.md
  echo "wrote docs/benchmarks.md" >&2
else
  exec "$py" tests/bench/bench.py "$@"
fi
