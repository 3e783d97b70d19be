"""(A hunt's finds) a program that prints the examples its prompt shows, solving nothing, was rewarded: Nemotron's
rows repeat the statement's example among their tests (one row's only test; others twice), MBPP grades the assert it
shows (all three with prompt_tests=all: 0.98 mean reward for copying). Training grades the tests a prompt does not
show, each once; evaluation keeps them all, each once."""

import pytest

from execrl.sandbox import AssertTests, CallTests, StdioTests
from execrl.sandbox.spec import num_tests
from execrl.tasks import DatasetError, Problem, load_problems
from execrl.tasks.shown import distinct, shown, unshown

from ..conftest import shared_data

STATEMENT = "Add two numbers.\n\nExample\nInput\n1 2\n\nOutput\n3\n\nConstraints: 1 <= a, b <= 10"


def test_a_test_the_statement_shows_is_found_and_a_chance_number_is_not():
    spec = StdioTests(["1 2\n", "4 5\n", "1\n", "1 2\n"], ["3\n", "9\n", "3\n", "3\n"])
    assert shown(spec, STATEMENT) == [True, False, False, True]  # ("1" then "3": no input of its own there)
    assert num_tests(distinct(spec)) == 3
    calls = CallTests("add", [[[2, 7], 9], [[1, 1], 2]], [[0, 1], 5])
    assert shown(calls, 'Input: nums = [2, 7], target = 9\nOutput: [0,1]') == [True, False]
    asserts = AssertTests(["assert f(1) == 2", "assert f(2) == 3"])
    assert shown(asserts, "Your code should pass:\nassert f(1)==2") == [True, False]


def test_training_grades_the_tests_a_prompt_does_not_show_and_leaves_out_a_row_that_shows_them_all():
    p = Problem("p", [{"role": "user", "content": STATEMENT}], "code", tests=StdioTests(["1 2\n", "4 5\n", "1 2\n"],
                                                                                         ["3\n", "9\n", "3\n"]))
    assert unshown(p).tests == StdioTests(["4 5\n"], ["9\n"])
    only = Problem("q", [{"role": "user", "content": STATEMENT}], "code", tests=StdioTests(["1 2\n"], ["3\n"]))
    assert unshown(only) is None


def test_real_rows_train_on_their_unshown_tests_and_evaluate_on_all():
    shared_data()
    trained = load_problems("mbpp", "train", train=True)[0]
    counts = [num_tests(p.tests) for p in trained]  # (the shown assert out; two rows' own repeats once)
    assert len(trained) == 374 and counts.count(2) == 372 and counts.count(1) == 2
    assert [num_tests(p.tests) for p in load_problems("mbpp", "train")[0]].count(3) == 372
    with pytest.raises(DatasetError, match="no usable problems"):
        load_problems("mbpp", "train", train=True, prompt_tests="all")
    rows = load_problems("nemotron_code", "train", train=True)[0]
    assert len(rows) == 4  # (the row whose one test is its statement's example: left out)
    for p in rows:
        assert not any(shown(p.tests, p.messages[-1]["content"]))
