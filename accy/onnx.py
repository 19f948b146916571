"""ONNX import: ``accy.onnx.load(path_or_model) -> Program``.

The ``onnx`` package is optional (``pip install accy[onnx]``) and imported on first use.
One ONNX graph becomes one function ``main`` (or the graph's name when it is an identifier):
its inputs that are not initializers are the parameters, in order, with their static shapes
(every dimension must be a number: a symbolic or unknown one is an error naming the input);
its outputs are the results. Initializers are constants (``initializers="constants"``, the
default) or, with ``initializers="parameters"``, extra parameters after the inputs; integer
initializers stay constants either way (they are shapes, axes and indices, which the
importer must know). Values the importer must know at build time (Reshape's shape, Slice's
bounds, Split's sizes, Pow's exponent, ReduceMean's axes) must come from initializers or
``Constant`` nodes.

Supported (the default domain): Conv, Relu, Add, Sub, Mul, Div, MatMul, Gemm, Reshape,
Transpose, Concat, Split, Slice, MaxPool, AveragePool, GlobalAveragePool,
BatchNormalization (inference), Softmax, Tanh, Sigmoid, Gather, Erf, Gelu (opset 20; its
``approximate`` attribute picks gelu or gelu_tanh), Flatten, Constant,
Identity, Sqrt, Pow (constant exponent), ReduceMean, Squeeze, Unsqueeze, Cast. Anything
else is an :class:`OnnxImportError` naming the op, the node and the model's opset.
Batch normalization with constant statistics folds into one multiply and one add per
channel; Conv's bias is an add; pools in ceil mode, dilated pools and Gather with run-time
negative indices are not supported (negative constant indices are wrapped here).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import numpy as np

from accy import builder as B
from accy.errors import AccyError
from accy.ir.ops import Op
from accy.ir.program import Program
from accy.ir.types import DType, TensorType

__all__ = ["OnnxImportError", "SUPPORTED_OPS", "load"]


class OnnxImportError(AccyError, ValueError):
    """An ONNX model accy cannot import (the message says what and where)."""


def _onnx() -> Any:
    try:
        import onnx
    except ImportError:
        raise OnnxImportError("accy.onnx needs the onnx package: pip install 'accy[onnx]' "
                              "(or pip install onnx)") from None
    return onnx


_DTYPES = {1: DType.f32, 11: DType.f64, 10: DType.f16, 6: DType.i32, 7: DType.i64,
           9: DType.bool}  # onnx.TensorProto element types


def _dtype(elem: int, where: str) -> DType:
    if elem not in _DTYPES:
        raise OnnxImportError(f"{where}: element type {elem} is not supported "
                              f"(float, double, float16, int32, int64, bool)")
    return _DTYPES[elem]


def _identifier(name: str, taken: set[str]) -> str:
    base = re.sub(r"\W", "_", name) or "x"
    base = base if base[0].isalpha() or base[0] == "_" else "v_" + base
    out, i = base, 1
    while out in taken:
        out, i = f"{base}_{i}", i + 1
    taken.add(out)
    return out


Known = Any  # a builder Value, or a numpy array known at build time


class _Importer:
    def __init__(self, onnx: Any, model: Any, initializers: str) -> None:
        self.onnx, self.model, self.graph = onnx, model, model.graph
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
                          0)
        self.mode = initializers
        self.env: dict[str, Known] = {}
        self.fb: B.FunctionBuilder | None = None
        self.node: Any = None

    # ---- values ----------------------------------------------------------------------------

    def fail(self, why: str) -> OnnxImportError:
        n = self.node
        return OnnxImportError(f"ONNX {n.op_type} node {n.name!r} (opset {self.opset}): {why}")

    def value(self, name: str) -> B.Value:
        v = self.env[name]
        if isinstance(v, B.Value):
            return v
        return self.fb.constant(v, DType.from_numpy(v.dtype))

    def const(self, name: str, what: str) -> np.ndarray:
        v = self.env.get(name)
        if v is None or isinstance(v, B.Value):
            raise self.fail(f"{what} ({name!r}) must be a constant (an initializer or a "
                            f"Constant node)")
        return v

    def ints(self, name: str, what: str) -> list[int]:
        return [int(x) for x in self.const(name, what).reshape(-1)]

    def attrs(self) -> dict[str, Any]:
        return {a.name: self.onnx.helper.get_attribute_value(a) for a in self.node.attribute}

    def inputs(self) -> list[str]:
        return list(self.node.input)

    # ---- the graph -------------------------------------------------------------------------

    def run(self) -> Program:
        g = self.graph
        numpy_helper = self.onnx.numpy_helper
        inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
        taken: set[str] = set()
        params: list[tuple[str, TensorType]] = []
        for inp in g.input:
            if inp.name in inits:
                continue
            params.append((inp.name, self.input_type(inp)))
        as_params = [n for n, a in inits.items()
                     if self.mode == "parameters" and a.dtype.kind == "f"]
        for n in as_params:
            arr = inits[n]
            params.append((n, TensorType(arr.shape, DType.from_numpy(arr.dtype))))
        names = [_identifier(n, taken) for n, _ in params]
        fname = g.name if g.name.isidentifier() else "main"
        b = B.Builder()
        self.fb = b.begin_function(fname, [t for _, t in params], names)
        for i, (n, _) in enumerate(params):
            self.env[n] = self.fb.param(i)
        for n, arr in inits.items():
            self.env.setdefault(n, np.ascontiguousarray(arr))
        for node in g.node:
            self.node = node
            if node.domain not in ("", "ai.onnx"):
                raise self.fail(f"the domain {node.domain!r} is not supported")
            handler = _HANDLERS.get(node.op_type)
            if handler is None:
                raise self.fail(f"unsupported op; supported: {', '.join(SUPPORTED_OPS)}")
            try:
                outs = handler(self, self.attrs())
            except (OnnxImportError, KeyError) as e:
                if isinstance(e, KeyError):
                    raise self.fail(f"input {e.args[0]!r} is not defined before it") from None
                raise
            except (AccyError, ValueError, TypeError) as e:
                raise self.fail(str(e)) from None
            outs = outs if isinstance(outs, list) else [outs]
            for name, v in zip(node.output, outs, strict=False):
                if name:
                    self.env[name] = v
        results = []
        for out in g.output:
            if out.name not in self.env:
                raise OnnxImportError(f"graph output {out.name!r} is computed by no node")
            results.append(self.value(out.name))
        self.fb.return_(*results)
        self.fb.finish()
        return b.finish()

    def input_type(self, inp: Any) -> TensorType:
        t = inp.type.tensor_type
        dims = []
        for i, d in enumerate(t.shape.dim):
            if not d.HasField("dim_value") or d.dim_value <= 0:
                sym = d.dim_param or "unknown"
                raise OnnxImportError(f"graph input {inp.name!r}: dimension {i} is {sym!r}; "
                                      f"accy needs static shapes (fix it in the model, e.g. "
                                      f"with onnx.tools.update_model_dims)")
            dims.append(d.dim_value)
        return TensorType(tuple(dims), _dtype(t.elem_type, f"graph input {inp.name!r}"))


# ---- op handlers (self: the importer, a: the node's attributes) -----------------------------

Handler = Callable[[_Importer, dict[str, Any]], Any]
_HANDLERS: dict[str, Handler] = {}


def _op(*names: str) -> Callable[[Handler], Handler]:
    def deco(f: Handler) -> Handler:
        for n in names:
            _HANDLERS[n] = f
        return f
    return deco


_UNARY = {"Relu": "relu", "Tanh": "tanh", "Sigmoid": "sigmoid", "Erf": "erf", "Sqrt": "sqrt"}
_BINARY = {"Add": Op.ADD, "Sub": Op.SUB, "Mul": Op.MUL, "Div": Op.DIV}


@_op(*_UNARY)
def _unary(self: _Importer, a: dict) -> Any:
    return getattr(self.value(self.inputs()[0]), _UNARY[self.node.op_type])()


@_op("Gelu")
def _gelu(self: _Importer, a: dict) -> Any:
    approximate = a.get("approximate", b"none")
    approximate = approximate.decode() if isinstance(approximate, bytes) else approximate
    return self.value(self.inputs()[0]).gelu(approximate=approximate)


@_op(*_BINARY)
def _binary(self: _Importer, a: dict) -> Any:
    x, y = (self.value(n) for n in self.inputs())
    return self.fb.op(_BINARY[self.node.op_type], x, y)


@_op("Pow")
def _pow(self: _Importer, a: dict) -> Any:
    x = self.value(self.inputs()[0])
    e = self.const(self.inputs()[1], "the exponent")
    if e.size == 1 and float(e.reshape(-1)[0]) == 2.0:
        return x * x
    if e.size == 1 and float(e.reshape(-1)[0]) == 0.5:
        return x.sqrt()
    return self.fb.op(Op.POW, x, self.fb.constant(e.astype(x.dtype.numpy), x.dtype))


@_op("Identity")
def _identity(self: _Importer, a: dict) -> Any:
    return self.env[self.inputs()[0]]


@_op("Cast")
def _cast(self: _Importer, a: dict) -> Any:
    return self.value(self.inputs()[0]).astype(_dtype(a["to"], "Cast"))


@_op("Constant")
def _constant(self: _Importer, a: dict) -> Any:
    if "value" in a:
        return np.ascontiguousarray(self.onnx.numpy_helper.to_array(a["value"]))
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        if key in a:
            return np.asarray(a[key], dtype=dtype)
    raise self.fail(f"only value, value_float(s) and value_int(s) are supported, got {list(a)}")


def _matmul(x: B.Value, y: B.Value) -> B.Value:
    """numpy.matmul semantics (1-d operands, broadcast batch dimensions) as one einsum."""
    xr, yr = x.type.rank, y.type.rank
    if xr == 1:
        x = x.reshape(1, x.shape[0])
    if yr == 1:
        y = y.reshape(y.shape[0], 1)
    bx, by = x.shape[:-2], y.shape[:-2]
    batch = np.broadcast_shapes(bx, by)
    if bx and bx != batch:
        x = x.broadcast_to(*batch, *x.shape[-2:])
    if by and by != batch:
        y = y.broadcast_to(*batch, *y.shape[-2:])
    letters = "abcdefgh"[:len(batch)]
    lx = letters[len(letters) - (x.type.rank - 2):]
    ly = letters[len(letters) - (y.type.rank - 2):]
    out = B.einsum(f"{lx}ij,{ly}jk->{letters}ik", x, y)
    shape = batch + ((x.shape[-2],) if xr > 1 else ()) + ((y.shape[-1],) if yr > 1 else ())
    return out if out.shape == shape else out.reshape(*shape)


@_op("MatMul")
def _matmul_node(self: _Importer, a: dict) -> Any:
    return _matmul(*(self.value(n) for n in self.inputs()))


@_op("Gemm")
def _gemm(self: _Importer, a: dict) -> Any:
    ins = self.inputs()
    x, y = self.value(ins[0]), self.value(ins[1])
    if a.get("transA", 0):
        x = x.transpose(1, 0)
    if a.get("transB", 0):
        y = y.transpose(1, 0)
    out = B.einsum("ij,jk->ik", x, y)
    if a.get("alpha", 1.0) != 1.0:
        out = out * float(a["alpha"])
    if len(ins) > 2 and ins[2]:
        c = self.value(ins[2])
        out = out + (c if a.get("beta", 1.0) == 1.0 else c * float(a["beta"]))
    return out


@_op("Reshape")
def _reshape(self: _Importer, a: dict) -> Any:
    x = self.value(self.inputs()[0])
    shape = self.ints(self.inputs()[1], "the shape")
    if not a.get("allowzero", 0):
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return x.reshape(*shape)


@_op("Flatten")
def _flatten(self: _Importer, a: dict) -> Any:
    x = self.value(self.inputs()[0])
    axis = a.get("axis", 1) % (x.type.rank + 1) if x.type.rank else 0
    return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


def _axes(self: _Importer, a: dict, rank: int, index: int = 1) -> list[int] | None:
    ins = self.inputs()
    if "axes" in a:
        axes = list(a["axes"])
    elif len(ins) > index and ins[index]:
        axes = self.ints(ins[index], "the axes")
    else:
        return None
    return [ax % rank for ax in axes]


@_op("Squeeze")
def _squeeze(self: _Importer, a: dict) -> Any:
    x = self.value(self.inputs()[0])
    axes = _axes(self, a, x.type.rank)
    axes = [i for i, d in enumerate(x.shape) if d == 1] if axes is None else axes
    return x.reshape(*[d for i, d in enumerate(x.shape) if i not in axes])


@_op("Unsqueeze")
def _unsqueeze(self: _Importer, a: dict) -> Any:
    x = self.value(self.inputs()[0])
    rank = x.type.rank + len(a.get("axes", ())) if "axes" in a else None
    if rank is None:
        rank = x.type.rank + len(self.ints(self.inputs()[1], "the axes"))
    axes = set(_axes(self, a, rank) or ())
    dims, it = [], iter(x.shape)
    for i in range(rank):
        dims.append(1 if i in axes else next(it))
    return x.reshape(*dims)


@_op("Transpose")
def _transpose(self: _Importer, a: dict) -> Any:
    x = self.value(self.inputs()[0])
    perm = list(a.get("perm", range(x.type.rank - 1, -1, -1)))
    return x.transpose(*perm)


@_op("Concat")
def _concat(self: _Importer, a: dict) -> Any:
    return B.concat([self.value(n) for n in self.inputs()], axis=a["axis"])


def _slice(x: B.Value, axis: int, start: int, stop: int, step: int = 1) -> B.Value:
    starts, stops, steps = [0] * x.type.rank, list(x.shape), [1] * x.type.rank
    starts[axis], stops[axis], steps[axis] = start, stop, step
    return x.fb.op(Op.SLICE, x, starts=tuple(starts), stops=tuple(stops), steps=tuple(steps))


@_op("Split")
def _split(self: _Importer, a: dict) -> Any:
    ins = self.inputs()
    x = self.value(ins[0])
    axis = a.get("axis", 0) % x.type.rank
    if "split" in a:
        sizes = list(a["split"])
    elif len(ins) > 1 and ins[1]:
        sizes = self.ints(ins[1], "the split sizes")
    else:
        n = a.get("num_outputs", len(self.node.output))
        each = -(-x.shape[axis] // n)
        sizes = [min(each, x.shape[axis] - i * each) for i in range(n)]
    outs, at = [], 0
    for s in sizes:
        outs.append(_slice(x, axis, at, at + s))
        at += s
    return outs


@_op("Slice")
def _slice_node(self: _Importer, a: dict) -> Any:
    ins = self.inputs()
    x = self.value(ins[0])
    r = x.type.rank
    if self.opset < 10:
        starts, ends = list(a["starts"]), list(a["ends"])
        axes, steps = list(a.get("axes", range(len(starts)))), [1] * len(starts)
    else:
        starts, ends = self.ints(ins[1], "starts"), self.ints(ins[2], "ends")
        axes = self.ints(ins[3], "axes") if len(ins) > 3 and ins[3] else list(
            range(len(starts)))
        steps = self.ints(ins[4], "steps") if len(ins) > 4 and ins[4] else [1] * len(starts)
    lo, hi, st = [0] * r, list(x.shape), [1] * r
    for ax, s, e, step in zip(axes, starts, ends, steps, strict=True):
        if step <= 0:
            raise self.fail(f"step {step}: only positive steps are supported")
        ax %= r
        lo[ax], hi[ax], st[ax] = slice(s, e, step).indices(x.shape[ax])
    return x.fb.op(Op.SLICE, x, starts=tuple(lo), stops=tuple(hi), steps=tuple(st))


@_op("Gather")
def _gather(self: _Importer, a: dict) -> Any:
    ins = self.inputs()
    x = self.value(ins[0])
    axis = a.get("axis", 0) % x.type.rank
    idx = self.env[ins[1]]
    if not isinstance(idx, B.Value):
        idx = self.fb.constant(np.where(idx < 0, idx + x.shape[axis], idx), DType.from_numpy(
            idx.dtype))
    return B.gather(x, idx, axis=axis)


@_op("Softmax")
def _softmax(self: _Importer, a: dict) -> Any:
    x = self.value(self.inputs()[0])
    r = x.type.rank
    if self.opset >= 13:
        return x.softmax(axis=a.get("axis", -1))
    axis = a.get("axis", 1) % r  # before opset 13: softmax over the flattened tail
    if axis == r - 1:
        return x.softmax(axis=-1)
    flat = x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))
    return flat.softmax(axis=-1).reshape(*x.shape)


@_op("ReduceMean")
def _reduce_mean(self: _Importer, a: dict) -> Any:
    x = self.value(self.inputs()[0])
    axes = _axes(self, a, x.type.rank)
    if axes is None:
        if a.get("noop_with_empty_axes", 0):
            return x
        axes = list(range(x.type.rank))
    return x.mean(axes=tuple(axes), keepdims=bool(a.get("keepdims", 1)))


@_op("GlobalAveragePool")
def _global_avg(self: _Importer, a: dict) -> Any:
    x = self.value(self.inputs()[0])
    return x.mean(axes=tuple(range(2, x.type.rank)), keepdims=True)


def _window(self: _Importer, a: dict, x: B.Value, kernel: list[int], dilations: list[int]
            ) -> dict[str, Any]:
    if x.type.rank != 4 or len(kernel) != 2:
        raise self.fail(f"only 2-d windows over NCHW inputs are supported (input {x.type})")
    strides = list(a.get("strides", (1, 1)))
    pads = list(a.get("pads", (0, 0, 0, 0)))
    auto = a.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * 4
        for i in range(2):
            size = x.shape[2 + i]
            out = -(-size // strides[i])
            total = max((out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - size, 0)
            small, big = total // 2, total - total // 2
            pads[i], pads[2 + i] = (small, big) if auto == "SAME_UPPER" else (big, small)
    elif auto == "VALID":
        pads = [0] * 4
    elif auto != "NOTSET":
        raise self.fail(f"auto_pad {auto!r} is not supported")
    if a.get("ceil_mode", 0):
        raise self.fail("ceil_mode=1 is not supported")
    return {"stride": tuple(strides), "padding": tuple(pads)}


@_op("Conv")
def _conv(self: _Importer, a: dict) -> Any:
    ins = self.inputs()
    x, w = self.value(ins[0]), self.value(ins[1])
    kernel = list(a.get("kernel_shape", w.shape[2:]))
    dilations = list(a.get("dilations", (1,) * len(kernel)))
    win = _window(self, a, x, kernel, dilations)
    y = B.conv2d(x, w, dilation=tuple(dilations), groups=a.get("group", 1), **win)
    if len(ins) > 2 and ins[2]:
        y = y + self.value(ins[2]).reshape(1, w.shape[0], 1, 1)
    return y


@_op("MaxPool", "AveragePool")
def _pool(self: _Importer, a: dict) -> Any:
    x = self.value(self.inputs()[0])
    kernel = list(a["kernel_shape"])
    if any(d != 1 for d in a.get("dilations", ())):
        raise self.fail("dilated pools are not supported")
    if len(self.node.output) > 1 and self.node.output[1]:
        raise self.fail("the Indices output is not supported")
    win = _window(self, a, x, kernel, [1, 1])
    if self.node.op_type == "MaxPool":
        return B.max_pool2d(x, tuple(kernel), **win)
    return B.avg_pool2d(x, tuple(kernel), count_include_pad=bool(a.get("count_include_pad", 0)),
                        **win)


@_op("BatchNormalization")
def _batch_norm(self: _Importer, a: dict) -> Any:
    ins = self.inputs()
    if a.get("training_mode", 0) or len([o for o in self.node.output if o]) > 1:
        raise self.fail("only inference form (training_mode=0, one output) is supported")
    x = self.value(ins[0])
    eps = float(a.get("epsilon", 1e-5))
    shape = (1, x.shape[1]) + (1,) * (x.type.rank - 2)
    stats = [self.env[n] for n in ins[1:5]]
    if all(not isinstance(s, B.Value) for s in stats):  # fold: x * scale' + shift'
        scale, bias, mean, var = (np.asarray(s, np.float64) for s in stats)
        k = scale / np.sqrt(var + eps)
        dt = x.dtype.numpy
        return (x * self.fb.constant((k.reshape(shape)).astype(dt), x.dtype)
                + self.fb.constant((bias - mean * k).reshape(shape).astype(dt), x.dtype))
    scale, bias, mean, var = (self.value(n).reshape(*shape) for n in ins[1:5])
    return (x - mean) * scale / (var + eps).sqrt() + bias


SUPPORTED_OPS: tuple[str, ...] = tuple(sorted(_HANDLERS))


def load(model: str | Path | Any, *,
         initializers: Literal["constants", "parameters"] = "constants") -> Program:
    """The :class:`~accy.Program` of an ONNX model (a path or an ``onnx.ModelProto``)."""
    onnx = _onnx()
    if initializers not in ("constants", "parameters"):
        raise OnnxImportError(f"initializers must be 'constants' or 'parameters', "
                              f"got {initializers!r}")
    if isinstance(model, str | Path):
        model = onnx.load(str(model))
    elif not isinstance(model, onnx.ModelProto):
        raise OnnxImportError(f"expected a path or an onnx.ModelProto, got "
                              f"{type(model).__name__}")
    return _Importer(onnx, model, initializers).run()
