"""The built-in task of `execrl train`'s default: generated problems a tiny model can learn on a
laptop CPU in minutes.

A tiny model cannot write code from nothing, so the default is honest about it: a 2-layer Qwen2 with
a small BPE tokenizer of this task's text (builtin:tiny-coder-bpe, execrl.models) gets a few seconds of supervised warm-up
on the reference solutions each problem carries, which teach it the answer format of a
programmatically generated task ("Read two integers a and b from standard input and print their
maximum.", six operations, three phrasings, four stdin/stdout tests with fresh numbers per problem);
GRPO then trains it on fresh instances, rewarded by running its programs in the real sandbox against
the real expected outputs. Right after the warm-up it writes well-formed programs but often computes
the wrong operation; GRPO's reward is what fixes that.

Each problem's metadata holds its reference completion (`reference_completion`) and, for the warm-up
of the unit-test feedback environment, the programs of the other operations with their outputs on
its tests (`wrong_attempts`).
"""

from __future__ import annotations

import random

from execrl.sandbox import StdioTests
from execrl.tasks.problem import DatasetError, Problem
from execrl.tasks.registry import register

OPS = {"sum": "a + b", "difference": "a - b", "product": "a * b", "maximum": "max(a, b)",
       "minimum": "min(a, b)", "absolute difference": "abs(a - b)"}
VALUE = {"sum": lambda a, b: a + b, "difference": lambda a, b: a - b, "product": lambda a, b: a * b,
         "maximum": max, "minimum": min, "absolute difference": lambda a, b: abs(a - b)}  # what OPS[op] prints
PHRASES = ["Write a Python program that reads two integers from one line and prints their {op}.",
           "Read two integers a and b from standard input and print their {op}.",
           "Given two integers on a line, output their {op}."]
COUNTS = {"train": 4096, "validation": 256}  # problems per split unless `count` says otherwise


@register("builtin:arith-code", data_dir=None, splits=tuple(COUNTS), eval_only=("validation",), kind="code")
def load(path, split, report, count: int | None = None, seed: int = 42, warmup_solutions: float = 1.0,
         warmup_hidden: list[str] | tuple[str, ...] = (), **_):
    """`count` problems of the split (train and validation come from different streams of `seed`;
    the trainer passes grpo.seed): the first n of a split are the same whatever the count.
    `warmup_solutions` (data.train.options.warmup_solutions): the share of problems whose supervised
    warm-up reference is their own solution; the others show a program of an operation drawn at
    random, so that the warm-up teaches the format and the six operations, and which one a prompt
    asks for only in part: the reward teaches the rest. `warmup_hidden` (a list of operations): the
    problems of these operations show a program of a random operation, so that the warm-up teaches
    the others and the reward must find these (bench/README.md has the attempts with both)."""
    if path is not None:
        raise DatasetError("builtin:arith-code is generated: it reads no files (drop its path, or name your file's dataset "
                           "jsonl)")
    if not 0.0 <= warmup_solutions <= 1.0:
        raise DatasetError(f"builtin:arith-code: options.warmup_solutions={warmup_solutions!r}: use a share in [0, 1]")
    rng, drawn = random.Random(f"{split}-{seed}"), random.Random(f"{split}-{seed}-warmup")
    problems = [problem(rng, i, split) for i in range(COUNTS[split] if count is None else count)]
    unknown = sorted(set(warmup_hidden) - set(OPS))
    if unknown:
        raise DatasetError(f"builtin:arith-code: options.warmup_hidden names {unknown}: name operations of "
                           f"{sorted(OPS)}")
    if warmup_solutions < 1.0 or warmup_hidden:
        for p in problems:
            if drawn.random() >= warmup_solutions or p.metadata["op"] in warmup_hidden:
                p.metadata["warmup_completion"] = program(drawn.choice(list(OPS)))
    return problems


def problem(rng: random.Random, index: int, split: str, num_tests: int = 4) -> Problem:
    """One problem: an operation, a phrasing, fresh test numbers."""
    op = rng.choice(list(OPS))
    prompt = rng.choice(PHRASES).format(op=op)
    pairs = [(rng.randint(-50, 99), rng.randint(-50, 99)) for _ in range(num_tests)]
    inputs = [f"{a} {b}\n" for a, b in pairs]
    wrong = [{"content": PROGRAMS[other], "outputs": printed(other, pairs)} for other in OPS if other != op]
    return Problem(f"arith/{split}/{index}", [{"role": "user", "content": prompt}], "code",
                   tests=StdioTests(inputs, printed(op, pairs)),
                   metadata={"own_instructions": True, "op": op, "reference_completion": PROGRAMS[op],
                             "wrong_attempts": wrong})


def program(op: str) -> str:
    return f"```python\na, b = map(int, input().split())\nprint({OPS[op]})\n```"


PROGRAMS = {op: program(op) for op in OPS}


def printed(op: str, pairs: list[tuple[int, int]]) -> list[str]:
    """What the program of `op` prints for each (a, b) (every start makes ~26K of these: kept cheap)."""
    value = VALUE[op]
    return [f"{value(a, b)}\n" for a, b in pairs]


def corpus(num_problems: int = 300) -> list[str]:
    """Text of the task (prompts and solutions) and of the chat template: for training small BPE
    tokenizers in tests."""
    rng = random.Random(0)
    texts = []
    for i in range(num_problems):
        p = problem(rng, i, "corpus")
        texts.append(p.messages[0]["content"] + "\n" + p.metadata["reference_completion"])
    texts.append("<|im_start|>system user assistant<|im_end|>\n0123456789 +-*/()[]{}:;,.'\"=<>_#!?abcdefghijklmnopq"
                 "rstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    return texts
