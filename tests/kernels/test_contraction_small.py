"""Products of few outputs over a long K: their work-groups share K (tiled-contraction's
smallest tiles and tiny form, the mma kernels' least-padded tiles). A sweep of random
products found them on one work-group or a handful, tens of times slower than torch
(papers/kernels.md, "Thirty-ninth session")."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from contraction_support import check, program
from hypothesis import given, settings
from hypothesis import strategies as st
from test_contraction import H200, tiles_for
from test_mma_generator import NV, matmul
from test_mma_generator import prepared as prepare
from test_mma_pipeline import ASYNC, matmul16

import accy
from accy.ir.types import DType
from accy.kernels.contraction_plan import LONG_K, SHORT_K


@pytest.mark.parametrize("m, n, k, dtype, split", [
    (22, 18, 27131, DType.f32, 256),  # every tile pads 22 x 18 past 1.25: the smallest, split
    (18, 18, 14342, DType.f16, 128),  # f16's smallest tile has 8 x 8 outputs a work-item
    (58, 26, 1804, DType.f16, 16),
    (10, 12, 50000, DType.f32, 256),  # 256 outputs: the tiny form only over a short K
    (10, 12, 500, DType.f32, 1),
    (22, 18, 800, DType.f32, 8),  # K below LONG_K, from SHORT_K: one group, split
    (22, 18, 200, DType.f32, 1),  # K below SHORT_K: one kernel
])
def test_few_outputs_over_a_long_k_split_it_over_work_groups(m, n, k, dtype, split):
    """As many chunks (a power of two) as fill the 132 units, of at least MIN_SMALL_K."""
    t = tiles_for("ik,kj->ij", [(m, k), (k, n)], H200, dtype)
    assert t.split == split
    assert (split > 1) == (k >= (LONG_K if m * n <= 256 else SHORT_K))
    if k < LONG_K and m * n <= 256:
        assert (t.bm, t.bn, t.vm * t.sm) == (16, 16, 1)  # the tiny form: an output a work-item


@pytest.mark.parametrize("m, n, k", [(18, 22, 3000), (10, 12, 2000)], ids=["pads", "tiny"])
def test_few_outputs_split_over_k_compute_the_product(device, profiles, m, n, k):
    """On the GPU-style profile (4 units): K in chunks by a partials kernel, summed in order
    with a bias and relu by a second."""
    target = profiles["gpu-tiles"]
    prog = program("ik,kj->ij", [(m, k), (k, n)], epilogue=lambda y, b: (y + b).relu(),
                   extra=[(n,)])
    job = accy.prepare(prog, target=target)
    assert job.kernel_count == 2 and job.kernels[0].entry.endswith("_partials")
    check(device, prog, target, lambda x, w, b: np.maximum(x @ w + b, 0))


@settings(max_examples=10, deadline=None)
@given(m=st.integers(1, 40), n=st.integers(1, 40), k=st.integers(LONG_K, 3 * LONG_K),
       batch=st.integers(0, 2), dtype=st.sampled_from([DType.f32, DType.f16]))
def test_random_few_output_products_over_a_long_k_match_numpy(device, profiles, m, n, k, batch,
                                                              dtype):
    """Any sides, a batch or none, f32 or f16 (halves loaded where the profile stores f16):
    the GPU-style tiles split K, and the sums agree with float64."""
    target = profiles["gpu-tiles"]
    if dtype is DType.f16:
        target = dataclasses.replace(target, dtypes=target.dtypes | {DType.f16})
    lead = (batch,) if batch else ()
    spec = "bik,bkj->bij" if batch else "ik,kj->ij"
    shapes = [(*lead, m, k), (*lead, k, n)]
    job = accy.prepare(program(spec, shapes, dtype), target=target)
    rng = np.random.default_rng(m * n + k)
    xs = [rng.uniform(-1, 1, s).astype(dtype.numpy) for s in shapes]
    (got,) = job.run(*xs, device=device)
    exact = np.einsum(spec, *(x.astype(np.float64) for x in xs))
    # f32 sums of K terms of at most 1 (f16: then one rounding to f16)
    tol = k * 2.0**-22 + (np.abs(exact) * 2.0**-10 if dtype is DType.f16 else 0)
    assert (np.abs(got.astype(np.float64) - exact) <= tol).all()


@settings(max_examples=12, deadline=None)
@given(m=st.integers(1, 32), n=st.integers(1, 130), k=st.integers(2, 700),
       batch=st.integers(0, 2), b_along_k=st.booleans())
def test_random_small_f16_products_kept_in_f16_match_numpy(device, profiles, m, n, k, batch,
                                                           b_along_k):
    """On a GPU without f16 arithmetic or tensor cores, f16 products with a side of at most
    32 are kept in f16 for the tiled contraction (dtype_legalization.tiled_product), which
    loads halves into f32 tiles: one product, no cast kernels, K split or not, B stored along
    N or K; the result is the f32 sum rounded once to f16."""
    target = profiles["gpu-tiles"]
    assert DType.f16 not in target.dtypes
    lead = (batch,) if batch else ()
    b = "bjk" if b_along_k else "bkj"
    spec = f"bik,{b}->bij" if batch else f"ik,{b[1:]}->ij"
    shapes = [(*lead, m, k), (*lead, n, k) if b_along_k else (*lead, k, n)]
    job = accy.prepare(program(spec, shapes, DType.f16), target=target)
    assert set(job.generators()) <= {"tiled-contraction", "loop-nest"}
    assert job.kernel_count <= 2  # the product (and its partials' sum): nothing cast first
    rng = np.random.default_rng(m * n + k)
    xs = [rng.uniform(-1, 1, s).astype(np.float16) for s in shapes]
    (got,) = job.run(*xs, device=device)
    exact = np.einsum(spec, *(x.astype(np.float64) for x in xs))
    tol = k * 2.0**-22 + np.abs(exact) * 2.0**-10
    assert got.dtype == np.float16 and (np.abs(got.astype(np.float64) - exact) <= tol).all()

def test_mma_tiles_tied_on_padding_are_all_scored(pipe):
    """66 x 503 pads every mma tiling to 128 x 512: the waves choose among them, not the first
    listed (4 work-groups of 128x128: measured about 3x slower than the tiles chosen)."""
    job = prepare(matmul(66, 503, 325), "3xtf32", NV, pipe)
    assert job.generators() == {"mma-3xtf32": 1}
    groups = job.kernels[0].geometry.global_size[0] // job.kernels[0].geometry.local_size[0]
    assert groups > 4  # 128x128 tiles: 1 x 4


@pytest.mark.parametrize("m, n, k", [(24, 96, 112), (40, 25, 512), (200, 300, 24)])
def test_f16_products_take_f32_tiles(m, n, k):
    """The tiled contraction holds an f16 product's tiles in f32: it takes f32's tile sizes
    (down to 32x32, where f16's 8-lane vectors made 64x64 the smallest: 24 x 96 outputs then
    computed 3.6x their work, now 1.3x) and counts their local memory at 4 bytes an element."""
    for dtype in (DType.f32, DType.f16):
        t = tiles_for("ik,kj->ij", [(m, k), (k, n)], H200, dtype)
        assert t == tiles_for("ik,kj->ij", [(m, k), (k, n)], H200, DType.f32)
        assert t.bm * t.bn <= 64 * 64 and t.local_bytes(4) <= H200.local_mem_bytes


@pytest.mark.parametrize("m, n, k, f16, mma", [
    (20, 24, 128, False, True),  # both sides >= 16 over a K below SHORT_K: 3xTF32
    (20, 24, 300, False, False),  # from SHORT_K the tiled contraction splits K: faster
    (12, 24, 128, False, False),  # a side under 16
    (12, 100, 360, True, True),  # f16: both sides >= 8, any K
    (6, 100, 360, True, False),
    (12, 17, 34, True, False),  # odd N: not padded (two copies and a slice) for so small a one
])
def test_small_products_take_tensor_cores(m, n, k, f16, mma, pipe):
    """Small products whose tiled contraction would walk K unsplit, a load latency a step,
    take the mma kernels, which keep several steps in flight (mma_plan.SMALL_MN; measured:
    papers/kernels.md, "Fortieth session")."""
    if f16:
        job = prepare(matmul16(m, n, k), "ieee", dataclasses.replace(ASYNC, dtypes=NV.dtypes),
                      pipe)
    else:
        job = prepare(matmul(m, n, k), "3xtf32", NV, pipe)
    assert any(g.startswith("mma") for g in job.generators()) is mma, job.generators()
    assert set(job.generators()) <= {"tiled-contraction", "mma-f16", "mma-3xtf32"}  # no copies
