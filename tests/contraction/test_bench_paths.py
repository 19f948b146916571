"""Smoke test: the path benchmark runs a tiny configuration and writes sane JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def bench(experiment_script):
    """experiments/bench_paths.py as a module."""
    return experiment_script("bench_paths")


def test_bench_paths_smoke(bench, tmp_path: Path, capsys) -> None:
    out = tmp_path / "paths.json"
    result = bench.main(["--sizes", "4,6", "--repeats", "1", "--cap-s", "0",
                         "--timing-runs", "1", "--out", str(out)])
    data = json.loads(out.read_text())
    assert data == json.loads(json.dumps(result))
    for key in ("summary", "instances", "versions", "seed", "git_commit", "machine", "args",
                "defaults", "timestamp"):
        assert key in data
    assert set(data["versions"]) == {"accy", "numpy", "opt_einsum", "python"}
    rows = data["instances"]
    assert {r["family"] for r in rows} == set(bench.FAMILIES)
    for r in rows:
        assert set(r["results"]) == {f"accy:{m}" for m in bench.ACCY_METHODS} | {
            f"opt_einsum:{m}" for m in bench.OE_METHODS}
        for cell in r["results"].values():
            assert cell["status"] == "ok" and cell["flops"] > 0
            assert cell["ms"] >= 0 and cell["cpu_ms"] >= 0
    summary = data["summary"]
    assert summary["instances"] == len(rows)
    assert summary["exact_vs_dp"]["exact_dearer"] == 0
    assert summary["exact_vs_dp"]["same_space"]["equal"] == len(rows)
    assert summary["beam_vs_greedy"]["not_worse_share"] == 1.0
    assert summary["auto_vs_opt_einsum_auto"]["worse_on"] == []
    printed = capsys.readouterr().out
    assert "exact == dp wherever both finish" in printed and "geomean" in printed


def test_instances_are_reproducible(bench) -> None:
    first = bench.instances([8], 2, seed=3, families=bench.FAMILIES)
    assert first == bench.instances([8], 2, seed=3, families=bench.FAMILIES)
    assert first != bench.instances([8], 2, seed=4, families=bench.FAMILIES)
    for inst in first:
        assert len(inst["inputs"]) == 8
