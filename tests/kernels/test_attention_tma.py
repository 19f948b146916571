"""tma-attention-f16 (accy/kernels/attention_tma.py) without a GPU: when it is taken (first of
the f16 attention kernels, where the probe ran TMA copies and the features are multiples of
64), its key tiles, what its source holds, and whole kernels on PoCL with TMA, wgmma, shuffles
and ex2 emulated (mma_emulation.py, test_attention_mma.py) against the interpreter's f16."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_attention_mma import KEEP_F16, NV, f16_heads, run_emulated
from test_attention_wgmma import HOPPER16
from test_wgmma import NEEDS_PTXAS, assembled

import accy
from accy.backends.opencl.nvptx_offline import summary
from accy.builder import einsum, trace
from accy.ir.types import DType, TensorType
from accy.kernels import attention_mma_plan, attention_tma, attention_wgmma, tma
from accy.passes.spec import parse_pipeline
from accy.target import TMA_COPY

WITH_TMA = dataclasses.replace(HOPPER16, tensor_cores=(*HOPPER16.tensor_cores, TMA_COPY),
                               static_local_bytes=227 * 1024)
WITHOUT = parse_pipeline(KEEP_F16).replacing(
    "kernelization{disable=tma-attention-f16}").text()


def test_taken_first_with_tma_and_64_features(rng, encodes):
    prog, _ = f16_heads(rng, 2, 3, ((256, 64), (300, 64), (300, 128)), 0.125)
    assert accy.prepare(prog, WITHOUT, target=WITH_TMA).generators() == {
        "mma-attention-f16": 1}
    job = accy.prepare(prog, KEEP_F16, target=WITH_TMA)
    assert job.generators() == {"tma-attention-f16": 1}
    src = job.kernel_source(0)
    # K's map over (features, keys, batch, heads), boxes of 64 features by 128 keys; V's of
    # 128 value features two boxes a tile; three stages: two tiles before the loop
    assert encodes[:2] == [((64, 300, 2, 3), (128, 115200, 38400), (64, 128, 1, 1), tma.F16),
                           ((128, 300, 2, 3), (256, 230400, 76800), (64, 128, 1, 1), tma.F16)]
    assert src.count("@@TMA4 ") == 3 * 3 and "cp.async" not in src and "barrier(" in src
    loop = src[src.index("for (long kt"):]
    assert "barrier(" not in loop.split("out0")[0]  # no work-group barrier a tile
    assert "@@MBEXPECT49152 " in src and src.count("@@MBINIT") == 6
    # S: 4 k16 steps 32 bytes apart; P V: 8 of 128 value features, 2048 bytes apart
    assert "@@RSTEP128_4_0_2 " in loop and "@@RSTEP128_8_1_128 " in loop
    # two maps for each of 2 x 3 x 2 work-groups (128 queries each)
    assert job.kernels[0].args[-1].scratch_elems == 2 * 3 * 2 * tma.region(2) // 8
    # no TMA copies in the probe, or 48 head features: another kernel
    prog48, _ = f16_heads(rng, 1, 1, ((256, 48), (256, 48), (256, 64)), 0.125)
    for p, target in ((prog, HOPPER16), (prog48, WITH_TMA)):
        assert "tma-attention-f16" not in accy.prepare(p, KEEP_F16, target=target).generators()


def test_key_tiles_two_work_groups_a_unit_where_registers_allow_else_the_largest(rng, encodes):
    """64 features: 64-key tiles (128 keys' scores would keep a second work-group off the
    multiprocessor); 128 features: 128 keys (neither lets two share one); 4 warps: 128 keys;
    128 keys that do not fit the local memory: 64."""
    def steps(b, n, d, target=WITH_TMA):
        prog, _ = f16_heads(rng, b, 2, ((n, d), (n, d), (n, d)), 0.125)
        src = accy.prepare(prog, KEEP_F16, target=target).kernel_source(0)
        return src[src.index("@@RSTEP") + 7:].split(" ")[0], "(256" in src

    assert steps(2, 512, 64) == ("64_4_0_2", True)
    assert steps(2, 512, 128) == ("128_4_0_2", True)
    assert steps(1, 100, 64) == ("128_4_0_2", False)
    small = dataclasses.replace(WITH_TMA, static_local_bytes=160 * 1024)
    assert steps(2, 512, 128, small) == ("64_4_0_2", True)


@pytest.mark.parametrize("shapes, heads, keys, stages, keep", [
    (((140, 64), (200, 64), (200, 64)), 1, 128, 3, False),  # two work-groups, the second's
    # rows clamped; keys past a partial tile (zero-filled); one tile ahead
    (((64, 128), (300, 128), (300, 64)), 2, 64, 3, False),  # two K blocks a tile, five tiles
    (((64, 64), (260, 64), (260, 128)), 1, 64, 2, False),  # two stages: not one tile ahead
    (((64, 64), (260, 64), (260, 128)), 1, 64, 3, True),  # maps kept between launches
], ids=["ragged", "blocks", "two-stages", "kept-maps"])
def test_emulated_kernel_matches_the_interpreter(device, rng, encodes, monkeypatch, shapes,
                                                 heads, keys, stages, keep):
    monkeypatch.setattr(tma, "KEEP_MAPS", keep)
    monkeypatch.setattr(attention_tma, "KEYS", (keys,))
    monkeypatch.setattr(attention_tma, "STAGES", stages)
    prog, inputs = f16_heads(rng, 2, heads, shapes, 0.25)
    src = run_emulated(device, prog, inputs, KEEP_F16, WITH_TMA, "f16", "eager",
                       "tma-attention-f16")
    assert "@@TMA4" in src and ("fa_n0_" in src) == (stages == 3)
    assert ("@@TMAP %0, %1, %2 " in src) == keep


def test_lazy_rescale_as_set(rng, encodes, monkeypatch):
    """``LAZY``: None leaves 64 features' tiles rescaled every time (the plan's rule), True
    skips a warp's rescale where no row's maximum rose far (a branch on the rows' flags)."""
    prog, _ = f16_heads(rng, 1, 2, ((130, 64), (200, 64), (200, 64)), 0.125)
    for lazy, branch in ((None, False), (True, True), (False, False)):
        monkeypatch.setattr(attention_tma, "LAZY", lazy)
        src = accy.prepare(prog, KEEP_F16, target=WITH_TMA).kernel_source(0)
        assert ("if ((up" in src) == branch, lazy


@pytest.mark.parametrize("shapes, pin, local", [
    (((140, 64), (200, 64), (200, 64)), True, False),  # the next scores' issue held (PIN)
    (((140, 64), (200, 64), (200, 64)), False, True),  # the queries in local memory
    (((140, 128), (300, 128), (300, 64)), True, True),  # both; two 64-feature blocks
], ids=["pin", "local", "both-blocks"])
def test_emulated_pinned_lead_and_local_queries(device, rng, encodes, monkeypatch, shapes, pin,
                                                local):
    """The next tile's scores held ahead of the softmax by a fence (``attention_wgmma.PIN``)
    and the queries stored once into local memory after the stages, S read by descriptor
    (``QLOCAL``): as the interpreter computes it, the stages' array sized for 64 queries
    a warpgroup of ``d`` two-byte features."""
    monkeypatch.setattr(attention_wgmma, "PIN", pin)
    monkeypatch.setattr(attention_tma, "QLOCAL", local)
    monkeypatch.setattr(attention_tma, "KEYS", (64,))
    prog, inputs = f16_heads(rng, 2, 1, shapes, 0.25)
    src = run_emulated(device, prog, inputs, KEEP_F16, WITH_TMA, "f16", "eager",
                       "tma-attention-f16")
    d, dv = shapes[0][1], shapes[2][1]
    assert ("@@HOLD" in src) == pin and ("@@SSTEP64_4_2_2_0 " in src) == local
    assert ("@@RSTEP64_4_0_2 " in src) != local
    words = int(src.split("__local int b_tile[")[1].split("]")[0])
    assert 4 * words == 3 * 2 * 64 * (d + dv) + local * 256 * d + 1024


@pytest.mark.parametrize("d, lead, heavy", [(64, True, False), (128, True, True),
                                            (64, False, False), (128, None, True)])
def test_emulated_causal_mask_by_indices_with_the_scale_folded(device, rng, encodes,
                                                               monkeypatch, d, lead, heavy):
    """A constant causal mask (diagonal 70 keys on: more keys than queries) compared by the
    indices, the scale folded into the exponent through it, the key tiles past the diagonal
    skipped: as the interpreter computes it. At 128 features the tiles the mask leaves whole
    run in a loop of their own; at 64, where two work-groups share a multiprocessor, in the
    one loop (a second would take more registers); without the lead (``LEAD``) and the loops
    split (``SPLIT``) as set, the lead kept beside split loops (``LEAD_SPLIT``) where set, or
    (``lead`` None) as the defaults have it: no lead beside split loops; ``HEAVY_FIRST``: the
    last query blocks first."""
    monkeypatch.setattr(attention_mma_plan, "HEAVY_FIRST", heavy)
    if lead is not None:
        monkeypatch.setattr(attention_tma, "LEAD", lead)
        monkeypatch.setattr(attention_tma, "LEAD_SPLIT", lead)
        monkeypatch.setattr(attention_tma, "SPLIT", None if lead else True)
    storage = dataclasses.replace(WITH_TMA, dtypes=NV.dtypes)
    sq, sk = 130, 200

    def f(q, k, v):
        tri = accy.constant(np.tril(np.ones((sq, sk), dtype=bool), sk - sq))
        s = accy.where(tri, einsum("bhqd,bhkd->bhqk", q, k) * 0.125, -np.inf)
        return einsum("bhqk,bhkd->bhqd", accy.softmax(s, -1), v)

    prog = trace(f, *[TensorType((1, 2, n, d), DType.f16) for n in (sq, sk, sk)], name="c")
    inputs = [rng.standard_normal(p.type.shape).astype(np.float16)
              for p in prog.functions[0].params]
    src = run_emulated(device, prog, inputs, "accy-default", storage, "f16", "eager",
                       "tma-attention-f16")
    assert "0.180336877" in src and "kstop" in src and " <= " in src
    assert src.count("for (long kt") == (2 if lead is False else d // 64)
    assert ("fa_n0_" in src) == bool(lead)
    assert ("(1L - (grp" in src) == heavy  # two query blocks, the last first


def test_emulated_promoted_f16_with_the_scale_folded(device, rng, encodes):
    """As the H100 runs it: f16 stored, the scale and softmax in f32, the scale folded."""
    storage = dataclasses.replace(WITH_TMA, dtypes=NV.dtypes)
    prog, inputs = f16_heads(rng, 1, 2, ((130, 64), (200, 64), (200, 64)), 0.125)
    src = run_emulated(device, prog, inputs, "accy-default", storage, "f16", "eager",
                       "tma-attention-f16")
    assert "0.180336877" in src and "@@TMA4" in src


@NEEDS_PTXAS
@pytest.mark.parametrize("causal, keep, d", [(False, False, 64), (True, False, 64),
                                             (False, True, 64), (True, True, 128)])
def test_expanded_ptx_assembles_for_sm_90a_without_spills(rng, encodes, tmp_path, monkeypatch,
                                                          causal, keep, d):
    """The bench shapes as the H100 runs them (64-key tiles one ahead, a causal mask in the
    one loop; maps kept between launches): registers for two work-groups a multiprocessor, no
    spills, no wgmma serialized; at 128 features with a causal mask (its loops split, no lead:
    ``LEAD_SPLIT``) no spills either."""
    monkeypatch.setattr(tma, "KEEP_MAPS", keep)
    storage = dataclasses.replace(WITH_TMA, dtypes=NV.dtypes)

    def f(q, k, v):
        s = einsum("bhqd,bhkd->bhqk", q, k) * 0.125
        if causal:
            s = accy.where(accy.constant(np.tril(np.ones((2048, 2048), dtype=bool))), s, -np.inf)
        return einsum("bhqk,bhkd->bhqd", accy.softmax(s, -1), v)

    prog = trace(f, *[TensorType((8, 16, 2048, d), DType.f16)] * 3, name="c")
    src = accy.prepare(prog, "accy-default", target=storage).kernel_source(0)
    assert ("@@TMAP %0, %1, %2 " in src) == keep
    found = summary(assembled(src, tmp_path))
    assert found["spill_bytes"] == 0 and not found["serialized"], found
    assert d > 64 or 2 * 256 * found["registers"] <= 65536, found


def test_emulated_sequence_major_layout(device, rng, encodes):
    """Q, K and V stored (batch, sequence, head, feature), as many models keep them: the maps'
    strides are the keys' (heads x features) and the batch's and heads' as stored."""
    def f(q, k, v):
        s = einsum("bqhd,bkhd->bhqk", q, k) * 0.125
        return einsum("bhqk,bkhd->bqhd", accy.softmax(s, -1), v)

    prog = trace(f, *[TensorType((2, n, 3, 64), DType.f16) for n in (130, 200, 200)],
                 name="bshd")
    inputs = [rng.standard_normal(p.type.shape).astype(np.float16)
              for p in prog.functions[0].params]
    storage = dataclasses.replace(WITH_TMA, dtypes=NV.dtypes)
    run_emulated(device, prog, inputs, "accy-default", storage, "f16", "eager",
                 "tma-attention-f16")
    assert encodes[0] == ((64, 200, 2, 3), (384, 76800, 128), (64, 64, 1, 1), tma.F16)
