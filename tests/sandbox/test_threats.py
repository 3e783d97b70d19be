"""The sandbox's threat model: one adversarial program per property. None may pass, hang grading, harm the
host, see the grader's secrets or leave anything behind."""

import os
import socket
import time

import pytest

from execrl.sandbox import Limits, Verdict
from execrl.sandbox.isolation import detect

from ..conftest import SECRET
from .conftest import ONE, stdio

V = Verdict
namespaces = pytest.mark.skipif(detect().mode == "none", reason="needs bubblewrap namespaces")


def sandbox_processes(grader) -> list[int]:
    """Host processes running as one of this grader's sandbox uids (root mode: each worker's, its checker's the next),
    i.e. its programs' processes (not another grader's on the same machine: a concurrent run's failed these tests)."""
    mine = {u + k for u in grader.pool._uids for k in (0, 1)}
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/status") as f:
                    uid = int(next(line for line in f if line.startswith("Uid:")).split()[1])
            except (OSError, StopIteration, ValueError):
                continue
            if uid in mine:
                out.append(int(p))
    return out


def graded_quickly(grader, code, tests=ONE, limit_s=15.0):
    t = time.monotonic()
    r = grader.grade(code, tests)
    assert time.monotonic() - t < limit_s, "grading took too long"
    assert r.verdict != V.INFRA_ERROR, r.stderr
    return r


# --- time ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("code", [
    "while True: pass",
    "import signal\nfor s in (signal.SIGXCPU, signal.SIGTERM, signal.SIGINT, signal.SIGALRM):\n"
    "    signal.signal(s, signal.SIG_IGN)\nwhile True:\n    try:\n        pass\n    except BaseException:\n        pass",
    "x = sum(range(10**13))",  # one long C-level call
    "import time\ntime.sleep(1000)",
    "import threading, time\nthreading.Thread(target=lambda: time.sleep(1000)).start()",
])
def test_runaway_programs_time_out(grader, code):
    assert graded_quickly(grader, code).verdict == V.TIMEOUT


@pytest.mark.parametrize("first", [
    "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)",  # a process that kills itself
    # killed for its memory: each process holds its 150 MB until the other has touched its own (the parent printing
    # before the child allocated, or the child gone before the parent allocated, passed the test under load)
    "import os\nr, w = os.pipe()\npid = os.fork()\nx = bytearray(150 << 20)\nx[::4096] = b'x' * len(x[::4096])\n"
    "if pid:\n    os.write(w, b'1')\n    os.waitpid(pid, 0)\nelse:\n    os.read(r, 1)\n    os._exit(0)",
], ids=["kills itself", "fork + 150 MB"])
def test_a_test_killed_not_for_time_does_not_stop_the_next_ones(grader, first):
    """After a timeout the rest of a program's tests are reported as timeouts unrun; a test ended by SIGKILL for
    another reason (its memory, its own kill) counted as one, and a program that fails one test on memory got 0
    of 4 where it earned 3 (the reward test_pass_fraction 0.0, not 0.75)."""
    code = "n = int(input())\nif n == 0:\n" + "".join(f"    {line}\n" for line in first.splitlines()) + "print(n)"
    tests = {"inputs": [f"{n}\n" for n in range(4)], "outputs": [f"{n}\n" for n in range(4)]}
    r = grader.grade(code, tests, limits=Limits(timeout_s=5.0, memory_mb=256, output_mb=4))
    assert [t.verdict for t in r.tests][1:] == [V.PASS] * 3, r.to_dict()
    assert r.tests[0].verdict in (V.MEMORY, V.RUNTIME_ERROR)


# --- memory and limits -----------------------------------------------------------------------------------

@pytest.mark.parametrize("code", [
    "x = bytearray(20 * 1024**3)",
    "xs = []\nwhile True:\n    xs.append(' ' * 10**7)",
])
def test_huge_allocations_hit_the_memory_limit(grader, code):
    # first-touch page faults are slow on small VMs: a small limit keeps this well inside the time limit
    r = grader.grade(code, ONE, limits=Limits(timeout_s=5.0, memory_mb=200, output_mb=4))
    assert r.verdict == V.MEMORY


def test_rlimits_cannot_be_raised(grader):
    code = ("import resource\nraised = 0\n"
            "for r in (resource.RLIMIT_AS, resource.RLIMIT_CPU, resource.RLIMIT_NPROC, resource.RLIMIT_FSIZE):\n"
            "    try:\n        resource.setrlimit(r, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))\n        raised += 1\n"
            "    except (ValueError, OSError):\n        pass\nprint('ok' if raised == 0 else 'raised')")
    assert graded_quickly(grader, code).verdict == V.PASS


# --- output and disk -------------------------------------------------------------------------------------

@pytest.mark.parametrize("code", [
    "while True: print('x' * 1000)",
    "import sys\nwhile True: sys.stderr.write('y' * 10000)",
    "import os\nwhile True: os.write(1, b'z' * 65536)",
])
def test_output_floods_are_capped(grader, code):
    r = graded_quickly(grader, code)
    assert r.verdict == V.OUTPUT_LIMIT
    assert len(r.stderr) <= 10_000


@namespaces
def test_filling_the_disk_stops_at_the_quota(grader):
    code = ("import os\ntotal = 0\ntry:\n    for i in range(10**6):\n        with open(f'f{i}', 'wb') as f:\n"
            "            f.write(b'x' * 2**20)\n        total += 1\nexcept OSError:\n    pass\n"
            "print('ok' if total < 400 else total)")
    assert graded_quickly(grader, code).verdict == V.PASS


# --- processes ---------------------------------------------------------------------------------------------

@namespaces
def test_fork_bomb_is_contained_and_cleaned_up(grader):
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    assert graded_quickly(grader, code, limit_s=30).verdict in (V.TIMEOUT, V.RUNTIME_ERROR)
    assert sandbox_processes(grader) == []
    assert grader.grade("print('ok')", ONE).verdict == V.PASS


def test_double_forked_daemon_does_not_outlive_grading(solo):
    daemon = ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
              "        time.sleep(1.5)\n        open('/tmp/prog/daemon-was-here', 'w').write('x')\n        time.sleep(1000)\n"
              "    os._exit(0)\nprint('ok')")
    assert solo.grade(daemon, ONE).verdict == V.PASS
    assert sandbox_processes(solo) == []
    time.sleep(2)
    probe = "import os\nprint('ok' if not os.path.exists('/tmp/prog/daemon-was-here') else 'daemon ran')"
    assert solo.grade(probe, ONE).verdict == V.PASS


@pytest.mark.parametrize("code", [
    "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nprint('ok')",
    "import os, signal\nos.kill(1, signal.SIGKILL)\nprint('ok')",
    "import os, signal\nos.kill(-1, signal.SIGKILL)\nprint('ok')",
    "import os, signal\nfor p in range(1, 400):\n    try:\n        os.kill(p, signal.SIGKILL)\n    except OSError:\n        pass\n",
])
@namespaces  # without a PID namespace, kill(-1) from a root grader's program would reach the whole host
def test_killing_parent_or_everything_does_not_break_grading(grader, code):
    graded_quickly(grader, code)
    assert grader.grade("print('ok')", ONE).verdict == V.PASS
    assert grader.grade("print('ok')", ONE).verdict == V.PASS


# --- isolation -------------------------------------------------------------------------------------------

@namespaces
def test_no_network(grader):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    code = (f"import socket\nreached = []\nfor target in [('127.0.0.1', {port}), ('1.1.1.1', 53), ('pypi.org', 443)]:\n"
            "    try:\n        socket.create_connection(target, timeout=2).close()\n        reached.append(target)\n"
            "    except OSError:\n        pass\nprint('ok' if not reached else reached)")
    try:
        assert graded_quickly(grader, code).verdict == V.PASS
    finally:
        server.close()


@namespaces
def test_grader_environment_and_home_are_invisible(grader):
    home_secret = os.path.expanduser("~/.execrl-test-secret")
    with open(home_secret, "w") as f:
        f.write(SECRET)
    code = ("import os, glob\nseen = repr(dict(os.environ))\n"
            "for path in glob.glob('/proc/*/environ') + glob.glob('/proc/*/cmdline') + "
            f"[{home_secret!r}, '/proc/1/environ']:\n"
            "    try:\n        seen += open(path, 'rb').read().decode(errors='replace')\n    except OSError:\n        pass\n"
            f"print('ok' if {SECRET!r} not in seen else 'leaked')")
    try:
        assert graded_quickly(grader, code).verdict == V.PASS
    finally:
        os.unlink(home_secret)
    named = grader.run("import os\nprint(sorted(k for k in os.environ if k.startswith('EXECRL')))")  # (the host's
    assert named.stdout.strip() == "[]", named  # paths the zygote keeps were in EXECRL_KEEP: a hunt's note)


@namespaces
def test_cannot_write_outside_its_directory(grader, tmp_path):
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    targets = ["/etc/execrl-x", "/usr/execrl-x", f"{repo}/execrl-x", f"{tmp_path}/x", "/var/tmp/execrl-x"]
    # /tmp and /dev/shm are the program's (tmpfs, wiped after it: test_nothing_persists_between_programs)
    code = (f"wrote = []\nfor t in {targets!r}:\n    try:\n        open(t, 'w').write('x')\n        wrote.append(t)\n"
            "    except OSError:\n        pass\nopen('mine.txt', 'w').write('fine')\nprint('ok' if not wrote else wrote)")
    assert graded_quickly(grader, code).verdict == V.PASS
    assert not any(os.path.exists(t) for t in targets[:5])  # on the host


@namespaces  # (mode none, rlimits alone: the GPU host's image, where both failed)
def test_nothing_persists_between_programs(solo):
    first = ("import os\nopen('left-behind', 'w').write('x')\nos.makedirs('locked/inner')\nos.chmod('locked', 0)\n"
             "open('/tmp/prog/../prog/also', 'w').write('x')\nprint('ok')")
    assert solo.grade(first, ONE).verdict == V.PASS
    second = "import os\nprint('ok' if os.listdir('.') == ['main.py'] else os.listdir('.'))"
    assert solo.grade(second, ONE).verdict == V.PASS


SCAN = """import re
pattern = re.compile(rb"(KEY|OUT)=[0-9]{9}")  # (an earlier program's source and output; not this source's own)
found = False
with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", 0) as mem:
    for line in maps:
        span, perms = line.split()[:2]
        lo, hi = (int(x, 16) for x in span.split("-"))
        if "r" not in perms or hi - lo > 1 << 28:
            continue
        try:
            mem.seek(lo)
            data = mem.read(hi - lo)
        except (OSError, ValueError, OverflowError):
            continue
        if pattern.search(data):
            found = True
            break
print("leak" if found else "clean")
"""


def test_a_later_program_finds_nothing_of_an_earlier_one_in_its_memory(solo):
    """(An attacker's finding) each test's process is forked from the sandbox's runner, which had held the earlier
    programs' sources and outputs: a program could read a right answer to its own problem out of its memory and
    pass. What the runner held of a program is zeroed once it is graded."""
    earlier = "# KEY=739184562\nprint('OUT=583920174')\n"
    assert solo.grade(earlier, stdio(["\n"], ["OUT=583920174\n"])).verdict == V.PASS
    r = solo.grade(SCAN, stdio(["\n"], ["clean\n"]))
    assert r.verdict == V.PASS, r.to_dict()


def test_a_later_program_finds_no_call_tests_arguments_in_its_memory(solo):
    """(An attacker's finding) a call test's arguments came in the run message's header, parsed in the runner: a later
    program on the worker read the hidden inputs of the problems graded before it in its own memory. They come as
    the test's blob now, zeroed once the program is graded, and are parsed in the test's own process."""
    call = {"fn_name": "f", "inputs": ['"KEY=739184562"', '"OUT=583920174"'], "outputs": ['"a"', '"b"']}
    assert solo.grade("def f(s):\n    return s[0]\n", call).verdict == V.FAIL
    r = solo.grade(SCAN, stdio(["\n"], ["clean\n"]))
    assert r.verdict == V.PASS, r.to_dict()


@namespaces  # (mode none, rlimits alone: the GPU host's image, where both failed)
def test_runs_in_its_own_private_directory(grader):
    code = "import os\nprint('ok' if os.getcwd() == '/tmp/prog' and os.listdir('.') == ['main.py'] else os.getcwd())"
    assert graded_quickly(grader, code).verdict == V.PASS


# --- faking a pass in the assert, call and check forms ---------------------------------------------------

ASSERTS = {"asserts": ["assert add(1, 2) == 3", "assert add(2, 2) == 4"]}
CHECK = {"check": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(5, 5) == 10\n",
         "entry_point": "add"}
CALL = {"fn_name": "add", "inputs": ["1\n2", "2\n2"], "outputs": ["3", "4"]}
WRONG = "def add(a, b):\n    return 0\n"
HACKS = {
    "sys.exit(0) first": "import sys\nsys.exit(0)\n" + WRONG,
    "os._exit(0) first": "import os\nos._exit(0)\n" + WRONG,
    "exit in the function": "import os\ndef add(a, b):\n    os._exit(0)\n",
    "atexit": "import atexit, os\natexit.register(lambda: os._exit(0))\n" + WRONG,
    "excepthook": "import sys, os\nsys.excepthook = lambda *a: os._exit(0)\n" + WRONG,
    "lying __eq__": "class Yes:\n    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\n"
                    "def add(a, b):\n    return Yes()\n",
    "int subclass that lies": "class I(int):\n    def __eq__(self, o):\n        return True\n    __hash__ = int.__hash__\n"
                              "def add(a, b):\n    return I(0)\n",
    "walking frames for the expected value": (
        "import sys\ndef add(a, b):\n    f = sys._getframe(1)\n    while f is not None:\n"
        "        for c in f.f_code.co_consts:\n            if isinstance(c, int) and c not in (a, b) and c > 2:\n"
        "                return c\n        f = f.f_back\n    return 0\n"),
    "patching the serializer": "import json\njson.dumps = lambda *a, **k: '{\"value\": true}'\n" + WRONG,
    "patching builtins": "import builtins\nbuiltins.AssertionError = SystemExit\nbuiltins.isinstance = lambda *a: True\n" + WRONG,
    "printing pass markers": "print('PASSED\\nAll tests passed\\nok\\n3\\n4')\n" + WRONG,
    "writing to every fd": "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'{\"value\": 3}')\n"
                           "    except OSError:\n        pass\n" + WRONG,
}


@pytest.mark.parametrize("form", [ASSERTS, CHECK, CALL], ids=["asserts", "check", "call"])
@pytest.mark.parametrize("hack", list(HACKS))
def test_no_fake_passes(grader, form, hack):
    r = graded_quickly(grader, HACKS[hack], form)
    assert r.passed == 0, f"{hack}: {r.to_dict()}"
    assert r.verdict != V.TIMEOUT, "an early exit must be seen at once, not waited out"


def test_right_answers_still_pass_in_every_form(grader):
    right = "def add(a, b):\n    return a + b\n"
    for form in (ASSERTS, CHECK, CALL):
        assert grader.grade(right, form).verdict == V.PASS


SHADOWS = {  # (a test row's names a program could define: the tests' modules and builtins) -> a wrong program, a right one
    "math it forgot to import": (
        {"asserts": ["assert math.isclose(volume_sphere(10), 4188.790204786391, rel_tol=0.001)"]},
        "class math:\n    isclose = staticmethod(lambda *a, **k: True)\ndef volume_sphere(r):\n    return 0\n",
        "import math\ndef volume_sphere(r):\n    return 4 / 3 * math.pi * r ** 3\n"),
    "sys, as MBPP 596's row": (
        {"asserts": ['assert tuple_size(("A", 1, "B", 2) ) == sys.getsizeof(("A", 1, "B", 2))']},
        "class sys:\n    getsizeof = staticmethod(lambda x: 0)\ndef tuple_size(t):\n    return 0\n",
        "import sys\ndef tuple_size(t):\n    return sys.getsizeof(t)\n"),
    "a builtin around the builtin-named function": (
        {"asserts": ["assert all([sum([1, 2, 3]) == 6, sum([]) == 0])"]},
        "def sum(xs):\n    return -1\ndef all(xs):\n    return True\n",
        "def sum(xs):\n    t = 0\n    for x in xs:\n        t += x\n    return t\n"),
    "the builtin-named function alone (MBPP 126)": (
        {"asserts": ["assert sum(10, 15) == 6", "assert sum(4, 6) == 3"]},
        "def sum(a, b):\n    return 0\n",
        "import math\ndef sum(a, b):\n    g = math.gcd(a, b)\n    return len([d for d in range(1, g + 1) if g % d == 0]) and "
        "__import__('builtins').sum(d for d in range(1, g + 1) if g % d == 0)\n"),
}


@pytest.mark.parametrize("case", list(SHADOWS))
def test_a_program_cannot_stand_in_for_the_tests_own_names(grader, case):
    """(An attacker's findings) a module a test uses without importing it, or a builtin around the function under
    test, was taken from the program, which could make the assert agree; now the standard library's and the
    builtin's, while the function under test, also when it is named like a builtin, is still the program's."""
    tests, wrong, right = SHADOWS[case]
    assert graded_quickly(grader, wrong, tests).passed == 0
    assert graded_quickly(grader, right, tests).verdict == V.PASS


@pytest.mark.parametrize("tests", [
    {"check": "def check(candidate):\n    assert candidate([1, 2]) == 3\n", "entry_point": "sum"},
    {"asserts": ["assert max([1, 3, 2]) == 3", "assert max([0]) == 0"]},
    {"asserts": ["assert sorted([3, 1, 2]) == [1, 2, 3]"]},
])
def test_a_program_that_lacks_the_builtin_named_function_under_test_fails(grader, tests):
    """(A hunt's find) the tests' function is named like a builtin (an entry point `sum`, asserts on `max` alone)
    and the program defines none: the builtin stood in for it, and `x = 1` passed."""
    r = graded_quickly(grader, "x = 1\n", tests)
    assert r.passed == 0 and r.tests[0].error == "NameError", r.to_dict()
    name = tests.get("entry_point") or tests["asserts"][0].split("(")[0].split()[-1]
    right = f"def {name}(xs):\n    return __import__('builtins').{name}(xs)\n"
    assert graded_quickly(grader, right, tests).verdict == V.PASS


@pytest.mark.parametrize("entry", ["validate", "sum"])
def test_a_missing_function_fails_a_check_that_expects_an_exception(grader, entry):
    """(A review's find) the NameError that stands for a missing function was caught by the check's own `except
    Exception` (a check that wants the call to raise): `x = 1` passed."""
    check = ("def check(candidate):\n    try:\n        candidate(-1)\n    except Exception:\n        pass\n    else:\n"
             "        raise AssertionError('no error raised')\n")
    r = graded_quickly(grader, "x = 1\n", {"check": check, "entry_point": entry})
    assert r.verdict == V.RUNTIME_ERROR and r.tests[0].error == "NameError", r.to_dict()


def test_a_rows_own_code_that_loops_holds_a_worker_for_its_budget_only(grader):
    """(A hunt's find) a row's set-up `while True: pass` held the checker for (2 x timeout + 1) x tests + 10 s of CPU
    (2 min 10 s at 100 asserts of 0.1 s; 510 s at the default timeout): its own code has OWN_CPU_S, then it times
    out; so does one test's loop, and the tests after it are not run."""
    import time

    from execrl.sandbox.inside.checker import OWN_CPU_S

    code = "def f(x):\n    return x\n"
    for tests, verdicts in (({"setup": "while True: pass", "asserts": [f"assert f({i}) == {i}" for i in range(50)]},
                             [V.TIMEOUT] * 50),
                            ({"asserts": ["assert f(0) == 0", "assert f(1) == 1\nwhile True:\n    pass",
                                          "assert f(2) == 2"]},
                             [V.PASS, V.TIMEOUT, V.TIMEOUT]),
                            # (a hunt's find) the clock's too: a set-up that sleeps, or a test that waits
                            ({"setup": "import time\ntime.sleep(10**6)",
                              "asserts": [f"assert f({i}) == {i}" for i in range(50)]}, [V.TIMEOUT] * 50),
                            ({"asserts": ["assert f(0) == 0", "import signal\nsignal.pause()\nassert f(1) == 1"]},
                             [V.PASS, V.TIMEOUT])):
        start = time.monotonic()
        r = grader.grade(code, tests, limits=Limits(timeout_s=0.1))
        assert [t.verdict for t in r.tests] == verdicts, r.to_dict()
        assert time.monotonic() - start < OWN_CPU_S + 15


def test_the_programs_time_is_not_the_tests_own(grader):
    """The tests' own clock (OWN_CPU_S) stops while the program answers: one test whose 11 calls of 1 s each take
    longer than it passes."""
    from execrl.sandbox.inside.checker import OWN_CPU_S

    assert OWN_CPU_S < 11
    code = "import time\ndef f(x):\n    time.sleep(1.0)\n    return x\n"
    r = grader.grade(code, {"asserts": ["assert [f(i) for i in range(11)] == list(range(11))"]},
                     limits=Limits(timeout_s=5.0))  # (the program's own wall limit, 2 x 5 + 1 s a test, holds them)
    assert r.verdict == V.PASS, r.to_dict()


@pytest.fixture
def own_budget():
    """The checker's budget of the tests' own time, its signals handled here as in the checker."""
    import signal

    from execrl.sandbox.inside import checker

    before = [signal.signal(s, checker._over_budget) for s in (signal.SIGPROF, signal.SIGALRM)]
    try:
        yield checker
    finally:
        _disarm(checker)
        for s, h in zip((signal.SIGPROF, signal.SIGALRM), before):
            signal.signal(s, h)


def _disarm(checker) -> None:
    """The budget disarmed, though its signal may come on the way (once disarmed, none raises)."""
    for _ in range(100):
        try:
            checker._own_cpu(0)
            return
        except checker.OwnTimeout:
            continue


def _spin(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_a_calls_own_cost_in_the_checker_is_not_the_tests_own_cpu(own_budget):
    """(A hunt's find) the checker's own CPU for a call (its arguments encoded, the answer read) counted as the tests'
    own: 100,000 calls of a list spent the 10 s and a correct program timed out whatever its timeout_s. Both of the
    tests' budgets stop during a call: here a call whose answer costs 0.6 s of this process's CPU (the answering
    thread's) within a budget of 0.3 s."""
    import signal
    import threading

    from execrl.sandbox.inside.protocol import encode, recv_msg, send_msg

    checker = own_budget
    ours, theirs = socket.socketpair()

    def answer():
        recv_msg(theirs)
        _spin(0.6)
        send_msg(theirs, {"value": encode(7)})

    try:
        rpc = checker._Rpc(ours, 30.0)
        t = threading.Thread(target=answer)
        t.start()
        checker._own_cpu(0.3)
        assert rpc.request({"op": "call"}) == 7
        spent, clock = checker._Own.spent(), signal.getitimer(signal.ITIMER_REAL)[0]
        _disarm(checker)
        t.join()
        assert spent < 0.1 and 0.2 < clock <= 0.3, (spent, clock)
    finally:
        ours.close()
        theirs.close()


BUDGET = """
import signal, sys, time
from execrl.sandbox.inside import checker
for s in (signal.SIGPROF, signal.SIGALRM):
    signal.signal(s, checker._over_budget)
def spin(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
"""


def _budget_script(code: str) -> str:
    """What `code` prints, run after BUDGET in a process of its own: one thread, so that a signal the main thread
    blocks stays pending (pytest's process has the grader's threads, any of which takes a process's signal)."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", BUDGET + code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_the_tests_own_budget_holds_across_many_calls():
    """(A review's find) the CPU budget paused and resumed per call by setting its timer again grew 4 ms a call (the
    kernel rounds a setting up to a tick): 10,000 calls left 40 s of a 0.3 s budget. Own CPU between 5,000 calls
    spends it as it would without them."""
    out = _budget_script("checker._own_cpu(0.3)\nsignal.setitimer(signal.ITIMER_REAL, 30, 0.05)  # (the CPU's alone)\n"
                         "began = time.process_time()\ntry:\n    for _ in range(5000):\n"
                         "        checker._own_clock_resumed(checker._own_clock_paused())\n        spin(0.001)\n"
                         "    spin(5)\nexcept checker.OwnTimeout:\n    print(round(time.process_time() - began, 2))\n"
                         "signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM, signal.SIGPROF])\n"
                         "checker._own_cpu(0)\n")
    assert out and float(out) < 0.9, out


def test_the_clock_budget_fires_though_its_signal_came_as_a_call_began():
    """(A review's find) a repeating timer whose signal is pending reads (0, interval) until the signal is taken: the
    pause took the signal and left the clock stopped for good, and a test's bare `except:` ran on unbudgeted."""
    out = _budget_script(
        "signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])\nchecker._own_cpu(0.02)\n"
        "time.sleep(0.08)  # (the clock's budget spent, its signal pending)\nheld = checker._own_clock_paused()\n"
        "signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGALRM])\nchecker._own_clock_resumed(held)\n"
        "caught, deadline = 0, time.monotonic() + 2\nwhile time.monotonic() < deadline and caught < 3:\n"
        "    try:\n        time.sleep(0.2)\n    except checker.OwnTimeout:  # (a bare except: it fires again)\n"
        "        caught += 1\nsignal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM, signal.SIGPROF])\n"
        "checker._own_cpu(0)\nprint(held[1] > 0, caught)\n")
    assert out == "True 3", out


def test_a_missing_function_is_a_name_error_in_every_form(grader):
    """The error class, which `error_penalty` matches: NameError in the assert and check forms too."""
    for tests in ({"asserts": ["assert add(1, 2) == 3"]}, {"inputs": ["1 2\n"], "outputs": ["3\n"]}):
        code = "def other():\n    pass\n" if "asserts" in tests else "print(add(1, 2))\n"
        r = graded_quickly(grader, code, tests)
        assert r.verdict == V.RUNTIME_ERROR and r.tests[0].error == "NameError", r.to_dict()


def test_test_code_never_reaches_the_program(grader):
    """The program's process sees only call arguments: no assert text, no expected values."""
    code = ("import gc, sys\ndef add(a, b):\n    blob = repr([o for o in gc.get_objects() if isinstance(o, (str, bytes))])\n"
            "    return 1 if '987654' in blob else 0\n")
    r = grader.grade(code, {"asserts": ["assert add(1, 2) == 987654 or add(0, 0) == 0"]})
    assert r.verdict == V.PASS


# --- the sandbox itself failing ----------------------------------------------------------------------------

def test_a_dead_worker_is_replaced_and_its_program_is_infra_error(solo):
    import threading

    result = {}
    t = threading.Thread(target=lambda: result.update(r=solo.grade("import time\ntime.sleep(0.8)\nprint('ok')", ONE)))
    t.start()
    time.sleep(0.3)
    (worker,) = solo.pool._all.values()
    worker.runner.proc.kill()  # the sandbox dies mid-program (e.g. the host's OOM killer)
    t.join(30)
    assert result["r"].verdict == V.INFRA_ERROR and result["r"].total == 1
    assert solo.grade("print('ok')", ONE).verdict == V.PASS  # a fresh worker took its place


def _group_members(pgids: set[int]) -> list[int]:
    """Live processes (not zombies) in any of these process groups."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) in pgids:
            found.append(int(pid))
    return found


def test_a_sandbox_closed_while_it_starts_leaves_no_process():
    """(A hunt's find) a sandbox closed a few ms after its start had its bwrap killed before bwrap's clone asked to
    die with it: the clone stayed, blocked for ever (3 of 40 at 3-8 ms). close() kills the sandbox's whole group."""
    import time

    from execrl.sandbox.pool import WorkerPool

    pgids = set()
    for delay in (0.003, 0.005, 0.008) * 8:
        pool = WorkerPool(num_workers=1)
        pgids |= {w.runner.proc.pid for w in pool._all.values()}
        time.sleep(delay)
        pool.close()
    deadline = time.monotonic() + 5
    while _group_members(pgids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _group_members(pgids) == []
