"""Contractions: merge nested einsums into one N-ary einsum, split it into pairs again,
absorb transposes and broadcasts into specs, pull scalars out, factor sums of einsums
(rule set ``einsum``).

Merging and splitting together re-associate a chain: ``(A@B)@C`` merges into
``einsum(A, B, C)``, whose operands the swap rules reorder, and splitting the pair at the head
gives ``A@(B@C)`` as well; extraction keeps the cheaper association. Specs that merging and
splitting make have their letters renamed in order of first appearance (``ab,bc->ac``), so a
merge of a split lands on the same e-node and the cycle closes.

The swap rules only reorder operands (exact: the IR leaves an einsum's product and sum order
unspecified); merging, splitting, pulling scalars out and factoring change which intermediates
are rounded, so they are ``fast-math``.
"""

from __future__ import annotations

import string
from functools import lru_cache

from egglog import var

from accy.egraph.rules import infer_type, py_text
from accy.egraph.sorts import Tensor, TensorList, parse_type, tensors, types
from rewrites import Theme, has_type, holds, same_types
from rewrites._numeric import ints_text, parse_ints

einsum = Theme("einsum", "merge/split contractions, absorb movement, pull scalars out")

a, b, c = tensors("a b c")
rest = var("rest", TensorList)
t, t1, ta, tb, tc, s, s1, p, sh = types("t t1 ta tb tc s s1 p sh")
cons, nil = TensorList.cons, TensorList.nil

_LETTERS = string.ascii_lowercase + string.ascii_uppercase

# ---- spec arithmetic (pure Python; None where a rule does not apply) --------------------------

Spec = tuple[tuple[str, ...], str]


def _parse(spec: str) -> Spec | None:
    lhs, arrow, out = spec.partition("->")
    if not arrow or not lhs:
        return None
    return tuple(lhs.split(",")), out


def _text(terms: tuple[str, ...] | list[str], out: str) -> str:
    return ",".join(terms) + "->" + out


def _valid(terms: tuple[str, ...] | list[str], out: str) -> bool:
    """What ``accy.ir.shapes`` accepts: output letters distinct and all in some input term."""
    return len(set(out)) == len(out) and set(out) <= set("".join(terms))


def _canonical(terms: tuple[str, ...] | list[str], out: str) -> str | None:
    """The spec with letters renamed in order of first appearance (None past 52 letters)."""
    names: dict[str, str] = {}
    for ch in "".join(terms) + out:
        if ch not in names:
            if len(names) == len(_LETTERS):
                return None
            names[ch] = _LETTERS[len(names)]
    return _text(["".join(names[ch] for ch in term) for term in terms],
                 "".join(names[ch] for ch in out))


@lru_cache(maxsize=4096)
def _swap(spec: str, i: int) -> str | None:
    parsed = _parse(spec)
    if parsed is None or len(parsed[0]) <= i + 1:
        return None
    terms = list(parsed[0])
    terms[i], terms[i + 1] = terms[i + 1], terms[i]
    return _text(terms, parsed[1])


@lru_cache(maxsize=4096)
def _merge(outer: str, inner: str) -> str | None:
    """The spec of ``einsum(einsum(A, B; inner), rest...; outer)`` as one einsum."""
    po, pi = _parse(outer), _parse(inner)
    if po is None or pi is None or len(pi[0]) != 2 or len(po[0][0]) != len(pi[1]):
        return None
    if not _valid(pi[0], pi[1]) or not _valid(po[0], po[1]):
        return None
    used = set("".join(po[0]) + po[1])
    rename = dict(zip(pi[1], po[0][0], strict=True))  # inner output letter -> outer letter
    fresh = (ch for ch in _LETTERS if ch not in used)
    for ch in "".join(pi[0]):
        if ch not in rename:
            nxt = next(fresh, None)
            if nxt is None:
                return None
            rename[ch] = nxt
    inner_terms = ["".join(rename[ch] for ch in term) for term in pi[0]]
    return _canonical([*inner_terms, *po[0][1:]], po[1])


@lru_cache(maxsize=4096)
def _split(spec: str) -> tuple[str, str] | None:
    """(pair spec, rest spec) contracting the first two operands of an N>=3 einsum first."""
    parsed = _parse(spec)
    if parsed is None or len(parsed[0]) < 3:
        return None
    terms, out = parsed
    later = set("".join(terms[2:]) + out)
    kept = "".join(dict.fromkeys(ch for ch in terms[0] + terms[1] if ch in later))
    pair = _canonical(terms[:2], kept)
    outer = _canonical([kept, *terms[2:]], out)
    return None if pair is None or outer is None else (pair, outer)


def _can_merge(outer: str, inner: str) -> bool:
    return _merge(outer, inner) is not None


def _merged(outer: str, inner: str) -> str:
    return _merge(outer, inner) or outer


def _can_split(spec: str) -> bool:
    return _split(spec) is not None


def _split_pair(spec: str) -> str:
    return (_split(spec) or (spec, spec))[0]


def _split_rest(spec: str) -> str:
    return (_split(spec) or (spec, spec))[1]


def _can_swap(spec: str, i: int) -> bool:
    return _swap(spec, i) is not None


def _swapped(spec: str, i: int) -> str:
    return _swap(spec, i) or spec


@lru_cache(maxsize=4096)
def _absorb_transpose(spec: str, perm: str) -> str | None:
    """The spec reading the first operand untransposed: term[perm[k]] = old term[k]."""
    parsed, order = _parse(spec), parse_ints(perm)
    if parsed is None or order is None or len(order) != len(parsed[0][0]):
        return None
    terms, out = parsed
    first = [""] * len(order)
    for k, axis in enumerate(order):
        first[axis] = terms[0][k]
    return _text(["".join(first), *terms[1:]], out)


def _can_absorb_transpose(spec: str, perm: str) -> bool:
    return _absorb_transpose(spec, perm) is not None


def _absorbed_transpose(spec: str, perm: str) -> str:
    return _absorb_transpose(spec, perm) or spec


@lru_cache(maxsize=4096)
def _absorb_broadcast(spec: str, x_type: str, target: str) -> str | None:
    """The spec reading ``x`` itself instead of ``broadcast(x, target)`` as first operand.

    Only rank extensions (new leading axes; x's own axes unchanged): the new letters must
    appear in another operand's term (or the sum over the copies would be lost).
    """
    parsed, shape = _parse(spec), parse_ints(target)
    try:
        x_shape = parse_type(x_type).shape
    except ValueError:
        return None
    if parsed is None or shape is None or len(shape) != len(parsed[0][0]):
        return None
    terms, out = parsed
    lead = len(shape) - len(x_shape)
    if lead <= 0 or tuple(shape[lead:]) != x_shape or len(set(terms[0])) != len(terms[0]):
        return None
    new_terms = [terms[0][lead:], *terms[1:]]
    elsewhere = set("".join(terms[1:]))
    if any(ch not in elsewhere for ch in terms[0][:lead]) or not _valid(new_terms, out):
        return None
    return _text(new_terms, out)


def _can_absorb_broadcast(spec: str, x_type: str, target: str) -> bool:
    return _absorb_broadcast(spec, x_type, target) is not None


def _absorbed_broadcast(spec: str, x_type: str, target: str) -> str:
    return _absorb_broadcast(spec, x_type, target) or spec


@lru_cache(maxsize=4096)
def _permute_output(spec: str, perm: str) -> str | None:
    parsed, order = _parse(spec), parse_ints(perm)
    if parsed is None or order is None or sorted(order) != list(range(len(parsed[1]))):
        return None
    return _text(parsed[0], "".join(parsed[1][i] for i in order))


def _can_permute_output(spec: str, perm: str) -> bool:
    return _permute_output(spec, perm) is not None


def _permuted_output(spec: str, perm: str) -> str:
    return _permute_output(spec, perm) or spec


def _permutation(spec: str) -> tuple[int, ...] | None:
    """The perm of a one-operand einsum that only permutes axes (``ab->ba``)."""
    parsed = _parse(spec)
    if parsed is None or len(parsed[0]) != 1:
        return None
    (term,), out = parsed
    if len(set(term)) != len(term) or sorted(term) != sorted(out):
        return None
    return tuple(term.index(ch) for ch in out)


def _is_proper_permutation(spec: str) -> bool:
    perm = _permutation(spec)
    return perm is not None and perm != tuple(range(len(perm)))


def _is_identity(spec: str) -> bool:
    perm = _permutation(spec)
    return perm is not None and perm == tuple(range(len(perm)))


def _perm_text(spec: str) -> str:
    return ints_text(_permutation(spec) or ())


def _scalar_like(scale_type: str, result_type: str) -> bool:
    """A one-element tensor that broadcasts onto the result without growing it."""
    try:
        st, rt = parse_type(scale_type), parse_type(result_type)
    except ValueError:
        return False
    return st.size == 1 and st.rank <= rt.rank and st.dtype is rt.dtype


# ---- operand order --------------------------------------------------------------------------

einsum.rewrite("einsum-swap-01", Tensor.einsum(cons(a, cons(b, rest)), s, t),
               Tensor.einsum(cons(b, cons(a, rest)), py_text(_swapped, s, 0), t),
               holds(_can_swap, s, 0), policy="exact", permutes=True,
               doc="swap the first two operands (and their spec terms)")
einsum.rewrite("einsum-swap-12", Tensor.einsum(cons(a, cons(b, cons(c, rest))), s, t),
               Tensor.einsum(cons(a, cons(c, cons(b, rest))), py_text(_swapped, s, 1), t),
               holds(_can_swap, s, 1), policy="exact", permutes=True,
               doc="swap the second and third operands (and their spec terms)")

# ---- merge and split --------------------------------------------------------------------------

einsum.rewrite(
    "einsum-merge", Tensor.einsum(cons(Tensor.einsum(cons(a, cons(b, nil())), s1, t1), rest), s, t),
    Tensor.einsum(cons(a, cons(b, rest)), py_text(_merged, s, s1), t),
    holds(_can_merge, s, s1), policy="fast-math",
    doc="einsum(einsum(A, B), ...) -> one N-ary einsum (the path is chosen again)")
_pair = py_text(_split_pair, s)
einsum.rewrite(
    "einsum-split", Tensor.einsum(cons(a, cons(b, cons(c, rest))), s, t),
    Tensor.einsum(cons(Tensor.einsum(cons(a, cons(b, nil())), _pair,
                                     infer_type("einsum", ta, tb, spec=_pair)), cons(c, rest)),
                  py_text(_split_rest, s), t),
    holds(_can_split, s), has_type(a, ta), has_type(b, tb), policy="fast-math",
    doc="an N-ary einsum (N >= 3) -> its first two operands contracted first")

# ---- movement into specs ----------------------------------------------------------------------

einsum.rewrite(
    "einsum-absorb-transpose", Tensor.einsum(cons(Tensor.transpose(a, p, t1), rest), s, t),
    Tensor.einsum(cons(a, rest), py_text(_absorbed_transpose, s, p), t),
    holds(_can_absorb_transpose, s, p), policy="exact",
    doc="einsum(transpose(A), ...) -> einsum(A, ...) with the spec term permuted")
einsum.rewrite(
    "einsum-absorb-broadcast", Tensor.einsum(cons(Tensor.broadcast(a, sh, t1), rest), s, t),
    Tensor.einsum(cons(a, rest), py_text(_absorbed_broadcast, s, ta, sh), t),
    has_type(a, ta), holds(_can_absorb_broadcast, s, ta, sh), policy="exact",
    doc="einsum(broadcast(A), ...) -> einsum(A, ...) without the new axes' letters")
einsum.rewrite(
    "transpose-of-einsum", Tensor.transpose(Tensor.einsum(rest, s, t1), p, t),
    Tensor.einsum(rest, py_text(_permuted_output, s, p), t),
    holds(_can_permute_output, s, p), policy="exact",
    doc="transpose(einsum(...)) -> einsum(...) writing the permuted output")
einsum.rewrite("einsum-to-transpose", Tensor.einsum(cons(a, nil()), s, t),
               Tensor.transpose(a, py_text(_perm_text, s), t),
               holds(_is_proper_permutation, s), policy="exact",
               doc="a one-operand einsum that only permutes axes -> transpose")
einsum.rewrite("einsum-identity", Tensor.einsum(cons(a, nil()), s, t), a,
               holds(_is_identity, s), policy="exact",
               doc="a one-operand einsum that copies (ab->ab) -> its operand")

# ---- scalars and sums -------------------------------------------------------------------------

einsum.rewrite(
    "einsum-pull-scalar", Tensor.einsum(cons(Tensor.mul(a, c, t1), rest), s, t),
    Tensor.mul(Tensor.einsum(cons(a, rest), s, t), c, t),
    has_type(a, t1), has_type(c, tc), holds(_scalar_like, tc, t), policy="fast-math",
    doc="einsum(A * s, ...) -> einsum(A, ...) * s for a one-element s (scale the output)")
einsum.rewrite(
    "factor-einsum-add",
    Tensor.add(Tensor.einsum(cons(a, cons(b, nil())), s, t),
               Tensor.einsum(cons(a, cons(c, nil())), s, t), t),
    Tensor.einsum(cons(a, cons(Tensor.add(b, c, tb), nil())), s, t),
    has_type(b, tb), has_type(c, tc), same_types(tb, tc), policy="fast-math",
    doc="einsum(A, B) + einsum(A, C) -> einsum(A, B + C): one contraction fewer")
