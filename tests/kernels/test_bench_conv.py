"""Smoke test: the convolution benchmark runs a few layers at a tiny scale against
onnxruntime, writes sane JSON and compares two result files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accy.errors import DeviceError


@pytest.fixture(scope="module")
def bench(experiment_script):
    """experiments/bench_conv.py as a module."""
    return experiment_script("bench_conv")


def test_layers_have_the_networks_shapes(bench):
    vgg = bench.SETS["vgg"]()
    assert sum(layer.count for layer in vgg) == 16  # VGG-19's sixteen 3x3 convolutions
    assert sum(layer.flops * layer.count for layer in vgg) == pytest.approx(39.0e9, rel=0.01)
    grouped = [layer for layer in bench.SETS["resnext"]() if layer.groups == 32]
    assert {layer.c // layer.groups for layer in grouped} == {4, 8, 16, 32}
    small = vgg[1].scaled(8)
    assert (small.h, small.w, small.c, small.out) == (28, 28, 64, 64)
    assert "conv-lowering{method=im2col}" in bench.pipeline_for("im2col")


def test_bench_conv_smoke(bench, tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    only = "vgg_64_64_224,resnext_g32_256_56s2,pointwise_64_128_56,maxpool3s2_64_112"
    outs = {}
    for method in ("direct", "im2col"):
        outs[method] = tmp_path / f"{method}.json"
        try:
            result = bench.main(["--scale", "16", "--only", only, "--repeat", "1",
                                 "--threads", "1", "--method", method,
                                 "--out", str(outs[method])])
        except DeviceError as exc:
            pytest.skip(f"no usable OpenCL device: {exc}")
        data = json.loads(outs[method].read_text())
        assert data == json.loads(json.dumps(result))
        assert [r["name"] for r in data["rows"]] == only.split(",")
        for r in data["rows"]:
            assert r["rel_error"] < 1e-4 and r["accy_ms"] > 0 and r["ort_ms_t1"] > 0
        assert set(data["totals"]) == {"vgg", "resnext", "pointwise", "pool"}
        assert "onnxruntime" in data["versions"]
    direct = json.loads(outs["direct"].read_text())["rows"]
    assert all(r["generators"] == {"direct-conv": 1} for r in direct)
    table = bench.compare(str(outs["im2col"]), str(outs["direct"]))
    assert len(table.splitlines()) == 2 + 4 + 4 and "**total vgg**" in table


def test_bench_conv_without_onnxruntime_batch_and_tiles(bench, tmp_path: Path) -> None:
    out = tmp_path / "gpu-style.json"
    try:
        bench.main(["--scale", "16", "--only", "vgg_64_64_224,maxpool3s2_64_112", "--repeat",
                    "1", "--threads", "", "--batch", "2", "--tiles", "tm=4,sn=2",
                    "--out", str(out)])
    except DeviceError as exc:
        pytest.skip(f"no usable OpenCL device: {exc}")
    data = json.loads(out.read_text())
    assert data["batch"] == 2 and data["tiles"] == {"tm": 4, "sn": 2}
    for r in data["rows"]:  # checked against numpy's float64 reference
        assert r["rel_error"] < 1e-4 and not any(k.startswith("ort_") for k in r)
    with pytest.raises(SystemExit):
        bench.main(["--tiles", "tq=3"])
    from accy.kernels import conv  # the override ends with the run

    assert conv.choose_tiles.__name__ == "choose_tiles"
