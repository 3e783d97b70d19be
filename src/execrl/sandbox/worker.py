"""What runs inside the sandbox: a zygote that forks one child per test. Standard library only.

`pool.py` starts it as `python -I -B worker.py ROLE UID` under bubblewrap, with its control socket on fd 3.
Two roles:
  runner   runs the model's program: a syntax check or compile once per program, then one forked child per
           test (stdin/stdout and call forms), or one child that serves calls from the checker (assert and
           check forms). It never receives expected outputs or test code.
  checker  runs trusted test code (asserts, check functions) in a forked child. Every name the test code
           uses but does not define is bound to a stub that calls into the runner's child over a socket and
           gets back plain data only, so the model's code and the expected values never share a process.

Each child runs in its own session, under hard rlimits, as a separate unprivileged uid where the zygote is
root; after every child the zygote SIGKILLs every other process in its PID namespace (it is PID 1 there, so
it cannot be killed from inside) and reaps them, so nothing outlives a test.
"""

from __future__ import annotations

import ast  # noqa: F401 - every module a child needs is imported here, once, so that forks start warm
import atexit
import builtins
import io
import json
import math
import os
import resource
import select
import shutil
import signal
import socket
import struct
import sys
import time
import traceback

# Not imported here: threading and random. Their at-fork handlers would add ~0.75 ms to every test's fork;
# a program that uses threads imports threading itself.

STATUS_FD, RPC_FD = 3, 4
ROOT = "/tmp"  # the sandbox's private tmpfs (a fresh temporary directory when there are no namespaces)
ZYGOTE_DIR = "/tmp/.zygote"  # stdin/stdout/status files; made unreadable to children where uids differ
PROGRAM_DIR = "/tmp/prog"  # the program's private writable directory, wiped between programs


# ----------------------------------------------------------------------------------------------- framing


def send_msg(sock: socket.socket, header: dict, blobs=(), fds=()) -> None:
    """One message: 4-byte length, JSON header (with blob lengths), raw blobs, then fds on one extra byte."""
    header = dict(header, blobs=[len(b) for b in blobs], nfds=len(fds))
    raw = json.dumps(header).encode()
    sock.sendall(struct.pack(">I", len(raw)) + raw + b"".join(blobs))
    if fds:
        socket.send_fds(sock, [b"F"], list(fds))


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise EOFError("peer closed the connection")
        got += k
    return bytes(buf)


def recv_msg(sock: socket.socket, max_header: int = 1 << 26) -> tuple[dict, list[bytes], list[int]]:
    (n,) = struct.unpack(">I", _recv_exact(sock, 4))
    if n > max_header:
        raise ValueError(f"message header of {n} bytes is larger than allowed")
    header = json.loads(_recv_exact(sock, n))
    blobs = [_recv_exact(sock, k) for k in header.get("blobs", [])]
    fds: list[int] = []
    if header.get("nfds"):
        _, fds, _, _ = socket.recv_fds(sock, 1, header["nfds"])
    return header, blobs, fds


# ------------------------------------------------------------------------------------- plain-data codec

_BASES = (bool, int, float, complex, str, bytes, tuple, list, dict, set, frozenset)
_TYPES = {t.__name__: t for t in (*_BASES, object, type(None))}  # types a test may pass, e.g. f(xs, int)


def _downcast(v, base):
    """The base-type data of a subclass instance, read through the base type's own methods (no overrides)."""
    if base is int:
        return int.__int__(v)
    if base is float:
        return float.__float__(v)
    if base is complex:
        return complex.__complex__(v)
    if base is str:
        return str.__str__(v)
    if base is bytes:
        return bytes.__getitem__(v, slice(None))
    if base is dict:
        return dict(dict.items(v))
    return base(base.__iter__(v))


def encode(v, other=None, depth: int = 0):
    """Plain data -> JSON-able tagged form. Anything else goes to `other(v)` (a handle), or raises TypeError."""
    if depth > 10_000:
        raise TypeError("value nested too deeply")
    t = type(v)
    if v is None or t is bool or t is str:
        return v
    if t is int:
        return v if -(2**53) < v < 2**53 else {"int": hex(v)}  # hex: linear time, no digit limit
    if t is float:
        return v if math.isfinite(v) else {"float": repr(v)}
    if t is list:
        return [encode(x, other, depth + 1) for x in v]
    if t is tuple:
        return {"tuple": [encode(x, other, depth + 1) for x in v]}
    if t is set or t is frozenset:
        return {t.__name__: [encode(x, other, depth + 1) for x in v]}
    if t is dict:
        return {"dict": [[encode(k, other, depth + 1), encode(x, other, depth + 1)] for k, x in v.items()]}
    if t is bytes:
        return {"bytes": v.hex()}
    if t is complex:
        return {"complex": [encode(v.real), encode(v.imag)]}
    if t is type and _TYPES.get(v.__name__) is v:
        return {"type": v.__name__}
    for base in _BASES:
        if isinstance(v, base):
            return encode(_downcast(v, base), other, depth)
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(v, (numpy.generic, numpy.ndarray)):
        return encode(v.tolist() if isinstance(v, numpy.ndarray) else v.item(), other, depth)
    if other is not None:
        return other(v)
    raise TypeError(f"returned a {t.__name__}, which is not plain data")


def decode(obj, make_handle=None):
    """Inverse of encode. `make_handle(key)` builds the object that stands for a remote handle."""
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, list):
        return [decode(x, make_handle) for x in obj]
    if not isinstance(obj, dict) or len(obj) != 1:
        raise ValueError("malformed plain-data value")
    (tag, val), = obj.items()
    if tag == "int":
        return int(val, 16)
    if tag == "float":
        return float(val)
    if tag == "tuple":
        return tuple(decode(x, make_handle) for x in val)
    if tag == "set":
        return {decode(x, make_handle) for x in val}
    if tag == "frozenset":
        return frozenset(decode(x, make_handle) for x in val)
    if tag == "dict":
        return {decode(k, make_handle): decode(x, make_handle) for k, x in val}
    if tag == "bytes":
        return bytes.fromhex(val)
    if tag == "complex":
        return complex(decode(val[0]), decode(val[1]))
    if tag == "type" and val in _TYPES:
        return _TYPES[val]
    if tag in ("handle", "ref") and make_handle is not None:
        return make_handle(obj)
    raise ValueError(f"unknown plain-data tag {tag!r}")


# --------------------------------------------------------------------------------------- child set-up


def _set_limits(lim: dict, cpu_s: float) -> None:
    mb = 1024 * 1024
    cpu = max(1, math.ceil(cpu_s))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))  # SIGXCPU, then SIGKILL one second later
    resource.setrlimit(resource.RLIMIT_AS, (lim["memory_mb"] * mb, lim["memory_mb"] * mb))
    resource.setrlimit(resource.RLIMIT_FSIZE, (lim["output_mb"] * mb, lim["output_mb"] * mb))
    resource.setrlimit(resource.RLIMIT_NPROC, (lim["nproc"], lim["nproc"]))
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    hard = resource.getrlimit(resource.RLIMIT_STACK)[1]  # unlimited stack: deep recursion is legitimate
    resource.setrlimit(resource.RLIMIT_STACK, (hard, hard))


def _drop_privileges(uid: int) -> None:
    if uid >= 0 and os.geteuid() == 0:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)  # leaving uid 0 clears every capability


def _child_setup(lim: dict, cpu_s: float, uid: int, fds: dict[int, int]) -> None:
    """In the forked child: own session, fds in place, everything else closed, limits, then the uid."""
    os.setsid()
    high = {target: os.dup2(fd, 200 + target) for target, fd in fds.items()}  # no source is overwritten early
    for target, fd in high.items():
        os.dup2(fd, target)
    os.closerange(max(fds) + 1, 1 << 16)
    os.chdir(PROGRAM_DIR)
    _set_limits(lim, cpu_s)
    _drop_privileges(uid)


def _text_stream(fd: int, mode: str, errors: str) -> io.TextIOWrapper:
    raw = io.FileIO(fd, mode, closefd=False)
    buf = io.BufferedReader(raw) if mode == "r" else io.BufferedWriter(raw, 1 << 16)
    return io.TextIOWrapper(buf, encoding="utf-8", errors=errors, line_buffering=(fd == 2))


# The child's sys.stdin/stdout/stderr, built once by the zygote (which never uses them): each forked child gets
# its own copy, bound to whatever files it has dup2'ed onto fds 0-2, without paying to build them per test.
_STREAMS: tuple = ()


def _std_streams() -> None:
    sys.stdin = sys.__stdin__ = _STREAMS[0]
    sys.stdout = sys.__stdout__ = _STREAMS[1]
    sys.stderr = sys.__stderr__ = _STREAMS[2]


def _write_status(status: dict) -> None:
    data = (json.dumps(status) + "\n").encode()
    try:
        os.write(STATUS_FD, data)
    except OSError:
        pass


def _python_program(src_path: str, name: str) -> dict:
    """Exec the program as a module called `name`; returns its globals. Exceptions propagate."""

    with open(src_path, "rb") as f:
        source = f.read()
    try:
        code = compile(source, src_path, "exec")
    except (SyntaxError, ValueError) as e:  # ValueError: NUL bytes in the source
        raise _CompileError(f"{type(e).__name__}: {e}") from None
    g = {"__name__": name, "__builtins__": builtins, "__file__": src_path}
    exec(code, g)
    return g


class _CompileError(Exception):
    """The program is not valid Python: a syntax_error verdict, not a runtime error."""


def _python_child(job: dict) -> None:
    """Runs in the forked child; never returns."""

    sys.set_int_max_str_digits(0)  # integers beyond 4,300 digits are legitimate
    sys.argv = [job["src"]]
    _std_streams()
    code, status = 0, {}
    try:
        mode = job["mode"]
        g = _python_program(job["src"], "__main__" if mode == "stdio" else "solution")
        if mode == "stdio" and "threading" in sys.modules:
            sys.modules["threading"]._shutdown()  # like interpreter exit: wait for non-daemon threads
        elif mode == "call":
            fn = _resolve_entry(g, job["fn_name"])
            args = job["args"]
            status["value"] = encode(fn(*args))
        elif mode == "serve":
            _serve(g)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
    except _CompileError as e:
        status["exc"], status["phase"] = "SyntaxError", "compile"
        print(e, file=sys.stderr)
        code = 1
    except BaseException as e:  # noqa: BLE001 - the program's own failure, reported as its verdict
        status["exc"] = type(e).__name__
        status["msg"] = str(e)[:500]
        try:
            traceback.print_exc()
        except BaseException:  # noqa: BLE001
            pass
        code = 1
    try:
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001
        pass
    for stream in {id(s): s for s in (sys.stdout, sys.__stdout__, sys.stderr, sys.__stderr__)}.values():
        try:
            stream.flush()
        except BaseException as e:  # noqa: BLE001
            status.setdefault("exc", type(e).__name__)
            code = code or 1
    _write_status(status)
    os._exit(code & 0xFF)


def _resolve_entry(g: dict, fn_name: str):
    cls = g.get("Solution")
    if isinstance(cls, type) and hasattr(cls, fn_name):
        return getattr(cls(), fn_name)
    if fn_name in g and callable(g[fn_name]):
        return g[fn_name]
    raise NameError(f"the program defines no function {fn_name!r}")


def _serve(g: dict) -> None:
    """Answer the checker's calls: each resolves a name or handle, calls it, returns plain data or a handle."""
    sock = socket.socket(fileno=RPC_FD)
    handles: dict = {}

    def keep(obj) -> dict:  # a non-plain result stays here; the checker gets a handle to it
        handles[len(handles) + 1] = obj
        return {"handle": len(handles)}

    def resolve(target, attrs):
        kind, key = target
        obj = g[key] if kind == "name" else handles[key]
        for attr in attrs:
            obj = getattr(obj, attr)
        return obj

    def arg(tagged: dict):  # a handle, or an attribute of one, passed back by the test
        if "handle" in tagged:
            return handles[tagged["handle"]]
        return resolve(tagged["ref"][0], tagged["ref"][1])
    while True:
        try:
            req, _, _ = recv_msg(sock, max_header=1 << 24)
        except (EOFError, OSError):
            return
        try:
            attrs = req.get("attrs", [])
            if req["op"] == "set":
                setattr(resolve(req["target"], attrs[:-1]), attrs[-1], decode(req["value"], arg))
                send_msg(sock, {"value": None})
                continue
            obj = resolve(req["target"], attrs)
            if req["op"] == "call":
                obj = obj(*decode(req["args"], arg), **decode(req["kwargs"], arg))
            elif callable(obj):  # "get" of a function or class: the checker makes a stub for it
                send_msg(sock, {"callable": True})
                continue
            reply = {"value": encode(obj, keep)}
        except BaseException as e:  # noqa: BLE001 - the program's exception goes back to the test
            if isinstance(e, SystemExit):
                send_msg(sock, {"error": "SystemExit", "msg": "the program called exit() during a test"})
                return
            reply = {"error": type(e).__name__, "msg": str(e)[:300]}
        send_msg(sock, reply)


def _exec_child(job: dict) -> None:
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores these; a compiled program should not
        signal.signal(sig, signal.SIG_DFL)
    os.execve(job["argv"][0], job["argv"], dict(os.environ))


# -------------------------------------------------------------------------------------------- checker


class RemoteError(Exception):
    """The program raised while a test called it."""


class RemoteTimeout(Exception):
    """The program did not answer a call within the time limit."""


class RemoteGone(Exception):
    """The program's process ended (crash, exit) while a test needed it."""


class _Rpc:
    def __init__(self, sock: socket.socket, timeout: float):
        self.sock, self.timeout = sock, timeout
        sock.settimeout(timeout)

    def request(self, req: dict):
        try:
            send_msg(self.sock, req)
            reply, _, _ = recv_msg(self.sock)
        except socket.timeout:
            raise RemoteTimeout() from None
        except (EOFError, OSError, ValueError) as e:
            raise RemoteGone(str(e)) from None
        if "error" in reply:
            raise RemoteError(f"{reply['error']}: {reply.get('msg', '')}")
        if reply.get("callable"):
            return Remote(self, tuple(req["target"]), tuple(req.get("attrs", ())))
        return decode(reply["value"], lambda tagged: Remote(self, ("handle", tagged["handle"]), ()))


class Remote:
    """Stands for a function, class or object that lives in the program's process."""

    __slots__ = ("_rpc", "_target", "_attrs")

    def __init__(self, rpc: _Rpc, target: tuple, attrs: tuple):
        self._rpc, self._target, self._attrs = rpc, target, attrs

    def __getattr__(self, name: str) -> Remote:
        if name.startswith("__"):
            raise AttributeError(name)
        return Remote(self._rpc, self._target, self._attrs + (name,))

    def __setattr__(self, name: str, value) -> None:
        if name in Remote.__slots__:
            object.__setattr__(self, name, value)
            return
        req = {"op": "set", "target": list(self._target), "attrs": [*self._attrs, name]}
        req["value"] = encode(value, _remote_arg)
        self._rpc.request(req)

    def __call__(self, *args, **kwargs):
        req = {"op": "call", "target": list(self._target), "attrs": list(self._attrs)}
        req["args"], req["kwargs"] = encode(list(args), _remote_arg), encode(kwargs, _remote_arg)
        return self._rpc.request(req)

    def __repr__(self) -> str:
        return f"<program object {'.'.join(map(str, self._target[1:] + self._attrs))}>"


def _remote_arg(v) -> dict:
    """Arguments sent to the program are plain data, or program objects it handed out before."""
    if isinstance(v, Remote):
        return {"ref": [list(v._target), list(v._attrs)]}
    raise TypeError(f"a test passed a {type(v).__name__} to the program; only plain data can cross")


def _free_names(code: str) -> tuple[set[str], set[str]]:
    """Names the test code uses but does not define: (not builtins, builtins)."""

    loaded, bound = set(), set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            bound.update(node.names)
    free = loaded - bound
    return free - set(dir(builtins)), free & set(dir(builtins))


def _bind_remote(g: dict, rpc: _Rpc, names: list[str]) -> list[str]:
    bound = []
    for name in names:
        try:
            g[name] = rpc.request({"op": "get", "target": ["name", name]})
            bound.append(name)
        except RemoteError:  # not the program's: a star import in the setup, or a NameError later
            pass
    return bound


def _checker_child(job: dict) -> None:
    """Runs trusted test code against the program over RPC; one status line per test; never returns."""

    sys.set_int_max_str_digits(0)
    _std_streams()
    rpc = _Rpc(socket.socket(fileno=RPC_FD), job["call_timeout_s"])
    g = {"__name__": "__test__", "__builtins__": builtins}
    snippets = job["snippets"]
    entry = job.get("entry_point")
    try:
        every = "\n".join([job.get("setup", ""), *snippets, job.get("check", "")])
        free, builtin_names = _free_names(every)
        bound = _bind_remote(g, rpc, sorted(free | ({entry} if entry else set())))
        if not bound and not entry:
            # tests that call nothing of the program's but a builtin's name test the program's own `sum`
            # (MBPP 126); otherwise a builtin the tests use stays the builtin, so a program cannot redefine
            # `set` or `sorted` to make both sides of an assert agree
            _bind_remote(g, rpc, sorted(builtin_names))
        exec(compile(job.get("setup", ""), "<setup>", "exec"), g)
    except (RemoteError, RemoteGone) as e:
        _write_status({"setup": "runtime_error", "msg": str(e)[:300]})
        os._exit(0)
    except RemoteTimeout:
        _write_status({"setup": "timeout"})
        os._exit(0)
    except BaseException:  # noqa: BLE001 - a broken test suite is the dataset's fault, not the model's
        _write_status({"setup": "infra_error", "msg": traceback.format_exc()[-800:]})
        os._exit(0)
    if job.get("check"):
        snippets = [job["check"] + f"\n\ncheck({entry})\n"]
    for i, snippet in enumerate(snippets):
        verdict, msg = "pass", ""
        try:
            exec(compile(snippet, f"<test {i}>", "exec"), g)
        except AssertionError as e:
            verdict, msg = "fail", str(e)[:200]
        except RemoteTimeout:
            verdict = "timeout"
        except NameError as e:
            verdict, msg = "runtime_error", str(e)[:300]
        except (RemoteError, RemoteGone) as e:
            verdict, msg = ("memory" if "MemoryError" in str(e) else "runtime_error"), str(e)[:300]
        except BaseException as e:  # noqa: BLE001 - e.g. a TypeError on a wrong return type: a failed test
            verdict, msg = "fail", f"{type(e).__name__}: {e}"[:300]
        _write_status({"test": i, "verdict": verdict, "msg": msg})
        if verdict == "timeout":
            break
    os._exit(0)


# --------------------------------------------------------------------------------------------- zygote


class Zygote:
    def __init__(self, role: str, uid: int, ctrl: socket.socket):
        global _STREAMS
        self.role, self.uid, self.ctrl = role, uid, ctrl
        _STREAMS = (_text_stream(0, "r", "surrogateescape"), _text_stream(1, "w", "surrogateescape"),
                    _text_stream(2, "w", "backslashreplace"))
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
                _child_setup(lim, cpu_s, self.uid if uid is None else uid, fds)
                target(job)
            except BaseException as e:  # noqa: BLE001 - the sandbox's own failure, not the program's
                _write_status({"infra": f"{type(e).__name__}: {e}"})
            finally:
                os._exit(125)
        for fd in set(fds.values()):
            os.close(fd)
        res = self._wait(pid, start, wall_s, until_stop)
        self.kill_all()
        out = _read(paths["out"], lim["output_mb"] << 20)
        err = _read(paths["err"], 8192)
        status_lines = _read(paths["status"], lim["output_mb"] << 20).decode("utf-8", "replace").splitlines()
        res["status"] = [json.loads(s) for s in status_lines if s.startswith("{") and _is_json(s)]
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
        res, pair = self.spawn(_exec_child, {"argv": _argv(h["compile"], self.src)}, lim, cpu_s=t, wall_s=2 * t)
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
                target = _python_child
            else:
                job, target = {"argv": _argv(h["run"], self.src)}, _exec_child
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
        return self.spawn(_python_child, job, lim, cpu_s=cpu, wall_s=wall, rpc_fd=fds[0], until_stop=True)

    def op_check(self, h: dict, blobs, fds) -> tuple[dict, list]:
        lim, n = h["limits"], max(1, len(h["job"]["snippets"]))
        wall = (2 * lim["timeout_s"] + 1) * n + 10
        checker_lim = dict(lim, memory_mb=max(lim["memory_mb"], 1024), nproc=max(lim["nproc"], 16))
        return self.spawn(_checker_child, h["job"], checker_lim, cpu_s=wall, wall_s=wall, rpc_fd=fds[0])

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


def _is_json(s: str) -> bool:
    try:
        json.loads(s)
        return True
    except ValueError:
        return False


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
