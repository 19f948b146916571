"""mma-tf32 / mma-3xtf32 / mma-f16: contractions on tensor cores through inline PTX ``mma.sync``.

Taken only where the target recorded TF32 tensor cores (``TargetProfile.tensor_cores``, filled
by the device probe in :mod:`accy.backends.opencl.runtime`), the precision policy allows
(``kernelization{precision=tf32}`` or ``{precision=3xtf32}``, which the default ``f32`` is on
targets with tensor cores; ``ieee`` never picks them) and the product is large enough
(:func:`accy.kernels.mma_plan.plan`). The groups are the tiled contraction's
(:func:`accy.kernels.contraction_plan.analyse`: batched matrix products over strided views,
elementwise epilogue, reshaped outputs). Where the tiles leave more than half the compute units
idle over a long K, K is split over work-groups (``MmaTiles.split``,
:func:`~accy.kernels.mma_plan.split_k`): each sums its chunk into scratch memory and the
:class:`~accy.kernels.split_k.Partials` kernel (the tiled contraction's too) adds the chunks
and applies the epilogue, or with :data:`accy.kernels.split_k.FUSED` the last of a tile's
work-groups to finish does (:func:`accy.kernels.split_k.fused`).

The kernel: a work-group of ``warps_m x warps_n`` warps (``reqd_work_group_size``) computes a
``bm x bn`` tile of C (``mma_plan.choose_tiles``: by default 128x128 of 4 warps of 64x64, or
64x64 where those would leave compute units idle), each warp its block as m16n8 fragments
held in f32 registers per lane. K advances 16 at
a time through two local buffers: the next step's A and B tiles are loaded from global memory
into registers (float4 where strides allow, zeros outside the operands) before this step's
mma.sync instructions run, then stored to the other buffer, so one barrier per step suffices.
Fragment loads (``MmaTiles.loads``): ``scalar`` pads local rows (A by 4 words, B by 8) so a
warp's 32-bit fragment loads hit 32 distinct banks; ``vector`` (the default) swizzles unpadded
rows and reads fragments in float4s through K and N permutations, or by ``ldmatrix`` for f16
(:mod:`accy.kernels.mma_layout`, :mod:`accy.kernels.mma_frags`).
``tf32`` rounds each operand once, on its way into local memory (``cvt.rna.tf32.f32``);
``3xtf32`` keeps f32 in local memory and splits each fragment value ``x`` into ``big =
tf32(x)`` and ``small = tf32(x - big)``, accumulating ``small*big + big*small + big*big``
(three mma per fragment pair; the dropped ``small*small`` is ~2^-22 relative); an operand whose
values are exact in TF32 (f16 cast to f32: :func:`exact_in_tf32`) is not split, and the
products with its zero small part are skipped (two mma, or one: TF32's, exact then). Where the
target's probe found ``TF32_SATFINITE``, ``big`` rounds saturating (``cvt.rna.satfinite``'s
value, computed by a clamp and integer rounding: :data:`~accy.kernels.mma_ptx.TF32_BIG_SAT`): an
infinite ``x`` splits as the largest TF32 plus an infinite ``small``, so products keep
IEEE's infinities (plain rounding gives ``inf - inf``, NaN), and an ``x`` beyond the largest
TF32 does not overflow; the default ``f32`` policy takes 3xtf32 only on such targets. Accumulators
stay f32 in either case. Edges: loads outside M, N or K give zeros, stores are guarded. The
group's epilogue runs on each accumulator before its store (the loop nest's value machinery).

Where the target's probe found ``cp.async`` (``CP_ASYNC``) and both operands can be copied
without transposing (A along K, B along N; f16 B along K too: ``mma_plan.pipelined``), the K
loop is a ``tiles.stages``-deep pipeline instead: ``cp.async.cg.shared.global`` copies 16
bytes straight into local memory (zero-filled outside the operands; rows that are not whole
16-byte vectors ``cp.async.ca`` 8 or 4 bytes: ``mma_plan.copy_widths``), one commit group per
K step, steps 0..S-2 issued before the loop; each step waits until at most S-2 groups are in
flight, passes one barrier, issues step ``kt + S - 1`` into the buffer step ``kt - 1`` read,
then runs its mma.sync. Under ``tf32`` the operands are then rounded at fragment load, or
(``MmaTiles.rounding == "tile"``) by the work-item that copied them, in local memory, before
the barrier; under ``3xtf32`` split there the same way (the big part in place, the small part
into ``a_small`` / ``b_small``; an opt-in: ``bench_mma --rounding tile`` for sweeps, and
:data:`SPLIT_ONCE` for the chosen 3xtf32 tiles). The copied operands stay in global memory
(``Kernel.global_args``).

``mma-f16``: f16 products (f16 x f16 is exact in f32, sums f32, as every f16 contraction
kernel computes, so any policy takes them) on ``mma.sync.m16n8k16.f16`` with f32
accumulators, always through the cp.async pipeline: the tiles hold halves as words; under
scalar loads an A register is one word (the same word offsets as TF32's A), a B register packs
the halves of two K rows, each taken from its word by the lane's shift; under vector loads
``ldmatrix`` reads them.
"""

from __future__ import annotations

from dataclasses import replace

from accy.ir.node import Node
from accy.ir.types import DType
from accy.kernels import loopnest
from accy.kernels.contraction_plan import Contraction, analyse, tile_groups
from accy.kernels.generators import Generator, register_generator
from accy.kernels.ir import (
    INDEX,
    Bin,
    Call,
    Expr,
    Id,
    InlineAsm,
    Kernel,
    KernelArg,
    Let,
    Lit,
    Load,
    LocalArray,
    Stmt,
    Var,
    add,
    div,
    idx,
    mod,
    mul,
)
from accy.kernels.mma_copies import Copies
from accy.kernels.mma_frags import VectorLoads
from accy.kernels.mma_plan import (
    MmaTiles,
    a_lane_base,
    a_offset,
    along_k,
    b16_lane_base,
    b16_offset,
    b_lane_base,
    b_offset,
    batch_of,
    copy_slot,
    copy_widths,
    for_dtype,
    lane_parts,
    local_index,
    pipelined,
    plan,
    tile_of,
    warp_origin,
)
from accy.kernels.mma_ptx import (
    CVT_TF32,
    MMA_F16,
    TF32_BIG_SAT,
    exact_in_tf32,
    tf32_products,
    tf32_registers,
)
from accy.kernels.mma_store import Stores
from accy.kernels.split_k import chunk_k, summed_here, with_sums
from accy.plans import FusionGroup, KernelOutline, LaunchGeometry, ScheduleKind
from accy.target import TF32_SATFINITE, TargetProfile

POLICIES = ("tf32", "3xtf32")  # f32 products
KINDS = (*POLICIES, "f16")


class _Builder(Copies, VectorLoads, Stores):
    # whether the kernel copies its operands by TMA (accy/kernels/wgmma_tma.py): stages
    # without cp.async, operands kept in global memory as cp.async's are
    by_tma = False

    def __init__(self, group: FusionGroup, outline: KernelOutline, kind: ScheduleKind,
                 einsum: Node, c: Contraction, tiles: MmaTiles, policy: str,
                 target: TargetProfile) -> None:
        # f16 B stored along K: its tile too (cp.async copies it as stored, ldmatrix reads it)
        tiles = for_dtype(replace(tiles, b_k_major=c.dtype is DType.f16 and along_k(c, "y")),
                          c.dtype)
        self.pipelined = self.by_tma or pipelined(c, target)
        if tiles.stages != 2 and not self.pipelined:
            raise ValueError(f"tiles {tiles.text()}: {tiles.stages} stages need cp.async "
                             "(the target's probe did not list it, or an operand is not A "
                             "along K / B along N in whole 16-byte vectors)")
        self.group, self.outline, self.kind, self.c, self.t = group, outline, kind, c, tiles
        self.einsum = einsum
        # split K: chunks of chunk_k (a multiple of the kernel's K step), none empty
        self.chunk_k = chunk_k(c.k.size, tiles.split, self.k_step(tiles))
        self.chunks = -(-c.k.size // self.chunk_k)
        self.k0: Expr = idx(0)
        self.chunk: Expr | None = None
        self.scratch = KernelArg("scratch0", DType.f32, True, -1,
                                 self.chunks * einsum.type.size)
        self.policy, self.target = policy, target
        # the 3xtf32 split's big part, saturating where the probe found it (see operand)
        self.big_cvt = (TF32_BIG_SAT if policy == "3xtf32"
                        and TF32_SATFINITE in target.tensor_cores else CVT_TF32)
        # under 3xtf32, whether a side's registers ("a", "b") split into big and small parts:
        # not where its values are exact in TF32 (small part zero: its products are skipped)
        self.split = {reg: policy == "3xtf32" and not exact_in_tf32(einsum.srcs[i])
                      for reg, i in (("a", c.x), ("b", 1 - c.x))}
        # elements per copy slot of each side: 16 bytes, or rows copied by cp.async 8 or 4
        # bytes at a time where they are not whole 16-byte vectors
        widths = copy_widths(c) if self.pipelined else None
        self.width = widths or {"x": tiles.vector, "y": tiles.vector}
        # operands copied by cp.async rounded in local memory, once per element: tf32's in
        # place; 3xtf32's (scalar fragment loads) split there, the small parts into a second
        # tile of the same layout (:meth:`Copies.round_copies`)
        self.round_tile = (tiles.rounding == "tile" and self.pipelined
                           and (policy == "tf32" or policy == "3xtf32"
                                and not tiles.vector_loads))
        if self.round_tile and policy == "3xtf32" and 2 * tiles.local_bytes() > \
                target.group_local_bytes:
            raise ValueError(f"tiles {tiles.text()}: splitting 3xtf32 operands in local memory "
                             f"doubles the tiles to {2 * tiles.local_bytes()} bytes, over the "
                             f"target's {target.group_local_bytes}")
        self.f16 = tiles.f16
        self.epi = loopnest.EpilogueBuilder(group, outline, einsum)
        self.arg = {"x": self.epi.arg_of[einsum.srcs[c.x]],
                    "y": self.epi.arg_of[einsum.srcs[1 - c.x]]}
        self.body: list[Stmt] = []

    def let(self, name: str, e: Expr, dtype: DType = INDEX, lanes: int = 1,
            mutable: bool = False) -> Var:
        self.body.append(Let(name, dtype, e, mutable, lanes))
        return Var(name)

    # compute ----------------------------------------------------------------------------
    def operand(self, side: str, name: str, value: Expr) -> list[Stmt]:
        """Registers of one fragment value of operand ``side`` (``a`` or ``b``): ``name``
        (tf32 bits), or ``name`` (big) and ``name``_s (small) under 3xtf32 (the value's bits
        alone where that operand is exact in TF32)."""
        if (self.policy == "tf32" and (not self.pipelined or self.round_tile)  # rounded there
                or self.policy == "3xtf32" and not self.split[side]):
            return [Let(name, DType.i32, Call("bitcast_i32", (value,)))]
        if self.round_tile and isinstance(value, Load):  # split in local memory: both parts
            return [Let(name, DType.i32, Call("bitcast_i32", (value,))),
                    Let(f"{name}_s", DType.i32, Call("bitcast_i32", (
                        Load(value.buf.replace("_tile", "_small"), value.index),)))]
        return tf32_registers(name, value, self.policy, self.big_cvt)

    def compute(self, a_off: Expr, b_off: Expr) -> list[Stmt]:
        """The mma.sync instructions of one K step (``bk / 8`` TF32 or ``bk / 16`` f16
        sub-steps, fully unrolled) and their fragment loads (:class:`VectorLoads` under the
        vector scheme)."""
        t = self.t
        if t.vector_loads:
            return self.vector_compute(a_off, b_off)
        out: list[Stmt] = []
        for kk in range(t.bk // t.mma_k):
            for mi in range(t.frags_m):
                for r in range(4):
                    at = add(add(a_off, self.a_base), idx(a_offset(t, mi, kk, r)))
                    name = f"a{kk}_{mi}_{r}"
                    out += ([Let(name, DType.i32, Load("a_tile", at))] if self.f16
                            else self.operand("a", name, Load("a_tile", at)))
            for ni in range(t.frags_n):
                for r in range(2):
                    name = f"b{kk}_{ni}_{r}"
                    if self.f16:
                        out.append(Let(name, DType.i32, self.half_pair(b_off, ni, kk, r)))
                        continue
                    at = add(add(b_off, self.b_base), idx(b_offset(t, ni, kk, r)))
                    out += self.operand("b", name, Load("b_tile", at))
            out += self.mmas(kk)
        return out

    def mmas(self, kk: int) -> list[Stmt]:
        """Sub-step ``kk``'s mma.sync of every fragment pair, from registers ``a{kk}_{mi}_{r}``
        and ``b{kk}_{ni}_{r}`` (and their ``_s`` small parts under 3xtf32)."""
        t, out = self.t, []
        for mi in range(t.frags_m):
            for ni in range(t.frags_n):
                acc = [f"acc_{mi}_{ni}_{r}" for r in range(4)]
                a = [f"a{kk}_{mi}_{r}" for r in range(4)]
                b = [f"b{kk}_{ni}_{r}" for r in range(2)]
                if self.f16:
                    out.append(InlineAsm(MMA_F16, tuple(("+f", c) for c in acc),
                                         tuple(("r", Var(v)) for v in a + b)))
                else:
                    out += tf32_products(acc, a, b, self.split["a"], self.split["b"])
        return out

    def half_pair(self, b_off: Expr, ni: int, kk: int, r: int) -> Expr:
        """f16 register ``b{r}`` of fragment column ``ni``: halves ``b{2r}`` (low) and
        ``b{2r+1}`` (high), two K rows apart in the ``Bs[k][n]`` tile, each taken from its
        word by the lane's shift."""
        halves = []
        for i in (2 * r, 2 * r + 1):
            word = Load("b_tile", add(add(b_off, self.b_base), idx(b16_offset(self.t, ni, kk,
                                                                                i) // 2)))
            halves.append(Bin("&", Bin(">>", Call("bitcast_u32", (word,)), self.b_shift),
                              Lit(0xFFFF, DType.i32)))
        return Call("bitcast_i32", (Bin("|", halves[0], Bin("<<", halves[1],
                                                      Lit(16, DType.i32))),))

    def kernels(self) -> tuple[Kernel, ...]:
        """The kernel, and with K split the one adding its chunks' partial sums (and applying
        the group's epilogue)."""
        return with_sums(self.build(), self.group, self.outline, self.kind, self.einsum,
                         self.scratch, self.chunks, self.t, self.target)

    def k_step(self, tiles: MmaTiles) -> int:
        """K a step of the kernel's loop (of ``tiles``): what K chunks are multiples of."""
        return tiles.bk

    # kernel -----------------------------------------------------------------------------
    def place(self) -> tuple[int, Expr, Expr, Expr, Expr, Expr, Expr, Expr]:
        """Work-groups per K chunk, then ``lane``, ``g``, ``t``, the warp's block origin
        (``wm``, ``wn``) and the tile's (``m0``, ``n0``) as variables; sets :attr:`bcoords`,
        :attr:`bases` and, K split, the chunk."""
        c, t = self.c, self.t
        groups = tile_groups(c, t.bm, t.bn)
        lane, g, tt, wm, wn = self.lanes()
        grp = self.let("grp", Id("group", 0))
        if self.chunks > 1:  # group g: K chunk g / groups of tile g % groups
            self.chunk = self.let("chunk", div(grp, groups))
            grp = self.let("grp_t", mod(grp, groups))
            self.k0 = self.let("k0", mul(self.chunk, idx(self.chunk_k)))
        m0, n0 = self.locate(grp)
        return groups, lane, g, tt, wm, wn, m0, n0

    def lanes(self) -> tuple[Expr, Expr, Expr, Expr, Expr]:
        """``lane``, ``g``, ``t`` and the warp's block origin (``wm``, ``wn``) as variables."""
        tid = self.let("tid", Id("local", 0))
        lane = self.let("lane", mod(tid, 32))
        warp = self.let("warp", div(tid, 32))
        g_, t_ = lane_parts(lane)
        wm_, wn_ = warp_origin(self.t, warp)
        return (lane, self.let("g", g_), self.let("t", t_), self.let("wm", wm_),
                self.let("wn", wn_))

    def locate(self, tile: Expr) -> tuple[Expr, Expr]:
        """The origin (``m0``, ``n0``) of tile ``tile`` as variables; sets :attr:`bcoords` and
        :attr:`bases`, the operands' and output's offsets of its batch entry."""
        c, t = self.c, self.t
        tm, tn = tile_of(c, t, tile, self.let)
        m0, n0 = self.let("m0", mul(tm, idx(t.bm))), self.let("n0", mul(tn, idx(t.bn)))
        self.bcoords = batch_of(c, t, tile, self.let)
        self.bases: dict[str, Expr] = {}
        for key in ("x", "y", "out"):
            e: Expr = idx(0)
            for coord, d in zip(self.bcoords, c.batch, strict=True):
                e = add(e, mul(coord, idx(getattr(d, key))))
            self.bases[key] = e if isinstance(e, Lit) else self.let(f"{key}_base", e)
        return m0, n0

    def build(self) -> Kernel:
        t = self.t
        groups, lane, g, tt, wm, wn, m0, n0 = self.place()
        tid = Var("tid")
        self.sides = {s: self.side_info(s) for s in ("x", "y")}
        # f16 tiles are arrays of words (pairs of halves: what the mma registers take)
        ltype, self.words = (DType.i32, 2) if self.f16 else (DType.f32, 1)
        self.body.append(LocalArray("a_tile", ltype, t.stages * t.a_size // self.words, 16))
        self.body.append(LocalArray("b_tile", ltype, t.stages * t.b_size // self.words, 16))
        if self.round_tile and self.policy == "3xtf32":  # the small parts, where split
            for reg, size in (("a", t.a_size), ("b", t.b_size)):
                if self.split[reg]:
                    self.body.append(LocalArray(f"{reg}_small", ltype, t.stages * size, 16))
        if t.vector_loads:
            self.vector_bases(wm, wn, g, tt, lane)
        else:
            self.scalar_bases(wm, wn, g, tt)
        for mi in range(t.frags_m):
            for ni in range(t.frags_n):
                for r in range(4):
                    self.let(f"acc_{mi}_{ni}_{r}", Lit(0.0, DType.f32), DType.f32, mutable=True)
        origin = {"x": m0, "y": n0}
        for side in ("x", "y"):  # slot coordinates: fixed over K
            for i in range(self.slots(side)):
                if rows := self.rows_apart(side, i):  # slot 0's column, ``rows`` further on
                    f, k = Var(f"{side}_f0"), add(Var(f"{side}_k0"), idx(rows))
                else:
                    f, k = copy_slot(t, side, self.sides[side][3], add(tid, idx(
                        i * t.threads)), self.width[side])
                self.let(f"{side}_f{i}", f)
                self.let(f"{side}_k{i}", k)
                if self.pipelined:  # its place in a stage (cp.async copies, tile rounding)
                    self.let(f"{side}_l{i}", local_index(t, side, Var(f"{side}_f{i}"),
                                                         Var(f"{side}_k{i}")))
        self.body += self.async_loop(origin) if self.pipelined else self.plain_loop(origin)
        self.stores(m0, n0, wm, wn, g, tt)
        return self.kernel(groups)

    def kernel(self, groups: int) -> Kernel:
        """The kernel of :attr:`body` over ``groups`` work-groups per K chunk."""
        t = self.t
        more, added = summed_here(self.group, self.outline, self.einsum, self.scratch,
                                  self.chunks, self.c, t, self.target, self.bases["out"])
        entry = self.outline.entry + ("_partials" if self.chunks > 1 and not more else "")
        return Kernel(entry, self.outline.work_item, self.kind, self.group.domain,
                      tuple(self.epi.args + self.out_args + added), tuple(self.body + more),
                      LaunchGeometry((self.chunks * groups * t.threads,), (t.threads,)),
                      loopnest.implemented_ops(self.group), fixed_local_size=True,
                      global_args=(frozenset(self.arg.values()) if self.pipelined
                                   else frozenset()))

    def scalar_bases(self, wm: Expr, wn: Expr, g: Expr, tt: Expr) -> None:
        """A lane's fragment bases under the scalar scheme."""
        t = self.t
        self.a_base = self.let("a_lane", a_lane_base(t, wm, g, tt))
        if self.f16:  # a lane's B halves: the word, and which half of it (g's parity)
            b16 = self.let("b_half", b16_lane_base(t, wn, g, tt))
            self.b_base = self.let("b_lane", div(b16, 2))
            self.b_shift = self.let("b_shift", mul(mod(g, 2), idx(16)))
        else:
            self.b_base = self.let("b_lane", b_lane_base(t, wn, g, tt))

def build(group: FusionGroup, outline: KernelOutline, kind: ScheduleKind,
          target: TargetProfile, policy: str = "tf32",
          tiles: MmaTiles | None = None) -> tuple[Kernel, ...]:
    """The tensor-core kernel of an accepted group under ``policy`` (``tf32`` or ``3xtf32``
    for f32 products; ``f16`` for f16 ones), ``tiles`` overriding the plan's."""
    if policy not in KINDS:
        raise ValueError(f"mma kind {policy!r}: one of {KINDS}")
    found = plan(group, target)
    if isinstance(found, str):
        raise ValueError(f"the mma generator cannot take this group: {found}")
    c, chosen = found
    if (policy == "f16") != (c.dtype is DType.f16):
        raise ValueError(f"mma kind {policy!r} does not take a {c.dtype.value} product")
    einsum, _ = analyse(group)  # type: ignore[misc]  (plan accepted it)
    tiles = tiles or split_once(chosen, c, policy, target)
    return _Builder(group, outline, kind, einsum, c, tiles, policy, target).kernels()


# 3xtf32 operands split into big and small parts once, in local memory, by the work-item that
# copied them (``MmaTiles.rounding == "tile"``), not at every fragment load by every warp
# that reads the value: where both operands are copied by cp.async and local memory holds the
# small parts' tiles too. False: split at the fragment loads.
SPLIT_ONCE = False


def split_once(t: MmaTiles, c: Contraction, policy: str, target: TargetProfile) -> MmaTiles:
    """Tiles ``t`` with the 3xtf32 split made in local memory where :data:`SPLIT_ONCE` and
    the kernel allow it (scalar fragment loads, cp.async copies, twice the local memory)."""
    if (SPLIT_ONCE and policy == "3xtf32" and not t.vector_loads and pipelined(c, target)
            and 2 * t.local_bytes() <= target.group_local_bytes):
        return replace(t, rounding="tile")
    return t


def accepts(group: FusionGroup, target: TargetProfile, dtype: DType = DType.f32) -> bool:
    found = plan(group, target)
    return not isinstance(found, str) and found[0].dtype is dtype


for _policy in POLICIES:
    register_generator(Generator(
        f"mma-{_policy}",
        f"f32 batched matrix products on TF32 tensor cores (mma.sync through inline PTX), "
        f"under kernelization{{precision={_policy}}}"
        + (" (and the default f32 where the saturating TF32 rounding was found too)"
           if _policy == "3xtf32" else "") + " on targets whose probe found them",
        accepts,
        lambda group, outline, kind, target, p=_policy: build(group, outline, kind, target, p),
        precisions=frozenset({_policy}),
    ))
# f16 products: f16 x f16 is exact in f32 and the sums are f32, as in every other f16
# contraction kernel, so any precision policy takes them
register_generator(Generator(
    "mma-f16",
    "f16 batched matrix products on f16 tensor cores (mma.sync m16n8k16, f32 accumulators) "
    "fed by cp.async, on targets whose probe found both",
    lambda group, target: accepts(group, target, DType.f16),
    lambda group, outline, kind, target: build(group, outline, kind, target, "f16"),
))
