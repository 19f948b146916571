"""Fragment loads of the tensor-core kernels under the ``vector`` scheme (the layout and its
formulas: :mod:`accy.kernels.mma_layout`): a mixin of :class:`accy.kernels.mma._Builder`.

f32: per K step each lane loads its A rows' ``2 S`` K-permuted words in float4s (float2 for K
steps of 8) and its B K rows' ``F`` N-permuted words in float4s, then takes each fragment
register from a vector lane (rounded to TF32 where the policy says). f16: one ``ldmatrix.x4``
per A fragment and one ``ldmatrix.x4.trans`` per pair of B fragments per sub-step (a plain
``ldmatrix.x4`` from a B tile along K, ``MmaTiles.b_k_major``). Per-lane bases (swizzle
included) are computed once, before the K loop; inside it every address is a base, the stage
offset and a constant.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from accy.ir.types import DType
from accy.kernels.ir import (
    INDEX,
    Bin,
    Cast,
    Expr,
    InlineAsm,
    Lane,
    Let,
    Lit,
    Stmt,
    Var,
    VectorLoad,
    add,
    div,
    idx,
    mul,
)
from accy.kernels.mma_layout import (
    LDMATRIX,
    LDMATRIX_T,
    a_row_offset,
    b16_row_offset,
    b_row_offset,
    f16_a_base,
    f16_b_base,
    f16_bk_base,
    f32_a_base,
    f32_a_register,
    f32_b_base,
)

if TYPE_CHECKING:
    from accy.kernels.mma_plan import MmaTiles


class VectorLoads:
    """Uses the builder's ``t`` (tiles), ``let``, ``operand`` (a fragment register from a
    value) and ``mmas`` (one sub-step's mma.sync)."""

    t: MmaTiles
    a_bases: list[Var]
    b_bases: list[Var]

    def a_width(self) -> int:
        return min(2 * (self.t.bk // 8), 4)

    def vector_bases(self, wm: Expr, wn: Expr, g: Expr, tt: Expr, lane: Expr) -> None:
        """The per-lane bases (in vectors for f32, words for f16), before the K loop."""
        t = self.t
        if t.f16:  # halves -> words (each base is a whole 16-byte chunk)
            self.a_bases = [self.let(f"a_lb{kk}", div(f16_a_base(t, wm, lane, kk), 2))
                            for kk in range(t.bk // 16)]
            self.b_bases = ([self.let(f"b_lb{kk}", div(f16_bk_base(t, wn, lane, kk), 2))
                             for kk in range(t.bk // 16)] if t.b_k_major else
                            [self.let(f"b_lb{p}", div(f16_b_base(t, wn, lane, p), 2))
                             for p in range(t.frags_n // 2)])
            return
        wa = self.a_width()
        self.a_bases = [self.let(f"a_vb{v}", div(f32_a_base(t, wm, g, tt, v), wa))
                        for v in range(2 * (t.bk // 8) // wa)]
        self.b_bases = [self.let(f"b_vb{v}", div(f32_b_base(t, wn, g, tt, v), 4))
                        for v in range(t.frags_n // 4)]

    def vector_compute(self, a_off: Expr, b_off: Expr) -> list[Stmt]:
        """One K step's loads and mma.sync (``a_off`` / ``b_off``: the stage, in elements
        for f32, words for f16)."""
        if self.t.f16:
            return self.ldmatrix_compute(a_off, b_off)
        t, wa = self.t, self.a_width()
        out: list[Stmt] = [Let("a_offv", INDEX, div(a_off, wa)),
                           Let("b_offv", INDEX, div(b_off, 4))]
        regs: dict[str, Expr] = {}
        for mi, h, v in itertools.product(range(t.frags_m), range(2), range(len(self.a_bases))):
            at = add(Var("a_offv"), add(self.a_bases[v], idx(a_row_offset(t, mi, h) // wa)))
            lanes = self.load("a_tile", at, wa, f"av{mi}_{h}_{v}", out)
            for e in range(wa):
                kk, hk = f32_a_register(t, v, e)
                regs[f"a{kk}_{mi}_{h + 2 * hk}"] = lanes[e]
        for kk in range(t.bk // 8):  # B per sub-step: its vectors die with the sub-step
            for hk, v in itertools.product(range(2), range(len(self.b_bases))):
                at = add(Var("b_offv"), add(self.b_bases[v], idx(b_row_offset(t, kk, hk) // 4)))
                lanes = self.load("b_tile", at, 4, f"bv{kk}_{hk}_{v}", out)
                for e in range(4):
                    regs[f"b{kk}_{4 * v + e}_{hk}"] = lanes[e]
            for mi, r in itertools.product(range(t.frags_m), range(4)):
                out += self.operand("a", f"a{kk}_{mi}_{r}", regs[f"a{kk}_{mi}_{r}"])
            for ni, r in itertools.product(range(t.frags_n), range(2)):
                out += self.operand("b", f"b{kk}_{ni}_{r}", regs[f"b{kk}_{ni}_{r}"])
            out += self.mmas(kk)
        return out

    def load(self, buf: str, at: Expr, lanes: int, name: str, out: list[Stmt]) -> list[Expr]:
        """``lanes`` f32 of local ``buf`` from vector ``at`` (in vectors), appended to
        ``out``: a vload, or under ``ptx`` loads one ``ld.shared.v{lanes}.f32``."""
        if self.t.loads != "ptx":
            out.append(Let(name, DType.f32, VectorLoad(buf, at, lanes), lanes=lanes))
            return [Lane(Var(name), e) for e in range(lanes)]
        names = [f"{name}_{e}" for e in range(lanes)]
        regs = ",".join(f"%{e}" for e in range(lanes))
        address = Cast(DType.i32, Cast(INDEX, Bin("+", Var(buf), mul(at, idx(lanes)))))
        out += [Let(n, DType.f32, Lit(0.0, DType.f32), True) for n in names]
        out.append(InlineAsm(f"ld.shared.v{lanes}.f32 {{{regs}}}, [%{lanes}];",
                             tuple(("=f", n) for n in names), (("r", address),), True))
        return [Var(n) for n in names]

    def ldmatrix_compute(self, a_off: Expr, b_off: Expr) -> list[Stmt]:
        t = self.t
        out: list[Stmt] = []
        for kk in range(t.bk // 16):
            for mi in range(t.frags_m):
                names = [f"a{kk}_{mi}_{r}" for r in range(4)]
                at = add(a_off, add(self.a_bases[kk], idx(a_row_offset(t, mi, 0) // 2)))
                out += self.ldmatrix(LDMATRIX, "a_tile", at, names)
            for p in range(t.frags_n // 2):
                names = [f"b{kk}_{ni}_{r}" for ni in (2 * p, 2 * p + 1) for r in range(2)]
                if t.b_k_major:  # rows n: fragments 2p, 2p + 1 are 16 p rows down
                    at = add(b_off, add(self.b_bases[kk], idx(16 * p * t.bk // 2)))
                    out += self.ldmatrix(LDMATRIX, "b_tile", at, names)
                    continue
                at = add(b_off, add(self.b_bases[p], idx(b16_row_offset(t, kk) // 2)))
                out += self.ldmatrix(LDMATRIX_T, "b_tile", at, names)
            out += self.mmas(kk)
        return out

    @staticmethod
    def ldmatrix(form: str, buf: str, word: Expr, names: list[str]) -> list[Stmt]:
        """``ldmatrix`` into four fresh i32 registers from the shared-window address of
        ``buf[word]``."""
        address = Cast(DType.i32, Cast(INDEX, Bin("+", Var(buf), word)))
        return [Let(n, DType.i32, Lit(0, DType.i32), True) for n in names] + [
            InlineAsm(form, tuple(("=r", n) for n in names), (("r", address),), True)]
