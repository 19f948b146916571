"""kernel-outlining-planning: entry name, argument slots and launch geometry per work item
(with the work-group counts of the product's launch plan)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from accy.ir.program import Stage
from accy.kernels.workgroup import heavy_node
from accy.passes.base import COUNT_MAX, Pass, option
from accy.passes.dispatch.fusion_planning import op_name
from accy.passes.registry import register
from accy.plans import (
    FusionGroup,
    KernelOutline,
    LaunchGeometry,
    LaunchPlan,
    OutlinePlan,
    is_inlined,
)
from accy.target import TargetProfile


def entry_name(ops: list[str], max_ops: int) -> str:
    """``add_mul_sub_max``: the distinct op names in order, capped at ``max_ops``.

    A kernel of one op gets ``_kernel`` appended: op names such as ``exp`` or ``max`` are
    OpenCL built-in functions and may not name a kernel.
    """
    distinct = list(dict.fromkeys(ops))
    name = "_".join(distinct[:max_ops])
    if len(distinct) > max_ops:
        name += f"_and_{len(distinct) - max_ops}_more"
    return name if len(distinct) > 1 else f"{name}_kernel"


def thread_blocks(group: FusionGroup, plan: LaunchPlan | None) -> int:
    """The work-groups the tensor stage asked for the kernel of the group's one heavy op (0:
    none, the generator chooses)."""
    heavy = heavy_node(group)
    return 0 if plan is None or heavy is None else plan.thread_blocks(heavy.op)


@register
@dataclass(frozen=True)
class KernelOutliningPlanning(Pass):
    """Decide each kernel's entry name, argument buffers and launch geometry."""

    name = "kernel-outlining-planning"
    stage = Stage.kernel
    preserves = frozenset({"uses", "liveness", "slot-map"})

    work_group_size: int = option(256, "work-items per work-group (capped by the target)",
                                  minimum=1, maximum=COUNT_MAX)
    max_name_ops: int = option(6, "op names to put in a kernel's entry name at most",
                               minimum=1, maximum=64)

    def run(self, ctx, product):
        fusion = product.require("fusion", self.name, "fusion-planning")
        schedule = product.require("schedule", self.name, "schedule-planning")
        product.require("buffers", self.name, "bufferization-planning")
        slots = ctx.analysis("slot-map", product)
        if self.work_group_size <= 0:
            raise ValueError(f"work-group-size must be positive, got {self.work_group_size}")
        target = product.target or TargetProfile()
        cap = min(self.work_group_size, target.max_work_group_size)
        taken: dict[str, int] = {}
        outlines = []
        for item in schedule.items:
            group = fusion.groups[item.group]
            base = entry_name([op_name(n) for n in group.nodes], self.max_name_ops)
            count = taken.get(base, 0)
            taken[base] = count + 1
            entry = base if count == 0 else f"{base}_{count}"
            ins = tuple(slots[(item.function, n)] for n in group.inputs if not is_inlined(n))
            outs = tuple(slots[(item.function, n)] for n in group.outputs)
            size = math.prod(item.domain)
            local = min(cap, 1 << max(0, size - 1).bit_length())  # small domains: one group
            groups = max(1, -(-size // local))
            outlines.append(KernelOutline(item.id, entry, ins, outs,
                                          LaunchGeometry((groups * local,), (local,)),
                                          thread_blocks(group, product.launch)))
        return product.replace(outline=OutlinePlan(tuple(outlines)))
