"""The one rule registry (``accy.egraph.rules.RULESETS``/``RULES``): every rule named, unique,
tagged, documented, one record each; themes and run-time rule sets in it; the themes import
only what they may; the policy flags select what they say; rule and rule-set names in
pipeline text checked when it is read (did-you-mean, caret) and again when the pass runs."""

from __future__ import annotations

import ast
import pathlib
import re

import pytest
from egglog import eq, union, var

import rewrites
from accy.egraph.rules import RULES, RULESETS, NamedRule
from accy.egraph.sorts import Tensor, tensors, types
from accy.errors import PassFailure, PipelineError
from accy.passes import rewriting
from accy.passes.spec import parse_pipeline

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
    assert set(names) == set(RULES)  # nothing but the themes' rules registered now
    for r in theme_rules:
        assert re.fullmatch(r"[a-z][a-z0-9]*(-[a-z0-9]+)*", r.name)
        assert RULES[r.name] is r and rewrites.rule_info(r.name) is r  # one record
        assert isinstance(r, NamedRule) and r.ruleset in rewrites.THEMES
        assert r.policy in rewrites.POLICIES
        assert r.doc and "\n" not in r.doc
        assert r.patterns, r.name


def test_themes_are_rule_sets_of_the_registry():
    for name in rewrites.THEMES:
        theme = RULESETS[name]
        assert isinstance(theme, rewrites.Theme) and theme.name == name
        assert rewrites.load([name]) == [theme]


def test_every_policy_is_used():
    assert {r.policy for r in RULES.values()} == set(rewrites.POLICIES)


def test_unknown_names_list_the_valid_ones():
    with pytest.raises(KeyError, match="valid rule sets: canonical, fold, algebra"):
        rewrites.load(["no-such-set"])
    with pytest.raises(KeyError, match="valid rules: .*neg-neg"):
        rewrites.rule_info("no-such-rule")
    with pytest.raises(KeyError, match="did you mean 'algebra'"):
        rewrites.check_name("algebr")


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
    assert len(names) == sum(r.policy in tags for r in RULES.values())


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
    from accy.ir.ops import Op

    mine = rewrites.Theme("my-rules", "what I am trying out")
    try:
        (x,), (t,) = tensors("x"), types("t")
        mine.rewrite("exp-neg-neg", Tensor.exp(Tensor.neg(Tensor.neg(x, t), t), t),
                     Tensor.exp(x, t), policy="exact", doc="exp(-(-x)) -> exp(x)")
        assert "my-rules" not in rewrites.THEMES and RULESETS["my-rules"] is mine
        assert RULES["exp-neg-neg"].ruleset == "my-rules"
        assert parse_pipeline("saturate{rulesets=my-rules disable=exp-neg-neg}")
        program = trace(lambda a: a.__neg__().__neg__().exp(), accy.f32[5], name="f")
        job = accy.prepare(program, "saturate{rulesets=my-rules}", until="tensor")
        after = job.products[accy.Stage.tensor].program
        assert [n.op for n in after.nodes() if n.srcs] == [Op.EXP]
        a = np.float32([0, 1, -2, 3, 4])
        np.testing.assert_array_equal(accy.interpret(after, [a])[0], np.exp(a))
    finally:
        rewrites.unregister("my-rules")
    assert "my-rules" not in RULESETS and "exp-neg-neg" not in RULES
    with pytest.raises(PipelineError, match="unknown rule set 'my-rules'"):
        accy.prepare(program, "saturate{rulesets=my-rules}", until="tensor")


def test_rule_names_are_checked_when_pipeline_text_is_read() -> None:
    text = "saturate{rulesets=canonical,algebr}"
    with pytest.raises(PipelineError) as caught:
        parse_pipeline(text)
    message, line, caret = str(caught.value).splitlines()
    assert message.startswith("column 29: option rulesets of saturate: unknown rule set "
                              "'algebr'; did you mean 'algebra'? valid rule sets: ")
    assert line.strip() == text and caret.index("^") - line.index("s") == text.index("algebr")
    text = "accy-contract,saturate{disable=mul-one,factor-mul-ad}"
    with pytest.raises(PipelineError, match=f"column {text.index('factor-mul-ad') + 1}: .*"
                                            "'factor-mul-ad'; did you mean 'factor-mul-add'"):
        parse_pipeline(text)
    with pytest.raises(PipelineError, match="canonicalize: unknown rule or rule set 'mul-onee'"
                                            "; did you mean 'mul-one'"):
        parse_pipeline("canonicalize{disable=mul-onee}")
    with pytest.raises(PipelineError, match="option disable of constant-fold: unknown rule"):
        parse_pipeline("constant-fold{disable=fold-exq}")
    assert parse_pipeline("saturate{rules=einsum,neg-neg disable=fold}").text() == (
        "saturate{rules=einsum,neg-neg disable=fold}")


def test_a_rule_set_defined_after_import_is_accepted_and_checked_again_at_run_time() -> None:
    """Text is checked against the registry as it is when read; a set removed between reading
    and running fails the run with the same message (the safety net)."""
    import accy
    from accy.builder import trace

    with pytest.raises(PipelineError, match="unknown rule set 'later-rules'"):
        parse_pipeline("saturate{rulesets=later-rules}")
    later = rewrites.Theme("later-rules", "defined after accy was imported")
    try:
        (x,), (t,) = tensors("x"), types("t")
        later.rewrite("abs-abs-later", Tensor.abs(Tensor.abs(x, t), t), Tensor.abs(x, t),
                      policy="exact", doc="abs(abs(x)) -> abs(x)")
        pipeline = parse_pipeline("saturate{rulesets=later-rules rules=abs-abs-later}")
        program = trace(lambda a: abs(abs(a)), accy.f32[3], name="f")
        job = accy.prepare(program, pipeline, until="tensor")
        assert job.products[accy.Stage.tensor].program != program
    finally:
        rewrites.unregister("later-rules")
    with pytest.raises(PassFailure, match="unknown rule set 'later-rules'; valid rule sets"):
        accy.prepare(program, pipeline, until="tensor")


def test_built_in_names_need_no_theme_import() -> None:
    """Rule-set names are known without importing the themes: checking ``rulesets=``
    is cheap; only a rule name loads them."""
    for name in rewrites.THEMES:
        rewrites.check_name(name, rule_sets_only=True)
    with pytest.raises(KeyError, match="unknown rule set 'neg-neg'"):
        rewrites.check_name("neg-neg", rule_sets_only=True)  # a rule, not a set
    rewrites.check_name("neg-neg")


def test_run_time_rule_sets_appear_beside_the_themes(tmp_path, capsys) -> None:
    """One registry: ``rewrites.load()``, ``accy rules`` (with ``--rules FILE.py``) and rule
    lookups see a run-time set as they see a theme."""
    from accy.cli import main

    rules_file = tmp_path / "extra_rules.py"
    rules_file.write_text(
        "import rewrites\n"
        "from accy.egraph.sorts import Tensor, tensors, types\n"
        "extra = rewrites.Theme('extra-rules', 'a set from a file')\n"
        "(x,), (t,) = tensors('x'), types('t')\n"
        "extra.rewrite('relu-relu-extra', Tensor.relu(Tensor.relu(x, t), t),\n"
        "              Tensor.relu(x, t), policy='exact', doc='relu(relu(x)) -> relu(x)')\n")
    try:
        assert main(["rules", "--rules", str(rules_file)]) == 0
        out = capsys.readouterr().out
        assert "extra-rules  (1 rules)  a set from a file" in out
        assert "relu-relu-extra" in out and "factor-mul-add" in out
        names = [rs.name for rs in rewrites.load()]
        assert names[:len(rewrites.THEMES)] == list(rewrites.THEMES)
        assert names[-1] == "extra-rules"
        record = rewrites.rule_info("relu-relu-extra")
        assert record is RULES["relu-relu-extra"] and record.policy == "exact"
        assert record.ruleset == "extra-rules" and record.conditions == ()
    finally:
        rewrites.unregister("extra-rules")
    assert [rs.name for rs in rewrites.load()] == list(rewrites.THEMES)


def test_a_general_rule_of_a_theme_is_tagged_and_fires() -> None:
    """``Theme.rule`` (several facts, any actions) records a policy, a doc, its conditions
    and the patterns the prefilter looks for."""
    import accy
    from accy.builder import trace

    general = rewrites.Theme("general-rules", "a general rule")
    try:
        (x,), (t,) = tensors("x"), types("t")
        root = var("root", Tensor)
        pattern = Tensor.exp(Tensor.neg(Tensor.neg(x, t), t), t)
        general.rule("exp-neg-neg-general", eq(root).to(pattern), rewrites.has_type(x, t),
                     policy="exact", doc="exp(-(-x)) -> exp(x), as a rule",
                     patterns=(pattern,)).then(union(root).with_(Tensor.exp(x, t)))
        record = RULES["exp-neg-neg-general"]
        assert record.policy == "exact" and record.patterns == (pattern,)
        assert [c.kind for c in record.conditions] == ["type"]
        program = trace(lambda a: a.__neg__().__neg__().exp(), accy.f32[4], name="f")
        job = accy.prepare(program, "saturate{rulesets=general-rules}", until="tensor")
        after = job.products[accy.Stage.tensor].program
        assert [n.op.value for n in after.nodes() if n.srcs] == ["exp"]
        with pytest.raises(TypeError):
            general.rule("untagged", eq(root).to(pattern), doc="no policy")  # type: ignore
    finally:
        rewrites.unregister("general-rules")
