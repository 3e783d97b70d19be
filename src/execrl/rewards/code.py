"""Rewards from running the code against its tests. A math problem has one test, its answer:
test_pass_fraction and all_tests_pass are then math_correct, so that a math dataset is never scored
0 for want of code."""

from __future__ import annotations

import builtins
import math

from execrl.rewards.base import Sample, component
from execrl.rewards.math_answers import math_correct
from execrl.sandbox import StdioTests, Verdict

V = Verdict


@component("test_pass_fraction", bounds=(0.0, 1.0))
def test_pass_fraction(sample: Sample) -> float:
    """Fraction of tests passed (0 when no code was found)."""
    if sample.problem.kind == "math":
        return math_correct(sample)
    r = sample.result
    return r.passed / r.total if r is not None and r.total else 0.0


@component("turn_discounted_pass_fraction",
           bounds=lambda p: (0.0, 1.0) if 0 <= p["discount"] <= 1 else (-math.inf, math.inf))
def turn_discounted_pass_fraction(sample: Sample, discount: float = 0.5) -> float:
    """test_pass_fraction times `discount` for each model turn after the first (multi-turn
    episodes): a fix after feedback is worth less than a right first answer, and never less than
    giving up (an additive per-turn penalty would pay a policy to end episodes early with broken
    output)."""
    return test_pass_fraction(sample) * discount ** (sample.turns - 1)


@component("all_tests_pass", bounds=(0.0, 1.0))
def all_tests_pass(sample: Sample) -> float:
    """1 when every test passes: the binary reward, or the perfect-solution bonus beside
    test_pass_fraction."""
    if sample.problem.kind == "math":
        return math_correct(sample)
    return 1.0 if sample.result is not None and sample.result.verdict == V.PASS else 0.0


@component("execution_tiers", scores=("code",), bounds=lambda p: (min(p.values()), max(p.values())))
def execution_tiers(sample: Sample, with_output: float = 1.0, without_output: float = 0.5, syntax_error: float = -0.5,
                    crash: float = -1.0, no_code: float = -1.0) -> float:
    """Graded by how far the code got: ran and printed (or returned values) / ran silently / did not
    parse / crashed or timed out. Correctness is not part of it: pair it with a test component."""
    r = sample.result
    if r is None:
        return no_code
    if r.verdict == V.SYNTAX_ERROR:
        return syntax_error
    if any(t.verdict in (V.RUNTIME_ERROR, V.TIMEOUT, V.MEMORY, V.OUTPUT_LIMIT) for t in r.tests):
        return crash
    returns_values = sample.problem.tests is not None and not isinstance(sample.problem.tests, StdioTests)
    return with_output if returns_values or any(t.stdout_bytes for t in r.tests) else without_output


@component("error_penalty", scores=("code",), bounds=lambda p: (min(p["penalty"], 0.0), max(p["penalty"], 0.0)))
def error_penalty(sample: Sample, classes: tuple[str, ...] = ("SyntaxError", "NameError", "ImportError",
                                                              "ModuleNotFoundError", "AttributeError", "TypeError"),
                  penalty: float = -1.0) -> float:
    """`penalty` when any test failed with one of the chosen exception classes or a builtin class derived from one
    (ModuleNotFoundError is an ImportError; a syntax error, IndentationError or TabError included, is reported as
    SyntaxError and counts for any of the three)."""
    r = sample.result
    if r is None:
        return 0.0
    hit = r.verdict == V.SYNTAX_ERROR and _chosen("SyntaxError", classes) or \
        any(t.error and _chosen(t.error, classes) for t in r.tests)
    return penalty if hit else 0.0


def _chosen(error: str, classes: tuple[str, ...]) -> bool:
    """Whether an exception class named `error` is one of `classes` or, both builtin, derived from one; a syntax
    error counts for its subclasses too (the sandbox names them all SyntaxError)."""
    if error in classes:
        return True
    raised = getattr(builtins, error, None)
    for name in classes:
        chosen = getattr(builtins, name, None)
        if isinstance(raised, type) and isinstance(chosen, type) and issubclass(chosen, BaseException) and (
                issubclass(raised, chosen) or raised is SyntaxError and issubclass(chosen, SyntaxError)):
            return True
    return False
