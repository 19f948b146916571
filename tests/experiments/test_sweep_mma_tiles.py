"""experiments/sweep_mma_tiles.py: the random draw, ``--evaluate`` (no device: the regret of
selection's picks over measured tilings, and a fit of the rates), its picks the same as
``mma_plan.choose_tiles``'s, and a run on the default device writing what it measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accy.ir.program import Stage
from accy.ir.types import DType
from accy.kernels.contraction_plan import analyse
from accy.kernels.mma_plan import CANDIDATES, choose_tiles
from accy.target import TF32_MMA, TargetProfile

TILES = ("128x128x16:2x2", "128x64x16:2x2", "64x64x16:2x2", "64x32x16:2x2")
H200_LIKE = TargetProfile(device="H200-like", device_type="gpu", compute_units=132,
                          max_work_group_size=1024, local_mem_bytes=48 * 1024,
                          dtypes=frozenset({DType.f32, DType.f64, DType.i32, DType.i64,
                                            DType.bool}), tensor_cores=(TF32_MMA,))


@pytest.fixture(scope="module")
def sweep(experiment_script):
    return experiment_script("sweep_mma_tiles")


def test_the_draw_is_seeded_and_in_its_ranges(sweep) -> None:
    cases = sweep.draw(11, 40)
    assert cases == sweep.draw(11, 40) and cases != sweep.draw(12, 40)
    batched = [c for c in cases if c.startswith("b")]
    assert 0 < len(batched) < 20
    for text in cases:
        *lead, m, n, k = (int(v) for v in text.lstrip("b").split("x"))
        assert 32 <= k <= 3000 and (lead or (300 <= m <= 6000 and 300 <= n <= 6000))


def _record(path: Path, products: dict[str, dict[str, float]]) -> None:
    rows = [{"case": case, "rows": {"base": {"ms": min(times.values()), "ms_each": [],
                                             "kernels": [], "ok": True},
                                    **{t: {"ms": ms, "ok": True} for t, ms in times.items()}}}
            for case, times in products.items()]
    path.write_text(json.dumps({"benchmark": "sweep_mma_tiles", "compute_units": 132,
                                "rows": rows}))


def test_evaluate_reports_the_regret_of_selections_picks(sweep, tmp_path: Path) -> None:
    # 4706x5623x42: 128x64 tiles fill their waves as well as 64x64 ones, at a higher rate
    path = tmp_path / "s.json"
    _record(path, {"4706x5623x42": dict(zip(TILES, (0.128, 0.100, 0.118, 0.130), strict=True)),
                   "1000x1030x520": dict(zip(TILES, (0.074, 0.059, 0.050, 0.045),
                                             strict=True))})
    out = sweep.main(["--evaluate", str(path)])
    assert out["products"] == 2 and out["regret"] == pytest.approx(1.0) and out["largest"] == 1
    # without 128x64 tiles, 64x64 ones (0.118 against 0.100); a rate of 0 leaves a tiling out
    out = sweep.main(["--evaluate", str(path), "--rates", "128x64=0"])
    assert out["largest"] == pytest.approx(1.18)
    assert out["regret"] == pytest.approx(1.18 ** 0.5)
    out = sweep.main(["--evaluate", str(path), "--fit"])
    assert out["fitted_regret"] == pytest.approx(1.0) and len(out["held_out_regret"]) == 2


@pytest.mark.parametrize("text", ["1000x1030x520", "4706x5623x42", "761x966x313",
                                  "2048x1024x512", "b45x540x404x95", "300x5000x900"])
def test_its_picks_are_choose_tiles_picks(sweep, experiment_script, text) -> None:
    import accy

    cases = experiment_script("mma_cases")
    case = cases.parse_case(text)
    job = accy.prepare(cases.program(case), "accy-default", target=H200_LIKE)
    p = job.products[Stage.kernel]
    group = p.fusion.groups[p.schedule.item(p.kernels[-1].work_item).group]
    c = analyse(group)[1]
    want = choose_tiles(c, H200_LIKE, False, CANDIDATES)
    got = sweep.pick(case, list(CANDIDATES), sweep.current_rates(), H200_LIKE.compute_units)
    assert (got.bm, got.bn) == (want.bm, want.bn)


def test_a_run_on_the_default_device_writes_what_it_measured(sweep, device,
                                                             tmp_path: Path) -> None:
    """On a device without tensor cores the product runs as selection builds it; the
    tilings, which need them, are recorded with their error."""
    out = tmp_path / "run.json"
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("checked on PoCL (no tensor cores)")
    result = sweep.main(["--device", "pocl", "--cases", "130x96x40",
                         "--tiles", "64x64x16:2x2", "--repeat", "1", "--rounds", "1",
                         "--out", str(out)])
    (row,) = json.loads(out.read_text())["rows"]
    assert row == json.loads(json.dumps(result["rows"][0]))
    assert row["rows"]["base"]["ok"] and row["rows"]["base"]["ms"] > 0
    assert "no mma kernel" in row["rows"]["64x64x16:2x2"]["error"]
