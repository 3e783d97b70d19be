"""Tests a problem's own prompt shows: what training does not reward.

A statement's examples are often among its tests (Nemotron's coding rows repeat the example first and last; MBPP's
prompt shows its first assert). A program that prints the examples' answers, solving nothing, passed those: a reward
for copying (a hunt's find: 1.0 on a one-test row, 0.98 on MBPP shown all its asserts). Training grades a problem on
the tests its prompt does not show; a row whose every test is shown is left out, said with the others. Repeated
stdin/stdout and call tests count once everywhere.
"""

from __future__ import annotations

import ast
import json
import re

from execrl.sandbox.spec import AssertTests, CallTests, StdioTests, TestSpec, parse_python, select_tests
from execrl.tasks.problem import Problem

NEAR = 400  # characters within which an example's output follows its input in the prompt
CANDIDATES = 64  # places in the prompt where a test's first part is looked for at most (a long prompt of "0"s)
TRIES = 4096  # and occurrences of it looked at (a megabyte of "1"s holds a million)
ALL_SHOWN = ("rows whose every test is an example the prompt shows, or expects an example's output (a program "
             "printing the examples' answers would score; MBPP: data.train.options.prompt_tests=first)")
INPUT_LABEL = re.compile(r"(?i)(?:input|example|sample|```\w*|<pre>)[^\n]{0,40}:?[ \t]*\n$|(?:input|example)[^\n]{0,20}"
                         r":[ \t]*$")  # what ends the text before an example's input: its label line, or "Input: "
OUTPUT_LABEL = re.compile(r"(?i)(?:output|answer|```\w*|<pre>)[^\n]{0,40}:?[ \t]*\n$|(?:output|answer)[^\n]{0,20}:"
                          r"[ \t]*$")
CALL_OUTPUT = re.compile(r"(?i)(?:output:?|=>|->|==|returns?:?|result:?)$")  # (whitespace squeezed)
CALL_ARGUMENT = re.compile(r"(?i)(?:input:|(?<![<>!=])=|\()$")  # (not a bound's "n<=10")


def distinct(spec: TestSpec) -> TestSpec:
    """The tests without repeats (the first of each kept): a test written twice counted twice. Asserts stay as they
    are: they run in order in one namespace, where a repeat may test a state (`bump() == 2` twice)."""
    if isinstance(spec, StdioTests):
        keys = list(zip(spec.inputs, spec.outputs))
    elif isinstance(spec, CallTests):
        keys = [json.dumps([a, o], sort_keys=True, default=repr) for a, o in zip(spec.args, spec.outputs)]
    else:
        return spec
    seen: set = set()
    keep = [i for i, k in enumerate(keys) if not (k in seen or seen.add(k))]
    return spec if len(keep) == len(keys) else select_tests(spec, keep)  # (a copy of every spec cost a full collection)


def shown(spec: TestSpec, prompt: str) -> list[bool]:
    """Per test, whether the prompt shows it: an assert written in it (as Python reads it: spacing aside); an input
    right after its label ("Input", "Example 1:", a fence) and its output right after one, soon after; a call's
    arguments after "=" or "Input:" and its value after "Output:" or "==", in order."""
    if isinstance(spec, AssertTests):  # (not followed by a name's or a number's character: "assert f(1) == 2" is
        written = {_tree(line) for line in prompt.splitlines() if line.strip().startswith("assert")}  # not shown by
        return [_written(prompt, a.strip()) or _tree(a) in written for a in spec.asserts]  # "... == 20")
    if isinstance(spec, StdioTests):
        text = "\n" + _lines(prompt) + "\n"
        return [_in_order(text, [(_lines(i), INPUT_LABEL), (_lines(o), OUTPUT_LABEL)], lines=True)
                for i, o in zip(spec.inputs, spec.outputs)]
    if isinstance(spec, CallTests):  # (LeetCode's "Input: nums = [2,7], target = 9 Output: [0,1]", squeezed)
        text = "".join(prompt.split())
        return [any(_in_order(text, arguments + [(form(out), CALL_OUTPUT)])
                    for form in (_compact, _python)
                    for arguments in ([(form(a), CALL_ARGUMENT) for a in args],  # (each after "=" or "Input:")
                                      [(",".join(map(form, args)) + ")", CALL_ARGUMENT)])  # (a call: "f(1,True)")
                    ) for args, out in zip(spec.args, spec.outputs)]
    return [False]  # (a check function: nothing to compare)


def _written(prompt: str, code: str) -> bool:
    """Whether `code` is in `prompt`, not followed by a character that would continue it (a digit, a name's, a dot)."""
    at = prompt.find(code)
    while at >= 0:
        after = prompt[at + len(code):at + len(code) + 1]
        if not (after.isalnum() or after in "_."):
            return True
        at = prompt.find(code, at + 1)
    return False


def _lines(text: str) -> str:
    return "\n".join(line.strip() for line in text.splitlines() if line.strip())


def _in_order(text: str, parts: list[tuple[str, re.Pattern]], lines: bool = False) -> bool:
    """Whether each part (text, the label that must end the text before it) occurs in `text` in order, each within
    NEAR characters of the one before (`lines`: each as whole lines; else not a number's first digits). By str.find:
    a pattern compiled per test (re's cache holds 512) doubled a start-up's build (a bisect's find)."""
    if not parts or not all(p for p, _ in parts) or sum(len(p) for p, _ in parts) > len(text):
        return False
    (first, first_label), rest = parts[0], parts[1:]
    for i in _finds(text, first, 0, len(text), lines):
        if not first_label.search(text[max(0, i - 60):i]):
            continue
        end = i + len(first)
        for part, label in rest:
            j = next((j for j in _finds(text, part, end, end + NEAR + len(part) + 60, lines)
                      if label.search(text[max(0, j - 60):j])), None)
            if j is None:
                break
            end = j + len(part)
        else:
            return True
    return False


def _finds(text: str, part: str, start: int, stop: int, lines: bool):
    """Where `part` starts in text[start:stop] and ends as a whole line (`lines`) or not before a number's digits; the
    first CANDIDATES such places at most, among its first TRIES occurrences."""
    stop, found, tried = min(stop, len(text)), 0, 0
    while found < CANDIDATES and tried < TRIES and (i := text.find(part, start, stop)) >= 0:
        after, tried = i + len(part), tried + 1
        if (after < stop and text[after] == "\n") if lines else not (after < stop and (
                text[after].isdecimal() or text[after] == "." and after + 1 < stop and text[after + 1].isdecimal())):
            found += 1
            yield i
        start = i + 1


def _tree(code: str) -> str:
    """An assert as Python reads it (spacing aside, strings' own spaces kept); the text where it does not parse."""
    try:
        return ast.dump(parse_python(code.strip())) if len(code) < 10_000 else code.strip()
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return code.strip()


def _compact(value) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=repr)


def _python(value) -> str:
    """A value as a Python statement writes it (True, None, 'text'), squeezed as the prompt is."""
    return "".join(repr(value).split()) if len(str(value)) < 10_000 else _compact(value)


def unshown(problem: Problem) -> Problem | None:
    """The problem graded on the tests its prompt does not show (itself where it shows none), its shown ones kept in
    metadata["shown_tests"] (the unit-test environment's public tests); None where it shows them all, or where every
    test left expects the output of one shown (printing the example's answer would pass them all)."""
    if problem.kind != "code" or problem.tests is None:
        return problem
    spec = problem.tests
    flags = shown(spec, "\n".join(str(m.get("content", "")) for m in problem.messages))
    if not any(flags):
        return problem
    kept = [i for i, f in enumerate(flags) if not f]
    if not kept or _one_shown_output(spec, flags, kept):
        return None
    problem.metadata["shown_tests"] = select_tests(spec, [i for i, f in enumerate(flags) if f])
    problem.tests = select_tests(spec, kept)
    return problem


def _one_shown_output(spec: TestSpec, flags: list[bool], kept: list[int]) -> bool:
    if isinstance(spec, StdioTests):
        outputs = [" ".join(o.split()) for o in spec.outputs]
    elif isinstance(spec, CallTests):
        outputs = [_compact(o) for o in spec.outputs]
    else:
        return False
    return len({outputs[i] for i in kept}) == 1 and outputs[kept[0]] in {o for o, f in zip(outputs, flags) if f}
