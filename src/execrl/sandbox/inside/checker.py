"""The checker child: trusted test code runs here, never the program. Every name the tests use but do not define
is a stub that calls into the program's process and gets back plain data, so the program never sees a test or
an expected value, and nothing it does can change how this process compares."""

from __future__ import annotations

import ast
import builtins
import os
import socket
import sys
import traceback

from .child import RPC_FD, std_streams, write_status
from .protocol import decode, encode, recv_msg, send_msg


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


def checker_child(job: dict) -> None:
    """Runs trusted test code against the program over RPC; one status line per test; never returns."""

    sys.set_int_max_str_digits(0)
    std_streams()
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
        write_status({"setup": "runtime_error", "msg": str(e)[:300]})
        os._exit(0)
    except RemoteTimeout:
        write_status({"setup": "timeout"})
        os._exit(0)
    except BaseException:  # noqa: BLE001 - a broken test suite is the dataset's fault, not the model's
        write_status({"setup": "infra_error", "msg": traceback.format_exc()[-800:]})
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
        write_status({"test": i, "verdict": verdict, "msg": msg})
        if verdict == "timeout":
            break
    os._exit(0)
