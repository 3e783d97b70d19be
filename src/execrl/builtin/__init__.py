"""The embedded default of `execrl train`: a task a tiny model can learn on a laptop CPU in minutes.

A tiny model cannot write code from nothing, so the default is honest about it: a 2-layer Qwen2 with a character
tokenizer is built locally, a few seconds of supervised warm-up on reference solutions teach it the answer
format of a programmatically generated task ("Read two integers a and b from standard input and print their
maximum.", graded on four stdin/stdout tests), and
GRPO then trains it on fresh instances, rewarded by running its programs in the real sandbox against the real
expected outputs. Right after the warm-up it writes well-formed programs but often computes the wrong operation;
GRPO's reward is what fixes that.
"""

from __future__ import annotations

import random

from execrl.sandbox import StdioTests
from execrl.tasks import Problem

OPS = {"sum": "a + b", "difference": "a - b", "product": "a * b", "maximum": "max(a, b)",
       "minimum": "min(a, b)", "absolute difference": "abs(a - b)"}
PHRASES = ["Write a Python program that reads two integers from one line and prints their {op}.",
           "Read two integers a and b from standard input and print their {op}.",
           "Given two integers on a line, output their {op}."]
BUILTIN_TASKS = ("builtin:arith-code",)
BUILTIN_MODELS = ("builtin:tiny-coder",)


def arith_problem(rng: random.Random, index: int, split: str, num_tests: int = 4) -> tuple[Problem, str]:
    """One problem (an operation, a phrasing, fresh test numbers) and its reference completion."""
    op = rng.choice(list(OPS))
    prompt = rng.choice(PHRASES).format(op=op)
    inputs, outputs = [], []
    for _ in range(num_tests):
        a, b = rng.randint(-50, 99), rng.randint(-50, 99)
        inputs.append(f"{a} {b}\n")
        outputs.append(f"{eval(OPS[op], {'a': a, 'b': b, 'max': max, 'min': min, 'abs': abs})}\n")  # noqa: S307
    problem = Problem(f"arith/{split}/{index}", [{"role": "user", "content": prompt}], "code",
                      tests=StdioTests(inputs, outputs), metadata={"own_instructions": True, "op": op})
    return problem, f"```python\na, b = map(int, input().split())\nprint({OPS[op]})\n```"


def feedback_episode(problem: Problem, reference: str, rng: random.Random, cfg) -> list[dict]:
    """A warm-up reference for the unit-test feedback environment: a first attempt with another operation, the
    environment's feedback on it, then the right program. Only the right program is trained on (the wrong one is
    context), so the warm-up teaches using feedback, never making mistakes; a wrong operation that happens to
    pass the public tests gives the plain reference instead."""
    from execrl.envs.unit_tests import feedback
    from execrl.sandbox import ProgramResult, TestResult, Verdict
    from execrl.sandbox.spec import truncate_tests

    wrong = rng.choice([op for op in OPS if op != problem.metadata["op"]])
    public = truncate_tests(problem.tests, cfg.env.multi_turn.public_tests)
    tests = []
    for inp, out in zip(public.inputs, public.outputs):
        a, b = map(int, inp.split())
        got = f"{eval(OPS[wrong], {'a': a, 'b': b, 'max': max, 'min': min, 'abs': abs})}\n"  # noqa: S307
        tests.append(TestResult(Verdict.PASS) if got == out else TestResult(Verdict.FAIL, output=got))
    if all(t.verdict == Verdict.PASS for t in tests):
        return [{"role": "assistant", "content": reference}]
    said = feedback(public, ProgramResult(Verdict.FAIL, tests), cfg.env.multi_turn.max_output_chars)
    attempt = f"```python\na, b = map(int, input().split())\nprint({OPS[wrong]})\n```"
    return [{"role": "assistant", "content": attempt, "train": False},
            {"role": cfg.env.multi_turn.observation_role, "content": said}, {"role": "assistant", "content": reference}]


def arith_problems(split: str, count: int, seed: int) -> list[tuple[Problem, str]]:
    rng = random.Random(f"{split}-{seed}")  # train and validation come from different streams
    return [arith_problem(rng, i, split) for i in range(count)]


def tokenizer_corpus() -> list[str]:
    """Every character the task and the chat template can produce."""
    rng = random.Random(0)
    texts = []
    for i in range(300):
        p, ref = arith_problem(rng, i, "corpus")
        texts.append(p.messages[0]["content"] + "\n" + ref)
    texts.append("<|im_start|>system user assistant<|im_end|>\n0123456789 +-*/()[]{}:;,.'\"=<>_#!?abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    return texts
