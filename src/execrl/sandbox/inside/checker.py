"""The checker child: trusted test code runs here, never the program. Every name the tests use but
do not define is a stub that calls into the program's process and gets back plain data, so the
program never sees a test or an expected value, and nothing it does can change how this process
compares."""

from __future__ import annotations

import ast
import builtins
import collections
import os
import signal
import socket
import sys
import time
import types

from .child import RPC_FD, setup_done, std_streams, write_status
from .protocol import Oversized, decode, encode, recv_msg, send_msg


class RemoteError(Exception):
    """The program raised while a test called it. Where the program's exception is a builtin one,
    what a test gets is also an instance of that builtin class (remote_error), so `except
    ValueError` and pytest.raises work."""

    kind = ""  # the program's exception class, e.g. "TypeError"

    def __str__(self) -> str:  # the message as given, also where the builtin class would quote it (KeyError)
        return str(self.args[0]) if self.args else ""


_NOT_MAPPED = (StopIteration, StopAsyncIteration)  # a call's StopIteration would end a test's map() or zip() early
_ERRORS: dict[str, type] = {}


def remote_error(kind: str, message: str, bases=()) -> RemoteError:
    """The exception a test sees for the program's `kind`: a RemoteError, and an instance of the
    builtin class of that name, or else of the nearest builtin class it derives from (`bases`, the
    program's names of them: statistics' StatisticsError is a ValueError; UnicodeDecodeError, whose
    constructor takes five arguments, a UnicodeError), when there is one (an Exception, not
    StopIteration)."""
    names = tuple(str(b)[:100] for b in bases[:16]) if type(bases) is list else ()
    key = (kind, *names)
    if key not in _ERRORS:
        _ERRORS[key] = RemoteError
        for name in (kind, *names):
            base = getattr(builtins, name, None)
            if not (isinstance(base, type) and issubclass(base, Exception) and not issubclass(base, _NOT_MAPPED)):
                continue
            try:
                cls = type(name, (RemoteError, base), {})
                cls(message)
            except Exception:  # noqa: BLE001 - a class that takes other arguments (UnicodeError...) or none
                continue
            _ERRORS[key] = cls
            break
    e = _ERRORS[key](message)
    e.kind = kind
    return e


class RemoteTimeout(BaseException):
    """The program did not answer a call within the time limit. Not an Exception: a test's `except Exception` (or
    pytest.raises(Exception)) is not meant for it, as no Python code catches a time limit; and it fails the test
    even where a bare except swallows it (_Rpc.failed)."""


class RemoteGone(BaseException):
    """The program's process ended (crash, exit) while a test needed it; as RemoteTimeout, a failure of the test
    whatever the test catches."""


class _Rpc:
    def __init__(self, sock: socket.socket, timeout: float):
        self.sock, self.timeout = sock, timeout
        self.failed: tuple[str, str] | None = None  # the test's verdict once the program timed out, ended or exited
        self.held = (0.0, 0.0)  # the tests' own clock while the program answers (_own_clock_paused)
        sock.settimeout(timeout)

    def request(self, req: dict, sent: tuple | None = None):
        """The program's answer to `req`; `sent`: a call's arguments, the test's objects, which change as the
        program changed its copies (a list it sorted in place). The tests' own clock and CPU (_own_cpu's) stop while the
        program answers."""
        self.held = (0.0, 0.0)  # (where pausing raises: the clock left as it is, the CPU's call ended)
        try:
            self.held = _own_clock_paused()
            return self._request(req, sent)
        finally:
            _own_clock_resumed(self.held)

    def _request(self, req: dict, sent: tuple | None):
        if self.failed is not None:  # (after a timeout a late reply would answer the next call)
            raise (RemoteTimeout if self.failed[0] == "timeout" else RemoteGone)(self.failed[1])
        try:
            self.sock.settimeout(self.timeout)  # (a send's: recv_msg's deadline leaves it at what was left)
            send_msg(self.sock, req)
            deadline = time.monotonic() + self.timeout  # (the program's answer's time, a trickled one's too, and
            reply, _, _ = recv_msg(self.sock, bounded=True, deadline=deadline)  # its callbacks': one deadline a
            while isinstance(reply, dict) and "callback" in reply:  # call, moved on only by the checker's own time
                key = reply["callback"]  # in the tests' functions. (Parsed in the checker, outside the program's
                if type(key) is not int or key not in _CALLBACKS:  # limits: 60 MB of [0,0,...] took 3 s a call.)
                    self.failed = ("runtime_error", "the program called back a function the tests never gave it")
                    raise RemoteGone(self.failed[1])  # (a call of an unknown one each 0.5 s held the deadline off)
                started = time.monotonic()
                _own_clock_resumed(self.held)  # (a callback is the tests' own code: its clock runs; a call it makes
                try:  # to the program stops it again, and leaves self.held as it found it running)
                    answer = _run_callback(reply, self._handle)
                finally:
                    self.held = _own_clock_paused()
                deadline += time.monotonic() - started
                self.sock.settimeout(max(deadline - time.monotonic(), 0.001))
                send_msg(self.sock, answer)
                reply, _, _ = recv_msg(self.sock, bounded=True, deadline=deadline)
        except socket.timeout:
            self.failed = ("timeout", "")
            raise RemoteTimeout() from None
        except OwnTimeout:  # (mid-call: the channel's state is unknown, so no later call reads a stale reply)
            self.failed = ("timeout", f"the tests' own code ran past {OWN_CPU_S:g} s of its own time")
            raise
        except Oversized as e:
            self.failed = ("runtime_error", f"the program answered with {_text(e)[:200]}")
            raise RemoteGone(self.failed[1]) from None
        except (EOFError, OSError, ValueError, RecursionError) as e:
            self.failed = ("runtime_error", f"the program ended ({_text(e)[:200]})")
            raise RemoteGone(self.failed[1]) from None
        try:  # the reply is the program's to write: anything malformed is its error, never ours
            if sent is not None and "mutated" in reply:
                _mutate(sent, reply["mutated"])
            if isinstance(reply, dict) and reply.get("error") == "SystemExit":  # it ended the program, as in Python
                self.failed = ("runtime_error", f"SystemExit: {str(reply.get('msg', ''))[:300]}")
                raise RemoteGone(self.failed[1])
            if "error" in reply:
                kind = str(reply["error"])[:100]
                raise remote_error(kind, f"{kind}: {str(reply.get('msg', ''))[:300]}", reply.get("bases", ()))
            if reply.get("callable") is True:
                return Remote(self, tuple(req["target"]), tuple(req.get("attrs", ())))
            return decode(reply["value"], self._handle)
        except (RemoteError, RemoteGone):
            raise
        except Exception as e:  # noqa: BLE001
            raise RemoteError(f"the program answered with something that is not plain data ({type(e).__name__})") \
                from None

    def _handle(self, tagged: dict) -> Remote:
        if "handle" not in tagged or type(tagged["handle"]) is not int:
            raise ValueError("malformed handle")
        return Remote(self, ("handle", tagged["handle"]), ())


def _mutate(sent: tuple, changed: list) -> None:
    """The test's arguments changed as the program changed its copies of them (child._changed): a call's in-place
    work is seen by the test, as in Python (`nums.sort()` in the program, then `assert nums == [...]`). The program's
    copies share no objects: where the test's arguments do (`f(a, a)`, rows of `[[0] * 2] * 2`), the first change of
    a shared object is the one kept."""
    args, kwargs = sent
    done: set[int] = set()
    for key, value in changed:
        old = args[key] if type(key) is int and 0 <= key < len(args) else kwargs[key] if type(key) is str else None
        if _kind(old) is None:
            raise ValueError("a changed argument that is no list, dict or set")
        _sync(old, decode(value), done)  # (plain data only: no handle, the program's objects stay there)


def _kind(x) -> type | None:
    """list, dict or set, of which x is one (a Counter is a dict, as the program got it), else None."""
    return next((k for k in (list, dict, set) if isinstance(x, k)), None)


def _sync(old, new, done: set[int]) -> None:
    """`old` made equal to `new` in place where it differs, its lists, dicts and sets changed in place too (a test
    holding a grid's row sees it change; a Counter stays a Counter), what is equal left as it is."""
    if _kind(old) is not _kind(new):
        raise ValueError("a changed argument of another kind")
    if id(old) in done or _same(old, new):
        return
    done.add(id(old))
    if isinstance(old, set):
        old.clear()
        old.update(new)
        return
    if isinstance(old, list) and len(old) != len(new):  # items appended or put first keep the test's own before them
        kept = len(old)
        if len(new) > kept and _same(new[:kept], old):
            old.extend(new[kept:])
        elif len(new) > kept and _same(new[len(new) - kept:], old):
            old[:0] = new[:len(new) - kept]
        else:
            old[:] = new
        return
    for key in [k for k in old if k not in new] if isinstance(old, dict) else ():
        del old[key]
    for key, value in (new.items() if isinstance(old, dict) else enumerate(new)):
        inner = old[key] if not isinstance(old, dict) or key in old else None
        if _kind(inner) is not None and _kind(inner) is _kind(value):
            _sync(inner, value, done)
        elif (isinstance(old, dict) and key not in old) or not _same(inner, value):
            old[key] = value
    if isinstance(old, collections.OrderedDict):  # (its order is part of its value: the program's, kept)
        for key in new:
            old.move_to_end(key)


def _same(a, b) -> bool:
    """Whether a and b are the same plain data, kinds and order included: their own == is not that (a Counter equals
    one with a zero count more, 1 equals 1.0 and True)."""
    try:
        return encode(a) == encode(b)
    except (TypeError, RecursionError):  # (an object of the tests' own in it: not the same, synced)
        return False


def _opaque(what: str):
    def refuse(self, *args):
        raise TypeError(f"{what} a program object ({self!r}): only plain data (numbers, strings, lists, dicts...) "
                        "compares; call its methods instead")
    return refuse


class Remote:
    """Stands for a function, class or object that lives in the program's process. Tests may call
    it, read and set its attributes, and pass it back to the program; what comes back is plain data.
    It has no equality, hash or ordering (a stand-in's would say nothing of the program's value, and
    the program's __eq__ could lie), and `is` against it is refused too (_plain_operand), but for
    `is None` and `is not None` (the program's None comes back as None, never as a stand-in); its
    truth (`assert re.search(...)` in MBPP), length, iteration (list(gen)), next() and str are the
    program's own answers, plain data, as good as a plain return value."""

    __slots__ = ("_rpc", "_target", "_attrs")

    def __init__(self, rpc: _Rpc, target: tuple, attrs: tuple):
        self._rpc, self._target, self._attrs = rpc, target, attrs

    def __getattr__(self, name: str):
        """The attribute's value as plain data (`node.val`), or a stand-in for a method or a
        non-plain object."""
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return self._rpc.request({"op": "get", "target": list(self._target), "attrs": [*self._attrs, name]})
        except RemoteError as e:  # as Python's own: hasattr() and getattr(x, name, default) work on program objects
            if e.kind == "AttributeError":
                raise AttributeError(_text(e)) from None
            raise

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
        return self._rpc.request(req, (args, kwargs))

    def _ask(self, op: str, kind: type, what: str):
        """The program's own answer to bool(), len(), list() or str() of its object, which must be a
        plain `kind`."""
        value = self._rpc.request({"op": op, "target": list(self._target), "attrs": list(self._attrs)})
        if type(value) is not kind:
            raise TypeError(f"the program's object has no plain {what}")
        return value

    def __bool__(self) -> bool:
        return self._ask("bool", bool, "truth value")

    def __len__(self) -> int:
        try:
            return self._ask("len", int, "length")
        except RemoteError as e:  # no len() in the program: a TypeError here too (list() then just iterates)
            if e.kind == "TypeError":
                raise TypeError(_text(e)) from None
            raise

    def __iter__(self):
        """The program's iterator over its object, drawn as the test goes (islice of an endless generator ends):
        its first 64 items one a call, exactly as the test takes them (a generator it goes on with by next()), then
        in batches of 2, 4, ... 4,096 (a long one takes a few calls; like the list() this replaced, a batch may
        read ahead of the test). The whole iteration has one call's time."""
        it = self._rpc.request({"op": "iter", "target": list(self._target), "attrs": list(self._attrs)})
        if not isinstance(it, Remote):
            raise TypeError("the program's object gave no iterator")
        return _drawn(self._rpc, it)

    def __next__(self):
        """next() of the program's iterator or generator: its next item, as plain data or a
        stand-in."""
        try:
            return self._rpc.request({"op": "next", "target": list(self._target), "attrs": list(self._attrs)})
        except RemoteError as e:
            if e.kind == "StopIteration":
                raise StopIteration from None
            raise

    def __str__(self) -> str:
        return self._ask("str", str, "str")

    def __repr__(self) -> str:
        return f"<program object {'.'.join(map(str, self._target[1:] + self._attrs))}>"

    __eq__ = __ne__ = _opaque("compared")
    __lt__ = __le__ = __gt__ = __ge__ = _opaque("ordered")
    __hash__ = _opaque("hashed")
    __contains__ = __getitem__ = _opaque("indexed")
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _opaque("did arithmetic with")
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _opaque("did arithmetic with")
    __neg__ = __abs__ = __int__ = __float__ = __index__ = _opaque("converted")


def _drawn(rpc: _Rpc, it: Remote):
    n, drawn, start = 1, 0, time.monotonic()
    while True:
        if time.monotonic() - start > rpc.timeout:  # (an endless generator under list(): a timeout, as one call)
            rpc.failed = ("timeout", "")
            raise RemoteTimeout()
        got = rpc.request({"op": "take", "target": list(it._target), "attrs": [], "n": n})
        if not (type(got) is list and len(got) == 2 and type(got[0]) is list):
            raise TypeError("the program's iterator gave no plain items")
        items, error = got
        drawn += len(items)
        yield from items
        if error is not None:
            kind = str(error[0])[:100] if type(error) is list and error else "Exception"
            if kind == "StopIteration":
                return
            message = str(error[1])[:300] if type(error) is list and len(error) > 1 else ""
            raise remote_error(kind, f"{kind}: {message}", error[2] if type(error) is list and len(error) > 2 else ())
        n = 1 if drawn < 64 else min(2 * n, 4096)


def _plain_operand(v):
    """`x is y` and `x is not y` with a program object on either side: refused as == is (identity of
    a stand-in object says nothing about the program's value)."""
    if isinstance(v, Remote):
        raise TypeError(f"compared a program object ({v!r}) by identity: only plain data compares")
    return v


_CALLBACKS: dict[int, object] = {}  # functions the tests passed to the program, by key: they run here, never there


def _remote_arg(v) -> dict:
    """Arguments sent to the program: plain data, program objects it handed out before, and
    functions (the tests' lambdas and functions, builtins such as `len`), which stay here: the
    program gets a stand-in that calls back, and sees only the plain results, never the function's
    code or the test's data it uses."""
    if isinstance(v, Remote):
        return {"ref": [list(v._target), list(v._attrs)]}
    if callable(v):
        key = len(_CALLBACKS) + 1
        _CALLBACKS[key] = v
        return {"callback": key}
    raise TypeError(f"a test passed a {type(v).__name__} to the program; only plain data and functions can cross")


def _run_callback(request: dict, make_handle) -> dict:
    """The program called a test's function: run it here on the plain arguments; its plain result,
    or its error."""
    try:
        fn = _CALLBACKS[request["callback"]]
        args, kwargs = decode(request.get("args", []), make_handle), decode(request.get("kwargs", {}), make_handle)
        return {"value": encode(fn(*args, **kwargs), _remote_arg)}
    except (RemoteTimeout, RemoteGone, OwnTimeout):  # (the tests' own time spent in a callback is theirs to end:
        raise  # handed to the program as an error, it went on, and a callback's sleep passed: a review's find)
    except BaseException as e:  # noqa: BLE001 - the function's error goes back to the program
        return {"error": type(e).__name__, "msg": _text(e)[:300]}


def _text(e: BaseException) -> str:
    """str(e), for any exception: a program's object in an assert message can make str() raise or
    call back."""
    try:
        return str(e)
    except BaseException:  # noqa: BLE001
        return f"<{type(e).__name__} with an unprintable message>"


class _GuardIdentity(ast.NodeTransformer):
    """Rewrites test code so that `is` and `is not` refuse program objects (_plain_operand), except
    against a literal None, True, False or Ellipsis, whose answer a stand-in gives right."""

    def visit_Compare(self, node: ast.Compare):
        self.generic_visit(node)
        operands, guarded = [node.left, *node.comparators], set()
        for i, op in enumerate(node.ops):
            if isinstance(op, (ast.Is, ast.IsNot)):
                guarded.update(j for j, other in ((i, i + 1), (i + 1, i)) if not _singleton(operands[other]))
        guard = ast.Name("__execrl_plain__", ast.Load())
        operands = [ast.Call(guard, [x], []) if j in guarded else x for j, x in enumerate(operands)]
        node.left, node.comparators = operands[0], operands[1:]
        return node


def _singleton(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and any(node.value is v for v in (None, True, False, ...))


def compile_test(code: str, name: str):
    tree = ast.fix_missing_locations(_GuardIdentity().visit(ast.parse(code)))
    return compile(tree, name, "exec", dont_inherit=True)  # none of our own __future__ flags


def _free_names(code: str | ast.Module) -> tuple[set[str], set[str]]:
    """Names the test code (or its parsed tree) uses but does not define: (not builtins, builtins)."""

    loaded, bound = set(), set()
    for node in ast.walk(ast.parse(code) if isinstance(code, str) else code):
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


MODULE_ALIASES = {"np": "numpy", "pd": "pandas"}  # a test's conventional name for a module it does not import
# installed modules tests use without importing them (not every installed name: a program's `regex` or `markdown`
# object, or a torch the program's tensors need, stays the program's)
TEST_MODULES = ("numpy", "pandas", "scipy", "sympy")


class ModuleMissing(Exception):
    """A module the tests use without importing it is not installed where they run."""


def _modules_named(code: str, names: set[str]) -> dict[str, types.ModuleType]:
    """Of `names` (free in the tests), those the tests use only as `name.attribute` and that name a standard library
    module or one of TEST_MODULES (or a conventional alias): imported here, so that `math.isclose` or
    `numpy.allclose` in a test that forgot its import is the module's, never a `math` or `numpy` the program defines
    (`class numpy: allclose = lambda *a, **k: True`). ModuleMissing where one is not installed here: the name is
    never left to the program (its own `class pd: isclose = ...` passed a test of pandas where pandas was
    missing)."""
    import importlib

    tree, only_bases = ast.parse(code), {}
    bases = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in names:
            only_bases[node.id] = only_bases.get(node.id, True) and id(node) in bases
    found = {}
    for name, only in only_bases.items():
        module = MODULE_ALIASES.get(name, name)
        if only and (module in sys.stdlib_module_names or module in TEST_MODULES):
            try:
                found[name] = importlib.import_module(module)
            except Exception as e:  # noqa: BLE001 - not installed here (or broken): no test of it can be judged
                raise ModuleMissing(f"the tests use {name}.* ({module}) without importing it, and {module} does not "
                                    f"import where they run ({type(e).__name__}: {_text(e)[:120]}): install it in "
                                    "the sandbox's Python") from None
    return found


def _tested_builtin(code: str, names: set[str]) -> set[str]:
    """Where the tests call nothing of the program's but builtins' names (a task whose function is `sum`, MBPP
    126), the one builtin name they test: the only one they use, or the only one called as a comparison's operand
    with no such call inside it (`sum` in `all([sum(xs) == 6])`). Empty where that is not one name: then every
    builtin stays the builtin, so a program cannot redefine `all`, `set` or `sorted` to make an assert agree."""
    if len(names) <= 1:
        return set(names)

    def call_of(node) -> str | None:
        return node.func.id if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
            node.func.id in names else None

    found = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Compare):
            for operand in (node.left, *node.comparators):
                if call_of(operand) and not any(call_of(n) for n in ast.walk(operand) if n is not operand):
                    found.add(call_of(operand))
    return found if len(found) == 1 else set()


def _bind_remote(g: dict, rpc: _Rpc, names: list[str], tested: tuple[str, ...] = ()) -> list[str]:
    """The program's objects of these names, bound in the tests' globals (those it lacks are left unbound). A name in
    `tested` (the check form's entry point, the builtin the tests test) that the program lacks is bound to a function
    that raises NameError: else the builtin of that name passed for the program (an empty program passed tests of
    `sum`, `max` or `sorted`: a hunt's find)."""
    bound = []
    for name in names:
        try:
            g[name] = rpc.request({"op": "get", "target": ["name", name]})
            bound.append(name)
        except RemoteError:  # not the program's: a star import in the setup, or a NameError later
            if name in tested and hasattr(builtins, name):
                g[name] = _undefined(name, rpc)
    return bound


def _undefined(name: str, rpc: _Rpc):
    """What stands for a builtin-named function the program lacks: a NameError that is the test's verdict even where
    the tests catch it (a check expecting an exception, `except Exception`, passed an empty program: a review's
    find)."""
    def undefined(*args, **kwargs):
        rpc.failed = ("runtime_error", f"NameError: name {name!r} is not defined (the program defines no {name})")
        raise NameError(rpc.failed[1][11:])

    return undefined


CHECKER_INT_DIGITS = 50_000
OWN_CPU_S = 10.0  # seconds the tests' set-up, and each test, may spend in their own code, of CPU and of the clock
# (a call into the program waits, and its time is not theirs): past it the test times out and the rest are not run. A
# row's `while True` in its set-up held a grading worker for (2 x timeout + 1) x tests + 10 s: 510 s a sample at 100
# asserts, and so did its `time.sleep(10**6)` (hunts' finds)


class OwnTimeout(BaseException):
    """The tests' own code ran past OWN_CPU_S of CPU or of the clock."""


class _Own:
    """The tests' own CPU: this process's less what it spent in calls into the program (their own cost in the checker,
    arguments encoded and answers read, is the call's: the checker's limits and the program's bound it; counted as the
    tests' own, 100,000 calls of a list took the 10 s and a correct program timed out whatever its timeout_s, a hunt's
    find). A CPU timer (ITIMER_PROF) ticks every 50 ms of CPU and checks it: never set again per call, as the kernel
    rounds each setting up to a tick (a review's find: a budget paused and resumed per call grew 4 ms a call)."""

    armed = False
    limit = began = in_calls = 0.0
    call_began: float | None = None  # while a call is in flight: its start, in this process's CPU seconds

    @classmethod
    def spent(cls) -> float:
        return time.process_time() - cls.began - cls.in_calls


def _own_cpu(seconds: float) -> None:
    """Arm (seconds > 0) or disarm (0) the budget of the tests' own time, CPU (_Own) and the clock (ITIMER_REAL, stopped
    while the program answers a call: _own_clock_paused); once spent it fires every 50 ms, so a bare `except:` in the
    row's code cannot swallow it for long."""
    _Own.armed = bool(seconds)  # (first: once disarmed, no signal of the budget raises)
    _Own.limit, _Own.began, _Own.in_calls, _Own.call_began = seconds, time.process_time(), 0.0, None
    signal.setitimer(signal.ITIMER_PROF, 0.05 if seconds else 0.0, 0.05 if seconds else 0.0)
    signal.setitimer(signal.ITIMER_REAL, seconds, 0.05 if seconds else 0.0)


def _own_clock_paused() -> tuple[float, float]:
    """The tests' own clock and CPU stopped (while the program answers); what the clock had left, for
    _own_clock_resumed. Its signal is blocked meanwhile: one that came as it stopped (the kernel sets a repeating timer
    again only once its signal is taken: the timer reads (0, interval) meanwhile) is taken here, the budget then spent
    (it fires again as the clock resumes), where it would have raised with the clock stopped for good (a review's
    find)."""
    _Own.call_began = time.process_time()  # (first: a CPU tick from here on is the call's)
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])
        held = signal.setitimer(signal.ITIMER_REAL, 0)
        if signal.sigtimedwait([signal.SIGALRM], 0) is not None and held[1] > 0:  # (armed: an interval, always)
            held = (0.001, held[1])
        return held
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGALRM])


def _own_clock_resumed(held: tuple[float, float]) -> None:
    if held[1] > 0:  # (unarmed, or disarmed meanwhile: left so)
        signal.setitimer(signal.ITIMER_REAL, held[0] or 0.001, held[1])
    if _Own.call_began is not None:
        _Own.in_calls += time.process_time() - _Own.call_began
        _Own.call_began = None


def _over_budget(signum, frame):
    if not _Own.armed:  # (a signal of a budget since disarmed)
        return
    if signum == signal.SIGPROF and (_Own.call_began is not None or _Own.spent() < _Own.limit):
        return
    raise OwnTimeout


def checker_child(job: dict) -> None:
    """Runs trusted test code against the program over RPC; one status line per test; never
    returns."""

    setup_done()  # from here on nothing is a set-up failure of ours: it talks to the program
    # the tests' literals and printing may pass Python's 4,300 digits; not millions: turning a program's integer of
    # millions of digits into decimal text (an assert's message, a KeyError's) takes time quadratic in them, the
    # checker's (outside the program's limits), and held a grading worker for minutes. 50,000 digits: ~30 ms
    sys.set_int_max_str_digits(CHECKER_INT_DIGITS)
    std_streams()
    rpc = _Rpc(socket.socket(fileno=RPC_FD), job["call_timeout_s"])
    module = types.ModuleType("__test__")  # in sys.modules, as the tests' own classes (dataclasses) expect
    sys.modules["__test__"] = module
    g = module.__dict__
    g.update(__builtins__=builtins, __execrl_plain__=_plain_operand)
    snippets = job["snippets"]
    entry = job.get("entry_point")
    try:
        every = "\n".join([job.get("setup", ""), *snippets, job.get("check", "")])
        free, builtin_names = _free_names(every)
        modules = _modules_named(every, free - {entry})
        g.update(modules)
        signal.signal(signal.SIGPROF, _over_budget)
        signal.signal(signal.SIGALRM, _over_budget)
        bound = _bind_remote(g, rpc, sorted(free - set(modules) | ({entry} if entry else set())),
                             tested=(entry,) if entry else ())
        if not bound and not entry:
            # tests that call nothing of the program's but a builtin's name test the program's own
            # `sum` (MBPP 126); every other builtin the tests use stays the builtin
            builtin = sorted(_tested_builtin(every, builtin_names))
            _bind_remote(g, rpc, builtin, tested=tuple(builtin))
        try:
            _own_cpu(OWN_CPU_S)
            exec(compile_test(job.get("setup", ""), "<setup>"), g)
        finally:
            _own_cpu(0)  # (before any handler below: none of their writes is cut short)
    except OwnTimeout:
        _own_cpu(0)
        write_status({"setup": "timeout", "msg": f"the tests' set-up ran past {OWN_CPU_S:g} s of its own time"})
        os._exit(0)
    except ModuleMissing as e:  # (before the program is called: nothing of the program's can raise it)
        write_status({"setup": "infra_error", "msg": str(e)[:300]})
        os._exit(0)
    except RemoteTimeout:
        write_status({"setup": "timeout"})
        os._exit(0)
    except BaseException as e:  # noqa: BLE001 - the program may have caused it (a name it lacks, a value it
        # returned): never infra_error, which a program could then claim for itself
        write_status({"setup": "runtime_error", "msg": f"the tests' set-up failed: {type(e).__name__}: {_text(e)}"[:300]})
        os._exit(0)
    if job.get("check"):
        snippets = [job["check"] + f"\n\ncheck({entry})\n"]
    for i, snippet in enumerate(snippets):
        verdict, msg = "pass", ""
        try:
            _own_cpu(OWN_CPU_S)
            try:
                exec(compile_test(snippet, f"<test {i}>"), g)
            finally:
                _own_cpu(0)  # (before any handler below: none of their writes is cut short)
        except OwnTimeout:
            _own_cpu(0)
            verdict, msg = "timeout", f"the test's own code ran past {OWN_CPU_S:g} s of its own time"
        except RemoteTimeout:
            verdict = "timeout"
        except (RemoteError, RemoteGone) as e:  # (before AssertionError: the program's own is its runtime error)
            verdict, msg = ("memory" if getattr(e, "kind", "") == "MemoryError" else "runtime_error"), _text(e)[:300]
        except AssertionError as e:
            verdict, msg = "fail", _text(e)[:200]
        except NameError as e:  # (the program lacks a name the tests call: its error class, as the other forms say)
            verdict, msg = "runtime_error", f"NameError: {_text(e)}"[:300]
        except BaseException as e:  # noqa: BLE001 - e.g. a TypeError on a wrong return type: a failed test
            verdict, msg = "fail", f"{type(e).__name__}: {_text(e)}"[:300]
        if rpc.failed is not None and verdict in ("pass", "fail"):  # the test caught the program's timeout or end
            verdict, msg = rpc.failed
        write_status({"test": i, "verdict": verdict, "msg": msg})
        if verdict == "timeout":
            break
    os._exit(0)
