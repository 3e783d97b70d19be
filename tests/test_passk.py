"""Unbiased pass@k against the closed form and against brute-force enumeration."""

import itertools
import math

import pytest

from execrl.eval.passk import mean_pass_at_k, pass_at_k


@pytest.mark.parametrize("n, c, k", [(10, 3, 1), (10, 3, 5), (10, 0, 3), (5, 5, 2), (7, 2, 7), (20, 1, 10)])
def test_matches_the_closed_form_and_enumeration(n, c, k):
    closed = 1 - math.comb(n - c, k) / math.comb(n, k)
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(samples, k))
    brute = sum(any(s) for s in subsets) / len(subsets)
    assert pass_at_k(n, c, k) == pytest.approx(closed) == pytest.approx(brute)


def test_by_hand():
    assert pass_at_k(4, 1, 1) == 0.25  # one right out of four
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2) = 1 - 3/6
    assert pass_at_k(4, 3, 2) == 1.0  # any two include a right one


def test_mean_leaves_out_problems_with_too_few_samples():
    value, left_out = mean_pass_at_k([(4, 1), (4, 0), (1, 1)], k=2)
    assert value == pytest.approx(0.25) and left_out == 1


def test_bad_arguments():
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)
