"""kernelization: turn each outlined work item into kernels (accy.kernels.ir)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from accy.ir.program import Stage
from accy.kernels.generators import GENERATORS, choose
from accy.kernels.ir import Kernel
from accy.passes.base import Pass, option
from accy.passes.registry import register
from accy.plans import MemorySpacePlan
from accy.target import PRECISIONS, TargetProfile


@register
@dataclass(frozen=True)
class Kernelization(Pass):
    """Build each work item's kernels with the best generator that takes its group."""

    name = "kernelization"
    stage = Stage.kernel
    preserves = frozenset({"uses", "liveness", "slot-map"})

    disable: tuple[str, ...] = option((), "kernel generators not to use (the loop nest stays)")
    precision: Literal["ieee", "tf32", "3xtf32"] = option(
        "ieee", "f32 contraction precision: ieee (f32, default), tf32 (TF32 operands on tensor "
        "cores, opt-in), 3xtf32 (split TF32, ~f32 accuracy); tensor cores only where the "
        "target recorded them", choices=PRECISIONS)

    def run(self, ctx, product):
        fusion = product.require("fusion", self.name, "fusion-planning")
        schedule = product.require("schedule", self.name, "schedule-planning")
        outline = product.require("outline", self.name, "kernel-outlining-planning")
        unknown = sorted(set(self.disable) - set(GENERATORS))
        if unknown:
            raise ValueError(f"unknown kernel generators {unknown}; known: "
                             f"{', '.join(GENERATORS)}")
        target = product.target or TargetProfile()
        kernels = []
        used: dict[str, int] = {}
        for item, out in zip(schedule.items, outline.outlines, strict=True):
            group = fusion.groups[item.group]
            gen = choose(group, target, frozenset(self.disable), self.precision)
            used[gen.name] = used.get(gen.name, 0) + 1
            kernels.extend(gen.build(group, out, item.kind, target))
        for name, count in used.items():
            ctx.stat(f"generator {name}", count)
        if product.spaces is not None:
            kernels = [with_spaces(k, product.spaces) for k in kernels]
        return product.replace(kernels=tuple(kernels))


def with_spaces(kernel: Kernel, spaces: MemorySpacePlan) -> Kernel:
    """``kernel`` with each input argument in its slot's memory space (outputs, scratch and
    ``kernel.global_args`` stay global)."""
    args = tuple(a if a.is_output or a.is_scratch or a.name in kernel.global_args else
                 dataclasses.replace(a, space=spaces.space_of(a.slot)) for a in kernel.args)
    return kernel if args == kernel.args else dataclasses.replace(kernel, args=args)
