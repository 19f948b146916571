"""tiled-contraction: epilogues (on GPU-style tiles and on the CPU's whole vectors) and f16
products, on the default OpenCL device, against numpy in float64 or the interpreter."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from contraction_support import AVX512, check, program

import accy
from accy.ir.types import DType


@pytest.mark.parametrize("kind", ["device", "gpu-tiles"])
@pytest.mark.parametrize("spec, shapes", [("bqd,bkd->bqk", [(4, 96, 64), (4, 80, 64)]),
                                          ("ik,jk->ij", [(67, 48), (100, 48)]),
                                          ("ik,kj->ij", [(128, 256), (256, 64)])])
def test_f16_products_compute_in_f32_and_round_once(device, profiles, kind, spec, shapes):
    # on a target computing f16 (dtype-legalization keeps it), f16 products the f16 tensor
    # cores do not take (none here; on the H200 those with B stored along K, as attention's
    # scores) are tiled, not the loop nest's one output per work-item: f16 loads, f32 tiles
    # and sums, one rounding to f16 on the store
    target = dataclasses.replace(profiles[kind], dtypes=profiles[kind].dtypes | {DType.f16})
    prog = program(spec, shapes, DType.f16, epilogue=lambda y: (y, (y * 0.5).exp()))
    job = accy.prepare(prog, target=target)
    assert job.generators().get("tiled-contraction") == 1, job.generators()
    rng = np.random.default_rng(0)
    xs = [rng.uniform(-1, 1, s).astype(np.float16) for s in shapes]
    exact = np.einsum(spec, *(x.astype(np.float64) for x in xs))
    product, scaled = job.run(*xs, device=device)
    assert product.dtype == np.float16
    # within one f16 step of the exact product: one rounding of an f32 sum (f16 sums would be
    # off by several steps at K = 48-256)
    step = np.spacing(np.abs(exact).astype(np.float16)).astype(np.float64)
    assert (np.abs(product.astype(np.float64) - exact) <= step + 1e-6).all()
    ref = accy.interpret(prog, xs)[1].astype(np.float64)
    # exp of a product one f16 step apart: a few steps apart
    np.testing.assert_allclose(scaled.astype(np.float64), ref, rtol=1e-2, atol=1e-3)


@pytest.mark.parametrize("kind", ["device", "gpu-tiles"])
def test_bias_add_relu_epilogue(device, profiles, kind):
    prog = program("ik,kj->ij", [(37, 20), (20, 50)], epilogue=lambda y, b: (y + b).relu(),
                   extra=[(50,)])
    check(device, prog, profiles[kind], lambda x, w, b: np.maximum(x @ w + b, 0))


def _gelu(z):
    from math import erf, sqrt
    return 0.5 * z * (1 + np.vectorize(erf)(z / sqrt(2)))


@pytest.mark.parametrize("epilogue, reference", [
    (lambda y, b, r: (y + b).gelu(), lambda y, b, r: _gelu(y + b)),
    (lambda y, b, r: (y * r - b).sigmoid() + (y > b).astype(DType.f32),
     lambda y, b, r: 1 / (1 + np.exp(-(y * r - b))) + (y > b)),
    (lambda y, b, r: accy.maximum(y, r) * 2.0 + (y + b).tanh().exp(),
     lambda y, b, r: np.maximum(y, r) * 2.0 + np.exp(np.tanh(y + b))),
], ids=["gelu", "sigmoid-compare-cast", "max-scalar-tanh-exp"])
def test_cpu_epilogues_compute_on_whole_vectors(device, epilogue, reference):
    # bias b along the row (one vector load), r one per row (a splat): on a CPU the epilogue
    # computes on the accumulator vectors (erf, exp, tanh as vector calls), not lane by lane
    prog = program("ik,kj->ij", [(64, 40), (40, 128)], extra=[(128,), (64, 1)],
                   epilogue=epilogue)
    check(device, prog, AVX512, lambda x, w, b, r: reference(x @ w, b, r))
    src = accy.prepare(prog, target=AVX512).kernel_source(0)
    assert "vload" in src and "(0, in" in src  # the bias read along the row
    assert not re.search(r"= (erf|exp|tanh)\(v", src)  # no scalar lane calls


@pytest.mark.parametrize("kind", ["device", "gpu-tiles"])
def test_one_output_per_work_item_tiles_with_an_epilogue(device, profiles, kind):
    prog = program("bik,bkj->bij", [(2, 6, 20), (2, 20, 10)], extra=[(10,)],
                   epilogue=lambda y, b: (y + b).sigmoid())
    check(device, prog, profiles[kind],
          lambda x, w, b: 1 / (1 + np.exp(-(np.einsum("bik,bkj->bij", x, w) + b))))


@pytest.mark.parametrize("kind", ["device", "gpu-tiles"])
def test_epilogue_with_batch_and_row_operands(device, profiles, kind):
    prog = program("bik,bkj->bij", [(2, 9, 8), (2, 8, 21)],
                   epilogue=lambda y, r, s: (y * r - s).sigmoid(), extra=[(2, 9, 1), (21,)])
    check(device, prog, profiles[kind],
          lambda x, w, r, s: 1 / (1 + np.exp(-(np.einsum("bik,bkj->bij", x, w) * r - s))))


@pytest.mark.parametrize("kind", ["device", "gpu-tiles"])
def test_reshaped_results_are_stored_at_the_einsum_places(device, profiles, kind):
    prog = program("ik,jk->ij", [(24, 16), (32, 16)], extra=[(32,)],
                   epilogue=lambda y, b: (y + b).relu().reshape(24, 4, 8))
    check(device, prog, profiles[kind],
          lambda x, w, b: np.maximum(x @ w.T + b, 0).reshape(24, 4, 8))
    attention_pv = program("hqk,khd->qhd", [(2, 5, 7), (7, 2, 3)],
                           epilogue=lambda y: y.reshape(5, 6))
    check(device, attention_pv, profiles[kind],
          lambda p, v: np.einsum("hqk,khd->qhd", p, v).reshape(5, 6))


def test_results_of_the_einsum_and_its_epilogue_both_written(device, profiles):
    prog = program("ik,kj->ij", [(10, 6), (6, 12)], epilogue=lambda y: (y, y * 2.0))
    job = accy.prepare(prog, "accy-contract,accy-tensor,fusion-planning{policy=multi-output},"
                             "schedule-planning,accy-memory,accy-kernel,accy-target",
                       target=profiles["device"])
    (kernel,) = job.kernels  # one tiled kernel writes both
    assert kernel.fixed_local_size and [a.name for a in kernel.args if a.is_output] == [
        "out0", "out1"]
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((10, 6), np.float32), rng.standard_normal((6, 12), np.float32)
    y, y2 = job.run(x, w, device=device)
    np.testing.assert_allclose(y, x @ w, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y2, 2 * (x @ w), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("spec, shapes, kernels", [
    ("ik,kj->ij", [(16, 1000), (1000, 300)], 2),  # K split: partials, then their sum (no
    ("ik,jk->ij", [(1, 700), (257, 700)], 2),  # PTX fence); a GEMV against x @ W.T
    ("ik,kj->ij", [(600, 90), (90, 24)], 1),  # N short, K too short to split
    ("ik,kj->ij", [(24, 112), (112, 96)], 1),  # small: f32's 32x32 tiles, not 64x64
    ("ik,jk->ij", [(28, 1100), (20, 1100)], 2),  # few outputs, K split, B along K
    ("bik,bkj->bij", [(3, 50, 24), (3, 24, 60)], 1),  # K under 32, batched
], ids=["m16", "gemv-bt", "n24", "small", "few-outputs", "short-k"])
def test_small_f16_products_load_halves_on_gpus_without_cl_khr_fp16(device, profiles, spec,
                                                                      shapes, kernels):
    # a GPU without f16 arithmetic (the H200's OpenCL): dtype-legalization promotes f16 to f32
    # but keeps a product no tensor core would take (a side of at most 32, K under 32) in f16
    # for the tiled contraction, which loads halves (no cast kernels writing f32 copies of the
    # operands first) and sums in f32
    from accy.ir.ops import Op
    from accy.ir.program import Stage

    target = profiles["gpu-tiles"]
    assert DType.f16 not in target.dtypes
    prog = program(spec, shapes, DType.f16, epilogue=lambda y: (y * 2.0).relu())
    job = accy.prepare(prog, target=target)
    assert job.generators() == {"tiled-contraction": 1} and job.kernel_count == kernels
    (product,) = [n for n in job.products[Stage.tensor].program.nodes() if n.op is Op.EINSUM]
    assert product.type.dtype is DType.f16 and "accy_unpack_half4" in job.kernel_source(0)
    rng = np.random.default_rng(1)
    xs = [rng.uniform(-1, 1, s).astype(np.float16) for s in shapes]
    (got,) = job.run(*xs, device=device)
    # an f32 sum (off by at most K units of f32 roundoff of the sum of |a b|) rounded to f16,
    # then * 2 and relu in f32 and a second rounding: within two f16 steps of that
    wide = [x.astype(np.float64) for x in xs]
    exact = np.maximum(2 * np.einsum(spec, *wide), 0)
    summed = 2 * shapes[0][-1] * 2.0**-24 * np.einsum(spec, *map(np.abs, wide))
    step = np.spacing(np.abs(exact).astype(np.float16)).astype(np.float64)
    assert got.dtype == np.float16 and (np.abs(got - exact) <= 2 * step + summed).all()
    # the CPU's tiles and products of two long sides: promoted, as before
    for other, prog in ((profiles["device"], program(spec, shapes, DType.f16)),
                        (target, program("ik,kj->ij", [(64, 1000), (1000, 300)], DType.f16))):
        job = accy.prepare(prog, target=other)
        einsums = [n for n in job.products[Stage.tensor].program.nodes() if n.op is Op.EINSUM]
        assert [n.type.dtype for n in einsums] == [DType.f32]
