"""wgmma-f16 with both operands in local memory, both copied by TMA, in deep stages.

NVIDIA's OpenCL reports 48 KiB of local memory a work-group, and refuses ``__local`` arguments
past it, but builds static ``__local`` arrays up to the multiprocessor's opt-in limit (227 KiB
on compute capability 9.0; ``TargetProfile.static_local_bytes``, found by a probe). That room
holds what CUDA's Hopper GEMMs keep there: A's tiles as well as B's. This kernel is
``wgmma-f16``'s TMA kernel (:class:`accy.kernels.wgmma_tma._WgmmaTma`: the stages' full and
empty ``mbarrier``, no work-group barrier in the K loop, the tensor maps written by the kernel
from driver-encoded templates, the bands of tile rows, the stores) with A no longer in
registers: each stage holds A's ``BM x 64`` box (K-major rows of 128 bytes, 128-byte swizzled)
and B's ``64 x BN`` (B along N: 64-column blocks, MN-major; B along K: one K-major box like
A's), all in K's natural order, and each K step is four ``wgmma m64nBNk16`` reading both
through descriptors (marker ``SSTEP`` of :mod:`accy.kernels.wgmma_ptx`). Rows, columns and K
past the operands are zero-filled by the copies: no wrapped rows, no K tail.

Taken by ``wgmma.build`` where :func:`unusable` finds nothing against it, in the form
``wgmma.plan_for`` scores best of :data:`FORMS`.
"""

from __future__ import annotations

import dataclasses

from accy.ir.types import DType
from accy.kernels import tma
from accy.kernels.contraction_plan import Contraction
from accy.kernels.ir import INDEX, Bin, Cast, Expr, If, Lit, Stmt, Var, add, div, idx, mul
from accy.kernels.mma_plan import MmaTiles, along_k
from accy.kernels.wgmma import _Wgmma, tiles
from accy.kernels.wgmma_ptx import descriptor_bits, sstep
from accy.kernels.wgmma_tma import ATOM, Geometry, _WgmmaTma, i32
from accy.target import TMA_COPY, TargetProfile

BK = 64  # K a step: one 128-byte swizzled row of halves
ROW = 2 * BK  # bytes of a stage row (A's and a K-major B's along K, an MN-major B's along N)
WG_ROWS = 64 * ROW  # bytes of a warpgroup's 64 rows of A in a stage
BLOCK = BK * ROW  # bytes of a 64-column block of an MN-major B in a stage (BK rows)
K_MAJOR = descriptor_bits(16, 8 * ROW, True)  # 8-row atoms 1 KiB apart (A; B along K)
MN_MAJOR = descriptor_bits(BLOCK, ATOM, True)  # blocks BLOCK apart, atoms ATOM (B along N)
# Selection (wgmma.plan): the tilings this kernel builds, (warpgroups, columns, stages), and
# their rates on wgmma.TMA_RATES's scale for K up to LONG_K and past it, from their times
# against the B-by-TMA kernel's and each other's (papers/kernels.md, "Twentieth session").
# 128x128 tiles in three stages leave room for two work-groups a compute unit
# (:func:`resident`), which hides one's stores behind the other's products: faster than four
# stages everywhere, and than 128x256 tiles up to K 1024. 256x128 tiles measured slower than
# 128x256 ones of the same count everywhere and are not tried.
FORMS = ((2, 256, 4), (2, 128, 3))
RATES = {(2, 256, 4): (2.65, 2.65), (2, 128, 3): (2.75, 2.5)}
LONG_K = 1024
# K of at least MIN_K: four stages of 64 fill with K 256 and the B-by-TMA kernel (K steps of
# 32) was faster there; from K 512 this one was
MIN_K = 512
ENABLED = True  # off: wgmma-f16 keeps A in registers everywhere (ablations, sweeps)


def stage_bytes(t: MmaTiles) -> int:
    return (t.bm + t.bn) * ROW


def local_bytes(t: MmaTiles) -> int:
    """The local memory the kernel declares: its stages, an atom to align them, barriers."""
    return t.stages * stage_bytes(t) + ATOM + 16 * t.stages


def form_tiles(form: tuple[int, int, int]) -> MmaTiles:
    """wgmma-f16's tiles of ``form`` (warpgroups, columns, stages)."""
    return dataclasses.replace(tiles(form[0], form[1]), stages=form[2])


def rate(form: tuple[int, int, int], k: int) -> float:
    """``form``'s rate for a contraction of ``k``."""
    return RATES[form][k > LONG_K]


def resident(t: MmaTiles, target: TargetProfile) -> int:
    """Work-groups of tiles ``t`` a compute unit holds by local memory (its static local
    memory, the most one work-group may declare, taken as the unit's)."""
    return max(1, target.group_local_bytes // local_bytes(t))


def geometries(c: Contraction, bm: int, bn: int) -> tuple[Geometry, Geometry] | str:
    """A's and B's tensor maps for ``bm x bn`` tiles, or why there are none: A (M x K, K
    contiguous) as (K, M[, batch]) in boxes (64, bm); B along N (K x N) as (N, K[, batch])
    in boxes (64, 64) a 64-column block, B along K (N x K) as (K, N[, batch]) in (64, bn)."""
    kmajor = along_k(c, "y")
    if not along_k(c, "x") or c.k.x != 1:
        return "wgmma_ss copies A stored along K with unit stride"
    if (c.k.y if kmajor else c.n.y) != 1:
        return "wgmma_ss copies B stored along K or N with unit stride"
    maps = []
    for side, outer, inner, box in (("x", c.m, c.k, (BK, bm)),
                                    ("y", *((c.n, c.k, (BK, bn)) if kmajor else
                                            (c.k, c.n, (64, BK))))):
        batch = tuple(i for i, d in enumerate(c.batch) if getattr(d, side))
        strides = (2 * getattr(outer, side), *(2 * getattr(c.batch[i], side) for i in batch))
        if len(batch) > 3 or any(s % 16 for s in strides):
            return (f"{'AB'[side == 'y']}'s strides {strides} (bytes) are not multiples of 16 "
                    "or it has more than three batch dimensions")
        maps.append(Geometry((inner.size, outer.size, *(c.batch[i].size for i in batch)),
                             strides, (*box, *[1] * len(batch)), batch))
    return maps[0], maps[1]


def maps_of(c: Contraction, bm: int, bn: int
            ) -> tuple[tuple[Geometry, Geometry], tuple[tuple[int, ...], ...]] | str:
    """A's and B's tensor maps for ``bm x bn`` tiles (:func:`geometries`) and the words of
    their templates, or why there are none."""
    found = geometries(c, bm, bn)
    if isinstance(found, str):
        return found
    words = [tma.template(tma.F16, g.dims, g.strides, g.box) for g in found]
    bad = [w for w in words if isinstance(w, str)]
    return bad[0] if bad else (found, tuple(words))  # type: ignore[return-value]


def unusable(c: Contraction, target: TargetProfile) -> str | None:
    """Why wgmma-f16 does not take this kernel for ``c`` (None: it does, at :data:`FORMS`):
    the probe's TMA copies, K of at least :data:`MIN_K`, every form's stages in the target's
    static local memory, and both tensor maps of every form encoding."""
    if not ENABLED or TMA_COPY not in target.tensor_cores:
        return "no TMA copies (the probe's cp.async.bulk.tensor)"
    if c.k.size < MIN_K:
        return f"K = {c.k.size} is below {MIN_K}"
    if (need := max(local_bytes(form_tiles(f)) for f in FORMS)) > target.group_local_bytes:
        return f"{need} bytes of local memory"
    for f in FORMS:
        if isinstance(why := maps_of(c, 64 * f[0], f[1]), str):
            return why
    return None


class _WgmmaSs(_WgmmaTma):
    """The kernel; see the module docstring."""

    bk = BK

    def build(self):
        found = maps_of(self.c, self.t.bm, self.t.bn)
        if isinstance(found, str):
            raise ValueError(f"wgmma-f16 cannot copy A and B by TMA: {found}")
        (self.ga, self.g), self.maps = found
        self.kmajor = along_k(self.c, "y")
        return _Wgmma.build(self)

    def stages(self) -> int:
        return self.t.stages

    def stage_words(self) -> int:
        return stage_bytes(self.t) // 4

    def a_rows(self, m0: Expr, wm: Expr, g: Expr, tt: Expr) -> None:
        """No A addresses: A is copied; its tile's first row is ``m0``."""
        self.m0 = m0

    def registers(self) -> list[str]:
        self.regs = {"E": [], "O": []}
        return []

    def load_a(self, regs: str, step: Expr, tail: bool) -> list[Stmt]:
        return []

    def tensor_maps(self) -> list[tuple[tuple[int, ...], str, int]]:
        return [(self.maps[0], "x", 0), (self.maps[1], "y", tma.MAP_BYTES)]

    def copy(self, step: Expr, stage: Expr, tail: bool) -> list[Stmt]:
        """Step ``step``'s boxes of A and B into ``stage``, issued by work-item 0 once every
        warp read the stage's last step."""
        t, k = self.t, mul(step, idx(BK))
        out = self.refill(step, stage, stage_bytes(t))
        out.append(self.box(self.ga, self.a_address(stage), 0, [k, self.m0], stage))
        for nb in range(1 if self.kmajor else t.bn // 64):
            at = Bin("+", self.stage_address(stage), i32(nb * BLOCK)) if nb else \
                self.stage_address(stage)
            coords = [k, self.n0] if self.kmajor else [add(self.n0, idx(64 * nb)), k]
            out.append(self.box(self.g, at, tma.MAP_BYTES, coords, stage))
        return [If(Bin("==", Var("tid"), idx(0)), tuple(out))]

    def a_address(self, stage: Expr) -> Expr:
        """A's part of ``stage``: its first ``BM`` rows."""
        return Bin("+", Var("b_base"), Cast(DType.i32, mul(stage, idx(stage_bytes(self.t)))))

    def stage_address(self, stage: Expr) -> Expr:
        """B's part of ``stage``, after A's."""
        return Bin("+", self.a_address(stage), i32(self.t.bm * ROW))

    def descriptor(self) -> int:
        return K_MAJOR if self.kmajor else MN_MAJOR

    def issue(self, bdesc: Var) -> tuple[str, tuple[tuple[str, Expr], ...]]:
        """Four k16 wgmma from both descriptors: A's is B's moved to the warpgroup's rows (the
        stage's start plus 64 rows a warpgroup) with A's fixed fields."""
        shift = K_MAJOR - self.descriptor() - (self.t.bm * ROW >> 4)
        adesc = Bin("+", Bin("+", bdesc, Lit(shift, INDEX)),
                    mul(div(Var("warp"), 4), idx(WG_ROWS >> 4)))
        b_advance = 2 if self.kmajor else 2 * ATOM // 16  # 32 bytes along K, or 16 rows
        return (sstep(self.t.bn, BK // 16, 2, b_advance, 0 if self.kmajor else 1),
                (("l", adesc), ("l", bdesc), ("r", i32(1))))
