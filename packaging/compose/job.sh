#!/bin/sh
# The job: stands for the real cron task (a report, a cleanup). It runs only under the lock.
# JOB_SECONDS: how long it works; JOB_EXIT: its exit code (lockrun exits with it).
trap 'echo "job: got SIGTERM after lockrun forwarded it; cleaning up"; exit 143' TERM
echo "job: running on $(hostname) key=$LOCKRUN_KEY fence=$LOCKRUN_FENCE"
sleep "${JOB_SECONDS:-3}"
echo "job: done, exit ${JOB_EXIT:-0}"
exit "${JOB_EXIT:-0}"
