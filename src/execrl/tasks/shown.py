"""Tests a problem's own prompt shows: what training does not reward.

A statement's examples are often among its tests (Nemotron's coding rows repeat the example first and last; MBPP's
prompt shows its first assert). A program that prints the examples' answers, solving nothing, passed those: a reward
for copying (a hunt's find: 1.0 on a one-test row, 0.98 on MBPP shown all its asserts). Training grades a problem on
the tests its prompt does not show, each once; a row whose every test is shown is left out, said with the others.
"""

from __future__ import annotations

import ast
import json
import re

from execrl.sandbox.spec import AssertTests, CallTests, StdioTests, TestSpec
from execrl.tasks.problem import Problem

NEAR = 400  # characters (whitespace squeezed) within which an example's output follows its input in the prompt
ALL_SHOWN = ("rows whose every test is an example the prompt shows (a program printing the examples' answers would "
             "score; MBPP: data.train.options.prompt_tests=first)")


def distinct(spec: TestSpec) -> TestSpec:
    """The tests without repeats (the first of each kept): a test written twice counted twice."""
    if isinstance(spec, StdioTests):
        keys = list(zip(spec.inputs, spec.outputs))
    elif isinstance(spec, CallTests):
        keys = [json.dumps([a, o], sort_keys=True, default=repr) for a, o in zip(spec.args, spec.outputs)]
    elif isinstance(spec, AssertTests):
        keys = [_tree(a) for a in spec.asserts]
    else:
        return spec
    seen: set = set()
    return _only(spec, [i for i, k in enumerate(keys) if not (k in seen or seen.add(k))])


def shown(spec: TestSpec, prompt: str) -> list[bool]:
    """Per test, whether the prompt shows it: an assert written in it (as Python reads it: spacing aside); an input's
    lines and, soon after, its output's (each a whole line, or the end of one after a label: "Input: 1 2")."""
    if isinstance(spec, AssertTests):
        written = {_tree(line) for line in prompt.splitlines() if line.strip().startswith("assert")}
        return [a.strip() in prompt or _tree(a) in written for a in spec.asserts]
    lines = "\n" + _lines(prompt) + "\n"
    if isinstance(spec, StdioTests):
        return [_in_order(lines, [_lines(i), _lines(o)]) for i, o in zip(spec.inputs, spec.outputs)]
    if isinstance(spec, CallTests):  # (LeetCode's "Input: nums = [2,7], target = 9": each argument, in order)
        text = _squeezed(prompt)
        return [_in_order(text, [_compact(a) for a in args] + [_compact(out)], whole=False)
                for args, out in zip(spec.args, spec.outputs)]
    return [False]  # (a check function: nothing to compare)


def _lines(text: str) -> str:
    return "\n".join(line.strip() for line in text.splitlines() if line.strip())


def _in_order(text: str, parts: list[str], whole: bool = True) -> bool:
    """Whether `parts` (none empty) occur in `text` in order, each within NEAR characters of the one before (`whole`:
    each as whole lines, or the end of a line after a colon)."""
    if not parts or not all(parts) or sum(map(len, parts)) > len(text):
        return False
    patterns = [re.compile(r"(?:(?<=\n)|(?<=:)|(?<=: ))" + re.escape(p) + r"(?=\n)" if whole else re.escape(p))
                for p in parts]
    for first in patterns[0].finditer(text):
        end, found = first.end(), True
        for part, pattern in zip(parts[1:], patterns[1:]):
            m = pattern.search(text, end, end + NEAR + len(part) + 2)
            if m is None:
                found = False
                break
            end = m.end()
        if found:
            return True
    return False


def _tree(code: str) -> str:
    """An assert as Python reads it (spacing aside, strings' own spaces kept); the text where it does not parse."""
    try:
        return ast.dump(ast.parse(code.strip())) if len(code) < 10_000 else code.strip()
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return code.strip()


def _squeezed(text: str) -> str:
    return "".join(text.split())


def _compact(value) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=repr)


def unshown(problem: Problem) -> Problem | None:
    """The problem graded on its distinct tests that its prompt does not show (itself where it shows none; None where
    it shows them all)."""
    if problem.kind != "code" or problem.tests is None:
        return problem
    spec = distinct(problem.tests)
    flags = shown(spec, "\n".join(str(m.get("content", "")) for m in problem.messages))
    if all(flags):
        return None
    if any(flags):
        spec = _only(spec, [i for i, f in enumerate(flags) if not f])
    problem.tests = spec
    return problem


def _only(spec: TestSpec, keep: list[int]) -> TestSpec:
    if isinstance(spec, StdioTests):
        return StdioTests([spec.inputs[i] for i in keep], [spec.outputs[i] for i in keep], spec.compare)
    if isinstance(spec, CallTests):
        return CallTests(spec.fn_name, [spec.args[i] for i in keep], [spec.outputs[i] for i in keep])
    if isinstance(spec, AssertTests):
        return AssertTests([spec.asserts[i] for i in keep], spec.setup)
    return spec
