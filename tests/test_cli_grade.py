"""`execrl grade` as a user runs it."""

import json
import subprocess
import sys


def run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "execrl.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def test_grade_writes_one_row_per_input_and_reports_bad_rows(tmp_path):
    rows = [
        {"id": "ok", "code": "print(int(input()) * 2)", "tests": {"inputs": ["2\n"], "outputs": ["4\n"]}},
        {"id": "wrong", "code": "print(0)", "tests": {"inputs": ["2\n", "3\n"], "outputs": ["4\n", "0\n"]}},
        {"id": "slow", "code": "while True: pass", "tests": {"inputs": [""], "outputs": ["1"]}, "timeout_s": 0.5},
        {"id": "cpp", "language": "cpp", "code": "#include <cstdio>\nint main(){puts(\"hi\");}", "tests": {"inputs": [""], "outputs": ["hi"]}},
        {"id": "no-tests", "code": "print(1)"},
        {"id": "empty", "code": "print(1)", "tests": {"inputs": [], "outputs": []}},
    ]
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in rows) + "\n{not json\n")
    out = tmp_path / "out.jsonl"
    proc = run("grade", str(src), "--out", str(out), "--workers", "2")
    assert proc.returncode == 0, proc.stderr
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert [g["id"] for g in got] == ["ok", "wrong", "slow", "cpp", "no-tests", "empty", 7]
    assert got[0] == {"id": "ok", "verdict": "pass", "passed": 1, "total": 1, "tests": ["pass"]}
    assert got[1]["verdict"] == "fail" and got[1]["tests"] == ["fail", "pass"]
    assert got[2]["verdict"] == "timeout" and got[3]["verdict"] == "pass"
    assert "line 5" in got[4]["error"] and "tests" in got[4]["error"]
    assert "line 6" in got[5]["error"] and "empty" in got[5]["error"]
    assert "line 7" in got[6]["error"] and "not valid JSON" in got[6]["error"]
    assert all("verdict" not in g for g in got[4:])  # bad rows are reported, never graded
    assert "invalid row" in proc.stdout and "pass" in proc.stdout  # the summary table


def test_grade_on_a_missing_file_says_so(tmp_path):
    proc = run("grade", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "o.jsonl"))
    assert proc.returncode == 2 and "no such file" in proc.stderr


def test_malformed_rows_are_errors_of_their_own_line_and_the_rest_grade(tmp_path):
    ok = {"code": "print(int(input()) * 2)", "tests": {"inputs": ["2\n"], "outputs": ["4\n"]}}
    lines = [
        json.dumps({"id": "first", **ok}).encode(),
        b'{"id": "latin1", "code": "print(\xe9)", "tests": {"inputs": [""], "outputs": ["1"]}}',  # not UTF-8
        b"[" * 100_000 + b"]" * 100_000,
        json.dumps({"id": "false-language", "language": False, **ok}).encode(),  # (null: Python, as in training)
        json.dumps({"id": "inf-memory", "memory_mb": float("inf"), **ok}).encode(),  # json writes Infinity
        json.dumps({"id": "huge-timeout", "timeout_s": 1e300, **ok}).encode(),
        json.dumps({"id": "string-timeout", "timeout_s": "5", **ok}).encode(),
        json.dumps({"id": "bool-memory", "memory_mb": True, **ok}).encode(),
        json.dumps({"id": "deep-args", "code": "def f(x): return 1",
                    "tests": {"fn_name": "f", "inputs": ["[" * 3000 + "]" * 3000], "outputs": ["1"]}}).encode(),
        json.dumps({"id": "cpp-asserts", "language": "cpp", "code": "int main(){}",
                    "tests": {"asserts": ["assert f(1) == 1"]}}).encode(),
        json.dumps({"id": "last", **ok}).encode(),
    ]
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"\n".join(lines) + b"\n")
    out = tmp_path / "out.jsonl"
    proc = run("grade", str(src), "--out", str(out), "--workers", "2")
    assert proc.returncode == 0, proc.stderr
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(got) == len(lines)
    assert got[0]["verdict"] == "pass" and got[-1]["verdict"] == "pass"
    errors = [g.get("error", "") for g in got[1:-1]]
    assert all(e.startswith(f"line {n}:") for n, e in enumerate(errors, 2)), errors
    assert "UTF-8" in errors[0] and "nested" in errors[1] and "language" in errors[2]
    assert "memory_mb" in errors[3] and "timeout_s" in errors[4] and "timeout_s" in errors[5]
    assert "memory_mb" in errors[6] and "nested" in errors[7] and "stdin/stdout" in errors[8]


def test_nothing_a_row_holds_stops_the_file(tmp_path):
    """Markup-like text in any field a message quotes, a huge integer, a huge program: each its own row's error."""
    ok = {"code": "print(int(input()) * 2)", "tests": {"inputs": ["2\n"], "outputs": ["4\n"]}}
    bad = [
        {**ok, "language": "[/]"},
        {**ok, "language": "[bold red]x[/bold red] [link=file:///etc/passwd]y[/link]"},
        {**ok, "tests": {"inputs": ["2\n"], "outputs": ["4\n"], "[/]": 1}},
        {"code": "def f(x): return x", "tests": {"fn_name": "[/]", "inputs": ["1"], "outputs": ["1"]}},
        {**ok, "tests": {"inputs": ["2\n"], "outputs": ["4\n"], "compare": {"[/]": 1, "float_rel": 0}}},
        {"code": "def f(x): return x", "tests": {"fn_name": "f", "inputs": ["1"], "outputs": ["7" * 1_000_000]}},
        {"code": "print(4)\n" + "#" * (17 << 20), "tests": ok["tests"]},
    ]
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in [ok, *bad, ok]) + "\n")
    out = tmp_path / "out.jsonl"
    proc = run("grade", str(src), "--out", str(out), "--workers", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert got[0]["verdict"] == "pass" and got[-1]["verdict"] == "pass"
    errors = [g.get("error", "") for g in got[1:-1]]
    assert all(e.startswith(f"line {n}:") for n, e in enumerate(errors, 2)), errors
    assert "[/]" in errors[0] and "[link=file:///etc/passwd]" in proc.stderr and "[/]" in errors[2]
    assert "digits" in errors[5] and "larger than" in errors[6]


def test_a_languages_file_that_cannot_be_used_is_one_line(tmp_path):
    (tmp_path / "in.jsonl").write_text(json.dumps({"id": "a", "code": "print(1)",
                                                   "tests": {"inputs": ["\n"], "outputs": ["1\n"]}}) + "\n")
    for text, said in [(None, "No such file"), ("q: {file: main.q}\n", "needs 'file'"),
                       ("q: {file: main.q, run: 'q x'}\n", "a command as a list"), ("q: [\n", "not YAML")]:
        if text is not None:
            (tmp_path / "langs.yaml").write_text(text)
        proc = run("grade", *map(str, (tmp_path / "in.jsonl", "--out", tmp_path / "out.jsonl", "--languages",
                                       tmp_path / "langs.yaml")))
        assert proc.returncode == 2 and said in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1


def test_a_file_saved_with_a_bom_grades_its_first_row(tmp_path):
    """The loaders read a BOM-led file; `execrl grade` called its first row "Unexpected UTF-8 BOM"."""
    from execrl.grade import read_rows

    row = {"id": "ok", "code": "print(1)", "tests": {"inputs": [""], "outputs": ["1\n"]}}
    (tmp_path / "in.jsonl").write_text("\ufeff" + json.dumps(row) + "\n", encoding="utf-8")
    assert read_rows(str(tmp_path / "in.jsonl")) == [(1, row, None)]


def test_a_nemo_gym_rollout_row_is_told_how_to_become_a_grade_row():
    """NeMo-Gym's rollouts hold the extracted program but not the tests: the row's error says where they are."""
    import pytest

    from execrl.grade import prepare
    from execrl.sandbox import Limits, TestSpecError

    with pytest.raises(TestSpecError, match=r"looks like a NeMo-Gym rollout \(extracted_model_code\).*"
                       r"verifier_metadata.unit_tests, plus compare: \{mode: lcb\}"):
        prepare({"extracted_model_code": "print(1)", "reward": 0.0}, Limits())
    with pytest.raises(TestSpecError, match=r"^'code' must be a string holding the program$"):
        prepare({"tests": []}, Limits())


def test_a_row_may_not_ask_for_more_memory_than_the_machine_has():
    """A row could ask for up to 1 TiB (memory_mb 1048576): its program's limit was then no limit on this host."""
    import os

    import pytest

    from execrl.grade import prepare
    from execrl.sandbox import Limits, TestSpecError

    machine = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") >> 20
    row = {"code": "print(1)", "tests": {"inputs": [""], "outputs": ["1"]}}
    assert prepare({**row, "memory_mb": 2048}, Limits())[3].memory_mb == 2048
    with pytest.raises(TestSpecError, match=f"memory_mb must be a number from 16 to {machine}"):
        prepare({**row, "memory_mb": machine + 1}, Limits())


def test_a_file_of_which_no_row_can_be_graded_fails_and_keeps_each_rows_error(tmp_path):
    """(A hunt's find) every row invalid exited 0: a pipeline that grades a file saw success."""
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text('{"a": 1}\n{"code": 5, "tests": {}}\n')
    proc = run("grade", str(src), "--out", str(out))
    assert proc.returncode == 2 and "no row of" in proc.stderr and "could be graded (2 invalid" in proc.stderr
    assert [json.loads(line)["error"].split(":")[0] for line in out.read_text().splitlines()] == ["line 1", "line 2"]


def test_ctrl_c_keeps_what_was_graded_and_marks_the_rest(tmp_path):
    """(A hunt's find) Ctrl-C while grading: a traceback, and no results file: every graded row was lost. Now the
    running programs' sandboxes stop, the file holds each finished row and marks the rest, and the exit is 130."""
    import signal
    import time

    fast = {"code": "print(input())", "tests": {"inputs": ["1\n"], "outputs": ["1\n"]}}
    slow = {"code": "import time; time.sleep(60)", "tests": {"inputs": [""], "outputs": ["1\n"]}}
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps({**r, "id": i}) + "\n" for i, r in enumerate([fast] * 2 + [slow] * 3)))
    script = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler)\n"  # (as a terminal's)
              "from execrl.cli import main; sys.argv = ['execrl', *sys.argv[1:]]; sys.exit(main())")
    proc = subprocess.Popen([sys.executable, "-c", script, "grade", str(src), "--out", str(out), "--workers", "2",
                             "--timeout", "90"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(20)  # (the sandboxes started, the two quick rows graded, two minute-long programs running)
    start = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and time.monotonic() - start < 20, err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r.get("verdict") or r["error"] for r in rows] == ["pass"] * 2 + ["interrupted: not graded"] * 3


def test_a_directory_given_for_the_rows_is_named_as_one(tmp_path):
    proc = run("grade", str(tmp_path), "--out", str(tmp_path / "o.jsonl"))
    assert proc.returncode == 2 and "is a directory: name the JSONL file of rows in it" in proc.stderr


def test_rows_that_prove_nothing_are_said_and_limits_no_program_meets_refused(tmp_path):
    """(Left out before, a careless user's inputs) a row whose tests expect no output passed an empty program without
    a word; a float_rel of 1 matched 0 with every number; a 1 ms limit timed every program out, said nowhere."""
    double = {"code": "print(int(input()) * 2)", "tests": {"inputs": ["3\n"], "outputs": ["6\n"]}}
    rows = [{"id": "ok", **double},
            {"id": "vacuous", "code": "pass", "tests": {"inputs": ["3\n", "4\n"], "outputs": ["", "\n"]}},
            {"id": "lenient", "code": "print(0)", "tests": {"inputs": ["3\n"], "outputs": ["6\n"],
                                                            "compare": {"float_rel": 1}}},
            {"id": "instant", "timeout_s": 0.001, **double}]
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = run("grade", str(src), "--out", str(out), "--workers", "2")
    assert proc.returncode == 0, proc.stderr
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert got[0]["verdict"] == "pass" and got[1]["verdict"] == "pass"
    assert "1 row expects no output or null from every test (line 2)" in " ".join(proc.stderr.split())
    assert "float_rel must be below 1" in got[2]["error"] and "timeout_s must be a number from 0.01" in got[3]["error"]
    proc = run("grade", str(src), "--out", str(out), "--timeout", "0.001")
    assert proc.returncode == 2 and "--timeout: must be >= 0.01" in proc.stderr
    proc = run("grade", str(src), "--out", str(out), "--timeout", "inf")
    assert proc.returncode == 2 and "--timeout: must be <= 3600, got inf" in proc.stderr
    spin = tmp_path / "spin.jsonl"
    spin.write_text("".join(json.dumps({"code": "while True: pass", "tests": {"inputs": [""], "outputs": ["1"]},
                                        "timeout_s": 0.05}) + "\n" for _ in range(2)))
    proc = run("grade", str(spin), "--out", str(out), "--workers", "2")
    assert "every program ran out of time (limits: 0.05 s" in " ".join(proc.stderr.split())
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(g["timeouts"][0]["test"] == 0 and g["timeouts"][0]["cpu_s"] > 0.02 for g in got)  # (out of CPU)
    sleep = tmp_path / "sleep.jsonl"  # (out of time waiting: said, with the CPU and the clock it used)
    sleep.write_text(json.dumps({"code": "import time; time.sleep(9)", "tests": {"inputs": [""], "outputs": ["1"]},
                                 "timeout_s": 0.2}) + "\n")
    proc = run("grade", str(sleep), "--out", str(out), "--workers", "1")
    (got,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert got["timeouts"][0]["cpu_s"] < 0.1 and got["timeouts"][0]["wall_s"] >= 1.2
    assert "1 program timed out on the clock having used under half its CPU limit (line 1;" in " ".join(
        proc.stderr.split())


def test_the_command_lines_least_timeout_is_the_sandboxes():
    from execrl import cli
    from execrl.config.schema import CodeEnvConfig
    from execrl.sandbox.grader import MIN_TIMEOUT_S

    assert cli.MIN_TIMEOUT_S == MIN_TIMEOUT_S == CodeEnvConfig.model_fields["timeout_s"].metadata[0].ge
