"""wgmma-f16 with B copied by TMA: one ``cp.async.bulk.tensor`` a box instead of a ``cp.async``
a work-item a step (:mod:`accy.kernels.tma`), and no work-group barrier in the K loop.

Where the target's probe ran a TMA copy (``TMA_COPY`` in ``TargetProfile.tensor_cores``) and
B is stored along N (``x @ W``) with K a multiple of 8 (:func:`geometry`), ``wgmma-f16``'s kernel
(:class:`accy.kernels.wgmma._Wgmma`) takes B through TMA. Each stage has two ``mbarrier``:
*full*, on which work-item 0 arrives expecting the step's box bytes before issuing the boxes
(the copies complete it), and *empty*, on which each warp's lane 0 arrives once the warp's
wgmma of the step read the stage (after its wait). Work-item 0 waits on a stage's empty barrier
before refilling it, every work-item waits on the full one before its wgmma: the stages are
handed back by arrivals, not by a barrier a step (measured 1.1-1.3x the barrier form at
4096^3 and 8192x8192x1024, papers/kernels.md "Nineteenth session"). Tiles are walked in bands
of :data:`SWIZZLE` tile rows (the cp.async kernel's, row-major). The boxes land 128-byte
swizzled, the layout wgmma's descriptors name with layout type 1. Everything else is the
``cp.async`` kernel's: A's fragments from global memory one step ahead, four stages, the
stores (which begin with a barrier). Boxes past N or K are zero-filled by the copy (no wrapped
columns, no K tail).

The K order: A's 16-byte loads put K ``8t + 4i + 2h + e`` at fragment position
``16 i + 8 h + 2 t + e`` (:func:`accy.kernels.wgmma.k_row`), so an atom (8 rows of 64 halves,
1024 bytes) holds wgmma ``i``'s K half ``h`` as K rows ``8t + 4i + 2h + e`` in row ``2t + e``.
Unbatched with K a multiple of ``BK``, the tensor map views B (K x N, N contiguous) as
``(N, e, t, a, K / 32)`` with strides of 1, 8, 2 and 32 rows, so one box ``(64, 2, 4, 4, 1)``
is a 64-column block's four atoms ``a = 2i + h``; otherwise as ``(N, 8, K / 8[, batch])``, a
box ``(64, 2, 4[, 1])`` at ``(n, 2a, 4 kt)`` one atom. A stage is the tile's ``BN / 64`` column
blocks (:data:`BLOCK` bytes apart: the descriptor's leading offset) of four atoms (1024 bytes apart:
its stride offset); each wgmma of the step starts two atoms on.
"""

from __future__ import annotations

import dataclasses

from accy.ir.types import DType
from accy.kernels import tma
from accy.kernels.contraction_plan import Contraction
from accy.kernels.ir import (
    INDEX,
    Barrier,
    Bin,
    Cast,
    Expr,
    If,
    Kernel,
    KernelArg,
    Lit,
    LocalArray,
    Stmt,
    Var,
    add,
    div,
    idx,
    mod,
    mul,
)
from accy.kernels.mma_plan import along_k
from accy.kernels.wgmma import BK, _Wgmma
from accy.kernels.wgmma_ptx import descriptor_bits, rstep

ATOM = 1024  # bytes of an 8-row swizzle atom: 8 K rows of 64 halves
BLOCK = 4 * ATOM  # bytes of a stage's 64-column block (BK = 32 rows)
BOX = (64, 2, 4)  # N, K within 8, K / 8
MAP_ARG = "tmaps0"
# tiles walked in bands of SWIZZLE tile rows (the cp.async kernel's row-major order measured
# 1.05x slower over 16 shapes, up to 1.17x at 4096x4096x1024; papers/kernels.md)
SWIZZLE = 4


def i32(v: int) -> Lit:
    return Lit(v, DType.i32)


@dataclasses.dataclass(frozen=True)
class Geometry:
    """B's tensor map: ``dims`` (innermost first), ``strides`` (bytes, of the dims after the
    first), the ``box``, the batch dimensions (indexes into ``Contraction.batch``) it spans
    and its data type (:mod:`accy.kernels.tma`'s codes); ``blocks``: a box is a stage's
    64-column block (four atoms), else one atom."""

    dims: tuple[int, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]
    batch: tuple[int, ...]
    dtype: int = tma.F16

    @property
    def blocks(self) -> bool:
        return len(self.box) == 5 and not self.batch



def geometry(c: Contraction) -> Geometry | str:
    """B's tensor map, or why B cannot be copied by TMA. Unbatched with K a multiple of
    ``BK``: K = e + 8t + 2a + 32 kt, dims (N, e, t, a, kt), a box (64, 2, 4, 4, 1) a block's
    four atoms (one copy a block: faster than one an atom at 4096^3, papers/kernels.md);
    else (N, K % 8, K / 8[, batch]) a box (64, 2, 4[, 1]) an atom."""
    if along_k(c, "y") or c.n.y != 1:
        return "TMA copies B stored along N (x @ W)"
    if c.k.size % 8 or (2 * c.k.y) % 16:
        return f"K = {c.k.size} or B's row stride {c.k.y} is not a multiple of 8"
    batch = tuple(i for i, d in enumerate(c.batch) if d.y)
    rowb = 2 * c.k.y
    if not batch and c.k.size % BK == 0:
        return Geometry((c.n.size, 2, 4, 4, c.k.size // BK),
                        (rowb, 8 * rowb, 2 * rowb, BK * rowb), (64, 2, 4, 4, 1), ())
    if len(batch) > 2 or any((2 * c.batch[i].y) % 16 for i in batch):
        return "B's batch dimensions do not fit a tensor map (at most two, 16-byte strides)"
    return Geometry((c.n.size, 8, c.k.size // 8, *(c.batch[i].size for i in batch)),
                    (rowb, 8 * rowb, *(2 * c.batch[i].y for i in batch)),
                    (*BOX, *([1] * len(batch))), batch)


def template(c: Contraction) -> tuple[int, ...] | str:
    """The words of B's tensor map template, or why there are none."""
    g = geometry(c)
    return g if isinstance(g, str) else tma.template(tma.F16, g.dims, g.strides, g.box)


class _WgmmaTma(_Wgmma):
    """The kernel; see the module docstring."""

    by_tma = True

    def build(self) -> Kernel:
        self.words, g = template(self.c), geometry(self.c)
        if isinstance(self.words, str) or isinstance(g, str):
            raise ValueError(f"wgmma-f16 cannot copy B by TMA: {self.words}")
        self.g = g
        return super().build()

    def b_copies(self, n0: Expr) -> list[tuple[Expr, Expr, Expr]]:
        """Sets up the copies instead: local memory 1024-byte aligned (``b_base``, a local
        address; ``b_tile`` gets an atom more), the stages' barriers, and this work-group's
        tensor map (one work-item writes it)."""
        self.trans, self.n0 = 1, n0
        tile = next(s for s in self.body if isinstance(s, LocalArray) and s.name == "b_tile")
        self.body[self.body.index(tile)] = LocalArray(
            "b_tile", tile.dtype, tile.size + ATOM // 4, 128)
        self.body.append(LocalArray(tma.BARRIERS, DType.i32, 4 * self.stages(), 8))
        base = Cast(DType.i32, Cast(INDEX, Var("b_tile")))
        self.let("b_base", Bin("&", Bin("+", base, i32(ATOM - 1)), i32(-ATOM)), DType.i32)
        maps = self.tensor_maps()
        self.map = self.let("tma_map", Bin("+", Cast(INDEX, Var(MAP_ARG)),
                                           mul(Var("grp"), idx(tma.region(len(maps))))))
        init = [tma.write_map(words, self.map, at // tma.MAP_BYTES, len(maps),
                              Cast(INDEX, Var(self.arg[side]))) for words, side, at in maps]
        warps = self.t.threads // 32
        init += [tma.init(self.bar(idx(s), empty), count)
                 for s in range(self.stages()) for empty, count in ((0, 1), (1, warps))]
        self.body += [If(Bin("==", Var("tid"), idx(0)), tuple(init)), Barrier()]
        return []

    def bar(self, stage: Expr, empty: int = 0) -> Expr:
        """The local address of ``stage``'s mbarrier: full (its copies landed) or ``empty``
        (every warp's wgmma read it)."""
        return tma.barrier(stage, self.stages(), empty)

    def tensor_maps(self) -> list[tuple[tuple[int, ...], str, int]]:
        """(template words, operand, byte offset) of each of a work-group's tensor maps."""
        return [(self.words, "y", 0)]

    def copy(self, step: Expr, stage: Expr, tail: bool) -> list[Stmt]:
        """Step ``step``'s boxes into ``stage``, issued by work-item 0 once every warp read
        the stage's last step (``tail`` needs nothing: rows past K are zero-filled)."""
        g = self.g
        out = self.refill(step, stage, self.t.bn * BK * 2)
        for nb in range(self.t.bn // 64):
            n = add(self.n0, idx(64 * nb))
            for atom in (None,) if g.blocks else range(4):  # wgmma atom // 2, K half atom % 2
                at = nb * BLOCK + (atom or 0) * ATOM
                dst = (Bin("+", self.stage_address(stage), i32(at)) if at
                       else self.stage_address(stage))
                kstep = add(div(self.k0, BK), step)  # (chunks: multiples of BK)
                coords = ([n, idx(0), idx(0), idx(0), kstep] if atom is None else
                          [n, idx(2 * atom), mul(kstep, idx(BK // 8))])
                out.append(self.box(g, dst, 0, coords, stage))
        return [If(Bin("==", Var("tid"), idx(0)), tuple(out))]

    def refill(self, step: Expr, stage: Expr, nbytes: int) -> list[Stmt]:
        """Work-item 0's wait for every warp to have read ``stage`` (where step ``step`` is
        not its first use), then its arrival expecting the step's ``nbytes``."""
        return tma.refill(step, stage, self.stages(), nbytes)

    def box(self, g: Geometry, dst: Expr, at: int, coords: list[Expr], stage: Expr,
            bcoords: list[Expr] | None = None) -> Stmt:
        """The copy of the box of map ``g`` (``at`` bytes into the work-group's maps) at
        ``coords`` (and batch ``bcoords``, default the tile's) to local address ``dst``,
        completing on ``stage``'s full barrier."""
        batch = self.bcoords if bcoords is None else bcoords
        return tma.copy(g.dims, g.strides, g.box, g.dtype, dst, tma.map_at(self.map, at),
                        [*coords, *(batch[i] for i in g.batch)], self.bar(stage))

    def commit(self) -> list[Stmt]:
        return []

    def arrived(self, stage: Var, kt: Expr, n: int) -> list[Stmt]:
        """Wait on the stage's full barrier for its phase of step ``kt`` (no work-group
        barrier: the stages are given back by :meth:`released`)."""
        return [tma.wait(self.bar(stage), mod(div(kt, self.stages()), 2))]

    def released(self, stage: Var) -> list[Stmt]:
        """Each warp's arrival on the stage's empty barrier once its wgmma read it."""
        return [If(Bin("==", Var("lane"), idx(0)), (tma.arrive(self.bar(stage, 1)),))]

    def stage_address(self, stage: Expr) -> Expr:
        """In the 1024-byte aligned stages (``b_base``)."""
        return Bin("+", Var("b_base"), Cast(DType.i32, mul(stage, idx(self.t.bn * BK * 2))))

    def descriptor(self) -> int:
        """The swizzled layout: column blocks :data:`BLOCK` bytes apart, atoms :data:`ATOM`."""
        return descriptor_bits(BLOCK, ATOM, True)

    def issue(self, bdesc: Var) -> tuple[str, tuple[tuple[str, Expr], ...]]:
        """The cp.async kernel's step, each wgmma's descriptor two atoms on."""
        return (rstep(self.t.bn, BK // 16, 1, 2 * ATOM // 16),
                (("l", bdesc), ("r", i32(1))))

    def kernel(self, groups: int) -> Kernel:
        """The cp.async kernel's, with the work-groups' tensor maps as scratch."""
        k = super().kernel(groups)  # (a work-group's maps: each K chunk's groups too)
        maps = KernelArg(MAP_ARG, DType.i64, True, -1,
                         self.chunks * groups * tma.region(len(self.tensor_maps())) // 8)
        return dataclasses.replace(k, args=(*k.args, maps))
