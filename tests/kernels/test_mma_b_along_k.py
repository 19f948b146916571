"""f16 products whose B is stored along K (``x @ W.T``, attention's ``q k^T``) on the f16 tensor
cores: the B tile is laid out along K as A's (``MmaTiles.b_k_major``), copied by ``cp.async``
as stored and read by ``ldmatrix`` without ``.trans``. Checked without a GPU: the fragments
against a NumPy emulation of ``ldmatrix`` and ``mma.sync``, the local reads and copies for
bank conflicts, whole kernels with the PTX emulated on PoCL."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from mma_emulation import check_f16_product, emulated_async, run_emulated
from test_mma_generator import emulate_block, num
from test_mma_generator import prepared as prepare
from test_mma_pipeline import ASYNC, NV, emulate_mma16, matmul16
from test_mma_vector import F16, ldmatrix, vector, wavefronts_ok

from accy.ir.ops import Op
from accy.ir.program import Stage
from accy.ir.types import DType
from accy.kernels.ir import idx
from accy.kernels.mma_layout import a_row_offset, f16_a_base, f16_bk_base
from accy.kernels.mma_plan import MmaTiles, copy_slot, local_index, warp_origin

try:
    import pyopencl as cl
except ImportError:  # the emulation test skips without it
    cl = None


def along_k(text: str) -> MmaTiles:
    t = dataclasses.replace(vector(text, f16=True), b_k_major=True)
    t.check()
    return t


def b_rows(t: MmaTiles, wn, kk: int, p: int) -> list[int]:
    """Halves each lane gives ``ldmatrix`` for B fragments 2p, 2p + 1 at sub-step kk."""
    return [num(f16_bk_base(t, wn, idx(lane), kk)) + 16 * p * t.bk for lane in range(32)]


@pytest.mark.parametrize("text", F16)
def test_b_tile_along_k_fragments_compute_the_block_product_in_emulation(text):
    tiles = along_k(text)

    def fragments(a_loc, b_loc, wm, wn, mi, ni, kk, acc):
        a_rows = [num(f16_a_base(tiles, wm, idx(lane), kk)) + a_row_offset(tiles, mi, 0)
                  for lane in range(32)]
        rows = b_rows(tiles, wn, kk, ni // 2)
        assert all(r % 8 == 0 for r in a_rows + rows)  # 16-byte rows
        ar = ldmatrix(a_loc, a_rows, False).reshape(32, 8)
        # matrices: fragment 2p at k 0-7 (b0b1), 8-15 (b2b3), then fragment 2p + 1
        br = ldmatrix(b_loc, rows, False)[:, 2 * (ni % 2):2 * (ni % 2) + 2].reshape(32, 4)
        return emulate_mma16(ar, br, acc)

    emulate_block(tiles, 4, 16, fragments)


@pytest.mark.parametrize("text", F16)
def test_b_tile_along_k_is_read_and_copied_without_bank_conflicts_each_element_once(text):
    tiles = along_k(text)
    for warp in range(tiles.threads // 32):
        _, wn = warp_origin(tiles, idx(warp))
        for kk in range(tiles.bk // 16):
            for p in range(tiles.frags_n // 2):
                words = [[r // 2 + i for i in range(4)] for r in b_rows(tiles, wn, kk, p)]
                assert wavefronts_ok(words, 16), (warp, kk, p)
    copies = []
    for tid in range(tiles.threads):
        for i in range(tiles.slots("y")):
            f, k = copy_slot(tiles, "y", True, idx(tid + i * tiles.threads))
            at = num(local_index(tiles, "y", f, k))
            assert at % tiles.vector == 0  # a whole 16-byte chunk
            copies.append((i, tid, [at // 2 + w for w in range(4)]))
    copies.sort()
    for start in range(0, len(copies), 32):
        assert wavefronts_ok([w for _, _, w in copies[start:start + 32]], 16)
    seen = {num(local_index(tiles, "y", idx(n), idx(k)))
            for n in range(tiles.bn) for k in range(tiles.bk)}
    assert seen == set(range(tiles.b_size))


def test_b_along_k_stays_f16_on_tensor_cores_and_reads_b_by_plain_ldmatrix(pipe, used):
    # the H200's OpenCL has no cl_khr_fp16: the product stays f16 over its f16 parameters
    job = prepare(matmul16(512, 512, 64, b_transposed=True), "ieee",
                  dataclasses.replace(ASYNC, dtypes=NV.dtypes), pipe)
    assert used(job) == {"mma-f16": 1}
    (product,) = [n for n in job.products[Stage.tensor].program.nodes() if n.op is Op.EINSUM]
    assert product.type.dtype is DType.f16
    src = job.kernel_source(0)
    assert ".trans" not in src and src.count("ldmatrix.sync.aligned.m8n8.x4.shared.b16") == 2 * 4
    with pytest.raises(ValueError, match="along K"):  # scalar f16 loads read B along N only
        dataclasses.replace(vector("64x64x32:2x2", True), loads="scalar", b_k_major=True).check()


@pytest.mark.skipif(cl is None, reason="needs pyopencl")
@pytest.mark.parametrize("mode", ["eager", "deferred"])
@pytest.mark.parametrize("m, n, k, batch, bias", [
    (130, 72, 48, 0, True),  # edges in M, N and K (K steps of 32 over 48), epilogue
    (64, 64, 64, 3, False),  # batched
], ids=["bias", "batched"])
def test_b_along_k_kernels_compute_the_product_in_emulation(device, pipe, used, mode, m, n, k,
                                                             batch, bias):
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("the emulation is checked on PoCL")
    job = prepare(matmul16(m, n, k, batch, bias, b_transposed=True), "ieee", ASYNC, pipe)
    assert used(job) == {"mma-f16": 1} and ".trans" not in job.kernel_source(0)
    check_f16_product(device, job, emulated_async(job.kernel_source(0), mode), m, n, k, batch,
                      bias, seed=6, b_transposed=True)


@pytest.mark.skipif(cl is None, reason="needs pyopencl")
@pytest.mark.parametrize("m, n, k, b_t", [
    (72, 66, 44, False),  # A's rows 8 bytes a copy, B's (along N) 4
    (70, 64, 42, True),  # both stored along K, 4 bytes a copy
], ids=["b-along-n", "b-along-k"])
def test_f16_rows_not_whole_16_byte_vectors_compute_the_product_in_emulation(device, pipe, used,
                                                                             m, n, k, b_t):
    """f16 operands whose rows are not whole 16-byte vectors (N = 1030, K = 300) still take
    the f16 tensor cores, copied 8 or 4 bytes at a time (``mma_plan.copy_widths``)."""
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("the emulation is checked on PoCL")
    job = prepare(matmul16(m, n, k, b_transposed=b_t), "ieee", ASYNC, pipe)
    src = job.kernel_source(0)
    assert used(job) == {"mma-f16": 1} and "cp.async.ca.shared.global [%0], [%1], 4" in src
    rng = np.random.default_rng(8)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float16)
    b = rng.uniform(-1, 1, (n, k) if b_t else (k, n)).astype(np.float16)
    got = run_emulated(device, job, emulated_async(src, "deferred"), [a, b], (m, n), np.float16)
    exact = a.astype(np.float64) @ (b.T if b_t else b).astype(np.float64)
    np.testing.assert_allclose(got.astype(np.float64), exact, rtol=2**-10, atol=1e-6 * k)
