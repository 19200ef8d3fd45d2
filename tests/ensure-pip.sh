# Sourced by tests/ensure-valkey.sh and tests/ensure-pytools.sh: makes sure `python3 -m pip`
# works, installing Debian's python3-pip with apt-get when it does not (and saying so).
lockrun_ensure_pip() {
  python3 -m pip --version >/dev/null 2>&1 && return 0
  echo ">>> installing python3-pip with apt-get" >&2
  local sudo=""
  [ "$(id -u)" != 0 ] && sudo="sudo"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pip >/dev/null
}
