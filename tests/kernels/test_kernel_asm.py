"""experiments/kernel_asm.py and accy.backends.opencl.nvptx_offline: the tensor-core kernels of
bench_gpu's programs through clang and ptxas without a GPU (skipped where they are missing)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_wgmma import NEEDS_PTXAS

from accy.backends.opencl.nvptx_offline import TOOLS, summary

LOG = """ptxas info    : Compiling entry function 'k' for 'sm_90a'
ptxas info    : (C7513) Potential Performance Loss: wgmma.mma_async instructions are serialized
    8 bytes stack frame, 12 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 50224 bytes smem"""


def test_summary_reads_registers_spills_and_serialization():
    assert summary(LOG) == {"registers": 255, "spill_bytes": 12, "serialized": True}
    assert summary("nothing") == {"registers": None, "spill_bytes": None, "serialized": False}


@NEEDS_PTXAS
def test_unknown_programs_and_a_missing_disassembler_are_named(experiment_script, capsys,
                                                                 monkeypatch):
    script = experiment_script("kernel_asm")
    with pytest.raises(SystemExit):
        script.main(["--programs", "gemm_between,nope"])
    assert "nope" in capsys.readouterr().err
    monkeypatch.setenv("PATH", ":".join(str(Path(shutil.which(t)).parent) for t in TOOLS))
    if shutil.which("nvdisasm") is None:
        with pytest.raises(SystemExit):
            script.main(["--programs", "gemm_between", "--sass", "sass"])
        assert "nvdisasm" in capsys.readouterr().err


@NEEDS_PTXAS
def test_bench_kernels_assemble(experiment_script, tmp_path: Path, capsys):
    """f16 attention fits two work-groups a multiprocessor without spills or serialized
    wgmma; the f32 "between" product's mma kernel is listed too."""
    out = tmp_path / "asm.json"
    assert experiment_script("kernel_asm").main(
        ["--programs", "attention_2048_f16,gemm_between", "--out", str(out)]) == 0
    rows = {r["program"]: r for r in json.loads(out.read_text())["rows"]}
    attention = rows["attention_2048_f16"]
    assert attention["generators"] == {"tma-attention-f16": 1}
    assert attention["spill_bytes"] == 0 and not attention["serialized"]
    assert 2 * 256 * attention["registers"] <= 65536
    assert rows["gemm_between"]["registers"] > 0
    assert "attention_2048_f16" in capsys.readouterr().out
