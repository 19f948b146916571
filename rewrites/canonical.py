"""Canonical forms and constant folding: the rule sets ``canonical`` and ``fold``.

``canonical``: identities (``x*1``, ``x-0``, ``max(x,x)``, double negation, ``x**2 -> x*x``,
...), movement chains folded (transpose of transpose, reshape of reshape, broadcast of
broadcast, identity movement), explicit broadcasts folded into the implicit broadcasting of
binary ops, splat constants commuted to the right of ``add``/``mul`` so one-sided identity
rules see them, and constants gathered by oriented associativity (``(x+1)+2 -> x+(1+2)``, which
``fold`` then folds). No unbounded commutativity or associativity: every reordering here is
oriented or bounded (a term and its mirror).

``fold``: every elementwise op and cast over splat constants (``Tensor.full``) evaluated with
the interpreter's numpy semantics in the op's dtype, movement of splats, ``select`` on a splat
condition. Results ``full`` cannot hold (NaN, infinities, -0.0) are left for constant-fold's
evaluation step.
"""

from __future__ import annotations

from egglog import Bool, f64, var

from accy.egraph.rules import infer_type, py_text
from accy.egraph.sorts import Tensor, parse_type, tensors, types
from rewrites import Theme, has_type, holds, py_f64
from rewrites._numeric import (
    BINARY,
    UNARY,
    broadcasts_to,
    foldable,
    folded,
    ints_text,
    is_float,
    is_int,
    parse_ints,
)

canonical = Theme("canonical", "identities, oriented splat constants, movement folding")
fold = Theme("fold", "constant folding of elementwise ops, casts and movement on splats")

x, y, c = tensors("x y c")
t, t1, tc, tx, ty, p, q, s, s1, d = types("t t1 tc tx ty p q s s1 d")
u, v, w = var("u", f64), var("v", f64), var("w", f64)


# ---- Python helpers ---------------------------------------------------------------------------


def _compose(p_text: str, q_text: str) -> str:
    """transpose(transpose(x, p), q) == transpose(x, r) with r[i] = p[q[i]]."""
    inner, outer = parse_ints(p_text) or (), parse_ints(q_text) or ()
    return ints_text([inner[i] for i in outer])


def _composable(p_text: str, q_text: str) -> bool:
    inner, outer = parse_ints(p_text), parse_ints(q_text)
    return (inner is not None and outer is not None and len(inner) == len(outer)
            and sorted(outer) == list(range(len(outer))))


def _identity_perm(p_text: str) -> bool:
    perm = parse_ints(p_text)
    return perm is not None and perm == tuple(range(len(perm)))


def _full_slice(x_type: str, result_type: str, steps: str) -> bool:
    return x_type == result_type and set(parse_ints(steps) or (2,)) <= {1}


# ---- canonical: orientation --------------------------------------------------------------------

for _op in ("add", "mul"):
    _ctor = getattr(Tensor, _op)
    canonical.rewrite(
        f"constant-right-{_op}", _ctor(Tensor.full(v, tc), x, t), _ctor(x, Tensor.full(v, tc), t),
        policy="exact", permutes=True,
        doc=f"splat constants to the right of {_op} (so one-sided identities match)")

# ---- canonical: oriented associativity (constants gather, then fold) ------------------------

for _op in ("add", "mul"):
    _ctor = getattr(Tensor, _op)
    _lhs = _ctor(_ctor(x, Tensor.full(u, tx), t1), Tensor.full(v, ty), t)
    _rhs = _ctor(x, _ctor(Tensor.full(u, tx), Tensor.full(v, ty), infer_type(_op, tx, ty)), t)
    canonical.rewrite(f"reassociate-constants-{_op}", _lhs, _rhs, holds(is_float, t),
                      policy="fast-math",
                      doc=f"(x {_op} c1) {_op} c2 -> x {_op} (c1 {_op} c2) for floats (rounds "
                          "once, not twice)")
    canonical.rewrite(f"reassociate-constants-{_op}-int", _lhs, _rhs, holds(is_int, t),
                      policy="exact",
                      doc=f"(x {_op} c1) {_op} c2 -> x {_op} (c1 {_op} c2) for ints (wrapping "
                          "arithmetic is associative)")

# ---- canonical: identities ---------------------------------------------------------------------

canonical.rewrite("add-zero", Tensor.add(x, Tensor.full(0.0, tc), t), x,
                  has_type(x, t), holds(is_float, t), policy="finite-math",
                  doc="x + 0 -> x for floats (-0 + 0 is +0)")
canonical.rewrite("add-zero-int", Tensor.add(x, Tensor.full(0.0, tc), t), x,
                  has_type(x, t), holds(is_int, t), policy="exact", doc="x + 0 -> x for ints")
canonical.rewrite("sub-zero", Tensor.sub(x, Tensor.full(0.0, tc), t), x,
                  has_type(x, t), policy="exact", doc="x - 0 -> x (exact, -0 included)")
canonical.rewrite("mul-one", Tensor.mul(x, Tensor.full(1.0, tc), t), x,
                  has_type(x, t), policy="exact", doc="x * 1 -> x")
canonical.rewrite("div-one", Tensor.div(x, Tensor.full(1.0, tc), t), x,
                  has_type(x, t), policy="exact", doc="x / 1 -> x")
canonical.rewrite("mul-neg-one", Tensor.mul(x, Tensor.full(-1.0, tc), t), Tensor.neg(x, t),
                  has_type(x, t), policy="exact", doc="x * -1 -> -x")
canonical.rewrite("mul-zero", Tensor.mul(x, Tensor.full(0.0, tc), t), Tensor.full(0.0, t),
                  holds(is_float, t), policy="finite-math",
                  doc="x * 0 -> 0 for floats (inf * 0 is nan, -1 * 0 is -0)")
canonical.rewrite("mul-zero-int", Tensor.mul(x, Tensor.full(0.0, tc), t), Tensor.full(0.0, t),
                  holds(is_int, t), policy="exact", doc="x * 0 -> 0 for ints")
canonical.rewrite("sub-self", Tensor.sub(x, x, t), Tensor.full(0.0, t), holds(is_float, t),
                  policy="finite-math", doc="x - x -> 0 for floats (inf - inf is nan)")
canonical.rewrite("sub-self-int", Tensor.sub(x, x, t), Tensor.full(0.0, t), holds(is_int, t),
                  policy="exact", doc="x - x -> 0 for ints")
canonical.rewrite("pow-one", Tensor.pow(x, Tensor.full(1.0, tc), t), x, has_type(x, t),
                  policy="stable", doc="pow(x, 1) -> x")
canonical.rewrite("pow-two", Tensor.pow(x, Tensor.full(2.0, tc), t), Tensor.mul(x, x, t),
                  has_type(x, t), policy="stable",
                  doc="pow(x, 2) -> x * x (correctly rounded, numpy's square; pow is a slow "
                  "call on some devices)")
canonical.rewrite("max-self", Tensor.max(x, x, t), x, policy="exact", doc="max(x, x) -> x")
canonical.rewrite("min-self", Tensor.min(x, x, t), x, policy="exact", doc="min(x, x) -> x")
canonical.rewrite("neg-neg", Tensor.neg(Tensor.neg(x, t1), t), x, policy="exact",
                  doc="-(-x) -> x")
canonical.rewrite("abs-abs", Tensor.abs(Tensor.abs(x, t1), t), Tensor.abs(x, t),
                  policy="exact", doc="abs(abs(x)) -> abs(x)")
canonical.rewrite("abs-neg", Tensor.abs(Tensor.neg(x, t1), t), Tensor.abs(x, t),
                  policy="exact", doc="abs(-x) -> abs(x)")
canonical.rewrite("relu-relu", Tensor.relu(Tensor.relu(x, t1), t), Tensor.relu(x, t),
                  policy="exact", doc="relu(relu(x)) -> relu(x)")
canonical.rewrite("not-not", Tensor.not_(Tensor.not_(x, t1), t), x, policy="exact",
                  doc="not(not(x)) -> x")
canonical.rewrite("and-self", Tensor.and_(x, x, t), x, policy="exact", doc="x and x -> x")
canonical.rewrite("or-self", Tensor.or_(x, x, t), x, policy="exact", doc="x or x -> x")
canonical.rewrite("select-same", Tensor.select(c, x, x, t), x, has_type(x, t),
                  policy="exact", doc="select(c, x, x) -> x")

# ---- canonical: movement ------------------------------------------------------------------------

canonical.rewrite(
    "transpose-transpose", Tensor.transpose(Tensor.transpose(x, p, t1), q, t),
    Tensor.transpose(x, py_text(_compose, p, q), t), holds(_composable, p, q),
    policy="exact", doc="transpose(transpose(x, p), q) -> transpose(x, p o q)")
canonical.rewrite("transpose-identity", Tensor.transpose(x, p, t), x,
                  holds(_identity_perm, p), policy="exact",
                  doc="transpose by the identity permutation -> x")
canonical.rewrite("reshape-reshape", Tensor.reshape(Tensor.reshape(x, s1, t1), s, t),
                  Tensor.reshape(x, s, t), policy="exact",
                  doc="reshape(reshape(x)) -> one reshape")
canonical.rewrite("reshape-identity", Tensor.reshape(x, s, t), x, has_type(x, t),
                  policy="exact", doc="reshape to x's own shape -> x")
canonical.rewrite("broadcast-broadcast", Tensor.broadcast(Tensor.broadcast(x, s1, t1), s, t),
                  Tensor.broadcast(x, s, t), policy="exact",
                  doc="broadcast(broadcast(x)) -> one broadcast")
canonical.rewrite("broadcast-identity", Tensor.broadcast(x, s, t), x, has_type(x, t),
                  policy="exact", doc="broadcast to x's own shape -> x")
canonical.rewrite("slice-identity", Tensor.slice(x, s, s1, q, t), x,
                  has_type(x, tx), holds(_full_slice, tx, t, q), policy="exact",
                  doc="a slice that keeps every element -> x")

for _op in ("add", "sub", "mul", "div", "max", "min"):
    _ctor = getattr(Tensor, _op)
    canonical.rewrite(
        f"broadcast-into-{_op}-lhs", _ctor(Tensor.broadcast(x, s, t1), y, t), _ctor(x, y, t),
        has_type(x, tx), has_type(y, ty), holds(broadcasts_to, tx, ty, t), policy="exact",
        doc=f"{_op}(broadcast(x), y) -> {_op}(x, y): the op broadcasts implicitly")
    canonical.rewrite(
        f"broadcast-into-{_op}-rhs", _ctor(y, Tensor.broadcast(x, s, t1), t), _ctor(y, x, t),
        has_type(x, tx), has_type(y, ty), holds(broadcasts_to, ty, tx, t), policy="exact",
        doc=f"{_op}(y, broadcast(x)) -> {_op}(y, x): the op broadcasts implicitly")

# ---- fold: elementwise ops and casts on splats -------------------------------------------------

def _fold_rule(op: str, lhs: Tensor, operands: list[tuple[f64, object]]) -> None:
    args: list[object] = [op, t]
    for value, type_text in operands:
        args += [value.to_string(), type_text]
    fold.rewrite(f"fold-{op.replace('_', '-')}", lhs, Tensor.full(py_f64(folded, *args), t),
                 holds(foldable, *args), policy="exact",
                 doc=f"{op} of splat constants -> a splat (numpy semantics in the dtype)")


for _op in UNARY:
    _ctor = Tensor.not_ if _op == "not" else getattr(Tensor, _op)
    _fold_rule(_op, _ctor(Tensor.full(u, tx), t), [(u, tx)])
for _op in BINARY:
    _ctor = {"and": Tensor.and_, "or": Tensor.or_}.get(_op) or getattr(Tensor, _op)
    _fold_rule(_op, _ctor(Tensor.full(u, tx), Tensor.full(v, ty), t), [(u, tx), (v, ty)])
_fold_rule("cast", Tensor.cast(Tensor.full(u, tx), d, t), [(u, tx)])
_fold_rule("select", Tensor.select(Tensor.full(u, tc), Tensor.full(v, tx), Tensor.full(w, ty), t),
           [(u, tc), (v, tx), (w, ty)])

fold.rewrite("select-true", Tensor.select(Tensor.full(1.0, tc), x, y, t), x, has_type(x, t),
             policy="exact", doc="select(true, x, y) -> x")
fold.rewrite("select-false", Tensor.select(Tensor.full(0.0, tc), x, y, t), y, has_type(y, t),
             policy="exact", doc="select(false, x, y) -> y")

# movement and max of a splat is a splat of the new type
fold.rewrite("fold-broadcast", Tensor.broadcast(Tensor.full(u, tx), s, t), Tensor.full(u, t),
             policy="exact", doc="broadcast of a splat -> a splat")
fold.rewrite("fold-reshape", Tensor.reshape(Tensor.full(u, tx), s, t), Tensor.full(u, t),
             policy="exact", doc="reshape of a splat -> a splat")
fold.rewrite("fold-transpose", Tensor.transpose(Tensor.full(u, tx), p, t), Tensor.full(u, t),
             policy="exact", doc="transpose of a splat -> a splat")
fold.rewrite("fold-slice", Tensor.slice(Tensor.full(u, tx), s, s1, q, t), Tensor.full(u, t),
             policy="exact", doc="slice of a splat -> a splat")


def _nonempty_reduction(x_type: str, result_type: str, axes: str) -> bool:
    try:
        shape = parse_type(x_type).shape
        return all(shape[a] > 0 for a in parse_ints(axes) or ()) and bool(result_type)
    except (ValueError, IndexError):
        return False


fold.rewrite("fold-reduce-max", Tensor.reduce_max(Tensor.full(u, tx), s, var("k", Bool), t),
             Tensor.full(u, t), holds(_nonempty_reduction, tx, t, s), policy="exact",
             doc="max over copies of a splat -> the splat (non-empty axes)")

del _op, _ctor
