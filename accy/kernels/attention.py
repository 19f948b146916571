"""fused-attention: an attention group (:mod:`accy.kernels.attention_plan`: Q Kᵀ, an
elementwise chain on the scores, a softmax along the keys, P V, an elementwise epilogue)
as one kernel with an online softmax, as FlashAttention computes it: the scores and the
probabilities never reach memory.

One work-group per (batch, tile of ``bq`` queries), one work-item per query: it holds its
query row, its output row, its running maximum ``m`` and running sum ``l`` in registers.
The keys are walked in tiles of ``bk``: the work-group copies the tile's K and V rows into
local memory (every work-item then reads the same element: a broadcast), and each
work-item takes the tile ``unroll`` keys at a time: their scores (dot products, then the
score chain through the loop-nest machinery: a scale, a mask read at the score's
coordinates, ...), the new maximum, the rescale ``exp(m_old - m_new)`` of ``l`` and of the
output row, and the probabilities' contributions. A maximum that is not finite shifts by 0,
as the row softmax does, so fully masked keys contribute nothing and a row masked
throughout gives 0 / 0 = nan, as the reference. The last, partial key tile is a straight
copy of the loop body with its static length; queries past the end compute the last
query's row and store nothing. The output row, divided by ``l``, goes through the
epilogue and is stored (reshapes keep the flat order).

CPUs take the form in :mod:`accy.kernels.attention_cpu` (vectors along the keys, a query
block per work-item, no barriers) where it applies; a CPU otherwise gets the work-group form
with scalar reads of local memory, which PoCL's work-item loops vectorise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from accy.ir.types import DType
from accy.kernels import attention_cpu, exprs, loopnest
from accy.kernels.attention_cpu import key_stop_var
from accy.kernels.attention_plan import Attention, Side, analyse
from accy.kernels.ir import (
    INDEX,
    Assign,
    Barrier,
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
    Let,
    Load,
    LocalArray,
    Stmt,
    Store,
    Var,
    VectorLoad,
    VectorStore,
    add,
    div,
    idx,
    mod,
    mul,
)
from accy.kernels.workgroup import local_size, pow2ceil
from accy.plans import FusionGroup, KernelOutline, LaunchGeometry, ScheduleKind
from accy.target import TargetProfile

QUERIES = 64  # work-items (queries) per work-group, at most
KEYS = 32  # keys per local-memory tile, at most
UNROLL = 8  # keys per online-softmax step
REGISTER_FEATURES = 160  # most d + dv held in registers; wider heads keep the output in local


@dataclass(frozen=True)
class Tiles:
    bq: int  # queries (work-items) per work-group
    bk: int  # keys per local tile
    unroll: int  # keys per online step
    vectors: bool  # read local tile rows as vectors (GPUs: fewer local loads per FMA)
    o_local: bool = False  # the output rows in local memory, not registers (wide heads)
    cpu: int = 0  # key lanes of the CPU form (:mod:`accy.kernels.attention_cpu`), 0: not
    vlanes: int = 0  # its value-feature lanes
    rows: int = 0  # its queries per work-item


def choose_tiles(a: Attention, target: TargetProfile) -> Tiles:
    """The work-group form: queries per group up to :data:`QUERIES` (fewer for short
    sequences), the largest key tile up to :data:`KEYS` whose K and V rows fit the target's
    local memory. CPUs take the CPU form where V's value features are contiguous and come in
    whole vectors (:func:`accy.kernels.attention_cpu.cpu_lanes`)."""
    bq = min(local_size(target, QUERIES), pow2ceil(a.nq))
    o_local = a.d + a.dv > REGISTER_FEATURES
    while True:  # halve the key tile (down to 8 keys), then the queries, until both fit
        bk = KEYS
        while bk > 1 and _local_bytes(a, bq, bk, o_local) > target.local_mem_bytes:
            bk //= 2
        if bk >= 8 or bq == 1:
            break
        bq //= 2
    if target.device_type == "cpu":
        lanes, vlanes, rows = attention_cpu.cpu_lanes(a, target.native_vector_bytes)
        if lanes:
            return Tiles(1, 1, 1, False, cpu=lanes, vlanes=vlanes, rows=rows)
    # PoCL's work-item loops vectorise scalar reads of local memory, not vector ones
    return Tiles(bq, min(bk, pow2ceil(a.nk)), UNROLL, target.device_type != "cpu", o_local)


def _row_length(dv: int) -> int:
    """Local row length of an output row: padded so rows of neighbouring work-items start in
    other banks, by the vector width its rows are read in."""
    return dv + 4 if dv % 4 == 0 else dv + 2 if dv % 2 == 0 else dv + 1


def _local_bytes(a: Attention, bq: int, bk: int, o_local: bool) -> int:
    return 4 * (bk * (a.d + a.dv) + (bq * _row_length(a.dv) if o_local else 0))


def plan(group: FusionGroup, target: TargetProfile) -> tuple[Attention, Tiles] | str:
    if group.kind is not ScheduleKind.contraction:
        return f"a {group.kind.value} group"
    a = analyse(group.nodes, group.outputs)
    if isinstance(a, str):
        return a
    tiles = choose_tiles(a, target)
    if not tiles.cpu and _local_bytes(a, tiles.bq, tiles.bk, tiles.o_local) > \
            target.local_mem_bytes:
        return "a key tile does not fit local memory"
    return a, tiles


class _Builder:
    def __init__(self, group: FusionGroup, outline: KernelOutline, a: Attention,
                 t: Tiles) -> None:
        self.group, self.outline, self.a, self.t = group, outline, a, t
        self.scores = loopnest.EpilogueBuilder(group, outline, a.scores)
        self.epilogue = loopnest.EpilogueBuilder(group, outline, a.values)
        self.body: list[Stmt] = []
        self.counter = 0

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def let(self, out: list[Stmt], prefix: str, e: Expr, dtype: DType = INDEX,
            mutable: bool = False, lanes: int = 1) -> Var:
        name = self.fresh(prefix)
        out.append(Let(name, dtype, e, mutable, lanes))
        return Var(name)

    def through(self, b: loopnest.EpilogueBuilder, out: list[Stmt], result: Expr,
                node, coords: tuple[Expr, ...]) -> Expr:
        """``node``'s value at ``coords`` with ``b.given`` standing for ``result``; the
        statements it needs go to ``out``."""
        em = loopnest.Emitter()
        em.counter = self.counter
        b.em, b.result = em, result
        v = b.value(node, coords)
        self.counter = em.counter
        out.extend(em.scopes[0].body)
        return v

    def batch_coords(self, out: list[Stmt], bh: Expr) -> list[Expr]:
        """The batch coordinates (in the scores' batch order) of flat batch index ``bh``."""
        coords: list[Expr] = []
        inner = math.prod(self.a.batch)
        for i, n in enumerate(self.a.batch):
            inner //= n
            coords.append(self.let(out, f"b{i}_", div(bh, inner) if i == 0
                                   else mod(div(bh, inner), n)))
        return coords

    def base(self, s: Side, bcoords: list[Expr], seq: Expr | None) -> Expr:
        e: Expr = idx(0)
        for c, stride in zip(bcoords, s.batch, strict=True):
            e = add(e, mul(c, idx(stride)))
        if seq is not None:
            e = add(e, mul(seq, idx(s.seq)))
        return e

    def build(self, kind: ScheduleKind) -> Kernel:
        a, t, body = self.a, self.t, self.body
        f32 = DType.f32
        tiles_q = -(-a.nq // t.bq)
        groups = math.prod(a.batch) * tiles_q
        lid = self.let(body, "lid", Id("local", 0))
        grp = self.let(body, "grp", Id("group", 0))
        bh = div(grp, tiles_q)
        q0 = self.let(body, "q0", mul(mod(grp, tiles_q), idx(t.bq)))
        qrow = self.let(body, "qrow", add(q0, lid))
        qc = qrow if a.nq % t.bq == 0 else self.let(
            body, "qc", Call("min", (qrow, idx(a.nq - 1))))
        bcoords = self.batch_coords(body, bh)
        qb = self.let(body, "qb", self.base(a.q, bcoords, qc))
        kb = self.let(body, "kb", self.base(a.k, bcoords, None))
        vb = self.let(body, "vb", self.base(a.v, bcoords, None))
        m = self.let(body, "m", exprs.const(-np.inf, f32), f32, mutable=True)
        ll = self.let(body, "l", exprs.const(0.0, f32), f32, mutable=True)
        self.kstop = key_stop_var(self, body, q0, t.bq)
        o = self.gpu_keys(body, (qb, kb, vb), m, ll, bcoords, qc, lid)
        # the output row: o / l through the epilogue, at the second einsum's coordinates
        store: list[Stmt] = []
        inv = self.let(store, "inv", Bin("/", exprs.const(1.0, f32), Var(ll.name)), f32)
        ob = self.let(store, "ob", self.base(a.out, bcoords, qrow))
        out = KernelArg("out0", a.stored.type.dtype, True, self.outline.output_slots[0])
        coords = self.out_coords(bcoords, qrow)
        for c in range(a.dv):
            at = dict(coords)
            at["e"] = idx(c)
            v = self.through(self.epilogue, store, Bin("*", o[c], inv), a.stored,
                             tuple(at[r] for r in a.out_roles))
            store.append(Store(out.name, add(ob, idx(c * a.out.feature)), v))
        if a.nq % t.bq:
            body.append(If(Bin("<", qrow, idx(a.nq)), tuple(store)))
        else:
            body.extend(store)
        return Kernel(self.outline.entry, self.outline.work_item, kind, self.group.domain,
                      (*self.scores.args, out), tuple(body),
                      LaunchGeometry((groups * t.bq,), (t.bq,)),
                      loopnest.implemented_ops(self.group), fixed_local_size=True)

    def gpu_keys(self, body: list[Stmt], bases: tuple[Var, Var, Var], m: Var, ll: Var,
                 bcoords: list[Expr], qc: Expr, lid: Var) -> list[Expr]:
        """The work-group form's key loop; the output row's accumulators."""
        a, t, f32 = self.a, self.t, DType.f32
        args = self.scores.arg_of
        qb, kb, vb = bases
        q = [self.let(body, "q", Load(args[a.q.node], add(qb, idx(c * a.q.feature))), f32)
             for c in range(a.d)]
        body.append(LocalArray("k_tile", f32, t.bk * a.d, 4 * _lanes(a.d)))
        body.append(LocalArray("v_tile", f32, t.bk * a.dv, 4 * _lanes(a.dv)))
        o: list
        if t.o_local:  # this work-item's row of o_tile (only it reads it: no barrier)
            ld = _row_length(a.dv)
            body.append(LocalArray("o_tile", f32, t.bq * ld, 16))
            self.o_row = self.let(body, "orow", mul(lid, idx(ld)))
            c = self.fresh("c")
            body.append(For(c, idx(0), idx(a.dv), (
                Store("o_tile", add(self.o_row, Var(c)), exprs.const(0.0, f32)),)))
            o = [Load("o_tile", add(self.o_row, idx(c))) for c in range(a.dv)]
        else:
            o = [self.let(body, "o", exprs.const(0.0, f32), f32, mutable=True)
                 for _ in range(a.dv)]
        state = (q, m, ll, o, bcoords, qc)
        full, rem = divmod(a.nk, t.bk)
        if full:
            kt = self.fresh("kt")
            tile: list[Stmt] = []
            self.tile(tile, Var(kt), t.bk, lid, kb, vb, state)
            body.append(For(kt, idx(0), _stop(full * t.bk, self.kstop), (*tile, Barrier()),
                            step=t.bk))
        if rem:
            last: list[Stmt] = []
            self.tile(last, idx(full * t.bk), rem, lid, kb, vb, state)
            # a condition the whole work-group shares: its barriers stay uniform
            body.extend(last if self.kstop is None
                        else [If(Bin(">", self.kstop, idx(full * t.bk)), tuple(last))])
        return list(o)

    def out_coords(self, bcoords: list[Expr], qrow: Expr) -> dict[str, Expr]:
        at: dict[str, Expr] = {f"b{i}": c for i, c in enumerate(bcoords)}
        at["q"] = qrow
        return at

    def tile(self, out: list[Stmt], kt: Expr, count: int, lid: Var, kb: Var, vb: Var,
             state) -> None:
        """One tile of ``count`` keys from key ``kt``: the copy to local memory, then the
        online steps."""
        a, t = self.a, self.t
        args = self.scores.arg_of
        for local, side, feats, base in (("k_tile", a.k, a.d, kb), ("v_tile", a.v, a.dv, vb)):
            e = self.fresh("e")
            j = div(Var(e), feats)
            c = mod(Var(e), feats)
            src = add(base, add(mul(add(kt, j), idx(side.seq)), mul(c, idx(side.feature))))
            out.append(For(e, lid, idx(count * feats),
                           (Store(local, Var(e), Load(args[side.node], src)),), step=t.bq))
        out.append(Barrier())
        steps = count // t.unroll * t.unroll
        if steps:
            j = self.fresh("j")
            inner: list[Stmt] = []
            self.step(inner, kt, Var(j), t.unroll, state)
            out.append(For(j, idx(0), idx(steps), tuple(inner), step=t.unroll))
        if count % t.unroll:
            self.step(out, kt, idx(steps), count % t.unroll, state)

    def tile_row(self, out: list[Stmt], local: str, feats: int, key: Expr, c: int,
                 w: int, base: Expr | None = None) -> list[Expr]:
        """Elements ``c .. c + w - 1`` of row ``key`` of a local tile (one vector load), or
        of the row at element ``base`` (a multiple of ``w``)."""
        if w == 1:
            at = add(mul(key, idx(feats)), idx(c)) if base is None else add(base, idx(c))
            return [Load(local, at)]
        at = (add(mul(key, idx(feats // w)), idx(c // w)) if base is None
              else div(add(base, idx(c)), w))
        vec = self.fresh(local[0] + "v")
        out.append(Let(vec, DType.f32, VectorLoad(local, at, w), lanes=w))
        return [Lane(Var(vec), i) for i in range(w)]

    def step(self, out: list[Stmt], kt: Expr, j0: Expr, n: int, state) -> None:
        """The online softmax over keys ``kt + j0 .. kt + j0 + n - 1`` of the local tile."""
        a = self.a
        q, m, ll, o, bcoords, qc = state
        f32 = DType.f32
        dots = [self.let(out, "s", exprs.const(0.0, f32), f32, mutable=True) for _ in range(n)]
        w = _lanes(a.d, self.t.vectors)
        for c in range(0, a.d, w):
            for u in range(n):
                kv = self.tile_row(out, "k_tile", a.d, add(j0, idx(u)), c, w)
                terms: Expr = dots[u]
                for i, x in enumerate(kv):  # fma: kernels are built with FP_CONTRACT OFF
                    terms = Call("fma", (q[c + i], x, terms))
                out.append(Assign(dots[u].name, terms))
        alpha, p = self.online(out, [add(kt, add(j0, idx(u))) for u in range(n)], dots, m, ll,
                               bcoords, qc)
        w = _lanes(a.dv, self.t.vectors)
        for c in range(0, a.dv, w):
            rows = [self.tile_row(out, "v_tile", a.dv, add(j0, idx(u)), c, w) for u in range(n)]
            if self.t.o_local:  # read this work-item's output row, update it, write it back
                cur = self.tile_row(out, "o_tile", 0, idx(0), c, w, base=self.o_row)
            else:
                cur = o[c:c + w]
            accs = []
            for i in range(w):
                acc: Expr = Bin("*", cur[i], alpha)
                for u in range(n):
                    acc = Call("fma", (p[u], rows[u][i], acc))
                accs.append(acc)
            if not self.t.o_local:
                out.extend(Assign(o[c + i].name, e) for i, e in enumerate(accs))
            elif w == 1:
                out.append(Store("o_tile", add(self.o_row, idx(c)), accs[0]))
            else:
                out.append(VectorStore("o_tile", div(add(self.o_row, idx(c)), w), f32,
                                       tuple(accs)))
        out.append(Assign(m.name, self.m_new))

    def online(self, out: list[Stmt], keys: list[Expr], dots: list[Var], m: Var, ll: Var,
               bcoords: list[Expr], qc: Expr) -> tuple[Var, list[Var]]:
        """The scores of ``keys`` from their dot products (through the score chain), the new
        maximum (``self.m_new``, assigned to ``m`` by the caller after its rescale), the
        running sum updated; the rescale factor and the probabilities."""
        a, f32 = self.a, DType.f32
        scores = []
        for key, dot in zip(keys, dots, strict=True):
            at: dict[str, Expr] = {f"b{i}": bc for i, bc in enumerate(bcoords)}
            at["q"] = qc
            at["k"] = self.let(out, "key", key)
            v = self.through(self.scores, out, dot, a.softmax.srcs[0],
                             tuple(at[r] for r in a.score_roles))
            scores.append(self.let(out, "x", v, f32))
        top: Expr = m
        for x in scores:
            top = Call("fmax", (top, x))
        self.m_new = self.let(out, "mn", top, f32)
        shift = self.let(out, "shift", Cond(Call("isfinite", (self.m_new,)), self.m_new,
                                            exprs.const(0.0, f32)), f32)
        alpha = self.let(out, "alpha", Call("exp", (Bin("-", m, shift),)), f32)
        p = [self.let(out, "p", Call("exp", (Bin("-", x, shift),)), f32) for x in scores]
        total: Expr = Bin("*", ll, alpha)
        for pu in p:
            total = Bin("+", total, pu)
        out.append(Assign(ll.name, total))
        return alpha, p


def _stop(static: int, dynamic: Var | None) -> Expr:
    return idx(static) if dynamic is None else Call("min", (idx(static), dynamic))


def _lanes(features: int, vectors: bool = True) -> int:
    """The vector width local tile rows of ``features`` elements are read in."""
    return next(w for w in (4, 2, 1) if features % w == 0) if vectors else 1


def build(group: FusionGroup, outline: KernelOutline, kind: ScheduleKind,
          target: TargetProfile, tiles: Tiles | None = None) -> tuple[Kernel, ...]:
    found = plan(group, target)
    if isinstance(found, str):
        raise ValueError(f"fused-attention cannot take this group: {found}")
    a, chosen = found
    b = _Builder(group, outline, a, tiles or chosen)
    if b.t.cpu:
        return attention_cpu.build(b, kind)
    return (b.build(kind),)


def accepts(group: FusionGroup, target: TargetProfile) -> bool:
    return not isinstance(plan(group, target), str)


def _register() -> None:
    from accy.kernels.generators import Generator, register_generator

    register_generator(Generator(
        "fused-attention",
        "attention (Q Kᵀ, a scale or mask, a softmax over the keys, P V) as one kernel: a "
        "work-group per (batch, query tile), K and V tiles through local memory, an online "
        "softmax with the running maximum and sum in registers",
        accepts, build))


_register()
