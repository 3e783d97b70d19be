"""HumanEval form (bring your own copy): `prompt` (signature + docstring), `test` (a check
function), `entry_point`. Evaluation only. A completion that does not define the entry point is
graded as a continuation of the prompt."""

from __future__ import annotations

from execrl.sandbox import CheckTests
from execrl.tasks.problem import Problem, read_rows
from execrl.tasks.registry import register


@register("humaneval", data_dir="humaneval", splits=("test",), eval_only=("*",), hub_id=None, kind="code")
def load(path, split, report, **_):
    files = sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
    problems = []
    for i, row in enumerate(r for f in files for r in read_rows(f)):
        rid = row.get("task_id", i)
        if not all(isinstance(row.get(k), str) and row[k].strip() for k in ("prompt", "test", "entry_point")):
            report.skip(rid, "needs prompt, test and entry_point")
            continue
        content = f"Complete the following Python function:\n```python\n{row['prompt'].strip()}\n```"
        problems.append(Problem(str(rid), [{"role": "user", "content": content}], "code",
                                tests=CheckTests(row["test"], row["entry_point"]),
                                metadata={"code_prefix": row["prompt"], "entry_point": row["entry_point"]}))
    return problems
