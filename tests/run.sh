#!/usr/bin/env bash
# The whole test suite: unit tests plus end-to-end tests of the real binary against real
# redis-server processes (each test starts its own on a unix socket in a temp dir).
# Installs redis-server first if it is missing (and fetches Valkey, Redis 6.0 for the test of its
# ACL line, prometheus_client for the metrics file tests, and actionlint, zizmor and
# check-jsonschema for the CI examples' test).
# Fault-injection scenarios (tests/cases/faults.rs, `faults_*`): LOCKRUN_FAULTS_SEED=<n> replays a
# run's random choices, LOCKRUN_FAULTS_SCALE=<x> multiplies the work, LOCKRUN_FAULTS_REPORT=<file>
# collects the results table, e.g. LOCKRUN_FAULTS_SCALE=10 LOCKRUN_FAULTS_REPORT=f.md bash tests/run.sh faults_
# The real-cron test (tests/cases/cron.rs, `cron_*`, root only): LOCKRUN_CRON_MINUTES=<n> minutes
# observed (default 3), LOCKRUN_CRON_REPORT=<file> its results table; tests/ensure-cron.sh
# installs cron, libfaketime and busybox-static for it. Its --standby test
# (tests/cases/cron_standby.rs, also root only, with tests/ensure-netns.sh's tools too) takes
# the same LOCKRUN_CRON_MINUTES (its default 4: each fault at least once), and
# LOCKRUN_CRON_STANDBY_REPORT=<file> for its table.
# The availability suite (tests/cases/ha_*.rs: Sentinel, Cluster and Redlock under partitions,
# restarts and clock steps; root only; tests/ensure-netns.sh installs ip, iptables, nsenter):
# LOCKRUN_FAULTS_SCALE=<n> runs each scenario n times, LOCKRUN_HA_REPORT=<file> collects the
# availability table's rows; bash tests/ha-table.sh regenerates docs/availability.md's table.
# Its tick rows (tests/cases/tick_faults.rs): LOCKRUN_TICKS_REPORT=<file> collects the tick
# table's rows; bash tests/ha-table.sh --ticks regenerates that table.
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/ensure-redis.sh
source tests/ensure-valkey.sh
source tests/ensure-redis6.sh
source tests/ensure-pytools.sh
source tests/ensure-ci-linters.sh
source tests/ensure-prometheus.sh
source tests/ensure-cron.sh
source tests/ensure-anacron.sh
source tests/ensure-netns.sh
source tests/ensure-inits.sh
# Most end-to-end tests wait on timers (leases, ticks, partitions), not the CPU: six at a time
# on two cores take a third of the time two at a time do (docs/contributing.md has the numbers).
# RUST_TEST_THREADS=<n> sets another number; the fault and availability tables' long runs use 1.
export RUST_TEST_THREADS=${RUST_TEST_THREADS:-6}
# The end-to-end suite runs twice: against Redis, then against Valkey (every test's server is
# valkey-server). LOCKRUN_TEST_SERVER=redis or =valkey runs one of the two, whole.
# The second pass of `both` leaves out the tests whose subject is another program or a
# topology's timing rather than the server's protocol: real cron (minutes of wall time) and anacron, the
# platforms' stop sequences, promtool/node_exporter, the CI examples' validators, the
# network-partition suite (ha_), lockrun in PID namespaces (and behind tini and dumb-init) and its log lines to the journal
# (process and output handling), and the tests that talk to a fake server alone (no server of
# either kind is asked anything there).
# Run them against Valkey with LOCKRUN_TEST_SERVER=valkey.
SECOND_PASS_SKIPS=(--skip cases::cron:: --skip cases::anacron:: --skip cases::cron_standby:: --skip cases::platform_stops:: --skip cases::alerting:: --skip cases::ci_examples:: --skip cases::ha_ --skip cases::pid_namespaces:: --skip cases::stop_races:: --skip cases::journal:: --skip cases::odd_replies::list_ --skip cases::odd_replies::a_waiter_told)
case "${LOCKRUN_TEST_SERVER:-both}" in
  both)
    cargo test --locked "$@"
    echo ">>> the end-to-end suite again, against Valkey (LOCKRUN_TEST_SERVER=valkey), without: ${SECOND_PASS_SKIPS[*]}" >&2
    # The skips go to the test binary: after the caller's own `--` if it gave one.
    case " $* " in
      *" -- "*) LOCKRUN_TEST_SERVER=valkey cargo test --locked --test lockrun "$@" "${SECOND_PASS_SKIPS[@]}" ;;
      *) LOCKRUN_TEST_SERVER=valkey cargo test --locked --test lockrun "$@" -- "${SECOND_PASS_SKIPS[@]}" ;;
    esac ;;
  redis|valkey) cargo test --locked "$@" ;;
  *) echo "LOCKRUN_TEST_SERVER=$LOCKRUN_TEST_SERVER: use redis or valkey" >&2; exit 64 ;;
esac
