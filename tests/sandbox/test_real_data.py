"""The grader on the real data in ../shared/data: reference solutions pass, broken ones fail, and the
Nemotron-RL coding rollouts grade as their recorded rewards say."""

import json

import pytest

from execrl.sandbox import Grader, Limits, Verdict
from execrl.sandbox.spec import split_test_script

from ..conftest import shared_data


@pytest.fixture(scope="module")
def big():
    # (MBPP 123's reference, the amicable numbers below 9999, takes 1.6 s a test on an idle 2-core machine; 5 s
    # timed out on a loaded one: these tests check what the references compute, not their speed)
    with Grader(num_workers=2, limits=Limits(timeout_s=15.0)) as g:
        yield g


def mbpp_rows():
    return [json.loads(line) for line in shared_data("mbpp", "mbpp.jsonl").read_text().splitlines()]


def test_every_mbpp_reference_solution_passes_and_a_broken_one_fails(big):
    rows = mbpp_rows()
    tests = [{"asserts": r["test_list"] + r["challenge_test_list"], "setup": r["test_setup_code"]} for r in rows]
    results = big.grade_many([(r["code"], t, "python", None) for r, t in zip(rows, tests)])
    failing = [(r["task_id"], res.to_dict()) for r, res in zip(rows, results) if res.verdict != Verdict.PASS]
    assert failing == []
    # broken variants: the same program with its answers replaced by None (in a module-level wrapper)
    broken = [r["code"] + "\n\nimport functools as _ft\n" + "".join(
        f"{name} = (lambda f: _ft.wraps(f)(lambda *a, **k: None))({name})\n"
        for name in _tested_names(r)) for r in rows[:60]]
    results = big.grade_many([(code, t, "python", None) for code, t in zip(broken, tests[:60])])
    assert all(res.passed < res.total for res in results)


def _tested_names(row) -> list[str]:
    import ast
    names = set()
    for a in row["test_list"]:
        for node in ast.walk(ast.parse(a)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and f"def {node.func.id}" in row["code"]:
                names.add(node.func.id)
    return sorted(names)


def test_sanitized_mbpp_reference_solutions_pass(big):
    rows = json.loads(shared_data("mbpp", "sanitized-mbpp.json").read_text())
    jobs = [(r["code"], {"asserts": r["test_list"], "setup": "\n".join(r["test_imports"])}, "python", None) for r in rows]
    assert [r["task_id"] for r, res in zip(rows, big.grade_many(jobs)) if res.verdict != Verdict.PASS] == []


def test_nemotron_rollouts_grade_as_their_recorded_rewards(big):
    folder = shared_data("nemotron_code_examples")
    problems = [json.loads(x) for x in (folder / "code_gen_example.jsonl").read_text().splitlines()]
    rollouts = [json.loads(x) for x in (folder / "code_gen_example_rollouts.jsonl").read_text().splitlines()]
    by_prompt = {p["responses_create_params"]["input"][0]["content"]: p for p in problems}
    seen = []
    for r in rollouts:
        unit = by_prompt[r["responses_create_params"]["input"][0]["content"]]["verifier_metadata"]["unit_tests"]
        res = big.grade(r["extracted_model_code"], {"inputs": unit["inputs"], "outputs": unit["outputs"]})
        assert (res.verdict == Verdict.PASS) == (r["reward"] == 1.0), (r["reward"], res.to_dict())
        seen.append(r["reward"])
    assert sorted(seen) == [0.0, 0.0, 0.0, 0.0, 1.0]


def test_leetcode_contest_tests_split_into_one_test_per_assert(big):
    rows = [json.loads(x) for x in shared_data("leetcode_contest", "leetcode_contest_2023-07-02_to_2023-10-14.jsonl")
            .read_text().splitlines()]
    row = next(r for r in rows if "differenceOfSums" in r["prompt"])
    spec = split_test_script(row["test"])
    assert len(spec.asserts) == row["test"].count("\nassert ")
    right = ("class Solution:\n    def differenceOfSums(self, n: int, m: int) -> int:\n"
             "        return sum(i if i % m else -i for i in range(1, n + 1))\n")
    assert big.grade(right, spec).verdict == Verdict.PASS
    wrong = right.replace("-i for", "i for")
    res = big.grade(wrong, spec)
    assert res.verdict == Verdict.FAIL and 0 < res.passed < res.total
    for r in rows:  # every row's script splits and compiles
        assert split_test_script(r["test"]).asserts
