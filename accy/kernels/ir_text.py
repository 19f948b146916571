"""``ir_text``: the ``repr`` of kernel-IR values, exactly, built faster than ``repr`` does.

Kernel body fingerprints hash ``repr`` of the body (stamps recorded before issue #15 must
stay the same), and the dataclasses' own ``__repr__`` (a recursion guard per node, then an
f-string per field) took most of a second for the kernels of a 1,000-op program. Here each
kernel-IR class gets a plain function made from its fields, and a subterm shared within one
call (an index expression used by many loads) is written once and reused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

_PLAIN = ("str", "int", "bool")
_WRITERS: dict[type, Callable[[Any, dict[int, str]], str]] = {}


def _writer(cls: type) -> Callable[[Any, dict[int, str]], str]:
    """A function giving ``repr(obj)`` for a dataclass ``cls`` whose own ``__repr__`` is the
    generated one (every field shown)."""
    fields = [f for f in dataclasses.fields(cls) if f.repr]
    # a field declared str, int or bool is written by repr directly (what the generated
    # __repr__ does for every field); the others go through _text for nested dataclasses
    parts = ", ".join(f"{f.name}={{o.{f.name}!r}}" if f.type in _PLAIN else
                      f"{f.name}={{_text(o.{f.name}, memo)}}" for f in fields)
    src = f"def write(o, memo):\n    return f\"{cls.__qualname__}({parts})\"\n"
    namespace: dict[str, Any] = {"_text": _text}
    exec(src, namespace)  # noqa: S102 - code made from the class's own field names
    return namespace["write"]


def register(*classes: type) -> None:
    """Write instances of ``classes`` (dataclasses with the generated ``__repr__``) here."""
    for cls in classes:
        _WRITERS[cls] = _writer(cls)


def _text(o: Any, memo: dict[int, str]) -> str:
    t = type(o)
    if t is str or t is int:
        return repr(o)
    key = id(o)
    cached = memo.get(key)
    if cached is not None:
        return cached
    write = _WRITERS.get(t)
    if write is not None:
        out = write(o, memo)
    elif t is tuple:
        items = [_text(x, memo) for x in o]
        out = f"({items[0]},)" if len(items) == 1 else "(" + ", ".join(items) + ")"
    elif t is list:
        out = "[" + ", ".join(_text(x, memo) for x in o) + "]"
    else:
        out = repr(o)
    memo[key] = out
    return out


def ir_text(value: Any) -> str:
    """``repr(value)`` for kernel-IR values and tuples and lists of them."""
    memo: dict[int, str] = {}
    try:
        return _text(value, memo)
    except RecursionError:  # a very deep expression: the slower built-in way
        return repr(value)
    finally:
        memo.clear()
