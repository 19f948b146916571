"""CPU products reading Y from a copy: a K-contiguous Y (``x @ W.T``, attention's ``q kᵀ``)
N-contiguous, and any Y of a product of many rows in panels a tile wide.

The tiled contraction streams an N-contiguous Y as vectors along N (``Tiles.stream``), but a
K-contiguous one is staged (copied to local tiles transposed, element by element, between
barriers) or, over a K of at least ``DOT_VECTORS`` vectors, summed along K a vector per
output (``Tiles.dot``); on PoCL both ran slower than the streamed form, the staged one
much slower (papers/kernels.md, "Thirty-seventh session"). Where the product has enough
rows (:func:`pays`), a first kernel (:func:`copy_kernel`) copies Y transposed into
scratch memory, each row of N elements padded to whole vectors (:func:`transposed`: the
layout the product then reads), and the product streams it. Over fewer rows the copy would
cost about what it saves, so they keep the forms above.

A streamed tile reads ``bn`` columns of every row of Y: strided, a cache line or two from
each row. Where the product has :data:`PANEL_ROWS` rows to share the copy and more than
:data:`PANEL_TILES` tiles of N, Y is copied into panels of ``bn`` columns (``K x bn``
contiguous, columns past N repeating the last) and each tile reads its own panel
contiguously (:func:`layout`); a K-contiguous Y copied anyway is copied into panels wherever
N has more than :data:`PANEL_TILES` tiles. Explicit tiles (sweeps) read Y as stored.
"""

from __future__ import annotations

import dataclasses
import math

from accy.kernels import loopnest
from accy.kernels.contraction_plan import (
    DOT_VECTORS,
    FLOATS,
    Contraction,
    Tiles,
    choose_tiles,
    dot_lanes,
    vector_lanes,
)
from accy.kernels.ir import (
    INDEX,
    Call,
    Expr,
    Id,
    Kernel,
    KernelArg,
    Lane,
    Let,
    Stmt,
    Var,
    VectorLoadAt,
    VectorStore,
    add,
    div,
    idx,
    mod,
    mul,
)
from accy.plans import FusionGroup, KernelOutline, LaunchGeometry, ScheduleKind
from accy.target import TargetProfile

# rows (M) a product needs for Y to be copied transposed first: the copy costs about the same
# whatever M, the time it saves grows with M, less where Y would be summed along K (K of
# DOT_VECTORS vectors) than where it would be staged (PoCL: papers/kernels.md,
# "Thirty-seventh session")
TRANSPOSE_ROWS = 32
TRANSPOSE_ROWS_DOT = 256
TRANSPOSED_Y = "scratch_yt"  # the scratch memory copy_kernel writes
# work-items a work-group of the copy, at most (a divisor of their count): PoCL runs a group's
# work-items as loops, a group at a time per core; one-item groups cost a launch each
COPY_ITEMS = 64
# rows (M) and tiles of N a streamed product needs for Y to be copied into panels a tile wide
# first (PANEL_ROWS None: never): each tile then reads its K x bn panel contiguously, not bn
# of every row of Y; over fewer rows the copy costs about what the panels save, over a
# narrow N they save nothing (A/Bs on PoCL: papers/kernels.md, "Forty-eighth session")
PANEL_ROWS: int | None = 256
PANEL_TILES = 4


def pays(c: Contraction, target: TargetProfile) -> bool:
    """Whether ``c`` on ``target`` reads Y through a transposed copy: a CPU, floats, Y
    K-contiguous (and not N-contiguous too), K of at least a vector, and at least
    :data:`TRANSPOSE_ROWS` rows, or :data:`TRANSPOSE_ROWS_DOT` where the product would
    otherwise sum along K (both operands K-contiguous, K of ``DOT_VECTORS`` vectors)."""
    lanes = vector_lanes(c.dtype, target)
    if not (target.device_type == "cpu" and c.dtype in FLOATS and c.k.y == 1 and c.n.y != 1
            and c.k.size >= lanes > 1):
        return False
    summed = dot_lanes(c, lanes) and c.k.size >= DOT_VECTORS * lanes
    return c.m.size >= (TRANSPOSE_ROWS_DOT if summed else TRANSPOSE_ROWS)


def transposed(c: Contraction, target: TargetProfile, width: int = 0) -> Contraction:
    """``c`` with Y as :func:`copy_kernel` writes it: Y's batch dimensions outside (row-major
    in their order), then panels of ``width`` columns (default: one, N padded to whole
    vectors), each K rows of ``width`` contiguous elements."""
    lanes = vector_lanes(c.dtype, target)
    width = width or -(-c.n.size // lanes) * lanes
    stride, batch = -(-c.n.size // width) * width * c.k.size, []
    for d in reversed(c.batch):
        batch.append(dataclasses.replace(d, y=stride) if d.y else d)
        stride *= d.size if d.y else 1
    return dataclasses.replace(c, batch=tuple(reversed(batch)),
                               n=dataclasses.replace(c.n, y=1),
                               k=dataclasses.replace(c.k, y=width))


def layout(c: Contraction, target: TargetProfile, tiles: Tiles | None
           ) -> tuple[Contraction, Tiles, int]:
    """The contraction the product of ``c`` reads, its tiles (``tiles``, else chosen) and the
    width of the panels :func:`copy_kernel` copies Y into first (0: none, Y read as stored).
    A streamed product of more than :data:`PANEL_TILES` tiles of N copies Y into panels a
    tile wide (where that is whole vectors of the copy) where Y is K-contiguous and
    :func:`pays` for its copy anyway, or is N-contiguous in whole vectors and the product has
    at least :data:`PANEL_ROWS` rows; else a K-contiguous Y that :func:`pays` is copied into
    one panel, N padded to whole vectors."""
    if tiles is not None:
        return c, tiles, 0
    lanes = vector_lanes(c.dtype, target)
    copied = pays(c, target)
    rows = transposed(c, target) if copied else c
    t = choose_tiles(rows, target)
    if (PANEL_ROWS is not None and c.n.size > PANEL_TILES * t.bn and t.stream
            and not (t.dot or t.overlap) and t.split == 1 and t.bn % lanes == 0
            and (copied or c.m.size >= PANEL_ROWS and c.n.y == 1 and c.n.size % lanes == 0)):
        return transposed(c, target, t.bn), t, t.bn
    return rows, t, rows.k.y if copied else 0


def copy_kernel(c: Contraction, y: KernelArg, width: int, group: FusionGroup,
                outline: KernelOutline, kind: ScheduleKind, target: TargetProfile
                ) -> tuple[Kernel, KernelArg]:
    """The kernel copying Y (argument ``y``) of ``c`` into panels of ``width`` columns as
    :func:`transposed` lays them out, and that scratch as the product reads it. Columns past
    N repeat the last (the product reads them, never stores what they give). A K-contiguous Y
    moves in blocks of ``lanes x lanes`` a work-item: a vector along K from each of ``lanes``
    columns, then a vector along N to each of ``lanes`` rows of K; the last block of K moves
    back to end at K (it rewrites rows the one before wrote, with the same values). An
    N-contiguous Y (whole vectors) moves a row of a panel a work-item, in vectors (those past
    N read the last one)."""
    lanes = vector_lanes(c.dtype, target)
    panels = -(-c.n.size // width)
    per = width // lanes  # vectors a panel row
    blocks, kblocks = panels * per, -(-c.k.size // lanes) if c.k.y == 1 else c.k.size
    across = blocks if c.k.y == 1 else panels  # a work-item's vectors, or panel rows
    batch = [d for d in c.batch if d.y]
    entries = math.prod(d.size for d in batch)
    items = entries * kblocks * across
    gid, k0 = Var("gid"), Var("k0")
    body: list[Stmt] = [Let("gid", INDEX, Id("global", 0))]
    k0_of: Expr = mod(gid, kblocks)
    if c.k.y == 1:
        k0_of = mul(k0_of, idx(lanes))
        if c.k.size % lanes:
            k0_of = Call("min", (k0_of, idx(c.k.size - lanes)))
    body += [Let("k0", INDEX, k0_of), Let("nb", INDEX, mod(div(gid, kblocks), across)),
             Let("entry", INDEX, div(gid, kblocks * across))]
    rest: Expr = Var("entry")
    src: Expr = k0 if c.k.y == 1 else mul(k0, idx(c.k.y))
    for i, d in reversed(list(enumerate(batch))):
        body.append(Let(f"b{i}", INDEX, mod(rest, d.size) if i else rest))
        rest = div(rest, d.size)
        src = add(src, mul(Var(f"b{i}"), idx(d.y)))
    body.append(Let("src", INDEX, src))

    def at(k: Expr, panel: Expr, vector: Expr) -> Expr:  # a vector of row k of a panel
        panel = add(mul(Var("entry"), idx(panels)), panel)
        return add(mul(add(mul(panel, idx(c.k.size)), k), idx(per)), vector)

    rows = []
    for i in range(lanes if c.k.y == 1 else per):
        if c.k.y == 1:  # column nb * lanes + i, lanes of K from k0
            n: Expr = add(mul(Var("nb"), idx(lanes)), idx(i))
            n = Call("min", (n, idx(c.n.size - 1))) if blocks * lanes > c.n.size else n
            from_y = add(Var("src"), mul(n, idx(c.n.y)))
        else:  # vector i of panel nb's row k0
            first: Expr = add(mul(Var("nb"), idx(width)), idx(i * lanes))
            if panels * width > c.n.size:
                first = Call("min", (first, idx(c.n.size - lanes)))
            from_y = add(Var("src"), first)
        body.append(Let(f"r{i}", c.dtype, VectorLoadAt(y.name, from_y, lanes), lanes=lanes))
        rows.append(Var(f"r{i}"))
    if c.k.y == 1:
        body += [VectorStore(TRANSPOSED_Y, at(add(k0, idx(j)), div(Var("nb"), per),
                                              mod(Var("nb"), per)), c.dtype,
                             tuple(Lane(r, j) for r in rows)) for j in range(lanes)]
    else:
        body += [VectorStore(TRANSPOSED_Y, at(k0, Var("nb"), idx(i)), c.dtype,
                             tuple(Lane(r, j) for j in range(lanes))) for i, r in enumerate(rows)]
    out = KernelArg(TRANSPOSED_Y, c.dtype, True, -1, entries * panels * width * c.k.size)
    kernel = Kernel(f"{outline.entry}_yt", outline.work_item, kind, group.domain, (y, out),
                    tuple(body), LaunchGeometry((items,), (math.gcd(items, COPY_ITEMS),)),
                    loopnest.implemented_ops(group))
    return kernel, dataclasses.replace(out, is_output=False)
