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
    # (a review's finds) a number anywhere was a call's argument and a line of an example's block an input
    zeros = ("Given n (1 <= n <= 10^5), return the trailing zeros of n!.\nExample: zeros(6) should return 1, since "
             "6! = 720.\nExample: zeros(12) should return 2.")
    assert shown(CallTests("zeros", [[6], [12], [0], [10], [5]], [1, 2, 0, 2, 1]), zeros) == [True, True] + [False] * 3
    block = "Example\nInput\n3\n1\n2\n3\nOutput\n-1\n1\n2\n"
    assert shown(StdioTests(["3\n1\n2\n3\n", "1\n", "2\n"], ["-1\n1\n2\n", "-1\n", "1\n"]), block) == [True, False,
                                                                                                  False]
    # (the last session's left-out) values written as Python writes them: True, None, 'text'
    python = "Example:\nis_word('ab', True) == True\nis_word('x', False) returns None\nis_word('ab', 1) -> True"
    assert shown(CallTests("is_word", [["ab", True], ["x", False], ["ab", False]], [True, None, True]), python) == [
        True, True, False]
    asserts = AssertTests(["assert f(1) == 2", "assert f(2) == 3"])
    assert shown(asserts, "Your code should pass:\nassert f(1)==2") == [True, False]
    assert shown(asserts, "Your code should pass:\nassert f(1) == 20") == [False, False]  # (a prefix of a shown one)
    assert shown(asserts, "For example `assert f(1) == 2`, and so on") == [True, False]  # (in a line: a review's find)


def test_training_grades_the_tests_a_prompt_does_not_show_and_leaves_out_a_row_that_shows_them_all():
    p = Problem("p", [{"role": "user", "content": STATEMENT}], "code", tests=StdioTests(["1 2\n", "4 5\n", "1 2\n"],
                                                                                         ["3\n", "9\n", "3\n"]))
    assert unshown(p).tests == StdioTests(["4 5\n"], ["9\n"])
    assert p.metadata["shown_tests"] == StdioTests(["1 2\n", "1 2\n"], ["3\n", "3\n"])
    only = Problem("q", [{"role": "user", "content": STATEMENT}], "code", tests=StdioTests(["1 2\n"], ["3\n"]))
    assert unshown(only) is None
    # (a review's find) the one test left expects the example's output: printing it passed all
    same = Problem("s", [{"role": "user", "content": STATEMENT}], "code", tests=StdioTests(["1 2\n", "2 1\n"],
                                                                                            ["3\n", "3\n"]))
    assert unshown(same) is None


def test_asserts_run_as_written_in_evaluation_a_repeat_may_test_a_state():
    """(A review's find) asserts run in order in one namespace: `bump() == 1` twice then `== 2` twice needs all four."""
    spec = AssertTests(["assert bump() == 1", "assert bump() == 1", "assert bump() == 2", "assert bump() == 2"])
    assert distinct(spec) == spec
    assert num_tests(distinct(StdioTests(["1\n", "1\n"], ["2\n", "2\n"]))) == 1


def test_the_unit_test_environments_public_tests_are_the_shown_ones():
    """(A review's find) its public tests were the first graded ones: feedback showed a graded test's answer."""
    from execrl.envs.unit_tests import public_part

    p = unshown(Problem("p", [{"role": "user", "content": STATEMENT}], "code",
                        tests=StdioTests(["1 2\n", "4 5\n", "6 6\n"], ["3\n", "9\n", "12\n"])))
    public, hidden = public_part(p.tests, 2, p.metadata["shown_tests"])
    assert public == StdioTests(["1 2\n"], ["3\n"]) and not hidden


def test_real_rows_train_on_their_unshown_tests_and_evaluate_on_all():
    shared_data()
    trained = load_problems("mbpp", "train", train=True)[0]
    counts = [num_tests(p.tests) for p in trained]  # (the shown assert out; two rows' own repeats once)
    assert len(trained) == 374 and counts.count(2) == 372 and counts.count(1) == 2
    assert [num_tests(p.tests) for p in load_problems("mbpp", "train")[0]].count(3) == 374  # (asserts as written)
    with pytest.raises(DatasetError, match="no usable problems"):
        load_problems("mbpp", "train", train=True, prompt_tests="all")
    rows = load_problems("nemotron_code", "train", train=True)[0]
    assert len(rows) == 3  # (left out: the row whose one test is its statement's example, and the row whose one test
    # left expects the example's output)
    for p in rows:
        assert not any(shown(p.tests, p.messages[-1]["content"]))


def test_a_run_started_under_the_earlier_grading_is_told_why_it_cannot_resume():
    """(A review's find) a run checkpointed before training left shown tests out was refused as "an edited file"."""
    from execrl.trainer.data import GRADING_RULES, ProblemSampler

    problems = [Problem("p", [{"role": "user", "content": "Print 1."}], "code", tests=StdioTests([""], ["1\n"]))]
    sampler = ProblemSampler(problems, seed=1)
    then = {**sampler.identity(), "graded": "0" * 16}
    del then["rules"]
    new = "logger.log_dir=runs/a-2 checkpointing.checkpoint_dir=runs/a-2/checkpoints"
    with pytest.raises(DatasetError, match=f"trained under an earlier execrl's grading.*new run: {new}$"):
        sampler.check(then, "step_000002", lambda: new)
    with pytest.raises(DatasetError, match="tests are not the same"):
        sampler.check({**then, "rules": GRADING_RULES}, "step_000002", lambda: new)
    sampler.check({**sampler.identity(), "rules": 1}, "step_000002", lambda: 1 / 0)  # (a run whose problems grade
    # as they did; a new run's settings are asked for only where it is refused)

