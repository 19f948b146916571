"""Smoke test: the indexing benchmark sweeps thread blocks at tiny sizes and writes sane JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def bench(experiment_script):
    """experiments/bench_indexing.py as a module."""
    return experiment_script("bench_indexing")


def test_bench_indexing_smoke(bench, device, tmp_path: Path) -> None:
    out = tmp_path / "i.json"
    result = bench.main(["--rows", "64", "--cols", "8", "--indices", "300", "--blocks",
                         "auto,element,1,3", "--repeat", "2", "--out", str(out)])
    data = json.loads(out.read_text())
    assert data == json.loads(json.dumps(result))
    for key in ("versions", "device", "git_commit", "command", "timestamp", "copy", "results"):
        assert key in data
    assert data["device"]["key"] == device.info.key
    rows = data["results"]
    assert [(r["program"], r["thread_blocks"]) for r in rows] == [
        (p, b) for p in ("gather", "scatter-add") for b in (0, 10, 1, 3)]
    for r in rows:
        assert r["matches"], r
        assert r["kernel_ms"] > 0 and r["GBps"] > 0 and len(r["kernel_ms_each"]) == len(
            r["kernels"])
    gather = {r["thread_blocks"]: r["global_size"][0] for r in rows if r["program"] == "gather"}
    assert gather[0] >= 300  # one work-item per row on CPUs, per element on GPUs
    assert gather[10] == 10 * 256 and gather[3] == 3 * gather[1]


def test_bad_blocks_are_errors(bench) -> None:
    for bad in ("1,x", "-2", "0"):
        with pytest.raises(SystemExit):
            bench.parse_args(["--blocks", bad])
