#!/usr/bin/env bash
# Makes sure the stop-race tests (tests/cases/stop_races.rs) and the `docker run --init` test
# (tests/cases/platform_stops.rs) have the inits they put in front of
# lockrun: tini (what `docker run --init` starts) and dumb-init. Installs Debian/Ubuntu's
# packages when one is missing, and says so: never silently. Sourced by tests/run.sh.
source "$(dirname "${BASH_SOURCE[0]}")/ensure-apt.sh"
lockrun_missing=()
command -v tini >/dev/null 2>&1 || lockrun_missing+=(tini)
command -v dumb-init >/dev/null 2>&1 || lockrun_missing+=(dumb-init)
if [ ${#lockrun_missing[@]} -gt 0 ]; then
  echo ">>> not found: ${lockrun_missing[*]}; installing with apt-get" >&2
  lockrun_apt_present "" "${lockrun_missing[@]}" || { return 1 2>/dev/null || exit 1; }
  lockrun_apt_install "${lockrun_missing[@]}" || { return 1 2>/dev/null || exit 1; }
fi
unset lockrun_missing
