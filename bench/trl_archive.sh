#!/usr/bin/env bash
# TRL and its data packages for a GPU machine that can install nothing, as one xz archive under the device tool's
# 64 MiB carry: TRL, datasets, pyarrow (less its Flight, cloud-filesystem, ORC and encryption libraries), pandas and
# their small dependencies, for CPython 3.12 on x86-64 Linux, plus any wheels given (execrl's own dependencies).
#
#   bash bench/trl_archive.sh .devcarry/trl/trlsite.tar.xz .devcarry/wh/*.whl
#   # on the machine:  tar -xJf .devcarry/trl/trlsite.tar.xz -C /tmp && export PYTHONPATH=/tmp/trlsite:$PWD/src
set -euo pipefail
out=$(realpath -m "$1"); shift
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 \
    --platform manylinux2014_x86_64 --python-version 3.12 --implementation cp -d "$work/wheels" \
    trl==1.16.0 datasets==5.2.0 pyarrow pandas dill multiprocess xxhash fsspec pytz tzdata python-dateutil six
mkdir "$work/trlsite"
for w in "$work"/wheels/*.whl "$@"; do python3 -m zipfile -e "$w" "$work/trlsite"; done
cd "$work/trlsite"
rm -rf pyarrow/include pyarrow/src ./*/tests
rm -f pyarrow/_flight* pyarrow/libarrow_flight* pyarrow/libarrow_python_flight* pyarrow/_pyarrow_cpp_tests* \
    pyarrow/_azurefs* pyarrow/_gcsfs* pyarrow/_s3fs* pyarrow/_hdfs* pyarrow/_orc* pyarrow/_dataset_orc* \
    pyarrow/*encryption*  # (libarrow_substrait stays: pyarrow.lib links it)
find . \( -name "*.pyx" -o -name "*.pxd" -o -name "*.pxi" \) -delete
find . -name __pycache__ -prune -exec rm -rf {} +
mkdir -p "$(dirname "$out")"
tar -cf - -C "$work" trlsite | xz -6 -T2 > "$out"
ls -la "$out"
