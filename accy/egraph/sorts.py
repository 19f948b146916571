"""egglog sorts for accy's tensor terms, and named rules over them: what ``rewrites/*.py`` import.

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
printer's ``0x...`` form. The content is the key: no side table, and rules can make constants.
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
egglog forbids looking ``x.ty`` up in actions, so rules bind it in their conditions::

    a, b, c = tensors("a b c")
    t, tb, tc = types("t tb tc")
    algebra.rewrite(                      # operands of the result's type: reuse t
        "factor-mul-add",
        Tensor.add(Tensor.mul(a, b, t), Tensor.mul(a, c, t), t),
        Tensor.mul(a, Tensor.add(b, c, t), t),
        eq(b.ty).to(t), eq(c.ty).to(t),
    )
    algebra.rewrite(                      # broadcasting operands: ask shapes.infer
        "factor-mul-add-broadcast",
        Tensor.add(Tensor.mul(a, b, t), Tensor.mul(a, c, t), t),
        Tensor.mul(a, Tensor.add(b, c, infer_type("add", tb, tc)), t),
        eq(tb).to(b.ty), eq(tc).to(c.ty),
    )

A right-hand side gives every new node its type. Where that is none of the bound types,
``infer_type("add", tb, tc)`` computes it with ``accy.ir.shapes.infer`` inside egglog (a
``PyObject`` call); ``py_text`` and ``py_test`` do the same for any Python function of strings
and ints (einsum spec rewriting, constant folding with numpy semantics).

Performance: compare a ``.ty`` with a type variable of the pattern (``eq(b.ty).to(t)``), or
two looked-up types with ``same_type(tb, tc)`` (a filter). Joining two lookups on one fresh
variable (``eq(tb).to(b.ty), eq(tb).to(c.ty)``) makes egglog's planner scan the type table:
thirty times slower on a 10k-node e-graph.

Named rules
-----------
Every rule has a stable kebab-case name; ``RuleSet(name, doc)`` registers itself in
``RULESETS`` and its rules in ``RULES`` (duplicate names, and a rule named like a rule set,
are errors). The name is the egglog rule name, so it is what run reports carry;
``driver.select_rules`` picks rules by rule set, ``rules=`` and ``disable=``, naming rules
or rule sets.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Any, Literal

from egglog import (
    Bool,
    BoolLike,
    EGraph,
    Expr,
    Fact,
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
    subsume,
    union,
    var,
)
from egglog import PyObject as _PyObject
from egglog.egraph import RewriteOrRule

from accy.errors import AccyError
from accy.ir.node import AttrValue, attr_text
from accy.ir.ops import ATTRS, Op
from accy.ir.shapes import infer
from accy.ir.types import DType, TensorType

__all__ = [
    "EGraphError", "MISSING_OPS", "RULES", "RULESETS", "SIGNATURES", "TYPE_RULES",
    "NamedRule", "RuleSet", "Signature", "Tensor", "TensorList", "decode_attr",
    "encode_attr", "infer_type", "new_egraph", "parse_type", "py_test", "py_text",
    "same_type", "signature", "tensor_list", "tensors", "types",
]


class EGraphError(AccyError):
    """The e-graph holds something unsound (an ill-typed term, a union of different types)."""


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

# ---- Python inside rules ----------------------------------------------------------------------


def _pyobject(arg: Any) -> _PyObject:
    if isinstance(arg, bool) or not isinstance(arg, str | int | String | i64 | _PyObject):
        raise TypeError(f"a Python call in a rule takes Strings, i64s, str or int, got {arg!r}")
    if isinstance(arg, String):
        return _PyObject.from_string(arg)
    if isinstance(arg, i64):
        return _PyObject.from_int(arg)
    return arg if isinstance(arg, _PyObject) else _PyObject(arg)


def py_text(fn: Callable[..., str], *args: Any) -> String:
    """A String computed by ``fn(*args)`` when the rule fires (args: Strings, i64s, str, int).

    ``fn`` must be picklable (a module-level function, or a ``functools.partial`` of one).
    """
    return _PyObject(fn)(*(_pyobject(a) for a in args)).to_string()


def py_test(fn: Callable[..., bool], *args: Any) -> Fact:
    """A rule condition that holds where ``fn(*args)`` is true (args as for :func:`py_text`)."""
    return eq(_PyObject(fn)(*(_pyobject(a) for a in args)).to_bool()).to(Bool(True))


def _all_equal(*xs: Any) -> bool:
    return all(x == xs[0] for x in xs)


def same_type(*type_texts: Any) -> Fact:
    """A rule condition that holds where the given type texts (Strings) are all equal."""
    return py_test(_all_equal, *type_texts)


def _infer_text(op_value: str, dynamic: tuple[str, ...], static: tuple[tuple[str, Any], ...],
                *args: Any) -> str:
    op = Op(op_value)
    kinds = dict(signature(op).attrs)
    n = len(args) - len(dynamic)
    operand_types = tuple(parse_type(a) for a in args[:n])
    attrs = dict(static) | {k: decode_attr(kinds[k], v) for k, v in zip(dynamic, args[n:],
                                                                          strict=True)}
    result, _ = infer(op, operand_types, attrs)
    return str(result)


def infer_type(op: Op | str, *operand_types: Any, **attrs: Any) -> String:
    """The type text of ``op`` (an Op or its name) over operands of the given type texts.

    ``accy.ir.shapes.infer`` computes it when the rule fires (and raises there on operands it
    rejects). Attributes are given in their egglog form (``axes="[0]"``, ``axis=1``, a String
    variable) or, for bools, as a Python ``bool``: ``infer_type("reduce_sum", t, axes=ax,
    keepdims=False)``.
    """
    op = Op.parse(op) if isinstance(op, str) else op
    kinds = dict(signature(op).attrs)
    if set(attrs) != set(kinds):
        raise TypeError(f"infer_type({op.value}) takes attributes {sorted(kinds)}, "
                        f"got {sorted(attrs)}")
    static = tuple((k, v) for k, v in attrs.items() if isinstance(v, bool))
    dynamic = tuple(k for k in attrs if not isinstance(attrs[k], bool))
    fn = partial(_infer_text, op.value, dynamic, static)
    return py_text(fn, *operand_types, *(attrs[k] for k in dynamic))


# ---- named rules ------------------------------------------------------------------------------

_NAME_RE = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")
RULESETS: dict[str, RuleSet] = {}
RULES: dict[str, NamedRule] = {}


def _check_name(what: str, name: str) -> None:
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise ValueError(f"{what} name {name!r} must be kebab-case (e.g. 'factor-mul-add')")


@dataclass(frozen=True)
class NamedRule:
    """One named rule: its egglog rules (two for a birewrite), and the rule set it is in."""

    name: str
    ruleset: str
    doc: str
    egg_rules: tuple[RewriteOrRule, ...]
    egg_names: tuple[str, ...]  # the egglog rule names, as run reports carry them


class _RuleThen:
    def __init__(self, rs: RuleSet, name: str, facts: tuple[Any, ...], doc: str) -> None:
        self._rs, self._name, self._facts, self._doc = rs, name, facts, doc

    def then(self, *actions: Any) -> NamedRule:
        egg = rule(*self._facts, name=self._name).then(*actions)
        return self._rs._add(self._name, self._doc, (egg,), (self._name,))


class RuleSet:
    """A named set of named rules, registered in ``RULESETS`` unless ``register=False``.

    ``RuleSet("algebra", "distributivity and friends")`` then ``rs.rewrite(...)``,
    ``rs.birewrite(...)`` or ``rs.rule(name, *facts).then(*actions)``. Unregistered sets
    (tests, experiments) are passed to the driver as objects; their rule names need only be
    unique within the set.
    """

    def __init__(self, name: str, doc: str, *, register: bool = True) -> None:
        _check_name("rule set", name)
        if register and (name in RULESETS or name in RULES):
            what = "rule set" if name in RULESETS else "rule"
            raise ValueError(f"rule set {name!r} is already registered (as a {what})")
        self.name, self.doc, self.registered = name, doc, register
        self._rules: dict[str, NamedRule] = {}
        if register:
            RULESETS[name] = self

    @property
    def rules(self) -> tuple[NamedRule, ...]:
        """The rules in the order they were added."""
        return tuple(self._rules.values())

    def __repr__(self) -> str:
        return f"RuleSet({self.name!r}, {len(self._rules)} rules)"

    def rewrite(self, name: str, lhs: Tensor | TensorList, rhs: Tensor | TensorList,
                *when: Any, doc: str = "", subsume_lhs: bool = False) -> NamedRule:
        """``lhs`` -> ``rhs`` where the conditions ``when`` hold (``subsume_lhs``: hide lhs)."""
        return self._add(name, doc, (_rewrite(name, lhs, rhs, when, subsume_lhs),), (name,))

    def birewrite(self, name: str, lhs: Tensor | TensorList, rhs: Tensor | TensorList,
                  *when: Any, doc: str = "") -> NamedRule:
        """``lhs`` <-> ``rhs``: one name for both directions (reverse egglog name ``name<-``)."""
        back = name + "<-"
        rules = (_rewrite(name, lhs, rhs, when, False), _rewrite(back, rhs, lhs, when, False))
        return self._add(name, doc, rules, (name, back))

    def rule(self, name: str, *facts: Any, doc: str = "") -> _RuleThen:
        """A general rule: ``rs.rule("name", eq(x).to(...), ...).then(union(x).with_(...))``."""
        return _RuleThen(self, name, facts, doc)

    def _add(self, name: str, doc: str, egg_rules: tuple[RewriteOrRule, ...],
             egg_names: tuple[str, ...]) -> NamedRule:
        _check_name("rule", name)
        if name in self._rules or (self.registered and (name in RULES or name in RULESETS)):
            other = RULES[name].ruleset if name in RULES else self.name
            raise ValueError(f"rule {name!r} is already registered (in rule set {other!r})")
        named = NamedRule(name, self.name, doc, egg_rules, egg_names)
        self._rules[name] = named
        if self.registered:
            RULES[name] = named
        return named


def _rewrite(egg_name: str, lhs: Any, rhs: Any, when: tuple[Any, ...],
             subsume_lhs: bool) -> RewriteOrRule:
    # a rewrite as a named rule, so its name reaches egglog's run reports
    sort = TensorList if isinstance(lhs, TensorList) else Tensor
    root = var("lhs_root_", sort)
    actions = [union(root).with_(rhs)]
    if subsume_lhs:
        actions.append(subsume(lhs))
    return rule(eq(root).to(lhs), *when, name=egg_name).then(*actions)


def new_egraph() -> EGraph:
    """An empty e-graph for tensor terms (serial: runs are deterministic)."""
    return EGraph(num_threads=1)
