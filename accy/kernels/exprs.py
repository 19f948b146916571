"""Elementwise tensor ops as kernel-IR expressions: one table, shared by every generator."""

from __future__ import annotations

import numpy as np

from accy.ir.ops import Op
from accy.ir.types import DType
from accy.kernels.ir import Bin, Call, Cast, Cond, Expr, Lit, Splat, Un

_FLOAT_CALL = {
    Op.ABS: "fabs", Op.EXP: "exp", Op.LOG: "log", Op.SQRT: "sqrt", Op.RSQRT: "rsqrt",
    Op.SIN: "sin", Op.COS: "cos", Op.FLOOR: "floor", Op.CEIL: "ceil", Op.TANH: "tanh",
    Op.ERF: "erf",
    Op.POW: "pow",
}
_ARITH = {Op.ADD: "+", Op.SUB: "-", Op.MUL: "*", Op.DIV: "/"}
# the C operator of each comparison (a scalar one is a 0/1 bool, a vector one a lane mask)
COMPARE = {Op.EQ: "==", Op.NE: "!=", Op.LT: "<", Op.LE: "<=", Op.GT: ">", Op.GE: ">="}
_LOGICAL = {Op.AND: "&&", Op.OR: "||"}
_INT_ONLY = {Op.NEG, Op.ABS, Op.RELU, Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.MAX, Op.MIN}


def supported(op: Op, dtype: DType) -> bool:
    """Whether :func:`elementwise` has an expression for ``op`` on ``dtype`` operands."""
    if op in COMPARE or op in _LOGICAL or op in (Op.NOT, Op.SELECT, Op.CAST):
        return True
    if dtype.is_float:
        return op.is_elementwise
    return dtype.is_int and op in _INT_ONLY


def const(value: float | int | bool, dtype: DType) -> Lit:
    """A literal of ``dtype`` (floats rounded to the dtype first)."""
    if dtype is DType.bool:
        return Lit(bool(value), dtype)
    if dtype.is_int:
        return Lit(int(value), dtype)
    return Lit(float(np.asarray(value, dtype=dtype.numpy)), dtype)


def elementwise(op: Op, args: list[Expr], operand: DType, result: DType) -> Expr:
    """The expression computing ``op`` over ``args`` whose (non-condition) dtype is ``operand``.

    Bools are stored as uchar 0/1; max/min propagate NaN like numpy's maximum/minimum.
    """
    one, zero = const(1, operand), const(0, operand)
    a = args[0]
    b = args[1] if len(args) > 1 else None
    if op is Op.CAST:
        if result is DType.bool:
            return Cast(DType.bool, Bin("!=", a, zero))
        return Cast(result, a)
    if op in COMPARE:
        return Cast(DType.bool, Bin(COMPARE[op], a, b))
    if op in _LOGICAL:
        return Cast(DType.bool, Bin(_LOGICAL[op], a, b))
    if op is Op.NOT:
        return Cast(DType.bool, Un("!", a))
    if op is Op.SELECT:
        return Cond(a, b, args[2])
    if op in _ARITH:
        return Bin(_ARITH[op], a, b)
    if op is Op.NEG:
        return Un("-", a)
    if not operand.is_float:
        return _integer(op, a, b, operand, zero)
    if op is Op.POW and _literal(b) == 2.0:  # exact, and pow is a slow call on some CPUs
        return Bin("*", a, a)
    if op in _FLOAT_CALL:
        return Call(_FLOAT_CALL[op], tuple(args))
    if op in (Op.MAX, Op.MIN):
        nan = Bin("||", Call("isnan", (a,)), Call("isnan", (b,)))
        return Cond(nan, Bin("+", a, b), Call("fmax" if op is Op.MAX else "fmin", (a, b)))
    if op is Op.RELU:  # NaN stays NaN, as numpy's maximum(x, 0) (fmax would give 0)
        return Cond(Call("isnan", (a,)), a, Call("fmax", (a, zero)))
    if op is Op.RECIPROCAL:
        return Bin("/", one, a)
    if op is Op.SIGMOID:
        return Bin("/", one, Bin("+", one, Call("exp", (Un("-", a),))))
    if op in (Op.GELU, Op.GELU_TANH):
        if op is Op.GELU:
            inner = Call("erf", (Bin("*", a, const(0.7071067811865476, operand)),))
        else:  # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
            cubic = Bin("*", const(0.044715, operand), Bin("*", a, Bin("*", a, a)))
            inner = Call("tanh", (Bin("*", const(0.7978845608028654, operand),
                                      Bin("+", a, cubic)),))
        gelu = Bin("*", Bin("*", const(0.5, operand), a), Bin("+", one, inner))
        # at -inf the formula is -inf * 0 (NaN); the function's limit is 0 (+inf stays inf)
        return Cond(Call("isinf", (a,)), Call("fmax", (a, zero)), gelu)
    raise ValueError(f"no kernel expression for {op.value} on {operand.value}")


def _literal(e: Expr | None) -> float | int | bool | None:
    """The value of a literal (or of a splat of one), else None."""
    if isinstance(e, Splat):
        e = e.value
    return e.value if isinstance(e, Lit) else None


def _integer(op: Op, a: Expr, b: Expr | None, dtype: DType, zero: Lit) -> Expr:
    if op is Op.ABS:
        return Cast(dtype, Call("abs", (a,)))
    if op is Op.RELU:
        return Call("max", (a, zero))
    if op in (Op.MAX, Op.MIN):
        return Call(op.value, (a, b))
    raise ValueError(f"no kernel expression for {op.value} on {dtype.value}")
