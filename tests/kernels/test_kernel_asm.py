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


def test_order_gives_the_runs_of_wgmma_and_exponentials(experiment_script):
    sass = "\n".join(["  /*0100*/ HGMMA.64x64x16.F32 R24, R100, gdesc[UR4], RZ, !UPT ;"] * 2
                     + ["  /*0200*/ FMNMX R8, R88, R89, !PT ;"]
                     + ["  /*0300*/ MUFU.EX2 R104, R104 ;"] * 3
                     + ["  /*0400*/ HGMMA.64x64x16.F32 R56, R104, gdesc[UR4].tnspB, R56 ;"])
    order = experiment_script("kernel_asm").order
    assert order(sass) == "H2 E3 H1" and order("") == ""


def test_loop_counts_the_innermost_loop_holding_a_wgmma(experiment_script):
    """Of the loops, the innermost with a wgmma (not the one without, not the one around it);
    its moves (not a move of an immediate) and exponentials; none without a loop around a
    wgmma."""
    sass = """
.L_x_0:
        /*0000*/                   HGMMA.64x64x16.F32 R24, gdesc[UR8], RZ, !UPT ;
.L_x_1:
        /*0010*/                   IADD3 R1, R1, 0x1, RZ ;
        /*0020*/              @P0 BRA `(.L_x_1) ;
.L_x_2:
        /*0030*/                   HGMMA.64x64x16.F32 R24, gdesc[UR8], RZ, !UPT ;
        /*0040*/                   MUFU.EX2 R8, R8 ;
        /*0050*/                   IMAD.MOV.U32 R24, RZ, RZ, R88 ;
        /*0060*/                   IMAD.MOV.U32 R7, RZ, RZ, 0x4 ;
        /*0070*/              @!P1 MOV R25, R89 ;
        /*0080*/              @P0 BRA `(.L_x_2) ;
        /*0090*/              @P1 BRA `(.L_x_0) ;
        /*00a0*/                   EXIT ;"""
    loop = experiment_script("kernel_asm").loop
    assert loop(sass) == {"loop": 6, "moves": 2, "exps": 1}
    assert loop(sass.replace("BRA `(.L_x_2)", "NOP")) == {"loop": 10, "moves": 2, "exps": 1}
    assert loop(sass.replace("BRA `(.L_x_2)", "NOP").replace("BRA `(.L_x_0)", "NOP")) == {}


def test_set_is_checked_before_anything_is_planned(experiment_script, capsys):
    script = experiment_script("kernel_asm")
    for bad in ("nope", "accy.kernels.attention_wgmma.NOPE=1", "pass:kernelization"):
        with pytest.raises(SystemExit):
            script.main(["--programs", "attention_2048_f16", "--set", bad])
        assert "--set" in capsys.readouterr().err


@NEEDS_PTXAS
def test_set_holds_knobs_while_the_kernels_are_planned(experiment_script, tmp_path: Path):
    """The next tile's scores held ahead of the softmax (``PIN``) with the queries in local
    memory (``QLOCAL``): two work-groups a multiprocessor still fit, no spills; the knobs are
    restored after."""
    from accy.kernels import attention_tma, attention_wgmma

    out = tmp_path / "asm.json"
    knobs = "accy.kernels.attention_wgmma.PIN=True;accy.kernels.attention_tma.QLOCAL=True"
    assert experiment_script("kernel_asm").main(
        ["--programs", "attention_2048_f16", "--set", knobs, "--out", str(out)]) == 0
    found = json.loads(out.read_text())
    row = found["rows"][0]
    assert found["set"] == knobs and row["generators"] == {"tma-attention-f16": 1}
    assert row["spill_bytes"] == 0 and not row["serialized"]
    assert 2 * 256 * row["registers"] <= 65536
    assert attention_wgmma.PIN is False and attention_tma.QLOCAL is False
