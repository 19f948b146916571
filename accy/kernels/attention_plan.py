"""The attention pattern: scores = einsum(Q, K) (a batched Q Kᵀ), an elementwise chain on the
scores (a scale, an additive or causal mask), a softmax along the key axis, and
einsum(P, V), optionally followed by an elementwise epilogue at the output's shape and
reshapes. ``fusion-planning{attention=auto|always}`` (:mod:`accy.passes.dispatch.attention_fusion`)
merges the three groups such a program is planned as (the scores contraction, the row
softmax, the P V contraction) into one group when :func:`analyse` recognises it, and the
``fused-attention`` generator (:mod:`accy.kernels.attention`) builds that group as one
kernel with an online softmax. Both use :func:`analyse`, so the planner merges only what the
generator takes.

Letters: every batch letter is in Q, K, V, the scores and the output; the query letter in
Q, the scores and the output; the key letter in K, V and the scores; one contracted (head)
letter in Q and K; one value letter in V and the output. Each operand is read from a buffer
(contiguous, row-major), so its element strides follow from its shape.
"""

from __future__ import annotations

import string
from dataclasses import dataclass

import numpy as np

from accy.ir.node import Node
from accy.ir.ops import Op, OpKind
from accy.ir.shapes import parse_einsum
from accy.ir.types import DType
from accy.kernels.ir import row_major
from accy.plans import is_inlined

MAX_FEATURES = 512
"""Most head plus value features (``d + dv``): a K and a V tile of 8 keys then fit the 16 KiB
of local memory OpenCL guarantees."""


@dataclass(frozen=True)
class Side:
    """How one operand (or the output) is addressed: element strides of its batch letters (in
    the scores' batch order), of its sequence letter and of its feature letter."""

    node: Node
    batch: tuple[int, ...]
    seq: int
    feature: int


@dataclass(frozen=True)
class Attention:
    scores: Node  # einsum(Q, K)
    softmax: Node
    values: Node  # einsum(P, V)
    stored: Node  # the value written: ``values`` or an elementwise function of it
    q: Side
    k: Side
    v: Side
    out: Side  # strides into ``values``' shape (reshapes keep the flat order)
    batch: tuple[int, ...]  # batch extents, in the scores' order
    score_roles: tuple[str, ...]  # per scores axis: "b0", "b1", ..., "q" or "k"
    out_roles: tuple[str, ...]  # per axis of the second einsum: "b0", ..., "q" or "e"
    nq: int
    nk: int
    d: int
    dv: int


def _letters_ok(term: str) -> bool:
    return len(set(term)) == len(term)


def _side(node: Node, term: str, batch: str, seq: str, feature: str) -> Side:
    strides = dict(zip(term, row_major(node.type.shape), strict=True))
    return Side(node, tuple(strides[c] for c in batch), strides[seq], strides[feature])


def _depends(nodes: list[Node], root: Node) -> set[Node]:
    """The nodes of ``nodes`` (in program order) that read ``root``, directly or not."""
    out = {root}
    for n in nodes:
        if any(s in out for s in n.srcs):
            out.add(n)
    return out


def analyse(nodes: list[Node] | tuple[Node, ...], outputs: list[Node] | tuple[Node, ...],
            dtypes: tuple[DType, ...] = (DType.f32,)) -> Attention | str:
    """The attention a group of ``nodes`` (program order) writing ``outputs`` computes, or why
    it is not one: its operands and both einsums all of one of ``dtypes``; the softmax and
    the output of that dtype too, except that f16 attention may compute the score chain, the
    softmax and the epilogue in f32 (as dtype-legalization promotes f16 around the products
    it keeps for f16 tensor cores), the probabilities cast back to f16 for P V."""
    einsums = [n for n in nodes if n.op is Op.EINSUM]
    softmaxes = [n for n in nodes if n.op is Op.SOFTMAX]
    if len(einsums) != 2 or len(softmaxes) != 1:
        return "not two einsums around one softmax"
    scores, values = einsums
    (sm,) = softmaxes
    inside = set(nodes)
    if len(values.srcs) != 2 or len(scores.srcs) != 2:
        return "an einsum does not have two operands"
    probs = [s for s in values.srcs
             if s is sm or s.op is Op.CAST and s.srcs[0] is sm and s in inside]
    if len(probs) != 1 or values.srcs[0] is values.srcs[1]:
        return "the softmax is not one operand of the second einsum"
    p_pos = values.srcs.index(probs[0])
    v_node = values.srcs[1 - p_pos]
    for s in (*scores.srcs, v_node):
        if s in inside or is_inlined(s):
            return "an einsum operand is not read from a buffer"
    dtype = scores.type.dtype
    names = "/".join(d.value for d in dtypes)
    # f16 attention: the softmax and the output may be f32
    wide = {dtype, DType.f32} if dtype is DType.f16 else {dtype}
    if (dtype not in dtypes or sm.type.dtype not in wide or probs[0].type.dtype is not dtype
            or any(n.type.dtype is not dtype for n in (values, *scores.srcs, v_node))):
        return f"not all {names}"
    # the chain between the scores and the softmax: elementwise at the scores' shape
    dep = _depends(list(nodes), scores)
    feeds = _ancestors(sm, inside)
    if sm not in dep:
        return "the softmax does not read the scores"
    chain = [n for n in nodes if n in dep and n in feeds and n is not scores]
    for n in chain:
        if not n.op.is_elementwise or n.type.shape != scores.type.shape:
            return f"{n.op.value} between the scores and the softmax is not elementwise"
    # the epilogue after the second einsum, then reshapes
    after = _depends(list(nodes), values)
    views = [n for n in nodes if n in after and n.op is Op.RESHAPE]
    epilogue = [n for n in nodes if n in after and n is not values and n not in views]
    for n in epilogue:
        if not n.op.is_elementwise or n.type.shape != values.type.shape:
            return f"{n.op.value} after the second einsum is not elementwise at its shape"
        if any(s in views for s in n.srcs):
            return f"{n.op.value} after a reshape of the second einsum"
        if any(s in dep and s not in after for s in n.srcs):
            return f"{n.op.value} after the second einsum reads the scores"
    for n in nodes:  # everything else: light values the chain or epilogue reads
        if n in dep or n in after:
            continue
        if not (n.op.is_elementwise or n.op.kind is OpKind.MOVEMENT):
            return f"{n.op.value} beside the attention"
    if any(n not in after and n is not sm and n is not probs[0] and n is not scores
           and n not in chain for n in dep):
        return "a value of the scores is read besides the softmax"
    if len(outputs) != 1:
        return "more than one output"
    (output,) = outputs
    stored = output
    while stored.op is Op.RESHAPE and stored in after and stored is not values:
        stored = stored.srcs[0]
    if stored is not values and stored not in epilogue:
        return "the output is not the second einsum (or an elementwise function of it)"
    if stored.type.dtype not in wide:
        return f"not all {names}"
    return _letters(scores, sm, values, p_pos, v_node, stored)


def _ancestors(node: Node, inside: set[Node]) -> set[Node]:
    """The nodes of ``inside`` that ``node`` reads, directly or not."""
    out: set[Node] = set()
    stack = [s for s in node.srcs if s in inside]
    while stack:
        n = stack.pop()
        if n not in out:
            out.add(n)
            stack.extend(s for s in n.srcs if s in inside)
    return out


def _letters(scores: Node, sm: Node, values: Node, p_pos: int, v_node: Node,
             stored: Node) -> Attention | str:
    t1, o1 = parse_einsum(scores.attr("spec"), [s.type.rank for s in scores.srcs])
    t2, o2 = parse_einsum(values.attr("spec"), [s.type.rank for s in values.srcs])
    if not all(_letters_ok(t) for t in (*t1, *t2)):
        return "a letter repeats within an operand"
    axis = sm.attr("axis") % scores.type.rank
    key = o1[axis]
    a, b = t1
    if key in a and key in b:
        return "the softmax axis is contracted by both operands"
    qi, ki = (1, 0) if key in a else (0, 1)
    tq, tk = t1[qi], t1[ki]
    batch = [c for c in o1 if c in tq and c in tk]
    contracted = [c for c in set(tq) | set(tk) if c not in o1]
    queries = [c for c in o1 if c in tq and c not in tk]
    if (len(contracted) != 1 or len(queries) != 1 or key not in tk or key in tq
            or len(o1) != len(batch) + 2 or set(tq) != {*batch, *queries, *contracted}
            or set(tk) != {*batch, key, *contracted}):
        return "the scores are not a batched Q Kᵀ over one head letter"
    (query,), (head,) = queries, contracted
    # the second einsum's letters, renamed to the scores' through P's axes
    tp, tv = t2[p_pos], t2[1 - p_pos]
    rename = dict(zip(tp, o1, strict=True))
    value_letters = [c for c in tv if c not in tp]
    if len(value_letters) != 1:
        return "V has not exactly one value letter"
    # the value letter under a name the scores do not use (the einsums name letters apart)
    value = next(c for c in string.ascii_letters if c not in o1)
    rename[value_letters[0]] = value
    out_roles = [rename.get(c) for c in o2]
    if (None in out_roles or sorted(out_roles) != sorted([*batch, query, value])
            or {rename[c] for c in tv} != {*batch, key, value}):
        return "the second einsum is not P V over the key letter"
    v_term = "".join(rename[c] for c in tv)
    out_term = "".join(rename[c] for c in o2)
    sizes = dict(zip(o1, scores.type.shape, strict=True))
    d = dict(zip(tq, scores.srcs[qi].type.shape, strict=True))[head]
    dv = dict(zip(v_term, v_node.type.shape, strict=True))[value]
    if min(scores.type.size, d, dv) == 0:
        return "empty"
    if d + dv > MAX_FEATURES:
        return f"head and value features {d} + {dv} over {MAX_FEATURES}"
    def role(c: str) -> str:
        return {query: "q", key: "k", value: "e"}.get(c) or f"b{batch.index(c)}"

    roles = tuple(role(c) for c in o1)
    return Attention(
        scores, sm, values, stored,
        _side(scores.srcs[qi], tq, "".join(batch), query, head),
        _side(scores.srcs[ki], tk, "".join(batch), key, head),
        _side(v_node, v_term, "".join(batch), key, value),
        _side(values, out_term, "".join(batch), query, value),
        tuple(sizes[c] for c in batch), roles, tuple(role(c) for c in out_term),
        sizes[query], sizes[key], d, dv)


def _constant_mask(a: Attention) -> np.ndarray | None:
    """Where the scores are ``where(C, x, -inf)`` with ``C`` a constant: ``C`` broadcast over
    the scores as (batch, queries, keys), the batch flattened; else None."""
    sel = a.softmax.srcs[0]
    if sel.op is not Op.SELECT:
        return None
    cond, _, fill = sel.srcs
    if (cond.op is not Op.CONSTANT or fill.op is not Op.CONSTANT or fill.type.size != 1
            or not np.isneginf(fill.value).all()):
        return None
    allowed = np.broadcast_to(np.asarray(cond.value, dtype=bool).reshape(cond.type.shape),
                              a.scores.type.shape)
    qa, ka = a.score_roles.index("q"), a.score_roles.index("k")
    return np.moveaxis(allowed, (qa, ka), (-2, -1)).reshape(-1, a.nq, a.nk)


def key_stop(a: Attention, block: int) -> int | None:
    """Where the scores are ``where(C, x, -inf)`` with ``C`` a constant (a causal mask), a
    block of ``block`` queries from query ``q0`` needs only the keys before
    ``min(nk, q0 + block + offset)``: the returned ``offset``. The keys after it are masked
    for every query of the block, so they add exactly nothing (exp(-inf - shift) = 0, and a
    block masked throughout stays 0 / 0). None where the mask has no such bound (or there is
    none, or it masks no key tail)."""
    mask = _constant_mask(a)
    if mask is None:
        return None
    allowed = mask.any(axis=0)
    # one past the last allowed key of each query (0: none)
    ends = np.where(allowed.any(axis=1), a.nk - np.argmax(allowed[:, ::-1], axis=1), 0)
    stops = [int(ends[t:t + block].max()) for t in range(0, a.nq, block)]
    offset = stops[0] - block
    if all(s == min(a.nk, max(0, t * block + block + offset)) for t, s in enumerate(stops)):
        return offset if stops != [a.nk] * len(stops) else None
    return None


def triangle(a: Attention) -> int | None:
    """``o`` where the scores are ``where(C, x, -inf)`` with ``C`` the constant causal mask
    ``key <= query + o`` at every batch index (``np.tri``), so that a kernel can compare the
    indices instead of reading ``C``; else None."""
    allowed = _constant_mask(a)
    if allowed is None:
        return None
    # the diagonal's offset, from the first query's allowed keys (none: -1; a diagonal further
    # down is not recognised)
    first = int(np.argmin(allowed[0, 0])) - 1 if not allowed[0, 0].all() else a.nk - 1
    if np.array_equal(allowed, np.broadcast_to(np.tri(a.nq, a.nk, first, dtype=bool),
                                               allowed.shape)):
        return first
    return None
