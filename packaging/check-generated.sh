#!/usr/bin/env bash
# Fails when the committed man pages and shell completions (packaging/man, packaging/completions)
# are not what the clap definitions generate now. Fix: cargo run --example gen-docs -- packaging
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cargo run --quiet --locked --example gen-docs -- "$tmp" >/dev/null
stale=0
while IFS= read -r f; do
  if ! cmp -s "$tmp/$f" "packaging/$f"; then
    echo "stale: packaging/$f" >&2
    diff -u "packaging/$f" "$tmp/$f" | head -20 >&2 || true
    stale=1
  fi
done < <(cd "$tmp" && find man completions -type f | sort)
while IFS= read -r f; do
  [ -e "$tmp/$f" ] || { echo "no longer generated: packaging/$f" >&2; stale=1; }
done < <(cd packaging && find man completions -type f | sort)
if [ "$stale" = 1 ]; then
  echo "generated files are stale: run 'cargo run --example gen-docs -- packaging' and commit" >&2
  exit 1
fi
echo "packaging/man and packaging/completions are up to date ($(cd "$tmp" && find man completions -type f | wc -l) files)"
