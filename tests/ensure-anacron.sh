#!/usr/bin/env bash
# Makes sure Debian's anacron is at hand for the anacron test (tests/cases/anacron.rs), without
# installing the package: installing it would enable the host's own anacron (its systemd timer,
# and /etc/cron.d/anacron, which the cron tests' Debian daemons read too) and so run
# /etc/cron.daily on this machine. `apt-get download` fetches the package (apt checks its
# signature), and only its program is kept, as target/test-tools/anacron, where the test looks.
# Says what it does; never silent. Sourced by tests/run.sh; skipped when LOCKRUN_TEST_ANACRON is
# set, or the copy or an installed /usr/sbin/anacron is there.
source "$(dirname "${BASH_SOURCE[0]}")/ensure-apt.sh"
lockrun_anacron_dir="$PWD/target/test-tools"
if [ -z "${LOCKRUN_TEST_ANACRON:-}" ] && ! [ -x "$lockrun_anacron_dir/anacron" ] &&
  ! [ -x /usr/sbin/anacron ]; then
  echo ">>> fetching Debian's anacron package (apt-get download) for the anacron test" >&2
  if lockrun_apt_present "" anacron; then
    lockrun_tmp=$(mktemp -d)
    # The package lists name the version to fetch: refreshed only when they know none.
    if ! apt-cache show anacron >/dev/null 2>&1; then
      lockrun_sudo=""
      [ "$(id -u)" != 0 ] && lockrun_sudo="sudo"
      $lockrun_sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    fi
    # apt-get's stderr is only its warning that root downloads unsandboxed; a failure says so.
    if (cd "$lockrun_tmp" && apt-get download -qq anacron 2>/dev/null) &&
      dpkg-deb -x "$lockrun_tmp"/anacron_*.deb "$lockrun_tmp/x" &&
      mkdir -p "$lockrun_anacron_dir" &&
      install -m 755 "$lockrun_tmp/x/usr/sbin/anacron" "$lockrun_anacron_dir/anacron"; then
      echo ">>> installed: $("$lockrun_anacron_dir/anacron" -V 2>&1 | head -n 1) in $lockrun_anacron_dir" >&2
    else
      echo ">>> could not fetch anacron: install it, or point LOCKRUN_TEST_ANACRON at a binary" >&2
    fi
    rm -rf "$lockrun_tmp"
  fi
fi
