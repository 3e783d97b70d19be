"""Unit-test feedback: the model submits a program, is told which of the public tests fail (input,
expected, what it got), and refines. The public tests are the first `env.multi_turn.public_tests` of
the problem's tests, and never all of them: one test at least is held back (a model shown every
expected value could print them and pass); a problem of one test runs it each turn and the feedback
says what the program gave, not what was expected. The episode ends when the public tests pass, or
when `grpo.max_rollout_turns` run out, and the reward comes from all of the problem's tests, run on
the last submission.

For the assert form the feedback shows each failing assert and the value its left side had: a public
`assert f(x) == y` is graded as `__got = f(x)` then `assert __got == y, repr(__got)` (the same test,
in the checker sandbox, whose failure message is the value). Other asserts show the assert and its
error.
"""

from __future__ import annotations

import ast
import json
from dataclasses import replace

from execrl.envs.base import CELL_ENDS, Environment, Step, final_step, truncate
from execrl.extract import Extracted, extract
from execrl.prompts import build_messages
from execrl.rewards import Sample
from execrl.rewards.outcome import program_of
from execrl.sandbox import AssertTests, CallTests, CheckTests, ProgramResult, StdioTests, TestSpec, Verdict
from execrl.sandbox.preview import preview
from execrl.sandbox.spec import entry_names, num_tests, parse_python, python_lines, truncate_tests
from execrl.tasks import Problem

V = Verdict


class UnitTestsEnv(Environment):
    runs_code = True  # (every turn's code runs in the sandbox)

    def __init__(self, cfg, grader):
        self.cfg, self.grader, self.mt = cfg, grader, cfg.env.multi_turn
        self.stop_strings = CELL_ENDS[cfg.prompt.code_style]

    def reset(self, problem: Problem) -> list[dict]:
        if problem.kind != "code" or problem.tests is None:
            raise ValueError(f"env.multi_turn.kind=unit_tests needs code problems with tests, and {problem.id} is "
                             f"{problem.kind}: use env.multi_turn.kind=single_turn for math")
        self.problem, self.last_code = problem, None
        self._new_episode()
        self.public, self.hidden = public_part(problem.tests, self.mt.public_tests, problem.metadata.get("shown_tests"))
        self.probes = with_probes(self.public, entry_names(problem.tests) if self.hidden else None)
        return build_messages(problem, self.cfg.prompt)

    def step(self, assistant_text: str, num_tokens: int = 0) -> Step:
        p, prompt = self.problem, self.cfg.prompt
        assistant_text = self._turn_text(assistant_text, prompt.code_style, num_tokens)
        if assistant_text is None:
            return Step(more=True)
        num_tokens = self.last_tokens  # (the whole turn's, a continued one's parts together)
        last_turn = self.generations >= self.cfg.grpo.max_rollout_turns
        extracted = extract(assistant_text, prompt.answer_format, prompt.code_style, p.language,
                            entries=entry_names(p.tests), thinking=self.thinking)
        if extracted.code is None:
            if last_turn:
                return self._final(num_tokens, False)
            return Step([self._say("No code found. Write your whole solution in one code block.")])
        self.last_code = extracted.code
        if last_turn:
            return self._final(num_tokens, extracted.format_ok)
        # (the program the final grading runs: a dataset's header, a HumanEval prompt before a completion)
        public = self.grader.grade(program_of(p, self.last_code), self.probes, p.language)
        if public.verdict == V.PASS:
            return replace(self._final(num_tokens, extracted.format_ok), tool_call=True)  # (it ran the public tests)
        if public.verdict == V.INFRA_ERROR:
            self.retried += 1
            return Step([self._say("(the sandbox failed to run the tests, through no fault of the code: submit "
                                   "it again)")], tool_call=True)
        said = feedback(self.public, public, self.mt.max_output_chars, self.hidden, probed(self.public, self.probes))
        return Step([self._say(said)], tool_call=True, tool_error=True)

    def finish(self) -> Step:
        return self._final(self.last_tokens, False)  # (a turn cut at max_new_tokens: its length, for overlong_penalty)

    def _say(self, text: str) -> dict:
        return {"role": self.mt.observation_role, "content": text}

    def _final(self, num_tokens: int, format_ok: bool) -> Step:
        """Graded on the last code the model wrote (format_ok: the last turn held it, in the asked
        format)."""
        extracted = Extracted(self.last_text, format_ok, self.last_code)
        sample = Sample(self.problem, self.last_text, extracted, num_tokens=num_tokens,
                        max_tokens=self.turn_limit, turns=self.turns - self.retried)
        return final_step(sample, self.grader, self.cfg.reward)


def public_part(tests: TestSpec, public_tests: int, examples: TestSpec | None = None) -> tuple[TestSpec, bool]:
    """(the tests each turn runs, whether their expected values are hidden): the first `public_tests`, one at least
    held back; a problem of one test (a check function is one) runs it, its expected value hidden. `examples`: the
    tests its prompt shows, which training does not grade (tasks/shown.py): the public ones where there are any (a
    graded test shown as feedback could be copied: a review's find)."""
    if examples is not None and public_tests > 0:
        return truncate_tests(examples, public_tests), False
    shown = 0 if isinstance(tests, CheckTests) else min(public_tests, num_tests(tests) - 1)
    return truncate_tests(tests, max(shown, 1)), shown == 0


def with_probes(spec: TestSpec, hidden_entries: frozenset[str] | None = None) -> TestSpec:
    """Asserts of the form `assert left == right` rewritten to report `left`'s value when they
    fail. hidden_entries (the test's expected value is hidden: the program's names): only where
    `left` is a call of the program's and nothing else (`assert 12 == f(3)` would show 12, as would
    `[f(3), 12]`), and `right` calls none of them."""
    if not isinstance(spec, AssertTests):
        return spec
    return AssertTests([_probe(a, hidden_entries) for a in spec.asserts], spec.setup)


def probed(spec: TestSpec, probes: TestSpec) -> list[bool]:
    """Which of `spec`'s asserts report the value their left side had."""
    if not isinstance(spec, AssertTests):
        return []
    return [a != b for a, b in zip(spec.asserts, probes.asserts)]


def _probe(snippet: str, hidden_entries: frozenset[str] | None = None) -> str:
    tree = parse_python(snippet)
    last = tree.body[-1] if tree.body else None
    if not (isinstance(last, ast.Assert) and last.msg is None and isinstance(last.test, ast.Compare)
            and len(last.test.ops) == 1 and isinstance(last.test.ops[0], ast.Eq)):
        return snippet
    if hidden_entries is not None and not (_calls_the_program(last.test.left, hidden_entries) and not any(
            _calls_the_program(n, hidden_entries) for n in ast.walk(last.test.comparators[0]))):
        return snippet
    left, right = ast.unparse(last.test.left), ast.unparse(last.test.comparators[0])
    lines = python_lines(snippet)  # (the text before the assert, its own line's `a = 5; ` too; col_offset counts UTF-8 bytes)
    before = "".join(lines[:last.lineno - 1]) + lines[last.lineno - 1].encode()[:last.col_offset].decode()
    probe = f"{before}__got = {left}\nassert __got == ({right}), repr(__got)"
    try:
        parse_python(probe)
    except SyntaxError:
        return snippet
    return probe


def _calls_the_program(node: ast.AST, entries: frozenset[str]) -> bool:
    """`node` is a call of one of the program's names (`f(3)`, `Solution().two_sum(x)`)."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call):
        func = func.value.func
    return isinstance(func, ast.Name) and func.id in entries


def feedback(spec: TestSpec, result: ProgramResult, max_chars: int, hidden: bool = False,
             probed: list[bool] | None = None) -> str:
    """Which public tests failed, each with its input, the expected answer and what the program
    gave. hidden: the test is the problem's only one, held back: what the program gave, never what
    was expected (nor an assert's text or message, nor a check's message on a wrong answer, which
    hold it); an assert says what the program gave only where it was probed (with_probes)."""
    failed = [i for i, t in enumerate(result.tests) if t.verdict != V.PASS]
    lines = [f"{len(failed)} of {len(result.tests)} tests failed."]
    died = _died_of(result.stderr) if isinstance(spec, (AssertTests, CheckTests)) else ""
    said = "Traceback (most recent call last):" in result.stderr  # (a debug line the program printed is no error)
    for i in failed:
        t = result.tests[i]
        if t.verdict == V.FAIL:
            got = t.detail or "the assertion failed"
        elif died and (said or t.verdict == V.SYNTAX_ERROR) and t.verdict in (V.SYNTAX_ERROR, V.RUNTIME_ERROR) \
                and _says_nothing(t.detail):
            got = f"{t.verdict.value}: {died}"  # (the program's own error, where the tests' side saw it end)
        else:
            got = f"{t.verdict.value}: {t.detail}".strip(": ")
        if isinstance(spec, StdioTests):
            got = t.output if t.verdict == V.FAIL else got
            lines += [f"input: {_short(spec.inputs[i])}", *([] if hidden else [f"expected: {_short(spec.outputs[i])}"]),
                      f"got: {_short(got)}"]
        elif isinstance(spec, CallTests):
            got = t.output if t.verdict == V.FAIL else got
            lines += [f"call: {spec.fn_name}({', '.join(_value(a) for a in spec.args[i])})",
                      *([] if hidden else [f"expected: {_value(spec.outputs[i])}"]), f"got: {_short(got)}"]
        elif isinstance(spec, AssertTests):
            if hidden and t.verdict == V.FAIL and not (probed and probed[i]):
                got = "wrong answer"  # (the assertion's own message or a left side other than the program's call)
            lines += [*([] if hidden else [f"test: {_short(spec.asserts[i])}"]), f"got: {_short(got)}"]
        elif isinstance(spec, CheckTests):
            lines += [f"the check of {spec.entry_point} failed" + (": wrong answer" if hidden and t.verdict == V.FAIL
                                                                   else f": {_short(got)}")]
    return truncate("\n".join(lines + ["Fix the code and submit the whole solution again."]), max_chars)


def _died_of(stderr: str) -> str:
    """The last line of a program's error output: its exception or syntax error ('' where it wrote none)."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _says_nothing(detail: str) -> bool:
    """Whether a test's detail says nothing of why the program failed: none, or the tests' side seeing the program
    end (it died before or while answering the tests' first call)."""
    return not detail or "the program ended" in detail or "RemoteGone" in detail


def _value(value) -> str:
    """A test's argument or expected value as JSON, or where JSON cannot hold it (an integer of over 4,300 digits, a
    set) as repr's start, such an integer named by its size."""
    try:
        return _short(json.dumps(value))
    except (TypeError, ValueError):
        return preview(value, 200)


def _short(text: str, limit: int = 200) -> str:
    text = text.strip("\n")
    return text if len(text) <= limit else text[:limit] + " ..."
