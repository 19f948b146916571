"""indexing-lowering: gather and scatter-add in the indexed form the indexed kernels take.

A ``gather(x, indices, axis)`` of any rank becomes

    reshape(gather(reshape(x, [outer, n, inner]), reshape(indices, [m]), axis=1), shape)

with ``outer`` the product of the dims before ``axis``, ``n`` the gathered dim, ``inner`` the
product of the dims after it and ``m`` the number of indices; ``scatter_add(x, indices,
updates, axis)`` becomes the same with ``updates`` reshaped to ``[outer, m, inner]``. Reshapes
of row-major tensors move no data: the indexed generators (:mod:`accy.kernels.indexed`) read
a reshape of a buffer at the same flat offset, so the kernels see one shape of gather and one
of scatter-add whatever the program wrote. Reshapes of reshapes are composed; ops already in
the indexed form are left as they are.

Where the choices go. A tensor-stage pass can hand the kernel stage nothing but the program:
node attributes are fixed per op (``accy.ir.ops.ATTRS``: gather and scatter-add carry only
``axis``) and a :class:`~accy.product.Product` has no plan for the tensor stage. So the
choices are recorded in the program's form itself: the indexed generators take only ops in
the indexed form (rank-3 operand, ``axis=1``, 1-d indices), and this pass decides which ops
get it. ``kernel-library=disabled`` lowers nothing, leaving every gather and scatter-add to the
generic loop nest; ``scatter=conflict-free`` lowers gathers only, so scatter-adds keep the
deterministic loop nest (each output element sums its own updates in index order);
``scatter=auto`` lowers them too, and the atomic scatter kernel takes those whose dtype the
target can add atomically (f32, i32; f64, i64 with ``TargetProfile.atomics64``), the loop
nest the rest. An op the program already wrote
in the indexed form is the indexed kernels' either way; ``kernelization{disable=...}``
switches those generators off outright.

Launch geometry is the one choice the program's form cannot carry: ``gather-thread-blocks``
and ``scatter-thread-blocks`` (the seed's names; a thread block is an OpenCL work-group) go
to the kernel stage in the product's :class:`~accy.plans.LaunchPlan`, and
``kernel-outlining-planning`` gives them to the gather kernel and to the scatter-add's add
kernel: N > 0 launches N work-groups whose work-items walk the elements in a grid-stride loop
(fewer, longer-lived work-items: a knob for occupancy and atomic-contention studies); 0, the
default, leaves it to the generator (:func:`accy.kernels.indexed.auto_blocks`: one full wave
on GPUs, one work-item per element elsewhere). They apply to indexed-form ops only: with
``kernel-library=disabled`` (or where the loop nest takes an op) they change nothing.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.program import Stage
from accy.kernels.indexed import is_indexed_form
from accy.passes.base import COUNT_MAX, Pass, option
from accy.passes.rebuild import make, rebuild, with_srcs
from accy.passes.registry import register
from accy.plans import LaunchPlan, check_thread_blocks


def reshaped(node: Node, shape: tuple[int, ...]) -> Node:
    """``node`` as ``shape`` (itself when it has that shape; a reshape's source reshaped)."""
    while node.type.shape != shape and node.op is Op.RESHAPE:  # a loop: chains may be long
        node = node.srcs[0]
    if node.type.shape == shape:
        return node
    return make(Op.RESHAPE, node, shape=shape)


def lower(node: Node, srcs: tuple[Node, ...]) -> Node:
    """The indexed form of gather or scatter-add ``node`` over ``srcs``."""
    x, indices = srcs[:2]
    axis = node.attr("axis")
    outer = math.prod(x.type.shape[:axis])
    n = x.type.shape[axis]
    inner = math.prod(x.type.shape[axis + 1:])
    m = indices.type.size
    table = reshaped(x, (outer, n, inner))
    flat = reshaped(indices, (m,))
    if node.op is Op.GATHER:
        result = make(Op.GATHER, table, flat, axis=1)
    else:
        updates = reshaped(srcs[2], (outer, m, inner))
        result = make(Op.SCATTER_ADD, table, flat, updates, axis=1)
    return reshaped(result, node.type.shape)


@register
@dataclass(frozen=True)
class IndexingLowering(Pass):
    """Put gathers and scatter-adds in the indexed form ([outer, n, inner], 1-d indices)."""

    name = "indexing-lowering"
    stage = Stage.tensor

    kernel_library: Literal["enabled", "disabled"] = option(
        "enabled", "enabled: lower to the indexed form the indexed kernels take; disabled: "
        "leave gathers and scatter-adds to the loop nest")
    scatter: Literal["auto", "conflict-free"] = option(
        "auto", "auto: scatter-adds go to the atomic kernel where the target adds their dtype "
        "atomically (f32 results then depend on the order of updates); conflict-free: the "
        "deterministic loop nest")
    gather_thread_blocks: int = option(
        0, "work-groups the indexed gather kernel launches, walking the elements in a "
        "grid-stride loop (0: the generator chooses)", minimum=0, maximum=COUNT_MAX)
    scatter_thread_blocks: int = option(
        0, "work-groups the atomic scatter-add kernel launches, walking the updates in a "
        "grid-stride loop (0: the generator chooses)", minimum=0, maximum=COUNT_MAX)

    def __post_init__(self) -> None:  # bad values fail when the pipeline is read
        check_thread_blocks("gather-thread-blocks", self.gather_thread_blocks)
        check_thread_blocks("scatter-thread-blocks", self.scatter_thread_blocks)

    def run(self, ctx, product):
        lowered = {Op.GATHER: 0, Op.SCATTER_ADD: 0}
        chosen = set()
        if self.kernel_library == "enabled":
            chosen.add(Op.GATHER)
            if self.scatter == "auto":
                chosen.add(Op.SCATTER_ADD)

        def rewrite(node: Node, srcs: tuple[Node, ...]) -> Node:
            if not srcs:
                return node
            if node.op in chosen:
                rebuilt = with_srcs(node, srcs)
                if is_indexed_form(rebuilt):
                    return rebuilt
                lowered[node.op] += 1
                return lower(node, srcs)
            return with_srcs(node, srcs)

        program = rebuild(product.program, rewrite)
        ctx.stat("gathers", lowered[Op.GATHER])
        ctx.stat("scatter-adds", lowered[Op.SCATTER_ADD])
        launch = dataclasses.replace(product.launch or LaunchPlan(),
                                     gather=self.gather_thread_blocks,
                                     scatter_add=self.scatter_thread_blocks)
        return product.replace(program=program, launch=launch)
