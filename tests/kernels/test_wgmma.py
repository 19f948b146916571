"""wgmma-f16 (accy/kernels/wgmma.py) without a GPU: the deferred PTX's expansion, selection
(only with the probe's ``WGMMA_F16``, never on PoCL), the K permutation of A's 16-byte loads,
whole generated kernels and the probe kernel on PoCL with wgmma emulated (mma_emulation.py),
and, where clang and CUDA's ptxas are installed, the expanded PTX of a generated kernel
assembled for sm_90a. Speed and the real instructions: ``experiments/bench_gpu.py`` on an H200.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from mma_emulation import check_f16_product, emulated_wgmma, one_line
from test_mma_generator import NV, emulated_builds
from test_mma_generator import prepared as prepare
from test_mma_pipeline import ASYNC, matmul16

try:
    import pyopencl as cl
except ImportError:  # the emulation tests skip without it
    cl = None

import accy
from accy.backends.opencl import nvptx_offline, tensor_cores
from accy.ir.types import DType, TensorType
from accy.kernels import wgmma, wgmma_ptx
from accy.kernels.ir import idx
from accy.passes.tensor import dtype_legalization
from accy.target import WGMMA_F16, WGMMA_TF32

HOPPER = dataclasses.replace(ASYNC, tensor_cores=(*ASYNC.tensor_cores, WGMMA_F16, WGMMA_TF32))
FEW_UNITS = dataclasses.replace(HOPPER, compute_units=1)  # one tile fills it: small tests


def test_expand_replaces_markers_and_targets_sm_90a():
    ptx = (".version 7.8\n.target sm_90\n"
           "\t// @@RSTEP16_1_1 %f1, %f2, %f3, %f4, %f5, %f6, %f7, %f8, %r1, %r2, %r3, %r4, "
           "%rd1, %r5\n\t// @@WAIT0 %f1\n\t// @@WAIT1 %f1\n\t// @@PROXY\n\t// @@HOLD\n")
    out = wgmma_ptx.expand(ptx)
    assert ".version 8.0" in out and ".target sm_90a" in out and "@@" not in out
    assert ("wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {%f1, %f2, %f3, %f4, %f5, %f6, "
            "%f7, %f8}, {%r1, %r2, %r3, %r4}, xb, p, 1, 1, 1;") in out
    assert "setp.ne.b32 p, %r5, 0; mov.b64 xb, %rd1;" in out
    assert "wgmma.wait_group.sync.aligned 0;" in out and "wgmma.wait_group.sync.aligned 1;" in out
    assert "fence.proxy.async.shared::cta;" in out and "fence.acq_rel.cta;" in out
    assert wgmma_ptx.expand(".version 8.3\n.target sm_90\n").startswith(".version 8.3")
    with pytest.raises(ValueError, match="unknown deferred PTX marker @@NOPE"):
        wgmma_ptx.expand("// @@NOPE %r1\n")
    with pytest.raises(ValueError, match="operands"):
        wgmma_ptx.expand("// @@RSTEP16_1_1 %f1, %r1\n")


def test_descriptor_fields():
    bits = wgmma_ptx.descriptor_bits(128, 512)
    assert (bits >> 16) & 0x3FFF == 8 and (bits >> 32) & 0x3FFF == 32 and bits & 0xFFFF == 0


def test_k_rows_of_a_stage_are_the_permutation_of_the_a_loads():
    """Stage row ``kr`` holds the K row whose value the lane's 16-byte loads put at fragment
    position ``kr``: lane t's vector of 8 halves (K t BK/4 .. + 7) fills registers 0, 2, 4, 6
    of row g, in mma.sync's order: register 4 i + 2 h (h: K 8 .. 15 of the k16 step i) holds
    positions 16 i + 8 h + 2 t, + 1."""
    rows = [int(wgmma.k_row(idx(kr)).value) for kr in range(wgmma.BK)]
    assert sorted(rows) == list(range(wgmma.BK))
    for t in range(4):
        for e in range(8):  # the e-th half of lane t's vector: register e // 2, half e % 2
            i, h = divmod(e // 2, 2)
            assert rows[16 * i + 8 * h + 2 * t + e % 2] == t * wgmma.BK // 4 + e
    # B along K is copied a pair at a time to the position that holds its K
    assert [int(wgmma.k_position(idx(k)).value) for k in rows] == list(range(wgmma.BK))


def test_chosen_where_the_probe_found_wgmma_and_the_tiles_fill_the_units(pipe, used):
    job = prepare(matmul16(2048, 2048, 1024), "ieee", HOPPER, pipe)
    assert used(job) == {"wgmma-f16": 1}
    src = job.kernel_source(0)
    assert "reqd_work_group_size(512, 1, 1)" in src
    assert src.count(wgmma_ptx.rstep(128, 2, 1)) == 2 and "ld.global.v4.u32" in src
    assert job.kernels[0].geometry.global_size == (8 * 16 * 512,)
    along_k = prepare(matmul16(2048, 2048, 1024, b_transposed=True), "ieee", HOPPER, pipe)
    assert used(along_k) == {"wgmma-f16": 1}  # x @ W.T: B's K-major core matrices
    assert along_k.kernel_source(0).count(wgmma_ptx.rstep(128, 2, 0)) == 2
    assert "cp.async.ca.shared.global [%0], [%1], 4;" in along_k.kernel_source(0)
    for prog, target, why in (
            (matmul16(2048, 2048, 1024), ASYNC, "no probe entry"),
            (matmul16(2048, 2048, 1022, b_transposed=True), HOPPER, "A's rows of 1,022 halves"),
            (matmul16(1024, 1024, 1024), HOPPER, "32 or 64 tiles for 132 units"),
            (matmul16(2048, 2048, 1020), HOPPER, "rows of K not whole 16-byte vectors"),
            (matmul16(4096, 4096, 64), HOPPER, "K below MIN_K")):
        assert used(prepare(prog, "ieee", target, pipe)) == {"mma-f16": 1}, why
    for prog, items, why in (
            (matmul16(2048, 1024, 512), 256, "64 tiles of 256 rows, 128 of 128 fill the units"),
            (matmul16(320, 4096, 1024), 256, "pads 256-row tiles by 1.6, 128-row ones by 1.2"),
            (matmul16(1536, 1536, 768), 512, "72 tiles of 256 rows beat mma's 64x64 ones")):
        job = prepare(prog, "ieee", HOPPER, pipe)
        assert used(job) == {"wgmma-f16": 1}, why
        assert f"reqd_work_group_size({items}, 1, 1)" in job.kernel_source(0), why
    off = accy.prepare(matmul16(2048, 2048, 1024), pipe("disable=wgmma-f16"), target=HOPPER)
    assert used(off) == {"mma-f16": 1}


def test_x_at_w_through_traced_values_takes_wgmma(pipe, used):
    """``x @ w`` and ``x @ w.T`` (a Linear layer's weight layout) written with operators on
    traced f16 values (the front end) take it too."""
    prog = accy.trace(lambda x, w: (x @ w).relu(), TensorType((4096, 1024), DType.f16),
                      TensorType((1024, 1024), DType.f16))
    job = prepare(prog, "ieee", HOPPER, pipe)
    assert used(job) == {"wgmma-f16": 1}
    prog = accy.trace(lambda x, w: (x @ w.T).relu(), TensorType((4096, 1024), DType.f16),
                      TensorType((2048, 1024), DType.f16))
    job = prepare(prog, "ieee", HOPPER, pipe)
    assert used(job) == {"wgmma-f16": 1} and wgmma_ptx.rstep(128, 2, 0) in job.kernel_source(0)


def test_large_products_of_rows_not_whole_vectors_are_padded_for_wgmma(pipe, used):
    """On a target without f16 storage of its own (as NVIDIA's OpenCL), dtype-legalization
    pads a large f16 product's last axes to whole 16-byte rows so that wgmma-f16 takes it;
    smaller products, and targets without wgmma, keep mma-f16's narrower copies."""
    hopper = dataclasses.replace(HOPPER, dtypes=NV.dtypes)  # f16 kept only for products
    job = prepare(matmul16(2048, 2048, 1020), "ieee", hopper, pipe)
    assert used(job) == {"row-movement": 2, "wgmma-f16": 1}
    job = prepare(matmul16(4096, 2044, 1024), "ieee", hopper, pipe)  # N padded, sliced back
    assert used(job) == {"row-movement": 2, "wgmma-f16": 1}
    for prog, target, why in ((matmul16(512, 512, 1020), hopper, "2MN/(M+N) = 512"),
                              (matmul16(2048, 2048, 1020),
                               dataclasses.replace(ASYNC, dtypes=NV.dtypes), "no wgmma")):
        assert used(prepare(prog, "ieee", target, pipe)) == {"mma-f16": 1}, why
    # from WIDE_FLOPS, from LARGE_INTENSITY: 2MN/(M+N) = 858 pads over K = 7986, not 2000
    assert used(prepare(matmul16(1024, 738, 7986), "ieee", hopper, pipe)) == {
        "row-movement": 3, "wgmma-f16": 1}  # (the slice's own kernel: N 744 -> 738)
    assert used(prepare(matmul16(1024, 738, 2000), "ieee", hopper, pipe)) == {"mma-f16": 1}
    # a K under wgmma.MIN_K (128) padded: wgmma-f16 would not take it, so no copies for
    # mma-f16 alone; K 122 pads to 128 and takes it
    assert used(prepare(matmul16(2048, 2044, 118), "ieee", hopper, pipe)) == {"mma-f16": 1}
    assert used(prepare(matmul16(2048, 2044, 122), "ieee", hopper, pipe)) == {
        "row-movement": 3, "wgmma-f16": 1}


@pytest.mark.skipif(cl is None, reason="needs pyopencl")
def test_padded_product_for_wgmma_in_emulation(device, pipe, used, monkeypatch):
    """The padded product (K 70 -> 72 in both operands, N 244 -> 248 and sliced back) through
    the job's own kernels, wgmma emulated, against float64."""
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("the emulation is checked on PoCL")
    monkeypatch.setattr(wgmma, "MIN_K", 32)
    monkeypatch.setattr(dtype_legalization, "WIDE_MIN_K", 32)
    monkeypatch.setattr(dtype_legalization, "WIDE_INTENSITY", 64)
    job = prepare(matmul16(256, 244, 70), "ieee", dataclasses.replace(FEW_UNITS, dtypes=NV.dtypes),
                  pipe)
    assert used(job)["wgmma-f16"] == 1 and used(job)["row-movement"] >= 2
    for i in range(len(job.kernels)):
        if "asm" in job.kernel_source(i):
            job._sources[i] = emulated_wgmma(job.kernel_source(i), "eager")
    rng = np.random.default_rng(5)
    a = rng.uniform(-1, 1, (256, 70)).astype(np.float16)
    b = rng.uniform(-1, 1, (70, 244)).astype(np.float16)
    with emulated_builds(device):
        (got,) = job.executable(device=device)(a, b)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got.astype(np.float64), exact, rtol=2**-10, atol=1e-6 * 70)


@pytest.mark.skipif(cl is None, reason="needs pyopencl")
@pytest.mark.parametrize("mode", ["eager", "deferred"])
@pytest.mark.parametrize("m, n, k, batch, bias, b_transposed, warpgroups", [
    (500, 248, 72, 0, True, False, 4),  # edges in M, N and K (K steps of 32 over 72), bias, relu
    (256, 128, 200, 0, False, False, 4),  # 7 K steps through 4 stages, an odd count (loop pairs)
    (256, 128, 64, 2, False, False, 4),  # batched
    (500, 248, 80, 0, True, True, 4),  # B along K (K-major core matrices): edges, bias, relu
    (256, 128, 96, 2, False, True, 4),  # B along K, batched
    (250, 248, 72, 0, True, False, 2),  # 128-row tiles: edges, bias, relu
    (250, 248, 80, 0, False, True, 2),  # 128-row tiles, B along K
], ids=["edges-bias", "stages", "batched", "b-along-k", "b-along-k-batched", "edges-bias-128",
        "b-along-k-128"])
def test_kernels_compute_the_product_in_emulation(device, pipe, used, monkeypatch, mode, m, n,
                                                  k, batch, bias, b_transposed, warpgroups):
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("the emulation is checked on PoCL")
    monkeypatch.setattr(wgmma, "MIN_K", 32)  # selection only: short K keeps the emulation quick
    monkeypatch.setattr(wgmma, "WARPGROUPS", (warpgroups,))
    job = prepare(matmul16(m, n, k, batch, bias, b_transposed), "ieee", FEW_UNITS, pipe)
    assert used(job) == {"wgmma-f16": 1}
    assert f"reqd_work_group_size({128 * warpgroups}, 1, 1)" in job.kernel_source(0)
    check_f16_product(device, job, emulated_wgmma(job.kernel_source(0), mode), m, n, k, batch,
                      bias, seed=9, b_transposed=b_transposed)


@pytest.mark.skipif(cl is None, reason="needs pyopencl")
@pytest.mark.parametrize("trans", [1, 0], ids=["b-mn-major", "b-k-major"])
def test_wgmma_probe_expects_what_its_kernel_computes(device, trans):
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("the emulation is checked on PoCL")
    a, b, want = tensor_cores.wgmma_probe_case()
    src = tensor_cores.wgmma_probe_source(trans)
    assert wgmma_ptx.rstep(wgmma.BN, wgmma.BK // 16, trans) in src  # the generator's form
    got = tensor_cores.run_isolated(device.device, emulated_wgmma(one_line(src), "eager"),
                                    "accy_wgmma_probe", [a.view(np.uint32), b.view(np.uint16)],
                                    np.zeros(want.size, np.float32), items=128)
    np.testing.assert_array_equal(got.reshape(want.shape), want)


def test_a_wgmma_probe_that_cannot_expand_leaves_the_device_usable(device, monkeypatch):
    """A driver whose program binaries are not PTX text (or PTX the expansion does not know)
    fails the wgmma probe with ValueError: no WGMMA_F16, the other probes' findings kept."""
    real = tensor_cores.run_isolated

    def run(dev, source, entry, *args, **kw):
        if entry in ("accy_wgmma_probe", "accy_wgmma_tf32_probe"):
            raise UnicodeDecodeError("utf-8", b"\x7fELF", 0, 1, "not PTX")
        return real(dev, source, entry, *args, **kw)

    monkeypatch.setattr(tensor_cores, "run_isolated", run)
    found = tensor_cores.probe_isolated(device.device, True)
    assert WGMMA_F16 not in found and WGMMA_TF32 not in found


# the ptxas checks run where clang-15 and CUDA's ptxas are installed
NEEDS_PTXAS = pytest.mark.skipif(not nvptx_offline.available(),
                                 reason="needs clang-15 and CUDA's ptxas")


@NEEDS_PTXAS
@pytest.mark.parametrize("b_transposed", [False, True], ids=["b-along-n", "b-along-k"])
@pytest.mark.parametrize("m, n, k", [(2048, 2048, 1024), (2048, 1024, 512)],
                         ids=["256-rows", "128-rows"])
def test_expanded_ptx_assembles_for_sm_90a_without_spills(pipe, tmp_path, b_transposed, m, n,
                                                          k):
    """The generated kernel through clang's PTX (as NVIDIA's compiler would emit it for sm_90,
    markers kept), expanded, assembled by ptxas for sm_90a: the wgmma forms are valid PTX and
    the accumulators, A registers and addresses fit in registers (256- and 128-row tiles)."""
    job = prepare(matmul16(m, n, k, b_transposed=b_transposed), "ieee", HOPPER, pipe)
    log = assembled(job.kernel_source(0), tmp_path)
    assert "0 bytes spill stores" in log, log[-2000:]


def assembled(source: str, tmp_path, *ptxas: str) -> str:
    """ptxas's log of ``source`` through clang's PTX (as NVIDIA's compiler would emit it for
    sm_90, markers kept), expanded and assembled for sm_90a (``ptxas``: more options;
    :mod:`accy.backends.opencl.nvptx_offline`); fails the test where clang or ptxas rejects it."""
    try:
        return nvptx_offline.assemble(source, tmp_path, *ptxas)
    except RuntimeError as e:
        pytest.fail(str(e))
