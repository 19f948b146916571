"""bufferization-planning: a buffer slot for every value kernels read or write."""

from __future__ import annotations

from dataclasses import dataclass

from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.program import Stage
from accy.passes.analysis import analysis
from accy.passes.base import Pass, option
from accy.passes.registry import register
from accy.plans import BufferPlan, BufferSlot, SlotRole, is_inlined
from accy.product import Product


@analysis("liveness")
def liveness(product: Product) -> dict[tuple[int, Node], int]:
    """(function, value) -> position of the last work item that reads it."""
    fusion, schedule = product.fusion, product.schedule
    last: dict[tuple[int, Node], int] = {}
    for pos, item in enumerate(schedule.items):
        for n in fusion.groups[item.group].inputs:
            last[(item.function, n)] = pos
    return last


@analysis("slot-map")
def slot_map(product: Product) -> dict[tuple[int, Node], int]:
    """(function, value) -> the id of the buffer slot holding it."""
    return {(s.function, v): s.id for s in product.buffers.slots for v in s.values}


@register
@dataclass(frozen=True)
class BufferizationPlanning(Pass):
    """Give inputs, constants, outputs and intermediates buffer slots, reusing dead ones."""

    name = "bufferization-planning"
    stage = Stage.memory
    preserves = frozenset({"uses", "liveness"})

    reuse: bool = option(True, "let intermediates share a slot when their lifetimes do not overlap")

    def run(self, ctx, product):
        fusion = product.require("fusion", self.name, "fusion-planning")
        schedule = product.require("schedule", self.name, "schedule-planning")
        last_use = ctx.analysis("liveness", product)
        slots: list[dict] = []

        def new_slot(fi: int, role: SlotRole, node: Node) -> dict:
            slot = {"id": len(slots), "function": fi, "role": role, "nbytes": node.type.nbytes,
                    "values": [node], "free_after": None}
            slots.append(slot)
            return slot

        bytes_moved = 0
        peak = 0
        for fi, fn in enumerate(product.program.functions):
            results = set(fn.results)
            for p in fn.params:
                new_slot(fi, SlotRole.input, p)
            items = [(pos, it) for pos, it in enumerate(schedule.items) if it.function == fi]
            read = {n for _, it in items for n in fusion.groups[it.group].inputs}
            for node in fn.nodes():
                if node.op is Op.CONSTANT and not is_inlined(node) and node in read:
                    new_slot(fi, SlotRole.constant, node)
            live_bytes = sum(s["nbytes"] for s in slots if s["function"] == fi)
            peak = max(peak, live_bytes)
            for pos, item in items:
                group = fusion.groups[item.group]
                for out in group.outputs:
                    if out in results:
                        new_slot(fi, SlotRole.output, out)
                        live_bytes += out.type.nbytes
                        continue
                    slot = self._reusable(slots, fi, out, pos) if self.reuse else None
                    if slot is None:
                        slot = new_slot(fi, SlotRole.intermediate, out)
                        live_bytes += out.type.nbytes
                    else:
                        slot["values"].append(out)
                    slot["free_after"] = last_use.get((fi, out), pos)
                peak = max(peak, live_bytes)
                bytes_moved += sum(n.type.nbytes for n in group.inputs if not is_inlined(n))
                bytes_moved += sum(n.type.nbytes for n in group.outputs)
        plan = BufferPlan(
            slots=tuple(BufferSlot(s["id"], s["function"], s["role"], s["nbytes"],
                                   tuple(s["values"])) for s in slots),
            peak_bytes=peak, bytes_moved=bytes_moved,
        )
        ctx.stat("slots", len(plan))
        ctx.stat("peak-bytes", peak)
        ctx.stat("bytes-moved", bytes_moved)
        return product.replace(buffers=plan)

    @staticmethod
    def _reusable(slots: list[dict], fi: int, node: Node, pos: int) -> dict | None:
        for s in slots:
            if (s["function"] == fi and s["role"] is SlotRole.intermediate
                    and s["free_after"] is not None and s["free_after"] < pos
                    and s["values"][0].type == node.type):
                return s
        return None
