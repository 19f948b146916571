"""mma-f16's tiles for skinny products (a side of at most
:data:`~accy.kernels.contraction_plan.SKINNY` against one of at least four times it:
:func:`~accy.kernels.mma_plan.takes_sides`), which stream the long operand, and how deep they
stream it (:func:`streaming`); :func:`accy.kernels.mma_plan.choose_tiles` picks among them."""

from __future__ import annotations

from dataclasses import replace

from accy.kernels.contraction_plan import Contraction
from accy.kernels.mma_plan import MmaTiles, long_walk, split_k
from accy.target import TargetProfile

# f16 products with a side of at most SKINNY (takes_sides): 16 or 32 rows (or columns) by 128,
# K split as for any tiles. H100, against the tiled contraction's skinny tiles ("Thirty-third
# session"): 16x4096x4096 0.27x -> 0.38x of torch.compile, 32x8000x3000 0.26x -> 0.54x,
# 20x2000x20000 0.33x -> 0.67x. 16 rows copy K steps of 64 (a 16 x 32 A tile is fewer chunks
# than work-items), fragments loaded as words; with B along K (ldmatrix) 16 x 64, K steps of 32
_ROWS32 = (MmaTiles(32, 128, 32, 1, 4, f16=True, loads="vector"),
           MmaTiles(128, 32, 32, 4, 1, f16=True, loads="vector"))
TILES = {  # (short side's tile, B along K) -> (M-short, N-short) tiles
    (32, False): _ROWS32, (32, True): _ROWS32,
    (16, False): (MmaTiles(16, 128, 64, 1, 4, f16=True), MmaTiles(128, 16, 64, 4, 1, f16=True)),
    (16, True): (MmaTiles(16, 64, 32, 1, 2, f16=True, loads="vector"),
                 MmaTiles(64, 16, 32, 2, 1, f16=True, loads="vector")),
}
# With cp.async they stream the long operand through SKINNY_STAGES stages in static local
# memory (past the 48 KiB a target reports: group_local_bytes), one work-group a unit, K split
# for one wave: against two or three stages, four a unit, 5-8% faster at 16x4096x4096,
# 32x8000x3000 and 20x2000x20000 (papers/kernels.md, "Thirty-eighth session"; three or four
# stages with the same split were slower, "Thirty-seventh"). None: two or three stages.
SKINNY_STAGES: int | None = 8


def streaming(c: Contraction, t: MmaTiles, target: TargetProfile) -> MmaTiles | None:
    """Skinny f16 tiles ``t`` in :data:`SKINNY_STAGES` stages (no more than a K chunk has
    steps) with K split for one work-group a unit over a long walk
    (:func:`~accy.kernels.mma_plan.long_walk`), where the target's static local memory
    holds them; else None."""
    if SKINNY_STAGES is None:
        return None
    deep = replace(t, stages=SKINNY_STAGES, split=1)
    if deep.local_bytes() > target.group_local_bytes:
        return None
    split = split_k(c, deep, target, 1) if long_walk(c, deep) else 1
    steps = -(-c.k.size // (split * t.bk))
    return replace(deep, split=split, stages=max(2, min(SKINNY_STAGES, steps)))
