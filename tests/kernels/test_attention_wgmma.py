"""wgmma-attention-f16 (accy/kernels/attention_wgmma.py) without a GPU: when it is taken (an
opt-in after mma-attention-f16, only where the probe ran wgmma), whole kernels on PoCL with
wgmma, cp.async, shuffles and ex2 emulated (mma_emulation.py, test_attention_mma.py) against
the interpreter's f16, and, where clang and CUDA's ptxas are installed, the expanded PTX
assembled for sm_90a. Speed: papers/kernels.md, "Twenty-third session"."""

from __future__ import annotations

import dataclasses

import pytest
from test_attention_mma import F16, KEEP_F16, NV, f16_heads, run_emulated
from test_wgmma import NEEDS_PTXAS, assembled

import accy
from accy.passes.spec import parse_pipeline
from accy.target import WGMMA_F16

HOPPER16 = dataclasses.replace(F16, tensor_cores=(*F16.tensor_cores, WGMMA_F16))
OPT_IN = parse_pipeline(KEEP_F16).replacing("kernelization{disable=mma-attention-f16}").text()


def test_an_opt_in_after_mma_attention_and_only_with_wgmma(rng):
    prog, _ = f16_heads(rng, 1, 2, ((256, 64), (256, 64), (256, 64)), 0.125)
    assert accy.prepare(prog, KEEP_F16, target=HOPPER16).generators() == {
        "mma-attention-f16": 1}
    job = accy.prepare(prog, OPT_IN, target=HOPPER16)
    assert job.generators() == {"wgmma-attention-f16": 1}
    src = job.kernel_source(0)
    # S: 4 k16 steps of 64 keys (trans-b 0), P V: 4 of 64 value features (trans-b 1); a
    # work-group of two warpgroups; three stages of K and V tiles in one array
    assert "@@RSTEP64_4_0 " in src and "@@RSTEP64_4_1 " in src and "mma.sync" not in src
    assert "reqd_work_group_size(256, 1, 1)" in src and "b_tile[12288]" in src
    assert "ldmatrix" not in src
    # one tile ahead: tile 0's scores before the loop, tile kt + 1's copies landed in it
    loop = src.index("for (long kt")
    assert src.count("@@PROXY") == 2 and src.index("@@RSTEP64_4_0 ") < loop
    assert "cp.async.wait_group 0;" in src[loop:] and "= fa_n0_7_3;" in src
    assert "wgmma-attention-f16" not in accy.prepare(prog, OPT_IN, target=F16).generators()


@pytest.mark.parametrize("mode", ["eager", "deferred"])
@pytest.mark.parametrize("shapes, heads", [
    (((140, 16), (70, 16), (70, 32)), 1),  # two work-groups (the second's rows clamped),
    # keys past a partial tile
    (((64, 32), (200, 32), (200, 16)), 2),  # one warpgroup, four key tiles through 3 stages
    (((64, 128), (100, 128), (100, 128)), 1),  # key tiles of 32: not one tile ahead
], ids=["ragged", "tiles", "no-lead"])
def test_emulated_kernel_matches_the_interpreter(device, rng, mode, shapes, heads):
    prog, inputs = f16_heads(rng, 2, heads, shapes, 0.25)
    src = run_emulated(device, prog, inputs, OPT_IN, HOPPER16, "f16", mode,
                       "wgmma-attention-f16")
    assert "@@RSTEP" in src and ("fa_n0_" in src) == (shapes[0][1] < 128)


def test_emulated_promoted_f16_with_the_scale_folded(device, rng):
    """As the H200 runs it: f16 stored, the scale and softmax in f32, the scale folded into the
    exponent's coefficient (0.125 log2 e), one tile ahead."""
    storage = dataclasses.replace(HOPPER16, dtypes=NV.dtypes)
    pipeline = parse_pipeline("accy-default").replacing(
        "kernelization{disable=mma-attention-f16}").text()
    prog, inputs = f16_heads(rng, 1, 2, ((130, 32), (200, 32), (200, 64)), 0.125)
    src = run_emulated(device, prog, inputs, pipeline, storage, "f16", "deferred",
                       "wgmma-attention-f16")
    assert "0.180336877" in src and "fa_n0_" in src


@NEEDS_PTXAS
def test_expanded_ptx_assembles_for_sm_90a_without_spills(rng, tmp_path):
    prog, _ = f16_heads(rng, 8, 16, ((2048, 64), (2048, 64), (2048, 64)), 0.125)
    src = accy.prepare(prog, OPT_IN, target=HOPPER16).kernel_source(0)
    log = assembled(src, tmp_path)
    assert "0 bytes spill stores" in log, log[-2000:]
