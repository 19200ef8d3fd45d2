#!/usr/bin/env bash
# Makes sure redis-server (and openssl, for the TLS test) is on PATH, installing Debian/Ubuntu's package when it is missing.
# Sourced by tests/run.sh, tests/demo.sh and .ci/run; says what it does, never silently.
if ! command -v redis-server >/dev/null 2>&1; then
  if [ -n "${LOCKRUN_TEST_REDIS_SERVER:-}" ] && [ -x "$LOCKRUN_TEST_REDIS_SERVER" ]; then
    return 0 2>/dev/null || exit 0
  fi
  echo ">>> redis-server not found: installing it with apt-get (package redis-server)" >&2
  if ! command -v apt-get >/dev/null 2>&1; then
    echo ">>> no apt-get here: install redis-server with your package manager, or set LOCKRUN_TEST_REDIS_SERVER" >&2
    return 1 2>/dev/null || exit 1
  fi
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server openssl >/dev/null
  echo ">>> installed: $(redis-server --version)" >&2
fi
# The TLS test makes its certificates with the openssl CLI.
if ! command -v openssl >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  echo ">>> openssl not found: installing it with apt-get (for the TLS test's certificates)" >&2
  sudo=""; [ "$(id -u)" != 0 ] && sudo="sudo"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl >/dev/null
fi
