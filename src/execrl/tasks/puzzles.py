"""Sliding puzzles (execrl.puzzles), generated from a seed as NeMo RL's run_grpo_sliding_puzzle.py
makes them: each of a random size from 2 to `size`, shuffled by an odd number of random slides from
1 to `shuffle_moves`. Problems of kind "puzzle"; the environment is
env.multi_turn.kind=sliding_puzzle (execrl.envs.puzzle)."""

from __future__ import annotations

import random
import zlib

from execrl.puzzles import generate
from execrl.tasks.problem import DatasetError, Problem
from execrl.tasks.registry import register

COUNTS = {"train": 10_000, "validation": 64}


@register("sliding_puzzle", data_dir=None, splits=tuple(COUNTS), eval_only=("validation",), kind="puzzle")
def load(path, split, report, count: int | None = None, seed: int = 42, size: int = 3, shuffle_moves: int = 10,
         **_) -> list[Problem]:
    """`count` puzzles of the split (validation: a stream of its own, never the training puzzles'
    seeds)."""
    if path is not None:
        raise DatasetError("sliding_puzzle is generated: it reads no files (drop its path, or name your file's dataset "
                           "jsonl)")
    if size < 2 or shuffle_moves < 1:
        raise DatasetError(f"sliding_puzzle needs size >= 2 and shuffle_moves >= 1 (got {size}, {shuffle_moves})")
    rng = random.Random(seed ^ zlib.crc32(split.encode()))
    problems = []
    for i in range(COUNTS[split] if count is None else count):
        n, shuffles = rng.randint(2, size), rng.randint(1, shuffle_moves)
        board = generate(rng, n, shuffles + (shuffles % 2 == 0))
        problems.append(Problem(f"sliding_puzzle/{split}/{i}", [], "puzzle",
                                metadata={"grid": [list(row) for row in board.grid]}))
    return problems
