#!/bin/sh
# The job: stands for the real cron task (a report, a cleanup). It runs only under the lock.
# JOB_SECONDS: how long it works; JOB_EXIT: its exit code (lockrun exits with it).
#
# It stops at once on SIGTERM, and takes its own child with it. The work (here a sleep) runs in
# the background and the shell waits for it: a trapped signal interrupts `wait` at once, where a
# shell would run the trap only after a foreground command ends. That matters when lockrun
# itself is killed (SIGKILL, the OOM killer): then only this shell gets SIGTERM (the parent-death
# signal lockrun sets), not its process group, and the lock outlives it until its TTL ends.
trap 'echo "job: got SIGTERM; cleaning up"; kill "$work" 2>/dev/null; exit 143' TERM
echo "job: running on $(hostname) key=$LOCKRUN_KEY fence=$LOCKRUN_FENCE"
sleep "${JOB_SECONDS:-3}" &
work=$!
wait "$work"
echo "job: done, exit ${JOB_EXIT:-0}"
exit "${JOB_EXIT:-0}"
