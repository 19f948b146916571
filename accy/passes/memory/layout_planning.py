"""layout-planning: strides and alignment of every buffer slot."""

from __future__ import annotations

from dataclasses import dataclass

from accy.ir.program import Stage
from accy.kernels.ir import row_major
from accy.passes.base import Pass, option
from accy.passes.registry import register
from accy.plans import LayoutPlan, SlotLayout


@register
@dataclass(frozen=True)
class LayoutPlanning(Pass):
    """Give every buffer slot contiguous row-major strides and an alignment."""

    name = "layout-planning"
    stage = Stage.memory
    preserves = frozenset({"uses", "liveness", "slot-map"})

    alignment: int = option(64, "byte alignment requested for every buffer")

    def run(self, ctx, product):
        buffers = product.require("buffers", self.name, "bufferization-planning")
        if self.alignment <= 0 or self.alignment & (self.alignment - 1):
            raise ValueError(f"alignment must be a power of two, got {self.alignment}")
        layouts = []
        for slot in buffers.slots:
            shape = slot.values[0].type.shape
            layouts.append(SlotLayout(slot.id, shape, row_major(shape), self.alignment))
        return product.replace(layout=LayoutPlan(tuple(layouts)))
