"""The forked child of a runner zygote: set-up, then the program. Every function here runs in the
child only."""

from __future__ import annotations

import atexit
import builtins
import ctypes
import errno
import io
import json
import math
import os
import resource
import signal
import socket
import sys
import traceback
import types

from . import seccomp
from .protocol import CHANGEABLE, decode, encode, recv_msg, send_msg

# fds of a child: 0-2 stdin/stdout/stderr, STATUS_FD its status line, RPC_FD the checker's channel
# (assert and check forms), REPORT_FD where a failure of our own set-up is reported: it is closed
# before the program runs (or on exec), so nothing a program does can claim to be the sandbox's
# failure
STATUS_FD, RPC_FD, REPORT_FD = 3, 4, 5

def _set_limits(lim: dict, cpu_s: float) -> None:
    mb = 1024 * 1024
    cpu = max(1, math.ceil(cpu_s))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))  # SIGXCPU, then SIGKILL one second later
    space = max(lim["memory_mb"], lim.get("address_space_mb", 0)) * mb  # (what it holds: the memory limit, watched)
    resource.setrlimit(resource.RLIMIT_AS, (space, space))
    files = lim["output_mb"] * mb + 1  # (output of exactly the cap is allowed: one byte more is over it)
    resource.setrlimit(resource.RLIMIT_FSIZE, (files, files))
    resource.setrlimit(resource.RLIMIT_NPROC, (lim["nproc"], lim["nproc"]))
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
    resource.setrlimit(resource.RLIMIT_CORE, (1, 1))  # no core dump: 1, not 0, which a core_pattern that pipes to
    # a handler (apport, systemd-coredump) ignores: each crash's whole memory went to a root helper outside every
    # limit; 1 aborts a piped dump, and is below any core file's size (a hunt's find)
    hard = resource.getrlimit(resource.RLIMIT_STACK)[1]  # unlimited stack: deep recursion is legitimate
    resource.setrlimit(resource.RLIMIT_STACK, (hard, hard))


def _drop_privileges(uid: int) -> None:
    if uid >= 0 and os.geteuid() == 0:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)  # leaving uid 0 clears every capability


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


_NO_CAPS = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable: all empty (two 32-bit halves each)
_CAP_HEADER = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process


def _drop_capabilities() -> None:
    """No capability left (the zygote's CAP_SYS_ADMIN and CAP_NET_ADMIN in bwrap-user mode, where
    the uid stays); with no_new_privs set, exec cannot give them back."""
    seccomp.LIBC.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL
    if seccomp.LIBC.capset(ctypes.byref(_CAP_HEADER), _NO_CAPS) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


def child_setup(lim: dict, cpu_s: float, uid: int, fds: dict[int, int], cwd: str, enter=None) -> None:
    """In the forked child: into the program's cgroup (`enter`, where there is one), own session,
    fds in place, everything else closed (the cgroup's too), limits, the uid, no capabilities. (The
    seccomp filter is the zygote's, installed once and inherited.)"""
    if enter is not None:
        enter()
    os.setsid()
    high = {target: os.dup2(fd, 200 + target) for target, fd in fds.items()}  # no source is overwritten early
    for target, fd in high.items():
        os.dup2(fd, target)
    for fd in range(max(fds) + 1):
        if fd not in fds:
            close_quietly(fd)
    os.closerange(max(fds) + 1, 1 << 16)
    os.chdir(cwd)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # the zygote leaves SIGINT at SIG_DFL (see zygote.py)
    _set_limits(lim, cpu_s)
    _drop_privileges(uid)
    _drop_capabilities()
    seccomp.LIBC.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: the zygote may read this process's memory use


def setup_done() -> None:
    """From here on the program runs: nothing it does can reach the set-up report."""
    global _REPORTING
    _REPORTING = False
    close_quietly(REPORT_FD)


_REPORTING = True
# exec found the program's binary open for writing: a descriptor of it that outlives the processes of
# an earlier test (sent over a unix socket and left in flight) keeps the kernel from running that file
EXEC_BUSY = "exec: the program's binary is open for writing (ETXTBSY)"


# what a Python child writes on the set-up report where the program does not compile: before any of it runs, on the
# channel closed before it does, so that a program writing a compile status of its own cannot make its timeout or
# crash a syntax_error
COMPILE_FAILED = "\x00the program did not compile"


def report_setup_failure(message: str) -> None:
    if _REPORTING:
        try:
            os.write(REPORT_FD, message.encode("utf-8", "replace")[:4000])
        except OSError:
            pass


def close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def text_stream(fd: int, mode: str, errors: str) -> io.TextIOWrapper:
    raw = io.FileIO(fd, mode, closefd=False)
    buf = io.BufferedReader(raw) if mode == "r" else io.BufferedWriter(raw, 1 << 16)
    return io.TextIOWrapper(buf, encoding="utf-8", errors=errors, line_buffering=(fd == 2))


# The child's sys.stdin/stdout/stderr, built once by the zygote (which never uses them): each forked
# child gets its own copy, bound to whatever files it has dup2'ed onto fds 0-2, without paying to
# build them per test.
_STREAMS: list = []


def build_streams() -> None:
    _STREAMS[:] = [text_stream(0, "r", "surrogateescape"), text_stream(1, "w", "surrogateescape"),
                   text_stream(2, "w", "backslashreplace")]


def std_streams() -> None:
    sys.stdin = sys.__stdin__ = _STREAMS[0]
    sys.stdout = sys.__stdout__ = _STREAMS[1]
    sys.stderr = sys.__stderr__ = _STREAMS[2]


def write_status(status: dict) -> None:
    data = (json.dumps(status) + "\n").encode()
    try:
        os.write(STATUS_FD, data)
    except OSError:
        pass


def _python_program(src_path: str, name: str) -> dict:
    """Exec the program as the module `name`, in sys.modules as plain Python has its main module
    (pickle, dataclasses and multiprocessing look its classes and functions up there), compiled with
    none of our own __future__ flags; returns its globals. Exceptions propagate."""

    with open(src_path, "rb") as f:
        source = f.read()
    try:
        code = compile(source, src_path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as e:  # ValueError: NUL bytes in the source
        report_setup_failure(COMPILE_FAILED)
        raise _CompileError(f"{type(e).__name__}: {e}") from None
    finally:
        setup_done()  # the program runs from here
    module = types.ModuleType(name)
    module.__file__, module.__builtins__ = src_path, builtins
    sys.modules[name] = module
    exec(code, module.__dict__)
    return module.__dict__


class _CompileError(Exception):
    """The program is not valid Python: a syntax_error verdict, not a runtime error."""


def python_child(job: dict) -> None:
    """Runs in the forked child; never returns. The set-up report stays open until the program is compiled
    (_python_program), none of it run."""

    sys.set_int_max_str_digits(0)  # integers beyond 4,300 digits are legitimate
    sys.argv = [job["src"]]
    sys.path.insert(0, os.path.dirname(job["src"]))  # (as Python puts a script's directory first: a spawn or
    # forkserver child imports the module `solution` from there to unpickle its functions)
    std_streams()
    code, status = 0, {}
    try:
        mode = job["mode"]
        g = _python_program(job["src"], "__main__" if mode == "stdio" else "solution")
        if mode == "stdio" and "threading" in sys.modules:
            sys.modules["threading"]._shutdown()  # like interpreter exit: wait for non-daemon threads
        elif mode == "call":
            fn = _resolve_entry(g, job["fn_name"])
            args = decode(json.loads(job["args"]))
            status["value"] = encode(fn(*args))
        elif mode == "serve":
            _serve(g)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
    except _CompileError as e:
        status["exc"] = "SyntaxError"
        print(e, file=sys.stderr)
        code = 1
    except BaseException as e:  # noqa: BLE001 - the program's own failure, reported as its verdict
        status["exc"] = type(e).__name__
        status["msg"] = str(e)[:500]
        try:  # through sys.excepthook, as Python reports an uncaught exception (a program's own hook is called)
            sys.excepthook(type(e), e, e.__traceback__)
        except BaseException:  # noqa: BLE001
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
            if not getattr(stream, "closed", False):  # a program may close stdout when it is done with it
                stream.flush()
        except BaseException as e:  # noqa: BLE001
            status.setdefault("exc", type(e).__name__)
            code = code or 1
    try:
        write_status(status)
    except BaseException:  # noqa: BLE001 - e.g. a return value nested too deeply for JSON: not plain data
        write_status({"exc": "TypeError", "msg": "the return value is not plain data"})
        code = code or 1
    os._exit(code & 0xFF)


def _resolve_entry(g: dict, fn_name: str):
    cls = g.get("Solution")
    if isinstance(cls, type) and hasattr(cls, fn_name):
        return getattr(cls(), fn_name)
    if fn_name in g and callable(g[fn_name]):
        return g[fn_name]
    raise NameError(f"the program defines no function {fn_name!r}")


def _serve(g: dict) -> None:
    """Answer the checker's calls: each resolves a name or handle, calls it, returns plain data or a
    handle."""
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

    def arg(tagged: dict):  # a handle, an attribute of one, or a function of the tests' (it runs there)
        if "handle" in tagged:
            return handles[tagged["handle"]]
        if "callback" in tagged:
            return callback(tagged["callback"])
        return resolve(tagged["ref"][0], tagged["ref"][1])

    def callback(key):
        def call(*args, **kwargs):  # the tests' function runs in the checker; only its plain result comes back
            send_msg(sock, {"callback": key, "args": encode(list(args), keep), "kwargs": encode(kwargs, keep)})
            reply, _, _ = recv_msg(sock)  # (as large as the program may answer: 64 MiB)
            if "error" in reply:
                raise RuntimeError(f"the test's function raised {reply['error']}: {reply.get('msg', '')}")
            return decode(reply["value"], arg)
        return call

    asks = {"bool": bool, "len": len, "str": str, "next": next, "iter": iter}
    while True:
        try:
            req, _, _ = recv_msg(sock)  # (the tests' request, as large as a reply may be, 64 MiB: a 17 MB argument
        except (EOFError, OSError):  # was refused at 16 MiB, the program's runtime_error, a hunt's find)
            return
        sent = None  # a call's arguments as the program got them
        try:
            attrs = req.get("attrs", [])
            if req["op"] == "set":
                setattr(resolve(req["target"], attrs[:-1]), attrs[-1], decode(req["value"], arg))
                send_msg(sock, {"value": None})
                continue
            obj = resolve(req["target"], attrs)
            if req["op"] == "call":
                sent = decode(req["args"], arg), decode(req["kwargs"], arg)
                obj = obj(*sent[0], **sent[1])
            elif req["op"] in asks:  # the program's own answer, as plain data
                obj = asks[req["op"]](obj)
            elif req["op"] == "take":  # up to n items of an iterator (list() of an endless one never ends), and the
                obj = _take(obj, max(1, min(int(req["n"]), 4096)))  # error that ended it early, if any
            elif callable(obj):  # "get" of a function or class: the checker makes a stub for it
                send_msg(sock, {"callable": True})
                continue
            reply = {"value": encode(obj, keep)}
        except BaseException as e:  # noqa: BLE001 - the program's exception goes back to the test
            if isinstance(e, SystemExit):
                send_msg(sock, {"error": "SystemExit", "msg": "the program called exit() during a test"})
                return
            reply = {"error": type(e).__name__, "msg": str(e)[:300], "bases": builtin_bases(e)}
        try:
            if sent is not None and (changed := _changed(sent, req)):
                reply["mutated"] = changed
        except Exception:  # noqa: BLE001 - the program's objects, changed into what cannot be read: not carried
            pass
        send_msg(sock, reply)


def _changed(sent: tuple, req: dict) -> list:
    """[[position or keyword, its value], ...] for each list, dict or set argument of a call that the call changed
    in place (a list sorted, a grid filled), as plain data: the test's own object changes with it, as in Python."""
    kwargs = dict(req["kwargs"]["dict"])
    out = []
    for key, value in [*enumerate(sent[0]), *sent[1].items()]:
        if type(value) not in CHANGEABLE:
            continue
        try:
            after = encode(value)  # (plain data only: a program object in it is no test's to change)
        except (TypeError, RecursionError):
            continue
        if after != (req["args"][key] if type(key) is int else kwargs[key]):
            out.append([key, after])
    return out


def _take(iterator, n: int) -> list:
    """[items, None], or [items, [the exception's class name, its message]] where one ended the items early
    (StopIteration at the end): the items before an error reach the test before the error does, as in Python."""
    items = []
    try:
        for _ in range(n):
            items.append(next(iterator))
    except Exception as e:  # noqa: BLE001 - the program's error goes to the test, after the items before it
        try:
            message = str(e)[:300]
        except Exception:  # noqa: BLE001 - an exception whose str() raises
            message = ""
        return [items, [type(e).__name__, message, builtin_bases(e)]]
    return [items, None]


def builtin_bases(e: BaseException) -> list[str]:
    """The builtin exception classes an exception's class derives from, nearest first (a test's `except ValueError`
    catches statistics.StatisticsError)."""
    import builtins

    return [c.__name__ for c in type(e).__mro__[1:] if getattr(builtins, c.__name__, None) is c][:16]


def exec_child(job: dict) -> None:
    for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT):  # Python ignores these; a compiled program should not
        signal.signal(sig, signal.SIG_DFL)
    os.set_inheritable(REPORT_FD, False)  # closes on a successful exec; a failed one raises, and is reported
    os.set_inheritable(STATUS_FD, False)  # an exec'd program has no status to write (one it wrote was its verdict's)
    try:
        os.execve(job["argv"][0], job["argv"], dict(os.environ))
    except OSError as e:
        if e.errno == errno.ETXTBSY:
            report_setup_failure(EXEC_BUSY)  # (the runner execs a fresh copy)
            os._exit(125)
        if not job.get("program"):  # a language's tool that would not start: our set-up's failure
            raise
        setup_done()  # the program's own binary, which its source shaped (a .interp section that does not end, say:
        # ENOEXEC): its failure, a runtime error, never an infra_error left out of its reward
        os.write(2, f"the program's binary could not be run: {e.strerror} (errno {e.errno})\n".encode())
        os._exit(126)
