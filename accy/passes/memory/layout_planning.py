"""layout-planning: strides, alignment and vector width of every buffer slot."""

from __future__ import annotations

from dataclasses import dataclass

from accy.ir.program import Stage
from accy.kernels.ir import row_major
from accy.passes.base import Pass, option
from accy.passes.registry import register
from accy.plans import LayoutPlan, SlotLayout

VECTOR_WIDTHS = (16, 8, 4, 2, 1)  # OpenCL vector types


def vector_width(shape: tuple[int, ...], itemsize: int, alignment: int) -> int:
    """The widest OpenCL vector width whose vectors tile every row of a contiguous row-major
    ``shape`` (it divides the innermost extent) and stay aligned (its byte size divides the
    buffer ``alignment``). Scalars and empty tensors get 1."""
    inner = shape[-1] if shape else 1
    for w in VECTOR_WIDTHS:
        if inner > 0 and inner % w == 0 and alignment % (w * itemsize) == 0:
            return w
    return 1


@register
@dataclass(frozen=True)
class LayoutPlanning(Pass):
    """Give every buffer slot contiguous row-major strides, an alignment and a vector width.

    The vector width is recorded for kernel generators to use (vector loads and stores). No
    padding: kernels index buffers as dense row-major arrays, so padded strides would need
    every generator to honour them.
    """

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
            t = slot.values[0].type
            width = vector_width(t.shape, t.dtype.itemsize, self.alignment)
            layouts.append(SlotLayout(slot.id, t.shape, row_major(t.shape), self.alignment,
                                      width))
        widths: dict[int, int] = {}
        for lay in layouts:
            widths[lay.vector_width] = widths.get(lay.vector_width, 0) + 1
        for w in sorted(widths):
            ctx.stat(f"vector width {w}", widths[w])
        return product.replace(layout=LayoutPlan(tuple(layouts)))
