"""experiments/bench_cpu.py (accy on PoCL vs onnxruntime on the CPU): every program's ONNX
graph computes the program's maths (both sides checked against float64), and the run writes
sane JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def bench(experiment_script):
    return experiment_script("bench_cpu")


def test_bench_cpu_smoke(bench, device, tmp_path: Path) -> None:
    out = tmp_path / "c.json"
    result = bench.main(["--scale", "0.05", "--repeat", "1", "--out", str(out)])
    data = json.loads(out.read_text())
    assert data == json.loads(json.dumps(result))
    assert [r["program"] for r in data["rows"]] == list(bench.PROGRAMS)
    for row in data["rows"]:
        assert row["accy"]["check"]["ok"] and row["accy"]["check"]["checked"] > 0, row
        assert row["ort_check"]["ok"], row  # onnxruntime computed the same maths
        assert row["ort_ms"] > 0 and row["speed_vs_ort"] > 0
    assert data["summary"]["programs"] == len(bench.PROGRAMS) and data["summary"]["all_ok"]
    for when in ("before", "after"):  # two work-groups against one (no bound: machine speed)
        probe = data["parallel"][when]
        assert probe["one_group_ms"] > 0 and probe["two_groups_ms"] > 0, probe
        assert probe["ratio"] == 2 * probe["one_group_ms"] / probe["two_groups_ms"]
    assert "onnxruntime" in data["versions"] and data["git_commit"]


def test_a_wrong_graph_fails_the_check(bench) -> None:
    import numpy as np

    spec_name, dims = bench.PROGRAMS["softmax"]
    spec = bench.bp.PROGRAMS[spec_name]
    dims = bench.scaled(dims, 0.02)
    xs = bench.bp.inputs(spec, dims)
    check = bench.bp.Checker(spec, dims, xs)
    o = bench.Ort("softmax", dims, xs)
    o()
    got = o.result
    assert check(got)["ok"]
    assert not check(np.flip(got, -1))["ok"]


def test_bad_arguments(bench) -> None:
    with pytest.raises(SystemExit):
        bench.main(["--programs", "nope"])
    with pytest.raises(SystemExit):
        bench.main(["--scale", "0"])
