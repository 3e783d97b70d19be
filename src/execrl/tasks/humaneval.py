"""HumanEval form (bring your own copy): `prompt` (signature + docstring), `test` (a check
function), `entry_point`. Evaluation only. A completion that does not define the entry point (at column 0) is
graded as a continuation of the prompt; one that does, with the prompt's imports above it. The prompt's helpers (HumanEval/32's `poly`, /38's `encode_cyclic`) are
the tests' own: put before the check function, so that its calls to them are never a program's redefinition."""

from __future__ import annotations

import ast
import re

from execrl.sandbox import TestSpecError, parse_tests
from execrl.sandbox.spec import parse_python
from execrl.tasks.problem import Problem, data_files, id_text, read_rows
from execrl.tasks.registry import register


@register("humaneval", data_dir="humaneval", splits=("test",), eval_only=("*",), hub_id=None, kind="code")
def load(path, split, report, **_):
    files = data_files(path)
    problems = []
    for i, row in enumerate(r for f in files for r in read_rows(f)):
        rid = row.get("task_id", i)
        if not all(isinstance(row.get(k), str) and row[k].strip() for k in ("prompt", "test", "entry_point")):
            report.skip(rid, "needs prompt, test and entry_point")
            continue
        try:  # (checked as a tests row's check form: a test that does not parse or an entry point that names no
            # function scored every program 0 as its failure)
            tests = parse_tests({"check": helpers(row["prompt"], row["entry_point"]) + row["test"],
                                 "entry_point": row["entry_point"]})
        except TestSpecError as e:
            report.skip(rid, f"unusable tests ({e.reason})")
            continue
        content = f"Complete the following Python function:\n```python\n{row['prompt'].strip()}\n```"
        problems.append(Problem(id_text(rid), [{"role": "user", "content": content}], "code", tests=tests,
                                metadata={"code_prefix": row["prompt"], "entry_point": row["entry_point"]}))
    return problems


def helpers(prompt: str, entry_point: str) -> str:
    """The prompt's imports and top-level definitions other than the entry point, as source ("" where it does not
    parse: the check stands alone then)."""
    try:
        body = parse_python(prompt).body
    except (SyntaxError, ValueError, MemoryError, RecursionError):  # (nested too deeply to parse, a NUL byte)
        return ""
    kept = [node for node in body if isinstance(node, (ast.Import, ast.ImportFrom, ast.Assign))
            or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name != entry_point]
    lines = [line.encode() for line in re.split(r"(?<=\r\n)|(?<=\n)|(?<=\r)(?!\n)", prompt)]  # (as ast counts them)
    return "".join(_segment(lines, node) + "\n\n" for node in kept)


def _segment(lines: list[bytes], node: ast.AST) -> str:
    """ast.get_source_segment(source, node) on the source's lines split once (it splits the whole source again for
    each node: a prompt of 6,500 imports took 32 s, at load and for every sample); columns are UTF-8 bytes."""
    first, last = node.lineno - 1, node.end_lineno - 1
    if first == last:
        return lines[first][node.col_offset:node.end_col_offset].decode()
    return b"".join([lines[first][node.col_offset:], *lines[first + 1:last],
                     lines[last][:node.end_col_offset]]).decode()
