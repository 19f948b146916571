"""Error bounds: how far a *correct* implementation of a program may be from its exact result.

``error_bounds(program, inputs, rtol)`` evaluates one function in float64 (the stand-in for
exact arithmetic) and carries, op by op, two things next to every value:

* ``error``: an absolute bound on how far a correct implementation that rounds each op to the
  op's dtype may be from the float64 value. Each float op adds its own rounding,
  ``rtol[dtype] * scale + tiny(dtype)``, where the scale is the magnitude of the op's *terms*
  (``|a| + |b|`` for an add, ``sum(|x|)`` for a reduction or an average pool,
  ``einsum(|x|, |y|)`` for a contraction or a convolution, ``|result|`` for the rest), and
  passes its operands' errors through by the op's slope (``|b|·err(a) + |a|·err(b)`` for a
  product, ``|exp(a)|·expm1(err(a))`` for ``exp``, the exact perturbation of the multilinear
  form for ``einsum`` and ``conv2d``). So an implementation may sum
  in any order or reassociate and still stay inside the bound, while dropping a term does not.
* ``unstable``: elements where a correct implementation may legitimately give a *different*
  answer: a comparison, ``floor``/``ceil``, or a cast to int or bool whose operand lies within
  its error of the discontinuity; an ``einsum`` output with a non-finite term (the IR leaves
  the order and pairing of its products open, and that decides inf or nan); a ``log``,
  ``div``, ``rsqrt``, ``reciprocal`` or ``pow`` whose operand's error is comparable to the
  operand (the slope bound no longer holds); a ``pow`` whose base is within its error of 1
  under a non-finite exponent, or negative under an exponent within its error of an integer;
  a convolution output whose window puts a non-finite weight on the padding (a kernel may
  skip the padding's 0 * w terms); a value within its error of the dtype's overflow; a sum
  (a reduction, an einsum, a convolution, an average pool, a scatter-add) whose terms'
  magnitudes add up past the dtype's largest value (some order of summing overflows, though
  the result may not: an f16 mean of 60000 and 60000); a (log-)softmax whose exponentials may
  overflow its dtype (an f16 term beside a +inf in its row, a row summing past the largest
  value); and everything computed from such elements.

An op without a rule here (one added to the IR later) gets its error by evaluating it with
its operands moved by their bounds, which is sound for elementwise ops.

``precision`` is the contraction precision policy (``kernelization{precision=...}``, see
:data:`accy.target.PRECISIONS`). Under ``tf32`` an f32 einsum's operands may each be rounded to
TF32 (unit roundoff u = 2^-11, round to nearest) before they are multiplied, and the products
summed in f32: a product's relative error is then at most (1+u)^2 - 1 ~ 2u = 2^-10, so the
einsum adds ``TF32_TERM_RTOL * einsum(|x|, |y|)`` on top of the f32 rule. The bound is worst
case and independent of K (each term is rounded once; K enters only the f32 sums, already
counted); a typical error is smaller, ~2^-11 * sqrt(sum of squared terms), as signs cancel.
Under ``3xtf32`` (big + small TF32 parts, small*small dropped) the extra term is 3u^2 per
product, which the f32 rule already exceeds; it is added anyway, so the statement holds.

Non-finite float64 values (``log(0)``, ``nan`` inputs) get error 0: they are compared by class
(``nan`` with ``nan``, ``inf`` with ``inf``). :class:`Comparison` (behind
``accy.testing.assert_close``) accepts two results whose difference is at most the sum of both
sides' bounds, skipping unstable elements.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import reduce
from typing import Any

import numpy as np
import opt_einsum

from accy.errors import AccyError
from accy.ir.interpret import interpret
from accy.ir.node import Node
from accy.ir.ops import Op, OpKind
from accy.ir.program import Function, Program
from accy.ir.shapes import parse_einsum
from accy.ir.types import DType

__all__ = ["Bound", "Comparison", "error_bounds"]

F64 = np.float64
TF32_UNIT = 2.0**-11  # TF32: 10 explicit mantissa bits, rounded to nearest
EXTRA_EINSUM_RTOL = {  # per precision policy: relative to einsum(|x|, |y|), f32 einsums only
    "ieee": 0.0,
    "tf32": (1 + TF32_UNIT) ** 2 - 1,  # both operands rounded once
    "3xtf32": 3 * TF32_UNIT**2,  # small*small dropped, small parts rounded
}


@dataclass(frozen=True)
class Bound:
    """One result: its float64 value, the error bound per element, the unstable elements."""

    value: np.ndarray
    error: np.ndarray
    unstable: np.ndarray


@dataclass
class Comparison:
    """Results judged against their bounds: elements compared and skipped, what differed."""

    compared: int = 0
    skipped: int = 0
    problems: list[str] = field(default_factory=list)

    def judge(self, where: str, got: Any, want: np.ndarray, bound: Bound, atol: float) -> None:
        """Compare ``got`` with ``want``: floats within ``2 * bound.error + atol`` (nan with
        nan, infinities exactly), others exactly, unstable elements skipped."""
        got = np.asarray(got)
        if got.shape != want.shape or got.dtype != want.dtype:
            self.problems.append(f"{where}: got {got.dtype}{list(got.shape)}, want "
                                 f"{want.dtype}{list(want.shape)}")
            return
        keep = ~bound.unstable
        self.skipped += int(bound.unstable.sum())
        self.compared += int(keep.sum())
        if want.dtype.kind != "f":
            bad = keep & (got != want)
            limit = np.zeros(want.shape)
        else:
            g, w = got.astype(F64), want.astype(F64)
            limit = 2 * bound.error + atol
            with np.errstate(invalid="ignore"):
                same_class = (np.isnan(g) & np.isnan(w)) | (g == w)
                bad = keep & ~same_class & ~(np.abs(g - w) <= limit)
        if bad.any():
            at = tuple(int(j) for j in np.argwhere(bad)[0])
            self.problems.append(
                f"{where}: {int(bad.sum())} of {bad.size} elements differ; first at "
                f"{list(at)}: got {got[at]!r}, want {want[at]!r} (allowed difference "
                f"{float(limit[at]):.3g}, float64 value {float(bound.value[at]):.9g})")


@dataclass(frozen=True)
class _Ctx:
    node: Node
    vs: list[np.ndarray]  # operand values (float64 for floats)
    es: list[np.ndarray]  # operand error bounds
    us: list[np.ndarray]  # operand unstable masks
    out: np.ndarray  # this node's float64 value
    r: float  # rtol of the node's dtype (0 for int and bool)
    tiny: float  # smallest normal of the node's dtype (flush-to-zero and underflow)
    precision: str = "ieee"  # the contraction precision policy (EXTRA_EINSUM_RTOL)

    def mag(self, i: int) -> np.ndarray:
        return np.abs(self.vs[i].astype(F64))

    def rounding(self, scale: Any) -> np.ndarray:
        return self.r * np.asarray(scale, F64) + self.tiny

    def overflows(self, total: Any) -> Any:
        """Where a sum whose (finite) terms' magnitudes add up to ``total`` may overflow the
        node's dtype in some order of summing (partial sums can reach ``total``; every order
        is correct), though its result need not (cancellation, or a mean's division); beside
        an infinite term that decides between inf and nan."""
        if not self.node.type.dtype.is_float:
            return False
        return np.asarray(total, F64) >= float(np.finfo(self.node.type.dtype.numpy).max)

    def joined(self) -> np.ndarray:
        shape = self.out.shape
        return reduce(np.logical_or, (np.broadcast_to(u, shape) for u in self.us),
                      np.zeros(shape, bool))


Rule = Callable[[_Ctx], tuple[Any, Any]]  # -> (error, extra unstable mask or None)


def error_bounds(
    program: Program,
    inputs: Sequence[Any] | Mapping[str, Any],
    rtol: Mapping[DType, float],
    function: str | None = None,
    precision: str = "ieee",
) -> tuple[Bound, ...]:
    """The float64 value, error bound and unstable mask of every result of ``function``.

    ``rtol`` gives each float dtype's allowed rounding per op (relative to the op's terms);
    ``precision`` the contraction policy (see the module docstring: ``tf32`` loosens f32
    einsums). Raises ``InterpretError`` when the inputs do not fit the function.
    """
    if precision not in EXTRA_EINSUM_RTOL:
        raise ValueError(f"precision {precision!r}: one of {', '.join(EXTRA_EINSUM_RTOL)}")
    fn = program.function(function)
    nodes = [n for n in fn.nodes() if n.op is not Op.PARAM]
    probe = Program((Function(fn.name, fn.params, fn.param_names, (*fn.params, *nodes)),))
    values = dict(zip((*fn.params, *nodes), interpret(probe, inputs, precision="float64"),
                      strict=True))
    err: dict[Node, np.ndarray] = {}
    bad: dict[Node, np.ndarray] = {}
    for p in fn.params:
        err[p] = np.zeros(p.type.shape, F64)
        bad[p] = np.zeros(p.type.shape, bool)
    with np.errstate(all="ignore"):
        for n in nodes:
            dtype = n.type.dtype
            r, tiny = (rtol[dtype], float(np.finfo(dtype.numpy).tiny)) if dtype.is_float else (
                0.0, 0.0)
            ctx = _Ctx(n, [values[s] for s in n.srcs], [err[s] for s in n.srcs],
                       [bad[s] for s in n.srcs], values[n], r, tiny, precision)
            e, u = _rule(n)(ctx)
            err[n], bad[n] = _finish(n, values[n], e, u)
    return tuple(Bound(values[r], err[r], bad[r]) for r in fn.results)


def _finish(node: Node, v: np.ndarray, e: Any, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    shape = node.type.shape
    u = np.array(np.broadcast_to(u, shape), dtype=bool)
    if not node.type.dtype.is_float:
        return np.zeros(shape, F64), u
    e = np.array(np.broadcast_to(np.asarray(e, F64), shape))
    finite = np.isfinite(v)
    u |= finite & ~np.isfinite(e)
    u |= finite & (np.abs(v) + e >= float(np.finfo(node.type.dtype.numpy).max))
    return np.where(finite & np.isfinite(e), e, 0.0), u


def _rule(node: Node) -> Rule:
    kind = node.op.kind
    if node.op in _RULES:
        return _RULES[node.op]
    if kind is OpKind.COMPARE:
        return _compare
    if kind is OpKind.LOGICAL:
        return lambda c: (0.0, c.joined())
    if kind is OpKind.MOVEMENT:
        return _movement
    return _perturbed


def _perturbed(c: _Ctx) -> tuple[Any, Any]:
    """An op without a rule of its own (a new op): evaluate it with its operands moved by
    their error bounds (every sign pattern of up to 3 operands) and take the largest change;
    a non-float result that changes is unstable. Sound for elementwise ops."""
    srcs = c.node.srcs
    params = tuple(Node(Op.PARAM, s.type, (), {"index": i}) for i, s in enumerate(srcs))
    probe = Node(c.node.op, c.node.type, params, dict(c.node.attrs))
    program = Program((Function("probe", params, tuple(f"x{i}" for i in range(len(params))),
                                (probe,)),))
    worst = np.zeros(c.out.shape, F64)
    changed = c.joined()
    patterns = itertools.product((-1.0, 1.0), repeat=len(srcs)) if len(srcs) <= 3 else (
        (-1.0,) * len(srcs), (1.0,) * len(srcs))
    for signs in patterns:
        args = [np.asarray(v + sign * e if s.type.dtype.is_float else v, s.type.dtype.numpy)
                for v, e, s, sign in zip(c.vs, c.es, srcs, signs, strict=True)]
        try:
            (moved,) = interpret(program, args, precision="float64")
        except AccyError:
            return 0.0, np.ones(c.out.shape, bool)
        if c.node.type.dtype.is_float:
            worst = np.maximum(worst, np.abs(moved - c.out))
        else:
            changed = changed | (moved != c.out)
    return worst + c.rounding(np.abs(c.out)), changed


# ---- elementwise ------------------------------------------------------------------------


def _unary(slope: Callable[[_Ctx], Any], scale: Callable[[_Ctx], Any] | None = None,
           singular: bool = False) -> Rule:
    """Error ``slope(c) + rounding(scale)``; ``singular``: unstable when err(a) >= |a|/2."""

    def rule(c: _Ctx) -> tuple[Any, Any]:
        e = slope(c) + c.rounding(np.abs(c.out) if scale is None else scale(c))
        u = c.joined()
        if singular:
            u = u | _singular(c.mag(0), c.es[0])
        return e, u

    return rule


def _singular(magnitude: np.ndarray, error: np.ndarray) -> np.ndarray:
    """Where an operand's error is comparable to the operand (a slope bound means nothing)."""
    return (error > 0) & (error >= magnitude / 2)


def _rounding_points(c: _Ctx) -> tuple[Any, Any]:
    """floor/ceil: exact, but unstable when the operand is within its error of an integer."""
    a = c.vs[0]
    near = (c.es[0] > 0) & (np.abs(a - np.round(a)) <= c.es[0])
    return 0.0, c.joined() | near


def _add(c: _Ctx) -> tuple[Any, Any]:
    return c.es[0] + c.es[1] + c.rounding(c.mag(0) + c.mag(1)), c.joined()


def _mul(c: _Ctx) -> tuple[Any, Any]:
    (a, b), (ea, eb) = (c.mag(0), c.mag(1)), c.es
    return (a + ea) * (b + eb) - a * b + c.rounding(np.abs(c.out)), c.joined()


def _div(c: _Ctx) -> tuple[Any, Any]:
    if not c.node.type.dtype.is_float:
        return 0.0, c.joined()
    (a, b), (ea, eb) = (c.mag(0), c.mag(1)), c.es
    e = ea / b + 2 * a * eb / (b * b) + c.rounding(np.abs(c.out))
    return e, c.joined() | _singular(b, eb)


def _max_min(c: _Ctx) -> tuple[Any, Any]:
    return np.maximum(c.es[0], c.es[1]), c.joined()


def _pow(c: _Ctx) -> tuple[Any, Any]:
    """Also unstable: a base within its error of 1 under a non-finite exponent (``pow(1, y)``
    is 1 for every y, nan included; just off 1 it is nan, 0 or inf), and a negative base under
    an exponent within its error of an integer (finite there, nan elsewhere)."""
    a, (ea, eb) = c.mag(0), c.es
    rel = c.mag(1) * 2 * ea / a + np.abs(np.log(a)) * eb
    e = np.abs(c.out) * np.expm1(rel) + c.rounding(np.abs(c.out))
    base, power = c.vs[0].astype(F64), c.vs[1].astype(F64)
    near_one = (ea > 0) & (np.abs(base - 1) <= ea) & ~np.isfinite(power)
    integral = (base < 0) & (eb > 0) & (np.abs(power - np.round(power)) <= eb)
    flips = np.broadcast_to(near_one | integral, c.out.shape)
    return e, c.joined() | _singular(a, ea) | flips


def _compare(c: _Ctx) -> tuple[Any, Any]:
    slack = c.es[0] + c.es[1]
    a, b = (np.asarray(v, F64) for v in c.vs)
    near = (slack > 0) & (np.abs(a - b) <= slack)
    return 0.0, c.joined() | near


def _select(c: _Ctx) -> tuple[Any, Any]:
    cond = c.vs[0].astype(bool)
    e = np.where(cond, c.es[1], c.es[2])
    u = np.broadcast_to(c.us[0], c.out.shape) | np.where(cond, c.us[1], c.us[2])
    return e, u


def _cast(c: _Ctx) -> tuple[Any, Any]:
    src, dst = c.node.srcs[0].type.dtype, c.node.type.dtype
    a, ea, u = c.vs[0], c.es[0], c.joined()
    if dst.is_float:
        return ea + c.rounding(np.abs(c.out)), u
    if not src.is_float:
        return 0.0, u
    if dst is DType.bool:
        return 0.0, u | ((ea > 0) & (np.abs(a) <= ea))
    info = np.iinfo(dst.numpy)
    with np.errstate(invalid="ignore"):
        outside = ~np.isfinite(a) | (a + ea >= info.max) | (a - ea <= info.min)
        near = (ea > 0) & (np.abs(a - np.round(a)) <= ea)
    return 0.0, u | outside | near


# ---- reductions and contractions -----------------------------------------------------------


def _reduce(c: _Ctx) -> tuple[Any, Any]:
    axes, keep = c.node.attr("axes"), c.node.attr("keepdims")
    count = math.prod(c.vs[0].shape[a] for a in axes)
    u = np.any(c.us[0], axis=axes, keepdims=keep)
    if c.node.op is Op.REDUCE_MAX:
        return np.max(c.es[0], axis=axes, keepdims=keep, initial=0.0), u
    e = np.sum(c.es[0], axis=axes, keepdims=keep)
    e = e + c.rounding(math.sqrt(max(count, 1)) * np.sum(c.mag(0), axis=axes, keepdims=keep))
    u = u | c.overflows(np.sum(_finite(c.mag(0)), axis=axes, keepdims=keep))
    return (e / count if c.node.op is Op.REDUCE_MEAN and count else e), u


def _einsum(c: _Ctx) -> tuple[Any, Any]:
    spec = c.node.attr("spec")
    mags = [c.mag(i) for i in range(len(c.vs))]
    terms, out = parse_einsum(spec, [m.ndim for m in mags])
    sizes = {ch: d for t, m in zip(terms, mags, strict=True) for ch, d in zip(t, m.shape,
                                                                              strict=True)}
    count = math.prod(d for ch, d in sizes.items() if ch not in out)
    # pairwise, as the interpreter: np.einsum without a path loops over every letter of a
    # network at once, which for a few wide operands does not finish in a fuzz round
    exact = opt_einsum.contract(spec, *mags)
    widened = opt_einsum.contract(spec, *(m + e for m, e in zip(mags, c.es, strict=True)))
    e = widened - exact + c.rounding(math.sqrt(max(count, 1)) * exact)
    if c.node.type.dtype is DType.f32:  # operands rounded to TF32 under a looser policy
        e = e + EXTRA_EINSUM_RTOL[c.precision] * widened
    # The IR leaves the order and pairing of a contraction's products and sums open, so a
    # non-finite term makes inf-or-nan a matter of that order: such outputs are unstable.
    ones = [np.ones(m.shape) for m in mags]
    u = np.zeros(c.out.shape, bool)
    for i, (mask, m) in enumerate(zip(c.us, mags, strict=True)):
        mask = mask | ~np.isfinite(m)
        if mask.any():
            u |= opt_einsum.contract(spec, *ones[:i], mask.astype(F64), *ones[i + 1:]) > 0
    return e, u | c.overflows(exact)


# ---- shaped ops -------------------------------------------------------------------------


def _move(node: Node, arrays: list[np.ndarray]) -> np.ndarray:
    """Apply the movement op ``node`` to other data of its operands' shapes."""
    op, x = node.op, arrays[0]
    if op is Op.RESHAPE:
        return x.reshape(node.type.shape)
    if op is Op.TRANSPOSE:
        return np.transpose(x, node.attr("perm"))
    if op is Op.BROADCAST:
        return np.broadcast_to(x, node.attr("shape"))
    if op is Op.SLICE:
        spans = zip(node.attr("starts"), node.attr("stops"), node.attr("steps"), strict=True)
        return x[tuple(slice(a, b, s) for a, b, s in spans)]
    return np.concatenate(arrays, axis=node.attr("axis"))


def _movement(c: _Ctx) -> tuple[Any, Any]:
    return _move(c.node, c.es), _move(c.node, c.us)


def _index_mask(c: _Ctx, axis: int) -> np.ndarray:
    """The indices' unstable mask placed where they land in a gather's output."""
    rest = c.vs[0].ndim - axis - 1
    placed = c.us[1].reshape((1,) * axis + c.us[1].shape + (1,) * rest)
    return np.broadcast_to(placed, c.out.shape)


def _gather(c: _Ctx) -> tuple[Any, Any]:
    axis, idx = c.node.attr("axis"), c.vs[1]
    u = np.take(c.us[0], idx, axis=axis) | _index_mask(c, axis)
    return np.take(c.es[0], idx, axis=axis), u


def _scatter(c: _Ctx, x: np.ndarray, upd: np.ndarray) -> np.ndarray:
    out = np.array(x, F64)
    np.add.at(out, (slice(None),) * c.node.attr("axis") + (c.vs[1],), upd)
    return out


def _scatter_add(c: _Ctx) -> tuple[Any, Any]:
    count = _scatter(c, np.ones(c.out.shape), np.ones(c.vs[2].shape))
    e = _scatter(c, c.es[0], c.es[2])
    e = e + c.rounding(np.sqrt(count) * _scatter(c, c.mag(0), c.mag(2)))
    u = c.us[0] | (_scatter(c, np.zeros(c.out.shape), c.us[2]) > 0) | c.us[1].any()
    return e, u | c.overflows(_scatter(c, _finite(c.mag(0)), _finite(c.mag(2))))


def _finite(x: np.ndarray) -> np.ndarray:
    """``x`` with non-finite entries as 0 (a row's infinities do not scale its rounding)."""
    return np.where(np.isfinite(x), x, 0.0)


def _row_stats(c: _Ctx) -> tuple[int, Any, Any, Any]:
    axis = c.node.attr("axis")
    worst = np.max(c.es[0], axis=axis, keepdims=True, initial=0.0)
    biggest = np.max(_finite(c.mag(0)), axis=axis, keepdims=True, initial=0.0)
    u = np.any(c.us[0], axis=axis, keepdims=True)
    return c.vs[0].shape[axis], worst, biggest, u


def _exp_overflow(c: _Ctx) -> tuple[np.ndarray, np.ndarray]:
    """Where a (log-)softmax's exponentials overflow its dtype although float64's do not: the
    elements whose own term ``exp(x - shift)`` may (the shift is the row's maximum, or 0 when
    that is not finite, as the interpreter and the kernels take it: so only beside a +inf,
    where the term's inf / the row's inf gives nan instead of 0), and the rows of finite terms
    whose sum may (every element then differs)."""
    axis, x = c.node.attr("axis"), c.vs[0].astype(F64)
    top = np.fmax.reduce(x, axis=axis, keepdims=True, initial=-np.inf)  # nan ignored
    terms = np.exp(x - np.where(np.isfinite(top), top, 0.0) + c.es[0])  # at the error's top
    finite = np.isfinite(terms)  # a row with an infinite term sums to inf in every dtype
    total = np.sum(np.where(finite, terms, np.inf), axis=axis, keepdims=True)
    return finite & c.overflows(terms), np.isfinite(total) & c.overflows(total)


def _softmax(c: _Ctx) -> tuple[Any, Any]:
    n, worst, biggest, u = _row_stats(c)
    rel = 2 * worst + c.rounding(math.sqrt(n) + _finite(c.mag(0)) + biggest)
    term, row = _exp_overflow(c)
    return np.abs(c.out) * np.expm1(rel) + c.tiny, u | term | row


def _log_softmax(c: _Ctx) -> tuple[Any, Any]:
    n, worst, biggest, u = _row_stats(c)
    scale = math.sqrt(n) + _finite(c.mag(0)) + 2 * biggest + _finite(np.abs(c.out))
    return c.es[0] + worst + c.rounding(scale), u | _exp_overflow(c)[1]


def _cross_entropy(c: _Ctx) -> tuple[Any, Any]:
    logits, labels = c.vs
    worst = float(np.max(c.es[0], initial=0.0))
    biggest = float(np.max(_finite(np.abs(logits)), initial=0.0))
    scale = math.sqrt(logits.shape[-1]) + math.sqrt(labels.size) + 2 * biggest + abs(c.out)
    return 2 * worst + c.rounding(scale), c.us[0].any() | c.us[1].any()


def _window_f64(node: Node, arrays: Sequence[np.ndarray]) -> np.ndarray:
    """The window op ``node`` (same attributes) evaluated on float64 ``arrays``."""
    from accy.ir.types import TensorType

    params = tuple(Node(Op.PARAM, TensorType(a.shape, DType.f64), (), {"index": i})
                   for i, a in enumerate(arrays))
    probe = Node(node.op, TensorType(node.type.shape, DType.f64), params, dict(node.attrs))
    program = Program((Function("probe", params, tuple(f"x{i}" for i in range(len(params))),
                                (probe,)),))
    return interpret(program, [np.asarray(a, F64) for a in arrays], precision="float64")[0]


def _conv(c: _Ctx) -> tuple[Any, Any]:
    """A convolution is a contraction (as ``einsum``): each output sums ``C/groups*KH*KW``
    products, so it rounds like an einsum of that many terms."""
    mags = [c.mag(0), c.mag(1)]
    count = math.prod(c.vs[1].shape[1:])
    exact = _window_f64(c.node, mags)
    widened = _window_f64(c.node, [m + e for m, e in zip(mags, c.es, strict=True)])
    e = widened - exact + c.rounding(math.sqrt(max(count, 1)) * exact)
    if c.node.type.dtype is DType.f32:
        e = e + EXTRA_EINSUM_RTOL[c.precision] * widened
    u = np.zeros(c.out.shape, bool)
    for i, (mask, m) in enumerate(zip(c.us, mags, strict=True)):
        mask = mask | ~np.isfinite(m)
        if mask.any():
            args = [np.ones(m.shape) for m in mags]
            args[i] = mask.astype(F64)
            u |= _window_f64(c.node, args) > 0
    # a kernel may skip the padding's terms (0 * w), which are 0 unless w is not finite:
    # outputs whose window puts a non-finite weight on the padding are unstable
    bad = ~np.isfinite(c.vs[1])
    if bad.any():
        taps = bad.sum(axis=(1, 2, 3)).reshape(1, -1, 1, 1)  # per output channel
        inside = _window_f64(c.node, [np.ones(c.vs[0].shape), bad.astype(F64)])
        u |= taps > inside + 0.5
    return e, u | c.overflows(exact)


def _avg_pool(c: _Ctx) -> tuple[Any, Any]:
    """An average pool sums a window of terms (then divides): it rounds like a reduction."""
    k = math.prod(c.node.attr("kernel"))
    e = _window_f64(c.node, [c.es[0]])
    e = e + c.rounding(math.sqrt(k) * _window_f64(c.node, [c.mag(0)]))
    u = _window_f64(c.node, [c.us[0].astype(F64)]) > 0
    # the window's sum (at most k terms: the mean of magnitudes times k bounds it)
    return e, u | c.overflows(k * _window_f64(c.node, [_finite(c.mag(0))]))


def _windowed(c: _Ctx) -> tuple[Any, Any]:
    """A max pool or a pad moves or picks its operands' values without rounding: the error
    (and the unstable mask) of an output is the largest of the values it may come from."""
    e = _window_f64(c.node, [np.broadcast_to(e, v.shape) for e, v in zip(c.es, c.vs,
                                                                      strict=True)])
    u = _window_f64(c.node, [np.broadcast_to(u, v.shape).astype(F64)
                             for u, v in zip(c.us, c.vs, strict=True)]) > 0
    return e + c.rounding(0.0), u


def _sqrt_slope(c: _Ctx) -> Any:
    a, ea = c.mag(0), c.es[0]
    with np.errstate(divide="ignore"):
        return np.minimum(ea / (2 * np.sqrt(a)), np.sqrt(ea))


_RULES: dict[Op, Rule] = {
    Op.CONSTANT: lambda c: (0.0, False),
    Op.NEG: _unary(lambda c: c.es[0], lambda c: 0.0),
    Op.ABS: _unary(lambda c: c.es[0], lambda c: 0.0),
    Op.RELU: _unary(lambda c: c.es[0], lambda c: 0.0),
    Op.EXP: _unary(lambda c: np.abs(c.out) * np.expm1(c.es[0])),
    Op.LOG: _unary(lambda c: 2 * c.es[0] / c.mag(0), singular=True),
    Op.SQRT: _unary(_sqrt_slope),
    Op.RSQRT: _unary(lambda c: c.es[0] / c.mag(0) ** 1.5, singular=True),
    Op.RECIPROCAL: _unary(lambda c: 2 * c.es[0] / c.mag(0) ** 2, singular=True),
    Op.SIN: _unary(lambda c: c.es[0]),
    Op.COS: _unary(lambda c: c.es[0]),
    Op.TANH: _unary(lambda c: c.es[0]),
    Op.ERF: _unary(lambda c: 1.13 * c.es[0]),  # slope 2/sqrt(pi) at most
    Op.SIGMOID: _unary(lambda c: c.es[0] / 4),
    Op.GELU: _unary(lambda c: 1.13 * c.es[0], lambda c: c.mag(0) + np.abs(c.out)),
    Op.GELU_TANH: _unary(lambda c: 1.13 * c.es[0], lambda c: c.mag(0) + np.abs(c.out)),
    Op.FLOOR: _rounding_points,
    Op.CEIL: _rounding_points,
    Op.ADD: _add,
    Op.SUB: _add,
    Op.MUL: _mul,
    Op.DIV: _div,
    Op.MAX: _max_min,
    Op.MIN: _max_min,
    Op.POW: _pow,
    Op.SELECT: _select,
    Op.CAST: _cast,
    Op.REDUCE_SUM: _reduce,
    Op.REDUCE_MAX: _reduce,
    Op.REDUCE_MEAN: _reduce,
    Op.EINSUM: _einsum,
    Op.GATHER: _gather,
    Op.SCATTER_ADD: _scatter_add,
    Op.SOFTMAX: _softmax,
    Op.LOG_SOFTMAX: _log_softmax,
    Op.CROSS_ENTROPY: _cross_entropy,
    Op.CONV2D: _conv,
    Op.AVG_POOL2D: _avg_pool,
    Op.MAX_POOL2D: _windowed,
    Op.PAD: _windowed,
}
