"""experiments/ab_gemm.py: products under variants that set module attributes, run in turn
on the default device without torch, every result checked; the attributes restored; plans
compared; bad variants and cases refused naming what is wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accy.ir.types import DType
from accy.kernels import contraction_plan, tma
from accy.target import TENSOR_CORE_SHAPES, TargetProfile


@pytest.fixture(scope="module")
def ab(experiment_script):
    return experiment_script("ab_gemm")


def test_variants_run_in_turn_and_the_changed_plans_are_summed_up(ab, device,
                                                                  tmp_path: Path) -> None:
    """A product of 2 rows takes CPU tiles of STREAM_VECTORS vectors: 1 changes its plan
    (each kernel's launch geometry), not the 40x50x60 one's; both checked against float64;
    the attribute as it was after the run."""
    out = tmp_path / "ab.json"
    before = contraction_plan.STREAM_VECTORS
    result = ab.main(["--cases", "f32:2x512x256,f32:40x50x60", "--count", "1", "--seed", "2",
                      "--max-side", "48", "--max-k", "96", "--no-torch", "--rounds", "2",
                      "--repeat", "2", "--variant",
                      "narrow=accy.kernels.contraction_plan.STREAM_VECTORS=1",
                      "--out", str(out)])
    assert contraction_plan.STREAM_VECTORS == before
    assert json.loads(out.read_text())["summary"] == result["summary"]
    assert result["variants"] == {"base": [], "narrow": [
        "accy.kernels.contraction_plan.STREAM_VECTORS=1"]}
    assert len(result["rows"]) == 3 and result["rows"][2]["dims"]["M"] <= 48
    for row in result["rows"]:
        assert row["torch_ms"] is None
        for v in row["variants"].values():
            assert v["check"]["ok"] and len(v["kernel_ms_rounds"]) == 2
            assert v["kernel_ms"] == min(v["kernel_ms_rounds"])
    first, second = (r["variants"] for r in result["rows"][:2])
    assert first["base"]["plan"] != first["narrow"]["plan"]
    assert second["base"]["plan"] == second["narrow"]["plan"]
    summary = result["summary"]["narrow"]
    assert summary["wrong"] == 0 and summary["changed"] >= 1
    assert summary["least"] > 0 and summary["geomean_speedup"] > 0


def test_the_record_is_kept_after_every_product_and_minutes_bound_the_run(
        ab, device, tmp_path: Path, monkeypatch) -> None:
    """A run killed after its first product leaves that row in --out (complete false, the
    rest listed as not run); --minutes spent starts no further product and says which were
    not run (a clock that has run past it after the first)."""
    out = tmp_path / "ab.json"
    argv = ["--cases", "f32:40x50x60,f32:30x20x10,f32:2x16x8x12", "--no-torch", "--rounds",
            "1", "--repeat", "1", "--variant", "narrow=accy.kernels.contraction_plan."
            "STREAM_VECTORS=1", "--out", str(out)]
    real = ab.run_product

    def killed_after_one(*args, **kwargs):
        if json.loads(out.read_text())["rows"] if out.exists() else False:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(ab, "run_product", killed_after_one)
    with pytest.raises(KeyboardInterrupt):
        ab.main(argv)
    kept = json.loads(out.read_text())
    assert not kept["complete"] and len(kept["rows"]) == 1
    assert kept["not_run"] == ["f32:30x20x10", "f32:2x16x8x12"]
    ran = []

    def timed(*args, **kwargs):
        ran.append(args[:2])
        return real(*args, **kwargs)

    monkeypatch.setattr(ab, "run_product", timed)  # ten minutes pass with the first product
    monkeypatch.setattr(ab.time, "monotonic", lambda: 600.0 if ran else 0.0)
    result = ab.main([*argv, "--minutes", "5"])
    assert result["complete"] and len(result["rows"]) == 1
    assert result["not_run"] == ["f32:30x20x10", "f32:2x16x8x12"]


def test_a_case_of_four_sizes_is_a_batch(ab, device, tmp_path: Path) -> None:
    """``f32:BxMxNxK``: B products of MxNxK, run as one batched product and checked."""
    assert ab.parse_case("f16:3x40x50x62") == ("f16", {"B": 3, "M": 40, "N": 50, "K": 62},
                                               "nn")
    result = ab.main(["--cases", "f32:3x40x50x61", "--no-torch", "--rounds", "1",
                      "--repeat", "1", "--variant", "x=accy.kernels.split_k.FUSED=True",
                      "--out", str(tmp_path / "b.json")])
    (row,) = result["rows"]
    assert row["dims"] == {"B": 3, "M": 40, "N": 50, "K": 61}
    assert "compute units" in result["target"]  # the profile the plans were made for
    assert all(v["check"]["ok"] for v in row["variants"].values())


def test_a_case_ending_nt_reads_b_stored_n_by_k(ab, device, tmp_path: Path) -> None:
    """``f32:MxNxK:nt``: B stored N x K (``x @ W.T``), checked against float64 as such; the
    record keeps the layout and lists the case as given; ``--layout nt`` draws them so."""
    assert ab.parse_case("f32:2x30x20x10:nt") == ("f32", {"B": 2, "M": 30, "N": 20, "K": 10},
                                                  "nt")
    result = ab.main(["--cases", "f32:40x50x61:nt,f32:2x30x20x10:nt", "--no-torch",
                      "--rounds", "1", "--repeat", "1", "--variant",
                      "x=accy.kernels.split_k.FUSED=True", "--out", str(tmp_path / "t.json")])
    for row in result["rows"]:
        assert row["layout"] == "nt"
        assert all(v["check"]["ok"] for v in row["variants"].values())
    assert ab.case_text("f32", {"M": 40, "N": 50, "K": 61}, "nt") == "f32:40x50x61:nt"
    args = ab.parse_args(["--count", "2", "--layout", "nt", "--variant",
                          "x=accy.kernels.split_k.FUSED=True"])
    assert [p[2] for p in args.products] == ["nt", "nt"]


def test_summary_counts_changed_plans_and_wrong_results(ab) -> None:
    def record(ms, plan, ok=True):
        return {"kernel_ms": ms, "plan": [plan], "generators": {"g": 1},
                "check": {"ok": ok}}
    rows = [{"variants": {"base": record(2.0, ["k", [4], [1]]),
                          "v": record(1.0, ["k", [8], [1]])}},
            {"variants": {"base": record(1.0, ["k", [4], [1]]),
                          "v": record(0.5, ["k", [4], [1]], ok=False)}},
            {"variants": {"base": record(1.0, ["k", [4], [1]]), "v": {"error": "boom"}}}]
    assert ab.summarise(rows, ["base", "v"]) == {
        "v": {"changed": 1, "geomean_speedup": 2.0, "least": 2.0, "wrong": 1}}


def test_a_variant_is_restored_after_an_error(ab) -> None:
    variant = ab.parse_variant("x=accy.kernels.contraction_plan.SHORT_K=7")
    before = contraction_plan.SHORT_K
    with pytest.raises(RuntimeError), ab.applied(variant.settings):
        assert contraction_plan.SHORT_K == 7
        raise RuntimeError
    assert contraction_plan.SHORT_K == before


def test_a_variant_may_run_a_pass_with_other_options(ab, device, tmp_path: Path) -> None:
    """``pass:`` settings replace accy-default's pass of that name in the variant's pipeline
    (here constant folding limited to one element, and generators disabled: an option of
    commas), beside a module attribute; all recorded."""
    variant = ab.parse_variant("v=pass:constant-fold{max-elements=1};"
                               "accy.kernels.contraction_plan.SHORT_K=7;"
                               "pass:kernelization{disable=mma-f16,wgmma-f16}")
    assert variant.passes == ("constant-fold{max-elements=1}",
                              "kernelization{disable=mma-f16,wgmma-f16}")
    assert variant.texts() == ["accy.kernels.contraction_plan.SHORT_K=7",
                               "pass:constant-fold{max-elements=1}",
                               "pass:kernelization{disable=mma-f16,wgmma-f16}"]
    result = ab.main(["--cases", "f32:8x16x24", "--no-torch", "--rounds", "1", "--repeat",
                      "1", "--variant", "v=pass:constant-fold{max-elements=1};"
                      "pass:kernelization{disable=mma-f16,wgmma-f16}",
                      "--out", str(tmp_path / "ab.json")])
    assert result["variants"]["v"] == variant.texts()[1:]
    base, mine = (result["rows"][0]["variants"][n] for n in ("base", "v"))
    assert mine["check"]["ok"] and "max-elements=1" not in base["pipeline"]
    assert "constant-fold{max-elements=1}" in mine["pipeline"]
    assert "kernelization{disable=mma-f16,wgmma-f16}" in mine["pipeline"]


@pytest.mark.parametrize("text, says", [
    ("nothing", "NAME=MODULE.ATTR=VALUE or NAME=pass:PASS"),
    ("base=accy.kernels.split_k.FUSED=True", "'base'"),
    ("x=FUSED=True", "neither MODULE.ATTR=VALUE nor pass:"),
    ("x=accy.nowhere.A=1", "cannot import"),
    ("x=accy.kernels.split_k.FUSEDD=True", "has no attribute FUSEDD"),
    ("x=accy.kernels.split_k.FUSED=yes", "not a Python literal"),
    ("x=pass:no-such-pass", "no-such-pass"),
    ("x=pass:contraction-padding{intensity=-1}", "intensity"),
    ("x=pass:contraction-padding{intensity=9};pass:contraction-padding", "given twice"),
])
def test_bad_variants_are_refused_naming_the_fault(ab, text, says) -> None:
    with pytest.raises(ValueError, match=says):
        ab.parse_variant(text)


@pytest.mark.parametrize("argv", [
    ["--cases", "f64:1x2x3", "--variant", "x=accy.kernels.split_k.FUSED=True"],
    ["--cases", "f32:1x2", "--variant", "x=accy.kernels.split_k.FUSED=True"],
    ["--cases", "f32:1x2x3x4x5", "--variant", "x=accy.kernels.split_k.FUSED=True"],
    ["--cases", "f32:0x2x3", "--variant", "x=accy.kernels.split_k.FUSED=True"],
    ["--cases", "f32:4x4x4:tn", "--variant", "x=accy.kernels.split_k.FUSED=True"],
    ["--count", "1", "--layout", "tn", "--variant", "x=accy.kernels.split_k.FUSED=True"],
    ["--variant", "x=accy.kernels.split_k.FUSED=True"],  # no products
    ["--cases", "f32:4x4x4"],  # no variant
    ["--cases", "f32:4x4x4", "--variant", "x=accy.kernels.split_k.FUSED=True",
     "--variant", "x=accy.kernels.split_k.FUSED=False"],  # a name twice
    ["--cases", "f32:4x4x4", "--variant", "x=accy.kernels.split_k.FUSED=1", "--rounds", "0"],
    ["--cases", "f32:4x4x4", "--variant", "x=accy.kernels.split_k.FUSED=1", "--minutes", "-1"],
    ["--cases", "f32:4x4x4", "--variant", "x=accy.kernels.split_k.FUSED=1", "--minutes", "nan"],
])
def test_bad_arguments_are_refused(ab, argv) -> None:
    with pytest.raises(SystemExit):
        ab.parse_args(argv)


H100_LIKE = TargetProfile(device="NVIDIA CUDA / H100-like", dtypes=frozenset(
    {DType.f32, DType.i32, DType.i64, DType.bool}), max_work_group_size=1024,
    local_mem_bytes=49152, compute_units=132, tensor_cores=TENSOR_CORE_SHAPES,
    static_local_bytes=226 * 1024)


def test_plans_only_lists_the_products_a_variant_changes_without_a_device(
        ab, tmp_path: Path, monkeypatch, capsys) -> None:
    """For a saved profile with every tensor-core probe, no CUDA driver: WIDE_MIN_K 0 pads
    the K = 62 f16 product again (a plan of its own), not the K = 520 one, which takes
    wgmma-f16 with its tensor maps planned offline; a record holding the profile serves as
    one; the offline flag is off after."""
    monkeypatch.setattr(tma, "_libcuda", lambda: None)
    profile = tmp_path / "h100.json"
    profile.write_text(json.dumps(H100_LIKE.to_dict()))
    out = tmp_path / "plans.json"
    argv = ["--cases", "f16:3416x2246x62,f16:1000x1030x520", "--variant",
            "old=accy.passes.tensor.dtype_legalization.WIDE_MIN_K=0", "--out", str(out)]
    result = ab.main(["--plans-only", str(profile), *argv])
    assert result["changed"] == {"old": ["f16:3416x2246x62"]}
    assert result["device"] is None and not tma.OFFLINE
    assert TargetProfile.from_dict(result["target_profile"]) == H100_LIKE
    wide = result["rows"][1]["variants"]
    assert wide["base"]["generators"] == wide["old"]["generators"] == {"wgmma-f16": 1}
    printed = capsys.readouterr().out
    assert "old: 1 of 2 products change plan: --cases f16:3416x2246x62" in printed
    assert "old:changed (mma-f16 -> row-movement+mma-f16)" in printed  # the pads: two kernels
    again = ab.main(["--plans-only", str(out), *argv[:-1], str(tmp_path / "again.json")])
    assert again["rows"] == result["rows"]


def test_plans_only_sees_a_change_within_the_kernels(ab, tmp_path: Path, monkeypatch) -> None:
    """A variant that changes a kernel's body but not its launch (more stages for 128x128
    tiles alone on their units) changes the plan: the records' kernel fingerprints differ."""
    monkeypatch.setattr(tma, "_libcuda", lambda: None)
    profile = tmp_path / "h100.json"
    profile.write_text(json.dumps(H100_LIKE.to_dict()))
    result = ab.main(["--plans-only", str(profile), "--cases", "f16:608x2464x1968",
                      "--variant", "lone=accy.kernels.wgmma_ss.LONE_STAGES=6",
                      "--out", str(tmp_path / "plans.json")])
    assert result["changed"] == {"lone": ["f16:608x2464x1968"]}
    base, lone = result["rows"][0]["variants"]["base"], result["rows"][0]["variants"]["lone"]
    assert base["plan"] == lone["plan"] and base["bodies"] != lone["bodies"]


@pytest.mark.parametrize("text, words", [
    (None, ["missing.json"]),
    ("{", ["missing.json: not JSON"]),
    ('{"target_profile": {"compute_units": "x"}}', ["'compute_units'", "expected int"]),
])
def test_plans_only_refuses_a_bad_profile(ab, tmp_path: Path, capsys, text, words) -> None:
    path = tmp_path / "missing.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(SystemExit):
        ab.main(["--plans-only", str(path), "--cases", "f32:64x64x64", "--variant",
                 "x=accy.kernels.mma_plan.MAX_PADDING=2"])
    err = capsys.readouterr().err
    assert "--plans-only" in err and all(w in err for w in words)
