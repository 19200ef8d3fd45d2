#!/usr/bin/env bash
# Makes sure the network-namespace tests (tests/support/netns.rs: `ha_*`, root only) have their
# system tools: ip (iproute2), iptables-restore (iptables) and nsenter (util-linux). Installs
# Debian/Ubuntu's packages when one is missing, and says so: never silently. Sourced by
# tests/run.sh. (Those tests fail, never skip, when run without root or without these.)
source "$(dirname "${BASH_SOURCE[0]}")/ensure-apt.sh"
lockrun_missing=()
lockrun_has() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/sbin/$1" ]; }
lockrun_has ip || lockrun_missing+=(iproute2)
lockrun_has iptables-restore || lockrun_missing+=(iptables)
lockrun_has nsenter || lockrun_missing+=(util-linux)
if [ ${#lockrun_missing[@]} -gt 0 ]; then
  echo ">>> not found: ${lockrun_missing[*]}; installing with apt-get" >&2
  lockrun_apt_present "" "${lockrun_missing[@]}" || { return 1 2>/dev/null || exit 1; }
  lockrun_apt_install --no-install-recommends "${lockrun_missing[@]}"
  echo ">>> installed: ${lockrun_missing[*]}" >&2
fi
