"""The sandboxed process: `pool.py` starts it under bubblewrap as PID 1 of its own PID namespace, with its control
socket on the fd named in argv. Roles:
  runner   runs the model's program: compile once per program (if the language needs it), then one forked child
           per test (stdin/stdout and call forms), or one child that serves calls from the checker (assert and
           check forms). It never receives expected outputs or test code.
  checker  runs trusted test code in a forked child (see checker.py); the model's code never runs here.
After every child it SIGKILLs every other process in its namespace (as PID 1 it cannot be killed from inside)
and reaps them; after every program it wipes every directory a program could write.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import sys
import time
import traceback

from . import child
from .checker import checker_child
from .child import RPC_FD, STATUS_FD, child_setup, exec_child, python_child, write_status
from .protocol import decode, recv_msg, send_msg

# Not imported here: threading and random. Their at-fork handlers would add ~0.75 ms to every test's fork;
# a program that uses threads imports threading itself.

ROOT = "/tmp"  # the sandbox's private tmpfs (a fresh temporary directory when there are no namespaces)
ZYGOTE_DIR = "/tmp/.zygote"  # stdin/stdout/status files; made unreadable to children where uids differ
PROGRAM_DIR = "/tmp/prog"  # the program's private writable directory, wiped between programs


class Zygote:
    def __init__(self, role: str, uid: int, ctrl: socket.socket):
        self.role, self.uid, self.ctrl = role, uid, ctrl
        child.build_streams()
        self.is_init = os.getpid() == 1
        os.makedirs(ZYGOTE_DIR, mode=0o700, exist_ok=True)
        if ROOT != "/tmp" and uid >= 0:
            os.chmod(ROOT, 0o711)  # no namespaces: the program's uid must reach ROOT/prog
        try:  # children of other uids must not read our memory (test data) through /proc
            import ctypes

            ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
            ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans come back to us
        except (OSError, AttributeError):
            pass
        self.reset()

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
        """Kill everything and delete every file a program could have written: nothing carries over."""
        self.kill_all()
        for top in (ROOT, PROGRAM_DIR, "/dev/shm") if self.is_init else (ROOT, PROGRAM_DIR):
            for name in os.listdir(top) if os.path.isdir(top) else []:
                if os.path.join(top, name) not in (ZYGOTE_DIR, PROGRAM_DIR):
                    _wipe(os.path.join(top, name))
        os.makedirs(PROGRAM_DIR, exist_ok=True)  # in the sandbox: a tmpfs of its own, mounted by bwrap
        os.chmod(PROGRAM_DIR, 0o700)
        if self.uid >= 0 and os.geteuid() == 0:
            os.chown(PROGRAM_DIR, self.uid, self.uid)

    # -- one child
    def spawn(self, target, job: dict, lim: dict, stdin: bytes = b"", cpu_s: float = 1.0, wall_s: float = 2.0,
              rpc_fd: int | None = None, uid: int | None = None, until_stop: bool = False) -> tuple[dict, list]:
        paths = {k: os.path.join(ZYGOTE_DIR, k) for k in ("in", "out", "err", "status")}
        with open(paths["in"], "wb") as f:
            f.write(stdin)
        fds = {0: os.open(paths["in"], os.O_RDONLY)}
        for target_fd, name in ((1, "out"), (2, "err"), (STATUS_FD, "status")):
            fds[target_fd] = os.open(paths[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        if rpc_fd is not None:
            fds[RPC_FD] = rpc_fd
        start = time.monotonic()
        sys.stdout.flush()  # a child must not inherit (and later flush) buffered output of ours
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            try:
                child_setup(lim, cpu_s, self.uid if uid is None else uid, fds, PROGRAM_DIR)
                target(job)
            except BaseException as e:  # noqa: BLE001 - the sandbox's own failure, not the program's
                write_status({"infra": f"{type(e).__name__}: {e}"})
            finally:
                os._exit(125)
        for fd in set(fds.values()):
            os.close(fd)
        res = self._wait(pid, start, wall_s, until_stop)
        self.kill_all()
        out = _read(paths["out"], lim["output_mb"] << 20)
        err = _read(paths["err"], 8192)
        status_lines = _read(paths["status"], lim["output_mb"] << 20).decode("utf-8", "replace").splitlines()
        res["status"] = [st for st in map(_json_or_none, status_lines) if isinstance(st, dict)]
        res["stdout_bytes"] = os.path.getsize(paths["out"])
        res["stderr_bytes"] = os.path.getsize(paths["err"])
        return res, [out, err]

    def _wait(self, pid: int, start: float, wall_s: float, until_stop: bool) -> dict:
        """Wait for the child, SIGKILL it at the wall deadline; with until_stop also wait for the grader's stop."""
        pidfd = os.pidfd_open(pid)
        deadline, killed, waited, stopped = start + wall_s, False, None, not until_stop
        try:
            while waited is None or not stopped:
                watch = ([pidfd] if waited is None else []) + ([] if stopped else [self.ctrl])
                timeout = None if waited is not None else max(0.0, deadline - time.monotonic())
                ready = select.select(watch, [], [], timeout)[0]
                if self.ctrl in ready:
                    recv_msg(self.ctrl)  # the grader's "stop": the checker is done with this program
                    stopped = True
                if waited is None and (pidfd not in ready) and (self.ctrl in ready or not ready):
                    killed = killed or not ready
                    os.kill(pid, signal.SIGKILL)
                    waited = os.wait4(pid, 0)
                elif pidfd in ready:
                    waited = os.wait4(pid, 0)
        finally:
            os.close(pidfd)
        _, status, rusage = waited
        wall = time.monotonic() - start
        return {
            "exit": os.waitstatus_to_exitcode(status),
            "wall_s": round(wall, 4),
            "cpu_s": round(rusage.ru_utime + rusage.ru_stime, 4),
            "max_rss_kb": rusage.ru_maxrss,
            "killed_at_deadline": killed,
        }

    # -- operations
    def _prepare(self, h: dict, source: bytes) -> tuple[dict, list] | None:
        """Write the program into its fresh directory and compile it; a failed compile's result, or None."""
        self.src = os.path.join(PROGRAM_DIR, h["file"])
        with open(self.src, "wb") as f:
            f.write(source)
        if self.uid >= 0 and os.geteuid() == 0:
            os.chown(self.src, self.uid, self.uid)
        if not h.get("compile"):
            return None
        lim = dict(h["limits"], memory_mb=h["limits"]["compile_memory_mb"])
        t = h["limits"]["compile_timeout_s"]
        res, pair = self.spawn(exec_child, {"argv": _argv(h["compile"], self.src)}, lim, cpu_s=t, wall_s=2 * t)
        return (res, pair) if res["exit"] != 0 or res["killed_at_deadline"] else None

    def op_run(self, h: dict, blobs: list[bytes], fds) -> tuple[dict, list]:
        """Compile once, then one child per test; stops early after a syntax error (or a timeout, if asked)."""
        failed = self._prepare(h, blobs[0])
        if failed is not None:
            return {"compile": failed[0]}, failed[1]
        lim, results, out_blobs = h["limits"], [], []
        cpu, wall = lim["timeout_s"], max(2 * lim["timeout_s"], lim["timeout_s"] + 1)
        for i, test in enumerate(h["tests"]):
            if h.get("python"):
                job = {"mode": h["mode"], "src": self.src, "fn_name": h.get("fn_name"), "args": None}
                if h["mode"] == "call":
                    job["args"] = decode(test["args"])
                target = python_child
            else:
                job, target = {"argv": _argv(h["run"], self.src)}, exec_child
            res, pair = self.spawn(target, job, lim, stdin=blobs[i + 1], cpu_s=cpu, wall_s=wall)
            results.append(res)
            out_blobs += pair
            if any(st.get("phase") == "compile" for st in res["status"]):
                break
            if h.get("stop_after_timeout") and _timed_out(res, cpu):
                break
        return {"results": results}, out_blobs

    def op_serve(self, h: dict, blobs, fds) -> tuple[dict, list]:
        """One child runs the program, then answers the checker's calls until the grader says stop."""
        self._prepare(h, blobs[0])
        lim, n = h["limits"], max(1, h["num_tests"])
        cpu, wall = lim["timeout_s"] * n, (2 * lim["timeout_s"] + 1) * n + 1
        job = {"mode": "serve", "src": self.src}
        return self.spawn(python_child, job, lim, cpu_s=cpu, wall_s=wall, rpc_fd=fds[0], until_stop=True)

    def op_check(self, h: dict, blobs, fds) -> tuple[dict, list]:
        lim, n = h["limits"], max(1, len(h["job"]["snippets"]))
        wall = (2 * lim["timeout_s"] + 1) * n + 10
        checker_lim = dict(lim, memory_mb=max(lim["memory_mb"], 1024), nproc=max(lim["nproc"], 16))
        return self.spawn(checker_child, h["job"], checker_lim, cpu_s=wall, wall_s=wall, rpc_fd=fds[0])

    def serve_forever(self) -> None:
        ops = {"run": self.op_run, "serve": self.op_serve, "check": self.op_check}
        while True:
            try:
                h, blobs, fds = recv_msg(self.ctrl)
            except EOFError:
                return
            try:
                reply, out = ops[h["op"]](h, blobs, fds)
            except Exception as e:  # noqa: BLE001 - reported to the grader as infra_error, never as a verdict
                reply, out = {"infra_error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()}, []
            finally:
                for fd in fds:
                    _close(fd)
                self.reset()  # nothing of this program outlives its grading
            send_msg(self.ctrl, reply, out)


def _argv(template: list[str], src: str) -> list[str]:
    exe = os.path.join(PROGRAM_DIR, "main.bin")
    argv = [a.format(file=src, exe=exe, dir=PROGRAM_DIR) for a in template]
    if "/" not in argv[0]:
        argv[0] = shutil.which(argv[0]) or argv[0]
    return argv


def _timed_out(res: dict, cpu_s: float) -> bool:
    return res["killed_at_deadline"] or res["cpu_s"] > cpu_s or res["exit"] in (-signal.SIGXCPU, -signal.SIGKILL)


def _read(path: str, cap: int) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(cap)
    except OSError:
        return b""


def _json_or_none(s: str):
    try:
        return json.loads(s)
    except ValueError:  # a child killed mid-write leaves a torn last line
        return None


def _wipe(path: str) -> None:
    """rm -rf that also gets through directories a program made unreadable (chmod 000)."""
    if os.path.isdir(path) and not os.path.islink(path):
        os.chmod(path, 0o700)
        for dirpath, dirnames, _ in os.walk(path):
            for d in dirnames:
                try:
                    os.chmod(os.path.join(dirpath, d), 0o700, follow_symlinks=False)
                except OSError:
                    pass
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.unlink(path)
        except OSError:
            pass


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def main() -> None:
    global ROOT, ZYGOTE_DIR, PROGRAM_DIR
    role, uid, fd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if len(sys.argv) > 4:
        ROOT = sys.argv[4]
        ZYGOTE_DIR, PROGRAM_DIR = os.path.join(ROOT, ".zygote"), os.path.join(ROOT, "prog")
    ctrl = socket.socket(fileno=fd)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    Zygote(role, uid, ctrl).serve_forever()


if __name__ == "__main__":
    main()
