"""The code interpreter environment on the real sandbox: cells run and show their output, state carries over (or
not), errors and timeouts are shown and counted, long output is cut with a marker, and the final submission is
graded on the hidden tests."""

import pytest

from execrl.config import load_config
from execrl.envs import InterpreterEnv
from execrl.sandbox import AssertTests, Verdict
from execrl.tasks import Problem

ADD = Problem("t/add", [{"role": "user", "content": "Write add(a, b)."}], "code",
              tests=AssertTests(["assert add(1, 2) == 3", "assert add(-1, 1) == 0"]))


def env(grader, *overrides):
    cfg = load_config(None, ["env.multi_turn.kind=interpreter", "grpo.max_rollout_turns=6", "prompt.code_style=tags",
                             "env.multi_turn.max_output_chars=200", *overrides])
    e = InterpreterEnv(cfg, grader)
    return e, e.reset(ADD)


def test_the_prompt_explains_the_interpreter(grader):
    e, messages = env(grader)
    assert "<code></code>" in messages[-1]["content"] and "<answer></answer>" in messages[-1]["content"]
    assert e.stop_strings == ["</code>", "</answer>"]
    # a problem that brings its own instructions (the built-in task's, Nemotron's) still hears of the interpreter
    own = Problem("t/own", [{"role": "user", "content": "Write add(a, b) in a ```python block."}], "code",
                  tests=ADD.tests, metadata={"own_instructions": True})
    assert "<answer></answer>" in e.reset(own)[-1]["content"]
    e, _ = env(grader, "prompt.add_instructions=false")
    assert e.reset(own)[-1]["content"] == own.messages[-1]["content"]  # (unless instructions are off)


def test_cells_run_and_later_cells_see_earlier_definitions(grader):
    e, _ = env(grader)
    first = e.step("Let me try.\n<code>\nx = 6 * 7\nprint('first', x)\n</code>")
    assert first.observation == [{"role": "tool", "content": "first 42\n"}] and not first.done
    assert first.tool_call and not first.tool_error
    second = e.step("<code>\nprint(x + 1)\n</code>")
    assert second.observation[0]["content"] == "43\n"  # the replayed first cell's output is not shown again


def test_stateless_cells_do_not_share_definitions(grader):
    e, _ = env(grader, "env.multi_turn.stateful=false", "env.multi_turn.observation_role=user")
    e.step("<code>\nx = 1\n</code>")
    step = e.step("<code>\nprint(x)\n</code>")
    assert step.observation[0]["role"] == "user"
    assert "NameError: name 'x' is not defined" in step.observation[0]["content"] and step.tool_error


def test_errors_and_timeouts_are_shown_and_counted_and_failed_cells_are_not_replayed(grader):
    e, _ = env(grader)
    e.step("<code>\ny = 2\n</code>")
    crash = e.step("<code>\nprint('partial')\ny = 100\n1 / 0\n</code>")
    text = crash.observation[0]["content"]
    assert text.startswith("partial\n") and "ZeroDivisionError" in text and crash.tool_error
    assert e.step("<code>\nprint(y)\n</code>").observation[0]["content"] == "2\n"
    slow = e.step("<code>\nwhile True:\n    pass\n</code>")
    assert "[timeout: the cell was stopped]" in slow.observation[0]["content"] and slow.tool_error
    silent = e.step("<code>\nz = 1\n</code>")
    assert silent.observation[0]["content"] == "(no output)" and not silent.tool_error


def test_long_output_is_cut_with_a_visible_marker(grader):
    e, _ = env(grader)
    text = e.step("<code>\nprint('a' * 5000)\n</code>").observation[0]["content"]
    assert text == "a" * 133 + "\n... [truncated 4801 chars]\n" + "a" * 66 + "\n"


def test_the_final_answer_is_graded_on_the_hidden_tests(grader):
    e, _ = env(grader)
    e.step("<code>\ndef add(a, b):\n    return a + b\nprint(add(1, 2))\n</code>")
    final = e.step("It works.\n<answer>\n```python\ndef add(a, b):\n    return a + b\n```\n")  # stopped at the fence
    assert final.done and not final.observation and final.sample.result.verdict == Verdict.PASS
    assert final.reward.total == 1.0 and final.sample.extracted.format_ok


def test_when_turns_run_out_the_last_cell_is_graded(grader):
    e, _ = env(grader, "grpo.max_rollout_turns=2")
    e.step("<code>\ndef add(a, b):\n    return a - b\n</code>")
    last = e.step("<code>\ndef add(a, b):\n    return b + a\n</code>")
    assert last.done and not last.tool_call and last.reward.total == 1.0


def test_a_turn_without_a_cell_is_the_final_word(grader):
    e, _ = env(grader)
    e.step("<code>\ndef add(a, b):\n    return a * b\n</code>")
    done = e.step("I am done.")
    assert done.done and done.sample.extracted.code == "def add(a, b):\n    return a * b"  # the last code written
    assert done.reward.total == 0.0 and done.sample.result.passed == 0


@pytest.mark.parametrize("style", ["fence", "auto"])
def test_fenced_cells(grader, style):
    e, messages = env(grader, f"prompt.code_style={style}")
    assert "\n```\n" in e.stop_strings and "```python" in messages[-1]["content"]
    assert e.step("Try:\n```python\nprint(2 + 2)\n```\n").observation[0]["content"] == "4\n"


def test_math_problems_are_refused_with_the_fix(grader):
    e, _ = env(grader)
    with pytest.raises(ValueError, match="single_turn"):
        e.reset(Problem("m/1", [{"role": "user", "content": "1+1?"}], "math", answer="2"))


def test_a_bare_fence_that_opens_the_cell_lets_the_turn_go_on(grader):
    e, _ = env(grader, "prompt.code_style=fence")
    first = e.step("Let me test:\n```\n")
    assert first.more and not first.observation
    assert e.step("print(6 * 7)\n```\n").observation[0]["content"] == "42\n"


@pytest.mark.parametrize("prose", ["I must end with the solution inside <answer></answer>",
                                   "Plan: run a cell inside <code></code>",
                                   "<think>\nI will test a draft first:\n<code>\nprint(1)\n</code>"])
def test_a_tag_named_in_prose_or_a_draft_in_thinking_lets_the_turn_go_on(grader, prose):
    """(A hunt's find) the turn's stop strings (</answer>, </code>) appear in prose too, the environment's own
    instruction naming them: a thinking model's "I must end with <answer></answer>" ended every episode there with
    no code, reward 0, nothing learned. A tag pair with nothing in it, or a stop inside an open <think>, goes on."""
    e, _ = env(grader)
    first = e.step(prose)
    assert first.more and not first.done and not first.observation, first
    last = e.step(". Done thinking.</think>\n<code>\nprint(6 * 7)\n</code>" if "<think>" in prose else
                  ".\n<code>\nprint(6 * 7)\n</code>")
    assert last.observation[0]["content"] == "42\n" and e.turns == 1


def test_a_draft_in_thinking_the_chat_template_opened_lets_the_turn_go_on(grader):
    """DeepSeek-R1's distills' template opens the <think> block in its generation prompt (the runner sets
    env.thinking, prompts.opens_think): a turn with no <think> of its own that stops at a draft's </code> is still
    thinking (a hunt's find: the draft ran as a cell, or a draft <answer> ended the episode)."""
    e, _ = env(grader)
    e.thinking = True
    first = e.step("I will test a draft first:\n<code>\nprint(1)\n</code>")
    assert first.more and not first.observation, first
    last = e.step(". Done thinking.</think>\n<code>\nprint(6 * 7)\n</code>")
    assert last.observation[0]["content"] == "42\n" and e.turns == 1
    e, _ = env(grader)  # (a template that opens nothing: the same turn is a cell)
    assert e.step("I will test a draft first:\n<code>\nprint(1)\n</code>").observation[0]["content"] == "1\n"


@pytest.mark.parametrize("turn", ["<code>\nprint('<answer>')\n</code>",
                                  "I will test it, then give the <answer>.\n<code>\nprint(1 + 1)\n</code>"])
def test_an_answer_tag_in_a_cell_or_named_in_prose_is_no_submission(grader, turn):
    """A submission's tag is outside the code, and the code follows it: the cell runs. rfind('<answer>') anywhere
    ended the episode on the cell's own text (or on it as the final answer), its code never run."""
    e, _ = env(grader)
    step = e.step(turn)
    assert not step.done and step.tool_call and not step.tool_error, step


@pytest.mark.parametrize("style, turn", [
    ("tags", "I first tried a <code> cell.\n<answer>\ndef add(a, b):\n    return a + b\n</answer>"),
    ("tags", "<answer>\nHere is my solution:\n<code>\ndef add(a, b):\n    return a + b\n</code>"),
    ("fence", "<answer>\nHere is my solution:\n```python\ndef add(a, b):\n    return a + b\n```\n"),
    ("fence", "So here is my solution: <answer>\n```python\ndef add(a, b):\n    return a + b\n```\n"),
])
def test_a_submission_with_prose_around_it_is_still_one(grader, style, turn):
    """A <code> named in prose opens no cell, and prose inside the answer before its code is the answer's."""
    e, _ = env(grader, f"prompt.code_style={style}")
    step = e.step(turn)
    assert step.done and step.reward.total == 1.0 and step.sample.extracted.format_ok, step


def test_the_error_and_the_stop_note_survive_a_long_output(grader):
    e, _ = env(grader)  # max_output_chars=200
    crash = e.step("<code>\nprint('z' * 1200)\n1 / 0\n</code>").observation[0]["content"]
    assert crash.startswith("zzz") and "[truncated" in crash and crash.rstrip().endswith("ZeroDivisionError: division by zero")
    slow = e.step("<code>\nprint('z' * 1200, flush=True)\nwhile True:\n    pass\n</code>").observation[0]["content"]
    assert slow.rstrip().endswith("[timeout: the cell was stopped]") and len(slow) < 300


def test_a_cell_that_exits_is_said_and_not_replayed(grader):
    """A cell that calls sys.exit() ran without error; replayed before each later cell, it ended the program before
    them: every later cell, errors included, read '(no output)'."""
    e, _ = env(grader)
    exits = e.step("<code>\nimport sys\nx = 5\nsys.exit(0)\n</code>").observation[0]["content"]
    assert "ended the program" in exits
    later = e.step("<code>\nprint(undefined_name)\n</code>")
    assert later.tool_error and "NameError" in later.observation[0]["content"]
    assert e.step("<code>\nprint(6 * 7)\n</code>").observation[0]["content"] == "42\n"


def test_a_code_tag_named_in_prose_before_a_cell_is_not_the_cells_start(grader):
    """"I will put my solution in a <code> block.\n<code>..." ran the prose as code (an IndentationError, a tool error)
    and a correct last word was graded on it (0)."""
    e, _ = env(grader)
    turn = "I will put my solution in a <code> block.\n<code>\ndef add(a, b):\n    return a + b\n</code>"
    step = e.step(turn)
    assert step.tool_call and not step.tool_error, step.observation
    assert e.step("Done.").reward.total == 1.0


def test_a_last_cell_that_only_calls_the_function_leaves_the_function_graded(grader):
    """With turns run out on a cell that checks the function (print(add(1, 2))), that cell was graded: 0 for a
    correct function. The code graded is the last cell that defines what the tests call."""
    e, _ = env(grader, "grpo.max_rollout_turns=2")
    e.step("<code>\ndef add(a, b):\n    return a + b\n</code>")
    last = e.step("Let me check it.\n<code>\nprint(add(1, 2), add(-1, 1))\n</code>")
    assert last.done and last.sample.extracted.code.startswith("def add") and last.reward.total == 1.0


def test_a_submission_cut_before_its_close_earns_no_format_reward(grader):
    """A turn cut inside an open <answer> with no closed code block in it scored format 1 ("a closed code block")."""
    e, _ = env(grader, "reward.components=[{name: test_pass_fraction}, {name: format}]")
    final = e.step("<answer>\ndef add(a, b):\n    return a + b\n\n# now some more expl")
    assert final.done and final.reward.parts == {"test_pass_fraction": 1.0, "format": 0.0}, final.reward.parts


def test_a_cell_that_replaces_stdout_keeps_its_definitions(grader):
    """The cells' markers were printed with the cell's own print and sys.stdout: a cell that replaced sys.stdout was
    said to end the program, and what it defined was lost."""
    e, _ = env(grader)
    e.step("<code>\nimport sys, io\nsys.stdout = io.StringIO()\nx = 5\n</code>")
    step = e.step("<code>\nsys.stdout = sys.__stdout__\nprint(x)\n</code>")
    assert step.observation[0]["content"].strip() == "5", step.observation


def test_future_imports_in_cells_are_hoisted_and_kept(grader):
    """(A review's find) a stateful cell opening with `from __future__` failed as a SyntaxError (the split line came
    first), even as the first cell, and its definitions were never kept."""
    e, _ = env(grader)
    first = e.step("<code>\nfrom __future__ import annotations\ndef add(a: int, b: int) -> int:\n    return a + b\n"
                   "print(add(1, 2))\n</code>")
    assert first.observation[0]["content"] == "3\n" and not first.tool_error
    second = e.step("<code>\nfrom __future__ import division\nprint(add(2, 3), add.__annotations__['a'])\n</code>")
    assert second.observation[0]["content"] == "5 int\n" and not second.tool_error


def test_replayed_cells_stderr_does_not_hide_the_new_cells_traceback(grader):
    """(A review's find) an earlier cell's 8 KB of warnings, replayed, filled the stderr the sandbox kept: the new
    cell's ZeroDivisionError was never shown. Replayed cells print nowhere; the sandbox keeps a long stream's end."""
    e, _ = env(grader, "env.multi_turn.max_output_chars=2000")
    e.step("<code>\nimport warnings\nfor i in range(100):\n    warnings.warn('deprecated thing number %d is going "
           "away soon, please migrate your code' % i)\nprint('warned')\n</code>")
    crash = e.step("<code>\nx = 1/0\n</code>").observation[0]["content"]
    assert "ZeroDivisionError" in crash and "deprecated" not in crash, crash
    own = e.step("<code>\nimport sys\nsys.stderr.write('w' * 20000)\nraise KeyError('last')\n</code>")
    text = own.observation[0]["content"]
    assert "KeyError: 'last'" in text, text


def test_what_a_cell_prints_after_it_ends_is_shown_once(grader):
    """(A review's find) a thread's or an exit handler's output, printed after the cell's last statement, was dropped
    in stateful mode; a replayed cell's exit handler does not print again in later cells (a replayed cell's threads
    run again, and what they print after the replay shows: the module docstring says so)."""
    e, _ = env(grader)
    ticks = e.step("<code>\nimport threading, time\ndef f():\n    for i in range(3):\n        time.sleep(0.05); "
                   "print('tick', i, flush=True)\nthreading.Thread(target=f).start()\n</code>")
    assert ticks.observation[0]["content"] == "tick 0\ntick 1\ntick 2\n"
    e, _ = env(grader)
    bye = e.step("<code>\nimport atexit\natexit.register(lambda: print('bye'))\nprint('hi')\n</code>")
    assert bye.observation[0]["content"] == "hi\nbye\n"
    assert e.step("<code>\nprint('next')\n</code>").observation[0]["content"] == "next\n"


@pytest.mark.parametrize("ending, said", [("import sys\nsys.exit(1)", "exit status 1"),
                                          ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", "SIGKILL")])
def test_a_cell_that_ends_the_program_with_an_error_status_is_told_so(grader, ending, said):
    e, _ = env(grader)
    step = e.step(f"<code>\ndef add(a, b):\n    return a + b\nprint('about to end', flush=True)\n{ending}\n</code>")
    text = step.observation[0]["content"]
    assert text.startswith("about to end\n") and said in text and "not kept" in text and step.tool_error, text


def test_an_answer_with_a_usage_block_after_it_grades_the_solution(grader):
    """(A review's find) the final answer's last block, a usage example, was graded (reward 0) where the single-turn
    environment grades the block defining the tested function."""
    e, _ = env(grader)
    final = e.step("<answer>\n```python\ndef add(a, b):\n    return a + b\n```\nUsage:\n```python\nprint(add(1, 2))\n"
                   "```\n</answer>")
    assert final.done and final.reward.total == 1.0 and "def add" in final.sample.extracted.code


def test_a_kept_cell_that_raises_when_run_again_is_shown_and_named(grader):
    """(A hunt's find) a kept cell whose values are made anew each run (random ones) can raise when replayed: its
    traceback went nowhere (the sandbox printed it without calling sys.excepthook, which brings the streams back) and
    the new cell was told it had ended the program. The replayed cell's traceback is shown, and that the new cell did
    not run."""
    e, _ = env(grader, "env.multi_turn.max_output_chars=2000")
    # (raises only when replayed: a replayed cell's output goes to /dev/null; a random one's stand-in)
    first = e.step("<code>\nimport os\nif 'null' in os.readlink('/proc/self/fd/1'):\n    raise LookupError('on replay')"
                   "\nprint('ran')\n</code>")
    assert first.observation[0]["content"] == "ran\n"
    later = e.step("<code>\nprint('new cell')\n</code>")
    text = later.observation[0]["content"]
    assert "LookupError: on replay" in text and "did not run" in text and "new cell" not in text, text
    assert "ended the program" not in text and later.tool_error


def test_a_cell_that_is_no_program_alone_is_its_syntax_error(grader):
    """(A hunt's find) a cell ending in a line continuation was joined to the harness's next line: `x = 1 + \\` gave a
    TypeError from the harness's code, and `x = \\` ran, was kept and broke the later cells."""
    e, _ = env(grader, "env.multi_turn.max_output_chars=2000", "grpo.max_rollout_turns=10")
    assert e.step("<code>\ny = 2\n</code>").observation[0]["content"] == "(no output)"
    for cell in ("x = 1 + \\", "x = \\"):
        step = e.step(f"<code>\n{cell}\n</code>")
        assert "SyntaxError" in step.observation[0]["content"] and step.tool_error, step.observation
    # (a review's find) a cell that parses and does not compile alone (`return` at the top level) is its own error,
    # at its own line, never blamed on an earlier cell
    for cell in ("return 1", "nonlocal x", "x = 2\nfrom __future__ import annotations"):
        text = e.step(f"<code>\n{cell}\n</code>").observation[0]["content"]
        assert "SyntaxError" in text and "earlier cell" not in text, text
    assert e.cells == ["y = 2"]
    assert e.step("<code>\nprint(y)\n</code>").observation[0]["content"] == "2\n"


def test_prose_in_the_answer_tag_earns_no_format_reward(grader):
    """(An audit's find) `<answer>I am not sure.</answer>` was graded as the code it is not and paid format 1.0, which
    single-turn pays 0: the bare body is still the submission, but only code earns the format reward."""
    e, _ = env(grader, "reward.components=[{name: test_pass_fraction}, {name: format, weight: 0.5}]")
    prose = e.step("<answer>\nI am not sure how to solve this.\n</answer>")
    assert prose.done and prose.reward.parts["format"] == 0.0 and prose.reward.total == 0.0, prose.reward
    e, _ = env(grader, "reward.components=[{name: test_pass_fraction}, {name: format, weight: 0.5}]")
    bare = e.step("<answer>\ndef add(a, b):\n    return a + b\n</answer>")
    assert bare.reward.parts == {"test_pass_fraction": 1.0, "format": 1.0}, bare.reward


def test_output_is_bounded_in_bytes_as_well_as_characters(grader):
    """(A hunt's find) 200 characters of emoji are 800 bytes and ~800 tokens of a byte-level tokenizer: output cut by
    characters alone could fill the context and end the episode unread. It is cut at as many UTF-8 bytes too."""
    from execrl.envs.base import truncate

    e, _ = env(grader)
    shown = e.step("<code>\nprint('\\U0001F600' * 5000)\n</code>").observation[0]["content"]
    kept = shown.split("\n... [truncated")[0]
    assert len(kept.encode()) <= 200 and kept == "\U0001F600" * len(kept) and "[truncated" in shown, shown
    assert truncate("ab" * 10, 20) == "ab" * 10 and truncate("é" * 10, 20) == "é" * 10  # (20 bytes: kept whole)
    assert truncate("é" * 11, 20) == "é" * 10 + "\n... [truncated 1 chars]"


def test_a_cpp_problems_cells_run_as_cpp_programs(grader):
    """(A hunt's find) with stateful on (the default) a C++ cell was wrapped in the Python notebook's replay glue and
    compiled as C++: every cell failed, and the prompt said "You can run Python code"."""
    from execrl.sandbox import StdioTests

    e, _ = env(grader)
    cpp = Problem("t/cpp", [{"role": "user", "content": "Add two numbers."}], "code",
                  tests=StdioTests(["1 2\n"], ["3\n"]), language="cpp")
    messages = e.reset(cpp)
    assert "You can run C++ code" in messages[-1]["content"] and "earlier ones defined" not in messages[-1]["content"]
    step = e.step('<code>\n#include <cstdio>\nint main() { puts("hi"); }\n</code>')
    assert step.observation[0]["content"] == "hi\n" and not step.tool_error, step.observation


def test_a_languages_file_languages_prompt_names_it_as_the_file_writes_it(grader, tmp_path):
    """(A review's find) the prompt named a --languages language in lower case ("You can run go code")."""
    from execrl.sandbox import LANGUAGES, StdioTests, load_languages

    (tmp_path / "langs.yaml").write_text("Shell:\n  file: main.sh\n  run: [sh, '{file}']\n")
    load_languages(str(tmp_path / "langs.yaml"))
    try:
        e, _ = env(grader)
        sh = Problem("t/sh", [{"role": "user", "content": "Echo."}], "code", tests=StdioTests(["1\n"], ["1\n"]),
                     language="shell")
        assert "You can run Shell code" in e.reset(sh)[-1]["content"]
    finally:
        LANGUAGES.pop("shell", None)


def test_a_bare_answer_in_another_language_earns_no_format_credit():
    """(A hunt's find) a C++ problem's <answer> of prose (or of C++ that does not compile) earned format 1: a bare
    body outside Python, which is not compiled here, was taken as code that compiles."""
    from types import SimpleNamespace

    from execrl.envs.interpreter import InterpreterEnv
    from execrl.sandbox.spec import StdioTests
    from execrl.tasks.problem import Problem

    e = InterpreterEnv.__new__(InterpreterEnv)
    e.mt, e.style, e.final_open, e.final_close = SimpleNamespace(final_tag="answer"), "fence", "<answer>", "</answer>"
    for language, credited in (("python", False), ("cpp", False)):
        e.problem = Problem("1", [], "code", tests=StdioTests(["1\n"], ["1\n"]), language=language)
        assert e._submission("<answer>I could not solve this one, sorry.</answer>", closed=True)[1] is credited
    e.problem = Problem("1", [], "code", tests=StdioTests(["1\n"], ["1\n"]), language="python")
    assert e._submission("<answer>print(1)</answer>", closed=True) == ("print(1)", True)


def test_a_traceback_is_bounded_in_bytes_and_a_progress_bar_shows_as_a_terminal_shows_it(grader):
    """(A hunt's finds) A traceback was cut by characters only: 1,000 emoji in an exception's message came back as
    1,027 bytes under max_output_chars=500 and filled the episode's context. A progress bar's thousands of states
    (carriage returns, colour codes) filled the budget and the result printed after it was cut: the output is what a
    terminal shows, cut in its middle."""
    e, _ = env(grader, "env.multi_turn.max_output_chars=500")
    for cell in ("print('\\U0001F600' * 1000)", "raise ValueError('\\U0001F600' * 1000)"):
        shown = e.step(f"<code>\n{cell}\n</code>").observation[0]["content"]
        assert len(shown.encode()) <= 560 and "[truncated" in shown, (cell, len(shown.encode()))
    bar = ("import sys\nfor i in range(2000):\n    sys.stdout.write(f'\\r\\x1b[32m{i / 20:.0f}%\\x1b[0m')\n"
           "print()\nprint('lots ' * 200)\nprint('answer:', 42)")
    shown = e.step(f"<code>\n{bar}\n</code>").observation[0]["content"]
    assert shown.startswith("100%\nlots lots") and shown.endswith("answer: 42\n") and "\x1b" not in shown, shown


@pytest.mark.parametrize("style", ["tags", "fence"])
def test_the_answers_close_inside_a_cell_is_the_cells_code_and_the_turn_goes_on(grader, style):
    """(A hunt's find) Generation stops at '</answer>'; where it stood in a cell's code (print('</answer>')) the
    turn ended with no cell and no answer: the episode's last word, reward 0. The turn goes on; an answer whose
    code block is left open still ends the episode."""
    e, _ = env(grader, f"prompt.code_style={style}")
    opening, close = ("<code>\n", "</code>") if style == "tags" else ("```python\n", "```\n")
    assert e.step(f"{opening}print('<b>x</b>') or print('</answer>").more
    ran = e.step(f"')\n{close}")
    assert ran.tool_call and ran.observation[0]["content"] == "<b>x</b>\n</answer>\n", ran
    e, _ = env(grader, f"prompt.code_style={style}")
    final = e.step(f"<answer>\n{opening}def add(a, b):\n    return a + b\n</answer>")
    assert final.done and final.reward.total == 1.0, final
