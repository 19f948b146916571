"""tma-attention-f16: ``wgmma-attention-f16``'s kernel with the K and V tiles copied by TMA, each
stage handed on by ``mbarrier`` arrivals instead of a work-group barrier a tile.

The kernel (:class:`accy.kernels.attention_wgmma._WgBuilder`: warpgroups of 64 queries, their
fragments in registers, both products register-A ``wgmma``, the online softmax on the scores'
registers) takes its key tiles as FlashAttention-3 does: one ``cp.async.bulk.tensor`` a box
(:mod:`accy.kernels.tma`) of 64 features by ``bk`` keys, landed 128-byte swizzled, so that no
work-item computes a copy's address and the two warpgroups of a work-group meet no barrier in
the loop. Each stage (``stages`` of them, 1024-byte aligned in ``b_tile``) holds K's tile then
V's, as 64-feature column blocks of ``bk`` rows of 128 bytes:

- ``S = Q Kᵀ`` reads K K-major (trans-b 0): 8-key atoms 1024 bytes apart (the descriptor's
  stride offset), each k16 step 32 bytes on inside a block; a block of 64 features is one
  ``RSTEP`` of four steps, so ``d / 64`` of them.
- ``O += P V`` reads V MN-major (trans-b 1): value blocks ``bk * 128`` bytes apart (the leading
  offset), 8-key atoms 1024, each k16 step two atoms on (the layout ``wgmma-f16`` reads B
  copied by TMA in, :mod:`accy.kernels.wgmma_tma`).

Each stage has a *full* barrier (work-item 0 arrives expecting the stage's bytes, then issues
its boxes; the copies complete it) and an *empty* one (each warp's lane 0 arrives once its
``P V`` of the stage was waited for). Tiles ``0 .. stages - 2`` are issued before the loop;
iteration ``kt`` has work-item 0 wait until every warp gave back the stage of tile ``kt - 1``
and issue tile ``kt + stages - 1`` into it, then waits for its own tile (with ``lead``, the
next one: its scores are issued before this tile's softmax). Keys past the end are zero-filled
by the copies and masked as the other kernels mask them. The tensor maps are templates encoded
when the kernel is built (one for K, one for V, over the features, the keys and the batch
dimensions K or V is not broadcast along), written with the operand's address into each
work-group's 256 bytes of scratch at run time.

With :data:`QLOCAL` each lane stores its query fragments once, after the stages in
``b_tile`` (a warpgroup's 64 queries as 64-feature blocks of 64 rows of 128 bytes, swizzled
as TMA lands K), and ``S = Q Kᵀ`` reads both operands by descriptor (wgmma SS) instead of
holding the fragments in registers.

Taken where the probe ran TMA copies (``TMA_COPY``) and ``wgmma-attention-f16`` would take
the group, with head and value features multiples of 64 (a box row is 128 bytes) and
:data:`STAGES` stages of a key tile (:func:`key_tile`) in the target's static local memory.
It comes first of the f16 attention kernels: it timed faster than ``mma-attention-f16`` at
every shape tried (papers/kernels.md, "Fiftieth session").
"""

from __future__ import annotations

import dataclasses

from accy.ir.types import DType
from accy.kernels import tma
from accy.kernels.attention_mma import F32, ZERO
from accy.kernels.attention_mma_plan import Tiles, registers
from accy.kernels.attention_mma_plan import plan as mma_plan
from accy.kernels.attention_plan import Attention, Side
from accy.kernels.attention_wgmma import _WgBuilder, register
from accy.kernels.attention_wgmma import leads as wgmma_leads
from accy.kernels.ir import (
    INDEX,
    Barrier,
    Bin,
    Cast,
    Expr,
    If,
    InlineAsm,
    Kernel,
    KernelArg,
    Let,
    Lit,
    LocalArray,
    Stmt,
    Store,
    Var,
    add,
    div,
    idx,
    mod,
    mul,
)
from accy.kernels.wgmma import matrix_descriptor
from accy.kernels.wgmma_ptx import WAIT0, descriptor_bits, sstep
from accy.kernels.wgmma_tma import ATOM, i32
from accy.plans import FusionGroup, ScheduleKind
from accy.target import TMA_COPY, TargetProfile

NAME = "tma-attention-f16"
MAP_ARG = "tmaps0"
ROW = 128  # bytes of a box row: 64 features
KEYS = (128, 64)  # keys a tile, largest first (key_tile)
STAGES = 3
LEAD = True  # the next tile's scores in flight through this tile's softmax, where leads()
# a causal mask's tiles left whole in a loop of their own: None where the registers allow
# (not shares_unit: papers/kernels.md, "Fiftieth session"), else as set
SPLIT: bool | None = None
# the lead also in a causal kernel whose mask's tiles run in a loop of their own (two loops
# and the next tile's scores: more registers than ptxas has, spills); off: no lead there
LEAD_SPLIT = False
# the lazy rescale (Tiles.lazy, FlashAttention-4's): None where the value features outnumber
# the key tile's keys (as mma_plan decides it), else as set
LAZY: bool | None = None
# the queries through local memory: each lane stores its fragments once (128-byte swizzled, as
# the K tiles land), and S = Q Kᵀ reads both operands by descriptor (wgmma SS), freeing the
# fragments' registers. Off until timed on a device (papers/kernels.md, "Fifty-fifth session")
QLOCAL = False
UNIT_REGISTERS = 65536  # a Hopper multiprocessor's 32-bit registers
# registers ptxas gives a lane beyond its fragments' (the softmax's temporaries, addresses),
# as read from its output for the kernel at 64 features (papers/kernels.md, "Fiftieth session")
TEMPORARIES = 16


def geometry(a: Attention, side: Side, features: int, bk: int
             ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(dims, strides, box, batch dimensions) of ``side``'s tensor map: features, keys, then
    the batch dimensions it is not broadcast along (their indexes into ``a.batch``)."""
    batch = tuple(i for i, s in enumerate(side.batch) if s)
    return ((features, a.nk, *(a.batch[i] for i in batch)),
            (2 * side.seq, *(2 * side.batch[i] for i in batch)),
            (64, bk, *(1,) * len(batch)), batch)


def leads(stages: int, bk: int) -> bool:
    """Whether the loop runs one tile ahead: where ``wgmma-attention-f16``'s would
    (:func:`accy.kernels.attention_wgmma.leads`) and :data:`LEAD`."""
    return LEAD and wgmma_leads(stages, bk)


def shares_unit(a: Attention, threads: int, bk: int) -> bool:
    """Whether two work-groups of ``threads`` with ``bk``-key tiles share a multiprocessor by
    their registers: a lane holds its fragments (:func:`registers`, and the next tile's scores
    where :func:`leads`) and :data:`TEMPORARIES`."""
    ahead = 4 * (bk // 8) if leads(STAGES, bk) else 0
    lane = registers(a, "f16", bk, 1) + ahead + TEMPORARIES
    return 2 * threads * lane <= UNIT_REGISTERS


def query_bytes(a: Attention, threads: int) -> int:
    """Local bytes of the queries of ``threads`` work-items where :data:`QLOCAL` (64 queries of
    ``d`` two-byte features a warpgroup of 128), else 0."""
    return threads * a.d if QLOCAL else 0


def key_tile(a: Attention, t: Tiles, target: TargetProfile) -> int | None:
    """Of :data:`KEYS` whose :data:`STAGES` stages fit the target's static local memory, the
    largest that lets two work-groups share a multiprocessor (:func:`shares_unit`), else the
    largest; None where none fits."""
    queries = query_bytes(a, t.threads)
    fits = [bk for bk in KEYS
            if STAGES * 2 * bk * (a.d + a.dv) + queries + ATOM <= target.group_local_bytes]
    return next((bk for bk in fits if shares_unit(a, t.threads, bk)), fits[0] if fits else None)


def plan(group: FusionGroup, target: TargetProfile) -> tuple[Attention, Tiles] | str:
    """``wgmma-attention-f16``'s attention and tiles with this kernel's key tile and stages,
    or why it cannot take the group."""
    found = mma_plan(group, target, "f16", wgmma=True)
    if isinstance(found, str):
        return found
    a, t = found
    if TMA_COPY not in target.tensor_cores:
        return "TMA attention needs the probe's TMA copies (TMA_COPY)"
    if a.d % 64 or a.dv % 64:
        return f"head and value features {a.d}, {a.dv}: TMA boxes of 64 need multiples of 64"
    bk = key_tile(a, t, target)
    if bk is None:
        return f"{STAGES} stages of {KEYS[-1]} keys do not fit the target's local memory"
    for side, features in ((a.k, a.d), (a.v, a.dv)):
        dims, strides, box, _ = geometry(a, side, features, bk)
        words = tma.template(tma.F16, dims, strides, box)
        if isinstance(words, str):
            return words
    lazy = a.dv > bk if LAZY is None else LAZY
    return a, dataclasses.replace(t, bk=bk, stages=STAGES, lazy=lazy)


class _TmaBuilder(_WgBuilder):
    """The kernel; see the module docstring."""

    v_advance = 2 * ATOM // 16  # a k16 step of V: two atoms

    def layout(self) -> None:
        a, t = self.a, self.t
        self.bytes = {"k": t.bk * 2 * a.d, "v": t.bk * 2 * a.dv}  # a stage's
        # a causal mask's second loop gives ptxas more registers than two work-groups a
        # multiprocessor leave: one loop where they share one (papers/kernels.md)
        self.split_masked = not shares_unit(a, t.threads, t.bk) if SPLIT is None else SPLIT
        split = self.tri is not None and self.split_masked
        self.lead = int(leads(t.stages, t.bk) and (LEAD_SPLIT or not split))

    def stage_bytes(self) -> int:
        return self.bytes["k"] + self.bytes["v"]

    def local_arrays(self) -> list[Stmt]:
        """The stages (an atom more, for their 1024-byte alignment; :data:`QLOCAL`: the
        queries after them) and their barriers."""
        words = (self.t.stages * self.stage_bytes() + query_bytes(self.a, self.t.threads)
                 + ATOM) // 4
        return [LocalArray("b_tile", DType.i32, words, 128),
                LocalArray(tma.BARRIERS, DType.i32, 4 * self.t.stages, 8)]

    def address(self, side: str, stage: Expr, block: int) -> Expr:
        """The local address of 64-feature block ``block`` of ``side``'s tile in ``stage``."""
        at = (self.bytes["k"] if side == "v" else 0) + block * self.t.bk * ROW
        first = Bin("+", self.b_base, Cast(DType.i32, mul(stage, idx(self.stage_bytes()))))
        return Bin("+", first, i32(at)) if at else first

    def maps(self) -> list[tuple[str, Side, int, int]]:
        """(side, operand, features, byte offset) of the work-group's two tensor maps."""
        a = self.a
        return [("k", a.k, a.d, 0), ("v", a.v, a.dv, tma.MAP_BYTES)]

    def setup(self) -> list[Stmt]:
        """``b_base``, the work-group's tensor maps and the barriers (work-item 0), a barrier."""
        out: list[Stmt] = []
        base = Cast(DType.i32, Cast(INDEX, Var("b_tile")))
        self.b_base = self.let(out, "b_base", Bin("&", Bin("+", base, i32(ATOM - 1)),
                                                  i32(-ATOM)), DType.i32)
        self.map = self.let(out, "tma_map", Bin("+", Cast(INDEX, Var(MAP_ARG)), mul(
            self.grp, idx(tma.region(2)))))
        init: list[Stmt] = []
        for _, side, features, at in self.maps():
            dims, strides, box, _ = geometry(self.a, side, features, self.t.bk)
            words = tma.template(tma.F16, dims, strides, box)
            assert not isinstance(words, str), words  # (plan checked it)
            init.append(tma.write_map(words, self.map, at // tma.MAP_BYTES, 2,
                                      Cast(INDEX, Var(self.scores.arg_of[side.node]))))
        init += [tma.init(tma.barrier(idx(s), self.t.stages, empty), count)
                 for s in range(self.t.stages) for empty, count in ((0, 1), (1, self.t.warps))]
        if QLOCAL:
            out += self.store_queries(base)
        return [*out, If(Bin("==", self.lid, idx(0)), tuple(init)), Barrier()]

    def query_address(self, block: int) -> Expr:
        """The local address of the warpgroup's 64-feature block ``block`` of its queries:
        64 rows of 128 bytes (:data:`QLOCAL`)."""
        group = mul(div(self.lid, 128), idx(query_bytes(self.a, 128)))
        at = self.t.stages * self.stage_bytes() + block * 64 * ROW
        return Bin("+", Bin("+", self.b_base, Cast(DType.i32, group)), i32(at))

    def store_queries(self, base: Expr) -> list[Stmt]:
        """Each lane's query fragments into local memory (``base``: ``b_tile``'s address),
        128-byte swizzled as TMA lands the K tiles (row ``16 w + g + 8 (r % 2)`` of the
        warpgroup, 16-byte chunk ``2 kk + r / 2`` of its block XOR ``g``), then fenced for
        wgmma's proxy."""
        out: list[Stmt] = []
        lane = mod(self.lid, 32)
        g, tt = div(lane, 4), mod(lane, 4)
        row = add(mul(mod(div(self.lid, 32), 4), idx(16)), g)
        for kk in range(self.a.d // 16):
            for r in range(4):
                chunk = Bin("^", idx(2 * (kk % 4) + r // 2), g)
                at = add(mul(add(row, idx(8 * (r % 2))), idx(ROW)),
                         add(mul(chunk, idx(16)), mul(tt, idx(4))))
                word = Bin("-", self.query_address(kk // 4), base)
                out.append(Store("b_tile", div(add(Cast(INDEX, word), at), 4),
                                 Var(f"fa_q0_{kk}_{r}")))
        return [*out, *self.landed()]

    def issue(self, stage: Expr, tile: Expr) -> list[Stmt]:
        """Work-item 0's copies of key tile ``tile`` into ``stage``: where the stage was used
        (tile ``stages`` on), its wait for every warp's arrival on the stage's empty barrier;
        its arrival expecting the tile's bytes; the boxes."""
        t = self.t
        out = tma.refill(tile, stage, t.stages, self.stage_bytes())
        for side, s, features, at in self.maps():
            dims, strides, box, batch = geometry(self.a, s, features, t.bk)
            for block in range(features // 64):
                coords = [idx(64 * block), mul(tile, idx(t.bk)),
                          *(self.bcoords[i] for i in batch)]
                out.append(tma.copy(dims, strides, box, tma.F16, self.address(side, stage, block),
                                    tma.map_at(self.map, at), coords, tma.barrier(stage, t.stages)))
        return [If(Bin("==", self.lid, idx(0)), tuple(out))]

    def landed_wait(self, tile: Expr) -> Stmt:
        """The wait for key tile ``tile``'s copies (its stage's full barrier, its phase)."""
        t = self.t
        return tma.wait(tma.barrier(mod(tile, t.stages), t.stages), mod(div(tile, t.stages), 2))

    def async_loop(self) -> list[Stmt]:
        """The stages handed on by the barriers (module docstring)."""
        t, body = self.t, self.setup()
        count = self.tile_count(body)
        for s in range(t.stages - 1):
            body.append(If(Bin("<", idx(s), count), tuple(self.issue(idx(s), idx(s)))))
        if self.lead:
            body += [self.landed_wait(idx(0)), *self.lead_in()]
        kt = Var("kt")
        nxt = add(kt, idx(t.stages - 1))
        ahead = add(kt, idx(self.lead))
        loop: list[Stmt] = [
            If(Bin("<", nxt, count), tuple(self.issue(mod(nxt, t.stages), nxt))),
            If(Bin("<", ahead, count), (self.landed_wait(ahead),)) if self.lead
            else self.landed_wait(kt)]
        cur = mod(kt, t.stages)
        given = If(Bin("==", mod(self.lid, 32), idx(0)), (tma.arrive(
            tma.barrier(cur, t.stages, 1)),))
        return body + self.key_tiles(count, lambda masked: [
            *loop, *self.tile(mul(kt, idx(t.bk)), cur, masked), given])

    def descriptor(self, out: list[Stmt], side: str, cur: Expr, block: int = 0) -> Var:
        """The descriptor of ``side``'s block ``block`` in buffer ``cur``: K K-major (atoms
        1024 bytes apart), V MN-major (value blocks ``bk * 128`` bytes apart, atoms 1024)."""
        lbo = self.t.bk * ROW if side == "v" else 16
        return self.let(out, f"{side}desc", matrix_descriptor(
            self.address(side, cur, block), descriptor_bits(lbo, ATOM, True)))

    def score_tile(self, out: list[Stmt], prefix: str, stage: Expr) -> InlineAsm:
        """``S = Q Kᵀ`` of the K tile in ``stage`` into ``{prefix}0_{j}_{r}`` (declared zero),
        four k16 steps (32 bytes each) a 64-feature block; returns its wait."""
        a, t = self.a, self.t
        names = [f"{prefix}0_{j}_{r}" for j in range(t.bk // 8) for r in range(4)]
        out += [Let(name, F32, ZERO, True) for name in names]
        if QLOCAL:
            return self.local_scores(out, names, stage)
        return self.wgmma(out, t.bk, 0, names, [(
            [f"fa_q0_{kk}_{r}" for kk in range(4 * block, 4 * block + 4) for r in range(4)],
            self.descriptor(out, "k", stage, block), 4, 2) for block in range(a.d // 64)])

    def local_scores(self, out: list[Stmt], names: list[str], stage: Expr) -> InlineAsm:
        """``S = Q Kᵀ`` into ``names`` with both operands by descriptor (:data:`QLOCAL`): per
        64-feature block four k16 steps, each 32 bytes on in Q's and K's blocks."""
        accs = tuple(("+f", name) for name in names)
        bits = descriptor_bits(16, ATOM, True)
        for block in range(self.a.d // 64):
            qdesc = self.let(out, "qdesc", matrix_descriptor(self.query_address(block), bits))
            ins = (("l", qdesc), ("l", self.descriptor(out, "k", stage, block)),
                   ("r", Lit(1, DType.i32)))
            ops = ", ".join(f"%{i}" for i in range(len(accs) + len(ins)))
            out.append(InlineAsm(f"{sstep(self.t.bk, 4, 2, 2, 0)} {ops}", accs, ins, True,
                                 ("memory",)))
        names_ops = ", ".join(f"%{i}" for i in range(len(accs)))
        return InlineAsm(f"{WAIT0} {names_ops}", accs, (), True, ("memory",))

    def build(self, kind: ScheduleKind) -> Kernel:
        """The kernel, with the work-groups' tensor maps as scratch."""
        k = super().build(kind)
        groups = k.geometry.global_size[0] // self.t.threads
        maps = KernelArg(MAP_ARG, DType.i64, True, -1, groups * tma.region(2) // 8)
        return dataclasses.replace(k, args=(*k.args, maps))


register(NAME, "f16 attention as wgmma-attention-f16's kernel with the K and V tiles copied by "
         "TMA and handed on by mbarriers (no work-group barrier a tile); features multiples of "
         "64", plan, _TmaBuilder)
