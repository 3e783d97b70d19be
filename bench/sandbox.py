"""Sandbox throughput: trivial stdin/stdout tests (and call-form tests, a function's return value) per second, execrl's warm workers against the naive pattern
(a fresh `python3 file` per test, 2 threads), measured in the same run. The naive pattern is measured twice:
with `python3` as PATH resolves it (on pyenv machines a shim script, as a user typing `python3 file` gets)
and with the interpreter binary itself (the fastest a fresh process per test can be). execrl runs once per way
of accounting a program's memory and CPU this machine has: sampled every 10 ms, and charged by the kernel to a
cgroup per sandbox (where one can be had: a root grader, or a delegated cgroup v2 subtree).

    .venv/bin/python bench/sandbox.py [--tests 1000] [--workers 2] [--rounds 1]
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from execrl.sandbox import Grader, Verdict
from execrl.sandbox.cgroups import Accounting
from execrl.sandbox.cgroups import detect as detect_accounting
from execrl.sandbox.pool import WorkerPool

CODE = "a, b = map(int, input().split())\nprint(a + b)\n"
CALL_CODE = "def f(x):\n    return [x] * 20\n"  # a call-form test's value comes back through the program's status


def naive(python: str, num_tests: int, threads: int = 2) -> float:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "main.py")
        with open(path, "w") as f:
            f.write(CODE)

        def one(i: int) -> bool:
            r = subprocess.run([python, path], input=f"{i} {i}\n", capture_output=True, text=True, timeout=10)
            return r.stdout.strip() == str(2 * i)

        t = time.perf_counter()
        with ThreadPoolExecutor(threads) as ex:
            ok = sum(ex.map(one, range(num_tests)))
        dt = time.perf_counter() - t
    assert ok == num_tests
    return num_tests / dt


def ours(grader: Grader, num_tests: int, tests_per_program: int, call: bool = False) -> float:
    n_programs = num_tests // tests_per_program
    if call:
        code, tests = CALL_CODE, {"fn_name": "f", "inputs": [str(i) for i in range(tests_per_program)],
                                  "outputs": [str([i] * 20) for i in range(tests_per_program)]}
    else:
        code, tests = CODE, {"inputs": [f"{i} {i}\n" for i in range(tests_per_program)],
                             "outputs": [f"{2 * i}\n" for i in range(tests_per_program)]}
    grader.grade_many([(code, tests, "python", None)] * 4)  # warm-up
    t = time.perf_counter()
    results = grader.grade_many([(code, tests, "python", None)] * n_programs)
    dt = time.perf_counter() - t
    assert all(r.verdict == Verdict.PASS for r in results), [r.to_dict() for r in results if r.verdict != Verdict.PASS][:2]
    return n_programs * tests_per_program / dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tests", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1, help="runs of every execrl row, alternating the accounting")
    args = ap.parse_args()
    path_python = shutil.which("python3") or sys.executable
    shim = naive(path_python, max(60, args.tests // 10))
    direct = naive(sys.executable, max(100, args.tests // 5))
    kernel = detect_accounting()
    modes = [Accounting("sampling", reason="the bench's baseline")] + ([kernel] if kernel.mode != "sampling" else [])
    rows: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for acct in modes:
            with Grader(pool=WorkerPool(args.workers, accounting=acct)) as g:
                for k in (1, 10):
                    rows.setdefault(f"execrl, {k} test(s)/program, {acct.mode}", []).append(ours(g, args.tests, k))
                rows.setdefault(f"execrl, 10 call tests/program, {acct.mode}", []).append(
                    ours(g, args.tests, 10, call=True))
    print(f"sandbox: {g.pool.iso.mode}, {args.workers} workers, "
          f"{os.cpu_count()} cores; python3 = {path_python}; accounting: {kernel.describe()}")
    print(f"{'pattern':<44}{'tests/s':>9}{'vs naive':>10}{'vs naive (binary)':>19}")
    print(f"{'naive: python3 file per test, 2 threads':<44}{shim:>9.0f}{1.0:>9.1f}x{shim / direct:>18.1f}x")
    print(f"{'naive, interpreter binary, 2 threads':<44}{direct:>9.0f}{direct / shim:>9.1f}x{1.0:>18.1f}x")
    for name, rates in rows.items():
        for rate in rates:
            print(f"{name:<44}{rate:>9.0f}{rate / shim:>9.1f}x{rate / direct:>18.1f}x")


if __name__ == "__main__":
    main()
