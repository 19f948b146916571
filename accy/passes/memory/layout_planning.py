"""layout-planning: strides, alignment and vector width of every buffer slot; the bank padding
of local-memory tiles."""

from __future__ import annotations

from dataclasses import dataclass

from accy.ir.program import Stage
from accy.kernels.contraction_plan import FLOATS, analyse, choose_tiles, transposing
from accy.kernels.ir import row_major
from accy.passes.base import Pass, option
from accy.passes.registry import register
from accy.plans import FusionPlan, LayoutPlan, SlotLayout
from accy.target import TargetProfile

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
    padding of buffers: kernels index them as dense row-major arrays, so padded strides would
    need every generator to honour them. Local memory is padded where work-items walk across
    the rows of a tile: the tiled contraction's transposing tile copies, whose rows get
    :func:`~accy.kernels.contraction_plan.bank_padding` for the target (on GPUs); the
    statistics ``local tile rows padded by P`` count them. (Work-group reductions read their
    local arrays along rows only and need none.)
    """

    name = "layout-planning"
    stage = Stage.memory
    preserves = frozenset({"uses", "liveness", "slot-map"})

    alignment: int = option(64, "byte alignment requested for every buffer", minimum=1,
                            maximum=4096, power_of_two=True)

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
        if product.fusion is not None:
            pads = local_padding(product.fusion, product.target or TargetProfile())
            for pad in sorted(pads):
                ctx.stat(f"local tile rows padded by {pad}", pads[pad])
        return product.replace(layout=LayoutPlan(tuple(layouts)))


def local_padding(fusion: FusionPlan, target: TargetProfile) -> dict[int, int]:
    """How many local tiles of the groups' tiled contractions get rows padded by how many
    elements (tiles copied along their rows are not counted)."""
    pads: dict[int, int] = {}
    for group in fusion.groups:
        found = analyse(group)
        if isinstance(found, str) or found[1].dtype not in FLOATS:  # f16: no tiled kernel
            continue
        form = found[1]
        tiles = choose_tiles(form, target)
        for side in ("x", "y"):
            if transposing(form, side) and tiles.pad:
                pads[tiles.pad] = pads.get(tiles.pad, 0) + 1
    return pads
