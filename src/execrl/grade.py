"""`execrl grade IN.jsonl --out OUT.jsonl`: grade a file of programs, with a progress bar and a
summary."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from execrl.console import shown
from execrl.sandbox import (
    Grader,
    Limits,
    SandboxUnusable,
    TestSpecError,
    Verdict,
    get_language,
    load_languages,
    parse_tests,
    tests_refused,
)
from execrl.sandbox.grader import MIN_TIMEOUT_S, program_too_large
from execrl.sandbox.isolation import SandboxSetting
from execrl.sandbox.spec import expects_nothing
from execrl.writable import same_file, unwritable

err = Console(stderr=True, soft_wrap=True)


def say(label: str, style: str, message: str) -> None:
    """One line on stderr: a coloured label, then the message as plain text, never markup (rows and
    paths write it)."""
    err.print(Text.assemble((label, style), " ", shown(message)))


class UnusableInput(Exception):
    """The input file as a whole cannot be graded (missing, unreadable, empty)."""


def read_rows(path: str) -> list[tuple[int, dict | None, str | None]]:
    """(line number, row, error) for each non-blank line; a bad row (not UTF-8, not JSON, nested
    past reason) has row None and an error naming the line, and the others are graded."""
    p = Path(path)
    if path != "-" and p.is_dir():
        raise UnusableInput(f"{path} is a directory: name the JSONL file of rows in it")
    if path != "-" and not p.is_file():
        raise UnusableInput(f"{path}: no such file")
    try:
        # (less a BOM, as a Windows editor saves one: the loaders' read_rows skips it too); `-`: standard input
        data = sys.stdin.buffer.read() if path == "-" else p.read_bytes()
        lines = data.removeprefix(b"\xef\xbb\xbf").splitlines()
    except OSError as e:
        raise UnusableInput(f"{path}: cannot read it ({e})") from None
    out = []
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            out.append((n, None, f"line {n}: not UTF-8 text (byte {e.start + 1})"))
            continue
        except json.JSONDecodeError as e:
            out.append((n, None, f"line {n}: not valid JSON ({e.msg} at column {e.colno})"))
            continue
        except ValueError as e:  # e.g. an integer of more digits than Python converts
            out.append((n, None, f"line {n}: cannot read its JSON ({e})"[:300]))
            continue
        except RecursionError:
            out.append((n, None, f"line {n}: JSON nested too deeply to read"))
            continue
        out.append((n, row, None) if isinstance(row, dict) else (n, None, f"line {n}: expected a JSON object"))
    if not out:
        raise UnusableInput(f"{path}: no rows (expected JSONL: one JSON object per line)")
    return out


def _machine_mb() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") >> 20
    except (ValueError, OSError):
        return 1 << 20


LIMIT_RANGES = {"timeout_s": (MIN_TIMEOUT_S, 3600.0),  # what a row may ask for (memory: at most the machine's; a
                "memory_mb": (16, min(1 << 20, _machine_mb()))}  # row's program given more, up to 1 TiB, could take the
# host's memory)


def prepare(row: dict, base: Limits) -> tuple:
    """A grading job for one row, or TestSpecError/KeyError with a message that names the line."""
    if not isinstance(row.get("code"), str):
        if "code" not in row and "extracted_model_code" in row:  # (NeMo-Gym's rollouts hold no tests of their own)
            raise TestSpecError("'code' must be a string holding the program; this row looks like a NeMo-Gym rollout "
                                "(extracted_model_code): write grade rows {code: its extracted_model_code, tests: "
                                "{inputs, outputs} of its dataset row's verifier_metadata.unit_tests, plus compare: "
                                "{mode: lcb}, as NeMo-Gym's code_gen compares}, or train and evaluate on the dataset rows with "
                                "dataset nemotron_code")
        raise TestSpecError("'code' must be a string holding the program")
    if program_too_large(row["code"]):
        raise TestSpecError(program_too_large(row["code"]))
    if "tests" not in row:
        raise TestSpecError("no 'tests': see the test forms in `execrl.sandbox.spec`")
    spec = parse_tests(row["tests"])
    language = row.get("language")
    language = "python" if language is None or language == "" else language  # (as training's rows: language_named)
    if refused := tests_refused(language, spec):
        raise TestSpecError(refused)
    overrides = {}
    for key, (low, high) in LIMIT_RANGES.items():
        v = row.get(key)
        if v is None:
            continue
        if type(v) not in (int, float) or not low <= v <= high:  # NaN fails both comparisons
            raise TestSpecError(f"{key} must be a number from {low:g} to {high:g}, got {v!r}")
        overrides[key] = int(v) if key == "memory_mb" else float(v)
    return (row["code"], spec, language, dataclasses.replace(base, **overrides))


def run_grade(args) -> int:
    out = Path(args.out)
    if out.is_dir():
        say("error:", "red", f"--out {args.out} is a directory: name the JSONL file to write, "
                             f"e.g. {out / 'results.jsonl'}")
        return 2
    if same_file(out, args.input):  # (a symlink or a hard link too)
        say("error:", "red", f"--out {args.out} is the input file: writing the results there would overwrite it; "
            "name another file")
        return 2
    why = unwritable(out.parent) or (f"{out} cannot be written (its permissions)" if out.exists()
                                     and not os.access(out, os.W_OK) else None)
    if why:
        say("error:", "red", f"--out {args.out}: {why}: name a file in a directory you can write")
        return 2
    if args.languages:
        try:
            load_languages(args.languages)
        except ValueError as e:
            say("error:", "red", f"--languages {e}")
            return 2
    base = Limits()
    base = dataclasses.replace(base, **{k: v for k, v in (("timeout_s", args.timeout), ("memory_mb", args.memory_mb)) if v})
    try:
        rows = read_rows(args.input)
    except UnusableInput as e:
        say("error:", "red", str(e))
        return 2
    jobs, results, verdicts = [], {}, Counter()
    for n, row, problem in rows:
        if problem is None:
            try:
                jobs.append((n, prepare(row, base)))
                continue
            except (TestSpecError, KeyError) as e:
                problem = f"line {n}: {e.args[0] if isinstance(e, KeyError) and e.args else e}"
        say("skipped", "yellow", problem)
        results[n] = {"id": (row or {}).get("id", n), "error": problem}
        verdicts["invalid row"] += 1
    if not jobs:  # (a pipeline that grades a file of invalid rows gets a failure, not 0)
        _write(args.out, rows, results)
        source = "standard input" if args.input == "-" else args.input
        say("error:", "red", f"no row of {source} could be graded ({len(rows)} invalid: see the lines above); "
                             f"their errors are in {args.out}")
        return 2
    columns = [TextColumn("grading"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    languages = tuple(sorted({get_language(job[2]).name for _, job in jobs})) or ("python",)
    try:
        grader = Grader(num_workers=args.workers, limits=base, languages=languages)
    except (SandboxUnusable, SandboxSetting) as e:
        say("error:", "red", str(e))
        return 2
    err.print(grader.describe(), markup=False, highlight=False)  # (with --quiet too: how programs are confined)
    done: dict[int, object] = {}
    try:
        with grader, Progress(*columns, console=err, disable=args.quiet, transient=False) as bar:
            task = bar.add_task("grading", total=len(jobs))

            def graded(i: int, result) -> None:
                done[i] = result
                bar.advance(task)

            grader.grade_many([job for _, job in jobs], on_done=graded)
    except KeyboardInterrupt:  # (what was graded is kept: a traceback threw away every result, a hunt's find)
        pass
    by_line = {n: row for n, row, _ in rows}
    for i, (n, _) in enumerate(jobs):
        if i in done:
            results[n] = {"id": by_line[n].get("id", n), **done[i].to_dict()}
            verdicts[done[i].verdict.value] += 1
        else:
            results[n] = {"id": by_line[n].get("id", n), "error": NOT_GRADED}
            verdicts[NOT_GRADED] += 1
    _write(args.out, rows, results)
    table = Table(caption=Text(shown(f"{len(rows)} rows -> {args.out}")))
    table.add_column("verdict")
    table.add_column("programs", justify="right")
    table.add_column("share", justify="right")
    for v in [*(x.value for x in Verdict), "invalid row", NOT_GRADED]:
        if verdicts[v]:
            table.add_row(v, str(verdicts[v]), f"{verdicts[v] / len(rows):.1%}")
    Console().print(table)
    for line in _doubts(jobs, done, args.workers):
        say("warning:", "yellow", line)
    if len(done) < len(jobs):
        say("interrupted:", "yellow", f"{len(done)} of {len(jobs)} programs graded, in {args.out} with the rest "
                                      f"marked {NOT_GRADED!r}")
        return 130
    return 0


NOT_GRADED = "interrupted: not graded"


def _doubts(jobs: list, done: dict, workers: int) -> list[str]:
    """What makes a file's verdicts say little of its programs: rows whose every test expects no output (an empty
    program passes them), every program out of time (a limit too low for the machine or the language)."""
    out = []
    vacuous = [n for n, job in jobs if expects_nothing(job[1])]
    if vacuous:
        said = "row expects" if len(vacuous) == 1 else "rows expect"
        out.append(f"{len(vacuous)} {said} no output or null from every "
                   f"test (line{'s' * (len(vacuous) > 1)} "
                   f"{', '.join(map(str, vacuous[:8]))}{', ...' if len(vacuous) > 8 else ''}): a program that prints "
                   "or returns nothing passes them; check the tests' outputs")
    waited = [n for i, (n, job) in enumerate(jobs) if i in done and any(
        t.verdict is Verdict.TIMEOUT and 0 < t.wall_s and t.cpu_s < job[3].timeout_s / 2 for t in done[i].tests)]
    if waited:
        one = len(waited) == 1
        out.append(f"{len(waited)} {'program' if one else 'programs'} timed out on the clock having used under half "
                   f"{'its' if one else 'their'} CPU limit (line{'' if one else 's'} {', '.join(map(str, waited[:8]))}"
                   f"{', ...' if len(waited) > 8 else ''}; each test's cpu_s and wall_s are in its row's timeouts): "
                   f"{'it' if one else 'they'} waited for input, a sleep or a lock, or processes outside the sandbox "
                   "held the CPUs; where they should pass, grade on a machine less busy"
                   + (" or with fewer --workers" if workers != 1 else ""))
    if len(done) >= 2 and all(r.verdict is Verdict.TIMEOUT for r in done.values()):
        limits = sorted({job[3].timeout_s for i, (_, job) in enumerate(jobs) if i in done})
        out.append(f"every program ran out of time (limits: {', '.join(f'{t:g}' for t in limits)} s of CPU per "
                   "test): where these programs should finish, the limit is too low for this machine or language; "
                   "raise --timeout or the rows' timeout_s")
    return out


def _write(out: str, rows: list, results: dict) -> None:
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        for n, _, _ in rows:
            f.write(json.dumps(results[n]) + "\n")
