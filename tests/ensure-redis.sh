#!/usr/bin/env bash
# Makes sure the tests' system tools are on PATH: redis-server (every end-to-end test) and
# openssl (the TLS test's certificates) and cc (a preloaded shim). Installs Debian/Ubuntu's packages when one is missing,
# and says so: never silently. Sourced by tests/run.sh, tests/demo.sh and tests/bench/run.sh.
source "$(dirname "${BASH_SOURCE[0]}")/ensure-apt.sh"
lockrun_missing=()
if ! command -v redis-server >/dev/null 2>&1 && ! [ -x "${LOCKRUN_TEST_REDIS_SERVER:-}" ]; then
  lockrun_missing+=(redis-server)
fi
command -v openssl >/dev/null 2>&1 || lockrun_missing+=(openssl)
# A C compiler: one safety test builds an LD_PRELOAD shim (Rust's linker is usually this cc).
command -v cc >/dev/null 2>&1 || lockrun_missing+=(gcc)
if [ ${#lockrun_missing[@]} -gt 0 ]; then
  echo ">>> not found: ${lockrun_missing[*]}; installing with apt-get" >&2
  lockrun_apt_present "or set LOCKRUN_TEST_REDIS_SERVER" "${lockrun_missing[@]}" ||
    { return 1 2>/dev/null || exit 1; }
  lockrun_apt_install "${lockrun_missing[@]}"
  command -v redis-server >/dev/null 2>&1 && echo ">>> installed: $(redis-server --version)" >&2
fi
