"""One small program per named rule: a left-hand side containing the rule's pattern and the
right-hand side the rule rewrites it to (``rhs=None``: the constant the interpreter computes,
for fold rules)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from accy.builder import Builder, FunctionBuilder, Value, concat, conv2d, einsum, select
from accy.ir.interpret import interpret
from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.program import Program
from accy.ir.types import DType
from accy.passes.rebuild import constant, make

Body = Callable[..., Value]


@dataclass(frozen=True)
class Case:
    name: str
    params: tuple[str, ...]  # "f32[4]" ... (a leading "+" asks for positive inputs)
    lhs: Body
    rhs: Body | None  # None: the constant value of lhs (fold rules)

    def program(self, side: str) -> Program:
        body = self.lhs if side == "lhs" else self.rhs
        if body is None:
            return constant_program(self.program("lhs"))
        return build(self.params, body)

    @property
    def positive(self) -> bool:
        return any(p.startswith("+") for p in self.params)


def _type(text: str) -> tuple[DType, tuple[int, ...]]:
    text = text.lstrip("+")
    dtype, dims = text[:-1].split("[")
    return DType.parse(dtype), tuple(int(d) for d in dims.split(",") if d)


def build(params: tuple[str, ...], body: Body) -> Program:
    b = Builder()
    types = [b.tensor(*_type(p)) for p in params]
    f = b.begin_function("f", types, [f"p{i}" for i in range(len(params))])
    f.return_(body(f, *(f.param(i) for i in range(len(params)))))
    f.finish()
    return b.finish()


def constant_program(lhs: Program) -> Program:
    (value,) = interpret(lhs, [])
    return build((), lambda f: f.constant(np.asarray(value), lhs.function().results[0].type.dtype))


def inputs(case: Case, program: Program, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for p, param in zip(case.params, program.function().params, strict=True):
        t = param.type
        if t.dtype is DType.bool:
            a = rng.random(t.shape) < 0.5
        elif t.dtype.is_int:
            a = rng.integers(-6, 7, t.shape)
        elif p.startswith("+"):
            a = rng.uniform(0.25, 3, t.shape)
        else:
            a = rng.uniform(-3, 3, t.shape)
        out.append(np.asarray(a, dtype=t.dtype.numpy))
    return out


def c(f: FunctionBuilder, value: Any, dtype: DType = DType.f32, shape: tuple[int, ...] = ()
      ) -> Value:
    return f.constant(np.full(shape, value, dtype=dtype.numpy), dtype)


F4, F34, F234, I4, B4 = "f32[4]", "f32[3,4]", "f32[2,3,4]", "i32[4]", "bool[4]"
CASES: list[Case] = []


def case(name: str, params: tuple[str, ...], lhs: Body, rhs: Body | None) -> None:
    CASES.append(Case(name, params, lhs, rhs))


# ---- canonical -------------------------------------------------------------------------------

case("constant-right-add", (F4,), lambda f, x: c(f, 2.0) + x, lambda f, x: x + c(f, 2.0))
case("constant-right-mul", (F4,), lambda f, x: c(f, 2.0) * x, lambda f, x: x * c(f, 2.0))
case("reassociate-constants-add", (F4,), lambda f, x: (x + c(f, 2.0)) + c(f, 3.0),
     lambda f, x: x + (c(f, 2.0) + c(f, 3.0)))
case("reassociate-constants-mul", (F4,), lambda f, x: (x * c(f, 2.0)) * c(f, 3.0),
     lambda f, x: x * (c(f, 2.0) * c(f, 3.0)))
case("reassociate-constants-add-int", (I4,),
     lambda f, x: (x + c(f, 2, DType.i32)) + c(f, 3, DType.i32),
     lambda f, x: x + (c(f, 2, DType.i32) + c(f, 3, DType.i32)))
case("reassociate-constants-mul-int", (I4,),
     lambda f, x: (x * c(f, 2, DType.i32)) * c(f, 3, DType.i32),
     lambda f, x: x * (c(f, 2, DType.i32) * c(f, 3, DType.i32)))
case("add-zero", (F4,), lambda f, x: x + c(f, 0.0), lambda f, x: x)
case("add-zero-int", (I4,), lambda f, x: x + c(f, 0, DType.i32), lambda f, x: x)
case("sub-zero", (F4,), lambda f, x: x - c(f, 0.0), lambda f, x: x)
case("mul-one", (F4,), lambda f, x: x * c(f, 1.0), lambda f, x: x)
case("div-one", (F4,), lambda f, x: x / c(f, 1.0), lambda f, x: x)
case("mul-neg-one", (F4,), lambda f, x: x * c(f, -1.0), lambda f, x: -x)
case("mul-zero", (F4,), lambda f, x: x * c(f, 0.0), lambda f, x: c(f, 0.0, shape=(4,)))
case("mul-zero-int", (I4,), lambda f, x: x * c(f, 0, DType.i32),
     lambda f, x: c(f, 0, DType.i32, (4,)))
case("sub-self", (F4,), lambda f, x: x - x, lambda f, x: c(f, 0.0, shape=(4,)))
case("sub-self-int", (I4,), lambda f, x: x - x, lambda f, x: c(f, 0, DType.i32, (4,)))
case("max-self", (F4,), lambda f, x: f.op(Op.MAX, x, x), lambda f, x: x)
case("min-self", (F4,), lambda f, x: f.op(Op.MIN, x, x), lambda f, x: x)
case("neg-neg", (F4,), lambda f, x: f.op(Op.NEG, -x), lambda f, x: x)
case("abs-abs", (F4,), lambda f, x: abs(abs(x)), lambda f, x: abs(x))
case("abs-neg", (F4,), lambda f, x: abs(-x), lambda f, x: abs(x))
case("relu-relu", (F4,), lambda f, x: x.relu().relu(), lambda f, x: x.relu())
case("not-not", (B4,), lambda f, x: ~~x, lambda f, x: x)
case("and-self", (B4,), lambda f, x: x & x, lambda f, x: x)
case("or-self", (B4,), lambda f, x: x | x, lambda f, x: x)
case("select-same", (B4, F4), lambda f, k, x: select(k, x, x), lambda f, k, x: x)
case("transpose-transpose", (F234,), lambda f, x: x.transpose(1, 0, 2).transpose(2, 0, 1),
     lambda f, x: x.transpose(2, 1, 0))
case("transpose-identity", (F34,), lambda f, x: x.transpose(0, 1), lambda f, x: x)
case("reshape-reshape", (F34,), lambda f, x: x.reshape(2, 6).reshape(6, 2),
     lambda f, x: x.reshape(6, 2))
case("reshape-identity", (F34,), lambda f, x: x.reshape(3, 4), lambda f, x: x)
case("broadcast-broadcast", (F4,), lambda f, x: x.broadcast_to(3, 4).broadcast_to(2, 3, 4),
     lambda f, x: x.broadcast_to(2, 3, 4))
case("broadcast-identity", (F34,), lambda f, x: x.broadcast_to(3, 4), lambda f, x: x)
case("slice-identity", (F34,), lambda f, x: x[0:3, 0:4], lambda f, x: x)
for _op in ("add", "sub", "mul", "div", "max", "min"):
    _o = Op(_op)
    case(f"broadcast-into-{_op}-lhs", (F4, F34),
         lambda f, x, y, o=_o: f.op(o, x.broadcast_to(3, 4), y),
         lambda f, x, y, o=_o: f.op(o, x, y))
    case(f"broadcast-into-{_op}-rhs", (F4, F34),
         lambda f, x, y, o=_o: f.op(o, y, x.broadcast_to(3, 4)),
         lambda f, x, y, o=_o: f.op(o, y, x))

# ---- fold ------------------------------------------------------------------------------------

_UNARY_VALUES = {"neg": 1.5, "abs": -2.0, "exp": 0.5, "log": 2.0, "sqrt": 4.0, "rsqrt": 4.0,
                 "sin": 1.0, "cos": 1.0, "reciprocal": 4.0, "floor": 1.5, "ceil": 1.5,
                 "erf": 0.5, "relu": -1.0, "gelu": 1.0, "gelu_tanh": 1.0, "sigmoid": 1.0,
                 "tanh": 0.5}
for _op, _v in _UNARY_VALUES.items():
    _o = Op(_op)
    case(f"fold-{_op.replace('_', '-')}", (),
         lambda f, o=_o, v=_v: f.op(o, c(f, v, shape=(4,))), None)
case("fold-not", (), lambda f: ~c(f, True, DType.bool, (4,)), None)
for _op in ("add", "sub", "mul", "div", "max", "min", "pow", "eq", "ne", "lt", "le", "gt", "ge"):
    _o = Op(_op)
    case(f"fold-{_op}", (), lambda f, o=_o: f.op(o, c(f, 1.5, shape=(4,)), c(f, 3.0)), None)
case("fold-and", (), lambda f: c(f, True, DType.bool, (4,)) & c(f, False, DType.bool), None)
case("fold-or", (), lambda f: c(f, True, DType.bool, (4,)) | c(f, False, DType.bool), None)
case("fold-cast", (), lambda f: c(f, 2.75, shape=(4,)).astype(DType.i32), None)
case("fold-select", (), lambda f: select(c(f, False, DType.bool, (4,)), c(f, 1.0), c(f, 2.0)),
     None)
case("select-true", (F4, F4), lambda f, x, y: select(c(f, True, DType.bool, (4,)), x, y),
     lambda f, x, y: x)
case("select-false", (F4, F4), lambda f, x, y: select(c(f, False, DType.bool, (4,)), x, y),
     lambda f, x, y: y)
case("fold-broadcast", (), lambda f: c(f, 2.5, shape=(4,)).broadcast_to(3, 4), None)
case("fold-reshape", (), lambda f: c(f, 2.5, shape=(3, 4)).reshape(4, 3), None)
case("fold-transpose", (), lambda f: c(f, 2.5, shape=(3, 4)).transpose(1, 0), None)
case("fold-slice", (), lambda f: c(f, 2.5, shape=(3, 4))[1:3, ::2], None)
case("fold-reduce-max", (), lambda f: c(f, 2.5, shape=(3, 4)).max(axes=(1,)), None)

# ---- algebra ---------------------------------------------------------------------------------

case("add-commute", (F4, F4), lambda f, x, y: x + y, lambda f, x, y: y + x)
case("mul-commute", (F4, F4), lambda f, x, y: x * y, lambda f, x, y: y * x)
case("add-assoc", (F4, F4, F4), lambda f, x, y, z: (x + y) + z, lambda f, x, y, z: x + (y + z))
case("mul-assoc", (F4, F4, F4), lambda f, x, y, z: (x * y) * z, lambda f, x, y, z: x * (y * z))
case("factor-mul-add", (F4, F4, F4), lambda f, a, b, d: a * b + a * d,
     lambda f, a, b, d: a * (b + d))
case("factor-mul-sub", (F4, F4, F4), lambda f, a, b, d: a * b - a * d,
     lambda f, a, b, d: a * (b - d))
case("distribute-mul-add", (F4, F4, F4), lambda f, a, b, d: a * (b + d),
     lambda f, a, b, d: a * b + a * d)
case("sub-neg", (F4, F4), lambda f, x, y: x - (-y), lambda f, x, y: x + y)
case("add-neg", (F4, F4), lambda f, x, y: x + (-y), lambda f, x, y: x - y)
case("mul-neg-neg", (F4, F4), lambda f, x, y: (-x) * (-y), lambda f, x, y: x * y)
case("log-exp", (F4,), lambda f, x: x.exp().log(), lambda f, x: x)
case("exp-log", ("+" + F4,), lambda f, x: x.log().exp(), lambda f, x: x)
case("exp-add", (F4, F4), lambda f, x, y: x.exp() * y.exp(), lambda f, x, y: (x + y).exp())
case("pow-one", (F4,), lambda f, x: x ** c(f, 1.0), lambda f, x: x)
case("pow-two", (F4,), lambda f, x: x ** c(f, 2.0), lambda f, x: x * x)
case("pow-half", ("+" + F4,), lambda f, x: x ** c(f, 0.5), lambda f, x: x.sqrt())
case("pow-neg-one", ("+" + F4,), lambda f, x: x ** c(f, -1.0), lambda f, x: x.reciprocal())
case("div-pow2", (F4,), lambda f, x: x / c(f, 4.0), lambda f, x: x * c(f, 0.25))
case("div-reciprocal", (F4,), lambda f, x: x / c(f, 3.0),
     lambda f, x: x * c(f, float(np.float32(1) / np.float32(3))))
case("sum-of-broadcast", (F4,), lambda f, x: x.broadcast_to(3, 4).sum(axes=(0,)),
     lambda f, x: x.reshape(4) * c(f, 3.0))
case("mean-of-broadcast", (F4,), lambda f, x: x.broadcast_to(3, 4).mean(axes=(0,)),
     lambda f, x: x.reshape(4))
case("max-of-broadcast", ("f32[1,4]",), lambda f, x: x.broadcast_to(3, 4).max(axes=(0,),
                                                                            keepdims=True),
     lambda f, x: x.reshape(1, 4))

# ---- einsum ----------------------------------------------------------------------------------

A, B, C = "f32[2,3]", "f32[3,4]", "f32[4,5]"
case("einsum-swap-01", (A, B), lambda f, a, b: einsum("ij,jk->ik", a, b),
     lambda f, a, b: einsum("jk,ij->ik", b, a))
case("einsum-swap-12", (A, B, C), lambda f, a, b, d: einsum("ij,jk,kl->il", a, b, d),
     lambda f, a, b, d: einsum("ij,kl,jk->il", a, d, b))
case("einsum-merge", (A, B, C),
     lambda f, a, b, d: einsum("ik,kl->il", einsum("ij,jk->ik", a, b), d),
     lambda f, a, b, d: einsum("ab,bc,cd->ad", a, b, d))
case("einsum-split", (A, B, C), lambda f, a, b, d: einsum("ab,bc,cd->ad", a, b, d),
     lambda f, a, b, d: einsum("ab,bc->ac", einsum("ab,bc->ac", a, b), d))
case("einsum-absorb-transpose", ("f32[3,2]", B),
     lambda f, a, b: einsum("ij,jk->ik", a.transpose(1, 0), b),
     lambda f, a, b: einsum("ji,jk->ik", a, b))
case("einsum-absorb-broadcast", ("f32[3]", A),
     lambda f, a, b: einsum("ij,ij->j", a.broadcast_to(2, 3), b),
     lambda f, a, b: einsum("j,ij->j", a, b))
case("transpose-of-einsum", (A, B), lambda f, a, b: einsum("ij,jk->ik", a, b).transpose(1, 0),
     lambda f, a, b: einsum("ij,jk->ki", a, b))
case("einsum-to-transpose", (A,), lambda f, a: einsum("ij->ji", a),
     lambda f, a: a.transpose(1, 0))
case("einsum-identity", (A,), lambda f, a: einsum("ij->ij", a), lambda f, a: a)
case("einsum-pull-scalar", (A, B, "f32[]"), lambda f, a, b, s: einsum("ij,jk->ik", a * s, b),
     lambda f, a, b, s: einsum("ij,jk->ik", a, b) * s)
case("factor-einsum-add", (A, B, B),
     lambda f, a, b, d: einsum("ij,jk->ik", a, b) + einsum("ij,jk->ik", a, d),
     lambda f, a, b, d: einsum("ij,jk->ik", a, b + d))

# ---- activation ------------------------------------------------------------------------------


def _shifted(x: Value) -> Value:
    return x - x.max(axes=(1,), keepdims=True)


case("log-of-softmax", (F34,), lambda f, x: x.softmax(1).log(), lambda f, x: x.log_softmax(1))
case("exp-of-log-softmax", (F34,), lambda f, x: x.log_softmax(1).exp(),
     lambda f, x: x.softmax(1))
case("softmax-from-exp", (F34,),
     lambda f, x: x.exp() / x.exp().sum(axes=(1,), keepdims=True), lambda f, x: x.softmax(1))
case("softmax-from-shifted", (F34,),
     lambda f, x: _shifted(x).exp() / _shifted(x).exp().sum(axes=(1,), keepdims=True),
     lambda f, x: x.softmax(1))
case("log-softmax-from-logsumexp", (F34,),
     lambda f, x: x - x.exp().sum(axes=(1,), keepdims=True).log(),
     lambda f, x: x.log_softmax(1))
case("log-softmax-from-shifted", (F34,),
     lambda f, x: _shifted(x) - _shifted(x).exp().sum(axes=(1,), keepdims=True).log(),
     lambda f, x: x.log_softmax(1))
case("cross-entropy-from-one-hot", (F34, "i32[3]"),
     lambda f, x, y: Value(f, _one_hot_cross_entropy(x.node, _labels(f, y).node)),
     lambda f, x, y: f.op(Op.CROSS_ENTROPY, x, _labels(f, y)))


def _one_hot_cross_entropy(logits: Node, labels: Node) -> Node:
    """``-mean(sum(log_softmax(logits) * onehot(labels), classes))``, as tracers emit it."""
    axis = logits.type.rank - 1
    logp = make(Op.LOG_SOFTMAX, logits, axis=axis)
    column = make(Op.RESHAPE, labels, shape=(*labels.type.shape, 1))
    iota = constant(np.arange(logits.type.shape[-1]), labels.type.dtype)
    onehot = make(Op.CAST, make(Op.EQ, column, iota), dtype=logits.type.dtype)
    picked = make(Op.REDUCE_SUM, make(Op.MUL, logp, onehot), axes=(axis,), keepdims=False)
    return make(Op.NEG, make(Op.REDUCE_MEAN, picked, axes=tuple(range(labels.type.rank)),
                             keepdims=False))


def _labels(f: FunctionBuilder, y: Value) -> Value:
    """Labels in range: |y| mod 4 (random inputs are in [-6, 6])."""
    return f.op(Op.ABS, y) - (f.op(Op.ABS, y) / c(f, 4, DType.i32)) * c(f, 4, DType.i32)


# ---- layout ----------------------------------------------------------------------------------

for _op in ("neg", "abs", "exp", "log", "sqrt", "relu", "gelu", "gelu_tanh", "sigmoid", "tanh"):
    _o, _p = Op(_op), ("+" + F34,) if _op in ("log", "sqrt") else (F34,)
    _k = _op.replace("_", "-")  # rule names are kebab-case
    case(f"transpose-through-{_k}", _p, lambda f, x, o=_o: f.op(o, x).transpose(1, 0),
         lambda f, x, o=_o: f.op(o, x.transpose(1, 0)))
    case(f"reshape-through-{_k}", _p, lambda f, x, o=_o: f.op(o, x).reshape(2, 6),
         lambda f, x, o=_o: f.op(o, x.reshape(2, 6)))
    case(f"broadcast-through-{_k}", _p, lambda f, x, o=_o: f.op(o, x.broadcast_to(2, 3, 4)),
         lambda f, x, o=_o: f.op(o, x).broadcast_to(2, 3, 4))
case("transpose-through-cast", (F34,), lambda f, x: x.astype(DType.i32).transpose(1, 0),
     lambda f, x: x.transpose(1, 0).astype(DType.i32))
case("reshape-through-cast", (F34,), lambda f, x: x.astype(DType.i32).reshape(12),
     lambda f, x: x.reshape(12).astype(DType.i32))
case("broadcast-through-cast", (F34,), lambda f, x: x.broadcast_to(2, 3, 4).astype(DType.i32),
     lambda f, x: x.astype(DType.i32).broadcast_to(2, 3, 4))
for _op in ("add", "sub", "mul", "div", "max", "min"):
    _o = Op(_op)
    case(f"transpose-through-{_op}", (F34, F34),
         lambda f, x, y, o=_o: f.op(o, x, y).transpose(1, 0),
         lambda f, x, y, o=_o: f.op(o, x.transpose(1, 0), y.transpose(1, 0)))
    case(f"reshape-through-{_op}", (F34, F34), lambda f, x, y, o=_o: f.op(o, x, y).reshape(12),
         lambda f, x, y, o=_o: f.op(o, x.reshape(12), y.reshape(12)))
    case(f"broadcast-through-{_op}", (F4, F4),
         lambda f, x, y, o=_o: f.op(o, x.broadcast_to(3, 4), y.broadcast_to(3, 4)),
         lambda f, x, y, o=_o: f.op(o, x, y).broadcast_to(3, 4))

# ---- concat ----------------------------------------------------------------------------------

case("concat-single", (F34,), lambda f, x: concat([x], 0), lambda f, x: x)
case("concat-flatten-first", (F34, F34, F34),
     lambda f, a, b, d: concat([concat([a, b], 0), d], 0), lambda f, a, b, d: concat([a, b, d], 0))
case("concat-flatten-second", (F34, F34, F34),
     lambda f, a, b, d: concat([a, concat([b, d], 0)], 0), lambda f, a, b, d: concat([a, b, d], 0))
case("slice-concat-head", (F34, F34), lambda f, a, b: concat([a, b], 0)[0:2],
     lambda f, a, b: a[0:2])
case("slice-concat-tail", (F34, F34), lambda f, a, b: concat([a, b], 0)[4:6],
     lambda f, a, b: concat([b], 0)[1:3])
case("concat-adjacent-slices", (F34,), lambda f, x: concat([x[0:1], x[1:3]], 0),
     lambda f, x: concat([x[0:3]], 0))
case("slice-slice", (F34,), lambda f, x: x[1:3][0:1, ::2], lambda f, x: x[1:2, 0:3:2])
case("concat-of-einsums-shared-first", (A, B, B),
     lambda f, x, w, v: concat([x @ w, x @ v], 1), lambda f, x, w, v: x @ concat([w, v], 1))
case("concat-of-einsums-shared-second", (A, A, B),
     lambda f, x, y, w: concat([x @ w, y @ w], 0), lambda f, x, y, w: concat([x, y], 0) @ w)
case("einsum-of-concat-shared-first", (A, B, B),
     lambda f, x, w, v: x @ concat([w, v], 1), lambda f, x, w, v: concat([x @ w, x @ v], 1))
case("einsum-of-concat-shared-second", (A, A, B),
     lambda f, x, y, w: concat([x, y], 0) @ w, lambda f, x, y, w: concat([x @ w, y @ w], 0))
for _op in ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "reciprocal", "floor",
            "ceil", "erf", "relu", "gelu", "gelu_tanh", "sigmoid", "tanh"):
    _o = Op(_op)
    case(f"concat-of-{_op.replace('_', '-')}", ("+" + F34, "+" + F4.replace("[4]", "[2,4]")),
         lambda f, a, b, o=_o: concat([f.op(o, a), f.op(o, b)], 0),
         lambda f, a, b, o=_o: f.op(o, concat([a, b], 0)))
for _op in ("add", "sub", "mul", "div", "max", "min", "pow"):
    _o = Op(_op)
    case(f"concat-of-{_op}", ("+" + F34, "+" + F34, "+f32[2,4]", "+f32[2,4]"),
         lambda f, a, b, x, y, o=_o: concat([f.op(o, a, b), f.op(o, x, y)], 0),
         lambda f, a, b, x, y, o=_o: f.op(o, concat([a, x], 0), concat([b, y], 0)))

# ---- merge (multi-pattern) -------------------------------------------------------------------

# the merged operands have different types, so random programs never make them one value
# (the rules need two distinct operands)
case("merge-shared-first", (A, B, "f32[3,5]"), lambda f, x, w, v: concat([x @ w, x @ v], 1),
     lambda f, x, w, v: (lambda m: concat([m[:, 0:4], m[:, 4:9]], 1))(x @ concat([w, v], 1)))
case("merge-shared-second", (A, "f32[1,3]", B), lambda f, x, y, w: concat([x @ w, y @ w], 0),
     lambda f, x, y, w: (lambda m: concat([m[0:2], m[2:3]], 0))(concat([x, y], 0) @ w))
case("merge-conv-shared-input", ("f32[1,3,6,6]", "f32[2,3,3,3]", "f32[4,3,3,3]"),
     lambda f, x, w, v: concat([conv2d(x, w, padding=1), conv2d(x, v, padding=1)], 1),
     lambda f, x, w, v: (lambda m: concat([m[:, 0:2], m[:, 2:6]], 1))(
         conv2d(x, concat([w, v], 0), padding=1)))

BY_NAME = {cs.name: cs for cs in CASES}
assert len(BY_NAME) == len(CASES), "a rule has two cases"
