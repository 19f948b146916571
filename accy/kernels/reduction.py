"""tree-reduction: reductions (sum, max, mean over any axes) with their fused elementwise
prologue and epilogue, as work-group reductions in local memory.

The reduced elements of each output are shared by the work-items of a work-group, which
accumulate privately, then combine through local memory (:func:`~accy.kernels.workgroup.
local_reduce`) in a fixed order, so equal inputs give bit-equal results. Work-items step
along whichever of outputs or reduced elements are neighbours in memory. Reductions of many
elements into few outputs (a full sum) are split over enough work-groups to fill the device:
the first kernel writes each group's partial result to scratch memory, a second combines
them, divides for a mean and applies the epilogue. When the reduced axes are the trailing
ones and the prologue reads contiguous data, each step reads a whole vector
(:class:`~accy.kernels.flat.LaneEvaluator`).

CPU devices run a work-group as a loop on one core, so there the local-memory tree only costs:
a reduction along contiguous memory whose prologue computes on whole vectors
(:func:`cpu_lanes`) takes one work-item per work-group, each streaming a contiguous range of
one output with ``native_vector_bytes`` loads into ``CPU_ACCUMULATORS`` independent vector
accumulators (no add latency chain); few outputs are split into about ``CPU_GROUPS_PER_CU``
ranges per compute unit, whose partials the combine kernel adds, and short outputs are taken
several to a work-item. (On PoCL, 2 cores: a 2^24-element f32 sum 1.7 ms this way against
13 ms as a work-group tree and 3-7 ms in numpy; the row sums of a 4096 x 4096 f32 1.7 ms
against 11 ms.)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.types import DType
from accy.ir.walk import Pending, evaluate
from accy.kernels import exprs
from accy.kernels.flat import LaneEvaluator, flat_leaves, vector_width, vectorizable
from accy.kernels.ir import (
    INDEX,
    Assign,
    Bin,
    Call,
    Expr,
    Id,
    Kernel,
    KernelArg,
    Lane,
    Let,
    Load,
    Splat,
    Var,
    VectorLoad,
    add,
    idx,
    mul,
)
from accy.kernels.loopnest import implemented_ops
from accy.kernels.workgroup import (
    GroupBuilder,
    GroupEmitter,
    Ids,
    Split,
    combine_kernel,
    combiner,
    coords_of,
    heavy_node,
    identity,
    ops_supported,
    read_at_output_only,
    reduce_phase,
    split,
    store_outputs,
    store_partials,
    tree,
    work_ids,
)
from accy.plans import FusionGroup, KernelOutline, LaunchGeometry, ScheduleKind, is_inlined
from accy.target import TargetProfile

REDUCTIONS = (Op.REDUCE_SUM, Op.REDUCE_MAX, Op.REDUCE_MEAN)
CPU_ACCUMULATORS = 4  # independent vector accumulators per work-item on a CPU
CPU_GROUPS_PER_CU = 4  # ranges per compute unit a CPU reduction of few outputs is split into
CPU_MIN_UNITS = 1024  # vectors per range at least before a CPU reduction is split further
# Elementwise ops whose kernel expression computes lane by lane on OpenCL vectors as written
# (no casts, no comparisons), by operand kind
_VECTOR_FLOAT = frozenset({Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.NEG, Op.ABS, Op.EXP, Op.LOG,
                           Op.SQRT, Op.RSQRT, Op.SIN, Op.COS, Op.FLOOR, Op.CEIL, Op.TANH,
                           Op.ERF, Op.POW, Op.MAX, Op.MIN, Op.RELU, Op.RECIPROCAL,
                           Op.SIGMOID, Op.GELU, Op.GELU_TANH})
_VECTOR_INT = frozenset({Op.ADD, Op.SUB, Op.MUL, Op.NEG, Op.MAX, Op.MIN, Op.RELU})


@dataclass(frozen=True)
class Shape:
    """A reduction group's reduce op and how its input is traversed."""

    node: Node  # the reduce op
    outputs: int
    size: int  # elements reduced into each output
    trailing: bool  # the reduced axes follow the kept ones: input flat = output * size + r
    along_reduced: bool  # neighbouring reduced elements are neighbours in memory
    lanes: int  # elements per step (vector loads), 1 for scalar steps
    cpu: int  # lanes of the CPU form's vectors (see the module), 0 when it does not apply


def analyse(group: FusionGroup, target: TargetProfile) -> Shape | None:
    """The :class:`Shape` of a reduction group this generator takes, else None."""
    red = heavy_node(group)
    if group.kind is not ScheduleKind.reduction or red is None or red.op not in REDUCTIONS:
        return None
    x = red.srcs[0]
    if not (x.type.dtype.is_float or x.type.dtype.is_int):
        return None
    if not ops_supported(group) or not read_at_output_only(group, red):
        return None
    axes = set(red.attr("axes"))
    outputs = red.type.size
    size = math.prod(x.type.shape[a] for a in axes)
    if outputs == 0 or size == 0:
        return None
    real = [i for i, d in enumerate(x.type.shape) if d != 1]
    kept = [i for i in real if i not in axes]
    reduced = [i for i in real if i in axes]
    trailing = not kept or not reduced or max(kept) < min(reduced)
    along = bool(reduced) and real[-1] in axes
    inside = set(group.nodes)
    leaves = flat_leaves(x, inside) or []
    lanes = vector_width([n.type.dtype for n in leaves if not is_inlined(n)]
                         + [x.type.dtype], target)
    if not (trailing and size % lanes == 0 and vectorizable([x], inside, lanes)):
        lanes = 1
    along = along or outputs == 1
    cpu = cpu_lanes(x, inside, size, target) if trailing and along else 0
    return Shape(red, outputs, size, trailing, along, lanes, cpu)


def cpu_lanes(x: Node, inside: set[Node], size: int, target: TargetProfile) -> int:
    """The vector width a CPU target reads ``x`` at, ``size`` contiguous elements per row
    (the widest of ``native_vector_bytes`` down to 2 lanes dividing them), when every op
    computing ``x`` in the group works on whole vectors (:class:`VectorEvaluator`); else 0.

    Not for GPUs (their kernels stay the work-group trees) nor f16 (rounded lane by lane)."""
    dtype = x.type.dtype
    if target.device_type != "cpu" or dtype is DType.f16 or flat_leaves(x, inside) is None:
        return 0
    safe = _VECTOR_FLOAT if dtype.is_float else _VECTOR_INT if dtype.is_int else frozenset()
    seen, stack = set(), [x]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.type.dtype is not dtype:
            return 0
        if n in inside:
            if n.op not in safe and n.op not in (Op.RESHAPE, Op.BROADCAST):
                return 0
            stack.extend(n.srcs)
    lanes = min(16, max(1, target.native_vector_bytes // dtype.itemsize))
    while lanes >= 2:
        if size % lanes == 0 and vectorizable([x], inside, lanes):
            return lanes
        lanes //= 2
    return 0


class VectorEvaluator:
    """Whole vectors of a flat computation (see :func:`cpu_lanes`): ``value(node)``.

    ``vindex`` is the vector index (in units of ``lanes`` elements) into the root's flat
    shape; leaves tiling the root are read at ``vindex % (size / lanes)``, scalars splat.
    """

    def __init__(self, em: GroupEmitter, inside: set[Node], arg_of: dict[Node, str],
                 root_size: int, lanes: int, vindex: Expr) -> None:
        self.em, self.inside, self.arg_of = em, inside, arg_of
        self.root_size, self.lanes, self.vindex = root_size, lanes, vindex
        self.memo: dict[Node, Expr] = {}

    def value(self, node: Node) -> Expr:
        return evaluate(self._open(node))  # iterative: chains may be 20,000 ops deep

    def _open(self, node: Node) -> Expr | Pending:
        if node in self.memo:
            return self.memo[node]
        dtype = node.type.dtype
        if node in self.inside and node.op in (Op.RESHAPE, Op.BROADCAST):
            return Pending([(node.srcs[0],)], self._open,
                           lambda args: self._remember(node, args[0]))
        if node in self.inside:
            op = node.op
            return Pending([(s,) for s in node.srcs], self._open,
                           lambda args: self._remember(node, self.em.bind(
                               exprs.elementwise(op, args, dtype, dtype), dtype, None,
                               prefix="x", lanes=self.lanes)))
        return self._remember(node, self._leaf(node))

    def _remember(self, node: Node, value: Expr) -> Expr:
        self.memo[node] = value
        return value

    def _leaf(self, node: Node) -> Expr:
        dtype = node.type.dtype
        key = None
        if is_inlined(node) and node.type.size == 1:  # a literal: left in place (pow(x, 2))
            return Splat(dtype, self.lanes, exprs.const(node.value.reshape(-1)[0].item(), dtype))
        if node.type.size == 1:  # the same splat at every step: bound once
            key = ("splat", node, self.lanes)
            hit = self.em.lookup(key)
            if hit is not None:
                return hit
            e = Splat(dtype, self.lanes, Load(self.arg_of[node], idx(0)))
        else:
            size = node.type.size
            at = self.vindex if size == self.root_size else Bin(
                "%", self.vindex, idx(size // self.lanes))
            e = VectorLoad(self.arg_of[node], at, self.lanes)
        return self.em.bind(e, dtype, key, prefix="x", lanes=self.lanes)


def vector_accumulators(em: GroupEmitter, dtype: DType, lanes: int, init: Expr,
                        count: int) -> list[str]:
    """``count`` mutable vectors of ``lanes`` copies of ``init``, in the current scope."""
    names = []
    for _ in range(count):
        var = em.fresh("acc")
        em.scopes[-1].body.append(Let(var, dtype, Splat(dtype, lanes, init), mutable=True,
                                      lanes=lanes))
        em.scopes[-1].defined = em.scopes[-1].defined | {var}
        names.append(var)
    return names


def vector_fold(em: GroupEmitter, names: list[str], f: Callable[[Expr, Expr], Expr],
                dtype: DType, lanes: int) -> Expr:
    """``f`` over the accumulators ``names``, then over the lanes of the result."""
    whole = tree([Var(n) for n in names], f, lambda e: em.bind(e, dtype, prefix="p",
                                                                 lanes=lanes))
    return tree([Lane(whole, i) for i in range(lanes)], f,
                lambda e: em.bind(e, dtype, prefix="p"))


def accepts(group: FusionGroup, target: TargetProfile) -> bool:
    return analyse(group, target) is not None


def build(group: FusionGroup, outline: KernelOutline, kind: ScheduleKind,
          target: TargetProfile) -> tuple[Kernel, ...]:
    """One kernel, or a partials kernel and a combine kernel when the reduction is split."""
    shape = analyse(group, target)
    assert shape is not None, "tree-reduction built for a group it does not accept"
    red = shape.node
    op = Op.REDUCE_MAX if red.op is Op.REDUCE_MAX else Op.REDUCE_SUM
    dtype = red.type.dtype
    divisor = shape.size if red.op is Op.REDUCE_MEAN else 1
    builder = GroupBuilder(group, outline)
    if shape.cpu:
        with _cpu_phase(builder, group, target, shape, op) as (s, geometry, total, ids):
            outs = _store(builder, group, outline, shape, s.chunks, total, ids, divisor)
    else:
        s = split(shape.outputs, shape.size // shape.lanes, shape.along_reduced, target)
        geometry = s.geometry
        total, ids = reduce_phase(builder, s, op, dtype, _source(builder, group, shape))
        outs = _store(builder, group, outline, shape, s.chunks, total, ids, divisor)
    ops = implemented_ops(group)
    if s.chunks == 1:
        return (Kernel(outline.entry, outline.work_item, kind, group.domain,
                       tuple([*builder.args, *outs]), builder.em.body(), geometry, ops),)
    first = Kernel(f"{outline.entry}_partials", outline.work_item, kind, group.domain,
                   tuple([*builder.args, *outs]), builder.em.body(), geometry, ops)
    return first, combine_kernel(group, outline, kind, target, outs[0], s, op, red, divisor)


def _store(builder: GroupBuilder, group: FusionGroup, outline: KernelOutline, shape: Shape,
           chunks: int, total: Expr, ids: Ids, divisor: int) -> list[KernelArg]:
    """Emit the stores of ``total``: the outputs (through the epilogue), or with more than one
    chunk the partials (in a scratch buffer, returned as the only argument)."""
    red = shape.node
    if chunks == 1:
        result = total if divisor == 1 else Bin("/", total, exprs.const(divisor, red.type.dtype))
        return store_outputs(builder, group, outline.output_slots, red, result, ids)
    scratch = KernelArg("scratch0", red.type.dtype, True, -1, shape.outputs * chunks)
    store_partials(builder, scratch, chunks, total, ids)
    return [scratch]


@contextmanager
def _cpu_phase(builder: GroupBuilder, group: FusionGroup, target: TargetProfile,
               shape: Shape, op: Op) -> Iterator[tuple[Split, LaunchGeometry, Expr, Ids]]:
    """The CPU form (see the module): one work-item per work-group, taking a range of one
    output or, for outputs shorter than ``CPU_MIN_UNITS`` vectors, several whole outputs in
    a loop (stores emitted inside the ``with`` go into it). Yields the split, the launch, the
    work-item's total and its indices."""
    units = shape.size // shape.cpu
    workers = CPU_GROUPS_PER_CU * target.compute_units
    per_item = max(1, min(CPU_MIN_UNITS // units, shape.outputs // workers))
    chunks = max(1, min(-(-workers // shape.outputs), units // CPU_MIN_UNITS))
    chunk = -(-units // chunks)
    chunk = -(-chunk // CPU_ACCUMULATORS) * CPU_ACCUMULATORS
    s = Split(shape.outputs, units, 1, 1, -(-units // chunk), chunk, True)
    em = builder.em
    if per_item == 1:
        ids = work_ids(em, s)
        yield s, s.geometry, _cpu_total(builder, group, shape, s, ids, op), ids
        return
    items = -(-shape.outputs // per_item)
    first = em.bind(mul(Id("group", 0), idx(per_item)), INDEX, prefix="first")
    last: Expr = add(first, idx(per_item))
    if items * per_item > shape.outputs:
        last = em.bind(Call("min", (last, idx(shape.outputs))), INDEX, prefix="last")
    with em.strided(first, last, 1) as o:
        ids = Ids(idx(0), idx(0), idx(0), o, o, idx(0), None, True, 1)
        yield s, LaunchGeometry((items,), (1,)), _cpu_total(builder, group, shape, s, ids,
                                                            op), ids


def _cpu_total(builder: GroupBuilder, group: FusionGroup, shape: Shape, s: Split, ids: Ids,
               op: Op) -> Expr:
    """Stream the work-item's range of output ``ids.clamped`` into vector accumulators;
    their total."""
    red, lanes, units = shape.node, shape.cpu, s.units
    dtype = red.type.dtype
    em = builder.em
    f = combiner(op, dtype)
    start: Expr = idx(0)
    stop: Expr = idx(units)
    if s.chunks > 1:
        start = em.bind(mul(ids.chunk, idx(s.chunk)), INDEX, prefix="start")
        end = add(start, idx(s.chunk))
        stop = em.bind(Call("min", (end, idx(units))) if s.chunks * s.chunk > units else end,
                       INDEX, prefix="stop")
    base = em.bind(mul(ids.clamped, idx(units)), INDEX, prefix="base")
    count = min(CPU_ACCUMULATORS, units)  # a multiple of every chunk but the last
    accs = vector_accumulators(em, dtype, lanes, identity(op, dtype), count)
    inside = set(group.nodes)

    def accumulate(acc: str, u: Expr) -> None:
        at = em.bind(add(base, u), INDEX, prefix="vi")
        v = VectorEvaluator(em, inside, builder.arg_of, red.srcs[0].type.size, lanes, at)
        em.emit(Assign(acc, f(Var(acc), v.value(red.srcs[0]))))

    whole = idx(units // count * count) if s.chunks == 1 else stop
    if s.chunks > 1 and units % count:
        whole = em.bind(Bin("-", stop, Bin("%", Bin("-", stop, start), idx(count))), INDEX,
                        prefix="whole")
    with em.strided(start, whole, count) as k:
        for j, acc in enumerate(accs):
            accumulate(acc, add(k, idx(j)) if j else k)
    if units % count:
        with em.strided(whole, stop, 1) as k:
            accumulate(accs[0], k)
    return vector_fold(em, accs, f, dtype, lanes)


def _source(builder: GroupBuilder, group: FusionGroup, shape: Shape
            ) -> Callable[[Expr, Var], Expr]:
    """``source(output, step)``: the prologue's value (or lanes, combined) at one step."""
    red = shape.node
    x = red.srcs[0]
    em = builder.em
    inside = set(group.nodes)
    f = combiner(Op.REDUCE_MAX if red.op is Op.REDUCE_MAX else Op.REDUCE_SUM, red.type.dtype)
    if shape.lanes > 1:
        per_output = shape.size // shape.lanes

        def vector(o: Expr, u: Var) -> Expr:
            at = em.bind(add(mul(o, idx(per_output)), u), INDEX, prefix="vi")
            lanes = LaneEvaluator(em, inside, builder.arg_of, x.type.size, shape.lanes, at)
            return tree([lanes.value(x, lane) for lane in range(shape.lanes)], f,
                        lambda e: em.bind(e, red.type.dtype, prefix="p"))

        return vector
    if shape.trailing:

        def trailing(o: Expr, u: Var) -> Expr:
            flat = em.bind(add(mul(o, idx(shape.size)), u), INDEX, prefix="f")
            coords = coords_of(flat, x.type.shape, em)
            builder.at(flat, coords, x.type.shape)
            return builder.value(x, coords)

        return trailing
    axes = red.attr("axes")
    kept_shape = tuple(d for i, d in enumerate(x.type.shape) if i not in axes)
    reduced_shape = tuple(x.type.shape[a] for a in sorted(axes))
    kept_cache: dict[Expr, tuple[Expr, ...]] = {}

    def general(o: Expr, u: Var) -> Expr:
        if o not in kept_cache:
            kept_cache[o] = coords_of(o, kept_shape, em)
        kept, reduced = iter(kept_cache[o]), iter(coords_of(u, reduced_shape, em))
        coords = tuple(next(reduced) if i in axes else next(kept)
                       for i in range(x.type.rank))
        builder.at(idx(-1), (), None)
        return builder.value(x, coords)

    return general


def _register() -> None:
    from accy.kernels.generators import Generator, register_generator

    register_generator(Generator(
        "tree-reduction",
        "reductions with prologue/epilogue: work-group tree reductions in local memory, "
        "split over the device (partials in scratch, then a combine kernel) for few outputs",
        accepts, build))


_register()
