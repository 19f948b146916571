"""The numpy reference interpreter: what every op of ``accy.ir.ops`` means.

``interpret(program, inputs)`` evaluates one function of a program on numpy arrays. Each
node is evaluated once (memoized by identity), in ``Function.nodes()`` order without
recursion, so chains of many thousands of nodes are fine; values are dropped once their last
user has run.

Semantics worth spelling out:

* Binary, compare, logical and select ops use numpy broadcasting.
* ``div`` is true division for floats and C-style division truncating toward zero for ints
  (``-7 / 2 == -3``); an integer division by zero raises ``InterpretError``. Int arithmetic
  wraps around like the hardware does.
* ``max``/``min`` are ``np.maximum``/``np.minimum`` (a NaN operand gives NaN); ``relu`` is
  ``max(x, 0)``; ``rsqrt`` is ``1/sqrt(x)``; ``sigmoid`` is ``1/(1+exp(-x))`` computed
  stably; ``gelu`` is the exact ``0.5*x*(1+erf(x/sqrt(2)))`` and ``gelu_tanh`` its tanh
  approximation ``0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x^3)))`` (both computed in f64,
  rounded to the input dtype).
* ``reduce_max`` over an empty axis gives the dtype's lowest value (``-inf`` for floats);
  ``reduce_mean`` over an empty axis gives NaN.
* ``einsum`` contracts pairwise in the order ``opt_einsum.contract`` finds (numpy/BLAS
  kernels in the operands' dtype), so large tensor networks finish in reasonable time.
* ``gather`` is ``np.take(x, indices, axis)``; ``scatter_add`` adds ``updates`` (shape
  ``x.shape[:axis] + indices.shape + x.shape[axis+1:]``) into a copy of ``x`` with
  ``np.add.at``, so repeated indices accumulate. Indices outside ``[0, size)`` (negative
  ones included) raise ``InterpretError``; so do ``cross_entropy`` labels outside
  ``[0, classes)``.
* ``softmax``/``log_softmax`` subtract the row maximum first; ``cross_entropy(logits[..., C],
  labels[...])`` is the mean over all label positions of ``-log_softmax(logits)[..., label]``,
  a 0-d array of the logits dtype (NaN when there are no labels).
* ``conv2d`` (NCHW input, OIHW weights, ``pads`` [top, left, bottom, right]) gathers every
  window (im2col) and contracts it with one einsum in float64; ``max_pool2d`` pads with
  ``-inf`` (pads never win), ``avg_pool2d`` divides by the window size
  (``count_include_pad``) or by the number of input elements in the window (ONNX's default);
  ``pad`` is ``np.pad`` with the scalar operand as the constant.

``precision="native"`` computes every op in the program's dtypes and returns arrays of the
result types' dtypes. ``precision="float64"`` computes every float value in float64
(constants and float inputs are widened, casts to a float dtype give float64) and returns
float64 arrays for float results; int and bool values keep their dtypes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import opt_einsum

from accy.errors import InterpretError
from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.printer import format_name
from accy.ir.program import Function, Program
from accy.ir.types import DType, TensorType

__all__ = ["function_inputs", "interpret", "Precision"]

Precision = Literal["native", "float64"]
_Impl = Callable[[Node, list[np.ndarray]], np.ndarray]
_ERF = np.frompyfunc(math.erf, 1, 1)


def interpret(
    program: Program,
    inputs: Sequence[Any] | Mapping[str, Any],
    function: str | None = None,
    precision: Precision = "native",
) -> tuple[np.ndarray, ...]:
    """Evaluate ``function`` (default: the only one) of ``program`` on ``inputs``.

    ``inputs`` take the forms ``accy.testing`` takes (:func:`function_inputs`): the
    parameters' arrays in order, a mapping from parameter name to array, or a mapping from
    function name to either (as ``accy.testing.inputs_for`` draws). Numpy arrays must match the
    parameter's shape and dtype exactly; Python scalars and (nested) lists are converted with
    ``np.asarray(x, dtype=param dtype)`` when their shape matches and the conversion keeps
    their kind (no floats for an int parameter). Returns one array per result (0-d arrays
    for scalars).
    """
    if precision not in ("native", "float64"):
        raise InterpretError(f"unknown precision {precision!r}; valid: 'native', 'float64'")
    try:
        fn = program.function(function)
    except KeyError as e:
        raise InterpretError(str(e.args[0])) from None
    wide = precision == "float64"
    args = _check_inputs(fn, function_inputs(program, inputs, fn.name))
    values: dict[Node, np.ndarray] = {}
    for p, arg in zip(fn.params, args, strict=True):
        values[p] = arg.astype(np.float64) if wide and p.type.dtype.is_float else arg
    nodes = fn.nodes()
    uses: dict[Node, int] = {}
    for node in nodes:
        for s in node.srcs:
            uses[s] = uses.get(s, 0) + 1
    keep = set(fn.results)
    with np.errstate(all="ignore"):
        for node in nodes:
            if node in values:
                continue
            if node.op is Op.PARAM:
                raise InterpretError(
                    f"function {fn.name}: parameter node #{node.attr('index')} of type "
                    f"{node.type} is not among its parameters"
                )
            want = _compute_dtype(node.type, wide)
            try:
                out = np.asarray(_IMPLS[node.op](node, [values[s] for s in node.srcs]))
            except InterpretError:
                raise
            except (ValueError, TypeError, IndexError) as e:  # malformed node (bad einsum, ...)
                raise InterpretError(f"{node.op.value} ({node!r}): {e}") from None
            if out.dtype != want:
                out = out.astype(want)
            if out.shape != node.type.shape:
                raise InterpretError(f"{node.op.value} produced shape {list(out.shape)} but its "
                                     f"type is {node.type}")
            values[node] = out
            for s in node.srcs:
                uses[s] -= 1
                if uses[s] == 0 and s not in keep:
                    del values[s]
    return tuple(np.array(values[r], copy=True) for r in fn.results)


def _compute_dtype(t: TensorType, wide: bool) -> np.dtype:
    return np.dtype(np.float64) if wide and t.dtype.is_float else t.dtype.numpy


# ---- input checking ---------------------------------------------------------------------


def function_inputs(program: Program, inputs: Sequence[Any] | Mapping[str, Any],
                    function: str | None = None) -> Sequence[Any] | Mapping[str, Any]:
    """The inputs of ``function`` (default: the only one) among ``inputs``, in one of the
    forms every input-taking function of accy accepts:

    * a sequence: the function's arrays in parameter order;
    * a mapping from parameter name to array;
    * a mapping from function name to either of the above (several functions at once).

    A mapping whose keys are exactly the function's parameter names is by parameter (so a
    parameter named like a function wins); else one whose keys all name functions is by
    function. Nothing is converted or checked here beyond picking the function's entry.
    """
    fn = program.function(function)
    if isinstance(inputs, Mapping) and set(inputs) != set(fn.param_names):
        names = {f.name for f in program.functions}
        if inputs and set(inputs) <= names:
            if fn.name not in inputs:
                raise InterpretError(f"inputs by function name have none for function "
                                     f"{fn.name} (given: {sorted(inputs)})")
            return inputs[fn.name]
    return inputs


def _check_inputs(fn: Function, inputs: Sequence[Any] | Mapping[str, Any]) -> list[np.ndarray]:
    names = list(fn.param_names)
    if isinstance(inputs, Mapping):
        missing = [n for n in names if n not in inputs]
        unknown = [k for k in inputs if k not in names]
        if missing or unknown:
            raise InterpretError(
                f"function {fn.name}: inputs by name must be exactly its parameters {names}; "
                f"missing {missing}, unknown {unknown}"
            )
        given = [inputs[n] for n in names]
    else:
        if isinstance(inputs, np.ndarray | str | bytes) or not isinstance(inputs, Sequence):
            raise InterpretError(
                f"function {fn.name}: inputs must be a sequence of arrays or a mapping from "
                f"parameter names to arrays, got {type(inputs).__name__}"
            )
        given = list(inputs)
        if len(given) != len(names):
            raise InterpretError(f"function {fn.name} takes {len(names)} inputs "
                                 f"({', '.join(names)}), got {len(given)}")
    return [_check_input(fn, i, x) for i, x in enumerate(given)]


def _check_input(fn: Function, i: int, x: Any) -> np.ndarray:
    want = fn.params[i].type
    np_dtype = want.dtype.numpy
    where = f"function {fn.name}: parameter {format_name('%', fn.param_names[i])} expects {want}"
    if isinstance(x, np.ndarray | np.generic):
        arr = np.asarray(x)
        if arr.dtype != np_dtype or arr.shape != want.shape:
            raise InterpretError(f"{where}, got {_describe(arr)}")
        return arr
    try:
        probe = np.asarray(x)
    except (ValueError, TypeError, OverflowError) as e:
        raise InterpretError(f"{where}, got {type(x).__name__}, not an array ({e})") from None
    if probe.dtype == object or probe.shape != want.shape:
        raise InterpretError(f"{where}, got {type(x).__name__} converting to {_describe(probe)}")
    if not np.can_cast(probe.dtype, np_dtype, casting="same_kind"):
        raise InterpretError(f"{where}, got {type(x).__name__} of {probe.dtype} values "
                             f"that do not convert to {want.dtype.value} without changing kind")
    try:
        return np.asarray(x, dtype=np_dtype)
    except (ValueError, TypeError, OverflowError) as e:
        raise InterpretError(f"{where}, got values that do not fit ({e})") from None


def _describe(arr: np.ndarray) -> str:
    try:
        return str(TensorType(arr.shape, DType.from_numpy(arr.dtype)))
    except ValueError:
        return f"an array of numpy dtype {arr.dtype} and shape {list(arr.shape)}"


# ---- op implementations -----------------------------------------------------------------


def _unary(f: Callable[[np.ndarray], np.ndarray]) -> _Impl:
    return lambda node, xs: f(xs[0])


def _binary(f: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> _Impl:
    return lambda node, xs: f(xs[0], xs[1])


def _gelu(x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    erf = np.asarray(_ERF(x64 / math.sqrt(2.0)), dtype=np.float64)
    out = 0.5 * x64 * (1.0 + erf)
    return np.where(np.isneginf(x64), 0.0, out).astype(x.dtype)


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    out = 0.5 * x64 * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x64 + 0.044715 * x64 ** 3)))
    return np.where(np.isneginf(x64), 0.0, out).astype(x.dtype)


def _erf(x: np.ndarray) -> np.ndarray:
    return np.asarray(_ERF(x.astype(np.float64)), dtype=np.float64).astype(x.dtype)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """Stable sigmoid in the tensor's dtype; f16 in f64, rounded once (as gelu)."""
    w = x.astype(np.float64) if x.dtype == np.float16 else x
    z = np.exp(-np.abs(w))  # in (0, 1]: never overflows
    one = w.dtype.type(1)
    return np.where(w >= 0, one / (one + z), z / (one + z)).astype(x.dtype)


def _div(node: Node, xs: list[np.ndarray]) -> np.ndarray:
    a, b = xs
    if a.dtype.kind == "f":
        return np.true_divide(a, b)
    if np.any(np.broadcast_to(b, node.type.shape) == 0):
        raise InterpretError(f"div: integer division by zero ({node!r})")
    q = np.floor_divide(a, b)
    return q + ((np.remainder(a, b) != 0) & ((a < 0) != (b < 0))).astype(q.dtype)


def _axes(node: Node, x: np.ndarray) -> tuple[int, ...]:
    return tuple(a for a in node.attr("axes") if a < x.ndim)


def _reduce_sum(node: Node, xs: list[np.ndarray]) -> np.ndarray:
    (x,) = xs
    return np.sum(x, axis=_axes(node, x), keepdims=node.attr("keepdims"), dtype=x.dtype)


def _reduce_max(node: Node, xs: list[np.ndarray]) -> np.ndarray:
    (x,) = xs
    lowest = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    return np.max(x, axis=_axes(node, x), keepdims=node.attr("keepdims"), initial=lowest)


def _reduce_mean(node: Node, xs: list[np.ndarray]) -> np.ndarray:
    (x,) = xs
    axes = _axes(node, x)
    count = math.prod(x.shape[a] for a in axes)
    total = np.sum(x, axis=axes, keepdims=node.attr("keepdims"), dtype=x.dtype)
    return total / x.dtype.type(count) if count else np.full_like(total, np.nan)


def _einsum(node: Node, xs: list[np.ndarray]) -> np.ndarray:
    # opt_einsum searches a pairwise order without numpy's memory cap, which makes
    # np.einsum(optimize=True) fall back to one naive loop over every letter of a network
    return opt_einsum.contract(node.attr("spec"), *xs)


def _slice(node: Node, xs: list[np.ndarray]) -> np.ndarray:
    spans = zip(node.attr("starts"), node.attr("stops"), node.attr("steps"), strict=True)
    return xs[0][tuple(slice(a, b, s) for a, b, s in spans)]


def _check_indices(node: Node, idx: np.ndarray, size: int, what: str = "index") -> None:
    bad = (idx < 0) | (idx >= size)
    if np.any(bad):
        at = tuple(int(i) for i in np.argwhere(bad)[0])
        raise InterpretError(f"{node.op.value}: {what} {int(idx[at])} at position {list(at)} is "
                             f"out of range [0, {size})")


def _gather(node: Node, xs: list[np.ndarray]) -> np.ndarray:
    x, idx = xs
    axis = node.attr("axis")
    if x.ndim == 0:
        raise InterpretError(f"gather: cannot gather along axis {axis} of a rank-0 tensor")
    _check_indices(node, idx, x.shape[axis])
    return np.take(x, idx, axis=axis)


def _scatter_add(node: Node, xs: list[np.ndarray]) -> np.ndarray:
    x, idx, upd = xs
    axis = node.attr("axis")
    if x.ndim == 0:
        raise InterpretError(f"scatter_add: cannot scatter along axis {axis} of a rank-0 tensor")
    _check_indices(node, idx, x.shape[axis])
    out = x.copy()
    np.add.at(out, (slice(None),) * axis + (idx,), upd)
    return out


def _shifted(x: np.ndarray, axis: int) -> np.ndarray:
    m = np.max(x, axis=axis, keepdims=True, initial=-np.inf)
    return x - np.where(np.isfinite(m), m, 0).astype(x.dtype)


def _softmax(node: Node, xs: list[np.ndarray]) -> np.ndarray:
    axis = node.attr("axis")
    e = np.exp(_shifted(xs[0], axis))
    return e / np.sum(e, axis=axis, keepdims=True)


def _log_softmax_along(x: np.ndarray, axis: int) -> np.ndarray:
    s = _shifted(x, axis)
    return s - np.log(np.sum(np.exp(s), axis=axis, keepdims=True))


def _cross_entropy(node: Node, xs: list[np.ndarray]) -> np.ndarray:
    logits, labels = xs
    _check_indices(node, labels, logits.shape[-1], "label")
    ls = _log_softmax_along(logits, -1)
    picked = np.take_along_axis(ls, labels[..., None].astype(np.intp), axis=-1)[..., 0]
    if labels.size == 0:
        return np.asarray(np.nan, dtype=logits.dtype)
    total = np.sum(picked, dtype=logits.dtype)
    return np.asarray(-total / logits.dtype.type(labels.size), dtype=logits.dtype)


def _windows(node: Node, x: np.ndarray, kernel, dilations, fill: float) -> np.ndarray:
    """[N, C, KH, KW, OH, OW]: every window element of ``x`` (padded with ``fill``)."""
    top, left, bottom, right = node.attr("pads")
    xp = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=fill)
    (sh, sw), (dh, dw) = node.attr("strides"), dilations
    oh, ow = node.type.shape[2:]
    return np.stack([np.stack([
        xp[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh, j * dw: j * dw + sw * (ow - 1) + 1: sw]
        for j in range(kernel[1])], axis=2) for i in range(kernel[0])], axis=2)


def _conv2d(node: Node, xs: list[np.ndarray]) -> np.ndarray:
    x, w = (a.astype(np.float64) for a in xs)  # im2col and one einsum, in float64
    g = node.attr("groups")
    cols = _windows(node, x, w.shape[2:], node.attr("dilations"), 0.0)
    n, c, kh, kw, oh, ow = cols.shape
    cols = cols.reshape(n, g, c // g, kh, kw, oh, ow)
    wg = w.reshape(g, w.shape[0] // g, c // g, kh, kw)
    out = np.einsum("ngcijhw,gocij->ngohw", cols, wg, optimize=True)
    return out.reshape(node.type.shape)


def _pool2d(node: Node, xs: list[np.ndarray]) -> np.ndarray:
    (x,) = xs
    kernel = node.attr("kernel")
    if node.op is Op.MAX_POOL2D:
        return _windows(node, x, kernel, (1, 1), -np.inf).max(axis=(2, 3))
    total = _windows(node, x, kernel, (1, 1), 0.0).sum(axis=(2, 3))
    if node.attr("count_include_pad"):
        return total / x.dtype.type(kernel[0] * kernel[1])
    ones = np.ones((1, 1) + x.shape[2:], dtype=x.dtype)
    return total / _windows(node, ones, kernel, (1, 1), 0.0).sum(axis=(2, 3))


def _pad(node: Node, xs: list[np.ndarray]) -> np.ndarray:
    x, value = xs
    pads, r = node.attr("pads"), x.ndim
    return np.pad(x, [(pads[i], pads[r + i]) for i in range(r)], constant_values=value)


_IMPLS: dict[Op, _Impl] = {
    Op.NEG: _unary(np.negative),
    Op.ABS: _unary(np.abs),
    Op.EXP: _unary(np.exp),
    Op.LOG: _unary(np.log),
    Op.SQRT: _unary(np.sqrt),
    Op.RSQRT: _unary(lambda x: np.reciprocal(np.sqrt(x))),
    Op.SIN: _unary(np.sin),
    Op.COS: _unary(np.cos),
    Op.RECIPROCAL: _unary(np.reciprocal),
    Op.FLOOR: _unary(np.floor),
    Op.CEIL: _unary(np.ceil),
    Op.RELU: _unary(lambda x: np.maximum(x, x.dtype.type(0))),
    Op.ERF: _unary(_erf),
    Op.GELU: _unary(_gelu),
    Op.GELU_TANH: _unary(_gelu_tanh),
    Op.SIGMOID: _unary(_sigmoid),
    Op.TANH: _unary(np.tanh),
    Op.ADD: _binary(np.add),
    Op.SUB: _binary(np.subtract),
    Op.MUL: _binary(np.multiply),
    Op.DIV: _div,
    Op.MAX: _binary(np.maximum),
    Op.MIN: _binary(np.minimum),
    Op.POW: _binary(np.power),
    Op.EQ: _binary(np.equal),
    Op.NE: _binary(np.not_equal),
    Op.LT: _binary(np.less),
    Op.LE: _binary(np.less_equal),
    Op.GT: _binary(np.greater),
    Op.GE: _binary(np.greater_equal),
    Op.NOT: _unary(np.logical_not),
    Op.AND: _binary(np.logical_and),
    Op.OR: _binary(np.logical_or),
    Op.SELECT: lambda node, xs: np.where(xs[0], xs[1], xs[2]),
    Op.CAST: lambda node, xs: xs[0],  # the caller converts to the node's compute dtype
    Op.REDUCE_SUM: _reduce_sum,
    Op.REDUCE_MAX: _reduce_max,
    Op.REDUCE_MEAN: _reduce_mean,
    Op.EINSUM: _einsum,
    Op.RESHAPE: lambda node, xs: xs[0].reshape(node.type.shape),
    Op.TRANSPOSE: lambda node, xs: np.transpose(xs[0], node.attr("perm")),
    Op.BROADCAST: lambda node, xs: np.broadcast_to(xs[0], node.attr("shape")).copy(),
    Op.SLICE: _slice,
    Op.CONCAT: lambda node, xs: np.concatenate(xs, axis=node.attr("axis")),
    Op.GATHER: _gather,
    Op.SCATTER_ADD: _scatter_add,
    Op.SOFTMAX: _softmax,
    Op.LOG_SOFTMAX: lambda node, xs: _log_softmax_along(xs[0], node.attr("axis")),
    Op.CROSS_ENTROPY: _cross_entropy,
    Op.CONV2D: _conv2d,
    Op.MAX_POOL2D: _pool2d,
    Op.AVG_POOL2D: _pool2d,
    Op.PAD: _pad,
    Op.CONSTANT: lambda node, xs: node.value,  # widened by the caller in float64 mode
}

assert set(_IMPLS) == set(Op) - {Op.PARAM}, "every op has an implementation"
