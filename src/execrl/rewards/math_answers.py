"""Math answer correctness: math-verify (numbers, fractions, LaTeX, \\boxed{}), with a plain numeric fallback."""

from __future__ import annotations

import atexit
import collections
import importlib.util
import json
import logging
import os
import re
import select
import subprocess
import sys
import threading
import time
import unicodedata
from fractions import Fraction

from execrl.extract import (
    BOUND,
    INVISIBLE,
    after_reasoning,
    improper,
    last_boxed,
    math_answer,
    own_turn,
    spelled,
)
from execrl.rewards.base import Sample, component
from execrl.tasks.problem import VERIFIER

log = logging.getLogger(__name__)
MAX_ANSWER_CHARS = 200  # longer answers (and over twice the reference's length) get the numeric check only


THOUSANDS = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d*)?")  # 1,234,567.5: the only commas a plain number holds


HEDGE = re.compile(rf"\bor\b|\\(?:lor|vee)\b|{BOUND}|\d\s*(?:\\text\{{\s*)?\+(?:\s*\}})?\s*$|"
                   r"\band (?:up|above|over|more)\b|\b(?:maybe|perhaps|possibly|alternatively|otherwise|else|if)\b|"
                   r"\\begin\{cases\}", re.I)  # alternatives or a bound, in an answer: \geqq 18, 18 \text{ at least},
# 18+, 18 and up, 72 \text{ (possibly } 73), a case split (math-verify read one of them: it scored 1, a hunt's find)
RATIO = re.compile(r"(\d+(?:\.\d+)?)\s*(?:\bto\b|:)\s*(\d+(?:\.\d+)?)(?:\s+[A-Za-z]+)?\.?", re.I)  # 3:1, 3 to 1 odds


def _ratio(m: re.Match) -> Fraction | None:
    if max(len(m[1]), len(m[2])) > 4000:  # (Fraction refuses more than 4,300 digits: a ValueError that ended the
        return None  # training step, a hunt's find)
    first, second = Fraction(m[1]), Fraction(m[2])
    return first / second if second else None


RANGE = re.compile(r"\d[\s*_]+(?:to|and|through)[\s*_]+\$?-?\d", re.I)  # 18 to 20, 18 and 20: two answers where the
# reference is one number (not a list's "1 and 2" against "1, 2", nor a ratio's "3 to 1" against "3:1")


UNSEEN = frozenset(INVISIBLE + "\u00ad")  # and a soft hyphen (a reference "18\u200b" matched no answer)
WHOLE_VULGAR = re.compile(r"([-\u2212]?\d*)\s?([\u00bc-\u00be\u2150-\u215e])")  # 1½, ½, -2¾
DELIMITERS = (("\\(", "\\)"), ("\\[", "\\]"), ("$$", "$$"), ("$", "$"))  # LaTeX math around a whole answer
SEPARATORS = re.compile(r"(?<=\d)(?:\\,|\\ |\{,\}|[ \u00a0\u2009\u202f])(?=\d{3}(?![\d/]))")  # 1\,000, 1\ 000, 1{,}000,
# 1 000 (a space, a no-break or a thin one; not the 2 of the mixed number 2 100/3): thousands separators


DEGREE_SIGN = re.compile(r"(?<=\d)[ \t]*°")  # a degree sign after a number, as LaTeX's ^\circ (a hunt's find)
LEADING_DASH = re.compile(r"[-\u2010\u2011\u2013\u2212\ufe63\uff0d]\s*(?=\d)")  # "– 10", "−10": -10
TEX_FRACTION = re.compile(r"([-\u2212]?)(?:(\d{1,9})(?:\s|~|\\[ ,;!])*)?\\[dt]?frac\s*\{\s*(\d{1,9})\s*\}\s*\{\s*"
                          r"(\d{1,9})\s*\}")  # \frac{9}{4}, -\dfrac{1}{2}, 2\frac{1}{4} (a mixed number)
# a repeating decimal: 0.\overline{3}, 0.1\bar{6}
REPEATING = re.compile(r"([-\u2212]?)(\d{0,9})\.(\d{0,9})\\(?:overline|bar|dot)\s*\{\s*(\d{1,9})\s*\}")


def _tex_number(text: str) -> str | None:
    """A plain LaTeX fraction, mixed number or repeating decimal as a fraction Fraction reads ("\\frac{9}{4}": 9/4,
    "2\\frac{1}{4}": 9/4, "0.1\\overline{6}": 15/90); None where `text` is none (math-verify read "1 1/2" and
    "2\\frac{1}{4}" as products, and repeating decimals not at all: right answers scored 0)."""
    if m := TEX_FRACTION.fullmatch(text):
        sign, whole, top, bottom = m[1] and "-", m[2], int(m[3]), int(m[4])
        if whole is None:
            return f"{sign}{top}/{bottom}"
        return f"{sign}{int(whole) * bottom + top}/{bottom}" if top < bottom else None  # (2\frac{5}{4}: no mixed
        # number)
    if m := REPEATING.fullmatch(text):
        sign, whole, fixed, period = m[1] and "-", m[2], m[3], m[4]
        top = int(whole + fixed + period) - int(whole + fixed or "0")
        return f"{sign}{top}/{10 ** len(fixed) * (10 ** len(period) - 1)}"
    return None


def _bare(text: str) -> str:
    """An answer without one pair of math delimiters around the whole of it (a reference written \\[3\\] is 3),
    without invisible format characters (a byte-order mark, a zero-width space), a Unicode fraction as digits (1½:
    3/2, as an answer's is read)."""
    text = DEGREE_SIGN.sub(r"^\\circ", "".join(c for c in text if c not in UNSEEN).strip())  # (30°: 30^\circ)
    text = LEADING_DASH.sub("-", text, count=1) if LEADING_DASH.match(text) else text
    if (m := WHOLE_VULGAR.fullmatch(text)) and len(m[1]) <= 4000:  # (int() refuses more than 4,300 digits)
        whole = m[1].lstrip("-\u2212")
        value = int(whole or 0) + Fraction(unicodedata.numeric(m[2])).limit_denominator(100)
        return ("-" if len(whole) < len(m[1]) else "") + str(value)
    for left, right in DELIMITERS:
        inner = text[len(left):len(text) - len(right)]
        if len(text) >= len(left) + len(right) and text.startswith(left) and text.endswith(right) and \
                left not in inner and right not in inner:  # ($3$ and $4$: two, not one)
            return inner.strip()
    return text


# a plain decimal numeral: sign, whole digits, fraction digits, exponent (1,234.50, .5, 5., 1e3, 2.5E-7)
DECIMAL = re.compile(r"([+-]?)(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?", re.ASCII)


def _decimal(negative: bool, digits: str, exponent: int) -> tuple[bool, str, int]:
    """digits x 10**exponent as a key equal for equal values: no leading or trailing zeros (72.0 is 72, 0.50 is .5)."""
    digits = digits.lstrip("0")
    if not digits:
        return False, "", 0  # -0 is 0
    significant = digits.rstrip("0")
    return negative, significant, exponent + len(digits) - len(significant)


def _number(text: str) -> tuple[bool, str, int] | Fraction | None:
    """A plain number as a key that compares exactly: a decimal's digits and exponent, never evaluated (1e9999999 is
    ten million digits, minutes to build, and Python refuses to read an integer over 4,300 digits); a fraction
    that is a decimal (1/2) the same key, one that is none (1/3) itself. None: not a plain number."""
    text = SEPARATORS.sub(",", text.strip().strip("$").replace("\\!", "")).rstrip(".")
    text = improper(text) or _tex_number(text) or spelled(text) or text  # 2 1/2 (GSM8K's mark keeps the line as
    # written): 5/2, read on as a fraction; "seventy-two": 72
    if "," in text:  # thousands separators only: "0,5" (a decimal comma) and "1,2" (a list) are not 5 and 12
        if not THOUSANDS.fullmatch(text):
            return None
        text = text.replace(",", "")
    m = DECIMAL.fullmatch(text)
    try:
        if m and (m[2] or m[3]):
            sign, whole, fraction, exponent = m.groups(default="")
            return _decimal(sign == "-", whole + fraction, int(exponent or 0) - len(fraction))
        if "e" in text.lower():  # Fraction would evaluate the exponent (here one of digits other than 0-9)
            return None
        value = Fraction(text)  # 3/4, and what else Fraction reads (1_000)
        twos = (value.denominator & -value.denominator).bit_length() - 1
        rest, fives = value.denominator >> twos, 0
        while rest % 5 == 0:
            rest, fives = rest // 5, fives + 1
        if rest != 1:
            return value  # 1/3 equals no decimal
        places = max(twos, fives)  # value = numerator x 2**(places - twos) x 5**(places - fives) / 10**places
        scaled = abs(value.numerator) * 2 ** (places - twos) * 5 ** (places - fives)
        return _decimal(value < 0, str(scaled), -places)
    except (ValueError, ZeroDivisionError):  # an exponent or a fraction over 4,300 digits; a zero denominator
        return None


PERCENT_SIGNS = ("\\text{\\%}", "\\text{%}", "\\%", "%", "percent")  # 25%, 25\\%, 25 \\text{\\%}, 25 percent
ASKS_PERCENT = re.compile(r"\b(?:what|which|how\s+(?:many|much))\s+(?:\w+\s+){0,2}?percent(?:age)?s?\b|"
                          r"\b(?:in|as\s+an?|to\s+the\s+nearest(?:\s+\w+)?)\s+percent(?:age)?s?\b", re.I)  # a
# question whose answer is a number of percent ("What percentage of ...", "... as a percent?")


def _percent_read(text: str) -> tuple[object, bool] | None:
    """A plain number, perhaps with a percent sign: (_number's key, whether it has one); None for anything else. (By
    suffixes, not a regex: a lazy group before \\s* took cubic time on a run of spaces, seconds per answer.)"""
    sign = next((p for p in PERCENT_SIGNS if text.endswith(p)), None)
    if sign is not None:
        text = text[:-len(sign)].rstrip()
        for space in ("\\,", "\\!", "\\ ", "\\;"):  # (25\\,\\%: a thin space before the sign)
            text = text.removesuffix(space)
        text = text.rstrip()
    key = _number(text) if text else None
    return None if key is None else (key, sign is not None)


def _percent_match(a: tuple[object, bool], b: tuple[object, bool], asks_percent: bool) -> bool:
    """A number and a reference, one or both with a percent sign. math-verify reads N% both as N and as N/100, so
    2500% and 25% both matched a reference of 25: where the question asks for a percentage or the reference is one,
    only as written (25% is 25); elsewhere either way, as math-verify ("an average of 74% ... what score?" 94%;
    "the probability?" 50% for 0.5)."""
    (x, x_percent), (y, y_percent) = a, b
    if x_percent == y_percent or asks_percent or y_percent:
        return x == y
    return x == y or _times_ten(x, -2) == y


MAGNITUDE = re.compile(r"(\\?\$)?\s*+([-+]?[\d.,]++)\s*+(?:\\[,! ;]|~)?\s*+(?:\\(?:text|mathrm|textrm|mbox)\{\s*+)?"
                       r"(thousand|million|billion|trillion|bn|[kKmMbB])\s*+\}?\s*+", re.I)  # a number and its
# magnitude (possessive: no run of spaces is tried two ways)
SCALES = {"thousand": 3, "k": 3, "million": 6, "m": 6, "billion": 9, "bn": 9, "b": 9, "trillion": 12}


def _magnitude(text: str, question: str = ""):
    """The number `text` says with a magnitude word after it (18 thousand, 18k, \\$1.2\\text{M}: M and B only after a
    currency's dollar, where m is not metres), as _number's key; else None. Where `question` asks in that magnitude
    ("$32 million ... how many million dollars are left?"), its answer in the question's own unit: 4 million is 4."""
    m = MAGNITUDE.fullmatch(text)
    if m is None or (m[3] in "mMbB" and not m[1]):  # (18k is 18,000; 18 m is 18 metres, not millions)
        return None
    base, power = _number(m[2]), SCALES[m[3].lower()]
    if not isinstance(base, tuple):  # (a decimal's key)
        return None
    return base if IN_QUESTION[power].search(question) else _times_ten(base, power)


IN_QUESTION = {power: re.compile(rf"(?i)\bhow\s+(?:many|much)\s+(?:\w+\s+)?{word}s?\b|\bin\s+{word}s\b")
               for power, word in ((3, "thousand"), (6, "million"), (9, "billion"), (12, "trillion"))}  # a question
# that asks in a magnitude ("how many million dollars", "in thousands"): where its reference is in it


# "18 dollars"; each word whole (split anywhere, a run of letters took cubic time: 26 s for a reference of 1,600)
WITH_UNITS = re.compile(r"\\?\$?\s*([-+]?\d[\d,]*(?:\.\d+)?)\s+((?:[A-Za-z]{2,}(?![A-Za-z])\s*){1,3})\.?")
NOT_UNITS = {"and", "or", "half", "halves", "third", "thirds", "quarter", "quarters", "fourth", "fourths", "fifth",
             "fifths", "tenth", "tenths", "hundred", "hundreds", "hundredths", "thousand", "thousands", "thousandths",
             "million", "millions", "billion", "billions", "trillion", "bn", "dozen", "dozens", "score", "percent",
             "per", "times", "plus", "minus", "more", "less", "fewer", "over", "under", "to", "at", "least", "most",
             "about", "approximately", "around", "than", "point", "squared", "cubed", "factorial", "choose", "sqrt",
             "root", "roots", "sin", "cos", "tan", "cot", "csc", "sinh", "cosh", "tanh", "arcsin", "arccos",
             "arctan", "log", "exp", "mod", "modulo", "pi", "inf", "infinity", "power", "powers"}  # words that change
# the number (18 thousand, 2 pi, 6 sqrt 2) are no units
UNIT_ABBREVIATIONS = {"km", "cm", "mm", "kg", "mg", "ft", "mi", "lb", "oz", "ml", "yd", "hr", "qt", "pt", "gal", "mph",
                      "kph", "lbs", "hrs", "min", "yds", "sq", "cu", "usd", "cal", "kcal", "hz", "khz", "mhz", "ghz",
                      "kw", "kwh", "mw", "db", "rpm", "pts", "pcs", "in", "sec", "secs", "mins", "yrs", "wks", "ms",
                      "ns", "gb", "mb", "kb", "tb", "px", "pm", "am", "st", "nd", "rd", "th"}
VARIABLES = re.compile(r"[abcijkmnxyz]{1,3}|[b-df-hj-np-tv-z]{1,3}")  # three letters or fewer, no list's, of
# variables' letters or with no vowel: a product of variables ("xy", "abc", "ii"), not a unit


def _with_units(reference: str):
    """A reference of a number and unit words ("18 dollars", "$18 per"... not: "2 and a half", "18 thousand") as its
    number's key (_number's), as the extraction reads "#### 18 dollars": math-verify matched "18 apples" with 18 and
    never "18 dollars", a row no answer could score on. None: not of that form. A unit comes after a space, and is
    no math word (pi, sqrt, cos) and no short run of letters no list names ("4xy", "2 pi", "6 sqrt", "6 xyz" were
    read as 4, 2 and 6: a review's find); "60 Hz", "12 kWh", "20 pts" are units."""
    m = WITH_UNITS.fullmatch(reference)
    if m is None:
        return None
    words = m[2].lower().split()
    if any(w in NOT_UNITS or (w not in UNIT_ABBREVIATIONS and VARIABLES.fullmatch(w)) for w in words):
        return None
    return _number(m[1])


def _times_ten(key: tuple[bool, str, int] | Fraction, power: int) -> tuple[bool, str, int] | Fraction:
    """A number key (_number's) times 10**power."""
    if isinstance(key, Fraction):
        return key * Fraction(10) ** power
    negative, digits, exponent = key
    return (negative, digits, exponent + power) if digits else key


def answers_match(predicted: str | None, reference: str, question: str = "") -> bool:
    """Whether an answer equals the reference (`question`, the problem's text: whether it asks for a percentage)."""
    if predicted is None or not predicted.strip():
        return False
    predicted, reference = _bare(predicted), _bare(reference)
    if not predicted:
        return False
    if predicted == reference:  # whatever its length (a reference can be longer than MAX_ANSWER_CHARS)
        return True
    if HEDGE.search(predicted) and not HEDGE.search(reference):  # "\\boxed{18 (or 20)}", "18 \\lor 20": two answers
        return False  # (math-verify reads one of them)
    ratios = RATIO.fullmatch(predicted), RATIO.fullmatch(reference)
    if None not in ratios and ":" in reference:  # "3 to 1" against "3:1" (a ratio, not a range)
        ratio = _ratio(ratios[0])
        return ratio is not None and ratio == _ratio(ratios[1])
    a, b = _number(predicted), _number(reference)
    units = _with_units(reference) if b is None else None
    if RANGE.search(predicted) and (b is not None or units is not None):
        return False
    if b is None:  # ("18 dollars", "18 thousand": the number a reference says)
        b = units or (_magnitude(reference) if len(reference) <= MAX_ANSWER_CHARS else None)
    if a is not None and b is not None:  # (a LaTeX fraction or repeating decimal against a decimal that differs:
        return a == b or bool(_tex_number(predicted) or _tex_number(reference)) and _verified(predicted, reference)
    # math-verify's, which rounds: 0.333333 is \frac{1}{3} there as in NeMo RL)
    scaled = _magnitude(predicted) if len(predicted) <= MAX_ANSWER_CHARS else None
    if scaled is not None and b is not None:  # "18 \\text{ thousand}", "\\$1.2\\text{M}": the number it says
        return scaled == b or _magnitude(predicted, question) == b  # (math-verify drops the word as a unit: 18
        # thousand matched 18, where the question does not count in thousands)
    percents = _percent_read(predicted), _percent_read(reference)
    if None not in percents:  # (one or both with a percent sign)
        return _percent_match(*percents, asks_percent=bool(ASKS_PERCENT.search(question)))
    return _verified(predicted, reference)


def _verified(predicted: str, reference: str) -> bool:
    """math-verify's verdict, where the answer is short enough and balanced."""
    if len(predicted) > max(MAX_ANSWER_CHARS, 2 * len(reference)) or importlib.util.find_spec("math_verify") is None:
        return False
    if not _balanced(predicted):  # ("\\frac{1}{2": cut before its end; boxed, "}{\\frac{1}{2}" would close the box)
        return False
    return _math_verify(reference, predicted)


# math-verify (sympy) runs for minutes on some 12-character answers (\boxed{10^{10^{10}}}, 100000!, 9^{9^{9}}), and
# its own timeouts use signal.alarm, which works on the main thread only (scoring runs in threads): it runs in child
# processes instead, killed past VERIFY_SECONDS of the child's CPU time (the answer scores 0, as NeMo RL's
# math-verify timeout scores it; CPU time, not the clock: a right answer that took 3.4 s scored 0 whenever the
# machine was busy, a hunt's find), or past WALL_SECONDS times as long whatever it spent. A reference math-verify
# cannot compare with 0 in that time is remembered: its later answers score 0 at once (one 9-character reference
# cost 40 s a group). A child is a fresh interpreter (fork + exec: safe with torch imported and threads running) that
# imports math-verify only; it starts on first use and serves answer after answer, one at a time.
VERIFY_SECONDS = 5.0  # one answer's parse and verify (math-verify's own default is 5 s each; an ordinary one: ms)
WALL_SECONDS = 4  # x VERIFY_SECONDS: the clock's bound, however little CPU the child got
VERIFY_WORKERS = min(4, os.cpu_count() or 1)  # children at most: scoring threads beyond wait their turn
TIMEOUTS = [0]  # answers math-verify ran out of time on, in this process (each logged)
UNREADABLE: set[str] = set()  # references math-verify cannot compare "0" with within VERIFY_SECONDS
READABLE: set[str] = set()  # and those it could, where an answer to them ran out of time
WORKER = r"""
import json, logging, resource, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it ends us by closing our stdin
try:  # an answer takes megabytes; 10^{10^{10}} would take gigabytes before its time is up (MemoryError: scored 0)
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
except (ValueError, OSError):  # (where the system keeps no such limit)
    pass
logging.getLogger("math_verify").setLevel(logging.ERROR)  # it warns that its timeouts are off: ours is the parent's
from math_verify import parse, verify
out, sys.stdout = sys.stdout, sys.stderr  # stdout carries answers only
try:  # (a hunt's find: math-verify 0.7 raised on a timeout of None, logged it and read every answer as nothing)
    works = bool(verify(parse("$\\frac{1}{2}$", parsing_timeout=0), parse("0.5", parsing_timeout=0), timeout_seconds=0))
except Exception:
    works = False
print("ready" if works else "broken", file=out, flush=True)
for line in sys.stdin:
    gold, guess = json.loads(line)
    try:  # (a timeout of 0: none, in every version; ours is the parent's)
        gold, guess = parse(gold, parsing_timeout=0), parse(guess, parsing_timeout=0)
        ok = bool(gold and guess and verify(gold, guess, timeout_seconds=0))
    except Exception:
        ok = False
    print(int(ok), file=out, flush=True)
"""
START_SECONDS = 120.0  # a child's start, its imports included (a slow disk, a loaded machine)


class _Children:
    """Up to VERIFY_WORKERS children, each used by one scoring thread at a time."""

    def __init__(self):
        self.idle: list[subprocess.Popen] = []  # started children no thread is using
        self.lock, self.slots = threading.Lock(), threading.BoundedSemaphore(VERIFY_WORKERS)


_children = _Children()
os.register_at_fork(after_in_child=lambda: globals().update(_children=_Children()))  # (a fork's own: the parent's
# children, lock and slots, perhaps held by its threads at the fork, are not its to use)


def _reply(child: subprocess.Popen, seconds: float, cpu: bool = False) -> str | None:
    """The child's next line, None past `seconds` (`cpu`: of the child's CPU time, or WALL_SECONDS times as many on
    the clock) (poll, not select: a process with more than 1,024 files open, as a grader of many workers holds, has
    descriptors select cannot wait on)."""
    poller = select.poll()
    poller.register(child.stdout, select.POLLIN)
    if not cpu:
        return child.stdout.readline() if poller.poll(seconds * 1000) else None
    start, spent = time.monotonic(), _cpu_seconds(child.pid)
    while time.monotonic() - start < WALL_SECONDS * seconds:
        if poller.poll(min(250, seconds * 1000)):
            return child.stdout.readline()
        used = _cpu_seconds(child.pid)
        if used is None or spent is None:  # (no /proc: the clock's bound alone)
            if time.monotonic() - start >= seconds:
                return None
        elif used - spent >= seconds:
            return None
    return None


def _cpu_seconds(pid: int) -> float | None:
    """The CPU seconds process `pid` has used (user and system), None where /proc does not say."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    except (OSError, ValueError, IndexError):
        return None


CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _start() -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # math-verify where we found it
    child = subprocess.Popen([sys.executable, "-c", WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             env=env)
    said = (_reply(child, START_SECONDS) or "").strip()
    if said != "ready":
        _end(child)
        if said == "broken":  # (every answer would have scored 0, without a word)
            raise RuntimeError("math-verify cannot verify 1/2 = 0.5 in this environment (version "
                               f"{_version('math-verify')}): install math-verify>=0.8 (pip install -U math-verify)")
        raise RuntimeError("math-verify's worker process did not start (its error is above): check that "
                           f"`{sys.executable} -c 'import math_verify'` works")
    return child


def _end(child: subprocess.Popen) -> None:
    """A child killed, reaped and its pipes closed (left to the garbage collector, each was a ResourceWarning)."""
    child.kill()
    child.wait()
    for pipe in (child.stdin, child.stdout):
        try:
            pipe.close()
        except OSError:  # (a write buffered for a child that died: BrokenPipeError)
            pass


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "unknown"


def _balanced(text: str) -> bool:
    """Whether the braces of `text` (\\{ and \\} aside) close in order: a box around it holds it all."""
    depth = 0
    for brace in re.sub(r"\\[{}]", "", text):
        depth += {"{": 1, "}": -1}.get(brace, 0)
        if depth < 0:
            return False
    return depth == 0


def _boxed(answer: str) -> str:
    return f"\\boxed{{{answer}}}" if _balanced(answer) else f"${answer}$"


def _math_verify(gold: str, guess: str) -> bool:
    """math-verify's parse and verify of \\boxed{gold} and \\boxed{guess} in a child process, False past
    VERIFY_SECONDS. (Boxed, as NeMo RL hands it the reference: in $...$ math-verify reads what it can of an answer,
    "1.\\overline{6}" as 1; in a box, the whole answer or nothing.)"""
    if gold in UNREADABLE:
        return False
    reply = _ask(gold, guess)
    if reply is None:
        with _children.lock:
            TIMEOUTS[0] += 1
        if gold not in READABLE | UNREADABLE and _ask(gold, "0") is None:  # (the reference itself: every answer
            UNREADABLE.add(gold)  # to it would run out of time)
            log.warning("math-verify cannot compare an answer with the reference %r within %ss: its answers score 0 "
                        "from now on",
                        gold[:80], VERIFY_SECONDS)
        else:
            READABLE.add(gold)
            log.warning("math-verify ran past %ss on %r (reference %r): scored 0 (%d such answers so far)",
                        VERIFY_SECONDS, guess[:80], gold[:80], TIMEOUTS[0])
    return bool(reply) and reply.strip() == "1"


def _ask(gold: str, guess: str) -> str | None:
    """A child's reply to [gold, guess] ("1", "0"; "" where it died), None past its time (the child then ended)."""
    children = _children
    with children.slots:
        if gold in UNREADABLE:  # (found while this one waited its turn)
            return "0"
        with children.lock:
            child = children.idle.pop() if children.idle else None
        if child is None or child.poll() is not None:
            child = _start()
        reply = None
        try:
            child.stdin.write(json.dumps([_boxed(gold), _boxed(guess)]) + "\n")
            child.stdin.flush()
            reply = _reply(child, VERIFY_SECONDS, cpu=True)
        except OSError:  # it died (a crash in sympy): scored 0, and a new one starts next time
            reply = ""
        finally:  # (on any exception, Ctrl-C included, a child mid-answer is ended: it would spin on, orphaned)
            if not reply:
                _end(child)
            else:
                with children.lock:
                    children.idle.append(child)
        return reply


@atexit.register
def _stop() -> None:
    for child in _children.idle:  # end of input: each ends its loop
        child.stdin.close()
        try:
            child.wait(timeout=5)
        except subprocess.TimeoutExpired:
            child.kill()


def boxed_under_dapo(problems: list, impl: str, prompt, key: str) -> str | None:
    """A warning where math problems posed with execrl's instruction (the answer in \\boxed{}) are checked by
    dapo_math_verify, which reads only an 'Answer:' line (a hunt's find: every right boxed GSM8K answer scored 0,
    unsaid); None where none is, or where the system prompt or template asks for the line."""
    boxed = sorted({p.id.split("/")[0] for p in problems if p.kind == "math" and VERIFIER not in p.metadata
                    and not p.metadata.get("own_instructions")})
    asks_line = "answer:" in f"{prompt.system_prompt or ''} {prompt.template or ''}".lower()
    if impl != "dapo_math_verify" or not boxed or not prompt.add_instructions or asks_line:
        return None
    return (f"{', '.join(boxed)}'s prompts ask for the final answer in \\boxed{{}} (execrl's instruction), and {key}="
            "dapo_math_verify reads only an 'Answer:' line: a right boxed answer scores 0. Use hf_math_verify, or ask "
            "for the line in the system prompt or the prompt template")


@component("math_correct", scores=("math",), bounds=(0.0, 1.0))
def math_correct(sample: Sample) -> float:
    """1 when the final answer equals the reference: by default (hf_math_verify) the answer in \\boxed{}, after ####,
    or the last number or LaTeX math span (whichever ends later), compared with math-verify; with dapo_math_verify,
    DAPO's 'Answer:' line (dapo_correct)."""
    if sample.math_verdict is None:  # (the reward, the metrics and the rollouts' records each ask)
        try:
            sample.math_verdict = _math_verdict(sample)
        except (ValueError, ArithmeticError, RecursionError, MemoryError) as e:  # (an answer's text no rule here
            log.warning("math answer scored 0: reading it raised %s: %s", type(e).__name__, str(e)[:200])  # foresaw:
            sample.math_verdict = 0.0  # scored 0 and said, where it ended the training step or the eval)
    return sample.math_verdict


def _math_verdict(sample: Sample) -> float:
    if sample.problem.answer is None:
        return 0.0
    if sample.problem.metadata.get(VERIFIER) == "dapo_math_verify":
        return 1.0 if dapo_correct(sample.completion, sample.problem.answer) else 0.0
    question = "\n".join(m["content"] for m in sample.problem.messages if m["role"] == "user")
    if (letter := choice(sample.problem.answer)) is not None:  # a multiple choice: the letter chosen
        return 1.0 if stated_choice(sample.extracted.answer) == letter else 0.0
    return 1.0 if answers_match(math_answer(sample.extracted.answer), sample.problem.answer, question) else 0.0


TEXT_WRAP = re.compile(r"\\(?:text|textbf|textsc|mathrm|mathbf)\s*\{([^{}]*)\}")  # \text{(C)}: (C)
LETTER = re.compile(r"[(\[]?([A-Ea-e])[)\]]?|[(\[]([A-Ea-e])[)\]](?:\s|\\[ ,;])*(?:[\d.,+\-/^{}$%~\s]|\\[a-z]+)*")
# (C), c, [C]; (C) 12, the option's value after it: one letter, nothing more ("(A) or (C)", "C = 5": no choice)
CHOICE_STATED = re.compile(r"\b(?:[Aa]nswer|(?:correct|right|best)\s+(?:option|choice|answer))(?:\s+is\b|[*_]*:)"
                           r"[\s:*_]*(?:(?:option|choice)\s+)?(?:\(([A-Ea-e])\)|\[([A-E])\]|([A-E])\b(?![\w']))")
OTHER_CHOICE = re.compile(r"[\s*_.]*(?:,|/|;|\bor\b|\band\b)(?:\s+[a-z]+){0,2}?\s*(?:option\s+|choice\s+)?[(\[]?[A-E]"
                          r"[)\]]?(?![\w'])")  # ("(A) or (C)", "B, or maybe C": another letter after it, a hedge)


def _letter(content: str) -> str | None:
    """The one choice a box's content (or a stated answer) names, upper case; None where it names none or several."""
    plain = _bare(content)
    for _ in range(3):  # (\text{\textbf{(C)}})
        plain = TEXT_WRAP.sub(r"\1", plain)
    m = LETTER.fullmatch(plain.strip().rstrip("."))
    return (m[1] or m[2]).upper() if m else None


def choice(answer: str | None) -> str | None:
    """The letter of a multiple-choice reference ("\\text{(C)}", "(C)", "C"; MATH's AMC problems), else None."""
    if answer is None:
        return None
    letter = _letter(answer)
    plain = TEXT_WRAP.sub(r"\1", _bare(answer)).strip()
    return letter if letter and plain[:1] != plain[:1].lower() or plain[:1] in "([" else None


def stated_choice(text: str) -> str | None:
    """The letter a completion chose: its last box's (one letter, or "(C) 12"), else its last "the answer is (C)",
    "Answer: C", "the correct option is (C)" not followed by another letter ("(A) or (C)"), else its final answer's
    ("is $\\textbf{(C)}$"); read to its own turn's
    end (own_turn). None: no one letter chosen (math-verify read no letter: every right choice scored 0)."""
    text = after_reasoning(own_turn(text))
    boxed = last_boxed(text)
    if boxed is not None:
        return _letter(boxed)
    stated = collections.deque(CHOICE_STATED.finditer(text), maxlen=1)
    if stated:
        return None if OTHER_CHOICE.match(text, stated[0].end()) else next(g for g in stated[0].groups() if g).upper()
    answer = math_answer(text)  # ("The answer is $\\textbf{(C)}$.")
    return _letter(answer) if answer is not None else None


# DAPO's answer check (verl's math_dapo, which NeMo RL's dapo_math_verify follows): the last
# "Answer: ..." line of the response's tail, normalized as in Minerva (Lewkowycz et al. 2022,
# appendix D), must equal the normalized reference.
DAPO_TAIL = 300  # characters of the response read: the answer line is at its end
DAPO_ANSWER = re.compile(r"(?i)Answer\s*:\s*([^\n]+)")
# Minerva's normalization: (text, replacement) pairs in order, then text removed wherever it appears
MINERVA_REPLACE = [("an ", ""), ("a ", ""), (".$", "$"), ("\\$", ""), ("\\ ", ""), (" ", ""), ("mbox", "text"),
                   (",\\text{and}", ","), ("\\text{and}", ","), ("\\text{m}", "\\text{}")]
MINERVA_REMOVE = ["square", "ways", "integers", "dollars", "mph", "inches", "hours", "km", "units", "\\ldots", "sue",
                  "points", "feet", "minutes", "digits", "cents", "degrees", "cm", "gm", "pounds", "meters", "meals",
                  "edges", "students", "childrentickets", "multiples", "\\text{s}", "\\text{.}", "\\text{\ns}",
                  "\\text{}^2", "\\text{}^3", "\\text{\n}", "\\text{}", "\\mathrm{th}", "^\\circ", "^{\\circ}", "\\;",
                  ",\\!", "{,}", '"', "\\dots"]
# regex rewrites, in order: keep the first $...$ span's content, unwrap \text{} \textbf{}
# \overline{} \boxed{}, then brace TeX shorthand (\frac12 -> \frac{1}{2}, \sqrt2 -> \sqrt{2})
MINERVA_REWRITE = [(r"(.*?)(\$)(.*?)(\$)(.*)", "$\\3$"), (r"(\\text\{)(.*?)(\})", "\\2"),
                   (r"(\\textbf\{)(.*?)(\})", "\\2"), (r"(\\overline\{)(.*?)(\})", "\\2"), (r"(\\boxed\{)(.*)(\})", "\\2"),
                   (r"(frac)([^{])(.)", "frac{\\2}{\\3}"), (r"(sqrt)([^{])", "sqrt{\\2}")]
# (the first five, re.sub'd, rescan each line from every position where their opening does not close: 20 s for a
# reference of 64 KB; _rewrite gives what re.sub gives, in linear time)


def _first_dollar_span(text: str) -> str:
    """re.sub(r"(.*?)(\\$)(.*?)(\\$)(.*)", "$\\3$", text): each line holding two $ becomes its first $...$ span."""
    return "\n".join(f"${parts[1]}$" if len(parts := line.split("$", 2)) == 3 else line for line in text.split("\n"))


def _unwrap(text: str, opener: str, last: bool) -> str:
    """re.sub of (opener)(.*?)(\\}) (last=False) or (opener)(.*)(\\}) (last=True) by its content: each opener up to
    the first (last) } on its line replaced by what is between."""
    out, pos = [], 0
    while (start := text.find(opener, pos)) >= 0:
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        close = (text.rfind if last else text.find)("}", start + len(opener), end)
        if close < 0:  # (no } on the rest of the line: no later opener on it closes either)
            out.append(text[pos:end])
            pos = end
            continue
        out += [text[pos:start], text[start + len(opener):close]]
        pos = close + 1
    return "".join(out) + text[pos:]


def _rewrite(text: str) -> str:
    """MINERVA_REWRITE applied in order, as re.sub applies each."""
    text = _first_dollar_span(text)
    for opener in ("\\text{", "\\textbf{", "\\overline{"):
        text = _unwrap(text, opener, last=False)
    text = _unwrap(text, "\\boxed{", last=True)
    for pattern, repl in MINERVA_REWRITE[5:]:
        text = re.sub(pattern, repl, text)
    return text


def minerva_normal_form(answer: str) -> str:
    """An answer as Minerva compares answers: the text after the last '=', units and TeX decoration
    dropped."""
    text = answer.split("=")[-1]
    for old, new in MINERVA_REPLACE:
        text = text.replace(old, new)
    for unit in MINERVA_REMOVE:
        text = text.replace(unit, "")
    text = _rewrite(text).replace("$", "")
    if text.replace(",", "").isdigit():
        text = text.replace(",", "")
    return text.strip()


def dapo_correct(response: str, reference: str) -> bool:
    """NeMo RL's dapo_math_verify: the last 'Answer: x' in the response's last 300 characters, in
    Minerva's normal form, equals the reference's (a response without one is wrong)."""
    found = DAPO_ANSWER.findall(response[-DAPO_TAIL:])
    return bool(found) and minerva_normal_form(found[-1]) == minerva_normal_form(reference)
