"""The rule ablation: configurations as pipeline text, and ``accy experiment ablation --suite
ci`` end to end in CI-sized form (two programs, two rule sets and the rules that fired in
them: ~20 s on two cores), producing the results, the table and the figure."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from accy.cli import main
from accy.experiments import ablation
from accy.passes.spec import parse_pipeline


def test_configurations_cover_all_none_and_each_rule_set() -> None:
    names = [c.name for c in ablation.configurations()]
    sets = ablation.saturate_rulesets()
    assert names == ["all", "none", *(f"-{r}" for r in sets), *(f"only:{r}" for r in sets)]
    with pytest.raises(KeyError, match="valid: canonical"):
        ablation.configurations(["nonsense"])


def _options(text: str, name: str) -> dict:
    (p,) = [p for p in parse_pipeline(text).passes if p.name == name]
    return {"disable": getattr(p, "disable", ()), "fast": getattr(p, "fast_math", False)}


def test_pipeline_text_switches_rules_in_every_rewrite_pass() -> None:
    every = ablation.saturate_rulesets()
    pipe = lambda name, kind, target="", policy="default": ablation.pipeline_for(  # noqa: E731
        ablation.Config(name, kind, target), policy)
    every_pass = parse_pipeline(pipe("all", "all")).passes
    assert [p.name for p in every_pass] == [p.name for p in parse_pipeline("accy-default").passes]
    rewriting = [p for p in every_pass if hasattr(p, "time_limit")]
    assert len(rewriting) == 3 and {p.time_limit for p in rewriting} == {ablation.TIME_LIMIT_S}
    none = pipe("none", "none")
    assert _options(none, "saturate")["disable"] == every
    assert _options(none, "canonicalize")["disable"] == ("canonical",)
    assert _options(none, "constant-fold")["disable"] == ("fold",)
    only = pipe("only:einsum", "only-ruleset", "einsum")
    assert "einsum" not in _options(only, "saturate")["disable"]
    assert _options(only, "canonicalize")["disable"] == ("canonical",)
    rule = pipe("-rule:mul-one", "without-rule", "mul-one")
    assert _options(rule, "saturate")["disable"] == ("mul-one",)
    assert _options(rule, "canonicalize")["disable"] == ("mul-one",)
    assert _options(rule, "constant-fold")["disable"] == ()
    fast = pipe("all", "all", policy="fast-math")
    assert _options(fast, "saturate")["fast"] and _options(fast, "canonicalize")["fast"]


REQUIRED_ROW = ("program", "program_fingerprint", "pipeline", "seed", "stages", "config",
                "cost", "kernels", "bytes_moved", "e_nodes", "stop_reason", "measured",
                "provenance", "correct")


def test_ablation_ci_writes_results_table_and_figure(tmp_path: Path, device, capsys) -> None:
    pytest.importorskip("matplotlib")
    status = main(["experiment", "ablation", "--suite", "ci",
                   "--programs", "attention,softmax_xent", "--rulesets", "einsum,activation",
                   "--repeats", "2", "--timeout", "600", "--out", str(tmp_path)])
    assert status == 0
    names = {p.name for p in tmp_path.iterdir()}
    assert {"ablation.json", "ablation.csv", "ablation.md", "ablation.png",
            "ablation_rules.png"} <= names
    data = json.loads((tmp_path / "ablation.json").read_text())
    assert data["failed"] == []
    assert data["executor"]["timeout"] == data["options"]["timeout"] == 600.0
    rows = data["rows"]
    configs = {r["config"] for r in rows}
    assert {"all", "none", "-einsum", "only:activation", "-rule:einsum-absorb-transpose",
            "-rule:softmax-from-shifted"} <= configs
    for r in rows:
        for key in REQUIRED_ROW:
            assert key in r, key
        assert r["correct"] is True
        assert r["measured"]["kernel_ms"] > 0
        if r["config"] != "all":  # timed interleaved with all rules' kernels, unless the same
            assert r["measured"]["paired"] in ("timed", "identical")
            assert (r["measured"]["paired"] == "timed") == ("paired_ratio" in r["measured"])
    with (tmp_path / "ablation.csv").open() as fh:
        table = list(csv.DictReader(fh))
    assert len(table) == len(rows)
    assert {"program", "pipeline", "cost.extracted", "provenance.git_commit",
            "provenance.versions.egglog", "stages.kernel"} <= set(table[0])
    matters = data["summary"]["matters"]
    assert "attention" in matters["einsum"] and "softmax_xent" in matters["activation"]
    assert "softmax_xent" in matters["log-of-softmax"]
    summary = data["summary"]["programs"]["attention"]
    assert summary["none"]["cost_ratio"] > 1.0 and summary["none"]["kernels"] > \
        summary["all"]["kernels"]
    md = (tmp_path / "ablation.md").read_text()
    assert "Extracted cost without a rule set" in md and "`einsum-absorb-transpose`" in md
    assert "![ablation](ablation.png)" in md
    assert "Rules that matter" in capsys.readouterr().out
