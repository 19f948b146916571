"""Split K, shared by the tiled and tensor-core contractions: where a product kernel stores
(the group's outputs, or one K chunk's partial sums in scratch memory), and what sums the
chunks in a fixed order (deterministic) and applies the group's epilogue: a second kernel,
or (:data:`FUSED`, :func:`fused`) the last of a tile's work-groups to finish, in the product
kernel itself (:meth:`Partials.fixup`; the sums and so the results are the same to the bit)."""

from __future__ import annotations

from typing import Any

from accy.ir.node import Node
from accy.ir.types import DType
from accy.ir.walk import Pending
from accy.kernels import loopnest
from accy.kernels.contraction_plan import Contraction, stored_value
from accy.kernels.ir import (
    INDEX,
    AtomicAdd,
    Barrier,
    Bin,
    Call,
    Expr,
    Fence,
    For,
    If,
    Kernel,
    KernelArg,
    Lit,
    Load,
    LocalArray,
    Stmt,
    Store,
    Var,
    add,
    delinearize,
    div,
    idx,
    linear,
    mod,
    mul,
    row_major,
)
from accy.plans import FusionGroup, KernelOutline, ScheduleKind
from accy.target import TargetProfile

# K split may end in the product kernel (the last work-group of a tile sums the chunks) where
# each of that work-group's work-items sums at most FIXUP_ITEMS elements of the tile, UNROLL
# at a time (their loads issued before their stores), from at most FIXUP_BYTES of partial
# sums, in at most FIXUP_CHUNKS chunks, and the target's fence reaches other work-groups; else
# in a second kernel, which spreads the sums over every compute unit. FUSED (bench_gpu
# --split-sums fixup) turns it on. Off: timed on GPUs it lost wherever a tile had many chunks
# or short ones, and on every f16 product (the tile's last work-group sums alone while the
# rest of the device idles); f32 products of at most four long chunks gained at four shapes
# and lost at one (papers/kernels.md, "Thirty-seventh session").
FUSED = False
FIXUP_ITEMS = 32
FIXUP_BYTES = 256 * 1024
FIXUP_CHUNKS = 1 << 16  # chunks a tile's last work-group sums alone, at most
UNROLL = 8


def fused(group: FusionGroup, einsum: Node, chunks: int, tiles: Any, scratch: KernelArg,
          target: TargetProfile) -> bool:
    """Whether a product kernel of ``chunks`` K chunks in ``tiles`` (``bm x bn`` outputs,
    ``threads`` work-items) sums them itself (:meth:`Partials.fixup`): :data:`FUSED`, the
    group's outputs laid out as the einsum (an output element's index is the einsum's), at
    most :data:`FIXUP_CHUNKS` chunks, :data:`FIXUP_ITEMS` elements a work-item and
    :data:`FIXUP_BYTES` of partial sums a tile, where the target's fence reaches other
    work-groups (:func:`device_fence`; NVIDIA's OpenCL ``mem_fence`` is ``membar.cta``, the
    work-group's scope)."""
    elements = tiles.bm * tiles.bn
    return (FUSED and 1 < chunks <= FIXUP_CHUNKS and group.domain == einsum.type.shape
            and -(-elements // tiles.threads) <= FIXUP_ITEMS
            and chunks * elements * scratch.dtype.itemsize <= FIXUP_BYTES
            and device_fence(target))


def device_fence(target: TargetProfile) -> bool:
    """Whether :class:`~accy.kernels.ir.Fence` orders a work-item's stores before other
    work-groups' loads on ``target``: a CPU's (its work-groups are threads of one process),
    or PTX's ``fence.acq_rel.gpu`` where the probe ran inline PTX."""
    return target.device_type == "cpu" or bool(target.tensor_cores)


def chunk_k(k: int, split: int, step: int) -> int:
    """K a chunk of a K of ``k`` split ``split`` ways, in multiples of ``step`` (a kernel's K
    step): the chunks are ``ceil(k / chunk)``, none empty."""
    return -(-k // (split * step)) * step


def store_targets(group: FusionGroup, outline: KernelOutline, given: Node, chunk: Expr | None,
                  scratch: KernelArg, obase: Expr
                  ) -> tuple[list[KernelArg], list[Node], Expr]:
    """What a contraction kernel stores, and from where: the group's outputs (the values they
    store) at ``obase``; with K split (``chunk``: the group's chunk) this chunk's partial sums
    of the einsum (``given``) in ``scratch``, laid out as the einsum after the other chunks'."""
    if chunk is None:
        args = [KernelArg(f"out{i}", n.type.dtype, True, slot) for i, (n, slot) in
                enumerate(zip(group.outputs, outline.output_slots, strict=True))]
        return args, [stored_value(o) for o in group.outputs], obase
    return [scratch], [given], add(mul(chunk, idx(given.type.size)), obase)


def with_sums(first: Kernel, group: FusionGroup, outline: KernelOutline, kind: ScheduleKind,
              einsum: Node, scratch: KernelArg, chunks: int, tiles: Any, target: TargetProfile
              ) -> tuple[Kernel, ...]:
    """``first``, a product kernel in ``tiles``, and where it leaves the sums of its
    ``chunks`` K chunks to another kernel (not :func:`fused`), the kernel adding them."""
    if chunks == 1 or fused(group, einsum, chunks, tiles, scratch, target):
        return (first,)
    return first, Partials(group, outline, einsum, scratch, chunks).build(kind)


def summed_here(group: FusionGroup, outline: KernelOutline, einsum: Node, scratch: KernelArg,
                chunks: int, c: Contraction, tiles: Any, target: TargetProfile, base: Expr
                ) -> tuple[list[Stmt], list[KernelArg]]:
    """What ends a product kernel of ``chunks`` K chunks in ``tiles`` where it sums them
    itself (:func:`fused`; its variables ``tid``, ``grp_t``, ``m0``, ``n0`` and ``base``, the
    einsum's offset of the tile's batch entry): the statements of :meth:`Partials.fixup` and
    the arguments they add; else nothing."""
    if not fused(group, einsum, chunks, tiles, scratch, target):
        return [], []
    return Partials(group, outline, einsum, scratch, chunks).fixup(
        c, Var("grp_t"), Var("tid"), tiles.threads, Var("m0"), Var("n0"), base, tiles.bm,
        tiles.bn)


class Partials(loopnest.LoopNestBuilder):
    """The group's outputs, one work-item per element, with the einsum's value the sum of the
    split-K partials in ``scratch`` (chunk by chunk, in a fixed order: deterministic)."""

    def __init__(self, group: FusionGroup, outline: KernelOutline, einsum: Node,
                 scratch: KernelArg, chunks: int) -> None:
        super().__init__(group, outline)
        self.einsum, self.chunks = einsum, chunks
        self.scratch = KernelArg(scratch.name, scratch.dtype, False, -1, scratch.scratch_elems)
        self.args.append(self.scratch)

    def fixup(self, c: Contraction, tile: Expr, tid: Expr, threads: int, m0: Expr, n0: Expr,
              base: Expr, bm: int, bn: int) -> tuple[list[Stmt], list[KernelArg]]:
        """The statements ending a product kernel (:func:`fused`) once its work-group stored
        its K chunk's partial sums for tile ``tile`` (origin ``m0``, ``n0``; the einsum's
        offset of its batch entry ``base``), and the arguments they add (the group's outputs,
        a counter a tile). Every work-group counts itself in (a fence first: its partial sums
        are visible before the count); the last to arrive restores the counter to zero for
        the next call and, its ``threads`` work-items ``tid`` striding over the tile's
        elements inside M x N, sums the chunks in order and stores the outputs as
        :meth:`build`'s kernel would."""
        em, last, old = self.em, "fx_last", Var("fx_old")
        em.tag = "fx_"
        i32 = DType.i32
        counts = KernelArg(f"{self.scratch.name}_count", i32, True, -1,
                           c.batch_size * -(-c.m.size // bm) * -(-c.n.size // bn))
        mine = Bin("==", old, Lit(self.chunks - 1, i32))
        head: list[Stmt] = [
            LocalArray(last, i32, 1), Fence(), Barrier(),
            If(Bin("==", tid, idx(0)), (
                AtomicAdd(counts.name, tile, Lit(1, i32), i32, old.name), Fence(),
                Store(last, idx(0), mine), If(mine, (Store(counts.name, tile, Lit(0, i32)),)))),
            Barrier()]

        def extent(size: int, block: int, origin: Expr) -> Expr:
            return idx(block) if size % block == 0 else em.bind(
                Call("min", (idx(block), Bin("-", idx(size), origin))), INDEX, prefix="n")

        rows, cols = extent(c.m.size, bm, m0), extent(c.n.size, bn, n0)
        size = em.bind(mul(rows, cols), INDEX, prefix="n")
        e = Var("fx_e")
        em.scopes.append(loopnest._Scope(frozenset({e.name})))
        outs = [KernelArg(f"out{i}", n.type.dtype, True, slot) for i, (n, slot) in
                enumerate(zip(self.group.outputs, self.outline.output_slots, strict=True))]
        stores: list[Stmt] = []
        for u in range(UNROLL):  # loads and sums first (past the end: the last element's)
            at = add(e, idx(u * threads))
            ej = em.bind(Call("min", (at, Bin("-", size, idx(1)))), INDEX, prefix="e") if u \
                else e
            row, col = ((add(m0, div(ej, bn)), add(n0, mod(ej, bn))) if isinstance(cols, Lit)
                        else (add(m0, Bin("/", ej, cols)), add(n0, Bin("%", ej, cols))))
            gid = em.bind(add(base, add(mul(row, idx(c.m.out)), mul(col, idx(c.n.out)))),
                          INDEX, prefix="gid")
            self.flat_id = gid
            self.coords = tuple(em.bind(x, INDEX, prefix="c")
                                for x in delinearize(gid, self.group.domain))
            put = tuple(Store(arg.name, gid, self.value(n, self.coords))
                        for arg, n in zip(outs, self.group.outputs, strict=True))
            stores += [If(Bin("<", at, size), put)] if u else list(put)
        body = (*em.scopes.pop().body, *stores)
        loop = For(e.name, tid, size, body, step=threads * UNROLL)
        tail = If(Bin("!=", Load(last, idx(0)), Lit(0, i32)),
                  (Fence(), *em.scopes[0].body, loop))
        return [*head, tail], [*outs, counts]

    def _open(self, node: Node, coords: tuple[Expr, ...]) -> Expr | Pending:
        if node is not self.einsum:
            return super()._open(node, coords)
        key = (node, coords)
        hit = self.em.lookup(key)
        if hit is not None:
            return hit
        at = (self.flat_id if coords == self.coords and node.type.shape == self.group.domain
              else linear(coords, row_major(node.type.shape)))
        total: Expr = Load(self.scratch.name, at)
        for k in range(1, self.chunks):
            total = Bin("+", total, Load(self.scratch.name, add(at, idx(k * node.type.size))))
        return self.em.bind(total, node.type.dtype, key)
