#!/bin/sh
# A cron replacement for a container, small enough to copy: every TICK_SECONDS, aligned to the
# wall clock (so every replica ticks at the same moment, like cron on several hosts), run the job
# through lockrun. Exactly one replica gets each tick; the others log "redis lock already
# acquired" and skip (-E 0: a skip is a success).
#
# --every (the tick's period) keeps the lock for most of the tick even when the job is quick (the
# period less a tenth, at least 1 s), so a replica whose tick comes late (a slow start, a stalled
# node) cannot run the same tick again after the first one released; the key then expires before
# the next tick.
#
# This shell is PID 1 of the container: it traps SIGTERM (docker stop, a pod's deletion) and
# passes it to the running lockrun, which forwards it to the job's process group, waits for the
# job, releases the lock and exits with the job's code. Orphans of the job are reaped by lockrun
# (--subreaper), not left to this shell.
set -u
# One stream for everything this container prints (this shell, lockrun's log, the job): Docker
# reads stdout and stderr through two pipes and may store a line of one before an earlier line
# of the other, so "tick: slot=…" could land after the lockrun line it precedes.
exec 2>&1
key=${LOCKRUN_KEY_NAME:-report}
tick=${TICK_SECONDS:-10}
child=

stop() {
  echo "tick: $1, stopping"
  if [ -n "$child" ]; then
    kill -TERM "$child" 2>/dev/null
    wait "$child"
    echo "tick: lockrun exit=$?"
  fi
  exit 143
}
trap 'stop SIGTERM' TERM
trap 'stop SIGINT' INT

while :; do
  # Sleep to the next multiple of $tick seconds, to the nanosecond (whole seconds would let
  # replicas drift apart by up to a second).
  ns=$(date +%s%N)
  left=$((tick * 1000000000 - ns % (tick * 1000000000)))
  sleep "$((left / 1000000000)).$(printf %09d $((left % 1000000000)))" &
  wait $!                                   # a trapped signal interrupts this wait at once
  slot=$(date +%s)
  echo "tick: slot=$((slot - slot % tick))"
  lockrun -E 0 --subreaper --every "${tick}s" "$key" -- /usr/local/bin/job.sh &
  child=$!
  wait "$child"
  rc=$?
  child=
  echo "tick: lockrun exit=$rc"
done
