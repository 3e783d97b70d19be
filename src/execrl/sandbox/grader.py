"""Grade one program against its tests on a warm worker; turn raw process results into verdicts."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field, replace

from execrl.sandbox.compare import outputs_match, values_match
from execrl.sandbox.inside.protocol import (
    MAX_NODES,
    STARVED_CAP,
    carry_status,
    decode,
    encode,
    node_marks,
    too_many_nodes,
)
from execrl.sandbox.languages import Language, get_language, tests_refused
from execrl.sandbox.pool import ReplyUnreadable, Worker, WorkerDied, WorkerPool
from execrl.sandbox.preview import preview
from execrl.sandbox.spec import (
    OUTPUT_MB,
    AssertTests,
    CallTests,
    CheckTests,
    StdioTests,
    TestSpec,
    TestSpecError,
    Verdict,
    num_tests,
    parse_tests,
)

V = Verdict


class SandboxUnusable(RuntimeError):
    """The sandbox cannot run programs of a language on this machine; the message says how to fix
    it."""


class SandboxFailing(RuntimeError):
    """Too many programs ended infra_error: the sandbox, not the model, is failing; going on would
    train on nothing."""


INFRA_WARN, INFRA_STOP = 0.05, 0.5  # shares of a batch's graded samples


def check_infra_share(num_infra: float, num_samples: float, where: str, example: str = "",
                      stop: bool = True) -> str | None:
    """None while the sandbox is healthy; a warning line above INFRA_WARN of the samples;
    SandboxFailing above INFRA_STOP (with `stop`; else the line says how many). `example`: one
    infra_error's message, which usually names the cause."""
    share = num_infra / max(num_samples, 1)
    if share <= INFRA_WARN:
        return None
    cause = f" First error: {' '.join(example.split())[:300]}" if example else ""
    line = (f"{where}: {num_infra:.0f} of {num_samples:.0f} programs graded ({share:.0%}) ended infra_error: the sandbox "
            f"failed, not the model, and those samples are left out of rewards and scores.{cause}")
    if share > INFRA_STOP and stop:
        raise SandboxFailing(line + " Stopping: fix the sandbox (run `execrl grade` on a small file to see it fail), "
                             "then resume.")
    return line


MIN_TIMEOUT_S = 0.01  # the least CPU time per test a row or a run may set (at 1 ms every program timed out: a hunt's
# find; a forked Python answers in a few ms)


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 2.0  # per test: CPU seconds; the wall-clock kill comes at max(2x, x + 1s)
    memory_mb: int = 1024  # address space, hard limit
    output_mb: int = OUTPUT_MB  # stdout cap, and the size of any file the program writes
    nproc: int = field(default_factory=lambda: max(64, 2 * (os.cpu_count() or 1) + 16))  # processes and threads
    # (enforced wherever the program's uid is not root): room for multiprocessing.Pool(), a process a CPU
    compile_timeout_s: float = 30.0
    compile_memory_mb: int = 2048
    compile_output_mb: int = 128  # the compiler's files (a binary of 20 MB of initialized arrays is a normal program)
    stop_after_timeout: bool = True  # after a test times out, report the rest as timeout without running them


@dataclass
class TestResult:
    __test__ = False  # not a pytest class
    verdict: Verdict
    cpu_s: float = 0.0
    wall_s: float = 0.0
    detail: str = ""
    error: str = ""  # the exception class that ended the program, e.g. "NameError" (Python only)
    stdout_bytes: int = 0
    output: str = ""  # a failed stdin/stdout or call test: what the program printed or returned (its start)


@dataclass
class ProgramResult:
    verdict: Verdict
    tests: list[TestResult]
    stderr: str = ""

    @property
    def passed(self) -> int:
        return sum(t.verdict == V.PASS for t in self.tests)

    @property
    def total(self) -> int:
        return len(self.tests)

    def to_dict(self) -> dict:
        d = {"verdict": self.verdict.value, "passed": self.passed, "total": self.total,
             "tests": [t.verdict.value for t in self.tests]}
        if self.stderr:
            d["stderr"] = self.stderr
        timed = [{"test": i, "cpu_s": round(t.cpu_s, 3), "wall_s": round(t.wall_s, 3)}
                 for i, t in enumerate(self.tests) if t.verdict == V.TIMEOUT and t.wall_s > 0]
        if timed:  # (the CPU and the clock a timed-out test used: out of CPU, or waiting; a hunt's find: a busy
            d["timeouts"] = timed  # machine's timeouts looked like any others)
        return d


@dataclass
class RunResult:
    """One run of a program with no tests (a code-interpreter cell)."""

    verdict: Verdict  # pass: it ran to the end and exited 0; otherwise why not (runtime_error, timeout, ...)
    stdout: str
    stderr: str  # the traceback, for a program that raised (8 KiB at most: a longer stream's first and last 4 KiB;
    # the sandbox's own frames left out)
    exit: int = 0  # its exit status; minus the signal's number where one ended it


OUTPUT_PREVIEW = 1000  # characters of a failed test's output kept in TestResult.output
MAX_PROGRAM_MB = 16  # a program's source is written to its sandbox's tmpfs: a larger one is refused unrun


def program_too_large(code: str) -> str:
    """Why a program is too large to run ("" if it is not), without encoding more than
    MAX_PROGRAM_MB of it."""
    limit = MAX_PROGRAM_MB << 20
    if len(code) > limit or len(code.encode("utf-8", "surrogatepass")) > limit:
        return f"the program is larger than {MAX_PROGRAM_MB} MiB"
    return ""


def program_verdict(tests: list[TestResult]) -> Verdict:
    if any(t.verdict == V.INFRA_ERROR for t in tests):
        return V.INFRA_ERROR
    return next((t.verdict for t in tests if t.verdict != V.PASS), V.PASS)


class Grader:
    """Grades programs in warm sandboxes. Thread-safe; `grade_many` runs one program per worker at a
    time."""

    def __init__(self, num_workers: int = 0, limits: Limits = Limits(), pool: WorkerPool | None = None,
                 languages: tuple[str, ...] = ("python",), self_test: bool = True):
        """languages: those the programs will be in; each must work in the sandbox before anything
        is graded (the self-test runs a hello-world of each and raises SandboxUnusable, with the
        fix, if one does not)."""
        self.limits = limits
        self._apart = threading.Lock()
        langs = [get_language(name) for name in languages]
        self.pool = pool or WorkerPool(num_workers)
        if self_test:
            try:
                self.self_test(langs)
            except BaseException:
                self.close()
                raise

    def share(self, fraction: float) -> int:
        """How many of the pool's workers `fraction` of them is (a share that grades beside generation): at least
        one for any fraction above 0, none for 0."""
        return max(1, int(max(1, self.pool.num_workers) * fraction)) if fraction > 0 else 0

    def describe(self) -> str:
        """The start-up line: how programs are isolated, and how their memory and CPU are
        accounted."""
        return (f"sandbox: {self.pool.iso.mode}, {self.pool.num_workers} workers; "
                f"{self.pool.accounting.describe()}")

    def self_test(self, languages: list[Language]) -> None:
        for lang in languages:
            missing = [t for t in lang.tools if shutil.which(t) is None]
            if missing:
                raise SandboxUnusable(f"{lang.name} programs need {', '.join(missing)}, which is not installed here: "
                                      f"install it, or leave {lang.name} rows out")
            if not lang.hello:
                continue
            lim = replace(self.limits, timeout_s=max(self.limits.timeout_s, 10.0), memory_mb=max(self.limits.memory_mb, 512))
            result = self.grade(lang.hello, StdioTests([""], ["hello\n"]), lang.name, lim)
            if result.verdict != V.PASS:
                why = (result.stderr or (result.tests[0].detail if result.tests else "") or result.verdict.value)
                why = " ".join(why.split())[-300:]
                tools = ", ".join(lang.tools) or lang.name
                fix = (f"make {sys.prefix} and the interpreter it comes from readable by other users" if
                       lang.fork_python else f"make {tools}'s files readable by other users "
                       "and keep what they read in their own installation (a file outside it, such as a symlink into "
                       "/etc or a home directory, is not in the sandbox); a runtime that reserves address space up "
                       "front (node, the JVM) needs address_space_mb in its languages YAML")
                raise SandboxUnusable(
                    f"the sandbox cannot run a {lang.name} hello-world ({result.verdict.value}: {why}). Fix: {fix}; "
                    "or run with EXECRL_SANDBOX=none to grade without isolation (unsafe; see docs/sandbox.md, Threat "
                    "model)")

    def grade(self, code: str, tests: TestSpec | dict | str, language: str = "python",
              limits: Limits | None = None) -> ProgramResult:
        spec = tests if isinstance(tests, (StdioTests, CallTests, AssertTests, CheckTests)) else parse_tests(tests)
        lang, lim = get_language(language), limits or self.limits
        if refused := tests_refused(lang.name, spec):
            raise TestSpecError(refused)
        too_large = program_too_large(code)
        if too_large:
            return ProgramResult(V.RUNTIME_ERROR, [TestResult(V.RUNTIME_ERROR, detail=too_large)] * num_tests(spec),
                                 stderr=too_large)
        try:
            with self.pool.worker() as w:
                w.use(lang.tools)
                return _grade_on(w, code, spec, lang, lim)
        except WorkerDied as e:
            return ProgramResult(V.INFRA_ERROR, [TestResult(V.INFRA_ERROR, detail=str(e)[:500])] * num_tests(spec),
                                 stderr=str(e)[-2000:])

    def run(self, code: str, stdin: str = "", language: str = "python", limits: Limits | None = None) -> RunResult:
        """Run a program once, with no tests, under the same sandbox and limits: its stdout, stderr
        and verdict."""
        lang, lim = get_language(language), limits or self.limits
        if program_too_large(code):
            return RunResult(V.RUNTIME_ERROR, "", program_too_large(code))
        try:
            with self.pool.worker() as w:
                w.use(lang.tools)
                return _run_on(w, code, stdin, lang, lim)
        except WorkerDied as e:
            return RunResult(V.INFRA_ERROR, "", str(e)[-2000:])

    def run_apart(self, codes: list[str], language: str = "python", limits: Limits | None = None,
                  gap_s: float = 0.0) -> list[RunResult]:
        """Each program run once as `run` does, one after the other with `gap_s` seconds between, on
        workers of their own as far as the pool has them (programs that must not share a warm
        interpreter's hash seed, memory layout or process ids, or read a clock at the same tick:
        execrl.sandbox.repeat)."""
        lang, lim = get_language(language), limits or self.limits
        try:
            with ExitStack() as lent:
                with self._apart:  # (one caller gathering workers at a time: two callers never wait on each other)
                    workers = [lent.enter_context(self.pool.worker())
                               for _ in range(max(1, min(len(codes), self.pool.num_workers)))]
                for w in workers:
                    w.use(lang.tools)
                results = []
                for i, code in enumerate(codes):
                    if i and gap_s:
                        time.sleep(gap_s)
                    too_large = program_too_large(code)
                    results.append(RunResult(V.RUNTIME_ERROR, "", too_large) if too_large
                                   else _run_on(workers[i % len(workers)], code, "", lang, lim))
                return results
        except WorkerDied as e:
            return [RunResult(V.INFRA_ERROR, "", str(e)[-2000:]) for _ in codes]

    def grade_many(self, jobs: list[tuple], on_done=None) -> list[ProgramResult]:
        """jobs: (code, tests, language, limits) tuples; results come back in the same order, and on_done(i, result)
        is called as job i finishes. A single job runs in the calling thread: training grades each sample alone,
        from its environment's thread, and a thread started and joined for it cost ~0.3 ms of host time per sample.
        Ctrl-C (KeyboardInterrupt in the calling thread) amid several jobs drops those not started and stops the
        running ones with this grader's sandboxes (it is closed), then raises: waiting for every queued program took
        minutes. What finished before it reached on_done; what it stopped does not."""
        stopped = threading.Event()  # (a program the stop killed has no verdict of its own: not handed on)

        def one(i, job):
            result = self.grade(*job)
            if on_done is not None and not stopped.is_set():
                on_done(i, result)
            return result

        if len(jobs) <= 1:
            return [one(i, job) for i, job in enumerate(jobs)]
        with ThreadPoolExecutor(min(self.pool.num_workers, len(jobs))) as ex:
            futures = [ex.submit(one, i, job) for i, job in enumerate(jobs)]
            try:
                return [f.result() for f in futures]
            except KeyboardInterrupt:
                stopped.set()
                ex.shutdown(wait=False, cancel_futures=True)
                self.close()  # (the programs running now end with their sandboxes)
                raise

    def close(self) -> None:
        self.pool.close()

    def __enter__(self) -> Grader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _program(lang: Language, lim: Limits) -> dict:
    return {"file": lang.file, "python": lang.fork_python, "compile": list(lang.compile) or None,
            "run": list(lang.run), "limits": {**asdict(lim), "address_space_mb": lang.address_space_mb}}


def _per_test_wall(lim: Limits) -> float:
    """How long the grader waits for a test's reply: its wall limit as the runner may stretch it for a program that
    waited for a CPU (protocol.STARVED_CAP; a review's find: a reply past the grader's wait was an infra_error)."""
    return STARVED_CAP * max(2 * lim.timeout_s, lim.timeout_s + 1) + 5


def _run_on(w: Worker, code: str, stdin: str, lang: Language, lim: Limits) -> RunResult:
    run = dict(_program(lang, lim), op="run", mode="stdio", tests=[{}], stop_after_timeout=True)
    blobs = [code.encode("utf-8", "surrogatepass"), stdin.encode("utf-8", "surrogatepass")]
    w.runner.send(run, blobs)
    try:
        results = list(_results(w, _per_test_wall(lim) + (2 * STARVED_CAP + 1) * lim.compile_timeout_s + 30))
    except ReplyUnreadable as e:
        return RunResult(V.RUNTIME_ERROR, "", _unreadable(e))
    if not results or "compile" in results[0][0]:
        compiled = results[0] if results else ({}, [b"", b""])
        _check_infra(compiled[0].get("compile", {}))
        return RunResult(V.SYNTAX_ERROR, "", compile_said(compiled[0].get("compile", {}), compiled[1][1], lim,
                                                          compiled[1][0]))
    r, (stdout, err, _) = results[0][0]["result"], results[0][1]
    _parse_status(r, results[0][1])
    _check_infra(r)
    if r.get("compile_failed"):
        return RunResult(V.SYNTAX_ERROR, _text(stdout), _text(err))
    return RunResult(_execution_verdict(r, err, lim, cpu_limit=lim.timeout_s) or V.PASS, _text(stdout),
                     _program_frames(_text(err), w.inside_dir), r["exit"])


def _results(w: Worker, timeout: float):
    """The runner's replies to a "run": one (reply, [stdout, stderr, value]) per test as each ends,
    or one compile failure. ReplyUnreadable: the rest is lost (the program's failure)."""
    while True:
        reply, out = w.runner.receive(timeout)
        if "done" in reply:
            return
        yield reply, out
        if "compile" in reply:
            return


def _parse_status(r: dict, out: list) -> None:
    """A child's status that held a return value comes back unparsed (the runner keeps no copy of a value: the
    zygote's "status_raw") as the value's blob: parsed here, into r's status and the value's JSON in its place
    (_judge does it for the tests it judges)."""
    if r.get("status_raw"):
        r["status"], out[2] = carry_status(out[2], checker=False, value=r["status_raw"] == "value")


def _program_frames(stderr: str, inside_dir: str) -> str:
    """A Python traceback without the frames of the sandbox's own code (the child that exec'd the
    program)."""
    out, skip = [], False
    for line in stderr.splitlines(keepends=True):
        if line.startswith('  File "'):
            skip = line[8:].startswith(inside_dir + os.sep)
        elif not line.startswith("    "):
            skip = False
        if not skip:
            out.append(line)
    return "".join(out)


def _grade_on(w: Worker, code: str, spec: TestSpec, lang: Language, lim: Limits) -> ProgramResult:
    n = num_tests(spec)
    source = code.encode("utf-8", "surrogatepass")
    program = _program(lang, lim)
    if lang.fork_python and not isinstance(spec, StdioTests):  # the module `solution` as a file of that name: a
        program["file"] = "solution.py"  # spawn or forkserver child (Python 3.14's default) imports it by name to
        # unpickle the program's functions (ModuleNotFoundError, the test a timeout: a hunt's find)
    per_test_wall = _per_test_wall(lim)
    if isinstance(spec, (AssertTests, CheckTests)):
        tests, stderr = _grade_with_checker(w, program, source, spec, n, lim, per_test_wall)
        return ProgramResult(program_verdict(tests), tests, stderr[-2000:])
    run = dict(program, op="run", stop_after_timeout=lim.stop_after_timeout)
    if isinstance(spec, StdioTests):
        run.update(mode="stdio", tests=[{}] * n)
        blobs = [source] + [s.encode("utf-8", "surrogatepass") for s in spec.inputs]
    else:
        try:  # (each test's arguments as its blob, which the runner zeroes once the program is graded)
            run.update(mode="call", fn_name=spec.fn_name, tests=[{}] * n)
            blobs = [source] + [json.dumps(encode(a)).encode() for a in spec.args]
        except (TypeError, ValueError) as e:  # a CallTests built by hand, around parse_tests' checks
            raise TestSpecError(f"call test arguments that cannot be sent: {e}") from None
    w.runner.send(run, blobs)
    tests, stderr = [], ""
    rest = TestResult(V.TIMEOUT, detail="not run after an earlier timeout")  # the tests the runner stopped before
    try:
        waited = n * per_test_wall + (2 * STARVED_CAP + 1) * lim.compile_timeout_s + 30
        for reply, (stdout, err, value) in _results(w, waited):
            if "compile" in reply:
                _check_infra(reply["compile"])
                detail = compile_said(reply["compile"], err, lim, stdout)
                return ProgramResult(V.SYNTAX_ERROR, [TestResult(V.SYNTAX_ERROR, detail=detail[:300],
                                                                 error="SyntaxError")] * n, _last(detail))
            tests.append(_judge(reply["result"], stdout, err, value, spec, len(tests), lim))
            if tests[-1].verdict != V.PASS and not stderr:
                stderr = _text(err)
    except ReplyUnreadable as e:
        rest = TestResult(V.RUNTIME_ERROR, detail=_unreadable(e))
    if tests and tests[-1].verdict == V.SYNTAX_ERROR:
        return ProgramResult(V.SYNTAX_ERROR, [tests[-1]] * n, stderr[-2000:])
    tests += [rest] * (n - len(tests))
    return ProgramResult(program_verdict(tests), tests, stderr[-2000:])


def _last(said: str, n: int = 2000) -> str:
    """A compile's account cut to its last n characters, with its first line where that says why the compiler was
    stopped (long diagnostics pushed it out of the program's stderr: a hunt's find)."""
    if len(said) <= n:
        return said
    why = said.split("\n", 1)[0] if said.startswith(STOPPED) else ""
    return (why + "\n...\n" if why else "") + said[-n:]


STOPPED = "the compiler was stopped: "


def compile_said(res: dict, err: bytes, lim: Limits, out: bytes = b"") -> str:
    """A failed compile's account: the compiler's stderr (its stdout where it wrote its errors there, as the JVM
    does), after why it was stopped where it was (a compile out of time, memory or file size read as a syntax error
    with nothing said)."""
    why = {"deadline": f"out of time ({lim.compile_timeout_s:g} s)", "cpu": f"out of time ({lim.compile_timeout_s:g} s)",
           "memory": f"out of memory ({lim.compile_memory_mb} MB)"}.get(res.get("killed_for") or "")
    if res.get("exit") == -signal.SIGXFSZ:
        why = f"over the file size its output may have ({lim.compile_output_mb} MB)"
    if why is None and (res.get("exit") == -signal.SIGXCPU or b"CPU time limit exceeded" in err[-4096:]):  # (the
        why = f"out of time ({lim.compile_timeout_s:g} s)"  # per-process CPU limit fires before the deadline: the
        # compiler, or gcc's cc1plus under its driver, killed by SIGXCPU with "killed_for" unset; a hunt's find)
    if why is None and b"File size limit exceeded" in err[-4096:]:  # (the assembler under the driver: a hunt's find)
        why = f"over the file size its output may have ({lim.compile_output_mb} MB)"
    if why is None and any(said in err[-4096:] for said in (b"out of memory allocating", b"virtual memory exhausted")):
        why = f"out of memory ({lim.compile_memory_mb} MB)"
    text = _text(err) or _text(out)
    return f"{STOPPED}{why}\n{text}" if why else text


def _unreadable(e: ReplyUnreadable) -> str:
    return f"the program's result could not be carried back ({e})"[:300]


def _grade_with_checker(w: Worker, program: dict, source: bytes, spec, n: int, lim: Limits, per_test_wall: float):
    job = {"snippets": spec.asserts if isinstance(spec, AssertTests) else ["check"],
           "setup": spec.setup if isinstance(spec, AssertTests) else "",
           "check": spec.check if isinstance(spec, CheckTests) else "",
           "entry_point": spec.entry_point if isinstance(spec, CheckTests) else None,
           "call_timeout_s": max(2 * lim.timeout_s, lim.timeout_s + 1)}
    # the program's runner makes their private channel in the program's own network namespace (a socket is its
    # maker's: one of ours would show the program this host's interfaces, and bind abstract names in its namespace)
    w.runner.send(dict(program, op="serve", num_tests=n), [source])
    _, _, fds = w.runner.receive_fds(timeout=60)
    try:  # our copy closes as soon as it is handed over: each side must see EOF when the other ends
        w.checker.send({"op": "check", "limits": program["limits"], "job": job}, fds=fds[:1])
    finally:
        for fd in fds:
            os.close(fd)
    try:
        check, _ = w.checker.receive(timeout=n * per_test_wall + 60)
        w.runner.send({"op": "stop"})
        served, out = w.runner.receive(timeout=60)
        _parse_status(served, out)
        err = out[1]
    except ReplyUnreadable as e:
        return [TestResult(V.RUNTIME_ERROR, detail=_unreadable(e))] * n, ""
    _check_infra(check)
    _check_infra(served)
    lines = check["status"]
    if served.get("compile_failed"):
        return [TestResult(V.SYNTAX_ERROR, error="SyntaxError")] * n, _text(err)
    program_failure = _execution_verdict(served, err, lim, cpu_limit=lim.timeout_s * n, stopped=True)
    unreached = TestResult(V.RUNTIME_ERROR, detail="the program ended before this test")
    tests = [unreached] * n
    if lines and "setup" in lines[0]:
        tests = [TestResult(V(lines[0]["setup"]), detail=lines[0].get("msg", ""))] * n
    lines = [line for line in lines if 0 <= line.get("test", 0) < n]  # (a test index out of range is no test's: a
    # row's test code, run in the checker, can write the checker's status lines itself)
    for line in lines:
        if "test" in line:
            msg = line.get("msg", "")
            error = msg.split(":", 1)[0][:100] if line["verdict"] in ("runtime_error", "memory") else ""
            tests[line["test"]] = TestResult(V(line["verdict"]), detail=msg, error=error)
    if check["killed_for"]:  # the checker ran out of time: the tests it never reached timed out
        tests = [TestResult(V.TIMEOUT, detail="the checker ran out of time") if t is unreached else t for t in tests]
    if any(line.get("verdict") == "timeout" for line in lines):
        first = next(line["test"] for line in lines if line.get("verdict") == "timeout")
        tests[first + 1:] = [TestResult(V.TIMEOUT, detail="not run after an earlier timeout")] * (n - first - 1)
    if program_failure is not None:
        tests = [TestResult(program_failure, detail=t.detail) if t.verdict == V.RUNTIME_ERROR else t for t in tests]
    return tests, _text(err)


def _judge(r: dict, stdout: bytes, err: bytes, value_json: bytes, spec, i: int, lim: Limits) -> TestResult:
    oversize = False
    if r.get("status_raw"):  # the status, with the value in it, unparsed
        # a value equal to the expected one has at most about twice its marks (a tuple's {"tuple": [...]} for a
        # list's [...]): a far larger one fails from its size, before any parsing
        oversize = isinstance(spec, CallTests) and \
            node_marks(value_json) > 2 * node_marks(json.dumps(encode(spec.outputs[i]))) + 64
        r["status"], value_json = ([], b"") if oversize else carry_status(value_json, checker=False,
                                                                            value=r["status_raw"] == "value")
    _check_infra(r)
    status = _status(r)
    t = TestResult(V.PASS, cpu_s=r["cpu_s"], wall_s=r["wall_s"], error=_short(status.get("exc")),
                   stdout_bytes=r["stdout_bytes"])
    failure = _execution_verdict(r, err, lim, cpu_limit=lim.timeout_s)
    if r.get("compile_failed"):
        t.verdict, t.detail = V.SYNTAX_ERROR, _text(err)[-300:]
    elif failure is not None:
        t.verdict, t.detail = failure, _text(err)[-300:]
    elif isinstance(spec, StdioTests):
        t.verdict = V.PASS if outputs_match(spec.outputs[i], stdout, spec.compare) else V.FAIL
        if t.verdict == V.FAIL:
            t.output = _text(stdout[:OUTPUT_PREVIEW * 4])[:OUTPUT_PREVIEW]
    else:
        if oversize:
            t.verdict, t.detail = V.FAIL, "returned a value far larger than the expected one"
            return t
        if too_many_nodes(value_json):
            t.verdict, t.detail = V.FAIL, f"returned a value of more than {MAX_NODES:,} elements"
            return t
        try:  # the value is the program's: whatever is wrong with it fails the test, and never reaches our caller
            value = decode(json.loads(value_json.decode("utf-8", "surrogatepass")), hashed=False)
        except (ValueError, RecursionError):  # none (b""), or not JSON, or not plain data
            t.verdict, t.detail = V.FAIL, "returned a value that is not plain data"
            return t
        t.verdict = V.PASS if values_match(spec.outputs[i], value) else V.FAIL
        if t.verdict == V.FAIL:
            t.output = preview(value, OUTPUT_PREVIEW)
    return t


def _status(r: dict) -> dict:
    """The child's last status line: written by our code as the program ended, or forged by the
    program (then it is as good as the program's own output)."""
    return r["status"][-1] if r["status"] else {}


def _short(x) -> str:
    return x[:100] if isinstance(x, str) else ""


BAD_ALLOC = b"terminate called after throwing an instance of 'std::bad_alloc'"  # libstdc++'s, then abort()


def _execution_verdict(r: dict, err: bytes, lim: Limits, cpu_limit: float, stopped: bool = False) -> Verdict | None:
    """Why a process did not finish normally, or None if it did."""
    status = _status(r)
    code = r["exit"]
    if r["killed_for"] == "memory":
        return V.MEMORY
    if r["killed_for"] in ("deadline", "cpu") or r["cpu_s"] > cpu_limit or code == -signal.SIGXCPU:
        return V.TIMEOUT
    if status.get("exc") == "MemoryError" or code == -signal.SIGABRT and BAD_ALLOC in err:
        return V.MEMORY
    if max(r["stdout_bytes"], r["stderr_bytes"]) > lim.output_mb << 20 or code == -signal.SIGXFSZ:
        return V.OUTPUT_LIMIT
    if code != 0 and not (stopped and code == -signal.SIGKILL):
        return V.RUNTIME_ERROR
    if status.get("exc"):
        return V.RUNTIME_ERROR
    return None


def _check_infra(r: dict) -> None:
    """Our set-up of a child failed (reported on a channel the program never holds): the sandbox's
    fault."""
    if r.get("setup_error"):
        raise WorkerDied(f"sandbox set-up failed: {r['setup_error']}")


def _text(b: bytes) -> str:
    return b.decode("utf-8", errors="replace")
