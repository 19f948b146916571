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


@settings(max_examples=25)
@given(programs(max_nodes=6, ops=ALL_OPS, functions=(1, 2)))
def test_dormant_rules_never_match_and_leaving_them_out_changes_nothing(program: Program):
    themes = tuple(rewrites.THEMES)
    report = saturate(to_egraph(program), themes, rules=EVERY_RULE, iterations=4,
                      node_limit=20_000)
    quiet = prefilter.dormant([program], EVERY_RULE)
    assert all(not r.matches for r in report.rules if r.name in quiet)
    without = saturate(to_egraph(program), themes, rules=EVERY_RULE, iterations=4,
                       node_limit=20_000, dormant=quiet)
    # the same rules reported (the dormant ones with no matches), the same e-graph
    assert [(r.name, r.matches) for r in without.rules] == [
        (r.name, r.matches) for r in report.rules]
    assert (without.e_nodes, without.e_classes) == (report.e_nodes, report.e_classes)


def test_dormant_follows_what_other_rules_can_make():
    from rule_cases import build

    # a softmax spelled out: the softmax rules' patterns need ops the program holds
    spelled = build(("f32[4,8]",), lambda f, x: x.exp() / x.exp().sum((1,), keepdims=True))
    plain = build(("f32[4,8]",), lambda f, x: x + x)
    assert "softmax-from-exp" not in prefilter.dormant([spelled], EVERY_RULE)
    assert "softmax-from-exp" in prefilter.dormant([plain], EVERY_RULE)
    assert "add-commute" in prefilter.dormant([spelled], EVERY_RULE)  # nothing makes an add
    assert "add-commute" not in prefilter.dormant([plain], EVERY_RULE)
