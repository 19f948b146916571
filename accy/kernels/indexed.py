"""indexed-gather and indexed-scatter: kernels for gathers and scatter-adds in the indexed form.

``indexing-lowering`` puts every gather and scatter-add in one form: a table ``x`` of shape
``[outer, n, inner]``, 1-d ``indices`` of length ``m``, ``axis=1`` (:func:`is_indexed_form`),
between reshapes. These generators take fusion groups whose one heavy op has that form, with
any elementwise or movement prologue and epilogue. A reshape of a buffer is read at the same
flat offset (:class:`IndexedBuilder`), so the lowering's reshapes cost no index arithmetic.

**Bounds policy** (the one statement of it; the loop nest follows it too): indices must lie
in ``[0, n)``. The interpreter raises ``InterpretError`` for any other, negative ones included
(there is no wrap-around). Kernels cannot raise, so every kernel clamps each index into
``[0, n - 1]`` once, where it is read (:func:`clamp_index`): an out-of-range gather reads the
nearest edge row and an out-of-range update is added to it. That keeps every access in bounds
and the result deterministic; valid programs never see it.

**Gather**: one work-item per output element, in row-major order, so neighbouring work-items
read neighbouring elements of a row (coalesced along ``inner``); the index is loaded and
clamped once per element. On CPUs, rows of at least ``ROW_FORM_MIN_INNER`` elements are
copied one work-item per row instead (the index read once, a loop the compiler vectorises).

**Launch**: ``outline.thread_blocks`` (``indexing-lowering{gather-thread-blocks=N
scatter-thread-blocks=N}``) > 0 launches the gather kernel, or the scatter-add's add kernel,
as that many work-groups walking the elements in a grid-stride loop. 0 (the default) lets the
generator choose (:func:`auto_blocks`), for these and the scatter-add's copy and epilogue
kernels alike: on a GPU whose compute units the target knows, one full wave
(``AUTO_BLOCKS_PER_UNIT`` work-groups per compute unit) in a grid-stride loop once there are
more elements than that wave has work-items; else one work-item per element. On the H200
(2^28-element gather from a [2^20, 64] table) the wave took 0.59 ms against 1.20 ms for one
work-item per element, the atomic adds 1.26 against 1.55 ms (``experiments/bench_indexing.py``).

**Scatter-add** in O(updates) instead of the loop nest's O(table x updates): a first kernel
copies ``x`` (with its prologue) into the accumulator, a second runs one work-item per update
element and adds it at its clamped index atomically (:class:`~accy.kernels.ir.AtomicAdd`:
``atomic_add`` for i32; for f32 an ``atomic_cmpxchg`` loop on the value's bits, as OpenCL 1.2
has no float atomics). The accumulator is the output
buffer when the group writes nothing but the scatter-add (or reshapes of it); otherwise it is
scratch memory and a third kernel computes the group's outputs from it, one work-item per
element. **f32 results are order-nondeterministic**: updates to one element are added in
whatever order the device runs them, so repeated indices give sums that may differ in the
last bits from run to run (i32 sums are exact in any order). Programs that need bit-equal
results use ``indexing-lowering{scatter=conflict-free}`` or ``kernelization{disable=
indexed-scatter}``: the loop nest, where each output element adds its updates in index order.
f64 and i64 scatter-adds take the atomic kernel where the target has 64-bit atomics
(``TargetProfile.atomics64``: ``cl_khr_int64_base_atomics``), the loop nest elsewhere.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.types import DType
from accy.ir.walk import Pending, evaluate
from accy.kernels import exprs
from accy.kernels.ir import (
    INDEX,
    AtomicAdd,
    Bin,
    Call,
    Cast,
    Expr,
    Id,
    If,
    Kernel,
    KernelArg,
    Load,
    Return,
    Store,
    Var,
    delinearize,
    idx,
    linear,
    row_major,
)
from accy.kernels.loopnest import implemented_ops
from accy.kernels.workgroup import GroupBuilder, coords_of, heavy_node, ops_supported, pow2ceil
from accy.plans import FusionGroup, KernelOutline, LaunchGeometry, ScheduleKind, is_inlined
from accy.target import TargetProfile

ATOMIC_DTYPES = (DType.f32, DType.i32)  # what OpenCL 1.1 can add atomically (f32 via cmpxchg)
ATOMIC64_DTYPES = (DType.f64, DType.i64)  # with cl_khr_int64_base_atomics (target.atomics64)


def clamp_index(value: Expr, extent: int) -> Expr:
    """An integer tensor element as an index into a dim of ``extent``, clamped into
    ``[0, extent - 1]``: the bounds policy of the module docstring."""
    return Call("clamp", (Cast(INDEX, value), idx(0), idx(max(extent - 1, 0))))


def is_indexed_form(node: Node) -> bool:
    """Whether a gather or scatter-add has the indexed form: ``x`` of rank 3, ``axis=1``,
    1-d indices."""
    x, indices = node.srcs[:2]
    return x.type.rank == 3 and node.attr("axis") == 1 and indices.type.rank == 1


class IndexedBuilder(GroupBuilder):
    """A group builder that reads a reshape of a buffer at the same flat offset, and reads
    the nodes in ``stored`` from the named buffers instead of computing them."""

    def __init__(self, group: FusionGroup, outline: KernelOutline,
                 stored: dict[Node, str] | None = None) -> None:
        super().__init__(group, outline)
        self.stored = stored or {}

    def _open(self, node: Node, coords: tuple[Expr, ...]) -> Expr | Pending:
        key = (node, coords)
        hit = self.em.lookup(key)
        if hit is not None:
            return hit
        if node in self.stored:
            at = linear(coords, row_major(node.type.shape))
            return self.em.bind(Load(self.stored[node], at), node.type.dtype, key)
        if node in self.inside and node.op is Op.RESHAPE:
            flat = (self.flat_id if coords == self.coords and node.type.shape == self.flat_shape
                    else linear(coords, row_major(node.type.shape)))
            dtype = node.type.dtype
            return Pending([(node.srcs[0], flat)], self._open_flat,
                           lambda args: self.em.bind(args[0], dtype, key))
        return super()._open(node, coords)

    def at_flat(self, node: Node, flat: Expr) -> Expr:
        """Element ``flat`` (row-major) of ``node``: reshapes and elementwise ops over operands
        of their own shape (or scalars) keep the flat index; anything else is read at
        coordinates."""
        return evaluate(self._open_flat(node, flat))

    def _open_flat(self, node: Node, flat: Expr) -> Expr | Pending:
        while node.op is Op.RESHAPE and node in self.inside and node not in self.stored:
            node = node.srcs[0]
        key = (node, "flat", flat)
        hit = self.em.lookup(key)
        if hit is not None:
            return hit
        if node in self.stored or (node not in self.inside and not is_inlined(node)):
            buf = self.stored.get(node) or self.arg_of[node]
            return self.em.bind(Load(buf, flat), node.type.dtype, key)
        if node.op.is_elementwise and all(s.type.shape == node.type.shape or s.type.size == 1
                                          for s in node.srcs):
            operand = node.srcs[1] if node.op is Op.SELECT else node.srcs[0]
            op, dtype = node.op, node.type.dtype
            return Pending(
                [(s, flat if s.type.shape == node.type.shape else idx(0)) for s in node.srcs],
                self._open_flat,
                lambda args: self.em.bind(
                    exprs.elementwise(op, args, operand.type.dtype, dtype), dtype, key))
        return self._open(node, coords_of(flat, node.type.shape, self.em))


AUTO_BLOCKS_PER_UNIT = 8  # work-groups per compute unit in an automatic grid-stride wave


def auto_blocks(target: TargetProfile, elements: int, local: int) -> int:
    """The work-groups a kernel over ``elements`` launches when none were asked for: one full
    wave (``AUTO_BLOCKS_PER_UNIT`` per compute unit: 2048 work-items of 256, what a recent
    NVIDIA multiprocessor holds at once) on a GPU whose compute units are known (a generic
    profile says 1), when there are more elements than that; 0 (one work-item per element)
    otherwise, CPUs included."""
    if target.device_type != "gpu" or target.compute_units <= 1:
        return 0
    blocks = AUTO_BLOCKS_PER_UNIT * target.compute_units
    return blocks if elements > blocks * local else 0


def _per_element(builder: IndexedBuilder, group: FusionGroup, outline: KernelOutline,
                 kind: ScheduleKind, entry: str, domain: tuple[int, ...],
                 args: list[KernelArg], body: Callable[[Var], None], target: TargetProfile,
                 blocks: int = 0) -> Kernel:
    """A kernel over the elements of ``domain``; ``body(e)`` emits the work of element ``e``.
    ``blocks`` N > 0: N work-groups whose work-items walk the elements in a grid-stride loop;
    0: :func:`auto_blocks` decides (0 again: one work-item per element)."""
    size = math.prod(domain)
    local = min(outline.geometry.local_size[0], pow2ceil(size))
    blocks = blocks or auto_blocks(target, size, local)
    global_size = blocks * local if blocks else -(-size // local) * local
    gid = builder.em.bind(Id("global", 0), INDEX, prefix="gid")
    assert isinstance(gid, Var)
    if blocks:
        with builder.em.strided(gid, idx(size), global_size) as element:
            body(element)
    else:
        if global_size > size:
            builder.em.emit(If(Bin(">=", gid, idx(size)), (Return(),)))
        body(gid)
    return Kernel(entry, outline.work_item, kind, domain, tuple(builder.args + args),
                  builder.em.body(), LaunchGeometry((global_size,), (local,)),
                  implemented_ops(group))


def _output_args(group: FusionGroup, outline: KernelOutline) -> list[KernelArg]:
    return [KernelArg(f"out{i}", n.type.dtype, True, slot)
            for i, (n, slot) in enumerate(zip(group.outputs, outline.output_slots, strict=True))]


def _store_outputs(builder: IndexedBuilder, group: FusionGroup, outline: KernelOutline,
                   kind: ScheduleKind, entry: str, target: TargetProfile,
                   blocks: int = 0) -> Kernel:
    """The kernel writing every output of ``group`` (work-items as in :func:`_per_element`)."""
    outs = _output_args(group, outline)

    def body(gid: Var) -> None:
        coords = delinearize(gid, group.domain)
        builder.at(gid, coords, group.domain)
        for arg, node in zip(outs, group.outputs, strict=True):
            builder.em.emit(Store(arg.name, gid, builder.value(node, coords)))

    return _per_element(builder, group, outline, kind, entry, group.domain, outs, body, target,
                        blocks)


def _heavy(group: FusionGroup, op: Op) -> Node | None:
    """The group's indexed-form ``op``, when the group is one these generators take."""
    node = heavy_node(group)
    if group.kind is not ScheduleKind.indexed or node is None or node.op is not op:
        return None
    if not is_indexed_form(node) or node.srcs[0].type.shape[1] == 0:
        return None
    if math.prod(group.domain) == 0 or not ops_supported(group):
        return None
    return node


def accepts_gather(group: FusionGroup, target: TargetProfile) -> bool:
    """Groups whose heavy op is a gather in the indexed form (from a non-empty table)."""
    del target  # every device takes it
    return _heavy(group, Op.GATHER) is not None


ROW_FORM_MIN_INNER = 8  # CPU gathers copy whole rows once a row has this many elements


def build_gather(group: FusionGroup, outline: KernelOutline, kind: ScheduleKind,
                 target: TargetProfile) -> tuple[Kernel, ...]:
    """One kernel: one work-item per output element (the loop nest's gather, clamped once,
    with the lowering's reshapes read as flat offsets), or ``outline.thread_blocks``
    work-groups in a grid-stride loop; on CPUs, unless thread blocks were asked for, one
    work-item per gathered row (:func:`_gather_rows`)."""
    node = _heavy(group, Op.GATHER)
    assert node is not None, "indexed-gather built for a group it does not accept"
    if (target.device_type == "cpu" and not outline.thread_blocks
            and node.type.shape[2] >= ROW_FORM_MIN_INNER and _keeps_order(group, node)):
        return (_gather_rows(group, outline, kind, node, target),)
    return (_store_outputs(IndexedBuilder(group, outline), group, outline, kind,
                           outline.entry, target, outline.thread_blocks),)


def _keeps_order(group: FusionGroup, node: Node) -> bool:
    """Whether every output is ``node`` through ops that keep its element order: reshapes, and
    elementwise ops over operands of their own shape or of one element (the ops
    :meth:`IndexedBuilder.at_flat` reads at the flat offset)."""
    downstream = {node}
    for n in group.nodes:  # operands before users
        if n is not node and any(s in downstream for s in n.srcs):
            downstream.add(n)
            same = all(s.type.shape == n.type.shape or s.type.size == 1 for s in n.srcs)
            if n.op is not Op.RESHAPE and not (n.op.is_elementwise and same):
                return False
    return all(o in downstream for o in group.outputs)


def _gather_rows(group: FusionGroup, outline: KernelOutline, kind: ScheduleKind,
                 node: Node, target: TargetProfile) -> Kernel:
    """One work-item per gathered row ``(o, j)``: the index is read and clamped once, then a
    loop over the row's ``inner`` contiguous elements, which the CPU compiler vectorises
    (PoCL, [2^16, 64] table and 2^16 ids: 1.0 ms against 12.4 ms for one work-item per
    element). The gather's value at ``(o, j, c)`` is bound as its element ``(o*m + j)*inner +
    c``, the flat offset every output is written at and reaches it by (:func:`_keeps_order`)."""
    outer, m, inner = node.type.shape
    builder = IndexedBuilder(group, outline)
    em = builder.em
    outs = _output_args(group, outline)

    def body(row: Var) -> None:
        o = em.bind(Bin("/", row, idx(m)), INDEX, prefix="o") if outer > 1 else idx(0)
        j = em.bind(Bin("%", row, idx(m)), INDEX, prefix="j") if outer > 1 else row
        with em.strided(idx(0), idx(inner), 1) as c:
            flat = em.bind(linear((row, c), (inner, 1)), INDEX, prefix="f")
            builder.at(flat, (), None)
            value = builder.value(node, (o, j, c))
            assert isinstance(value, Var)
            em.remember((node, "flat", flat), value)
            for arg, out in zip(outs, group.outputs, strict=True):
                em.emit(Store(arg.name, flat, builder.at_flat(out, flat)))

    return _per_element(builder, group, outline, kind, outline.entry, (outer, m), outs, body,
                        target)


def accepts_scatter(group: FusionGroup, target: TargetProfile) -> bool:
    """Groups whose heavy op is a scatter-add in the indexed form of a dtype the target adds
    atomically: f32 and i32 (core OpenCL 1.1), f64 and i64 with 64-bit atomics."""
    node = _heavy(group, Op.SCATTER_ADD)
    return node is not None and (node.type.dtype in ATOMIC_DTYPES or (
        target.atomics64 and node.type.dtype in ATOMIC64_DTYPES))


def build_scatter(group: FusionGroup, outline: KernelOutline, kind: ScheduleKind,
                  target: TargetProfile) -> tuple[Kernel, ...]:
    """Copy ``x`` into the accumulator, add the updates atomically, and (when the group
    writes more than the scatter-add) compute the outputs from the accumulator."""
    node = _heavy(group, Op.SCATTER_ADD)
    assert node is not None, "indexed-scatter built for a group it does not accept"
    table, indices, updates = node.srcs
    dtype = node.type.dtype
    outer, n, inner = table.type.shape
    root = group.outputs[0]
    while root.op is Op.RESHAPE and root is not node:
        root = root.srcs[0]
    direct = root is node and len(group.outputs) == 1  # the group writes the scatter-add only
    acc = (KernelArg("out0", dtype, True, outline.output_slots[0]) if direct
           else KernelArg("scratch0", dtype, True, -1, node.type.size))

    init = IndexedBuilder(group, outline)

    def copy(gid: Var) -> None:
        coords = delinearize(gid, table.type.shape)
        init.at(gid, coords, table.type.shape)
        init.em.emit(Store(acc.name, gid, init.value(table, coords)))

    kernels = [_per_element(init, group, outline, kind, f"{outline.entry}_init",
                            table.type.shape, [acc], copy, target)]
    add = IndexedBuilder(group, outline)
    shape = updates.type.shape

    def scatter(gid: Var) -> None:
        o, j, c = coords = coords_of(gid, shape, add.em)
        add.at(gid, coords, shape)
        k = add.em.bind(clamp_index(add.value(indices, (j,)), n), INDEX, prefix="i")
        at = add.em.bind(linear((o, k, c), (n * inner, inner, 1)), INDEX, prefix="t")
        add.em.emit(AtomicAdd(acc.name, at, add.value(updates, coords), dtype))

    kernels.append(_per_element(add, group, outline, kind, f"{outline.entry}_add", shape,
                                [acc], scatter, target, outline.thread_blocks))
    if not direct:
        builder = IndexedBuilder(group, outline, {node: acc.name})
        builder.args.append(acc)
        kernels.append(_store_outputs(builder, group, outline, kind, outline.entry, target))
    return tuple(kernels)


def _register() -> None:
    from accy.kernels.generators import Generator, register_generator

    register_generator(Generator(
        "indexed-gather",
        "gathers in the indexed form: one work-item per output element, index clamped once",
        accepts_gather, build_gather))
    register_generator(Generator(
        "indexed-scatter",
        "f32/i32 scatter-adds in the indexed form: copy, then one work-item per update adding "
        "atomically (f32 sums depend on the order of updates)",
        accepts_scatter, build_scatter))


_register()
