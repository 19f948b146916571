"""The passes' prefilter over-approximates egglog: a rule that matches a program's e-graph is
always one the prefilter says could fire (so skipping saturation never loses a rewrite)."""

from __future__ import annotations

from hypothesis import given, settings

import rewrites
from accy.egraph.convert import to_egraph
from accy.egraph.driver import saturate
from accy.ir.program import Program
from accy.passes import prefilter, rewriting
from accy.testing import ALL_OPS, programs

rewrites.load()
EVERY_RULE = rewriting.select(tuple(rewrites.THEMES), fast_math=True)


@settings(max_examples=40)
@given(programs(max_nodes=6, ops=ALL_OPS, functions=(1, 2)))
def test_rules_that_match_are_rules_the_prefilter_lets_through(program: Program):
    report = saturate(to_egraph(program), tuple(rewrites.THEMES), rules=EVERY_RULE,
                      iterations=1)  # one step: matches on the input's e-graph
    fired = [r.name for r in report.rules
             if r.matches and not rewrites.rule_info(r.name).permutes]
    for name in fired:
        assert prefilter.could_fire(program, [name]), name
    if not prefilter.could_fire(program, EVERY_RULE):
        assert not fired


def test_repeated_variables_and_conditions_narrow_the_prefilter():
    from rule_cases import build

    same = build(("f32[4]", "f32[4]"), lambda f, x, y: x - y)
    assert not prefilter.could_fire(same, ["sub-self", "sub-self-int"])
    ints = build(("i32[4]",), lambda f, x: x - x)
    assert prefilter.could_fire(ints, ["sub-self-int"])
    assert not prefilter.could_fire(ints, ["sub-self"])  # its condition: a float dtype
    moved = build(("f32[3,4]",), lambda f, x: x.transpose(1, 0))
    assert not prefilter.could_fire(moved, ["transpose-identity"])
