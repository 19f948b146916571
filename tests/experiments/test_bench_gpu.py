"""experiments/bench_gpu.py (accy vs torch eager and torch.compile): runs on the default device
at --size small without torch and writes sane JSON; its float64 check rejects a wrong result;
its torch side loads without torch or accy; speeds and summary follow from torch's times (a
stand-in for torch here); its torch functions agree with the programs where torch is
installed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest


@pytest.fixture(scope="module")
def bench(experiment_script):
    """experiments/bench_gpu.py as a module."""
    return experiment_script("bench_gpu")


def test_bench_gpu_smoke(bench, device, tmp_path: Path) -> None:
    from accy.kernels import split_k

    out = tmp_path / "g.json"
    names = ["gemm_skinny", "layernorm", "softmax_f16"]
    kept = split_k.FUSED
    seen = []
    real = bench.run_program

    def spy(*a, **k):
        seen.append(split_k.FUSED)
        return real(*a, **k)

    bench.run_program = spy
    try:  # --split-sums: K split summed the other way while it runs, restored after
        other = "kernel" if kept else "fixup"
        result = bench.main(["--size", "small", "--no-torch", "--repeat", "2", "--split-sums",
                             other, "--programs", ",".join(names), "--out", str(out)])
    finally:
        bench.run_program = real
    assert split_k.FUSED == kept and set(seen) == {not kept}
    data = json.loads(out.read_text())
    assert data["split_sums"] == other
    assert data == json.loads(json.dumps(result))
    for key in ("versions", "device", "git_commit", "machine", "timestamp", "command",
                "accy_device", "torch", "rows", "summary"):
        assert key in data
    assert data["versions"]["accy"] and "torch" in data["versions"]
    assert data["accy_device"]["key"] == device.info.key
    assert isinstance(data["accy_device"]["cl_khr_fp16"], bool)
    assert data["torch"] == {"note": "--no-torch"} and data["policies"] == ["f32"]
    assert [r["program"] for r in data["rows"]] == names
    assert data["complete"] and data["not_run"] == []
    for row in data["rows"]:
        assert row["status"] == "ok", row
        assert row["dims"] == bench.PROGRAMS[row["program"]].small
        a = row["accy"]
        assert a["kernels"] >= 1 and sum(a["generators"].values()) == a["kernels"]
        assert a["kernel_ms"] > 0 and a["call_ms"] > 0
        assert a["check"]["ok"] and a["check"]["checked"] > 0
        assert 0 <= a["check"]["bound_use"] <= 1
        assert row["torch_eager"] is None and row["torch_compile"] is None
        assert row["torch_note"] == "--no-torch" and row["speed_vs_compile"] is None
    by = {r["program"]: r for r in data["rows"]}
    assert by["softmax_f16"]["dtype"] == "f16" and by["layernorm"]["class"] == "row reduction"
    s = data["summary"]["f32"]
    assert s["programs"] == 3 and s["accy_ok"] == 3 and s["programs_compared"] == 0
    assert s["geomean_vs_compile"] is None


def test_bench_gpu_keeps_its_record_when_killed(bench, device, tmp_path: Path,
                                                monkeypatch) -> None:
    """A run killed after its first program leaves that program's rows in --out (complete
    false, the rest listed as not run)."""
    out = tmp_path / "g.json"
    real = bench.run_program

    def killed_after_one(*args, **kwargs):
        if out.exists():
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(bench, "run_program", killed_after_one)
    with pytest.raises(KeyboardInterrupt):
        bench.main(["--size", "small", "--no-torch", "--repeat", "1", "--programs",
                    "chain,softmax,rmsnorm", "--out", str(out)])
    kept = json.loads(out.read_text())
    assert not kept["complete"] and kept["not_run"] == ["softmax", "rmsnorm"]
    assert [r["program"] for r in kept["rows"]] == ["chain"]
    assert kept["summary"]["f32"]["programs"] == 1 and "git_commit" in kept


def test_bench_gpu_check_rejects_a_wrong_result(bench) -> None:
    spec = bench.PROGRAMS["gemm_between"]
    dims = spec.dims("small")
    xs = bench.inputs(spec, dims)
    check = bench.Checker(spec, dims, xs)
    want = (xs[0].astype(np.float64) @ xs[1]).astype(np.float32)
    good = check(want)
    assert good["ok"] and good["checked"] == min(dims["M"], bench.CHECK_ROWS) * dims["N"]
    bad = want.copy()
    bad[3, 5] += 1e-3 * np.abs(want).max()
    verdict = check(bad)
    assert not verdict["ok"] and verdict["bad_elements"] == 1 and verdict["bound_use"] > 1


def test_bench_gpu_options_are_checked(bench) -> None:
    with pytest.raises(SystemExit):
        bench.parse_args(["--programs", "gemm_4096,nope"])
    with pytest.raises(SystemExit):
        bench.parse_args(["--repeat", "0"])
    with pytest.raises(SystemExit):
        bench.parse_args(["--policies", "f32,fp8"])
    assert bench.parse_args(["--policies", "f32, ieee"]).policies == ("f32", "ieee")
    assert bench.pipeline_text("tf32").endswith("kernelization{precision=tf32},"
                                                "backend-legalization")
    assert "precision" not in bench.pipeline_text("f32")
    # --disable: generators switched off in accy's pipeline (e.g. to time wgmma attention)
    assert "kernelization{disable=mma-attention-f16}" in bench.pipeline_text(
        "f32", "mma-attention-f16")
    assert "disable=a,b precision=tf32}" in bench.pipeline_text("tf32", "a,b")
    assert bench.parse_args(["--disable", "mma-attention-f16"]).disable == "mma-attention-f16"
    assert bench.parse_args([]).split_sums is None
    with pytest.raises(SystemExit):
        bench.parse_args(["--split-sums", "atomic"])
    # --set: module attributes for the whole run (checked as ab_gemm's variants are)
    from accy.kernels import attention_tma, tma

    got = bench.parse_args(["--set", "accy.kernels.tma.KEEP_MAPS=False; "
                            "accy.kernels.attention_tma.KEYS=(64,)"]).settings
    assert got == [(tma, "KEEP_MAPS", False), (attention_tma, "KEYS", (64,))]
    assert bench.parse_args([]).settings == []
    for bad in ("accy.kernels.tma.NOPE=1", "accy.kernels.tma.KEEP_MAPS=off",
                "pass:kernelization{precision=tf32}"):
        with pytest.raises(SystemExit):
            bench.parse_args(["--set", bad])


def test_bench_gpu_set_holds_for_the_run_and_is_restored(bench, device, tmp_path: Path) -> None:
    """``--set``: the attribute has its value while programs run, its own after, and the JSON
    records the text."""
    from accy.kernels import tma

    kept, seen = tma.KEEP_MAPS, []
    real = bench.run_program

    def spy(*a, **k):
        seen.append(tma.KEEP_MAPS)
        return real(*a, **k)

    bench.run_program = spy
    try:
        result = bench.main(["--size", "small", "--no-torch", "--no-calibration", "--repeat",
                             "1", "--programs", "softmax", "--set",
                             f"accy.kernels.tma.KEEP_MAPS={not kept}",
                             "--out", str(tmp_path / "s.json")])
    finally:
        bench.run_program = real
    assert seen == [not kept] and tma.KEEP_MAPS == kept
    assert result["set"] == f"accy.kernels.tma.KEEP_MAPS={not kept}"
    assert result["rows"][0]["status"] == "ok"


def test_bench_gpu_torch_side_needs_neither_torch_nor_accy(tmp_path: Path) -> None:
    """bench_gpu_torch.py loads with accy and torch blocked, and says why torch is missing."""
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[2] / "experiments" / "bench_gpu_torch.py"
    code = (
        "import importlib.util, sys\n"
        "sys.modules['accy'] = None\n"
        "sys.modules['torch'] = None\n"
        f"spec = importlib.util.spec_from_file_location('bgt', {str(script)!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "import numpy as np\n"
        "a = np.ones((2, 2), np.float32)\n"
        "r = m.bench_torch('gemm', {}, [a, a], 1)\n"
        "assert r['eager'] is None and r['compile'] is None, r\n"
        "assert r['note'].startswith('torch is not installed'), r\n"
        "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_bench_gpu_torch_functions_match_the_programs(bench) -> None:
    """Each kind's torch function (run on the CPU) is within the accy program's bounds."""
    torch = pytest.importorskip("torch")
    for name in ("gemm_batched", "attention_512", "layernorm", "rmsnorm", "softmax",
                 "mlp_gelu", "chain", "layernorm_f16"):
        spec = bench.PROGRAMS[name]
        dims = spec.dims("small")
        xs = bench.inputs(spec, dims)
        got = bench.bt.torch_fn(spec.kind, dims, torch)(*(torch.from_numpy(x) for x in xs))
        verdict = bench.Checker(spec, dims, xs)(got.numpy())
        assert verdict["ok"], (name, verdict)


def test_bench_gpu_speeds_and_summary_with_torch_results(bench, device, monkeypatch,
                                                         tmp_path: Path) -> None:
    """With torch's side answering (a stand-in here: no CUDA on this machine), each row's
    speed is torch's ms over accy's, and the summary's geometric mean and class minima
    follow from them."""
    compile_ms = {"gemm_skinny": 2.0, "gemm_small_k": 3.0, "rmsnorm": 0.5}

    def fake_bench_torch(kind, dims, arrays, repeat, compile_mode, check, torch):
        assert torch == "fake-torch" and compile_mode == "default" and repeat == 2
        if kind == "add":  # the timer calibration: torch's launch takes no time here
            t = {"kernel_ms": 1e-9, "call_ms": 1.0, "kernels": 1, "kernel_names": ["k"]}
            return {"eager": t, "compile": t, "note": None}
        name = kind if kind != "gemm" else "gemm_skinny" if dims["M"] == 4 else "gemm_small_k"
        t = {"kernel_ms": compile_ms[name], "call_ms": 1.5 * compile_ms[name], "kernels": 1,
             "kernel_names": ["k"]}
        assert callable(check)
        return {"eager": {**t, "kernel_ms": 2 * t["kernel_ms"]}, "compile": t, "note": None}

    monkeypatch.setattr(bench.bt, "load_torch", lambda: ("fake-torch", None))
    monkeypatch.setattr(bench.bt, "configure", lambda torch, tf32: {"device": "fake"})
    monkeypatch.setattr(bench.bt, "bench_torch", fake_bench_torch)
    result = bench.main(["--size", "small", "--repeat", "2", "--programs",
                         ",".join(compile_ms), "--out", str(tmp_path / "g.json")])
    rows = {r["program"]: r for r in result["rows"]}
    for name, ms in compile_ms.items():
        r = rows[name]
        assert r["status"] == "ok"
        assert r["speed_vs_compile"] == pytest.approx(ms / r["accy"]["kernel_ms"])
        assert r["speed_vs_eager"] == pytest.approx(2 * ms / r["accy"]["kernel_ms"])
        assert r["call_speed_vs_compile"] == pytest.approx(1.5 * ms / r["accy"]["call_ms"])
    s = result["summary"]["f32"]
    speeds = [r["speed_vs_compile"] for r in rows.values()]
    assert s["programs_compared"] == 3
    assert s["geomean_vs_compile"] == pytest.approx(np.prod(speeds) ** (1 / 3))
    assert s["class_min_vs_compile"] == {
        "skinny GEMM": rows["gemm_skinny"]["speed_vs_compile"],
        "small-K GEMM": rows["gemm_small_k"]["speed_vs_compile"],
        "row reduction": rows["rmsnorm"]["speed_vs_compile"]}
    assert s["goal_geomean_ge_1"] == (s["geomean_vs_compile"] >= 1.0)
    assert result["torch"] == {"device": "fake"}
    # the calibration: accy's 32-element a + b less torch's is taken off each kernel of a row
    cal = result["calibration"]
    tiny, add = cal["rows"]
    assert [tiny["program"], add["program"]] == ["calibration_tiny", "calibration_add"]
    assert tiny["status"] == add["status"] == "ok" and tiny["dims"] == {"N": 32}
    offset = cal["offset_ms"]
    assert offset == pytest.approx(tiny["accy"]["kernel_ms"] - 1e-9)
    assert tiny["accy"]["kernel_ms_net"] == pytest.approx(1e-9)  # torch's, by construction
    nets = {}
    for name, ms in compile_ms.items():
        a = rows[name]["accy"]
        net = a["kernel_ms"] - offset * len(a["kernel_ms_each"])
        assert a["kernel_ms_net"] == (pytest.approx(net) if net > 0 else None)
        want = ms / net if net > 0 else None
        assert rows[name]["speed_vs_compile_net"] == (want and pytest.approx(want))
        if want:
            nets[name] = want
    assert s["geomean_vs_compile_net"] == (
        pytest.approx(np.prod(list(nets.values())) ** (1 / len(nets))) if nets else None)
    assert "calibration" not in s["class_min_vs_compile"]


def test_bench_gpu_net_time_takes_the_offset_off_each_kernel(bench) -> None:
    rows = [{"accy": {"kernel_ms": 1.0, "kernel_ms_each": {"0:a": 0.6, "1:b": 0.4}},
             "torch_compile": {"kernel_ms": 0.4}},
            {"accy": {"kernel_ms": 0.15, "kernel_ms_each": {"0:a": 0.15}},
             "torch_compile": {"kernel_ms": 0.1}},
            {"accy": {"kernel_ms": 0.15, "kernel_ms_each": {"0:a": 0.1, "1:b": 0.05}},
             "torch_compile": {"kernel_ms": 0.1}}]
    bench.apply_offset(rows, 0.1)
    assert rows[0]["accy"]["kernel_ms_net"] == pytest.approx(0.8)
    assert rows[0]["speed_vs_compile_net"] == pytest.approx(0.5)
    assert rows[1]["accy"]["kernel_ms_net"] == pytest.approx(0.05)
    assert rows[2]["accy"]["kernel_ms_net"] is None  # two offsets leave nothing
    assert rows[2]["speed_vs_compile_net"] is None


def test_bench_gpu_held_out_shapes_are_drawn_around_each_class(bench) -> None:
    """--held-out's shapes: within a factor of 2 of the program's own axes, head dimensions
    multiples of 8, square GEMMs square, keys as many as queries, the same for a seed."""
    import numpy as np

    def draws(seed: int) -> list[dict[str, int]]:
        rng = np.random.default_rng(seed)
        return [bench.held_out_dims(spec, "full", rng) for spec in bench.PROGRAMS.values()
                for _ in range(5)]

    first = draws(7)
    assert first == draws(7) and first != draws(8)
    specs = [spec for spec in bench.PROGRAMS.values() for _ in range(5)]
    assert any(d != spec.full for d, spec in zip(first, specs, strict=True))
    for dims, spec in zip(first, specs, strict=True):
        assert dims.keys() == spec.full.keys()
        for axis, n in dims.items():
            assert spec.full[axis] / 2 - 4 <= n <= spec.full[axis] * 2 + 4, (spec.name, dims)
        if spec.shape_class == "square GEMM":
            assert dims["M"] == dims["N"] == dims["K"]
        if spec.kind == "attention":
            assert dims["Sq"] == dims["Sk"] and dims["D"] % 8 == 0


def test_bench_gpu_runs_held_out_shapes(bench, tmp_path: Path) -> None:
    out = tmp_path / "h.json"
    result = bench.main(["--size", "small", "--no-torch", "--repeat", "1", "--held-out", "2",
                         "--seed", "5", "--programs", "gemm_between,layernorm_f16",
                         "--out", str(out)])
    rows = result["rows"]
    assert [r["program"] for r in rows] == ["gemm_between"] * 2 + ["layernorm_f16"] * 2
    assert result["held_out"] == 2 and result["seed"] == 5
    for r in rows:
        assert r["held_out"] and r["status"] == "ok", r
        assert r["accy"]["check"]["checked"] > 0
    assert rows[0]["dims"] != rows[1]["dims"]
    assert any(r["dims"] != bench.PROGRAMS[r["program"]].small for r in rows)
    with pytest.raises(SystemExit):
        bench.parse_args(["--held-out", "-1"])
