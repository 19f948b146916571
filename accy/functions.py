"""accy's op functions, numpy-style, for traced programs: ``accy.exp(x)``, ``accy.where(c, a,
b)``, ``accy.einsum("ij,jk->ik", a, b)``, ``accy.one_hot(labels, 10)``, ...

Each builds one op (or a few) of the function its traced operands belong to, like the
operators and methods of :class:`accy.builder.Value`; docs/OPS.md lists the ops they make.
Operands that are not traced Values (numbers, numpy arrays) become constants: next to a traced
Value they take its dtype (as with operators); alone, inside a function being traced, they
follow :func:`constant`'s rules. ``constant`` and ``arange`` make nodes from nothing, so they
build into the function being traced (``@accy.function`` / ``accy.trace``) or, with
``like=``, into the function of that Value.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

import numpy as np
from opt_einsum.parser import get_symbol

import accy.builder as builder
import accy.tracing as tracing
from accy.builder import BuilderError, FunctionBuilder, Value, _dtype, _int
from accy.ir.types import DType

# abs, max and sum are left out so that a star import does not hide Python's builtins
__all__ = [
    "arange", "astype", "broadcast_to", "ceil", "concat", "constant", "cos", "cross_entropy",
    "einsum", "erf", "exp", "floor", "gather", "gelu", "log", "log_softmax", "matmul",
    "maximum", "mean", "minimum", "one_hot", "reciprocal", "relu", "reshape", "rsqrt",
    "scatter_add", "select", "sigmoid", "sin", "softmax", "sqrt", "tanh", "transpose", "where",
]

# the builder's functions, unchanged
maximum = builder.maximum
minimum = builder.minimum
select = builder.select
concat = builder.concat
gather = builder.gather
scatter_add = builder.scatter_add
cross_entropy = builder.cross_entropy


def _home(what: str, like: Value | None) -> FunctionBuilder:
    if like is None:
        return tracing.current(what)
    if not isinstance(like, Value):
        raise BuilderError(f"{what}: like= must be a traced Value, got {like!r}")
    return like.fb


def _value(what: str, x: Any) -> Value:
    """``x`` if it is a traced Value, else a constant of the function being traced."""
    if isinstance(x, Value):
        return x
    if isinstance(x, str | bytes) or x is None:
        raise BuilderError(f"{what}: {x!r} is not a tensor (a traced Value, number or array)")
    return _home(what, None).constant(x, _default_dtype(x))


def constant(value: Any, dtype: DType | None = None, *, like: Value | None = None) -> Value:
    """A constant tensor: a number, a (nested) list, or a numpy array. Unless ``dtype`` is
    given, Python floats (and lists of them) are f32, Python ints i64 and bools bool, and numpy
    arrays and scalars keep their dtype. Built into the function being traced, or into
    ``like``'s function."""
    if dtype is None:
        dtype = _default_dtype(value)
    return _home("accy.constant", like).constant(value, dtype)


def _default_dtype(value: Any) -> DType | None:
    """f32 for Python floats and lists of them; None (numpy's dtype) for anything else."""
    if isinstance(value, np.ndarray | np.generic):
        return None
    return DType.f32 if np.asarray(value).dtype.kind == "f" else None


def arange(start: Any, stop: Any = None, step: Any = 1, dtype: DType | None = None, *,
           like: Value | None = None) -> Value:
    """``numpy.arange`` as a constant: ``arange(n)`` is 0..n-1. The dtype is i64 for integer
    arguments and f32 otherwise unless ``dtype`` is given (``like=``: see :func:`constant`)."""
    if stop is None:
        start, stop = 0, start
    ints = all(isinstance(v, int | np.integer) and not isinstance(v, bool)
               for v in (start, stop, step))
    if dtype is None:
        dtype = DType.i64 if ints else DType.f32
    _dtype("accy.arange", dtype)
    if step == 0:
        raise BuilderError("accy.arange: step must not be 0")
    values = np.arange(start, stop, step, dtype=np.float64 if not ints else np.int64)
    return _home("accy.arange", like).constant(values.astype(dtype.numpy), dtype)


def one_hot(indices: Value, depth: int, dtype: DType = DType.f32, axis: int = -1) -> Value:
    """``out[..., k, ...] = 1 if indices[...] == k else 0`` for k in 0..depth-1, the new axis
    of size ``depth`` at ``axis`` of the result (last by default). An index outside
    [0, depth) gives a row of zeros. Built from ``eq`` of ``indices`` and an ``arange``."""
    if not isinstance(indices, Value):
        raise BuilderError(f"accy.one_hot: indices must be a traced Value, got {indices!r}")
    if not indices.dtype.is_int:
        raise BuilderError(f"accy.one_hot: indices must be integers, got {indices.type}")
    depth = _int("accy.one_hot: depth", depth)
    if depth < 1:
        raise BuilderError(f"accy.one_hot: depth must be at least 1, got {depth}")
    rank = indices.type.rank + 1
    axis = _int("accy.one_hot: axis", axis)
    if not -rank <= axis < rank:
        raise BuilderError(f"accy.one_hot: axis {axis} is out of range for a rank-{rank} result")
    axis %= rank
    shape = list(indices.shape)
    column = indices.reshape(*shape[:axis], 1, *shape[axis:])
    ks = arange(depth, dtype=indices.dtype, like=indices)
    ks = ks.reshape(*([1] * axis), depth, *([1] * (rank - axis - 1)))
    return (column == ks).astype(_dtype("accy.one_hot", dtype))


def where(cond: Value, a: Any, b: Any) -> Value:
    """numpy's ``where``: ``a`` where ``cond`` is true, else ``b`` (the ``select`` op;
    broadcasting; a number next to a Value takes its dtype)."""
    if not isinstance(a, Value) and not isinstance(b, Value):
        a = _value("accy.where", a)
    return builder.select(_value("accy.where", cond), a, b)


def einsum(*args: Any) -> Value:
    """Einstein summation: ``einsum("ij,jk->ik", a, b)``, or numpy's sublist form
    ``einsum(a, [0, 1], b, [1, 2], [0, 2])`` whose integer indices may go past the 52 letters
    (they become opt_einsum's symbols, ``opt_einsum.get_symbol(i)``, which a spec may also
    use directly). Implicit output (no ``->``): the indices used once, in sorted order."""
    if args and isinstance(args[0], str):
        return builder.einsum(args[0], *args[1:])
    out = args[-1] if len(args) % 2 == 1 else None  # the output sublist comes last
    pairs = args[:-1] if out is not None else args
    operands, terms = list(pairs[0::2]), list(pairs[1::2])
    if not operands:
        raise BuilderError("accy.einsum: give a spec and operands, or operands each followed "
                           "by its list of integer indices")

    def term(sub: Any, where: str) -> str:
        if not isinstance(sub, Sequence) or isinstance(sub, str):
            raise BuilderError(f"accy.einsum: {where} must be a list of integer indices, "
                               f"got {sub!r}")
        idx = [_int(f"accy.einsum: an index of {where}", i) for i in sub]
        if builtins.any(i < 0 for i in idx):
            raise BuilderError(f"accy.einsum: indices of {where} must be >= 0, got {list(sub)}")
        return "".join(get_symbol(i) for i in idx)

    for i, x in enumerate(operands):
        if not isinstance(x, Value):
            raise BuilderError(f"accy.einsum: operand {i} must be a traced Value, got {x!r}")
    spec = ",".join(term(s, f"the sublist of operand {i}") for i, s in enumerate(terms))
    if out is None:  # numpy's implicit output: the indices used once, in increasing order
        used = [i for s in terms for i in s]
        out = sorted(i for i in set(used) if used.count(i) == 1)
    spec += "->" + term(out, "the output sublist")
    return builder.einsum(spec, *operands)


# elementwise ------------------------------------------------------------------------------

def _unary(name: str, doc: str) -> Any:
    def f(x: Any) -> Value:
        return getattr(_value(f"accy.{name}", x), name)()
    f.__name__ = f.__qualname__ = name
    f.__doc__ = doc
    return f


exp = _unary("exp", "e to the power x, elementwise.")
log = _unary("log", "The natural logarithm, elementwise.")
sqrt = _unary("sqrt", "The square root, elementwise.")
rsqrt = _unary("rsqrt", "1 / sqrt(x), elementwise.")
sin = _unary("sin", "The sine, elementwise.")
cos = _unary("cos", "The cosine, elementwise.")
reciprocal = _unary("reciprocal", "1 / x, elementwise.")
floor = _unary("floor", "Rounding down, elementwise.")
ceil = _unary("ceil", "Rounding up, elementwise.")
erf = _unary("erf", "The error function, elementwise.")
relu = _unary("relu", "max(x, 0), elementwise.")
sigmoid = _unary("sigmoid", "1 / (1 + exp(-x)), elementwise.")
tanh = _unary("tanh", "The hyperbolic tangent, elementwise.")


def abs(x: Any) -> Value:  # noqa: A001  (numpy's name)
    """|x|, elementwise."""
    return builtins.abs(_value("accy.abs", x))


def gelu(x: Any, approximate: str = "none") -> Value:
    """GELU, ``x * Phi(x)``: the exact form with the error function (``approximate="none"``)
    or the tanh approximation ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``
    (``approximate="tanh"``), as ONNX's Gelu and torch name them."""
    return _value("accy.gelu", x).gelu(approximate=approximate)


def astype(x: Any, dtype: DType) -> Value:
    """``x`` converted to ``dtype`` (the cast op)."""
    return _value("accy.astype", x).astype(dtype)


# reductions, rowwise, movement, contraction --------------------------------------------------

def _axes(what: str, axes: Any, axis: Any) -> Any:
    if axis is not None and axes is not None:
        raise BuilderError(f"{what}: give axes or numpy's axis=, not both")
    return axes if axis is None else axis


def sum(x: Any, axes: Any = None, keepdims: bool = False, *,  # noqa: A001
        axis: Any = None) -> Value:
    """The sum over ``axes`` (an int, a list, or None for all; ``axis=`` as numpy spells it)."""
    return _value("accy.sum", x).sum(_axes("accy.sum", axes, axis), keepdims)


def mean(x: Any, axes: Any = None, keepdims: bool = False, *, axis: Any = None) -> Value:
    """The mean over ``axes`` (an int, a list, or None for all; or ``axis=``)."""
    return _value("accy.mean", x).mean(_axes("accy.mean", axes, axis), keepdims)


def max(x: Any, axes: Any = None, keepdims: bool = False, *,  # noqa: A001
        axis: Any = None) -> Value:
    """The largest element over ``axes`` (or ``axis=``): a reduction, like ``numpy.max``; the
    elementwise maximum of two tensors is :func:`maximum`."""
    return _value("accy.max", x).max(_axes("accy.max", axes, axis), keepdims)


def softmax(x: Any, axis: int = -1) -> Value:
    """exp(x) / sum(exp(x)) along ``axis``, computed stably."""
    return _value("accy.softmax", x).softmax(axis)


def log_softmax(x: Any, axis: int = -1) -> Value:
    """x - log(sum(exp(x))) along ``axis``, computed stably."""
    return _value("accy.log_softmax", x).log_softmax(axis)


def reshape(x: Any, shape: int | Sequence[int]) -> Value:
    """``x`` with the same elements in row-major order and shape ``shape``."""
    return _value("accy.reshape", x).reshape(shape)


def transpose(x: Any, perm: Sequence[int] | None = None) -> Value:
    """``x`` with its axes permuted (reversed when ``perm`` is None), as numpy's."""
    v = _value("accy.transpose", x)
    return v.transpose() if perm is None else v.transpose(perm)


def broadcast_to(x: Any, shape: int | Sequence[int]) -> Value:
    """``x`` broadcast to ``shape`` (numpy's rules)."""
    return _value("accy.broadcast_to", x).broadcast_to(shape)


def matmul(a: Value, b: Value) -> Value:
    """``a @ b``: the matrix product of two operands of one rank >= 2 (leading axes are
    batch axes); an einsum."""
    return _value("accy.matmul", a) @ _value("accy.matmul", b)
