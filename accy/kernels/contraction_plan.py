"""Planning a tiled contraction: classify an einsum's letters into batch, M, N and K over
strided views, and choose tile sizes for a target (see :mod:`accy.kernels.contraction`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.shapes import parse_einsum
from accy.ir.types import DType
from accy.kernels.ir import Expr, div, idx, mod, row_major
from accy.plans import FusionGroup, ScheduleKind, is_inlined
from accy.target import TargetProfile

FLOATS = (DType.f32, DType.f64)
LOCAL_BANKS = 32  # local-memory banks of the GPUs accy targets (NVIDIA, AMD), ...
BANK_BYTES = 4  # ... each 4 bytes wide


# classification ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Dim:
    """One index of the product: its extent and its element stride in X, Y and the output."""

    size: int
    x: int
    y: int
    out: int


@dataclass(frozen=True)
class Contraction:
    """An einsum as ``C[b, m, n] = sum_k X[b, m, k] Y[b, k, n]`` over strided operands.

    ``x`` is the einsum operand (0 or 1) that plays X. ``coords`` gives, per output letter,
    where its coordinate comes from: ``("b", i, 1, size)`` batch dimension ``i``,
    ``("m", 0, d, size)`` is ``(m // d) % size``, likewise ``"n"``; ``("1", 0, 1, 1)`` is 0.
    """

    dtype: DType
    x: int
    batch: tuple[Dim, ...]
    m: Dim
    n: Dim
    k: Dim
    coords: tuple[tuple[str, int, int, int], ...]

    @property
    def batch_size(self) -> int:
        return math.prod(d.size for d in self.batch)


def _chain(letters: list[str], size: dict[str, int], strides: tuple[dict[str, int], ...]
           ) -> tuple[list[str], list[str]]:
    """The longest suffix of ``letters`` (size-1 letters dropped) whose strides chain in every
    stride map, so that it flattens into one index; and the letters before it."""
    order = [c for c in letters if size[c] > 1]
    start = len(order) - 1 if order else 0
    while start > 0 and all(s[order[start - 1]] == s[order[start]] * size[order[start]]
                            for s in strides):
        start -= 1
    return order[start:], order[:start]


def _flat(chain: list[str], size: dict[str, int], strides: tuple[dict[str, int], ...]
          ) -> tuple[int, ...]:
    """Extent and per-map stride of a flattened chain (extent 1, strides 0 when empty)."""
    if not chain:
        return (1, *(0 for _ in strides))
    return (math.prod(size[c] for c in chain), *(s[chain[-1]] for s in strides))


def classify(node: Node) -> Contraction | str:
    """The batched-matrix-product form of an einsum node, or why it has none."""
    if node.op is not Op.EINSUM or len(node.srcs) != 2:
        return "not a two-operand einsum"
    dtype = node.type.dtype
    if dtype not in FLOATS + (DType.f16,):  # f16: the mma generator's alone
        return f"dtype {dtype.value} (contractions here are f16, f32 or f64)"
    terms, out = parse_einsum(node.attr("spec"), [s.type.rank for s in node.srcs])
    for t in terms:
        if len(set(t)) != len(t):
            return f"operand term {t!r} repeats a letter"
    size: dict[str, int] = {}
    for t, s in zip(terms, node.srcs, strict=True):
        size.update(zip(t, s.type.shape, strict=True))
    if 0 in size.values():
        return "an empty dimension"
    for c in size:
        if sum((c in terms[0], c in terms[1], c in out)) < 2:
            return f"letter {c!r} appears in one operand only"
    # X is the operand whose letters do not include the output's innermost one, so that the
    # N index (vector lanes, coalesced stores) runs along the output's rows.
    xi = 1 if out and out[-1] in terms[0] and out[-1] not in terms[1] else 0
    tx, ty = terms[xi], terms[1 - xi]
    sx = dict(zip(tx, row_major(node.srcs[xi].type.shape), strict=True))
    sy = dict(zip(ty, row_major(node.srcs[1 - xi].type.shape), strict=True))
    so = dict(zip(out, row_major(node.type.shape), strict=True))
    m_chain, m_rest = _chain([c for c in out if c in tx and c not in ty], size, (sx, so))
    n_chain, n_rest = _chain([c for c in out if c in ty and c not in tx], size, (sy, so))
    k_chain, k_rest = _chain([c for c in tx if c not in out], size, (sx, sy))
    if k_rest:
        return f"summed letters {''.join(k_rest + k_chain)!r} do not flatten into one index"
    if not k_chain:
        return "no summed index (an outer product): the loop nest computes it directly"
    m_size, mx, mo = _flat(m_chain, size, (sx, so))
    n_size, ny, no = _flat(n_chain, size, (sy, so))
    k_size, kx, ky = _flat(k_chain, size, (sx, sy))
    batch_letters = [c for c in out if size[c] > 1 and c not in m_chain and c not in n_chain]
    batch = tuple(Dim(size[c], sx.get(c, 0), sy.get(c, 0), so[c]) for c in batch_letters)
    coords = []
    for c in out:
        if c in batch_letters:
            coords.append(("b", batch_letters.index(c), 1, size[c]))
        elif c in m_chain or c in n_chain:
            chain = m_chain if c in m_chain else n_chain
            inner = math.prod(size[d] for d in chain[chain.index(c) + 1:])
            coords.append(("m" if c in m_chain else "n", 0, inner, size[c]))
        else:
            coords.append(("1", 0, 1, 1))
    assert not (set(m_rest) | set(n_rest)) - set(batch_letters)
    return Contraction(dtype, xi, batch, Dim(m_size, mx, 0, mo), Dim(n_size, 0, ny, no),
                       Dim(k_size, kx, ky, 0), tuple(coords))


_ANALYSED: dict[int, tuple[FusionGroup, tuple[Node, Contraction] | str]] = {}


def analyse(group: FusionGroup) -> tuple[Node, Contraction] | str:
    """The einsum of a contraction group and its product form, or why the group is declined.

    Kept for the last groups asked about (by identity; groups are immutable): the mma and
    tiled generators' ``accepts`` and then the chosen one's ``build`` each ask."""
    key = id(group)
    hit = _ANALYSED.get(key)
    if hit is not None and hit[0] is group:
        return hit[1]
    found = _analyse(group)
    if len(_ANALYSED) >= 64:
        _ANALYSED.clear()
    _ANALYSED[key] = (group, found)
    return found


def _analyse(group: FusionGroup) -> tuple[Node, Contraction] | str:
    if group.kind is not ScheduleKind.contraction:
        return f"a {group.kind.value} group"
    einsums = [n for n in group.nodes if n.op is Op.EINSUM]
    if len(einsums) != 1:
        return f"{len(einsums)} einsums in one group"
    (e,) = einsums
    inside = set(group.nodes)
    if any(s in inside or is_inlined(s) for s in e.srcs):
        return "an operand is not read from a buffer"
    form = classify(e)
    if isinstance(form, str):
        return form
    after = {e}  # elementwise functions of the einsum, at its shape
    views = set()  # reshapes of those: the same values at the same flat (row-major) places
    for n in group.nodes:
        if n is e or not any(s in after or s in views for s in n.srcs):
            continue
        if any(s in views for s in n.srcs):
            return f"{n.op.value} after a reshape of the einsum"
        if n.op is Op.RESHAPE:
            views.add(n)
        elif not n.op.is_elementwise:
            return f"{n.op.value} after the einsum is not elementwise"
        else:
            after.add(n)
    if any(o not in views and (o not in after or o.type.shape != e.type.shape)
           for o in group.outputs):
        return ("an output is not an elementwise function of the einsum at its shape (or a "
                "reshape of one)")
    return e, form


def stored_value(output: Node) -> Node:
    """The value an accepted group's output holds at the einsum's coordinates: a reshape
    output is stored as its source, at the same flat index."""
    return output.srcs[0] if output.op is Op.RESHAPE else output


# tiles ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Tiles:
    """A work-group computes ``bm x bn`` outputs with ``wx * wy`` work-items; each work-item
    ``sm`` groups of ``vm`` rows (strided by ``wy * vm``) times ``sn`` vectors of ``vn`` columns
    (strided by ``wx * vn``); K advances ``bk`` at a time, ``unroll`` steps per inner loop."""

    wx: int
    wy: int
    vm: int
    sm: int
    vn: int
    sn: int
    bk: int
    unroll: int
    prefetch: bool = False  # load the next K tile into registers while computing this one
    pad: int = 0  # extra elements per local row of an operand copied with a transpose
    # (choose_tiles: bank_padding of the tile rows; kept for sweeps that override it)
    vector: int = 4  # widest global-memory vector load, in elements
    swizzle: int = 0  # tile rows walked together for cache reuse (0: row-major order)
    split: int = 1  # K split over this many work-groups per tile, partials summed by a 2nd kernel
    stream: bool = False  # operands read from global memory where used, not local tiles (CPUs)
    dot: int = 0  # streamed along K in vectors this wide, each output's lanes summed at the end
    # streamed Y rows that are no whole vectors (CPUs): Y's vectors and the outputs' loaded
    # and stored unaligned, the last of a row moved back to end at N (overlapping the one
    # before: the columns they share computed twice, the same way, and stored twice)
    overlap: bool = False

    @property
    def bm(self) -> int:
        return self.wy * self.vm * self.sm

    @property
    def bn(self) -> int:
        return self.wx * self.vn * self.sn

    @property
    def threads(self) -> int:
        return self.wx * self.wy

    def local_bytes(self, itemsize: int) -> int:
        return self.bk * (self.bm + self.bn + 2 * self.pad) * itemsize


def transposing(c: Contraction, side: str) -> bool:
    """Whether operand ``side`` ("x" or "y") is copied to its local tile along K (its K stride
    is the smaller; stride 0 counts as none), i.e. work-items of a copy walk across tile rows."""
    free, k = (c.m.x, c.k.x) if side == "x" else (c.n.y, c.k.y)
    return (k or math.inf) < (free or math.inf)


def bank_padding(row: int, itemsize: int, vector: int, target: TargetProfile) -> int:
    """Elements to add to each ``row``-element row of a local tile whose rows work-items walk
    across, against bank conflicts: on GPUs, the smallest multiple of ``vector`` (so vector
    reads along rows stay aligned) that minimises ``gcd(row words, LOCAL_BANKS)``, how many
    work-items stepping a row apart meet in one bank; 0 elsewhere (CPUs have no banks)."""
    if target.device_type != "gpu":
        return 0

    def ways(pad: int) -> int:
        return math.gcd((row + pad) * itemsize // BANK_BYTES, LOCAL_BANKS)

    return min(range(0, LOCAL_BANKS * vector, vector), key=ways)  # the first of the least


def padded(c: Contraction, bm: int, bn: int) -> int:
    """M x N rounded up to whole ``bm x bn`` tiles."""
    return -(-c.m.size // bm) * bm * -(-c.n.size // bn) * bn


def rows_apart(i: int, threads: int, per_row: int) -> int:
    """Rows between copy slot ``i`` of a work-item (slot ``tid + i * threads``) and its slot 0
    where the work-items span whole rows of ``per_row`` slots, so every slot of a work-item
    lies in its first slot's column (its address plus a constant); else 0 (and for slot 0)."""
    return 0 if i == 0 or threads % per_row else i * threads // per_row


def tile_groups(c: Contraction, bm: int, bn: int) -> int:
    """Work-groups of one ``bm x bn`` tile each over the product (every batch entry)."""
    return c.batch_size * -(-c.m.size // bm) * -(-c.n.size // bn)


def k_split(groups: int, need: float, k: int, min_chunk: int) -> int:
    """The fewest work-groups (a power of two) to share each tile's K so that ``groups``
    tiles make at least ``need`` groups, while K chunks stay at least ``min_chunk`` long."""
    split = 1
    while groups * split < need and k >= 2 * split * min_chunk:
        split *= 2
    return split


def _pow2_at_most(n: int, cap: int) -> int:
    return min(cap, 1 << max(0, n.bit_length() - 1))


# Large tiles (8x8 outputs per work-item) are taken once their groups fill FILL of the compute
# units, and then, as a single wave, with twice the K depth: H200, 512x4096x1024 f32, 128
# groups of 128x128 on 132 units: 27.6 TFLOP/s, 31.4 with bk=32 (torch: 30.9), against 22.8
# for 512 groups of 64x64. Smaller tiles (4x4 per work-item) need every unit filled: at
# 512x1024x4096, 128 groups of 64x64 ran at 12.7 TFLOP/s (7.1 with bk=32), 512 of 32x32 at 17.
# A large tile that still leaves units idle splits K (chunks of at least MIN_SPLIT_K) over
# as many groups as fill them: 512x1024x4096, 32 tiles of 128x128 split in 4.
FILL = 0.9
MIN_SPLIT_K = 512
# When no size fills the device even so, the chosen small tiles split a K of at least LONG_K
# into chunks of at least MIN_SMALL_K: 128x64x1280 as 8 groups of 32x32 ran 0.058 ms, in 16
# chunks 0.016 (torch 0.037); 128x128x2560 0.111 -> 0.023 ms (torch 0.039). Shorter K keeps
# one kernel (a second launch costs more than a few K steps save).
MIN_SMALL_K = 64
LONG_K = 1024
# From SHORT_K, small tiles split K where they fill at most half the units: a group walks K
# in steps of 16, a load latency each, so one or a few groups over a K of a few hundred wait
# more than a second kernel costs; where the groups fill over half the units a split in 2
# does not pay (measured: papers/kernels.md, "Fortieth session")
SHORT_K = 256


def _large(t: Tiles) -> bool:
    """8x8 outputs (or more) per work-item."""
    return t.vm * t.sm >= 8 and t.vn * t.sn >= 8


TINY_THREADS = 256  # a product this small (rounded up to powers of two) is one work-group


def _tiny(c: Contraction, target: TargetProfile) -> Tiles | None:
    """One output per work-item, one work-group covering each batch entry's whole product
    (rows and columns rounded up to powers of two), for a product of at most TINY_THREADS
    outputs: the smallest register tile (32x32, 16 outputs per work-item) would pad it at
    least 4x, and the kernel is launch-bound whatever it does; one output per work-item keeps
    its source (unrolled K steps, one epilogue per accumulator) 16x smaller. Not for a K of
    LONG_K or more, which one work-group would walk alone on one compute unit:
    :func:`choose_tiles` splits it over work-groups."""
    if c.k.size >= LONG_K:
        return None
    wx = 1 << max(0, (c.n.size - 1).bit_length())
    wy = 1 << max(0, (c.m.size - 1).bit_length())
    if wx * wy > min(TINY_THREADS, target.max_work_group_size):
        return None
    bk = min(16, -(-c.k.size // 4) * 4)
    t = Tiles(wx, wy, 1, 1, 1, 1, bk, bk, vector=1)
    return t if t.local_bytes(c.dtype.itemsize) <= target.local_mem_bytes else None


# A side of at most SKINNY (f32 or f16, GPUs) takes a tile that short and 128 long, 4x4 or 8x4
# outputs per work-item, with K split until every compute unit has SKINNY_WAVES groups (chunks
# of at least MIN_SKINNY_K): GEMV-like products are bound by reading the long operand, which
# wants many groups streaming it. Chosen by a sweep of experiments/bench_contraction.py --tiles
# over six skinny f32 shapes on a GPU (papers/kernels.md, "Seventh session"); chunks of at
# least 128 rather than 256 from an H100 sweep of eight ("Thirty-third session": 11x4632x3369
# 0.52x -> 0.78x of torch.compile, 30x2501x7629 0.86x -> 1.00x, the others within 3%; six
# waves slower)
SKINNY = 32
SKINNY_WAVES = 3
MIN_SKINNY_K = 128
# work-items across the short side and 4-element register blocks each, by its padded length
_SKINNY_SHAPES = {8: (2, 1), 16: (4, 1), 32: (4, 2)}


def skinny_sides(m: int, n: int) -> bool:
    """Whether ``m x n`` outputs are of the skinny class: a side of at most :data:`SKINNY`
    against one of at least ``4 SKINNY`` (a tile of 128)."""
    return min(m, n) <= SKINNY and max(m, n) >= 4 * SKINNY


def skinny(c: Contraction, target: TargetProfile) -> Tiles | None:
    """The tiles of an f32 or f16 product (f16 loaded as halves, tiles and sums in f32) with
    M or N at most :data:`SKINNY` on a GPU (see above), or None: the short side padded to 8,
    16 or 32, the long one in tiles of 128 (32 work-items of 4-element columns, or rows); K
    split over as many groups as give each compute unit SKINNY_WAVES, in chunks of at least
    MIN_SKINNY_K; K steps of 32 (16 for a side of 32)."""
    if c.dtype not in (DType.f32, DType.f16) or not skinny_sides(c.m.size, c.n.size):
        return None
    short = min(c.m.size, c.n.size)
    side = max(8, 1 << (short - 1).bit_length())
    across, blocks = _SKINNY_SHAPES[side]
    bk = 32 if side <= 16 else 16
    if c.m.size <= c.n.size:  # bm = side, bn = 128
        t = Tiles(32, across, 4, blocks, 4, 1, bk, bk, True, 0, 4)
    else:  # bm = 128, bn = side
        t = Tiles(across, 32, 4, 1, 4, blocks, bk, bk, True, 0, 4)
    t = replace(t, pad=bank_padding(t.bm, 4, 4, target))
    if t.threads > target.max_work_group_size or t.local_bytes(4) > target.local_mem_bytes:
        return None
    return replace(t, split=k_split(tile_groups(c, t.bm, t.bn),
                                    SKINNY_WAVES * target.compute_units, c.k.size, MIN_SKINNY_K))


STREAM_VECTORS = 8  # widest CPU tile (in vectors) of a product of fewer than 4 rows
DOT_VECTORS = 8  # K of at least this many vectors to sum outputs along K (each sums its lanes)


def _streamed_lanes(c: Contraction, most: int) -> int:
    """The widest vector (at most ``most``) that reads Y straight from memory along N, or 0:
    Y N-contiguous, its K and batch strides and N multiples of it (aligned vector loads)."""
    if c.n.y != 1 or c.dtype not in FLOATS:
        return 0
    lanes = most
    while lanes > 1 and any(v % lanes for v in (c.n.size, c.k.y, *(d.y for d in c.batch))):
        lanes //= 2
    return lanes


# A streamed CPU tile whose accumulators, one K step's B vectors and a broadcast element of A
# outnumber the vector registers (3 rows x 4 vectors on AVX2: 17 of 16) loads each B vector
# just before its FMAs, not all of them first: PoCL then spills no accumulator at each step
# (timed on PoCL, fit and held out: papers/kernels.md, "Forty-eighth session"). False: row by
# row always, as before.
COLUMNWISE = True


def columnwise(t: Tiles, target: TargetProfile) -> bool:
    """Whether a streamed CPU tile ``t`` loads each B vector just before its FMAs
    (:data:`COLUMNWISE`): where its registers outnumber ``target``'s (32 vector registers
    with AVX-512's 64-byte vectors, else 16)."""
    return COLUMNWISE and t.vm * t.sm * t.sn + t.sn + 1 > (
        32 if target.native_vector_bytes >= 64 else 16)


def dot_lanes(c: Contraction, most: int) -> int:
    """``most`` where both operands are K-contiguous floats (each output can be summed along
    K in vectors of that many lanes), else 0."""
    return most if c.k.x == 1 and c.k.y == 1 and c.dtype in FLOATS else 0


def vector_lanes(dtype: DType, target: TargetProfile) -> int:
    """The lanes of the CPU tiles' widest vector of ``dtype``: the device's preferred width."""
    return _pow2_at_most(max(1, target.native_vector_bytes // dtype.itemsize), 16)


def _cpu_tiles(c: Contraction, target: TargetProfile) -> Tiles:
    """CPU tiles: a work-item keeps 24 vector accumulators where the ISA has 32 SIMD registers
    (AVX-512), else 12, as wide as the device prefers. Both operands are read where used
    (``Tiles.stream``: no local tiles, no barriers) when Y's rows give vectors of at least
    half that width along N, or for fewer than 4 rows at any width; else, where both operands
    are K-contiguous (``x @ W.T``) and K is at least DOT_VECTORS vectors, each output is a
    vector along K summed at the end (``Tiles.dot``); else both are staged."""
    widest = vector_lanes(c.dtype, target)
    native = min(widest, 1 << max(0, (c.n.size - 1).bit_length()))  # narrow N: fewer lanes
    fit = _streamed_lanes(c, native)
    stream = fit > 0 and (fit >= native // 2 or c.m.size < 4)
    # Y along N in rows that give no aligned vectors of half the width: streamed all the same,
    # unaligned, the last vector of a row overlapping the one before it (Tiles.overlap)
    overlap = (not stream and native > 1 and c.n.y == 1 and c.n.size >= native
               and c.dtype in FLOATS and c.n.size % native > 0)
    stream = stream or overlap
    lanes = native if overlap else fit if stream else native
    budget = 24 if target.native_vector_bytes >= 64 else 12
    # fewer than 4 rows (GEMV-like, bound by reading Y): all rows in one tile, at most
    # STREAM_VECTORS columns (vectors or single) a work-item, so that they make at least 2
    # groups a compute unit
    few = min(3, c.m.size)

    def across(columns: int) -> int:
        return min(budget // few, STREAM_VECTORS,
                   -(-columns // (2 * max(1, target.compute_units))))

    def items(tm: int) -> int:  # work-items of a group, sharing staged tiles
        return max(1, min(4, c.m.size // tm))

    def least_padded(shapes: list[tuple[int, int]], lanes: int,
                     per_group: Callable[[int], int]) -> tuple[int, int]:
        """The first (rows, vectors) shape that wastes at most 5% more than the least
        wasteful one, counting the rows of whole work-groups of ``per_group(rows)``
        work-items (those past M run their loops too)."""
        columns = -(-c.n.size // lanes)
        shapes = [(tm, min(sn, columns)) for tm, sn in shapes]

        def waste(tm: int, sn: int) -> int:
            return padded(c, tm * per_group(tm), sn * lanes)

        least = min(waste(tm, sn) for tm, sn in shapes)
        return next(s for s in shapes if waste(*s) <= 1.05 * least)

    dot = dot_lanes(c, widest) if not stream else 0
    if dot and c.k.size >= DOT_VECTORS * dot:
        # K-contiguous operands: outputs summed along K
        tm, sn = ((c.m.size, across(c.n.size)) if c.m.size < 4 else least_padded(
            [(4, 6), (6, 4), (8, 3)] if budget == 24 else [(4, 3), (3, 4)], 1, lambda _: 1))
        return Tiles(1, 1, 1, tm, 1, sn, dot, 1, vector=dot, stream=True, dot=dot)
    if c.m.size < 4:
        tm, sn = c.m.size, across(-(-c.n.size // lanes))
    else:
        # then 4 rows (a tile of 1 or 2 rows of a taller product loads a B vector per 1 or 2
        # FMAs: slower on PoCL than 8 rows padded, papers/kernels.md)
        preferred = [(8, 3), (12, 2), (6, 4)] if budget == 24 else [(4, 3), (6, 2), (3, 4)]
        tm, sn = least_padded(preferred + [(4, budget // 4)], lanes, items)
    vm = math.gcd(tm, 16) if math.gcd(tm, 16) in (2, 4, 8, 16) else 1
    # K steps of at most 64 (in fours: the unroll); staged tiles (whose last step is padded
    # with zeros) split K into equal steps, streamed ones peel the rest one at a time
    steps = -(-c.k.size // 64)
    bk = min(64, -(-c.k.size // 4) * 4) if stream else -(-c.k.size // (4 * steps)) * 4
    return Tiles(1, items(tm), vm, tm // vm, lanes, sn, bk, 4, vector=lanes, stream=stream,
                 overlap=overlap)


def choose_tiles(c: Contraction, target: TargetProfile) -> Tiles:
    """Tile sizes for ``c`` on ``target``: from its device type, limits and the problem shape
    (an f16 product's as an f32 one's: its tiles hold f32, its loads take halves)."""
    item = 4 if c.dtype is DType.f16 else c.dtype.itemsize
    if target.device_type == "cpu":
        return _cpu_tiles(c, target)
    tiny = _tiny(c, target) or skinny(c, target)
    if tiny is not None:
        return tiny
    lanes = max(1, 16 // item)  # 16-byte vectors
    per = 8 // lanes if item == 4 else 2  # 8x8 f32 or 4x4 f64 outputs per work-item
    shapes = [Tiles(16, 16, lanes, per, lanes, per, 16, 16, True, 0, lanes, 8),
              Tiles(16, 16, lanes, 1, lanes, 1, 16, 16, True, 0, lanes),
              Tiles(8, 8, lanes, 1, lanes, 1, 16, 16, True, 0, lanes)]  # bm == bn
    candidates = [replace(t, pad=bank_padding(t.bm, item, lanes, target)) for t in shapes]
    fits = [t for t in candidates if t.threads <= target.max_work_group_size
            and t.local_bytes(item) <= target.local_mem_bytes] or [
        Tiles(1, 1, 1, 1, 1, 1, 4, 4, vector=1)]
    actual = c.m.size * c.n.size
    # the first size that fills the device; else the most groups, the larger tile on a tie
    # (256x256x8192: 128x128 in 16 chunks rather than 64 groups of 32x32 over all of K)
    options = []  # (groups, tile area, tiles) of the sizes that pad little enough
    for t in fits:
        groups = tile_groups(c, t.bm, t.bn)
        need = (FILL if _large(t) else 1.0) * target.compute_units
        split = k_split(groups, need, c.k.size, MIN_SPLIT_K) if _large(t) else 1
        if padded(c, t.bm, t.bn) > 1.25 * actual:
            continue
        options.append((groups * split, t.bm * t.bn, replace(t, split=split)))
        if groups * split >= need:
            break
    else:
        options.sort(key=lambda o: (o[0], o[1]))
    # (no options: every size pads M x N past 1.25, the smallest tile)
    groups, _, chosen = options[-1] if options else (
        tile_groups(c, fits[-1].bm, fits[-1].bn), 0, fits[-1])
    units = target.compute_units
    if ((not options or not _large(chosen)) and 0 < groups < units
            and (c.k.size >= LONG_K or (c.k.size >= SHORT_K and 2 * groups <= units))):
        # small tiles (or the smallest), idle units, long K: chunks of >= MIN_SMALL_K
        split = k_split(groups, units, c.k.size, MIN_SMALL_K)
        chosen, groups = replace(chosen, split=split), groups * split
    bk = chosen.bk
    deep = replace(chosen, bk=2 * bk)
    if (_large(chosen) and 1 < groups <= target.compute_units and c.k.size >= 2 * deep.bk
            and deep.local_bytes(item) <= target.local_mem_bytes):
        bk = deep.bk  # one wave, one group per unit: nothing hides the barriers, halve them
    bk = min(bk, -(-c.k.size // 4) * 4)
    return replace(chosen, bk=bk, unroll=bk)


# kernel -----------------------------------------------------------------------------------


def output_coords(c: Contraction, bcoords: list[Expr], row: Expr, col: Expr
                  ) -> tuple[Expr, ...]:
    """The output coordinates of the element at flattened (``row``, ``col``) of ``c``'s
    product (batch coordinates ``bcoords``): what the tiled and tensor-core contractions'
    epilogues read their operands at."""
    out = []
    for cls, i, inner, size in c.coords:
        if cls == "b":
            out.append(bcoords[i])
        elif cls == "1":
            out.append(idx(0))
        else:
            extent = c.m.size if cls == "m" else c.n.size
            flat = div(row if cls == "m" else col, inner)
            out.append(flat if inner * size == extent else mod(flat, size))
    return tuple(out)
