#!/usr/bin/env bash
# Makes sure the real-cron test (tests/cases/cron.rs, `cron_*`) has its system tools: Debian's
# `cron` daemon (3.0pl1, the one every Debian/Ubuntu host runs), busybox with its `crond` (the
# cron of Alpine-based images; Debian's busybox-static) and libfaketime (a clock skew per
# daemon). Installs Debian/Ubuntu's packages when one is missing, and says so: never silently.
# Sourced by tests/run.sh.
source "$(dirname "${BASH_SOURCE[0]}")/ensure-apt.sh"
lockrun_missing=()
[ -x /usr/sbin/cron ] || lockrun_missing+=(cron)
# The library itself (the test preloads it into each daemon); `faketime` is its CLI, handy for
# trying a skew by hand.
lockrun_faketime_lib=$(ls /usr/lib/*/faketime/libfaketime.so.1 2>/dev/null | head -n 1 || true)
[ -n "$lockrun_faketime_lib" ] || lockrun_missing+=(libfaketime faketime)
# busybox with the crond and ash applets (busybox-static has both; it replaces a busybox
# package that lacks them).
lockrun_busybox=$(command -v busybox || true)
{ [ -n "$lockrun_busybox" ] && "$lockrun_busybox" --list | grep -qx crond &&
  "$lockrun_busybox" --list | grep -qx ash; } || lockrun_missing+=(busybox-static)
# unshare(1) (util-linux) puts each test daemon in its own mount+UTS namespace.
command -v unshare >/dev/null 2>&1 || lockrun_missing+=(util-linux)
if [ ${#lockrun_missing[@]} -gt 0 ]; then
  echo ">>> not found: ${lockrun_missing[*]}; installing with apt-get" >&2
  lockrun_apt_present "" "${lockrun_missing[@]}" || { return 1 2>/dev/null || exit 1; }
  lockrun_sudo=""
  [ "$(id -u)" != 0 ] && lockrun_sudo="sudo"
  # cron's postinst starts the host's cron service (invoke-rc.d cron start). The test runs its
  # own daemons in private namespaces and must not leave a host daemon running jobs from the
  # host's crontabs, so service starts are refused for the install: invoke-rc.d asks
  # /usr/sbin/policy-rc.d first and exit code 101 means "action forbidden". Created only when
  # there is none (a container image usually ships one already; an admin's own stays untouched)
  # and removed right after.
  lockrun_policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    lockrun_policy=/usr/sbin/policy-rc.d
    printf '#!/bin/sh\n# Temporary, from lockrun tests/ensure-cron.sh: no service starts.\nexit 101\n' |
      $lockrun_sudo tee "$lockrun_policy" >/dev/null
    $lockrun_sudo chmod 755 "$lockrun_policy"
  fi
  # A host cron daemon already running before the install is the admin's; one the install
  # started anyway is ours to stop (deb-systemd-invoke honours policy-rc.d too: this is the belt
  # to those braces). Told apart by the host's pid file, /run/crond.pid: the test's own daemons,
  # which may be running right now, write theirs in a private /run.
  lockrun_cron_before=$(cat /run/crond.pid 2>/dev/null || true)
  lockrun_status=0
  # --no-install-recommends: cron recommends a mail transport agent (exim4), a daemon of its own
  # the test does not want; its daemons mail through a recorder in place of /usr/sbin/sendmail.
  lockrun_apt_install --no-install-recommends "${lockrun_missing[@]}" || lockrun_status=$?
  [ -n "$lockrun_policy" ] && $lockrun_sudo rm -f "$lockrun_policy"
  lockrun_pid=$(cat /run/crond.pid 2>/dev/null || true)
  if [ -n "$lockrun_pid" ] && [ "$lockrun_pid" != "$lockrun_cron_before" ] &&
    [ "$(cat "/proc/$lockrun_pid/comm" 2>/dev/null)" = cron ]; then
    echo ">>> stopping the host cron daemon (pid $lockrun_pid) the install started" >&2
    $lockrun_sudo kill "$lockrun_pid"
  fi
  if [ $lockrun_status != 0 ]; then
    echo ">>> apt-get failed ($lockrun_status) installing ${lockrun_missing[*]}" >&2
    return 1 2>/dev/null || exit 1
  fi
  echo ">>> installed: $(dpkg-query -W -f '${Package} ${Version}\n' cron libfaketime busybox-static 2>/dev/null | tr '\n' ' ')" >&2
fi
