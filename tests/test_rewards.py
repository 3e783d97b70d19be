"""Each reward component on samples built by hand, values worked out in the comments."""

import re

import pytest
from pydantic import ValidationError

from execrl.extract import extract
from execrl.rewards import RewardConfig, Sample, score
from execrl.sandbox import AssertTests, ProgramResult, StdioTests, TestResult, Verdict
from execrl.tasks import Problem

V = Verdict
CODE = Problem("p", [{"role": "user", "content": "x"}], "code", tests=StdioTests(["1\n"] * 4, ["1\n"] * 4))
FN = Problem("f", [{"role": "user", "content": "x"}], "code", tests=AssertTests(["assert f() == 1"]))
MATH = Problem("m", [{"role": "user", "content": "x"}], "math", answer="72")


def result(*verdicts, stdout=1, error=""):
    tests = [TestResult(v, stdout_bytes=stdout, error=error) for v in verdicts]
    return ProgramResult(next((v for v in verdicts if v != V.PASS), V.PASS), tests)


def sample(completion="```python\nprint(1)\n```", problem=CODE, res=None, **kw):
    return Sample(problem, completion, extract(completion, want_code=problem.kind == "code"), res, **kw)


def parts(s, *components):
    cfg = RewardConfig(components=[c if isinstance(c, dict) else {"name": c} for c in components])
    return score(s, cfg)


def test_test_fraction_and_all_pass():
    s = sample(res=result(V.PASS, V.PASS, V.FAIL, V.TIMEOUT))
    r = parts(s, "test_pass_fraction", "all_tests_pass")
    assert r.parts == {"test_pass_fraction": 0.5, "all_tests_pass": 0.0} and r.total == 0.5  # 2 of 4
    r = parts(sample(res=result(V.PASS, V.PASS)), "test_pass_fraction", "all_tests_pass")
    assert r.total == 2.0  # 1.0 + 1.0


def test_seed_style_base_and_perfect_weights():
    cfg = [{"name": "test_pass_fraction", "weight": 0.7}, {"name": "all_tests_pass", "weight": 0.3}]
    assert parts(sample(res=result(V.PASS, V.FAIL, V.FAIL, V.FAIL)), *cfg).total == pytest.approx(0.175)  # 0.7 * 1/4
    assert parts(sample(res=result(V.PASS)), *cfg).total == pytest.approx(1.0)  # 0.7 + 0.3


def test_no_code_scores_zero_tests():
    s = sample("I would loop over the input.")
    assert s.extracted.code is None
    assert parts(s, "test_pass_fraction").total == 0.0


@pytest.mark.parametrize("res, problem, expected", [
    (result(V.PASS, V.FAIL, stdout=3), CODE, 1.0),  # ran and printed: +1 (correctness is another component)
    (result(V.FAIL, stdout=0), CODE, 0.5),  # ran, printed nothing: +0.5
    (result(V.FAIL, stdout=0), FN, 1.0),  # function forms return values: +1
    (result(V.SYNTAX_ERROR), CODE, -0.5),
    (result(V.PASS, V.RUNTIME_ERROR), CODE, -1.0),
    (result(V.TIMEOUT), CODE, -1.0),
    (None, CODE, -1.0),  # no code found
])
def test_execution_tiers(res, problem, expected):
    assert parts(sample(problem=problem, res=res), "execution_tiers").total == expected


def test_error_penalty_on_chosen_classes():
    cfg = {"name": "error_penalty", "classes": ["NameError"], "penalty": -2.0}
    assert parts(sample(res=result(V.RUNTIME_ERROR, error="NameError")), cfg).total == -2.0
    assert parts(sample(res=result(V.RUNTIME_ERROR, error="ZeroDivisionError")), cfg).total == 0.0
    assert parts(sample(res=result(V.SYNTAX_ERROR)), {"name": "error_penalty"}).total == -1.0  # default classes
    # (an audit's find) a class derived from a chosen one counts, and a syntax error for IndentationError and TabError
    for raised, chosen in [("ModuleNotFoundError", "ImportError"), ("UnboundLocalError", "NameError")]:
        cfg = {"name": "error_penalty", "classes": [chosen]}
        assert parts(sample(res=result(V.RUNTIME_ERROR, error=raised)), cfg).total == -1.0
    assert parts(sample(res=result(V.RUNTIME_ERROR, error="ImportError")),
                 {"name": "error_penalty", "classes": ["ModuleNotFoundError"]}).total == 0.0  # (not the other way)
    assert parts(sample(res=result(V.SYNTAX_ERROR)), {"name": "error_penalty", "classes": ["IndentationError"]}).total \
        == -1.0


def test_format():
    assert parts(sample(res=result(V.PASS)), "format").total == 1.0
    assert parts(sample("```python\nprint(1)"), "format").total == 0.0  # unclosed
    assert parts(sample(r"The answer is \boxed{72}", problem=MATH), "format").total == 1.0


def test_repetition_penalty():
    stuck = "from typing import List, Dict\n" * 8  # 8 lines, 1 unique: 1 - 1/8 = 0.875
    assert parts(sample(stuck), {"name": "repetition_penalty", "ngram": 50}).total == pytest.approx(-0.875)
    varied = "a b c d e f g h"  # 5 distinct 4-grams, 1 line
    assert parts(sample(varied), "repetition_penalty").total == 0.0


def test_soft_overlong_penalty():
    cfg = {"name": "overlong_penalty", "buffer_tokens": 100}
    assert parts(sample(num_tokens=900, max_tokens=1000), cfg).total == 0.0  # at the start of the buffer
    assert parts(sample(num_tokens=950, max_tokens=1000), cfg).total == pytest.approx(-0.5)  # (900 - 950) / 100
    assert parts(sample(num_tokens=1000, max_tokens=1000), cfg).total == pytest.approx(-1.0)


@pytest.mark.parametrize("completion, expected", [
    (r"So she sold \boxed{72} clips.", 1.0), ("#### 72", 1.0), ("48 + 24 = 72", 1.0),
    (r"\boxed{72.0}", 1.0), (r"\boxed{\frac{144}{2}}", 1.0), (r"\boxed{71}", 0.0), ("no idea", 0.0),
])
def test_math_correct(completion, expected):
    assert parts(sample(completion, problem=MATH), "math_correct").total == expected


def test_references_in_display_math_and_thin_space_thousands_match():
    """A reference written \\[3\\] never matched (math-verify read $\\[3\\]$ as nothing), nor \\boxed{1\\,000} 1000."""
    from execrl.extract import math_answer
    from execrl.rewards.math_answers import answers_match

    for predicted, reference in [("3", r"\[3\]"), (r"\frac{1}{2}", r"\[\frac{1}{2}\]"), ("0.5", r"\[\frac{1}{2}\]"),
                                 (math_answer(r"\boxed{1\,000}"), "1000"), (r"1\ 000", "1000"), ("1{,}000", "1000"),
                                 ("$3$", r"\(3\)")]:
        assert answers_match(predicted, reference), (predicted, reference)
    for predicted, reference in [(r"1\,5", "15"), ("2", r"\[3\]"), ("$$", "3"), ("$3$ and $4$", "3")]:
        assert not answers_match(predicted, reference), (predicted, reference)


def test_infra_error_makes_the_sample_invalid_not_zero():
    r = parts(sample(res=result(V.INFRA_ERROR)), "test_pass_fraction", "execution_tiers")
    assert not r.valid and r.total is None and r.parts == {}


def test_config_errors_name_the_fix():
    with pytest.raises(ValidationError, match="did you mean 'test_pass_fraction'"):
        RewardConfig(components=[{"name": "test_pass_fractoin"}])
    with pytest.raises(ValidationError, match="has no parameter"):
        RewardConfig(components=[{"name": "repetition_penalty", "ngrams": 3}])



def test_turn_discounted_pass_fraction():
    three_of_four = result(V.PASS, V.PASS, V.PASS, V.FAIL)
    assert parts(sample(res=three_of_four), "turn_discounted_pass_fraction").total == 0.75
    assert parts(sample(res=three_of_four, turns=3), {"name": "turn_discounted_pass_fraction", "discount": 0.5}
                 ).total == 0.75 * 0.25
    assert parts(sample(turns=2), "turn_discounted_pass_fraction").total == 0.0  # no code: nothing to discount


@pytest.mark.parametrize("response, reference, expected", [
    ("so it is 34.\nAnswer: 34", "34", True),
    ("Answer: \\frac12", "\\frac{1}{2}", True),  # TeX shorthand braced
    ("Answer: 1,000 dollars", "1000", True),  # units dropped, digit commas dropped
    ("Answer: $x = 5$", "5", True),  # the text after the last '='
    ("Answer: 35", "34", False),
    ("The answer is \\boxed{34}.", "34", False),  # no 'Answer:' line
    ("Answer: 34\n" + "x" * 400, "34", False),  # the line is not in the last 300 characters
    ("answer : 12\nAnswer: 34", "34", True),  # the last one counts
])
def test_dapo_math_verify(response, reference, expected):
    from execrl.rewards.math_answers import VERIFIER

    problem = Problem("m", [{"role": "user", "content": "x"}], "math", answer=reference,
                      metadata={VERIFIER: "dapo_math_verify"})
    assert parts(sample(response, problem=problem), "math_correct").total == float(expected)


def test_a_math_problem_has_one_test_its_answer():
    """test_pass_fraction and all_tests_pass score a math problem by its answer (a math dataset under the default
    reward is never scored 0 for want of code)."""
    right, wrong = sample(r"\boxed{72}", problem=MATH), sample(r"\boxed{71}", problem=MATH)
    for component in ("test_pass_fraction", "all_tests_pass"):
        assert parts(right, component).total == 1.0 and parts(wrong, component).total == 0.0


def test_commas_are_thousands_separators_only():
    """A decimal comma (0,5) or a list (1,2) is not a number with its commas removed: 0,5 is not 5, 1,2 is not 12;
    thousands separators still go (1,234 is 1234)."""
    from execrl.rewards.math_answers import answers_match

    assert not answers_match("0,5", "5") and not answers_match("1,2", "12") and not answers_match("12", "1,2")
    assert answers_match("1,234", "1234") and answers_match("$1,234,567.5$", "1234567.5") and answers_match("1,000.", "1000")


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 1e39])  # (1e39: float32's inf in the reward table)
def test_a_component_that_returns_nan_or_inf_is_named(tmp_path, bad):
    """One NaN reward made its group's advantages NaN and the whole step's loss: three skipped steps later the run
    stopped advising a lower learning rate. The component, its value and the problem are named at once."""
    (tmp_path / "mine.py").write_text(f"def score(sample):\n    return float({str(bad)!r})\n")
    with pytest.raises(ValueError, match=rf"reward component .*mine.py:score returned {re.escape(str(bad))} for "
                                         "problem p: a reward is a finite number within"):
        parts(sample(), {"name": f"{tmp_path / 'mine.py'}:score"})


@pytest.mark.parametrize(("bad", "shown"), [("None", "NoneType 'None'"), ("'high'", "str 'high'"),
                                            ("[0.5, 1.0]", "list '[0.5, 1.0]'")])
def test_a_component_that_returns_no_number_is_named(tmp_path, bad, shown):
    """(A hunt's find) None, a string or a list from a component of one's own was float()'s TypeError (or "could not
    convert string to float"), naming neither the component nor the problem."""
    (tmp_path / "mine.py").write_text(f"def score(sample):\n    return {bad}\n")
    with pytest.raises(ValueError, match=rf"reward component .*mine.py:score returned {re.escape(shown)} for problem "
                                         "p: a reward is a number"):
        parts(sample(), {"name": f"{tmp_path / 'mine.py'}:score"})


def test_an_answer_whose_braces_do_not_close_matches_nothing():
    """Boxed for math-verify, "}{\\frac{1}{2}" closed the box early and "\\frac{1}{2" (cut before its end) left it
    open: both matched 1/2."""
    from execrl.rewards.math_answers import answers_match

    assert not answers_match("\\frac{1}{2", "\\frac{1}{2}") and not answers_match("}{\\frac{1}{2}", "\\frac{1}{2}")
    assert answers_match("\\frac{1}{2}", "0.5") and answers_match("\\{1, 2\\}", "\\{2, 1\\}")


def test_a_completions_future_imports_stay_above_a_datasets_header():
    """(A review's find) LeetCode's header of imports, and HumanEval's prompt, went above a completion that opened
    with `from __future__ import annotations`: a correct program was a syntax error."""
    from execrl.rewards.outcome import program_of

    code = '"""Mine."""\nfrom __future__ import annotations\nclass Solution:\n    def f(self, x: int) -> int:\n' \
           '        return x\n'
    leet = Problem("l/1", [{"role": "user", "content": "x"}], "code", metadata={"code_header": "import math\n"})
    program = program_of(leet, code)
    compile(program, "main.py", "exec")
    assert program.startswith("from __future__ import annotations\nimport math\n")
    assert program_of(CODE, code) == code  # (no header: as written)


def test_a_reward_constant_by_construction_is_refused():
    """Accepted without a word, each trained on a reward equal for every answer (every advantage 0): a weight of 0;
    +1 and -1 of one component (the sum read each component once, by name: the second's value for both); scaling
    onto a single target; a source range the components never reach, which clamps them all."""
    from execrl.config import ConfigError, load_config
    from execrl.config.checks import validate

    def check(*overrides):
        validate(load_config(None, list(overrides)))

    for overrides, said in [
            (["reward.components=[{name: test_pass_fraction, weight: 0.0}]"], "every reward.components weight is 0"),
            (["reward.components=[{name: test_pass_fraction}, {name: test_pass_fraction, weight: -1}]"],
             "names test_pass_fraction twice"),
            (["reward.components=[{name: repetition_penalty, ngram: 2}, {name: repetition_penalty, ngram: 4}]"],
             "names repetition_penalty twice"),
            (["reward.scaling={enabled: true, target_min: 0.5, target_max: 0.5}"], r"onto 0.5 \(target_min == target_max\)"),
            (["reward.scaling={enabled: true, source_min: 2, source_max: 3}"], r"clamps every reward to 2: .*\[0, 1\]"),
            # weights and signs count: -2 x [0, 1] and 0.5 x [-1, 0] lie in [-2.5, 0], all at or above -3
            (["reward.components=[{name: all_tests_pass, weight: -2}, {name: repetition_penalty, weight: 0.5}]",
              "reward.scaling={enabled: true, source_min: -5, source_max: -3}"], r"clamps every reward to -3: .*\[-2.5, 0\]"),
            (["reward.components=[{name: execution_tiers, syntax_error: 2, crash: 2, no_code: 2, without_output: 2, "
              "with_output: 3}]", "reward.scaling={enabled: true, source_min: -1, source_max: 1}"], "clamps every reward to 1")]:
        with pytest.raises(ConfigError, match=said):
            check(*overrides)
    # (what varies passes: an unbounded or unknown component, a part added after the scaling, a range that overlaps)
    check("reward.components=[{name: test_pass_fraction}, {name: overlong_penalty, weight: 0}]")
    check("reward.components=[{name: test_pass_fraction, weight: 0}, {name: format, weight: 0.5}]")
    check("reward.components=[{name: test_pass_fraction}, {name: overlong_penalty, floor: false, buffer_tokens: 16}]",
          "reward.scaling={enabled: true, source_min: 0.5, source_max: 2}")
    # (an audit's find) a part added after the scaling no longer hides a scaled part that is constant: correctness
    # gone, the length penalty alone varied (a short wrong answer beat a long right one)
    with pytest.raises(ConfigError, match=r"onto 1 .*\(only format, added after the scaling, would vary\)"):
        check("reward.components=[{name: test_pass_fraction}, {name: format, weight: 0.1, scaled: false}]",
              "reward.scaling={enabled: true, target_min: 1, target_max: 1}")
    with pytest.raises(ConfigError, match=r"clamps every reward to 2: .*only overlong_penalty"):
        check("reward.components=[{name: test_pass_fraction}, {name: overlong_penalty, scaled: false}]",
              "reward.scaling={enabled: true, source_min: 2, source_max: 3}")
    with pytest.raises(ConfigError, match="only_correct: true .* transform: sigmoid"):
        check("reward.components=[{name: test_pass_fraction}, {name: reward_model, weight: 0.2, only_correct: true}]",
              "env.reward_model.enabled=true", "env.reward_model.model_name=builtin:arith-judge")
    # (an audit's find) format on math problems under answer_format code checks nothing: every answer got 1
    with pytest.raises(ConfigError, match="format checks an answer format"):
        check("data.train.dataset_name=gsm8k", "warmup.sft_steps=0",
              "reward.components=[{name: math_correct}, {name: format, weight: 0.1}]")
    check("data.train.dataset_name=gsm8k", "warmup.sft_steps=0", "prompt.answer_format=reasoning",
          "reward.components=[{name: math_correct}, {name: format, weight: 0.1}]")
    check("reward.components=[{name: test_pass_fraction}, {name: reward_model, weight: 0.2, only_correct: true, "
          "transform: sigmoid}]", "env.reward_model.enabled=true", "env.reward_model.model_name=builtin:arith-judge")
    check("reward.scaling={enabled: true, source_min: 0.5, source_max: 3}")


def test_a_flat_run_names_the_scaling_that_may_clamp_it():
    from execrl.config import load_config
    from execrl.trainer.flat import flat_reason

    assert "reward.scaling clamps rewards to [0, 1] first" in flat_reason(load_config(None, [
        "reward.scaling={enabled: true}"]))
    assert "reward.scaling" not in flat_reason(load_config(None, []))
