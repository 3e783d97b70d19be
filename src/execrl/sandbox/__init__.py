"""execrl.sandbox: run model-written code against tests, in processes of its own, and say what
happened.

Defends against (each has an adversarial test in tests/sandbox/; test_attacks.py pairs each class of attack with
the legitimate idiom it must not break):
- running forever: busy loops (also ones that ignore catchable signals or swallow exceptions), long C-level
  computations, sleeping: RLIMIT_CPU per process, the CPU time of *all* the program's processes (children it never
  waited for included, and in bwrap-root mode children the kernel reaped for it, from the zygote's exit log)
  measured every 10 ms and at the end, and a wall-clock SIGKILL of every process it started;
- memory, CPU and processes, charged where the kernel accounts them (cgroups.py): a cgroup per sandbox, which the
  program's first process enters before anything of it runs, holds its pages, its tmpfs files, the kernel memory of
  its objects (pipe buffers, socket queues, xattrs, inodes; TCP and UDP queues, which cgroup v1 does not charge, are
  added from /proc/net), the CPU of all its processes (those the kernel reaped included) and a pids.max that binds
  every uid; the kernel enforces the memory limit (an OOM kill is the memory verdict). Where no cgroup can be had,
  sampling every 10 ms stands in (the start-up line says which ran): the proportional set sizes of all its
  processes, the memfds they hold, its tmpfs (files, inodes and extended attributes), the queues of its network
  namespace's sockets (unix ones by sock_diag, TCP and UDP ones from /proc/net). In both: a hard RLIMIT_AS per
  process, and no memfds (memfd_create fails with ENOSYS); no raising its own rlimits (hard limits, no capabilities);
- floods on stdout or stderr and filling the disk (RLIMIT_FSIZE; size-capped tmpfs; output read back capped, and
  one test's output at a time);
- fork bombs and double-forked daemons (RLIMIT_NPROC on a uid of the sandbox's own; after every test the
  zygote, PID 1 of the sandbox's PID namespace, SIGKILLs every other process in it), killing its parent or
  kill(-1) (PID 1 of a namespace cannot be killed from inside, and other uids are out of reach);
- network access and host sockets (a network namespace with loopback only; no host path with a socket exists
  inside);
- reading anything it should not: the filesystem is an allowlist (isolation.py): the system's program and library
  directories, a few files of /etc, the interpreter and its venv, read-only, and only where a program of that
  language runs, a language's tools (their own installation, or the tool and the libraries it links alone); the
  program's own tmpfs at /tmp and /dev/shm. Training data, the grader's input file, home directories and the
  checkout are not there. The grader's environment is cleared;
- anything persisting from one program to the next: processes killed; /dev read-only (uid 0 of a bwrap-user
  sandbox's namespace owns it); /tmp and /dev/shm fresh tmpfs mounts (their inode numbers too; an interpreter or tool kept inside /tmp is bound again, read-only, into each); the PID namespace's
  counter reset (a program's first process is PID 2, whatever earlier ones forked); a new network namespace
  wherever the last program changed its own (a socket left, a packet on loopback, a moved IP/ICMP/TCP/UDP counter:
  TIME_WAIT sockets, loopback counters, abstract socket names and IPv6 flow labels do not carry over); and a
  seccomp filter (inside/seccomp.py) refuses SysV IPC, POSIX message queues, keyrings, ptrace, new user namespaces,
  and inet sockets but TCP and UDP, and makes sync, syncfs, sync_file_range, fsync and fdatasync no-ops (the host's
  writeback);
- faking a pass in the assert, check and call forms (see inside/checker.py): the program's process never sees the tests or the
  expected values. Asserts and check functions run in a second sandbox, in which every name the tests use
  but do not define is a stub that calls into the program's process and gets back plain data only (numbers,
  strings, lists, tuples, dicts, sets, None, bool). So exiting with code 0 before the tests run (sys.exit,
  os._exit, atexit, sys.excepthook), objects that lie in `__eq__`, walking frames, patching modules,
  builtins or serializers, and printing pass markers all leave the tests failing; stdin/stdout outputs are
  compared in the grading process. A non-plain result has no equality, hash, order or identity in the tests;
- declaring its own infra_error or crashing the grader: everything a program writes (stdout, status lines, RPC
  replies, return values of any size or depth) is parsed as hostile input, in linear time, and whatever goes wrong
  with it is the program's verdict: only known status fields come back, each capped, and a reply that cannot be read
  back is the program's runtime_error. infra_error comes only from our own set-up, reported on a channel closed
  before the program runs, or from a sandbox process that died; each test's set-up does not depend on what earlier
  tests wrote (the program's directory and files are put back before each test, or the test is the program's
  failure).

Does not defend against: kernel exploits and side channels (timing, cache); reading what is inside
the allowlist (the system's directories and the Python installation are visible read-only: keep
secrets elsewhere); CPU contention slowing other workers (time is measured in CPU seconds where it
can be); counters the kernel keeps for the whole machine, which no namespace resets (/proc/stat's
count of forks, the inode numbers of pipes, sockets and memfds): a program reads in them what every
process did, its worker's earlier programs included, blurred by all else the machine runs; file
locks and futexes on the read-only files every sandbox shares, the kernel's one set for the
machine: two programs graded at the same time, both written to cooperate, can pass numbers through
them; the kernel's TCP and UDP memory pools, one for the machine, where the workers' memory limits
together exceed them (socket buffers are charged to each program's own limit). In
sampling mode only: memory bursts shorter than the 10 ms sampling (bounded by RLIMIT_AS per
process); pipe buffers (up to the kernel's per-user limit) and other kernel memory outside its
processes, tmpfs and sockets' queues; the CPU of children the kernel reaped for a program that
ignores SIGCHLD in bwrap-user mode (the exit log needs CAP_SYS_PACCT of a root grader; bounded by
the wall-clock limit); fork bombs of programs running as root (below). The zygote keeps
CAP_SYS_ADMIN and CAP_NET_ADMIN (in bwrap-user mode, of its own user namespace only) to make those
namespaces and mounts, and in bwrap-root mode CAP_SYS_PACCT for its exit log; every process of the
program has no capabilities. In bwrap-user mode (the grader is not root) the program runs as the
grader's uid inside its user namespace (uid 0 there, as the zygote), with no uid per sandbox: the
namespaces, the allowlist and the seccomp filter still hold, and the zygote is out of reach as the
namespace's init (signals without a handler dropped, not dumpable, capabilities the program lacks).
Forcing bwrap-user mode on a root grader (EXECRL_SANDBOX=bwrap-user) runs programs as the host's
root user, for which the kernel does not enforce RLIMIT_NPROC: a fork bomb is contained only by a
cgroup's pids.max (cgroup mode, where the hierarchy has pids). Without bubblewrap or user namespaces
(a warning says so, once, loudly), none of the namespace defences apply: no network or filesystem
isolation, and RLIMIT_NPROC does not bind a root grader.
"""

from execrl.sandbox.grader import (
    Grader,
    Limits,
    ProgramResult,
    RunResult,
    SandboxFailing,
    SandboxUnusable,
    TestResult,
    check_infra_share,
    program_verdict,
)
from execrl.sandbox.languages import LANGUAGES, Language, get_language, language_named, load_languages, tests_refused
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
    "Grader", "Limits", "ProgramResult", "SandboxUnusable", "SandboxFailing", "check_infra_share", "RunResult", "TestResult", "program_verdict", "LANGUAGES", "Language", "language_named",
    "tests_refused",
    "get_language", "load_languages", "TestSpec", "TestSpecError", "Verdict", "parse_tests", "split_test_script",
    "AssertTests", "CallTests", "CheckTests", "StdioTests",
]
