#!/usr/bin/env bash
# Makes sure the Python tools some tests use are at hand: prometheus_client, whose parser
# (prometheus_client.parser.text_string_to_metric_families) reads the files --metrics-file
# writes (tests/cases/metrics.rs), so they are checked by a real Prometheus parser and not only
# by our own idea of the format. Installs the pinned version from PyPI into
# target/test-tools/python (the tests put that on PYTHONPATH), never into the system Python.
# Says what it does; never silent. Sourced by tests/run.sh; skipped when already there.
source "$(dirname "${BASH_SOURCE[0]}")/ensure-pip.sh"
lockrun_pytools_dir="$PWD/target/test-tools/python"
lockrun_prometheus_client="prometheus_client==0.26.0"
# The version is read from the dist-info pip leaves in that directory (first on PYTHONPATH).
if ! [ -d "$lockrun_pytools_dir/prometheus_client" ] || ! PYTHONPATH="$lockrun_pytools_dir" python3 -c \
     'import sys; from importlib.metadata import version; sys.exit(version("prometheus_client") != "0.26.0")' \
     >/dev/null 2>&1; then
  echo ">>> installing $lockrun_prometheus_client from PyPI into target/test-tools/python (for the metrics file tests)" >&2
  lockrun_ensure_pip
  mkdir -p "$lockrun_pytools_dir"
  # --upgrade: replace whatever version an earlier pin left there.
  python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-deps --upgrade \
    --target "$lockrun_pytools_dir" "$lockrun_prometheus_client"
  echo ">>> installed: prometheus_client $(PYTHONPATH="$lockrun_pytools_dir" python3 -c \
    'from importlib.metadata import version; print(version("prometheus_client"))')" >&2
fi
