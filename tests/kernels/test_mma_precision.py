"""The precision policies on tensor-core targets: the default ``f32`` (3xtf32 where the target
has TF32 tensor cores and the saturating TF32 rounding, ieee elsewhere) and 3xtf32's handling
of infinities and values beyond the largest TF32, checked on PoCL with the PTX emulated as
``test_mma_generator`` does (the real instructions: the device probe on an NVIDIA GPU); the
precision option's validation, the tensor cores in the target profile and its fingerprint,
and the policy-aware error bound."""

from __future__ import annotations

import dataclasses
import re
from types import SimpleNamespace

import numpy as np
import pytest
from mma_emulation import run_emulated
from test_mma_generator import EMULATED_MMA, NO_CORES, NV, emulated, matmul, prepared, tf32_round

import accy
from accy.backends.opencl import tensor_cores
from accy.builder import einsum
from accy.error_bounds import Comparison, error_bounds
from accy.errors import PipelineError
from accy.ir.types import DType, TensorType
from accy.kernels.mma_plan import parse_tiles
from accy.kernels.mma_ptx import TF32_BIG_SAT, exact_in_tf32
from accy.passes.kernel.kernelization import Kernelization
from accy.passes.spec import parse_pipeline
from accy.target import TF32_MMA, TF32_SATFINITE, TargetProfile, resolve_precision

SAT = dataclasses.replace(NV, tensor_cores=(TF32_MMA, TF32_SATFINITE))


@pytest.mark.parametrize("target, policy, generator", [
    (SAT, "3xtf32", "mma-3xtf32"),
    (NV, "ieee", "tiled-contraction"),  # tensor cores, but infinities would split to NaN
    (NO_CORES, "ieee", "tiled-contraction"),
], ids=["saturating", "plain-rounding", "no-cores"])
def test_the_default_f32_policy_takes_3xtf32_only_where_it_keeps_f32_results(
        target, policy, generator, used):
    job = accy.prepare(matmul(2048, 2048, 256), "accy-default", target=target)
    assert used(job) == {generator: 1}
    assert resolve_precision("f32", target) == policy
    for other in ("ieee", "tf32", "3xtf32"):
        assert resolve_precision(other, target) == other
    with pytest.raises(ValueError, match="fp8"):
        resolve_precision("fp8", target)


def test_the_big_part_rounds_saturating_only_where_the_probe_found_it(pipe):
    sat = prepared(matmul(256, 256, 64), "3xtf32", SAT, pipe).kernel_source(0)
    plain = prepared(matmul(256, 256, 64), "3xtf32", NV, pipe).kernel_source(0)
    tf32 = prepared(matmul(256, 256, 64), "tf32", SAT, pipe).kernel_source(0)
    assert TF32_BIG_SAT in sat and "cvt.rna.tf32.f32" in sat  # small: plain
    assert TF32_BIG_SAT not in plain and TF32_BIG_SAT not in tf32


def _operands(m: int, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Uniform(-1, 1) operands with a +inf and a -inf in A (rows 3 and 7), the largest f32 in
    A's row 9 (above the largest TF32), +inf in B (column 4: every row meets it) and a zero
    meeting A's -inf (row 7, column 0: NaN)."""
    rng = np.random.default_rng(3)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    a[3, 5], a[7, 2], a[9, 6] = np.inf, -np.inf, np.finfo(np.float32).max
    b[1, 4], b[2, 0] = np.inf, 0.0
    return a, b


def test_3xtf32_keeps_infinities_and_the_f32_range_in_emulation(device, pipe, used,
                                                                experiment_script):
    """Rows and columns meeting an infinity are +-inf or NaN exactly where the f64 product
    is; a row holding the largest f32 stays finite (plain rounding: NaN instead, and NaN
    wherever an infinity is met). One warp of 32x16 tiles: the split is the same in any
    tiling, and PoCL builds the emulated kernel four times faster than the default's."""
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("the emulation is checked on PoCL")
    m, n, k = 70, 66, 40
    a, b = _operands(m, n, k)
    with np.errstate(invalid="ignore", over="ignore"):
        want = a.astype(np.float64) @ b.astype(np.float64)
    got = {}
    for name, target in (("saturating", SAT), ("plain", NV)):
        job = prepared(matmul(m, n, k), "3xtf32", target, pipe)
        assert used(job) == {"mma-3xtf32": 1}
        job = experiment_script("bench_mma").with_mma_tiles(job, parse_tiles("32x16x8:1x1"),
                                                           "3xtf32")
        got[name] = run_emulated(device, job, emulated(job.kernel_source(0)), [a, b],
                                 (m, n), np.float32)
    sat = got["saturating"].astype(np.float64)
    away = np.arange(n) != 4  # columns not meeting B's infinity
    assert np.isinf(want).any() and np.isnan(want).any() and np.isfinite(want[9, away]).all()
    np.testing.assert_array_equal(np.isnan(sat), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(sat), np.isinf(want))
    both = np.isinf(want)
    np.testing.assert_array_equal(np.sign(sat[both]), np.sign(want[both]))
    finite = np.isfinite(want)
    scale = np.abs(a.astype(np.float64)).clip(max=1e300) @ np.abs(b.astype(np.float64)).clip(
        max=1e300)
    assert (np.abs(sat[finite] - want[finite]) <= 1e-5 * scale[finite] + 1e-6 * k).all()
    # without the saturating rounding the split turns infinities (and the largest f32) to NaN
    plain = got["plain"]
    assert np.isnan(plain[np.isinf(want)]).all() and np.isnan(plain[9]).all()


_VOLATILE_CVT = re.compile(r'asm volatile\("cvt\.rna\.satfinite\.tf32\.f32 %0, %1;" : '
                           r'"=r"\((\w+)\) : "f"\((.*?)\)\);')


@pytest.mark.skipif(tensor_cores.cl is None, reason="needs pyopencl")
def test_satfinite_probe_expects_what_the_rounding_gives(device):
    """The probe's expected bits are the emulated ``cvt.rna.satfinite`` of its inputs, and
    plain rounding would fail it (infinities stay infinite)."""
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("the emulation is checked on PoCL")
    cl = tensor_cores.cl
    x, want = tensor_cores.satfinite_probe_case()
    for sat, passes in ((1, True), (0, False)):
        src = _VOLATILE_CVT.sub(lambda m, s=sat: f"{m[1]} = accy_emu_tf32(as_uint({m[2]}), {s});",
                                tensor_cores.SATFINITE_PROBE_SOURCE)
        assert "asm" not in src
        program = cl.Program(device.context, EMULATED_MMA + src).build()
        flags = cl.mem_flags
        inp = cl.Buffer(device.context, flags.READ_ONLY | flags.COPY_HOST_PTR, hostbuf=x)
        got = np.zeros(32, np.uint32)
        out = cl.Buffer(device.context, flags.WRITE_ONLY, got.nbytes)
        program.accy_satfinite_probe(device.queue, (32,), (32,), inp, out)
        cl.enqueue_copy(device.queue, got, out)
        device.queue.finish()
        assert tensor_cores.satfinite_ok(got, want) is passes


def cast_matmul(m: int, n: int, k: int, cast_a: bool, cast_b: bool) -> accy.Program:
    """``A @ B`` in f32, A (B) an f16 parameter cast to f32 where asked."""
    b = accy.Builder()
    f = b.begin_function("f", [TensorType((m, k), DType.f16 if cast_a else DType.f32),
                               TensorType((k, n), DType.f16 if cast_b else DType.f32)])
    x, y = (p.astype(DType.f32) if cast else p
            for p, cast in ((f.param(0), cast_a), (f.param(1), cast_b)))
    f.return_(einsum("ik,kj->ij", x, y))
    f.finish()
    return b.finish()


@pytest.mark.parametrize("cast_a, cast_b, terms", [(True, True, 1), (True, False, 2),
                                                   (False, True, 2), (False, False, 3)])
def test_3xtf32_skips_the_small_parts_of_operands_exact_in_tf32(
        device, pipe, used, experiment_script, cast_a, cast_b, terms):
    """An f16 value cast to f32 is exact in TF32: its small part is zero, so 3xtf32 neither
    splits it nor multiplies by it (one mma per fragment pair when both operands are such:
    then exact products, f32 sums). The contraction kernel checked against float64 in
    emulation, fed the casts' values."""
    m, n, k = 70, 66, 40
    job = prepared(cast_matmul(m, n, k, cast_a, cast_b), "3xtf32", SAT, pipe)
    assert used(job)["mma-3xtf32"] == 1
    (src,) = [job.kernel_source(i) for i, kn in enumerate(job.kernels) if kn.fixed_local_size]
    plain = prepared(cast_matmul(m, n, k, False, False), "3xtf32", SAT, pipe).kernel_source(0)
    assert src.count("mma.sync") * 3 == plain.count("mma.sync") * terms
    assert ("a0_0_0_s" in src) == (not cast_a) and ("b0_0_0_s" in src) == (not cast_b)
    if "Portable Computing Language" not in device.info.platform:
        return
    # emulated with one warp of 32x16 tiles (the same terms; PoCL builds it far faster)
    job = experiment_script("bench_mma").with_mma_tiles(job, parse_tiles("32x16x8:1x1"),
                                                       "3xtf32")
    (src,) = [job.kernel_source(i) for i, kn in enumerate(job.kernels) if kn.fixed_local_size]
    rng = np.random.default_rng(4)
    a, b = (rng.uniform(-1, 1, shape).astype(np.float16 if cast else np.float32).astype(
        np.float32) for shape, cast in (((m, k), cast_a), ((k, n), cast_b)))
    mma_only = SimpleNamespace(kernels=[kn for kn in job.kernels if kn.fixed_local_size])
    got = run_emulated(device, mma_only, emulated(src), [a, b], (m, n), np.float32)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * k)


def test_exactness_is_followed_through_views_and_concats():
    b = accy.Builder()
    f = b.begin_function("f", [TensorType((4, 6), DType.f16), TensorType((4, 6), DType.f32)])
    h, x = f.param(0).astype(DType.f32), f.param(1)
    assert exact_in_tf32(h.transpose((1, 0)).reshape(3, 8).node)
    assert not exact_in_tf32(x.node) and not exact_in_tf32((h + h).node)
    assert not exact_in_tf32(accy.concat([h, x], axis=0).node)
    assert exact_in_tf32(accy.concat([h, h], axis=0).node)


# options, profile, bounds ---------------------------------------------------------------
def test_precision_option_is_validated():
    assert Kernelization().precision == "f32"
    assert parse_pipeline("kernelization{precision=3xtf32}").passes[0].precision == "3xtf32"
    with pytest.raises(PipelineError):
        parse_pipeline("kernelization{precision=fp8}")
    with pytest.raises((ValueError, TypeError)):
        Kernelization(precision="bf16")


def test_tensor_cores_enter_the_fingerprint_and_description():
    assert NV.fingerprint() != NO_CORES.fingerprint()
    assert TargetProfile().fingerprint() == dataclasses.replace(
        TargetProfile(), tensor_cores=()).fingerprint()
    assert "tensor cores mma.m16n8k8.tf32" in NV.describe()


def test_from_device_records_only_what_the_probe_found(device):
    info = dataclasses.replace(device.info, tensor_cores=(TF32_MMA,))
    assert TargetProfile.from_device(info).tensor_cores == (TF32_MMA,)
    # the probe's findings, nothing else: none on PoCL, all three on an H200
    assert TargetProfile.from_device(device.info).tensor_cores == tuple(device.info.tensor_cores)


def test_mma_probe_expectation_matches_its_macros():
    i, k, n = 3, 5, 6
    a = lambda i, k: ((i + 2 * k) % 5) - 2  # noqa: E731  (the probe's A(i, k))
    b = lambda k, n: ((3 * k + n) % 7) - 3  # noqa: E731
    want = sum(a(i, kk) * b(kk, n) for kk in range(8))
    assert tensor_cores.mma_probe_expected()[i, n] == want and k == 5


def tf32_program(k: int) -> accy.Program:
    b = accy.Builder()
    f = b.begin_function("f", [TensorType((2, k), DType.f32), TensorType((k, 3), DType.f32)])
    f.return_(einsum("ik,kj->ij", f.param(0), f.param(1)))
    f.finish()
    return b.finish()


def test_tf32_bound_admits_tf32_rounding_and_ieee_does_not():
    k = 64
    x = np.full((2, k), 1 + 2**-11, np.float32)  # a tie: TF32 rounds it to 1 + 2^-10
    y = np.full((k, 3), 1 + 2**-11, np.float32)
    prog = tf32_program(k)
    got = (tf32_round(x).astype(np.float64) @ tf32_round(y).astype(np.float64)).astype(
        np.float32)
    want = (x.astype(np.float64) @ y.astype(np.float64)).astype(np.float32)
    rtol = {DType.f32: 1e-5}
    for precision, ok in (("ieee", False), ("tf32", True), ("3xtf32", False)):
        (bound,) = error_bounds(prog, [x, y], rtol, precision=precision)
        out = Comparison()
        out.judge("r", got, want, bound, 1e-6)
        assert (not out.problems) == ok, (precision, out.problems)
    with pytest.raises(ValueError):
        error_bounds(prog, [x, y], rtol, precision="fp8")
