# Sourced by the tests/ensure-*.sh scripts: their one way of installing Debian/Ubuntu packages.
#
# lockrun_apt_present HINT PKG...: true if apt-get is here; otherwise says to install PKG... by
# hand (HINT, if not empty, is added in parentheses) and fails.
lockrun_apt_present() {
  local hint=$1
  shift
  command -v apt-get >/dev/null 2>&1 && return 0
  echo ">>> no apt-get here: install $* with your package manager${hint:+ ($hint)}" >&2
  return 1
}

# lockrun_apt_install [APT-GET INSTALL OPTION...] PKG...: refreshes the package lists and
# installs, through sudo unless already root, without questions (DEBIAN_FRONTEND) and without
# apt-get's progress output (the caller says what it installs). Fails with apt-get's status;
# a failed refresh installs nothing.
lockrun_apt_install() {
  local sudo=""
  [ "$(id -u)" != 0 ] && sudo="sudo"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq || return $?
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}
