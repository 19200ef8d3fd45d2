#!/usr/bin/env bash
# Builds lockrun and reproduces the user's own check: three instances of the same job started at
# once against one (throwaway) redis-server; exactly one runs it, the others log
# "redis lock already acquired", and the key is gone afterwards.
# Installs redis-server first if it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/ensure-redis.sh
cargo build --release --locked
bin=$PWD/target/release/lockrun
dir=$(mktemp -d)
trap 'kill "$redis_pid" 2>/dev/null; rm -rf "$dir"' EXIT
redis-server --port 0 --unixsocket "$dir/redis.sock" --save "" --dir "$dir" --logfile redis.log &
redis_pid=$!
for _ in $(seq 100); do [ -S "$dir/redis.sock" ] && break; sleep 0.05; done
export LOCKRUN_REDIS_URL="unix://$dir/redis.sock"

echo "=== three instances of the same cron job, started at once"
for i in 1 2 3; do
  "$bin" lock_key -- sh -c "echo \"instance $i: running the job\"; sleep 2" 2>&1 | sed "s/^/[instance $i] /" &
done
sleep 1
echo "=== while the job runs: redis-cli KEYS '*'; TTL lock_key"
redis-cli -s "$dir/redis.sock" KEYS '*'
redis-cli -s "$dir/redis.sock" TTL lock_key
wait $(jobs -p | grep -v "^$redis_pid$") 2>/dev/null || true
echo "=== after the job: EXISTS lock_key (0 = released)"
redis-cli -s "$dir/redis.sock" EXISTS lock_key
