"""LeetCode contest problems (DeepSeek-Coder's benchmark): a `class Solution` stub and a test script
of asserts. Evaluation only: every split of it."""

from __future__ import annotations

from execrl.sandbox import TestSpecError
from execrl.sandbox.spec import split_test_script
from execrl.tasks.problem import Problem, data_files, id_text, read_rows
from execrl.tasks.registry import register

# what DeepSeek-Coder's harness puts above every program (Evaluation/LeetCode/human_eval/evaluation.py), as
# LeetCode's own Python has them in scope: the stubs' `List[int]` and `Optional[TreeNode]` need typing's names.
# Left out: numpy (its import in every program, where no stub uses it).
IMPORTS = """import math
import re
import sys
import copy
import datetime
import itertools
import collections
import heapq
import functools
import hashlib
import string
from typing import *
from collections import *
from functools import *
"""


@register("leetcode", data_dir="leetcode_contest", splits=("test",), eval_only=("*",), kind="code")
def load(path, split, report, **_):
    files = data_files(path)
    problems = []
    for row in (r for f in files for r in read_rows(f)):
        rid = row.get("task_id")
        if not (isinstance(row.get("prompt"), str) and row["prompt"].strip() and isinstance(row.get("test"), str)
                and row["test"].strip()):
            report.skip(rid, "no prompt or no test (strings)")
            continue
        try:
            tests = split_test_script(row["test"])
        except TestSpecError as e:
            report.skip(rid, str(e))
            continue
        content = f"Complete the following Python code:\n```python\n{row['prompt'].strip()}\n```"
        problems.append(Problem(f"leetcode/{id_text(rid)}", [{"role": "user", "content": content}], "code", tests=tests,
                                metadata={"difficulty": row["meta"].get("difficulty") if isinstance(
                                    row.get("meta"), dict) else None,
                                          "code_header": IMPORTS}))
    return problems
