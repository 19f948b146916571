"""The tiles of :mod:`accy.kernels.attention_mma` (attention on tensor cores): which groups it
takes under which kind (:data:`KINDS`: ``tf32``, ``3xtf32``, ``f16``) and with what work-group
form, key tile and local buffers (:func:`plan`), and the kind kernelization's precision gives
a group (:func:`kind_for`, also asked by fusion planning)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from accy.ir.ops import Op
from accy.ir.types import DType
from accy.kernels.attention_plan import Attention, Side, analyse, triangle
from accy.kernels.ir import Bin, Expr, div, idx, mod
from accy.plans import FusionGroup, ScheduleKind
from accy.target import (
    CP_ASYNC,
    F16_MMA,
    TF32_MMA,
    WGMMA_F16,
    TargetProfile,
    resolve_precision,
)

# (warps per work-group, m16 fragment rows per warp), the first whose registers fit
# (MAX_REGISTERS) and whose work-groups the target and the queries fill, per policy. Two rows a
# warp halve the K and V fragment loads per mma. The order is the sweep's (papers/kernels.md,
# "Twelfth session"): 8 warps of two rows first for tf32, 4 of two for 3xtf32 (twice the query
# registers) and f16 (8 of two, or key tiles of 32, lost). The compiler gives the two-row f16
# and 3xtf32 forms every register a lane may have (3xtf32 spilling some, faster all the
# same). 3xtf32 with key tiles split as copied (Tiles.split), where two rows do not fit: 8
# warps of one row, 1.2-1.4x faster than 4 on an H100 at 72-120 features (4 of two stay
# first at 64; papers/kernels.md, "Thirty-second session")
FORMS = {"tf32": ((8, 2), (4, 2), (4, 1)), "3xtf32": ((4, 2), (8, 1), (4, 1)),
         "f16": ((4, 2), (4, 1))}
# fragment and accumulator registers a lane may hold (of 255): the most a form the sweep found
# faster held (3xtf32, two rows of 64 features: 224); one row of 128 features holds at most 208
MAX_REGISTERS = 224
# keys per local tile, the largest whose two buffers fit
KEY_TILES = {"tf32": (32, 16), "3xtf32": (32, 16), "f16": (64, 32, 16)}
MAX_FEATURES = 128  # head or value features (registers: query fragments and accumulators)
# wgmma attention: warpgroups of 64 queries (one fragment row a warp), two or one a work-group
WG_FORMS = ((8, 1), (4, 1))
POLICIES = ("tf32", "3xtf32")  # f32 attention; f16 attention takes "f16" under any policy
KINDS = (*POLICIES, "f16")


def local_row16(features: int) -> int:
    """f16: local row length of a K or V tile row in words (features + 8 halves: an odd
    number of 16-byte chunks, so the 8 rows of an ``ldmatrix`` matrix fall in distinct
    banks)."""
    return (features + 8) // 2


def local_row(features: int) -> int:
    """Local row length of a K or V tile row: 4 words past a multiple of 8, so the rows of a
    warp's fragment loads (8 rows at lane offsets ``t``, or 4 row pairs at ``g``) fall in
    distinct banks."""
    return features + 4


def split_rows(d: int, dv: int) -> dict[str, int]:
    """Split tiles (:attr:`Tiles.split`): words a K row (a key) and a V row (a pair of keys)
    take. Each 16-byte group holds the big parts of two elements, then their small parts:
    the register pair an ``mma`` B fragment takes, in one 16-byte load. K's groups hold
    features ``c`` and ``c + 4`` (``c % 8 < 4``), 4 to each 8 features; V's a feature of
    keys ``2p`` and ``2p + 1``. 16-byte loads are served 8 lanes at a time: a warp's K loads
    (rows ``g``, group ``t``) fall in distinct banks for rows 16 words past a multiple of 32,
    V's (row pairs ``t``, group ``g``) for rows 8 past one."""
    return {"k": 2 * d + (16 if d % 16 == 0 else 0), "v": 4 * dv + 8}


def split_bytes(a: Attention, bk: int) -> int:
    """Bytes of one stage of split K and V tiles of ``bk`` keys."""
    rows = split_rows(a.d, a.dv)
    return 4 * (bk * rows["k"] + bk // 2 * rows["v"])


@dataclass(frozen=True)
class Tiles:
    bk: int  # keys per local tile
    warps: int  # per work-group, 16 queries each
    k_lanes: int  # vector width of the copies of K's rows (1: scalar)
    v_lanes: int
    stages: int = 2  # local buffers (f16: cp.async pipeline depth)
    rows: int = 1  # m16 fragment rows (16 queries each) per warp, sharing its K and V loads
    sums: bool = False  # f16 mma.sync: the row sums as products against ones (see plan)
    lazy: bool = False  # the rescale skipped where no row's maximum moved far (see plan)
    # 3xtf32: the local K and V tiles hold each element's big and small TF32 parts (a pair of
    # words: :func:`split_rows`), split once by the work-item that copies it in, not by each
    # of the warps that read it (8 instructions an element, nearly half a tile's work: see plan)
    split: bool = False

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def queries(self) -> int:
        """Queries per work-group: ``rows`` m16 fragment rows per warp."""
        return 16 * self.rows * self.warps


def _lanes(side: Side, features: int) -> int:
    return 4 if side.feature == 1 and features % 4 == 0 else 1


def plan(group: FusionGroup, target: TargetProfile, kind: str = "3xtf32",
         wgmma: bool = False) -> tuple[Attention, Tiles] | str:
    """The attention and tiles of a group the generator of ``kind`` (:data:`KINDS`) takes,
    or why not; ``wgmma``: f16 on Hopper's wgmma (:mod:`accy.kernels.attention_wgmma`:
    warpgroups of 64 queries, one fragment row a warp, K and V tiles as core matrices)."""
    if group.kind is not ScheduleKind.contraction:
        return f"a {group.kind.value} group"
    f16 = kind == "f16"
    if (F16_MMA if f16 else TF32_MMA) not in target.tensor_cores:
        return (f"the target has no {'f16' if f16 else 'TF32'} tensor cores "
                "(TargetProfile.tensor_cores)")
    if wgmma and not (f16 and WGMMA_F16 in target.tensor_cores):
        return "wgmma attention takes f16 on targets whose probe ran wgmma (WGMMA_F16)"
    candidates = WG_FORMS if wgmma else FORMS[kind]
    forms = [f for f in candidates if 32 * f[0] <= target.max_work_group_size]
    if not forms:
        return f"work-groups of {32 * candidates[-1][0]} work-items exceed the target"
    a = analyse(group.nodes, group.outputs, (DType.f16,) if f16 else (DType.f32,))
    if isinstance(a, str):
        return a
    step = 16 if wgmma else 8  # f16 on mma.sync: 16-byte rows, padded in the kernel
    d, dv = padded_features(a.d, f16), padded_features(a.dv, f16)
    if a.d % step or a.dv % step or max(d, dv) > MAX_FEATURES:
        return (f"head and value features {a.d}, {a.dv}: multiples of {step} up to "
                f"{MAX_FEATURES} take tensor cores")
    if f16:  # K and V rows copied by cp.async: 16 aligned bytes at a time
        if CP_ASYNC not in target.tensor_cores:
            return "f16 attention copies by cp.async, which the target's probe did not find"
        if any(s.feature != 1 or s.seq % 8 or any(b % 8 for b in s.batch) for s in (a.k, a.v)):
            return "K or V rows are not contiguous, 16-byte aligned f16 rows"

    def tile_bytes(bk: int) -> int:
        if wgmma:  # core matrices, unpadded
            return 2 * bk * (a.d + a.dv)
        return (4 * bk * (local_row16(d) + local_row16(dv)) if f16
                else 4 * bk * (local_row(a.d) + local_row(a.dv)))

    fitting = [bk for bk in KEY_TILES[kind] if 2 * tile_bytes(bk) <= target.local_mem_bytes]
    if not fitting:
        return "two key tiles do not fit local memory"
    # fewer queries a work-group where more would leave some of them idle
    bk = fitting[0]
    # 3xtf32 splits K and V into big and small parts in the tiles where their twice as many
    # words fit the same key tile: in the local memory the device reports, or in half of what
    # its static arrays may take (so two work-groups, as many as their registers allow, share
    # a multiprocessor). Split as read, each element is split by each of the warps (four
    # instructions the big part, four the small): ptxas for sm_90 gave those splits 1,024 of
    # a tile's 2,288 instructions a warp at d 64 (384 mma); split as copied, 1,609
    room = max(target.local_mem_bytes, target.static_local_bytes // 2)
    split = kind == "3xtf32" and 2 * split_bytes(a, bk) <= room
    forms = [f for f in forms if registers(a, kind, bk, f[1]) <= MAX_REGISTERS] or forms[-1:]
    w, rows = next((f for f in forms if a.nq >= 16 * f[0] * f[1]), forms[-1])
    stages = 3 if f16 and 3 * tile_bytes(bk) <= target.local_mem_bytes else 2
    # f16 on mma.sync: each row's sum of probabilities by the tensor cores (P against a B of
    # ones: the f32 sum of the f16 probabilities P V multiplies) where their 4 accumulators a
    # fragment row fit the budget (at d 128 they crowd the two-row form and were slower:
    # papers/kernels.md, "Twenty-third session"); wgmma would need a local tile of ones
    sums = f16 and not wgmma and registers(a, kind, bk, rows) + 4 * rows <= MAX_REGISTERS
    # a warp skips a tile's rescale of O where no row's maximum rose by over 2^RESCALE in exp,
    # where those multiplies outnumber the tile's exponentials: with fewer (d 64, 64-key f16
    # tiles) the branch, which the softmax's code cannot move across, cost more than it saved
    return a, Tiles(bk, w, _lanes(a.k, a.d), _lanes(a.v, a.dv), stages, rows, sums, a.dv > bk,
                    split)


def registers(a: Attention, kind: str, bk: int, rows: int) -> int:
    """Fragment and accumulator registers a lane holds for ``rows`` fragment rows: the query
    fragments (3xtf32: big and small parts), the scores of a key tile and the outputs."""
    step = 16 if kind == "f16" else 8
    query = padded_features(a.d, kind == "f16") // step * 4 * (2 if kind == "3xtf32" else 1)
    return rows * (query + 4 * (bk // 8) + 4 * (a.dv // 8))


def padded_features(n: int, f16: bool) -> int:
    """Features as the f16 kernel's tiles and query registers hold them: rounded up to a
    multiple of 16, the K of one m16n8k16 (the rest of each row zeros, or for V unread); f32
    as they are."""
    return -(-n // 16) * 16 if f16 else n


def kind_for(group: FusionGroup, target: TargetProfile, precision: str = "f32") -> str | None:
    """The kind kernelization under ``precision`` builds ``group`` with (f16 attention:
    ``f16``; f32: the policy ``precision`` resolves to, if a TF32 one), or None."""
    for kind in ("f16", resolve_precision(precision, target)):
        if kind in KINDS and not isinstance(plan(group, target, kind), str):
            return kind
    return None


# log2 of how far a row's probabilities may exceed 1 before its running maximum moves (and the
# sums and outputs are rescaled); f16 probabilities, f32 sums and outputs hold 2^8 easily
RESCALE = 8.0


def folded_scale(a: Attention) -> float | None:
    """``c`` where the softmax reads ``c S`` in f32 (S the scores, cast from f16 or not; ``c``
    a positive constant): the f16 kernel's exponent then takes ``c`` in its coefficient (the
    maxima in units of S: ``c`` > 0 keeps their order), one multiply a score fewer. None for
    any other chain (masks, biases, an f16 product), which is evaluated as it is."""
    x = a.softmax.srcs[0]
    if triangle(a) is not None:  # the causal mask as an index comparison: its x
        x = x.srcs[1]
    if x.op is not Op.MUL or x.type.dtype is not DType.f32:
        return None
    for s, c in (x.srcs, x.srcs[::-1]):
        if s.op is Op.CAST:
            s = s.srcs[0]
        if s is a.scores and c.op is Op.CONSTANT and c.type.size == 1:
            value = float(np.asarray(c.value).reshape(-1)[0])
            return value if 0 < value < math.inf else None
    return None


# causal attention's query blocks heaviest first (the last queries read the most keys), all
# batches' at once, so the grid's tail is the lightest blocks
HEAVY_FIRST = True


def group_order(grp: Expr, batches: int, tiles_q: int, causal: bool) -> tuple[Expr, Expr]:
    """(flat batch index, query block) of work-group ``grp`` of ``batches x tiles_q``: the
    query blocks of one batch index in turn, or where ``causal`` and :data:`HEAVY_FIRST` the
    last query block of every batch index first."""
    if causal and HEAVY_FIRST:
        return mod(grp, batches), Bin("-", idx(tiles_q - 1), div(grp, batches))
    return div(grp, tiles_q), mod(grp, tiles_q)
