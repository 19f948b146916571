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
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from accy.ir.node import Node
from accy.ir.ops import Op
from accy.kernels import exprs
from accy.kernels.flat import LaneEvaluator, flat_leaves, vector_width, vectorizable
from accy.kernels.ir import INDEX, Bin, Expr, Kernel, KernelArg, Var, add, idx, mul
from accy.kernels.loopnest import implemented_ops
from accy.kernels.workgroup import (
    GroupBuilder,
    combine_kernel,
    combiner,
    coords_of,
    heavy_node,
    ops_supported,
    read_at_output_only,
    reduce_phase,
    split,
    store_outputs,
    store_partials,
    tree,
)
from accy.plans import FusionGroup, KernelOutline, ScheduleKind, is_inlined
from accy.target import TargetProfile

REDUCTIONS = (Op.REDUCE_SUM, Op.REDUCE_MAX, Op.REDUCE_MEAN)


@dataclass(frozen=True)
class Shape:
    """A reduction group's reduce op and how its input is traversed."""

    node: Node  # the reduce op
    outputs: int
    size: int  # elements reduced into each output
    trailing: bool  # the reduced axes follow the kept ones: input flat = output * size + r
    along_reduced: bool  # neighbouring reduced elements are neighbours in memory
    lanes: int  # elements per step (vector loads), 1 for scalar steps


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
    return Shape(red, outputs, size, trailing, along or outputs == 1, lanes)


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
    s = split(shape.outputs, shape.size // shape.lanes, shape.along_reduced, target)
    builder = GroupBuilder(group, outline)
    total, ids = reduce_phase(builder, s, op, dtype, _source(builder, group, shape))
    ops = implemented_ops(group)
    if s.chunks == 1:
        result = total if divisor == 1 else Bin("/", total, exprs.const(divisor, dtype))
        outs = store_outputs(builder, group, outline.output_slots, red, result, ids)
        return (Kernel(outline.entry, outline.work_item, kind, group.domain,
                       tuple([*builder.args, *outs]), builder.em.body(), s.geometry, ops),)
    scratch = KernelArg("scratch0", dtype, True, -1, shape.outputs * s.chunks)
    store_partials(builder, scratch, s.chunks, total, ids)
    first = Kernel(f"{outline.entry}_partials", outline.work_item, kind, group.domain,
                   tuple([*builder.args, scratch]), builder.em.body(), s.geometry, ops)
    return first, combine_kernel(group, outline, kind, target, scratch, s, op, red, divisor)


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
