"""Python helpers that rules call when they fire: splat arithmetic and type-text checks.

Splat arithmetic evaluates one element of an elementwise op with numpy in the op's dtype,
exactly as ``accy.ir.interpret`` evaluates every element (same ufuncs, same rounding, same
integer wrap-around and C-style integer division), so a folded constant equals what the
interpreter computes. ``tests/rewrites/test_fold.py`` checks every op against the interpreter.
(Rule modules import only ``accy.egraph.sorts`` and ``rules``; hence the few lines that mirror the
interpreter here rather than a call into it.)

Every function is total: rules call them inside egglog, where an exception would abort the
saturation, so they answer ``False``/``None`` for anything unexpected.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache

import numpy as np

from accy.egraph.sorts import parse_type

_ERF = np.frompyfunc(math.erf, 1, 1)


def _erf(x: np.ndarray) -> np.ndarray:
    return np.asarray(_ERF(x.astype(np.float64)), dtype=np.float64).astype(x.dtype)


def _gelu(x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    out = 0.5 * x64 * (1.0 + np.asarray(_ERF(x64 / math.sqrt(2.0)), dtype=np.float64))
    return np.where(np.isneginf(x64), 0.0, out).astype(x.dtype)


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    out = 0.5 * x64 * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x64 + 0.044715 * x64 ** 3)))
    return np.where(np.isneginf(x64), 0.0, out).astype(x.dtype)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    w = x.astype(np.float64) if x.dtype == np.float16 else x  # f16 rounded once, as gelu
    z = np.exp(-np.abs(w))
    one = w.dtype.type(1)
    return np.where(w >= 0, one / (one + z), z / (one + z)).astype(x.dtype)


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f":
        return np.true_divide(a, b)
    if np.any(b == 0):
        raise ZeroDivisionError("integer division by zero")  # the interpreter raises too
    q = np.floor_divide(a, b)
    return q + ((np.remainder(a, b) != 0) & ((a < 0) != (b < 0))).astype(q.dtype)


UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "neg": np.negative, "abs": np.abs, "exp": np.exp, "log": np.log, "sqrt": np.sqrt,
    "rsqrt": lambda x: np.reciprocal(np.sqrt(x)), "sin": np.sin, "cos": np.cos,
    "reciprocal": np.reciprocal, "floor": np.floor, "ceil": np.ceil, "erf": _erf,
    "relu": lambda x: np.maximum(x, x.dtype.type(0)), "gelu": _gelu, "gelu_tanh": _gelu_tanh,
    "sigmoid": _sigmoid,
    "tanh": np.tanh, "not": np.logical_not,
}
BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": _div, "max": np.maximum,
    "min": np.minimum, "pow": np.power, "eq": np.equal, "ne": np.not_equal, "lt": np.less,
    "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "and": np.logical_and,
    "or": np.logical_or,
}


def _element(value: float, type_text: str) -> np.ndarray:
    dtype = parse_type(type_text).dtype
    if dtype.is_float:
        return np.full(1, value, dtype=dtype.numpy)
    if dtype.is_int:
        return np.full(1, int(value), dtype=dtype.numpy)
    return np.full(1, bool(value), dtype=np.bool_)


@lru_cache(maxsize=4096)
def _fold(op: str, out_type: str, operands: tuple[tuple[str, str], ...]) -> float | None:
    """The element of ``op`` over splat operands ``(value text, type text)``, if ``full``
    can hold it (finite, not -0.0, integers within 2**53), else None."""
    try:
        xs = [_element(float(v), t) for v, t in operands]
        want = parse_type(out_type).dtype.numpy
        with np.errstate(all="ignore"):
            if op == "cast":
                out = xs[0].astype(want)
            elif op == "select":
                out = np.where(xs[0], xs[1], xs[2])
            elif len(xs) == 1:
                out = UNARY[op](xs[0])
            else:
                out = BINARY[op](xs[0], xs[1])
            out = np.asarray(out).astype(want)
        value = float(out[0])
    except (ArithmeticError, ValueError, TypeError, KeyError, IndexError):
        return None
    if not math.isfinite(value) or (value == 0.0 and math.copysign(1.0, value) < 0):
        return None
    if out.dtype.kind in "iu" and abs(value) > 2**53:
        return None
    return value


def _pairs(args: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    return tuple(zip(args[::2], args[1::2], strict=True))


def foldable(op: str, out_type: str, *value_type: str) -> bool:
    """Whether ``op`` over the splats (value text, type text, ...) folds into a ``full``."""
    return _fold(op, out_type, _pairs(value_type)) is not None


def folded(op: str, out_type: str, *value_type: str) -> float:
    """The folded element (only called where :func:`foldable` holds)."""
    value = _fold(op, out_type, _pairs(value_type))
    return 0.0 if value is None else value


# ---- type texts ------------------------------------------------------------------------------


def is_float(type_text: str) -> bool:
    """Whether a type text has a float dtype."""
    try:
        return parse_type(type_text).dtype.is_float
    except ValueError:
        return False


def is_int(type_text: str) -> bool:
    """Whether a type text has an integer dtype."""
    try:
        return parse_type(type_text).dtype.is_int
    except ValueError:
        return False


def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...] | None:
    """numpy's broadcast of ``shapes``, or None where they do not broadcast."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(rank):
        dims = {s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0}
        dims.discard(1)
        if len(dims) > 1:
            return None
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def broadcasts_to(a: str, b: str, result: str) -> bool:
    """Whether operands of types ``a`` and ``b`` broadcast to exactly the type ``result``."""
    try:
        ta, tb, tr = parse_type(a), parse_type(b), parse_type(result)
    except ValueError:
        return False
    return ta.dtype is tb.dtype and broadcast_shape(ta.shape, tb.shape) == tr.shape


def ints_text(values: tuple[int, ...] | list[int]) -> str:
    """A tuple of ints as attribute text (``"[1, 0]"``), as ``accy.ir.node.attr_text``."""
    return "[" + ", ".join(str(v) for v in values) + "]"


def parse_ints(text: str) -> tuple[int, ...] | None:
    """The ints of an attribute text such as ``"[1, 0]"``, or None."""
    inner = text.strip()
    if not (inner.startswith("[") and inner.endswith("]")):
        return None
    try:
        return tuple(int(x) for x in inner[1:-1].split(",") if x.strip())
    except ValueError:
        return None


def shape_text(type_text: str) -> str:
    """The shape of a type text as attribute text: ``"f32[2,3]"`` -> ``"[2, 3]"``."""
    return ints_text(parse_type(type_text).shape)
