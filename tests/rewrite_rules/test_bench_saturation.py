"""Smoke test: the saturation benchmark runs at tiny sizes and writes sane JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def bench(experiment_script):
    """experiments/bench_saturation.py as a module."""
    return experiment_script("bench_saturation")


def test_random_programs_have_about_the_asked_size(bench):
    for nodes in (10, 50):
        program = bench.random_program(nodes, seed=3)
        assert nodes <= len(program.nodes()) <= 2 * nodes + 10
        assert bench.random_program(nodes, seed=3) == program  # seeded


def test_bench_saturation_smoke(bench, tmp_path: Path, capsys) -> None:
    out = tmp_path / "s.json"
    result = bench.main(["--sizes", "10,20", "--seeds", "1", "--time-limit", "1",
                         "--node-limit", "5000", "--no-showcase", "--out", str(out)])
    data = json.loads(out.read_text())
    assert data == json.loads(json.dumps(result))
    assert {"versions", "git_commit", "budget", "rows", "all_within_budget"} <= set(data)
    assert data["versions"]["egglog"] and data["budget"]["time_limit"] == 1.0
    assert [r["target_nodes"] for r in data["rows"]] == [10, 20]
    for row in data["rows"]:
        assert row["stop_reason"] in ("saturated", "iteration_limit", "node_limit",
                                      "time_limit", "skipped")
        assert row["cost_after"] <= row["cost_before"]
        assert row["e_nodes"] <= 5000 and isinstance(row["within_budget"], bool)
    printed = capsys.readouterr().out
    assert "budget:" in printed and "runs within limits" in printed
