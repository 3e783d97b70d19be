"""The code interpreter: the model runs code cells, reads what they print, and submits a final
solution.

A turn that ends with a code cell (`<code>...</code>` or a ```python block, by `prompt.code_style`;
generation stops at the closing tag or fence) runs it in the sandbox, and the output (stdout, then
the traceback if it raised; cut to `env.multi_turn.max_output_chars` with a marker) comes back as
the environment's message. Errors and timeouts are shown to the model and counted as tool errors.
The episode ends with a final submission inside `<answer>...</answer>` (`env.multi_turn.final_tag`),
with a turn that ends without a cell (the model's last word), or when `grpo.max_rollout_turns` run
out; the reward comes from the problem's hidden tests, run on the submission (or, with none, on the
last code the model wrote). The submission must be a complete program.

State (`env.multi_turn.stateful`): the sandbox starts a fresh process per program, so a notebook is
imitated by replaying the episode's earlier cells that ran without error before the new one, their
output sent nowhere, and showing only the new cell's (a marker printed between them splits the
streams; what the cell's threads or exit handlers print after it ends is shown too, the replayed
cells' exit handlers dropped, while threads a replayed cell starts run again and what they print
after the replay shows). Each cell's opening `from __future__` imports go to the top of the
program. Replayed cells count towards the time limit, line numbers in tracebacks count them too,
and a cell that failed half-way leaves nothing behind (unlike a notebook).
"""

from __future__ import annotations

import secrets
import signal

from execrl.envs.base import CELL_ENDS, Environment, Step, final_step, head_and_tail, tail_of, terminal_text, utf8_size
from execrl.extract import LINE_OPEN, Extracted, defines, extract, fenced_blocks, last_tag_cell
from execrl.prompts import build_messages
from execrl.rewards import Sample
from execrl.rewards.outcome import leading_futures
from execrl.sandbox import LANGUAGES, Verdict
from execrl.sandbox.spec import entry_names
from execrl.tasks import Problem

_WHERE = {"tags": "inside <code></code> tags", "fence": "in a ```python code block",
          "auto": "in a ```python code block"}


class InterpreterEnv(Environment):
    runs_code = True  # (every turn's code runs in the sandbox)

    def __init__(self, cfg, grader):
        self.cfg, self.grader, self.mt = cfg, grader, cfg.env.multi_turn
        self.style = cfg.prompt.code_style
        self.final_open, self.final_close = f"<{self.mt.final_tag}>", f"</{self.mt.final_tag}>"
        self.stop_strings = CELL_ENDS[self.style] + [self.final_close]

    def instructions(self, language: str = "python") -> str:
        where, tag = _WHERE[self.style], self.mt.final_tag
        memory = " Each cell sees what the earlier ones defined." if self.mt.stateful and language == "python" else ""
        name = (LANGUAGES[language].title if language in LANGUAGES else "") or language
        return (f"You can run {name} code: write it {where} and you will see what it prints.{memory} "
                f"When you are done, give your complete solution inside <{tag}></{tag}>.")

    def reset(self, problem: Problem) -> list[dict]:
        if problem.kind != "code":
            raise ValueError(f"env.multi_turn.kind=interpreter needs code problems, and {problem.id} is "
                             f"{problem.kind}: use env.multi_turn.kind=single_turn for math")
        self.problem, self.cells, self.last_code = problem, [], None
        self._new_episode()
        return build_messages(problem, self.cfg.prompt, self.instructions(problem.language))

    def step(self, assistant_text: str, num_tokens: int = 0) -> Step:
        assistant_text = self._turn_text(assistant_text, self.style, num_tokens)
        if assistant_text is None:
            return Step(more=True)
        num_tokens = self.last_tokens  # (the whole turn's, a continued one's parts together)
        submitted = self._submission(assistant_text, closed=True)
        if submitted is None:
            submitted = self._submission(assistant_text, closed=False)
        if submitted is not None:
            return self._final(assistant_text, *submitted, num_tokens)
        cell = self._cell(assistant_text)
        if cell is None:  # the model ended its turn without running anything: its last word
            return self._final(assistant_text, self._code_of(assistant_text, self.style) or self.last_code, False,
                               num_tokens)
        entries = entry_names(self.problem.tests)
        if self.last_code is None or not entries or defines(cell, entries):  # (a cell that only calls the function,
            self.last_code = cell  # print(add(1, 2)), leaves the code graded the cell that defined it)
        if self.generations >= self.cfg.grpo.max_rollout_turns:
            return self._final(assistant_text, self.last_code, False, num_tokens)
        return self._run(cell)

    def finish(self) -> Step:
        return self._final(self.last_text, self.last_code, False, self.last_tokens)

    def _code_of(self, text: str, style: str) -> str | None:
        """The code of a final answer, as the single-turn environment reads it: a block defining a name the tests
        call before one of example calls."""
        return extract(text, "code", style, self.problem.language, entries=entry_names(self.problem.tests)).code

    def _run(self, cell: str) -> Step:
        marker, end = f"__cell_{secrets.token_hex(8)}__", f"__end_{secrets.token_hex(8)}__"
        # a cell that ends the program (sys.exit) is never replayed: it would end every later one before it ran
        # (a cell that is no program alone, `x = 1 + \` say, runs alone: joined to what follows it, it ran as another)
        # (stateful: Python's notebook replay; another language's cell is a program of its own, as with stateful off:
        # the replay's Python glue, compiled as C++, failed every cell)
        stateful = self.mt.stateful and self.problem.language == "python" and _compiles(cell)
        program = stateful_program(self.cells, cell, marker, end) if stateful else cell
        result = self.grader.run(program, language=self.problem.language)
        ok = result.verdict == Verdict.PASS
        out, err, exited, replay_failed = result.stdout, result.stderr, False, False
        if stateful:
            replay_failed = not ok and bool(self.cells) and marker not in result.stdout and \
                result.verdict != Verdict.SYNTAX_ERROR  # (the kept cells compiled together before)
            out, err = _after(out, marker + "\n").replace(end + "\n", "", 1), _after(err, marker)
            exited = ok and end not in result.stdout
        if ok and not exited:
            self.cells.append(cell)
        if result.verdict == Verdict.INFRA_ERROR:
            self.retried += 1
            shown, error = "(the sandbox failed to run this cell, through no fault of the code: run it again)", False
        else:
            tail, error = (err if not ok else ""), not ok
            if result.verdict in (Verdict.TIMEOUT, Verdict.MEMORY, Verdict.OUTPUT_LIMIT):
                tail += f"\n[{result.verdict.value}: the cell was stopped]"
            if replay_failed:
                tail += ("\n[an earlier cell raised when run again before this one (what they define is made anew "
                         "each run): this cell did not run]")
            elif exited:
                tail += "\n[the cell ended the program (exit): what it defined is not kept]"
            elif result.verdict == Verdict.RUNTIME_ERROR and not err.strip():  # sys.exit(1), a signal: no traceback
                how = f"exit status {result.exit}" if result.exit > 0 else \
                    f"signal {signal.Signals(-result.exit).name}" if -result.exit in signal.valid_signals() else \
                    f"exit status {result.exit}"
                tail += f"\n[the cell ended the program ({how}): what it defined is not kept]"
            shown = shown_output(out, tail, self.mt.max_output_chars)
        return Step([{"role": self.mt.observation_role, "content": shown if shown.strip() else "(no output)"}],
                    tool_call=True, tool_error=error)

    def _submission(self, text: str, closed: bool) -> tuple[str, bool] | None:
        """(the code of the turn's final submission, whether it is closed): `closed`, a turn that ends with the final
        tag's close (generation stops there), else one that ends inside an open final tag (a fenced answer stops at
        its fence; one cut before any close is not closed: no format reward); None where the turn has no such tag
        outside its code: a tag in a cell's code, or named in prose before a cell, is no submission."""
        end = text.rstrip()
        if closed and not end.endswith(self.final_close):
            return None
        at = end.rfind(self.final_open)
        if at < 0 or self._in_code(end[:at]) or not closed and self.final_close in end[at:]:
            return None
        body = end[at + len(self.final_open):]
        body = body[:-len(self.final_close)] if closed else body
        if not closed and end[:at].rstrip(" \t")[-1:] not in ("", "\n") and \
                not body.lstrip().startswith(("```", "<code>")):
            return None  # "... then give the <answer>.\n<code>...</code>": a tag named in prose, no answer after it
        found = extract(body, "code", "auto", self.problem.language, entries=entry_names(self.problem.tests))
        if found.code is not None:
            return found.code, closed or found.format_ok
        if not body.strip():
            return None
        # the bare body is the submission's code; prose in the tag is graded as such, with no format credit (nor, in
        # another language, which is not compiled here, any bare body: prose had it, a hunt's find)
        code = body.strip("\n")
        if code.lstrip().startswith("<code>"):  # (its cell never closed: the code after the tag, no format credit)
            return code.lstrip()[len("<code>"):].strip("\n"), False
        return code, closed and self.problem.language == "python" and _compiles(code)

    def _stopped_inside(self, text: str) -> bool:
        """The turn stopped at the final tag's close inside an open cell, and no submission ends there
        (`print('</answer>')`: the model's code goes on; a hunt's find: it ended the episode with no code, reward 0)."""
        end = text.rstrip()
        return end.endswith(self.final_close) and self._in_code(end[:-len(self.final_close)]) and \
            self._submission(end, closed=True) is None

    def _in_code(self, before: str) -> bool:
        """`before` ends inside a code cell: a <code> tag that opens its line, not closed since (one named in prose,
        'I tried a <code> cell', opens none), or an open ``` block."""
        if self.style in ("tags", "auto"):
            opened = [m.start() for m in LINE_OPEN.finditer(before)]
            if opened and opened[-1] > before.rfind("</code>"):
                return True
        blocks = fenced_blocks(before) if self.style in ("fence", "auto") else []
        return bool(blocks) and not blocks[-1][2]

    def _cell(self, text: str) -> str | None:
        """The code of the cell the turn ends with (generation stopped at its closing tag or fence),
        if any."""
        end = text.rstrip()
        if self.style in ("tags", "auto") and end.endswith("</code>"):
            cell = last_tag_cell(end)
            if cell is not None:
                return cell[1].strip("\n") or None
        if self.style in ("fence", "auto") and end.endswith("```"):
            blocks = fenced_blocks(end)
            if blocks and blocks[-1][2]:
                return blocks[-1][1] or None
        return None

    def _final(self, text: str, code: str | None, format_ok: bool, num_tokens: int) -> Step:
        extracted = Extracted(text, format_ok and code is not None, code)
        sample = Sample(self.problem, text, extracted, num_tokens=num_tokens,
                        max_tokens=self.turn_limit, turns=self.turns - self.retried)
        return final_step(sample, self.grader, self.cfg.reward)


def stateful_program(cells: list[str], cell: str, marker: str, end: str) -> str:
    """The program that runs `cell` after the episode's earlier `cells`: their opening `from __future__` imports
    first, the earlier cells with their output sent nowhere (a traceback if one raises: the hook brings the streams
    back), `marker` on both streams, the new cell, `end` on stdout. The markers are written to the file descriptors
    after what the cells printed is flushed: a cell that replaced print or sys.stdout moves none of them."""
    futures, bodies = zip(*(leading_futures(c) for c in [*cells, cell]))
    quiet = ("import sys as __execrl_sys, os as __execrl_os, atexit as __execrl_atexit\n"
             "__execrl_fds = (__execrl_os.dup(1), __execrl_os.dup(2))\n"
             "def __execrl_loud():\n"
             "    [getattr(f, 'flush', lambda: None)() for f in (__execrl_sys.stdout, __execrl_sys.__stdout__, "
             "__execrl_sys.stderr, __execrl_sys.__stderr__)]\n"
             "    __execrl_os.dup2(__execrl_fds[0], 1); __execrl_os.dup2(__execrl_fds[1], 2)\n"
             "def __execrl_hook(*a):\n    __execrl_loud(); __execrl_sys.__excepthook__(*a)\n"
             "__execrl_sys.excepthook = __execrl_hook\n"
             "__execrl_null = __execrl_os.open(__execrl_os.devnull, __execrl_os.O_WRONLY)\n"
             "__execrl_os.dup2(__execrl_null, 1); __execrl_os.dup2(__execrl_null, 2); __execrl_os.close(__execrl_null)")
    split = ("__execrl_loud(); __execrl_sys.excepthook = __execrl_sys.__excepthook__; "
             "getattr(__execrl_atexit, '_clear', lambda: None)(); "
             f"__execrl_os.write(1, {(marker + chr(10)).encode()!r}); __execrl_os.write(2, {marker.encode()!r})")
    done = ("[getattr(f, 'flush', lambda: None)() for f in (__execrl_sys.stdout, __execrl_sys.__stdout__, "
            f"__execrl_sys.stderr, __execrl_sys.__stderr__)]; __execrl_os.write(1, {(end + chr(10)).encode()!r})")
    return "".join(futures) + "\n".join([quiet, *bodies[:-1], split, bodies[-1], done])


def _compiles(cell: str) -> bool:
    """Whether a cell compiles as a Python program on its own (`return` at the top level parses, and does not
    compile); the model's text, compiled here as its other code is parsed, in time linear in it, warnings unsaid."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(cell, "<cell>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    return True


def shown_output(out: str, tail: str, max_chars: int) -> str:
    """A cell's output as the model sees it (as a terminal shows it: terminal_text), at most ~max_chars characters
    and UTF-8 bytes: stdout cut first, in its middle (head_and_tail), so that what follows it (the traceback, the note
    that the cell was stopped) stays, in the last half of the budget at most (by bytes too: a traceback of emoji
    filled the context)."""
    out, tail = terminal_text(out), terminal_text(tail)
    if utf8_size(tail) > max_chars // 2:
        end = tail_of(tail, max_chars // 2)
        tail = f"\n... [truncated {len(tail) - len(end)} chars]\n{end}"
    cut = head_and_tail(out, max(0, max_chars - utf8_size(tail)))
    return cut + ("\n" if cut != out and tail and not tail.startswith("\n") else "") + tail


def _after(stream: str, marker: str) -> str:
    """What the new cell wrote: the part of the stream after the marker (all of it if the marker
    never came)."""
    return stream.split(marker, 1)[1] if marker in stream else stream
