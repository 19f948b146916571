"""CPU products whose Y is K-contiguous (``x @ W.T``, attention's ``q kᵀ``), read N-contiguous.

The tiled contraction streams an N-contiguous Y as vectors along N (``Tiles.stream``), but a
K-contiguous one is staged (copied to local tiles transposed, element by element, between
barriers) or, over a K of at least ``DOT_VECTORS`` vectors, summed along K a vector per
output (``Tiles.dot``); on PoCL both ran slower than the streamed form, the staged one
much slower (papers/kernels.md, "Thirty-seventh session"). Where the product has enough
rows (:func:`pays`), a first kernel (:func:`copy_kernel`) copies Y transposed into
scratch memory, each row of N elements padded to whole vectors (:func:`transposed`: the
layout the product then reads), and the product streams it. Over fewer rows the copy would
cost about what it saves, so they keep the forms above. Explicit tiles (sweeps) read Y as
stored.
"""

from __future__ import annotations

import dataclasses
import math

from accy.kernels import loopnest
from accy.kernels.contraction_plan import (
    DOT_VECTORS,
    FLOATS,
    Contraction,
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


def transposed(c: Contraction, target: TargetProfile) -> Contraction:
    """``c`` with Y as :func:`copy_kernel` writes it: Y's batch dimensions outside (row-major
    in their order), then K, then N contiguous, each row of N padded to whole vectors."""
    lanes = vector_lanes(c.dtype, target)
    row = -(-c.n.size // lanes) * lanes
    stride, batch = row * c.k.size, []
    for d in reversed(c.batch):
        batch.append(dataclasses.replace(d, y=stride) if d.y else d)
        stride *= d.size if d.y else 1
    return dataclasses.replace(c, batch=tuple(reversed(batch)),
                               n=dataclasses.replace(c.n, y=1),
                               k=dataclasses.replace(c.k, y=row))


def copy_kernel(c: Contraction, y: KernelArg, group: FusionGroup, outline: KernelOutline,
                kind: ScheduleKind, target: TargetProfile) -> tuple[Kernel, KernelArg]:
    """The kernel copying Y (argument ``y``) of ``c`` as :func:`transposed` lays it out into
    scratch memory, and that scratch as the product reads it. A work-item moves a block of
    ``lanes x lanes``: a vector along K from each of ``lanes`` rows of N, then a vector along N
    to each of ``lanes`` rows of K. The last block of K moves back to end at K (it rewrites
    rows the one before wrote, with the same values); rows past N repeat the last (they fill
    the padding, which the product does not read)."""
    lanes = vector_lanes(c.dtype, target)
    blocks, kblocks = -(-c.n.size // lanes), -(-c.k.size // lanes)
    batch = [d for d in c.batch if d.y]
    items = math.prod(d.size for d in batch) * kblocks * blocks
    gid, k0 = Var("gid"), Var("k0")
    body: list[Stmt] = [Let("gid", INDEX, Id("global", 0))]
    k0_of: Expr = mul(mod(gid, kblocks), idx(lanes))
    if c.k.size % lanes:
        k0_of = Call("min", (k0_of, idx(c.k.size - lanes)))
    body += [Let("k0", INDEX, k0_of), Let("nb", INDEX, mod(div(gid, kblocks), blocks)),
             Let("entry", INDEX, div(gid, kblocks * blocks))]
    rest: Expr = Var("entry")
    src: Expr = k0
    for i, d in reversed(list(enumerate(batch))):
        body.append(Let(f"b{i}", INDEX, mod(rest, d.size) if i else rest))
        rest = div(rest, d.size)
        src = add(src, mul(Var(f"b{i}"), idx(d.y)))
    body.append(Let("src", INDEX, src))
    rows = []
    for i in range(lanes):
        n: Expr = add(mul(Var("nb"), idx(lanes)), idx(i))
        if c.n.size % lanes:
            n = Call("min", (n, idx(c.n.size - 1)))
        body.append(Let(f"r{i}", c.dtype, VectorLoadAt(y.name, add(Var("src"), mul(
            n, idx(c.n.y))), lanes), lanes=lanes))
        rows.append(Var(f"r{i}"))
    for j in range(lanes):  # row k0 + j of the copy: (entry, k, nb) in vectors
        at = add(mul(add(mul(Var("entry"), idx(c.k.size)), add(k0, idx(j))), idx(blocks)),
                 Var("nb"))
        body.append(VectorStore(TRANSPOSED_Y, at, c.dtype, tuple(Lane(r, j) for r in rows)))
    out = KernelArg(TRANSPOSED_Y, c.dtype, True, -1, items // kblocks * c.k.size * lanes)
    kernel = Kernel(f"{outline.entry}_yt", outline.work_item, kind, group.domain, (y, out),
                    tuple(body), LaunchGeometry((items,), (math.gcd(items, COPY_ITEMS),)),
                    loopnest.implemented_ops(group))
    return kernel, dataclasses.replace(out, is_output=False)
