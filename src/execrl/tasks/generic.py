"""Any JSONL/JSON/parquet file, with a field mapping: `fields: {prompt: question, tests: tests, answer: answer, id: id}`.
A row with tests is a code problem, a row with an answer a math problem; the prompt may be a string or messages."""

from __future__ import annotations

from execrl.sandbox import TestSpecError, parse_tests
from execrl.tasks.problem import DatasetError, Problem, read_rows
from execrl.tasks.registry import register

DEFAULT_FIELDS = {"prompt": "prompt", "tests": "tests", "answer": "answer", "id": "id", "language": "language"}


@register("jsonl", data_dir="", splits=())
def load(path, split, report, fields: dict | None = None, **_):
    if path is None or not path.is_file():
        raise DatasetError("the jsonl dataset needs a file (JSONL, JSON list or parquet): execrl train "
                           "data.train.path=FILE, execrl eval --data-path FILE")
    unknown = set(fields or {}) - set(DEFAULT_FIELDS)
    if unknown:
        raise DatasetError(f"unknown field mapping keys {sorted(unknown)}: use {sorted(DEFAULT_FIELDS)}")
    f = {**DEFAULT_FIELDS, **(fields or {})}
    problems = []
    for i, row in enumerate(read_rows(path)):
        rid = row.get(f["id"], i)
        prompt = row.get(f["prompt"])
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        if not isinstance(messages, list) or not messages:
            report.skip(rid, f"no prompt in field {f['prompt']!r}")
            continue
        if row.get(f["tests"]) is not None:
            try:
                spec = parse_tests(row[f["tests"]])
            except TestSpecError as e:
                report.skip(rid, f"unusable tests ({str(e).split(':')[0]})")
                continue
            problems.append(Problem(str(rid), messages, "code", tests=spec, language=row.get(f["language"]) or "python"))
        elif row.get(f["answer"]) is not None:
            problems.append(Problem(str(rid), messages, "math", answer=str(row[f["answer"]])))
        else:
            report.skip(rid, f"neither {f['tests']!r} nor {f['answer']!r}")
    return problems


@register("ResponseDataset", data_dir="", splits=())
def load_responses(path, split, report, input_key: str | None = None, output_key: str | None = None, **_):
    """NeMo RL's ResponseDataset: a local file whose rows hold the problem under input_key (default "input") and the
    answer under output_key (default "output")."""
    if path is None or not path.is_file():
        raise DatasetError("NeMo RL's ResponseDataset reads a local file here: set data.train.data_path (or "
                           "data.train.path) to a JSONL, JSON list or parquet file")
    return load(path, split, report, fields={"prompt": input_key or "input", "answer": output_key or "output"})
