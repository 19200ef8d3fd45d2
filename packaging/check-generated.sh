#!/usr/bin/env bash
# Fails when the committed man pages and shell completions (packaging/man, packaging/completions)
# or the options table in docs/guide.md are not what the clap definition generates now.
# Fix: cargo run --example gen-docs -- packaging
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# gen-docs writes docs/guide.md beside its output directory: give it a copy to rewrite.
mkdir "$tmp/packaging" "$tmp/docs"
cp docs/guide.md "$tmp/docs/guide.md"
cargo run --quiet --locked --example gen-docs -- "$tmp/packaging" >/dev/null
stale=0
while IFS= read -r f; do
  if ! cmp -s "$tmp/$f" "$f"; then
    echo "stale: $f" >&2
    diff -u "$f" "$tmp/$f" | head -20 >&2 || true
    stale=1
  fi
done < <(cd "$tmp" && { find packaging/man packaging/completions -type f; echo docs/guide.md; } | sort)
while IFS= read -r f; do
  [ -e "$tmp/$f" ] || { echo "no longer generated: $f" >&2; stale=1; }
done < <(find packaging/man packaging/completions -type f | sort)
if [ "$stale" = 1 ]; then
  echo "generated files are stale: run 'cargo run --example gen-docs -- packaging' and commit" >&2
  exit 1
fi
echo "packaging/man, packaging/completions and docs/guide.md's options table are up to date ($(cd "$tmp" && find packaging/man packaging/completions -type f | wc -l) files)"
