"""Instruments built on the pass manager's hooks: IR printing, timing, statistics."""

from __future__ import annotations

import sys
from typing import TextIO

from accy.ir.printer import print_program
from accy.passes.base import Pass
from accy.passes.manager import Instrument, PassRecord
from accy.product import PLAN_FIELDS, Product


def describe_plans(product: Product) -> list[str]:
    """One line per attached plan, e.g. ``// fusion: 2 groups (single-output)``."""
    lines = []
    for name in PLAN_FIELDS:
        plan = getattr(product, name)
        if plan is None:
            continue
        if name == "fusion":
            text = f"{len(plan.groups)} groups ({plan.policy}); boundaries: " + "; ".join(
                g.boundary for g in plan.groups)
        elif name == "schedule":
            text = ", ".join(f"#{i.id} {i.kind.value}{list(i.domain)}" for i in plan.items)
        elif name == "buffers":
            text = (f"{len(plan)} slots, peak {plan.peak_bytes} B, "
                    f"{plan.bytes_moved} B moved")
        elif name == "kernels":
            text = ", ".join(k.entry for k in plan)
        elif name == "legality":
            text = ", ".join(k.status.value for k in plan.kernels)
        elif name == "target":
            text = plan.describe()
        else:
            text = f"{len(getattr(plan, 'layouts', getattr(plan, 'outlines', ())))} entries"
        lines.append(f"// {name}: {text}")
    return lines


class PrintIRAfterAll(Instrument):
    """Print the program and plan summary after every pass (``--print-ir-after-all``)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout

    def after_pass(self, p: Pass, product: Product, record: PassRecord) -> None:
        print(f"// ----- IR after {record.spec} (stage {p.stage.value}) -----", file=self.stream)
        print(print_program(product.program), end="", file=self.stream)
        for line in describe_plans(product):
            print(line, file=self.stream)


class TimingReport(Instrument):
    """Collect per-pass wall time; ``report()`` gives MLIR-style timing text (``--timing``)."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, int]] = []

    def after_pass(self, p: Pass, product: Product, record: PassRecord) -> None:
        self.rows.append((p.stage.value, record.spec, record.elapsed_ns))

    def report(self) -> str:
        total = sum(ns for _, _, ns in self.rows) or 1
        out = ["===- Pass execution timing report -===",
               f"  Total: {total / 1e6:.3f} ms", "   time (ms)   share  stage     pass"]
        for stage, spec, ns in self.rows:
            out.append(f"  {ns / 1e6:10.3f}  {100 * ns / total:5.1f}%  {stage:<9} {spec}")
        return "\n".join(out)


class Statistics(Instrument):
    """Collect what each pass reported with ``ctx.stat`` (``--statistics``)."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, tuple]] = []

    def after_pass(self, p: Pass, product: Product, record: PassRecord) -> None:
        self.rows.append((record.spec, record.stats + (
            ("analysis-hits", record.analysis_hits), ("analysis-misses", record.analysis_misses))))

    def report(self) -> str:
        out = ["===- Pass statistics -==="]
        for spec, stats in self.rows:
            out.append(f"  {spec}")
            out.extend(f"    {k}: {v}" for k, v in stats)
        return "\n".join(out)
