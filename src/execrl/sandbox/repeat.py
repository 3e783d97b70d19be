"""A program's output, if it is the same whatever it cannot know: the adversarial code game's guard
against outputs unpredictable by construction (execrl.games.code_game).

The program runs twice, each run on a worker of its own where the pool has two (so with its own hash
seed, memory layout and process ids), under a prelude that seeds `random` and stops the clock
(time.time, time_ns, localtime, gmtime, ctime, asctime, strftime, datetime.now/today/utcnow,
date.today) at an instant of its own: 2001 in one run, 2023 in the other, different seeds. Output
that differs between the runs (it depends on the clock, randomness, process ids, addresses, hashing,
/dev/urandom) rejects the program: the writer loses. Rejecting instead of only fixing these makes a
seeded random number no easier a puzzle than the clock.

The stand-ins print as the classes they stand for (their repr, their class) and the program runs in
a main module's namespace of its own, so that what an ordinary program prints is what Python prints.
A program that inspects its frames (sys._getframe().f_back) or the patched functions (time.time's
name, datetime.date.__mro__) sees the prelude.

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
_MAIN = dict(globals())  # (the program's own namespace, as the sandbox makes a main module's: none of the names below)
import datetime as _dt, random as _random, time as _time
_REAL = (_dt.datetime, _dt.date)
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


def _repr(self):  # (the real classes' repr: "datetime.date(2020, 1, 31)"; a program's own subclass keeps its name)
    text = (_REAL[0] if isinstance(self, _REAL[0]) else _REAL[1]).__repr__(self)
    return "datetime." + text if type(self) in (_Datetime, _Date) else text


for _cls, _name in ((_Datetime, "datetime"), (_Date, "date")):  # (printed, they are the classes they stand for)
    _cls.__name__ = _cls.__qualname__ = _name
    _cls.__module__, _cls.__repr__ = "datetime", _repr
_dt.datetime, _dt.date = _Datetime, _Date
exec(compile({source!r}, _MAIN.get("__file__", "main.py"), "exec"), _MAIN)
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
    if grader.pool.num_workers < 2:  # one worker runs both from one zygote: the same hash seed, memory layout and
        # /proc values, so output no solver could predict (hash('abc')) reads as repeatable (execrl train refuses
        # the code game on fewer; a caller of this function is told)
        raise ValueError(f"repeatable_output runs a program on two sandbox workers; this grader has "
                         f"{grader.pool.num_workers}: make it with num_workers >= 2")
    if len(program) > max_program_chars:
        return Repeated(None, "too_long")
    codes = [PRELUDE.format(seed=seed, now=now, source=program) for seed, now in RUNS]
    runs = grader.run_apart(codes, limits=limits, gap_s=GAP_S)
    if any(r.verdict == Verdict.INFRA_ERROR for r in runs):  # (the sandbox's failure, not the writer's: once more)
        runs = grader.run_apart(codes, limits=limits, gap_s=GAP_S)
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
