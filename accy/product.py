"""Products: what each stage hands to the next — the program plus the plans attached so far."""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from typing import Any

from accy.errors import VerifyError
from accy.ir.memo import memoized
from accy.ir.program import Program, Stage
from accy.ir.verify import verify
from accy.kernels.ir import Kernel
from accy.plans import (
    BufferPlan,
    FusionPlan,
    LaunchPlan,
    LayoutPlan,
    LegalityReport,
    MemorySpacePlan,
    OutlinePlan,
    SchedulePlan,
)
from accy.target import TargetProfile

PLAN_FIELDS = ("launch", "fusion", "schedule", "buffers", "spaces", "layout", "outline",
               "kernels", "target", "legality")


@dataclass(frozen=True)
class Product:
    """The program at ``stage`` with every plan attached by the passes so far."""

    stage: Stage
    program: Program
    launch: LaunchPlan | None = None
    fusion: FusionPlan | None = None
    schedule: SchedulePlan | None = None
    buffers: BufferPlan | None = None
    spaces: MemorySpacePlan | None = None
    layout: LayoutPlan | None = None
    outline: OutlinePlan | None = None
    kernels: tuple[Kernel, ...] | None = None
    target: TargetProfile | None = None
    legality: LegalityReport | None = None

    @memoized
    def fingerprint(self) -> str:
        """Hash of the program and every attached plan; names play no part."""
        h = hashlib.blake2b(digest_size=16)
        h.update(self.program.fingerprint().encode())
        for name in PLAN_FIELDS:
            plan = getattr(self, name)
            if plan is None:
                continue
            h.update(name.encode())
            if name == "kernels":
                for k in plan:
                    h.update(k.fingerprint().encode())
            else:
                h.update(plan.fingerprint().encode())
        return h.hexdigest()

    def stamp(self) -> tuple[str, str]:
        """(product name, fingerprint), as recorded per stage."""
        return self.stage.value, self.fingerprint()

    def replace(self, **changes: Any) -> Product:
        new = dataclasses.replace(self, **changes)
        if changes.keys() <= {"stage"}:  # the stage plays no part in the fingerprint
            if "_memo_fingerprint" in self.__dict__:
                object.__setattr__(new, "_memo_fingerprint", self.__dict__["_memo_fingerprint"])
        return new

    def require(self, plan: str, needed_by: str, made_by: str) -> Any:
        """The attached plan called ``plan``, or an error saying which pass makes it."""
        value = getattr(self, plan)
        if value is None:
            raise VerifyError(f"{needed_by} needs the {plan} plan; run {made_by} before it")
        return value

    def verify(self) -> None:
        """Check the program for the product's stage and that the plans fit together (once per
        product: it is immutable, and the manager verifies after every pass)."""
        if self.__dict__.get("_verified"):
            return
        verify(self.program, self.stage)
        _verify_plans(self)
        object.__setattr__(self, "_verified", True)


def _verify_plans(p: Product) -> None:
    if p.fusion is not None:
        for fi, fn in enumerate(p.program.functions):
            computed = [n for g in p.fusion.groups if g.function == fi for n in g.nodes]
            needed = [n for n in fn.nodes() if n.srcs]
            if {id(n) for n in computed} != {id(n) for n in needed}:
                raise VerifyError(f"fusion plan of function {fn.name} does not cover its ops")
    if p.schedule is not None and p.fusion is not None:
        if sorted(i.group for i in p.schedule.items) != list(range(len(p.fusion.groups))):
            raise VerifyError("schedule does not order every fusion group exactly once")
    if p.kernels is not None and p.schedule is not None:
        order = [k.work_item for k in p.kernels]
        rank = {}  # position of each id in the schedule (the first, as list.index gives)
        for pos, i in enumerate(p.schedule.items):
            rank.setdefault(i.id, pos)
        if sorted(set(order)) != sorted(i.id for i in p.schedule.items) or order != sorted(
                order, key=rank.__getitem__):
            raise VerifyError("kernels must implement every work item, in schedule order")
    if p.legality is not None and p.kernels is not None:
        if len(p.legality.kernels) != len(p.kernels):
            raise VerifyError("legality report does not cover every kernel")
