"""constant-fold: fold constant subterms, splats in egglog and the rest by evaluation.

Two steps:

1. **egglog** (rule set ``fold``): every elementwise op and cast whose operands are splat
   constants (``Tensor.full``), movement and ``reduce_max`` of splats, and ``select`` on a
   splat condition, saturated and extracted like any other rule set. The rules compute each
   folded element with the interpreter's numpy semantics in the op's dtype.
2. **Evaluation**: what the rules leave, evaluated by the reference interpreter bottom-up:
   ops over non-splat constants (``[1, 2, 3] + [10, 20, 30]``), reductions, contractions,
   concatenations, gathers and row ops of constants, and splat results that ``Tensor.full``
   cannot hold (NaN, infinities, -0.0). Folding these in egglog would mean carrying whole
   arrays through rules as text, one rule per pair of constant constructors; the interpreter
   already is the definition of every op.

``max-elements`` caps both: a folded constant may not have more elements (egglog's folds are
priced out of extraction above it; evaluation skips such nodes).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from accy.egraph import defaults
from accy.ir.interpret import interpret
from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.program import Function, Program, Stage
from accy.passes.base import COUNT_MAX, SECONDS_MAX, Pass, option
from accy.passes.rebuild import rebuild, with_srcs
from accy.passes.registry import register


def fold(node: Node) -> Node:
    """The constant node equal to ``node``, whose operands are all constants."""
    (value,) = interpret(Program((Function("fold", (), (), (node,)),)), ())
    value = np.ascontiguousarray(value, dtype=node.type.dtype.numpy)
    return Node(Op.CONSTANT, node.type, (), {"value": value.tobytes()})


def _ops(program: Program) -> int:
    return sum(n.op not in (Op.PARAM, Op.CONSTANT) for n in program.nodes())


@register
@dataclass(frozen=True)
class ConstantFold(Pass):
    """Fold constant subterms: splats with the egglog rule set ``fold``, the rest by evaluation."""

    name = "constant-fold"
    stage = Stage.contract

    max_elements: int = option(1 << 16, "largest result (in elements) to fold into a constant",
                               minimum=1, maximum=COUNT_MAX)
    disable: tuple[str, ...] = option((), "fold rules not to use, e.g. fold-exp (or: fold)",
                                   names="rules")
    iterations: int = option(32, "most saturation iterations (one per level of folding)",
                             minimum=1, maximum=COUNT_MAX)
    node_limit: int = option(10_000, "most e-nodes the e-graph may grow to",
                             minimum=1, maximum=COUNT_MAX)
    time_limit: float = option(
        0.0, "most seconds of the rules (0: 2 s per 1000 operations, at least 2 s)",
        minimum=0, maximum=SECONDS_MAX)
    region_size: int = option(
        defaults.DEFAULT_REGION_SIZE, "run the rules region by region on programs above this "
        "many operations, each region at most this big (0: the whole program at once)",
        minimum=0, maximum=COUNT_MAX)

    def run(self, ctx, product):
        from accy.passes import rewriting

        program = product.program
        names = rewriting.select(("fold",), (), self.disable)
        outcome = rewriting.rewrite_program(
            program, ("fold",), names, iterations=self.iterations, node_limit=self.node_limit,
            time_limit_s=self.time_limit or None, region_size=self.region_size,
            cost=rewriting.capped("flops-bytes", program, self.max_elements))
        rewriting.record(ctx, outcome, prefix="rules: ")
        by_rules = _ops(program) - _ops(outcome.program)
        evaluated = 0

        def rewrite(node: Node, srcs: tuple[Node, ...]) -> Node:
            nonlocal evaluated
            if node.op in (Op.PARAM, Op.CONSTANT):
                return node
            new = with_srcs(node, srcs)
            if all(s.op is Op.CONSTANT for s in srcs) and node.type.size <= self.max_elements:
                evaluated += 1
                return fold(new)
            return new

        program = rebuild(outcome.program, rewrite)
        ctx.stat("folded", by_rules + evaluated)
        ctx.stat("folded-by-rules", by_rules)
        ctx.stat("folded-by-evaluation", evaluated)
        return product.replace(program=program)
