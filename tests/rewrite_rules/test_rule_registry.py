"""Registry conformance of the rule sets: every rule named, unique, tagged, documented; the
themes import only what they may; the policy flags select what they say."""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

import rewrites
from accy.egraph.rules import RULES, RULESETS
from accy.passes import rewriting

ROOT = pathlib.Path(rewrites.__file__).parent
rewrites.load()


def test_every_theme_is_registered_and_loads():
    assert set(rewrites.THEMES) <= set(RULESETS)
    for name, module in rewrites.THEMES.items():
        assert (ROOT / (module.split(".")[1] + ".py")).exists(), module
        assert RULESETS[name].rules, f"rule set {name} has no rules"


def test_every_rule_is_named_unique_tagged_and_documented():
    theme_rules = [r for name in rewrites.THEMES for r in RULESETS[name].rules]
    names = [r.name for r in theme_rules]
    assert len(names) == len(set(names))
    assert set(names) == set(rewrites.RULE_INFO)
    for r in theme_rules:
        info = rewrites.rule_info(r.name)
        assert re.fullmatch(r"[a-z][a-z0-9]*(-[a-z0-9]+)*", r.name)
        assert RULES[r.name] is r and info.ruleset == r.ruleset
        assert info.policy in rewrites.POLICIES
        assert info.doc and "\n" not in info.doc
        assert info.patterns, r.name


def test_every_policy_is_used():
    assert {i.policy for i in rewrites.RULE_INFO.values()} == set(rewrites.POLICIES)


def test_unknown_names_list_the_valid_ones():
    with pytest.raises(KeyError, match="valid rule sets: canonical"):
        rewrites.load(["no-such-set"])
    with pytest.raises(KeyError, match="valid rules: .*neg-neg"):
        rewrites.rule_info("no-such-rule")


def test_themes_import_only_sorts_rules_egglog_and_their_package():
    allowed = {"accy.egraph.sorts", "accy.egraph.rules", "rewrites", "rewrites._numeric",
               "rewrites.concat",  # merge builds on concat's spec helpers
               "egglog", "numpy", "egglog.deconstruct", "__future__"}
    for path in ROOT.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                mods = [node.module or ""]
            elif isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            else:
                continue
            for mod in mods:
                top = mod.split(".")[0]
                assert mod in allowed or top not in ("accy", "rewrites", "egglog"), (
                    f"{path.name} imports {mod}")


@pytest.mark.parametrize("flags,tags", [
    ({}, {"exact", "stable"}),
    ({"finite_math": True}, {"exact", "stable", "finite-math"}),
    ({"fast_math": True}, {"exact", "stable", "finite-math", "fast-math"}),
])
def test_policy_flags_select_rules(flags, tags):
    names = rewriting.select(tuple(rewrites.THEMES), **flags)
    assert {rewrites.rule_info(n).policy for n in names} == tags
    assert len(names) == sum(rewrites.rule_info(n).policy in tags for n in rewrites.RULE_INFO)


def test_naming_a_rule_whose_policy_is_off_is_an_error():
    with pytest.raises(rewriting.PolicyError, match="factor-mul-add.*fast-math=true"):
        rewriting.select(("algebra",), ("factor-mul-add",))
    with pytest.raises(rewriting.PolicyError, match="mul-zero.*finite-math=true"):
        rewriting.select(("canonical",), ("mul-zero",))
    assert rewriting.select(("algebra",), ("factor-mul-add",), fast_math=True) == (
        "factor-mul-add",)
    assert "factor-mul-add" not in rewriting.select(("algebra",), ("algebra",))


def test_a_rule_set_defined_at_run_time_runs_from_pipeline_text_and_unregisters() -> None:
    """The README's recipe: a Theme of one's own, named in saturate{rulesets=...}."""
    import numpy as np

    import accy
    from accy.builder import trace
    from accy.egraph.sorts import Tensor, tensors, types
    from accy.errors import PassFailure
    from accy.ir.ops import Op

    mine = rewrites.Theme("my-rules", "what I am trying out")
    try:
        (x,), (t,) = tensors("x"), types("t")
        mine.rewrite("exp-neg-neg", Tensor.exp(Tensor.neg(Tensor.neg(x, t), t), t),
                     Tensor.exp(x, t), policy="exact", doc="exp(-(-x)) -> exp(x)")
        assert rewrites.THEMES["my-rules"] is None and "exp-neg-neg" in RULES
        program = trace(lambda a: a.__neg__().__neg__().exp(), accy.f32[5], name="f")
        job = accy.prepare(program, "saturate{rulesets=my-rules}", until="tensor")
        after = job.products[accy.Stage.tensor].program
        assert [n.op for n in after.nodes() if n.srcs] == [Op.EXP]
        a = np.float32([0, 1, -2, 3, 4])
        np.testing.assert_array_equal(accy.interpret(after, [a])[0], np.exp(a))
    finally:
        rewrites.unregister("my-rules")
    assert "my-rules" not in RULESETS and "exp-neg-neg" not in rewrites.RULE_INFO
    with pytest.raises(PassFailure, match="unknown rule set 'my-rules'"):
        accy.prepare(program, "saturate{rulesets=my-rules}", until="tensor")
