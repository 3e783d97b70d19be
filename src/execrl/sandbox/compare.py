"""Output comparison, done in the grading process (expected outputs never enter the sandbox)."""

from __future__ import annotations

import math
import re
import string
from dataclasses import dataclass
from decimal import Decimal
from itertools import zip_longest

from execrl.sandbox.inside.protocol import Unhashed

# what counts as a number token in tolerance mode: plain decimal notation only (float() also takes
# "1_0", "inf", "nan", and surrounding unicode whitespace, none of which a judge would read as a
# number)
NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")  # linear: no ambiguous split
INTEGER = re.compile(r"[+-]?[0-9]+")  # an expected token written as an integer: no tolerance, an exact value
ASCII_SPACE = " \t\f\v"  # a line's trailing blanks; unicode separators such as \x1f are characters like any other
ASCII_LOWER = bytes.maketrans(string.ascii_uppercase.encode(), string.ascii_lowercase.encode())  # case_fold: YES is
# yes; a long s (ſ), the Kelvin sign or ß are not s, k or ss, as str.casefold() would have them (on the UTF-8 bytes, at
# memory speed: no byte of a multi-byte character is an ASCII letter)
TOKEN = re.compile(r"[^ \t\f\v]+")  # a token of a line in tolerance mode
WORD = re.compile(r"\S+")  # a token as str.split() makes them (any unicode whitespace between): mode "lcb"


@dataclass(frozen=True)
class CompareOptions:
    mode: str = "lines"  # "lines": line by line after stripping trailing whitespace and trailing blank lines;
    # "exact": byte for byte; "lcb": LiveCodeBench's rule, which NeMo-Gym's code_gen grader (Nemotron-RL coding) uses
    float_rel: float = 0.0  # with either tolerance > 0, tokens that both parse as numbers compare as numbers: within
    # the tolerance where the expected token is a float (a '.' or an exponent), exactly where it is
    # an integer
    float_abs: float = 0.0
    case_fold: bool = False  # ASCII letters in either case (as judges read YES / yes); other characters as written


def _trimmed(text: str | bytes) -> str | bytes:
    """Newlines as \\n, without the trailing blank lines and the last line's trailing blanks (in linear time: a
    program's 16 MB of blank lines is one rstrip, not 16 million lines). Of a text or of UTF-8 bytes alike (only ASCII
    is changed, and no other character's encoding holds an ASCII byte)."""
    cr, lf, blanks = ("\r", "\n", ASCII_SPACE) if isinstance(text, str) else (b"\r", b"\n", ASCII_SPACE.encode())
    return text.rstrip(blanks + cr + lf).replace(cr + lf, lf).replace(cr, lf)  # (the strip first: what it takes,
    # the replacing would have made blank lines)


def _lines(text: str | bytes) -> list:
    """A _trimmed text's lines, each without its trailing blanks."""
    lf, blanks = ("\n", ASCII_SPACE) if isinstance(text, str) else (b"\n", ASCII_SPACE.encode())
    return [line.rstrip(blanks) for line in text.split(lf)] if text else []


def _token_equal(a: str, b: str, opts: CompareOptions) -> bool:
    """Expected token `a`, printed token `b`."""
    if a == b:
        return True
    if not (NUMBER.fullmatch(a) and NUMBER.fullmatch(b)):
        return False
    if INTEGER.fullmatch(a):  # exact decimal values (linear in the digits): "10.0" is 10, "9.9999999" is not
        try:
            return Decimal(a) == Decimal(b)
        except ArithmeticError:  # an exponent beyond Decimal's range (1e99999999999999999999): equal to no integer
            return False
    x, y = float(a), float(b)  # a token of 400 digits is inf here: equal only to itself, compared above
    return math.isfinite(x) and math.isfinite(y) and math.isclose(x, y, rel_tol=opts.float_rel, abs_tol=opts.float_abs)


def outputs_match(expected: str, actual: bytes, opts: CompareOptions = CompareOptions()) -> bool:
    """Whether a program's output matches the expected one; the cost is linear in the output at memory speed
    before anything per token or per line (a printed line of 8 million tokens is read only as far as the expected
    line's tokens go)."""
    if opts.mode == "exact":
        return actual.decode("utf-8", errors="surrogateescape") == expected
    if opts.mode == "lcb":
        return _lcb_match(expected, actual.decode("utf-8", errors="surrogateescape"))
    if opts.case_fold:
        expected = expected.encode("utf-8", "surrogatepass").translate(ASCII_LOWER).decode("utf-8", "surrogatepass")
        actual = actual.translate(ASCII_LOWER)
    want, printed = _trimmed(expected), _trimmed(actual)  # (the program's output as bytes: decoding and rewriting its
    # 16 MB cost the grader ~40x what printing it cost the program, a hunt's find)
    if want.count("\n") != printed.count(b"\n"):  # extra or missing lines fail (no prefix matching), before any split
        return False
    if opts.float_rel <= 0 and opts.float_abs <= 0:
        try:  # (valid text: the bytes decoding compares; a text holding surrogates, escaped bytes or not: decoded)
            return _lines(want.encode("utf-8")) == _lines(printed)
        except UnicodeEncodeError:
            return _lines(want) == _lines(printed.decode("utf-8", errors="surrogateescape"))
    want, have = _lines(want), _lines(printed.decode("utf-8", errors="surrogateescape"))
    for w, h in zip(want, have):
        for a, b in zip_longest(TOKEN.finditer(w), TOKEN.finditer(h)):  # (a missing or an extra token: None)
            if a is None or b is None or not _token_equal(a.group(), b.group(), opts):
                return False
    return True


def _lcb_match(expected: str, printed: str) -> bool:
    """LiveCodeBench's stdin/stdout rule (lcb_runner's grade_stdio, as NeMo-Gym's code_gen grader runs it): both
    texts stripped, split at newlines, each line stripped; a line matches when equal, or when both split on
    whitespace into numbers that are equal as Decimals (`3.0` is `3`, `1  2` is `1 2`; `a  b` is not `a b`).
    Linear in the output: the line counts first, each line's tokens read only as far as they match."""
    want, have = expected.strip(), printed.strip()
    if want.count("\n") != have.count("\n"):
        return False
    for w, h in zip(want.split("\n"), have.split("\n")):
        w, h = w.strip(), h.strip()
        if w == h:
            continue
        for a, b in zip_longest(WORD.finditer(w), WORD.finditer(h)):
            if a is None or b is None or not _decimal_equal(a.group(), b.group()):
                return False
    return True


def _decimal_equal(a: str, b: str) -> bool:
    """Whether two tokens are numbers of one value as Decimal reads them (`1_000`, `Infinity`, full-width digits
    too, as in lcb_runner); a token that is not one (`sNaN` and an exponent past Decimal's range included): no."""
    try:
        return Decimal(a) == Decimal(b)
    except ArithmeticError:  # (InvalidOperation: not a number, or a signaling NaN compared)
        return False


def values_match(expected, actual, float_rel: float = 1e-9, float_abs: float = 1e-9) -> bool:
    """Call-based results: tuples equal lists (JSON has no tuple). The tolerance applies where the
    expected value is a float (1e-9 absolute as well: an expected 0.0 against `0.1 + 0.2 - 0.3`'s
    5.6e-17, which no relative tolerance passes); an expected int is matched exactly (6.0 is 6,
    5.999999999999999 is not). A program's sets and dicts come as Unhashed, matched against the
    expected ones without hashing into a table of the program's values."""
    if isinstance(expected, (list, tuple)) and isinstance(actual, (list, tuple)):
        return len(expected) == len(actual) and all(values_match(e, a, float_rel, float_abs) for e, a in zip(expected, actual))
    if isinstance(actual, Unhashed):
        return _unhashed_match(expected, actual, float_rel, float_abs)
    if isinstance(expected, dict) and isinstance(actual, dict):
        return expected.keys() == actual.keys() and all(values_match(expected[k], actual[k], float_rel, float_abs) for k in expected)
    if type(expected) is int and type(actual) is float:
        return actual == expected  # exact, as Python compares an int with a float
    if type(expected) is float:
        if type(actual) not in (int, float):
            return False  # bools are not numbers here
        try:
            return math.isclose(expected, actual, rel_tol=float_rel, abs_tol=float_abs)
        except OverflowError:  # an int beyond float range: close to no float
            return False
    return type(expected) is type(actual) and expected == actual


def _unhashed_match(expected, actual: Unhashed, float_rel: float, float_abs: float) -> bool:
    """Each of the program's items (a dict's keys) found in the expected set or dict, each expected
    one matched once: lookups of the program's values in a table of the expected values only, linear
    in the items."""
    if type(expected).__name__ != actual.kind or len(expected) != len(actual.items):
        return False
    index = {k: i for i, k in enumerate(expected)}
    matched = bytearray(len(index))
    for item in actual.items:
        key = item[0] if actual.kind == "dict" else item
        try:
            i = index.get(key)
        except TypeError:  # an unhashable key: equal to no expected one
            return False
        if i is None or matched[i]:
            return False
        matched[i] = 1
        if actual.kind == "dict" and not values_match(expected[key], item[1], float_rel, float_abs):
            return False
    return True
