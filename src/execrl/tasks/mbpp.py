"""MBPP: original (mbpp.jsonl) and sanitized (sanitized-mbpp.json) files, with the conventional
splits by task_id: prompt 1-10, test 11-510 (evaluation only), validation 511-600, train 601-974.
The prompt shows the problem and its first test, so the function name is known (`prompt_tests="all"`: all of the
row's test_list, as Austin et al.'s prompt and the common harnesses show them, for figures to compare with published
ones). A program is graded by the row's test_list, as MBPP's own protocol and the common harnesses grade it;
`challenge_tests=True` (data.*.options) adds the challenge_test_list that 11 test-split rows also have."""

from __future__ import annotations

from execrl.sandbox import TestSpecError, parse_tests
from execrl.tasks.problem import DatasetError, Problem, read_rows
from execrl.tasks.registry import register

SPLITS = {"prompt": range(1, 11), "test": range(11, 511), "validation": range(511, 601), "train": range(601, 975)}


SANITIZED = "sanitized-mbpp.json"


@register("mbpp", data_dir="mbpp", splits=tuple(SPLITS), eval_only=("test",), kind="code")
def load(path, split, report, variant: str | None = None, challenge_tests: bool = False, prompt_tests: str = "first",
         **_):
    """variant: which of the two files a directory's is read (None: the original); a file given with a variant must be
    that variant's (a file's rows were read as they are, and the option recorded as what ran)."""
    if variant not in (None, "original", "sanitized"):
        raise DatasetError(f"mbpp variant must be 'original' or 'sanitized', got {variant!r}")
    if prompt_tests not in ("first", "all"):
        raise DatasetError(f"mbpp prompt_tests must be 'first' (the prompt shows the first test) or 'all', got "
                           f"{prompt_tests!r}")
    if path.is_dir():
        path = path / (SANITIZED if variant == "sanitized" else "mbpp.jsonl")
    problems, rows = [], read_rows(path)
    held = next((("sanitized" if "prompt" in r and "text" not in r else "original") for r in rows
                 if isinstance(r, dict)), None)
    if variant is not None and held is not None and held != variant:
        raise DatasetError(f"mbpp variant={variant}, but {path} holds the {held} MBPP's rows ('text' is the original's "
                           "prompt field, 'prompt' the sanitized one's): give the directory that holds both files, or "
                           f"the {variant} file ({SANITIZED if variant == 'sanitized' else 'mbpp.jsonl'}), or drop "
                           "the variant option")
    for row in rows:
        task = row.get("task_id")
        if type(task) is not int:  # ("605": a row of no split, counted)
            report.skip(task, "task_id is not an integer")
            continue
        if task not in SPLITS[split]:  # (another split's; one of no split is counted: a hunt's find, a user's
            if not 1 <= task <= 974:  # MBPP-shaped rows numbered 1001 on were left out without a word)
                report.skip(task, "task_id outside MBPP's 1-974, in no split (MBPP-shaped rows of your own: "
                                  "dataset_name jsonl with fields={prompt: text, tests: test_list, id: task_id})")
            continue
        text = row.get("text") or row.get("prompt")
        asserts = row.get("test_list") or []
        if challenge_tests:  # (a string is one assert, not one per character: a review's find)
            more = row.get("challenge_test_list") or []
            if not isinstance(more, (str, list)):  # (a hunt's find: a dict added its keys as asserts)
                report.skip(task, "challenge_test_list is not a list of asserts")
                continue
            asserts = [*asserts, *([more] if isinstance(more, str) else more)] if isinstance(asserts, list) else asserts
        if not isinstance(text, str) or not text.strip() or not asserts:
            report.skip(task, "no text or no tests")
            continue
        imports = row.get("test_imports") or []
        if isinstance(imports, list) and not all(isinstance(i, str) for i in imports):  # (a hunt's find: a traceback)
            report.skip(task, "test_imports is not a list of import statements (strings)")
            continue
        setup = row.get("test_setup_code") or ("\n".join(imports) if isinstance(imports, list) else imports)
        try:  # the jsonl loader's checks: a list of strings, each a Python statement, a setup of Python
            tests = parse_tests({"asserts": asserts, "setup": setup})
        except TestSpecError as e:
            report.skip(task, f"tests: {e}")
            continue
        shown = (row.get("test_list") or asserts) if prompt_tests == "all" else asserts[:1]
        content = (f"{text}\nYour code should pass this test:\n\n{shown[0]}" if len(shown) == 1 else
                   f"{text}\nYour code should pass these tests:\n\n" + "\n".join(shown))
        problems.append(Problem(f"mbpp/{task}", [{"role": "user", "content": content}], "code",
                                tests=tests, metadata={"reference": row.get("code")}))
    return problems
