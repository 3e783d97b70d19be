"""The four test forms, verdicts and output comparison, on small programs."""

import json
import os
import re

import pytest

from execrl.sandbox import TestSpecError, Verdict, parse_tests
from execrl.sandbox.compare import CompareOptions, outputs_match, values_match
from execrl.sandbox.spec import split_test_script

from .conftest import stdio

ADD = "a, b = map(int, input().split())\nprint(a + b)\n"


def test_stdio_pass_and_fail_per_test(grader):
    r = grader.grade(ADD, stdio(["1 2\n", "3 4\n", "5 5\n"], ["3\n", "8\n", "10"]))
    assert [t.verdict for t in r.tests] == [Verdict.PASS, Verdict.FAIL, Verdict.PASS]
    assert (r.verdict, r.passed, r.total) == (Verdict.FAIL, 2, 3)


def test_syntax_error_is_reported_once_for_every_test(grader):
    r = grader.grade("print(1", stdio(["", ""], ["1", "1"]))
    assert r.verdict == Verdict.SYNTAX_ERROR and [t.verdict for t in r.tests] == [Verdict.SYNTAX_ERROR] * 2
    assert "SyntaxError" in r.stderr


def test_runtime_error_is_not_a_syntax_error(grader):
    r = grader.grade("eval('1 +')", stdio([""], ["1"]))
    assert r.verdict == Verdict.RUNTIME_ERROR


def test_nonzero_exit_with_right_output_is_a_runtime_error(grader):
    r = grader.grade("print(3)\nraise SystemExit(3)", stdio([""], ["3"]))
    assert r.verdict == Verdict.RUNTIME_ERROR


def test_call_based_lines_and_list_formats(grader):
    code = "def f(xs, k):\n    return [x * k for x in xs]\n"
    lines = {"fn_name": "f", "inputs": ["[1, 2]\n3", "[]\n1"], "outputs": ["[3, 6]", "[]"]}
    assert grader.grade(code, lines).verdict == Verdict.PASS
    listed = dict(lines, inputs=["[[1, 2], 3]", "[[], 1]"], args_format="list")
    assert grader.grade(code, listed).verdict == Verdict.PASS
    wrong = dict(lines, outputs=["[3, 7]", "[]"])
    assert [t.verdict for t in grader.grade(code, wrong).tests] == [Verdict.FAIL, Verdict.PASS]


def test_a_test_script_splits_where_python_ends_its_lines(grader):
    """split_test_script cut the script with str.splitlines, which also ends a line at \\x0c, \\x1c, \\x85,
    U+2028 inside a string literal, while the ast's line numbers count \\n, \\r\\n and \\r only: each later
    test was cut in the wrong place, one became an assignment (always passing) and the last assert was dropped."""
    script = ('my_solution = Solution()\n\nassert my_solution.f("a\\x0cb") == 3\n\n'
              'test_input = { "s": "p\x0cq\u2028" }\nassert my_solution.f(**test_input) == 3\r\n'
              'assert my_solution.f("zz") == 2\n')
    spec = split_test_script(script)
    assert spec.asserts == ['my_solution = Solution()\n\nassert my_solution.f("a\\x0cb") == 3',
                            'test_input = { "s": "p\x0cq\u2028" }\nassert my_solution.f(**test_input) == 3',
                            'assert my_solution.f("zz") == 2']
    wrong = "class Solution:\n    def f(self, s):\n        return 3\n"  # f("zz") should be 2
    r = grader.grade(wrong, spec)
    assert (r.passed, r.total, r.verdict) == (2, 3, Verdict.FAIL)


def test_call_arguments_are_lines_at_newlines_only():
    """Arguments one JSON value a line were split with str.splitlines: a JSON string holding U+2028 or U+0085 (legal
    raw in JSON) was cut inside, and the row refused as 'not JSON'."""
    row = {"fn_name": "f", "inputs": [json.dumps("a\u2028b\x85", ensure_ascii=False) + "\r\n2"],
           "outputs": [json.dumps("a\u2028b\x85a\u2028b\x85", ensure_ascii=False)]}
    spec = parse_tests(row)
    assert spec.args == [["a\u2028b\x85", 2]]
    assert parse_tests(dict(row, inputs=["[1]\r2\r\n3\n"])).args == [[[1], 2, 3]]  # (old Mac line ends too)


def test_call_based_uses_solution_class_and_tuples_equal_lists(grader):
    code = "class Solution:\n    def pair(self, a):\n        return (a, a)\n"
    assert grader.grade(code, {"fn_name": "pair", "inputs": ["5"], "outputs": ["[5, 5]"]}).verdict == Verdict.PASS


def test_call_based_missing_function_is_a_runtime_error(grader):
    r = grader.grade("def g(): pass", {"fn_name": "f", "inputs": ["1"], "outputs": ["1"]})
    assert r.verdict == Verdict.RUNTIME_ERROR


def test_asserts_form_counts_each_assert(grader):
    code = "def sq(x):\n    return x * x\n"
    r = grader.grade(code, {"asserts": ["assert sq(2) == 4", "assert sq(3) == 10", "assert sq(-1) == 1"]})
    assert [t.verdict for t in r.tests] == [Verdict.PASS, Verdict.FAIL, Verdict.PASS]


def test_asserts_with_setup_constants_and_program_objects(grader):
    code = "LIMIT = 3\nclass Solution:\n    def twice(self, n):\n        return 2 * n\n"
    tests = {"setup": "import math\nsol = Solution()",
             "asserts": ["x = {'n': 4}\nassert sol.twice(**x) == 8", "assert LIMIT == 3", "assert math.isclose(sol.twice(0.5), 1.0)"]}
    assert grader.grade(code, tests).verdict == Verdict.PASS


def test_assert_entries_that_test_nothing_run_with_the_next_test(grader):
    """An entry that tests nothing ("import math", "", a comment) was refused with the whole row: MBPP-style rows
    that import in their test list, or end it with "", trained on nothing. Each runs with the next entry that tests
    something (or the last), and is no test of its own: it would pass whatever the program is."""
    code = "def f(x):\n    return x ** 0.5\n"
    rows = {("import math", "assert math.isclose(f(2), math.sqrt(2))"): [Verdict.PASS],
            ("assert f(4) == 2", ""): [Verdict.PASS], ("# basic cases", "assert f(9) == 3", "assert f(4) == 3"):
            [Verdict.PASS, Verdict.FAIL]}
    for asserts, verdicts in rows.items():
        r = grader.grade(code, {"asserts": list(asserts)})
        assert [t.verdict for t in r.tests] == verdicts, (asserts, r.tests)
    with pytest.raises(TestSpecError, match="assert nothing of the program's"):
        parse_tests({"asserts": ["import math", "", "# f(1) == 2"]})
    for asserts in (["assert f(1) == 1", "assert False"], ["assert 1 == 2", "assert f(2) == 2"]):  # (merged, it
        with pytest.raises(TestSpecError, match="is an assert of nothing of the program's"):  # failed every program)
            parse_tests({"asserts": asserts})


def test_a_check_row_testing_a_function_named_check_is_refused():
    """(Hunts' finds) entry_point 'check': the row's check replaced the program's and then tested itself, so no
    program could pass; and a row defining the tested function itself passed every program (a check's or a set-up's).
    Refused as read."""
    check = "def check(candidate):\n    assert candidate(1) == 2\n"
    assert parse_tests({"check": check, "entry_point": "double"}).entry_point == "double"
    for entry, code in (("check", check), ("double", "def double(x):\n    return 2 * x\n" + check)):
        with pytest.raises(TestSpecError, match=f"entry_point '{entry}' is a name the row's own check code binds"):
            parse_tests({"check": code, "entry_point": entry})
    # (a review's find) the assert form's: a set-up that defines the function its asserts call
    for row in ({"setup": "def f(x):\n    return x\n", "asserts": ["assert f(1) == 1", "assert f(2) == 2"]},
                {"asserts": ["def f(x):\n    return x\nassert f(1) == 1"]}):
        with pytest.raises(TestSpecError, match="the program is never called"):
            parse_tests(row)
    for row in ({"setup": "def near(a, b):\n    return abs(a - b) < 1e-9\n", "asserts": ["assert near(f(1), 1.0)"]},
                {"asserts": ["assert sum([1, 2]) == 3"]}, {"asserts": ["import math\nassert g(math.pi) > 3"]}):
        assert parse_tests(row).asserts  # (a helper beside the program's function; the program's own `sum`)


def test_tests_that_assert_nothing_are_no_tests(grader):
    """(A hunt's finds) a check of `pass` or `assert True` passed every program, and asserts entries that call the
    program but assert nothing ("f(1)", "print(f(3) == 9)") were tests of their own: credit for not crashing."""
    for check in ("def check(candidate):\n    pass\n", "def check(candidate):\n    assert True\n"):
        with pytest.raises(TestSpecError, match="holds no assert"):
            parse_tests({"check": check, "entry_point": "f"})
    with pytest.raises(TestSpecError, match="assert nothing of the program's"):
        parse_tests({"asserts": ["print(f(3) == 9)", "f(1)"]})
    assert parse_tests({"asserts": ["f(1)", "f(2)", "assert f(3) == 9"]}).asserts == ["f(1)\nf(2)\nassert f(3) == 9"]
    helpers = parse_tests({"setup": "def check(g):\n    assert g(1) == 2\n", "asserts": ["check(f)", "check(f)"]})
    assert len(helpers.asserts) == 2  # (the set-up's helper asserts: each call is a test)
    r = grader.grade("def f(x):\n    return 0\n", {"asserts": ["f(1)", "f(2)", "assert f(3) == 9"]})
    assert [t.verdict for t in r.tests] == [Verdict.FAIL]
    # (a review's finds) tests that assert through a function, an exit, or an assert under a condition still test
    for check in ("np.testing.assert_allclose(candidate(1), 2.0)", "unittest.TestCase().assertEqual(candidate(1), 2)",
                  "if candidate(1) != 2: assert False", "if candidate(1) != 2: exit(1)"):
        parse_tests({"check": f"def check(candidate):\n    {check}\n", "entry_point": "f"})
    assert len(parse_tests({"asserts": ["np.testing.assert_allclose(f(1), 2.0)", "assert f(2) == 3"]}).asserts) == 2
    assert len(parse_tests({"setup": "from helpers import check", "asserts": ["check(f(1), 2)", "check(f(2), 3)"]}
                           ).asserts) == 2


def test_asserts_program_exception_is_runtime_error(grader):
    r = grader.grade("def f(x):\n    return 1 / x\n", {"asserts": ["assert f(1) == 1", "assert f(0) == 0"]})
    assert [t.verdict for t in r.tests] == [Verdict.PASS, Verdict.RUNTIME_ERROR]


def test_check_form(grader):
    check = "def check(candidate):\n    for i in range(5):\n        assert candidate(i) == i + 1\n"
    assert grader.grade("def inc(x):\n    return x + 1", {"check": check, "entry_point": "inc"}).verdict == Verdict.PASS
    assert grader.grade("def inc(x):\n    return x + 2", {"check": check, "entry_point": "inc"}).verdict == Verdict.FAIL


def test_cpp_compiles_once_and_runs_per_test(grader):
    code = "#include <iostream>\nint main(){long long a,b; std::cin>>a>>b; std::cout<<a*b<<\"\\n\";}\n"
    r = grader.grade(code, stdio(["2 3\n", "4 5\n"], ["6\n", "21\n"]), language="cpp")
    assert [t.verdict for t in r.tests] == [Verdict.PASS, Verdict.FAIL]
    assert grader.grade("int main( {", stdio([""], ["1"]), language="cpp").verdict == Verdict.SYNTAX_ERROR


def test_a_cpp_program_with_large_initialized_arrays_compiles_and_a_stopped_compile_says_why(grader):
    """The program's 16 MB output cap also capped the compiler's files: 20 MB of initialized data (a lookup table,
    `int a[N] = {1}`) was graded syntax_error ('File size limit exceeded'); a compile stopped for time said nothing."""
    from dataclasses import replace

    code = ("#include <cstdio>\nint big[5000000] = {1, 2, 3};\nint main(){int a, b; scanf(\"%d %d\", &a, &b); "
            "big[a] += 1; printf(\"%d\\n\", a + b + big[4999999]);}\n")
    r = grader.grade(code, stdio(["1 2\n"], ["3\n"]), language="cpp")
    assert r.verdict == Verdict.PASS, r.to_dict()
    slow = replace(grader.limits, compile_timeout_s=0.05)
    r = grader.grade("#include <bits/stdc++.h>\nint main(){}\n", stdio([""], ["1"]), language="cpp", limits=slow)
    assert r.verdict == Verdict.SYNTAX_ERROR and r.tests[0].detail.startswith("the compiler was stopped: out of time")


def test_a_compile_stopped_under_gccs_driver_says_which_limit():
    """(A hunt's find) the assembler or cc1plus stopped under the driver said only the tool's own words ("internal
    compiler error: File size limit exceeded", "out of memory allocating", "virtual memory exhausted")."""
    from execrl.sandbox import Limits
    from execrl.sandbox.grader import compile_said

    lim = Limits()
    for said, why in [(b"g++: internal compiler error: File size limit exceeded signal terminated program as",
                       "over the file size its output may have (128 MB)"),
                      (b"cc1plus: out of memory allocating 2147483664 bytes", "out of memory (2048 MB)"),
                      (b"virtual memory exhausted: Cannot allocate memory", "out of memory (2048 MB)")]:
        assert compile_said({"exit": 1}, said, lim).startswith(f"the compiler was stopped: {why}\n")
    assert compile_said({"exit": 1}, b"main.cpp:1:1: error: expected ';'", lim).startswith("main.cpp:1:1")
    long = b"main.cpp:1:1: error: expected ';'\n" * 200  # (a hunt's find: the program's stderr, its last 2,000
    from execrl.sandbox.grader import _last  # characters, had lost why the compiler was stopped)

    kept = _last(compile_said({"exit": -9, "killed_for": "deadline"}, long, lim))
    assert kept.startswith("the compiler was stopped: out of time") and kept.endswith("expected ';'\n")
    plain = _last(compile_said({"exit": 1}, long, lim))  # (no limit stopped it: its last 2,000 characters)
    assert len(plain) == 2000 and "stopped" not in plain


def test_a_cpp_program_whose_static_arrays_are_over_the_memory_limit_is_a_memory_verdict(grader):
    """A binary whose loadable segments (its .bss: `static int a[N]`) are larger than the memory limit cannot be
    exec'd under RLIMIT_AS: the kernel killed it with SIGSEGV, graded runtime_error; a program that fits still runs."""
    from dataclasses import replace

    lim = replace(grader.limits, memory_mb=256)
    code = ("#include <cstdio>\nstatic int a[%d];\nint main(){int n; scanf(\"%%d\", &n); for (long i = 0; i < %d; "
            "i += 1024) a[i] = n; long s = 0; for (long i = 0; i < %d; i += 1024) s += a[i]; printf(\"%%ld\\n\", "
            "s / %d);}\n")
    r = grader.grade(code % (100_000_000, 100_000_000, 100_000_000, 97_657), stdio(["3\n", "4\n"], ["3\n", "4\n"]),
                     language="cpp", limits=lim)
    assert [t.verdict for t in r.tests] == [Verdict.MEMORY] * 2, r.to_dict()
    assert "needs 381 MB of memory to load" in r.stderr and "256 MB limit" in r.stderr
    r = grader.grade(code % (10_000_000, 10_000_000, 10_000_000, 9_766), stdio(["3\n"], ["3\n"]), language="cpp",
                     limits=lim)
    assert r.verdict == Verdict.PASS, r.to_dict()


def test_a_yaml_languages_tool_is_the_one_this_machines_path_finds(grader, tmp_path, monkeypatch):
    """(A hunt's find) a tool on the host's PATH outside /usr/local/bin, /usr/bin and /bin (/opt/x/bin, ~/.cargo/bin)
    was bound into the sandbox and then looked for on the sandbox's PATH: every program an infra_error."""
    from execrl.sandbox import LANGUAGES, load_languages

    tool = tmp_path / "opt" / "shx" / "bin" / "shx"
    tool.parent.mkdir(parents=True)
    tool.write_text('#!/bin/sh\nexec /bin/sh "$@"\n')
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tool.parent}:{os.environ['PATH']}")
    (tmp_path / "langs.yaml").write_text("shx:\n  file: main.sh\n  run: [shx, '{file}']\n")
    load_languages(str(tmp_path / "langs.yaml"))
    try:
        assert LANGUAGES["shx"].run == (str(tool), "{file}")
        r = grader.grade("read a b; echo $((a+b))", stdio(["2 3\n"], ["5\n"]), language="shx")
        assert r.verdict == Verdict.PASS, r.to_dict()
    finally:
        LANGUAGES.pop("shx")


@pytest.mark.skipif(not os.path.exists("/usr/bin/node"), reason="needs node")
def test_a_runtime_that_reserves_address_space_runs_under_a_small_memory_limit(tmp_path):
    """(A hunt's find) memory is capped as address space too, and node reserves ~600 MB up front: a right JavaScript
    program failed at the 256 MB judges use. A language's address_space_mb lifts that cap alone; what the program holds
    is still the memory limit's (60 MB x 10 at 256 MB: a memory verdict)."""
    from execrl.sandbox import LANGUAGES, Grader, Language, Limits, load_languages

    (tmp_path / "langs.yaml").write_text("js:\n  file: main.js\n  run: [node, '{file}']\n  address_space_mb: 8192\n")
    load_languages(str(tmp_path / "langs.yaml"))
    add = "const [a, b] = require('fs').readFileSync(0, 'utf8').split(' ').map(Number); console.log(a + b)"
    hog = "const a = []; for (let i = 0; i < 60; i++) a.push(Buffer.alloc(10 << 20, 1)); console.log(5)"
    try:
        with Grader(1, Limits(timeout_s=5, memory_mb=256)) as g:
            assert g.grade(add, stdio(["2 3\n"], ["5\n"]), language="js").verdict == Verdict.PASS
            assert g.grade(hog, stdio(["2 3\n"], ["5\n"]), language="js").verdict == Verdict.MEMORY
    finally:
        LANGUAGES.pop("js")
    from execrl.sandbox import SandboxUnusable

    LANGUAGES["js0"] = Language("js0", "main.js", run=("/usr/bin/node", "{file}"), hello="console.log('hello')")
    try:  # (without it, the self-test's fix named the venv)
        with pytest.raises(SandboxUnusable, match="(?s)js0 hello-world.*address_space_mb"):
            Grader(1, Limits(timeout_s=5, memory_mb=256), languages=("js0",))
    finally:
        LANGUAGES.pop("js0")
    with pytest.raises(ValueError, match="address_space_mb must be a whole number"):
        (tmp_path / "bad.yaml").write_text("js2:\n  file: main.js\n  run: [node, '{file}']\n  address_space_mb: lots\n")
        load_languages(str(tmp_path / "bad.yaml"))


def test_a_language_is_a_table_entry(grader, tmp_path):
    from execrl.sandbox import LANGUAGES, load_languages

    (tmp_path / "langs.yaml").write_text("shell:\n  file: main.sh\n  run: [sh, '{file}']\n")
    load_languages(str(tmp_path / "langs.yaml"))
    try:
        assert grader.grade("read a b; echo $((a+b))", stdio(["2 3\n"], ["5\n"]), language="shell").verdict == Verdict.PASS
    finally:
        LANGUAGES.pop("shell")


@pytest.mark.parametrize("bad, fix", [
    ({}, "unknown test form"),
    ({"inputs": ["1", "2"], "outputs": ["1"]}, "2 inputs but 1 outputs"),
    ({"inputs": [], "outputs": []}, "empty"),
    ({"asserts": ["assert ("]}, "not valid Python"),
    ({"fn_name": "f", "inputs": ["{"], "outputs": ["1"]}, "not JSON"),
    ({"check": "def check(c): pass"}, "entry_point"),
    ("not json", "not JSON"),
])
def test_bad_specs_name_the_problem(bad, fix):
    with pytest.raises(TestSpecError, match=fix):
        parse_tests(bad)


def test_compare_lines_tolerates_whitespace_but_not_missing_lines():
    assert outputs_match("1\n2\n", b"1  \r\n2\r\n\r\n\n")
    assert outputs_match("1\n2", b"1\n2\n")
    assert not outputs_match("1\n2\n", b"1\n")
    assert not outputs_match("1\n", b"1\n2\n")  # no prefix matching
    assert not outputs_match("1 2\n", b"1  2\n")  # inner whitespace counts
    exact = CompareOptions(mode="exact")
    assert outputs_match("a\n", b"a\n", exact) and not outputs_match("a\n", b"a \n", exact)


def test_lines_compared_on_the_bytes_read_as_the_decoded_text_reads():
    """(A hunt's find: decoding and rewriting a program's 16 MB cost the grader ~40x what printing it cost the program)
    The lines mode compares the output's bytes; on every mix of newlines, blanks, letters, invalid UTF-8 and escaped
    surrogates it answers as the decoded text's lines would."""
    import random

    def decoded(expected: str, printed: bytes) -> bool:  # the rule, on text: newlines as \n, trailing blank lines and
        def lines(text: str) -> list[str]:  # each line's trailing blanks dropped
            text = text.replace("\r\n", "\n").replace("\r", "\n").rstrip(" \t\f\v\n")
            return [line.rstrip(" \t\f\v") for line in text.split("\n")] if text else []
        return lines(expected) == lines(printed.decode("utf-8", errors="surrogateescape"))

    rng = random.Random(0)
    parts = [b"\n", b"\r", b"\r\n", b" ", b"\t", b"\x0b", b"a", b"1", b"\xff", b"\xe9", "\u00e9".encode(),
             b"\xed\xb3\xbf"]
    texts = ["\n", "\r", " ", "\t", "a", "1", "\udcff", "\ud800", "\u00e9", "\x0c", "\udcc3\udca9"]  # (escapes of
    # a valid character's bytes: not that character, as decoding reads them, a review's find)
    for _ in range(5000):
        printed = b"".join(rng.choice(parts) for _ in range(rng.randint(0, 8)))
        expected = ("".join(rng.choice(texts) for _ in range(rng.randint(0, 6))) if rng.random() < 0.5 else
                    printed.decode("utf-8", errors="surrogateescape").replace(" ", rng.choice(["", " ", "  "])))
        assert outputs_match(expected, printed) == decoded(expected, printed), (expected, printed)


def test_compare_float_tolerance_and_case_folding():
    opts = CompareOptions(float_rel=1e-6)
    assert outputs_match("0.3333333 2\n", b"0.33333334 2\n", opts)
    assert not outputs_match("0.3333 2\n", b"0.3334 2\n", opts)
    assert outputs_match("YES\n", b"yes\n", CompareOptions(case_fold=True))
    assert not outputs_match("YES\n", b"yes\n")
    fold = CompareOptions(case_fold=True)  # ASCII letters only: look-alikes that str.casefold() maps onto them fail
    for expected, printed in [("YES", "ye\u017f"), ("OK", "o\u212a"), ("STRASSE", "stra\u00dfe")]:
        assert not outputs_match(expected + "\n", (printed + "\n").encode(), fold), printed
    assert outputs_match("Stra\u00dfe Yes\n", "stra\u00dfe YES\n".encode(), fold)


def test_compare_lcb_is_livecodebenchs_rule():
    """NeMo-Gym's code_gen grader (lcb_runner's grade_stdio) strips the texts and each line and reads lines of numbers
    as Decimals: right programs of Nemotron-RL rows that print `3.0`, `1  2` or a leading blank were graded wrong."""
    from execrl.sandbox import TestSpecError, parse_tests

    lcb = CompareOptions(mode="lcb")
    for expected, printed in [("3\n", " 3\n"), ("1 2\n", "1  2\n"), ("3\n", "3.0\n"), ("1.5\n", "1.50\n"), ("5\n", "\n5\n"),
                              ("1 2 3\n", "1\t2\t3"), ("1e5\n", "100000\n")]:
        assert outputs_match(expected, printed.encode(), lcb) and not outputs_match(expected, printed.encode()), printed
    assert outputs_match("x\ny\n", b"x\r\ny\r\n", lcb) and outputs_match("ok\n", b"ok", lcb)
    for expected, printed in [("a b\n", "a  b\n"), ("YES\n", "yes\n"), ("1\n2\n", "1\n2\n3\n"), ("1 2\n", "1 2 3\n"),
                              ("NaN\n", "nan\n"), ("1\n", "sNaN\n"), ("1\n", "1e999999999999999999999\n"), ("3\n", "4\n")]:
        assert not outputs_match(expected, printed.encode(), lcb), printed
    assert outputs_match("1\n", b"1 \n" + b" 1" * 4_000_000 + b"\n", CompareOptions()) is False
    assert outputs_match("1 2\n", b"1 3" + b" 1" * 4_000_000, lcb) is False  # (read only as far as the tokens match)
    with pytest.raises(TestSpecError, match="'lcb' is LiveCodeBench's rule"):
        parse_tests({"inputs": [""], "outputs": [""], "compare": {"mode": "lcb", "float_rel": 1e-6}})


def test_values_match():
    assert values_match([1, [2, 3]], (1, (2, 3)))
    assert not values_match(1, True) and not values_match(True, 1)
    assert values_match(0.1 + 0.2, 0.3) and not values_match(0.3, "0.3")
    # near zero a relative tolerance is none: an expected 0.0 takes round-off within 1e-9
    assert values_match(0.0, 0.1 + 0.2 - 0.3) and values_match([0.0], [-1.2e-16]) and not values_match(0.0, 1e-6)
    assert not values_match(0.0, float("nan")) and not values_match(0, 1e-12)  # (an expected int: exact)
    assert values_match({"a": [1]}, {"a": (1,)}) and not values_match({"a": 1}, {"b": 1})


def test_an_exception_derived_from_a_builtin_is_caught_as_it_and_output_of_exactly_the_cap_passes(grader):
    """statistics.StatisticsError (a ValueError) and UnicodeDecodeError (five constructor arguments) reached the
    tests as a bare RemoteError, so `except ValueError` let a right program's error through; output of exactly
    16 MiB was output_limit (one byte more is)."""
    from execrl.sandbox import AssertTests

    catch = "try:\n    {}\nexcept ValueError:\n    pass\nelse:\n    assert False"
    code = "import statistics\ndef mode_of(xs):\n    return statistics.mode(xs)\ndef dec(b):\n    return b.decode()"
    r = grader.grade(code, AssertTests([catch.format("mode_of([])"), catch.format("dec(b'\\xff')"),
                                        "assert mode_of([1, 1, 2]) == 1"]))
    assert r.verdict == Verdict.PASS, r.to_dict()
    cap = grader.limits.output_mb << 20
    exact = f"import sys\nsys.stdout.write('a' * {cap - 1} + '\\n')"
    assert grader.grade(exact, stdio([""], ["a" * (cap - 1) + "\n"])).verdict == Verdict.PASS
    over = f"import sys\nsys.stdout.write('a' * {cap} + '\\n')"
    assert grader.grade(over, stdio([""], ["1"])).verdict == Verdict.OUTPUT_LIMIT


def test_a_flood_of_status_lines_is_read_from_its_end():
    """16 MiB of short lines on the status fd were split whole: ~440 MB and 0.7 s of the grading process a test."""
    import os

    from execrl.sandbox import Limits
    from execrl.sandbox.inside.protocol import _last_lines, _status_lines

    raw = b'{"exc": "X"}\n' + b"ab\n" * 1_000_000 + b'{"ok": 1}\n'
    assert _status_lines(raw, True, 16384) == [{"ok": 1}]
    assert list(_last_lines(b"a\nb\nc\n", 2, None)) == ["c", "b"] and list(_last_lines(b"", 3, None)) == []
    assert Limits().nproc >= 2 * (os.cpu_count() or 1) + 16  # (multiprocessing.Pool(): a process a CPU)


@pytest.mark.parametrize("tests, keys", [
    ({"fn_name": "f", "inputs": ["1", "2"], "outputs": ["100", "200"], "asserts": ["assert f(1) == 1"]},
     "asserts and fn_name, inputs, outputs"),
    ({"check": "def check(c):\n    assert c(1) == 2", "entry_point": "f", "inputs": ["1"], "outputs": ["2"]},
     "check and inputs, outputs"),
    ({"asserts": ["assert f(1) == 1"], "setup": "", "check": "def check(c): pass", "entry_point": "f"},
     "check and asserts"),
    ({"fn_name": "f", "inputs": ["1"], "outputs": ["2"], "setup": "x = 1"}, "unknown keys in call tests: ['setup']"),
])
def test_a_row_holding_two_forms_of_tests_is_refused(tests, keys):
    """(A newcomer's find) a row with asserts and call tests was graded on its asserts only: a program that failed the
    two call tests passed. Keys of another form that are empty (a table's unused columns) are no tests."""
    with pytest.raises(TestSpecError, match=__import__("re").escape(keys)):
        parse_tests(tests)
    assert parse_tests({"asserts": ["assert f(1) == 1"], "inputs": [], "outputs": [], "fn_name": ""}).asserts == [
        "assert f(1) == 1"]


def test_what_follows_a_scripts_last_assert_is_part_of_the_last_test():
    """(A review's find) a LeetCode-style script's statements after its last top-level assert (a loop of asserts, a
    check() call) were dropped: a program that failed them passed."""
    script = ("my_solution = Solution()\nassert my_solution.f(1) == 1\nfor x, y in [(2, 4), (3, 9)]:\n"
              "    assert my_solution.f(x) == y\n")
    spec = split_test_script(script)
    assert len(spec.asserts) == 1 and spec.asserts[0].endswith("    assert my_solution.f(x) == y")


def test_call_tests_refuse_a_compare_they_would_not_use():
    """(A review's find) a call row's compare (a float tolerance) was accepted and ignored: a call's value is compared
    exactly."""
    with pytest.raises(TestSpecError, match=r"unknown keys in call tests: \['compare'\]"):
        parse_tests({"fn_name": "f", "inputs": [""], "outputs": ["0.1"], "compare": {"float_rel": 0.01}})


def test_a_tool_in_a_folder_that_is_no_installation_brings_itself_alone(grader, tmp_path, monkeypatch):
    """(A hunt's find) the parent of any bin/ holding a language's tool was bound as the tool's installation:
    ~/.cargo (its credentials.toml), a project's checkout (its held-out data, the grader's own input file). A tool
    brings itself alone now, or, where its bin/ has a library folder beside it, that installation's parts only."""
    from execrl.sandbox import LANGUAGES, load_languages
    from execrl.sandbox.isolation import tool_needs

    project = tmp_path / "project"
    tool = project / "bin" / "shy"
    tool.parent.mkdir(parents=True)
    tool.write_text('#!/bin/sh\nexec /bin/sh "$@"\n')
    tool.chmod(0o755)
    (project / "heldout.jsonl").write_text("SECRET-ROW\n")
    (project / "credentials.toml").write_text("token = 'SECRET'\n")
    assert tool_needs((str(tool),)) == (str(tool),)
    (project / "LICENSE").write_text("MIT\n")
    (project / "lib").mkdir()
    (project / "data").mkdir()
    tool_needs.cache_clear()
    assert tool_needs((str(tool),)) == tuple(str(project / e) for e in ("LICENSE", "bin", "lib"))
    tool_needs.cache_clear()
    monkeypatch.setenv("PATH", f"{tool.parent}:{os.environ['PATH']}")
    (tmp_path / "langs.yaml").write_text("shy:\n  file: main.sh\n  run: [shy, '{file}']\n")
    load_languages(str(tmp_path / "langs.yaml"))
    try:
        r = grader.grade(f"cat {project}/heldout.jsonl {project}/credentials.toml 2>/dev/null || echo hidden",
                         stdio([""], ["hidden\n"]), language="shy")
        assert r.verdict == Verdict.PASS, (r.to_dict(), r.stderr)
    finally:
        LANGUAGES.pop("shy")
        tool_needs.cache_clear()


# real installations' top folders (a review's find: an allow-list of the whole top refused each of these, and their
# languages failed the self-test): what their tools need is bound, what else lies there is not
LAYOUTS = {
    "zulu-jdk": ("bin/java", "conf/ demo/ include/ jmods/ legal/ lib/ man/ DISCLAIMER readme.txt release Welcome.html",
                 "bin conf include jmods legal lib man readme.txt release"),
    "corretto-jdk": ("bin/java", "conf/ include/ jmods/ legal/ lib/ man/ ADDITIONAL_LICENSE_INFO ASSEMBLY_EXCEPTION "
                     "LICENSE README.md commitId.txt release version.txt",
                     "LICENSE README.md bin conf include jmods legal lib man release "
                     "version.txt"),
    "jdk8": ("bin/javac", "jre/ lib/ include/ man/ src.zip COPYRIGHT LICENSE release THIRDPARTYLICENSEREADME.txt",
             "COPYRIGHT LICENSE THIRDPARTYLICENSEREADME.txt bin include jre lib man release"),
    "go1.19": ("bin/go", "api/ doc/ lib/ misc/ pkg/ src/ test/ AUTHORS CONTRIBUTORS LICENSE PATENTS VERSION "
               "favicon.ico robots.txt", "LICENSE VERSION bin lib pkg src"),
    "go-sdk": ("bin/go", "pkg/ src/ lib/ go.env VERSION .unpacked-success", "VERSION bin go.env lib pkg src"),
    "conda-env": ("bin/gcc", "conda-meta/ include/ lib/ libexec/ share/ ssl/ x86_64-conda-linux-gnu/ envs.txt",
                  "bin include lib libexec share ssl x86_64-conda-linux-gnu"),
    "brew-keg": ("bin/ghc", "lib/ share/ INSTALL_RECEIPT.json .brew/", "bin lib share"),
    "mono": ("bin/mono", "etc/ lib/ include/ share/", "bin etc include lib share"),  # (etc/mono/config)
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_an_installation_brings_its_parts_and_nothing_beside_them(tmp_path, layout):
    from execrl.sandbox.isolation import tool_needs

    exe, top, bound = LAYOUTS[layout]
    prefix = tmp_path / layout
    (prefix / exe).parent.mkdir(parents=True)
    (prefix / exe).write_text("#!/bin/sh\n")
    for entry in top.split():
        (prefix / entry.rstrip("/")).mkdir() if entry.endswith("/") else (prefix / entry).write_text("x\n")
    try:
        assert tool_needs((str(prefix / exe),)) == tuple(str(prefix / e) for e in sorted(bound.split()))
    finally:
        tool_needs.cache_clear()


def test_a_compile_stopped_by_its_cpu_limit_says_it_ran_out_of_time():
    """(A hunt's find) the per-process CPU limit (the compile's time, rounded up) fires before the compile's deadline:
    a compiler killed by SIGXCPU, or gcc's reporting its cc1plus so killed, read as a bare syntax error."""
    import signal

    from execrl.sandbox import Limits
    from execrl.sandbox.grader import compile_said

    lim = Limits()
    assert compile_said({"exit": -signal.SIGXCPU}, b"warning: const eval\n", lim).startswith(
        f"the compiler was stopped: out of time ({lim.compile_timeout_s:g} s)")
    gcc = (b"g++: fatal error: Killed signal terminated program cc1plus\n"
           b"internal compiler error: CPU time limit exceeded")
    assert "out of time" in compile_said({"exit": 1}, gcc, lim)
    assert "stopped" not in compile_said({"exit": 1}, b"main.cpp:1:1: error: expected ';'", lim)


@pytest.mark.parametrize("entry, said", [
    ("1: {file: a.q, run: [sh]}", "language 1: its name must be text"),
    ("q: {file: a.q, run: [sh], hello: 5}", "hello must be a program's text"),
    ("q: {file: a.q, run: [sh, '{nope}']}", "holds a placeholder other than {file}, {exe} and {dir}"),
    ("q: {file: a.q, run: []}", "run must be a command"),
    ("q: {file: ../../etc/x, run: [sh]}", "file must be a plain file name"),
    ("q: {file: a.q, run: [sh, '{file.name}']}", "holds a placeholder other than {file}"),  # (a review's find: a
    ("q: {file: a.q, run: [sh, '{file[0]}']}", "holds a placeholder other than {file}"),  # traceback)
])
def test_a_languages_file_entry_the_sandbox_cannot_run_is_one_error(tmp_path, entry, said):
    """(A hunt's finds) a number as a name or a hello raised a traceback in execrl grade; an unknown placeholder, an
    empty run or a file name with a directory made every row an infra_error."""
    from execrl.sandbox import LANGUAGES, load_languages

    (tmp_path / "langs.yaml").write_text(entry + "\n")
    before = dict(LANGUAGES)
    with pytest.raises(ValueError, match=re.escape(said)):
        load_languages(str(tmp_path / "langs.yaml"))
    assert LANGUAGES == before


def test_a_languages_file_entry_may_leave_hello_and_compile_empty(tmp_path):
    """(A review's find) `hello:` left empty (YAML's null) was refused as no program's text."""
    from execrl.sandbox import LANGUAGES, load_languages

    (tmp_path / "langs.yaml").write_text("q:\n  file: a.q\n  run: [sh, '{file}']\n  hello:\n  compile:\n")
    try:
        load_languages(str(tmp_path / "langs.yaml"))
        assert LANGUAGES["q"].hello == "" and LANGUAGES["q"].run[-1] == "{file}"
    finally:
        LANGUAGES.pop("q", None)


def test_taco_call_tests_as_decoded_values_name_their_conversion():
    """(A hunt's find) TACO's and APPS's call tests hold decoded values, outputs wrapped in a list: refused with
    "tests.inputs must be a list of strings", no fix named; converted as the docs said, a correct program failed."""
    from execrl.sandbox import TestSpecError, parse_tests

    with pytest.raises(TestSpecError, match=r"json.dumps\(args\) with args_format list, and each output as "
                                            r"json.dumps\(output\[0\]\)"):
        parse_tests({"fn_name": "add", "inputs": [[1, 2]], "outputs": [[3]]})
    spec = parse_tests({"fn_name": "add", "inputs": [json.dumps([1, 2])], "outputs": [json.dumps([3][0])],
                        "args_format": "list"})
    assert (spec.args, spec.outputs) == ([[1, 2]], [3])
