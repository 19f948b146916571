"""experiments/sweep_wgmma.py: ``--plan`` (no device) reports selection's picks and the scores
behind them on an H200-like profile; a run on the default device times the mma kernel, reports
the wgmma variants' reasons where the device has no wgmma, and writes the JSON it returns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def sweep(experiment_script):
    return experiment_script("sweep_wgmma")


def test_plan_reports_picks_and_scores(sweep, tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    result = sweep.main(["--plan", "--cases", "2048x1024x512,1000x1030x520",
                         "--policies", "f16,tf32,3xtf32", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    rows = {(r["case"], r["policy"]): r for r in result["rows"]}
    # 64 tiles of 256 rows, 128 of 128 rows: 128-row tiles beat mma's, except under tf32
    assert rows["2048x1024x512", "f16"]["picked"] == {"wgmma-f16": 1}
    assert rows["2048x1024x512", "3xtf32"]["w128x128"]["score"] > \
        rows["2048x1024x512", "3xtf32"]["mma"]["score"]
    # tf32: A and B both copied by TMA rounding to TF32 (wgmma_ss), in its two forms
    assert rows["2048x1024x512", "tf32"]["picked"] == {"wgmma-tf32": 1}
    assert {"w128x128", "w128x256"} <= set(rows["2048x1024x512", "tf32"])
    # 36 tiles of 256 rows lose to the mma kernels' 64x32 tiles under 3xtf32, but the form
    # splitting both operands first scores above them at 72 tiles of 128x128; under tf32 the
    # kernel copying A and B does too (B transposed first)
    row = rows["1000x1030x520", "3xtf32"]
    assert row["picked"] == {"wgmma-3xtf32": 1} and "why_not_wgmma" not in row
    assert row["s128x128"]["score"] > row["mma"]["score"] > row["w256x128"]["score"]
    assert rows["1000x1030x520", "tf32"]["picked"] == {"wgmma-tf32": 1}
    # f16 rows of 1,030 halves fit no tensor map: B is transposed first (rows of K halves)
    assert rows["1000x1030x520", "f16"]["picked"] == {"wgmma-f16": 1}
    # f16 scored as the kernel an H200 builds (no CUDA driver needed): A and B copied by TMA
    # (K 512) in its two forms; TF32 as cp.async's
    f16, tf32 = rows["2048x1024x512", "f16"], rows["2048x1024x512", "3xtf32"]
    assert f16["w128x256"]["rate"] == sweep.wgmma_ss.RATES[sweep.tma.F16][2, 256, 4][0] and \
        "w256x128" not in f16
    assert f16["w128x128"]["rate"] == sweep.wgmma_ss.RATES[sweep.tma.F16][2, 128, 3][0]
    assert (f16["w128x128"]["per_unit"], f16["w128x256"]["per_unit"]) == (2, 1)
    assert tf32["w256x128"]["rate"] == sweep.wgmma.RATES[4]


def test_run_times_the_mma_kernel_and_reports_why_no_wgmma(sweep, device, tmp_path: Path
                                                           ) -> None:
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("checked on PoCL (no tensor cores)")
    out = tmp_path / "r.json"
    result = sweep.main(["--device", "pocl", "--cases", "64x128x256",
                         "--policies", "tf32", "--repeat", "2", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    (row,) = result["rows"]
    assert row["mma"]["ok"] and row["auto"]["ok"] and row["mma"]["ms"] > 0
    assert "probe found no" in row["w4"]["error"] and "probe found no" in row["w2"]["error"]
    assert "probe found no" in row["ws2x256"]["error"]  # the s forms too
    assert row["auto_regret"] > 0 and result["auto_regret_geomean"] == row["auto_regret"]
