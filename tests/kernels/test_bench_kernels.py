"""Smoke test: the kernel benchmark runs at tiny sizes and writes sane JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def bench(experiment_script):
    """experiments/bench_kernels.py as a module."""
    return experiment_script("bench_kernels")


def test_bench_kernels_smoke(bench, device, tmp_path: Path) -> None:
    out = tmp_path / "k.json"
    result = bench.main(["--elements", "4096", "--repeat", "2", "--baseline", "--out", str(out)])
    data = json.loads(out.read_text())
    assert data == json.loads(json.dumps(result))
    for key in ("versions", "device", "git_commit", "command", "timestamp", "copy", "rows",
                "front"):
        assert key in data
    assert set(data["versions"]) == {"accy", "numpy", "pyopencl", "python"}
    assert data["device"]["key"] == device.info.key and data["elements"] == 4096
    assert data["copy"]["bytes"] == 4 * 4096 and data["copy"]["GBps"] > 0
    names = [r["name"] for r in data["rows"]]
    assert names == ["chain", "chain (loop nest)", "softmax", "sum", "xent", "xent (lowered)"]
    for row in data["rows"]:
        assert row["matches"], row
        assert row["kernel_ms"] > 0 and row["GBps"] > 0 and row["fraction_of_copy"] > 0
        assert row["target_fraction"] in (0.9, 0.7) and isinstance(row["target_met"], bool)
        assert row["kernels"] and row["generators"]
    by_name = {r["name"]: r for r in data["rows"]}
    assert by_name["softmax"]["generators"] == {"row-softmax": 1}
    assert by_name["sum"]["generators"] == {"tree-reduction": 1}
    assert by_name["chain (loop nest)"]["generators"] == {"loop-nest": 1}
    assert by_name["xent"]["kernels"] == ["cross_entropy_kernel_rows",
                                          "cross_entropy_kernel_combine"]
    assert "loss-lowering{kernel-library=disabled}" in by_name["xent (lowered)"]["pipeline"]
    assert "cross_entropy_kernel_rows" not in by_name["xent (lowered)"]["kernels"]
    if data["device"]["cpu"]:  # numpy's time is measured against a CPU device
        assert all(r["numpy_ms"] > 0 for r in data["rows"] if "(" not in r["name"])


def test_bench_kernels_front_without_egglog(bench, device, tmp_path: Path) -> None:
    result = bench.main(["--elements", "4096", "--repeat", "1", "--front", "lowering",
                         "--out", str(tmp_path / "k.json")])
    assert result["front"] == "lowering"
    for row in result["rows"]:
        assert row["matches"], row
        assert row["pipeline"].startswith(bench.FRONTS["lowering"] + ",accy-dispatch")
        assert "saturate" not in row["pipeline"] and "accy-contract" not in row["pipeline"]
