"""egglog sorts for accy's tensor terms: what rule patterns are made of.
Terms
-----
``Tensor`` has one constructor per IR op (``Tensor.add``, ``Tensor.reduce_sum``, ...; the ops
``not``, ``and``, ``or`` are spelled ``not_``, ``and_``, ``or_``). Arguments mirror an IR node:
operands first (one ``TensorList`` for the variadic ``einsum`` and ``concat``; build it with
``tensor_list(a, b)``, which also works inside patterns), then the op's attributes in the
order of ``SIGNATURES[op].attrs``, then the result type ``ty`` last. Constants have two
constructors: ``Tensor.full(value, ty)`` for a constant whose elements all equal one value that
an f64 holds exactly (so rules match ``x * 1`` natively: ``Tensor.full(1.0, t)``), and
``Tensor.constant(data, ty)`` for every other constant, ``data`` being its bytes in the
printer's ``0x...`` form. The content is the key, and rules can make constants; only
``convert.to_egraph`` enters constants above ``convert.LARGE_CONSTANT_BYTES`` by reference
(``ref:<digest>``, their bytes kept beside the e-graph in ``ProgramEGraph.constants``).
(egglog's f64 equates ``-0.0`` with ``0.0`` and all NaNs, so those constants use ``constant``.)

Attributes are native egglog primitives, so patterns can match them: ints are ``i64``, bools
``Bool``, an einsum spec a ``String`` in the IR's normalized form (``"ij,jk->ik"``), a dtype
its text (``"f32"``), and a tuple of ints (axes, perm, shape, starts, ...) its attribute text
(``"[1, 0]"``, as ``accy.ir.node.attr_text`` prints it).

Types
-----
The last argument of every constructor is the result type as text, ``"f32[4,8]"``
(``str(TensorType)``), rather than (only) an analysis computed by rules, because:

* every e-node then carries its exact type, so the cost of any e-node (FLOPs and bytes from
  its own and its operands' shapes) needs nothing inferred, and ``convert.from_egraph``
  re-checks every extracted node against ``accy.ir.shapes.infer`` (the one place shape rules
  live): an ill-typed rule is caught, never lowered;
* equal operands and attributes give equal types, so the argument never splits an e-class;
* shape rules need no second implementation in egglog (einsum specs, slices, reshapes).

The analysis ``x.ty`` (egglog function ``tensor.type``) is filled from the type arguments by
``TYPE_RULES`` (one rule per constructor), which the driver runs after every rule step. It has
no merge function: a rule that unions tensors of different types makes egglog panic ("Illegal
merge attempted for function tensor.type"), which the driver reports as an unsound rule.

Rules bind and compute types as :mod:`accy.egraph.rules` describes; named rules and rule sets
live there too.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from egglog import (
    Bool,
    BoolLike,
    EGraph,
    Expr,
    Ruleset,
    String,
    StringLike,
    eq,
    f64,
    f64Like,
    i64,
    i64Like,
    method,
    rule,
    ruleset,
    set_,
    var,
)

from accy.ir.node import AttrValue, attr_text
from accy.ir.ops import ATTRS, Op
from accy.ir.types import DType, TensorType

__all__ = [
    "MISSING_OPS", "SIGNATURES", "TYPE_RULES", "Signature", "Tensor", "TensorList",
    "decode_attr", "encode_attr", "new_egraph", "parse_type", "signature", "tensor_list",
    "tensors", "types",
]


# ---- types and attributes as egglog primitives ------------------------------------------------

AttrKind = Literal["int", "bool", "text", "dtype", "ints", "bytes"]
_KIND_OF_PYTYPE: dict[type, AttrKind] = {
    int: "int", bool: "bool", str: "text", DType: "dtype", tuple: "ints", bytes: "bytes",
}
_TYPE_RE = re.compile(r"([a-z0-9]+)\[([0-9,]*)\]")


@lru_cache(maxsize=4096)
def parse_type(text: str) -> TensorType:
    """The ``TensorType`` of a type text such as ``"f32[4,8]"`` (``str(TensorType)``)."""
    m = _TYPE_RE.fullmatch(text)
    if m is None:
        raise ValueError(f"not a tensor type: {text!r} (expected e.g. 'f32[4,8]')")
    dims = tuple(int(d) for d in m.group(2).split(",")) if m.group(2) else ()
    return TensorType(dims, DType.parse(m.group(1)))


def encode_attr(kind: AttrKind, value: AttrValue) -> int | bool | str:
    """The egglog primitive value (i64, Bool or String) of an IR attribute."""
    if kind == "dtype":
        assert isinstance(value, DType)
        return value.value
    if kind in ("ints", "bytes"):
        return attr_text(value)
    return value  # type: ignore[return-value]


def decode_attr(kind: AttrKind, raw: int | bool | str) -> AttrValue:
    """The IR attribute of an egglog primitive value (inverse of :func:`encode_attr`)."""
    if kind == "ints":
        inner = str(raw).strip()[1:-1].strip()
        return tuple(int(x) for x in inner.split(",")) if inner else ()
    if kind == "bytes":
        if not str(raw).startswith("0x"):
            raise ValueError(f"constant data must be '0x' and hex digits, got {raw!r:.20}")
        return bytes.fromhex(str(raw)[2:])
    convert = {"dtype": DType.parse, "int": int, "bool": bool, "text": str}[kind]
    return convert(raw)  # type: ignore[operator]


@dataclass(frozen=True)
class Signature:
    """How an op's IR node maps to its ``Tensor`` constructor's arguments."""

    op: Op
    method: str  # the Tensor classmethod
    operands: int | None  # None: one TensorList of any length (einsum, concat)
    attrs: tuple[tuple[str, AttrKind], ...]  # after the operands, before the type

    @property
    def egg_name(self) -> str:
        """The egglog function name of the constructor (``tensor.add``)."""
        return "tensor." + self.op.value


def _signature(op: Op) -> Signature:
    name = op.value + "_" if keyword.iskeyword(op.value) else op.value
    attrs = tuple((k, _KIND_OF_PYTYPE[t]) for k, t in ATTRS.get(op, {}).items())
    return Signature(op, name, op.arity, attrs)


FULL_EGG_NAME = "tensor.full"  # the second constant constructor: Tensor.full(value, ty)
TYPE_EGG_NAME = "tensor.type"
LIST_NIL_EGG_NAME, LIST_CONS_EGG_NAME = "tensors.nil", "tensors.cons"

# ---- the sorts -------------------------------------------------------------------------------


class TensorList(Expr):
    """The operand list of a variadic op: ``nil`` or ``cons(head, tail)``."""

    @method(egg_fn=LIST_NIL_EGG_NAME)
    @classmethod
    def nil(cls) -> TensorList: ...

    @method(egg_fn=LIST_CONS_EGG_NAME)
    @classmethod
    def cons(cls, head: Tensor, tail: TensorList) -> TensorList: ...


def tensor_list(*xs: Tensor) -> TensorList:
    """``cons(x0, cons(x1, ... nil))``: the operands of an einsum or concat, in patterns too."""
    out = TensorList.nil()
    for x in reversed(xs):
        out = TensorList.cons(x, out)
    return out


class Tensor(Expr):
    """A tensor term; one constructor per IR op, result type text last (module docstring)."""

    @method(egg_fn=TYPE_EGG_NAME)
    @property
    def ty(self) -> String:
        """The type text of this e-class (filled by ``TYPE_RULES``; bind it in conditions)."""

    # sources
    @method(egg_fn="tensor.param")
    @classmethod
    def param(cls, index: i64Like, ty: StringLike) -> Tensor: ...
    @method(egg_fn=FULL_EGG_NAME)
    @classmethod
    def full(cls, value: f64Like, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.constant")
    @classmethod
    def constant(cls, value: StringLike, ty: StringLike) -> Tensor: ...

    # elementwise unary
    @method(egg_fn="tensor.neg")
    @classmethod
    def neg(cls, x: Tensor, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.abs")
    @classmethod
    def abs(cls, x: Tensor, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.exp")
    @classmethod
    def exp(cls, x: Tensor, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.log")
    @classmethod
    def log(cls, x: Tensor, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.sqrt")
    @classmethod
    def sqrt(cls, x: Tensor, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.rsqrt")
    @classmethod
    def rsqrt(cls, x: Tensor, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.sin")
    @classmethod
    def sin(cls, x: Tensor, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.cos")
    @classmethod
    def cos(cls, x: Tensor, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.reciprocal")
    @classmethod
    def reciprocal(cls, x: Tensor, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.floor")
    @classmethod
    def floor(cls, x: Tensor, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.ceil")
    @classmethod
    def ceil(cls, x: Tensor, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.erf")
    @classmethod
    def erf(cls, x: Tensor, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.relu")
    @classmethod
    def relu(cls, x: Tensor, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.gelu")
    @classmethod
    def gelu(cls, x: Tensor, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.gelu_tanh")
    @classmethod
    def gelu_tanh(cls, x: Tensor, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.sigmoid")
    @classmethod
    def sigmoid(cls, x: Tensor, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.tanh")
    @classmethod
    def tanh(cls, x: Tensor, ty: StringLike) -> Tensor: ...

    # elementwise binary (numpy broadcasting), comparisons, logical, select, cast
    @method(egg_fn="tensor.add")
    @classmethod
    def add(cls, a: Tensor, b: Tensor, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.sub")
    @classmethod
    def sub(cls, a: Tensor, b: Tensor, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.mul")
    @classmethod
    def mul(cls, a: Tensor, b: Tensor, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.div")
    @classmethod
    def div(cls, a: Tensor, b: Tensor, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.max")
    @classmethod
    def max(cls, a: Tensor, b: Tensor, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.min")
    @classmethod
    def min(cls, a: Tensor, b: Tensor, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.pow")
    @classmethod
    def pow(cls, a: Tensor, b: Tensor, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.eq")
    @classmethod
    def eq(cls, a: Tensor, b: Tensor, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.ne")
    @classmethod
    def ne(cls, a: Tensor, b: Tensor, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.lt")
    @classmethod
    def lt(cls, a: Tensor, b: Tensor, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.le")
    @classmethod
    def le(cls, a: Tensor, b: Tensor, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.gt")
    @classmethod
    def gt(cls, a: Tensor, b: Tensor, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.ge")
    @classmethod
    def ge(cls, a: Tensor, b: Tensor, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.not")
    @classmethod
    def not_(cls, x: Tensor, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.and")
    @classmethod
    def and_(cls, a: Tensor, b: Tensor, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.or")
    @classmethod
    def or_(cls, a: Tensor, b: Tensor, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.select")
    @classmethod
    def select(cls, cond: Tensor, a: Tensor, b: Tensor, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.cast")
    @classmethod
    def cast(cls, x: Tensor, dtype: StringLike, ty: StringLike) -> Tensor: ...

    # reductions (axes as "[0, 2]"), contraction
    @method(egg_fn="tensor.reduce_sum")
    @classmethod
    def reduce_sum(cls, x: Tensor, axes: StringLike, keepdims: BoolLike,
                   ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.reduce_max")
    @classmethod
    def reduce_max(cls, x: Tensor, axes: StringLike, keepdims: BoolLike,
                   ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.reduce_mean")
    @classmethod
    def reduce_mean(cls, x: Tensor, axes: StringLike, keepdims: BoolLike,
                    ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.einsum")
    @classmethod
    def einsum(cls, operands: TensorList, spec: StringLike, ty: StringLike) -> Tensor: ...

    # movement
    @method(egg_fn="tensor.reshape")
    @classmethod
    def reshape(cls, x: Tensor, shape: StringLike, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.transpose")
    @classmethod
    def transpose(cls, x: Tensor, perm: StringLike, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.broadcast")
    @classmethod
    def broadcast(cls, x: Tensor, shape: StringLike, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.slice")
    @classmethod
    def slice(cls, x: Tensor, starts: StringLike, stops: StringLike, steps: StringLike,
              ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.concat")
    @classmethod
    def concat(cls, operands: TensorList, axis: i64Like, ty: StringLike) -> Tensor: ...

    # indexing, rowwise, loss
    @method(egg_fn="tensor.gather")
    @classmethod
    def gather(cls, x: Tensor, indices: Tensor, axis: i64Like, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.scatter_add")
    @classmethod
    def scatter_add(cls, x: Tensor, indices: Tensor, updates: Tensor, axis: i64Like,
                    ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.softmax")
    @classmethod
    def softmax(cls, x: Tensor, axis: i64Like, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.log_softmax")
    @classmethod
    def log_softmax(cls, x: Tensor, axis: i64Like, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.cross_entropy")
    @classmethod
    def cross_entropy(cls, logits: Tensor, labels: Tensor, ty: StringLike) -> Tensor: ...

    # sliding windows (rule set merge merges convolutions of one input; conv-lowering lowers
    # them after saturation)
    @method(egg_fn="tensor.conv2d")
    @classmethod
    def conv2d(cls, x: Tensor, w: Tensor, strides: StringLike, pads: StringLike,
               dilations: StringLike, groups: i64Like, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.max_pool2d")
    @classmethod
    def max_pool2d(cls, x: Tensor, kernel: StringLike, strides: StringLike, pads: StringLike,
                   ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.avg_pool2d")
    @classmethod
    def avg_pool2d(cls, x: Tensor, kernel: StringLike, strides: StringLike, pads: StringLike,
                   count_include_pad: BoolLike, ty: StringLike) -> Tensor: ...
    @method(egg_fn="tensor.pad")
    @classmethod
    def pad(cls, x: Tensor, value: Tensor, pads: StringLike, ty: StringLike) -> Tensor: ...


SIGNATURES: dict[Op, Signature] = {
    op: sig for op in Op if hasattr(Tensor, (sig := _signature(op)).method)}
MISSING_OPS: tuple[Op, ...] = tuple(op for op in Op if op not in SIGNATURES)
"""Ops of ``accy.ir.ops`` without a ``Tensor`` constructor yet (a test keeps this empty)."""


def signature(op: Op) -> Signature:
    """The constructor layout of ``op``; an op without a constructor is a clear error."""
    try:
        return SIGNATURES[op]
    except KeyError:
        raise NotImplementedError(
            f"op {op.value} has no Tensor constructor; add one to accy/egraph/sorts.py") from None


def tensors(names: str) -> tuple[Tensor, ...]:
    """Pattern variables of sort Tensor: ``a, b = tensors("a b")``."""
    return tuple(var(n, Tensor) for n in names.split())


def types(names: str) -> tuple[String, ...]:
    """Pattern variables for type texts (and other String attributes): ``t, u = types("t u")``."""
    return tuple(var(n, String) for n in names.split())


def _var_of_kind(name: str, kind: AttrKind) -> Any:
    return var(name, {"int": i64, "bool": Bool}.get(kind, String))


def _type_rules() -> Ruleset:
    rs = ruleset(name="accy-tensor-types")
    x, t = var("x", Tensor), var("t", String)
    ctors: list[tuple[str, Callable[..., Tensor], list[Any]]] = [
        (FULL_EGG_NAME, Tensor.full, [var("v", f64)])]
    for sig in SIGNATURES.values():
        operands = ([var("xs", TensorList)] if sig.operands is None
                    else [var(f"x{i}", Tensor) for i in range(sig.operands)])
        attrs = [_var_of_kind(f"p{i}", kind) for i, (_, kind) in enumerate(sig.attrs)]
        ctors.append((sig.egg_name, getattr(Tensor, sig.method), operands + attrs))
    for egg_name, ctor, args in ctors:
        rs.register(rule(eq(x).to(ctor(*args, t)), name=f"type-of-{egg_name}")
                    .then(set_(x.ty).to(t)))
    return rs


TYPE_RULES: Ruleset = _type_rules()
"""Fills ``x.ty`` for every tensor e-class from its constructors' type argument."""


def new_egraph() -> EGraph:
    """An empty e-graph for tensor terms (serial: runs are deterministic)."""
    return EGraph(num_threads=1)
