"""Messages between the grader and the zygotes, and the plain data that crosses into and out of
programs."""

from __future__ import annotations

import collections
import json
import math
import socket
import struct
import sys
import time

# ----------------------------------------------------------------------------------------------- framing


def send_msg(sock: socket.socket, header: dict, blobs=(), fds=()) -> None:
    """One message: 4-byte length, JSON header (with blob lengths), raw blobs, then fds on one extra
    byte."""
    header = dict(header, blobs=[len(b) for b in blobs], nfds=len(fds))
    raw = json.dumps(header).encode()
    sock.sendall(struct.pack(">I", len(raw)) + raw)
    for b in blobs:  # each as it is: no joined copy of a program's output left in the sender's memory
        sock.sendall(b)
    if fds:
        socket.send_fds(sock, [b"F"], list(fds))


def _recv_exact(sock: socket.socket, n: int, mutable: bool = False, deadline: float | None = None
                ) -> bytes | bytearray:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        if deadline is not None:  # (the whole message's time, not each read's: a byte a second never times out)
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout("timed out")
            sock.settimeout(left)
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise EOFError("peer closed the connection")
        got += k
    view.release()
    return buf if mutable else bytes(buf)


class Oversized(ValueError):
    """A message that is not read: its header's size or its values' count over the reader's bound."""


def recv_msg(sock: socket.socket, max_header: int = 1 << 26, mutable: bool = False,
             bounded: bool = False, deadline: float | None = None,
             takes_fds: bool = False) -> tuple[dict, list[bytes], list[int]]:
    """`mutable`: the blobs as the bytearrays they were read into (their only copy: the runner zeroes them once the
    program is graded, see zygote.scrub); `bounded`: a header that could hold more than MAX_NODES values is not
    parsed (a program's reply, whose parsing is the reader's time); `deadline` (time.monotonic()): socket.timeout
    past it, however the message trickles in; `takes_fds`: the message may carry file descriptors (elsewhere one
    that says it does is refused, Oversized, its descriptors left unread: a program's reply that carried hundreds
    filled the tests' descriptor table)."""
    (n,) = struct.unpack(">I", _recv_exact(sock, 4, deadline=deadline))
    if n > max_header:
        raise Oversized(f"message header of {n} bytes is larger than allowed")
    raw = _recv_exact(sock, n, deadline=deadline)
    if bounded and too_many_nodes(raw):
        raise Oversized(f"a reply that could hold more than {MAX_NODES:,} values (its [, {{ and , counted, in "
                        "strings too), not read")
    header = json.loads(raw, parse_int=_short_int) if bounded else json.loads(raw)
    blobs = [_recv_exact(sock, k, mutable, deadline) for k in header.get("blobs", [])]
    fds: list[int] = []
    if header.get("nfds"):
        if not takes_fds:
            raise Oversized("a message carrying file descriptors, which this reader does not take")
        _, fds, _, _ = socket.recv_fds(sock, 1, header["nfds"])
    return header, blobs, fds


# ------------------------------------------------------------------------------------- plain-data codec

_BASES = (bool, int, float, complex, str, bytes, tuple, list, dict, set, frozenset)
_TYPES = {t.__name__: t for t in (*_BASES, object, type(None))}  # types a test may pass, e.g. f(xs, int)


def _downcast(v, base):
    """The base-type data of a subclass instance, read through the base type's own methods (no
    overrides)."""
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


_MAPPINGS = {"Counter": collections.Counter, "OrderedDict": collections.OrderedDict}  # (Counter first: the docs'
# OrderedCounter recipe, a Counter and an OrderedDict, answers a missing key with 0)
CHANGEABLE = (list, dict, set, *_MAPPINGS.values(), collections.defaultdict)  # arguments whose change comes back
_FACTORY = collections.defaultdict.default_factory  # (the slot itself: a subclass's property cannot answer for it)


def _mapping_tag(v: dict) -> str | None:
    """The tag a collections mapping `v` (a subclass's too) crosses under: Counter, OrderedDict or
    defaultdict:<its factory, a builtin type> (one level of JSON, as a dict's); None otherwise (a defaultdict whose
    factory is no builtin type, a lambda say, crosses as a dict)."""
    for name, kind in _MAPPINGS.items():
        if isinstance(v, kind):
            return name
    if isinstance(v, collections.defaultdict):
        factory = _FACTORY.__get__(v)
        if type(factory) is type and _TYPES.get(factory.__name__) is factory:
            return f"defaultdict:{factory.__name__}"
    return None


def _mapping_of(tag: str):
    """The mapping's constructor from its tag (mapping pairs), None for another tag."""
    if tag in _MAPPINGS:
        return _MAPPINGS[tag]
    kind, _, factory = tag.partition(":")
    if kind == "defaultdict" and factory in _TYPES:
        return lambda pairs: collections.defaultdict(_TYPES[factory], pairs)
    return None


STARVED_CAP = 4  # x its wall limit: the longest a program that waited for a CPU is given (the runner adds its waits to
# its wall limit; the grader's own timeouts cover it)
SHARED_HASH = 64  # a decoded set's or dict's items that may share one hash (integers equal mod 2**61 - 1 all do:
# building a set of n of them takes time quadratic in n, the checker's, outside every limit: a hunt's find, 60,000 in a
# forged asserts-form answer held a worker for the tests' whole wall limit); a program's real answer has a few at most
MAX_DEPTH = 200  # plain data nested deeper than this is refused both ways (deeper would exhaust the recursion limit)
MAX_NODES = 2_000_000  # a returned value's JSON with more separators than this ([, {, ,) is not parsed: 16 MB of
# [[],[],...] made 5.4 million lists, ~800 MB and seconds of the grader's interpreter, from one test


def _short_int(digits: str) -> int:
    """A reply's decimal integer: encode writes those past 2**53 in hex, so a longer one is forged, and reading
    millions of decimal digits takes time quadratic in them (the reader's, outside the program's limits)."""
    if len(digits) > 20:
        raise Oversized(f"a reply holding a decimal integer of {len(digits):,} digits, not read")
    return int(digits)


def node_marks(text: bytes | bytearray | str) -> int:
    """JSON text's [, { and , (a bound on the values it holds, counted before any parsing)."""
    marks = ("[", "{", ",") if isinstance(text, str) else (b"[", b"{", b",")
    return sum(map(text.count, marks))


def too_many_nodes(text: bytes | bytearray | str) -> bool:
    """Whether JSON text could hold more than MAX_NODES values (counted before any parsing)."""
    return node_marks(text) > MAX_NODES


def encode(v, other=None, depth: int = 0):
    """Plain data -> JSON-able tagged form. Anything else goes to `other(v)` (a handle), or raises
    TypeError."""
    if depth > MAX_DEPTH:
        raise TypeError(f"value nested more than {MAX_DEPTH} deep")
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
    if t is range:
        return {"range": [v.start, v.stop, v.step]}
    if t is type and _TYPES.get(v.__name__) is v:
        return {"type": v.__name__}
    if isinstance(v, dict) and (tag := _mapping_tag(v)) is not None:
        # a Counter, OrderedDict or defaultdict (of a builtin type) crosses as one: a test reading a missing key of a
        # Counter, or comparing an OrderedDict's order, sees what Python would (read through the kind's own methods,
        # not a subclass's: an OrderedDict's order is its own, which dict.items does not follow after move_to_end)
        items = (collections.OrderedDict if isinstance(v, collections.OrderedDict) else dict).items(v)
        return {tag: [[encode(k, other, depth + 1), encode(x, other, depth + 1)] for k, x in items]}
    for base in _BASES:
        if isinstance(v, base):
            return encode(_downcast(v, base), other, depth)
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(v, (numpy.generic, numpy.ndarray)):
        return encode(v.tolist() if isinstance(v, numpy.ndarray) else v.item(), other, depth)
    if other is not None:
        return other(v)
    raise TypeError(f"returned a {t.__name__}, which is not plain data")


class Unhashed:
    """A set, frozenset or dict as a program sent it, decoded with hashed=False: its items (a dict's
    as (key, value) pairs) in a list, never hashed. The grader compares these without building a set
    or dict of a program's values (integers equal mod 2**61 - 1 share one hash: a set of many such
    would take time quadratic in their number)."""

    __slots__ = ("kind", "items")

    def __init__(self, kind: str, items: list):
        self.kind, self.items = kind, items

    def __repr__(self) -> str:
        if self.kind == "dict":
            return "{" + ", ".join(f"{k!r}: {v!r}" for k, v in self.items) + "}"
        inner = ", ".join(map(repr, self.items))
        return f"{{{inner}}}" if self.kind == "set" and self.items else f"{self.kind}({{{inner}}})"


def _apart(items: list, key: bool = False) -> list:
    """items (a dict's (key, value) pairs with `key`), where at most SHARED_HASH of them (their keys) share one hash:
    ValueError otherwise, before a set or dict of them is built (in linear time: a count of their hashes)."""
    if len(items) > SHARED_HASH:
        counts = collections.Counter(hash(x[0] if key else x) for x in items)
        if max(counts.values()) > SHARED_HASH:
            raise ValueError(f"a set or dict of values built to share one hash (over {SHARED_HASH} of them)")
    return items


def decode(obj, make_handle=None, depth: int = 0, hashed: bool = True):
    """Inverse of encode. `make_handle(key)` builds the object that stands for a remote handle;
    hashed=False leaves sets and dicts as Unhashed. Input that encode cannot have made (it may come
    from a program) raises ValueError, whatever is wrong with it."""
    try:
        return _decode(obj, make_handle, depth, hashed)
    except ValueError:
        raise
    except Exception as e:  # noqa: BLE001 - TypeError, OverflowError, RecursionError... all mean malformed
        raise ValueError(f"malformed plain-data value ({type(e).__name__})") from None


def _decode(obj, make_handle, depth: int, hashed: bool = True):
    if depth > MAX_DEPTH:
        raise ValueError(f"value nested more than {MAX_DEPTH} deep")
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    d = depth + 1
    if isinstance(obj, list):
        return [_decode(x, make_handle, d, hashed) for x in obj]
    if not isinstance(obj, dict) or len(obj) != 1:
        raise ValueError("malformed plain-data value")
    (tag, val), = obj.items()
    if tag == "int" and isinstance(val, str):
        return int(val, 16)
    if tag == "float" and val in ("inf", "-inf", "nan"):
        return float(val)
    if tag in ("tuple", "set", "frozenset") and isinstance(val, list):
        items = [_decode(x, make_handle, d, hashed) for x in val]
        if tag == "tuple":
            return tuple(items)
        return (set(_apart(items)) if tag == "set" else frozenset(_apart(items))) if hashed else Unhashed(tag, items)
    if tag == "dict" and isinstance(val, list):
        pairs = [(_decode(k, make_handle, d, hashed), _decode(x, make_handle, d, hashed)) for k, x in val]
        return dict(_apart(pairs, key=True)) if hashed else Unhashed("dict", pairs)
    if isinstance(tag, str) and (mapping := _mapping_of(tag)) is not None and isinstance(val, list):
        pairs = [(_decode(k, make_handle, d, hashed), _decode(x, make_handle, d, hashed)) for k, x in val]
        return mapping(dict(_apart(pairs, key=True))) if hashed else Unhashed("dict", pairs)  # (compared as the dict)
    if tag == "bytes" and isinstance(val, str):
        return bytes.fromhex(val)
    if tag == "complex" and isinstance(val, list) and len(val) == 2:
        parts = [_decode(x, None, d) for x in val]
        if not all(type(x) in (int, float) for x in parts):
            raise ValueError("malformed complex value")
        return complex(*parts)
    if tag == "type" and val in _TYPES:
        return _TYPES[val]
    if tag == "range" and isinstance(val, list) and len(val) == 3 and all(type(x) is int for x in val):
        return range(*val)
    if tag in ("handle", "ref", "callback") and make_handle is not None:
        return make_handle(obj)
    raise ValueError(f"unknown plain-data tag {tag!r}")


PROGRAM_STATUS = {"exc": 100, "msg": 500}  # the text fields of a program child's status, with their caps (characters)
CHECKER_STATUS = {"msg": 300}
VERDICTS = ("pass", "fail", "timeout", "memory", "runtime_error")
# the checker's set-up may also end for a module the tests use and that does not import where they run: before the
# program is called, so nothing of the program's can claim it (a program's own status line cannot carry it)
SETUP_VERDICTS = (*VERDICTS, "infra_error")


STATUS_LINE_BYTES = 16384  # a status line of ours without a value is shorter (its texts are capped where written)


def carry_status(raw: bytes, checker: bool, value: bool = True) -> tuple[list[dict], bytes]:
    """What of a child's status lines goes back to the grader: known fields only, each capped, so
    that the reply stays small whatever the program wrote; a program's return value travels as a
    blob of its own (b"" for none). `value`: whether the program returns one (the call form): where
    it does not, a longer line is the program's own, dropped unparsed (a forged value of millions of
    elements cost the runner seconds of parsing per test). Never raises: a status that cannot be
    carried back is the program's failure."""
    try:
        if checker:
            return [_known(st, CHECKER_STATUS, SETUP_VERDICTS) for st in _status_lines(raw, last_only=False)], b""
        lines = _status_lines(raw, last_only=True, longest=None if value else STATUS_LINE_BYTES)
        status = _known(lines[0], PROGRAM_STATUS) if lines else {}
        if value and lines and "value" in lines[0]:
            return [status], json.dumps(lines[0]["value"], ensure_ascii=False).encode("utf-8", "surrogatepass")
        return [status] if lines else [], b""
    except Exception:  # noqa: BLE001 - e.g. a value json cannot write back: not plain data
        return [{"exc": "TypeError", "msg": "the program's status or return value could not be read"}], b""


def valid_text(s: str) -> str:
    """`s` with a lone surrogate (which json carries escaped, from a program's `chr(0xd800)`) as "?": the
    text goes on to tokenizers, files and pages, which refuse it."""
    return s.encode("utf-8", "replace").decode("utf-8")


def _known(st: dict, text_caps: dict, setups: tuple[str, ...] = VERDICTS) -> dict:
    """A status line's known fields: capped text, a checker's test index, verdict and set-up (one of
    `setups`)."""
    out = {k: valid_text(st[k][:cap]) for k, cap in text_caps.items() if isinstance(st.get(k), str)}
    if type(st.get("test")) is int and st.get("verdict") in VERDICTS:
        out["test"], out["verdict"] = st["test"], st["verdict"]
    if st.get("setup") in setups:
        out["setup"] = st["setup"]
    return out


def _status_lines(raw: bytes, last_only: bool, longest: int | None = None) -> list[dict]:
    """A child's status lines (JSON objects). A program's child writes one, at its end, and whatever
    the program wrote there itself is the program's: malformed, torn, absurdly nested lines and
    those over `longest` characters are dropped, never an error of ours, and only the last good one
    of the last few lines is kept (the checker's lines, one per test, are all ours)."""
    out = []
    for line in _last_lines(raw, 16, longest) if last_only else raw.decode("utf-8", "replace").splitlines():
        if not line or (longest is not None and len(line) > longest) or too_many_nodes(line):  # (parsed, it would take the runner's memory and time, outside the program's limits)
            continue
        try:
            st = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(st, dict) and _depth_at_most(st, 3 * MAX_DEPTH + 8):  # (a dict's level is 3 of JSON's)
            out.append(st)
            if last_only:
                break
    return out


def _last_lines(raw: bytes, count: int, longest: int | None):
    """The last `count` lines of raw, last first, decoded, each over `longest` bytes given as "" (not decoded): found
    from the end, so that 16 MiB of short lines a program wrote is not split into millions of strings (~440 MB and
    0.7 s of the runner, or of the grading process, per test)."""
    end = len(raw) - 1 if raw.endswith(b"\n") else len(raw)
    for _ in range(count):
        if end <= 0:
            return
        start = raw.rfind(b"\n", 0, end) + 1
        yield "" if longest is not None and end - start > 4 * longest else raw[start:end].decode("utf-8", "replace")
        end = start - 1


def _depth_at_most(value, limit: int) -> bool:
    todo = [(value, 0)]
    while todo:
        v, d = todo.pop()
        if d > limit:
            return False
        if isinstance(v, dict):
            todo.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            todo.extend((x, d + 1) for x in v)
    return True
