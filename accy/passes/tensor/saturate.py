"""saturate: equality saturation of the tensor program with the named rule sets of ``rewrites``,
then extraction of the cheapest program under a shape-aware cost model.

Every rule can be switched from pipeline text: ``saturate{disable=factor-mul-add}`` drops one
rule, ``saturate{rules=einsum}`` keeps one rule set, ``saturate{fast-math=true}`` admits the
rules that round differently (reassociation, distributivity; see ``rewrites``'s float policy,
``accy rules`` lists every rule with its tag). The budget (iterations, e-nodes, seconds) bounds
each run, the time limit the whole pass (large programs saturate in a worker process killed at
the deadline, keeping the last good iteration: ``accy.passes.rewrite_worker``), and scales with
the program by default; programs above ``region-size`` operations are saturated region by region
(``accy.egraph.split``; ``region-context`` gives each region its inputs' definitions, so
rewrites across a cut are found). ``patience`` (default 2; 0: off) stops saturation (stop
reason ``no_gain``) once a gain was found and that many extractions in a row found nothing
cheaper than the best so far (by more than ``defaults.PATIENCE_MIN_GAIN`` of it): programs of
up to ``WORKER_MIN_OPERATIONS`` operations extract after a kept step once the steps since the
last extraction matched as often as the e-graph has e-nodes (``rewriting._Stepwise``), the
saturation worker at its checkpoints, and the cheapest extraction is the result; the budget
above still bounds every run. ``match-limit`` turns on egglog's backoff scheduler, which
bounds what one step applies; its report (stop reason, e-graph size per iteration, matches
and time per rule) goes to the pass's statistics (``accy prepare --statistics``,
``accy explain``).
``extractor`` picks how terms come out: ``greedy-dag`` (default; a shared subterm costs once),
``tree`` (once per use, the classic e-graph cost; for ablation) or ``ilp`` (exact, within
``extract-time-limit``, else the greedy-dag result, said in the statistics). The extraction is
taken region by region: a part of the program changes only where that makes the whole strictly
cheaper, so independent wins are all kept. Then ``sharing`` (on by default) searches for terms
that pay only when several e-classes share them, which per-class extraction cannot see: the
merged contraction of rule set ``merge``, read through one slice per original contraction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from accy.egraph import defaults
from accy.ir.program import Stage
from accy.passes.base import COUNT_MAX, SECONDS_MAX, Pass, option
from accy.passes.registry import register

DEFAULT_RULESETS = ("canonical", "fold", "algebra", "einsum", "activation", "layout")
# the budget's defaults, stated once in accy.egraph.defaults (driver.saturate uses them too);
# node-limit=0 and time-limit=0 scale with the program (defaults.scaled_*)
_ITERATIONS = defaults.DEFAULT_ITERATIONS


@register
@dataclass(frozen=True)
class Saturate(Pass):
    """Equality saturation with egglog rule sets, then cost-based extraction."""

    name = "saturate"
    stage = Stage.tensor

    rulesets: tuple[str, ...] = option(DEFAULT_RULESETS, "rule sets to saturate with",
                                      names="rule-sets")
    rules: tuple[str, ...] = option(
        (), "only these rules or rule sets of the rule sets (default: all of them)",
        names="rules")
    disable: tuple[str, ...] = option((), "rules or rule sets not to use (ablation)",
                                   names="rules")
    iterations: int = option(_ITERATIONS, "most saturation iterations", minimum=1,
                             maximum=COUNT_MAX)
    node_limit: int = option(
        defaults.DEFAULT_NODE_LIMIT, "most e-nodes an e-graph may grow to, per 1000 "
        "operations in it (at least this many)", minimum=1, maximum=COUNT_MAX)
    time_limit: float = option(
        0.0, "most seconds of the whole pass, e-graph, saturation and extraction (0: 2 s per "
        "1000 operations, at least 2 s)", minimum=0, maximum=SECONDS_MAX)
    region_size: int = option(
        defaults.DEFAULT_REGION_SIZE, "saturate programs above this many operations region "
        "by region, each region at most this big (0: the whole program at once)",
        minimum=0, maximum=COUNT_MAX)
    match_limit: int = option(
        0, "egglog's backoff: a rule matching more than this in a step sits out a few (0: off)",
        minimum=0, maximum=COUNT_MAX)
    cost: str = option("flops-bytes", "extraction cost model (accy.egraph.cost.COST_MODELS)",
                       nonempty=True)
    fast_math: bool = option(False, "also use fast-math and finite-math rules")
    finite_math: bool = option(False, "also use finite-math rules (x*0 -> 0, x-x -> 0)")
    max_elements: int = option(1 << 16, "largest constant a fold may create (in elements)",
                               minimum=1, maximum=COUNT_MAX)
    extractor: Literal["greedy-dag", "tree", "ilp"] = option(
        defaults.DEFAULT_EXTRACTOR, "how terms are chosen: greedy-dag (a shared subterm costs "
        "once), tree (once per use; ablation), ilp (exact within extract-time-limit)")
    extract_time_limit: float = option(defaults.DEFAULT_EXTRACT_TIME_LIMIT_S,
                                       "most seconds of the ilp extractor (then greedy-dag)",
                                       above=0, maximum=SECONDS_MAX)
    sharing: bool = option(
        True, "after extraction, search for terms that pay only when several e-classes share "
        "them (a merged contraction read through slices; accy.egraph.sharing)")
    multi_pattern_iterations: int = option(
        2, "iterations in which multi-pattern rules (rule set merge) run; later ones run the "
        "others only (Tensat: 1-2; >= iterations: no cap)", minimum=0, maximum=COUNT_MAX)
    region_context: int = option(
        defaults.DEFAULT_REGION_CONTEXT, "with region-size: each region's e-graph also holds "
        "its inputs' definitions, this many operations deep, so rewrites across the cut are "
        "found (0: none)",
        minimum=0, maximum=16)
    patience: int = option(
        defaults.DEFAULT_PATIENCE, "stop saturating (no_gain) once a gain was found and this "
        "many extractions in a row found nothing cheaper (0: off; small programs extract "
        "once the steps since the last extraction matched as often as there are e-nodes)",
        minimum=0, maximum=COUNT_MAX)

    def run(self, ctx, product):
        from accy.passes import rewriting

        names = rewriting.select(self.rulesets, self.rules, self.disable,
                                 finite_math=self.finite_math, fast_math=self.fast_math)
        outcome = rewriting.rewrite_program(
            product.program, self.rulesets, names, iterations=self.iterations,
            node_limit=self.node_limit, time_limit_s=self.time_limit or None,
            region_size=self.region_size,
            cost=rewriting.capped(self.cost, product.program, self.max_elements),
            match_limit=self.match_limit or None, extractor=self.extractor,
            extract_options={"time_limit_s": self.extract_time_limit,
                             "sharing": self.sharing},
            multi_pattern_iterations=self.multi_pattern_iterations, patience=self.patience,
            region_context=self.region_context)
        rewriting.record(ctx, outcome)
        return product.replace(program=outcome.program) if outcome.changed else product
