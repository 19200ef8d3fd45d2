#!/usr/bin/env bash
# Builds lockrun (the static binary that ships) and reproduces the user's own check: three
# instances of the same job started at once against one (throwaway) redis-server; exactly one
# runs it, the others log "redis lock already acquired", and the key is gone afterwards. Exits 1
# if any of that does not hold. Installs redis-server first if it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/ensure-redis.sh
# The binary that ships (static-pie; packaging/build-static.sh prints its path last), so CI's
# packaging step that follows reuses this build.
bin=$(bash packaging/build-static.sh | tail -n 1)
dir=$(mktemp -d)
trap 'kill "$redis_pid" 2>/dev/null; rm -rf "$dir"' EXIT
redis-server --port 0 --unixsocket "$dir/redis.sock" --save "" --dir "$dir" --logfile redis.log &
redis_pid=$!
for _ in $(seq 100); do [ -S "$dir/redis.sock" ] && break; sleep 0.05; done
export LOCKRUN_REDIS_URL="unix://$dir/redis.sock"

echo "=== three instances of the same cron job, started at once"
pids=()
for i in 1 2 3; do
  "$bin" lock_key -- sh -c "echo \"instance $i: running the job\"; sleep 2" 2>&1 | sed "s/^/[instance $i] /" | tee -a "$dir/out" &
  pids+=($!)  # the pipeline's tee, which ends after lockrun's last line is written
done
sleep 1
echo "=== while the job runs: redis-cli KEYS '*'; TTL lock_key"
redis-cli -s "$dir/redis.sock" KEYS '*'
redis-cli -s "$dir/redis.sock" TTL lock_key
# Each pipeline's status is lockrun's (pipefail): 0 for the instance that ran, 75 for those that
# skipped. Collected rather than left to `set -e`, which would stop here at the first 75.
statuses=()
for pid in "${pids[@]}"; do rc=0; wait "$pid" || rc=$?; statuses+=("$rc"); done
codes=$(printf '%s\n' "${statuses[@]}" | sort -n | xargs)
echo "=== exit codes: $codes"
echo "=== after the job: EXISTS lock_key (0 = released)"
exists=$(redis-cli -s "$dir/redis.sock" EXISTS lock_key)
echo "$exists"
# The check itself, so that the README's first command fails when the promise does not hold.
ran=$(grep -c 'running the job' "$dir/out" || true)
skipped=$(grep -c 'redis lock already acquired' "$dir/out" || true)
if [ "$ran" = 1 ] && [ "$skipped" = 2 ] && [ "$codes" = "0 75 75" ] && [ "$exists" = 0 ]; then
  echo "=== ok: one instance ran the job (exit 0), two skipped it (exit 75), the key is gone"
else
  echo "=== FAILED: $ran instance(s) ran the job (want 1), $skipped skipped (want 2), exit codes $codes (want 0 75 75), EXISTS lock_key $exists (want 0)" >&2
  exit 1
fi
