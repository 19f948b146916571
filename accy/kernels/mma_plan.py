"""Planning a tensor-core contraction (see :mod:`accy.kernels.mma`): tile sizes, the PTX
fragment layout of ``mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32``, and every index
formula the generator emits, written once here.

The formulas are built with the kernel IR's folding helpers (:func:`~accy.kernels.ir.add`,
``mul``, ``div``, ``mod``): the generator calls them with variables and gets the expressions it
emits; tests call them with literals and get numbers (the helpers fold literals), so a NumPy
emulation of one warp's ``mma.sync`` (``tests/kernels/test_mma_generator.py``) checks the very
arithmetic the kernels use.

Fragment layout (PTX ISA, "Matrix Fragments for mma.m16n8k8" with ``.tf32``; confirmed on the
H200 by ``shared/probes/ptx_mma.py``): lane ``= 4 g + t`` (``g = lane // 4``, ``t = lane % 4``);
A (16x8, row-major) registers a0..a3 hold rows g, g+8, g, g+8 at columns t, t, t+4, t+4;
B (8x8, "col") registers b0, b1 hold rows t, t+4 at column g; C/D (16x8) registers c0..c3 hold
rows g, g, g+8, g+8 at columns 2t, 2t+1, 2t, 2t+1.

``mma.m16n8k16`` with ``.f16`` ("Matrix Fragments for mma.m16n8k16"): A (16x16) registers hold
half pairs, a0a1..a6a7 at rows g, g+8, g, g+8, columns 2t..2t+1, 2t..2t+1, 2t+8..2t+9,
2t+8..2t+9 (the lower-index half in the low 16 bits); B (16x8) registers b0b1 and b2b3 at rows
2t..2t+1 and 2t+8..2t+9, column g; C as above. In 32-bit words of a row-major tile, A's
registers sit exactly where TF32's do (``a_offset``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from accy.ir.types import DType
from accy.kernels import mma_layout
from accy.kernels.contraction_plan import (
    SHORT_K,
    SKINNY,
    Contraction,
    analyse,
    padded,
    skinny_sides,
    tile_groups,
)
from accy.kernels.ir import Bin, Call, Expr, add, div, idx, mod, mul
from accy.plans import FusionGroup
from accy.target import CP_ASYNC, F16_MMA, TF32_MMA, TargetProfile

WARP = 32  # lanes that execute one mma.sync together
MMA_M, MMA_N, MMA_K = 16, 8, 8  # the TF32 shape (f16: K = 16, the same 8 words of K per lane)
A_FRAG = ((0, 0), (8, 0), (0, 4), (8, 4))  # (row, word column) of a0..a3 from (g, t)
B_FRAG = ((0, 0), (4, 0))  # (row k, col n) of b0, b1 from (t, g)
B16_FRAG = (0, 1, 8, 9)  # f16: the k rows of b0..b3 from 2t (all at column g)
C_FRAG = ((0, 0), (0, 1), (8, 0), (8, 1))  # (row, col) of c0..c3 from (g, 2t)
A_PAD = 4  # words added to each A tile row (stride bk + 4): lanes 4g + t in distinct banks
B_PAD = 8  # elements added to each B tile row (stride bn + 8): lanes t, g in distinct banks
VECTOR = 4  # f32 elements per copy slot (a float4 where strides allow; 16 bytes)
COPY_BYTES = 16  # bytes per copy slot (a float4, or eight halves; one cp.async)
STAGES = tuple(range(2, 9))  # local buffers a pipeline may have
# fragment loads: "scalar" (one 32-bit local load per register, padded tiles), "vector"
# (K/N-permuted float4 loads for f32, ldmatrix for f16, swizzled tiles: accy.kernels.mma_layout)
# or "ptx": the vector layout with its f32 loads as inline PTX ld.shared.v4.f32 (16-byte loads
# whatever alignment the OpenCL compiler proves for vload4; f16 as vector)
LOADS = ("scalar", "vector", "ptx")
# where tf32 rounds (3xtf32 splits) operands copied by cp.async: "fragment" (each register as
# it is loaded, so once per warp reading it) or "tile" (each work-item rounds the 16-byte
# chunks it copied, in local memory, once per element, before the step's barrier; 3xtf32's
# small parts go to a second tile of the same layout, doubling local memory, scalar fragment
# loads only; fragments then need no cvt); "first": by a kernel before the product (wgmma_ss3)
ROUNDINGS = ("fragment", "tile", "first")

# Selection: tensor cores pay once both tile sides are at least MIN_MN and K at least MIN_K
# (a 128x128 tile of mostly zeros wastes more than they win). f32 sides of at most SKINNY stay
# with the tiled contraction's skinny tiles; longer ones ran 2-3x faster on 3xtf32 at M 48
# and 60 (H100, papers/kernels.md, "Thirty-second session"); f16 ones: :func:`takes_sides`
MIN_MN = SKINNY + 1
MIN_K = 32
SMALL_MN = {True: 8, False: 16}  # f16, f32: smaller products that take them (takes_sides)
# tiles of at most SPLIT_WAVES waves of work-groups (one a unit; 1.5, not 1: "Forty-third
# session") split K over work-groups (:func:`split_k`) in chunks of at least MIN_SPLIT_K (256,
# not 1024: "Thirty-third session"), the partials summed by a second kernel, over a K of
# SPLIT_BYTES or more a row (:func:`long_walk`)
SPLIT_WAVES, MIN_SPLIT_K, SPLIT_BYTES = 1.5, 256, 2048
RESIDENT = 4  # work-groups of 4 warps a unit runs at once (:func:`resident`)


@dataclass(frozen=True)
class MmaTiles:
    """A work-group of ``warps_m x warps_n`` warps computes a ``bm x bn`` tile of C; each warp
    a ``warp_m x warp_n`` block of ``frags_m x frags_n`` m16n8 fragments; K advances ``bk``
    per step, through ``stages`` local buffers (2: one filled while the other is read; more
    need ``cp.async``, which has up to ``stages - 1`` steps in flight). ``f16``: f16 operands
    (m16n8k16, 2-byte elements), else f32 (m16n8k8 TF32)."""

    bm: int
    bn: int
    bk: int
    warps_m: int
    warps_n: int
    swizzle: int = 8  # tile rows walked together for L2 reuse
    stages: int = 2
    f16: bool = False
    loads: str = "scalar"
    rounding: str = "fragment"
    split: int = 1  # K split over this many work-groups per tile, partials summed by a 2nd kernel
    # B tile rows along K (``Bs[n][k]``, as A's): for f16 B operands stored along K, copied by
    # cp.async as they are and read by ldmatrix without .trans (vector loads only); set by the
    # generator from the operand's layout
    b_k_major: bool = False

    @property
    def threads(self) -> int:
        return WARP * self.warps_m * self.warps_n

    @property
    def warp_m(self) -> int:
        return self.bm // self.warps_m

    @property
    def warp_n(self) -> int:
        return self.bn // self.warps_n

    @property
    def frags_m(self) -> int:
        return self.warp_m // MMA_M

    @property
    def frags_n(self) -> int:
        return self.warp_n // MMA_N

    @property
    def mma_k(self) -> int:
        """K of one mma.sync (8 TF32 or 16 f16 elements: 8 words either way)."""
        return 16 if self.f16 else MMA_K

    @property
    def elem_bytes(self) -> int:
        return 2 if self.f16 else 4

    @property
    def vector(self) -> int:
        """Elements of one 16-byte copy slot."""
        return COPY_BYTES // self.elem_bytes

    @property
    def lda(self) -> int:
        """Row stride of the A tile in local memory (``As[m][k]``), elements."""
        if self.vector_loads:
            return self.bk
        return self.bk + A_PAD * 4 // self.elem_bytes

    @property
    def lda_words(self) -> int:
        return self.lda * self.elem_bytes // 4

    @property
    def ldb(self) -> int:
        """Row stride of the B tile in local memory (``Bs[k][n]``), elements."""
        return self.bn if self.vector_loads else self.bn + B_PAD

    @property
    def vector_loads(self) -> bool:
        """The unpadded, swizzled layout and wide fragment loads (``vector`` or ``ptx``)."""
        return self.loads in ("vector", "ptx")

    @property
    def a_size(self) -> int:
        """Elements of one stage of the A tile."""
        return self.bm * self.lda

    @property
    def b_size(self) -> int:
        return self.bk * self.ldb

    def local_bytes(self) -> int:
        """Every stage of both tiles."""
        return self.stages * (self.a_size + self.b_size) * self.elem_bytes

    def slots(self, side: str, width: int | None = None) -> int:
        """Copy slots (16 bytes each, or ``width`` elements) per work-item for one K step of
        ``side``."""
        free = self.bm if side == "x" else self.bn
        return free * self.bk // (width or self.vector) // self.threads

    def text(self) -> str:
        """``BMxBNxBK:WMxWN:S`` (``:vector`` appended for that load scheme, ``:round=tile``
        for that rounding), what :func:`parse_tiles` reads."""
        return (f"{self.bm}x{self.bn}x{self.bk}:{self.warps_m}x{self.warps_n}:{self.stages}"
                + ("" if self.loads == "scalar" else f":{self.loads}")
                + ("" if self.rounding == "fragment" else f":round={self.rounding}")
                + ("" if self.split == 1 else f":split={self.split}"))

    def check(self) -> None:
        """Raise when the tiling does not divide evenly (a programming error)."""
        v = self.vector
        if (self.warp_m % MMA_M or self.warp_n % MMA_N or self.bk % self.mma_k
                or self.bm * self.bk % (v * self.threads)
                or self.bn * self.bk % (v * self.threads)
                or self.bk % v or self.bm % v or self.bn % v or self.stages not in STAGES):
            raise ValueError(f"tiles {self.text()} do not divide into m16n8k{self.mma_k} "
                             f"fragments and 16-byte copies, or stages not in {STAGES}")
        if self.b_k_major and not (self.f16 and self.vector_loads):
            raise ValueError(f"tiles {self.text()}: a B tile along K is for f16 vector "
                             "(ldmatrix) loads only")
        if self.split < 1:
            raise ValueError(f"tiles {self.text()}: split {self.split} (at least 1)")
        if self.rounding not in ROUNDINGS:
            raise ValueError(f"tiles {self.text()}: rounding {self.rounding!r}, one of "
                             f"{', '.join(ROUNDINGS)}")
        if self.loads not in LOADS:
            raise ValueError(f"tiles {self.text()}: fragment loads {self.loads!r}, one of "
                             f"{', '.join(LOADS)}")
        if self.vector_loads and self.f16 and self.frags_n % 2:
            raise ValueError(f"tiles {self.text()}: ldmatrix reads B fragments in pairs; "
                             f"a warp's {self.frags_n} fragment columns are odd")
        if self.vector_loads and not self.f16 and (
                self.frags_n % 4 or self.bk // 8 not in (1, 2, 4)):
            raise ValueError(f"tiles {self.text()}: vector loads need fragment columns per "
                             f"warp in fours (float4 along N; {self.frags_n} here) and K "
                             f"steps of 8, 16 or 32 ({self.bk} here)")


# 4 warps of 64x64 (4x8 fragments, 128 accumulators per lane): half the local-memory reads per
# mma of LARGE, at more registers
WIDE = MmaTiles(128, 128, 16, 2, 2)
# 4 warps of 64x32 (4x4 fragments, 64 accumulators): the fastest f32 tiling per unit in the
# sweep once the 3xtf32 split was cheap (papers/kernels.md, "Twenty-ninth session")
MID = MmaTiles(128, 64, 16, 2, 2)
SMALL = MmaTiles(64, 64, 16, 2, 2)  # 4 warps of 32x32, where they fill the waves better
# 4 warps of 32x16 (f32): where 64x64 tiles leave a short last wave of work-groups
NARROW = MmaTiles(64, 32, 16, 2, 2)
LARGE = MmaTiles(128, 128, 16, 2, 4)  # 8 warps of 64x32: for sweeps (bench_mma.py --tiles)
# f16: the same blocks, K steps of 32 (two m16n8k16 per step; the same bytes as 16 f32)
WIDE16 = MmaTiles(128, 128, 32, 2, 2, f16=True)
SMALL16 = MmaTiles(64, 64, 32, 2, 2, f16=True)
# what choose_tiles picks from, largest first, as measured (papers/kernels.md: bench_mma
# --loads scalar,vector,ptx): f16 blocks with vector fragment loads (ldmatrix), f32 blocks
# with scalar loads from padded tiles (their vector loads measured slower)
CANDIDATES = (WIDE, MID, SMALL, NARROW)
CANDIDATES16 = tuple(replace(t, loads="vector") for t in (WIDE16, SMALL16))
# The choice among them (choose_tiles): a tiling's waves are its work-groups over the compute
# units, rounded up, its *balance* the share of those waves' slots it fills, and its score the
# balance times the tiling's relative rate (a unit's throughput on it, :func:`rate`); the
# largest tiling within BALANCE_TIE of the best score is taken. Why: 64x64 tiles can leave a
# last wave nearly empty (1000x1030 makes 272 work-groups on 132 units, the third wave 8)
# where 64x32 tiles fill whole waves. The f32 rates are fitted to a sweep of the four tilings
# over 49 products (papers/kernels.md, "Twenty-ninth session", where the fit's error against
# the fastest tiling is given, and the sixteenth session's rates', which predate the cheaper
# 3xtf32 split); experiments/sweep_mma_tiles.py --evaluate reproduces it. f16 tilings all 1.
RATES = {(128, 64): 1.05, (64, 32): 0.9}
WIDE_RATE = 0.9  # f32 tiles of 128x128 or more
BALANCE_TIE = 0.02
# tiles padding M x N by more than this are passed over for smaller ones: attention's P V
# (N = 64, the head dimension) on 128x128 tiles computes twice its outputs
MAX_PADDING = 1.25
MAX_ACCUMULATORS = 128  # f32 accumulator registers per lane a tiling may hold (of 255)


def parse_tiles(text: str) -> MmaTiles:
    """``BMxBNxBK:WMxWN[:S[:LOADS][:round=R][:split=N]]`` (e.g. ``128x128x16:2x4``,
    ``64x64x16:2x2:3`` or ``128x256x16:2x4:2:vector:round=tile``; S stages, default 2; LOADS
    one of :data:`LOADS`, default scalar; R one of :data:`ROUNDINGS`, default fragment; N
    work-groups sharing a tile's K, default 1) as tiles, checked (f32 layout;
    :func:`for_dtype` makes f16 ones)."""
    try:
        block, warps, *rest = text.strip().lower().split(":")
        bm, bn, bk = (int(v) for v in block.split("x"))
        wm, wn = (int(v) for v in warps.split("x"))
        s = int(rest[0]) if rest else 2
        loads, rounding, split = "scalar", "fragment", None
        for extra in rest[1:]:
            if extra in LOADS and loads == "scalar" and rounding == "fragment" and split is None:
                loads = extra
            elif extra.startswith("round=") and extra[6:] in ROUNDINGS and split is None:
                rounding = extra[6:]
            elif extra.startswith("split=") and split is None:
                split = int(extra[6:])
            else:
                raise ValueError
    except ValueError:
        raise ValueError(f"tiles {text!r}: give BMxBNxBK:WMxWN[:STAGES[:LOADS][:round=R]"
                         "[:split=N]], e.g. 128x128x16:2x4, 64x64x16:2x2:3 or "
                         f"128x128x16:2x2:3:vector:round=tile (LOADS: {', '.join(LOADS)}; R: "
                         f"{', '.join(ROUNDINGS)})") from None
    tiles = MmaTiles(bm, bn, bk, wm, wn, stages=s, loads=loads, rounding=rounding,
                     split=1 if split is None else split)
    tiles.check()
    return tiles


def for_dtype(tiles: MmaTiles, dtype: DType) -> MmaTiles:
    """``tiles`` for operands of ``dtype`` (f16 or f32), checked."""
    out = replace(tiles, f16=dtype is DType.f16)
    out.check()
    return out


# lanes, warps, fragments --------------------------------------------------------------------
def lane_parts(lane: Expr) -> tuple[Expr, Expr]:
    """(g, t) of a lane: its group of four and its place in it."""
    return div(lane, 4), mod(lane, 4)


def warp_origin(t: MmaTiles, warp: Expr) -> tuple[Expr, Expr]:
    """(row, column) of a warp's block inside the work-group tile (warps row-major)."""
    return mul(div(warp, t.warps_n), idx(t.warp_m)), mul(mod(warp, t.warps_n), idx(t.warp_n))


def _plain(name: str, e: Expr) -> Expr:
    return e


def tile_of(c: Contraction, t: MmaTiles, tile: Expr, let: Callable[[str, Expr], Expr] = _plain
            ) -> tuple[Expr, Expr]:
    """(row, column) of tiles of tile ``tile`` (a work-group's, or one a work-group walks to):
    row-major, or where ``t.swizzle`` > 1 in bands of that many tile rows (L2 reuse);
    intermediate values named by ``let`` (a builder's, or none: expressions)."""
    tiles_m, tiles_n = -(-c.m.size // t.bm), -(-c.n.size // t.bn)
    tile = let("tile", mod(tile, tiles_m * tiles_n)) if c.batch else tile
    if t.swizzle > 1 and tiles_m > t.swizzle:
        band = let("band", div(tile, t.swizzle * tiles_n))
        rows = let("rows", Call("min", (idx(t.swizzle), Bin(
            "-", idx(tiles_m), mul(band, idx(t.swizzle))))))
        inner = let("inner", mod(tile, t.swizzle * tiles_n))
        return (let("tm", add(mul(band, idx(t.swizzle)), Bin("%", inner, rows))),
                let("tn", Bin("/", inner, rows)))
    return let("tm", div(tile, tiles_n)), let("tn", mod(tile, tiles_n))


def batch_of(c: Contraction, t: MmaTiles, tile: Expr,
             let: Callable[[str, Expr], Expr] = _plain) -> list[Expr]:
    """The batch coordinates of tile ``tile`` (the index above the tiles), named by ``let``."""
    if not c.batch:
        return []
    bz = let("bz", div(tile, -(-c.m.size // t.bm) * -(-c.n.size // t.bn)))
    inner, coords = c.batch_size, []
    for i, d in enumerate(c.batch):
        inner //= d.size
        coords.append(let(f"bc{i}", div(bz, inner) if i == 0 else mod(div(bz, inner), d.size)))
    return coords


def a_lane_base(t: MmaTiles, wm: Expr, g: Expr, tt: Expr) -> Expr:
    """Local A word of a lane's register a0 of fragment row 0, K step 0 (``As[wm+g][t]``;
    f16: the word of halves ``2t, 2t+1``)."""
    return add(mul(add(wm, g), idx(t.lda_words)), tt)


def a_offset(t: MmaTiles, mi: int, kk: int, r: int) -> int:
    """What register ``a{r}`` of fragment row ``mi`` at K sub-step ``kk`` adds to the base, in
    words: f16's m16n8k16 A registers (half pairs) sit where m16n8k8's TF32 values do."""
    dr, dc = A_FRAG[r]
    return (mi * MMA_M + dr) * t.lda_words + kk * MMA_K + dc


def b_lane_base(t: MmaTiles, wn: Expr, g: Expr, tt: Expr) -> Expr:
    """Local B address of a lane's register b0 of fragment column 0, K step 0 (``Bs[t][wn+g]``)."""
    return add(mul(tt, idx(t.ldb)), add(wn, g))


def b_offset(t: MmaTiles, ni: int, kk: int, r: int) -> int:
    dr, dc = B_FRAG[r]
    return (kk * MMA_K + dr) * t.ldb + ni * MMA_N + dc


def b16_lane_base(t: MmaTiles, wn: Expr, g: Expr, tt: Expr) -> Expr:
    """f16: local B element (a half) of a lane's b0 of fragment column 0, K step 0
    (``Bs[2t][wn+g]``); its parity, that of ``g``, says which half of a word it is."""
    return add(mul(mul(tt, idx(2)), idx(t.ldb)), add(wn, g))


def b16_offset(t: MmaTiles, ni: int, kk: int, i: int) -> int:
    """f16: what half ``b{i}`` (``i`` in 0..3; registers hold b0,b1 and b2,b3) of fragment
    column ``ni`` at K sub-step ``kk`` adds to the base, in halves (always even)."""
    return (kk * 16 + B16_FRAG[i]) * t.ldb + ni * MMA_N


def c_coords(wm: Expr, wn: Expr, g: Expr, tt: Expr, mi: int, ni: int, r: int
             ) -> tuple[Expr, Expr]:
    """Tile-relative (row, column) of accumulator ``c{r}`` of fragment (mi, ni)."""
    dr, dc = C_FRAG[r]
    return (add(wm, add(g, idx(mi * MMA_M + dr))),
            add(wn, add(mul(tt, idx(2)), idx(ni * MMA_N + dc))))


# global -> local copies -------------------------------------------------------------------
def along_k(c: Contraction, side: str) -> bool:
    """Whether operand ``side`` is copied along K (its K stride is 1: coalesced that way)."""
    free, k = (c.m.x, c.k.x) if side == "x" else (c.n.y, c.k.y)
    return k == 1 or (free != 1 and (k or math.inf) < (free or math.inf))


def copy_slot(t: MmaTiles, side: str, k_major: bool, slot: Expr, width: int | None = None
              ) -> tuple[Expr, Expr]:
    """Tile-relative (free, k) of the first element of copy slot ``slot`` (its ``width``
    elements, default a 16-byte vector, run along K when ``k_major``, else along the free
    index M or N); consecutive slots run along the same index, so consecutive work-items
    read consecutive memory."""
    free, v = (t.bm if side == "x" else t.bn), width or t.vector
    if k_major:
        per = t.bk // v
        return div(slot, per), mul(mod(slot, per), idx(v))
    per = free // v
    return mul(mod(slot, per), idx(v)), div(slot, per)


def copy_layout(c: Contraction, side: str, vector: int) -> tuple[bool, bool]:
    """(along K, whole vectors) of operand ``side``'s copies: whether its slots run along K,
    and whether each slot is ``vector`` consecutive elements, aligned, all inside or all
    outside the operand (the contiguous extent and every other stride divide by ``vector``)."""
    if side == "x":
        extent, fs, ks, bs = c.m.size, c.m.x, c.k.x, [d.x for d in c.batch]
    else:
        extent, fs, ks, bs = c.n.size, c.n.y, c.k.y, [d.y for d in c.batch]
    k_major = along_k(c, side)
    contiguous, span, other = (ks, c.k.size, fs) if k_major else (fs, extent, ks)
    whole = (contiguous == 1 and span % vector == 0 and other % vector == 0
             and all(b % vector == 0 for b in bs))
    return k_major, whole


def copy_widths(c: Contraction) -> dict[str, int] | None:
    """Elements per ``cp.async`` of each side: 16 bytes (4 f32, 8 halves), or 8 or 4 where
    rows are not whole 16-byte vectors (N = 1030: 4 bytes), the widest whose copies are whole,
    aligned vectors (:func:`copy_layout`); None where cp.async cannot copy: a copy cannot
    transpose, so A must be stored along K (``As[m][k]``) and f32 B along N (``Bs[k][n]``;
    f16 B either way: a B tile along K, ``Bs[n][k]``, is read by ldmatrix), and rows of odd
    halves have no 4-byte vectors."""
    f16 = c.dtype is DType.f16
    if not along_k(c, "x") or (along_k(c, "y") and not f16):
        return None
    vector = COPY_BYTES // (2 if f16 else 4)
    widths = {side: next((w for w in (vector, vector // 2, vector // 4)
                          if copy_layout(c, side, w)[1]), 0) for side in ("x", "y")}
    return widths if all(widths.values()) else None


def local_index(t: MmaTiles, side: str, f: Expr, k: Expr) -> Expr:
    """Local address of tile element (free f, k): ``As[f][k]`` or ``Bs[k][f]`` (``Bs[f][k]``
    for a B tile along K; under vector loads unpadded, 16-byte chunks swizzled per row:
    :func:`mma_layout.address`)."""
    if t.vector_loads:
        rows_k = side == "x" or t.b_k_major  # rows along K: (f, k), else (k, f)
        return mma_layout.address(t, side, f if rows_k else k, k if rows_k else f)
    return add(mul(f, idx(t.lda)), k) if side == "x" else add(mul(k, idx(t.ldb)), f)


# selection --------------------------------------------------------------------------------
def fits(t: MmaTiles, target: TargetProfile) -> bool:
    """Whether a work-group of ``t`` (two stages) runs on ``target``: its work-items, its local
    memory, and at most :data:`MAX_ACCUMULATORS` accumulators per lane."""
    return (t.threads <= target.max_work_group_size
            and replace(t, stages=2).local_bytes() <= target.local_mem_bytes
            and t.frags_m * t.frags_n * 4 <= MAX_ACCUMULATORS)


def choose_tiles(c: Contraction, target: TargetProfile, pipelined: bool,
                 candidates: tuple[MmaTiles, ...] | None = None) -> MmaTiles:
    """Of ``candidates`` (largest first; default :data:`CANDIDATES`, or :data:`CANDIDATES16`
    for f16; with a side of at most ``SKINNY``, ``mma_skinny.candidates``' by that side, B's
    layout and K) that fit (:func:`fits`) and pad M x N by at most :data:`MAX_PADDING` (else
    the least padding), K split as :func:`split_k` says (not for given ones), the largest whose
    waves are best filled (:func:`balance` times :func:`rate`, within :data:`BALANCE_TIE`; on a
    tie one without a split), its split dropped over a short K (:func:`long_walk`); with
    ``cp.async`` skinny tiles as ``mma_skinny.streaming`` says, others in as many stages, up
    to 3, as local memory holds and K has steps (others: ``bench_mma.py --stages``)."""
    from accy.kernels import mma_skinny  # (it builds on this module)

    given, short = candidates is not None, min(c.m.size, c.n.size)
    if not given:
        candidates = (CANDIDATES if c.dtype is not DType.f16 else
                      CANDIDATES16 if short > SKINNY else
                      mma_skinny.candidates(c, short))
    pool = tuple(for_dtype(t, c.dtype) for t in candidates)
    fitting = [t for t in pool if fits(t, target)] or [pool[-1]]

    def area(t: MmaTiles) -> int:
        return padded(c, t.bm, t.bn)

    least = min(area(t) for t in fitting)
    snug = ([t for t in fitting if area(t) <= MAX_PADDING * c.m.size * c.n.size]
            or [t for t in fitting if area(t) == least])  # (all tied: the waves choose)

    def groups(t: MmaTiles) -> int:
        return tile_groups(c, t.bm, t.bn) * t.split

    if not given:  # K split where the tiles leave units idle
        snug = [replace(t, split=split_k(c, t, target)) for t in snug]
    # the best balanced waves; on a tie one kernel (no split), then the larger tile (a long K
    # over few 128x128 tiles splits into as many groups as over 64x64 ones)
    scores = [balance(groups(t), target.compute_units) * rate(t) for t in snug]
    tied = [t for t, s in zip(snug, scores, strict=True) if s >= (1 - BALANCE_TIE) * max(scores)]
    tiles = next((t for t in tied if t.split == 1), tied[0])
    tiles = replace(tiles, split=tiles.split if long_walk(c, tiles) else 1)
    if pipelined and not given and c.dtype is DType.f16 and short <= SKINNY and (
            deep := mma_skinny.streaming(c, tiles, target)):
        return deep
    if pipelined:
        steps = -(-c.k.size // tiles.bk)
        for stages in (3, 2):
            deeper = replace(tiles, stages=stages)
            if deeper.local_bytes() <= target.local_mem_bytes and stages <= max(2, steps):
                return deeper
    return replace(tiles, stages=2)  # registers and plain stores: two buffers


def rate(t: MmaTiles) -> float:
    """A compute unit's throughput on tiling ``t``, relative to 64x64 tiles (as measured;
    :data:`RATES`, :data:`WIDE_RATE`)."""
    if t.f16:
        return 1.0
    if t.bm * t.bn >= WIDE.bm * WIDE.bn:  # as 128x128 tiles (larger ones only in sweeps)
        return WIDE_RATE
    return RATES.get((t.bm, t.bn), 1.0)


def balance(groups: int, units: int) -> float:
    """The share of its waves' slots ``groups`` work-groups fill on ``units`` compute units (a
    wave: one work-group a unit); 1 when the last wave is full."""
    return groups / (units * -(-groups // units))


def split_k(c: Contraction, tiles: MmaTiles, target: TargetProfile, per_unit: int = 0,
            min_chunk: int = MIN_SPLIT_K) -> int:
    """Work-groups to share each tile's K: where the tiles make at most SPLIT_WAVES waves
    over a long K, the count whose work-groups fill their waves best
    (:func:`balance`; within BALANCE_TIE of the best, the most), at most as many as the
    units hold at once (``per_unit`` a unit, default :func:`resident`), in chunks of at
    least ``min_chunk``; else 1. A unit running one four-warp group waits on its loads, and a
    power of two past one wave leaves a second nearly empty (9 tiles of 64x64 over a K of
    81520 in 16 chunks: 144 groups, 132 and then 12; papers/kernels.md, "Twenty-eighth")."""
    groups, units = tile_groups(c, tiles.bm, tiles.bn), target.compute_units
    if groups > SPLIT_WAVES * units:
        return 1
    most = min(c.k.size // min_chunk, (per_unit or resident(tiles)) * units // groups)
    counts = range(1, max(1, most) + 1)
    fill = {s: balance(groups * s, units) for s in counts}
    best = max(fill.values())
    return max(s for s in counts if fill[s] >= (1 - BALANCE_TIE) * best)


def long_walk(c: Contraction, tiles: MmaTiles) -> bool:
    """Whether ``c``'s K is :data:`SPLIT_BYTES` or more a row (f16 1024, f32 512): a shorter
    walk, split, saves less than the partial sums' kernel costs ("Forty-first session")."""
    return c.k.size * tiles.elem_bytes >= SPLIT_BYTES


def resident(tiles: MmaTiles) -> int:
    """Work-groups of ``tiles`` a compute unit runs at once, as its registers allow:
    RESIDENT of up to MAX_ACCUMULATORS // 2 accumulators a lane, half as many above."""
    return RESIDENT if tiles.frags_m * tiles.frags_n * 4 <= MAX_ACCUMULATORS // 2 \
        else RESIDENT // 2


def pipelined(c: Contraction, target: TargetProfile) -> bool:
    """Whether the kernel of ``c`` copies by ``cp.async`` (the target's probe found it and
    both operands' layouts allow it: :func:`copy_widths`); else registers and plain stores,
    two buffers."""
    return CP_ASYNC in target.tensor_cores and copy_widths(c) is not None


def takes_sides(m: int, n: int, f16: bool, k: int) -> bool:
    """Whether the tensor-core kernels take ``m x n`` outputs over ``k``: both sides at least
    MIN_MN; for f16 a side of at most ``SKINNY`` against one of ``4 SKINNY`` (the tiles of
    :mod:`accy.kernels.mma_skinny`: the tiled contraction, f16 read into f32 tiles, is bound
    by its FMAs, twice f32's a byte); smaller ones with both at least :data:`SMALL_MN` (f32:
    over a K below ``contraction_plan.SHORT_K``, which the tiled contraction walks unsplit, a
    load latency a step; the mma kernels keep several steps in flight: papers/kernels.md,
    "Fortieth session")."""
    least = min(m, n)
    return (least >= MIN_MN or (f16 and skinny_sides(m, n))
            or (least >= SMALL_MN[f16] and (f16 or k < SHORT_K)))


def plan(group: FusionGroup, target: TargetProfile) -> tuple[Contraction, MmaTiles] | str:
    """The contraction form and tiles of a group the mma generators take, or why not: f32
    products on TF32 tensor cores (``mma-tf32`` / ``mma-3xtf32``), f16 ones on f16 tensor
    cores (``mma-f16``, which also needs ``cp.async`` and A stored along K, B along N; not
    ``cl_khr_fp16``: its tiles are words and its loads and stores ``vload_half``)."""
    found = analyse(group)
    if isinstance(found, str):
        return found
    _, c = found
    if c.dtype is DType.f16:
        if F16_MMA not in target.tensor_cores:
            return "the target has no f16 tensor cores (TargetProfile.tensor_cores)"
        if DType.f16 not in target.usable_dtypes:
            return "the target cannot store f16"
        if not pipelined(c, target):
            return ("f16 tensor cores need cp.async copies: the target has none, or A is "
                    "not stored along K, or a side's rows are not whole 4-byte pairs of halves")
    elif c.dtype is DType.f32:
        if TF32_MMA not in target.tensor_cores:
            return "the target has no TF32 tensor cores (TargetProfile.tensor_cores)"
    else:
        return f"dtype {c.dtype.value} (tensor cores take f32 as TF32, or f16)"
    if not takes_sides(c.m.size, c.n.size, c.dtype is DType.f16, c.k.size) or c.k.size < MIN_K:
        return (f"{c.m.size}x{c.n.size}x{c.k.size}: sides or K too small (takes_sides, MIN_K "
                f"{MIN_K}): the other generators are faster there")
    t = choose_tiles(c, target, pipelined(c, target))
    if t.threads > target.max_work_group_size or t.local_bytes() > target.group_local_bytes:
        return (f"tiles of {t.threads} work-items and {t.local_bytes()} bytes of local "
                "memory exceed the target")
    return c, t
