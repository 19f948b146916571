"""Epilogue and stores of the tensor-core kernels' accumulators (a mixin of
:class:`accy.kernels.mma._Builder`): each pair of accumulators at adjacent columns of a row goes
through the group's fused epilogue and out as a float2 (f16 outputs: ``vstore_half2``) where
the output's layout allows, else
as guarded scalars. Pairs are c0,c1 and c2,c3 of a fragment (``c_coords``), or under the f32
vector scheme's N permutation the same register of fragments ni and ni + 1 (``c_coords_v``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accy.ir.types import DType
from accy.kernels import loopnest
from accy.kernels.contraction_plan import Contraction, output_coords, stored_value
from accy.kernels.ir import (
    Bin,
    Expr,
    If,
    KernelArg,
    Stmt,
    Store,
    Var,
    VectorStore,
    add,
    all_of,
    div,
    idx,
    mul,
)
from accy.kernels.mma_layout import c_coords_v
from accy.kernels.mma_plan import c_coords
from accy.plans import FusionGroup, KernelOutline

if TYPE_CHECKING:
    from accy.kernels.mma_plan import MmaTiles

PAIRED = (DType.f32, DType.f16)  # outputs stored a pair at a time (float2, vstore_half2)


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
        """Epilogue and guarded stores of every accumulator; pairs of columns as float2
        where the output's layout allows."""
        c, t = self.c, self.t
        obase = self.bases["out"]
        if self.chunk is None:
            self.out_args = [KernelArg(f"out{i}", n.type.dtype, True, slot) for i, (n, slot)
                             in enumerate(zip(self.group.outputs, self.outline.output_slots,
                                              strict=True))]
            values = [stored_value(o) for o in self.group.outputs]
        else:  # this chunk's partial sums, laid out as the einsum, after the other chunks'
            size = self.epi.given.type.size
            self.out_args, values = [self.scratch], [self.epi.given]
            obase = add(mul(self.chunk, idx(size)), obase)
        names = [a.name for a in self.out_args]
        plain = all(v is self.epi.given for v in values)
        pairs = (c.n.out == 1 and c.n.size % 2 == 0 and c.m.out % 2 == 0
                 and all(d.out % 2 == 0 for d in c.batch))
        counter = 0
        for mi in range(t.frags_m):
            for (ni, half), pair in self.store_pairs():
                rr, cc = (c_coords_v(t, wm, wn, g, tt, mi, ni, half)
                          if t.vector_loads and not self.f16
                          else c_coords(wm, wn, g, tt, mi, ni, half))
                row, col = add(m0, rr), add(n0, cc)
                em = loopnest.Emitter()
                em.counter = counter
                self.epi.em = em
                lanes: list[list[Expr]] = [[] for _ in self.group.outputs]
                for j, (pn, r) in enumerate(pair):
                    cr = add(col, idx(j))
                    self.epi.result = Var(f"acc_{mi}_{pn}_{r}")
                    coords = self.coords(row, cr) if not plain else ()
                    for o, node in enumerate(values):
                        lanes[o].append(self.epi.value(node, coords))
                counter = em.counter
                body: list[Stmt] = list(em.scopes[0].body)
                at = add(obase, add(mul(row, idx(c.m.out)), mul(col, idx(c.n.out))))
                row_ok = Bin("<", row, idx(c.m.size))
                if pairs:  # col even, N even: both columns inside or both outside
                    body += [VectorStore(names[o], div(at, 2), DType.f32, tuple(v))
                             for o, v in enumerate(lanes) if self.out_args[o].dtype
                             in PAIRED] + [
                        Store(names[o], add(at, idx(j)), v[j]) for o, v in
                        enumerate(lanes) if self.out_args[o].dtype not in PAIRED
                        for j in range(2)]
                    guard = all_of(([row_ok] if c.m.size % t.bm else [])
                                 + ([Bin("<", col, idx(c.n.size))]
                                    if c.n.size % t.bn else []))
                    self.body += [If(guard, tuple(body))] if guard is not None else body
                    continue
                for j in range(2):
                    cj = add(col, idx(j))
                    put = tuple(Store(names[o], add(at, idx(j * c.n.out)), v[j])
                                for o, v in enumerate(lanes))
                    body += [If(Bin("<", cj, idx(c.n.size)), put)] if c.n.size % t.bn \
                        else list(put)
                self.body += ([If(row_ok, tuple(body))] if c.m.size % t.bm else body)

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
