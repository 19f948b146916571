"""Algebra: commutativity, associativity, distributivity, negation, exp/log, pow, division,
and reductions of broadcasts (rule set ``algebra``).

Distributivity runs both ways (factoring cuts a multiply; distributing can expose other
rewrites) and extraction keeps whichever is cheaper. Commutativity is plain (``a+b <-> b+a``)
but bounded by what else fires: alone it only mirrors terms, which the passes never prefer
(they keep the input unless the extracted program is strictly cheaper).
"""

from __future__ import annotations

import math

import numpy as np
from egglog import Bool, f64, var

from accy.egraph.rules import infer_type, py_text
from accy.egraph.sorts import Tensor, parse_type, tensors, types
from rewrites import Theme, has_type, holds, py_f64
from rewrites._numeric import is_float, parse_ints, shape_text

algebra = Theme("algebra", "commutativity, distributivity, exp/log, pow, division, reductions")

a, b, c, x = tensors("a b c x")
t, t1, t2, ta, tb, tc, tk, s, ax = types("t t1 t2 ta tb tc tk s ax")
k = var("k", Bool)
v = var("v", f64)

# ---- commutativity and associativity ----------------------------------------------------------

algebra.rewrite("add-commute", Tensor.add(a, b, t), Tensor.add(b, a, t), policy="exact",
                permutes=True, doc="a + b -> b + a")
algebra.rewrite("mul-commute", Tensor.mul(a, b, t), Tensor.mul(b, a, t), policy="exact",
                permutes=True, doc="a * b -> b * a")
algebra.birewrite("add-assoc", Tensor.add(Tensor.add(a, b, t), c, t),
                  Tensor.add(a, Tensor.add(b, c, t), t),
                  has_type(a, t), has_type(b, t), has_type(c, t), policy="fast-math",
                  doc="(a + b) + c <-> a + (b + c) (operands of one type)")
algebra.birewrite("mul-assoc", Tensor.mul(Tensor.mul(a, b, t), c, t),
                  Tensor.mul(a, Tensor.mul(b, c, t), t),
                  has_type(a, t), has_type(b, t), has_type(c, t), policy="fast-math",
                  doc="(a * b) * c <-> a * (b * c) (operands of one type)")

# ---- distributivity ---------------------------------------------------------------------------

algebra.rewrite("factor-mul-add", Tensor.add(Tensor.mul(a, b, t1), Tensor.mul(a, c, t2), t),
                Tensor.mul(a, Tensor.add(b, c, infer_type("add", tb, tc)), t),
                has_type(b, tb), has_type(c, tc), policy="fast-math",
                doc="a*b + a*c -> a*(b + c): one multiply fewer")
algebra.rewrite("factor-mul-sub", Tensor.sub(Tensor.mul(a, b, t1), Tensor.mul(a, c, t2), t),
                Tensor.mul(a, Tensor.sub(b, c, infer_type("sub", tb, tc)), t),
                has_type(b, tb), has_type(c, tc), policy="fast-math",
                doc="a*b - a*c -> a*(b - c): one multiply fewer")
algebra.rewrite("distribute-mul-add", Tensor.mul(a, Tensor.add(b, c, t1), t),
                Tensor.add(Tensor.mul(a, b, infer_type("mul", ta, tb)),
                           Tensor.mul(a, c, infer_type("mul", ta, tc)), t),
                has_type(a, ta), has_type(b, tb), has_type(c, tc), policy="fast-math",
                doc="a*(b + c) -> a*b + a*c (the reverse of factor-mul-add)")

# ---- negation ---------------------------------------------------------------------------------

algebra.rewrite("sub-neg", Tensor.sub(a, Tensor.neg(b, tb), t), Tensor.add(a, b, t),
                policy="exact", doc="a - (-b) -> a + b")
algebra.rewrite("add-neg", Tensor.add(a, Tensor.neg(b, tb), t), Tensor.sub(a, b, t),
                policy="exact", doc="a + (-b) -> a - b")
algebra.rewrite("mul-neg-neg", Tensor.mul(Tensor.neg(a, ta), Tensor.neg(b, tb), t),
                Tensor.mul(a, b, t), policy="exact", doc="(-a) * (-b) -> a * b")

# ---- exp and log --------------------------------------------------------------------------------

algebra.rewrite("log-exp", Tensor.log(Tensor.exp(x, t1), t), x, policy="fast-math",
                doc="log(exp(x)) -> x (exp overflows for large x)")
algebra.rewrite("exp-log", Tensor.exp(Tensor.log(x, t1), t), x, policy="fast-math",
                doc="exp(log(x)) -> x (log of a negative x is nan)")
algebra.rewrite("exp-add", Tensor.mul(Tensor.exp(a, ta), Tensor.exp(b, tb), t),
                Tensor.exp(Tensor.add(a, b, t), t), policy="fast-math",
                doc="exp(a) * exp(b) -> exp(a + b): one exp fewer")

# ---- pow ----------------------------------------------------------------------------------------

# pow(x, 1) and pow(x, 2) are canonical forms: rewrites/canonical.py
algebra.rewrite("pow-half", Tensor.pow(x, Tensor.full(0.5, tc), t), Tensor.sqrt(x, t),
                has_type(x, t), policy="finite-math",
                doc="pow(x, 0.5) -> sqrt(x) (they differ at -0 and -inf)")
algebra.rewrite("pow-neg-one", Tensor.pow(x, Tensor.full(-1.0, tc), t),
                Tensor.reciprocal(x, t), has_type(x, t), policy="stable",
                doc="pow(x, -1) -> reciprocal(x)")

# ---- division by a constant ---------------------------------------------------------------------


def _reciprocal(value: str, type_text: str) -> float | None:
    """1/value rounded to the dtype, if finite and normal; None otherwise."""
    try:
        dtype = parse_type(type_text).dtype
        if not dtype.is_float:
            return None
        with np.errstate(all="ignore"):
            r = float(np.divide(dtype.numpy.type(1), dtype.numpy.type(float(value))))
        info = np.finfo(dtype.numpy)
        return r if math.isfinite(r) and abs(r) >= float(info.tiny) else None
    except (ValueError, TypeError, ZeroDivisionError):
        return None


def _power_of_two_reciprocal(value: str, type_text: str) -> bool:
    r = _reciprocal(value, type_text)
    return r is not None and math.frexp(abs(r))[0] == 0.5


def _other_reciprocal(value: str, type_text: str) -> bool:
    return _reciprocal(value, type_text) is not None and not _power_of_two_reciprocal(
        value, type_text)


def _reciprocal_value(value: str, type_text: str) -> float:
    return _reciprocal(value, type_text) or 1.0


algebra.rewrite("div-pow2", Tensor.div(x, Tensor.full(v, tc), t),
                Tensor.mul(x, Tensor.full(py_f64(_reciprocal_value, v.to_string(), tc), tc), t),
                holds(_power_of_two_reciprocal, v.to_string(), tc), policy="exact",
                doc="x / 2^k -> x * 2^-k (floats; exact: the reciprocal is exact)")
algebra.rewrite("div-reciprocal", Tensor.div(x, Tensor.full(v, tc), t),
                Tensor.mul(x, Tensor.full(py_f64(_reciprocal_value, v.to_string(), tc), tc), t),
                holds(_other_reciprocal, v.to_string(), tc), policy="fast-math",
                doc="x / c -> x * (1/c) (floats; the reciprocal is rounded)")

# ---- reductions of broadcasts -------------------------------------------------------------------


def _broadcast_reduction(x_type: str, target: str, axes: str, result: str) -> int | None:
    """How many copies a reduction over ``axes`` of ``broadcast(x, target)`` adds up per
    result element, if it reduces exactly the axes the broadcast made (and the result has
    x's elements), else None."""
    try:
        xt, shape, out = parse_type(x_type), parse_ints(target), parse_type(result)
        reduced = parse_ints(axes)
        if shape is None or reduced is None or xt.size != out.size or xt.size == 0:
            return None
        lead = len(shape) - xt.rank
        made = {i for i in range(len(shape))
                if i < lead or (xt.shape[i - lead] == 1 and shape[i] != 1)}
        kept_ones = {i for i in range(len(shape)) if shape[i] == 1}
        if not made <= set(reduced) <= made | kept_ones:
            return None
        return math.prod(shape[i] for i in reduced)
    except (ValueError, IndexError):
        return None


def _broadcast_reduction_ok(x_type: str, target: str, axes: str, result: str) -> bool:
    return _broadcast_reduction(x_type, target, axes, result) is not None


def _exact_count(x_type: str, target: str, axes: str, result: str) -> bool:
    """The copy count is exact in the result's dtype (so the splat holds it as it is)."""
    n = _broadcast_reduction(x_type, target, axes, result)
    try:
        return n is not None and float(parse_type(result).dtype.numpy.type(n)) == n
    except (ValueError, OverflowError):
        return False


def _copies(x_type: str, target: str, axes: str, result: str) -> float:
    return float(_broadcast_reduction(x_type, target, axes, result) or 1)


def _scalar_of(result: str) -> str:
    return f"{parse_type(result).dtype.value}[]"


_bx = Tensor.broadcast(x, s, tb)
_same = Tensor.reshape(x, py_text(shape_text, t), t)  # x's elements in the result's shape


def _when() -> tuple:
    return has_type(x, ta), holds(_broadcast_reduction_ok, ta, s, ax, t)


algebra.rewrite(
    "sum-of-broadcast", Tensor.reduce_sum(_bx, ax, k, t),
    Tensor.mul(_same, Tensor.full(py_f64(_copies, ta, s, ax, t), py_text(_scalar_of, t)), t),
    *_when(), holds(is_float, t), holds(_exact_count, ta, s, ax, t), policy="stable",
    doc="sum of n broadcast copies of x -> x * n (one pass over x, not over n copies)")
algebra.rewrite("mean-of-broadcast", Tensor.reduce_mean(_bx, ax, k, t), _same, *_when(),
                policy="stable", doc="mean of broadcast copies of x -> x")
algebra.rewrite("max-of-broadcast", Tensor.reduce_max(_bx, ax, k, t), _same, *_when(),
                policy="exact", doc="max of broadcast copies of x -> x")
