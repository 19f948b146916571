"""wgmma-f16 and wgmma-tf32 with both operands in local memory, both copied by TMA, in deep
stages.

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

Under ``kernelization{precision=tf32}`` the same kernel runs TF32's ``wgmma m64nBNk8``
(:class:`_WgmmaSsTf32`, marker ``SSTEPT``): a stage row is then 32 f32 of K (the same 128
bytes, so the same stages, descriptors and advances, K steps of 32), copied by tensor maps of
data type TFLOAT32, which round each f32 to TF32 on the way (to nearest: the device probe
checks it, ``TMA_TF32``), so the ``tf32`` policy's error bound holds with no rounding pass.
TF32 ``wgmma`` reads B only K-major: B stored along K (``x @ W.T``) is copied as it is; B
stored along N (``x @ W``) is first transposed into scratch memory, N x K, by a kernel of its own
(:func:`transpose_b`: a read and a write of B, a few percent of the product's time at 4096^3),
which the product then copies from (:func:`b_transposed`).

Where an f16 product whose tiles cover it exactly has more tiles than work-groups the compute
units hold (:func:`walks`), the kernel walks tiles (:meth:`_WgmmaSs.walk`): that
many work-groups, each taking every ``workers``-th tile, the stage ring running over all its
tiles' K steps, so the copies of the next tile's first steps are in flight while a tile's last
products finish and its results are stored (through a buffer of its own, the stages being
the copies'). That hides what a short K exposes, and the kernel is then taken from K
:data:`SHORT_K` (:func:`forms_for`).

Taken by ``wgmma.build`` (``wgmma_tf32.build``) where :func:`forms_for` lists forms, in the
form ``wgmma.plan_for`` scores best of them.
"""

from __future__ import annotations

import dataclasses
import math

from accy.ir.types import DType
from accy.kernels import loopnest, tma, wgmma
from accy.kernels.contraction_plan import Contraction, tile_groups
from accy.kernels.ir import (
    INDEX,
    Assign,
    Barrier,
    Bin,
    Cast,
    Expr,
    For,
    Id,
    If,
    InlineAsm,
    Kernel,
    KernelArg,
    LaunchGeometry,
    Let,
    Lit,
    Load,
    LocalArray,
    Stmt,
    Store,
    Var,
    add,
    all_of,
    div,
    idx,
    mod,
    mul,
)
from accy.kernels.mma_plan import MmaTiles, along_k, balance, batch_of, tile_of
from accy.kernels.mma_store import STAGE_PAD
from accy.kernels.split_k import chunk_k
from accy.kernels.wgmma import _Wgmma, split_tiles, tiles
from accy.kernels.wgmma_ptx import WAIT0, WAIT1, descriptor_bits, sstep
from accy.kernels.wgmma_tma import ATOM, Geometry, _WgmmaTma, i32
from accy.target import TMA_COPY, TMA_TF32, TargetProfile

ROW = 128  # bytes of a stage row (A's and a K-major B's along K, an MN-major B's along N)
BK = 64  # K a step under f16: one 128-byte swizzled row of halves (32 f32 under tf32)
WG_ROWS = 64 * ROW  # bytes of a warpgroup's 64 rows of A in a stage
BLOCK = BK * ROW  # bytes of a 64-column block of an MN-major B in a stage (BK rows)
K_MAJOR = descriptor_bits(16, 8 * ROW, True)  # 8-row atoms 1 KiB apart (A; B along K)
MN_MAJOR = descriptor_bits(BLOCK, ATOM, True)  # blocks BLOCK apart, atoms ATOM (B along N)
# Selection (wgmma.plan): the tilings this kernel builds, (warpgroups, columns, stages), and
# their rates for K up to LONG_K and past it: f16's on wgmma.TMA_RATES's scale, from their
# times against the B-by-TMA kernel's and each other's (papers/kernels.md, "Twentieth
# session"); TF32's on wgmma.RATES's, against the register-A TF32 kernel ("Twenty-first").
# 128x128 tiles in three stages leave room for two work-groups a compute unit
# (:func:`resident`), which hides one's stores behind the other's products: faster than four
# stages everywhere, and than 128x256 tiles up to K 1024. 256x128 tiles measured slower than
# 128x256 ones of the same count everywhere and are not tried.
FORMS = ((2, 256, 4), (2, 128, 3))
RATES = {tma.F16: {(2, 256, 4): (2.65, 2.65), (2, 128, 3): (2.75, 2.5)},
         tma.TF32: {(2, 256, 4): (3.0, 4.1), (2, 128, 3): (3.1, 3.5)}}
LONG_K = 1024
# K of at least MIN_K: f16's four stages of 64 fill with K 256 and the B-by-TMA kernel (K
# steps of 32) was faster there; from K 512 this one was
MIN_K = {tma.F16: 512, tma.TF32: 256}
ENABLED = True  # off: wgmma-f16 keeps A in registers everywhere (ablations, sweeps)
# each work-group walks tiles (as many work-groups as the compute units hold), its copies
# running ahead into the next tile's steps while it stores the last (:meth:`_WgmmaSs.walk`):
# None where :func:`walks` says (slower with a tile each: its stores go through a smaller
# buffer), True / False always / never (sweeps, ablations)
PERSISTENT: bool | None = None
# K of at least SHORT_K where the kernel walks tiles (below MIN_K): its copies of the next
# tiles' steps overlap the stores, which a short K exposes (papers/kernels.md, "Twenty-first")
SHORT_K = 64
# f16 tilings of at least MANY_WAVES waves of work-groups are scored as if their last wave
# were full: 128x256 tiles whose last wave held a few of them were faster than 128x128 tiles
# that filled their last wave, wherever they made at least 5 waves; at about 4 either could
# win (papers/kernels.md, "Thirty-seventh session")
MANY_WAVES = 5
# f16 tiles of 128 columns whose K is split (few tiles: the units are filled by K chunks, not
# by tiles) take as many stages as one work-group a unit holds, up to SPLIT_STAGES, the K
# split again for that one: each work-group streams a longer chunk further ahead, at
# SPLIT_GAIN times the form's rate. Against three stages, two a unit (and 128x256 tiles):
# 256x256x65536 and 512x512x32768 10-11% faster, 1024x1024x8192 within 1% (papers/kernels.md,
# "Thirty-eighth session"). 0: three stages.
SPLIT_STAGES = 6
SPLIT_GAIN = 1.1
# f16 128x128 tiles unsplit, no more work-groups than units (alone on their units) take as
# many stages as one a unit holds, up to LONE_STAGES (0: three); H100, 6: 1.01x, held out too
LONE_STAGES = 0
# each step's wgmma left in flight while the next's are issued (wait_group 1, CUTLASS's way);
# False: each waits for its own. H100: 0.99x on lone tiles, 0.82x on many (4096^2x1024: 0.58x)
OVERLAP = False
# f16 tilings over a K of at most SPLIT_K_F16 split it (wgmma.split_tiles) only where the
# forms' most tiles (128x128) would leave at least half the compute units idle too
# (wgmma.SPLIT_IDLE), not only the tiling's own: where 128x128 tiles unsplit fill more than
# half, splitting 128x256 tiles in two ran their product kernel no faster (the partial sums'
# kernel lost), and 2.2-3.9x slower reading a B transposed first. H100, 40 split products of
# K 1056-4058: unsplit faster at all 33 whose 128x128 tiles filled 72-132 of 132 units
# (1.02-2.56x), split faster at all 7 that filled 40-66 (1.03-2.2x); over longer K the split
# held (5504-29298: unsplit 0.47-0.95x). papers/kernels.md, "Forty-fifth session"
SPLIT_K_F16 = 4096
# 128x256 tiles split over K behind a K-major B (f16 stored N x K or transposed first; TF32
# always): not taken, the 128x128 form's tiling is (timed faster: papers/kernels.md, 45-53rd)
SPLIT_WIDE_KMAJOR = False
# an f16 B whose rows fit no tensor map is transposed first (reads) for products of at least
# TRANSPOSE_MIN_M rows; fewer rows read B about once, so the transpose's read and write of B
# cost more than the copies of mma-f16 (4-byte ones) it saves. H100, f16 products of 79-273
# rows and K 600-30000: the fit set's 11 and the held-out set's 11 all faster without the
# transpose (1.34x, 1.20x); from 285 rows either way (0.48-2.08x), transposing 1.02x and
# 1.10x better in geometric mean: papers/kernels.md, "Forty-fourth session"
TRANSPOSE_MIN_M = 256
C_ROWS = 16  # rows of the tile a pass of the walking form's stores (one warp's fragment row)


def stage_bytes(t: MmaTiles) -> int:
    return (t.bm + t.bn) * ROW


def local_bytes(t: MmaTiles, stage: int | None = None) -> int:
    """Declared local memory: the stages (``stage`` bytes each), an aligning atom, barriers."""
    return t.stages * (stage_bytes(t) if stage is None else stage) + ATOM + 16 * t.stages


def form_tiles(form: tuple[int, int, int]) -> MmaTiles:
    """wgmma-f16's tiles of ``form`` (warpgroups, columns, stages)."""
    return dataclasses.replace(tiles(form[0], form[1]), stages=form[2])


def rate(form: tuple[int, int, int], k: int, dtype: int = tma.F16) -> float:
    """``form``'s rate for a contraction of ``k`` with operands of ``dtype`` (tma's codes)."""
    return RATES[dtype][form][k > LONG_K]


def resident(t: MmaTiles, target: TargetProfile, walking: bool = False) -> int:
    """Work-groups of tiles ``t`` a compute unit holds by local memory (its static local
    memory, the most one work-group may declare, taken as the unit's); ``walking``: with the
    walking form's store buffer of :data:`C_ROWS` f32 rows."""
    extra = C_ROWS * (t.bn + STAGE_PAD) * 4 if walking else 0
    return max(1, target.group_local_bytes // (local_bytes(t) + extra))


def walks(c: Contraction, t: MmaTiles, target: TargetProfile, dtype: int = tma.F16) -> bool:
    """Whether the kernel of tiles ``t`` walks tiles (:data:`PERSISTENT`): f16 products with
    more tiles than the compute units hold work-groups, whose tiles cover M and N exactly.
    Walking was measured faster where the tiles cover the product exactly, batched or not
    (on held-out shapes on average, not on every one), but slower on most products with
    partial tiles at an edge, and not reliably faster under TF32, which keeps a tile a
    work-group (papers/kernels.md, "Twenty-first" and "Twenty-second session")."""
    if PERSISTENT is not None:
        return PERSISTENT
    return (dtype == tma.F16 and c.m.size % t.bm == 0 and c.n.size % t.bn == 0
            and tile_groups(c, t.bm, t.bn) > target.compute_units * resident(t, target, True))


def tilings(c: Contraction, target: TargetProfile, dtype: int = tma.F16, **tiles: str
            ) -> list[tuple[MmaTiles, float, int]]:
    """The tilings of ``c`` in :func:`forms_for`'s forms (``tiles``: fields of their
    MmaTiles replaced), their rates and work-groups a compute unit (:func:`resident`), K split
    where :func:`accy.kernels.wgmma.split_tiles` says (chunks of at least ``MIN_K``, the K a
    tile pays off from; the form rated at the chunk's K; an f16 K of at most
    :data:`SPLIT_K_F16` only where every form's tiles would leave half the units idle). An
    f16 tiling of at least :data:`MANY_WAVES` waves has its rate divided by its waves'
    balance, so that selection (:func:`accy.kernels.wgmma.score`) counts its last wave as
    full."""
    out = []
    forms = forms_for(c, target, dtype)
    most = max((tile_groups(c, t.bm, t.bn) for t in map(form_tiles, forms)), default=0)
    splits = (dtype != tma.F16 or c.k.size > SPLIT_K_F16
              or wgmma.SPLIT_IDLE * most <= target.compute_units)
    narrow_split = not SPLIT_WIDE_KMAJOR and along_k(reads(c, dtype), "y")  # (TF32: always)
    for f in forms:
        t = dataclasses.replace(form_tiles(f), **tiles)
        walking = walks(c, t, target, dtype)
        per_unit = resident(t, target, walking)
        gain = 1.0
        if not walking and splits:
            t = split_tiles(c, t, target, per_unit, MIN_K[dtype])
            if narrow_split and t.split > 1 and t.bn == 256:
                continue
            if t.split > 1 and dtype == tma.F16 and t.bn == 128:
                deep = deepened(c, t, target)
                if deep.stages > t.stages and deep.split > 1:  # (unmeasured unsplit)
                    t, per_unit, gain = deep, 1, SPLIT_GAIN
        if (dtype == tma.F16 and t.split == 1 and t.bn == 128
                and tile_groups(c, t.bm, t.bn) <= target.compute_units):
            t = deepest(t, target, LONE_STAGES)
        k = chunk_k(c.k.size, t.split, ROW // tma.ELEMENT_BYTES[dtype]) if t.split > 1 \
            else c.k.size
        r, groups = rate(f, k, dtype) * gain, tile_groups(c, t.bm, t.bn) * t.split
        if dtype == tma.F16 and groups >= MANY_WAVES * target.compute_units * per_unit:
            r /= balance(groups, target.compute_units * per_unit)  # waves scored as full
        out.append((t, r, per_unit))
    return out


def deepened(c: Contraction, t: MmaTiles, target: TargetProfile) -> MmaTiles:
    """Split-K tiles ``t`` with as many stages as one work-group a unit holds, at most
    :data:`SPLIT_STAGES` (none more than ``t`` has: ``t``), and K split for one a unit (which
    may leave it unsplit: the caller keeps ``t`` then)."""
    deep = deepest(t, target, SPLIT_STAGES)
    if deep.stages == t.stages:
        return t
    return split_tiles(c, dataclasses.replace(deep, split=1), target, 1, MIN_K[tma.F16])


def deepest(t: MmaTiles, target: TargetProfile, most: int) -> MmaTiles:
    """``t`` with as many stages as one work-group a unit holds, up to ``most`` (never fewer
    than it has)."""
    stages = t.stages
    while stages < most and local_bytes(
            dataclasses.replace(t, stages=stages + 1)) <= target.group_local_bytes:
        stages += 1
    return dataclasses.replace(t, stages=stages)


def forms_for(c: Contraction, target: TargetProfile, dtype: int = tma.F16
              ) -> list[tuple[int, int, int]]:
    """The :data:`FORMS` taking ``c`` where :func:`unusable` finds nothing against the
    kernel (reading ``c`` as :func:`reads` says): K of at least :data:`MIN_K`, or of
    :data:`SHORT_K` where the form walks tiles."""
    if unusable(reads(c, dtype), target, dtype) is not None:
        return []
    return [f for f in FORMS
            if c.k.size >= MIN_K[dtype] or walks(c, form_tiles(f), target, dtype)]


def geometries(c: Contraction, bm: int, bn: int, dtype: int = tma.F16
               ) -> tuple[Geometry, Geometry] | str:
    """A's and B's tensor maps for ``bm x bn`` tiles with operands of ``dtype`` (tma's
    codes; ``bk`` elements a 128-byte row), or why there are none: A (M x K, K contiguous) as
    (K, M[, batch]) in boxes (bk, bm); B along N (K x N, f16 only) as (N, K[, batch]) in boxes
    (64, bk) a 64-column block, B along K (N x K) as (K, N[, batch]) in (bk, bn)."""
    elem = tma.ELEMENT_BYTES[dtype]
    bk, kmajor = ROW // elem, along_k(c, "y")
    if not along_k(c, "x") or c.k.x != 1:
        return "wgmma_ss copies A stored along K with unit stride"
    if dtype == tma.TF32 and not kmajor:
        return "TF32 wgmma reads B only K-major: wgmma_ss copies B stored along K (x @ W.T)"
    if (c.k.y if kmajor else c.n.y) != 1:
        return "wgmma_ss copies B stored along K or N with unit stride"
    maps = []
    for side, outer, inner, box in (("x", c.m, c.k, (bk, bm)),
                                    ("y", *((c.n, c.k, (bk, bn)) if kmajor else
                                            (c.k, c.n, (64, bk))))):
        batch = tuple(i for i, d in enumerate(c.batch) if getattr(d, side))
        strides = (elem * getattr(outer, side),
                   *(elem * getattr(c.batch[i], side) for i in batch))
        if len(batch) > 3 or any(s % 16 for s in strides):
            return (f"{'AB'[side == 'y']}'s strides {strides} (bytes) are not multiples of 16 "
                    "or it has more than three batch dimensions")
        maps.append(Geometry((inner.size, outer.size, *(c.batch[i].size for i in batch)),
                             strides, (*box, *[1] * len(batch)), batch, dtype))
    return maps[0], maps[1]


def maps_of(c: Contraction, bm: int, bn: int, dtype: int = tma.F16
            ) -> tuple[tuple[Geometry, Geometry], tuple[tuple[int, ...], ...]] | str:
    """A's and B's tensor maps for ``bm x bn`` tiles (:func:`geometries`) and the words of
    their templates, or why there are none."""
    found = geometries(c, bm, bn, dtype)
    if isinstance(found, str):
        return found
    words = [tma.template(g.dtype, g.dims, g.strides, g.box) for g in found]
    bad = [w for w in words if isinstance(w, str)]
    return bad[0] if bad else (found, tuple(words))  # type: ignore[return-value]


def unusable(c: Contraction, target: TargetProfile, dtype: int = tma.F16) -> str | None:
    """Why wgmma-f16 (``dtype`` F16) or wgmma-tf32 (TF32) does not take this kernel for ``c``
    (None: it does, in :func:`forms_for`'s forms): the probe's TMA copies (rounding to TF32
    for TF32), K of at least :data:`SHORT_K`, every form's stages in the target's static
    local memory, and both tensor maps of every form encoding."""
    if not ENABLED or TMA_COPY not in target.tensor_cores:
        return "no TMA copies (the probe's cp.async.bulk.tensor)"
    if dtype == tma.TF32 and TMA_TF32 not in target.tensor_cores:
        return "no TMA copies rounding to TF32 (the probe's TFLOAT32 tensor map)"
    if c.k.size < SHORT_K:
        return f"K = {c.k.size} is below {SHORT_K}"
    if (need := max(local_bytes(form_tiles(f)) for f in FORMS)) > target.group_local_bytes:
        return f"{need} bytes of local memory"
    for f in FORMS:
        if isinstance(why := maps_of(c, 64 * f[0], f[1], dtype), str):
            return why
    return None


def b_transposed(c: Contraction) -> Contraction:
    """``c`` with B as :func:`transpose_b` writes it: N x K, K contiguous, B's batch
    dimensions outside (row-major in their order)."""
    stride, batch = c.n.size * c.k.size, []
    for d in reversed(c.batch):
        batch.append(dataclasses.replace(d, y=stride) if d.y else d)
        stride *= d.size if d.y else 1
    return dataclasses.replace(c, batch=tuple(reversed(batch)),
                               n=dataclasses.replace(c.n, y=c.k.size),
                               k=dataclasses.replace(c.k, y=1))


TRANSPOSED_B = "scratch_bt"  # the scratch memory transpose_b writes


def reads(c: Contraction, dtype: int = tma.F16) -> Contraction:
    """``c`` as the kernel of operands ``dtype`` copies it: as stored, or with B first
    transposed (:func:`transpose_b`) where B is stored along N and TF32's wgmma needs it
    K-major, or where an f16 B's rows fit no tensor map (rows of N halves not a multiple of 16
    bytes, as ``1000 x 1030 x 520``) and the transposed rows (K halves) do, in a product of at
    least :data:`TRANSPOSE_MIN_M` rows (fewer: as stored, which no form then takes)."""
    if along_k(c, "y"):
        return c
    if dtype == tma.F16 and (not isinstance(geometries(c, 64, 64), str)
                             or c.m.size < TRANSPOSE_MIN_M):
        return c
    return b_transposed(c)


def transpose_b(c: Contraction, b: KernelArg, entry: str, work_item: int, kind, domain,
                ops) -> tuple[Kernel, KernelArg]:
    """The kernel writing B (argument ``b``) of ``c`` as :func:`b_transposed` lays it out into
    scratch memory, and that scratch as the product reads it. A work-group of 256 work-items
    moves a 32 x 32 block through local memory (rows padded to 33 words: no bank conflicts
    either way), reading rows of 32 elements of B along N and writing them along K."""
    t = b_transposed(c)
    batch = [(i, d) for i, d in enumerate(c.batch) if d.y]
    copies = math.prod(d.size for _, d in batch)  # B's batch entries
    kb, nb = -(-c.k.size // 32), -(-c.n.size // 32)
    tid, lane, row = Var("tid"), Var("lane"), Var("row")
    body: list[Stmt] = [Let("grp", INDEX, Id("group", 0)), Let("tid", INDEX, Id("local", 0)),
                        Let("lane", INDEX, mod(tid, 32)), Let("row", INDEX, div(tid, 32)),
                        Let("k0", INDEX, mul(mod(Var("grp"), kb), idx(32))),
                        Let("n0", INDEX, mul(mod(div(Var("grp"), kb), nb), idx(32))),
                        LocalArray("bt_tile", b.dtype, 32 * 33)]
    rest: Expr = div(Var("grp"), kb * nb)
    src: Expr = idx(0)
    dst: Expr = idx(0)
    for i, d in reversed(batch):
        body.append(Let(f"b{i}", INDEX, mod(rest, d.size)))
        rest = div(rest, d.size)
        src = add(src, mul(Var(f"b{i}"), idx(d.y)))
        dst = add(dst, mul(Var(f"b{i}"), idx(t.batch[i].y)))
    body += [Let("src", INDEX, src), Let("dst", INDEX, dst)]
    for i in range(4):  # rows k0 + row + 8i of the block, column n0 + lane
        k, n = add(Var("k0"), add(row, idx(8 * i))), add(Var("n0"), lane)
        at = add(Var("src"), add(mul(k, idx(c.k.y)), mul(n, idx(c.n.y))))
        inside = all_of([Bin("<", k, idx(c.k.size)), Bin("<", n, idx(c.n.size))])
        body.append(If(inside, (Store("bt_tile", add(mul(add(row, idx(8 * i)), idx(33)), lane),
                                      Load(b.name, at)),)))  # type: ignore[arg-type]
    body.append(Barrier())
    for i in range(4):  # columns n0 + row + 8i, K k0 + lane
        k, n = add(Var("k0"), lane), add(Var("n0"), add(row, idx(8 * i)))
        at = add(Var("dst"), add(mul(n, idx(c.k.size)), k))
        inside = all_of([Bin("<", k, idx(c.k.size)), Bin("<", n, idx(c.n.size))])
        body.append(If(inside, (Store(TRANSPOSED_B, at, Load(
            "bt_tile", add(mul(lane, idx(33)), add(row, idx(8 * i))))),)))  # type: ignore
    out = KernelArg(TRANSPOSED_B, b.dtype, True, -1, copies * c.n.size * c.k.size)
    kernel = Kernel(f"{entry}_bt", work_item, kind, domain, (b, out), tuple(body),
                    LaunchGeometry((256 * kb * nb * copies,), (256,)), ops,
                    fixed_local_size=True)
    return kernel, dataclasses.replace(out, is_output=False)


def kernels(cls: type[_WgmmaSs], group, outline, kind, einsum, c: Contraction, t: MmaTiles,
            policy: str, target: TargetProfile) -> tuple[Kernel, ...]:
    """The kernel of class ``cls`` (its operands' ``dtype``) for ``c`` in tiles ``t``, after
    :func:`transpose_b`'s where it reads B transposed (:func:`reads`)."""
    ss = reads(c, cls.dtype)
    kernel = cls(group, outline, kind, einsum, ss, t, policy, target)
    if ss is c:
        return kernel.kernels()
    b = next(a for a in kernel.epi.args if a.name == kernel.arg["y"])
    first, scratch = transpose_b(c, b, outline.entry, outline.work_item, kind, group.domain,
                                 loopnest.implemented_ops(group))
    return first, *kernel.reads_b_from(scratch).kernels()


class _WgmmaSs(_WgmmaTma):
    """The kernel; see the module docstring."""

    bk = BK
    dtype = tma.F16  # of the tensor maps
    b_scratch: KernelArg | None = None  # B read from there (transpose_b's), not its argument

    def reads_b_from(self, scratch: KernelArg) -> _WgmmaSs:
        """This kernel with B copied from ``scratch`` (:func:`transpose_b`'s, laid out as the
        contraction it was given says: :func:`b_transposed`)."""
        self.b_scratch, self.arg["y"] = scratch, scratch.name
        return self

    def kernel(self, groups: int) -> Kernel:
        k = super().kernel(groups)
        if self.b_scratch is None:
            return k
        return dataclasses.replace(k, args=(*k.args, self.b_scratch))

    def build(self):
        found = maps_of(self.c, self.t.bm, self.t.bn, self.dtype)
        if isinstance(found, str):
            raise ValueError(f"wgmma-{self.policy} cannot copy A and B by TMA: {found}")
        (self.ga, self.g), self.maps = found
        self.kmajor = along_k(self.c, "y")
        self.walking = self.chunks == 1 and walks(self.c, self.t, self.target, self.dtype)
        return self.walk() if self.walking else _Wgmma.build(self)

    def walk(self) -> Kernel:
        """The persistent form: as many work-groups as the compute units hold
        (:func:`resident`), each taking tiles ``grp``, ``grp + workers`` ...; the stage ring
        runs over all its tiles' K steps (step ``gs`` of tile ``ti``: ``ti * steps + kt``), so
        the copies of the next tile's first steps are in flight while this one's products
        finish and its results are stored (through a buffer of its own, ``c_stage``: the
        stages stay the copies')."""
        c, t, ring = self.c, self.t, self.stages()
        tiles = tile_groups(c, t.bm, t.bn)
        per_unit = resident(t, self.target, True)
        workers = min(tiles, self.target.compute_units * per_unit)
        room = self.target.group_local_bytes // per_unit - local_bytes(t)  # for c_stage
        self.c_rows = max(r for r in range(C_ROWS, t.bm + 1, C_ROWS)
                          if r * self.c_row_words() * 4 <= room or r == C_ROWS)
        steps = -(-c.k.size // self.bk)
        _, g, tt, wm, wn = self.lanes()
        grp = self.let("grp", Id("group", 0))
        self.body += [LocalArray("b_tile", self.tile_dtype, ring * self.stage_words(), 128),
                      LocalArray("c_stage", self.tile_dtype, self.c_words(), 16)]
        self.acc = [f"acc_0_{j}_{r}" for j in range(t.bn // 8) for r in range(4)]
        for name in self.acc:
            self.let(name, Lit(0.0, DType.f32), DType.f32, mutable=True)
        self.b_copies(idx(0))
        mine = self.let("mine", div(Bin("-", idx(tiles + workers - 1), grp), workers))
        last = self.let("all_steps", mul(mine, idx(steps)))

        def ahead(step: Expr) -> Stmt:  # ring step ``step``'s copies, where it exists
            tile = add(grp, mul(div(step, steps), idx(workers)))
            tm, tn = tile_of(c, t, tile)
            return If(Bin("<", step, last), tuple(self.boxes(
                step, mod(step, steps), mod(step, ring), mul(tm, idx(t.bm)),
                mul(tn, idx(t.bn)), batch_of(c, t, tile))))

        self.body += [ahead(idx(i)) for i in range(ring - 1)]
        outer, self.body = self.body, []
        m0, n0 = self.locate(self.let("tile_i", add(grp, mul(Var("ti"), idx(workers)))))
        self.body += [Assign(name, Lit(0.0, DType.f32)) for name in self.acc]
        step: list[Stmt] = []
        gs = self.let_in(step, "gs", add(mul(Var("ti"), idx(steps)), Var("kt")))
        stage = self.let_in(step, "stage0", mod(gs, ring))
        step += self.arrived(stage, gs, 0)
        acc = tuple(("+f", name) for name in self.acc)
        marker, rest = self.issue(self.b_desc(step, stage, 0))
        ops = ", ".join(f"%{i}" for i in range(len(acc) + len(rest)))
        step.append(InlineAsm(f"{marker} {ops}", acc, rest, True, ("memory",)))
        step += self.after_issue(gs, stage, [ahead(add(gs, idx(ring - 1)))])
        self.body.append(For("kt", idx(0), idx(steps), tuple(step)))
        self.stores(m0, n0, wm, wn, g, tt)
        loop, self.body = self.body, outer
        self.body.append(For("ti", idx(0), mine, tuple(loop)))
        return self.kernel(workers)

    def after_issue(self, kt: Expr, stage: Expr, copies: list[Stmt],
                    a: tuple[tuple[str, Expr], ...] = ()) -> list[Stmt]:
        """Under :data:`OVERLAP`, step ``kt``'s products left in flight: the wait for the step
        before's (``WAIT1``), that step's stage given back, then the ``copies`` ahead (into
        that stage)."""
        if not OVERLAP:
            return super().after_issue(kt, stage, copies, a)
        before = mod(add(kt, idx(self.stages() - 1)), self.stages())
        return [self.wait_products(WAIT1),
                If(Bin(">=", kt, idx(1)), tuple(self.released(before))), *copies]

    def stores(self, m0: Expr, n0: Expr, wm: Expr, wn: Expr, g: Expr, tt: Expr) -> None:
        """The tile's stores, after its last products (in flight under :data:`OVERLAP`)."""
        self.body += [self.wait_products(WAIT0)] if OVERLAP else []
        super().stores(m0, n0, wm, wn, g, tt)

    def c_row_words(self) -> int:
        """Words of a row of the walking form's store buffer, padded as the staged stores
        pad them (f16 results two halves a word)."""
        per = 2 if self.f16 and self.c.dtype is DType.f16 else 1
        return self.t.bn // per + STAGE_PAD

    def c_words(self) -> int:
        """Words of the walking form's store buffer: :attr:`c_rows` rows (the most, in
        multiples of :data:`C_ROWS`, that the local memory left over holds)."""
        return self.c_rows * self.c_row_words()

    def stage_buffers(self) -> list[tuple[str, int, int]]:
        """The stages (the K loop's, done) or, walking tiles, the store buffer of its own."""
        if self.walking:
            return [("c_stage", 0, self.c_words())]
        return super().stage_buffers()

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
        """Step ``step``'s boxes of A and B into ``stage`` (:meth:`boxes`)."""
        return self.boxes(step, step, stage, self.m0, self.n0, self.bcoords)

    def boxes(self, step: Expr, kstep: Expr, stage: Expr, m0: Expr, n0: Expr,
              bcoords: list[Expr]) -> list[Stmt]:
        """The boxes of A and B of K step ``kstep`` of the tile at (``m0``, ``n0``, batch
        ``bcoords``) into ``stage``, the ring's step ``step``, issued by work-item 0 once
        every warp read the stage's last step."""
        t, k = self.t, add(self.k0, mul(kstep, idx(self.bk)))
        out = self.refill(step, stage, stage_bytes(t))
        out.append(self.box(self.ga, self.a_address(stage), 0, [k, m0], stage, bcoords))
        for nb in range(1 if self.kmajor else t.bn // 64):
            at = Bin("+", self.stage_address(stage), i32(nb * BLOCK)) if nb else \
                self.stage_address(stage)
            coords = [k, n0] if self.kmajor else [add(n0, idx(64 * nb)), k]
            out.append(self.box(self.g, at, tma.MAP_BYTES, coords, stage, bcoords))
        return [If(Bin("==", Var("tid"), idx(0)), tuple(out))]

    def a_address(self, stage: Expr) -> Expr:
        """A's part of ``stage``: its first ``BM`` rows."""
        return Bin("+", Var("b_base"), Cast(DType.i32, mul(stage, idx(4 * self.stage_words()))))

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
        return (sstep(self.t.bn, ROW // 32, 2, b_advance, self.trans_b()),
                (("l", adesc), ("l", bdesc), ("r", i32(1))))

    def trans_b(self) -> int | None:
        """The f16 wgmma's transpose of B: 1 where B's stage is MN-major."""
        return 0 if self.kmajor else 1


class _WgmmaSsTf32(_WgmmaSs):
    """The kernel in TF32 (the module docstring): K steps of 32 f32, TFLOAT32 tensor maps."""

    bk, elem = ROW // 4, 4
    dtype = tma.TF32
    tile_dtype = DType.f32  # (the staged stores read the stages as f32)

    def trans_b(self) -> None:
        return None  # TF32's wgmma (SSTEPT): both operands K-major
