"""The math answer check (answers_match, math_correct) on answers that once hung the reward or never matched."""

import time

from execrl.extract import math_answer
from execrl.rewards.math_answers import answers_match


def test_numbers_with_huge_exponents_are_compared_not_evaluated():
    """Fraction("1e9999999") built ten million digits (13 s for one answer, scored inline in training); an integer
    over 4,300 digits raised inside Fraction (Python's int-string limit), so it equalled nothing."""
    start = time.perf_counter()
    assert math_answer("So she sold 1e9999999 clips.") == "1e9999999"
    assert not answers_match("1e9999999", "72") and not answers_match("72", "1e99999999")
    assert answers_match("1e9999999", "10e9999998") and not answers_match("1e9999999", "1e9999998")
    assert time.perf_counter() - start < 2
    assert answers_match("1" + "0" * 5000, "1e5000") and not answers_match("1" + "0" * 5000, "1e4999")
    for predicted, reference in [("72", "72.0"), ("0.5", "1/2"), ("-3/4", "-.75"), ("2.5E-7", "0.00000025"),
                                 ("1,000", "1e3"), ("2/6", "1/3"), ("-0", "0")]:
        assert answers_match(predicted, reference), (predicted, reference)
    for predicted, reference in [("1/3", "0.333"), ("3/4", "-.75"), ("1/0", "0")]:
        assert not answers_match(predicted, reference), (predicted, reference)
