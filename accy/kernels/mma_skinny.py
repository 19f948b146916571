"""mma-f16's tiles for skinny products (a side of at most
:data:`~accy.kernels.contraction_plan.SKINNY` against one of at least four times it:
:func:`~accy.kernels.mma_plan.takes_sides`), which stream the long operand, and how deep they
stream it (:func:`streaming`); :func:`accy.kernels.mma_plan.choose_tiles` picks among them."""

from __future__ import annotations

from dataclasses import replace

from accy.kernels.contraction_plan import Contraction
from accy.kernels.mma_plan import MmaTiles, along_k, long_walk, split_k
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
# Over a K walked unsplit (not mma_plan.long_walk) 64 wide instead: twice the work-groups on
# as many units, each walking the same K (32-row tiles faster at every short K timed on the
# H100, "Forty-first session"; over a long K, split, 64 wide was level and 128 wide faster on
# long products of long N). 16 x 64 tiles with B along K stay as they are.
_NARROW32 = (MmaTiles(32, 64, 32, 1, 4, f16=True, loads="vector"),
             MmaTiles(64, 32, 32, 4, 1, f16=True, loads="vector"))
SHORT_K_TILES = {
    (32, False): _NARROW32, (32, True): _NARROW32, (16, True): TILES[16, True],
    (16, False): (MmaTiles(16, 64, 64, 1, 4, f16=True), MmaTiles(64, 16, 64, 4, 1, f16=True)),
}
# With cp.async they stream the long operand through SKINNY_STAGES stages in static local
# memory (past the 48 KiB a target reports: group_local_bytes), one work-group a unit, K split
# for one wave: against two or three stages, four a unit, 5-8% faster at 16x4096x4096,
# 32x8000x3000 and 20x2000x20000 (papers/kernels.md, "Thirty-eighth session"; three or four
# stages with the same split were slower, "Thirty-seventh"). None: two or three stages.
SKINNY_STAGES: int | None = 8


def candidates(c: Contraction, short: int) -> tuple[MmaTiles, MmaTiles]:
    """The (M-short, N-short) tiles of a skinny f16 product whose shorter side is ``short``:
    :data:`TILES`' by that side and B's layout, or :data:`SHORT_K_TILES`' over a short K."""
    key = 16 if short <= 16 else 32, along_k(c, "y")
    return (TILES if long_walk(c, TILES[key][0]) else SHORT_K_TILES)[key]


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
