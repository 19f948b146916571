"""canonicalize: equality saturation with the ``canonical`` rules (identities, movement
folding, implicit broadcasting, oriented constants), keeping the result when it is cheaper.

Its budgets scale with the program as ``saturate``'s do: 2 s per 1000 operations (at least
2 s) by default, e-nodes per 1000 operations, and programs above ``region-size`` operations
rewritten region by region (a 10,000-op program in one e-graph under a fixed second was killed
before its first extraction and gained nothing).

Folding is ``constant-fold``'s (which runs first in ``accy-contract``) and ``saturate``'s (whose
rule sets include ``fold``): one rule set per contract pass keeps ablations simple."""

from __future__ import annotations

from dataclasses import dataclass

from accy.egraph import defaults
from accy.ir.program import Stage
from accy.passes.base import COUNT_MAX, SECONDS_MAX, Pass, option
from accy.passes.registry import register

RULESETS = ("canonical",)


@register
@dataclass(frozen=True)
class Canonicalize(Pass):
    """Simplify with egglog's canonical rules (x*1, -(-x), movement chains, implicit broadcasts)."""

    name = "canonicalize"
    stage = Stage.contract

    disable: tuple[str, ...] = option((), "rules (or rule sets) not to use, e.g. mul-one",
                                   names="rules")
    iterations: int = option(8, "most saturation iterations", minimum=1, maximum=COUNT_MAX)
    node_limit: int = option(10_000, "most e-nodes the e-graph may grow to",
                             minimum=1, maximum=COUNT_MAX)
    time_limit: float = option(
        0.0, "most seconds of the whole pass (0: 2 s per 1000 operations, at least 2 s)",
        minimum=0, maximum=SECONDS_MAX)
    region_size: int = option(
        defaults.DEFAULT_REGION_SIZE, "rewrite programs above this many operations region "
        "by region, each region at most this big (0: the whole program at once)",
        minimum=0, maximum=COUNT_MAX)
    finite_math: bool = option(False, "also use finite-math rules (x*0 -> 0, x-x -> 0, x+0)")
    fast_math: bool = option(False, "also use fast-math and finite-math rules")
    max_elements: int = option(1 << 16, "largest constant a fold may create (in elements)",
                               minimum=1, maximum=COUNT_MAX)

    def run(self, ctx, product):
        from accy.passes import rewriting

        names = rewriting.select(RULESETS, (), self.disable, finite_math=self.finite_math,
                                 fast_math=self.fast_math)
        outcome = rewriting.rewrite_program(
            product.program, RULESETS, names, iterations=self.iterations,
            node_limit=self.node_limit, time_limit_s=self.time_limit or None,
            region_size=self.region_size,
            cost=rewriting.capped("flops-bytes", product.program, self.max_elements))
        rewriting.record(ctx, outcome)
        return product.replace(program=outcome.program) if outcome.changed else product
