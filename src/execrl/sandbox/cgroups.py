"""Memory, CPU and processes charged where the kernel accounts them: a cgroup per sandbox.

The grader makes one cgroup per sandbox process (in every hierarchy it needs: memory, CPU usage,
pids), opens the files the zygote needs and hands it their fds; the zygote's forked child writes "0"
into `cgroup.procs` (itself) before anything of the program runs, so the program and everything it
starts is charged there: its pages, its tmpfs files, and the kernel memory of its objects (pipe
buffers, socket queues, extended attributes, memfds in flight), the CPU of every process (children
the kernel reaped for it included), and a process count the kernel enforces for every uid, root too.
The zygote stays outside, in the grader's cgroup: a program's OOM kill never reaches it.

Where no cgroup can be had (a grader that is not root and has no delegated cgroup v2 subtree), the
zygote samples the program's processes, tmpfs and sockets every 10 ms instead
(zygote.Zygote._usage); `detect().describe()` names the mode in the start-up line, and
EXECRL_ACCOUNTING=sampling forces it.
"""

from __future__ import annotations

import errno
import functools
import json
import math
import os
import time
from dataclasses import dataclass

from execrl.sandbox.isolation import SandboxSetting

PREFIX = "execrl-"  # our cgroups: execrl-<grader pid>-<n>


@dataclass(frozen=True)
class Accounting:
    mode: str  # "cgroup2", "cgroup1" or "sampling"
    dirs: tuple[tuple[str, str], ...] = ()  # (controller, directory our cgroups go in)
    reason: str = ""  # why sampling

    def describe(self) -> str:
        if self.mode == "sampling":
            return (f"memory and CPU sampled every 10 ms, processes by RLIMIT_NPROC ({self.reason}; a grader that is "
                    "root, or one given a writable cgroup (a delegated cgroup v2 subtree, e.g. `systemd-run --user "
                    "--scope -p Delegate=yes execrl ...`, or cgroup v1 memory and cpuacct directories it owns), has "
                    "them charged by the kernel: docs/sandbox.md)")
        what = "memory, CPU and processes" if "pids" in dict(self.dirs) else "memory and CPU (processes: RLIMIT_NPROC)"
        return f"{what} charged by the kernel (a {self.mode.replace('cgroup', 'cgroup v')} per sandbox)"

    def make(self) -> SandboxCgroup | None:
        return None if self.mode == "sampling" else SandboxCgroup(self)


class SandboxCgroup:
    """One sandbox's cgroup (a directory per hierarchy in v1) and the fds its zygote gets."""

    _count = 0

    def __init__(self, acct: Accounting):
        SandboxCgroup._count += 1
        name = f"{PREFIX}{os.getpid()}-{SandboxCgroup._count}"
        self.version = 2 if acct.mode == "cgroup2" else 1
        self.paths = {ctl: os.path.join(base, name) for ctl, base in acct.dirs}
        self.fds: dict[str, int | list[int]] = {"procs": []}
        try:
            for path in dict.fromkeys(self.paths.values()):
                os.mkdir(path, 0o700)
                self.fds["procs"].append(os.open(os.path.join(path, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC))
            files = V2_FILES if self.version == 2 else V1_FILES
            for key, (ctl, file, mode) in files.items():
                if ctl in self.paths:  # (pids: where the hierarchy has them)
                    try:
                        self.fds[key] = os.open(os.path.join(self.paths[ctl], file), mode | os.O_CLOEXEC)
                    except FileNotFoundError:
                        if key != "reclaim":  # (memory.reclaim: kernels from 5.19)
                            raise
            self._no_swap()
        except OSError:
            self.close()
            raise

    def _no_swap(self) -> None:
        """Swap would let a program hold more than its limit: none (and on v2, an OOM kill takes the
        whole program)."""
        settings = ({"memory.swap.max": "0", "memory.oom.group": "1"} if self.version == 2
                    else {"memory.swappiness": "0"})
        for file, value in settings.items():
            try:
                with open(os.path.join(self.paths["memory"], file), "w") as f:
                    f.write(value)
            except OSError:  # absent (no swap accounting): nothing to turn off
                pass

    def pass_fds(self) -> tuple[int, ...]:
        return tuple(fd for v in self.fds.values() for fd in (v if isinstance(v, list) else [v]))

    def spec(self) -> str:
        """What the zygote reads (inside/cgroup.py): the version and the fds, as JSON."""
        return json.dumps({"version": self.version, **self.fds})

    def close(self) -> None:
        """Close our fds and remove the cgroup (once the sandbox's processes are gone: retried for a
        second)."""
        for fd in self.pass_fds():
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds = {"procs": []}
        for path in dict.fromkeys(self.paths.values()):
            _remove(path)


# key: (controller, file, open mode); the zygote knows them by key
V2_FILES = {"limit": ("memory", "memory.max", os.O_WRONLY), "usage": ("memory", "memory.current", os.O_RDONLY),
            "stat": ("memory", "memory.stat", os.O_RDONLY), "events": ("memory", "memory.events", os.O_RDONLY),
            "cpu": ("memory", "cpu.stat", os.O_RDONLY), "pids": ("pids", "pids.max", os.O_WRONLY),
            "reclaim": ("memory", "memory.reclaim", os.O_WRONLY)}
V1_FILES = {"limit": ("memory", "memory.limit_in_bytes", os.O_WRONLY),
            "usage": ("memory", "memory.usage_in_bytes", os.O_RDONLY),
            "stat": ("memory", "memory.stat", os.O_RDONLY), "events": ("memory", "memory.oom_control", os.O_RDONLY),
            "cpu": ("cpuacct", "cpuacct.usage", os.O_RDONLY), "pids": ("pids", "pids.max", os.O_WRONLY),
            "reclaim": ("memory", "memory.force_empty", os.O_WRONLY)}


def _remove(path: str) -> None:
    for _ in range(100):
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:  # EBUSY: its last processes are still exiting
            time.sleep(0.01)


@functools.cache
def detect() -> Accounting:
    """cgroup v2 where our cgroup can hand memory and pids to children, else cgroup v1's memory,
    cpuacct and pids hierarchies where we can make cgroups in them, else sampling
    (EXECRL_ACCOUNTING=sampling forces it)."""
    forced = os.environ.get("EXECRL_ACCOUNTING", "")
    if forced not in ("", "cgroup", "sampling"):
        raise SandboxSetting(f"EXECRL_ACCOUNTING={forced!r}: use cgroup or sampling")
    if forced == "sampling":
        return Accounting("sampling", reason="EXECRL_ACCOUNTING=sampling")
    reasons = []
    for probe in (_v2, _v1):
        acct, why = probe()
        if acct is not None:
            try:
                SandboxCgroup(acct).close()  # can we make one, open its files and remove it?
            except OSError as e:
                reasons.append(f"{acct.mode}: {e.strerror or e}")
                continue
            _remove_stale(acct)
            return acct
        reasons.append(why)
    if forced == "cgroup":
        raise SandboxSetting(f"EXECRL_ACCOUNTING=cgroup, but no cgroup can be had: {'; '.join(reasons)} (unset it: "
                             "programs are then sampled)")
    return Accounting("sampling", reason="no writable cgroup: " + "; ".join(reasons))


def usable_cpus(share: int = 1) -> int:
    """The CPUs this process may use: those its affinity allows, fewer where a CPU quota on its cgroup or one above
    it says so (a container's --cpus, a Kubernetes or Slurm limit). os.cpu_count() counts the host's: a hunt's find,
    a worker per host core on a 1-CPU quota timed correct programs out."""
    cpus = len(os.sched_getaffinity(0))
    try:
        quota = _cpu_quota()
    except (OSError, ValueError):
        quota = None
    return max(1, min(cpus, math.ceil(quota / max(share, 1)))) if quota else cpus  # (`share`: the ranks of a node
    # that split its quota, each on its own slice of the CPUs)


def _cpu_quota() -> float | None:
    """The least CPU quota (CPUs' worth) on our cgroup and those above it, v2's cpu.max or v1's CFS quota; None:
    none."""
    return _least(_quota_at(path, v2) for path, v2 in _levels("cpu"))


def memory_room(swap_free: int) -> int | None:
    """Bytes the memory limits on our cgroup and those above it still leave us (a container's --memory, a Slurm job's
    or a Kubernetes pod's limit; v2's memory.max, v1's limit_in_bytes): the least over the levels of a limit less its
    usage, its page cache counted free (reclaimed before an allocation fails; not its shared memory, tmpfs and
    /dev/shm, which only swap can move), plus the swap still allowed: `swap_free`, the host's, within the least of the
    levels' swap limits (v2's memory.swap.max; v1's memory+swap limit bounds both), each of which binds the whole tree
    below it; the less of the v1 and v2 hierarchies; None: no memory limit set."""
    levels = list(_levels("memory"))
    rooms = []
    for v2 in (True, False):
        found = [_room_at(path, v2) for path, its in levels if its == v2]
        memory, swaps = _least(m for m, _ in found), [s for _, s in found if s is not None]
        if memory is not None:
            rooms.append(memory + min([swap_free, *swaps]) if v2 else min([memory + swap_free, *swaps]))
    return min(rooms, default=None)


def _least(values) -> float | None:
    return min((v for v in values if v is not None), default=None)


def _levels(controller: str):
    """(directory, is v2) of our cgroup for `controller` (v1) and of our v2 cgroup, then of each one above it, up to
    its mount's root."""
    own = _own_cgroups()
    for fstype, mount, options in _mounts():
        v2 = fstype == "cgroup2"
        rel = own.get("") if v2 else own.get(controller) if controller in options else None
        if rel is None:
            continue
        path = os.path.normpath(os.path.join(mount, rel.lstrip("/")))
        while True:
            yield path, v2
            if path == mount or not path.startswith(mount):
                break
            path = os.path.dirname(path)


def _room_at(path: str, v2: bool) -> tuple[int | None, int | None]:
    """A level's memory room, and its swap room (v2) or memory+swap room (v1); None where it sets no limit."""
    def number(name: str) -> int | None:  # (None: unreadable, or no limit: v2's "max", v1's ~2**63)
        try:
            with open(os.path.join(path, name)) as f:
                text = f.read().strip()
        except OSError:
            return None
        return None if text == "max" or not text.isdigit() or int(text) >= 2**62 else int(text)

    def room(limit: int | None, used: int | None) -> int | None:
        return None if limit is None or used is None else max(0, limit - used + cache)

    try:
        with open(os.path.join(path, "memory.stat")) as f:
            stat = dict(line.split()[:2] for line in f if len(line.split()) >= 2)
        file, shared = ("file", "shmem") if v2 else ("total_cache", "total_shmem")
        cache = max(0, int(stat.get(file, 0)) - int(stat.get(shared, 0)))
    except (OSError, ValueError):
        cache = 0
    if v2:
        swap_limit, swap_used = number("memory.swap.max"), number("memory.swap.current")
        return (room(number("memory.max"), number("memory.current")),
                None if swap_limit is None or swap_used is None else max(0, swap_limit - swap_used))
    return (room(number("memory.limit_in_bytes"), number("memory.usage_in_bytes")),
            room(number("memory.memsw.limit_in_bytes"), number("memory.memsw.usage_in_bytes")))


def _quota_at(path: str, v2: bool) -> float | None:
    try:
        if v2:
            with open(os.path.join(path, "cpu.max")) as f:
                quota, period = (f.read().split() + ["100000"])[:2]
        else:
            with open(os.path.join(path, "cpu.cfs_quota_us")) as f, open(os.path.join(path, "cpu.cfs_period_us")) as g:
                quota, period = f.read().strip(), g.read().strip()
    except OSError:
        return None
    if quota in ("max", "-1") or int(period) <= 0:
        return None
    return int(quota) / int(period)


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(fstype, mount point, options) of the cgroup mounts."""
    out = []
    with open("/proc/self/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 4 and parts[2] in ("cgroup", "cgroup2"):
                out.append((parts[2], parts[1], set(parts[3].split(","))))
    return out


def _own_cgroups() -> dict[str, str]:
    """Our cgroup path per v1 controller, and under "" the v2 one."""
    out = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, ctls, path = line.rstrip("\n").split(":", 2)
            for ctl in ctls.split(",") if ctls else [""]:
                out[ctl] = path
    return out


def _v2() -> tuple[Accounting | None, str]:
    """Our cgroup v2 hands memory (and pids, where it has them) to child cgroups: if it holds
    processes itself (the kernel then refuses to, "no internal processes"), they move first into a
    leaf of their own, execrl-grader, as a delegated subtree's manager does."""
    mount = next((point for kind, point, _ in _mounts() if kind == "cgroup2"), None)
    own = _own_cgroups().get("")
    if mount is None or own is None:
        return None, "cgroup2: not mounted"
    base = os.path.join(mount, own.lstrip("/"))
    try:
        with open(os.path.join(base, "cgroup.controllers")) as f:
            wanted = {"memory", "pids"} & set(f.read().split())
        if "memory" not in wanted:
            return None, f"cgroup2: no memory controller for our cgroup ({own})"
        for _ in range(10):
            with open(os.path.join(base, "cgroup.subtree_control")) as f:
                if wanted <= set(f.read().split()):
                    break
            try:
                with open(os.path.join(base, "cgroup.subtree_control"), "w") as f:
                    f.write(" ".join("+" + c for c in sorted(wanted)))
            except OSError as e:
                if e.errno != errno.EBUSY:
                    raise
                _into_leaf(base)
        else:
            return None, f"cgroup2: the processes of {own} could not be moved into a leaf"
    except OSError as e:
        return None, f"cgroup2: cannot hand memory to child cgroups of {own} ({e.strerror or e})"
    return Accounting("cgroup2", tuple((c, base) for c in ("memory", "pids") if c in wanted)), ""


def _into_leaf(base: str) -> None:
    leaf = os.path.join(base, PREFIX + "grader")
    os.makedirs(leaf, exist_ok=True)
    with open(os.path.join(base, "cgroup.procs")) as f:
        pids = f.read().split()
    for pid in pids:
        try:
            with open(os.path.join(leaf, "cgroup.procs"), "w") as f:
                f.write(pid)
        except OSError:  # gone meanwhile
            continue


def _v1() -> tuple[Accounting | None, str]:
    own, mounts = _own_cgroups(), _mounts()
    dirs = []
    for ctl in ("memory", "cpuacct", "pids"):
        mount = next((point for kind, point, opts in mounts if kind == "cgroup" and ctl in opts), None)
        if mount is None or ctl not in own:
            if ctl == "pids":  # optional: RLIMIT_NPROC then bounds processes
                continue
            return None, f"cgroup1: no {ctl} hierarchy"
        dirs.append((ctl, os.path.join(mount, own[ctl].lstrip("/"))))
    for _, path in dirs:
        if not os.access(path, os.W_OK):
            return None, f"cgroup1: {path} is not writable"
    return Accounting("cgroup1", tuple(dirs)), ""


def _remove_stale(acct: Accounting) -> None:
    """Cgroups of graders that are gone (killed before they could remove theirs)."""
    for _, base in acct.dirs:
        try:
            names = os.listdir(base)
        except OSError:
            continue
        for name in names:
            if not name.startswith(PREFIX):
                continue
            try:
                pid = int(name[len(PREFIX):].split("-")[0])
                os.kill(pid, 0)
            except ProcessLookupError:
                _remove(os.path.join(base, name))
            except (ValueError, PermissionError):
                continue
