"""Epilogue and stores of the tensor-core kernels' accumulators (a mixin of
:class:`accy.kernels.mma._Builder`). One f32 or f16 output with contiguous rows is staged: every
warp applies the epilogue to its accumulators, then a pass of tile rows at a time goes through
local memory (the A and B tiles in turn, free after the K loop; f16 outputs packed two halves
a word) and out as row vectors (:class:`StagePlan`). Otherwise each pair of
accumulators at adjacent columns of a row goes through the group's fused epilogue and out as a
float2 (f16 outputs: ``vstore_half2``) where the output's layout allows, else as guarded
scalars. Pairs are c0,c1 and c2,c3 of a fragment (``c_coords``), or under the f32
vector scheme's N permutation the same register of fragments ni and ni + 1 (``c_coords_v``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from accy.ir.types import DType
from accy.kernels import loopnest
from accy.kernels.contraction_plan import Contraction, output_coords
from accy.kernels.ir import (
    Assign,
    Barrier,
    Bin,
    Call,
    Expr,
    If,
    KernelArg,
    Lane,
    Let,
    Load,
    Stmt,
    Store,
    Var,
    VectorLoad,
    VectorStore,
    add,
    all_of,
    div,
    idx,
    mod,
    mul,
)
from accy.kernels.mma_layout import c_coords_v
from accy.kernels.mma_plan import c_coords
from accy.kernels.split_k import store_targets
from accy.plans import FusionGroup, KernelOutline

if TYPE_CHECKING:
    from accy.kernels.mma_plan import MmaTiles

PAIRED = (DType.f32, DType.f16)  # outputs stored a pair at a time (float2, vstore_half2)
VEC = 4  # elements per staged store (float4, vstore_half4)
STAGE_PAD = 4  # words added to each staged row: a warp's pairs in distinct banks


@dataclass(frozen=True)
class StagePlan:
    """Staged stores (:meth:`Stores.staged`): a pass holds ``frag_rows`` m16 fragment rows of
    each of ``warp_rows`` warp rows (``16 warp_rows frag_rows`` tile rows); ``packed``: f16
    outputs two halves a 32-bit word (else one element a word); ``vec``: words (packed) or
    elements per read and store."""

    packed: bool
    warp_rows: int
    frag_rows: int
    vec: int

    @property
    def per(self) -> int:
        """Elements a 32-bit word of local memory holds."""
        return 2 if self.packed else 1


def _less(a: Expr, n: int) -> Expr:
    return Bin("-", a, idx(n)) if n else a


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


class Stores:
    """Uses the builder's ``c``, ``t``, ``f16``, ``group``, ``outline``, ``epi`` (the
    epilogue builder), ``bases``, ``bcoords``, ``body`` and, with K split, ``chunk`` (the
    group's chunk, else None) and ``scratch`` (the partial sums)."""

    c: Contraction
    t: MmaTiles
    f16: bool
    group: FusionGroup
    outline: KernelOutline
    epi: loopnest.EpilogueBuilder
    bases: dict[str, Expr]
    bcoords: list[Expr]
    body: list[Stmt]
    chunk: Expr | None
    scratch: KernelArg

    def stores(self, m0: Expr, n0: Expr, wm: Expr, wn: Expr, g: Expr, tt: Expr) -> None:
        """Epilogue and guarded stores of every accumulator: staged through local memory and
        written along rows where :meth:`stage_rows` allows, else pairs of columns as float2
        where the output's layout allows, else scalars."""
        c, t = self.c, self.t
        self.out_args, values, obase = store_targets(self.group, self.outline, self.epi.given,
                                                     self.chunk, self.scratch,
                                                     self.bases["out"])
        self.counter = 0
        plan = self.stage_plan(values)
        if plan:
            self.staged(values, plan, obase, m0, n0, wm, wn, g, tt)
            return
        names = [a.name for a in self.out_args]
        pairs = (c.n.out == 1 and c.n.size % 2 == 0 and c.m.out % 2 == 0
                 and all(d.out % 2 == 0 for d in c.batch))
        for mi in range(t.frags_m):
            for (ni, half), pair in self.store_pairs():
                rr, cc, body, lanes = self.pair_values(values, m0, n0, wm, wn, g, tt, mi, ni,
                                                       half, pair)
                row, col = add(m0, rr), add(n0, cc)
                at = add(obase, add(mul(row, idx(c.m.out)), mul(col, idx(c.n.out))))
                row_ok = Bin("<", row, idx(c.m.size))
                if pairs:  # col even, N even: both columns inside or both outside
                    body += [VectorStore(names[o], div(at, 2), DType.f32, tuple(v))
                             for o, v in enumerate(lanes) if self.out_args[o].dtype
                             in PAIRED] + [
                        Store(names[o], add(at, idx(j)), v[j]) for o, v in
                        enumerate(lanes) if self.out_args[o].dtype not in PAIRED
                        for j in range(2)]
                    self.guarded(row, col, body)
                    continue
                for j in range(2):
                    cj = add(col, idx(j))
                    put = tuple(Store(names[o], add(at, idx(j * c.n.out)), v[j])
                                for o, v in enumerate(lanes))
                    body += [If(Bin("<", cj, idx(c.n.size)), put)] if c.n.size % t.bn \
                        else list(put)
                self.body += ([If(row_ok, tuple(body))] if c.m.size % t.bm else body)

    def pair_values(self, values: list, m0: Expr, n0: Expr, wm: Expr, wn: Expr, g: Expr,
                    tt: Expr, mi: int, ni: int, half: int, pair: list[tuple[int, int]]
                    ) -> tuple[Expr, Expr, list[Stmt], list[list[Expr]]]:
        """Tile-relative (row, col) of a pair of accumulators, the statements computing its
        outputs (the epilogue) and those outputs per output, two columns each."""
        rr, cc = self.coords_of(wm, wn, g, tt, mi, ni, half)
        row, col = add(m0, rr), add(n0, cc)
        plain = all(v is self.epi.given for v in values)
        em = loopnest.Emitter()
        em.counter = self.counter
        self.epi.em = em
        lanes: list[list[Expr]] = [[] for _ in values]
        for j, (pn, r) in enumerate(pair):
            self.epi.result = Var(f"acc_{mi}_{pn}_{r}")
            coords = self.coords(row, add(col, idx(j))) if not plain else ()
            for o, node in enumerate(values):
                lanes[o].append(self.epi.value(node, coords))
        self.counter = em.counter
        return rr, cc, list(em.scopes[0].body), lanes

    def coords_of(self, wm: Expr, wn: Expr, g: Expr, tt: Expr, mi: int, ni: int, half: int
                  ) -> tuple[Expr, Expr]:
        """Tile-relative (row, col) of the first of a pair of accumulators."""
        t = self.t
        return (c_coords_v(t, wm, wn, g, tt, mi, ni, half) if t.vector_loads and not self.f16
                else c_coords(wm, wn, g, tt, mi, ni, half))

    def guarded(self, row: Expr, col: Expr, body: list[Stmt]) -> None:
        """``body`` where (row, col) is inside the output (where tiles overhang it)."""
        c, t = self.c, self.t
        guard = all_of(([Bin("<", row, idx(c.m.size))] if c.m.size % t.bm else [])
                       + ([Bin("<", col, idx(c.n.size))] if c.n.size % t.bn else []))
        self.body += [If(guard, tuple(body))] if guard is not None else body

    def stage_buffers(self) -> list[tuple[str, int, int]]:
        """Local memory the staged stores may use, free once the K loop is done: (array,
        first word, 32-bit words) of each buffer, passes taking them in turn (two: one pass
        written while the last is read, one barrier a pass; one: two barriers a pass). The
        A and B tiles' stages."""
        t, per = self.t, 2 if self.f16 else 1
        return [("a_tile", 0, t.stages * t.a_size // per),
                ("b_tile", 0, t.stages * t.b_size // per)]

    def stage_plan(self, values: list) -> StagePlan | None:
        """How the stores are staged (None: not staged): one f32 or f16 output, its rows
        contiguous, f16 outputs of an f16 kernel two halves a word where rows have an even
        length (:attr:`StagePlan.packed`); each pass takes the most rows (fragment rows of
        every warp row first) that fit the smallest buffer, rows ``STAGE_PAD`` words longer
        than their data (a warp's writes then hit distinct banks), and reads and stores the
        widest vectors whose rows divide into them."""
        c, t = self.c, self.t
        if len(values) != 1 or c.n.out != 1 or self.out_args[0].dtype not in PAIRED:
            return None
        buffers = self.stage_buffers()
        if not buffers:
            return None
        room = min(words for _, _, words in buffers)

        def whole(n: int) -> bool:  # rows and batches are whole runs of n elements
            return not (c.n.size % n or c.m.out % n or any(d.out % n for d in c.batch))

        packed = self.f16 and self.out_args[0].dtype is DType.f16 and whole(2)
        per = 2 if packed else 1
        words = t.bn // per  # of a staged row
        forms = sorted(((ws, fr) for ws in _divisors(t.warps_m) for fr in _divisors(t.frags_m)),
                       key=lambda f: (f[0] * f[1], f[0]), reverse=True)
        for ws, fr in forms:
            rows = 16 * ws * fr
            if rows * (words + STAGE_PAD) > room:
                continue
            vec = next((v for v in ((4, 2, 1) if packed else (VEC, 1))
                        if whole(v * per) and rows * words % (v * t.threads) == 0), None)
            if vec:
                return StagePlan(packed, ws, fr, vec)
        return None

    def staged(self, values: list, plan: StagePlan, obase: Expr, m0: Expr, n0: Expr, wm: Expr,
               wn: Expr, g: Expr, tt: Expr) -> None:
        """Stores through local memory: every warp computes its outputs (the epilogue) into its
        accumulators; then a pass at a time (:class:`StagePlan`) the warps holding the
        pass's rows write them to a buffer (f16 outputs packed two halves a word:
        ``pack_half2``), and after a barrier every work-item copies row vectors of it to the
        output (``vstore4`` of words or floats, ``vstore_half4``), so a warp writes whole
        rows instead of 8 rows of 8 or 16 bytes."""
        c, t = self.c, self.t
        (out,) = self.out_args
        for mi in range(t.frags_m):  # every warp at once: the outputs replace the sums
            for (ni, half), pair in self.store_pairs():
                rr, cc, body, lanes = self.pair_values(values, m0, n0, wm, wn, g, tt, mi, ni,
                                                       half, pair)
                if lanes[0] != [Var(f"acc_{mi}_{pn}_{r}") for pn, r in pair]:
                    body += [Assign(f"acc_{mi}_{pn}_{r}", v)
                             for (pn, r), v in zip(pair, lanes[0], strict=True)]
                    self.guarded(add(m0, rr), add(n0, cc), body)
        per, vec, band = plan.per, plan.vec, 16 * plan.frag_rows
        words = t.bn // per
        stride = words + STAGE_PAD
        wrow = div(wm, t.warp_m)
        buffers = self.stage_buffers()
        self.body.append(Barrier())  # the K loop's reads are done
        passes = [(w0, mi0) for w0 in range(0, t.warps_m, plan.warp_rows)
                  for mi0 in range(0, t.frags_m, plan.frag_rows)]
        for p, (w0, mi0) in enumerate(passes):
            buf, first, _ = buffers[p % len(buffers)]
            if p and len(buffers) == 1:
                self.body.append(Barrier())  # the last pass's reads are done
            writes: list[Stmt] = []
            for mi in range(mi0, mi0 + plan.frag_rows):
                for (ni, half), pair in self.store_pairs():
                    rr, cc = self.coords_of(idx(0), wn, g, tt, mi, ni, half)  # rr: in the warp
                    row = add(mul(_less(wrow, w0), idx(band)), _less(rr, 16 * mi0))
                    at = add(idx(first), add(mul(row, idx(stride)), div(cc, per)))
                    v = [Var(f"acc_{mi}_{pn}_{r}") for pn, r in pair]
                    if plan.packed:
                        writes.append(Store(buf, at, Call("pack_half2", (v[0], v[1]))))
                        continue
                    writes += [Store(buf, add(at, idx(j)), Call("bitcast_i32", (x,))
                                     if self.f16 else x) for j, x in enumerate(v)]
            mine = ([] if plan.warp_rows == t.warps_m else
                    [Bin(">=", wrow, idx(w0)), Bin("<", wrow, idx(w0 + plan.warp_rows))])
            self.body += ([If(all_of(mine), tuple(writes))] if mine else writes)
            self.body.append(Barrier())
            per_row = words // vec
            for i in range(16 * plan.warp_rows * plan.frag_rows * per_row // t.threads):
                chunk = add(Var("tid"), idx(i * t.threads))
                r, q = div(chunk, per_row), mod(chunk, per_row)
                raw = Var(f"staged{p}_{i}")
                local = add(idx(first), add(mul(r, idx(stride)), mul(q, idx(vec))))
                self.body.append(Let(raw.name, DType.i32 if self.f16 else DType.f32,
                                     VectorLoad(buf, div(local, vec), vec) if vec > 1
                                     else Load(buf, local), lanes=vec))
                got = [Lane(raw, j) for j in range(vec)] if vec > 1 else [raw]
                row = add(m0, add(mul(add(div(r, band), idx(w0)), idx(t.warp_m)),
                                  add(idx(16 * mi0), mod(r, band))))
                col = add(n0, mul(q, idx(vec * per)))
                at = add(obase, add(mul(row, idx(c.m.out)), col))
                if plan.packed:  # words of two halves
                    store: Stmt = VectorStore(out.name, div(at, vec * 2), DType.i32,
                                              tuple(got))
                else:
                    lanes_v = [Call("bitcast_f32", (x,)) for x in got] if self.f16 else got
                    store = (VectorStore(out.name, div(at, vec), DType.f32, tuple(lanes_v))
                             if vec > 1 else Store(out.name, at, lanes_v[0]))
                self.guarded(row, col, [store])

    def store_pairs(self) -> list[tuple[tuple[int, int], list[tuple[int, int]]]]:
        """((ni, r) of the first, [(ni, r) of both]) of each pair of accumulators of a fragment
        row at adjacent columns: c0,c1 and c2,c3 of a fragment; under the f32 vector scheme's
        N permutation the same register of fragments ni and ni + 1."""
        t = self.t
        if t.vector_loads and not self.f16:
            return [((ni, r), [(ni, r), (ni + 1, r)]) for ni in range(0, t.frags_n, 2)
                    for r in range(4)]
        return [((ni, half), [(ni, half), (ni, half + 1)]) for ni in range(t.frags_n)
                for half in (0, 2)]

    def coords(self, row: Expr, col: Expr) -> tuple[Expr, ...]:
        """Output coordinates of the element at flattened (row, col)."""
        return output_coords(self.c, self.bcoords, row, col)
