"""The contraction, kernels and benefit experiments at tiny sizes, ``accy report``, and the
regeneration of papers/ (generated blocks rewritten, prose kept)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accy.cli import main
from accy.experiments import benefit, contraction, kernels, networks
from accy.experiments.paper import replace_block
from accy.experiments.records import write_results
from accy.experiments.runner import SweepOptions, deterministic


def test_networks_are_seeded() -> None:
    a = networks.instances([4, 6], 1, 0, networks.FAMILIES)
    assert a == networks.instances([4, 6], 1, 0, networks.FAMILIES)
    assert a != networks.instances([4, 6], 1, 1, networks.FAMILIES)
    assert {i["family"] for i in a} == set(networks.FAMILIES)


def test_contraction_compares_methods_on_suite_and_random_networks() -> None:
    options = SweepOptions(suite="ci", workers=0, show_progress=False)
    result = contraction.run(options, families=("chain", "regular3"), sizes=[4, 6])
    assert result["failed"] == []
    rows = result["rows"]
    assert {r["program"] for r in rows if r["family"] == "suite"} == {"tensor_network",
                                                                      "matrix_chain"}
    for r in rows:
        assert {"program_fingerprint", "pipeline", "results", "measured", "provenance"} <= set(r)
        assert r["results"]["accy:auto"]["status"] == "ok"
        assert r["results"]["opt_einsum:greedy"]["flops"] > 0
    methods = result["summary"]["methods"]
    assert methods["accy:exact"]["geomean_ratio"] == pytest.approx(1.0, abs=0.05)
    assert methods["accy:auto"]["solved"] == len(rows)
    again = contraction.run(options, families=("chain", "regular3"), sizes=[4, 6])
    assert [deterministic(r) for r in again["rows"]] == [deterministic(r) for r in rows]


def test_kernels_compares_accy_with_numpy(device) -> None:
    options = SweepOptions(suite="ci", programs=("layernorm",), workers=0, repeats=2,
                           show_progress=False)
    result = kernels.run(options)
    (row,) = result["rows"]
    m = row["measured"]
    assert row["correct"] and m["kernel_ms"] > 0 and m["numpy_ms"] > 0
    assert m["copy_GBps"] > 0 and m["speedup_vs_numpy"] > 0
    assert result["summary"]["programs"]["layernorm"]["effective_GBps"] > 0


def test_benefit_compares_saturated_with_unsaturated(device) -> None:
    assert "saturate" not in benefit.pipeline_for("unsaturated")
    assert "saturate{fast-math=true}" in benefit.pipeline_for("saturated-fast-math")
    options = SweepOptions(suite="ci", programs=("attention",), workers=0, repeats=2,
                           show_progress=False)
    result = benefit.run(options)
    s = result["summary"]["programs"]["attention"]
    assert set(s) == set(benefit.CONFIGS)
    assert s["saturated"]["cost"] < s["unsaturated"]["cost"]
    assert s["saturated"]["kernels"] < s["unsaturated"]["kernels"]
    assert s["saturated"]["end_to_end_ms"] > 0 and s["saturated"]["kernel_ms_speedup"] > 0


def test_report_command_writes_tables_and_figures(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    options = SweepOptions(suite="ci", workers=0, show_progress=False)
    result = contraction.run(options, families=("ring",), sizes=[4])
    json_path, _ = write_results(result, tmp_path / "res")
    assert main(["report", str(json_path), "--out", str(tmp_path / "rep")]) == 0
    md = (tmp_path / "rep" / "contraction.md").read_text()
    assert "| `accy:auto` |" in md and "Commit `" in md
    assert (tmp_path / "rep" / "contraction.png").stat().st_size > 1000


def test_replace_block_keeps_prose() -> None:
    text = "# T\n\nprose\n<!-- generated: a -->\nold\n<!-- end generated: a -->\nmore prose\n"
    out = replace_block(text, "a", "new\nlines")
    assert out == ("# T\n\nprose\n<!-- generated: a -->\nnew\nlines\n"
                   "<!-- end generated: a -->\nmore prose\n")
    assert replace_block(out, "a", "new\nlines") == out
    appended = replace_block(text, "b", "x")
    assert appended.endswith("<!-- generated: b -->\nx\n<!-- end generated: b -->\n")


def test_paper_regenerates_generated_blocks(tmp_path: Path, device) -> None:
    pytest.importorskip("matplotlib")
    doc = tmp_path / "ablation.md"
    doc.write_text("# Rule ablation\n\nHand-written prose.\n\n<!-- generated: tables -->\n"
                   "stale\n<!-- end generated: tables -->\n")
    status = main(["experiment", "paper", "--suite", "ci", "--programs", "layernorm",
                   "--rulesets", "algebra", "--no-per-rule", "--families", "chain",
                   "--sizes", "4", "--repeats", "1", "--out", str(tmp_path)])
    assert status == 0
    text = doc.read_text()
    assert "Hand-written prose." in text and "stale" not in text
    assert "accy experiment paper --suite ci --programs layernorm" in text
    assert "<!-- generated: tables-fast-math -->" in text
    assert "figures/ablation.png" in text
    assert (tmp_path / "contraction.md").exists()
    for name in ("ablation", "ablation-fast-math", "contraction"):
        data = json.loads((tmp_path / "data" / f"{name}.json").read_text())
        assert data["rows"] and not data["failed"]
    (tmp_path / "figures" / "ablation.png").unlink()
    assert main(["experiment", "paper", "--render-only", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "figures" / "ablation.png").exists()
    assert doc.read_text() == text  # the same data renders the same text
