"""experiments/bench_prepare.py runs end to end at toy sizes and writes its JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def bench(experiment_script):
    return experiment_script("bench_prepare")


def test_workloads_land_near_their_size(bench) -> None:
    for name, make in bench.WORKLOADS.items():
        nodes = bench.node_count(make(100))
        assert 50 <= nodes <= 150, (name, nodes)
    assert len(bench.many_outputs(7).functions[0].results) == 7


def test_bench_writes_its_rows(bench, device, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    assert bench.main(["--sizes", "20", "--first-run-size", "10", "--outputs", "3",
                       "--modes", "", "--before", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert {r["workload"] for r in data["prepare"]} == set(bench.WORKLOADS)
    assert all(r["stage_ms"].keys() == {"contract", "tensor", "dispatch", "memory", "kernel",
                                        "target"} for r in data["prepare"])
    runs = data["first_runs"]  # the 3-output program as before issue #15, twice: a kernel
    # per output (no horizontal fusion), each built as a program of its own
    assert [(r["workload"], r["caches"], r["batched"]) for r in runs] == [
        ("3-outputs", "cold", False), ("3-outputs", "warm", False)]
    assert runs[0]["compiled"] == runs[0]["kernels"] == 3
