"""Smoke test: the attention benchmark runs at tiny sizes and writes sane JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def test_bench_attention_smoke(experiment_script, device, tmp_path: Path) -> None:
    bench = experiment_script("bench_attention")
    out = tmp_path / "a.json"
    result = bench.main(["--seqs", "9,33", "--heads", "2", "--head-dim", "8", "--repeat", "2",
                         "--causal", "--no-torch", "--out", str(out)])
    data = json.loads(out.read_text())
    assert data == json.loads(json.dumps(result))
    assert data["device"]["key"] == device.info.key
    assert [r["shape"]["seq"] for r in data["rows"]] == [9, 33]
    for row in data["rows"]:
        assert row["causal"]
        for variant in ("fused", "unfused"):
            assert row[variant]["matches"], row
            assert row[variant]["kernel_ms"] > 0
        assert row["fused"]["generators"] == {"fused-attention": 1}
        assert "fused-attention" not in row["unfused"]["generators"]
        # two products and the softmax, each a generator's; on some CPUs (PoCL on an AMD EPYC)
        # a product reads K through a K-contiguous copy, a kernel of its own (``_yt``)
        assert sum(row["unfused"]["generators"].values()) == 3
        assert row["unfused"]["kernel_count"] in (3, 4)


def test_bench_attention_f16_variants(experiment_script, device, tmp_path: Path) -> None:
    """f16 operands and the variants chosen (``mma``: fused, tma-attention-f16 switched off;
    ``wgmma``: mma-attention-f16 too); an unknown variant is an error naming the choices."""
    bench = experiment_script("bench_attention")
    out = tmp_path / "a.json"
    result = bench.main(["--seqs", "24", "--heads", "2", "--head-dim", "16", "--repeat", "2",
                         "--dtype", "f16", "--variants", "fused,mma,wgmma", "--no-torch",
                         "--out", str(out)])
    (row,) = result["rows"]
    assert row["dtype"] == "f16" and "unfused" not in row and "fusion_speedup" not in row
    assert all(row[v]["matches"] for v in ("fused", "mma", "wgmma")), row
    assert "disable=tma-attention-f16}" in row["mma"]["pipeline"]
    assert "disable=tma-attention-f16,mma-attention-f16" in row["wgmma"]["pipeline"]
    with pytest.raises(SystemExit):
        bench.main(["--variants", "fused,tiled", "--no-torch", "--out", str(out)])


def test_bench_attention_module_variants(experiment_script, device, tmp_path: Path) -> None:
    """``--variant NAME=MODULE.ATTR=VALUE``: fused prepared with the attribute set (recorded
    in the row), restored after; a taken name or a setting that is not one is an error."""
    from accy.kernels import attention_tma

    bench = experiment_script("bench_attention")
    out = tmp_path / "v.json"
    result = bench.main(["--seqs", "24", "--heads", "2", "--head-dim", "16", "--repeat", "2",
                         "--variants", "fused", "--no-torch", "--out", str(out),
                         "--variant", "nolead=accy.kernels.attention_tma.LEAD=False"])
    (row,) = result["rows"]
    assert row["nolead"]["matches"] and row["nolead"]["pipeline"] == row["fused"]["pipeline"]
    assert row["nolead"]["settings"] == ["accy.kernels.attention_tma.LEAD=False"]
    assert row["fused"]["settings"] == [] and attention_tma.LEAD is True
    for bad in ("fused=accy.kernels.attention_tma.LEAD=False", "x=accy.kernels.nope.A=1"):
        with pytest.raises(SystemExit):
            bench.main(["--variant", bad, "--no-torch", "--out", str(out)])
