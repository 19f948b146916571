"""memory-space-planning: the OpenCL address space of every buffer slot."""

from __future__ import annotations

from dataclasses import dataclass

from accy.ir.program import Stage
from accy.passes.base import Pass, option
from accy.passes.memory.bufferization_planning import slot_map
from accy.passes.registry import register
from accy.plans import BufferSlot, MemorySpacePlan, SlotRole, SlotSpace, is_inlined
from accy.target import TargetProfile

READ_ONLY = (SlotRole.input, SlotRole.constant)


@register
@dataclass(frozen=True)
class MemorySpacePlanning(Pass):
    """Put small read-only slots (inputs, constants) in constant memory, the rest in global.

    A slot goes to ``constant`` when no kernel writes it, it fits the target's constant memory,
    and every kernel that reads it stays within the target's per-kernel limits
    (``max_constant_args`` arguments, ``constant_mem_bytes`` bytes in all). Candidates are taken
    smallest first (then by slot id), so the small operands a kernel broadcasts — biases, scales,
    lookup tables — get there first. On GPUs constant memory is cached and fast when a
    work-group reads the same address, slower than global when its work-items read different
    ones; ``use-constant=false`` keeps everything global to measure the difference.
    """

    name = "memory-space-planning"
    stage = Stage.memory
    preserves = frozenset({"uses", "liveness", "slot-map"})

    use_constant: bool = option(True, "place small read-only slots in __constant memory")

    def run(self, ctx, product):
        buffers = product.require("buffers", self.name, "bufferization-planning")
        fusion = product.require("fusion", self.name, "fusion-planning")
        schedule = product.require("schedule", self.name, "schedule-planning")
        # the analysis function, not the cache: the kernel stage computing (missing) the
        # slot map first is a seed behaviour (row 10), and the map is cheap
        slot_of = slot_map(product)
        target = product.target or TargetProfile()
        readers: dict[int, list[int]] = {s.id: [] for s in buffers.slots}  # slot -> work items
        for item in schedule.items:
            for n in fusion.groups[item.group].inputs:
                if not is_inlined(n):
                    readers[slot_of[(item.function, n)]].append(item.id)
        reasons = {s.id: self._global_reason(s, readers[s.id], target) for s in buffers.slots}
        count: dict[int, int] = {}  # work item -> constant arguments so far
        used: dict[int, int] = {}  # work item -> constant bytes so far
        for slot in sorted(buffers.slots, key=lambda s: (s.nbytes, s.id)):
            if reasons[slot.id] is not None:
                continue
            items = readers[slot.id]
            full = [i for i in items if count.get(i, 0) + 1 > target.max_constant_args
                    or used.get(i, 0) + slot.nbytes > target.constant_mem_bytes]
            if full:
                reasons[slot.id] = (f"work item {full[0]} has no constant memory left "
                                    f"({target.max_constant_args} args, "
                                    f"{target.constant_mem_bytes} B)")
                continue
            for i in items:
                count[i] = count.get(i, 0) + 1
                used[i] = used.get(i, 0) + slot.nbytes
        spaces = tuple(
            SlotSpace(s.id, "global", reasons[s.id]) if reasons[s.id] is not None
            else SlotSpace(s.id, "constant", f"read-only, {s.nbytes} B")
            for s in buffers.slots)
        ctx.stat("constant", sum(s.space == "constant" for s in spaces))
        ctx.stat("global", sum(s.space == "global" for s in spaces))
        return product.replace(spaces=MemorySpacePlan(spaces))

    def _global_reason(self, slot: BufferSlot, readers: list[int],
                       target: TargetProfile) -> str | None:
        """Why ``slot`` must stay global regardless of the others, or None if it may not."""
        if slot.role not in READ_ONLY:
            return f"{slot.role.value}: written by a kernel"
        if not self.use_constant:
            return "use-constant=false"
        if not readers:
            return "read by no kernel"
        if not 0 < slot.nbytes <= target.constant_mem_bytes:
            return f"{slot.nbytes} B does not fit {target.constant_mem_bytes} B of constant memory"
        if target.max_constant_args < 1:
            return "the target takes no constant arguments"
        return None
