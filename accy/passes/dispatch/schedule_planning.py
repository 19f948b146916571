"""schedule-planning: order the fusion groups into work items with iteration domains."""

from __future__ import annotations

from dataclasses import dataclass

from accy.ir.program import Stage
from accy.passes.base import Pass
from accy.passes.registry import register
from accy.plans import SchedulePlan, WorkItem


@register
@dataclass(frozen=True)
class SchedulePlanning(Pass):
    """Order fusion groups so every producer runs before its consumers (one work item each)."""

    name = "schedule-planning"
    stage = Stage.dispatch
    preserves = frozenset({"uses"})

    def run(self, ctx, product):
        fusion = product.require("fusion", self.name, "fusion-planning")
        producer = {}
        for gi, g in enumerate(fusion.groups):
            for n in g.outputs:
                producer[(g.function, n)] = gi
        order: list[int] = []
        placed: set[int] = set()

        def place(gi: int) -> None:  # depth-first over producers, iterative
            stack = [(gi, False)]
            while stack:
                g, expanded = stack.pop()
                if g in placed:
                    continue
                if expanded:
                    placed.add(g)
                    order.append(g)
                    continue
                stack.append((g, True))
                group = fusion.groups[g]
                for src in reversed(group.inputs):
                    dep = producer.get((group.function, src))
                    if dep is not None and dep not in placed:
                        stack.append((dep, False))

        for gi in range(len(fusion.groups)):
            place(gi)
        items = tuple(
            WorkItem(id=i, function=fusion.groups[g].function, group=g,
                     kind=fusion.groups[g].kind, domain=fusion.groups[g].domain)
            for i, g in enumerate(order)
        )
        ctx.stat("work-items", len(items))
        return product.replace(schedule=SchedulePlan(items))
