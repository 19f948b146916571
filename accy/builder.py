"""Building programs: an explicit builder, and tracing sugar on top of it.

Explicit, in the seed's spirit::

    b = Builder()
    t = b.tensor(DType.f32, (4,))
    f = b.begin_function("add", [t, t])
    f.return_(f.add(f.param(0), f.param(1)))
    program = b.finish()

Tracing: ``@accy.function`` runs a Python function on traced values (operators and methods
build ops) over annotated (``a: accy.f32[4]``) or example-shaped inputs. Shape and dtype errors
are raised when an op is built, naming the op and its operand types.

Comparisons are elementwise, as in numpy and torch: ``a == b``, ``a != b``, ``a < b`` ... build
bool tensors (``(a == b).astype(DType.f32)`` turns them into numbers). So a traced value has no
Python truth value (``if a == b:`` raises TypeError; use ``select``), and identity is ``is``:
Values hash by identity and can be kept in sets and dict keys, but ``v in [w, ...]`` compares
elementwise and raises.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from accy import tracing
from accy.errors import AccyError, ShapeError
from accy.ir.node import Node
from accy.ir.ops import ATTRS, Op
from accy.ir.program import Function, Program
from accy.ir.shapes import infer
from accy.ir.types import DType, TensorType

Operand = "Value | float | int | bool | np.ndarray"

# What ``==`` and ``!=`` compare elementwise; anything else (None, strings, ...) is left to
# Python (NotImplemented), so ``v == None`` is False as for numpy arrays.
_COMPARABLE = (int, float, np.number, np.bool_, np.ndarray)


class BuilderError(AccyError, ValueError):
    """The builder was used out of order or given something it cannot take (a function never
    finished, a non-integer axis or dimension). A ValueError too, as these were before."""


def _int(what: str, x: Any) -> int:
    """``x`` as a Python int if it is an integer (numpy integers too, bools not): an axis or
    dimension given as 2.0 or "2" is a mistake the builder names instead of truncating."""
    if isinstance(x, bool | np.bool_) or not isinstance(x, int | np.integer):
        raise BuilderError(f"{what} must be an integer, got {x!r} ({type(x).__name__})")
    return int(x)


class Value:
    """A traced tensor value inside a :class:`FunctionBuilder`; operators build ops.

    ``==``/``!=``/``<``/... are elementwise comparisons with bool results; a Value has no
    truth value, hashes by identity, and is compared for identity with ``is``."""

    __slots__ = ("fb", "node")
    __array_priority__ = 1000  # numpy arrays on the left defer to our operators

    def __init__(self, fb: FunctionBuilder, node: Node) -> None:
        self.fb = fb
        self.node = node

    @property
    def type(self) -> TensorType:
        return self.node.type

    @property
    def shape(self) -> tuple[int, ...]:
        return self.node.type.shape

    @property
    def dtype(self) -> DType:
        return self.node.type.dtype

    def __repr__(self) -> str:
        return f"Value({self.node.op.value} : {self.type})"

    def _bin(self, op: Op, other: Any, swap: bool = False) -> Value:
        other = self.fb.lift(other, like=self)
        return self.fb.op(op, other, self) if swap else self.fb.op(op, self, other)

    def __add__(self, o): return self._bin(Op.ADD, o)
    def __radd__(self, o): return self._bin(Op.ADD, o, swap=True)
    def __sub__(self, o): return self._bin(Op.SUB, o)
    def __rsub__(self, o): return self._bin(Op.SUB, o, swap=True)
    def __mul__(self, o): return self._bin(Op.MUL, o)
    def __rmul__(self, o): return self._bin(Op.MUL, o, swap=True)
    def __truediv__(self, o): return self._bin(Op.DIV, o)
    def __rtruediv__(self, o): return self._bin(Op.DIV, o, swap=True)
    def __pow__(self, o): return self._bin(Op.POW, o)
    def __rpow__(self, o): return self._bin(Op.POW, o, swap=True)
    # == and != are elementwise (bool results) like < and >; identity is `is`, and hashing
    # stays by identity so Values work as set members and dict keys.
    def __eq__(self, o):  # type: ignore[override]
        return self._bin(Op.EQ, o) if _comparable(o) else NotImplemented
    def __ne__(self, o):  # type: ignore[override]
        return self._bin(Op.NE, o) if _comparable(o) else NotImplemented
    __hash__ = object.__hash__
    def __lt__(self, o): return self._bin(Op.LT, o)
    def __le__(self, o): return self._bin(Op.LE, o)
    def __gt__(self, o): return self._bin(Op.GT, o)
    def __ge__(self, o): return self._bin(Op.GE, o)
    def __and__(self, o): return self._bin(Op.AND, o)
    def __or__(self, o): return self._bin(Op.OR, o)
    def __neg__(self): return self.fb.op(Op.NEG, self)
    def __abs__(self): return self.fb.op(Op.ABS, self)
    def __invert__(self): return self.fb.op(Op.NOT, self)

    def __matmul__(self, o: Value) -> Value:
        """Matrix product of equal-rank operands (leading dimensions are batch dimensions)."""
        r = self.type.rank
        if r < 2 or o.type.rank != r:
            raise ShapeError(f"matmul({self.type}, {o.type}): needs two operands of one rank >= 2")
        batch = "abcdefgh"[: r - 2]
        return self.fb.op(Op.EINSUM, self, o, spec=f"{batch}ij,{batch}jk->{batch}ik")

    def __bool__(self) -> bool:
        raise TypeError("a traced Value has no truth value (==, !=, < ... compare elementwise "
                        "and `in` uses ==); use select(cond, a, b), or `is` for identity")

    def __getitem__(self, key: Any) -> Value:
        key = key if isinstance(key, tuple) else (key,)
        if len(key) > self.type.rank or any(not isinstance(k, slice) for k in key):
            raise ShapeError(f"slice({self.type}): only basic slices (a:b:c) per dimension "
                             f"are supported, got {key!r}")
        key = key + (slice(None),) * (self.type.rank - len(key))
        starts, stops, steps = [], [], []
        for k, d in zip(key, self.shape, strict=True):
            for part in (k.start, k.stop, k.step):
                if part is not None:  # slice.indices would take True as 1
                    _int(f"slice({self.type}): a bound of {k!r}", part)
            a, b, s = k.indices(d)
            starts.append(a), stops.append(b), steps.append(s)
        return self.fb.op(Op.SLICE, self, starts=starts, stops=stops, steps=steps)

    # methods for every unary op and the common shaped ops
    def exp(self): return self.fb.op(Op.EXP, self)
    def log(self): return self.fb.op(Op.LOG, self)
    def sqrt(self): return self.fb.op(Op.SQRT, self)
    def rsqrt(self): return self.fb.op(Op.RSQRT, self)
    def sin(self): return self.fb.op(Op.SIN, self)
    def cos(self): return self.fb.op(Op.COS, self)
    def reciprocal(self): return self.fb.op(Op.RECIPROCAL, self)
    def floor(self): return self.fb.op(Op.FLOOR, self)
    def ceil(self): return self.fb.op(Op.CEIL, self)
    def erf(self): return self.fb.op(Op.ERF, self)
    def relu(self): return self.fb.op(Op.RELU, self)
    def gelu(self, approximate: str = "none"):
        """GELU ``x * Phi(x)``: exact with erf ("none", the gelu op) or the tanh approximation
        ("tanh", the gelu_tanh op), as ONNX Gelu's and torch's ``approximate``."""
        ops = {"none": Op.GELU, "tanh": Op.GELU_TANH}
        if approximate not in ops:
            raise BuilderError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
        return self.fb.op(ops[approximate], self)
    def sigmoid(self): return self.fb.op(Op.SIGMOID, self)
    def tanh(self): return self.fb.op(Op.TANH, self)
    def astype(self, dtype: DType):
        return self.fb.op(Op.CAST, self, dtype=_dtype("astype", dtype))

    def sum(self, axes=None, keepdims=False):
        return self.fb.reduce(Op.REDUCE_SUM, self, axes, keepdims)

    def max(self, axes=None, keepdims=False):
        return self.fb.reduce(Op.REDUCE_MAX, self, axes, keepdims)

    def mean(self, axes=None, keepdims=False):
        return self.fb.reduce(Op.REDUCE_MEAN, self, axes, keepdims)

    def reshape(self, *shape): return self.fb.op(Op.RESHAPE, self, shape=_dims(shape))
    def transpose(self, *perm):
        perm = _dims(perm) if perm else tuple(reversed(range(self.type.rank)))
        return self.fb.op(Op.TRANSPOSE, self, perm=perm)
    @property
    def T(self): return self.transpose()
    def broadcast_to(self, *shape): return self.fb.op(Op.BROADCAST, self, shape=_dims(shape))
    def softmax(self, axis=-1): return self.fb.op(Op.SOFTMAX, self, axis=axis)
    def log_softmax(self, axis=-1): return self.fb.op(Op.LOG_SOFTMAX, self, axis=axis)


def _dtype(where: str, dtype: Any) -> DType:
    """``dtype`` if it is a DType; ``accy.f32`` (a type maker) gets a message saying so."""
    if isinstance(dtype, _TypeMaker):
        raise BuilderError(f"{where}: {dtype!r} makes tensor types ({dtype!r}[4, 8]); pass "
                           f"the element type DType.{dtype.dtype.value}")
    if not isinstance(dtype, DType):
        raise BuilderError(f"{where}: the element type must be a DType (e.g. DType.f32), "
                           f"got {dtype!r}")
    return dtype


def _comparable(o: Any) -> bool:
    return isinstance(o, Value) or isinstance(o, _COMPARABLE)


def _dims(shape: tuple) -> tuple[int, ...]:
    return tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], tuple | list) else shape


def _check_attrs(op: Op, attrs: dict[str, Any]) -> None:
    """Integer and bool attributes as given, checked before shape inference can truncate them
    (``reshape(2.5, 2)``, ``sum(axes=1.0)``, ``keepdims="no"``), naming the op."""
    for name, want in ATTRS.get(op, {}).items():
        if name not in attrs:
            continue  # infer names missing attributes
        v = attrs[name]
        what = f"{op.value}: {name}"
        if want is int:
            _int(what, v)
        elif want is tuple:
            if not isinstance(v, tuple | list):
                raise BuilderError(f"{what} must be a list of integers, got {v!r}")
            for x in v:
                _int(f"{what} entry", x)
        elif want is bool and not isinstance(v, bool | np.bool_):
            raise BuilderError(f"{what} must be True or False, got {v!r}")


class FunctionBuilder:
    """Builds one function: parameters, ops, then ``return_``."""

    def __init__(self, builder: Builder, name: str, params: Sequence[TensorType],
                 param_names: Sequence[str] | None, results: Sequence[TensorType] | None) -> None:
        names = list(param_names) if param_names is not None else [
            f"arg{i}" for i in range(len(params))]
        if len(names) != len(params):
            raise ValueError(f"function {name}: {len(params)} params but {len(names)} names")
        for n in names:
            if not n.isidentifier():
                raise ValueError(f"function {name}: parameter name {n!r} is not an identifier")
        if len(set(names)) != len(names):
            raise ValueError(f"function {name}: parameter names repeat: {names}")
        self.builder = builder
        self.name = name
        self.param_names = tuple(names)
        self.params = tuple(Node(Op.PARAM, t, (), {"index": i}) for i, t in enumerate(params))
        self.expected_results = tuple(results) if results is not None else None
        self.results: tuple[Node, ...] | None = None

    def param(self, index: int) -> Value:
        index = _int(f"function {self.name}: parameter index", index)
        if not 0 <= index < len(self.params):
            raise IndexError(f"function {self.name} has {len(self.params)} parameters, "
                             f"no parameter {index}")
        return Value(self, self.params[index])

    parameter = param

    def constant(self, value: Any, dtype: DType | None = None) -> Value:
        """A constant; Python floats default to f32, other values keep numpy's dtype."""
        if dtype is not None:
            _dtype("constant", dtype)
        arr = np.asarray(value)
        if dtype is None:
            plain_float = type(value) is float
            dtype = DType.f32 if plain_float else DType.from_numpy(arr.dtype)
        arr = np.array(arr, dtype=dtype.numpy, order="C")
        return Value(self, Node(Op.CONSTANT, TensorType(arr.shape, dtype), (),
                                {"value": arr.tobytes()}))

    def lift(self, x: Any, like: Value) -> Value:
        """``x`` as a Value: Values pass through, scalars become constants of like's dtype.

        A scalar that like's dtype cannot hold exactly in kind (0.5 into i32, 2**40 into i32)
        and arrays of another dtype are errors: cast explicitly instead.
        """
        if isinstance(x, Value):
            if x.fb is not self:
                raise ValueError("a Value from another function was used")
            return x
        arr = np.asarray(x)
        dtype = like.dtype
        if isinstance(x, np.ndarray) and arr.dtype != dtype.numpy:
            raise ShapeError(f"operand array of dtype {arr.dtype} next to a {like.type} value; "
                             f"convert it to {dtype.numpy} first")
        if arr.dtype.kind in "iub" and not dtype.is_float:
            info = np.iinfo(dtype.numpy) if dtype.is_int else None
            if info is not None and not (info.min <= arr.min(initial=0) and
                                         arr.max(initial=0) <= info.max):
                raise ShapeError(f"constant {x!r} does not fit {dtype.value}")
        elif arr.dtype.kind == "f" and not dtype.is_float:
            if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
                raise ShapeError(f"constant {x!r} is not a whole number; it cannot be lifted to "
                                 f"{dtype.value} (cast the tensor to a float dtype first)")
        return self.constant(x, dtype)

    def op(self, op: Op, *srcs: Value, **attrs: Any) -> Value:
        """Build ``op`` over ``srcs``; raises ShapeError naming the op and operand types."""
        for s in srcs:
            if not isinstance(s, Value):
                raise TypeError(f"{op.value}: operand {s!r} is not a Value")
            if s.fb is not self:
                raise ValueError(f"{op.value}: an operand comes from another function")
        _check_attrs(op, attrs)
        t, attrs = infer(op, tuple(s.type for s in srcs), attrs)
        return Value(self, Node(op, t, tuple(s.node for s in srcs), attrs))

    def reduce(self, op: Op, x: Value, axes=None, keepdims: bool = False) -> Value:
        if axes is None:
            axes = tuple(range(x.type.rank))
        elif isinstance(axes, tuple | list | range):
            axes = tuple(axes)
        else:
            axes = (axes,)  # one axis; _check_attrs rejects a non-integer one
        return self.op(op, x, axes=axes, keepdims=keepdims)

    # explicit spellings of the binary ops, as in the seed's builder
    def add(self, a, b): return self.op(Op.ADD, a, self.lift(b, a))
    def sub(self, a, b): return self.op(Op.SUB, a, self.lift(b, a))
    def mul(self, a, b): return self.op(Op.MUL, a, self.lift(b, a))
    def div(self, a, b): return self.op(Op.DIV, a, self.lift(b, a))
    def max(self, a, b): return self.op(Op.MAX, a, self.lift(b, a))
    def min(self, a, b): return self.op(Op.MIN, a, self.lift(b, a))

    def return_(self, *values: Value) -> None:
        if self.results is not None:
            raise ValueError(f"function {self.name} already returned")
        if not values:
            raise ValueError(f"function {self.name} must return at least one value")
        for v in values:
            if not isinstance(v, Value) or v.fb is not self:
                raise TypeError(f"function {self.name} returns {v!r}, not a Value of its own")
        got = tuple(v.type for v in values)
        if self.expected_results is not None and got != self.expected_results:
            raise ShapeError(f"function {self.name} declared results "
                             f"({', '.join(map(str, self.expected_results))}) but returns "
                             f"({', '.join(map(str, got))})")
        self.results = tuple(v.node for v in values)

    def finish(self) -> Function:
        if self.results is None:
            raise ValueError(f"function {self.name} has no return_")
        fn = Function(self.name, self.params, self.param_names, self.results)
        # closed even when _add refuses a duplicate name: that mistake was already reported
        self.builder._close(self)
        self.builder._add(fn)
        return fn


class Builder:
    """Builds a :class:`Program` of one or more functions."""

    def __init__(self) -> None:
        self._functions: list[Function] = []
        # begun but not finished, so finish() can name a forgotten FunctionBuilder.finish()
        self._open: list[FunctionBuilder] = []

    @staticmethod
    def tensor(dtype: DType, shape: Sequence[int]) -> TensorType:
        _dtype("Builder.tensor", dtype)
        if not isinstance(shape, Sequence) or isinstance(shape, str):
            raise BuilderError(f"Builder.tensor: shape must be a sequence of integers, "
                               f"got {shape!r}")
        return TensorType(tuple(shape), dtype)

    def begin_function(self, name: str, params: Sequence[TensorType],
                       param_names: Sequence[str] | None = None,
                       results: Sequence[TensorType] | None = None) -> FunctionBuilder:
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"function name {name!r} is not an identifier")
        for what, types in (("parameter", params), ("result", results or ())):
            for i, t in enumerate(types):
                if not isinstance(t, TensorType):
                    raise BuilderError(f"function {name}: {what} {i} is {t!r}, not a "
                                       f"TensorType (e.g. accy.f32[4, 8])")
        fb = FunctionBuilder(self, name, params, param_names, results)
        self._open.append(fb)
        return fb

    def _add(self, fn: Function) -> None:
        if any(f.name == fn.name for f in self._functions):
            raise ValueError(f"function {fn.name!r} is already defined")
        self._functions.append(fn)

    def _close(self, fb: FunctionBuilder) -> None:
        self._open = [f for f in self._open if f is not fb]

    def finish(self) -> Program:
        if self._open:
            names = ", ".join(repr(f.name) for f in self._open)
            were = "was" if len(self._open) == 1 else "were"
            s = "" if len(self._open) == 1 else "s"
            raise BuilderError(f"function{s} {names} {were} begun but not finished: call "
                               f"FunctionBuilder.finish() (after return_) before "
                               f"Builder.finish()")
        return Program(tuple(self._functions))


# free functions over traced Values (operands: Values or Python scalars)

def _fb(*xs: Any) -> FunctionBuilder:
    for x in xs:
        if isinstance(x, Value):
            return x.fb
    raise TypeError("at least one operand must be a traced Value")


def maximum(a, b) -> Value:
    fb = _fb(a, b)
    like = a if isinstance(a, Value) else b
    return fb.op(Op.MAX, fb.lift(a, like), fb.lift(b, like))


def minimum(a, b) -> Value:
    fb = _fb(a, b)
    like = a if isinstance(a, Value) else b
    return fb.op(Op.MIN, fb.lift(a, like), fb.lift(b, like))


def select(cond: Value, a, b) -> Value:
    fb = _fb(cond)
    if not isinstance(a, Value) and not isinstance(b, Value):
        raise TypeError("select: at least one branch must be a Value (give constants a dtype "
                        "with FunctionBuilder.constant)")
    like = a if isinstance(a, Value) else b
    return fb.op(Op.SELECT, cond, fb.lift(a, like), fb.lift(b, like))


def einsum(spec: str, *operands: Value) -> Value:
    return _fb(*operands).op(Op.EINSUM, *operands, spec=spec)


def concat(values: Sequence[Value], axis: int = 0) -> Value:
    return _fb(*values).op(Op.CONCAT, *values, axis=axis)


def gather(x: Value, indices: Value, axis: int = 0) -> Value:
    return _fb(x).op(Op.GATHER, x, indices, axis=axis)


def scatter_add(x: Value, indices: Value, updates: Value, axis: int = 0) -> Value:
    return _fb(x).op(Op.SCATTER_ADD, x, indices, updates, axis=axis)


def cross_entropy(logits: Value, labels: Value) -> Value:
    return _fb(logits).op(Op.CROSS_ENTROPY, logits, labels)


def _pair(what: str, v: Any) -> tuple[int, int]:
    vals = (v, v) if not isinstance(v, tuple | list) else tuple(v)
    if len(vals) != 2:
        raise BuilderError(f"{what} must be an integer or a pair of integers, got {v!r}")
    return _int(what, vals[0]), _int(what, vals[1])


def _pads2d(what: str, v: Any) -> tuple[int, int, int, int]:
    """An int, (ph, pw) or (top, left, bottom, right) as the IR's [top, left, bottom, right]."""
    if isinstance(v, tuple | list) and len(v) == 4:
        return tuple(_int(what, p) for p in v)  # type: ignore[return-value]
    ph, pw = _pair(what, v)
    return ph, pw, ph, pw


def conv2d(x: Value, w: Value, *, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
           groups: int = 1) -> Value:
    """2-d convolution (cross-correlation) of ``x[N, C, H, W]`` with ``w[O, C/groups, KH, KW]``.

    ``stride``/``dilation``: an int or (h, w); ``padding``: an int, (h, w) or (top, left,
    bottom, right), zeros. Add a bias as ``y + b.reshape(1, O, 1, 1)``."""
    return _fb(x, w).op(Op.CONV2D, x, w, strides=_pair("conv2d: stride", stride),
                        pads=_pads2d("conv2d: padding", padding),
                        dilations=_pair("conv2d: dilation", dilation),
                        groups=_int("conv2d: groups", groups))


def max_pool2d(x: Value, kernel_size: Any, stride: Any = None, padding: Any = 0) -> Value:
    """Max over windows of ``x[N, C, H, W]`` (stride defaults to the kernel size)."""
    kernel = _pair("max_pool2d: kernel_size", kernel_size)
    return _fb(x).op(Op.MAX_POOL2D, x, kernel=kernel,
                     strides=kernel if stride is None else _pair("max_pool2d: stride", stride),
                     pads=_pads2d("max_pool2d: padding", padding))


def avg_pool2d(x: Value, kernel_size: Any, stride: Any = None, padding: Any = 0,
               count_include_pad: bool = False) -> Value:
    """Mean over windows of ``x[N, C, H, W]``; padding counts in the divisor only with
    ``count_include_pad`` (ONNX's default leaves it out)."""
    kernel = _pair("avg_pool2d: kernel_size", kernel_size)
    return _fb(x).op(Op.AVG_POOL2D, x, kernel=kernel,
                     strides=kernel if stride is None else _pair("avg_pool2d: stride", stride),
                     pads=_pads2d("avg_pool2d: padding", padding),
                     count_include_pad=count_include_pad)


def pad(x: Value, pads: Any, value: Any = 0) -> Value:
    """``x`` padded with the constant ``value``: ``pads`` as (before, after) pairs, one per
    dimension (numpy's form), or flat as ONNX writes it ([begins..., ends...])."""
    fb = _fb(x)
    if not isinstance(pads, tuple | list):
        raise BuilderError(f"pad: pads must be a list, got {pads!r}")
    if pads and all(isinstance(p, tuple | list) for p in pads):
        if any(len(p) != 2 for p in pads):
            raise BuilderError(f"pad: pads must be (before, after) pairs, got {pads!r}")
        pads = [p[0] for p in pads] + [p[1] for p in pads]
    flat = tuple(_int("pad: pads entry", p) for p in pads)
    v = value if isinstance(value, Value) else fb.constant(np.asarray(value, x.dtype.numpy),
                                                           x.dtype)
    return fb.op(Op.PAD, x, v, pads=flat)


def trace(fn: Callable[..., Any], *examples: Any, name: str | None = None,
          _scope: dict[str, Any] | None = None) -> Program:
    """Trace ``fn`` into a one-function program; parameter types come from ``examples`` (arrays
    or TensorTypes; a ``*args`` parameter takes the ones after the named parameters) or, with
    none given, from the parameters' annotations (see :mod:`accy.tracing`). While ``fn`` runs,
    free functions such as ``accy.constant`` and ``accy.arange`` build into its function."""
    scope = _scope if _scope is not None else tracing.caller_locals(sys._getframe(1))
    names, types = tracing.signature_types(fn, examples, scope)
    b = Builder()
    own = getattr(fn, "__name__", "")  # a lambda's "<lambda>" is no function name: "main"
    f = b.begin_function(name or (own if own.isidentifier() else "main"), types, names)
    with tracing.active(f):
        out = fn(*(f.param(i) for i in range(len(types))))
    outs = out if isinstance(out, tuple) else (out,)
    f.return_(*outs)
    f.finish()
    return b.finish()


def function(fn: Callable[..., Any] | None = None, *examples: Any) -> Any:
    """Decorator: ``@accy.function`` (annotated) or ``@accy.function(example, ...)``.

    Returns the traced :class:`Program` of one function named after ``fn``. String annotations
    (``from __future__ import annotations``) may name the decorating scope's local variables.
    """
    scope = tracing.caller_locals(sys._getframe(1))
    if fn is not None and callable(fn) and not isinstance(fn, np.ndarray | TensorType):
        return trace(fn, *examples, _scope=scope)
    first = () if fn is None else (fn,)
    return lambda f: trace(f, *first, *examples, _scope=scope)


class _TypeMaker:
    """``accy.f32[4, 8]`` -> TensorType((4, 8), f32); ``accy.f32[()]`` is a scalar."""

    def __init__(self, dtype: DType) -> None:
        self.dtype = dtype

    def __getitem__(self, shape: Any) -> TensorType:
        shape = shape if isinstance(shape, tuple) else (shape,)
        for d in shape:  # TensorType checks too; here the message shows what was written
            if isinstance(d, bool | np.bool_) or not isinstance(d, int | np.integer) or d < 0:
                raise ShapeError(f"{self!r}[{', '.join(map(repr, shape))}]: dimensions must "
                                 f"be non-negative integers, got {d!r}")
        return TensorType(shape, self.dtype)

    def __repr__(self) -> str:
        return f"accy.{self.dtype.value}"


f16, f32, f64 = _TypeMaker(DType.f16), _TypeMaker(DType.f32), _TypeMaker(DType.f64)
i32, i64, bool_ = _TypeMaker(DType.i32), _TypeMaker(DType.i64), _TypeMaker(DType.bool)
