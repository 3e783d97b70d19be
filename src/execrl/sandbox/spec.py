"""The test forms a program is graded against: one JSON schema, validated before anything runs.

    stdin/stdout  {"inputs": [str], "outputs": [str], "compare": {...}?}   Nemotron-RL coding, TACO, Codeforces
    call-based    {"fn_name": str, "inputs": [str], "outputs": [str], "args_format": "lines"|"list"?}
                  each input holds the call's arguments as JSON: one JSON value per line (LiveCodeBench,
                  the default) or, with args_format "list", one JSON list of arguments (TACO); each output
                  is the JSON of the expected return value (tuples compare equal to lists)
    asserts       {"asserts": [str], "setup": str?}    MBPP; each string is one test (it may hold several
                  statements, e.g. `test_input = {...}` then an assert, as the LeetCode rows do)
    check         {"check": str, "entry_point": str}   HumanEval: `check(entry_point)` is one test

`compare` (stdin/stdout only): {"mode": "lines"|"exact"|"lcb", "float_rel": 0, "float_abs": 0,
"case_fold": false}.
"""

from __future__ import annotations

import ast
import functools
import json
import math
import re
import sys
import threading
from dataclasses import dataclass, field
from enum import Enum

from execrl.sandbox.compare import CompareOptions
from execrl.sandbox.inside.protocol import MAX_DEPTH

_AST_LOCK = threading.Lock()


def parse_python(code: str) -> ast.Module:
    """ast.parse, one thread at a time: CPython 3.11 (before 3.11.8) keeps the AST conversion's recursion depth in state
    that threads share, and grading threads parsing rows at once raised SystemError ("AST constructor recursion depth
    mismatch": CI's find)."""
    with _AST_LOCK:
        return ast.parse(code)


class Verdict(str, Enum):
    PASS = "pass"
    FAIL = "fail"  # wrong answer
    TIMEOUT = "timeout"
    MEMORY = "memory"
    RUNTIME_ERROR = "runtime_error"
    SYNTAX_ERROR = "syntax_error"  # also: a compile error, for compiled languages
    OUTPUT_LIMIT = "output_limit"
    INFRA_ERROR = "infra_error"  # the sandbox failed; never the model's fault, never scored as a failure


class TestSpecError(ValueError):
    """A test specification that cannot be graded (the dataset's fault, reported before anything
    runs)."""

    __test__ = False  # not a pytest class

    @property
    def reason(self) -> str:
        """The reason without its details (a row's skip line: 'tests is a string but not JSON')."""
        return str(self).split(": ")[0]


def compare_options(d: dict) -> CompareOptions:
    """A test row's `compare` settings, checked."""
    unknown = set(d) - {"mode", "float_rel", "float_abs", "case_fold"}
    if unknown:
        raise TestSpecError(f"unknown compare options {sorted(unknown)}: use mode, float_rel, float_abs, case_fold")
    opts = CompareOptions(**d)
    if opts.mode not in ("lines", "exact", "lcb"):
        raise TestSpecError(f"compare.mode must be 'lines', 'exact' or 'lcb', got {opts.mode!r}")
    if opts.mode == "lcb" and (opts.float_rel or opts.float_abs or opts.case_fold):
        raise TestSpecError("compare.mode 'lcb' is LiveCodeBench's rule as it stands: it takes no float_rel, "
                            "float_abs or case_fold (use mode 'lines' with them)")
    for name in ("float_rel", "float_abs"):
        v = getattr(opts, name)
        if type(v) not in (int, float) or not 0 <= v < math.inf:
            raise TestSpecError(f"compare.{name} must be a finite number >= 0, got {v!r}")
    if opts.float_rel >= 1:  # (|x - y| <= max(|x|, |y|): any two numbers of one sign, and 0 with every number)
        raise TestSpecError(f"compare.float_rel must be below 1, got {opts.float_rel!r}: a relative tolerance of 1 or "
                            "more matches any two numbers of one sign and 0 with every number (1e-6 is usual)")
    if type(opts.case_fold) is not bool:
        raise TestSpecError(f"compare.case_fold must be true or false, got {opts.case_fold!r}")
    return opts


@dataclass(frozen=True)
class StdioTests:
    inputs: list[str]
    outputs: list[str]
    compare: CompareOptions = field(default_factory=CompareOptions)


@dataclass(frozen=True)
class CallTests:
    fn_name: str
    args: list[list]  # decoded arguments per test
    outputs: list  # decoded expected return values


@dataclass(frozen=True)
class AssertTests:
    asserts: list[str]
    setup: str = ""


@dataclass(frozen=True)
class CheckTests:
    check: str
    entry_point: str


TestSpec = StdioTests | CallTests | AssertTests | CheckTests


_CALLED = re.compile(r"(?<![\w.])([A-Za-z_]\w*)\s*\(")  # a name called, not an attribute's


def entry_names(spec: TestSpec | None) -> frozenset[str]:
    """The names of the program's that its tests call (a function, a class): HumanEval's entry point, a call test's
    function, the names an assert calls that are not Python's builtins (MBPP's `remove_Occ`, LeetCode's `Solution`);
    none for stdin/stdout tests, which run the program whole."""
    import builtins

    if isinstance(spec, CheckTests):
        return frozenset({spec.entry_point})
    if isinstance(spec, CallTests):
        return frozenset({spec.fn_name, "Solution"})
    if isinstance(spec, AssertTests):
        called = set().union(*(_called(a) for a in spec.asserts[:8])) - {"assert", "not", "and", "or", "in", "is"}
        own = called - set(dir(builtins))
        return frozenset(own or called)  # (a solution named after a builtin: MBPP's `sum`, its tests' only call)
    return frozenset()


@functools.lru_cache(maxsize=8192)  # (a problem's asserts, read again for each of its samples)
def _called(test: str) -> frozenset[str]:
    """The names an assert calls (`f(...)`, not `x.f(...)`), never a word inside its strings ("python (chrome)")."""
    if len(test) <= 2000:
        try:
            return frozenset(n.func.id for n in ast.walk(parse_python(test)) if isinstance(n, ast.Call)
                             and isinstance(n.func, ast.Name))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            pass
    return frozenset(m.group(1) for m in _CALLED.finditer(test[:2000]))


def num_tests(spec: TestSpec) -> int:
    if isinstance(spec, CheckTests):
        return 1
    if isinstance(spec, AssertTests):
        return len(spec.asserts)
    return len(spec.outputs)


def truncate_tests(spec: TestSpec, max_tests: int) -> TestSpec:
    """At most `max_tests` tests (the first ones): cheaper grading of problems with hundreds of
    tests."""
    if max_tests <= 0 or num_tests(spec) <= max_tests or isinstance(spec, CheckTests):
        return spec
    return select_tests(spec, range(max_tests))


def select_tests(spec: TestSpec, keep) -> TestSpec:
    """The tests at the indices `keep`, in their order (a check function is one test: as it is)."""
    if isinstance(spec, StdioTests):
        return StdioTests([spec.inputs[i] for i in keep], [spec.outputs[i] for i in keep], spec.compare)
    if isinstance(spec, CallTests):
        return CallTests(spec.fn_name, [spec.args[i] for i in keep], [spec.outputs[i] for i in keep])
    if isinstance(spec, AssertTests):
        return AssertTests([spec.asserts[i] for i in keep], spec.setup)
    return spec


# each form's keys, the key that names it first (checked in this order)
FORMS = (("check", "entry_point"), ("asserts", "setup"), ("inputs", "outputs", "compare", "fn_name", "args_format"))


OUTPUT_MB = 16  # the sandbox's cap on what a program prints or returns (Limits.output_mb)


def parse_tests(obj) -> TestSpec:
    """Validate a tests object (dict or JSON string) into one of the four forms."""
    if isinstance(obj, str):
        try:
            obj = json.loads(obj)
        except ValueError as e:  # not JSON, or an integer of more digits than Python converts
            raise TestSpecError(f"tests is a string but not JSON: {e}"[:300]) from None
        except RecursionError:
            raise TestSpecError("tests is JSON nested too deeply to read") from None
    if not isinstance(obj, dict):
        fix = " (assert statements, as MBPP's test_list, go in {\"asserts\":[...]})" if isinstance(obj, list) else ""
        raise TestSpecError(f"tests must be an object, got {type(obj).__name__}{fix}")
    obj = {k: v for k, v in obj.items() if v is not None}  # (a key of null is none: parquet's union columns and
    keys = set(obj)                                         # datasets' to_json write every form's keys, unused null)
    form = next((f for f in FORMS if f[0] in keys), None)
    mixed = sorted(k for k in keys - set(form or ()) if obj[k] not in ([], "", {})) if form and form[0] != "inputs" else []
    if mixed:  # (graded on one form, a row's other tests were dropped: a program failing them all passed)
        named = ", ".join(k if k.isidentifier() else repr(k) for k in mixed)  # (a key with a newline: quoted)
        raise TestSpecError(f"tests holds {form[0]} and {named}: one form per row (its keys: {', '.join(form)}); split "
                            "it into two rows or drop one")
    if "check" in keys:
        _need_str(obj, "check")
        _need_str(obj, "entry_point")
        _python_syntax(obj["check"], "tests.check")
        tree = parse_python(obj["check"])
        if "check" not in _bound(ast.walk(tree)):
            raise TestSpecError("tests.check defines no function check(candidate): HumanEval's form calls "
                                "check(entry_point), so no program could pass")
        if not obj["entry_point"].isidentifier():
            raise TestSpecError(f"tests.entry_point must name a function, got {obj['entry_point']!r}")
        if obj["entry_point"] in _top_level(tree):  # (hunts' finds: entry_point 'check' tested the row's own
            raise TestSpecError(  # check, which no program could pass; a helper of the program's name, the row's own)
                f"tests.entry_point {obj['entry_point']!r} is a name the row's own check code binds: the test would "
                "call the row's definition, not the program's; rename one of them")
        nodes = list(ast.walk(tree))
        if not (_asserting(nodes) and _tests_something(nodes)):  # (a hunt's find: a body of `pass`, or `assert
            raise TestSpecError("tests.check holds no assert (or raise) of anything: every program that runs would "
                                "pass it")  # True`, passed every program)
        return CheckTests(obj["check"], obj["entry_point"])
    if "asserts" in keys:
        asserts = _need_str_list(obj, "asserts")
        setup = obj.get("setup") or ""
        if not isinstance(setup, str):
            raise TestSpecError("tests.setup must be a string of Python code")
        for i, a in enumerate(asserts):
            _python_syntax(a, f"tests.asserts[{i}]")
        _python_syntax(setup, "tests.setup")
        setup_nodes = list(ast.walk(parse_python(setup)))  # (its helpers may assert: written there, or imported)
        helpers = _asserting(setup_nodes) or any(isinstance(n, ast.ImportFrom) for n in setup_nodes)
        tests = AssertTests(_tests_that_test(asserts, helpers), setup)
        if not _uses_the_program("\n".join([setup, *asserts])):
            raise TestSpecError("tests.asserts call only names the row's own code defines (its set-up's functions): "
                                "the program is never called, and every program would pass; leave the tested "
                                "function to the program")
        return tests
    if "inputs" in keys and "outputs" in keys:
        if obj.get("fn_name") and not all(isinstance(v, list) and all(isinstance(x, str) for x in v)
                                          for v in (obj["inputs"], obj["outputs"])):  # (a hunt's find: no fix named)
            raise TestSpecError("tests.inputs and tests.outputs of call tests must be lists of JSON strings (TACO's "
                                "and APPS's rows hold decoded values: give each call's arguments as json.dumps(args) "
                                "with args_format list, and each output as json.dumps(output[0]): they wrap the "
                                "return value in a one-element list)")
        inputs, outputs = _need_str_list(obj, "inputs"), _need_str_list(obj, "outputs")
        if len(inputs) != len(outputs):
            raise TestSpecError(f"tests has {len(inputs)} inputs but {len(outputs)} outputs")
        if obj.get("fn_name"):  # (no compare: a call's value is compared as a value, exactly)
            unknown = sorted(k for k in keys - {"inputs", "outputs", "fn_name", "args_format"} if obj[k] not in ([], "",
                                                                                                                  {}))
            if unknown:
                raise TestSpecError(f"unknown keys in call tests: {unknown} (a row holds one form of tests)")
            return _call_tests(obj, inputs, outputs)
        unknown = keys - {"inputs", "outputs", "compare", "fn_name"}
        if unknown:
            raise TestSpecError(f"unknown keys in stdin/stdout tests: {sorted(unknown)}")
        compare = obj.get("compare") or {}
        if not isinstance(compare, dict):
            raise TestSpecError("tests.compare must be an object: {mode, float_rel, float_abs, case_fold}")
        return StdioTests(inputs, outputs, compare_options(compare))
    raise TestSpecError(
        f"unknown test form with keys {sorted(keys)}: expected inputs+outputs (stdin/stdout), "
        "fn_name+inputs+outputs (call), asserts (+setup) or check+entry_point"
    )


def expects_nothing(spec: TestSpec) -> str | None:
    """Why a program that prints or returns nothing passes every one of `spec`'s tests (each expects no output, or
    null), else None (a hunt's find: such rows paid 1.0 for an empty program)."""
    if isinstance(spec, StdioTests) and spec.outputs and all(not o.strip() for o in spec.outputs):
        return "every test expects no output, which a program printing nothing passes"
    if isinstance(spec, CallTests) and spec.outputs and all(v is None for v in spec.outputs):
        return "every call test expects null, which a function returning nothing passes"
    return None


def unpassable(spec: TestSpec) -> str | None:
    """Why no program passes one of `spec`'s tests under the sandbox's default output cap (an expected output over
    it, which ends any program printing it), else None (a hunt's find: every sample of such a row scored 0, said
    nowhere). For the dataset loaders; the grader itself grades under its own limits."""
    outputs = spec.outputs if isinstance(spec, StdioTests) else [json.dumps(o) for o in spec.outputs] \
        if isinstance(spec, CallTests) and any(isinstance(o, (str, list, dict)) for o in spec.outputs) else []
    for out in outputs:
        if len(out) > OUTPUT_MB << 18 and len(out.encode("utf-8", "surrogatepass")) > OUTPUT_MB << 20:
            return f"a test expects over {OUTPUT_MB} MB of output, more than a program may print or return"
    return None


def split_test_script(script: str) -> AssertTests:
    """A test script (e.g. a LeetCode row: `my_solution = Solution()`, then `test_input = ...;
    assert ...` pairs) as one test per assert: each test is the statements since the previous
    assert, plus the assert. Tests run in order in one namespace, so set-up before the first assert
    stays visible to the rest."""
    import ast

    try:
        tree = parse_python(script)
    except (SyntaxError, ValueError, MemoryError, RecursionError) as e:  # (NUL bytes; nested too deeply to parse)
        raise TestSpecError(f"the test script is not valid Python: {type(e).__name__}: {e}"[:300]) from None
    lines = python_lines(script)
    tests, start = [], 0
    for node in tree.body:
        if isinstance(node, ast.Assert):
            tests.append("".join(lines[start:node.end_lineno]).strip("\r\n"))
            start = node.end_lineno
    if not tests:
        raise TestSpecError("the test script has no assert statements")
    tail = "".join(lines[start:]).strip("\r\n")
    if tail.strip():  # what follows the last assert (a loop of asserts, a check() call) is part of the last test: it
        tests[-1] += "\n" + tail  # was dropped, and a program failing it passed
    if not _uses_the_program(script):  # (a hunt's find: "assert True", or asserts of the standard library's alone,
        # passed every program; the asserts form of a row of our own refused them)
        raise TestSpecError("the test script uses no name the program defines: the program is never called, and every "
                            "program would pass")
    helpers = any(isinstance(n, ast.FunctionDef) and _asserting(list(ast.walk(n))) for n in tree.body)
    return AssertTests(_tests_that_test(tests, helpers))


def python_lines(source: str) -> list[str]:
    """source's lines as Python's parser numbers them (ending at \n, \r\n or \r), each with its end.
    Not str.splitlines, which also ends a line at \x0b, \x0c, \x1c-\x1e, \x85, U+2028 and U+2029:
    characters a string literal may hold, which would shift every later line against the ast's."""
    return re.findall(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$", source)


def _call_tests(obj: dict, inputs: list[str], outputs: list[str]) -> CallTests:
    if not isinstance(obj["fn_name"], str) or not obj["fn_name"].isidentifier():
        raise TestSpecError(f"tests.fn_name must name a function, got {obj['fn_name']!r}")
    fmt = obj.get("args_format", "lines")
    if fmt not in ("lines", "list"):
        raise TestSpecError(f"args_format must be 'lines' or 'list', got {fmt!r}")
    args, expected, big_ints = [], [], BigInts()
    for i, (inp, out) in enumerate(zip(inputs, outputs)):
        try:
            if fmt == "lines":
                # (lines end at \n, \r\n or \r, which JSON escapes inside strings: not at U+2028, U+0085, ..., which a
                # JSON string may hold raw)
                args.append([_json(line, big_ints) for line in re.split(r"\r\n|\r|\n", inp) if line.strip()])
            else:
                a = _json(inp, big_ints)
                if not isinstance(a, list):
                    raise ValueError("with args_format 'list' each input must be a JSON list of arguments")
                args.append(a)
            expected.append(_json(out, big_ints, expected=True))
        except _NoNaN:
            raise TestSpecError(f"a call test expects NaN, which no value equals: no program could pass (test {i})") \
                from None
        except ValueError as e:  # (the reason first: a row's skip line is what comes before the first ": ")
            raise TestSpecError(f"a call test's input or output is not JSON: test {i}: {e}") from None
    return CallTests(obj["fn_name"], args, expected)


MAX_INT_DIGITS = 100_000  # digits of all the integers beyond 4,000 digits in one row's call tests, together


class BigInts:
    """json's parse_int for one row: integers of any length up to the row's budget of MAX_INT_DIGITS
    (Python refuses str -> int beyond 4,300 digits, and converts in time quadratic in the digits: a
    row may not make us spend that)."""

    def __init__(self):
        self.left = MAX_INT_DIGITS

    def __call__(self, text: str) -> int:
        if len(text) < 4000:
            return int(text)
        self.left -= len(text)
        if self.left < 0:
            raise ValueError(f"integers of more than {MAX_INT_DIGITS:,} digits in all: write them as strings")
        digits = text.lstrip("-")
        return -_from_digits(digits) if len(digits) < len(text) else _from_digits(digits)


def _from_digits(digits: str) -> int:
    """int(digits) of any length, by halves (each int() call stays under Python's 4,300-digit
    limit)."""
    if len(digits) <= 3000:
        return int(digits)
    k = len(digits) // 2
    return _from_digits(digits[:-k]) * 10**k + _from_digits(digits[-k:])


class _NoNaN(Exception):
    pass


def _no_nan(name: str):
    raise _NoNaN(name)


def _json(text: str, big_ints=None, expected: bool = False):
    try:
        value = json.loads(text, parse_int=big_ints or BigInts(),
                           **({"parse_constant": lambda c: _no_nan(c) if c == "NaN" else float(c)} if expected else {}))
    except RecursionError:
        raise ValueError("nested too deeply") from None
    _check_depth(value)
    return value


def _check_depth(value) -> None:
    """Arguments and expected values nested deeper than the sandbox's plain data can carry are the
    row's error."""
    todo = [(value, 0)]
    while todo:
        v, depth = todo.pop()
        if depth > MAX_DEPTH - 2:  # (arguments travel inside a list of arguments)
            raise ValueError(f"nested more than {MAX_DEPTH - 2} deep")
        if isinstance(v, list):
            todo.extend((x, depth + 1) for x in v)
        elif isinstance(v, dict):
            todo.extend((x, depth + 1) for x in v.values())


def _need_str(obj: dict, key: str) -> str:
    if not isinstance(obj.get(key), str) or not obj[key].strip():
        raise TestSpecError(f"tests.{key} must be a non-empty string")
    return obj[key]


def _need_str_list(obj: dict, key: str) -> list[str]:
    v = obj.get(key)
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise TestSpecError(f"tests.{key} must be a list of strings")
    if not v:
        raise TestSpecError(f"tests.{key} is empty: a program with no tests cannot be graded")
    return v


def _bound(nodes) -> set[str]:
    """The names a test script's nodes bind: a def, a class, an assignment (`check = _check`), an import
    (`from tests import check`)."""
    names = set()
    for node in nodes:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name.split(".")[0])
    return names


def _uses_the_program(code: str) -> bool:
    """Whether assert tests (set-up and asserts together) use a name the program could define: one they use and do
    not bind, which the checker binds to the program's, not a module's; or a builtin's name (the program's own `sum`,
    MBPP 126). A set-up that defined the tested function itself passed every program, an empty one too (a review's
    find)."""
    from execrl.sandbox.inside.checker import MODULE_ALIASES, TEST_MODULES, _free_names

    free, builtin = _free_names(parse_python(code))  # (parsed here, under the lock: grading threads parse at once)
    return bool(free - set(MODULE_ALIASES) - set(TEST_MODULES) - set(sys.stdlib_module_names) or builtin)


def _top_level(tree: ast.Module) -> set[str]:
    """The names a test script binds at its top level, where they replace the program's (a function's locals do not)."""
    names = set()
    for statement in tree.body:
        defines = isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        names |= {statement.name} if defines else _bound(ast.walk(statement))
    return names


def _tests_that_test(asserts: list[str], helpers_assert: bool = False) -> list[str]:
    """The assert tests, each entry that tests nothing ("import math", "", a comment, a call that asserts nothing:
    "f(1)", "print(f(3) == 9)") run with the next one that does (or the last): a test of its own would pass whatever
    the program is, and add to the share of tests passed. An assert of constants ("assert False", "assert True") is
    refused: merged, it would fail (or pass) every program. Raises TestSpecError where no entry tests anything: every
    program, an empty one too, would get the same verdict ("assert True", "assert False"). `helpers_assert`: the
    set-up holds an assert (or raise), so a call of its helpers ("check(f)") may test."""
    merged, pending = [], []
    for i, a in enumerate(asserts):
        nodes = list(ast.walk(parse_python(a)))  # (parsed once: a dataset of 100,000 asserts is read at start-up)
        tests = _tests_something(nodes) and (helpers_assert or _asserting(nodes))
        if not _tests_something(nodes) and _asserting(nodes):
            raise TestSpecError(f"tests.asserts[{i}] is an assert of nothing of the program's: every program gets the "
                                f"same verdict from it ({a[:60]!r}); drop it, or make it test the program"[:300])
        pending.append(a)
        if tests:
            merged.append("\n".join(pending))
            pending = []
    if not merged:
        raise TestSpecError(f"tests.asserts assert nothing of the program's: every program, an empty one too, gets "
                            f"the same verdict ({asserts[:3]!r})"[:300])
    if pending:
        merged[-1] = "\n".join([merged[-1], *pending])
    return merged


def _asserting(nodes: list[ast.AST]) -> bool:
    """Whether code (its parsed nodes) can fail a test: an assert, a raise, a call of an assert-named function
    (`np.testing.assert_allclose`, `self.assertEqual`, `pytest.raises`, `pytest.fail`) or an exit (`sys.exit(1)`)."""
    def named(node) -> str:
        f = node.func
        return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""

    return any(isinstance(node, (ast.Assert, ast.Raise)) or isinstance(node, ast.Call) and
               (named(node).lower().startswith(("assert", "fail", "raises", "warns")) or
                named(node) in ("exit", "_exit", "quit")) for node in nodes)  # (`with pytest.raises(...)`: CI's find)


def _tests_something(nodes: list[ast.AST]) -> bool:
    """Whether an assert test (its parsed nodes) uses anything (calls a function or a method, reads a name the
    program defines): "", a comment, an import or "assert True" pass whatever the program is."""
    return any(isinstance(node, (ast.Call, ast.Name, ast.Attribute, ast.Subscript)) for node in nodes)


def _python_syntax(code: str, where: str) -> None:
    try:
        compile(code, where, "exec", dont_inherit=True)
    except (SyntaxError, ValueError, MemoryError, RecursionError) as e:  # ValueError: NUL bytes; the others: absurd
        raise TestSpecError(f"{where} is not valid Python: {type(e).__name__}: {e}"[:300]) from None
