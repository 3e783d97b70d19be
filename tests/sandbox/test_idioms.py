"""Legitimate programs must not be punished: idioms of competitive programmers and ordinary Python."""

import sys

import pytest

from execrl.sandbox import Limits, Verdict

from .conftest import ONE, stdio

V = Verdict


@pytest.mark.parametrize("code", [
    # deep recursion in the main thread
    "import sys\nsys.setrecursionlimit(10**6)\ndef d(n):\n    return 0 if n == 0 else 1 + d(n - 1)\n"
    "print('ok' if d(200000) == 200000 else 'no')",
    # the threading.stack_size idiom
    "import sys, threading\nsys.setrecursionlimit(10**6)\nthreading.stack_size(2**27)\n"
    "def d(n):\n    return 0 if n == 0 else 1 + d(n - 1)\n"
    "def main():\n    print('ok' if d(300000) == 300000 else 'no')\nthreading.Thread(target=main).start()",
    # deep recursion through a C-level call (lru_cache); CPython 3.12 caps C-level recursion (1,500 frames in
    # 3.12.0-3.12.1: ~498 lru_cache levels; more from 3.12.2), whatever sys.setrecursionlimit says, so deeper is only
    # legitimate on 3.11
    "import sys, functools\nsys.setrecursionlimit(10**6)\n@functools.lru_cache(None)\n"
    "def d(n):\n    return 0 if n == 0 else 1 + d(n - 1)\n"
    f"print('ok' if d({50000 if sys.version_info < (3, 12) else 400}) else 'no')",
    # buffered binary I/O and raw writes
    "import sys\nsys.stdin.buffer.read()\nsys.stdout.buffer.write(b'o')\nsys.stdout.buffer.flush()\n"
    "import os\nos.write(1, b'k\\n')",
    # reading stdin to EOF twice
    "import sys\na = sys.stdin.read()\nb = sys.stdin.read()\nprint('ok' if a == '\\n' and b == '' else repr((a, b)))",
    # output written at exit by an atexit hook (a fast-I/O template)
    "import atexit, io, os, sys\nbuf = io.StringIO()\natexit.register(lambda: os.write(1, buf.getvalue().encode()))\n"
    "buf.write('ok\\n')",
    # exit() with success
    "print('ok')\nimport sys\nsys.exit(0)",
    # numpy under the memory limit
    "import numpy as np\nprint('ok' if int(np.arange(10).sum()) == 45 else 'no')",
    # a program that starts and joins worker processes
    "from multiprocessing import Process\nimport os\nps = [Process(target=os.getpid) for _ in range(4)]\n"
    "[p.start() for p in ps]\n[p.join() for p in ps]\nprint('ok')",
    # a loopback server at 'localhost' (/etc/hosts, of the files the sandbox lets a program read: /etc was 0700 in
    # bwrap-root mode, where the program's uid is not the one that made it)
    "import socket, threading\nsrv = socket.create_server(('localhost', 0))\n"
    "threading.Thread(target=lambda: srv.accept()[0].sendall(b'ok')).start()\n"
    "print(socket.create_connection(('localhost', srv.getsockname()[1])).recv(2).decode())",
])
def test_idioms_pass(grader, code):
    r = grader.grade(code, ONE, limits=Limits(timeout_s=5.0, memory_mb=1024))
    assert r.verdict == V.PASS, r.stderr


def test_integers_beyond_4300_digits(grader):
    sys.set_int_max_str_digits(0)  # only to write this test's expected values
    big = 7**20000
    r = grader.grade("n = int(input())\nprint(n * 2)", stdio([f"{big}\n"], [f"{2 * big}\n"]))
    assert r.verdict == V.PASS, r.stderr
    r = grader.grade("def f(n):\n    return n * 2\n", {"fn_name": "f", "inputs": [str(big)], "outputs": [str(2 * big)]})
    assert r.verdict == V.PASS, r.stderr
    sys.set_int_max_str_digits(4300)


@pytest.mark.parametrize("expected, printed", [
    ("1 2\n3\n", "print('1 2\\r\\n3', end='\\r\\n')"),  # CRLF
    ("1 2\n3\n", "print('1 2   \\n3  ')"),  # trailing spaces
    ("1 2\n3\n", "print('1 2\\n3\\n\\n\\n')"),  # trailing blank lines
    ("1 2\n3\n", "import sys\nsys.stdout.write('1 2\\n3')"),  # no final newline
    ("1 2\r\n3", "print('1 2\\n3')"),  # CRLF in the expected output
])
def test_whitespace_variants_pass(grader, expected, printed):
    assert grader.grade(printed, stdio(["\n"], [expected])).verdict == V.PASS


def test_cpp_deep_recursion_and_fast_io(grader):
    code = ("#include <bits/stdc++.h>\nint d(int n){return n==0?0:1+d(n-1);}\n"
            "int main(){std::ios::sync_with_stdio(false);int n;std::cin>>n;std::cout<<d(n)<<'\\n';}\n")
    r = grader.grade(code, stdio(["1000000\n"], ["1000000\n"]), language="cpp")
    assert r.verdict == V.PASS, r.stderr


@pytest.mark.parametrize("expected, returned", [
    ("2.5", "2.5000000000001"), ("6", "6.0"), ("0.3", "0.1 + 0.2"), ("[1.5, 2]", "(1.5000000000001, 2)"),
    ("4500000001500000000", "4500000001500000000"), ("3.0", "3"),
])
def test_call_results_within_a_floats_tolerance_pass(grader, expected, returned):
    tests = {"fn_name": "f", "inputs": ["0"], "outputs": [expected]}
    r = grader.grade(f"def f(x):\n    return {returned}\n", tests)
    assert r.verdict == V.PASS, (expected, returned, r.to_dict())


@pytest.mark.parametrize("expected, printed", [
    ("10", "10.0"), ("-0", "0"), ("4500000001500000000", "4.5000000015e18"), ("0.333333", "0.3333333333"),
    ("2.0", "1.9999999999"), ("1 2.5", "1.000 2.5000001"),
])
def test_tolerance_mode_passes_equal_values_and_floats_within_it(grader, expected, printed):
    tests = {"inputs": ["\n"], "outputs": [expected + "\n"], "compare": {"float_rel": 1e-6}}
    assert grader.grade(f"print({printed!r})", tests).verdict == V.PASS, (expected, printed)


@pytest.mark.parametrize("returned, expected", [
    ("{'a': 1, 'b': [1, 2]}", '{"b": [1, 2], "a": 1}'),
    ("[{'x': 1.5}, {}]", '[{"x": 1.5000000001}, {}]'),
    ("{'k': {'n': (1, 2)}}", '{"k": {"n": [1, 2]}}'),
])
def test_dicts_returned_match_in_any_order(grader, returned, expected):
    tests = {"fn_name": "f", "inputs": ["0"], "outputs": [expected]}
    assert grader.grade(f"def f(x):\n    return {returned}\n", tests).verdict == V.PASS


def test_sets_returned_match_a_set_expected_by_the_api(grader):
    from execrl.sandbox import CallTests

    r = grader.grade("def f(x):\n    return {3, 2, 1}\n", CallTests("f", [[0]], [{1, 2, 3}]))
    assert r.verdict == V.PASS
    r = grader.grade("def f(x):\n    return frozenset({3, (1, 2)})\n", CallTests("f", [[0]], [frozenset({(1, 2), 3})]))
    assert r.verdict == V.PASS
    r = grader.grade("def f(x):\n    return {1, 2}\n", CallTests("f", [[0]], [{1, 2, 3}]))
    assert r.verdict == V.FAIL


def test_non_ascii_answers_and_files_of_its_own_across_tests(grader):
    import json

    unit = "héllo wörld ✓ \U0001f600"
    tests = {"fn_name": "f", "inputs": ["0"], "outputs": [json.dumps(unit * 20000)]}
    assert grader.grade(f"def f(x):\n    return {unit!r} * 20000\n", tests).verdict == V.PASS
    code = ("import os\nopen('notes.txt', 'a').write('x')\nos.makedirs('cache', exist_ok=True)\n"
            "print('ok' if os.path.getsize('notes.txt') >= 1 and os.path.exists(__file__) else 'no')")
    assert grader.grade(code, stdio(["\n"] * 3, ["ok\n"] * 3)).verdict == V.PASS


@pytest.mark.parametrize("code", [
    "from multiprocessing import Pool\ndef sq(x):\n    return x * x\nif __name__ == '__main__':\n"
    "    with Pool(2) as p:\n"
    "        print('ok' if list(p.imap(sq, range(4))) == [0, 1, 4, 9] else 'no')",
    "from concurrent.futures import ProcessPoolExecutor\ndef sq(x):\n    return x * x\nif __name__ == '__main__':\n"
    "    with ProcessPoolExecutor(2) as ex:\n        print('ok' if list(ex.map(sq, [3])) == [9] else 'no')",
    "from dataclasses import dataclass\nfrom multiprocessing import Process, Queue\n@dataclass\nclass P:\n    x: int\n"
    "def w(q):\n    q.put(P(1))\nif __name__ == '__main__':\n    q = Queue()\n    pr = Process(target=w, args=(q,))\n"
    "    pr.start()\n    print('ok' if q.get() == P(1) else 'no')\n    pr.join()",
    "from dataclasses import dataclass, fields\nfrom typing import ClassVar\n@dataclass\nclass C:\n"
    "    n: ClassVar[int] = 3\n    x: int = 0\n"
    "print('ok' if [f.name for f in fields(C)] == ['x'] and C(5).n == 3 else 'no')",
    "import pickle, sys\nclass T:\n    pass\n"
    "print('ok' if type(pickle.loads(pickle.dumps(T()))) is T and sys.modules[__name__] else 'no')",
    "def f(x: 'undefined name') -> int:\n    return 1\n"
    "print('ok' if f.__annotations__['x'] == 'undefined name' else 'no')",
], ids=["Pool.imap", "ProcessPoolExecutor", "Queue of dataclasses", "dataclass ClassVar", "pickle", "annotations"])
def test_the_program_is_its_own_main_module(grader, code):
    r = grader.grade(code, ONE, limits=Limits(timeout_s=5.0, memory_mb=1024))
    assert r.verdict == V.PASS, (r.tests[0].output, r.stderr)


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_spawned_pool_finds_the_module_in_every_form(grader, method):
    """(A hunt's find) In the call, assert and check forms the program is the module `solution`, which a spawn or
    forkserver child (Python 3.14's default start method) imports by name to unpickle its functions: no such file
    existed, and every such test was a timeout. The stdio form's program is __main__, which spawn runs by its path."""
    code = (f"import multiprocessing as mp\ndef sq(x):\n    return x * x\ndef f(n):\n"
            f"    with mp.get_context({method!r}).Pool(2) as p:\n        return sum(p.map(sq, range(n)))\n")
    lim = Limits(timeout_s=10.0, memory_mb=1024)
    for tests in [{"fn_name": "f", "inputs": ["10"], "outputs": ["285"]}, {"asserts": ["assert f(10) == 285"]}]:
        r = grader.grade(code, tests, limits=lim)
        assert r.verdict == V.PASS, (tests, r.stderr[-500:])
    r = grader.grade(code + "if __name__ == '__main__':\n    print(f(int(input())))\n", stdio(["10\n"], ["285\n"]),
                     limits=lim)
    assert r.verdict == V.PASS, r.stderr[-500:]


def test_an_assert_test_may_pass_a_17_mb_argument(grader):
    """(A hunt's find) The program's side read the tests' requests up to 16 MiB where a reply may be 64: a test
    passing a 17 MB string was the program's runtime_error (the sandbox's own traceback), the call form's pass."""
    r = grader.grade("def f(s):\n    return len(s)\n", {"asserts": ["assert f('a' * 17_000_000) == 17_000_000"]},
                     limits=Limits(timeout_s=10.0, memory_mb=1024))
    assert r.verdict == V.PASS, r.stderr[-500:]


def test_a_rows_other_inputs_and_outputs_take_none_of_a_tests_memory(grader):
    """(A hunt's find) Each test's process was forked from a runner holding every test's input (and the last test's
    output): 32 tests of 5 MB took 160 MB of each one's 256 MB limit, and a program holding 100 MB was `memory` on
    all 32, where one such test passed."""
    code = ("import sys\nd = sys.stdin.buffer.read()\nx = bytearray(100 << 20)\nprint(len(d))\n"
            "sys.stderr.write('x' * (4 << 20))\n")
    line = "7" * (5 << 20) + "\n"
    r = grader.grade(code, stdio([line] * 32, [f"{len(line)}\n"] * 32), limits=Limits(timeout_s=5.0, memory_mb=256))
    assert (r.verdict, r.passed) == (V.PASS, 32), r.tests[-1]


def test_forty_eight_threads_that_allocate_start_under_the_memory_limit(grader):
    """(A hunt's find) glibc reserved 64 MB of address space for each thread's malloc arena, counted by RLIMIT_AS: at
    1,024 MB a program could not hold 22 threads that allocate (15 MB of real memory), its pool's next thread a
    RuntimeError."""
    code = ("import threading\nfrom concurrent.futures import ThreadPoolExecutor\nb = threading.Barrier(48)\n"
            "def w(i):\n    x = [bytes(5000 + j) for j in range(50)]\n    b.wait()\n    return len(x)\n"
            "with ThreadPoolExecutor(48) as ex:\n    print('ok' if sum(ex.map(w, range(48))) == 48 * 50 else 'no')\n")
    r = grader.grade(code, ONE, limits=Limits(timeout_s=10.0, memory_mb=1024))
    assert r.verdict == V.PASS, r.stderr[-500:]


DATACLASSES = ("from dataclasses import dataclass, field\nfrom typing import ClassVar\n@dataclass\nclass P:\n"
               "    x: int\n    tags: list = field(default_factory=list)\n    kind: ClassVar[str] = 'p'\n"
               "def make(x):\n    return P(x)\ndef norm(x):\n    return P(x).x + len(P(x).tags)\n"
               "def check(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x\n"
               "def gen(n):\n    yield from range(n)\n")


@pytest.mark.parametrize("test", [
    "assert make(2).x == 2 and make(2).tags == [] and make(2).kind == 'p'",
    "assert make(1) is not None",
    "p = make(1)\nassert p is not None and not (p is None)",
    "try:\n    check(-1)\nexcept ValueError as e:\n    assert 'negative' in str(e)\nelse:\n    assert False",
    "import contextlib\n@contextlib.contextmanager\ndef raises(kind):\n    try:\n        yield\n    except kind:\n"
    "        return\n    raise AssertionError('did not raise')\nwith raises(ValueError):\n    check(-5)",
    "g = gen(3)\nassert next(g) == 0 and next(g) == 1 and next(g) == 2 and next(g, 'end') == 'end'",
    "from dataclasses import dataclass\n@dataclass\nclass Want:\n    x: int\nassert Want(make(4).x) == Want(4)",
])
def test_tests_on_dataclasses_exceptions_and_generators(grader, test):
    r = grader.grade(DATACLASSES, {"asserts": [test]})
    assert r.verdict == V.PASS, (r.to_dict(), r.tests[0].detail)
    r = grader.grade(DATACLASSES, {"fn_name": "norm", "inputs": ["3"], "outputs": ["3"]})
    assert r.verdict == V.PASS, r.stderr
