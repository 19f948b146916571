"""Smoke test: the contraction benchmark runs at a tiny size and writes sane JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accy.errors import DeviceError


@pytest.fixture(scope="module")
def bench(experiment_script):
    """experiments/bench_contraction.py as a module."""
    return experiment_script("bench_contraction")


def test_operand_shapes_follow_the_letter_classes(bench):
    assert bench.operand_shapes("ik,kj->ij", 2, 3, 4, 5) == [(2, 4), (4, 3)]
    assert bench.operand_shapes("bik,bjk->bij", 2, 3, 4, 5) == [(5, 2, 4), (5, 3, 4)]
    assert bench.parse_size("7") == (7, 7, 7) and bench.parse_size("2x3x4") == (2, 3, 4)
    assert bench.parse_tiles("wx=8,bk=4;sm=1") == [{"wx": 8, "bk": 4}, {"sm": 1}]


def test_bench_contraction_smoke(bench, tmp_path: Path) -> None:
    out = tmp_path / "c.json"
    try:
        result = bench.main(["--sizes", "24,17x9x33", "--repeat", "2", "--tiles",
                             "wy=1;split=2", "--baseline", "--out", str(out)])
    except DeviceError as exc:
        pytest.skip(f"no usable OpenCL device: {exc}")
    data = json.loads(out.read_text())
    assert data == json.loads(json.dumps(result))
    for key in ("versions", "device", "git_commit", "environment", "target", "command"):
        assert key in data
    assert set(data["versions"]) == {"accy", "numpy", "pyopencl", "python"}
    assert [s["size"]["m"] for s in data["sizes"]] == [24, 17]
    for size in data["sizes"]:
        configs = [r["config"] for r in size["rows"]]
        assert configs == ["heuristic", "wy=1", "split=2", "loop-nest"]  # split: 2 kernels
        for row in size["rows"]:
            assert row["ms"] > 0 and row["tflops"] > 0 and row["rel_error"] < 1e-5
        assert size["rows"][0]["generator"] == "tiled-contraction"
        assert size["rows"][3]["generator"] == "other"
        assert size["rows"][1]["tiles"]["wy"] == 1 and size["rows"][2]["tiles"]["split"] == 2
        assert size["numpy_ms"] > 0 and size["heuristic_over_numpy"] > 0
