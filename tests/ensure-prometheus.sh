#!/usr/bin/env bash
# Makes sure Prometheus's own tools are at hand for the alerting tests: `promtool` (checks and
# unit-tests packaging/prometheus/lockrun.rules.yml, checks the metrics files lockrun writes),
# `prometheus-node-exporter` (scrapes them through its textfile collector, as on a real host) and
# the `prometheus` server (evaluates the rules over time).
# Both come from Debian's packages, unpacked into target/test-tools/prometheus/ with `apt-get
# download` + `dpkg-deb -x` rather than installed: installing them would start a Prometheus
# server and a node_exporter on this machine and add users, none of which the tests want.
# Says what it does; never silent. Sourced by tests/run.sh. LOCKRUN_TEST_PROMTOOL,
# LOCKRUN_TEST_NODE_EXPORTER and LOCKRUN_TEST_PROMETHEUS name other binaries instead.
lockrun_prom_dir="$PWD/target/test-tools/prometheus"
if { [ -z "${LOCKRUN_TEST_PROMTOOL:-}" ] && ! [ -x "$lockrun_prom_dir/usr/bin/promtool" ]; } \
   || { [ -z "${LOCKRUN_TEST_NODE_EXPORTER:-}" ] \
        && ! [ -x "$lockrun_prom_dir/usr/bin/prometheus-node-exporter" ]; } \
   || { [ -z "${LOCKRUN_TEST_PROMETHEUS:-}" ] && ! [ -x "$lockrun_prom_dir/usr/bin/prometheus" ]; }; then
  echo ">>> promtool / prometheus-node-exporter / prometheus not in $lockrun_prom_dir; unpacking Debian's packages there" >&2
  if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-deb >/dev/null 2>&1; then
    echo ">>> no apt-get/dpkg-deb here: set LOCKRUN_TEST_PROMTOOL, LOCKRUN_TEST_NODE_EXPORTER and LOCKRUN_TEST_PROMETHEUS" >&2
    return 1 2>/dev/null || exit 1
  fi
  lockrun_tmp=$(mktemp -d)
  # apt-get download needs a package list; an empty one (a fresh machine) finds nothing.
  if ! (cd "$lockrun_tmp" && apt-get download -q prometheus prometheus-node-exporter >/dev/null 2>&1); then
    env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    (cd "$lockrun_tmp" && apt-get download -q prometheus prometheus-node-exporter >/dev/null)
  fi
  mkdir -p "$lockrun_prom_dir"
  for deb in "$lockrun_tmp"/*.deb; do dpkg-deb -x "$deb" "$lockrun_prom_dir"; done
  rm -rf "$lockrun_tmp"
  echo ">>> unpacked: $("$lockrun_prom_dir/usr/bin/promtool" --version 2>&1 | head -1); $("$lockrun_prom_dir/usr/bin/prometheus-node-exporter" --version 2>&1 | head -1)" >&2
fi
