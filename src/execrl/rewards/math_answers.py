"""Math answer correctness: math-verify (numbers, fractions, LaTeX, \\boxed{}), with a plain numeric fallback."""

from __future__ import annotations

import logging
from fractions import Fraction

from execrl.extract import math_answer
from execrl.rewards.base import Sample, component

logging.getLogger("math_verify").setLevel(logging.ERROR)  # it warns on every call made off the main thread
MAX_ANSWER_CHARS = 200  # sympy on adversarial text can run for minutes: long answers get the numeric check only


def _number(text: str) -> Fraction | None:
    text = text.strip().strip("$").replace(",", "").replace("\\!", "").rstrip(".")
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        return None


def answers_match(predicted: str | None, reference: str) -> bool:
    if predicted is None or not predicted.strip():
        return False
    a, b = _number(predicted), _number(reference)
    if a is not None and b is not None:
        return a == b
    if len(predicted) > MAX_ANSWER_CHARS:
        return False
    try:
        from math_verify import parse, verify
    except ImportError:
        return predicted.strip() == reference.strip()
    gold = parse(f"${reference}$", parsing_timeout=None)
    guess = parse(f"${predicted}$", parsing_timeout=None)
    return bool(gold and guess and verify(gold, guess, timeout_seconds=None))


@component("math_correct")
def math_correct(sample: Sample) -> float:
    """1 when the final answer (\\boxed{}, after ####, or the last number) equals the reference."""
    if sample.problem.answer is None:
        return 0.0
    return 1.0 if answers_match(math_answer(sample.extracted.answer), sample.problem.answer) else 0.0
