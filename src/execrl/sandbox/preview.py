"""The start of a returned value's repr, for a failed test's record, in time linear in what it shows.

repr() of the whole value converts every integer in it to decimal, quadratic in its digits: a list of 4,400
integers of 4,299 digits each took the grading process (whose threads share one interpreter lock) seconds
per test, to keep its first 1,000 characters."""

from __future__ import annotations

from execrl.sandbox.inside.protocol import Unhashed

HUGE_INT_BITS = 4000  # repr refuses integers of more than 4,300 digits


class _Text(str):
    """Text of the preview itself (brackets, separators), not a value."""


def _parts(x):
    """A container's repr as text and its items, lazily."""
    if isinstance(x, list):
        opener, closer, items, pairs = "[", "]", x, False
    elif isinstance(x, tuple):
        opener, closer, items, pairs = "(", ",)" if len(x) == 1 else ")", x, False
    elif isinstance(x, dict) or (isinstance(x, Unhashed) and x.kind == "dict"):
        opener, closer, items, pairs = "{", "}", list(x.items()) if isinstance(x, dict) else x.items, True
    else:  # set, frozenset, or an Unhashed one
        kind = x.kind if isinstance(x, Unhashed) else type(x).__name__
        items = x.items if isinstance(x, Unhashed) else list(x)
        if not items:
            yield _Text(f"{kind}()")
            return
        opener, closer = ("{", "}") if kind == "set" else (f"{kind}({{", "})")
        pairs = False
    yield _Text(opener)
    for i, item in enumerate(items):
        if i:
            yield _Text(", ")
        if pairs:
            yield item[0]
            yield _Text(": ")
            yield item[1]
        else:
            yield item
    yield _Text(closer)


def preview(value, limit: int) -> str:
    """The first `limit` characters of repr(value), for any plain value; an integer of more than 4,000 bits
    is named by its size."""
    out, size, todo = [], 0, [iter([value])]
    while todo and size < limit:
        x = next(todo[-1], todo)  # (the stack itself: the end of this container)
        if x is todo:
            todo.pop()
            continue
        if type(x) is _Text:
            s = str(x)
        elif type(x) is int and x.bit_length() > HUGE_INT_BITS:
            s = f"<an integer of {x.bit_length()} bits>"
        elif isinstance(x, (list, tuple, dict, set, frozenset, Unhashed)):
            todo.append(_parts(x))
            continue
        elif isinstance(x, (str, bytes)):
            s = repr(x[:limit])
        else:
            s = repr(x)
        out.append(s)
        size += len(s)
    return "".join(out)[:limit]
