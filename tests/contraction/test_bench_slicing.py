"""Smoke test: the slicing benchmark runs a tiny configuration and writes sane JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def bench(experiment_script):
    """experiments/bench_slicing.py as a module."""
    return experiment_script("bench_slicing")


def test_bench_slicing_smoke(bench, tmp_path: Path, capsys) -> None:
    out = tmp_path / "slicing.json"
    assert bench.main(["--sizes", "30", "--families", "regular", "--fractions", "4,16",
                       "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    rows = data["rows"]
    assert [r["fraction"] for r in rows] == [4, 16]
    for r in rows:
        assert r["limit"] == r["base_size"] // r["fraction"]
        for m in ("accy:slice", "accy:slice+search"):
            cell = r[m]
            assert cell["status"] == "ok" and cell["per_slice_size"] <= r["limit"]
            assert cell["slices"] > 1 and cell["overhead"] > 0
        assert r["accy:slice+search"]["total_flops"] <= r["accy:slice"]["total_flops"]
    printed = capsys.readouterr().out
    assert "| regular | 30 | S/4 |" in printed
    table = bench.render(data)
    assert "| S/16 |" in table
