"""The checker child: trusted test code runs here, never the program. Every name the tests use but do not define
is a stub that calls into the program's process and gets back plain data, so the program never sees a test or
an expected value, and nothing it does can change how this process compares."""

from __future__ import annotations

import ast
import builtins
import os
import socket
import sys
import textwrap

from .child import RPC_FD, std_streams, write_status
from .protocol import decode, encode, recv_msg, send_msg


class RemoteError(Exception):
    """The program raised while a test called it."""

    def __init__(self, message: str, kind: str = ""):
        super().__init__(message)
        self.kind = kind  # the program's exception class, e.g. "TypeError"


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
        except (EOFError, OSError, ValueError, RecursionError) as e:
            raise RemoteGone(str(e)[:200]) from None
        try:  # the reply is the program's to write: anything malformed is its error, never ours
            if "error" in reply:
                kind = str(reply["error"])[:100]
                raise RemoteError(f"{kind}: {str(reply.get('msg', ''))[:300]}", kind)
            if reply.get("callable") is True:
                return Remote(self, tuple(req["target"]), tuple(req.get("attrs", ())))
            return decode(reply["value"], self._handle)
        except RemoteError:
            raise
        except Exception as e:  # noqa: BLE001
            raise RemoteError(f"the program answered with something that is not plain data ({type(e).__name__})") \
                from None

    def _handle(self, tagged: dict) -> Remote:
        if "handle" not in tagged or type(tagged["handle"]) is not int:
            raise ValueError("malformed handle")
        return Remote(self, ("handle", tagged["handle"]), ())


def _opaque(what: str):
    def refuse(self, *args):
        raise TypeError(f"{what} a program object ({self!r}): only plain data (numbers, strings, lists, dicts...) "
                        "compares; call its methods instead")
    return refuse


class Remote:
    """Stands for a function, class or object that lives in the program's process. Tests may call it, read and set
    its attributes, and pass it back to the program; what comes back is plain data. It has no equality, hash or
    ordering (a stand-in's would say nothing of the program's value, and the program's __eq__ could lie), and `is`
    against it is refused too (_plain_operand); its truth (`assert re.search(...)` in MBPP), length, iteration
    (list(gen)) and str are the program's own answers, plain data, as good as a plain return value."""

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

    def _ask(self, op: str):
        return self._rpc.request({"op": op, "target": list(self._target), "attrs": list(self._attrs)})

    def __bool__(self) -> bool:
        value = self._ask("bool")
        if type(value) is not bool:
            raise TypeError("the program's object has no plain truth value")
        return value

    def __len__(self) -> int:
        try:
            value = self._ask("len")
        except RemoteError as e:  # no len() in the program: a TypeError here too (list() then just iterates)
            if e.kind == "TypeError":
                raise TypeError(str(e)) from None
            raise
        if type(value) is not int:
            raise TypeError("the program's object has no plain length")
        return value

    def __iter__(self):
        value = self._ask("list")
        if type(value) is not list:
            raise TypeError("the program's object does not iterate to plain data")
        return iter(value)

    def __str__(self) -> str:
        value = self._ask("str")
        if type(value) is not str:
            raise TypeError("the program's object has no plain str")
        return value

    def __repr__(self) -> str:
        return f"<program object {'.'.join(map(str, self._target[1:] + self._attrs))}>"

    __eq__ = __ne__ = _opaque("compared")
    __lt__ = __le__ = __gt__ = __ge__ = _opaque("ordered")
    __hash__ = _opaque("hashed")
    __contains__ = __getitem__ = _opaque("indexed")
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _opaque("did arithmetic with")
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _opaque("did arithmetic with")
    __neg__ = __abs__ = __int__ = __float__ = __index__ = _opaque("converted")


_TEST_GLOBALS: dict = {}  # the tests' namespace (checker_child's), where a passed function finds its free names


def _plain_operand(v):
    """`x is y` and `x is not y` with a program object on either side: refused as == is (identity of a stand-in
    object says nothing about the program's value)."""
    if isinstance(v, Remote):
        raise TypeError(f"compared a program object ({v!r}) by identity: only plain data compares")
    return v


def _remote_arg(v) -> dict:
    """Arguments sent to the program: plain data, program objects it handed out before, and test code it can rebuild
    on its side (lambdas and functions defined by the tests, builtins such as `len`): the tests' source, never an
    expected value."""
    if isinstance(v, Remote):
        return {"ref": [list(v._target), list(v._attrs)]}
    if type(v) is type(sys):  # a module the tests imported
        return {"source": [f"__import__({v.__name__!r}, fromlist=['_'])", None, []]}
    source = getattr(v, "__execrl_source__", None) if callable(v) else None
    if isinstance(source, list):  # [an expression, None] or [a def statement, its name], and the tests' names it uses
        src, name = source
        env = [[k, encode(_TEST_GLOBALS[k], _remote_arg)] for k in sorted(_free_names(src)[0] - {name})
               if k in _TEST_GLOBALS]
        return {"source": [src, name, env]}
    if getattr(builtins, getattr(v, "__name__", ""), None) is v:
        return {"source": [v.__name__, None, []]}
    module, qualname = getattr(v, "__module__", None), getattr(v, "__qualname__", "")
    if callable(v) and module and module in sys.modules and module != "__test__" and "<" not in qualname:
        return {"source": [f"__import__({module!r}, fromlist=['_']).{qualname}", None, []]}
    raise TypeError(f"a test passed a {type(v).__name__} to the program; only plain data and the tests' own "
                    "functions can cross")


class _CarrySource(ast.NodeTransformer):
    """Rewrites test code so that the functions it defines know their source (they can then be rebuilt in the
    program's process when a test passes them), and `is` comparisons refuse program objects."""

    def __init__(self, code: str):
        self.code = code

    def visit_Lambda(self, node: ast.Lambda):
        self.generic_visit(node)
        src = ast.get_source_segment(self.code, node)
        if src is None:
            return node
        return ast.copy_location(ast.Call(ast.Name("__execrl_with_source__", ast.Load()),
                                          [node, ast.Constant(f"({src})"), ast.Constant(None)], []), node)

    def visit_Compare(self, node: ast.Compare):
        self.generic_visit(node)
        if any(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops):
            guard = ast.Name("__execrl_plain__", ast.Load())
            node.left = ast.Call(guard, [node.left], [])
            node.comparators = [ast.Call(guard, [c], []) for c in node.comparators]
        return node

    def generic_visit(self, node):
        super().generic_visit(node)
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if isinstance(stmts, list) and any(isinstance(x, ast.FunctionDef) for x in stmts):
                setattr(node, field, self._annotate(stmts))
        return node

    def _annotate(self, stmts: list) -> list:
        out = []
        for stmt in stmts:
            out.append(stmt)
            src = ast.get_source_segment(self.code, stmt, padded=True) if isinstance(stmt, ast.FunctionDef) else None
            if src is not None and not stmt.decorator_list:
                setter = ast.parse(f"{stmt.name}.__execrl_source__ = {[textwrap.dedent(src), stmt.name]!r}").body[0]
                out.append(ast.copy_location(setter, stmt))
        return out


def _with_source(fn, src: str, name: str | None):
    fn.__execrl_source__ = [src, name]
    return fn


def compile_test(code: str, name: str):
    tree = ast.fix_missing_locations(_CarrySource(code).visit(ast.parse(code)))
    return compile(tree, name, "exec")


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
    g = _TEST_GLOBALS
    g.update({"__name__": "__test__", "__builtins__": builtins, "__execrl_with_source__": _with_source,
              "__execrl_plain__": _plain_operand})
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
        exec(compile_test(job.get("setup", ""), "<setup>"), g)
    except RemoteTimeout:
        write_status({"setup": "timeout"})
        os._exit(0)
    except BaseException as e:  # noqa: BLE001 - the program may have caused it (a name it lacks, a value it
        # returned): never infra_error, which a program could then claim for itself
        write_status({"setup": "runtime_error", "msg": f"the tests' set-up failed: {type(e).__name__}: {e}"[:300]})
        os._exit(0)
    if job.get("check"):
        snippets = [job["check"] + f"\n\ncheck({entry})\n"]
    for i, snippet in enumerate(snippets):
        verdict, msg = "pass", ""
        try:
            exec(compile_test(snippet, f"<test {i}>"), g)
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
