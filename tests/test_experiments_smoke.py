"""Smoke test: the pipeline benchmark runs at tiny sizes and writes sane JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def bench(experiment_script):
    """experiments/bench_pipeline.py as a module."""
    return experiment_script("bench_pipeline")


def test_bench_pipeline_smoke(bench, tmp_path: Path) -> None:
    out = tmp_path / "b.json"
    result = bench.main(["--sizes", "5,10", "--elements", "4096", "--repeat", "1",
                         "--out", str(out)])
    data = json.loads(out.read_text())
    assert data == json.loads(json.dumps(result))
    assert "pipeline" in data and "chain" in data

    pipe = data["pipeline"]
    assert [r["ops"] for r in pipe["rows"]] == [5, 10]
    for row in pipe["rows"]:
        assert row["prepare_ms"] > 0 and row["ms_per_op"] > 0
        assert row["kernels"] >= 1 and row["buffer_slots"] >= 1
        assert set(row["stage_ms"]) == {"contract", "tensor", "dispatch", "memory", "kernel",
                                        "target"}
        assert all(v >= 0 for v in row["stage_ms"].values())
    assert pipe["growth_ratio"] > 0 and isinstance(pipe["linear"], bool)

    for key in ("command", "versions", "git_commit", "processor", "cpu_count", "timestamp"):
        assert key in data
    assert set(data["versions"]) == {"accy", "numpy", "pyopencl", "python"}

    chain = data["chain"]
    if chain is None:
        return
    assert chain["elements"] == 4096 and chain["kernels"] >= 1
    assert chain["kernel_ms"] > 0 and chain["call_wall_ms"] > 0 and chain["numpy_ms"] > 0
    assert chain["speedup"] > 0
    assert chain["max_rel_error"] < 1e-5
    assert data["device"] == chain["device"]
