# Sourced by tests/ensure-valkey.sh and tests/ensure-pytools.sh: makes sure `python3 -m pip`
# works, installing Debian's python3-pip with apt-get when it does not (and saying so).
source "$(dirname "${BASH_SOURCE[0]}")/ensure-apt.sh"
lockrun_ensure_pip() {
  python3 -m pip --version >/dev/null 2>&1 && return 0
  echo ">>> installing python3-pip with apt-get" >&2
  lockrun_apt_install python3-pip
}
