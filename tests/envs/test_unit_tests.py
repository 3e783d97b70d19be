"""The unit-test feedback environment on the real sandbox: failing public tests come back with their input,
expected answer and what the program gave; the episode ends when the public tests pass or turns run out, and the
reward comes from all the tests."""

from execrl.config import load_config
from execrl.envs import UnitTestsEnv
from execrl.envs.unit_tests import with_probes
from execrl.sandbox import AssertTests, CallTests, StdioTests, Verdict
from execrl.tasks import Problem, arith

SQUARES = Problem("t/sq", [{"role": "user", "content": "Write square(x)."}], "code",
                  tests=AssertTests(["assert square(2) == 4", "assert square(-3) == 9", "assert square(0) == 0"]))


def env(grader, problem, *overrides):
    cfg = load_config(None, ["env.multi_turn.kind=unit_tests", "grpo.max_rollout_turns=3", *overrides])
    e = UnitTestsEnv(cfg, grader)
    return e, e.reset(problem)


def test_failing_asserts_show_the_value_the_program_gave(grader):
    e, messages = env(grader, SQUARES, "env.multi_turn.public_tests=2")
    assert "```python" in messages[-1]["content"] and e.stop_strings == ["\n```\n"]
    step = e.step("```python\ndef square(x):\n    return x * 2\n```\n")
    assert not step.done and step.tool_call and step.tool_error
    assert step.observation[0]["content"] == ("1 of 2 tests failed.\ntest: assert square(-3) == 9\ngot: -6\n"
                                              "Fix the code and submit the whole solution again.")


def test_passing_the_public_tests_ends_the_episode_graded_on_all_tests(grader):
    e, _ = env(grader, SQUARES)
    step = e.step("```python\ndef square(x):\n    return abs(x) * 2 if x > 0 else x * x\n```")
    assert step.done and not step.observation  # square(2) == 4 passes; the hidden tests are graded too
    assert step.sample.result.passed == 3 and step.reward.total == 1.0
    e, _ = env(grader, SQUARES)
    step = e.step("```python\ndef square(x):\n    return 2 * x\n```")
    assert step.done and step.sample.result.passed == 2 and abs(step.reward.total - 2 / 3) < 1e-9


def test_stdio_feedback_shows_input_expected_and_output(grader):
    import random

    problem = arith.problem(random.Random(3), 0, "t")
    e, _ = env(grader, problem, "env.multi_turn.observation_role=user")
    step = e.step("```python\na, b = map(int, input().split())\nprint(a * 1000 + b)\n```")
    inp, out = problem.tests.inputs[0], problem.tests.outputs[0]
    a, b = map(int, inp.split())
    assert step.observation == [{"role": "user", "content": f"1 of 1 tests failed.\ninput: {inp.strip()}\n"
                                 f"expected: {out.strip()}\ngot: {a * 1000 + b}\n"
                                 "Fix the code and submit the whole solution again."}]


def test_no_code_is_said_and_the_last_turn_grades_the_last_code(grader):
    e, _ = env(grader, SQUARES)
    crash = e.step("```python\ndef square(x):\n    return x ** 2 / 0\n```")
    assert "got: runtime_error: ZeroDivisionError" in crash.observation[0]["content"]
    nothing = e.step("Hmm.")
    assert nothing.observation[0]["content"].startswith("No code found") and not nothing.tool_call
    last = e.step("Still thinking.")  # the third turn of three: the last code written is graded
    assert last.done and last.sample.extracted.code == "def square(x):\n    return x ** 2 / 0"
    assert last.reward.total == 0.0


def test_probes_keep_other_asserts_and_forms_as_they_are():
    tests = AssertTests(["x = 3\nassert f(x, [1]) == (4, 'a')", "assert f(1)", "assert f(2) == 1, 'msg'"])
    probed = with_probes(tests)
    assert probed.asserts == ["x = 3\n__got = f(x, [1])\nassert __got == ((4, 'a')), repr(__got)", "assert f(1)",
                              "assert f(2) == 1, 'msg'"]
    call = CallTests("f", [[1]], [2])
    assert with_probes(call) is call and with_probes(StdioTests(["1"], ["1"])).inputs == ["1"]


def test_probes_keep_statements_before_the_assert_and_string_literals_whole(grader):
    """A probe rewrote `a = 5; assert f(a) == 6` as `__got = f(a)` (the `a = 5; ` dropped: NameError), and cut a
    snippet whose string literal held \\x0c at it (str.splitlines ends a line there): a SyntaxError that failed the
    set-up of every public test, so a right program was told it was wrong."""
    tests = AssertTests(['a = 5; assert f(a) == 6', 'x = "p\x0cq\u2028"\nassert g(x) == 4', 'y = "\u00e9"; assert g(y) == 1'])
    probed = with_probes(tests)
    assert probed.asserts == ['a = 5; __got = f(a)\nassert __got == (6), repr(__got)',
                              'x = "p\x0cq\u2028"\n__got = g(x)\nassert __got == (4), repr(__got)',
                              'y = "\u00e9"; __got = g(y)\nassert __got == (1), repr(__got)']
    right = "def f(a):\n    return a + 1\ndef g(x):\n    return len(x)\n"
    assert [t.verdict for t in grader.grade(right, probed).tests] == [Verdict.PASS] * 3


def test_a_bare_fence_that_opens_the_block_lets_the_turn_go_on(grader):
    """The fence style's stop string (a ``` line) also matches a block opened without a language: that turn goes on
    (Step.more), and the next generation's text is the rest of it. It was read as a turn with no code: 'No code
    found' for correct code, and a reward of 0."""
    e, _ = env(grader, SQUARES, "prompt.code_style=fence")
    first = e.step("Here is my solution:\n```\n")
    assert first.more and not first.done and not first.observation and e.turns == 1
    step = e.step("def square(x):\n    return x * x\n```\n")
    assert step.done and step.reward.total == 1.0 and step.sample.extracted.code.startswith("def square")
    e, _ = env(grader, SQUARES, "prompt.code_style=fence", "grpo.max_rollout_turns=1")
    assert e.step("Here is my solution:\n```\n").done  # no turn left: graded as it stands


def test_a_turn_continued_after_its_fence_is_one_turn_of_both_parts_tokens(grader):
    """The continuation was counted as a second turn: a right first answer the environment never replied to was
    discounted as a fix after feedback (turn_discounted_pass_fraction 0.5), and its length was the second part's."""
    reward = "reward.components=[{name: turn_discounted_pass_fraction}, {name: overlong_penalty, buffer_tokens: 10}]"
    e, _ = env(grader, SQUARES, "prompt.code_style=fence", "policy.generation.max_new_tokens=40", reward)
    assert e.step("Here is my solution:\n```\n", num_tokens=25).more
    step = e.step("def square(x):\n    return x * x\n```\n", num_tokens=12)
    assert e.turns == 1 and step.sample.turns == 1 and step.sample.num_tokens == 37
    assert step.reward.parts == {"turn_discounted_pass_fraction": 1.0, "overlong_penalty": -0.7}


def test_an_episode_cut_at_max_new_tokens_keeps_its_length_for_overlong_penalty(grader):
    """finish() (a turn out of tokens, the episode ending early) scored the sample as 0 tokens long: a wrong answer
    that ran out of tokens escaped the overlong penalty a single-turn one gets."""
    reward = "reward.components=[{name: test_pass_fraction}, {name: overlong_penalty, buffer_tokens: 10}]"
    e, _ = env(grader, SQUARES, "policy.generation.max_new_tokens=60", reward)
    assert not e.step("```python\ndef square(x):\n    return x\n```\n" + "# pad" * 30, num_tokens=60).done
    step = e.finish()
    assert step.sample.num_tokens == 60 and step.reward.parts["overlong_penalty"] == -1.0


def test_the_runner_counts_a_continued_turn_once(grader):
    """Episode.turns (turns_mean, reward_by_turns/n, the rollout row) counted the continuation as a turn of its own."""
    from execrl.envs.trajectory import Trajectory
    from execrl.rollout.completion import Completion
    from execrl.trainer.rollouts import Episode, advance

    e, messages = env(grader, SQUARES, "prompt.code_style=fence")
    episode = Episode(SQUARES, e, messages, Trajectory([1, 2]))
    for text in ("Here is my solution:\n```\n", "def square(x):\n    return x * x\n```\n"):
        assert advance(episode, Completion([3], text, False), e.step(text, 1), None, 1000)
    assert episode.done and episode.turns == 1 and episode.messages[-1]["content"].endswith("x * x\n```\n")


def test_the_rest_of_a_turn_generates_within_what_is_left_of_its_budget(grader):
    """Each part of a turn cut at an opening fence had a whole max_new_tokens: a right answer of two 600-token parts
    under 1,024 counted 1,200 tokens and overlong_penalty took its reward from 1.0 to 0.0."""
    from execrl.rollout import Completion, SamplingParams
    from execrl.trainer.rollouts import EpisodeRunner

    from .conftest import qwen_like_tokenizer

    tok = qwen_like_tokenizer("qwen2_5_instruct.jinja")
    parts = ["Here is my solution:\n```\n", "def square(x):\n    return x * x\n```\n"]
    budgets = []

    class Scripted:  # each call: the next part, whole (stopped at its fence), and the budget it was given
        def generate(self, prompts, n, max_new_tokens, params, stop=None, seeds=None, **_):
            budgets.append(max_new_tokens)
            ids = tok(parts[len(budgets) - 1], add_special_tokens=False)["input_ids"]
            return [[Completion(ids, parts[len(budgets) - 1], False, [0.0] * len(ids))] for _ in prompts]

    cfg = load_config(None, ["env.multi_turn.kind=unit_tests", "grpo.max_rollout_turns=3", "prompt.code_style=fence",
                             "policy.generation.max_new_tokens=100", "policy.max_total_sequence_length=1024"])
    rollouts = EpisodeRunner(cfg, Scripted(), tok, grader).run([SQUARES], 1, SamplingParams(1.0, 1.0, None))
    first = len(tok(parts[0], add_special_tokens=False)["input_ids"])
    e = rollouts.episodes[0]
    assert budgets == [100, 100 - first]
    assert e.turns == 1 and e.sample.num_tokens == first + len(tok(parts[1], add_special_tokens=False)["input_ids"])
    assert e.reward.total == 1.0


def test_a_passing_submission_ran_the_public_tests_and_a_sandbox_failure_costs_no_turn(grader):
    """A submission whose public tests passed was no tool call (train/tool_calls_mean counted failures only), and a
    turn the sandbox failed to run counted in turn_discounted_pass_fraction's discount: 0.5 for a correct answer."""
    from execrl.sandbox import ProgramResult, TestResult

    class FailsOnce:
        def __init__(self, real):
            self.real, self.failed = real, False

        def grade(self, *args, **kwargs):
            if not self.failed:
                self.failed = True
                return ProgramResult(Verdict.INFRA_ERROR, [TestResult(Verdict.INFRA_ERROR)])
            return self.real.grade(*args, **kwargs)

        def __getattr__(self, name):
            return getattr(self.real, name)

    e, _ = env(grader, SQUARES)
    assert e.step("```python\ndef square(x):\n    return x * x\n```").tool_call
    cfg = load_config(None, ["env.multi_turn.kind=unit_tests", "grpo.max_rollout_turns=3",
                             "reward.components=[{name: turn_discounted_pass_fraction}]"])
    e = UnitTestsEnv(cfg, FailsOnce(grader))
    e.reset(SQUARES)
    solution = "```python\ndef square(x):\n    return x * x\n```"
    assert not e.step(solution).done
    final = e.step(solution)
    assert final.done and final.reward.total == 1.0 and final.sample.turns == 1, (final.reward, final.sample.turns)


def test_a_test_is_always_held_back_and_a_lone_one_never_shows_its_expected_value(grader):
    """(A reward hack, found by a review) public_tests at or over a problem's test count showed every expected value,
    and a model's second turn printed them: reward 1 without solving. One test at least is held back now; a problem
    of one test runs it, and its feedback says what the program gave, never what was expected."""
    e, _ = env(grader, SQUARES, "env.multi_turn.public_tests=5")
    step = e.step("```python\ndef square(x):\n    return x * 2\n```\n")
    assert step.observation[0]["content"].startswith("1 of 2 tests failed.")  # (of 3 tests, 2 public)
    lone = Problem("t/lone", SQUARES.messages, "code", tests=StdioTests(["3\n"], ["424242\n"]))
    e, _ = env(grader, lone)
    step = e.step("```python\nprint(0)\n```")
    said = step.observation[0]["content"]
    assert said.startswith("1 of 1 tests failed.\ninput: 3\ngot: 0") and "424242" not in said
    hacked = e.step(f"```python\nprint({said.split('got: ')[-1].split()[0]})\n```")
    assert not hacked.done and "424242" not in hacked.observation[0]["content"]
    one_call = Problem("t/call", SQUARES.messages, "code", tests=CallTests("square", [[7]], [49]))
    e, _ = env(grader, one_call)
    said = e.step("```python\ndef square(x):\n    return 0\n```").observation[0]["content"]
    assert "call: square(7)" in said and "got: 0" in said and "49" not in said
    one_assert = Problem("t/assert", SQUARES.messages, "code", tests=AssertTests(["assert square(7) == 49"]))
    e, _ = env(grader, one_assert)
    said = e.step("```python\ndef square(x):\n    return 1\n```").observation[0]["content"]
    assert "got: 1" in said and "49" not in said
    step = e.step("```python\ndef square(x):\n    return x * x\n```")
    assert step.done and step.reward.total == 1.0



def test_a_lone_asserts_feedback_shows_only_what_the_programs_own_call_gave(grader):
    """(A leak, found by a review) the probe reported the left side whatever it was: `assert 49 == square(7)` said
    `got: 49`, and an assert's own message (`'expected 49'`) was shown. Hidden, an assert reports a value only where
    its left side is a call of the program's and its right side calls none."""
    wrong = "```python\ndef square(x):\n    return 1\n\nclass Solution:\n    def sq(self, x):\n        return 1\n```"
    for test, shown in [("assert 49 == square(7)", "wrong answer"), ("assert square(7) == 49, 'expected 49'", "wrong answer"),
                        ("assert [square(7), 49] == [49, 49]", "wrong answer"), ("assert square(7) == 49", "1"),
                        ("assert Solution().sq(7) == 49", "1")]:
        e, _ = env(grader, Problem("t/lone", SQUARES.messages, "code", tests=AssertTests([test])))
        said = e.step(wrong).observation[0]["content"]
        assert said.splitlines()[1] == f"got: {shown}" and "49" not in said, (test, said)


def test_feedback_names_an_integer_json_cannot_write_by_its_size(grader):
    """A call row may hold integers of thousands of digits; the feedback's json.dumps of one raised ValueError (over
    4,300 digits) and ended the episode's step, and the training step with it."""
    from execrl.envs.unit_tests import feedback
    from execrl.sandbox import parse_tests

    big = "1" * 5000
    spec = parse_tests({"fn_name": "f", "inputs": [big, "1"], "outputs": [big, "2"]})
    text = feedback(spec, grader.grade("def f(x):\n    return 0\n", spec), 2000)
    assert "call: f(<an integer of 16607 bits>)" in text and "expected: 2" in text, text


def test_the_public_tests_run_the_program_the_final_grading_runs(grader):
    """(A hunt's find) the public tests ran the submitted code alone, where the final grading puts a dataset's header
    (LeetCode's imports) above it and a HumanEval prompt before a completion: right answers were told they failed
    each turn ("the program ended") and the turn-discounted reward fell to 0.25 for a right first answer."""
    from execrl.sandbox import CheckTests
    from execrl.tasks.humaneval import helpers
    from execrl.tasks.leetcode import IMPORTS

    leet = Problem("leetcode/x", [{"role": "user", "content": "Complete class Solution: count(nums)."}], "code",
                   tests=AssertTests(["assert Solution().count([1, 1, 2]) == 2", "assert Solution().count([]) == 0"]),
                   metadata={"code_header": IMPORTS})
    right = ("```python\nclass Solution:\n    def count(self, nums: List[int]) -> int:\n"
             "        return len(Counter(nums))\n```")
    e, _ = env(grader, leet, "reward.components=[{name: turn_discounted_pass_fraction, weight: 1.0, discount: 0.5}]")
    step = e.step(right)
    assert step.done and step.reward.total == 1.0, step.observation
    prompt = 'def inc(x: int) -> int:\n    """Return x + 1."""\n'
    human = Problem("HumanEval/x", [{"role": "user", "content": "Complete:\n```python\n" + prompt + "```"}], "code",
                    tests=CheckTests(helpers(prompt, "inc") + "def check(candidate):\n    assert candidate(1) == 2\n"
                                     "    assert candidate(5) == 6\n", "inc"),
                    metadata={"code_prefix": prompt, "entry_point": "inc"})
    e, _ = env(grader, human)
    step = e.step("```python\n    return x + 1\n```")
    assert step.done and step.reward.total == 1.0, step.observation


def test_a_program_that_dies_before_the_tests_is_told_its_own_error(grader):
    """(A hunt's find) in the assert form a syntax error said only "syntax_error" and an error at import "the tests'
    set-up failed: RemoteGone: the program ended ([Errno 32] Broken pipe)"; the program's own error line is shown,
    as the call and stdin forms show it."""
    for code, said in [("def square(x)\n    return x * x", "syntax_error: SyntaxError: expected ':'"),
                       ("import numpyy\ndef square(x):\n    return x * x",
                        "ModuleNotFoundError: No module named 'numpyy'"),
                       ("def square(x):\n    return x * x\nraise ValueError('top level')", "ValueError: top level")]:
        e, _ = env(grader, SQUARES)
        step = e.step(f"```python\n{code}\n```")
        assert said in step.observation[0]["content"], step.observation
    # (a review's find) a line the program printed to stderr is not its error where no traceback came
    e, _ = env(grader, SQUARES, "env.multi_turn.public_tests=2")
    fake = "import sys, os\nprint('SyntaxError: invalid syntax (fake)', file=sys.stderr)\ndef square(x):\n" \
           "    if x < 0:\n        os._exit(1)\n    return x * x"
    text = e.step(f"```python\n{fake}\n```").observation[0]["content"]
    assert "fake" not in text and "runtime_error" in text, text
