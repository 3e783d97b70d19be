"""A dataset row's values as hostile input (a hunt's finds): a shared id, a float answer JSON writes in exponent
form, an integer id past Python's 4,300-digit limit, a LeetCode script that calls nothing of the program's, a
Nemotron row posed with its answer, MBPP's test fields of other types, a newline in an id."""

import json

import pytest

from execrl.tasks import Problem, load_problems
from execrl.tasks.problem import RowReport


def write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def test_rows_sharing_one_id_are_renamed_in_one_pass():
    """30,000 rows of one id (a CSV's empty id column) took minutes at start-up: each repeat counted its suffix up
    from 2 again."""
    from execrl.trainer.data import own_ids

    problems = [Problem("", [{"role": "user", "content": f"q{i}"}], "math", answer="1") for i in range(20000)]
    problems.append(Problem("#5", [{"role": "user", "content": "mine"}], "math", answer="1"))  # (taken: skipped)
    problems.insert(3, Problem("#3", [{"role": "user", "content": "taken"}], "math", answer="1"))
    own_ids(problems)
    ids = [p.id for p in problems]
    assert len(set(ids)) == len(ids) and ids[:5] == ["", "#2", "#3", "#3#2", "#4"] and ids[-1] == "#5#2"


@pytest.mark.parametrize("value, text", [(1e20, "100000000000000000000"), (1e16, "10000000000000000"),
                                         (1e-7, "0.0000001"), (2.5, "2.5"), (-1.5e22, "-15000000000000000000000")])
def test_a_float_answer_is_written_positionally(value, text):
    """JSON's 1e20 was the reference "1e+20", which math-verify reads as e + 20: "\\boxed{e + 20}" scored correct and
    "\\boxed{10^{20}}" wrong."""
    from execrl.rewards.math_answers import answers_match
    from execrl.tasks.generic import answer_text

    assert answer_text(value) == text
    if value == 1e20:
        assert answers_match("10^{20}", text) and not answers_match("e + 20", text)


def test_an_id_of_thousands_of_digits_is_read_and_named(tmp_path, capsys):
    big = "1" * 5000
    path = write(tmp_path / "big.jsonl", ['{"id": %s, "prompt": "Print 1", "tests": {"inputs": [""], "outputs": '
                                          '["1"]}}' % big, '{"id": %s, "prompt": "x", "tests": {"foo": 1}}' % ("2" * 5000)])
    problems, report = load_problems("jsonl", "train", path=path)
    assert [p.id for p in problems] == [big] and report.skipped == 1
    report.print()
    assert "2222" in capsys.readouterr().err


def test_a_leetcode_script_that_never_calls_the_program_is_refused(tmp_path):
    """`assert True` and asserts of the standard library alone passed every program (pass@1 1.0 for `print(0)`); the
    asserts form of a row of our own refuses both."""
    head = "class Solution:\n    def f(self, x): pass"
    rows = [{"task_id": "lc1", "prompt": head, "test": "assert True\n"},
            {"task_id": "lc2", "prompt": head, "test": "import math\nassert math.sqrt(4) == 2\n"},
            {"task_id": "lc3", "prompt": head, "test": "my_solution = Solution()\nassert my_solution.f(1) == 2\n"}]
    problems, report = load_problems("leetcode", "test", path=write(tmp_path / "l.jsonl", rows))
    assert [p.id for p in problems] == ["leetcode/lc3"] and report.skipped == 2


def test_a_nemotron_row_posed_with_its_answer_is_skipped(tmp_path):
    unit = {"unit_tests": {"inputs": ["1\n"], "outputs": ["2\n"]}}
    asked = [{"role": "user", "content": "Read n, print n+1."}]
    rows = [{"hash_id": "h1", "responses_create_params": {"input": [*asked, {"role": "assistant", "content":
             "```python\nprint(int(input())+1)\n```"}]}, "verifier_metadata": unit},
            {"hash_id": "h2", "responses_create_params": {"input": asked}, "verifier_metadata": unit}]
    problems, report = load_problems("nemotron_code", "train", path=write(tmp_path / "train.jsonl", rows))
    assert [p.id for p in problems] == ["nemotron/h2"] and "ends with the assistant's" in next(iter(report.reasons))


def test_mbpp_test_fields_of_other_types_are_skipped_with_the_reason(tmp_path):
    (tmp_path / "mbpp").mkdir()
    rows = [{"task_id": 601, "text": "Write f", "test_list": ["assert f(1) == 1"], "test_imports": [1]},
            {"task_id": 602, "text": "Write f", "test_list": ["assert f(1) == 1"], "challenge_test_list": {"a": 1}},
            {"task_id": 603, "text": "Write f", "test_list": ["assert f(1) == 1"]}]
    write(tmp_path / "mbpp" / "mbpp.jsonl", rows)
    problems, report = load_problems("mbpp", "train", path=str(tmp_path / "mbpp"), challenge_tests=True)
    assert len(problems) == 1
    assert {"test_imports is not a list of import statements (strings)",
            "challenge_test_list is not a list of asserts"} <= set(report.reasons)


def test_a_newline_in_a_skipped_rows_id_stays_on_its_line(capsys):
    report = RowReport("rows.jsonl")
    report.skip("nl\nFAKE: all good", "no tests")
    report.print()
    err = capsys.readouterr().err
    assert "FAKE: all good" in err and not any(line.startswith("FAKE") for line in err.splitlines())
