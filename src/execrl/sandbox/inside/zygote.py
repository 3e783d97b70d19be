"""The sandboxed process: `pool.py` starts it under bubblewrap as PID 1 of its own PID namespace, with its control
socket on the fd named in argv. Roles:
  runner   runs the model's program: compile once per program (if the language needs it), then one forked child
           per test (stdin/stdout and call forms), or one child that serves calls from the checker (assert and
           check forms). It never receives expected outputs or test code.
  checker  runs trusted test code in a forked child (see checker.py); the model's code never runs here.
After every child it SIGKILLs every other process in its namespace (as PID 1 it cannot be killed from inside)
and reaps them. After every program it mounts fresh tmpfs over the program's /tmp and /dev/shm (binding again
what of ours is kept inside /tmp, an interpreter or a tool, from its second bind at KEEP_HOLD), moves itself
into a fresh network namespace (loopback up: no packet counters, TIME_WAIT sockets or abstract socket names of
the last program) and resets its PID namespace's counter (the next program's first process is PID 2, whatever
the last one forked).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import platform
import resource
import select
import shutil
import signal
import socket
import stat
import struct
import sys
import time
import traceback

from . import child, seccomp
from .cgroup import Cgroup
from .checker import checker_child
from .child import (
    COMPILE_FAILED,
    EXEC_BUSY,
    REPORT_FD,
    RPC_FD,
    STATUS_FD,
    child_setup,
    close_quietly,
    exec_child,
    python_child,
    report_setup_failure,
)
from .protocol import STARVED_CAP, carry_status, recv_msg, send_msg

# Not imported here: threading and random. Their at-fork handlers would add ~0.75 ms to every test's
# fork; a program that uses threads imports threading itself.

ROOT = "/tmp"  # the program's writable tmpfs (a fresh temporary directory when there are no namespaces)
PROGRAM_DIR = "/tmp/prog"  # the program's own directory (its source, its binary), wiped between programs
KEPT_FILES = 64  # the files of it a compile leaves that are put back between tests, at most
EXE = "main.bin"  # a compiled program's binary in PROGRAM_DIR ({exe} in a language's commands)
KEEP: list[str] = []  # read-only binds under ROOT (an interpreter or venv kept in /tmp): bound again each time
KEEP_HOLD = "/.execrl-keep"  # (isolation.KEEP_HOLD) KEEP's i-th path is bound at KEEP_HOLD/i too
RECLAIM_WAIT_S = 1.0  # how long reset reclaims what an ended program left charged before the sandbox is replaced
LEFT_CHARGE = 8 << 20  # bytes the cgroup may be charged between programs (without: ~0.4 MB); more is reclaimed
POLL_S = 0.01  # how often a running program's processes are measured against the CPU and memory limits, at most
POLL_SHARE = 0.1  # sampling mode: the share of a CPU reading a program's proportional set sizes may take (a program of
# many processes, each of many mappings, makes a read cost more, and it is taken less often: _set_sizes)


class Zygote:
    def __init__(self, role: str, uid: int, ctrl: socket.socket, cgroup: Cgroup | None = None):
        self.role, self.uid, self.ctrl = role, uid, ctrl
        self.cg = cgroup  # the program's cgroup (the kernel charges it), or None: we sample (_usage)
        self.image_bytes = 0  # the compiled program's load size (_load_size)
        self.inet = Throttled(_inet_queue_memory, over_sockets)  # the program's TCP and UDP queues, where no cgroup charges them
        self.netlink = Throttled(_netlink_queue_memory)  # and its netlink ones, which no cgroup charges
        child.build_streams()
        self.is_init = os.getpid() == 1
        if ROOT != "/tmp" and uid >= 0:
            os.chmod(ROOT, 0o711)  # no namespaces: the program's uid must reach ROOT/prog
        seccomp.LIBC.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE: programs must not read our memory through /proc
        seccomp.LIBC.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans come back to us
        tops = (ROOT, "/dev/shm") if self.is_init else (ROOT,)  # the program's tmpfs, and their modes
        self.tops = {top: stat.S_IMODE(os.stat(top).st_mode) for top in tops}
        # a fresh tmpfs of the same size for each program, where nothing of ours is bound inside it
        # (else it is wiped)
        self.fresh = {top: os.statvfs(top).f_blocks * os.statvfs(top).f_frsize for top in tops
                      if self.is_init and (top == "/tmp" and os.path.isdir(KEEP_HOLD)
                                           or not any(k.startswith(top + "/") for k in KEEP))}
        if self.fresh:
            os.chdir("/")  # (our cwd would keep a replaced tmpfs, and what the program left in it, alive)
        self.clock = os.sysconf("SC_CLK_TCK")
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.last_pid = _open_last_pid() if self.is_init else None  # (no namespaces: no PID namespace to reset)
        self.net_seen: bytes | None = None  # what our network namespace read as when it was new (_net_state)
        self.kept: dict[str, tuple] = {}  # the program's files as _prepare left them: path -> (data, signature)
        self.diag: socket.socket | None = None  # our sock_diag socket in that namespace (_unix_socket_memory)
        # the exit log, where the kernel allows it (bwrap-root mode) and no cgroup charges reaped
        # children's CPU
        self.exits = ExitLog.open() if self.is_init and cgroup is None else None
        # the children's streams, made once and emptied for each child (_streams_for): the filter
        # refuses memfds
        self.streams = {0: _memfd("stdin"), 1: _memfd("stdout"), 2: _memfd("stderr"), STATUS_FD: _memfd("status")}
        self.stdin_given = 0  # (bytes of the input we wrote to the stdin stream: _stream_memory leaves them out)
        self.gone_cpu, self.seen_cpu = 0.0, {}  # (_usage: the running program's processes' own CPU as sampled)
        self.inputs = _memfd("inputs")  # the running program's tests' inputs (_stash), which no child is given
        self.own_proc = {name: _proc_self(name) for name in OWN_PROC}  # (what _restore_self puts back)
        self.reset()
        seccomp.install()  # once, here: every child inherits it (the zygote itself needs none of what it refuses)

    # -- cleanup
    def kill_all(self) -> None:
        """SIGKILL every process we started, including double-forked daemons, and reap them."""
        for _ in range(1000):
            victims = self._others()
            if not victims:
                return
            if self.is_init:
                try:
                    os.kill(-1, signal.SIGKILL)  # as PID 1 of the namespace: every process but us
                except ProcessLookupError:
                    pass
            else:
                for pid in victims:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
            self._reap()
        raise RuntimeError("could not kill the program's processes")

    def _restore_self(self) -> None:
        """Our /proc files a program of our uid (bwrap-user mode) can write, as they were: the OOM killer's score
        adjustment and the core dump filter, which every later program inherits (its first victims; bits for the
        next program); an autogroup nice we cannot lower again (our polling deprioritized) has this sandbox
        replaced."""
        for name, was in self.own_proc.items():
            now = _proc_self(name)
            if now == was:
                continue
            if name == "autogroup":
                raise RuntimeError(f"a program changed this sandbox's autogroup ({was!r} -> {now!r})")
            with open(f"/proc/self/{name}", "w") as f:
                f.write(f"0x{int(was, 16):x}" if name == "coredump_filter" else was)  # (its file reads hex)

    def _others(self) -> list[int]:
        me = os.getpid()
        if self.is_init:
            return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != me]
        children: dict[int, list[int]] = {}
        for p in os.listdir("/proc"):
            if p.isdigit():
                try:
                    with open(f"/proc/{p}/stat") as f:
                        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                children.setdefault(ppid, []).append(int(p))
        out, todo = [], list(children.get(me, []))
        while todo:
            pid = todo.pop()
            out.append(pid)
            todo.extend(children.get(pid, []))
        return out

    def _reap_first(self, pid: int) -> tuple[int, int, resource.struct_rusage]:
        """wait4 of a child that has ended (or was SIGKILLed). Never blocking: a process of the program tracing it
        (ptrace, where the seccomp filter is not installed) holds its exit from us for as long as the tracer lives
        (a blocking wait hung the sandbox until the grader gave up: infra_error); every other process is killed
        then, the tracer with them, which hands the exit back."""
        for _ in range(20_000):  # (a SIGKILLed process is gone within milliseconds)
            got = os.wait4(pid, os.WNOHANG)
            if got[0]:
                return got
            time.sleep(0.0005)
            for other in self._others():
                if other != pid:
                    try:
                        os.kill(other, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
        raise RuntimeError("the program's first process could not be waited for")

    def _reap(self) -> None:
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                time.sleep(0.0005)
                if not self._others():
                    return

    def reset(self) -> None:
        """Kill everything and delete every file a program could have written: nothing carries
        over."""
        self.kill_all()
        self._restore_self()
        os.ftruncate(self.inputs, 0)  # (the tests' inputs, _stash: emptied before the next program's processes run)
        _collect_unix_sockets()
        self._streams_unlocked()
        for fd in self.streams.values():  # extended attributes a program set on our streams: data for the next
            try:  # program, and memory charged to this sandbox's cgroup while they last
                names = os.listxattr(fd)
            except OSError as e:
                if e.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):  # (a kernel whose memfds hold none)
                    continue
                raise  # (E2BIG: more names than can be listed, so not removed: the grader replaces this sandbox)
            for name in filter(_programs, names):  # (a security module's own label is no program's, and stays)
                os.removexattr(fd, name)
        for top, mode in self.tops.items():
            if top in self.fresh:  # its files, and its inode numbers (a counter per tmpfs), go with it
                _check(seccomp.LIBC.umount2(top.encode(), MNT_DETACH), f"umount {top}")
                options = f"mode={mode:o},size={self.fresh[top]}".encode()
                _check(seccomp.LIBC.mount(b"tmpfs", top.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options),
                       f"mount tmpfs on {top}")
                if top == "/tmp":
                    _bind_kept()
                continue
            os.chmod(top, mode)  # (a program may have made its own tmpfs unreadable)
            _wipe_except(top, KEEP)
        os.makedirs(PROGRAM_DIR, exist_ok=True)
        os.chmod(PROGRAM_DIR, 0o700)
        if self.uid >= 0 and os.geteuid() == 0:
            os.chown(PROGRAM_DIR, self.uid, self.uid)
        if self.is_init:
            self.fresh_namespaces()
        for fd in self.streams.values():  # (read by now: their pages, the program's output, are charged as shmem)
            os.ftruncate(fd, 0)
        self._uncharged()

    def _uncharged(self) -> None:
        """The cgroup is charged with no more than LEFT_CHARGE of what ended programs left (kernel memory: the next
        program's lower limit could not be set under it, and its memory would count it): else emptied, for up to
        RECLAIM_WAIT_S, then RuntimeError (the grader replaces this sandbox)."""
        if self.cg is None or self.cg.memory() <= LEFT_CHARGE:
            return
        deadline = time.monotonic() + RECLAIM_WAIT_S
        while True:  # (slab freed by the reclaim is uncharged once RCU lets its pages go: polled for a while)
            self.cg.empty()
            if (left := self.cg.memory()) <= LEFT_CHARGE:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the sandbox's cgroup is charged {left >> 20} MiB that no program of it holds")
            time.sleep(0.01)

    def _streams_unlocked(self) -> None:
        """No lock on our streams held by a description the program left alive past its end (/dev/stdout reopened,
        locked and sent into a unix socket's own queue: freed when the kernel collects such cycles, on a workqueue,
        and until then a value hidden in a lock's range that the next program read back: a hunt's find): waited for,
        up to STREAM_LOCK_WAIT_S, then RuntimeError (the grader replaces this sandbox)."""
        deadline = time.monotonic() + STREAM_LOCK_WAIT_S
        while any(map(_locked_elsewhere, self.streams.values())):
            if time.monotonic() > deadline:
                raise RuntimeError("a lock on a stream is held by a file description the program left in flight")
            _collect_unix_sockets()
            time.sleep(0.002)

    def fresh_namespaces(self) -> None:
        """The next program starts where the first one did: with the PID counter back at 1 (only we
        are alive now), and in a network namespace as new: a fresh one (loopback up; the last one
        goes with its last socket) unless the one we are in reads exactly as it did when it was new
        (no socket left in it, no packet, no counter moved: a program that never used the network
        changed nothing there, and a new one costs ~0.5 ms)."""
        if _net_state() != self.net_seen:
            if self.diag is not None:
                self.diag.close()
            _check(seccomp.LIBC.unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", IFF_UP | IFF_RUNNING))
            # one sock_diag socket per namespace, for its life: made and closed per sample, its slow
            # release would show in the namespace's socket count (sockstat) when the next program
            # looks
            self.diag = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG)
            self.net_seen = _net_state()
        os.pwrite(self.last_pid, b"1", 0)

    # -- measuring a running program: all of its processes, not only the one we forked
    def _usage(self, memory: int) -> tuple[float, float, int]:
        """CPU seconds of the program's live processes, their own and with the children they reaped,
        and their memory in bytes: proportional set sizes (shared pages counted once; resident sizes where those are
        well under `memory`, the limit: _set_sizes), plus what it keeps in the sandbox's tmpfs (files, inodes and
        extended attributes) and in the queues of its sockets. With a cgroup: the memory it charges (and the TCP and
        UDP queues, which cgroup v1 does not charge, and the netlink ones, which no cgroup does); its CPU is read in
        _cpu_spent."""
        if self.cg is not None:
            return 0.0, 0.0, self.cg.memory() + ((self.inet.read() if self.cg.version == 1 else over_sockets()) +
                                                 self.netlink.read() if self.is_init else 0)  # (netlink's: no cgroup
            # charges them; sockets only where the network namespace is the program's: without namespaces sockstat
            # counts the host's, and a busy host's connections made every program `memory`, a review's find)
        own, cpu, mem = 0.0, 0.0, self._stream_memory()
        logged = self.exits.ended() if self.exits is not None else {}  # (read first: each process's own CPU once)
        parent: dict[int, tuple[int, bytes]] = {}  # pid: (its parent's, its state)
        threads, starts = 0, {}
        seen: dict[tuple[int, bytes], float] = {}
        for pid in self._others():
            try:
                with open(f"/proc/{pid}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
                mine = sum(int(x) for x in fields[11:13]) / self.clock  # utime stime
                seen[pid, fields[19]] = mine  # (by its start time too: a pid used again is another process)
                own += max(0.0, mine - logged.get(pid, 0.0))  # (an ended process its parent has not reaped: its
                # time is in the log; a pid used again, as little as its time beyond the first's)
                cpu += sum(int(x) for x in fields[11:15]) / self.clock  # utime stime cutime cstime
                parent[pid] = int(fields[1]), fields[0]
                threads += int(fields[17])
                starts[pid] = fields[19]
            except (OSError, ValueError, IndexError):  # gone meanwhile
                continue
        # a process gone since the last sample keeps what it was seen to use (without the exit log, the time of a
        # child the kernel reaped, its parent ignoring SIGCHLD, reaches no one: 50 children of 30 ms passed a 1 s
        # limit, a hunt's find)
        self.gone_cpu += sum(cpu_s for key, cpu_s in self.seen_cpu.items() if key not in seen)
        self.seen_cpu = seen
        pids = [pid for pid, (ppid, state) in parent.items()  # (a vfork child before its exec, subprocess's or
                if not (ppid in parent and state != b"Z" != parent[ppid][1] and _same_memory(ppid, pid))]  # system's:
        # its parent's pages, counted twice, a review's find; not where a main thread has exited, whose process kcmp
        # compares as no memory)
        if self.is_init:
            for top in (ROOT, "/dev/shm"):
                st = os.statvfs(top)
                # its files' pages, and the kernel memory of its inodes and extended attributes:
                # tmpfs counts both in "inode space", 1 KiB an inode plus each xattr's size, which
                # statfs reports in free 1 KiB inodes
                mem += (st.f_blocks - st.f_bfree) * st.f_frsize + (st.f_files - st.f_ffree) * 1024
            mem += _unix_socket_memory(self.diag) + self.inet.read() + self.netlink.read()  # (the
            # namespace is the program's alone)
        return own, cpu, mem + self._set_sizes({pid: starts[pid] for pid in pids}, threads, memory - mem)

    def _set_sizes(self, procs: dict[int, bytes], threads: int, room: int) -> int:
        """The memory of processes {pid: start time} (of `threads` threads in all): their resident sizes (statm: an
        upper bound, cheap) where those, with what the kernel's counters of them may lag, fit in `room`; else their
        proportional set sizes (shared pages counted once: smaps_rollup, which walks every mapping, 10 ms a read at
        60,000 of them). Read every 10 ms, 20 idle processes kept the runner at 0.4 of a core, 20 of many mappings at
        0.8 (a hunt's find): a read of set sizes is taken again once its cost is POLL_SHARE of the time since, in
        between bounded by it and what each process's resident size grew since, and read again, at half a CPU at most,
        where that bound is more than `room` (a burst timed after a read: a review's find)."""
        resident: dict[tuple[int, bytes], int] = {}
        for pid, start in procs.items():
            try:
                with open(f"/proc/{pid}/statm", "rb") as f:
                    rss = int(f.read().split()[1]) * self.page
                resident[pid, start] = rss or _pss(pid, self.page)  # (zeros where its main thread has exited: _pss
            except (OSError, ValueError, IndexError):  # reads through another) (gone meanwhile)
                continue
        slack = (len(resident) * RSS_LAG_PAGES + threads * 64) * self.page  # (Linux 6.2 on: a per-CPU counter of a
        # process's pages, each CPU's part folded in at its batch; before: 64 events a thread)
        if (held := sum(resident.values())) + slack <= room:
            return held
        now = time.monotonic()
        if self.sized is not None:
            last, at, cost, read_at = self.sized
            bound = last + sum(max(0, rss - at.get(key, 0)) for key, rss in resident.items())
            if now < read_at + cost * (1 / POLL_SHARE - 1) and bound + slack <= room:
                return bound
            if now < read_at + cost:  # (not known to be over yet: read at the next poll it may be)
                return min(bound, room)
        began = time.thread_time()
        total = 0
        for pid, _ in resident:
            try:
                total += _pss(pid, self.page)
            except (OSError, ValueError, IndexError):  # gone meanwhile
                continue
        self.sized = total, resident, time.thread_time() - began, time.monotonic()
        return total

    def _stream_memory(self) -> int:
        """Bytes in our stream memfds, the only memfds a program can hold (it can make none): what it wrote, in no
        process's set size until mapped, and the extended attributes it set on them (through the fds or a path such
        as /dev/stdout: kernel memory on no tmpfs of the sandbox, a hunt's find: 1.5 GB held under a 256 MB limit),
        each name counted at the largest value a name can hold; OVER where they are more than can be listed. Four
        fstat and four listxattr calls, however many descriptors the program holds (reading the link of each of its
        processes' descriptors cost the runner most of a core, outside the program's limits)."""
        total = 0
        for target, fd in self.streams.items():
            size = os.fstat(fd).st_blocks * 512
            if target == 0:  # (its stdin: only what is beyond the input we gave it, which a cgroup charges to us;
                self.stdin_given = min(self.stdin_given, size)  # what it emptied of it and wrote back is its own)
                size -= self.stdin_given
            total += size
            try:
                total += sum(XATTR_SIZE_MAX + len(name) for name in os.listxattr(fd) if _programs(name))
            except OSError as e:
                if e.errno == errno.E2BIG:
                    return OVER
        return total

    def _over(self, deadline: float, memory: int, cpu_s: float, cpu_before: float) -> str | None:
        """Which limit the program has passed, all its processes together (None: none)."""
        if time.monotonic() >= deadline:
            return "deadline"
        own, cpu, mem = self._usage(memory)
        if mem > memory:
            return "memory"
        if self._cpu_spent(cpu_before, own, cpu) > cpu_s + 0.05:
            return "cpu"
        return None

    def _cpu_spent(self, cpu_before: float, live_own: float = 0.0, live: float = 0.0) -> float:
        """CPU seconds of the program's processes since cpu_before: those we or their parents reaped
        (our children's rusage, exact), or, where more, the own times of every process that ended
        (the exit log: also those the kernel reaped for a parent that ignores SIGCHLD, whose time
        reaches no parent), plus those still alive. With a cgroup: what the kernel charged it since
        cpu_before (_cpu_now), all of that."""
        if self.cg is not None:
            return self.cg.cpu_s() - cpu_before
        reaped = _reaped_cpu() - cpu_before + live
        if self.exits is None:  # (the processes' own times as last sampled, those gone since included: where the
            return max(reaped, self.gone_cpu + sum(self.seen_cpu.values()))  # kernel reaped them, what was seen)
        # (live from _usage: the exit log as it read it before the live processes, which left out those logged; a
        # process ended and not yet reaped was counted twice, a review's find: multiprocessing's workers, joined in
        # turn, were a timeout at half their limit)
        return max(reaped, (self.exits.spent if live or live_own else self.exits.total()) + live_own)

    def _cpu_now(self) -> float:
        return self.cg.cpu_s() if self.cg is not None else _reaped_cpu()

    # -- one child
    def _stash(self, blobs: list, first: int) -> list[tuple[int, int]]:
        """The tests' inputs, blobs[first:], moved out of our memory into the inputs memfd, each zeroed and dropped;
        their (offset, size) there. A test's child is forked from us, so inputs held here counted against every
        test's memory limit (RLIMIT_AS: 25 tests of 5 MB left a program 125 MB less of its 256, a hunt's find)."""
        os.ftruncate(self.inputs, 0)
        spans, at = [], 0
        for i in range(first, len(blobs)):
            with memoryview(blobs[i]) as view:
                done = 0
                while done < len(view):
                    done += os.pwrite(self.inputs, view[done:], at + done)
            spans.append((at, len(blobs[i])))
            at += len(blobs[i])
            scrub(blobs[i])
            blobs[i] = None
        return spans

    def _unstash(self, span: tuple[int, int], fd: int | None = None) -> bytearray | None:
        """A test's input from the inputs memfd: copied into `fd` (kernel to kernel), or else read into a
        bytearray (zeroed by the caller)."""
        at, size = span
        if fd is None:
            return _read(self.inputs, size, at)
        done = 0
        while done < size:
            try:
                k = os.copy_file_range(self.inputs, fd, size - done, at + done)
            except OSError as e:  # (a kernel or a container's filter without it: through our memory, a part at a time)
                if e.errno not in (errno.ENOSYS, errno.EPERM, errno.EXDEV, errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                part = _read(self.inputs, min(size - done, 1 << 20), at + done)
                k = os.write(fd, part)
                scrub(part)
            if not k:
                raise OSError(errno.EIO, "the test's input could not be copied")
            done += k
        return None

    def spawn(self, target, job: dict, lim: dict, stdin: bytes | tuple[int, int] | None = None, cpu_s: float = 1.0,
              wall_s: float = 2.0, rpc_fd: int | None = None, uid: int | None = None,
              until_stop: bool = False) -> tuple[dict, list]:
        """Run `target(job)` in a forked child under the limits; its result and [stdout, stderr].
        Its files are memfds (on no filesystem a program can reach, and reopenable as /dev/stdout by
        any uid)."""
        files = self._streams_for(stdin)
        report_r, report_w = os.pipe()
        fds = {**files, REPORT_FD: report_w, **({RPC_FD: rpc_fd} if rpc_fd is not None else {})}
        ooms = 0
        if self.cg is not None:
            self.cg.limit(lim["memory_mb"] << 20, lim["nproc"])
            ooms = self.cg.oom_kills()
        cpu_before = self._cpu_now()
        self.inet.reset()
        self.netlink.reset()
        if self.exits is not None:
            self.exits.restart()  # what ended before this child (our own helpers) is not its
        self.gone_cpu, self.seen_cpu = 0.0, {}
        start = time.monotonic()
        sys.stdout.flush()  # a child must not inherit (and later flush) buffered output of ours
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            try:
                child_setup(lim, cpu_s, self.uid if uid is None else uid, fds, PROGRAM_DIR,
                            enter=None if self.cg is None else self.cg.enter)
                target(job)
            except BaseException as e:  # noqa: BLE001 - the sandbox's own failure, not the program's
                report_setup_failure(f"{type(e).__name__}: {e}")
            finally:
                os._exit(125)
        os.close(report_w)
        if rpc_fd is not None:  # the child's alone now: when it ends, the other side sees EOF at once
            os.close(rpc_fd)
        try:
            res = self._wait(pid, start, wall_s, until_stop, cpu_s, lim["memory_mb"] << 20, cpu_before)
            self.kill_all()
            if self.cg is not None and self.cg.oom_kills() > ooms:  # the kernel's OOM killer, at the cgroup's limit:
                res["killed_for"] = "memory"  # its verdict, though the program went on to a time limit (a Pool whose
                # worker it killed waits for that worker's task: a hunt's find, where sampling said memory)
            res["cpu_s"] = round(self._cpu_spent(cpu_before), 4)  # every process of the program, ended by now
            report = _read(report_r, 4000)
            compile_failed = report == COMPILE_FAILED.encode()  # (said before any of the program ran)
            if report and not compile_failed:
                res["setup_error"] = report.decode("utf-8", "replace")
            out = _read_ends(files[1], 8192) if job.get("compile") else _read(files[1], lim["output_mb"] << 20)
            err = _read_ends(files[2], 8192)  # (a compiler's stdout is read for its account only: an assembler's
            # .print of 130 MB was carried whole to the grader, which never used it)
            raw = _read(files[STATUS_FD], lim["output_mb"] << 20)  # a return value's size
            if target is checker_child:  # (the checker's lines: ours, from a zygote no program is forked from)
                res["status"], value = carry_status(raw, checker=True)
                scrub(raw)
            else:  # the grader parses a program's status (status_raw): parsed here, its texts' str and bytes copies,
                # which scrub cannot reach, would stay in the heap every later program's process is forked from (a
                # correct program's answer for the same problem; a line a program wrote for a later one to read)
                res["status"], value = [], raw
                res["status_raw"] = "value" if job.get("mode") == "call" else "status"  # (the only form with a value)
                res["compile_failed"] = compile_failed
            res["stdout_bytes"], res["stderr_bytes"] = os.fstat(files[1]).st_size, os.fstat(files[2]).st_size
        finally:
            os.close(report_r)
        return res, [out, err, value]

    def _streams_for(self, stdin: bytes | tuple[int, int] | None) -> dict[int, int]:
        """The next child's stdin, stdout, stderr and status: our memfds emptied, with our mode and
        flags back (every process of the last child is gone, but it may have fchmod'ed them or
        cleared O_APPEND on the file description it shared with us), stdin holding `stdin`. What else
        the last child could leave on the file or the description it shared with us goes too: its
        locks (flock and open-file-description locks belong to the description, and outlive it: a
        value hidden in a lock's range), the description's owner and signal (F_SETOWN, F_SETSIG: numbers) and the
        file's access and modification times (utime), a read lease (a later program's open of /dev/stdout would
        block until the kernel breaks it, 45 s: its tests' timeout), the inode's write-life hint and its flags
        (chattr's NOATIME, NODUMP: bits a later program reads back); its extended attributes go after each program
        (reset). (In bwrap-root mode the program does not own the streams and can set none of these.)"""
        for target, fd in self.streams.items():
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            os.fchmod(fd, 0o777)
            fcntl.fcntl(fd, fcntl.F_SETFL, os.O_APPEND if target else 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
            fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack(FLOCK, fcntl.F_UNLCK, os.SEEK_SET, 0, 0, 0))
            fcntl.fcntl(fd, fcntl.F_SETOWN, 0)
            fcntl.fcntl(fd, fcntl.F_SETSIG, 0)
            os.utime(fd, ns=(0, 0))  # (times a program set on the file it shared with us: numbers for the next)
            if fcntl.fcntl(fd, F_GETLEASE) != fcntl.F_UNLCK:  # (unlocking where there is none fails: EAGAIN)
                fcntl.fcntl(fd, F_SETLEASE, fcntl.F_UNLCK)
            _clear_inode_marks(fd)
        if isinstance(stdin, tuple):  # (a span of the inputs memfd, _stash)
            self._unstash(stdin, self.streams[0])
        elif stdin:
            os.write(self.streams[0], stdin)
        os.lseek(self.streams[0], 0, os.SEEK_SET)
        self.stdin_given = os.fstat(self.streams[0]).st_blocks * 512  # (ours, not the program's: _stream_memory)
        return dict(self.streams)

    def _wait(self, pid: int, start: float, wall_s: float, until_stop: bool, cpu_s: float, memory: int,
              cpu_before: float) -> dict:
        """Wait for the child; SIGKILL it at the wall deadline, or when all its processes together
        pass the CPU or memory limit; with until_stop also wait for the grader's stop, the limits
        still watched: a program's first process may end while a process it forked serves the tests
        (then all of them are killed)."""
        pidfd = os.pidfd_open(pid)
        deadline, killed, waited, stopped = start + wall_s, None, None, not until_stop
        self.sized = None  # (this program's last read of set sizes: _set_sizes)
        try:
            while waited is None or not stopped:
                watch = ([pidfd] if waited is None else []) + ([] if stopped else [self.ctrl])
                timeout = None if killed else max(0.0, min(deadline - time.monotonic(), POLL_S))
                ready = select.select(watch, [], [], timeout)[0]
                if self.ctrl in ready:
                    recv_msg(self.ctrl)  # the grader's "stop": the checker is done with this program
                    stopped = True
                if waited is None and pidfd in ready:
                    waited = self._reap_first(pid)
                    continue
                if not ready and not killed:
                    if time.monotonic() >= deadline:  # (its time runnable but waiting for a CPU is not its own: a
                        # busy machine timed correct programs out at the wall limit, 2x the CPU limit, a hunt's find)
                        delayed = _run_delay(self._others())
                        deadline = max(deadline, min(start + wall_s + delayed, start + STARVED_CAP * wall_s))
                    killed = self._over(deadline, memory, cpu_s, cpu_before)
                if waited is not None:
                    if killed:
                        self.kill_all()  # the processes still serving the tests: the checker sees them end
                elif killed or self.ctrl in ready:
                    os.kill(pid, signal.SIGKILL)
                    waited = self._reap_first(pid)
        finally:
            os.close(pidfd)
        _, status, rusage = waited
        wall = time.monotonic() - start
        return {
            "exit": os.waitstatus_to_exitcode(status),
            "wall_s": round(wall, 4),
            "max_rss_kb": rusage.ru_maxrss,
            "killed_for": killed,  # None, or "deadline", "cpu", "memory": why we ended it
        }

    # -- operations
    def _prepare(self, h: dict, source: bytes) -> tuple[dict, list] | None:
        """Write the program into its fresh directory and compile it; a failed compile's result, or
        None. What it leaves (the source, the binary) is kept, for _restore_program."""
        self.src = os.path.join(PROGRAM_DIR, h["file"])
        with open(self.src, "wb") as f:
            f.write(source)
        if self.uid >= 0 and os.geteuid() == 0:
            os.chown(self.src, self.uid, self.uid)
        self.kept = {self.src: (source, None)}
        if h.get("compile"):
            lim = dict(h["limits"], memory_mb=h["limits"]["compile_memory_mb"], output_mb=h["limits"]["compile_output_mb"])
            t = h["limits"]["compile_timeout_s"]
            res, pair = self.spawn(exec_child, {"argv": _argv(h["compile"], self.src), "compile": True}, lim, cpu_s=t,
                                   wall_s=2 * t)
            if res["exit"] != 0 or res["killed_for"] or "setup_error" in res:
                return res, pair
            scrub(*pair)  # (a compile's warnings, which quote the source, were read by the next Python program in its
            # own memory, forked from ours: a hunt's find)
        exe = os.path.join(PROGRAM_DIR, EXE)
        self.image_bytes = 0
        for name in sorted(os.listdir(PROGRAM_DIR))[:KEPT_FILES]:  # what the compile left: the binary, a language's
            path = os.path.join(PROGRAM_DIR, name)  # other files ({dir}/main, Main.class, ...), each put back as the
            sig = _signature(path)  # binary is where a test changed it (a run command naming another file than
            if path == self.src or sig is None or not stat.S_ISREG(sig[1]):  # {exe} lost it: infra_error)
                continue
            with open(path, "rb") as f:
                data = bytearray(os.fstat(f.fileno()).st_size)
                f.readinto(data)
            self.kept[path] = (data, None)
            if path == exe:
                self.image_bytes = _load_size(data)
        self._restore_program()  # (records what each kept file looks like now)
        return None

    def _restore_program(self) -> str:
        """Put the program's directories and files back as _prepare left them wherever a test
        changed them (deleted, renamed, chmod'ed or rewrote them): every test starts from the same
        set-up, whatever the one before did. "" when done, else why not (the program's doing: e.g.
        its files filled the tmpfs)."""
        try:
            for d, mode in ((ROOT, self.tops[ROOT]), (PROGRAM_DIR, 0o700)):
                if _signature(d) is None or not stat.S_ISDIR(_signature(d)[1]):
                    _wipe(d)  # (not a directory: one unlink)
                    os.mkdir(d)
                if stat.S_IMODE(os.lstat(d).st_mode) != mode:
                    os.chmod(d, mode)
            if self.uid >= 0 and os.geteuid() == 0 and os.lstat(PROGRAM_DIR).st_uid != self.uid:
                os.chown(PROGRAM_DIR, self.uid, self.uid)
            for path, (data, seen) in self.kept.items():
                now = _signature(path)
                if seen is not None and now != seen:
                    self._rewrite(path, data, stat.S_IMODE(seen[1]))
                    now = _signature(path)
                self.kept[path] = (data, now)
        except OSError as e:
            return f"the program's files could not be restored for this test ({type(e).__name__}: {e})"
        return ""

    def _fresh_copy(self, path: str) -> bool:
        """The kept file at `path` written anew, as a file of its own: a descriptor a test left open
        for writing (in flight on a unix socket) holds the old one. False where `path` is not the
        program's."""
        if path not in self.kept:
            return False
        data, seen = self.kept[path]
        self._rewrite(path, data, stat.S_IMODE(seen[1]))
        self.kept[path] = (data, _signature(path))
        return True

    def _rewrite(self, path: str, data: bytes, mode: int) -> None:
        _set_aside(path)
        with open(path, "wb") as f:
            f.write(data)
        os.chmod(path, mode)
        if self.uid >= 0 and os.geteuid() == 0:
            os.chown(path, self.uid, self.uid)

    def op_run(self, h: dict, blobs: list[bytes], fds) -> tuple[dict, list]:
        """Compile once, then one child per test, each result sent as soon as it is known (a
        program's output is never held for more than one test); stops early after a syntax error (or
        a timeout, if asked)."""
        failed = self._prepare(h, blobs[0])
        if failed is not None:
            return {"compile": failed[0]}, failed[1]
        lim, num_run = h["limits"], 0
        cpu, wall = lim["timeout_s"], max(2 * lim["timeout_s"], lim["timeout_s"] + 1)
        spans = self._stash(blobs, first=1)
        for i in range(len(h["tests"])):
            if h.get("python"):
                job = {"mode": h["mode"], "src": self.src, "fn_name": h.get("fn_name"), "args": None}
                if h["mode"] == "call":  # (its blob, parsed in the child: no copy of a test's arguments stays in
                    job["args"] = blobs[i + 1] = self._unstash(spans[i])  # our memory, which a later program's
                    # processes inherit; zeroed after the test, or by serve_forever if it raised)
                target = python_child
            else:
                argv = _argv(h["run"], self.src)  # ("program": its own binary, whose exec failing is its failure)
                own = "/" in argv[0] and os.path.normpath(os.path.join(PROGRAM_DIR, argv[0])).startswith(
                    PROGRAM_DIR + os.sep)  # (a tool named bare and not found is ours to blame: infra_error)
                job, target = {"argv": argv, "program": own}, exec_child  # (a file of its directory: {exe}, {dir}/main)
            broken = self._restore_program() if i else ""
            if broken:  # charged to the program, whose files it was: this test fails unrun
                res, pair = _unrun(broken), [b"", broken.encode(), b""]
            elif self.image_bytes > lim["memory_mb"] << 20 and job.get("argv", [""])[0] == os.path.join(PROGRAM_DIR, EXE):
                # its static arrays alone are over the limit: the kernel cannot load it (under RLIMIT_AS the
                # exec dies with SIGSEGV, which would read as a runtime error)
                why = (f"the program's binary needs {self.image_bytes / (1 << 20):,.0f} MB of memory to load (its "
                       f"code and static data), over the {lim['memory_mb']:,} MB limit")
                res, pair = _unrun(why, killed_for="memory"), [b"", why.encode(), b""]
            else:
                stdin = None if h["mode"] == "call" else spans[i]
                res, pair = self.spawn(target, job, lim, stdin=stdin, cpu_s=cpu, wall_s=wall)
                if res.get("setup_error") == EXEC_BUSY:
                    try:
                        fresh = self._fresh_copy(job["argv"][0])
                    except OSError as e:  # (the program filled its tmpfs too: its failure, as in _restore_program)
                        broken = f"the program's files could not be restored for this test ({type(e).__name__}: {e})"
                        res, pair, fresh = _unrun(broken), [b"", broken.encode(), b""], False
                    if fresh:
                        res, pair = self.spawn(target, job, lim, stdin=stdin, cpu_s=cpu, wall_s=wall)
            send_msg(self.ctrl, {"result": res}, pair)
            scrub(*pair, job.get("args"))
            pair = job = blobs[i + 1] = None  # (freed before the next test's fork: that child's memory limit is its own)
            num_run += 1
            if res.get("compile_failed") or "setup_error" in res:
                break
            if h.get("stop_after_timeout") and _timed_out(res, cpu):
                break
        return {"done": num_run}, []

    def op_serve(self, h: dict, blobs, fds) -> tuple[dict, list]:
        """One child runs the program, then answers the checker's calls until the grader says
        stop."""
        self._prepare(h, blobs[0])
        lim, n = h["limits"], max(1, h["num_tests"])
        cpu, wall = lim["timeout_s"] * n, (2 * lim["timeout_s"] + 1) * n + 1
        job = {"mode": "serve", "src": self.src}
        ours, theirs = socket.socketpair()  # the channel to the checker, made here: in the program's network
        try:  # namespace (a socket is its maker's), its other end to the grader, which hands it to the checker
            send_msg(self.ctrl, {"channel": True}, fds=[theirs.fileno()])
        finally:
            theirs.close()
        return self.spawn(python_child, job, lim, cpu_s=cpu, wall_s=wall, rpc_fd=ours.detach(), until_stop=True)

    def op_check(self, h: dict, blobs, fds) -> tuple[dict, list]:
        lim, n = h["limits"], max(1, len(h["job"]["snippets"]))
        wall = (2 * lim["timeout_s"] + 1) * n + 10
        checker_lim = dict(lim, memory_mb=max(lim["memory_mb"], 1024), nproc=max(lim["nproc"], 16))
        return self.spawn(checker_child, h["job"], checker_lim, cpu_s=wall, wall_s=wall, rpc_fd=fds.pop(0))

    def serve_forever(self) -> None:
        ops = {"run": self.op_run, "serve": self.op_serve, "check": self.op_check}
        while True:
            try:
                h, blobs, fds = recv_msg(self.ctrl, mutable=True, takes_fds=True)
            except EOFError:
                return
            out = []
            try:
                reply, out = ops[h["op"]](h, blobs, fds)
            except Exception as e:  # noqa: BLE001 - reported to the grader as infra_error, never as a verdict
                reply, out = {"infra_error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()}, []
            finally:
                for fd in fds:  # those no child took
                    close_quietly(fd)
            try:
                self.reset()  # nothing of this program outlives its grading
            except Exception as e:  # noqa: BLE001 - what the program left could not be cleaned: its verdict stands,
                reply["recycle"] = f"{type(e).__name__}: {e}"  # and the grader replaces this sandbox
            send_msg(self.ctrl, reply, out)
            scrub(*blobs, *out, *(data for data, _ in self.kept.values()))  # (what the next program's children
            self.kept = {}  # inherit from our memory holds nothing of this one's: its source, inputs, outputs)
            if "recycle" in reply:
                return


STREAM_LOCK_WAIT_S = 1.0  # a lock a program left on a stream in flight: how long reset waits for it
FLOCK = "hhqqi4x"  # struct flock: type, whence, start, len, pid (a lock's range: the whole file from 0, 0)
CLONE_NEWNET, SIOCSIFFLAGS, IFF_UP, IFF_RUNNING = 0x40000000, 0x8914, 0x1, 0x40
MS_NOSUID, MS_NODEV, MS_NOEXEC, MNT_DETACH = 0x2, 0x4, 0x8, 0x2
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC = 0x1, 0x20, 0x1000, 0x4000


def _bind_kept() -> None:
    """Into a fresh /tmp: what of ours lives inside it (KEEP), read-only, from its second bind, with the directories
    above it (0755: a program's uid must pass them)."""
    for i, path in enumerate(KEEP):
        held = f"{KEEP_HOLD}/{i}"
        parent = os.path.dirname(path)
        os.makedirs(parent, exist_ok=True)
        while parent != "/tmp":
            os.chmod(parent, 0o755)
            parent = os.path.dirname(parent)
        if os.path.isdir(held):
            os.makedirs(path, exist_ok=True)
        else:
            open(path, "ab").close()
        _check(seccomp.LIBC.mount(held.encode(), path.encode(), None, MS_BIND | MS_REC, None), f"bind {path}")
        _check(seccomp.LIBC.mount(None, path.encode(), None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV,
                                  None), f"remount {path} read-only")


# Everything of a network namespace that a process without capabilities can change and a later one
# could read: its sockets (unix ones, abstract names and those in flight, in /proc/net/unix; TCP,
# UDP, RAW and TIME_WAIT counts in sockstat), loopback's packet counters (any packet sent), and the
# IP, ICMP, TCP and UDP counters (v4 and v6: a send with no route moves one without a packet).
NET_STATE = ("/proc/self/net/unix", "/proc/self/net/sockstat", "/proc/self/net/sockstat6", "/proc/self/net/dev",
             "/proc/self/net/snmp", "/proc/self/net/snmp6", "/proc/self/net/netstat",
             "/proc/self/net/ip6_flowlabel")  # (IPv6 flow labels linger past their socket, sending nothing: a
# program left its answer in them for the next one to read, a hunt's find)


def _net_state() -> bytes:
    out = []
    for path in NET_STATE:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:  # (a kernel without IPv6)
            continue
        try:
            while chunk := os.read(fd, 1 << 16):
                out.append(chunk)
        finally:
            os.close(fd)
    return b"".join(out)


NETLINK_SOCK_DIAG, SOCK_DIAG_BY_FAMILY, NLMSG_ERROR, NLMSG_DONE = 4, 20, 2, 3
UDIAG_SHOW_MEMINFO, UNIX_DIAG_MEMINFO = 0x20, 5


def _unix_socket_memory(nl: socket.socket) -> int:
    """Bytes the kernel holds for the unix sockets of our network namespace (sock_diag's meminfo of
    each: what it sent that is not yet read, and what it holds to read): memory in no process, which
    sockets sent into other sockets keep even when no process has them. Raises OSError where
    sock_diag cannot be had."""
    req = struct.pack("=BBHIIIII", socket.AF_UNIX, 0, 0, 0xFFFFFFFF, 0, UDIAG_SHOW_MEMINFO, 0, 0)
    total = 0
    nl.send(struct.pack("=IHHII", 16 + len(req), SOCK_DIAG_BY_FAMILY, 0x301, 1, 0) + req)  # REQUEST | DUMP
    while True:
        data = nl.recv(1 << 16)
        off = 0
        while off + 16 <= len(data):
            length, kind = struct.unpack_from("=IH", data, off)
            if kind == NLMSG_DONE or length < 16:
                return total
            if kind == NLMSG_ERROR:
                raise OSError(-struct.unpack_from("=i", data, off + 16)[0], "sock_diag refused")
            attr, end = off + 16 + 16, off + length  # after nlmsghdr and unix_diag_msg
            while attr + 4 <= end:
                alen, atype = struct.unpack_from("=HH", data, attr)
                if alen < 4:
                    break
                if atype == UNIX_DIAG_MEMINFO and alen >= 4 + 12:
                    rmem, _, wmem = struct.unpack_from("=III", data, attr + 4)
                    total += rmem + wmem
                attr += (alen + 3) & ~3
            off += (length + 3) & ~3


# Where a TCP or UDP socket's queues are listed, and the states whose queues are data bytes (None: every state).
# TCP's others are left out: a listening socket's are counts, a socket in SYN_SENT can list its initial sequence
# number as its send queue (write_seq set, snd_una not yet: a CI run's loop of loopback connections read 3.8 GB
# queued), and SYN_RECV, TIME_WAIT and a listed CLOSE (bound, never connected) hold no data. (One reset by its peer is
# no longer listed, its unread queue with it: docs/sandbox.md names the gap.)
TCP_DATA_STATES = frozenset((b"01", b"04", b"05", b"08", b"09", b"0B"))  # ESTABLISHED FIN_WAIT1/2 CLOSE_WAIT
# LAST_ACK CLOSING
INET_QUEUES = (("/proc/self/net/tcp", TCP_DATA_STATES), ("/proc/self/net/tcp6", TCP_DATA_STATES),
               ("/proc/self/net/udp", None), ("/proc/self/net/udp6", None))


def _netlink_queue_memory() -> int:
    """Bytes the kernel holds in the netlink sockets of our network namespace (/proc/net/netlink's Rmem and Wmem of
    each): a netlink socket's receive queue takes the kernel's replies, an error reply echoes the whole request, and
    no memory cgroup is charged for them: 4 processes of 240 sockets held 2.4 GB of the host's memory under a 64 MB
    limit (a hunt's find). OVER where the namespace holds more than MAX_NETLINK_SOCKETS: the file is read a line at a
    time and no further (the kernel writes it as it is read)."""
    total = 0
    with open("/proc/self/net/netlink", "rb") as f:
        next(f, None)
        for n, line in enumerate(f):
            if n >= MAX_NETLINK_SOCKETS:
                return OVER
            fields = line.split()
            if len(fields) > 5:
                total += int(fields[4]) + int(fields[5])
    return total


def _inet_sockets() -> int:
    """How many TCP and UDP sockets our network namespace has: sockstat's counts are the namespace's, and cheap to
    read, where reading /proc/net/tcp walks the host's whole table (4.5 ms a read on a busy host, four files every
    10 ms poll: a third of a core per worker with no socket at all). A connection closed and left in TIME_WAIT (60 s,
    across the program's tests) counts a sixteenth of a socket: it holds no queue, but it is a line of /proc/net/tcp
    to parse at every measurement (a program's loop of short connections left 100,000, and each test's reading of
    them took the runner a core: a hunt's find)."""
    count, closed = 0, 0
    for path in SOCKSTAT:
        for line in _table(path):
            fields = line.split()
            if fields and fields[0] in (b"TCP:", b"UDP:", b"TCP6:", b"UDP6:") and b"inuse" in fields:
                count += int(fields[fields.index(b"inuse") + 1])
                if b"tw" in fields:  # (TCP:'s, for both families)
                    closed += int(fields[fields.index(b"tw") + 1])
    return count + closed // 16


SOCKSTAT = ("/proc/self/net/sockstat", "/proc/self/net/sockstat6")


def _table(path: str) -> list[bytes]:
    """The lines of a /proc/net file; none where the kernel has no such table (IPv6's, on a host booted with
    ipv6.disable=1: every program was an infra_error there, a review's find)."""
    try:
        with open(path, "rb") as f:
            return f.readlines()
    except FileNotFoundError:
        return []


MAX_INET_SOCKETS = 256  # TCP and UDP sockets a program may hold at once; more are over its memory limit: each is a
# line to parse at every measurement (12,000 UDP sockets took 340 ms a read, a core of the runner's, outside the
# program's limits: a hunt's find)
MAX_NETLINK_SOCKETS = 256  # netlink sockets (the runner's one among them) our namespace may hold at once; more are
# over the program's memory limit: 15,000 (60 processes of 250) took the runner 250 ms a read to list, a core of its
# own outside the program's limits (a hunt's find); a program needs one at a time (getaddrinfo, if_nameindex)
OVER = 1 << 62  # (bytes: over any limit)
XATTR_SIZE_MAX = 65536  # the largest value of an extended attribute (linux/limits.h)


def _programs(name: str) -> bool:
    """Whether an extended attribute's name is one a program without capabilities can set (user.*, ACLs), not a
    security module's label (security.selinux: listed on every file where SELinux runs)."""
    return name.startswith(("user.", "system.posix_acl"))


def _inet_queue_memory() -> int:
    """Bytes queued in the TCP and UDP sockets of our network namespace (each socket's send and
    receive queues as /proc/net/tcp and udp give them: TCP's data bytes in the states that hold
    data (INET_QUEUES), UDP's buffer memory); OVER where it holds more than MAX_INET_SOCKETS."""
    count = _inet_sockets()
    if not count:
        return 0
    if count > MAX_INET_SOCKETS:
        return OVER
    total = 0
    for path, states in INET_QUEUES:
        total += listed_queue_bytes(_table(path)[1:], states)
    return total


def listed_queue_bytes(lines, states: frozenset[bytes] | None) -> int:
    """The queued bytes of the sockets a /proc/net/{tcp,udp} table lists (its lines after the header) in `states`."""
    total = 0
    for line in lines:
        fields = line.split()
        if len(fields) > 4 and (states is None or fields[3] in states):
            total += sum(_queue_bytes(q) for q in fields[4].split(b":"))
    return total


def _queue_bytes(field: bytes) -> int:
    """One queue's bytes from its hex field: the kernel reads TCP's send queue (write_seq - snd_una) without the
    socket's lock and prints a transient negative as a 32-bit unsigned number (4 GB), read here as the nothing it
    is."""
    value = int(field, 16)
    return value if value < 1 << 31 else 0


def over_sockets() -> int:
    """OVER where our namespace holds more than MAX_INET_SOCKETS TCP and UDP sockets (cgroup v2 charges their queues:
    the count alone, the same limit in every mode), else 0."""
    return OVER if _inet_sockets() > MAX_INET_SOCKETS else 0


MAX_STALE_S = 0.5  # the longest a socket-queue reading is reused (a busy host's socket table makes a reading slow)


class Throttled:
    """A socket-queue reading (_inet_queue_memory, _netlink_queue_memory), read again only once four times the last
    read's time has passed, or MAX_STALE_S (the last value kept meanwhile): the runner spends at most about a fifth of
    a core measuring a program's sockets where a reading takes under 0.1 s, and the caps on their number
    (MAX_INET_SOCKETS, MAX_NETLINK_SOCKETS) keep a reading short. (Capped at 50 ms, a reading that took longer was
    taken again at every poll: a core.) `over`, a cheap check of the TCP and UDP cap, runs at every read: a program
    past it is caught at the next poll, not at the next reading (which could come after it exited)."""

    def __init__(self, measure, over=lambda: 0):
        self.measure, self.over = measure, over
        self.reset()

    def reset(self) -> None:  # (a new program: nothing of the last one's kept)
        self.value, self.next_at = 0, 0.0

    def read(self) -> int:
        if over := self.over():
            return over
        start = time.monotonic()
        if start >= self.next_at:
            self.value = self.measure()
            self.next_at = start + min(5 * (time.monotonic() - start), MAX_STALE_S)
        return self.value


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _open_last_pid() -> int:
    """A writable fd (close-on-exec, and closed in every child) on our PID namespace's ns_last_pid.
    The sandbox's /proc has /proc/sys read-only, so it comes from a proc of our own, mounted for a
    moment in our tmpfs."""
    mnt = os.path.join(ROOT, ".execrl-proc")
    os.mkdir(mnt, 0o700)
    try:
        _check(seccomp.LIBC.mount(b"proc", mnt.encode(), b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None), "mount proc")
        try:
            return os.open(os.path.join(mnt, "sys/kernel/ns_last_pid"), os.O_WRONLY | os.O_CLOEXEC)
        finally:
            _check(seccomp.LIBC.umount2(mnt.encode(), MNT_DETACH), "umount proc")
    finally:
        os.rmdir(mnt)


class ExitLog:
    """BSD process accounting for our PID namespace: every process in it writes its own CPU time
    here as it ends, however it is reaped (by a wait, by us, or by the kernel for a parent that
    ignores SIGCHLD). The file is on the sandbox's first /tmp, unlinked at once (and that tmpfs
    unmounted at our first reset, where /tmp is replaced per program): no program can reach it.
    Needs CAP_SYS_PACCT of the host (bwrap-root mode)."""

    RECORD = 64  # struct acct_v3
    AHZ = 100  # its times' unit: 1/100 s, each process's rounded down

    def __init__(self, fd: int):
        self.fd, self.seen, self.spent, self.pids = fd, 0, 0.0, {}

    @classmethod
    def open(cls) -> ExitLog | None:
        path = os.path.join(ROOT, ".execrl-exits")
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            _check(seccomp.LIBC.acct(path.encode()), "acct")
        except OSError:
            os.close(fd)
            return None
        finally:
            os.unlink(path)
        return cls(fd)

    def restart(self) -> None:
        self.seen, self.spent, self.pids = os.fstat(self.fd).st_size, 0.0, {}
        if self.seen > 1 << 20:  # (a whole record at a time: the kernel appends each in one write)
            os.truncate(f"/proc/self/fd/{self.fd}", 0)
            self.seen = 0

    def total(self) -> float:
        """CPU seconds of the processes that ended since restart()."""
        data = os.pread(self.fd, 1 << 24, self.seen)
        data = data[: len(data) - len(data) % self.RECORD]
        for off in range(0, len(data), self.RECORD):
            pid = struct.unpack_from("=I", data, off + 16)[0]  # ac_pid, in our PID namespace
            utime, stime = struct.unpack_from("=HH", data, off + 32)  # comp_t ac_utime, ac_stime
            cpu_s = (_comp_t(utime) + _comp_t(stime)) / self.AHZ
            self.spent += cpu_s
            self.pids[pid] = self.pids.get(pid, 0.0) + cpu_s
        self.seen += len(data)
        return self.spent

    def ended(self) -> dict[int, float]:
        """The processes that ended since restart(): their CPU seconds by PID (all of them: `spent`, as read now)."""
        self.total()
        return self.pids


def _comp_t(c: int) -> int:
    """A comp_t's value: 13 bits of mantissa, 3 bits of base-8 exponent."""
    return (c & 0x1FFF) << (3 * (c >> 13))


def _signature(path: str) -> tuple | None:
    """What changes whenever a file or directory is deleted, replaced, renamed, chmod'ed or written
    (ctime)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mode, st.st_uid, st.st_size, st.st_ctime_ns


def _argv(template: list[str], src: str) -> list[str]:
    exe = os.path.join(PROGRAM_DIR, EXE)
    argv = [a.format(file=src, exe=exe, dir=PROGRAM_DIR) for a in template]
    if "/" not in argv[0]:
        argv[0] = shutil.which(argv[0]) or argv[0]
    return argv


def _unrun(why: str, killed_for: str | None = None) -> dict:
    """The result of a test that could not start because of what the program did before it: a
    runtime error (killed_for "memory": a memory verdict)."""
    return {"exit": 1, "wall_s": 0.0, "cpu_s": 0.0, "max_rss_kb": 0, "killed_for": killed_for, "stdout_bytes": 0,
            "stderr_bytes": len(why), "status": [{"exc": "OSError", "msg": why[:500]}]}


def _load_size(image: bytes) -> int:
    """The bytes a 64-bit little-endian ELF executable's loadable segments take in memory (their p_memsz: code,
    data and the zero-filled .bss of static arrays); 0 for anything else (a script, a truncated file)."""
    if image[:6] != b"\x7fELF\x02\x01" or len(image) < 64:
        return 0
    phoff, = struct.unpack_from("<Q", image, 0x20)
    size, count = struct.unpack_from("<HH", image, 0x36)
    if size < 56 or phoff + size * count > len(image):
        return 0
    return sum(struct.unpack_from("<Q", image, phoff + i * size + 0x28)[0] for i in range(count)
               if struct.unpack_from("<I", image, phoff + i * size)[0] == 1)  # PT_LOAD


def _timed_out(res: dict, cpu_s: float) -> bool:
    """A test the grader calls a timeout (grader._execution_verdict): not one killed for its memory, nor
    one whose process killed itself."""
    if res["killed_for"] == "memory":
        return False
    return res["killed_for"] in ("deadline", "cpu") or res["cpu_s"] > cpu_s or res["exit"] == -signal.SIGXCPU


F_SETLEASE, F_GETLEASE, F_GET_RW_HINT, F_SET_RW_HINT = 1024, 1025, 1035, 1036  # (linux/fcntl.h: F_LINUX_SPECIFIC_BASE
FS_IOC_GETFLAGS, FS_IOC_SETFLAGS = 0x80086601, 0x40086602  # + 0, 1, 11, 12; linux/fs.h, a long's size on 64 bits)


OWN_PROC = tuple(name for name in ("oom_score_adj", "coredump_filter", "autogroup") if os.path.exists(f"/proc/self/{name}"))


def _proc_self(name: str) -> str:
    with open(f"/proc/self/{name}") as f:
        return f.read().strip()


def _clear_inode_marks(fd: int) -> None:
    """The write-life hint and the inode flags a program set on a stream (F_SET_RW_HINT; FS_IOC_SETFLAGS, of which
    tmpfs keeps NOATIME and NODUMP for the file's owner) back to none."""
    if _supported(lambda: struct.unpack("Q", fcntl.fcntl(fd, F_GET_RW_HINT, bytes(8)))[0]):
        fcntl.fcntl(fd, F_SET_RW_HINT, bytes(8))
    if _supported(lambda: struct.unpack("l", fcntl.ioctl(fd, FS_IOC_GETFLAGS, bytes(8)))[0]):
        fcntl.ioctl(fd, FS_IOC_SETFLAGS, bytes(8))


def _supported(read):
    """read(), or None on a kernel without it (EINVAL, ENOTTY: where it has none, no program can set one)."""
    try:
        return read()
    except OSError as e:
        if e.errno in (errno.ENOTTY, errno.EINVAL, errno.EOPNOTSUPP):
            return None
        raise


def _memfd(name: str) -> int:
    """A stream of the children's (appends, as to a pipe, but for stdin: output through a reopened
    /dev/stdout keeps what came before; _streams_for sets the flags)."""
    return os.memfd_create(name, os.MFD_CLOEXEC)  # no MFD_ALLOW_SEALING: a program cannot seal its output


def scrub(*buffers) -> None:
    """Zero the bytearrays among `buffers` in place. A test's child is forked from the runner, so whatever of an
    earlier program is still in the runner's memory, freed or not, a later program could read from its own (a
    correct program's source or output, for the same problem); so the runner holds a program's source, inputs and
    outputs only in bytearrays read straight from the socket or the memfds, and zeroes them once it is graded."""
    for b in buffers:
        if isinstance(b, bytearray):
            b[:] = bytes(len(b))


def _read(fd: int, cap: int, start: int = 0) -> bytes | bytearray:
    """Up to `cap` bytes of a file from `start` (a memfd: into one bytearray, its only copy here, for scrub) or
    the whole of a pipe."""
    if _is_file(fd):
        buf = bytearray(max(0, min(cap, os.fstat(fd).st_size - start)))
        got = 0
        while got < len(buf):
            try:
                with memoryview(buf) as view:
                    k = os.preadv(fd, [view[got:]], start + got)
            except OSError:
                break
            if not k:
                break
            got += k
        del buf[got:]
        return buf
    chunks, got = [], 0
    while got < cap:
        try:
            b = os.pread(fd, min(cap - got, 1 << 24), got) if _is_file(fd) else os.read(fd, cap - got)
        except OSError:
            break
        if not b:
            break
        chunks.append(b)
        got += len(b)
    return b"".join(chunks)


def _read_ends(fd: int, cap: int) -> bytes | bytearray:
    """At most ~`cap` bytes of a stream: all of it, or where it is longer its first and last halves with the count
    cut between (a traceback comes last: one after pages of warnings stays)."""
    size = os.fstat(fd).st_size if _is_file(fd) else 0
    if size <= cap:
        return _read(fd, cap)
    head, tail = _read(fd, cap // 2), _read(fd, cap // 2, size - cap // 2)
    head += b"\n... [%d bytes cut] ...\n" % (size - len(head) - len(tail))
    head += tail
    scrub(tail)  # (one copy, in the buffer scrubbed with the others)
    return head


def _is_file(fd: int) -> bool:
    return stat.S_ISREG(os.fstat(fd).st_mode)


def _run_delay(pids: list[int]) -> float:
    """Seconds the most delayed thread of the program's processes (of their first 64 threads) has spent runnable but
    waiting for a CPU (the scheduler's run_delay; a program's work may run outside its main thread, or in processes
    it started while its first one waits: a review's find); 0 where the kernel keeps none or they are gone."""
    tasks = []
    for pid in sorted(pids):
        tasks += [f"/proc/{pid}/task/{tid}/schedstat" for tid in _threads(pid)]
        if len(tasks) >= 64:
            break
    most = 0.0
    for path in tasks[:64]:
        try:
            with open(path) as f:
                most = max(most, int(f.read().split()[1]) / 1e9)
        except (OSError, ValueError, IndexError):
            continue
    return most


def _reaped_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


NR_KCMP = {"x86_64": 312, "aarch64": 272}.get(platform.machine())
KCMP_VM = 1


def _same_memory(a: int, b: int) -> bool:
    """Whether processes a and b share one address space (kcmp; where the kernel has none: not known, so no)."""
    return NR_KCMP is not None and seccomp.LIBC.syscall(NR_KCMP, a, b, KCMP_VM, 0, 0) == 0


RSS_LAG_PAGES = (os.cpu_count() or 1) * max(32, 2 * (os.cpu_count() or 1))  # pages a resident count may lag by


def _pss(pid: int, page: int) -> int:
    """Proportional set size in bytes (smaps_rollup, read through a live thread where the process's main thread has
    exited: its own read fails, and statm reads zeros, a review's find: 3 processes held 300 MB under a 200 MB
    limit), else the resident size (statm)."""
    for path in (f"/proc/{pid}", *(f"/proc/{pid}/task/{tid}" for tid in _threads(pid)[1:9])):  # (its first 8 others)
        try:
            with open(f"{path}/smaps_rollup", "rb") as f:
                for line in f:
                    if line.startswith(b"Pss:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            continue
    with open(f"/proc/{pid}/statm", "rb") as f:
        return int(f.read().split()[1]) * page


def _threads(pid: int) -> list[str]:
    """A process's thread ids, the main thread's first; none where it is gone."""
    try:
        return sorted(os.listdir(f"/proc/{pid}/task"), key=int)
    except OSError:
        return []


def _locked_elsewhere(fd: int) -> bool:
    """Whether a file description other than `fd`'s holds a lock on its file (open-file-description or flock; a
    process's own record locks end with it)."""
    probe = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, struct.pack(FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0))
    if struct.unpack(FLOCK, probe)[0] != fcntl.F_UNLCK:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # (ours, where it had one: converted, and dropped below)
    except BlockingIOError:
        return True
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False


def _collect_unix_sockets() -> None:
    """Closing a unix socket while others are in flight (a socket sent over itself with SCM_RIGHTS
    outlives its process, name and all, in the worker's network namespace) sets off the kernel's
    collection of such cycles."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    a.close()
    b.close()


def _wipe_except(top: str, keep: list[str]) -> None:
    """Delete everything in `top` but the paths in `keep` (and the directories that lead to
    them)."""
    for name in os.listdir(top) if os.path.isdir(top) else []:
        path = os.path.join(top, name)
        if path in keep:
            continue
        if any(k.startswith(path + "/") for k in keep):
            _wipe_except(path, keep)
        else:
            _wipe(path)


def _set_aside(path: str) -> None:
    """`path` out of the way, for a kept file to be written there again between two tests: a directory a test put in
    its place renamed to a free name beside it (one rename, whatever the tree: deleting a tree 300,000 levels deep,
    outside every limit of the program's, took seconds per test), left with the program's other files until the
    sandbox's reset; anything else deleted."""
    if os.path.isdir(path) and not os.path.islink(path):
        for _ in range(8):
            try:
                os.rename(path, os.path.join(os.path.dirname(path), f".set-aside-{os.urandom(6).hex()}"))
                return
            except FileExistsError:  # (a name the program took: another)
                continue
            except OSError as e:
                if e.errno != errno.ENOTEMPTY:
                    break
    _wipe(path)


def _wipe(path: str) -> None:
    """rm -rf that also gets through directories a program made unreadable (chmod 000) and trees
    nested too deep for Python's recursive walk (coreutils' rm and chmod walk iteratively)."""
    if os.path.isdir(path) and not os.path.islink(path):
        try:
            os.chmod(path, 0o700)
            for dirpath, dirnames, _ in os.walk(path):
                for d in dirnames:
                    try:
                        os.chmod(os.path.join(dirpath, d), 0o700, follow_symlinks=False)
                    except OSError:
                        pass
            shutil.rmtree(path)
        except (RecursionError, OSError):
            for argv in (["chmod", "-R", "u+rwx", path], ["rm", "-rf", "--one-file-system", path]):
                pid = os.posix_spawnp(argv[0], argv, {"PATH": "/usr/bin:/bin"})
                os.waitpid(pid, 0)
    else:
        try:
            os.unlink(path)
        except OSError:
            pass


def main() -> None:
    global ROOT, PROGRAM_DIR, KEEP
    role, uid, fd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if len(sys.argv) > 4:
        ROOT = sys.argv[4]
        PROGRAM_DIR = os.path.join(ROOT, "prog")
    KEEP = [p for p in os.environ.pop("EXECRL_KEEP", "").split(":") if p.startswith(ROOT + "/")]  # (read once:
    # programs and compilers do not see the host's paths in their environment)
    ctrl = socket.socket(fileno=fd)
    spec = os.environ.pop("EXECRL_CGROUP", "")
    cgroup = Cgroup(json.loads(spec)) if spec else None
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    # SIGINT at SIG_DFL, not Python's handler: as PID 1 of the namespace the kernel then drops it
    # when a program sends it (a handler would let a program raise KeyboardInterrupt in here)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    Zygote(role, uid, ctrl, cgroup).serve_forever()


if __name__ == "__main__":
    main()
