"""The CPU form of fused-attention (:mod:`accy.kernels.attention`): vectors along the keys.

A first kernel copies K transposed into scratch memory, ``Kt[batch, feature, key]``, the
keys padded with zeros to a multiple of the vector width ``lanes``: a work-item stores one
vector of it, work-groups of up to ``TRANSPOSE_ITEMS`` (one element a work-item and one a
work-group cost PoCL a launch an element). The second takes
``rows`` queries of one batch per work-item (no local memory, no barriers: a CPU core runs
a work-item's loop straight through). For each block of ``lanes`` keys, each query's scores
are one vector: a fused multiply-add of the query's feature (a broadcast scalar) with a row
of ``Kt`` per feature. The score chain (scale, mask) runs per lane through the loop-nest
machinery and goes back into a vector through a small local array; keys past the end score
-inf. Then, per query: the block's maximum, the rescale of the running sum and of the
output row, the probabilities as one vector ``exp``, and the output row (vectors of
``vlanes`` along the value features) accumulated from the rows of V, read in place, of the
block's keys. The last, partial block is a straight copy of the loop body with its static
length, so no key past the end is read. Fusion planning merges an attention into this form
under ``attention=always``, and under ``auto`` only where its scores would not fit a buffer:
the three kernels are faster (:func:`accy.passes.dispatch.attention_fusion.pays`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from accy.ir.ops import Op
from accy.ir.types import DType
from accy.kernels import exprs, loopnest
from accy.kernels.attention_plan import key_stop
from accy.kernels.ir import (
    Assign,
    Bin,
    Call,
    Cond,
    Expr,
    For,
    Id,
    If,
    Kernel,
    KernelArg,
    Lane,
    Load,
    LocalArray,
    Splat,
    Stmt,
    Store,
    Var,
    VectorLoad,
    VectorLoadAt,
    VectorStore,
    add,
    div,
    idx,
    mod,
    mul,
)
from accy.kernels.workgroup import tree
from accy.plans import LaunchGeometry, ScheduleKind, is_inlined

if TYPE_CHECKING:
    from accy.kernels.attention import _Builder


# work-items a work-group of the transposing copy, at most (a divisor of their count): PoCL
# runs a group's items as loops, a group at a time per core, so one-item groups cost a launch each
TRANSPOSE_ITEMS = 64
VECTORS = 16  # vector accumulators of the output rows one work-item holds, at most


def cpu_lanes(a, native_vector_bytes: int) -> tuple[int, int, int]:
    """(key lanes, value lanes, queries per work-item) of the CPU form, or zeros where V's
    features are not contiguous."""
    lanes = min(16, max(2, native_vector_bytes // 4))
    vlanes = next((w for w in (16, 8, 4, 2) if w <= lanes and a.dv % w == 0), 0)
    if not vlanes or a.v.feature != 1:
        return 0, 0, 0
    rows = max(1, min(4, VECTORS // (a.dv // vlanes)))
    return lanes, vlanes, rows


def _f32(value: float) -> Expr:
    return exprs.const(value, DType.f32)


def key_stop_var(b: _Builder, body: list[Stmt], q0: Expr, block: int) -> Var | None:
    """The end of the keys a block of ``block`` queries from ``q0`` reads, where a constant
    causal mask bounds it (:func:`~accy.kernels.attention_plan.key_stop`), else None."""
    offset = key_stop(b.a, block)
    if offset is None:
        return None
    end = Call("min", (idx(b.a.nk), Call("max", (add(q0, idx(block + offset)), idx(0)))))
    return b.let(body, "kstop", end)


_VECTOR_OPS = {Op.MUL: "*", Op.DIV: "/", Op.ADD: "+", Op.SUB: "-"}


def _vector_chain(group, a) -> Callable[[Expr], Expr] | None:
    """The score chain as a function of a vector of scores where it is arithmetic with
    constants only (a scale), else None (the chain runs per lane)."""
    between = _between(a, set(group.nodes))
    chain = [n for n in group.nodes if n in between]
    for n in chain:
        if n.op not in _VECTOR_OPS or n.type.dtype is not DType.f32 or any(
                s not in chain and s is not a.scores and not is_inlined(s) for s in n.srcs):
            return None

    def apply(x: Expr) -> Expr:
        vals: dict = {a.scores: x}
        for n in chain:
            ops = [vals[s] if s in vals else
                   exprs.const(s.value.reshape(-1)[0].item(), DType.f32) for s in n.srcs]
            vals[n] = Bin(_VECTOR_OPS[n.op], ops[0], ops[1])
        return vals[a.softmax.srcs[0]]

    return apply


def _between(a, inside: set) -> set:
    """The group's nodes between the scores and the softmax."""
    out: set = set()
    stack = [a.softmax.srcs[0]]
    while stack:
        n = stack.pop()
        if n is not a.scores and n not in out and n in inside:
            out.add(n)
            stack.extend(n.srcs)
    return out


def build(b: _Builder, kind: ScheduleKind) -> tuple[Kernel, Kernel]:
    a, t, f32 = b.a, b.t, DType.f32
    w, wv, rows = t.cpu, t.vlanes, t.rows
    batches = int(np.prod(a.batch))
    nkp = -(-a.nk // w) * w
    scratch = KernelArg("scratch0", f32, True, -1, batches * a.d * nkp)
    args = b.scores.arg_of

    # the transposing copy: one work-item per ``w`` keys of one feature (a vector of Kt)
    tb: list[Stmt] = []
    gid = b.let(tb, "gid", Id("global", 0))
    blocks = nkp // w
    key0 = b.let(tb, "key0", mul(mod(gid, blocks), idx(w)))
    feat = b.let(tb, "feat", mod(div(gid, blocks), a.d))
    bc = b.batch_coords(tb, div(gid, blocks * a.d))
    lanes: list[Expr] = []
    for i in range(w):
        key = add(key0, idx(i))
        row = Call("min", (key, idx(a.nk - 1))) if nkp != a.nk else key
        src = add(b.base(a.k, bc, row), mul(feat, idx(a.k.feature)))
        value: Expr = Load(args[a.k.node], src)
        if nkp != a.nk:
            value = Cond(Bin("<", key, idx(a.nk)), value, _f32(0.0))
        lanes.append(value)
    tb.append(VectorStore(scratch.name, gid, f32, tuple(lanes)) if w > 1
              else Store(scratch.name, gid, lanes[0]))
    items = batches * a.d * blocks
    transpose = Kernel(f"{b.outline.entry}_kt", b.outline.work_item, kind, b.group.domain,
                       (*b.scores.args, scratch), tuple(tb),
                       LaunchGeometry((items,), (math.gcd(items, TRANSPOSE_ITEMS),)),
                       loopnest.implemented_ops(b.group))

    # the attention: ``rows`` queries per work-item
    body: list[Stmt] = []
    blocks_q = -(-a.nq // rows)
    grp = b.let(body, "grp", Id("global", 0))
    bcoords = b.batch_coords(body, div(grp, blocks_q))
    q0 = b.let(body, "q0", mul(mod(grp, blocks_q), idx(rows)))
    qrows = [add(q0, idx(r)) for r in range(rows)]
    qc = [b.let(body, "qc", Call("min", (qr, idx(a.nq - 1))) if a.nq % rows else qr)
          for qr in qrows]
    qb = [b.let(body, "qb", b.base(a.q, bcoords, c)) for c in qc]
    ktb = b.let(body, "ktb", mul(div(grp, blocks_q), idx(a.d * nkp)))
    vb = b.let(body, "vb", b.base(a.v, bcoords, None))
    body.append(LocalArray("x_tile", f32, rows * w, 4 * w))
    m = [b.let(body, "m", _f32(-np.inf), f32, True) for _ in range(rows)]
    ll = [b.let(body, "l", Splat(f32, w, _f32(0.0)), f32, True, w) for _ in range(rows)]
    o = [[b.let(body, "o", Splat(f32, wv, _f32(0.0)), f32, True, wv)
          for _ in range(a.dv // wv)] for _ in range(rows)]
    ins = (bcoords, qc, qb, ktb, vb, m, ll, o)
    kstop = key_stop_var(b, body, q0, rows)
    full, rem = divmod(a.nk, w)
    if full:
        jb = b.fresh("jb")
        inner: list[Stmt] = []
        _block(b, inner, Var(jb), w, ins, scratch, nkp)
        stop = idx(full * w) if kstop is None else Call("min", (idx(full * w), kstop))
        body.append(For(jb, idx(0), stop, tuple(inner), step=w))
    if rem:
        last: list[Stmt] = []
        _block(b, last, idx(full * w), rem, ins, scratch, nkp)
        body.extend(last if kstop is None else [If(Bin(">", kstop, idx(full * w)), tuple(last))])
    for r in range(rows):
        store: list[Stmt] = []
        total = tree([Lane(ll[r], i) for i in range(w)], lambda x, y: Bin("+", x, y))
        inv = b.let(store, "inv", Bin("/", _f32(1.0), total), f32)
        ob = b.let(store, "ob", b.base(a.out, bcoords, qrows[r]))
        for c in range(a.dv):
            at = {f"b{i}": x for i, x in enumerate(bcoords)} | {"q": qrows[r], "e": idx(c)}
            v = b.through(b.epilogue, store, Bin("*", Lane(o[r][c // wv], c % wv), inv),
                          a.stored, tuple(at[x] for x in a.out_roles))
            store.append(Store("out0", add(ob, idx(c * a.out.feature)), v))
        if a.nq % rows:
            body.append(If(Bin("<", qrows[r], idx(a.nq)), tuple(store)))
        else:
            body.extend(store)
    reader = KernelArg(scratch.name, f32, False, -1, scratch.scratch_elems)
    out = KernelArg("out0", a.stored.type.dtype, True, b.outline.output_slots[0])
    main = Kernel(b.outline.entry, b.outline.work_item, kind, b.group.domain,
                  (*b.scores.args, reader, out), tuple(body),
                  LaunchGeometry((batches * blocks_q,), (1,)),
                  loopnest.implemented_ops(b.group), fixed_local_size=True)  # x_tile: its own
    return transpose, main


def _block(b: _Builder, out: list[Stmt], jb: Expr, n: int, ins, scratch: KernelArg,
           nkp: int) -> None:
    """Keys ``jb .. jb + n - 1`` (``n`` <= lanes; fewer only in the last block)."""
    a, t, f32 = b.a, b.t, DType.f32
    w, wv, rows = t.cpu, t.vlanes, t.rows
    bcoords, qc, qb, ktb, vb, m, ll, o = ins
    args = b.scores.arg_of
    s = [b.let(out, "s", Splat(f32, w, _f32(0.0)), f32, True, w) for _ in range(rows)]
    for c in range(a.d):
        kv = b.let(out, "kv", VectorLoad(scratch.name, div(add(ktb, add(idx(c * nkp), jb)), w),
                                         w), f32, False, w)
        for r in range(rows):
            qv = Load(args[a.q.node], add(qb[r], idx(c * a.q.feature)))
            out.append(Assign(s[r].name, Call("fma", (Splat(f32, w, qv), kv, s[r]))))
    keys = [b.let(out, "key", add(jb, idx(i))) for i in range(n)]
    chain = _vector_chain(b.group, a) if n == w else None
    xs: list[Expr] = []
    if chain is not None:  # a scale: on whole vectors
        xs = [b.let(out, "xv", chain(x), f32, False, w) for x in s]
    for r in range(rows) if chain is None else ():  # per lane, back into a vector via x_tile
        for i in range(w):
            if i < n:
                at = {f"b{j}": x for j, x in enumerate(bcoords)} | {"q": qc[r], "k": keys[i]}
                x = b.through(b.scores, out, Lane(s[r], i), a.softmax.srcs[0],
                              tuple(at[z] for z in a.score_roles))
            else:
                x = _f32(-np.inf)
            out.append(Store("x_tile", idx(r * w + i), x))
    for r in range(rows):
        xv = xs[r] if xs else b.let(out, "xv", VectorLoad("x_tile", idx(r), w), f32, False, w)
        top = tree([Lane(xv, i) for i in range(n)], lambda x, y: Call("fmax", (x, y)))
        m_new = b.let(out, "mn", Call("fmax", (m[r], top)), f32)
        shift = b.let(out, "shift", Cond(Call("isfinite", (m_new,)), m_new, _f32(0.0)), f32)
        alpha = b.let(out, "alpha", Call("exp", (Bin("-", m[r], shift),)), f32)
        p = b.let(out, "p", Call("exp", (Bin("-", xv, Splat(f32, w, shift)),)), f32, False, w)
        # the running sum per lane (lanes past the last key hold exp(-inf) = 0)
        out.append(Assign(ll[r].name, Call("fma", (ll[r], Splat(f32, w, alpha), p))))
        out.append(Assign(m[r].name, m_new))
        for acc in o[r]:
            out.append(Assign(acc.name, Bin("*", acc, Splat(f32, wv, alpha))))
        s[r] = p  # the probabilities, read below
    for i in range(n):  # V's row of each key, shared by the queries
        vrow = [b.let(out, "vv", VectorLoadAt(args[a.v.node], add(vb, add(
            mul(keys[i], idx(a.v.seq)), idx(cv * wv))), wv), f32, False, wv)
            for cv in range(a.dv // wv)]
        for r in range(rows):
            pi = Splat(f32, wv, Lane(s[r], i))
            for cv, acc in enumerate(o[r]):
                out.append(Assign(acc.name, Call("fma", (pi, vrow[cv], acc))))
