"""experiments/sweep_gemm.py: random products drawn within the bounds asked for, run on the
default device without torch with their float64 check, written as JSON; the worst listed
first; bad bounds refused."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def sweep(experiment_script):
    return experiment_script("sweep_gemm")


def test_sweep_runs_checks_and_writes_json(sweep, device, tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    result = sweep.main(["--count", "3", "--min-side", "4", "--max-side", "40", "--min-k", "8",
                         "--max-k", "300", "--no-torch", "--repeat", "2", "--seed", "3",
                         "--out", str(out)])
    assert json.loads(out.read_text())["summary"] == result["summary"]
    assert result["summary"] == {"products": 3, "failed": 0, "wrong": 0,
                                 "geomean_vs_torch": None, "geomean_vs_torch_net": None,
                                 "below_0.5": 0}
    assert result["offset_ms"] is None  # no calibration without torch
    for row in result["rows"]:
        assert row["accy"]["check"]["ok"] and row["accy"]["kernel_ms"] > 0
        assert row["torch_ms"] is None and row["speed_vs_torch"] is None
        assert row["speed_vs_torch_net"] is None
        assert 4 <= row["dims"]["M"] <= 40 and 8 <= row["dims"]["K"] <= 300 + 1
    assert result["torch_note"] == "--no-torch" and result["classes"] == {}  # none timed
    assert result["complete"] and {r["layout"] for r in result["rows"]} == {"nn"}


def test_layout_nt_stores_b_n_by_k(sweep, device, tmp_path: Path) -> None:
    """``--layout nt``: each B stored N x K (``x @ W.T``), checked against float64 as such."""
    result = sweep.main(["--count", "2", "--min-side", "4", "--max-side", "40", "--min-k", "8",
                         "--max-k", "300", "--no-torch", "--repeat", "1", "--seed", "5",
                         "--layout", "nt", "--out", str(tmp_path / "n.json")])
    assert result["layout"] == "nt"
    for row in result["rows"]:
        assert row["layout"] == "nt" and row["accy"]["check"]["ok"]


def test_the_record_is_kept_after_every_product(sweep, device, tmp_path: Path,
                                               monkeypatch) -> None:
    """A sweep killed during its second product leaves the first row in --out, marked
    incomplete."""
    out = tmp_path / "s.json"
    real, calls = sweep.measure, []

    def killed_at_the_second(*args, **kwargs):
        calls.append(args)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(sweep, "measure", killed_at_the_second)
    with pytest.raises(KeyboardInterrupt):
        sweep.main(["--count", "3", "--max-side", "40", "--max-k", "300", "--no-torch",
                    "--repeat", "1", "--seed", "3", "--out", str(out)])
    kept = json.loads(out.read_text())
    assert not kept["complete"] and kept["summary"]["products"] == len(kept["rows"]) == 1


def test_draws_stay_in_bounds_and_f16_rows_are_whole_pairs(sweep) -> None:
    args = sweep.parse_args(["--min-side", "5", "--max-side", "300", "--min-k", "7",
                             "--max-k", "999", "--max-macs", "1e6"])
    rng = random.Random(0)
    draws = [sweep.draw(rng, args) for _ in range(300)]
    assert {d for d, _ in draws} == {"f32", "f16"}
    for dtype, dims in draws:
        assert dims["M"] * dims["N"] * dims["K"] <= 1e6 and 5 <= dims["M"] <= 300
        assert 7 <= dims["K"] <= 1000
        if dtype == "f16":
            assert dims["N"] % 2 == 0 and dims["K"] % 2 == 0


def test_batches_are_drawn_up_to_max_batch_within_the_macs(sweep, device,
                                                          tmp_path: Path) -> None:
    """``--max-batch``: B log-uniform from 1 (a B of 1 is an unbatched product, no "B"), the
    multiply-adds of every entry within ``--max-macs``; run as batched products on the
    device, checked; without it no batch is drawn."""
    args = sweep.parse_args(["--max-side", "300", "--max-k", "999", "--max-macs", "1e7",
                             "--max-batch", "40"])
    rng = random.Random(1)
    draws = [dims for _, dims in (sweep.draw(rng, args) for _ in range(300))]
    batches = [d["B"] for d in draws if "B" in d]
    assert 100 < len(batches) < 300 and 2 <= min(batches) and max(batches) <= 40
    assert all(d.get("B", 1) * d["M"] * d["N"] * d["K"] <= 1e7 for d in draws)
    plain = sweep.parse_args(["--max-side", "300"])
    assert not any("B" in sweep.draw(rng, plain)[1] for _ in range(50))
    result = sweep.main(["--count", "2", "--max-side", "24", "--min-k", "8", "--max-k", "40",
                         "--max-batch", "5", "--no-torch", "--repeat", "1", "--seed", "2",
                         "--out", str(tmp_path / "b.json")])
    assert [r["dims"].get("B") for r in result["rows"]] == [4, 3]
    assert all(r["accy"]["check"]["ok"] for r in result["rows"])
    assert result["max_batch"] == 5 and "compute units" in result["target"]


def test_worst_first_by_speed_else_by_time_a_multiply_add(sweep) -> None:
    def row(speed, ms, m=10):
        return {"dims": {"M": m, "N": 10, "K": 10}, "accy": {"kernel_ms": ms},
                "speed_vs_torch": speed}
    rows = [row(0.9, 1.0), row(0.2, 0.1), {"dims": {}, "accy": None}, row(1.5, 9.0)]
    assert [r["speed_vs_torch"] for r in sweep.worst(rows, 2)] == [0.2, 0.9]
    untimed = [row(None, 1.0, m=100), row(None, 1.0, m=10)]
    assert sweep.worst(untimed, 1)[0]["dims"]["M"] == 10  # 1 ms over fewer MACs: the worse


@pytest.mark.parametrize("argv", [["--dtypes", "f64"], ["--min-side", "50", "--max-side", "8"],
                                  ["--min-k", "0"], ["--count", "0"],
                                  ["--max-macs", "10", "--min-side", "16"],
                                  ["--max-macs", "27", "--min-side", "3", "--min-k", "3"],
                                  ["--max-batch", "0"], ["--layout", "tn"]])
def test_bad_arguments_are_refused(sweep, argv) -> None:
    with pytest.raises(SystemExit):
        sweep.parse_args(argv)


def test_compare_reads_two_sweeps_and_lists_changed_plans_slowest_first(sweep, tmp_path: Path,
                                                                       capsys) -> None:
    def row(m, gens, kernels, ms, speed, dtype="f32"):
        return {"dtype": dtype, "dims": {"M": m, "N": 8, "K": 64}, "speed_vs_torch": speed,
                "accy": {"generators": gens, "kernels": kernels, "kernel_ms": ms}}
    tiled, mma = {"tiled-contraction": 1}, {"mma-3xtf32": 1}
    before = {"benchmark": "sweep_gemm", "rows": [
        row(1, tiled, 1, 2.0, 0.5), row(2, tiled, 1, 1.0, 0.5), row(3, tiled, 1, 1.0, 0.5),
        row(4, tiled, 1, 1.0, 0.5),
        {"dtype": "f32", "dims": {"M": 5, "N": 8, "K": 64}, "accy": None}]}
    after = {"benchmark": "sweep_gemm", "rows": [
        row(1, mma, 1, 1.0, 1.0), row(2, tiled, 2, 1.25, 0.4), row(3, tiled, 1, 1.0, 0.5),
        row(4, tiled, 1, 1.0, 0.5, dtype="f16"), row(6, tiled, 1, 1.0, 0.5)]}
    paths = []
    for name, data in (("b.json", before), ("a.json", after)):
        paths.append(str(tmp_path / name))
        (tmp_path / name).write_text(json.dumps(data))
    result = sweep.main(["--compare", *paths])
    assert result["common"] == 2 + 1  # M 1, 2, 3 (M 4 another dtype, 5 failed, 6 new)
    assert [(r["dims"]["M"], r["speedup"]) for r in result["changed"]] == [(2, 0.8), (1, 2.0)]
    assert result["geomean_changed"] == pytest.approx((0.8 * 2.0) ** 0.5)
    assert result["geomean_unchanged"] == pytest.approx(1.0)
    assert result["vs_torch"]["before"] == pytest.approx(0.5)
    assert result["vs_torch_net"] == {"before": None, "after": None}  # sweeps without it
    # where both record each kernel's launch, a plan of other tiles has changed too
    before["rows"][2]["accy"]["plan"] = [["einsum_kernel", [64], [64]]]
    after["rows"][2]["accy"]["plan"] = [["einsum_kernel", [128], [64]]]
    (tmp_path / "b.json").write_text(json.dumps(before))
    (tmp_path / "a.json").write_text(json.dumps(after))
    assert [r["dims"]["M"] for r in sweep.main(["--compare", *paths])["changed"]] == [2, 3, 1]
    assert "3 products in both; 2 changed plan" in capsys.readouterr().out
    # the same launches with other kernel bodies (stages, say) have changed too
    after["rows"][2]["accy"]["plan"] = before["rows"][2]["accy"]["plan"]
    before["rows"][2]["accy"]["bodies"], after["rows"][2]["accy"]["bodies"] = ["ab"], ["cd"]
    (tmp_path / "b.json").write_text(json.dumps(before))
    (tmp_path / "a.json").write_text(json.dumps(after))
    assert [r["dims"]["M"] for r in sweep.main(["--compare", *paths])["changed"]] == [2, 3, 1]
    after["rows"][2]["accy"]["bodies"] = ["ab"]
    (tmp_path / "a.json").write_text(json.dumps(after))
    assert [r["dims"]["M"] for r in sweep.main(["--compare", *paths])["changed"]] == [2, 1]
    capsys.readouterr()
    (tmp_path / "bad.json").write_text('{"benchmark": "bench_gpu"}')
    (tmp_path / "broken.json").write_text("{")
    for other in ("missing.json", "bad.json", "broken.json"):
        with pytest.raises(SystemExit):
            sweep.parse_args(["--compare", paths[0], str(tmp_path / other)])
        assert other in capsys.readouterr().err


def test_classes_by_dtype_batch_shorter_side_and_k_in_order(sweep) -> None:
    def row(dtype, m, n, k, speed):
        return {"dtype": dtype, "dims": {"M": m, "N": n, "K": k}, "speed_vs_torch": speed}
    rows = [row("f32", 2000, 16, 64, 0.5), row("f32", 8, 9, 1023, 2.0),
            row("f32", 100, 600, 9000, 0.8), row("f16", 600, 700, 1024, 1.2),
            row("f32", 40, 40, 40, None), row("f32", 100, 600, 9000, 0.7)]
    rows[-1]["dims"]["B"] = 8
    classes = sweep.by_class(rows)
    assert list(classes) == ["f16 side > 512, K < 8192", "f32 side <= 32, K < 1024",
                             "f32 side 33-128, K >= 8192", "f32 batched side 33-128, K >= 8192"]
    assert classes["f32 side <= 32, K < 1024"] == {"products": 2, "geomean_vs_torch": 1.0,
                                                   "least": 0.5, "geomean_net": None}


def test_net_speeds_take_the_offset_off_each_kernel(sweep) -> None:
    """``with_net``: torch's time over accy's less the timer offset for each of its kernels;
    none where that leaves nothing, without torch's time or without an offset; the classes'
    net geometric means over the rows that have one."""
    def row(ms, kernels, torch_ms, m=40):
        return {"dtype": "f32", "dims": {"M": m, "N": 40, "K": 64}, "torch_ms": torch_ms,
                "speed_vs_torch": torch_ms and torch_ms / ms,
                "accy": {"kernel_ms": ms, "kernels": kernels}}
    rows = [row(0.020, 2, 0.008), row(0.016, 1, 0.011), row(0.009, 2, 0.004),
            row(0.020, 1, None), {"dtype": "f32", "dims": {"M": 5, "N": 5, "K": 5},
                                  "accy": None}]
    sweep.with_net(rows, 0.005)
    assert [r["speed_vs_torch_net"] for r in rows] == [
        pytest.approx(0.8), pytest.approx(1.0), None, None, None]
    assert sweep.by_class(rows)["f32 side 33-128, K < 1024"]["geomean_net"] == \
        pytest.approx((0.8 * 1.0) ** 0.5)
    sweep.with_net(rows, None)
    assert all(r["speed_vs_torch_net"] is None for r in rows)
