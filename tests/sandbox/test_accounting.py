"""Memory, CPU and processes charged where the kernel accounts them (a cgroup per sandbox), and the sampling that
stands in where no cgroup can be had: each attack on accounting in every mode this machine has, beside what a
legitimate program does."""

import os

import pytest

from execrl.sandbox import Grader, Limits, Verdict, cgroups
from execrl.sandbox.isolation import Isolation, detect
from execrl.sandbox.pool import WorkerPool

from .test_attacks import AUTO_REAPED
from .test_threats import graded_quickly

V = Verdict
KERNEL = cgroups.detect()
SAMPLING = cgroups.Accounting("sampling", reason="forced by the test")
MODES = [SAMPLING] + ([KERNEL] if KERNEL.mode != "sampling" else [])
has_cgroup = pytest.mark.skipif(KERNEL.mode == "sampling", reason=f"no cgroup here: {KERNEL.reason}")
namespaces = pytest.mark.skipif(detect().mode == "none", reason="needs bubblewrap namespaces")


def grader(accounting, limits, isolation=None) -> Grader:
    return Grader(limits=limits, pool=WorkerPool(1, accounting=accounting, isolation=isolation))


def test_the_start_up_line_names_the_mode(monkeypatch):
    assert "sampled every 10 ms" in SAMPLING.describe() and "forced by the test" in SAMPLING.describe()
    if KERNEL.mode != "sampling":
        assert "charged by the kernel" in KERNEL.describe() and KERNEL.mode[-1] in KERNEL.describe()
    try:
        monkeypatch.setenv("EXECRL_ACCOUNTING", "sampling")
        cgroups.detect.cache_clear()
        assert cgroups.detect().mode == "sampling" and "EXECRL_ACCOUNTING" in cgroups.detect().describe()
        monkeypatch.setenv("EXECRL_ACCOUNTING", "cgroups")
        cgroups.detect.cache_clear()
        with pytest.raises(ValueError, match="use cgroup or sampling"):
            cgroups.detect()
    finally:
        cgroups.detect.cache_clear()


XATTRS = ("import os, time\nv = b'x' * 60000\nfor i in range(4500):\n    p = '/tmp/x%d' % i\n"
          "    open(p, 'w').close()\n    for k in range(4):\n        os.setxattr(p, 'user.k%d' % k, v)\n"
          "time.sleep(1)\nprint('ok')")
# ~600 MB in extended attributes on the runner's stream memfds (by descriptor, and by path): kernel memory on no tmpfs
# of the sandbox and in no process (a hunt's find: 1.5 GB passed under a 256 MB limit in sampling mode)
STREAM_XATTRS = ("import os, time\nv = b'x' * 60000\nfor i in range(10000):\n"
                 "    os.setxattr(i % 4 if i % 5 else '/proc/self/fd/%d' % (i % 4), 'user.%d' % i, v)\n"
                 "time.sleep(1)\nprint('ok')")
TMPFS_FILE = "import time\nopen('/tmp/big', 'wb').write(b'x' * (700 << 20))\ntime.sleep(1)\nprint('ok')"
FORKED = ("import os, time\nfor _ in range(3):\n    if os.fork() == 0:\n        break\n"
          "block = b'x' * (300 << 20)\ntime.sleep(2)\nprint('ok')")


@namespaces
@pytest.mark.parametrize("acct", MODES, ids=lambda a: a.mode)
@pytest.mark.parametrize("code", [XATTRS, STREAM_XATTRS, TMPFS_FILE, FORKED],
                         ids=["xattrs", "xattrs on the streams", "tmpfs file", "forked children"])
def test_memory_beyond_the_limit_is_the_memory_verdict(acct, code):
    with grader(acct, Limits(timeout_s=5.0, memory_mb=512)) as g:
        r = graded_quickly(g, code)
        assert r.verdict == V.MEMORY, r.to_dict()
        assert g.grade("print('ok')", {"inputs": ["\n"], "outputs": ["ok\n"]}).verdict == V.PASS  # same worker


# ~64 MB of pipe buffers (the kernel's soft limit per user) beside 100 MB of the program's own, under 160 MB
PIPES = ("import os, fcntl, time\nblock = bytearray(100 << 20)\nkeep = []\nfor _ in range(100):\n"
         "    r, w = os.pipe()\n    try:\n        fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 1 << 20)\n    except OSError:\n"
         "        pass\n    os.set_blocking(w, False)\n    try:\n        while True:\n            os.write(w, b'x' * 65536)\n"
         "    except BlockingIOError:\n        pass\n    keep.append((r, w))\ntime.sleep(1)\nprint('ok')")


@has_cgroup
def test_pipe_buffers_count():
    with grader(KERNEL, Limits(timeout_s=5.0, memory_mb=160)) as g:
        r = graded_quickly(g, PIPES)
        assert r.verdict in (V.MEMORY, V.RUNTIME_ERROR), r.to_dict()  # killed, or its write refused (ENOMEM)
        fine = "import os\nr, w = os.pipe()\nos.write(w, b'x' * 60000)\nprint(len(os.read(r, 1 << 16)))"
        assert g.grade(fine, {"inputs": ["\n"], "outputs": ["60000\n"]}).verdict == V.PASS


USER_MODE = [detect().mode] + (["bwrap-user"] if detect().mode == "bwrap-root" else [])


@has_cgroup
@namespaces
@pytest.mark.parametrize("mode", USER_MODE)
def test_cpu_of_children_the_kernel_reaps_counts_in_every_mode(mode):
    """In bwrap-user mode no exit log can be had: the cgroup charges the reaped children's 0.9 s all the same."""
    iso = Isolation(mode, detect().bwrap)
    with grader(KERNEL, Limits(timeout_s=5.0), iso) as g:
        r = graded_quickly(g, AUTO_REAPED)
        assert r.verdict == V.PASS and r.tests[0].cpu_s >= 0.75, r.to_dict()
    with grader(KERNEL, Limits(timeout_s=0.6), iso) as g:
        assert graded_quickly(g, AUTO_REAPED).verdict == V.TIMEOUT


ZOMBIE = ("import os, time\npid = os.fork()\nif pid == 0:\n    while time.process_time() < 0.55:\n        pass\n"
          "    os._exit(0)\nos.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)\ntime.sleep(0.3)\nos.waitpid(pid, 0)\n"
          "print('ok')")  # (a worker that ended, waited 0.3 s for its parent's join: multiprocessing's, in turn)


@namespaces
@pytest.mark.skipif(detect().mode != "bwrap-root", reason="the exit log needs bwrap-root mode")
def test_a_process_that_ended_and_waits_to_be_reaped_is_charged_once():
    """(A review's find) Sampled with the exit log, a process that had ended and was not yet reaped was charged twice,
    its logged time and its live one: multiprocessing's workers, joined in turn, were a timeout at half their limit."""
    with grader(SAMPLING, Limits(timeout_s=1.0)) as g:
        r = g.grade(ZOMBIE, {"inputs": [""], "outputs": ["ok\n"]})
        assert r.verdict == V.PASS and r.tests[0].cpu_s < 0.9, r.to_dict()


VFORKS = ("import subprocess\nx = bytearray(300 << 20)\nfor i in range(0, len(x), 4096):\n    x[i] = 1\n"
          "path = ':'.join(f'/nonexistent/d{i}' for i in range(6000)) + ':/usr/bin:/bin'\nfor _ in range(5):\n"
          "    subprocess.run(['true'], env={'PATH': path})\nprint('ok')")  # (its vfork child stays before its exec
# while it tries each directory of a long PATH: caught by every 10 ms sample)


def test_a_vfork_child_is_not_charged_its_parents_memory_again():
    """(A review's find) subprocess, system() and posix_spawn vfork: until its exec the child shares its parent's
    memory, and sampling counted it in both (300 MB held, a 512 MB limit: `memory`)."""
    with grader(SAMPLING, Limits(timeout_s=3.0, memory_mb=512)) as g:
        r = g.grade(VFORKS, {"inputs": [""], "outputs": ["ok\n"]})
        assert r.verdict == V.PASS, r.to_dict()


MAPPED_INPUT = ("import mmap\nm = mmap.mmap(0, 0, prot=mmap.PROT_READ)\nprint(sum(1 for _ in iter(m.readline, b'')))")


@pytest.mark.parametrize("acct", MODES, ids=[m.mode for m in MODES])
def test_the_input_is_not_the_programs_memory(acct):
    """(A review's find) Sampled, the input the grader wrote to a program's stdin was counted as the program's, and
    again where the program mapped it: `memory` with 60 MB of input under a 100 MB limit, where a cgroup charges it
    to the grader. What it writes there itself is its own."""
    with grader(acct, Limits(timeout_s=3.0, memory_mb=100, output_mb=64)) as g:
        r = g.grade(MAPPED_INPUT, {"inputs": [("x" * 99 + "\n") * 600_000], "outputs": ["600000\n"]})
        assert r.verdict == V.PASS, r.to_dict()
        rewrite = ("import os, time\nos.ftruncate(0, 0)\ntime.sleep(0.05)\nfor _ in range(60):\n"
                   "    os.write(0, b'x' * (1 << 20))\nb = bytearray(50 << 20)\nfor i in range(0, len(b), 4096):\n"
                   "    b[i] = 1\ntime.sleep(0.3)\nprint('ok')")  # (emptied, and 60 MB of its own written back)
        assert g.grade(rewrite, {"inputs": [("x" * 99 + "\n") * 600_000], "outputs": ["ok\n"]}).verdict == V.MEMORY


LEADER_GONE = ("import ctypes, os, platform, threading, time\nfor _ in range(2):\n    if os.fork() == 0:\n"
               "        break\ndef hold():\n    time.sleep(0.2)\n    b = bytearray(100 << 20)\n"
               "    for i in range(0, len(b), 4096):\n        b[i] = 1\n    time.sleep(1.5)\n    os._exit(0)\n"
               "threading.Thread(target=hold).start()\n"
               "ctypes.CDLL(None).syscall({'x86_64': 60, 'aarch64': 93}[platform.machine()], 0)")  # (SYS_exit: the
# main thread alone ends)


@pytest.mark.parametrize("acct", MODES, ids=[m.mode for m in MODES])
def test_a_process_whose_main_thread_ended_is_still_measured(acct):
    """(A review's find) Sampled, a process whose main thread had exited read as 0 MB (its smaps_rollup fails, its
    statm reads zeros): 3 processes held 300 MB from other threads under a 200 MB limit and passed."""
    with grader(acct, Limits(timeout_s=2.0, memory_mb=200)) as g:
        assert g.grade(LEADER_GONE, {"inputs": [""], "outputs": [""]}).verdict == V.MEMORY


MAPPINGS = ("import ctypes, os, time\nlibc = ctypes.CDLL(None)\nlibc.mmap.restype = ctypes.c_void_p\n"
            "libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, "
            "ctypes.c_long]\nlibc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]\n"
            "base = libc.mmap(None, 60000 * 4096, 3, 0x22, -1, 0)\nfor i in range(0, 60000, 2):\n"
            "    libc.mprotect(base + i * 4096, 4096, 1)\nb = bytearray(100 << 20)\nfor i in range(0, len(b), 4096):\n"
            "    b[i] = 1\nfor _ in range(16):\n    if os.fork() == 0:\n        time.sleep(3)\n        os._exit(0)\n"
            "for _ in range(16):\n    os.wait()\nprint('ok')")  # (30,000 mappings each, and 100 MB shared: resident
# sizes that add up to 1.7 GB, proportional ones to 100 MB)


def _runners_cpu() -> float:
    """CPU seconds of this process's sandbox runners (their zygotes, which measure the programs)."""
    total = 0.0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read()
            fields = open(f"/proc/{pid}/stat", "rb").read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if b"zygote" in cmd and b"runner" in cmd:
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def test_measuring_a_program_of_many_mappings_costs_the_runner_a_share_of_a_cpu():
    """(A hunt's find) Sampled every 10 ms, a program's proportional set sizes walk each of its processes' mappings:
    16 idle processes of 30,000 mappings each kept the runner at 0.8 of a core for their whole wall time, outside
    the program's limits. Resident sizes (cheap) stand in where they are well under the limit, and a costly
    measure waits longer for the next: at most a fifth of a core."""
    import time

    with grader(SAMPLING, Limits(timeout_s=10.0, memory_mb=1024)) as g:
        g.grade("print('ok')", {"inputs": [""], "outputs": ["ok\n"]})  # (the runner started)
        before, start = _runners_cpu(), time.monotonic()
        r = g.grade(MAPPINGS, {"inputs": [""], "outputs": ["ok\n"]})
        spent, wall = _runners_cpu() - before, time.monotonic() - start
        assert r.verdict == V.PASS, r.to_dict()
        assert spent < 0.4 * wall, (spent, wall)


OOM_THEN_WAIT = ("import os, time\nfor _ in range(4):\n    if os.fork() == 0:\n        b = bytearray(60 << 20)\n"
                 "        for i in range(0, len(b), 4096):\n            b[i] = 1\n        time.sleep(0.4)\n"
                 "        os._exit(0)\nfor _ in range(4):\n    os.wait()\ntime.sleep(30)")  # (a Pool waiting for a
# worker the kernel killed: its task never comes back)


@pytest.mark.parametrize("acct", MODES, ids=[m.mode for m in MODES])
def test_a_program_over_its_memory_is_memory_though_it_then_runs_out_of_time(acct):
    """(A hunt's find) In cgroup mode the kernel's OOM kill of one worker left the program waiting to its time limit,
    and the verdict was `timeout`; sampling said `memory`. The kill is the verdict in both."""
    with grader(acct, Limits(timeout_s=1.0, memory_mb=160)) as g:
        r = g.grade(OOM_THEN_WAIT, {"inputs": [""], "outputs": [""]})
        assert r.verdict == V.MEMORY, r.to_dict()


@namespaces
def test_cpu_of_children_the_kernel_reaps_counts_where_sampled_without_the_exit_log():
    """(A hunt's find, as a user that is not root) With no cgroup and no exit log (bwrap-user), a child the kernel
    reaped for a parent that ignores SIGCHLD reached no one's rusage: its time as last sampled counts now."""
    iso = Isolation("bwrap-user", detect().bwrap)
    with grader(SAMPLING, Limits(timeout_s=0.6), iso) as g:
        assert graded_quickly(g, AUTO_REAPED).verdict == V.TIMEOUT  # (3 children of 0.3 s, one at a time)
    with grader(SAMPLING, Limits(timeout_s=5.0), iso) as g:
        r = graded_quickly(g, AUTO_REAPED)
        assert r.verdict == V.PASS and r.tests[0].cpu_s >= 0.6, r.to_dict()


# forks up to 3000 sleeping children (bounded, so that a failure of this test cannot exhaust the host's PIDs)
BOMB = ("import os, time\nn = 0\nfor _ in range(3000):\n    try:\n        if os.fork() == 0:\n            time.sleep(3)\n"
        "            os._exit(0)\n        n += 1\n    except OSError:\n        break\nprint(n)")


@has_cgroup
@namespaces
@pytest.mark.skipif(os.geteuid() != 0, reason="programs run as the host's root only under a root grader")
@pytest.mark.skipif("pids" not in dict(KERNEL.dirs), reason="no pids controller for our cgroup")
def test_a_fork_bomb_is_contained_when_programs_run_as_root():
    """EXECRL_SANDBOX=bwrap-user on a root grader runs programs as root, for which RLIMIT_NPROC does not hold: the
    cgroup's pids.max does."""
    with grader(KERNEL, Limits(timeout_s=5.0, nproc=64), Isolation("bwrap-user", detect().bwrap)) as g:
        r = graded_quickly(g, BOMB, {"inputs": ["\n"], "outputs": ["x\n"]})
        assert r.verdict == V.FAIL and 0 < int(r.tests[0].output) < 64, r.to_dict()


@has_cgroup
def test_the_program_gets_none_of_the_cgroups_files():
    code = "import os\nprint(sorted(int(fd) for fd in os.listdir('/proc/self/fd')))"
    with grader(KERNEL, Limits()) as g:
        r = g.run(code)
    fds = [int(x) for x in r.stdout.strip().strip("[]").split(",")]
    assert r.verdict == V.PASS and max(fds) <= 4, r.stdout  # 0-2, the status line, and listdir's own


@has_cgroup
def test_no_cgroup_is_left_behind():
    def ours() -> set[str]:
        return {n for _, base in KERNEL.dirs for n in os.listdir(base) if n.startswith(f"execrl-{os.getpid()}-")}

    before = ours()  # (other tests' graders of this session may hold theirs)
    with grader(KERNEL, Limits()) as g:
        assert g.grade("print('ok')", {"inputs": ["\n"], "outputs": ["ok\n"]}).verdict == V.PASS
        mine = ours() - before
        assert mine
    assert not ours() & mine


@has_cgroup
def test_kernel_memory_an_ended_program_left_is_not_the_next_ones():
    """A hunt's find: 300,000 failed path lookups left ~130 MB of dentries charged to the sandbox's cgroup after the
    program ended: a next program's limit of 128 MB could not be set under it (EBUSY), and its sampled memory would
    count it. Reset reclaims it, in the same sandbox (not replaced: its cgroup stays); a program's large output, in
    our streams, is not such a charge (a review's find: 12 MB of output replaced the sandbox each time)."""
    fresh = os.urandom(8).hex()  # (names no earlier run looked up: their dentries are cached, charged elsewhere)
    lookups = (f"import os\nfor i in range(300000):\n    try:\n        os.stat('/usr/{fresh}_%d_' % i + 'a' * 200)\n"
               "    except OSError:\n        pass\nprint('done')")
    mem = dict(KERNEL.dirs)["memory"]
    usage = "memory.current" if KERNEL.mode == "cgroup2" else "memory.usage_in_bytes"

    others = {n for n in os.listdir(mem) if n.startswith(f"execrl-{os.getpid()}-")}  # (this session's graders')

    def ours() -> tuple[str, int]:
        (name,) = [n for n in os.listdir(mem) if n.startswith(f"execrl-{os.getpid()}-") and n not in others]
        with open(os.path.join(mem, name, usage)) as f, open(os.path.join(mem, name, "memory.stat")) as s:
            fields = dict(line.split() for line in s)
            return name, int(f.read()) - int(fields["file" if KERNEL.mode == "cgroup2" else "cache"])

    with grader(KERNEL, Limits(timeout_s=30.0, memory_mb=1024)) as g:
        assert g.grade("print(input())", {"inputs": ["3\n"], "outputs": ["3\n"]}).verdict == V.PASS
        first, _ = ours()
        assert g.grade(lookups, {"inputs": ["\n"], "outputs": ["done\n"]}).verdict == V.PASS
        name, left = ours()
        assert name == first and left < 8 << 20, f"{left >> 20} MiB left charged to {name} (first: {first})"
        big = "import sys\nsys.stdout.write('x' * (12 << 20))"
        assert g.grade(big, {"inputs": ["\n"], "outputs": ["x\n"]}).verdict == V.FAIL
        assert ours()[0] == first
        r = g.grade("print(input())", {"inputs": ["3\n"], "outputs": ["3\n"]}, limits=Limits(memory_mb=128))
        assert r.verdict == V.PASS and ours()[0] == first


def test_workers_default_to_the_cpus_a_quota_leaves(tmp_path, monkeypatch):
    """(A hunt's find) the default worker count was os.cpu_count(), the host's cores: under a container's --cpus or
    a Slurm/Kubernetes quota, many workers shared a CPU or two and correct programs timed out. A CPU quota on our
    cgroup or any above it (v2 cpu.max, v1 cfs_quota_us) caps it, as the CPU affinity does."""
    v2, v1 = tmp_path / "unified", tmp_path / "cpu"
    (v2 / "job" / "step").mkdir(parents=True)
    (v1 / "slurm" / "task").mkdir(parents=True)
    (v2 / "job" / "cpu.max").write_text("150000 100000\n")  # 1.5 CPUs on the job, none on its step
    (v2 / "job" / "step" / "cpu.max").write_text("max 100000\n")
    (v1 / "slurm" / "cpu.cfs_quota_us").write_text("-1\n")
    (v1 / "slurm" / "cpu.cfs_period_us").write_text("100000\n")
    (v1 / "slurm" / "task" / "cpu.cfs_quota_us").write_text("300000\n")  # 3 CPUs
    (v1 / "slurm" / "task" / "cpu.cfs_period_us").write_text("100000\n")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)))
    mounts = [("cgroup2", str(v2), {"rw"}), ("cgroup", str(v1), {"rw", "cpu", "cpuacct"})]
    monkeypatch.setattr(cgroups, "_mounts", lambda: mounts)
    monkeypatch.setattr(cgroups, "_own_cgroups", lambda: {"": "/job/step", "cpu": "/slurm/task", "cpuacct": "/"})
    assert cgroups.usable_cpus() == 2  # (ceil 1.5: the least quota of the two hierarchies)
    from execrl.trainer import distributed

    assert distributed.sandbox_workers(0) == 2  # (training's env.code.num_workers: 0)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setattr(distributed, "active", lambda: True)
    assert distributed.sandbox_workers(0) == 1  # (two ranks of a node split its quota)
    monkeypatch.setattr(cgroups, "_own_cgroups", lambda: {"cpu": "/slurm/task"})
    assert cgroups.usable_cpus() == 3
    monkeypatch.setattr(cgroups, "_own_cgroups", lambda: {})
    assert cgroups.usable_cpus() == 64
    monkeypatch.setattr(cgroups, "_mounts", lambda: (_ for _ in ()).throw(OSError("no /proc")))
    assert cgroups.usable_cpus() == 64


def test_the_memory_a_cgroup_limit_leaves_is_read_at_our_cgroup_and_above(tmp_path, monkeypatch):
    """(The twenty-third session's left-out) the engine's cache check read a limit only at /sys/fs/cgroup/memory.max:
    a Slurm job's or a v1 container's limit sits at the job's own cgroup (or above it), and the check passed a cache
    the kernel then killed the run for. The least room over every level, its page cache counted free, its swap where
    it allows some."""
    v2, v1 = tmp_path / "unified", tmp_path / "memory"
    (v2 / "job" / "step").mkdir(parents=True)
    (v1 / "slurm" / "task").mkdir(parents=True)
    G = 2**30
    for where, limit, used, cache in [(v2 / "job", 8 * G, 5 * G, 1 * G), (v2 / "job" / "step", "max", 5 * G, 1 * G)]:
        (where / "memory.max").write_text(f"{limit}\n")
        (where / "memory.current").write_text(f"{used}\n")
        (where / "memory.stat").write_text(f"anon {used - cache}\nfile {cache}\n")
    (v2 / "job" / "memory.swap.max").write_text(f"{G // 2}\n")
    (v2 / "job" / "memory.swap.current").write_text("0\n")
    (v1 / "slurm" / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # (v1's "no limit")
    (v1 / "slurm" / "memory.usage_in_bytes").write_text(f"{6 * G}\n")
    (v1 / "slurm" / "task" / "memory.limit_in_bytes").write_text(f"{7 * G}\n")
    (v1 / "slurm" / "task" / "memory.usage_in_bytes").write_text(f"{6 * G}\n")
    (v1 / "slurm" / "task" / "memory.stat").write_text(f"cache 1\ntotal_cache {G}\n")
    mounts = [("cgroup2", str(v2), {"rw"}), ("cgroup", str(v1), {"rw", "memory"})]
    monkeypatch.setattr(cgroups, "_mounts", lambda: mounts)
    monkeypatch.setattr(cgroups, "_own_cgroups", lambda: {"": "/job/step", "memory": "/slurm/task"})
    # v2: the job's 8 - 5 + 1 GiB and half a GiB of swap; v1: the task's 7 - 6 + 1 GiB and the host's swap
    assert cgroups.memory_room(swap_free=3 * G) == min(4 * G + G // 2, 2 * G + 3 * G)
    monkeypatch.setattr(cgroups, "_own_cgroups", lambda: {"": "/job/step"})
    assert cgroups.memory_room(swap_free=0) == 4 * G
    (v1 / "slurm" / "task" / "memory.memsw.limit_in_bytes").write_text(f"{7 * G + G // 4}\n")  # (memory and swap)
    (v1 / "slurm" / "task" / "memory.memsw.usage_in_bytes").write_text(f"{6 * G}\n")
    monkeypatch.setattr(cgroups, "_own_cgroups", lambda: {"memory": "/slurm/task"})
    assert cgroups.memory_room(swap_free=3 * G) == 2 * G + G // 4
    monkeypatch.setattr(cgroups, "_own_cgroups", lambda: {})
    assert cgroups.memory_room(swap_free=0) is None
    # (a review's finds) a level's swap limit binds the levels below it with their own memory limits; shared memory
    # (tmpfs, /dev/shm) in the page cache is not reclaimed without swap
    (v2 / "pod" / "box").mkdir(parents=True)
    for where, limit, used, swap in [(v2 / "pod", 100 * G, 1 * G, "0"), (v2 / "pod" / "box", 2 * G, 1 * G, "max")]:
        (where / "memory.max").write_text(f"{limit}\n")
        (where / "memory.current").write_text(f"{used}\n")
        (where / "memory.swap.max").write_text(f"{swap}\n")
        (where / "memory.swap.current").write_text("0\n")
        (where / "memory.stat").write_text(f"file {G}\nshmem {G}\n")
    monkeypatch.setattr(cgroups, "_own_cgroups", lambda: {"": "/pod/box"})
    assert cgroups.memory_room(swap_free=10 * G) == 1 * G
    (v1 / "slurm" / "memory.limit_in_bytes").write_text(f"{100 * G}\n")  # (v1: memory+swap at the memory limit)
    (v1 / "slurm" / "memory.memsw.limit_in_bytes").write_text(f"{100 * G}\n")
    (v1 / "slurm" / "memory.memsw.usage_in_bytes").write_text(f"{99 * G}\n")
    (v1 / "slurm" / "task" / "memory.memsw.limit_in_bytes").write_text("9223372036854771712\n")
    monkeypatch.setattr(cgroups, "_own_cgroups", lambda: {"memory": "/slurm/task"})
    assert cgroups.memory_room(swap_free=10 * G) == 1 * G  # (the task has 2 GiB and the host 10 of swap, but its
    # parent's memory and swap together have 1 left)
    import torch

    from execrl.rollout.engine import free_bytes

    monkeypatch.setattr(cgroups, "_own_cgroups", lambda: {"": "/job/step"})
    assert free_bytes(torch.device("cpu")) <= 4 * G + G // 2  # (the engine's reading of the host)
