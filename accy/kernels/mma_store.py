"""Epilogue and stores of the tensor-core kernels' accumulators (a mixin of
:class:`accy.kernels.mma._Builder`). One f32 or f16 output with contiguous rows is staged: every
warp applies the epilogue to its accumulators, then a band of tile rows at a time goes through
local memory (the A tile, free after the K loop) and out as row vectors. Otherwise each pair of
accumulators at adjacent columns of a row goes through the group's fused epilogue and out as a
float2 (f16 outputs: ``vstore_half2``) where the output's layout allows, else as guarded
scalars. Pairs are c0,c1 and c2,c3 of a fragment (``c_coords``), or under the f32
vector scheme's N permutation the same register of fragments ni and ni + 1 (``c_coords_v``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accy.ir.types import DType
from accy.kernels import loopnest
from accy.kernels.contraction import store_targets
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
from accy.plans import FusionGroup, KernelOutline

if TYPE_CHECKING:
    from accy.kernels.mma_plan import MmaTiles

PAIRED = (DType.f32, DType.f16)  # outputs stored a pair at a time (float2, vstore_half2)
VEC = 4  # elements per staged store (float4, vstore_half4)
STAGE_PAD = 4  # words added to each staged row: a warp's pairs in distinct banks


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
        rows = self.stage_rows(values)
        if rows:
            self.staged(values, rows, obase, m0, n0, wm, wn, g, tt)
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

    def stage_rows(self, values: list) -> int:
        """Tile rows per pass of the staged stores (0: not staged): one f32 or f16 output, its
        rows contiguous, and the pass's rows (a power of two, 16 to a warp's rows, padded by
        STAGE_PAD) fitting the A tile's local memory, free once the K loop is done."""
        c, t = self.c, self.t
        if len(values) != 1 or c.n.out != 1 or self.out_args[0].dtype not in PAIRED:
            return 0
        room = self.stage_room()
        rows = t.warp_m
        while rows >= 16 and rows * (t.bn + STAGE_PAD) > room:
            rows //= 2
        return rows if rows >= 16 and rows * t.bn // VEC % t.threads == 0 else 0

    def stage_room(self) -> int:
        """32-bit words of local memory the staged stores may use: the A tile's stages."""
        return self.t.stages * self.t.a_size // (2 if self.f16 else 1)

    def stage_vector(self) -> int:
        """Elements per staged store: 4 where rows are whole 4-element vectors (N, the row
        stride and batch strides multiples of 4), else 1 (still a warp's 32 consecutive
        elements per store)."""
        c = self.c
        aligned = not (c.n.size % VEC or c.m.out % VEC or any(d.out % VEC for d in c.batch))
        return VEC if aligned else 1

    def staged(self, values: list, rows: int, obase: Expr, m0: Expr, n0: Expr, wm: Expr,
               wn: Expr, g: Expr, tt: Expr) -> None:
        """Stores through local memory: every warp computes its outputs (the epilogue) into its
        accumulators, then, ``rows`` tile rows a pass, the warps holding them write them
        to the A tile, rows ``bn + STAGE_PAD`` words apart (a warp's pairs then hit
        distinct banks); after a barrier every work-item copies 4-element row vectors to
        the output (``vstore4``, ``vstore_half4``; single elements where rows are not whole
        vectors), so a warp writes whole rows instead of 8 rows of 8 or 16 bytes."""
        c, t = self.c, self.t
        (out,) = self.out_args
        stride = t.bn + STAGE_PAD
        vec = self.stage_vector()
        per_row = t.bn // vec
        for mi in range(t.frags_m):  # every warp at once: the outputs replace the sums
            for (ni, half), pair in self.store_pairs():
                rr, cc, body, lanes = self.pair_values(values, m0, n0, wm, wn, g, tt, mi, ni,
                                                       half, pair)
                if lanes[0] != [Var(f"acc_{mi}_{pn}_{r}") for pn, r in pair]:
                    body += [Assign(f"acc_{mi}_{pn}_{r}", v)
                             for (pn, r), v in zip(pair, lanes[0], strict=True)]
                    self.guarded(add(m0, rr), add(n0, cc), body)
        for band in range(t.bm // rows):
            first = band * rows  # tile rows first .. first + rows - 1: warp row, fragments
            warp_row, mi0 = divmod(first, t.warp_m)
            writes: list[Stmt] = []
            for mi in range(mi0 // 16, (mi0 + rows) // 16):
                for (ni, half), pair in self.store_pairs():
                    rr, cc = self.coords_of(wm, wn, g, tt, mi, ni, half)
                    at = add(mul(Bin("-", rr, idx(first)), idx(stride)), cc)
                    for j, (pn, r) in enumerate(pair):
                        v: Expr = Var(f"acc_{mi}_{pn}_{r}")
                        writes.append(Store("a_tile", add(at, idx(j)), Call(
                            "bitcast_i32", (v,)) if self.f16 else v))
            self.body += [Barrier(),  # the K loop's (or the last pass's) reads are done
                          If(Bin("==", wm, idx(warp_row * t.warp_m)), tuple(writes)),
                          Barrier()]
            for i in range(rows * per_row // t.threads):
                chunk = add(Var("tid"), idx(i * t.threads))
                r, q = div(chunk, per_row), mod(chunk, per_row)
                raw = Var(f"staged{band}_{i}")
                local = add(mul(r, idx(stride)), mul(q, idx(vec)))
                self.body.append(Let(raw.name, DType.i32 if self.f16 else DType.f32,
                                     VectorLoad("a_tile", div(local, vec), vec) if vec > 1
                                     else Load("a_tile", local), lanes=vec))
                got = [Lane(raw, j) for j in range(vec)] if vec > 1 else [raw]
                lanes_v = [Call("bitcast_f32", (x,)) for x in got] if self.f16 else got
                row = add(m0, add(idx(first), r))
                col = add(n0, mul(q, idx(vec)))
                at = add(obase, add(mul(row, idx(c.m.out)), col))
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
