#!/usr/bin/env bash
# Makes sure the network-namespace tests (tests/support/netns.rs: `ha_*`, root only) have their
# system tools: ip (iproute2), iptables-restore (iptables) and nsenter (util-linux). Installs
# Debian/Ubuntu's packages when one is missing, and says so: never silently. Sourced by
# tests/run.sh. (Those tests fail, never skip, when run without root or without these.)
lockrun_missing=()
lockrun_has() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/sbin/$1" ]; }
lockrun_has ip || lockrun_missing+=(iproute2)
lockrun_has iptables-restore || lockrun_missing+=(iptables)
lockrun_has nsenter || lockrun_missing+=(util-linux)
if [ ${#lockrun_missing[@]} -gt 0 ]; then
  echo ">>> not found: ${lockrun_missing[*]}; installing with apt-get" >&2
  if ! command -v apt-get >/dev/null 2>&1; then
    echo ">>> no apt-get here: install ${lockrun_missing[*]} with your package manager" >&2
    return 1 2>/dev/null || exit 1
  fi
  lockrun_sudo=""
  [ "$(id -u)" != 0 ] && lockrun_sudo="sudo"
  $lockrun_sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $lockrun_sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${lockrun_missing[@]}" >/dev/null
  echo ">>> installed: ${lockrun_missing[*]}" >&2
fi
