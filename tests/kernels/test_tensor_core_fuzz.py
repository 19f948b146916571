"""The tensor-core kernels over random shapes, run on PoCL with their PTX replaced by C (the
emulation of mma_emulation.py and test_attention_mma.py), against float64 or the interpreter.

Long (tens of seconds an example: PoCL builds each emulated kernel), so these run only under
the ``fuzz`` hypothesis profile:
``HYPOTHESIS_PROFILE=fuzz pytest tests/kernels/test_tensor_core_fuzz.py``
(``max_examples`` a fiftieth of the profile's, 100 each, or ``ACCY_FUZZ_EXAMPLES``). The
tests of fixed shapes beside this file run in CI.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from mma_emulation import check_f16, emulated_async, emulated_wgmma, run_kernels
from test_attention import heads
from test_attention_mma import F16, KEEP_F16, SAT, emulated_attention, precision
from test_attention_wgmma import HOPPER16
from test_attention_wgmma import OPT_IN as WGMMA_OPT_IN
from test_mma_generator import NV, emulated, emulated_builds, matmul, tf32_round
from test_mma_pipeline import ASYNC, matmul16
from test_wgmma import HOPPER
from test_wgmma_tf32 import check_values
from test_wgmma_tma import ROOMY_H200, WITH_TMA

import accy
from accy.builder import einsum, trace
from accy.ir.interpret import interpret
from accy.ir.types import DType, TensorType
from accy.kernels import tma, wgmma, wgmma_ss

try:
    import pyopencl as cl
except ImportError:
    cl = None

pytestmark = [
    pytest.mark.skipif(os.environ.get("HYPOTHESIS_PROFILE") != "fuzz",
                       reason="long: runs under HYPOTHESIS_PROFILE=fuzz"),
    pytest.mark.skipif(cl is None, reason="needs pyopencl"),
]
_SETTINGS = settings(max_examples=int(os.environ.get("ACCY_FUZZ_EXAMPLES", 0))
                     or max(1, settings.default.max_examples // 50), deadline=None,
                     suppress_health_check=list(HealthCheck))
_SIDES = st.integers(33, 140)  # tensor cores take products from 33 x 33 x 32 (MIN_MN, MIN_K)
_DEPTHS = st.one_of(st.integers(32, 140), st.sampled_from([2100, 2600]))  # long K: split
# f16 operands are copied in whole 16-byte vectors: rows of a multiple of 8 halves
_SIDES16, _DEPTHS16 = (st.integers(40, 140).map(lambda x: x // 8 * 8),
                       st.one_of(st.integers(4, 17).map(lambda x: 8 * x), st.just(2104)))
_BATCHES = st.sampled_from([0, 0, 1, 3])
_MODES = st.sampled_from(["eager", "deferred"])  # cp.async copies landing at once or late


def _on_pocl(device) -> None:
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("the emulation is checked on PoCL")


def _run(device, job: accy.PreparedJob, args: list[np.ndarray], shape, dtype, emulate
         ) -> np.ndarray:
    """Every kernel of ``job`` (a split product's two), those with PTX emulated."""
    sources = [job.kernel_source(i) for i in range(len(job.kernels))]
    return run_kernels(device, job, [emulate(s) if "asm" in s else s for s in sources], args,
                       shape, dtype)


@_SETTINGS
@given(m=_SIDES, n=_SIDES, k=_DEPTHS, batch=_BATCHES, bias=st.booleans(), a_t=st.booleans(),
       policy=st.sampled_from(["tf32", "3xtf32"]), target=st.sampled_from(["loads", "cp.async",
                                                                          "one unit"]),
       mode=_MODES, seed=st.integers(0, 2**16))
def test_f32_products(device, pipe, used, m, n, k, batch, bias, a_t, policy, target, mode,
                      seed):
    _on_pocl(device)
    profile = {"loads": NV, "cp.async": ASYNC,
               "one unit": dataclasses.replace(ASYNC, compute_units=1)}[target]
    job = accy.prepare(matmul(m, n, k, batch, bias, a_t), pipe(f"precision={policy}"),
                       target=profile)
    assert used(job) == {f"mma-{policy}": 1}
    rng = np.random.default_rng(seed)
    lead = (batch,) if batch else ()
    a = rng.uniform(-1, 1, (*lead, m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (*lead, k, n)).astype(np.float32)
    args = [np.ascontiguousarray(np.swapaxes(a, -1, -2)) if a_t else a, b]
    args += [rng.uniform(-1, 1, n).astype(np.float32)] if bias else []
    emulate = emulated if target == "loads" else lambda src: emulated_async(src, mode)
    got = _run(device, job, args, (*lead, m, n), np.float32, emulate)
    want = (tf32_round(a).astype(np.float64) @ tf32_round(b).astype(np.float64)
            if policy == "tf32" else a.astype(np.float64) @ b.astype(np.float64))
    want = np.maximum(want + args[2], 0.0) if bias else want
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * k)


@_SETTINGS
@given(m=st.one_of(_SIDES, st.integers(1, 32)), n=st.one_of(_SIDES16, st.sampled_from([8, 16, 32])),
       k=_DEPTHS16, batch=_BATCHES, bias=st.booleans(), b_t=st.booleans(),
       units=st.sampled_from([132, 1]), mode=_MODES, seed=st.integers(0, 2**16))
def test_f16_products(device, pipe, used, m, n, k, batch, bias, b_t, units, mode, seed):
    _on_pocl(device)
    if min(m, n) <= 32:  # a skinny product (the 16- and 32-row tiles): the other side long
        m, n = (m, n + 128) if m <= n else (m + 128, n)
    job = accy.prepare(matmul16(m, n, k, batch, bias, b_t), pipe("precision=ieee"),
                       target=dataclasses.replace(ASYNC, compute_units=units))
    assert used(job) == {"mma-f16": 1}
    rng = np.random.default_rng(seed)
    lead = (batch,) if batch else ()
    a = rng.uniform(-1, 1, (*lead, m, k)).astype(np.float16)
    b = rng.uniform(-1, 1, (*lead, k, n)).astype(np.float16)
    args = [a, np.ascontiguousarray(np.swapaxes(b, -1, -2)) if b_t else b]
    args += [rng.uniform(-1, 1, n).astype(np.float16)] if bias else []
    got = _run(device, job, args, (*lead, m, n), np.float16,
               lambda src: emulated_async(src, mode))
    check_f16(got, a, b, args[2] if bias else None)


# the wgmma kernels, each forced where it takes the product: A in registers and B by
# cp.async or by TMA, both by TMA (wgmma_ss), TF32 and 3xTF32 with A in registers
_WGMMA = {"f16": HOPPER, "f16 tma": WITH_TMA, "f16 ss": ROOMY_H200, "tf32": HOPPER,
          "3xtf32": HOPPER}


@_SETTINGS
@given(m=st.integers(8, 300), n=st.integers(8, 300), k=st.integers(8, 100), batch=_BATCHES,
       bias=st.booleans(), b_t=st.booleans(), kind=st.sampled_from(sorted(_WGMMA)),
       units=st.sampled_from([1, 4, 16, 132]), mode=_MODES, seed=st.integers(0, 2**16))
def test_wgmma_products(device, pipe, used, monkeypatch, encodes, m, n, k, batch, bias, b_t,
                        kind, units, mode, seed):
    """Random products on the wgmma kernels with K split low enough to split short K: chunks
    of whole steps or a shorter last one, partial tiles, batches, epilogues; against float64
    (f16: f32 sums, one rounding; TF32 policies: their bounds)."""
    _on_pocl(device)
    f16 = kind.startswith("f16")
    k = 8 * k if f16 else 4 * k  # A's rows whole 16-byte vectors: what wgmma copies
    for name, value in (("MIN_K", 32), ("SPLIT_K", 128), ("MAX_PADDING", 100)):
        monkeypatch.setattr(wgmma, name, value)
    monkeypatch.setattr(wgmma, "RATES", {4: 9.0, 2: 9.0})  # wgmma wherever it takes it
    monkeypatch.setattr(wgmma, "TMA_RATES", {4: 9.0, 2: 9.0})
    monkeypatch.setitem(wgmma_ss.MIN_K, tma.F16, 64)
    monkeypatch.setitem(wgmma_ss.RATES, tma.F16, {f: (9.0, 9.0) for f in wgmma_ss.FORMS})
    target = dataclasses.replace(_WGMMA[kind], compute_units=units)
    if f16:
        prog, policy, dtype = matmul16(m, n, k, batch, bias, b_t), "ieee", np.float16
    else:
        prog, policy, dtype = matmul(m, n, k, batch, bias), kind, np.float32
        b_t = False
    job = accy.prepare(prog, pipe(f"precision={policy}"), target=target)
    generator = "wgmma-f16" if f16 else f"wgmma-{policy}"
    assume(used(job) == {generator: 1})  # (a layout or size the kernel does not take)
    sources = [job.kernel_source(i) for i in range(job.kernel_count)]  # (a transpose first)
    assert any("@@SSTEP" in src for src in sources) == (kind == "f16 ss")
    rng = np.random.default_rng(seed)
    lead = (batch,) if batch else ()
    a = rng.uniform(-1, 1, (*lead, m, k)).astype(dtype)
    b = rng.uniform(-1, 1, (*lead, k, n)).astype(dtype)
    args = [a, np.ascontiguousarray(np.swapaxes(b, -1, -2)) if b_t else b]
    args += [rng.uniform(-1, 1, n).astype(dtype)] if bias else []
    got = _run(device, job, args, (*lead, m, n), dtype, lambda src: emulated_wgmma(src, mode))
    if f16:
        check_f16(got, a, b, args[2] if bias else None)
    else:
        check_values(got, a, b, policy, args[2] if bias else None)


@_SETTINGS
@given(b=st.integers(1, 2), h=st.integers(1, 2), sq=st.integers(1, 150),
       sk=st.integers(1, 150), d=st.sampled_from([8, 16, 24, 32, 64, 96]),
       dv=st.sampled_from([8, 16, 32, 64]), mask=st.sampled_from(["none", "additive", "causal"]),
       kind=st.sampled_from(["3xtf32", "3xtf32 static", "tf32", "f16", "f16 promoted",
                             "f16 wgmma"]),
       mode=_MODES,
       seed=st.integers(0, 2**16))
def test_attention(device, b, h, sq, sk, d, dv, mask, kind, mode, seed):
    _on_pocl(device)
    rng = np.random.default_rng(seed)
    if kind.startswith("f16"):
        scale = 1.0 / np.sqrt(d)

        def f(q, k, v):
            s = einsum("bhqd,bhkd->bhqk", q, k) * scale
            return einsum("bhqk,bhkd->bhqd", accy.softmax(s, -1), v)

        types = [TensorType((b, h, n, e), DType.f16) for n, e in ((sq, d), (sk, d), (sk, dv))]
        prog = trace(f, *types, name="attn16")
        inputs = [rng.standard_normal(t.shape).astype(np.float16) for t in types]
        # f16 kept (native f16), or stored only: scale and softmax promoted to f32; or kept,
        # on wgmma (wgmma-attention-f16: an opt-in after mma-attention-f16)
        pipeline, target = ((KEEP_F16, F16) if kind == "f16" else
                            (WGMMA_OPT_IN, HOPPER16) if kind == "f16 wgmma" else
                            ("accy-default", dataclasses.replace(F16, dtypes=NV.dtypes)))
        policy = "f16"
    else:
        prog = heads(b, h, sq, sk, d, dv, mask=mask)
        inputs = [rng.standard_normal(p.type.shape).astype(np.float32)
                  for p in prog.functions[0].params]
        # 3xtf32 on 48 KB (tiles split as copied where the split words fit, else as read),
        # or with an H200's static local memory (split as copied)
        pipeline, target, policy = (
            (precision("tf32", "always"), NV, "tf32") if kind == "tf32" else
            ("accy-default", dataclasses.replace(SAT, static_local_bytes=227 * 1024), "3xtf32")
            if kind == "3xtf32 static" else ("accy-default", SAT, "3xtf32"))
    job = accy.prepare(prog, pipeline, target=target)
    generator = "wgmma-attention-f16" if kind == "f16 wgmma" else f"mma-attention-{policy}"
    assume(job.generators() == {generator: 1})  # not e.g. a single key
    job._sources[0] = emulated_attention(job.kernel_source(0), mode)
    with emulated_builds(device):
        (got,) = job.executable(device=device)(*inputs)
    (want,) = interpret(prog, list(inputs))
    tol = {"3xtf32": 1e-5, "tf32": 3e-3, "f16": 1e-2}[policy]
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64),
                               rtol=tol, atol=tol)
