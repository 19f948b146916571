"""Concats and slices (rule set ``concat``): the identities that undo what the multi-pattern
merges of :mod:`rewrites.merge` build, and concats moving through contractions and
elementwise ops.

* a slice of a concat that lies within one part is a slice of that part (``slice-concat-head``
  / ``-tail``; with ``concat-single`` and the canonical ``slice-identity`` a slice selecting
  exactly one part becomes that part);
* a concat of adjacent slices of one tensor is one wider slice (``concat-adjacent-slices``;
  the whole tensor through ``slice-identity``); slices of slices compose (``slice-slice``);
  nested concats along one axis flatten;
* ``concat(x.W1, x.W2) <-> x.concat(W1, W2)`` when the concat axis is a free index of the
  other operand (``concat-of-einsums-*`` and back, ``einsum-of-concat-*``);
* ``concat(f(a), f(b)) -> f(concat(a, b))`` and ``concat(a+b, c+d) -> concat(a,c) +
  concat(b,d)`` for elementwise ops whose operands have the result's type (no broadcasting).

Every rule is ``exact``: each output element is computed from the same operands by the same
op (contractions add the same terms), for every dtype.
"""

from __future__ import annotations

from functools import lru_cache

from egglog import i64, var

from accy.egraph.rules import infer_type, py_text
from accy.egraph.sorts import Tensor, TensorList, parse_type, tensors, types
from rewrites import Theme, has_type, holds, py_int
from rewrites._numeric import ints_text, parse_ints

concat = Theme("concat", "concat/slice identities, concat through contractions and "
                         "elementwise ops")

a, b, c, d, x, w1, w2 = tensors("a b c d x w1 w2")
rest, l1, l2 = (var(n, TensorList) for n in ("rest", "l1", "l2"))
ax, ax1 = var("ax", i64), var("ax1", i64)
t, t1, t2, ta, tb, tc, tx, tw1, tw2, s = types("t t1 t2 ta tb tc tx tw1 tw2 s")
st, sp, q, st1, sp1, q1, st2, sp2 = types("st sp q st1 sp1 q1 st2 sp2")
cons, nil = TensorList.cons, TensorList.nil


def pair(p: Tensor, r: Tensor) -> TensorList:
    return cons(p, cons(r, nil()))


# ---- Python helpers (total: None/False where a rule does not apply) ---------------------------


def _dims(type_text: str) -> tuple[int, ...] | None:
    try:
        return parse_type(type_text).shape
    except ValueError:
        return None


def _in_part(part_type: str, axis: int, starts: str, stops: str, head: bool) -> bool:
    """The slice's range along ``axis`` lies within the first part (``head``) or after it."""
    dims, lo, hi = _dims(part_type), parse_ints(starts), parse_ints(stops)
    if dims is None or lo is None or hi is None or not 0 <= axis < len(dims) == len(lo):
        return False
    n = dims[axis]
    return hi[axis] <= n if head else lo[axis] >= n


def _in_head(part_type: str, axis: int, starts: str, stops: str) -> bool:
    return _in_part(part_type, axis, starts, stops, True)


def _in_tail(part_type: str, axis: int, starts: str, stops: str) -> bool:
    return _in_part(part_type, axis, starts, stops, False)


def _shift(part_type: str, axis: int, bounds: str) -> str:
    """Slice bounds along ``axis`` moved back by the first part's extent."""
    dims, values = _dims(part_type), list(parse_ints(bounds) or ())
    values[axis] -= (dims or ())[axis]
    return ints_text(values)


def _rest_type(concat_type: str, part_type: str, axis: int) -> str:
    """The type of the concat without its first part."""
    whole, part = parse_type(concat_type), parse_type(part_type)
    shape = list(whole.shape)
    shape[axis] -= part.shape[axis]
    return str(type(whole)(tuple(shape), whole.dtype))


@lru_cache(maxsize=4096)
def _adjacent(axis: int, starts1: str, stops1: str, starts2: str, stops2: str,
              steps: str) -> bool:
    """Two slices, unit steps along ``axis``, equal bounds elsewhere, the second starting
    where the first stops."""
    s1, e1, s2, e2, q = map(parse_ints, (starts1, stops1, starts2, stops2, steps))
    if s1 is None or e1 is None or s2 is None or e2 is None or q is None:
        return False
    if not 0 <= axis < len(q) or q[axis] != 1:
        return False
    others = [i for i in range(len(q)) if i != axis]
    return (e1[axis] == s2[axis] and all(s1[i] == s2[i] and e1[i] == e2[i] for i in others))


def _widened(axis: int, stops1: str, stops2: str) -> str:
    values = list(parse_ints(stops1) or ())
    values[axis] = (parse_ints(stops2) or ())[axis]
    return ints_text(values)


@lru_cache(maxsize=4096)
def _compose(x_type: str, starts1: str, steps1: str, starts2: str, stops2: str,
             steps2: str, result_type: str) -> tuple[str, str, str] | None:
    """slice(slice(x, st1, sp1, q1), st2, sp2, q2) as one slice of x, in the IR's normalized
    form (``accy.ir.shapes``: starts clamped, stops ``max(stop, start)``)."""
    dims, out = _dims(x_type), _dims(result_type)
    parts = [parse_ints(v) for v in (starts1, steps1, starts2, stops2, steps2)]
    if dims is None or out is None or any(v is None or len(v) != len(dims) for v in parts):
        return None
    a1, q1_, a2, _, q2_ = parts
    starts, stops, steps = [], [], []
    for i, n in enumerate(out):
        step = q1_[i] * q2_[i]
        first = a1[i] + q1_[i] * a2[i]
        last = first + step * (n - 1) + 1 if n else first
        lo, hi, _ = slice(first, last, step).indices(dims[i])
        starts.append(lo)
        stops.append(max(hi, lo))
        steps.append(step)
    return ints_text(starts), ints_text(stops), ints_text(steps)


def _can_compose(*args: str) -> bool:
    return _compose(*args) is not None


def _composed(index: int, *args: str) -> str:
    return (_compose(*args) or ("[]", "[]", "[]"))[index]


# ---- contractions over a concat --------------------------------------------------------------

Spec = tuple[tuple[str, ...], str]


def _parse(spec: str) -> Spec | None:
    lhs, arrow, out = spec.partition("->")
    return (tuple(lhs.split(",")), out) if arrow else None


@lru_cache(maxsize=4096)
def concat_letter(spec: str, side: int, type1: str, type2: str) -> str | None:
    """The index along which operand ``side`` of a two-operand einsum can be concatenated:
    a letter once in that operand's term and once in the output, absent from the other
    operand's term; the two operand types agree on every other axis (and in dtype). Where
    they differ on one such letter's axis it is that letter, else the last candidate."""
    parsed = _parse(spec)
    t1_, t2_ = _type(type1), _type(type2)
    if parsed is None or len(parsed[0]) != 2 or t1_ is None or t2_ is None:
        return None
    (terms, out), other = parsed, parsed[0][1 - side]
    term = terms[side]
    if t1_.dtype is not t2_.dtype or not t1_.rank == t2_.rank == len(term):
        return None
    candidates = [ch for ch in term if term.count(ch) == 1 and out.count(ch) == 1
                  and ch not in other]
    differ = [i for i in range(len(term)) if t1_.shape[i] != t2_.shape[i]]
    if len(differ) > 1:
        return None
    if differ:
        return term[differ[0]] if term[differ[0]] in candidates else None
    return candidates[-1] if candidates else None


def _type(text: str):  # noqa: ANN202 - a TensorType or None
    try:
        return parse_type(text)
    except ValueError:
        return None


def concat_axes(spec: str, side: int, type1: str, type2: str) -> tuple[int, int] | None:
    """(operand axis, output axis) of :func:`concat_letter`."""
    letter = concat_letter(spec, side, type1, type2)
    if letter is None:
        return None
    parsed = _parse(spec)
    assert parsed is not None
    return parsed[0][side].index(letter), parsed[1].index(letter)


def _joinable(spec: str, side: int, type1: str, type2: str, out_axis: int) -> bool:
    axes = concat_axes(spec, side, type1, type2)
    return axes is not None and axes[1] == out_axis


def operand_axis(spec: str, side: int, type1: str, type2: str) -> int:
    return (concat_axes(spec, side, type1, type2) or (0, 0))[0]


def _splittable(spec: str, side: int, axis: int) -> bool:
    """The operand's axis ``axis`` carries a letter the output keeps and the other operand
    lacks (so each part of the concat gives its own slab of the output)."""
    parsed = _parse(spec)
    if parsed is None or len(parsed[0]) != 2 or not 0 <= axis < len(parsed[0][side]):
        return False
    term, other, out = parsed[0][side], parsed[0][1 - side], parsed[1]
    ch = term[axis]
    return term.count(ch) == 1 and out.count(ch) == 1 and ch not in other


def _output_axis(spec: str, side: int, axis: int) -> int:
    parsed = _parse(spec)
    return parsed[1].index(parsed[0][side][axis]) if parsed else 0


# ---- rules: lists and slices -------------------------------------------------------------------

concat.rewrite("concat-single", Tensor.concat(cons(a, nil()), ax, t), a, policy="exact",
               doc="a concat of one operand -> the operand")
concat.rewrite(
    "concat-flatten-first",
    Tensor.concat(cons(Tensor.concat(pair(a, b), ax, t1), rest), ax, t),
    Tensor.concat(cons(a, cons(b, rest)), ax, t), policy="exact",
    doc="concat(concat(a, b), ...) along one axis -> concat(a, b, ...)")
concat.rewrite(
    "concat-flatten-second",
    Tensor.concat(cons(a, cons(Tensor.concat(pair(b, c), ax, t1), rest)), ax, t),
    Tensor.concat(cons(a, cons(b, cons(c, rest))), ax, t), policy="exact",
    doc="concat(a, concat(b, c), ...) along one axis -> concat(a, b, c, ...)")
concat.rewrite(
    "slice-concat-head", Tensor.slice(Tensor.concat(cons(a, rest), ax, tc), st, sp, q, t),
    Tensor.slice(a, st, sp, q, t), has_type(a, ta), holds(_in_head, ta, ax, st, sp),
    policy="exact", doc="a slice of a concat within its first part -> a slice of that part")
concat.rewrite(
    "slice-concat-tail",
    Tensor.slice(Tensor.concat(cons(a, cons(b, rest)), ax, tc), st, sp, q, t),
    Tensor.slice(Tensor.concat(cons(b, rest), ax, py_text(_rest_type, tc, ta, ax)),
                 py_text(_shift, ta, ax, st), py_text(_shift, ta, ax, sp), q, t),
    has_type(a, ta), holds(_in_tail, ta, ax, st, sp), policy="exact",
    doc="a slice of a concat past its first part -> a slice of the concat of the others")
concat.rewrite(
    "concat-adjacent-slices",
    Tensor.concat(cons(Tensor.slice(x, st1, sp1, q, t1),
                       cons(Tensor.slice(x, st2, sp2, q, t2), rest)), ax, t),
    Tensor.concat(cons(Tensor.slice(x, st1, py_text(_widened, ax, sp1, sp2), q,
                                    infer_type("slice", tx, starts=st1,
                                               stops=py_text(_widened, ax, sp1, sp2),
                                               steps=q)), rest), ax, t),
    holds(_adjacent, ax, st1, sp1, st2, sp2, q), has_type(x, tx), policy="exact",
    doc="concat(x[a:b], x[b:c], ...) -> concat(x[a:c], ...) (x itself via slice-identity)")
_slice_args = (tx, st1, q1, st2, sp2, q, t)
concat.rewrite(
    "slice-slice", Tensor.slice(Tensor.slice(x, st1, sp1, q1, t1), st2, sp2, q, t),
    Tensor.slice(x, *(py_text(_composed, i, *_slice_args) for i in range(3)), t),
    has_type(x, tx), holds(_can_compose, *_slice_args), policy="exact",
    doc="slice(slice(x)) -> one slice of x")


# ---- rules: contractions -----------------------------------------------------------------------

def ordered(shared, part, side: int) -> tuple:  # noqa: ANN001 - Tensors or type texts
    """The two operands, the concatenated one (``part``) at position ``side``."""
    return (shared, part) if side == 1 else (part, shared)


def two_open(shared: Tensor, part: Tensor, tail: TensorList, side: int) -> TensorList:
    """The operand list (``shared``, ``part``) or (``part``, ``shared``), ending in the
    variable ``tail`` rather than ``nil``: a two-term spec makes it ``nil``. Patterns with
    two ``cons(w, nil)`` atoms make egglog's planner join all one-element lists pairwise
    first (9 s per step on a NasRNN e-graph of 4 000 e-nodes; 0.01 s without)."""
    first, second = ordered(shared, part, side)
    return cons(first, cons(second, tail))


for _side, _where in ((1, "first"), (0, "second")):
    def _open(shared: Tensor, part: Tensor, tail: TensorList, side: int = _side) -> TensorList:
        return two_open(shared, part, tail, side)

    def _two(shared: Tensor, part: Tensor, side: int = _side) -> TensorList:
        return pair(*ordered(shared, part, side))

    _wax = py_int(operand_axis, s, _side, tw1, tw2)
    concat.rewrite(
        f"concat-of-einsums-shared-{_where}",
        Tensor.concat(pair(Tensor.einsum(_open(x, w1, l1), s, t1),
                           Tensor.einsum(_open(x, w2, l2), s, t2)), ax, t),
        Tensor.einsum(_two(x, Tensor.concat(pair(w1, w2), _wax,
                                            infer_type("concat", tw1, tw2, axis=_wax))), s, t),
        has_type(w1, tw1), has_type(w2, tw2), holds(_joinable, s, _side, tw1, tw2, ax),
        policy="exact",
        doc=f"concat of two einsums sharing their {_where} operand -> one einsum over a "
            "concat of the other operands")
    concat.rewrite(
        f"einsum-of-concat-shared-{_where}",
        Tensor.einsum(_two(x, Tensor.concat(pair(w1, w2), ax, tc)), s, t),
        Tensor.concat(pair(
            Tensor.einsum(_two(x, w1), s, infer_type("einsum", *ordered(tx, tw1, _side), spec=s)),
            Tensor.einsum(_two(x, w2), s, infer_type("einsum", *ordered(tx, tw2, _side), spec=s))),
            py_int(_output_axis, s, _side, ax), t),
        has_type(x, tx), has_type(w1, tw1), has_type(w2, tw2), holds(_splittable, s, _side, ax),
        policy="exact",
        doc="an einsum over a concat along a free index -> a concat of two einsums")

# ---- rules: elementwise ops -------------------------------------------------------------------

UNARY = ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "reciprocal", "floor",
         "ceil", "erf", "relu", "gelu", "gelu_tanh", "sigmoid", "tanh")
BINARY = ("add", "sub", "mul", "div", "max", "min", "pow")

for _op in UNARY:
    _f = getattr(Tensor, _op)
    concat.rewrite(
        f"concat-of-{_op.replace('_', '-')}", Tensor.concat(pair(_f(a, t1), _f(b, t2)), ax, t),
        _f(Tensor.concat(pair(a, b), ax, t), t), has_type(a, t1), has_type(b, t2),
        policy="exact", doc=f"concat({_op}(a), {_op}(b)) -> {_op}(concat(a, b))")
for _op in BINARY:
    _f = getattr(Tensor, _op)
    concat.rewrite(
        f"concat-of-{_op}", Tensor.concat(pair(_f(a, b, t1), _f(c, d, t2)), ax, t),
        _f(Tensor.concat(pair(a, c), ax, t), Tensor.concat(pair(b, d), ax, t), t),
        has_type(a, t1), has_type(b, t1), has_type(c, t2), has_type(d, t2), policy="exact",
        doc=f"concat({_op}(a, b), {_op}(c, d)) -> {_op}(concat(a, c), concat(b, d)) "
            "(operands of the results' types)")
