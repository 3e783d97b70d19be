"""execrl.sandbox: run model-written code against tests, in processes of its own, and say what happened.

Defends against (each has an adversarial test in tests/sandbox/):
- running forever: busy loops (also ones that ignore catchable signals or swallow exceptions), long C-level
  computations, sleeping: RLIMIT_CPU and a wall-clock SIGKILL of every process the program started;
- memory: huge and growing allocations (hard RLIMIT_AS); raising its own rlimits (hard limits, no
  capabilities);
- floods on stdout or stderr and filling the disk (RLIMIT_FSIZE, a size-capped private tmpfs);
- fork bombs and double-forked daemons (RLIMIT_NPROC on a uid of the sandbox's own; after every test the
  zygote, PID 1 of the sandbox's PID namespace, SIGKILLs every other process in it), killing its parent or
  kill(-1) (PID 1 of a namespace cannot be killed from inside, and other uids are out of reach);
- network access (empty network namespace); reading the grader's environment (cleared) or its files (home
  directories, /run and /mnt are hidden; the system is read-only); writing outside its directory;
- anything persisting from one program to the next (processes killed, every writable directory wiped);
- faking a pass in the assert, check and call forms (see inside/checker.py): the program's process never sees the tests or the
  expected values. Asserts and check functions run in a second sandbox, in which every name the tests use
  but do not define is a stub that calls into the program's process and gets back plain data only (numbers,
  strings, lists, tuples, dicts, sets, None, bool). So exiting with code 0 before the tests run (sys.exit,
  os._exit, atexit, sys.excepthook), objects that lie in `__eq__`, walking frames, patching modules,
  builtins or serializers, and printing pass markers all leave the tests failing; stdin/stdout outputs are
  compared in the grading process.

Does not defend against: kernel exploits and side channels (timing, cache); reading files that are readable
to every user on the host (the system is visible read-only: secrets belong in files only their owner can
read, or outside the host); CPU contention slowing other workers (time is measured in CPU seconds where it
can be); SysV IPC objects when the sandbox shares an IPC namespace with nothing else (each worker has its
own). Without bubblewrap or user namespaces (a warning says so, once, loudly), none of the namespace
defences apply: no network or filesystem isolation, and RLIMIT_NPROC does not bind a root grader.
"""

from execrl.sandbox.grader import Grader, Limits, ProgramResult, RunResult, TestResult, program_verdict
from execrl.sandbox.languages import LANGUAGES, Language, get_language, load_languages
from execrl.sandbox.spec import (
    AssertTests,
    CallTests,
    CheckTests,
    StdioTests,
    TestSpec,
    TestSpecError,
    Verdict,
    parse_tests,
    split_test_script,
)

__all__ = [
    "Grader", "Limits", "ProgramResult", "RunResult", "TestResult", "program_verdict", "LANGUAGES", "Language",
    "get_language", "load_languages", "TestSpec", "TestSpecError", "Verdict", "parse_tests", "split_test_script",
    "AssertTests", "CallTests", "CheckTests", "StdioTests",
]
