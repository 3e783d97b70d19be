"""Any JSONL/JSON/parquet file, with a field mapping: `fields: {prompt: question, tests: tests,
answer: answer, id: id}`. A row with tests is a code problem, a row with an answer a math problem;
the prompt may be a string or messages. A row may hold its own guided-decoding constraint (field
`guided_decoding`: {regex | json_schema | grammar: value}, as policy.generation.guided_decoding):
its completions keep to it, in training and in `execrl eval`."""

from __future__ import annotations

import decimal
import functools
import json
import math
import re

from execrl.sandbox import LANGUAGES, TestSpecError, language_named, parse_tests, tests_refused
from execrl.tasks.problem import DatasetError, Problem, chat_messages, digits, id_text, missing, read_rows
from execrl.tasks.registry import register

DEFAULT_FIELDS = {"prompt": "prompt", "tests": "tests", "answer": "answer", "id": "id", "language": "language",
                  "guided_decoding": "guided_decoding"}


@register("jsonl", data_dir="", splits=())
def load(path, split, report, fields: dict | None = None, **_):
    if path is None or not path.is_file():
        raise DatasetError("the jsonl dataset needs a file (JSONL, JSON list or parquet): execrl train "
                           "data.train.path=FILE, execrl eval --data-path FILE")
    unknown = set(fields or {}) - set(DEFAULT_FIELDS)
    if unknown:
        raise DatasetError(f"unknown field mapping keys {sorted(unknown)}: use {sorted(DEFAULT_FIELDS)}")
    f = {**DEFAULT_FIELDS, **(fields or {})}
    chosen = {"tests", "answer"} & set(fields or {})  # (a mapping that names either: the rows' kind is the user's)
    problems, rows, unread = [], read_rows(path), {}
    if rows and all(isinstance(r, dict) and chat_messages(r.get(f["prompt"])) is None for r in rows):
        raise DatasetError(no_prompt_field(path, rows[0], f["prompt"]))
    for i, row in enumerate(rows):
        rid = i if missing(row.get(f["id"])) else row[f["id"]]  # (an id of null or NaN is none: every one was "None")
        messages = chat_messages(row.get(f["prompt"]))
        if messages is None:
            report.skip(rid, f"no prompt in field {f['prompt']!r} (a string, or messages with string role and content (or text parts), one of them the user's)")
            continue
        if messages[-1]["role"] == "assistant":  # (a hunt's find: NuminaMath's messages end with the solution)
            report.skip(rid, f"the messages in {f['prompt']!r} end with the assistant's (the reference answer, in the "
                             "prompt?): map the prompt to the question's field (fields={prompt: <field>})")
            continue
        tested = not absent(row.get(f["tests"]))
        if not tested and row.get(f["tests"]) is not None and chosen == {"tests"}:  # (the mapping says: code rows;
            report.skip(rid, f"no tests in {f['tests']!r}")  # a review's find: such a row was read by its answer,
            continue  # as math whose reference was code)
        language = language_named(row.get(f["language"])) if tested else "python"  # (a math row's "en" is no
        if language is None:  # program's language: every such row was skipped)
            report.skip(rid, f"a language the sandbox does not run (it runs {', '.join(sorted(LANGUAGES))})")
            continue
        metadata = {}
        if row.get(f["guided_decoding"]) is not None:
            try:
                metadata["guided_decoding"] = row_constraint(row[f["guided_decoding"]])
            except ValueError as e:  # (execrl.guided.ConstraintError)
                report.skip(rid, f"unusable {f['guided_decoding']} ({str(e).splitlines()[0]})")
                continue
        if tested:
            try:
                spec = parse_tests(tests_value(row, f["tests"]))
            except TestSpecError as e:
                report.skip(rid, f"unusable tests ({e.reason})")
                continue
            if refused := tests_refused(language, spec):  # (one such row stopped a whole eval, mid-grading)
                report.skip(rid, refused)
                continue
            problems.append(Problem(id_text(rid), messages, "code", tests=spec, language=language,
                                    metadata=metadata))
        elif isinstance(row.get(f["answer"]), str) and not row[f["answer"]].strip():  # (nothing can equal it)
            report.skip(rid, f"an empty {f['answer']!r}")
        elif row.get(f["answer"]) is not None and not answer_text(row[f["answer"]]):  # (true read "True", a list
            report.skip(rid, f"{f['answer']!r} is {answer_kind(row[f['answer']])}, not text or a number")  # its
        elif row.get(f["answer"]) is not None:  # Python repr: neither is how a model writes an answer)
            if not chosen and (tests := unread_tests(row, f["tests"])):
                unread.setdefault(tests, rid)
            problems.append(Problem(id_text(rid), messages, "math", answer=answer_text(row[f["answer"]]),
                                    metadata=metadata))
        else:
            tests = unread_tests(row, f["tests"])
            report.skip(rid, f"neither {f['tests']!r} nor {f['answer']!r}" + (
                " (HumanEval's rows: dataset_name humaneval)" if {"prompt", "test", "entry_point"} <= row.keys() else
                " (a verl row's answer is in reward_model.ground_truth: DAPO-Math-17k's rows, dataset_name "
                "DAPOMath17K)" if isinstance(row.get("reward_model"), dict) else
                f" (its tests are in {tests!r}, not read: fields={{tests: {tests}}})" if tests else ""))
    if unread:
        (tests, rid), = list(unread.items())[:1]
        raise DatasetError(f"{path}: rows read as math problems (an answer in {f['answer']!r}) hold tests in field "
                           f"{tests!r}, which is not read (row {rid} the first): to grade their code against them, map "
                           f"it: fields={{tests: {tests}}} (execrl train: data.train.options.fields=...; execrl eval: "
                           f"--data-option 'fields=...'; the tests' forms: docs/getting-started.md); to train on the answers as math, "
                           f"name the answer's field: fields={{answer: {f['answer']}}}")
    return problems


def absent(tests) -> bool:
    """Whether a row's tests value is an export's null (the row is then read by its answer): null, a JSON column's
    "" or "null" (parquet, a datasets export), a struct column's object of nulls. An empty list or object is a code
    row without tests, skipped as such (read by its answer it was math whose reference was code: a review's find)."""
    if isinstance(tests, str):
        return tests.strip() in ("", "null")
    if isinstance(tests, dict):
        return bool(tests) and all(v is None for v in tests.values())
    return tests is None


ASSERT = re.compile(r"\s*assert\b")  # an assert statement (not assert_equal(...): a program could define it)


def tests_value(row: dict, field: str):
    """A row's tests as parse_tests reads them, with four datasets' own forms read as theirs: a list of assert
    statements (MBPP's test_list) as asserts, a check function's source with the row's entry_point (HumanEval's
    test) as a check, CodeContests' {input, output} lists and LiveCodeBench's stdin test cases as stdin tests. A list
    given as a JSON string (an export's, LiveCodeBench's) is read as its list here; any other value is left to
    parse_tests as it is."""
    tests = row[field]
    if isinstance(tests, str) and tests.lstrip().startswith("["):
        try:
            tests = json.loads(tests)
        except (ValueError, RecursionError):
            return row[field]
    if isinstance(tests, list) and tests and all(isinstance(t, str) and ASSERT.match(t) for t in tests):
        return {"asserts": tests}
    if isinstance(tests, str) and "def check" in tests and isinstance(row.get("entry_point"), str):
        return {"check": tests, "entry_point": row["entry_point"]}
    if isinstance(tests, dict) and {"input", "output"} == set(tests) - {"is_valid"}:  # CodeContests' public_tests
        return {"inputs": tests["input"], "outputs": tests["output"]}
    if isinstance(tests, list) and tests and all(isinstance(t, dict) and t.get("testtype") == "stdin" for t in tests):
        return {"inputs": [t.get("input") for t in tests], "outputs": [t.get("output") for t in tests],
                "compare": {"mode": "lcb"}}  # (LiveCodeBench's stdin test cases, compared by its rule)
    return row[field]


TEST_FIELDS = ("tests", "test_list", "test_cases", "testcases", "input_output", "unit_tests", "public_tests",
               "private_tests", "hidden_tests", "public_test_cases", "private_test_cases", "test",
               "test_code")  # where datasets keep tests (MBPP, APPS, LiveCodeBench, ...)


def unread_tests(row: dict, field: str) -> str | None:
    """A field other than `field` (the one read) where the row holds tests by its name, or None."""
    return next((k for k in TEST_FIELDS if k != field and row.get(k) not in (None, "", [], {})), None)


PROMPT_FIELDS = ("question", "problem", "prompt", "input", "instruction", "query", "messages")
ANSWER_FIELDS = ("expected_answer", "answer", "solution", "target", "final_answer")


def no_prompt_field(path, row: dict, field: str) -> str:
    """The error where no row has a prompt in `field`: the rows' fields, and a mapping that reads them."""
    keys = [k for k in row if isinstance(k, str)]
    prompt = next((k for k in PROMPT_FIELDS if k in keys and chat_messages(row[k]) is not None), None)
    answer = next((k for k in ANSWER_FIELDS if k in keys), None)
    example = "{" + ", ".join(f"{k}: {v}" for k, v in (("prompt", prompt), ("answer", answer)) if v) + "}"
    if "responses_create_params" in keys and "verifier_metadata" in keys and prompt is None:
        return (f"{path}: its rows are NeMo-Gym's (responses_create_params, verifier_metadata), which the nemotron_code "
                f"dataset reads: data.train.dataset_name=nemotron_code data.train.path={path} (execrl eval: --dataset "
                f"nemotron_code --data-path {path})")
    return (f"{path}: no row has a prompt in field {field!r}; its rows' fields are {keys[:12]}"
            f"{' ...' if len(keys) > 12 else ''}. Name them with the loader's fields option (execrl train: "
            f"data.train.options.fields={example if prompt else '{prompt: <field>}'}; execrl eval: --data-option "
            f"'fields={example if prompt else '{prompt: <field>}'}')")


def row_constraint(value) -> tuple[str, object]:
    """A row's guided_decoding ({kind: value}, exactly one of execrl.guided.KINDS) as (kind, value);
    ConstraintError, saying why, if it is malformed or does not compile."""
    from execrl.guided import KINDS, ConstraintError  # (torch: only for files that use it)

    if not isinstance(value, dict) or len(value) != 1 or next(iter(value)) not in KINDS:
        raise ConstraintError(f"give exactly one of {', '.join(KINDS)}, e.g. {{\"regex\": \"(yes|no)\"}}")
    kind, given = next(iter(value.items()))
    if not isinstance(given, str) and not (kind == "json_schema" and isinstance(given, dict)):
        raise ConstraintError(f"{kind} is {'text or an object' if kind == 'json_schema' else 'text'}")
    _compiles(kind, given if isinstance(given, str) else json.dumps(given))  # (keys in order: a schema's grammar)
    return kind, given


@functools.lru_cache(maxsize=256)
def _compiles(kind: str, text: str) -> None:
    """The constraint compiles and admits some text (an empty character class compiled, then stopped the run at
    the row's first sampling), once per distinct constraint (rows often share one)."""
    from execrl.guided.constraints import admits_text

    admits_text(kind, text)


@register("ResponseDataset", data_dir="", splits=())
def load_responses(path, split, report, input_key: str | None = None, output_key: str | None = None, **_):
    """NeMo RL's ResponseDataset: a local file whose rows hold the problem under input_key (default
    "input") and the answer under output_key (default "output")."""
    if path is None or not path.is_file():
        raise DatasetError("NeMo RL's ResponseDataset reads a local file here: set data.train.data_path (or "
                           "data.train.path) to a JSONL, JSON list or parquet file")
    return load(path, split, report, fields={"prompt": input_key or "input", "answer": output_key or "output"})


def answer_kind(value) -> str:
    """What a value that is no answer is, in words: "a bool", or "nan" (a float that is no number: a NaN or an
    infinity, where "a float, not text or a number" read as a contradiction)."""
    return repr(value) if isinstance(value, float) else f"a {type(value).__name__}"


def answer_text(value) -> str | None:
    """A row's answer as text: a string, or a finite number as JSON writes it, in positional notation (a hunt's find:
    1e20 written "1e+20" was read by math-verify as e + 20, and "10^{20}" scored wrong); None for anything else."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return digits(value)
    if isinstance(value, float) and math.isfinite(value):
        text = repr(value)
        return text if "e" not in text else format(decimal.Decimal(text), "f")
    return None
