"""What rewriting did to a program: :func:`explain` prepares it and returns one
:class:`RewriteRun` per egglog run (``constant-fold``'s rule step, ``canonicalize``,
``saturate``): the stop reason, e-graph sizes per iteration, the rules that fired with their
matches, the cost before and after, the extractor and the program the pass left.

``accy explain`` prints these runs (:func:`format_run`, or :meth:`RewriteRun.to_dict` as JSON):
one implementation for the command line and for scripts. The runs are read from the passes'
statistics (``accy.passes.rewriting.record``), the same numbers ``--statistics`` shows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from accy.ir.printer import print_program
from accy.ir.program import Program, Stage
from accy.job import PreparedJob, prepare
from accy.passes.base import Pass
from accy.passes.manager import Instrument, PassRecord
from accy.passes.spec import Pipeline
from accy.product import Product
from accy.target import TargetProfile

__all__ = [
    "IterationSize", "RewriteRun", "RuleFired", "explain", "format_run", "format_runs",
]


@dataclass(frozen=True)
class IterationSize:
    """The e-graph after one saturation iteration."""

    e_nodes: int
    e_classes: int
    matches: int
    seconds: float
    kept: bool  # False: rolled back (past the node limit)


@dataclass(frozen=True)
class RuleFired:
    """A rule that matched in a run: its matches over all iterations, and its time."""

    name: str
    matches: int
    seconds: float


@dataclass(frozen=True)
class RewriteRun:
    """One egglog run of a rewrite pass. ``e_nodes``/``e_classes`` are (before, after) and
    ``per_iteration`` is empty when no e-graph was built (``stop_reason`` says why)."""

    pass_spec: str  # the pass as pipeline text
    stage: str
    stop_reason: str
    changed: bool  # the program was replaced by a strictly cheaper extraction
    iterations: int
    seconds: float
    e_nodes: tuple[int, int] | None
    e_classes: tuple[int, int] | None
    per_iteration: tuple[IterationSize, ...]
    rules: tuple[RuleFired, ...]  # most matches first
    cost_model: str
    cost_before: int
    cost_after: int
    extractor: str | None  # None when no e-graph was built
    program: Program  # what the pass left

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the fields (``pass_spec`` as ``pass``), the program in IR text."""
        return {
            "pass": self.pass_spec, "stage": self.stage, "stop_reason": self.stop_reason,
            "changed": self.changed, "iterations": self.iterations, "seconds": self.seconds,
            "e_nodes": None if self.e_nodes is None else list(self.e_nodes),
            "e_classes": None if self.e_classes is None else list(self.e_classes),
            "per_iteration": [vars(it) for it in self.per_iteration],
            "rules": [vars(r) for r in self.rules], "cost_model": self.cost_model,
            "cost_before": self.cost_before, "cost_after": self.cost_after,
            "extractor": self.extractor, "program": print_program(self.program),
        }


def _sizes(text: str | None) -> tuple[int, int] | None:
    # the statistics say "before -> after"
    if text is None:
        return None
    before, after = text.split(" -> ")
    return int(before), int(after)


class _RewriteLog(Instrument):
    """Collects a :class:`RewriteRun` from every pass whose statistics carry a
    ``stop-reason`` (constant-fold's under ``rules: ``)."""

    def __init__(self) -> None:
        self.runs: list[RewriteRun] = []

    def after_pass(self, p: Pass, product: Product, record: PassRecord) -> None:
        stats = dict(record.stats)
        prefix = next((k[: -len("stop-reason")] for k in stats if k.endswith("stop-reason")),
                      None)
        if prefix is None:
            return
        get = lambda key, default=None: stats.get(prefix + key, default)  # noqa: E731
        seconds = get("rule-seconds", {})
        rules = sorted((RuleFired(name, matches, seconds.get(name, 0.0))
                        for name, matches in get("rules-fired", {}).items()),
                       key=lambda r: (-r.matches, r.name))
        self.runs.append(RewriteRun(
            pass_spec=record.spec, stage=p.stage.value, stop_reason=get("stop-reason"),
            changed=get("changed"), iterations=get("iterations", 0),
            seconds=get("seconds", 0.0), e_nodes=_sizes(get("e-nodes")),
            e_classes=_sizes(get("e-classes")),
            per_iteration=tuple(IterationSize(it["e-nodes"], it["e-classes"], it["matches"],
                                              it["seconds"], it["kept"])
                                for it in get("per-iteration", [])),
            rules=tuple(rules), cost_model=get("cost-model"), cost_before=get("cost-before"),
            cost_after=get("cost-after"), extractor=get("extractor"),
            program=product.program))


def explain(program: Program | PreparedJob, pipeline: str | Pipeline = "accy-default", *,
            until: Stage | str = Stage.tensor,
            target: TargetProfile | None = None) -> tuple[RewriteRun, ...]:
    """Prepare ``program`` with ``pipeline`` up to ``until`` (the tensor stage by default)
    and return what each rewrite pass's egglog run did, in pipeline order.

    >>> runs = accy.explain(program, "canonicalize")   # doctest: +SKIP
    >>> [(r.name, r.matches) for r in runs[0].rules]   # doctest: +SKIP
    [('transpose-transpose', 1)]
    """
    log = _RewriteLog()
    prepare(program, pipeline, until=until, target=target, instruments=[log])
    return tuple(log.runs)


def format_run(run: RewriteRun) -> str:
    """``run`` as ``accy explain`` prints it."""
    before, after = run.cost_before, run.cost_after
    gain = f" ({100 * (after - before) / before:+.1f}%)" if before else ""
    lines = [f"== {run.pass_spec} [{run.stage}] ==", f"stop reason: {run.stop_reason}"]
    if run.e_nodes is not None and run.e_classes is not None:  # an e-graph was built
        lines[-1] += f" after {run.iterations} iterations, {run.seconds:.3f} s"
        lines.append(f"e-graph: {run.e_nodes[0]} -> {run.e_nodes[1]} e-nodes, "
                     f"{run.e_classes[0]} -> {run.e_classes[1]} e-classes")
    lines.append(f"cost ({run.cost_model}): {before} -> {after}{gain}, "
                 f"{'program replaced' if run.changed else 'program kept'}"
                 f"{f' (extractor {run.extractor})' if run.extractor else ''}")
    if run.per_iteration:
        lines.append("  iteration  e-nodes  e-classes  matches  seconds")
        lines += [f"  {i:>9}  {it.e_nodes:>7}  {it.e_classes:>9}  {it.matches:>7}  "
                  f"{it.seconds:>7.3f}{'' if it.kept else '  rolled back'}"
                  for i, it in enumerate(run.per_iteration, 1)]
    if run.rules:
        lines.append("rules that fired (by matches):")
        lines += [f"  {r.name:<32} {r.matches:>8} matches  {r.seconds:.4f} s"
                  for r in run.rules]
    lines.append("program after the pass:")
    lines += ["  " + line for line in print_program(run.program).splitlines()]
    return "\n".join(lines)


def format_runs(runs: Sequence[RewriteRun]) -> str:
    """Every run, a blank line between them."""
    return "\n\n".join(format_run(r) for r in runs)
