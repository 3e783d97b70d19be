"""Datasets as lists of Problems: one small loader per dataset, registered by name.

    load_problems("mbpp", split="train", path="../shared/data/mbpp")  ->  (problems, RowReport)

A name's `path` may be a file or a directory; with no path, $EXECRL_DATA_DIR/<dir> and the
checkout's ../shared/data/<dir> are tried, then the hub id through the `datasets` library (needs it
installed, and a network). Evaluation splits are marked: `check_trainable` refuses to train on them.
"""

from __future__ import annotations

# the loaders register themselves (each imports the registry, not this package)
from execrl.tasks import arith, generic, gsm8k, humaneval, leetcode, matches, mbpp, nemo_math, nemotron_code, puzzles  # noqa: F401
from execrl.tasks.problem import DatasetError, Problem, RowReport, read_rows
from execrl.tasks.registry import DATASETS, check_trainable, dataset_key, load_problems

__all__ = ["DATASETS", "DatasetError", "Problem", "RowReport", "check_trainable", "dataset_key", "load_problems", "read_rows"]
