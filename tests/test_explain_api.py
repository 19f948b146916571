"""``accy.explain``: the runs of the rewrite passes as dataclasses, and ``accy explain`` /
``accy prepare --rules FILE.py`` with a rule set defined at run time in a file."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

import accy
import rewrites
from accy.cli import main
from accy.egraph.rules import RULESETS
from accy.explain import IterationSize, RewriteRun, RuleFired, format_run

TRANSPOSE_TWICE = """\
func @f(%x: f32[8,4]) -> (f32[8,4]) {
  %0 = transpose(%x) {perm=[1, 0]} : f32[4,8]
  %1 = transpose(%0) {perm=[1, 0]} : f32[8,4]
  %2 = exp(%1) : f32[8,4]
  return %2
}
"""

NEG_TWICE = """\
func @f(%x: f32[5]) -> (f32[5]) {
  %0 = neg(%x) : f32[5]
  %1 = neg(%0) : f32[5]
  %2 = exp(%1) : f32[5]
  return %2
}
"""

RULES_FILE = """\
import rewrites
from accy.egraph.sorts import Tensor, tensors, types

mine = rewrites.Theme("file-rules", "a rule set from a --rules file")
(x,), (t,) = tensors("x"), types("t")
mine.rewrite("exp-neg-neg-file", Tensor.exp(Tensor.neg(Tensor.neg(x, t), t), t),
             Tensor.exp(x, t), policy="exact", doc="exp(-(-x)) -> exp(x)")
"""


@pytest.fixture
def rules_file(tmp_path) -> Iterator[str]:
    """A rules file defining ``file-rules``; the set is removed again after the test."""
    path = tmp_path / "my_rules.py"
    path.write_text(RULES_FILE)
    try:
        yield str(path)
    finally:
        if "file-rules" in RULESETS:
            rewrites.unregister("file-rules")


def test_explain_returns_runs_with_rules_fired_and_costs():
    program = accy.parse_program(TRANSPOSE_TWICE)
    runs = accy.explain(program, "constant-fold,canonicalize")
    assert [r.pass_spec for r in runs] == ["constant-fold", "canonicalize"]
    fold, canon = runs
    assert isinstance(canon, RewriteRun)
    assert fold.stop_reason == "skipped: no rule matches the program"
    assert fold.e_nodes is None and fold.per_iteration == () and fold.extractor is None
    assert not fold.changed and fold.cost_before == fold.cost_after
    assert canon.stop_reason == "saturated" and canon.changed
    assert canon.cost_after < canon.cost_before and canon.cost_model == "flops-bytes"
    assert canon.extractor == "greedy-dag"
    assert canon.rules[0].name == "transpose-transpose" and canon.rules[0].matches >= 1
    assert all(isinstance(r, RuleFired) for r in canon.rules)
    assert [r.matches for r in canon.rules] == sorted((r.matches for r in canon.rules),
                                                      reverse=True)
    assert len(canon.per_iteration) == canon.iterations >= 1
    assert all(isinstance(it, IterationSize) for it in canon.per_iteration)
    assert canon.e_nodes is not None and canon.e_nodes[1] == canon.per_iteration[-1].e_nodes
    assert [n.op.value for n in canon.program.nodes() if n.srcs] == ["exp"]
    doc = canon.to_dict()
    assert json.loads(json.dumps(doc)) == doc and doc["pass"] == "canonicalize"
    assert format_run(canon).startswith("== canonicalize [contract] ==\nstop reason: saturated")


def test_explain_stops_at_until():
    program = accy.parse_program(TRANSPOSE_TWICE)
    runs = accy.explain(program, until="contract")
    assert [r.stage for r in runs] == ["contract", "contract"]


def test_cli_explain_with_a_rules_file_whose_rule_fires(tmp_path, rules_file, capsys):
    path = tmp_path / "nn.accy"
    path.write_text(NEG_TWICE)
    pipeline = "saturate{rulesets=file-rules}"
    assert main(["explain", str(path), "--rules", rules_file, "--pipeline", pipeline,
                 "--json"]) == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    assert run["pass"] == pipeline and run["changed"]
    assert [r["name"] for r in run["rules"]] == ["exp-neg-neg-file"]
    assert "neg(" not in run["program"]


def test_cli_prepare_with_a_rules_file(tmp_path, rules_file, capsys):
    path = tmp_path / "nn.accy"
    path.write_text(NEG_TWICE)
    assert main(["prepare", str(path), "--rules", rules_file, "--until", "tensor",
                 "--statistics", "--pipeline", "saturate{rulesets=file-rules}"]) == 0
    assert "exp-neg-neg-file" in capsys.readouterr().out


def test_cli_without_the_rules_file_names_the_unknown_set(tmp_path, capsys):
    path = tmp_path / "nn.accy"
    path.write_text(NEG_TWICE)
    assert main(["explain", str(path), "--pipeline", "saturate{rulesets=file-rules}"]) == 2
    assert "unknown rule set 'file-rules'" in capsys.readouterr().err


@pytest.mark.parametrize("text,error", [
    ("import no_such_module_anywhere\n", "ModuleNotFoundError: No module named"),
    ("def broken(:\n", "SyntaxError: "),
    ("raise RuntimeError('bad\\nsecond line')\n", "RuntimeError: bad"),
])
def test_a_rules_file_that_fails_to_import_is_one_line_naming_it(tmp_path, capsys, text,
                                                                  error):
    rules = tmp_path / "bad_rules.py"
    rules.write_text(text)
    path = tmp_path / "nn.accy"
    path.write_text(NEG_TWICE)
    assert main(["explain", str(path), "--rules", str(rules)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"accy explain: error: --rules {rules}: ")
    assert error in err


def test_a_missing_rules_file_is_named(tmp_path, capsys):
    path = tmp_path / "nn.accy"
    path.write_text(NEG_TWICE)
    missing = tmp_path / "missing.py"
    assert main(["prepare", str(path), "--rules", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"accy prepare: error: --rules {missing}: ") and err.count("\n") == 1
