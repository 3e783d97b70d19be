"""The grading rules, shared by training, its environments and `execrl eval`: which samples the
sandbox runs, what counts as correct, and the outcome each sample is reported under."""

from __future__ import annotations

import re

from execrl.rewards.base import Sample
from execrl.rewards.math_answers import math_correct
from execrl.sandbox import Grader, Verdict
from execrl.sandbox.spec import parse_python, python_lines
from execrl.tasks import Problem
from execrl.tasks.humaneval import helpers

NO_CODE = "no_code"
CORRECT = ("pass", "correct")  # the outcomes that count for pass@k


def grade_samples(samples: list[Sample], grader: Grader, progress=None) -> None:
    """Fill in each code sample's grading result (in parallel); math samples need no sandbox."""
    owners = [s for s in samples if graded_in_sandbox(s)]
    results = grader.grade_many([grade_job(s) for s in owners], on_done=(lambda *_: progress()) if progress else None)
    for s, r in zip(owners, results):
        s.result = r


def graded_in_sandbox(sample: Sample) -> bool:
    """Whether the sandbox grades this sample: a code problem's, with code in it."""
    return sample.problem.kind == "code" and sample.extracted.code is not None


def grade_job(sample: Sample) -> tuple:
    """Grader.grade's arguments for a sample the sandbox grades: (program, tests, language, limits)."""
    return program_of(sample.problem, sample.extracted.code), sample.problem.tests, sample.problem.language, None


def program_of(problem: Problem, code: str) -> str:
    """The program a sample's code makes: HumanEval-style problems' completion that does not define the entry point
    continues the prompt; a dataset's header (LeetCode's imports) goes above it, below the completion's own
    `from __future__` imports, which Python requires first (above them, a correct program was a syntax error)."""
    entry, prefix = problem.metadata.get("entry_point"), problem.metadata.get("code_prefix")
    header = problem.metadata.get("code_header", "")
    futures, code = leading_futures(code) if header or (entry and prefix) else ("", code)
    if entry and prefix and not re.search(rf"^(?:async[ \t]+)?def[ \t]+{re.escape(entry)}[ \t]*\(", code, re.M):
        code = prefix + code  # (a body's helper fib_memo, or 'def fib' in a comment, is no definition of fib)
    elif entry and prefix:  # the whole function: the prompt's imports and helpers above it (the harness runs prompt
        # + completion: HumanEval/38's decode_cyclic calls the prompt's encode_cyclic)
        code = helpers(prefix.rstrip() + "\n    pass\n", entry) + code  # (pass: a prompt that ends at its signature)
    return futures + header + code


def leading_futures(code: str) -> tuple[str, str]:
    """(the `from __future__` imports that open `code`, after its docstring if any; the rest of it), each import a
    line of its own; ("", code) where there are none or it does not parse."""
    import ast

    try:
        body = parse_python(code).body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return "", code
    i = int(bool(body) and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant))
    futures = []
    while i < len(body) and isinstance(body[i], ast.ImportFrom) and body[i].module == "__future__":
        futures.append(body[i])
        i += 1
    lines = python_lines(code)
    taken = {n for node in futures for n in range(node.lineno - 1, node.end_lineno)}
    if any(len(lines[n].strip().split(";")) > 1 for n in taken):  # (another statement on its line: left as it is)
        return "", code
    return "".join(lines[n].rstrip("\r\n") + "\n" for n in sorted(taken)), "".join(
        line for n, line in enumerate(lines) if n not in taken)


def is_correct(sample: Sample) -> bool:
    if sample.problem.kind == "game":
        return sample.outcome == "win"
    if sample.problem.kind == "puzzle":
        return sample.outcome == "solved"
    if sample.problem.kind == "math":
        return math_correct(sample) == 1.0
    return sample.result is not None and sample.result.verdict == Verdict.PASS


OUTCOMES = {"math": ("correct", "wrong"), "code": (*(v.value for v in Verdict), NO_CODE),
            "game": ("win", "draw", "loss", "illegal", "unplayed"),
            "puzzle": ("solved", "unsolved")}  # what outcome() returns


def outcome(sample: Sample) -> str:
    if sample.outcome is not None:
        return sample.outcome
    if sample.problem.kind == "math":
        return "correct" if is_correct(sample) else "wrong"
    return sample.result.verdict.value if sample.result is not None else NO_CODE
