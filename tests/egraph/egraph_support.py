"""Small programs and a toy rule set shared by the e-graph tests."""

from __future__ import annotations

import numpy as np
from egglog import eq

from accy.egraph.rules import RuleSet
from accy.egraph.sorts import Tensor, tensors, types
from accy.ir.node import Node
from accy.ir.ops import Op, OpKind
from accy.ir.program import Function, Program
from accy.ir.shapes import infer
from accy.ir.types import DType, TensorType

F32, I32, I64, BOOL = DType.f32, DType.i32, DType.i64, DType.bool


def T(dtype: DType, *shape: int) -> TensorType:
    return TensorType(shape, dtype)


def mk(op: Op, *srcs: Node, **attrs) -> Node:
    typ, norm = infer(op, tuple(s.type for s in srcs), attrs)
    return Node(op, typ, srcs, norm)


def const(arr) -> Node:
    arr = np.asarray(arr)
    return Node(Op.CONSTANT, TensorType(arr.shape, DType.from_numpy(arr.dtype)), (),
                {"value": arr.tobytes()})


def func(name: str, types_: list[TensorType], body) -> Function:
    params = tuple(Node(Op.PARAM, t, (), {"index": i}) for i, t in enumerate(types_))
    results = body(*params)
    results = results if isinstance(results, tuple) else (results,)
    return Function(name, params, tuple(f"p{i}" for i in range(len(params))), results)


def prog(*fns: Function) -> Program:
    return Program(tuple(fns))


def op_case(op: Op) -> Program:
    """One small, valid program that uses ``op``."""
    x23, v3 = T(F32, 2, 3), T(F32, 3)
    kind = op.kind
    if op is Op.PARAM:
        return prog(func("f", [x23], lambda a: a))
    if op is Op.CONSTANT:
        return prog(func("f", [], lambda: (const(np.array([[1.5, -2.0]], np.float32)),
                                           const(np.full((2, 2), 3, np.int32)))))
    if op in (Op.NOT, Op.AND, Op.OR):
        return prog(func("f", [T(BOOL, 4), T(BOOL, 1)], lambda a, b: mk(op, *(a, b)[:op.arity])))
    if kind is OpKind.UNARY:
        return prog(func("f", [x23], lambda a: mk(op, a)))
    if kind in (OpKind.BINARY, OpKind.COMPARE):
        return prog(func("f", [x23, v3], lambda a, b: mk(op, a, b)))
    if op is Op.SELECT:
        return prog(func("f", [T(BOOL, 2, 3), x23, v3], lambda c, a, b: mk(op, c, a, b)))
    if op is Op.CAST:
        return prog(func("f", [x23], lambda a: mk(op, a, dtype=I32)))
    if kind is OpKind.REDUCE:
        return prog(func("f", [T(F32, 2, 3, 4)], lambda a: (
            mk(op, a, axes=(-1,), keepdims=True), mk(op, a, axes=(0, 2), keepdims=False))))
    if op is Op.EINSUM:
        return prog(func("f", [x23, T(F32, 3, 4), T(F32, 4)], lambda a, b, c: (
            mk(op, a, b, spec="ij,jk->ik"), mk(op, a, b, c, spec="ij,jk,k->i"),
            mk(op, a, spec="ij->ji"))))
    if op is Op.RESHAPE:
        return prog(func("f", [x23], lambda a: mk(op, a, shape=(3, -1))))
    if op is Op.TRANSPOSE:
        return prog(func("f", [x23], lambda a: mk(op, a, perm=(1, 0))))
    if op is Op.BROADCAST:
        return prog(func("f", [T(F32, 1, 3)], lambda a: mk(op, a, shape=(4, 2, 3))))
    if op is Op.SLICE:
        return prog(func("f", [T(F32, 4, 5)], lambda a: mk(
            op, a, starts=(1, 0), stops=(-1, 5), steps=(1, 2))))
    if op is Op.CONCAT:
        return prog(func("f", [x23, T(F32, 2, 2)], lambda a, b: (
            mk(op, a, b, axis=-1), mk(op, a, b, a, axis=1))))
    if op is Op.GATHER:
        return prog(func("f", [T(F32, 5, 3), T(I32, 2, 2)], lambda x, i: mk(op, x, i, axis=0)))
    if op is Op.SCATTER_ADD:
        return prog(func("f", [T(F32, 5, 3), T(I64, 4), T(F32, 5, 4)],
                         lambda x, i, u: mk(op, x, i, u, axis=1)))
    if kind is OpKind.ROWWISE:
        return prog(func("f", [x23], lambda a: mk(op, a, axis=-1)))
    if op is Op.CROSS_ENTROPY:
        return prog(func("f", [T(F32, 4, 5), T(I32, 4)], lambda lg, lb: mk(op, lg, lb)))
    if op is Op.CONV2D:
        return prog(func("f", [T(F32, 1, 4, 5, 5), T(F32, 6, 2, 3, 3)], lambda x, w: mk(
            op, x, w, strides=(2, 1), pads=(1, 0, 1, 2), dilations=(1, 2), groups=2)))
    if op in (Op.MAX_POOL2D, Op.AVG_POOL2D):
        extra = {"count_include_pad": True} if op is Op.AVG_POOL2D else {}
        return prog(func("f", [T(F32, 1, 2, 5, 5)], lambda x: mk(
            op, x, kernel=(3, 2), strides=(2, 1), pads=(1, 0, 0, 1), **extra)))
    if op is Op.PAD:
        return prog(func("f", [x23], lambda x: mk(
            op, x, const(np.array(-1.5, np.float32)), pads=(1, 0, 0, 2))))
    raise AssertionError(f"no case for {op}")


def factor_programs(n: int = 1024) -> tuple[Program, Program]:
    """``a*b + a*c`` and ``a*(b+c)`` over f32[n]."""
    v = T(F32, n)
    spread = prog(func("f", [v, v, v], lambda a, b, c: mk(
        Op.ADD, mk(Op.MUL, a, b), mk(Op.MUL, a, c))))
    factored = prog(func("f", [v, v, v], lambda a, b, c: mk(Op.MUL, a, mk(Op.ADD, b, c))))
    return spread, factored


def toy_rules() -> RuleSet:
    """Commutativity and associativity of add and mul, and factoring a common left operand."""
    a, b, c = tensors("a b c")
    (t,) = types("t")
    rs = RuleSet("toy", "a toy rule set for tests", register=False)
    rs.rewrite("add-commute", Tensor.add(a, b, t), Tensor.add(b, a, t))
    rs.rewrite("mul-commute", Tensor.mul(a, b, t), Tensor.mul(b, a, t))
    rs.rewrite("add-assoc", Tensor.add(Tensor.add(a, b, t), c, t),
               Tensor.add(a, Tensor.add(b, c, t), t))
    rs.rewrite("factor", Tensor.add(Tensor.mul(a, b, t), Tensor.mul(a, c, t), t),
               Tensor.mul(a, Tensor.add(b, c, t), t), eq(b.ty).to(t), eq(c.ty).to(t))
    return rs


def chain(n: int, width: int = 8) -> Program:
    """A sum of ``n`` parameters, left-nested: associativity makes it grow fast."""
    v = T(F32, width)

    def body(*ps):
        acc = ps[0]
        for p in ps[1:]:
            acc = mk(Op.ADD, acc, p)
        return acc
    return prog(func("f", [v] * n, body))
