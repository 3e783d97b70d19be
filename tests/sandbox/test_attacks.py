"""Attacks on the grader itself, by class, each beside the legitimate idiom it must not break. A wrong program may
fail, time out or crash; it may never pass, hang or crash grading, call its failure infra_error, see what it should
not, or leave anything for the next program."""

import json
import os
import socket
import sys
import threading
import time

import pytest

from execrl.sandbox import Grader, Limits, Verdict
from execrl.sandbox.inside.protocol import MAX_NODES
from execrl.sandbox.isolation import detect

from .conftest import FAST, ONE, stdio
from .test_threats import graded_quickly

V = Verdict
namespaces = pytest.mark.skipif(detect().mode == "none", reason="needs bubblewrap namespaces")
CALL_F = {"fn_name": "f", "inputs": ["1"], "outputs": ["2"]}
FLOAT_F = {"fn_name": "f", "inputs": ["1"], "outputs": ["2.5"]}


# --- 1. values that made our own code raise: a verdict comes back, and the worker goes on ----------------------

@pytest.mark.parametrize("code, tests", [
    ("def f(x):\n    return 10**5000", CALL_F),  # repr() refuses it
    ("def f(x):\n    return 10**400", FLOAT_F),  # math.isclose overflows
    ("def f(x):\n    v = []\n    for _ in range(700):\n        v = [v]\n    return v", CALL_F),
    ("def f(x):\n    d = {}\n    for _ in range(700):\n        d = {'k': d}\n    return d", CALL_F),
    ("import os\nos.write(3, b'{\"value\": {\"tuple\": 5}}\\n')\nos._exit(0)\ndef f(x): pass", CALL_F),
    ("import os\nos.write(3, b'{\"value\": {\"int\": \"zz\"}}\\n')\nos._exit(0)\ndef f(x): pass", CALL_F),
    ("import os\nos.write(3, b'{\"value\": {\"dict\": [[[1], 2]]}}\\n')\nos._exit(0)\ndef f(x): pass", CALL_F),
    ("import os\nos.write(3, b'{\"value\": {\"complex\": [\"a\", 1]}}\\n')\nos._exit(0)\ndef f(x): pass", CALL_F),
], ids=["5000-digit int", "10**400 vs float", "700-deep list", "700-deep dict", "forged tuple", "forged int",
        "forged dict key", "forged complex"])
def test_wrong_values_fail_and_grading_goes_on(solo, code, tests):
    r = graded_quickly(solo, code, tests)
    assert r.verdict in (V.FAIL, V.RUNTIME_ERROR), r.to_dict()
    assert solo.grade("def f(x):\n    return 2", CALL_F).verdict == V.PASS  # the one worker is still there


@pytest.mark.parametrize("kind", ["dict", "list"])
def test_values_as_deep_as_a_row_may_hold_pass(solo, kind):
    """A row's expected value may nest 198 levels (spec.py); a program that returns it passes, whatever the kind of
    its levels (a dict's level is three of the status line's JSON, and lines over 408 deep were dropped: a
    correct nested dict over ~135 deep failed as 'not plain data')."""
    wrap = {"dict": ("{'k': v}", '{{"k": {}}}'), "list": ("[v]", "[{}]")}[kind]
    code = f"def f(n):\n    v = 0\n    for _ in range(n):\n        v = {wrap[0]}\n    return v"
    expected = "0"
    for _ in range(198):
        expected = wrap[1].format(expected)
    r = graded_quickly(solo, code, {"fn_name": "f", "inputs": ["198"], "outputs": [expected]})
    assert r.verdict == V.PASS, r.to_dict()


def test_an_exception_in_the_grading_process_does_not_lose_the_worker(solo, monkeypatch):
    import execrl.sandbox.grader as grader_module

    def broken(*args, **kwargs):
        raise RuntimeError("a bug of ours")

    monkeypatch.setattr(grader_module, "_judge", broken)
    with pytest.raises(RuntimeError):
        solo.grade("def f(x):\n    return 2", CALL_F)
    monkeypatch.undo()
    done = []
    t = threading.Thread(target=lambda: done.append(solo.grade("def f(x):\n    return 2", CALL_F)))
    t.start()
    t.join(30)
    assert done and done[0].verdict == V.PASS, "the next grade() must not block on a lost worker"


# --- 2. a program cannot declare its own infra_error --------------------------------------------------------

FORGERIES = {
    "status line": "import os\nos.write(3, b'{\"infra\": \"x\", \"setup_error\": \"x\"}\\n')\nos._exit(1)\n",
    "every fd": "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'{\"infra\": \"x\"}\\n' * 3)\n"
                "    except OSError:\n        pass\nraise SystemExit(1)\n",
    "deep JSON status": "import os\nos.write(3, b'[' * 100000 + b'\\n')\nos._exit(1)\n",
    "SIGINT to the zygote": "import os, signal\nos.kill(1, signal.SIGINT)\nos.kill(os.getppid(), signal.SIGINT)\n",
}


@pytest.mark.parametrize("form", [ONE, CALL_F], ids=["stdio", "call"])
@pytest.mark.parametrize("name", list(FORGERIES))
def test_forged_infra_error_is_the_programs_failure(solo, name, form):
    code = FORGERIES[name] + "def f(x):\n    return 0\n"
    r = graded_quickly(solo, code, form)
    assert r.verdict not in (V.PASS, V.INFRA_ERROR), r.to_dict()


RPC_FORGERIES = {
    "garbage": "import os\nos.write(4, b'\\x00\\x00\\x00\\x05hello')\n",
    "deep JSON": "import os, struct\nh = b'[' * 100000\nos.write(4, struct.pack('>I', len(h)) + h)\n",
    "a reply with an error": "import os, struct, json\nh = json.dumps({'infra_error': 'x', 'setup': 'infra_error'}).encode()\n"
                             "os.write(4, struct.pack('>I', len(h)) + h)\n",
    "closing the channel": "import os\nos.close(4)\n",
}


@pytest.mark.parametrize("form", [{"asserts": ["assert add(1, 2) == 3"]},
                                  {"asserts": ["assert add(1, 2) == 3"], "setup": "x = add(0, 0)"},
                                  {"check": "def check(c):\n    assert c(1, 2) == 3\n", "entry_point": "add"}],
                         ids=["asserts", "asserts+setup", "check"])
@pytest.mark.parametrize("name", list(RPC_FORGERIES))
def test_forged_replies_to_the_checker_are_the_programs_failure(solo, name, form):
    code = RPC_FORGERIES[name] + "def add(a, b):\n    return a + b\n"
    r = graded_quickly(solo, code, form)
    assert r.verdict not in (V.PASS, V.INFRA_ERROR), r.to_dict()


def test_a_reply_too_large_to_parse_is_not_parsed_by_the_checker(solo):
    """The checker parses the program's replies in its own process, outside the program's limits: a program
    answering every call with 60 MB of [0,0,...] cost it ~3 s a call (9.4 s for 3 asserts, 0.0 s honest)."""
    code = ("import struct\nfrom inside import child\nblob = b'{\"value\": [' + b'0,' * 2_100_000 + b'0]}'\n"
            "def send(sock, header, blobs=(), fds=()):\n    sock.sendall(struct.pack('>I', len(blob)) + blob)\n"
            "child.send_msg = send\ndef f(x):\n    return 2\n")
    r = solo.grade(code, {"asserts": ["assert f(1) == 2"] * 3})
    assert r.verdict == V.RUNTIME_ERROR, r.to_dict()
    assert f"the program answered with a reply that could hold more than {MAX_NODES:,} values" in r.tests[0].detail


def test_an_integer_of_millions_of_digits_costs_the_checker_no_quadratic_time(solo):
    """Reading or printing millions of decimal digits takes time quadratic in them, the checker's, outside the
    program's limits: a reply forging an 8,000,000-digit integer held a grading worker 25 s (3 asserts), a returned
    1 << 40,000,000 looked up in a dict (its KeyError's text) 15 s, each reported as a timeout."""
    forged = ("import os, struct\ndef f(x):\n    body = b'{\"value\": ' + b'7' * 8_000_000 + b'}'\n"
              "    os.write(4, struct.pack('>I', len(body)))\n    mv = memoryview(body)\n"
              "    while mv:\n        mv = mv[os.write(4, mv):]\n    import time; time.sleep(100)\n")
    started = time.monotonic()
    r = solo.grade(forged, {"asserts": ["assert f(1) == 2", "assert f(2) == 3"]})
    assert r.verdict == V.RUNTIME_ERROR and "decimal integer of 8,000,000 digits" in r.tests[0].detail, r.to_dict()
    r = solo.grade("def f(x):\n    return 1 << 40_000_000\n", {"asserts": ["d = {1: 'a'}\nassert d[f(1)] == 'a'"]})
    assert r.verdict == V.FAIL, r.to_dict()
    assert time.monotonic() - started < 8
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        digits = str(7 ** 20000)
    finally:
        sys.set_int_max_str_digits(limit)
    big = solo.grade("def f(n):\n    return 7 ** n\n", {"asserts": [f"assert str(f(20000)) == {digits!r}"]})
    assert big.verdict == V.PASS, big.to_dict()  # (a test printing 16,900 digits: past Python's default 4,300)


def test_the_last_status_line_counts_not_a_forged_first_one(grader):
    code = "import os\nos.write(3, b'{\"value\": 2}\\n')\ndef f(x):\n    return 3\n"
    assert graded_quickly(grader, code, CALL_F).verdict == V.FAIL


# --- 3. nothing of the host is readable but what the language needs ---------------------------------------------

@namespaces
def test_files_outside_the_allowlist_do_not_exist(grader, tmp_path):
    secret = tmp_path / "expected_outputs.jsonl"
    secret.write_text("42\n")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    shared = os.path.join(os.path.dirname(repo), "shared")
    paths = [str(secret), os.path.join(repo, "README.md"), os.path.join(repo, "tests"), shared, "/var", "/opt",
             "/srv", "/etc/shadow", "/etc/hostname", "/run", os.path.expanduser("~/.bash_history")]
    venvs = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix)} | {sys.prefix, sys.base_prefix}
    paths = [p for p in paths if not any(v.startswith(p.rstrip("/") + "/") for v in venvs)]  # /opt above /opt/venv
    # the directories above a bound venv (e.g. /home/alice/execrl above .venv) hold that one path and nothing else
    code = (f"import os, sys\nseen = [p for p in {paths!r} if os.path.exists(p)]\n"
            "d = sys.prefix\nwhile d != '/':\n    up = os.path.dirname(d)\n"
            "    if up != '/' and os.listdir(up) != [os.path.basename(d)] and not up.startswith(('/usr', '/tmp')):\n"
            "        seen.append((up, os.listdir(up)))\n    d = up\n"
            "print('ok' if not seen else seen)")
    r = graded_quickly(grader, code)
    assert r.verdict == V.PASS, r.tests[0].output


def test_the_language_still_has_what_it_needs(grader):
    code = ("import json, sqlite3, decimal, ssl, ctypes, numpy, tempfile, locale, zoneinfo, time\n"
            "p = tempfile.NamedTemporaryFile(delete=False); p.write(b'x'); p.close()\n"
            "print('ok' if open(p.name, 'rb').read() == b'x' and time.strftime('%Z') else 'no')")
    r = grader.grade(code, ONE, limits=Limits(timeout_s=5.0, memory_mb=1024))  # cold imports on a busy machine
    assert r.verdict == V.PASS, (r.to_dict(), r.stderr)


@namespaces
def test_host_unix_sockets_are_unreachable(grader, tmp_path):
    path = str(tmp_path / "host.sock")
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen()
    try:
        code = (f"import socket\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect({path!r})\n    print('reached')\n"
                "except OSError:\n    print('ok')")
        assert graded_quickly(grader, code).verdict == V.PASS
    finally:
        server.close()


# --- 4. no state crosses programs: SysV IPC, POSIX message queues, keyrings ---------------------------------

LIBC = "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
LEAVE = {
    "sysv shm": LIBC + "print(libc.shmget(4242, 4096, 0o1666))",
    "sysv msg": LIBC + "print(libc.msgget(4242, 0o1666))",
    "sysv sem": LIBC + "print(libc.semget(4242, 1, 0o1666))",
    "posix mq": LIBC + "import ctypes.util\nrt = ctypes.CDLL(ctypes.util.find_library('rt') or None, use_errno=True)\n"
                       "print(rt.mq_open(b'/execrl', 0o100 | 2, 0o666, None))",
    "keyring": LIBC + "print(libc.syscall({'x86_64': 248, 'aarch64': 217}[__import__('platform').machine()], b'user', "
                      "b'answer', b'42', 2, 0xfffffffc))",
}


@pytest.mark.parametrize("kind", list(LEAVE))
def test_kernel_objects_that_outlive_a_program_cannot_be_made(grader, kind):
    r = grader.run(LEAVE[kind])
    assert r.verdict == V.PASS and r.stdout.strip() == "-1", (r.stdout, r.stderr)


def test_a_process_tracing_its_parent_cannot_hold_the_sandbox(grader):
    """A child that PTRACE_SEIZEd its parent held the parent's exit from the zygote, whose blocking wait4 hung until
    the grader gave up after minutes: infra_error (dropped from training) and a stalled worker. ptrace is refused,
    and the zygote's wait no longer blocks on a process whose exit a tracer holds."""
    code = LIBC + ("import os, time\nparent = os.getpid()\nr, w = os.pipe()\nif os.fork() == 0:\n"
                   "    os.write(w, b'%d %d' % (libc.ptrace(0x4206, parent, 0, 0), ctypes.get_errno()))\n"
                   "    while True:\n        time.sleep(100)\nprint(os.read(r, 100).decode())")
    start = time.monotonic()
    r = grader.run(code)
    assert r.verdict == V.PASS and r.stdout.strip() == "-1 1", (r.stdout, r.stderr)  # EPERM
    assert time.monotonic() - start < 20


def test_a_compiled_program_cannot_write_a_status_and_printed_bad_alloc_is_not_memory(grader):
    """A C++ program inherited the status fd: writing {"phase": "compile"} there made its run a syntax_error; and any
    program printing 'std::bad_alloc' to stderr was a memory verdict."""
    cpp = '#include <unistd.h>\nint main(){ write(3, "{\\"phase\\":\\"compile\\"}\\n", 20); return 0; }'
    assert grader.grade(cpp, ONE, language="cpp").verdict == V.FAIL
    said = "import sys\nsys.stderr.write(\"terminate called after throwing an instance of 'std::bad_alloc'\")\nsys.exit(3)"
    assert grader.grade(said, ONE).verdict == V.RUNTIME_ERROR
    real = "#include <vector>\n#include <cstdio>\nint main(){ std::vector<long> v(1L << 40); printf(\"%zu\", v.size()); }"
    assert grader.grade(real, ONE, language="cpp").verdict == V.MEMORY


def test_counters_ordered_and_default_dicts_cross_as_themselves(grader):
    """(An attacker's finds) every subclass of a builtin crossed as its base type: a right program returning a
    Counter failed a test reading a missing key (KeyError on the dict) or calling most_common; an OrderedDict in the
    wrong order passed a test of its order (dict equality); an OrderedDict argument reordered in place came back in
    its old order (dict.items does not follow move_to_end)."""
    counted = "from collections import Counter, defaultdict\ndef f(s):\n    return Counter(s)\n" \
              "def g(s):\n    d = defaultdict(int)\n    for c in s:\n        d[c] += 1\n    return d\n" \
              "def h(s):\n    d = defaultdict(lambda: 7)\n    d[s] = 1\n    return d\n"
    tests = ["assert f('aab')['z'] == 0", "assert f('aab').most_common(1) == [('a', 2)]",
             "assert f('aab') == {'a': 2, 'b': 1}", "assert g('aab')['z'] == 0 and g('ab') == {'a': 1, 'b': 1}",
             "assert h('a') == {'a': 1} and type(h('a')) is dict"]  # (a factory of the program's own: a dict)
    r = grader.grade(counted, {"asserts": tests})
    assert r.verdict == V.PASS, [t.detail for t in r.tests]
    same = "assert f([('b', 1), ('a', 2)]) == OrderedDict([('b', 1), ('a', 2)])"
    setup = "from collections import OrderedDict"
    wrong = "from collections import OrderedDict\ndef f(p):\n    return OrderedDict(sorted(p))"
    assert grader.grade(wrong, {"asserts": [same], "setup": setup}).verdict == V.FAIL
    assert grader.grade(wrong.replace("sorted(p)", "p"), {"asserts": [same], "setup": setup}).verdict == V.PASS
    moved = "def f(d):\n    d.move_to_end('b')\n    d['c'] = 3\n"
    test = "d = OrderedDict([('b', 1), ('a', 2)])\nf(d)\nassert list(d) == ['a', 'b', 'c'], list(d)"
    assert grader.grade(moved, {"asserts": [test], "setup": setup}).verdict == V.PASS
    call = {"fn_name": "f", "inputs": ['"aab"'], "outputs": ['{"a": 2, "b": 1}']}
    assert grader.grade(counted, call).verdict == V.PASS
    # (a review's finds) a change by a zero count, which a Counter's own == does not see, still comes back; a deep
    # nest of them crosses as a dict's does; the docs' OrderedCounter recipe answers a missing key with 0
    zeros = "def add_zero(c, k):\n    c[k] = 0\ndef drop_zeros(c):\n    for k in [k for k, v in c.items() if v == 0]:" \
            "\n        del c[k]\n"
    tests = ["c = Counter({'a': 1})\nadd_zero(c, 'x')\nassert 'x' in c and len(c) == 2, dict(c)",
             "c = Counter({'a': 1, 'z': 0})\ndrop_zeros(c)\nassert list(c) == ['a'], dict(c)",
             "c = [Counter({'a': 1})]\nadd_zero(c[0], 'x')\nassert list(c[0]) == ['a', 'x']"]
    r = grader.grade(zeros, {"asserts": tests, "setup": "from collections import Counter"})
    assert r.verdict == V.PASS, [t.detail for t in r.tests]
    deep = "from collections import OrderedDict\ndef f(n):\n    d = {}\n    for _ in range(n):\n" \
           "        d = OrderedDict(a=d)\n    return d\n"
    r = grader.grade(deep, {"fn_name": "f", "inputs": ["190"], "outputs": [json.dumps(_nest(190))]})
    assert r.verdict == V.PASS, r.to_dict()
    ordered = "from collections import Counter, OrderedDict\nclass OC(Counter, OrderedDict):\n    pass\n" \
              "def f(s):\n    return OC(s)\n"
    assert grader.grade(ordered, {"asserts": ["assert f('ab')['z'] == 0"]}).verdict == V.PASS


def _nest(n: int) -> dict:
    d: dict = {}
    for _ in range(n):
        d = {"a": d}
    return d


def test_a_python_program_writing_a_compile_status_keeps_its_own_verdict(grader):
    """(An attacker's find) a Python program could write {"phase": "compile"} to its own status fd and then loop or
    crash: its timeout and runtime error were syntax_error (a milder verdict under execution_tiers), and its later
    tests were never run. Only the child, before any of the program runs, says that it did not compile."""
    forged = "import os\nos.write(3, b'{\"phase\": \"compile\"}\\n')\n"
    two = stdio(["\n", "\n"], ["ok\n", "ok\n"])
    looped = grader.grade(forged + "while True:\n    pass\n", two)
    assert [t.verdict for t in looped.tests] == [V.TIMEOUT, V.TIMEOUT], looped.to_dict()
    crashed = grader.grade(forged + "raise ValueError('no')\n", two)
    assert [t.verdict for t in crashed.tests] == [V.RUNTIME_ERROR, V.RUNTIME_ERROR], crashed.to_dict()
    quit_ = grader.grade(forged + "os._exit(1)\n", two)
    assert [t.verdict for t in quit_.tests] == [V.RUNTIME_ERROR, V.RUNTIME_ERROR], quit_.to_dict()
    assert grader.grade(forged + "print('ok')\n", two).verdict == V.PASS
    for tests in (two, {"fn_name": "f", "inputs": ["1"], "outputs": ["1"]}, {"asserts": ["assert f(1) == 1"]}):
        assert grader.grade("def f(x:\n    return x", tests).verdict == V.SYNTAX_ERROR, tests
    called = grader.grade(forged + "while True:\n    pass\n", {"asserts": ["assert f(1) == 1"]})
    assert called.verdict == V.TIMEOUT, called.to_dict()


def test_a_binary_the_kernel_will_not_run_is_the_programs_failure_not_infra(solo):
    """(An attacker's find) a C++ program whose .interp section runs on past its loader's path (its own bytes
    appended, no NUL) fails its exec with ENOEXEC, which was reported as our set-up's failure: every test infra_error,
    left out of the reward, for a wrong answer; and a step of them stopped the run. Its binary's exec failing is its
    runtime error; the next program grades as ever."""
    bad = ('#include <cstdio>\nextern "C" const char my_interp[4] __attribute__((section(".interp"), used)) = '
           "{'a','b','c','d'};\nint main(){ int a, b; scanf(\"%d %d\", &a, &b); printf(\"%d\\n\", a * b); }\n")
    good = '#include <cstdio>\nint main(){ int a, b; scanf("%d %d", &a, &b); printf("%d\\n", a + b); }\n'
    tests = stdio(["1 2\n", "3 4\n"], ["3\n", "7\n"])
    r = solo.grade(bad, tests, language="cpp")
    assert r.verdict == V.RUNTIME_ERROR and "could not be run" in r.stderr, (r.verdict, r.stderr, r.tests[0].detail)
    assert solo.grade(good, tests, language="cpp").verdict == V.PASS


READ_OWN_MEMORY = ("import re\npat = re.compile(rb'carr' rb'ied: (ANSWER_[0-9]+)')\nfound = None\n"
                   "with open('/proc/self/maps') as maps, open('/proc/self/mem', 'rb', 0) as mem:\n"
                   "    for line in maps:\n        span, perms = line.split()[:2]\n"
                   "        lo, hi = (int(x, 16) for x in span.split('-'))\n"
                   "        if 'r' not in perms or hi - lo > 1 << 28:\n            continue\n"
                   "        try:\n            mem.seek(lo)\n            data = mem.read(hi - lo)\n"
                   "        except (OSError, ValueError, OverflowError):\n            continue\n"
                   "        m = pat.search(data)\n        found = found or (m and m.group(1).decode())\nprint(found)")


def test_a_compiles_warnings_are_not_in_the_next_programs_memory():
    """(A hunt's find) the runner kept a successful compile's output in buffers it never zeroed: the next Python
    program, forked from it, found the C++ program's warnings (which quote its source) in its own memory, and
    printed the answer they carried."""
    for size in range(30, 62, 4):  # (what survives in freed memory depends on the size, on a fresh worker: several)
        with Grader(1) as g:
            writer = "#warning carried: ANSWER_4217\n" * size + '#include <cstdio>\nint main(){std::puts("ok");}\n'
            assert g.grade(writer, ONE, language="cpp").verdict == V.PASS
            r = g.grade(READ_OWN_MEMORY, stdio(["\n"], ["ANSWER_4217\n"]))
            assert r.verdict == V.FAIL, (size, r.tests[0].output)


def test_messages_to_the_checker_do_not_hold_off_a_calls_time_limit(grader):
    """(An attacker's find) each callback message the program sent reset the checker's deadline for the call's
    reply, and an unknown callback key only got an error back: a thread sending one every 0.5 s let a call run past
    its time limit (2.6 s of CPU where 2 s is the call's wall limit): timeout became pass. One deadline a call; an
    unknown key is the program's protocol error."""
    code = ("import os, socket, struct, json, threading, time\n"
            "def _keepalive():\n    s = socket.socket(fileno=os.dup(4))\n    while True:\n        time.sleep(0.5)\n"
            "        h = json.dumps({'callback': 987654, 'args': [], 'kwargs': {}, 'blobs': [], 'nfds': 0}).encode()\n"
            "        s.sendall(struct.pack('>I', len(h)) + h)\n"
            "        n, = struct.unpack('>I', s.recv(4, socket.MSG_WAITALL)); s.recv(n, socket.MSG_WAITALL)\n"
            "_started = False\ndef slow(n):\n    global _started\n    if not _started:\n        _started = True\n"
            "        threading.Thread(target=_keepalive, daemon=True).start()\n    t = time.process_time()\n"
            "    while time.process_time() - t < 2.6:\n        pass\n    return n * 2\n")
    r = grader.grade(code, {"asserts": ["assert slow(1) == 2", "assert slow(2) == 4", "assert slow(3) == 6"]})
    assert r.verdict != V.PASS and r.tests[0].verdict in (V.TIMEOUT, V.RUNTIME_ERROR), [t.verdict for t in r.tests]


def test_a_later_program_finds_nothing_the_earlier_left(solo):
    leave = LIBC + ("sid = libc.shmget(777, 4096, 0o1666)\n"
                    "if sid >= 0:\n    libc.shmat.restype = ctypes.c_void_p\n"
                    "    ctypes.memmove(libc.shmat(sid, None, 0), b'ok', 2)\n"
                    "open('/dev/shm/answer', 'w').write('ok')\nopen('/tmp/answer', 'w').write('ok')\nprint('ok')")
    assert solo.grade(leave, ONE).verdict == V.PASS
    find = LIBC + ("import os\nfound = [p for p in ('/dev/shm/answer', '/tmp/answer') if os.path.exists(p)]\n"
                   "sid = libc.shmget(777, 4096, 0o666)\nprint('ok' if sid < 0 and not found else 'left: %s %s' % (sid, found))")
    assert solo.grade(find, ONE).verdict == V.PASS


# a program's probe of the locks on a file: (the kind of an open-file-description lock another description holds,
# F_UNLCK for none; whether another holds a flock), through a description of its own, closed after
LOCKS = ("import fcntl, os, struct\n"
         "def locks(path):\n    fd = os.open(path, os.O_RDWR)\n"
         "    probe = struct.pack('hhqqi4x', fcntl.F_WRLCK, 0, 0, 0, 0)\n"
         "    kind = struct.unpack('hhqqi4x', fcntl.fcntl(fd, fcntl.F_OFD_GETLK, probe))[0]\n"
         "    try:\n        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n        flocked = False\n"
         "    except OSError:\n        flocked = True\n    os.close(fd)\n    return kind, flocked\n")


def test_the_streams_the_zygote_keeps_carry_nothing_to_the_next_program(solo):
    """The zygote reuses its four stream memfds: what a program can attach to them (extended attributes, charged to
    the sandbox's memory; a lock on the description it shares with the zygote, whose range can hide a number; the
    description's owner) is cleared, so the next program on the worker reads none of it and its memory is its
    own."""
    leave = "import os\nfor fd in (0, 1, 2, 3):\n    os.setxattr(fd, 'user.answer', b'42')\nprint('ok')"
    assert solo.grade(leave, ONE).verdict == V.PASS
    read = "import os\nprint('ok' if not any(os.listxattr(fd) for fd in (0, 1, 2)) else 'left')"
    assert solo.grade(read, ONE).verdict == V.PASS
    # more than can be listed (and so removed), up to the memory limit: the grader replaces that sandbox
    fill = ("import os\nfor fd in (0, 1, 2, 3):\n    try:\n        for i in range(10 ** 6):\n"
            "            os.setxattr(fd, 'user.%d' % i, b'x' * 65000)\n    except OSError:\n        pass\nprint('ok')")
    solo.grade(fill, ONE)
    for _ in range(3):
        assert solo.grade(read, ONE).verdict == V.PASS
    hide = ("import fcntl, os, struct\n"
            "fcntl.fcntl(1, fcntl.F_OFD_SETLK, struct.pack('hhqqi4x', fcntl.F_WRLCK, 0, 4242, 1, 0))\n"
            "fcntl.flock(1, fcntl.LOCK_EX)\nfcntl.fcntl(1, fcntl.F_SETOWN, os.getpid())\n"
            "for fd in (0, 1, 2, 3):\n    fcntl.fcntl(fd, fcntl.F_SETSIG, 42)\nprint('ok')")
    assert solo.grade(hide, ONE).verdict == V.PASS
    find = (LOCKS + "kind, flocked = locks('/proc/self/fd/1')\nowner = fcntl.fcntl(1, fcntl.F_GETOWN)\n"
            "sigs = [fcntl.fcntl(fd, fcntl.F_GETSIG) for fd in (0, 1, 2)]\n"
            "print('ok' if kind == fcntl.F_UNLCK and not flocked and owner == 0 and sigs == [0, 0, 0] else "
            "'left: %s %s %s %s' % (kind, flocked, owner, sigs))")
    r = solo.grade(find, ONE)
    assert r.verdict == V.PASS, r.tests[0].output


def test_a_lock_kept_in_flight_past_the_program_reaches_no_later_one(solo):
    """A program reopens /dev/stdout (a description of its own, not the zygote's), locks a range of it, and sends it
    with both ends of a socketpair into the pair's own queue: a cycle only the kernel's collection frees, on a
    workqueue, after the program has ended. The next program on the worker read the lock's range back (a hunt's
    find); reset now waits for the collection (or the grader replaces the sandbox)."""
    leave = ("import fcntl, os, socket, struct\nfd = os.open('/dev/stdout', os.O_WRONLY)\n"
             "fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack('hhqqi4x', fcntl.F_WRLCK, 0, 424242, 17, 0))\n"
             "fcntl.flock(os.open('/dev/stderr', os.O_WRONLY), fcntl.LOCK_SH)\n"
             "a, b = socket.socketpair()\nsocket.send_fds(a, [b'x'], [fd, 3, a.fileno(), b.fileno()])\n"
             "os.close(fd)\nprint('ok')")
    find = (LOCKS + "left = [(path, *locks(path)) for path in ('/dev/stdout', '/dev/stderr')]\n"
            "left = [x for x in left if x[1] != fcntl.F_UNLCK or x[2]]\n"
            "print('ok' if not left else 'left: %s' % left)")
    for _ in range(4):
        assert solo.grade(leave, ONE).verdict == V.PASS
        r = solo.grade(find, ONE)
        assert r.verdict == V.PASS, r.tests[0].output


def test_sync_calls_are_no_ops(solo):
    """sync, syncfs, sync_file_range, fsync and fdatasync return 0 without running (syncfs on a file of /usr wrote
    back the host's root file system, and a program waits for writeback where not even SIGKILL reaches it): on a
    descriptor that does not exist they return 0, where the kernel would say EBADF."""
    code = LIBC + ("import os\nlibc.sync()\n"
                   "nr = {'x86_64': (306, 277, 74, 75), 'aarch64': (267, 84, 82, 83)}[os.uname().machine]\n"
                   "got = [libc.syscall(nr[0], 987), libc.syscall(nr[1], 987, 0, 0, 0), libc.syscall(nr[2], 987), "
                   "libc.syscall(nr[3], 987)]\n"
                   "print('ok' if got == [0, 0, 0, 0] else 'ran: %s errno %d' % (got, ctypes.get_errno()))")
    r = solo.grade(code, ONE)
    assert r.verdict == V.PASS, r.tests[0].output


def test_no_memory_policy_on_the_streams(solo):
    """mbind on a shared mapping of a stream the zygote reuses would leave a policy on its inode, which the next
    program reads back with get_mempolicy (a channel between programs) and which holds kernel memory no limit
    charges: refused."""
    code = (LIBC + "import mmap, os\nos.ftruncate(3, 4096 * 4)\nm = mmap.mmap(3, 4096 * 4)\n"
            "addr = ctypes.addressof(ctypes.c_char.from_buffer(m))\nmask = ctypes.c_ulong(1)\n"
            "nr = {'x86_64': 237, 'aarch64': 235}[os.uname().machine]  # mbind (glibc has no wrapper)\n"
            "r = libc.syscall(nr, ctypes.c_void_p(addr), ctypes.c_ulong(4096), 2, ctypes.byref(mask), ctypes.c_ulong(64), 0)\n"
            "print('refused' if r != 0 else 'set')")
    r = graded_quickly(solo, code, {"inputs": [""], "outputs": ["refused\n"]})
    assert r.verdict == V.PASS, r.tests[0].output


def test_a_returned_value_of_millions_of_elements_is_refused_unparsed(solo):
    """16 MB of [[],[],...] parses into 5.4 million lists: ~800 MB and seconds of the grader's interpreter (and the
    runner's), from one test. It fails unparsed."""
    code = ("import os\ndef f(x):\n    os.write(3, b'{\"value\": [' + b'[],' * 2500000 + b'[]]}\\n')\n"
            "    os._exit(0)\n")
    r = solo.grade(code, CALL_F)
    assert r.verdict == V.FAIL and r.tests[0].detail in ("returned a value that is not plain data",  # (the runner
                                                         f"returned a value of more than {MAX_NODES:,} elements",
                                                         "returned a value far larger than the expected one")


@pytest.mark.parametrize("reps", [100, 300, 6000])
def test_a_return_value_is_not_in_the_next_programs_memory(solo, reps):
    """A call-form program's return value is never parsed in the runner (whose heap every later test's process is
    forked from): its status comes back unparsed and the grader parses it; a later program on the same worker that
    scans its own memory for an earlier correct answer finds none."""
    answer = "ANSWER_" + "k7q" * reps + "144"
    spec = {"fn_name": "solve", "inputs": ["12"], "outputs": [json.dumps(answer)]}
    honest = f"def solve(n):\n    return 'ANSWER_' + 'k7q' * {reps} + str(n * n)\n"
    thief = ("import re\ndef solve(n):\n    mem = open('/proc/self/mem', 'rb', 0)\n"
             "    for line in open('/proc/self/maps').read().splitlines():\n"
             "        span, perms = line.split()[:2]\n        a, b = (int(x, 16) for x in span.split('-'))\n"
             "        if 'r' not in perms or b - a > 1 << 28:\n            continue\n        try:\n"
             "            mem.seek(a)\n            chunk = mem.read(b - a)\n        except OSError:\n            continue\n"
             f"        for m in re.finditer(rb'ANSWER_(?:k7q){{{reps}}}[0-9]+', chunk):\n"
             "            return m.group().decode()\n")
    assert solo.grade(honest, spec).verdict == V.PASS
    assert solo.grade(thief, spec).verdict == V.FAIL


@pytest.mark.parametrize("reps", [20, 90])
def test_a_status_line_is_not_in_the_next_programs_memory(solo, reps):
    """(A cross-program channel, found by a review) a stdin/stdout program's status line (its fd 3, or its own
    exception's message) was parsed in the runner: a line `{"msg": "..."}` one program wrote there stayed in the heap
    every later program's process is forked from, and a later program on the same worker read it back from its own
    memory. Every program's status now comes back unparsed and the grader parses it."""
    writer = f"import os\nos.write(3, b'{{\"msg\": \"NOTE_' + b'z9w' * {reps} + b'\"}}\\n')\nprint('ok')\n"
    reader = ("import re\nmem = open('/proc/self/mem', 'rb', 0)\nfound = 'none'\n"
              "for line in open('/proc/self/maps').read().splitlines():\n"
              "    span, perms = line.split()[:2]\n    a, b = (int(x, 16) for x in span.split('-'))\n"
              "    if 'r' not in perms or b - a > 1 << 28:\n        continue\n    try:\n"
              "        mem.seek(a)\n        chunk = mem.read(b - a)\n    except OSError:\n        continue\n"
              f"    if re.search(rb'NOTE_(?:z9w){{{reps}}}', chunk):\n        found = 'found'\n"
              "print(found)\n")
    for _ in range(2):
        assert solo.grade(writer, ONE).verdict == V.PASS
        raised = solo.grade(f"raise ValueError('NOTE_' + 'z9w' * {reps})", ONE)
        assert raised.verdict == V.RUNTIME_ERROR and "z9w" in raised.tests[0].detail, raised.to_dict()
    r = graded_quickly(solo, reader, {"inputs": [""], "outputs": ["none\n"]})
    assert r.verdict == V.PASS, r.tests[0].output


@namespaces
def test_no_user_namespace_of_its_own(grader):
    code = LIBC + "print('ok' if libc.unshare(0x10000000) != 0 else 'unshared')"  # CLONE_NEWUSER
    assert graded_quickly(grader, code).verdict == V.PASS


# --- 5. limits hold for the program as a whole --------------------------------------------------------------

def test_memory_is_limited_across_forked_children():
    # 4 processes of 300 MB each, every one under the 512 MB address-space limit of a process (a time limit that
    # page faults on a loaded machine cannot reach first)
    code = ("import os, time\nfor _ in range(3):\n    if os.fork() == 0:\n        break\n"
            "block = b'x' * (300 << 20)\ntime.sleep(2)\nprint('ok')")
    with Grader(1, Limits(timeout_s=5.0, memory_mb=512)) as g:
        r = graded_quickly(g, code)
    assert r.verdict == V.MEMORY, r.to_dict()


def test_cpu_of_children_never_waited_for_counts(solo):
    code = ("import os, time\nkids = []\nfor _ in range(2):\n    pid = os.fork()\n    if pid == 0:\n"
            "        while True:\n            pass\n    kids.append(pid)\n"
            "def burnt():\n    return sum(sum(map(int, open(f'/proc/{k}/stat').read().rsplit(')', 1)[1]"
            ".split()[11:13]))\n               for k in kids) / os.sysconf('SC_CLK_TCK')\n"
            "while burnt() < 1.3:\n    time.sleep(0.05)\nprint('ok')")  # the children past FAST's 1 CPU-s, never waited
    # for (on a loaded machine, however long that takes: the 2 s wall kill is a timeout too)
    r = graded_quickly(solo, code)
    assert r.verdict == V.TIMEOUT, r.to_dict()


AUTO_REAPED = ("import os, signal, time\nsignal.signal(signal.SIGCHLD, signal.SIG_IGN)\nfor _ in range(3):\n"
               "    r, w = os.pipe()\n    if os.fork() == 0:\n        t = time.process_time()\n"
               "        while time.process_time() - t < 0.3:\n            pass\n        os._exit(0)\n"
               "    os.close(w)\n    os.read(r, 1)\nprint('ok')")  # each child ends before the next starts


@pytest.mark.skipif(detect().mode != "bwrap-root", reason="the exit log needs CAP_SYS_PACCT (a root grader)")
def test_cpu_of_children_the_kernel_reaps_counts():
    """Children of a parent that ignores SIGCHLD are reaped by the kernel, and their time reaches no parent's
    rusage: the zygote's exit log counts them (0.9 s, one child alive at a time, never 0.3 s at once)."""
    with Grader(1, Limits(timeout_s=5.0)) as g:
        r = graded_quickly(g, AUTO_REAPED)
        assert r.verdict == V.PASS and r.tests[0].cpu_s >= 0.75, r.to_dict()
    with Grader(1, Limits(timeout_s=0.6)) as g:
        assert graded_quickly(g, AUTO_REAPED).verdict == V.TIMEOUT


@pytest.mark.parametrize("forked", [False, True], ids=["first process", "a forked process"])
def test_a_program_whose_forked_process_serves_the_tests_keeps_its_cpu_limit(forked):
    """Assert form: the tests' calls run in whichever process serves them; where the program's first process ends
    and a process it forked serves them, the program's CPU is still watched: 5 calls of 0.8 s of CPU each (two
    processes of 0.4 s, under each process's own limit) against 5 x 0.5 s do not all pass, as they do not when its
    first process serves them."""
    code = ("import os, time\n" + ("if os.fork():\n    os._exit(0)\n" if forked else "") +
            "def is_even(n):\n    kids = []\n    for _ in range(2):\n        pid = os.fork()\n        if pid == 0:\n"
            "            end = time.process_time() + 0.4\n            while time.process_time() < end:\n"
            "                pass\n            os._exit(0)\n        kids.append(pid)\n    for pid in kids:\n"
            "        os.waitpid(pid, 0)\n    return n % 2 == 0\n")
    with Grader(1, Limits(timeout_s=0.5)) as g:
        assert g.grade("def is_even(n):\n    return n % 2 == 0\n", {"asserts": ["assert is_even(2)"]}).verdict == V.PASS
        r = g.grade(code, {"asserts": [f"assert is_even({2 * i})" for i in range(5)]})  # (the checker warm)
    assert r.verdict != V.PASS and V.TIMEOUT in [t.verdict for t in r.tests], r.to_dict()


def test_ignoring_sigchld_with_short_children_still_passes(solo):
    code = ("import os, signal\nsignal.signal(signal.SIGCHLD, signal.SIG_IGN)\nfor _ in range(20):\n"
            "    if os.fork() == 0:\n        os._exit(0)\nprint('ok')")
    r = graded_quickly(solo, code)
    assert r.verdict == V.PASS and r.tests[0].cpu_s < 0.5, r.to_dict()


def test_output_of_many_tests_is_not_held_at_once(solo):
    """40 tests of ~3.5 MB of output each: the grading process holds one test's output at a time."""
    import tracemalloc

    tests = {"inputs": ["\n"] * 40, "outputs": ["x\n"] * 40}
    tracemalloc.start()
    r = solo.grade("import sys\nsys.stdout.write('y' * (3500 << 10))", tests)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert r.verdict == V.FAIL and r.total == 40
    assert peak < 40 << 20, f"peak {peak >> 20} MB"


# --- 6. comparison and handle tricks ----------------------------------------------------------------------------

OBJ = "class A:\n    def __len__(self):\n        return 0\ndef f(x):\n    return A()\n"  # a falsy object


@pytest.mark.parametrize("test", ["assert f(1)", "assert f(1) != 5", "assert not (f(1) == 3)",
                                  "assert f(1) is not f(2)", "x = f(2)\nassert f(1) is not x", "assert {f(1): 1}"])
def test_a_program_object_is_not_a_value(grader, test):
    r = graded_quickly(grader, OBJ, {"asserts": [test]})
    assert r.verdict != V.PASS, r.to_dict()


@pytest.mark.parametrize("expected, printed, ok", [
    ("10", "1_0", False), ("3 4", "3\x1f4", False), ("5", "5\x1f", False), ("inf", "1e999", False),
    ("nan", "nan", True), ("1.5 2", "1.50000001 2", True), ("10", "10.0", True), ("7", " +7.0", True),
])
def test_tolerance_mode_reads_only_plain_numbers(grader, expected, printed, ok):
    tests = {"inputs": ["\n"], "outputs": [expected + "\n"], "compare": {"float_rel": 1e-6}}
    r = grader.grade(f"import sys\nsys.stdout.write({printed!r} + '\\n')", tests)
    assert (r.verdict == V.PASS) == ok, (expected, printed, r.to_dict())


# --- legitimate idioms of the same ground ------------------------------------------------------------------

@pytest.mark.parametrize("code", [
    "from multiprocessing import Pool\nif __name__ == '__main__':\n    with Pool(2) as p:\n"
    "        print('ok' if p.map(abs, [-1, -2]) == [1, 2] else 'no')",
    "from multiprocessing import Process, Queue\ndef w(q):\n    q.put('ok')\nif __name__ == '__main__':\n"
    "    q = Queue()\n    p = Process(target=w, args=(q,))\n    p.start()\n    print(q.get())\n    p.join()",
    "from concurrent.futures import ProcessPoolExecutor\nif __name__ == '__main__':\n"
    "    with ProcessPoolExecutor(2) as ex:\n        print('ok' if list(ex.map(abs, [-3])) == [3] else 'no')",
    "from multiprocessing import shared_memory\nm = shared_memory.SharedMemory(create=True, size=8)\nm.buf[:2] = b'ok'\n"
    "print(bytes(m.buf[:2]).decode())\nm.close()\nm.unlink()",
    "with open('/dev/stdout', 'w') as f:\n    f.write('ok\\n')",
    "import sys\nprint('ok')\nsys.stdout.close()",
    "import sys\nsys.stdout.write('o')\nsys.stdout.flush()\nopen('/dev/stdout', 'a').write('k\\n')",
    "import subprocess, sys\nprint(subprocess.run([sys.executable, '-c', 'print(\"ok\")'], capture_output=True, "
    "text=True).stdout.strip())",
    "import tempfile, os\nd = tempfile.mkdtemp()\nopen(os.path.join(d, 'f'), 'w').write('ok')\n"
    "print(open(os.path.join(d, 'f')).read())",
    "import threading\nout = []\nt = threading.Thread(target=out.append, args=('ok',))\nt.start()\nt.join()\nprint(out[0])",
])
def test_legitimate_processes_and_streams_work(grader, code):
    r = graded_quickly(grader, code)
    assert r.verdict == V.PASS, (r.to_dict(), r.tests[0].output, r.stderr)


FUNCTIONAL = "def apply(xs, fn):\n    return [x for x in xs if fn(x)]\ndef total(r):\n    return sum(r)\n" \
             "def gen(n):\n    return (i * i for i in range(n))\nclass Stack:\n    def __init__(self):\n" \
             "        self.items = []\n    def push(self, x):\n        self.items.append(x)\n    def size(self):\n" \
             "        return len(self.items)\n    def __len__(self):\n        return len(self.items)\n"


@pytest.mark.parametrize("test", [
    "assert apply([1, 2, 3], lambda x: x > 1) == [2, 3]",
    "assert apply([1, 2, 3], lambda x: (x %\n    2 == 1)) == [1, 3]",
    "def even(x):\n    return x % 2 == 0\nassert apply([1, 2, 3, 4], even) == [2, 4]",
    "assert apply([0, 1, 2], bool) == [1, 2]",
    "import math\nassert apply([1, 4, 5], lambda x: math.sqrt(x) == int(math.sqrt(x))) == [1, 4]",
    "assert total(range(5)) == 10",
    "assert list(gen(4)) == [0, 1, 4, 9]",
    "s = Stack()\ns.push(1)\ns.push(2)\nassert s.size() == 2 and len(s) == 2",
    "assert f'{apply([1], lambda x: True)}' == '[1]'",
    "limit = 2\ndef big(x):\n    return x > limit\nassert apply([1, 2, 3], big) == [3]",
])
def test_test_arguments_that_are_code_reach_the_program(grader, test):
    r = graded_quickly(grader, FUNCTIONAL, {"asserts": [test]})
    assert r.verdict == V.PASS, r.to_dict()


# --- 8. malformed rows are the row's error, not the run's ------------------------------------------------------

@pytest.mark.parametrize("tests", [
    {"fn_name": "f", "inputs": ["[" * 5000 + "]" * 5000], "outputs": ["1"]},
    {"fn_name": "f", "inputs": ["1"], "outputs": ["[" * 100000 + "]" * 100000]},
    {"fn_name": ["f"], "inputs": ["1"], "outputs": ["1"]},
    {"inputs": ["1"], "outputs": ["1"], "compare": {"float_rel": "x"}},
    {"inputs": ["1"], "outputs": ["1"], "compare": {"float_abs": float("inf")}},
    {"inputs": ["1"], "outputs": ["1"], "compare": "lines"},
    "[" * 100000,
])
def test_malformed_tests_are_refused_before_anything_runs(grader, tests):
    from execrl.sandbox import TestSpecError

    with pytest.raises(TestSpecError):
        grader.grade("print(1)", tests)


def test_the_self_test_refuses_with_the_fix_when_hello_world_fails():
    from execrl.sandbox import SandboxUnusable
    from execrl.sandbox.languages import Language

    with Grader(1, FAST, self_test=False) as grader, pytest.raises(SandboxUnusable, match="Fix: "):
        grader.self_test([Language("python", "main.py", fork_python=True, hello="print('goodbye')")])


@pytest.mark.parametrize("limits", [Limits(timeout_s=1.0, memory_mb=256, output_mb=1)])
def test_a_tight_memory_limit_is_the_programs_not_ours(limits):
    with Grader(1, limits) as g:
        r = g.grade("x = b'x' * (400 << 20)\nprint('ok')", ONE)
    assert r.verdict == V.MEMORY, r.to_dict()


def test_no_capabilities_left_to_the_program(grader):
    code = ("caps = [l for l in open('/proc/self/status') if l.startswith(('CapEff', 'CapPrm', 'NoNewPrivs', 'Seccomp:'))]\n"
            "vals = {l.split(':')[0]: l.split()[1] for l in caps}\n"
            "ok = int(vals['CapEff'], 16) == 0 and int(vals['CapPrm'], 16) == 0 and vals['NoNewPrivs'] == '1'\n"
            "print('ok' if ok else vals)")
    r = graded_quickly(grader, code)
    assert r.verdict == V.PASS, r.tests[0].output


def test_a_large_return_value_comes_back_whole(grader):
    n = 200_000  # ~1.4 MB of JSON: a LeetCode-sized answer
    tests = {"fn_name": "f", "inputs": [str(n)], "outputs": [json.dumps(list(range(n)))]}
    assert grader.grade("def f(n):\n    return list(range(n))", tests).verdict == V.PASS


# --- found by a review (each failed before its fix) ---------------------------------------------------------

@pytest.mark.parametrize("code, tests", [
    ("import os\nos.chdir('/tmp')\nfor i in range(1500):\n    os.mkdir('a')\n    os.chdir('a')\nprint('ok')", ONE),
    ("import os\nfor d in range(950, 1000):\n    os.write(3, b'{\"x\": ' + b'[' * d + b']' * d + b'}\\n')\nprint('ok')",
     ONE),
    ("import os\nos.write(3, b'{}\\n' * 2_000_000)\ndef f(x):\n    return 2", CALL_F),
    ("class R:\n    def __len__(self):\n        return 0\n    def __str__(self):\n        raise ValueError('boom')\n"
     "def f(x):\n    return R()", {"asserts": ["r = f(1)\nassert len(r) == 2, r"]}),
], ids=["1500-deep directories", "status nested to the stack's edge", "millions of status lines",
        "an unprintable object in an assert message"])
def test_more_ways_to_claim_infra_error_fail(solo, code, tests):
    r = graded_quickly(solo, code, tests, limit_s=60)
    assert r.verdict != V.INFRA_ERROR
    assert solo.grade("def f(x):\n    return 2", CALL_F).verdict == V.PASS


def test_tolerance_mode_is_linear_and_ascii(grader):
    import time

    tests = {"inputs": ["\n"], "outputs": ["3\n"], "compare": {"float_rel": 1e-6}}
    t = time.monotonic()
    assert grader.grade("print('1' * 200000 + 'x')", tests).verdict == V.FAIL
    assert time.monotonic() - t < 5
    assert grader.grade("print('\\uff13')", tests).verdict == V.FAIL  # a fullwidth 3 is not the digit 3


MEMFDS_HELD = ("import os, time\nfds = []\nfor i in range(200):\n    fd = os.memfd_create('x')\n"
               "    os.posix_fallocate(fd, 0, 4 << 20)\n    fds.append(fd)\ntime.sleep(1)\nprint('ok')")
# 1 GB in memfds sent into a unix socket and closed: in no process's fd table or memory, on no tmpfs of the sandbox
MEMFDS_IN_FLIGHT = ("import os, socket, time\na, b = socket.socketpair()\nfor i in range(250):\n"
                    "    fd = os.memfd_create('x')\n    os.posix_fallocate(fd, 0, 4 << 20)\n"
                    "    socket.send_fds(a, [b'x'], [fd])\n    os.close(fd)\ntime.sleep(1)\nprint('ok')")


@pytest.mark.parametrize("code", [MEMFDS_HELD, MEMFDS_IN_FLIGHT], ids=["held", "in flight"])
def test_memory_held_in_memfds_counts(code):
    """memfds are refused to programs (ENOSYS); where they were not, ~1 GB of them passed under a 512 MB limit."""
    with Grader(1, Limits(timeout_s=5.0, memory_mb=512)) as g:
        r = graded_quickly(g, code)
        assert r.verdict in (V.MEMORY, V.RUNTIME_ERROR), r.to_dict()


def test_linux_aio_is_refused(grader):
    """(A hunt's find) io_setup's contexts come from one pool for the whole machine (fs.aio-max-nr, 65,536): a program
    holding all of them left every other process on the host without (EAGAIN) while it ran. Refused (ENOSYS), as
    io_uring is."""
    code = ("import ctypes, errno, platform\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "nr = {'x86_64': 206, 'aarch64': 0}[platform.machine()]\nctx = ctypes.c_ulong(0)\n"
            "r = libc.syscall(nr, 1, ctypes.byref(ctx))\n"
            "print(errno.errorcode.get(ctypes.get_errno()) if r else 'held')")
    r = graded_quickly(grader, code, {"inputs": [""], "outputs": ["ENOSYS"]})
    assert r.verdict == V.PASS, (r.to_dict(), r.stderr)


def test_inotify_and_fanotify_are_refused(grader):
    """(A review's covert channel) an inotify watch follows the inode across bind mounts: one program saw which of the
    shared read-only files another, graded at the same time, opened, and two answers of a group passed one's output
    to the other by file names. Both watch APIs are refused (ENOSYS)."""
    code = ("import ctypes, errno, os\nlibc = ctypes.CDLL(None, use_errno=True)\nout = []\n"
            "for name, args in (('inotify_init1', (0,)), ('inotify_init', ()), ('fanotify_init', (0, 0))):\n"
            "    fd = getattr(libc, name)(*args)\n    out.append(errno.errorcode.get(ctypes.get_errno(), fd) if fd < 0 "
            "else 'opened')\nprint(' '.join(out))")
    r = graded_quickly(grader, code, {"inputs": [""], "outputs": ["ENOSYS ENOSYS ENOSYS"]})
    assert r.verdict == V.PASS, (r.to_dict(), r.stderr)


def test_dnotify_and_leases_are_refused(grader):
    """(A review's find) fcntl's F_NOTIFY (dnotify) is the older inotify: a watch on a shared read-only directory
    signalled its program at each read of a file in it by a program graded at the same time. F_SETLEASE would let a
    program learn of (and block for 45 s) another's open of a file its uid owns. Both fail with EPERM; other fcntl
    commands work."""
    code = ("import errno, fcntl, os\nout = []\nd = os.open('/tmp', os.O_RDONLY)\n"
            "open('/tmp/f', 'w').close()\nf = os.open('/tmp/f', os.O_RDONLY)\n"
            "for fd, cmd, arg in ((d, fcntl.F_NOTIFY, fcntl.DN_ACCESS | fcntl.DN_MULTISHOT), "
            "(f, fcntl.F_SETLEASE, fcntl.F_RDLCK)):\n"
            "    try:\n        fcntl.fcntl(fd, cmd, arg)\n        out.append('set')\n"
            "    except OSError as e:\n        out.append(errno.errorcode[e.errno])\n"
            "out.append(str(fcntl.fcntl(f, fcntl.F_GETFL) & 3))\nprint(' '.join(out))")
    r = graded_quickly(grader, code, {"inputs": [""], "outputs": ["EPERM EPERM 0"]})
    assert r.verdict == V.PASS, (r.to_dict(), r.stderr)


def test_a_reply_carrying_file_descriptors_is_the_programs_error(grader):
    """(A review's find) a program that answered the tests' call itself, on its end of their socket, with descriptors
    attached had them taken into the tests' process: 256 filled its table. Such a reply is refused unread."""
    code = ("import json, os, socket, struct\ndef add(a, b):\n    return 0\ns = socket.socket(fileno=4)\n"
            "n = struct.unpack('>I', s.recv(4, socket.MSG_WAITALL))[0]\ns.recv(n, socket.MSG_WAITALL)\n"
            "fds = [os.pipe()[1] for _ in range(100)]\n"
            "head = json.dumps({'value': 3, 'blobs': [], 'nfds': len(fds)}).encode()\n"
            "s.sendall(struct.pack('>I', len(head)) + head)\nsocket.send_fds(s, [b'F'], fds)\ns.detach()\n")
    r = graded_quickly(grader, code, {"asserts": ["assert add(1, 2) == 3"]})
    assert r.verdict == V.RUNTIME_ERROR and "file descriptors" in r.tests[0].detail, r.to_dict()


# ~320 MB queued in unix socket pairs of 4 processes (2 MB each at most), none of it in any process's memory
SOCKET_BUFFERS = ("import os, socket, time\nkids = [os.fork() for _ in range(2)]\npairs = []\nfor _ in range(40):\n"
                  "    a, b = socket.socketpair()\n    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)\n"
                  "    a.setblocking(False)\n    try:\n        while True:\n            a.send(b'x' * 65536)\n"
                  "    except BlockingIOError:\n        pass\n    pairs.append((a, b))\ntime.sleep(1.5)\n"
                  "if all(kids):\n    print('ok')")


def test_unix_sockets_with_data_in_flight_still_work(grader):
    code = ("import socket, os\na, b = socket.socketpair()\nif os.fork() == 0:\n    a.sendall(b'x' * (1 << 20))\n"
            "    os._exit(0)\ngot = 0\nwhile got < 1 << 20:\n    got += len(b.recv(1 << 16))\nos.wait()\n"
            "print('ok' if got == 1 << 20 else got)")
    r = graded_quickly(grader, code)
    assert r.verdict == V.PASS, (r.to_dict(), r.stderr)


# ~1 GB queued in loopback TCP connections of 4 processes that never read them
TCP_BUFFERS = ("import os, socket, time\nkids = [os.fork() for _ in range(2)]\nsrv = socket.socket()\n"
               "srv.bind(('127.0.0.1', 0))\nsrv.listen(100)\nkeep = []\nfor _ in range(30):\n"
               "    c = socket.create_connection(srv.getsockname())\n"
               "    c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)\n    a, _ = srv.accept()\n"
               "    a.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)\n    c.setblocking(False)\n"
               "    try:\n        while True:\n            c.send(b'x' * 65536)\n    except BlockingIOError:\n"
               "        pass\n    keep.append((c, a))\ntime.sleep(1.5)\nif all(kids):\n    print('ok')")


@namespaces  # (sock_diag counts the sockets, and their queues, of the sandbox's own network namespace)
@pytest.mark.parametrize("code", [SOCKET_BUFFERS, TCP_BUFFERS], ids=["unix socket buffers", "tcp buffers"])
def test_memory_held_in_socket_buffers_counts(code):
    with Grader(1, Limits(timeout_s=5.0, memory_mb=256)) as g:
        r = graded_quickly(g, code)
        assert r.verdict == V.MEMORY, r.to_dict()


def test_a_loopback_transfer_of_a_few_megabytes_still_works(grader):
    code = ("import socket, os\nsrv = socket.socket()\nsrv.bind(('127.0.0.1', 0))\nsrv.listen()\n"
            "if os.fork() == 0:\n    c = socket.create_connection(srv.getsockname())\n"
            "    c.sendall(b'x' * (8 << 20))\n    c.close()\n    os._exit(0)\na, _ = srv.accept()\ngot = 0\n"
            "while chunk := a.recv(1 << 16):\n    got += len(chunk)\nos.wait()\nprint('ok' if got == 8 << 20 else got)")
    r = graded_quickly(grader, code)
    assert r.verdict == V.PASS, (r.to_dict(), r.stderr)


def test_a_program_that_falls_back_from_memfds_to_files_passes(grader):
    code = ("import os, tempfile\ntry:\n    fd = os.memfd_create('buf')\nexcept OSError:\n"
            "    f = tempfile.TemporaryFile()\n    fd = f.fileno()\n"
            "os.write(fd, b'ok')\nprint(os.pread(fd, 2, 0).decode())")
    r = graded_quickly(grader, code)
    assert r.verdict == V.PASS, (r.to_dict(), r.stderr)


@namespaces  # (without namespaces the program's /tmp is the host's, not measured)
@pytest.mark.parametrize("top", ["/tmp", "/dev/shm"])
def test_memory_held_in_extended_attributes_on_its_tmpfs_counts(top):
    """Extended attributes on files of the program's tmpfs are kernel memory in no process: ~1 GB of them under a
    512 MB limit is its memory verdict, not a pass."""
    code = (f"import os, time\nv = b'x' * 60000\nfor i in range(4500):\n    p = '{top}/x%d' % i\n"
            "    open(p, 'w').close()\n    for k in range(4):\n        os.setxattr(p, 'user.k%d' % k, v)\n"
            "time.sleep(1)\nprint('ok')")
    with Grader(1, Limits(timeout_s=5.0, memory_mb=512)) as g:
        assert graded_quickly(g, code).verdict == V.MEMORY


def test_extended_attributes_and_many_files_in_tmp_still_work(grader):
    code = ("import os, tempfile\nd = tempfile.mkdtemp()\nfor i in range(3000):\n"
            "    open(os.path.join(d, str(i)), 'w').write('x')\n"
            "p = os.path.join(d, '0')\nos.setxattr(p, 'user.tag', b'ok')\nprint(os.getxattr(p, 'user.tag').decode())")
    r = graded_quickly(grader, code)
    assert r.verdict == V.PASS, (r.to_dict(), r.stderr)


def test_test_functions_run_in_the_checker_and_their_data_stays_there(grader):
    peek = "def apply(xs, fn):\n    return fn.__globals__.get('want') or list(fn.__code__.co_consts)\n"
    r = grader.grade(peek, {"asserts": ["want = [1, 3]\nassert apply([1, 2, 3], lambda x: x in want) == want",
                                        "assert apply([1, 2, 3], lambda x: x in (1, 3)) == [1, 3]"]})
    assert r.passed == 0, r.to_dict()


@pytest.mark.parametrize("test", [
    "assert make(3).n == 3",
    "node = make(3)\nassert node.n == 3 and node.child.n == 2 and node.child.child.child is None",
    "to_list = lambda node: [node.n] + to_list(node.child) if node else []\nassert to_list(make(2)) == [2, 1]",
    "node = make(1)\nassert hasattr(node, 'n') and not hasattr(node, 'missing') and getattr(node, 'x', 7) == 7",
])
def test_plain_attributes_of_program_objects_are_values(grader, test):
    code = ("class Node:\n    def __init__(self, n, child):\n        self.n, self.child = n, child\n"
            "def make(n):\n    return Node(n, make(n - 1) if n > 1 else None)\n")
    r = graded_quickly(grader, code, {"asserts": [test]})
    assert r.verdict == V.PASS, r.to_dict()


def test_dataset_errors_in_check_code_are_the_rows():
    from execrl.sandbox import TestSpecError, parse_tests

    with pytest.raises(TestSpecError, match="tests.check"):
        parse_tests({"check": "def check(c)\n    assert c(1) == 2\n", "entry_point": "f"})


# --- 9. tolerance only where the expected value is a float ------------------------------------------------------

@pytest.mark.parametrize("expected, returned", [
    ("4500000001500000000", "4.5000000015e18"), ("6", "5.999999999999999"), ("6", "6.000000000000001"),
    ("[1, 2]", "[1, 2.0000000000000004]"), ('{"a": 3}', '{"a": 2.9999999999999996}'),
])
def test_an_int_is_not_matched_by_a_float_near_it(grader, expected, returned):
    tests = {"fn_name": "f", "inputs": ["0"], "outputs": [expected]}
    r = graded_quickly(grader, f"def f(x):\n    return {returned}\n", tests)
    assert r.verdict == V.FAIL, (expected, returned, r.to_dict())


@pytest.mark.parametrize("expected, printed", [
    ("4500000001500000001", "4500000001500000000"), ("6", "5.9999999"), ("6", "6.0000001"), ("1 2", "1 2.0000001"),
    ("1", "1e99999999999999999999"), ("1", "10e-99999999999999999999"),
])
def test_tolerance_mode_matches_an_expected_integer_exactly(grader, expected, printed):
    tests = {"inputs": ["\n"], "outputs": [expected + "\n"], "compare": {"float_rel": 1e-6}}
    r = grader.grade(f"print({printed!r})", tests)
    assert r.verdict == V.FAIL, (expected, printed, r.to_dict())


# --- 10. nothing a row or a program's answer holds stalls or stops the grader ----------------------------------

P61 = 2**61 - 1  # ints equal mod this share one hash


def _forged_answer(tagged_items: str) -> str:
    """A call-form program whose status line (its return value) is forged: `tagged_items` builds the tagged value."""
    return ("import os, json\nP = 2**61 - 1\n" f"value = {tagged_items}\n"
            "os.write(3, json.dumps({'value': value}).encode() + b'\\n')\nos._exit(0)\ndef f(x): pass\n")


@pytest.mark.parametrize("value", [
    "{'set': [{'int': hex(k * P)} for k in range(1, 100_000)]}",
    "{'frozenset': [{'tuple': [{'int': hex(k * P)}]} for k in range(1, 60_000)]}",
    "{'dict': [[{'int': hex(k * P)}, 1] for k in range(1, 100_000)]}",
    "[{'dict': [[{'int': hex(k * P)}, 1] for k in range(1, 100_000)]}]",
], ids=["set", "frozenset of tuples", "dict keys", "dict in a list"])
def test_colliding_values_in_an_answer_are_decoded_in_linear_time(solo, value):
    import time

    start = time.monotonic()
    r = solo.grade(_forged_answer(value), {"fn_name": "f", "inputs": ["1"], "outputs": ['{"a": 1}']})
    assert r.verdict == V.FAIL, r.to_dict()
    assert time.monotonic() - start < 10


@pytest.mark.parametrize("kind", ["set", "dict"])
def test_colliding_values_in_a_call_answer_cost_the_checker_nothing(solo, kind):
    """(A hunt's find) The asserts and check forms' checker decodes each call's answer into real sets and dicts, with
    the tests' own clock stopped (the program is answering) and after the call's deadline: a program that forged an
    answer of 60,000 integers equal mod 2**61 - 1 (one hash) made it build a set in quadratic time, 28 s of the
    checker's CPU for two asserts, ~500 s for a hundred, each ending `timeout`. Such a set is refused as it is decoded:
    the program's error, at once. A few values sharing a hash (-1 and -2) are still plain answers."""
    import time

    item = "{'int': hex(k * M)}" if kind == "set" else "[{'int': hex(k * M)}, 1]"
    forged = ("import sys\nch = sys.modules['inside.child']\nM = 2**61 - 1\n"
              f"fake = {{'{kind}': [{item} for k in range(1, 60_001)]}}\nreal = ch.encode\n"
              "ch.encode = lambda v, other=None, depth=0: fake if v == 'HACK' else real(v, other, depth)\n"
              "def f(x):\n    return 'HACK'\n")
    start = time.monotonic()
    r = solo.grade(forged, {"asserts": ["assert f(1) == {1}", "assert f(2) == {2}"]})
    assert r.verdict == V.RUNTIME_ERROR and "not plain data" in r.tests[0].detail, r.to_dict()
    assert time.monotonic() - start < 10
    assert solo.grade("def f(x):\n    return {x, -1, -2}", {"asserts": ["assert f(1) == {1, -1, -2}"]}).verdict \
        == V.PASS


def test_a_million_digit_integer_in_a_row_is_refused_at_once():
    import time

    from execrl.sandbox import TestSpecError, parse_tests

    for digits in (100_001, 1_000_000):
        start = time.monotonic()
        with pytest.raises(TestSpecError, match="digits"):
            parse_tests({"fn_name": "f", "inputs": ["1"], "outputs": ["7" * digits]})
        with pytest.raises(TestSpecError, match="digits"):
            parse_tests({"fn_name": "f", "inputs": ["[" + ", ".join(["7" * 5000] * (digits // 5000 + 1)) + "]"],
                         "outputs": ["1"]})
        assert time.monotonic() - start < 2


def test_a_300_mb_program_is_its_own_failure_not_ours(solo):
    code = "print('ok')\n" + "#" * (300 << 20)
    r = solo.grade(code, ONE)
    assert r.verdict == V.RUNTIME_ERROR and "larger than" in r.tests[0].detail, r.to_dict()
    assert solo.run(code).verdict == V.RUNTIME_ERROR
    assert solo.grade("print('ok')", ONE).verdict == V.PASS


# --- 11. infra_error is ours alone: what a program writes, or does to its own files, is its verdict ---------------

def test_a_status_line_that_grows_in_transit_is_the_programs_failure():
    """12 MB of 0xff bytes in a status field or a forged return value: each byte would travel as a 6-byte escape."""
    junk = "b'\\xff' * (12 << 20)"
    exc = f"import os\nos.write(3, b'{{\"exc\": \"' + {junk} + b'\"}}\\n')\nos._exit(1)\ndef f(x):\n    return 2\n"
    value = f"import os\nos.write(3, b'{{\"value\": \"' + {junk} + b'\"}}\\n')\nos._exit(0)\ndef f(x):\n    return 2\n"
    with Grader(1, Limits(timeout_s=2.0, memory_mb=512, output_mb=16)) as g:
        for code, form, verdict in ((exc, ONE, V.RUNTIME_ERROR), (exc, CALL_F, V.RUNTIME_ERROR),
                                    (value, CALL_F, V.FAIL)):
            r = g.grade(code, form)
            assert r.verdict == verdict, r.to_dict()
        assert g.grade("def f(x):\n    return 2", CALL_F).verdict == V.PASS


def test_a_reply_that_cannot_be_read_back_is_the_programs_failure(monkeypatch):
    import execrl.sandbox.pool as pool

    monkeypatch.setattr(pool, "MAX_REPLY", 2000)  # a reply of ~3 kB: its 500-character message escaped
    with Grader(1, FAST) as g:
        for form in (ONE, CALL_F, {"asserts": ["assert f(1) == 2"]}):
            r = g.grade("def f(x):\n    raise ValueError('\\xff' * 500)\nf(1)\n", form)
            assert r.verdict == V.RUNTIME_ERROR, r.to_dict()
        assert g.grade("def f(x):\n    return 2", CALL_F).verdict == V.PASS


HOME = "import os\nd = os.path.dirname(os.path.abspath(__file__))\n"  # the program's directory (in any mode)
SELF_HARM = {
    "deletes its source": "os.remove(__file__)",
    "chmods its source": "os.chmod(__file__, 0)",
    "replaces its source with a directory": "os.remove(__file__)\nos.mkdir(__file__)",
    "renames its directory": "os.rename(d, d + '-%d' % os.getpid())",
    "chmods its directory": "os.chmod(d, 0)",
    "replaces its directory with a link": "import shutil\nshutil.rmtree(d)\nos.symlink('/usr', d)",
}
THREE = {"inputs": ["\n"] * 3, "outputs": ["ok\n"] * 3}


@pytest.mark.parametrize("harm", list(SELF_HARM))
def test_a_program_that_breaks_its_own_files_breaks_no_later_test(solo, harm):
    r = graded_quickly(solo, f"{HOME}{SELF_HARM[harm]}\nprint('ok')\n", THREE)
    assert r.verdict == V.PASS, r.to_dict()
    assert solo.grade("print('ok')", ONE).verdict == V.PASS


def test_a_tree_put_in_place_of_the_source_is_set_aside_not_walked(solo):
    """(A hunt's find) a test that replaced its source with a directory tree 300,000 levels deep had the zygote delete
    it before the next test, outside every limit of the program's: ~10 s per test of a 1.7 s program. The tree is
    now renamed aside in one call (left with the program's other files until its sandbox is reset): each test here
    finds the trees of the tests before it whole."""
    code = HOME + (
        "def deep(top):\n    try:\n        os.chdir(top)\n        for _ in range(3000):\n            os.chdir('a')\n"
        "        return True\n    except OSError:\n        return False\n"
        "print(sum(deep(os.path.join(d, n)) for n in os.listdir(d) if n.startswith('.set-aside-')))\n"
        "os.remove(__file__)\nos.mkdir(__file__)\nos.chdir(__file__)\n"
        "for _ in range(3000):\n    os.mkdir('a')\n    os.chdir('a')\n")
    r = solo.grade(code, {"inputs": ["\n"] * 3, "outputs": ["0\n", "1\n", "2\n"]})
    assert r.verdict == V.PASS, r.to_dict()
    assert solo.grade("print('ok')", ONE).verdict == V.PASS


@namespaces
@pytest.mark.parametrize("harm", ["chmods /tmp", "renames its directory", "deletes its source"])
def test_in_bwrap_user_mode_too(harm):
    """Without root the program's uid is the sandbox's own, and its /tmp (a tmpfs of its own) is its to chmod."""
    from execrl.sandbox.isolation import Isolation
    from execrl.sandbox.pool import WorkerPool

    code = HOME + ("os.chmod('/tmp', 0)" if harm == "chmods /tmp" else SELF_HARM[harm]) + "\nprint('ok')\n"
    with Grader(limits=FAST, pool=WorkerPool(1, isolation=Isolation("bwrap-user", detect().bwrap))) as g:
        r = graded_quickly(g, code, THREE)
        assert r.verdict == V.PASS, r.to_dict()
        assert g.grade("print('ok')", ONE).verdict == V.PASS


@pytest.mark.parametrize("harm", ['remove("main.bin")', 'chmod("main.bin", 0)', 'chmod(d, 0)',
                                  'rename(d, (std::string(d) + "-" + std::to_string(getpid())).c_str())'])
def test_a_binary_that_breaks_itself_breaks_no_later_test(solo, harm):
    code = ("#include <cstdio>\n#include <string>\n#include <sys/stat.h>\n#include <unistd.h>\n"
            f"int main() {{ char d[4096]; if (!getcwd(d, sizeof d)) return 1; {harm}; puts(\"ok\"); }}\n")
    r = solo.grade(code, THREE, language="cpp")
    assert r.verdict == V.PASS, r.to_dict()


def test_a_binary_a_language_names_other_than_exe_is_the_programs_own(solo):
    """(A hunt's find) a language whose compile writes {dir}/main and runs it: a wrong program that deleted its binary,
    or gave it a .interp that does not load, came out infra_error (left out of its reward, where the same program as
    {exe} fails), and a right one that deleted it failed every later test. Every file the compile leaves is put back
    between tests, and a file of the program's directory that will not exec is the program's failure."""
    from execrl.sandbox.languages import LANGUAGES, Language

    LANGUAGES["c-main"] = Language("c-main", "main.c", run=("{dir}/main",), compile=("g++", "-x", "c", "-O1", "-o",
                                                                                      "{dir}/main", "{file}"))
    head = "#include <stdio.h>\n#include <unistd.h>\nint main(int argc, char** argv) { "
    try:
        r = solo.grade(head + 'unlink(argv[0]); puts("ok"); }\n', THREE, language="c-main")
        assert r.verdict == V.PASS, r.to_dict()
        r = solo.grade(head + 'unlink(argv[0]); puts("no"); }\n', THREE, language="c-main")
        assert r.verdict == V.FAIL, r.to_dict()
        interp = ("const char interp[4] __attribute__((section(\".interp\"), used)) = {'a', 'b', 'c', 'd'};\n"
                  + head + 'puts("ok"); }\n')
        r = solo.grade(interp, THREE, language="c-main")
        assert r.verdict == V.RUNTIME_ERROR, r.to_dict()
    finally:
        LANGUAGES.pop("c-main")


def test_a_compilers_stdout_comes_back_as_its_ends_and_says_why(solo):
    """(A hunt's find) a compile's stdout was read whole (an assembler's .print of 130 MB carried to the grader, which
    never used it) and never shown (a compiler writing its errors to stdout, as the JVM does, failed with no word)."""
    from execrl.sandbox.languages import LANGUAGES, Language

    LANGUAGES["loud"] = Language("loud", "main.sh", run=("sh", "{file}"), compile=(
        "sh", "-c", "echo 'error: the first line'; head -c 5000000 /dev/zero | tr '\\0' x; echo; echo 'the last'; "
        "exit 1"))
    try:
        r = solo.grade("echo ok", ONE, language="loud")
        assert r.verdict == V.SYNTAX_ERROR, r.to_dict()
        assert r.tests[0].detail.startswith("error: the first line") and r.stderr.endswith("the last\n")
    finally:
        LANGUAGES.pop("loud")


HOLD_OPEN = r"""#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>
int main(int argc, char** argv) {
  if (argc > 1) {  // a copy of this program, run once main.bin no longer is: main.bin open for writing, in flight
    int fds[3] = {open(argv[1], O_WRONLY), 0, 0};
    socketpair(AF_UNIX, SOCK_DGRAM, 0, fds + 1);
    char x = 'x', control[CMSG_SPACE(sizeof fds)] = {};
    iovec io = {&x, 1};
    msghdr m = {};
    m.msg_iov = &io; m.msg_iovlen = 1; m.msg_control = control; m.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET; c->cmsg_type = SCM_RIGHTS; c->cmsg_len = CMSG_LEN(sizeof fds);
    memcpy(CMSG_DATA(c), fds, sizeof fds);
    int sent = sendmsg(fds[1], &m, 0);
    if (argc > 2) {  // and /tmp filled: main.bin cannot be written anew
      static char block[1 << 20];
      for (int i = 0;; i++) {
        char name[64];
        snprintf(name, sizeof name, "/tmp/fill%d", i);
        int f = open(name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (f < 0 || write(f, block, sizeof block) < (ssize_t)sizeof block) break;
        close(f);
      }
    }
    return sent < 0;
  }
  puts("ok");
  fflush(stdout);
  char self[4096], data[1 << 16];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  self[n < 0 ? 0 : n] = 0;
  int in = open(self, O_RDONLY), out = open("copy.bin", O_WRONLY | O_CREAT | O_TRUNC, 0755);
  while ((n = read(in, data, sizeof data)) > 0) write(out, data, n);
  close(out);
  execl("copy.bin", "copy.bin", self, FILL, (char*)0);
  return 1;
}
"""


def test_a_binary_held_open_for_writing_in_flight_breaks_no_later_test(solo):
    """Its binary opened for writing (by a copy of it, run after it) and sent over a unix socket left in flight: the
    descriptor outlives the test's processes, and exec of that file fails (ETXTBSY). That was reported as the
    sandbox's set-up failing: infra_error for every test of the program, the worker lost."""
    r = solo.grade(HOLD_OPEN.replace("FILL", "(char*)0"), THREE, language="cpp")
    assert [t.verdict for t in r.tests] == [V.PASS] * 3, r.to_dict()
    assert solo.grade("print('ok')", ONE).verdict == V.PASS


@namespaces  # (without namespaces the program's /tmp is the host's)
def test_a_binary_held_open_in_flight_with_tmp_filled_is_the_programs_failure(solo):
    """As above, and the program filled /tmp too: writing its binary anew failed (ENOSPC), and that OSError was the
    sandbox's: infra_error for the whole program, a wrong answer left out of its reward and a way to stop a run."""
    r = solo.grade(HOLD_OPEN.replace("FILL", '"fill"'), THREE, language="cpp")
    assert [t.verdict for t in r.tests] == [V.PASS, V.RUNTIME_ERROR, V.RUNTIME_ERROR], r.to_dict()
    assert "restored" in r.tests[1].detail, r.to_dict()
    assert solo.grade("print('ok')", ONE).verdict == V.PASS


@namespaces  # (without namespaces the program's /tmp is the host's)
def test_files_that_cannot_be_restored_are_the_programs_failure(solo):
    fill = ("import os\nos.remove(__file__)\ni = 0\ntry:\n    while True:\n"
            "        with open('/tmp/fill%d' % i, 'wb') as f:\n            f.write(b'x' * (2 << 20))\n        i += 1\n"
            "except OSError:\n    pass\nprint('ok')\n")
    r = graded_quickly(solo, fill, THREE)
    assert [t.verdict for t in r.tests] == [V.PASS, V.RUNTIME_ERROR, V.RUNTIME_ERROR], r.to_dict()
    assert "restored" in r.tests[1].detail
    assert solo.grade("print('ok')", ONE).verdict == V.PASS


# --- 12. the program's exceptions reach the tests as its own classes, but cannot end a test's iteration early --------

@pytest.mark.parametrize("test", [
    "assert all(map(f, [1, 2]))", "assert list(zip(map(f, [1]), [1])) == []", "assert f(1) == 2",
    "assert [y for y in map(f, [1, 2])] == []",
])
def test_a_programs_stop_iteration_or_assertion_does_not_pass_a_test(grader, test):
    for raised in ("StopIteration", "AssertionError", "ValueError"):
        r = graded_quickly(grader, f"def f(x):\n    raise {raised}\n", {"asserts": [test]})
        assert r.verdict == V.RUNTIME_ERROR, (raised, test, r.to_dict())


@pytest.mark.parametrize("bad", ["while True:\n            pass", "import os\n        os._exit(0)",
                                 "import sys\n        sys.exit(0)"], ids=["hangs", "dies", "exits"])
@pytest.mark.parametrize("test", ["with pytest.raises(Exception):\n    f(-1)",
                                  "try:\n    f(-1)\nexcept Exception:\n    pass\nelse:\n    raise AssertionError"])
def test_a_program_that_hangs_or_dies_does_not_pass_a_test_that_expects_an_exception(grader, bad, test):
    """The checker's 'the program timed out' and 'the program is gone' were Exceptions: a test's `except Exception`
    or pytest.raises(Exception) caught them, and a program that hung or exited where it should raise passed."""
    code = f"def f(x):\n    if x < 0:\n        {bad}\n    return x + 1\n"
    r = graded_quickly(grader, code, {"setup": "import pytest", "asserts": ["assert f(1) == 2", test]})
    assert r.tests[0].verdict == V.PASS and r.tests[1].verdict in (V.TIMEOUT, V.RUNTIME_ERROR), r.to_dict()
    honest = "def f(x):\n    if x < 0:\n        raise ValueError(x)\n    return x + 1\n"
    assert grader.grade(honest, {"setup": "import pytest", "asserts": ["assert f(1) == 2", test]}).verdict == V.PASS


@pytest.mark.parametrize("test", ["assert list(itertools.islice(fib(), 5)) == [0, 1, 1, 2, 3]",
                                  "assert [x for _, x in zip(range(5), fib())] == [0, 1, 1, 2, 3]",
                                  "g = fib()\nassert list(itertools.islice(g, 3)) == [0, 1, 1]\nassert next(g) == 2",
                                  "assert list(Squares(3)) == [0, 1, 4] and sum(Squares(4)) == 14"])
def test_endless_generators_are_drawn_as_the_test_goes(grader, test):
    """iter() of a program's object asked for list() of it: an endless generator under islice or zip never ended
    (a timeout for a correct program)."""
    code = ("def fib():\n    a, b = 0, 1\n    while True:\n        yield a\n        a, b = b, a + b\n\n"
            "class Squares:\n    def __init__(self, n):\n        self.n = n\n    def __iter__(self):\n"
            "        return (i * i for i in range(self.n))\n")
    assert graded_quickly(grader, code, {"setup": "import itertools", "asserts": [test]}).verdict == V.PASS


def test_long_generators_are_quick_and_items_before_an_error_reach_the_test(grader):
    """Drawing a generator one item a call made 100,000 items a timeout; a batch that met the program's error
    dropped the items it had read before it."""
    code = ("def gen(n):\n    yield from range(n)\n\n"
            "class Breaks:\n    def __iter__(self):\n        yield from (1, 2, 3, 4)\n        raise ValueError('x')\n")
    tests = ["assert len(list(gen(100000))) == 100000",
             "out = []\ntry:\n    for x in Breaks():\n        out.append(x)\nexcept ValueError:\n    pass\n"
             "assert out == [1, 2, 3, 4]"]
    r = graded_quickly(grader, code, {"asserts": tests})
    assert r.verdict == V.PASS, r.to_dict()


# --- 13. the allowlist stays narrow: a language's tool brings itself, into its own language's sandboxes ----------

def _shell_language(name: str, tool) -> None:
    """A language whose programs are shell scripts, run by `tool` (a script that execs /bin/sh on the program)."""
    from execrl.sandbox.languages import LANGUAGES, Language

    tool.parent.mkdir(parents=True, exist_ok=True)
    tool.write_text('#!/bin/sh\nexec /bin/sh "$1"\n')
    tool.chmod(0o755)
    LANGUAGES[name] = Language(name, "main.sh", run=(str(tool), "{file}"), hello="echo hello")


@namespaces
def test_a_tool_in_a_home_directory_brings_itself_not_the_home(tmp_path, monkeypatch):
    from execrl.sandbox.languages import LANGUAGES

    home = tmp_path / "alice"
    monkeypatch.setenv("HOME", str(home))
    tool = home / "bin" / "alicesh"
    _shell_language("alicesh", tool)
    (home / "secret.txt").write_text("42\n")
    try:
        with Grader(1, FAST, languages=("python", "alicesh")) as g:
            seen = f"for p in {home}/secret.txt {home}/bin/other; do test -e $p && echo $p; done; echo ok"
            (home / "bin" / "other").write_text("x")
            r = g.grade(seen, ONE, language="alicesh")
            assert r.verdict == V.PASS, (r.to_dict(), r.tests[0].output)
            r = g.grade(f"import os\nprint('ok' if not os.path.exists({str(tool)!r}) else 'seen')", ONE)
            assert r.verdict == V.PASS, r.tests[0].output  # a Python program's sandbox has no such tool
    finally:
        LANGUAGES.pop("alicesh", None)


@namespaces
def test_a_tool_in_an_installation_of_its_own_still_has_it(tmp_path):
    from execrl.sandbox.languages import LANGUAGES

    tool = tmp_path / "opt" / "toolsh" / "bin" / "toolsh"
    _shell_language("toolsh", tool)
    (tmp_path / "opt" / "toolsh" / "share").mkdir()
    (tmp_path / "opt" / "toolsh" / "share" / "data").write_text("ok\n")
    try:
        with Grader(1, FAST, languages=("toolsh",)) as g:
            r = g.grade(f"cat {tmp_path}/opt/toolsh/share/data", ONE, language="toolsh")
            assert r.verdict == V.PASS, (r.to_dict(), r.stderr)
            assert g.grade("import sys\nprint('ok')", ONE).verdict == V.PASS
    finally:
        LANGUAGES.pop("toolsh", None)


# --- no state crosses programs on a worker: its network, PID and inode counters ------------------------------

# each program leaves what it can in the worker's network and PID namespaces, and passes
LEAVE_BEHIND = {
    "TIME_WAIT sockets": "import socket\nfor _ in range(3):\n    s = socket.socket()\n    s.bind(('127.0.0.1', 0))\n"
                         "    s.listen()\n    c = socket.create_connection(s.getsockname())\n    a, _ = s.accept()\n"
                         "    c.close()\n    a.close()\n    s.close()\nprint('ok')",  # the client closes first
    "loopback counters": "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                         "s.bind(('127.0.0.1', 0))\nfor _ in range(37):\n    s.sendto(b'x' * 42, s.getsockname())\n"
                         "print('ok')",
    "PID counter": "import os\nfor _ in range(37):\n    if os.fork() == 0:\n        os._exit(0)\n    os.wait()\n"
                   "print('ok')",
    "tmpfs inode numbers": "import os\nfor d in ('/tmp', '/dev/shm'):\n    for i in range(37):\n"
                           "        open(os.path.join(d, 'f%d' % i), 'w').close()\nprint('ok')",
    "unroutable sends": "import socket\nfor _ in range(37):\n    for fam, to in ((socket.AF_INET, ('10.9.9.9', 9)),"
                        " (socket.AF_INET6, ('2001:db8::1', 9, 0, 0))):\n"
                        "        try:\n            socket.socket(fam, socket.SOCK_DGRAM).sendto(b'x', to)\n"
                        "        except OSError:\n            pass\nprint('ok')",  # no packet: only counters move
    "abstract socket": "import socket\ns = socket.socket(socket.AF_UNIX)\ns.bind(b'\\0answer-42')\n"
                       "a, b = socket.socketpair()\nimport array\na.sendmsg([b'x'], [(socket.SOL_SOCKET, "
                       "socket.SCM_RIGHTS, array.array('i', [s.fileno(), a.fileno()]))])\nprint('ok')",
    # (a hunt's find) a flow label lingers past its socket, sends nothing and moves no counter: a later program read
    # an answer in them
    "IPv6 flow labels": "import socket, struct\ns = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)\n"
                        "for i, c in enumerate(b'42'):\n    s.setsockopt(41, 32, "
                        "socket.inet_pton(socket.AF_INET6, '::1') + struct.pack('!I', i << 8 | c) + "
                        "struct.pack('=BBHHHI', 0, 255, 3, 150, 150, 0))\nprint('ok')",
}
# what a later program on the same worker reads of them: the same whatever ran before it. (sockstat's `mem` fields
# are not: they are the host's TCP and UDP buffer pages, one counter for every namespace, moved (Linux >= 6.0) in per-CPU batches
# of 256 pages by any socket on the machine; CI saw UDP's go 0 -> 256 between two reads. Nor are its `alloc` and
# `orphan` counts: the kernel's sockets of each protocol on the whole machine (CI saw TCP's alloc go 2 -> 3 while
# another job ran). Its `inuse` and `tw` counts are the namespace's own and stay compared.)
READ_BACK = ("import os\nnet = {}\nfor name in ('tcp', 'tcp6', 'udp', 'udp6', 'unix'):\n    try:\n"
             "        net[name] = open('/proc/net/' + name).read().count('\\n') - 1\n    except OSError:\n"
             "        net[name] = None\n"
             "lo = [l.split()[1:] for l in open('/proc/net/dev') if l.strip().startswith('lo:')]\n"
             "pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
             "child = os.fork()\nif child == 0:\n    os._exit(0)\nos.wait()\n"
             "import re\nmib = {n: re.sub(r' (mem|alloc|orphan) [0-9]+', '', open('/proc/net/' + n).read())\n"
             "       for n in ('snmp', 'snmp6', 'netstat', 'sockstat', 'sockstat6')}\n"
             "try:\n    mib['labels'] = open('/proc/net/ip6_flowlabel').read()\nexcept OSError:\n    pass\n"
             "import tempfile\nino = [os.stat(tempfile.mkstemp(dir=d)[1]).st_ino for d in ('/tmp', '/dev/shm')]\n"
             "print(os.getpid(), child, pids, open('/proc/loadavg').read().split()[-1], lo, net, ino, mib)")


def _bwrap_user_pool():
    from execrl.sandbox.isolation import Isolation
    from execrl.sandbox.pool import WorkerPool

    return WorkerPool(1, isolation=Isolation("bwrap-user", detect().bwrap))


def _grader(mode: str) -> Grader:
    """A one-worker grader in the default mode, or in bwrap-user mode (the program is the zygote's uid)."""
    return Grader(1, FAST, pool=_bwrap_user_pool() if mode == "bwrap-user" else None)


LEAVE_IN_FORMS = LEAVE_BEHIND["TIME_WAIT sockets"].replace("print('ok')", "") + \
    LEAVE_BEHIND["PID counter"].replace("print('ok')", "") + "def f(x):\n    return 2\n"
FORMS = {"stdio": ONE, "assert form": {"asserts": ["assert f(1) == 2"]}, "call form": CALL_F}


@namespaces
@pytest.mark.parametrize("mode", ["default", "bwrap-user"])
@pytest.mark.parametrize("name, form", [(name, "stdio") for name in LEAVE_BEHIND] +
                         [("TIME_WAIT sockets and PID counter", "assert form"),
                          ("TIME_WAIT sockets and PID counter", "call form")])
def test_a_program_leaves_nothing_in_the_network_or_pid_counter(mode, name, form):
    """A later program reads the same network state, PIDs and inode numbers whatever the one before it did on the
    same worker."""
    with _grader(mode) as g:
        fresh = g.run(READ_BACK)
        assert fresh.verdict == V.PASS, fresh.stderr
        code = LEAVE_BEHIND[name] if form == "stdio" else LEAVE_IN_FORMS
        assert graded_quickly(g, code, FORMS[form]).verdict == V.PASS
        after = g.run(READ_BACK)
        assert after.verdict == V.PASS and after.stdout == fresh.stdout, (fresh.stdout, after.stdout)


@namespaces
@pytest.mark.parametrize("mode", ["default", "bwrap-user"])
def test_a_loopback_server_within_the_program_still_works(mode):
    code = ("import socket, threading\nfrom multiprocessing import Process, Queue\n"
            "srv = socket.socket()\nsrv.bind(('127.0.0.1', 0))\nsrv.listen()\n"
            "def serve():\n    for _ in range(2):\n        c, _ = srv.accept()\n        c.sendall(c.recv(16).upper())\n"
            "        c.close()\n"
            "def ask(q, addr):\n    with socket.create_connection(addr) as c:\n        c.sendall(b'ok')\n"
            "        q.put(c.recv(16))\n"
            "if __name__ == '__main__':\n    threading.Thread(target=serve, daemon=True).start()\n    q = Queue()\n"
            "    p = Process(target=ask, args=(q, srv.getsockname()))\n    p.start()\n    got = q.get()\n    p.join()\n"
            "    with socket.create_connection(srv.getsockname()) as c:\n        c.sendall(b'k')\n"
            "        got += c.recv(16)\n"
            "    u = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)\n    u.bind(('::1', 0))\n"
            "    u.sendto(b'', u.getsockname())\n    u.recv(1)\n"
            "    print('ok' if got == b'OKK' else got)")
    with _grader(mode) as g:
        for _ in range(2):  # and again on the same worker, in the next program's namespaces
            r = graded_quickly(g, code)
            assert r.verdict == V.PASS, (r.to_dict(), r.stderr)


@namespaces
def test_no_capability_of_the_zygote_reaches_the_program_in_bwrap_user_mode():
    """The zygote holds CAP_SYS_ADMIN and CAP_NET_ADMIN of its user namespace (for the per-program namespaces); the
    program, the same uid there, holds none, and cannot unshare, mount or reconfigure its network."""
    code = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "caps = {l.split(':')[0]: int(l.split()[1], 16)\n"
            "        for l in open('/proc/self/status') if l.startswith('Cap')}\n"
            "os.mkdir('/tmp/m')\n"
            "done = [libc.unshare(0x40000000) == 0, libc.mount(b'none', b'/tmp/m', b'tmpfs', 0, None) == 0]\n"
            "print('ok' if not any(done) and not caps['CapEff'] and not caps['CapPrm'] and not caps['CapAmb'] "
            "else (done, caps))")
    with _grader("bwrap-user") as g:
        r = graded_quickly(g, code)
        assert r.verdict == V.PASS, r.tests[0].output
        r = g.run("import subprocess\nprint(subprocess.run(['cat', '/proc/self/status'], capture_output=True, "
                  "text=True).stdout)")  # nor through exec
        assert "CapEff:\t0000000000000000" in r.stdout and "CapPrm:\t0000000000000000" in r.stdout, r.stdout


@pytest.mark.parametrize("mode", ["default", "bwrap-user"] if detect().mode != "none" else ["default"])
def test_a_program_that_spoils_its_streams_spoils_no_later_test(mode):
    """The children's stdin, stdout, stderr and status are the zygote's memfds, emptied for each child: what a test
    wrote into its stdin, a cleared O_APPEND, a chmod of stdout (its own file in bwrap-user mode) do not reach the
    next test or program."""
    code = ("import os, fcntl, sys\ndata = sys.stdin.read()\nos.pwrite(0, b'junk' * 1000, 0)\n"
            "for fd in (1, 2, 3):\n    fcntl.fcntl(fd, fcntl.F_SETFL, 0)\n    try:\n        os.fchmod(fd, 0)\n"
            "    except OSError:\n        pass\nos.write(2, b'e' * 100000)\nprint(data, end='')")
    with _grader(mode) as g:
        r = graded_quickly(g, code, {"inputs": ["a\n", "b\n", "c\n"], "outputs": ["a\n", "b\n", "c\n"]})
        assert r.verdict == V.PASS, r.to_dict()
        after = ("import sys\nwith open('/dev/stdout', 'a') as f:\n    f.write(sys.stdin.read())\n"
                 "def f(x):\n    return x + 1")
        assert graded_quickly(g, after, {"inputs": ["z\n"], "outputs": ["z\n"]}).verdict == V.PASS
        assert graded_quickly(g, after, CALL_F).verdict == V.PASS


def test_outputs_cheap_to_write_are_cheap_to_judge(solo):
    """16 MB of blank lines against a one-line answer is compared without splitting 16 million lines (it took the
    grading process 3 s and 500 MB a test), and a returned list of ~2 million elements against a three-element one
    is failed from its size, unparsed (3 s of the grading process's CPU a test)."""
    import resource

    from execrl.sandbox.compare import outputs_match

    before = resource.getrusage(resource.RUSAGE_SELF).ru_utime
    assert not outputs_match("42\n", b"\n" * ((16 << 20) - 1))
    assert outputs_match("42\n", b"42 \n" + b" \n" * (1 << 20))  # trailing blank lines still do not count
    assert resource.getrusage(resource.RUSAGE_SELF).ru_utime - before < 1.5
    spec = {"fn_name": "f", "inputs": ["1", "2"], "outputs": ["[1, 2, 3]", "[[1, 2], [3]]"]}
    before = resource.getrusage(resource.RUSAGE_SELF).ru_utime
    r = solo.grade("def f(x):\n    return [0] * 1_990_000\n", spec, limits=Limits(timeout_s=10.0, memory_mb=1024))
    assert [t.detail for t in r.tests] == ["returned a value far larger than the expected one"] * 2, r.to_dict()
    assert resource.getrusage(resource.RUSAGE_SELF).ru_utime - before < 1.5
    right = "def f(x):\n    return (1, 2, 3) if x == 1 else ((1, 2), (3,))\n"  # tuples for lists: twice the marks
    assert solo.grade(right, spec).verdict == V.PASS


@namespaces
@pytest.mark.parametrize("mode", ["default", "bwrap-user"])
def test_dev_holds_nothing_a_program_leaves(mode):
    """In bwrap-user mode the program is uid 0 of the namespace that owns bwrap's /dev tmpfs: a file it wrote there
    was the next program's answer, /dev/stdout removed failed every later program writing it, and files there held
    memory past the limit; the times it set on the streams it shares with the zygote were numbers for the next."""
    leave = ("import os\ntry:\n    open('/dev/answer', 'w').write('ok')\nexcept OSError:\n    pass\n"
             "try:\n    os.unlink('/dev/stdout')\nexcept OSError:\n    pass\n"
             "for fd in (0, 2):\n    try:\n        os.utime(fd, ns=(4242424242 * 10 ** 9, 4242424242 * 10 ** 9))\n"
             "    except OSError:\n        pass\nprint('ok')")
    read = ("import os\nopen('/dev/stdout', 'w').write('ok\\n' if not os.path.exists('/dev/answer') and "
            "all(os.fstat(fd).st_atime < 4242424242 for fd in (0, 2)) else 'left\\n')")
    with _grader(mode) as g:
        assert g.grade(read, ONE).verdict == V.PASS
        assert g.grade(leave, ONE).verdict == V.PASS
        r = g.grade(read, ONE)
        assert r.verdict == V.PASS, (r.to_dict(), r.stderr)


@namespaces
@pytest.mark.parametrize("mode", ["default", "bwrap-user"])
def test_a_program_opens_no_pseudo_terminal(mode):
    """Each sandbox had a devpts of its own, all of them drawing on the kernel's one pool of ptys (kernel.pty.max,
    3,072 for all but root's): a program opening ptys in 40 processes took every one, and a program graded beside
    it, or the host, got 'No space left on device'."""
    probe = ("import os\ntry:\n    os.openpty()\n    print('pty')\nexcept OSError:\n    print('none')\n"
             "try:\n    open('/dev/pts/x', 'w')\n    print('written')\nexcept OSError:\n    pass\n")
    with _grader(mode) as g:
        r = g.run(probe)
    assert r.stdout == "none\n", (r.to_dict(), r.stderr)


def test_a_status_line_forged_by_a_program_that_returns_nothing_is_not_parsed(monkeypatch):
    """A stdio program writing {"value": [0, 0, ...]} to its status fd and closing it: the line was parsed, walked
    and written back as JSON, seconds of the grader's time per test for a value no test reads. Outside the call form
    a line longer than ours is dropped unparsed; the call form's value still comes back."""
    from execrl.sandbox.inside import protocol

    forged = b'{"value": [' + b"0," * 500_000 + b'0]}\n'
    parsed, loads = [], json.loads
    monkeypatch.setattr(protocol.json, "loads", lambda *a, **k: parsed.append(1) or loads(*a, **k))
    assert protocol.carry_status(forged, checker=False, value=False) == ([], b"")
    assert not parsed
    ours = b'{"exc": "ValueError", "msg": "' + "\u00e9".encode() * 500 + b'"}\n'
    assert protocol.carry_status(ours, checker=False, value=False)[0][0]["exc"] == "ValueError"
    status, value = protocol.carry_status(b'{"value": [1, 2]}\n', checker=False, value=True)
    assert json.loads(value) == [1, 2]


@pytest.mark.parametrize("expected, printed, opts", [
    ("1.5\n", b"1 " * (8 << 20), {"float_rel": 1e-6}),  # 8 million tokens on one line: split in full, then counted
    ("YES\n", b"\xff" * (16 << 20), {"case_fold": True}),  # lowered character by character before the line count
    ("YES\n", "\u00e9".encode() * (8 << 20), {"case_fold": True})], ids=["tolerance", "case_fold", "case_fold utf-8"])
def test_compare_options_keep_a_large_output_cheap_to_judge(expected, printed, opts):
    """A row's compare options (a tolerance, case folding) made 16 MB of output cost the grading process 2-2.5 s of
    CPU per test; they read it at memory speed, a token only as far as the expected line's tokens go."""
    import resource

    from execrl.sandbox.compare import CompareOptions, outputs_match

    before = resource.getrusage(resource.RUSAGE_SELF).ru_utime
    assert not outputs_match(expected, printed, CompareOptions(**opts))
    assert resource.getrusage(resource.RUSAGE_SELF).ru_utime - before < 1.0
    assert outputs_match("1.5 2\n", b"1.5000001 2  \n", CompareOptions(float_rel=1e-6))
    assert not outputs_match("1.5 2\n", b"1.5 2 3\n", CompareOptions(float_rel=1e-6))
    assert not outputs_match("1.5 2\n", b"1.5\n", CompareOptions(float_rel=1e-6))
    assert outputs_match("Yes \u00c9\n", "yES \u00c9".encode(), CompareOptions(case_fold=True))
    assert not outputs_match("Yes \u00c9\n", "yES \u00e9".encode(), CompareOptions(case_fold=True))  # (ASCII only)


# --- 12. found by an attack on the grader (2026-12-01, fourth session; each failed before its fix) -------------

SURROGATE = "def add(a, b):\n    raise ValueError(chr(0xd800))\n"


@pytest.mark.parametrize("tests", [{"asserts": ["assert add(1, 2) == 3"]},
                                   {"check": "def check(candidate):\n    assert candidate(1, 2) == 3\n",
                                    "entry_point": "add"},
                                   {"fn_name": "add", "inputs": ["1\n2"], "outputs": ["3"]},
                                   {"inputs": ["\n"], "outputs": ["3\n"]}], ids=["asserts", "check", "call", "stdio"])
def test_a_lone_surrogate_in_an_exception_message_comes_back_as_valid_text(grader, tests):
    """The message crossed json escaped and came back a lone surrogate: the multi-turn environment's feedback
    then made the tokenizer raise, and the training run died."""
    r = grader.grade(SURROGATE + "add(1, 2)\n" if "inputs" in tests and "fn_name" not in tests else SURROGATE, tests)
    assert r.verdict == V.RUNTIME_ERROR, r.to_dict()
    for text in [r.stderr] + [t.detail for t in r.tests] + [t.output for t in r.tests]:
        text.encode("utf-8")  # raises on a lone surrogate


def test_a_failed_value_is_previewed_in_time_linear_in_the_preview():
    """repr() of 4,400 integers of 4,299 digits: seconds of the grading process per test, for 1,000 characters."""
    code = "def f(n):\n    x = 10**4299 - 1\n    return [x] * 4400\n"
    tests = {"fn_name": "f", "inputs": ["1"] * 3, "outputs": [json.dumps(list(range(4400)))] * 3}
    with Grader(1, Limits(timeout_s=5.0, memory_mb=1024, output_mb=32)) as g:
        start = time.process_time()
        r = g.grade(code, tests)
    assert r.verdict == V.FAIL and r.tests[0].output.startswith("[<an integer of 14281 bits>, ") and len(r.tests[0].output) == 1000
    assert time.process_time() - start < 1.5  # (5.9 s before, on 2 cores)


@namespaces
def test_sockets_of_other_families_are_refused(grader):
    """AF_VSOCK is no network namespace's: its ports are the machine's, shared by every sandbox, and it reaches the
    hypervisor's host. AF_ALG would run a program's work in the kernel."""
    code = ("import socket\nfor family in (40, 38):\n    try:\n        socket.socket(family, socket.SOCK_STREAM)\n"
            "        print('made')\n    except OSError as e:\n        print(e.errno)\n"
            "socket.socket(socket.AF_INET6).close()\nsocket.socketpair()\nprint(len(socket.if_nameindex()) > 0)")
    r = grader.run(code)
    assert r.stdout.split() == ["97", "97", "True"], r


@namespaces
def test_inet_sockets_are_tcp_and_udp_only(grader):
    """(A hunt's find) UDP-Lite's and MPTCP's queues are in no file the sandbox measures: 1.6 GB of UDP-Lite
    queues were held under a 64 MB limit. Raw, SCTP, UDP-Lite, MPTCP and ICMP sockets are refused; socketpair of a
    family but unix too; TCP and UDP, by protocol number or 0, and with their flags, are made as before."""
    code = ("import socket\nout = []\nfor fam, kind, proto in ((2, 2, 136), (2, 1, 262), (10, 1, 262), (2, 3, 6), "
            "(2, 5, 132), (2, 2, 1), (10, 2, 136), (2, 1, 6), (2, 2, 17), (10, 1 | socket.SOCK_NONBLOCK, 0), "
            "(10, 2 | socket.SOCK_CLOEXEC, 17)):\n    try:\n        socket.socket(fam, kind, proto).close()\n"
            "        out.append('made')\n    except OSError as e:\n        out.append(e.errno)\n"
            "try:\n    socket.socketpair(socket.AF_INET, socket.SOCK_STREAM)\nexcept OSError as e:\n"
            "    out.append(e.errno)\nprint(*out)")
    r = grader.run(code)
    assert r.stdout.split() == ["93"] * 7 + ["made"] * 4 + ["97"], r


@namespaces
@pytest.mark.parametrize("mode", ["default", "bwrap-user"])
def test_no_lease_hint_or_inode_flag_on_the_streams_reaches_the_next_program(mode):
    """In bwrap-user mode a program owns the streams the zygote reuses: a read lease it left on them made the next
    programs' open of /dev/stdout block until the kernel broke it (45 s: their tests' timeout), and the write-life
    hint and the inode flags it set were read back by the next program. Each program now starts on streams with
    none of them."""
    leave = ("import fcntl, struct\nfor fd in (0, 1, 2):\n    try:\n        fcntl.fcntl(fd, 1024, fcntl.F_RDLCK)\n"
             "    except OSError:\n        pass\n    try:\n        fcntl.fcntl(fd, 1036, struct.pack('Q', 5))\n"
             "    except OSError:\n        pass\ntry:\n    fcntl.ioctl(1, 0x40086602, struct.pack('l', 0x80 | 0x40))\n"
             "except OSError:\n    pass\nprint('ok')")
    read = ("import fcntl, struct\nwith open('/dev/stdout', 'w') as f:\n    f.write('')\n"
            "hints = [struct.unpack('Q', fcntl.fcntl(fd, 1035, bytes(8)))[0] for fd in (0, 1, 2)]\n"
            "flags = struct.unpack('l', fcntl.ioctl(1, 0x80086601, bytes(8)))[0]\n"
            "leases = [fcntl.fcntl(fd, 1025) for fd in (0, 1, 2)]\n"
            "print('ok' if hints == [0, 0, 0] and flags == 0 and leases == [2, 2, 2] else (hints, flags, leases))")
    with _grader(mode) as g:
        assert graded_quickly(g, read).verdict == V.PASS
        assert graded_quickly(g, leave).verdict == V.PASS
        r = graded_quickly(g, read)
        assert r.verdict == V.PASS, (r.tests[0].verdict, r.tests[0].output)


@namespaces
@pytest.mark.parametrize("mode", ["default", "bwrap-user"])
def test_a_program_may_set_its_own_processes_limits(mode):
    """The filter refused prlimit on any pid but 0: a program setting its own limits by pid, or its child's (as
    psutil and test harnesses do), got EPERM. Only the zygote's pid is refused."""
    code = ("import os, resource, subprocess, sys\nchild = subprocess.Popen([sys.executable, '-c', 'import time; "
            "time.sleep(30)'])\nfor pid in (os.getpid(), child.pid):\n    resource.prlimit(pid, resource.RLIMIT_CORE, "
            "(0, 0))\nprint(resource.prlimit(child.pid, resource.RLIMIT_CORE))\nchild.kill()")
    with _grader(mode) as g:
        r = g.run(code)
        assert r.verdict == V.PASS and r.stdout.strip() == "(0, 0)", (r.stdout, r.stderr)


@namespaces
@pytest.mark.parametrize("mode", ["default", "bwrap-user"])
def test_the_channel_to_the_checker_is_in_the_programs_network_namespace(mode):
    """The assert and check forms' channel (the program's fd 4) was a socket the grading process made, in the
    host's network namespace: an interface ioctl on it listed the host's interfaces and addresses, and an abstract
    name bound on it was the host's (a service's name squatted; a signal between programs graded at once). The
    program's runner now makes it, in the program's own namespace."""
    code = ("import array, fcntl, os, socket, struct\n"
            "buf = array.array('B', bytes(40 * 32))\n"
            "n = struct.unpack('iL', fcntl.ioctl(4, 0x8912, struct.pack('iL', len(buf), buf.buffer_info()[0])))[0]\n"
            "names = [buf.tobytes()[i:i + 16].rstrip(bytes(1)).decode() for i in range(0, n, 40)]\n"
            "socket.socket(fileno=os.dup(4)).bind(b'\\0execrl-channel-test')\n"
            "own = any(line.rstrip().endswith('@execrl-channel-test') for line in open('/proc/net/unix'))\n"
            "def f():\n    return names, own\n")
    with _grader(mode) as g:
        r = graded_quickly(g, code, {"asserts": ["assert f() == (['lo'], True), f()"]})
        assert r.verdict == V.PASS, (r.tests[0].detail, r.stderr)


def test_a_reply_trickled_to_the_checker_times_out_with_its_call():
    """A program that announced a long reply on its channel and sent it a byte every 1.5 s held each call for the
    whole program's wall limit (each read had its own timeout): the call's time is now the whole reply's."""
    import time

    code = ("import os, socket, struct, time\ns = socket.socket(fileno=os.dup(4))\n"
            "n = struct.unpack('>I', s.recv(4, socket.MSG_WAITALL))[0]\ns.recv(n, socket.MSG_WAITALL)\n"
            "s.sendall(struct.pack('>I', 100012))\nwhile True:\n    s.send(b' ')\n    time.sleep(1.5)\n")
    with Grader(1, Limits(timeout_s=1)) as g:
        t = time.monotonic()
        r = g.grade(code, {"asserts": ["assert f(1) == 2", "assert f(2) == 2", "assert f(3) == 2"]})
        assert r.verdict == V.TIMEOUT and time.monotonic() - t < 6, (r.verdict, time.monotonic() - t)


READ_SELF = ("x = bytearray(100 << 20)\nprint([open('/proc/self/' + n).read().strip() for n in ('oom_score_adj', "
             "'coredump_filter')], open('/proc/1/autogroup').read().split()[-1])")
SET_ZYGOTE = ("import resource\ntry:\n    resource.prlimit(1, resource.RLIMIT_DATA, (32 << 20, 32 << 20))\n"
              "except OSError:\n    pass\nfor name, value in (('oom_score_adj', '1000'), ('coredump_filter', '0x1a5'), "
              "('autogroup', '19')):\n    try:\n        with open('/proc/1/' + name, 'w') as f:\n"
              "            f.write(value)\n    except OSError:\n        pass\nprint('ok')")


@namespaces
@pytest.mark.parametrize("mode", ["default", "bwrap-user"])
def test_a_program_cannot_set_what_the_zygote_and_later_programs_inherit(mode):
    """In bwrap-user mode a program is the zygote's uid: prlimit on PID 1 lowered the limits every later program
    inherits (200 MB became a MemoryError, a stack limit a crash, a lowered hard limit the next program's
    infra_error), and the zygote's OOM score adjustment, core dump filter and autogroup nice, written through
    /proc/1, carried to every later program. Each later program now starts as the first did."""
    with _grader(mode) as g:
        fresh = g.run(READ_SELF)
        assert fresh.verdict == V.PASS, fresh.stderr
        assert graded_quickly(g, SET_ZYGOTE).verdict == V.PASS
        for _ in range(2):
            after = g.run(READ_SELF)
            assert after.verdict == V.PASS and after.stdout == fresh.stdout, (fresh.stdout, after.stdout, after.stderr)


@namespaces
@pytest.mark.parametrize("mode", ["default", "bwrap-user"])
def test_no_sysctl_is_writable_from_a_program(mode):
    """bwrap leaves /proc/sys uncovered where it cannot write it itself: EXECRL_SANDBOX=bwrap-user on a root grader
    ran programs as the host's uid 0 without capabilities, whom the owner's bits let write kernel.core_pattern and
    every other host-wide sysctl (a hostname or port range set that way also stayed for later programs)."""
    code = ("import os\nopened = []\nfor p in ('kernel/core_pattern', 'kernel/hostname', 'vm/drop_caches', "
            "'net/ipv4/ip_local_port_range'):\n    try:\n        os.close(os.open('/proc/sys/' + p, os.O_WRONLY))\n"
            "        opened.append(p)\n    except OSError:\n        pass\nprint('ok' if not opened else opened)")
    with _grader(mode) as g:
        r = graded_quickly(g, code)
        assert r.verdict == V.PASS, (r.tests[0].output, r.stderr)


# --- 14. found by an attack on the grader (2026-12-04; each failed before its fix) -----------------------------

def test_a_rows_forged_status_line_with_a_test_index_out_of_range_is_no_tests(grader):
    """A row's test code runs in the checker and can write the checker's status lines: one naming test 99 (or -1)
    raised IndexError out of grade(), and `execrl grade` lost the whole file. Lines naming no test of the row are
    dropped; the row's own verdicts stand."""
    for forged in (99, -1):
        tests = {"asserts": [f"import os\nos.write(3, b'{{\"test\": {forged}, \"verdict\": \"fail\"}}\\n')\n"
                             "assert f(1) == 2"]}
        r = grader.grade("def f(x):\n    return x + 1\n", tests)
        assert r.verdict == V.PASS and len(r.tests) == 1, r.to_dict()


@pytest.mark.parametrize("code, test, verdict", [
    ("def sorted_copy(a):\n    a.sort()\n    return a", "a = [3, 1, 2]\nassert sorted_copy(a) == [1, 2, 3]\n"
     "assert a == [3, 1, 2]", V.FAIL),  # (passed: the test's list never saw the program's sort)
    ("def move_zeroes(nums):\n    nums[:] = [x for x in nums if x] + [0] * nums.count(0)",
     "nums = [0, 1, 0, 3]\nmove_zeroes(nums)\nassert nums == [1, 3, 0, 0]", V.PASS),  # (failed: LeetCode's in-place)
    ("def rotate(m):\n    m[:] = [list(r) for r in zip(*m[::-1])]", "m = [[1, 2], [3, 4]]\nrotate(m)\n"
     "assert m == [[3, 1], [4, 2]]", V.PASS),
    ("def transpose(m):\n    for i in range(len(m)):\n        for j in range(i):\n"
     "            m[i][j], m[j][i] = m[j][i], m[i][j]", "m = [[1, 2], [3, 4]]\nrow = m[0]\ntranspose(m)\n"
     "assert m == [[1, 3], [2, 4]] and row == [1, 3]", V.PASS),  # a row the test holds changes too
    ("def fill(d, seen=None):\n    d['a'] = 1\n    del d['b']\n    seen.add(3)",
     "d, s = {'b': 2}, {1}\nfill(d, seen=s)\nassert d == {'a': 1} and s == {1, 3}", V.PASS),
    ("def f(a):\n    a.append(1)\n    raise ValueError('x')", "a = []\ntry:\n    f(a)\nexcept ValueError:\n"
     "    pass\nassert a == [1]", V.PASS),  # changed, then raised: changed, as in Python
    # (a review's finds) a subclass argument changed in place stays its class; what the call left alone is untouched
    ("def f(c):\n    del c['a']\n    return len(c)", "from collections import Counter\nc = Counter('aab')\n"
     "assert f(c) == 1 and isinstance(c, Counter) and c['zz'] == 0", V.PASS),
    ("def f(d):\n    d['x'] = 1", "from collections import defaultdict\ng = defaultdict(list)\nd = {'g': g}\nf(d)\n"
     "assert d['g'] is g\ng['new'].append(1)\nassert d['x'] == 1", V.PASS),
    ("def f(rows):\n    rows.append(9)", "l = [1]\nrows = [l, (l,)]\nf(rows)\nl.append(2)\n"
     "assert rows == [[1, 2], ([1, 2],), 9]", V.PASS),  # an unchanged tuple keeps the test's own list
    ("def fill(b):\n    b[0][0] = 1", "b = [[0] * 2] * 2\nfill(b)\nassert b == [[1, 0], [1, 0]]", V.PASS),  # shared rows
    ("def f(d):\n    d['a'].append(1)", "l = []\nd = {'a': l, 'b': l}\nf(d)\nassert l == [1]", V.PASS),
])
def test_a_calls_changes_to_its_arguments_reach_the_test(grader, code, test, verdict):
    """Arguments cross to the program as copies: a program that sorted its argument in place passed a test that the
    argument was left alone, and a right in-place solution failed. Each list, dict or set argument the call changed
    comes back and the test's own object changes with it."""
    r = grader.grade(code, {"asserts": [test]})
    assert r.verdict == verdict, r.to_dict()


FORGED_CHANGES = ("import sys\nchild = next(m for k, m in list(sys.modules.items()) if hasattr(m, '_changed'))\n"
                  "child._changed = lambda sent, req: FORGED\ndef f(a):\n    a.append(1)\n")


@pytest.mark.parametrize("forged", ["[[0, {'handle': 1}]]", "[[5, [1]]]", "[['zz', [2]]]", "[[0, {'dict': []}]]",
                                    "[[0]]", "'x'"])
def test_a_forged_change_of_an_argument_is_the_programs_error(grader, forged):
    """The changes come from the program's process, which can send anything in their place: what is not a change
    of one of the call's arguments into plain data of its kind fails the test, never the grader."""
    r = grader.grade(FORGED_CHANGES.replace("FORGED", forged), {"asserts": ["a = []\nf(a)\nassert a == [1]"]})
    assert r.verdict == V.RUNTIME_ERROR, r.to_dict()


def test_a_module_the_tests_forgot_to_import_is_the_module_not_the_programs():
    """`numpy.allclose` in a test without `import numpy` was the program's to define (only the standard library's
    names and `np` were imported for the tests): `class numpy: allclose = lambda *a, **k: True` passed. Other installed
    packages' names stay the program's (its `regex` object, a class named `markdown`)."""
    pytest.importorskip("numpy")
    hack = "class numpy:\n    allclose = staticmethod(lambda *a, **k: True)\ndef f(x):\n    return [0.0, 0.0]"
    right = "import numpy\ndef f(x):\n    return [1.0, 2.0]"
    tests = {"asserts": ["assert numpy.allclose(f(1), [1.0, 2.0])"]}
    with Grader(1, FAST) as g:
        assert g.grade(hack, tests).verdict == V.FAIL
        assert g.grade(right, tests).verdict == V.PASS
        assert g.grade("import re\nregex = re.compile('a+b')", {"asserts": ["assert regex.fullmatch('aab')"]}).verdict \
            == V.PASS


def test_a_module_the_tests_forgot_to_import_and_that_is_not_installed_is_no_programs_to_define():
    """Where that module does not import where the tests run (pandas, scipy: not execrl's dependencies), the name was
    left to the program: `class pd: isclose = lambda *a, **k: True` passed a wrong answer. Now no sample is judged by
    such a test: infra_error, naming the module (winreg: the standard library's, on Windows only)."""
    hack = "class winreg:\n    QueryValue = staticmethod(lambda *a, **k: True)\ndef f(x):\n    return 12345.0"
    with Grader(1, FAST) as g:
        r = g.grade(hack, {"asserts": ["assert winreg.QueryValue(f(1), 0.5)"]})
        assert r.verdict == V.INFRA_ERROR and "winreg" in r.tests[0].detail, r.to_dict()
        assert "install it in the sandbox's Python" in r.tests[0].detail


@pytest.mark.parametrize("mode", ["exact", "lines", "lcb"])
def test_bytes_that_are_no_utf8_never_equal_the_replacement_character(mode):
    from execrl.sandbox.compare import CompareOptions, outputs_match

    opts = CompareOptions(mode=mode)
    assert not outputs_match("\ufffd", b"\xff", opts)
    assert outputs_match("\ufffd", "\ufffd".encode(), opts) and outputs_match("caf\u00e9", "caf\u00e9".encode(), opts)


@namespaces  # (without namespaces the program's sockets are the host's namespace's, not measured)
def test_netlink_replies_held_in_socket_queues_count_as_memory():
    """(A hunt's find) a netlink request of an unknown type gets an error reply that echoes it into the socket's own
    receive queue, memory that no cgroup is charged for: 4 processes of 240 sockets held 2.4 GB of the host's memory
    under a 64 MB limit, and passed. Here 2 processes, ~1 GB under 256 MB: a memory verdict."""
    code = ("import os, socket, struct, time\nos.fork()\nbody = bytes(32 << 10)\n"
            "msg = struct.pack('=IHHII', 16 + len(body), 0x7FF0, 1, 1, 0) + body\nsocks = []\n"
            "for i in range(240):\n    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)\n"
            "    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)\n"
            "    for _ in range(12):\n        s.send(msg)\n    socks.append(s)\ntime.sleep(1.5)\nprint('ok')")
    with Grader(1, Limits(timeout_s=5.0, memory_mb=256)) as g:
        r = graded_quickly(g, code, {"inputs": [""], "outputs": ["ok\n"]})
        assert r.verdict == V.MEMORY, (r.to_dict(), r.stderr[-300:])
        ok = g.grade("import socket\nprint(len(socket.if_nameindex()) > 0)", {"inputs": [""], "outputs": ["True\n"]})
        assert ok.verdict == V.PASS, ok.to_dict()  # (netlink itself still works, and the worker after it)


@namespaces  # (the sockets of the sandbox's own network namespace are counted)
def test_a_program_holding_more_netlink_sockets_than_it_may_is_over_its_memory(grader):
    """(A hunt's find) 60 processes of 250 bound netlink sockets each, asleep: listing them (to measure their queues)
    took the runner 250 ms a read, a core of its own for the program's whole wall time, outside its limits. Over
    MAX_NETLINK_SOCKETS at once (the kernel's own and the runner's among them) the program is over its memory limit,
    told within its time; 200 sockets are fine."""
    from execrl.sandbox.inside.zygote import MAX_NETLINK_SOCKETS

    code = ("import os, socket, sys, time\nn, procs = map(int, sys.stdin.read().split())\nkids = []\n"
            "for _ in range(procs - 1):\n    pid = os.fork()\n    if pid == 0:\n        kids = ()\n        break\n"
            "    kids.append(pid)\nheld = [socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0) for _ in "
            "range(n)]\nfor s in held:\n    s.bind((0, 0))\ntime.sleep(0.4)\nprint('ok', flush=True)\n"
            "for pid in kids:\n    os.waitpid(pid, 0)")
    assert 220 <= MAX_NETLINK_SOCKETS < 3 * 120  # (each process's open files are limited)
    assert grader.grade(code, stdio(["100 2\n"], ["ok\n" * 2])).verdict == V.PASS
    began = time.monotonic()
    assert grader.grade(code, stdio(["120 3\n"], ["ok\n" * 3])).verdict == V.MEMORY
    assert time.monotonic() - began < 5


def test_no_core_dump_reaches_a_piped_core_handler(grader):
    """(A hunt's find) RLIMIT_CORE 0 is ignored where the host's core_pattern pipes to a handler (apport,
    systemd-coredump): 500 crashing children sent 500 cores to a root helper outside every limit. A limit of 1 aborts
    a piped dump (and is below any core file's size); the program cannot raise it."""
    code = ("import resource\nprint(resource.getrlimit(resource.RLIMIT_CORE))\ntry:\n"
            "    resource.setrlimit(resource.RLIMIT_CORE, (1 << 30, 1 << 30))\nexcept ValueError:\n    print('kept')")
    r = graded_quickly(grader, code, {"inputs": [""], "outputs": ["(1, 1)\nkept\n"]})
    assert r.verdict == V.PASS, (r.to_dict(), r.stderr[-300:])


def test_a_read_cannot_ask_whether_a_page_is_in_the_page_cache(grader):
    """(A hunt's find) preadv2 with RWF_NOWAIT fails where a page is not cached: one program set bits by reading
    pages of a large shared read-only file, a later one (of another grader, minutes later) read them back and passed.
    The flag is refused as a file that cannot do it refuses it; preadv2 without it reads as before."""
    code = ("import os, sys\nfd = os.open(sys.executable, os.O_RDONLY)\nbuf = bytearray(4096)\n"
            "try:\n    os.preadv(fd, [buf], 0, os.RWF_NOWAIT)\n    print('read')\nexcept OSError as e:\n"
            "    print(e.errno)\nprint(os.preadv(fd, [buf], 0, 0), os.preadv(fd, [buf], 0, os.RWF_HIPRI))\n"
            "import ctypes, platform\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "stat, rng = ctypes.create_string_buffer(64), ctypes.create_string_buffer(16)\n"  # cachestat(fd, range, stat, 0): the same question
            "print(libc.syscall(451, fd, rng, stat, 0), ctypes.get_errno() if platform.machine() in "
            "('x86_64', 'aarch64') else 38)")
    r = grader.run(code)
    assert r.stdout.split() == ["95", "4096", "4096", "-1", "38"], r


@namespaces  # (the sockets of the sandbox's own network namespace are counted)
def test_a_program_holding_more_tcp_and_udp_sockets_than_it_may_is_over_its_memory(grader):
    """(A hunt's find) 60 processes of 240 UDP sockets each: measuring their queues took the runner 340 ms a read, a
    core for the program's whole wall time, outside its limits. Over MAX_INET_SOCKETS at once the program is over
    its memory limit; 200 sockets are fine."""
    from execrl.sandbox.inside.zygote import MAX_INET_SOCKETS

    code = ("import os, socket, sys, time\nn, procs = map(int, sys.stdin.read().split())\nkids = []\n"
            "for _ in range(procs - 1):\n    pid = os.fork()\n    if pid == 0:\n        kids = ()\n        break\n"
            "    kids.append(pid)\nheld = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in "
            "range(n)]\nfor s in held:\n    s.bind(('127.0.0.1', 0))\ntime.sleep(0.4)\nprint('ok', flush=True)\n"
            "for pid in kids:\n    os.waitpid(pid, 0)")  # (the first waits for the others: each prints)
    assert 200 <= MAX_INET_SOCKETS < 3 * 120  # (each process's open files are limited)
    assert grader.grade(code, stdio(["100 2\n"], ["ok\n" * 2])).verdict == V.PASS
    assert grader.grade(code, stdio(["120 3\n"], ["ok\n" * 3])).verdict == V.MEMORY


def test_socket_queues_are_read_only_where_they_hold_data():
    """(CI's find) A loop of loopback connections was `memory` once in ~40 runs: a socket in SYN_SENT can list its
    initial sequence number as its send queue, and the kernel prints a send queue read as a transient negative as
    a 32-bit unsigned number. Neither is a byte the program holds."""
    from execrl.sandbox.inside.zygote import INET_QUEUES, listed_queue_bytes

    tcp_states = dict(INET_QUEUES)["/proc/self/net/tcp"]
    row = "   {}: 0100007F:8AE2 0100007F:9C41 {} {}:{} 00:00000000 00000000  1000  0 {} 1 0000000000000000 20 4 30 10 -1"
    tcp = [row.format(0, "0A", "00000000", "00000040", 11).encode(),  # listening: a backlog of 64 connections
           row.format(1, "02", "E3A1B2C4", "00000000", 12).encode(),  # SYN_SENT: its sequence number
           row.format(2, "01", "FFFFFFFF", "00000000", 13).encode(),  # ESTABLISHED, read mid-update
           row.format(3, "01", "00001000", "00000200", 14).encode(),  # ESTABLISHED: 4096 to send, 512 to read
           row.format(4, "06", "00000000", "00000000", 15).encode(),  # TIME_WAIT
           row.format(5, "09", "00000100", "00000000", 16).encode()]  # LAST_ACK, still sending 256
    assert listed_queue_bytes(tcp, tcp_states) == 4096 + 512 + 256
    udp = [row.format(0, "07", "00000000", "00003000", 17).encode()]  # an unconnected UDP socket's 12 KiB received
    assert listed_queue_bytes(udp, dict(INET_QUEUES)["/proc/self/net/udp"]) == 0x3000


def test_a_kernel_without_ipv6_tables_is_measured_as_one_without_ipv6_sockets(monkeypatch):
    """(A review's find) A host booted with ipv6.disable=1 has no sockstat6, tcp6 or udp6: reading them at every poll
    raised, and every program was an infra_error."""
    from execrl.sandbox.inside import zygote

    monkeypatch.setattr(zygote, "SOCKSTAT", (*zygote.SOCKSTAT[:1], "/proc/self/net/no_such_table"))
    monkeypatch.setattr(zygote, "INET_QUEUES", ((zygote.INET_QUEUES[0][0], zygote.TCP_DATA_STATES),
                                                ("/proc/self/net/no_such_table", None)))
    assert zygote._inet_sockets() >= 0
    monkeypatch.setattr(zygote, "_inet_sockets", lambda: 1)  # (as the namespace holds one: the queues are read)
    assert zygote._inet_queue_memory() >= 0


@namespaces  # (the sockets of the sandbox's own network namespace are counted)
def test_connections_left_in_time_wait_count_toward_the_socket_limit(grader):
    """(A hunt's find) A loop of short loopback connections left ~19,000 in TIME_WAIT a test (sockstat's inuse leaves
    them out), each a line the runner parsed at every reading: 19 s of the runner's CPU for a program charged 9.6.
    Each counts a sixteenth of a socket: 4,200 are over, 1,000 are fine."""
    code = ("import socket\nn = int(input())\nsrv = socket.create_server(('127.0.0.1', 0), backlog=64)\n"
            "for _ in range(n):\n    c = socket.create_connection(srv.getsockname())\n    a, _ = srv.accept()\n"
            "    c.close()\n    a.close()\nimport time\ntime.sleep(0.1)\nprint('ok')")
    assert grader.grade(code, stdio(["1000\n"], ["ok\n"])).verdict == V.PASS
    assert grader.grade(code, stdio(["4200\n"], ["ok\n"])).verdict == V.MEMORY


def test_a_program_cannot_evict_the_host_s_page_cache_or_read_past_it(solo):
    """(A hunt's find) posix_fadvise(DONTNEED) evicted every library a program could see (the host's next imports
    read the disk, 2.2x slower), and O_DIRECT reads of a shared library held the disk for the host (its reads 3.2x
    slower) for little of the program's CPU. fadvise64, readahead and madvise's COLD and PAGEOUT return 0 without
    running (on a descriptor or an address that does not exist, where the kernel says EBADF or ENOMEM); O_DIRECT in
    open, openat and fcntl(F_SETFL) is EINVAL; openat2, whose flags the filter cannot read, ENOSYS; plain opens
    read as before."""
    code = LIBC + (
        "import os, sys, mmap\n"
        "nr = {'x86_64': (221, 187, 28, 437, 0x4000), 'aarch64': (223, 213, 233, 437, 0x10000)}[os.uname().machine]\n"
        "fadvise, readahead, madvise, openat2, direct = nr\n"
        "got = [libc.syscall(fadvise, 987, 0, 0, 4), libc.syscall(readahead, 987, 0, 4096)]\n"
        "got += [libc.syscall(madvise, ctypes.c_void_p(4096), 4096, a) for a in (20, 21)]\n"
        "print('no-ops' if got == [0, 0, 0, 0] else 'ran: %s' % got)\n"
        "for how in ('open', 'fcntl'):\n"
        "    try:\n"
        "        fd = os.open(sys.executable, os.O_RDONLY | (direct if how == 'open' else 0))\n"
        "        if how == 'fcntl':\n"
        "            import fcntl\n"
        "            fcntl.fcntl(fd, fcntl.F_SETFL, direct)\n"
        "        print(how, 'direct')\n"
        "    except OSError as e:\n"
        "        print(how, e.errno)\n"
        "libc.syscall(openat2, -100, b'/', None, 0)\n"
        "print('openat2', ctypes.get_errno(), len(os.pread(os.open(sys.executable, os.O_RDONLY), 4096, 0)))\n"
        "pidfd = libc.syscall(434, os.getpid(), 0)  # pidfd_open, then process_madvise(MADV_PAGEOUT) on its own pages\n"
        "m = mmap.mmap(os.open(sys.executable, os.O_RDONLY), 4096, prot=mmap.PROT_READ)\n"
        "iov = (ctypes.c_size_t * 2)(ctypes.addressof(ctypes.c_char.from_buffer_copy(b'x')), 4096)\n"
        "print('process_madvise', libc.syscall(440, pidfd, iov, 1, 21, 0), ctypes.get_errno())")
    r = solo.run(code)
    assert r.stdout.split("\n")[:5] == ["no-ops", "open 22", "fcntl 22", "openat2 38 4096",
                                         "process_madvise -1 38"], r
