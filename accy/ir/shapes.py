"""Type inference: the result type of every op from its operand types and attributes.

``infer`` is the single source of shape and dtype rules: the builder calls it when an op is
built, ``verify`` calls it to re-check a program. Errors name the op and the operand types.
"""

from __future__ import annotations

from typing import Any

from accy.errors import ShapeError
from accy.ir.ops import Op, OpKind
from accy.ir.types import DType, TensorType

FLOAT_ONLY = frozenset({
    Op.EXP, Op.LOG, Op.SQRT, Op.RSQRT, Op.SIN, Op.COS, Op.RECIPROCAL, Op.FLOOR, Op.CEIL, Op.ERF,
    Op.GELU, Op.GELU_TANH, Op.SIGMOID, Op.TANH, Op.POW,
})


def _fail(op: Op, srcs: tuple[TensorType, ...], why: str) -> ShapeError:
    operands = ", ".join(str(t) for t in srcs) or "no operands"
    return ShapeError(f"{op.value}({operands}): {why}")


def broadcast_shapes(op: Op, srcs: tuple[TensorType, ...]) -> tuple[int, ...]:
    rank = max(t.rank for t in srcs)
    out: list[int] = []
    for axis in range(rank):
        dims = {t.shape[axis - rank + t.rank] for t in srcs if axis - rank + t.rank >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise _fail(op, srcs, f"shapes do not broadcast (sizes {sorted(dims)} meet in "
                                  f"dimension {axis} of the result)")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def _axis(op: Op, srcs: tuple[TensorType, ...], axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise _fail(op, srcs, f"axis {axis} is out of range for rank {rank}")
    return axis % rank


def parse_einsum(spec: str, ranks: list[int]) -> tuple[list[str], str]:
    """Split an einsum spec into input terms and the output term (implicit output allowed)."""
    spec = spec.replace(" ", "")
    if "..." in spec:
        raise ValueError("ellipsis ('...') is not supported; spell the letters out")
    lhs, arrow, out = spec.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ValueError(f"spec has {len(terms)} operand terms for {len(ranks)} operands")
    for t in [*terms, out]:
        # ASCII letters, or any non-ASCII character: opt_einsum.get_symbol's scheme for
        # indices past the 52 letters (accy.contraction.cost.is_index_symbol)
        bad = [c for c in t if c.isascii() and not c.isalpha()]
        if bad:
            raise ValueError(f"term {t!r} has characters that are not letters: {bad}")
    for i, (t, r) in enumerate(zip(terms, ranks, strict=True)):
        if len(t) != r:
            raise ValueError(f"term {t!r} has {len(t)} letters but operand {i} has rank {r}")
    if not arrow:
        counts: dict[str, int] = {}
        for c in "".join(terms):
            counts[c] = counts.get(c, 0) + 1
        out = "".join(sorted(c for c, n in counts.items() if n == 1))
    if len(set(out)) != len(out):
        raise ValueError(f"output term {out!r} repeats a letter")
    unknown = [c for c in out if c not in "".join(terms)]
    if unknown:
        raise ValueError(f"output letters {unknown} appear in no input term")
    return terms, out


def infer(op: Op, srcs: tuple[TensorType, ...], attrs: dict[str, Any]) -> tuple[TensorType, dict]:
    """Result type and normalized attributes of ``op`` over operands of types ``srcs``."""
    arity = op.arity
    if arity is not None and len(srcs) != arity:
        raise _fail(op, srcs, f"takes {arity} operands, got {len(srcs)}")
    kind = op.kind
    if kind in (OpKind.UNARY, OpKind.BINARY, OpKind.COMPARE, OpKind.LOGICAL, OpKind.SELECT):
        return _infer_elementwise(op, srcs), attrs
    handler = _HANDLERS.get(op)
    if handler is None:
        raise _fail(op, srcs, "has no type rule (sources are made by the builder)")
    return handler(op, srcs, dict(attrs))


def _infer_elementwise(op: Op, srcs: tuple[TensorType, ...]) -> TensorType:
    kind = op.kind
    if kind is OpKind.SELECT:
        cond, a, b = srcs
        if cond.dtype is not DType.bool:
            raise _fail(op, srcs, f"condition must be bool, got {cond.dtype.value}")
        if a.dtype is not b.dtype:
            raise _fail(op, srcs, f"branches differ in dtype ({a.dtype.value} vs {b.dtype.value})")
        return TensorType(broadcast_shapes(op, srcs), a.dtype)
    dtypes = {t.dtype for t in srcs}
    if len(dtypes) > 1:
        raise _fail(op, srcs, "operand dtypes differ (cast one operand first)")
    dtype = srcs[0].dtype
    if kind is OpKind.LOGICAL and dtype is not DType.bool:
        raise _fail(op, srcs, f"needs bool operands, got {dtype.value}")
    if kind in (OpKind.UNARY, OpKind.BINARY) and dtype is DType.bool:
        raise _fail(op, srcs, "does not take bool operands")
    if op in FLOAT_ONLY and not dtype.is_float:
        raise _fail(op, srcs, f"needs float operands, got {dtype.value}")
    if kind is OpKind.COMPARE and op not in (Op.EQ, Op.NE) and dtype is DType.bool:
        raise _fail(op, srcs, "ordering comparisons do not take bool operands")
    shape = broadcast_shapes(op, srcs)
    return TensorType(shape, DType.bool if kind is OpKind.COMPARE else dtype)


def _cast(op, srcs, attrs):
    dtype = attrs["dtype"]
    if not isinstance(dtype, DType):
        raise _fail(op, srcs, f"dtype must be a DType, got {dtype!r}")
    return srcs[0].with_dtype(dtype), attrs


def _reduce(op, srcs, attrs):
    (x,) = srcs
    if x.dtype is DType.bool:
        raise _fail(op, srcs, "does not take bool operands")
    if op is Op.REDUCE_MEAN and not x.dtype.is_float:
        raise _fail(op, srcs, f"needs a float operand, got {x.dtype.value}")
    axes = attrs.get("axes")
    axes = tuple(range(x.rank)) if axes is None else tuple(axes)
    norm = sorted({_axis(op, srcs, a, x.rank) for a in axes})
    if len(norm) != len(axes):
        raise _fail(op, srcs, f"axes {list(axes)} repeat an axis")
    keep = bool(attrs.get("keepdims", False))
    shape = tuple(
        (1 if keep else None) if i in norm else d for i, d in enumerate(x.shape)
    )
    out = tuple(d for d in shape if d is not None)
    return TensorType(out, x.dtype), {"axes": tuple(norm), "keepdims": keep}


def _einsum(op, srcs, attrs):
    if not srcs:
        raise _fail(op, srcs, "needs at least one operand")
    spec = attrs["spec"]
    try:
        terms, out = parse_einsum(spec, [t.rank for t in srcs])
    except ValueError as e:
        raise _fail(op, srcs, f"spec {spec!r}: {e}") from None
    dtypes = {t.dtype for t in srcs}
    if len(dtypes) > 1 or srcs[0].dtype is DType.bool:
        raise _fail(op, srcs, "operands must share one numeric dtype")
    sizes: dict[str, int] = {}
    for term, t in zip(terms, srcs, strict=True):
        for c, d in zip(term, t.shape, strict=True):
            if sizes.setdefault(c, d) != d:
                raise _fail(op, srcs, f"spec {spec!r}: letter {c!r} has size {sizes[c]} "
                                      f"in one place and {d} in another")
    canonical = ",".join(terms) + "->" + out
    return TensorType(tuple(sizes[c] for c in out), srcs[0].dtype), {"spec": canonical}


def _reshape(op, srcs, attrs):
    (x,) = srcs
    shape = list(attrs["shape"])
    if any(d < -1 for d in shape):
        raise _fail(op, srcs, f"shape {shape} has a negative dimension")
    if shape.count(-1) > 1:
        raise _fail(op, srcs, f"shape {shape} has more than one -1")
    if -1 in shape:
        known = 1
        for d in shape:
            if d != -1:
                known *= d
        if known == 0 or x.size % known:
            raise _fail(op, srcs, f"cannot infer the -1 in {shape} for {x.size} elements")
        shape[shape.index(-1)] = x.size // known
    t = TensorType(tuple(shape), x.dtype)
    if t.size != x.size:
        raise _fail(op, srcs, f"cannot reshape {x.size} elements to {list(t.shape)}")
    return t, {"shape": t.shape}


def _transpose(op, srcs, attrs):
    (x,) = srcs
    perm = tuple(attrs["perm"])
    if sorted(perm) != list(range(x.rank)):
        raise _fail(op, srcs, f"perm {list(perm)} is not a permutation of 0..{x.rank - 1}")
    return TensorType(tuple(x.shape[p] for p in perm), x.dtype), {"perm": perm}


def _broadcast(op, srcs, attrs):
    (x,) = srcs
    shape = tuple(attrs["shape"])
    if any(d < 0 for d in shape):
        raise _fail(op, srcs, f"target shape {list(shape)} has a negative dimension")
    if len(shape) < x.rank:
        raise _fail(op, srcs, f"target shape {list(shape)} has lower rank than the operand")
    for d, s in zip(reversed(x.shape), reversed(shape), strict=False):
        if d not in (1, s):
            raise _fail(op, srcs, f"cannot broadcast to {list(shape)}")
    return TensorType(shape, x.dtype), {"shape": shape}


def _slice(op, srcs, attrs):
    (x,) = srcs
    starts, stops, steps = (tuple(attrs[k]) for k in ("starts", "stops", "steps"))
    if not len(starts) == len(stops) == len(steps) == x.rank:
        raise _fail(op, srcs, "starts, stops and steps need one entry per dimension")
    out, ns, ne = [], [], []
    for d, a, b, s in zip(x.shape, starts, stops, steps, strict=True):
        if s <= 0:
            raise _fail(op, srcs, f"steps must be positive, got {list(steps)}")
        a, b, _ = slice(a, b, s).indices(d)
        out.append(len(range(a, b, s)))
        ns.append(a)
        ne.append(max(b, a))
    attrs = {"starts": tuple(ns), "stops": tuple(ne), "steps": steps}
    return TensorType(tuple(out), x.dtype), attrs


def _concat(op, srcs, attrs):
    if not srcs:
        raise _fail(op, srcs, "needs at least one operand")
    first = srcs[0]
    axis = _axis(op, srcs, attrs["axis"], first.rank)
    for t in srcs:
        if t.dtype is not first.dtype or t.rank != first.rank or any(
            a != b for i, (a, b) in enumerate(zip(t.shape, first.shape, strict=True)) if i != axis
        ):
            raise _fail(op, srcs, f"operands must agree in dtype and in every dimension but {axis}")
    shape = list(first.shape)
    shape[axis] = sum(t.shape[axis] for t in srcs)
    return TensorType(tuple(shape), first.dtype), {"axis": axis}


def _gather(op, srcs, attrs):
    x, idx = srcs
    if not idx.dtype.is_int:
        raise _fail(op, srcs, f"indices must be i32 or i64, got {idx.dtype.value}")
    axis = _axis(op, srcs, attrs["axis"], x.rank)
    shape = x.shape[:axis] + idx.shape + x.shape[axis + 1:]
    return TensorType(shape, x.dtype), {"axis": axis}


def _scatter_add(op, srcs, attrs):
    x, idx, upd = srcs
    if not idx.dtype.is_int:
        raise _fail(op, srcs, f"indices must be i32 or i64, got {idx.dtype.value}")
    if x.dtype is DType.bool or upd.dtype is not x.dtype:
        raise _fail(op, srcs, "updates must have the (numeric) dtype of the target")
    axis = _axis(op, srcs, attrs["axis"], x.rank)
    want = x.shape[:axis] + idx.shape + x.shape[axis + 1:]
    if upd.shape != want:
        raise _fail(op, srcs, f"updates must have shape {list(want)}")
    return x, {"axis": axis}


def _rowwise(op, srcs, attrs):
    (x,) = srcs
    if not x.dtype.is_float:
        raise _fail(op, srcs, f"needs a float operand, got {x.dtype.value}")
    if x.rank == 0:
        raise _fail(op, srcs, "needs an operand of rank >= 1")
    return x, {"axis": _axis(op, srcs, attrs["axis"], x.rank)}


def _cross_entropy(op, srcs, attrs):
    logits, labels = srcs
    if not logits.dtype.is_float or logits.rank < 1:
        raise _fail(op, srcs, "logits must be a float tensor of rank >= 1 (classes last)")
    if not labels.dtype.is_int:
        raise _fail(op, srcs, f"labels must be i32 or i64, got {labels.dtype.value}")
    if labels.shape != logits.shape[:-1]:
        raise _fail(op, srcs, f"labels must have shape {list(logits.shape[:-1])}")
    return TensorType((), logits.dtype), {}


# ---- sliding windows (NCHW; pads [top, left, bottom, right]) --------------------------------


def _pairs(op, srcs, attrs, name, n, default, least):
    value = tuple(attrs.get(name, default))
    if len(value) != n or any(v < least for v in value):
        raise _fail(op, srcs, f"{name} must be {n} integers >= {least}, got {list(value)}")
    return value


def window_out(size: int, kernel: int, stride: int, before: int, after: int,
               dilation: int = 1) -> int:
    """Output length of one spatial dimension (floor mode, as ONNX's ceil_mode=0)."""
    return (size + before + after - dilation * (kernel - 1) - 1) // stride + 1


def _spatial(op, srcs, x, kernel, strides, pads, dilations):
    out = []
    for i in range(2):
        o = window_out(x.shape[2 + i], kernel[i], strides[i], pads[i], pads[2 + i],
                       dilations[i])
        if o < 1:
            raise _fail(op, srcs, f"the window (kernel {list(kernel)}, dilations "
                                  f"{list(dilations)}) does not fit the padded input")
        out.append(o)
    return tuple(out)


def _conv2d(op, srcs, attrs):
    x, w = srcs
    if x.rank != 4 or w.rank != 4:
        raise _fail(op, srcs, "needs an input [N, C, H, W] and weights [O, C/groups, KH, KW]")
    if not x.dtype.is_float or w.dtype is not x.dtype:
        raise _fail(op, srcs, "input and weights must share one float dtype")
    strides = _pairs(op, srcs, attrs, "strides", 2, (1, 1), 1)
    pads = _pairs(op, srcs, attrs, "pads", 4, (0, 0, 0, 0), 0)
    dilations = _pairs(op, srcs, attrs, "dilations", 2, (1, 1), 1)
    groups = attrs.get("groups", 1)
    n, c = x.shape[:2]
    o, cg, kh, kw = w.shape
    if groups < 1 or c % groups or o % groups or cg * groups != c:
        raise _fail(op, srcs, f"groups={groups} must divide the {c} input and {o} output "
                              f"channels, with weights of {c // max(groups, 1)} input channels")
    if kh < 1 or kw < 1:
        raise _fail(op, srcs, "the kernel must not be empty")
    oh, ow = _spatial(op, srcs, x, (kh, kw), strides, pads, dilations)
    attrs = {"strides": strides, "pads": pads, "dilations": dilations, "groups": groups}
    return TensorType((n, o, oh, ow), x.dtype), attrs


def _pool2d(op, srcs, attrs):
    (x,) = srcs
    if x.rank != 4 or not x.dtype.is_float:
        raise _fail(op, srcs, "needs a float input [N, C, H, W]")
    kernel = _pairs(op, srcs, attrs, "kernel", 2, (), 1)
    strides = _pairs(op, srcs, attrs, "strides", 2, kernel, 1)
    pads = _pairs(op, srcs, attrs, "pads", 4, (0, 0, 0, 0), 0)
    if any(p >= kernel[i % 2] for i, p in enumerate(pads)):
        raise _fail(op, srcs, f"pads {list(pads)} must be smaller than the kernel {list(kernel)}")
    oh, ow = _spatial(op, srcs, x, kernel, strides, pads, (1, 1))
    out = {"kernel": kernel, "strides": strides, "pads": pads}
    if op is Op.AVG_POOL2D:
        out["count_include_pad"] = bool(attrs.get("count_include_pad", False))
    return TensorType(x.shape[:2] + (oh, ow), x.dtype), out


def _pad(op, srcs, attrs):
    x, value = srcs
    if value.rank != 0 or value.dtype is not x.dtype:
        raise _fail(op, srcs, "the pad value must be a scalar of the input's dtype")
    pads = _pairs(op, srcs, attrs, "pads", 2 * x.rank, (0,) * (2 * x.rank), 0)
    shape = tuple(d + pads[i] + pads[x.rank + i] for i, d in enumerate(x.shape))
    return TensorType(shape, x.dtype), {"pads": pads}


_HANDLERS = {
    Op.CAST: _cast,
    Op.REDUCE_SUM: _reduce, Op.REDUCE_MAX: _reduce, Op.REDUCE_MEAN: _reduce,
    Op.EINSUM: _einsum,
    Op.RESHAPE: _reshape, Op.TRANSPOSE: _transpose, Op.BROADCAST: _broadcast,
    Op.SLICE: _slice, Op.CONCAT: _concat,
    Op.GATHER: _gather, Op.SCATTER_ADD: _scatter_add,
    Op.SOFTMAX: _rowwise, Op.LOG_SOFTMAX: _rowwise,
    Op.CROSS_ENTROPY: _cross_entropy,
    Op.CONV2D: _conv2d, Op.MAX_POOL2D: _pool2d, Op.AVG_POOL2D: _pool2d, Op.PAD: _pad,
}
