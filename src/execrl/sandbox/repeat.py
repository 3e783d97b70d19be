"""A program's output, if it is the same whatever it cannot know: the adversarial code game's guard
against outputs unpredictable by construction (execrl.games.code_game).

The program runs twice, each run on a worker of its own where the pool has two (so with its own hash
seed, memory layout and process ids), under a prelude that seeds `random` and stops the clock
(time.time, time_ns, localtime, gmtime, ctime, asctime, strftime, datetime.now/today/utcnow,
date.today) at an instant of its own: 2001 in one run, 2023 in the other, different seeds. Output
that differs between the runs (it depends on the clock, randomness, process ids, addresses, hashing,
/dev/urandom) rejects the program: the writer loses. Rejecting instead of only fixing these makes a
seeded random number no easier a puzzle than the clock.

Not caught: a program that restores the real clock (importlib.reload) or reads another slow counter
(/proc/uptime) and prints it coarsely (the day), the same in both runs since they are seconds
apart; and facts of the machine both runs share: its boot id (/proc/sys/kernel/random/boot_id) and
boot time (/proc/stat), the paths in /proc/self/mountinfo, its CPU count, kernel and Python versions.
(The sandbox's uid is drawn per worker, so it differs between the runs.)"""

from __future__ import annotations

from dataclasses import dataclass

from execrl.sandbox.grader import Grader, Limits
from execrl.sandbox.spec import Verdict

RUNS = ((1, 1_000_012_345), (2, 1_700_054_321))  # (random's seed, the stopped clock in epoch seconds) per run

PRELUDE = """\
import datetime as _dt, random as _random, time as _time
_random.seed({seed})
_NOW = {now}


def _at_now(f):
    return lambda t=None: f(_NOW if t is None else t)


_time.time, _time.time_ns = (lambda: float(_NOW)), (lambda: _NOW * 10**9)
_time.localtime, _time.gmtime, _time.ctime = (_at_now(_time.localtime), _at_now(_time.gmtime), _at_now(_time.ctime))
_asctime, _strftime = _time.asctime, _time.strftime
_time.asctime = lambda t=None: _asctime(_time.localtime() if t is None else t)
_time.strftime = lambda fmt, t=None: _strftime(fmt, _time.localtime() if t is None else t)


class _Datetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return cls.fromtimestamp(_NOW, tz)

    @classmethod
    def today(cls):
        return cls.fromtimestamp(_NOW)

    @classmethod
    def utcnow(cls):
        return cls.fromtimestamp(_NOW, _dt.timezone.utc).replace(tzinfo=None)


class _Date(_dt.date):
    @classmethod
    def today(cls):
        return cls.fromtimestamp(_NOW)


_dt.datetime, _dt.date = _Datetime, _Date
exec(compile({source!r}, "main.py", "exec"), {{"__name__": "__main__", "__builtins__": __builtins__}})
"""


@dataclass
class Repeated:
    output: str | None  # what the program printed, the same in every run (None: rejected)
    why: str  # "ok" | "too_long" | "failed" (a run's verdict was not pass: `verdict` says which) | "no_output" |
    # "too_much_output" | "differs"
    verdict: str = "pass"  # the failing run's (runtime_error, timeout, ...)


GAP_S = 0.03  # between the two runs: clocks the prelude cannot stop (/proc/uptime ticks every 10 ms) move on


def repeatable_output(grader: Grader, program: str, limits: Limits | None = None, max_program_chars: int = 2000,
                      max_output_chars: int = 500) -> Repeated:
    """The program's output if it runs to the end, prints something (at most max_output_chars) and
    prints the same in both runs (see the module's docstring); else None and why not."""
    if len(program) > max_program_chars:
        return Repeated(None, "too_long")
    runs = grader.run_apart([PRELUDE.format(seed=seed, now=now, source=program) for seed, now in RUNS],
                            limits=limits, gap_s=GAP_S)
    failed = next((r for r in runs if r.verdict != Verdict.PASS), None)
    if failed is not None:
        return Repeated(None, "failed", failed.verdict.value)
    first = runs[0].stdout
    if not first.strip():
        return Repeated(None, "no_output")
    if len(first) > max_output_chars:
        return Repeated(None, "too_much_output")
    if any(r.stdout != first for r in runs[1:]):
        return Repeated(None, "differs")
    return Repeated(first, "ok")
