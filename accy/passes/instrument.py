"""Instruments built on the pass manager's hooks: IR printing, timing, statistics."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
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
    """Where the time of a preparation went (``--timing``): every pass, the manager's work
    around them, named phases outside the pipeline (rendering, building), and a line for the
    rest, so the lines add up to the total.

    Wrap the whole preparation in :meth:`measure` to get its wall time as the total (else the
    total is the span from the first pass to the last plus the phases, and nothing is left
    unattributed); wrap the steps outside the pipeline in :meth:`phase`. ``rows`` keeps one
    ``(stage, pass spec, ns)`` per pass run (the pass's own time, verification of its result
    included), ``details`` what a pass reported of its own time (egglog saturation).
    """

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, int]] = []
        self.details: list[tuple[int, str, int]] = []  # (row index, what, ns) inside a pass
        self.phases: list[tuple[str, int]] = []  # (what, ns) outside the pipeline
        self.bookkeeping_ns = 0  # in the manager around each pass: fingerprint, carry-over
        self.between_ns = 0  # between passes: stage verification and stamps, other instruments
        self.total_ns: int | None = None  # the wall time :meth:`measure` saw
        self._before: int | None = None
        self._last: int | None = None
        self._first: int | None = None

    def before_pass(self, p: Pass, product: Product) -> None:
        now = time.perf_counter_ns()
        if self._last is not None:
            self.between_ns += now - self._last
        self._first = now if self._first is None else self._first
        self._before = now

    def after_pass(self, p: Pass, product: Product, record: PassRecord) -> None:
        now = time.perf_counter_ns()
        self.rows.append((p.stage.value, record.spec, record.elapsed_ns))
        if self._before is not None:
            self.bookkeeping_ns += max(now - self._before - record.elapsed_ns, 0)
        self._last = now
        self._details(len(self.rows) - 1, dict(record.stats), record.elapsed_ns)

    def _details(self, row: int, stats: dict, elapsed_ns: int) -> None:
        """What a pass's statistics say of its own time: the egglog run's ``seconds``
        (``rewriting.record``; constant-fold's under ``rules: ``), any other numeric
        ``...-seconds`` statistic, and the rest of the pass's time, or why egglog was skipped."""
        for prefix in ("", "rules: "):
            stop = stats.get(prefix + "stop-reason")
            if isinstance(stop, str) and stop.startswith("skipped"):
                self.details.append((row, f"no egglog run ({stop}): loading rules, "
                                     "prefilter", elapsed_ns))
                return
        parts = [("egglog saturation", stats[k]) for k in ("seconds", "rules: seconds")
                 if isinstance(stats.get(k), int | float)]
        parts += [(k, v) for k, v in stats.items()
                  if k.endswith("-seconds") and isinstance(v, int | float)]
        if not parts:
            return
        ns = [(what, int(seconds * 1e9)) for what, seconds in parts]
        self.details.extend((row, what, n) for what, n in ns)
        self.details.append((row, "rest: prefilter, e-graph set-up, conversion, extraction, "
                             "cost" if len(ns) == 1 else "rest", elapsed_ns - sum(
                                 n for _, n in ns)))

    @contextmanager
    def measure(self) -> Iterator[TimingReport]:
        """Time everything inside as the total (prepare, render, build...)."""
        start = time.perf_counter_ns()
        try:
            yield self
        finally:
            self.total_ns = time.perf_counter_ns() - start

    @contextmanager
    def phase(self, what: str) -> Iterator[None]:
        """Time a step outside the pipeline (rendering sources, building kernels) as a line."""
        start = time.perf_counter_ns()
        try:
            yield
        finally:
            self.phases.append((what, time.perf_counter_ns() - start))

    def report(self) -> str:
        passes = sum(ns for _, _, ns in self.rows)
        attributed = passes + self.bookkeeping_ns + self.between_ns + sum(
            ns for _, ns in self.phases)
        total = self.total_ns if self.total_ns is not None else attributed
        share = max(total, 1)
        out = ["===- Pass execution timing report -===",
               f"  Total: {total / 1e6:.3f} ms"
               + (" (wall)" if self.total_ns is not None else ""),
               "   time (ms)   share  stage     pass (its own time, verification included)"]
        for i, (stage, spec, ns) in enumerate(self.rows):
            out.append(f"  {ns / 1e6:10.3f}  {100 * ns / share:5.1f}%  {stage:<9} {spec}")
            out.extend(f"  {d / 1e6:10.3f}  {100 * d / share:5.1f}%  {'':<9}   {what}"
                       for row, what, d in self.details if row == i)
        lines = list(self.phases)
        if self.rows:
            out.append(f"  {passes / 1e6:10.3f}  {100 * passes / share:5.1f}%  all passes")
            lines[:0] = [
                ("pass manager: product fingerprints and analysis carry-over after each pass",
                 self.bookkeeping_ns),
                ("between passes: stage verification and stamps, other instruments",
                 self.between_ns)]
        if self.total_ns is not None:
            lines.append(("not attributed: set-up, target profile, device selection, rest",
                          total - attributed))
        out.extend(f"  {ns / 1e6:10.3f}  {100 * ns / share:5.1f}%  {what}" for what, ns in lines)
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
