"""bufferization-planning: a buffer slot for every value kernels read or write."""

from __future__ import annotations

from dataclasses import dataclass

from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.program import Stage
from accy.passes.analysis import analysis
from accy.passes.base import Pass, option
from accy.passes.registry import register
from accy.plans import BufferPlan, BufferSlot, FusionGroup, ScheduleKind, SlotRole, is_inlined
from accy.product import Product

END = 1 << 62  # "until the end of the function" in live ranges


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


def reads_in_step(group: FusionGroup, x: Node) -> bool:
    """Whether ``group``'s kernel reads element ``i`` of ``x`` only where it writes element ``i``
    of its one output: a flat group of elementwise ops in which ``x`` is never broadcast."""
    domain = group.domain
    return (group.kind is ScheduleKind.flat and len(group.outputs) == 1
            and x.type.shape == domain and all(n.op.is_elementwise for n in group.nodes)
            and all(n.type.shape == domain for n in group.nodes if x in n.srcs))


@register
@dataclass(frozen=True)
class BufferizationPlanning(Pass):
    """Give inputs, constants, outputs and intermediates buffer slots, reusing dead ones.

    With ``in-place``, a kernel's output takes the slot of one of its inputs when that input is
    an intermediate of the same type that this kernel reads last, element by element at the
    positions it writes (:func:`reads_in_step`); otherwise, with ``reuse``, an intermediate
    takes a slot of its type whose values are all dead. Reports slots, allocated bytes, peak
    live bytes (see :class:`~accy.plans.BufferPlan`) and bytes moved.
    """

    name = "bufferization-planning"
    stage = Stage.memory
    preserves = frozenset({"uses", "liveness"})

    reuse: bool = option(True, "let intermediates share a slot when their lifetimes do not overlap")
    in_place: bool = option(True, "let a kernel write its output over an intermediate input it "
                                  "reads last, at the positions it writes")

    def run(self, ctx, product):
        fusion = product.require("fusion", self.name, "fusion-planning")
        schedule = product.require("schedule", self.name, "schedule-planning")
        last_use = ctx.analysis("liveness", product)
        slots: list[dict] = []

        def new_slot(fi: int, role: SlotRole, node: Node, live: tuple[int, int]) -> dict:
            slot = {"id": len(slots), "function": fi, "role": role, "nbytes": node.type.nbytes,
                    "values": [node], "free_after": None, "live": [live]}
            slots.append(slot)
            return slot

        bytes_moved = in_place = peak = 0
        for fi, fn in enumerate(product.program.functions):
            results = set(fn.results)
            for p in fn.params:
                new_slot(fi, SlotRole.input, p, (-1, END))
            items = [(pos, it) for pos, it in enumerate(schedule.items) if it.function == fi]
            read = {n for _, it in items for n in fusion.groups[it.group].inputs}
            for node in fn.nodes():
                if node.op is Op.CONSTANT and not is_inlined(node) and node in read:
                    new_slot(fi, SlotRole.constant, node, (-1, END))
            for pos, item in items:
                group = fusion.groups[item.group]
                for out in group.outputs:
                    if out in results:
                        new_slot(fi, SlotRole.output, out, (pos, END))
                        continue
                    live = (pos, last_use.get((fi, out), pos))
                    slot = self._in_place(slots, group, fi, out, pos, last_use)
                    in_place += slot is not None
                    if slot is None and self.reuse:
                        slot = self._reusable(slots, fi, out, pos)
                    if slot is None:
                        slot = new_slot(fi, SlotRole.intermediate, out, live)
                    else:
                        slot["values"].append(out)
                        slot["live"].append(live)
                    slot["free_after"] = live[1]
                bytes_moved += sum(n.type.nbytes for n in group.inputs if not is_inlined(n))
                bytes_moved += sum(n.type.nbytes for n in group.outputs)
            peak = max(peak, peak_live_bytes([s for s in slots if s["function"] == fi],
                                             [pos for pos, _ in items]))
        plan = BufferPlan(
            slots=tuple(BufferSlot(s["id"], s["function"], s["role"], s["nbytes"],
                                   tuple(s["values"])) for s in slots),
            peak_bytes=peak, bytes_moved=bytes_moved,
            allocated_bytes=sum(s["nbytes"] for s in slots), in_place=in_place,
        )
        ctx.stat("slots", len(plan))
        ctx.stat("in-place", in_place)
        ctx.stat("allocated-bytes", plan.allocated_bytes)
        ctx.stat("peak-bytes", peak)
        ctx.stat("bytes-moved", bytes_moved)
        return product.replace(buffers=plan)

    def _in_place(self, slots: list[dict], group: FusionGroup, fi: int, out: Node, pos: int,
                  last_use: dict[tuple[int, Node], int]) -> dict | None:
        """The slot of an input ``out`` may overwrite (see the class docstring), or None."""
        if not self.in_place:
            return None
        for x in group.inputs:
            if x.type != out.type or last_use.get((fi, x)) != pos or not reads_in_step(group, x):
                continue
            for s in slots:
                if (s["function"] == fi and s["role"] is SlotRole.intermediate
                        and s["values"][-1] is x):
                    return s
        return None

    @staticmethod
    def _reusable(slots: list[dict], fi: int, node: Node, pos: int) -> dict | None:
        for s in slots:
            if (s["function"] == fi and s["role"] is SlotRole.intermediate
                    and s["free_after"] is not None and s["free_after"] < pos
                    and s["values"][0].type == node.type):
                return s
        return None


def peak_live_bytes(slots: list[dict], positions: list[int]) -> int:
    """The most bytes of ``slots`` live at once: at the start or during any work item.

    ``positions`` are the schedule positions of the function's work items; a slot's ``live``
    ranges are inclusive (start -1, end ``END``), and a slot counts once where they overlap.
    """
    point = {-1: 0, END: len(positions)} | {p: i + 1 for i, p in enumerate(positions)}
    delta = [0] * (len(positions) + 2)
    for s in slots:
        merged: list[list[int]] = []
        for a, b in sorted((point[a], point[b]) for a, b in s["live"]):
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        for a, b in merged:
            delta[a] += s["nbytes"]
            delta[b + 1] -= s["nbytes"]
    best = live = 0
    for d in delta:
        live += d
        best = max(best, live)
    return best
