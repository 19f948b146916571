"""Running named rewrite rules over a program: what ``canonicalize``, ``constant-fold`` and
``saturate`` share. (It imports egglog: pass modules import it when they run, not before.)

1. **Selection** (:func:`select`): rule sets, then ``rules=``/``disable=`` (rule or rule-set
   names), then the floating-point policy (:mod:`rewrites`): rules tagged ``finite-math`` or
   ``fast-math`` are dropped unless the pass enables them; naming such a rule in ``rules=``
   without enabling its policy is an error rather than a silent no-op. Everything is read
   from the one rule registry (``accy.egraph.rules.RULES``: a record per rule); names were
   checked when the pipeline text was read, and are again here (``rewrites.check_name``, the
   same message) in case a run-time rule set was removed since.
2. **Prefilter** (:func:`accy.passes.prefilter.could_fire`): if no rule can match the
   program, saturation could not change anything and no e-graph is built.
3. **Saturation and extraction** (:func:`rewrite_program`): ``accy.egraph`` builds the
   e-graph, saturates within the budget and extracts under the cost model (``extractor``:
   ``greedy-dag`` DAG cost by default), taking the extraction region by region: a region of
   the program changes only where that makes the whole program strictly cheaper, so every
   independent win is kept and no part gets dearer. The result replaces the program only
   when its cost is strictly lower, so a pass never reorders a program for nothing (commuted
   operands cost the same) and equal inputs give equal outputs.
4. **Statistics** (:func:`record`): stop reason, e-graph growth per iteration, rules that
   fired, costs before and after, via ``ctx.stat`` (``accy prepare --statistics``).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from egglog import EGraph

import rewrites
from accy.egraph.convert import Extraction, add_context, extract, to_egraph
from accy.egraph.cost import CostModel, cost_model, program_cost
from accy.egraph.defaults import (
    DEFAULT_EXTRACTOR,
    DEFAULT_NODE_LIMIT,
    WORKER_MIN_OPERATIONS,
    pays,
    scaled_node_limit,
    scaled_time_limit,
)
from accy.egraph.driver import RuleStats, SaturationReport, saturate, select_rules
from accy.egraph.rules import RULES, RULESETS, generation
from accy.egraph.sorts import new_egraph
from accy.egraph.split import Context, split, stitch
from accy.ir.ops import Op
from accy.ir.program import Program
from accy.ir.types import TensorType
from accy.passes import rewrite_worker as worker
from accy.passes.prefilter import could_fire, dormant

if TYPE_CHECKING:
    from accy.passes.manager import PassContext

_PENALTY = 1 << 60  # cost of a constant above the size cap: never extracted when avoidable
_WARM_EGRAPHS = 8  # e-graphs (one per combination of rule sets) kept declared per thread


class PolicyError(ValueError):
    """A rule was named whose floating-point policy the pass does not enable."""


# ---- selection -------------------------------------------------------------------------------


def select(rulesets: Sequence[str], rules: Sequence[str] = (), disable: Sequence[str] = (),
           *, finite_math: bool = False, fast_math: bool = False) -> tuple[str, ...]:
    """Names of the selected rules that the policy flags enable (module docstring, step 1).

    ``rules`` empty means every rule of ``rulesets``. Unknown names raise ``KeyError``
    listing the valid ones; a rule named in ``rules`` whose policy is off raises
    :class:`PolicyError`.
    """
    for n in rulesets:
        rewrites.check_name(n, rule_sets_only=True)
    for n in (*rules, *disable):
        rewrites.check_name(n)
    rewrites.load(rulesets)
    chosen = select_rules(rulesets, list(rules) if rules else None, disable)
    allowed = rewrites.allowed_policies(finite_math=finite_math, fast_math=fast_math)
    named = {n for n in rules if n not in RULESETS}
    blocked = [r.name for r in chosen if r.name in named and r.policy not in allowed]
    if blocked:
        need = {str(RULES[n].policy) for n in blocked}
        flag = "fast-math=true" if "fast-math" in need else "finite-math=true"
        raise PolicyError(f"rules {', '.join(blocked)} are tagged "
                          f"{'/'.join(sorted(need))}: enable them with {flag}")
    return tuple(r.name for r in chosen if r.policy in allowed)


# ---- saturation and extraction ------------------------------------------------------------------


@dataclass(frozen=True)
class CappedConstants:
    """A cost model that prices constants above ``max_elements`` (unless the input has them)
    out of extraction: how folding passes honour their size cap."""

    base: CostModel
    max_elements: int
    allowed: frozenset[tuple[TensorType, bytes]]

    @property
    def name(self) -> str:
        return self.base.name

    @property
    def description(self) -> str:
        return f"{self.base.description}; new constants above {self.max_elements} elements barred"

    def node_cost(self, op: Op, type: TensorType, operands: tuple[TensorType, ...],
                  attrs: dict[str, Any]) -> int:
        if (op is Op.CONSTANT and type.size > self.max_elements
                and (type, attrs["value"]) not in self.allowed):
            return _PENALTY
        return self.base.node_cost(op, type, operands, attrs)


def capped(model: str, program: Program, max_elements: int) -> CappedConstants:
    """``model`` with new constants above ``max_elements`` elements barred."""
    allowed = frozenset((n.type, n.attr("value")) for n in program.nodes()
                        if n.op is Op.CONSTANT)
    return CappedConstants(cost_model(model), max_elements, allowed)


@dataclass(frozen=True)
class Outcome:
    """What one rewriting run did."""

    program: Program  # the result: the extracted program, or the input when not cheaper
    changed: bool
    report: SaturationReport | None  # None when skipped
    skipped: str  # why no e-graph was built ("" when one was)
    cost_model: str
    cost_before: int
    cost_after: int
    extraction: Extraction | None = None  # None when skipped
    seconds: float = 0.0  # the whole run: e-graph, saturation, extraction, regions
    time_limit_s: float = 0.0  # what it ran under (the scaled default when none was given)
    worker: str = ""  # "" (in this process), "finished", "killed" (at the deadline), "late"
    worker_maxrss_kb: int = 0  # the saturation worker's peak resident memory
    regions: tuple[Outcome, ...] = ()  # one per region when saturated region by region


class _WarmEGraphs(threading.local):
    """Per thread: e-graphs in which rule selections are already declared to egglog.

    Declaring ~200 rules costs egglog more than saturating a small program with them, so each
    run borrows an e-graph that has them: ``push``, add the program, saturate, extract, then
    ``pop`` back to the empty e-graph (and the driver's checkpoints). A cache
    of declarations, not of results: what a run computes does not depend on earlier runs
    (extraction ignores e-class ids).

    Selections of the same rule sets share one e-graph, where each rule is declared once (an
    ablation's selections, one rule left out at a time, cost a command each). But egglog
    copies every declared rule on each ``push`` and frees it on ``pop``, a cost per rule and
    run about a tenth of declaring the rule (papers/prepare.md). So once a selection has been
    asked for
    ``SEEN_FOR_OWN`` times for programs of the same ops (a loop preparing a program again and
    again), the rules such programs can never use (``prefilter.dormant``) are left out if
    that halves the selection: those programs get an e-graph of their own, declaring the
    others only. Fewer askings would not pay back the declarations.
    """

    SEEN_FOR_OWN = 4

    def __init__(self) -> None:
        # slot (rule-set key, or that and a selection) -> the e-graph, the rule selections
        # declared in it
        self.egraphs: OrderedDict[tuple, tuple[EGraph, set[tuple[str, ...]]]] = OrderedDict()
        self.lent: dict[int, tuple[tuple, set[tuple[str, ...]]]] = {}
        self.seen: dict[tuple, int] = {}  # (rule-set key, selection, ops) -> times asked for

    @staticmethod
    def key(rulesets: Sequence[str]) -> tuple:
        """Rule-set names, and the registry's generation: a rule set defined again under the
        same names (after ``unregister``) never borrows an e-graph declaring the old rules."""
        return tuple(rulesets), generation()

    def take(self, rulesets: Sequence[str], names: Sequence[str],
             programs: Sequence[Program] = ()) -> tuple[EGraph, frozenset[str]]:
        """An e-graph declaring the rules ``names`` for a run on ``programs`` (one e-graph
        holding them all), and the rules among ``names`` it leaves out (dormant: they
        cannot match there; the driver's ``dormant``)."""
        key, names = self.key(rulesets), tuple(names)
        slot, quiet = key, frozenset()
        if programs:
            ops = frozenset(n.op for p in programs for n in p.nodes())
            if len(self.seen) > 1024:
                self.seen.clear()
            seen = self.seen[(key, names, ops)] = self.seen.get((key, names, ops), 0) + 1
            if seen >= self.SEEN_FOR_OWN:
                quiet = dormant(programs, names)
                if 2 * len(quiet) >= len(names):
                    names = tuple(n for n in names if n not in quiet)
                    slot = (key, names)
                else:
                    quiet = frozenset()
        eg, declared = self.egraphs.pop(slot, (None, set()))
        if eg is None:
            eg = new_egraph()
        if names not in declared:
            # declares the rules and types here, before any push (a pop would forget them)
            saturate(eg, rulesets, rules=names, iterations=1)
            declared.add(names)
        if len(self.lent) > 4 * _WARM_EGRAPHS:  # e-graphs dropped on failure, never given back
            self.lent.clear()
        self.lent[id(eg)] = (slot, declared)
        return eg, quiet

    def give_back(self, rulesets: Sequence[str], eg: EGraph) -> None:
        slot, declared = self.lent.pop(id(eg), (self.key(rulesets), set()))
        self.egraphs[slot] = (eg, declared)
        while len(self.egraphs) > _WARM_EGRAPHS:
            self.egraphs.popitem(last=False)


_WARM = _WarmEGraphs()


def rewrite_program(program: Program, rulesets: Sequence[str], names: Sequence[str], *,
                    iterations: int, node_limit: int | None, time_limit_s: float | None,
                    cost: str | CostModel, match_limit: int | None = None,
                    extractor: str = DEFAULT_EXTRACTOR,
                    extract_options: dict[str, Any] | None = None, region_size: int = 0,
                    isolate: bool | None = None,
                    multi_pattern_iterations: int | None = None, patience: int = 0,
                    region_context: int = 0) -> Outcome:
    """Saturate ``program`` with the named rules and keep the extraction (taken region by
    region, ``accy.egraph.regions``) if it is cheaper.

    ``time_limit_s`` bounds the whole run (e-graph, saturation, extraction, acceptance);
    ``node_limit`` every e-graph. None scales them with the program (``defaults``). Above
    ``region_size`` operations (0: never) the program is saturated region by region
    (``accy.egraph.split``), each region with the time left in proportion to its size.
    ``isolate`` runs saturation in a worker process killed at the deadline
    (``accy.passes.rewrite_worker``); None: for programs above ``WORKER_MIN_OPERATIONS``
    when a worker is ready, else in this process (a worker starts for the next call).
    Multi-pattern rules (``NamedRule.multi``) run in the first
    ``multi_pattern_iterations`` iterations only (None: in all). ``patience`` (0: off) stops
    saturation (``no_gain``) once that many extractions in a row found nothing cheaper than
    the best so far (the input's cost at first): a run in this process extracts after every
    kept step, the worker at its checkpoints; the result is the cheapest extraction.
    ``region_context`` gives each region its parameters' definitions that many operations
    deep (``accy.egraph.split``; 0: none).
    """
    start = time.perf_counter()
    model = cost_model(cost)
    before = program_cost(program, model)
    ops = operations(program)
    limit = scaled_time_limit(ops) if time_limit_s is None else time_limit_s
    deadline = start + limit
    skipped = ("no rules selected" if not names else
               "" if could_fire(program, names) else "no rule matches the program")
    if skipped:
        return Outcome(program, False, None, skipped, model.name, before, before,
                       seconds=time.perf_counter() - start, time_limit_s=limit)
    budget = dict(iterations=iterations, match_limit=match_limit, extractor=extractor,
                  extract_options=extract_options, isolate=isolate,
                  multi_pattern_iterations=multi_pattern_iterations, patience=patience)
    per_thousand = node_limit or DEFAULT_NODE_LIMIT
    regions = split(program, region_size, region_context)
    if regions is None:
        out = _rewrite_one(program, rulesets, names, model, before, deadline,
                           node_limit=scaled_node_limit(ops, per_thousand), **budget)
        return replace(out, seconds=time.perf_counter() - start, time_limit_s=limit)
    outcomes: list[Outcome] = []
    reserve = _STITCH_RESERVE * limit  # stitching and pricing the whole program
    for k, region in enumerate(regions):
        now = time.perf_counter()
        share = region.size / sum(r.size for r in regions[k:])
        region_deadline = now + max(deadline - reserve - now, 0.0) * share
        rp = region.program
        r_before = program_cost(rp, model)
        if not could_fire(rp, names):
            outcomes.append(Outcome(rp, False, None, "no rule matches the region", model.name,
                                    r_before, r_before))
            continue
        out = _rewrite_one(rp, rulesets, names, model, r_before, region_deadline,
                           node_limit=scaled_node_limit(region.size + _size(region.context),
                                                        per_thousand),
                           context=region.context, **budget)
        outcomes.append(replace(out, seconds=time.perf_counter() - now,
                                time_limit_s=region_deadline - now))
    result = stitch(program, regions, [o.program for o in outcomes])
    after = program_cost(result, model)
    changed = after < before and result != program
    reports = [o.report for o in outcomes if o.report is not None]
    return Outcome(result if changed else program, changed, _combined(reports), "",
                   model.name, before, after if changed else before, None,
                   time.perf_counter() - start, limit,
                   _worst_worker([o.worker for o in outcomes]),
                   max((o.worker_maxrss_kb for o in outcomes), default=0), tuple(outcomes))


_STITCH_RESERVE = 0.02  # of the time limit, kept back from the regions for stitching
_SEVERITY = ("saturated", "no_gain", "iteration_limit", "node_limit", "time_limit")


def _size(context: Context | None) -> int:
    """Operations a region's context adds to its e-graph."""
    return 0 if context is None else operations(context.program)


def operations(program: Program) -> int:
    """IR nodes other than parameters and constants: what budgets scale with."""
    return sum(n.op not in (Op.PARAM, Op.CONSTANT) for n in program.nodes())


def _worst_worker(kinds: Iterable[str]) -> str:
    order = ("", "finished", "late", "killed")
    return max(kinds, key=order.index, default="")


def _combined(reports: Sequence[SaturationReport]) -> SaturationReport | None:
    """One report for the regions: the most severe stop reason, rule totals, and the
    largest region's e-graph (one region's e-graph is alive at a time)."""
    if not reports:
        return None
    totals: dict[str, list[Any]] = {}
    for r in reports:
        for x in r.rules:
            t = totals.setdefault(x.name, [x.ruleset, 0, 0.0])
            t[1] += x.matches
            t[2] += x.seconds
    big = max(reports, key=lambda r: r.e_nodes)
    return SaturationReport(
        stop_reason=max((r.stop_reason for r in reports), key=_SEVERITY.index),
        iterations=(), rules=tuple(RuleStats(n, rs, m, sec) for n, (rs, m, sec) in
                                   totals.items()),
        initial_e_nodes=big.initial_e_nodes, initial_e_classes=big.initial_e_classes,
        e_nodes=big.e_nodes, e_classes=big.e_classes, seconds=sum(r.seconds for r in reports),
        iteration_limit=big.iteration_limit, node_limit=big.node_limit,
        time_limit_s=sum(r.time_limit_s for r in reports),
        predicted=any(r.predicted for r in reports), checkpoints=0)


def _rewrite_one(program: Program, rulesets: Sequence[str], names: Sequence[str],
                 model: CostModel, before: int, deadline: float, *, iterations: int,
                 node_limit: int, match_limit: int | None, extractor: str,
                 extract_options: dict[str, Any] | None, isolate: bool | None,
                 multi_pattern_iterations: int | None, patience: int = 0,
                 context: Context | None = None) -> Outcome:
    """One e-graph: saturate ``program`` (with ``context``, a region's) and extract, by
    ``deadline``."""
    use_worker = operations(program) > WORKER_MIN_OPERATIONS if isolate is None else isolate
    if use_worker and worker.eligible(model, tuple(rulesets)):
        task = worker.Task(program, tuple(rulesets), tuple(names), iterations, node_limit,
                           max(deadline - time.perf_counter(), 1e-6), match_limit, model,
                           extractor, dict(extract_options or {}), before,
                           tuple(_capped(names)), multi_pattern_iterations, patience,
                           context)
        res = worker.run(task, deadline, wait=isolate is True)
        kind = "late" if res.not_ready else "killed" if res.killed else "finished"
        x = res.extraction
        if res.not_ready and deadline - time.perf_counter() > 0:
            # no warm worker (one was killed at an earlier deadline and is restarting): run
            # here under the predictions rather than wait (module docstring of ``worker``)
            return replace(_rewrite_one(program, rulesets, names, model, before, deadline,
                                        iterations=iterations, node_limit=node_limit,
                                        match_limit=match_limit, extractor=extractor,
                                        extract_options=extract_options, isolate=False,
                                        multi_pattern_iterations=multi_pattern_iterations,
                                        patience=patience, context=context),
                           worker="late")
        if res.not_ready or res.report is None:
            why = ("the time limit came before a saturation worker had started" if
                   res.not_ready else "the time limit came before a first extraction")
            return Outcome(program, False, None, why, model.name, before, before, worker=kind,
                           worker_maxrss_kb=res.worker_maxrss_kb)
        if x is not None and x.cost < before and x.program != program:
            return Outcome(x.program, True, res.report, "", model.name, before, x.cost, x,
                           worker=kind, worker_maxrss_kb=res.worker_maxrss_kb)
        return Outcome(program, False, res.report, "", model.name, before, before, x,
                       worker=kind, worker_maxrss_kb=res.worker_maxrss_kb)
    eg, quiet = _WARM.take(rulesets, names,
                           [program] + ([context.program] if context is not None else []))
    eg.push()
    peg = to_egraph(program, eg)  # on failure the e-graph is dropped, not given back
    if context is not None:
        add_context(peg, context)
    # extraction follows in this process: no step starts whose predicted time plus that of
    # the extraction after it would end past the deadline (worker.guard)
    left = max(deadline - time.perf_counter(), 1e-6)
    steps = _Stepwise(peg, model, extractor, before, extract_options, deadline, patience)
    report = saturate(peg, rulesets, rules=names, iterations=iterations,
                      node_limit=node_limit, time_limit_s=left, match_limit=match_limit,
                      on_step=steps.on_step, capped=_capped(names),
                      capped_iterations=multi_pattern_iterations,
                      restore=lambda: reload(program, eg, context), dormant=quiet)
    out = steps.final(report)
    for _ in range(report.checkpoints + 1):  # the driver's checkpoints, then ours
        eg.pop()
    _WARM.give_back(rulesets, eg)
    if out.cost < before and out.program != program:
        return Outcome(out.program, True, report, "", model.name, before, out.cost, out)
    return Outcome(program, False, report, "", model.name, before, before, out)


class _Stepwise:
    """An in-process run's ``on_step``: the time guard (``worker.guard``), and with
    ``patience`` an extraction after a kept step once the steps since the last one matched
    at least as many times as the e-graph has e-nodes (cheaper steps just go on, as without
    patience: extracting would cost more than they do; counts, so the outcome does not
    depend on the machine's speed), stopping (``no_gain``) once
    ``patience`` of them in a row found nothing cheaper than the best so far. ``final``
    extracts once more unless the e-graph is the one last extracted (the run stopped right
    after it), and returns the cheapest extraction (ties: the later one). A step that left
    the e-graph's size as it was (no e-node or e-class more or less: nothing added, nothing
    merged) is not extracted again: it counts as an extraction that found nothing cheaper."""

    def __init__(self, peg: Any, model: CostModel, extractor: str, before: int,
                 options: dict[str, Any] | None, deadline: float, patience: int) -> None:
        self.extract = lambda: extract(peg, model, extractor=extractor, input_cost=before,
                                       options=options, deadline=deadline)
        self.deadline, self.patience = deadline, patience
        self.best: Extraction | None = None
        self.before, self.best_cost, self.stale = before, before, 0
        self.done_at: tuple[int, int] | None = None  # (e-nodes, e-classes) extracted
        self.rate = worker.EXTRACT_S_PER_E_NODE  # extraction's seconds per e-node, measured
        self.matched = 0  # rule matches since the last extraction

    def _take(self, x: Extraction) -> bool:
        if self.best is None or x.cost <= self.best.cost:
            self.best = x
        better = pays(x.cost, self.best_cost)  # over the input's cost at first
        self.best_cost = min(self.best_cost, x.cost)
        return better

    def on_step(self, report: SaturationReport) -> bool | str:
        if not worker.guard(report, self.deadline, self.rate)[0]:
            return False
        if not self.patience:
            return True
        self.matched += report.iterations[-1].matches if report.iterations else 0
        if self.matched < report.e_nodes:
            return True  # fewer matches since the last extraction than e-nodes: step on
        # no gain counts once a gain was found: some rewrites take a few steps to pay
        gained = pays(self.best_cost, self.before)
        better = False  # the e-graph extracted last: the same extraction, nothing cheaper
        if self.done_at != (report.e_nodes, report.e_classes):
            t0 = time.perf_counter()
            x = self.extract()
            self.rate = (time.perf_counter() - t0) / max(report.e_nodes, 1)
            self.done_at = (report.e_nodes, report.e_classes)
            self.matched = 0
            better = self._take(x)
        self.stale = 0 if better or not gained else self.stale + 1
        if self.stale >= self.patience:
            return "no_gain"
        return worker.guard(report, self.deadline, self.rate)[0]  # after this extraction

    def final(self, report: SaturationReport) -> Extraction:
        if self.best is None or self.done_at != (report.e_nodes, report.e_classes):
            self._take(self.extract())
        assert self.best is not None
        return self.best


def reload(program: Program, eg: EGraph, context: Context | None = None) -> None:
    """Back to the e-graph pushed before ``program`` was added, and ``program`` (and its
    region's ``context``) added again (the same handles: the base is the same), for a
    rollback to the input."""
    eg.pop()
    eg.push()
    peg = to_egraph(program, eg)
    if context is not None:
        add_context(peg, context)


def _capped(names: Sequence[str]) -> list[str]:
    """The multi-pattern rules among ``names`` (run in the first iterations only)."""
    return [n for n in names if rewrites.rule_info(n).multi]


def record(ctx: PassContext, outcome: Outcome, prefix: str = "") -> None:
    """Statistics of ``outcome`` on the running pass (``prefix`` for a pass with several)."""
    stat = lambda key, value: ctx.stat(prefix + key, value)  # noqa: E731
    r = outcome.report
    stat("stop-reason", r.stop_reason if r else f"skipped: {outcome.skipped}")
    stat("changed", outcome.changed)
    stat("cost-model", outcome.cost_model)
    stat("cost-before", outcome.cost_before)
    stat("cost-after", outcome.cost_after)
    if r is None:
        return
    x = outcome.extraction
    if x is not None:
        stat("extractor", x.extractor)
        stat("extraction-seconds", round(x.seconds, 4))
        if x.regions is not None:
            g = x.regions
            stat("regions", f"{g.kept} kept of {g.differing} differing ({g.tried} tried"
                 f"{f', {g.skipped} skipped' if g.skipped else ''}"
                 f"{', whole extraction' if g.whole else ''})")
        if x.sharing is not None:
            h = x.sharing
            stat("sharing", f"{h.shares_kept} of {h.shares_tried} shares, {h.switches_kept} of "
                 f"{h.switches_tried} switches kept, cost -{h.saved} ({h.stopped})")
        if x.dangling:
            stat("dangling-e-nodes", x.dangling)
        if x.note:
            stat("extraction-note", x.note)
    if outcome.worker:
        stat("worker", outcome.worker)
    if outcome.regions:
        stat("regions-saturated", [
            {"stop-reason": o.report.stop_reason if o.report else f"skipped: {o.skipped}",
             "cost-before": o.cost_before, "cost-after": o.cost_after,
             "seconds": round(o.seconds, 4)} for o in outcome.regions])
    stat("iterations", r.kept_iterations)
    stat("e-nodes", f"{r.initial_e_nodes} -> {r.e_nodes}")
    stat("e-classes", f"{r.initial_e_classes} -> {r.e_classes}")
    stat("seconds", round(r.seconds, 4))
    stat("per-iteration", [
        {"e-nodes": it.e_nodes, "e-classes": it.e_classes, "matches": it.matches,
         "seconds": round(it.seconds, 4), "kept": it.kept} for it in r.iterations])
    fired = {x.name: x.matches for x in r.rules if x.matches}
    stat("rules-fired", fired)
    stat("rule-seconds", {x.name: round(x.seconds, 4) for x in r.rules if x.matches})
    stat("report", r.format())
