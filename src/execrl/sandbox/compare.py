"""Output comparison, done in the grading process (expected outputs never enter the sandbox)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class CompareOptions:
    mode: str = "lines"  # "lines": line by line after stripping trailing whitespace and trailing blank lines
    float_rel: float = 0.0  # with either tolerance > 0, tokens that both parse as numbers compare as floats
    float_abs: float = 0.0
    case_fold: bool = False

    @classmethod
    def from_dict(cls, d: dict) -> CompareOptions:
        from execrl.sandbox.spec import TestSpecError

        unknown = set(d) - {"mode", "float_rel", "float_abs", "case_fold"}
        if unknown:
            raise TestSpecError(f"unknown compare options {sorted(unknown)}: use mode, float_rel, float_abs, case_fold")
        opts = cls(**d)
        if opts.mode not in ("lines", "exact"):
            raise TestSpecError(f"compare.mode must be 'lines' or 'exact', got {opts.mode!r}")
        return opts


def _lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _token_equal(a: str, b: str, opts: CompareOptions) -> bool:
    if a == b:
        return True
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    return math.isclose(x, y, rel_tol=opts.float_rel, abs_tol=opts.float_abs)


def outputs_match(expected: str, actual: bytes, opts: CompareOptions = CompareOptions()) -> bool:
    got = actual.decode("utf-8", errors="replace")
    if opts.mode == "exact":
        return got == expected
    if opts.case_fold:
        expected, got = expected.casefold(), got.casefold()
    want, have = _lines(expected), _lines(got)
    if len(want) != len(have):  # extra or missing lines fail: no prefix matching
        return False
    if opts.float_rel <= 0 and opts.float_abs <= 0:
        return want == have
    for w, h in zip(want, have):
        wt, ht = w.split(), h.split()
        if len(wt) != len(ht) or not all(_token_equal(a, b, opts) for a, b in zip(wt, ht)):
            return False
    return True


def values_match(expected, actual, float_rel: float = 1e-9, float_abs: float = 0.0) -> bool:
    """Call-based results: tuples equal lists (JSON has no tuple); floats within a tight tolerance."""
    if isinstance(expected, (list, tuple)) and isinstance(actual, (list, tuple)):
        return len(expected) == len(actual) and all(values_match(e, a, float_rel, float_abs) for e, a in zip(expected, actual))
    if isinstance(expected, dict) and isinstance(actual, dict):
        return expected.keys() == actual.keys() and all(values_match(expected[k], actual[k], float_rel, float_abs) for k in expected)
    if type(expected) is float or type(actual) is float:
        if type(expected) is bool or type(actual) is bool or not isinstance(actual, (int, float)) or not isinstance(expected, (int, float)):
            return False
        return math.isclose(expected, actual, rel_tol=float_rel, abs_tol=float_abs)
    return type(expected) is type(actual) and expected == actual
