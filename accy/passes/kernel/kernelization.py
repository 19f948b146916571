"""kernelization: turn each outlined work item into a kernel (accy.kernels.ir)."""

from __future__ import annotations

from dataclasses import dataclass

from accy.ir.program import Stage
from accy.kernels import loopnest
from accy.passes.base import Pass
from accy.passes.registry import register


@register
@dataclass(frozen=True)
class Kernelization(Pass):
    """Build each work item's kernel body: loads, math, loops and stores."""

    name = "kernelization"
    stage = Stage.kernel
    preserves = frozenset({"uses", "liveness", "slot-map"})

    def run(self, ctx, product):
        fusion = product.require("fusion", self.name, "fusion-planning")
        schedule = product.require("schedule", self.name, "schedule-planning")
        outline = product.require("outline", self.name, "kernel-outlining-planning")
        kernels = []
        for item, out in zip(schedule.items, outline.outlines, strict=True):
            kernels.append(loopnest.build(fusion.groups[item.group], out, item.kind))
        return product.replace(kernels=tuple(kernels))
