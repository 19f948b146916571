"""wgmma-tf32 / wgmma-3xtf32 (accy/kernels/wgmma_tf32.py) without a GPU: the TF32 step's
expansion, the K order A's 16-byte loads give, the probe's kernel, selection (only under the
tf32 policies, only with the probe's ``WGMMA_TF32``), whole generated kernels on PoCL with
wgmma emulated (mma_emulation.py) against float64 under each policy's error, the peeled K
tail and wrapped edges, and, where clang and CUDA's ptxas are installed, the expanded PTX
assembled for sm_90a. Speed and the real instructions:
``experiments/bench_mma.py`` and ``experiments/bench_gpu.py`` on an H200."""

from __future__ import annotations

import dataclasses
import re
from types import SimpleNamespace

import numpy as np
import pytest
from mma_emulation import emulated_wgmma, one_line, run_emulated, run_kernels
from test_mma_generator import matmul
from test_mma_generator import prepared as prepare
from test_mma_precision import cast_matmul
from test_wgmma import HOPPER, NEEDS_PTXAS, assembled

try:
    import pyopencl as cl
except ImportError:  # the emulation tests skip without it
    cl = None

from test_mma_pipeline import ASYNC

import accy
from accy.backends.opencl import tensor_cores
from accy.builder import einsum
from accy.ir.types import DType, TensorType
from accy.kernels import tma, wgmma, wgmma_ptx, wgmma_ss, wgmma_ss3, wgmma_tf32
from accy.kernels.ir import idx
from accy.kernels.wgmma_tf32 import BK, position
from accy.target import TMA_COPY, TMA_TF32, WGMMA_TF32

FEW_UNITS = dataclasses.replace(HOPPER, compute_units=1)  # one tile fills it: small tests
# an H200 as probed: TMA copies, rounding to TF32 too, and 226 KiB of static local memory
TMA_H200 = dataclasses.replace(HOPPER, tensor_cores=(*HOPPER.tensor_cores, TMA_COPY, TMA_TF32),
                               static_local_bytes=226 * 1024)
POLICIES = ("tf32", "3xtf32")


def test_tf32_step_expands_to_one_run_of_wgmma_per_product():
    acc = [f"%f{i}" for i in range(8)]
    a = [f"%r{i}" for i in range(16)]
    ptx = (".version 7.8\n.target sm_90\n\t// @@TSTEP16_2_2 "
           + ", ".join([*acc, *a, "%rd1", "%rd2"]) + "\n")
    out = wgmma_ptx.expand(ptx)
    assert ".target sm_90a" in out and "@@" not in out
    steps = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n16k8\.f32\.tf32\.tf32 "
                       r"\{([^}]*)\}, \{([^}]*)\}, xb, p, 1, 1;", out)
    assert [s[1] for s in steps] == [", ".join(a[i:i + 4]) for i in range(0, 16, 4)]
    assert all(s[0] == ", ".join(acc) for s in steps)
    # each product from its descriptor, advanced 256 bytes (16 in descriptor units) per k8
    assert re.findall(r"mov\.b64 xb, (%rd\d);", out) == ["%rd1", "%rd2"]
    assert out.count("add.s64 xb, xb, 16;") == 2 and out.count("commit_group") == 1
    with pytest.raises(ValueError, match="operands"):
        wgmma_ptx.expand("// @@TSTEP16_2_2 %f1, %r1, %rd1, %rd2\n")


def test_stage_positions_are_the_k_order_of_the_a_loads():
    """Lane t's 16-byte load holds K 4t .. 4t + 3; fragment column 4h + t of k8 step i (stage
    position 8i + 4h + t) must be K 4t + 2i + h, and every position is used once."""
    got = [position(idx(k)).value for k in range(BK)]
    assert sorted(got) == list(range(BK))
    for t in range(4):
        for i in range(BK // 8):
            for h in (0, 1):
                assert got[4 * t + 2 * i + h] == 8 * i + 4 * h + t


@pytest.mark.skipif(cl is None, reason="needs pyopencl")
def test_the_probe_expects_what_its_kernel_computes(device):
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("the emulation is checked on PoCL")
    a, b, want = tensor_cores.wgmma_probe_case(16, np.float32)
    src = tensor_cores.wgmma_tf32_probe_source()
    assert wgmma_ptx.tstep(128, 2, 1) in src  # the generator's step, one product
    got = tensor_cores.run_isolated(device.device, emulated_wgmma(one_line(src), "eager"),
                                    "accy_wgmma_tf32_probe", [a.view(np.uint32), b],
                                    np.zeros(want.size, np.float32), items=128)
    np.testing.assert_array_equal(got.reshape(want.shape), want)


@pytest.mark.parametrize("policy", POLICIES)
def test_chosen_under_the_tf32_policies_where_the_probe_found_wgmma(pipe, used, policy):
    prog = matmul(4096, 2048, 1024)  # 256 tiles for 132 units
    assert used(prepare(prog, policy, HOPPER, pipe)) == {f"wgmma-{policy}": 1}
    assert used(prepare(prog, policy, ASYNC, pipe)) == {f"mma-{policy}": 1}  # no wgmma probe
    f16_only = dataclasses.replace(HOPPER, tensor_cores=tuple(
        c for c in HOPPER.tensor_cores if c != WGMMA_TF32))
    assert used(prepare(prog, policy, f16_only, pipe)) == {f"mma-{policy}": 1}
    assert "wgmma-" not in str(used(prepare(prog, "ieee", HOPPER, pipe)))  # f32 arithmetic
    # short K, and tiles filling too little of their waves: mma's smaller tiles
    for m, n, k in ((4096, 2048, 64), (512, 512, 1024), (1000, 1030, 520)):
        assert used(prepare(matmul(m, n, k), policy, HOPPER, pipe)) == {f"mma-{policy}": 1}
    # 64 tiles of 256 rows, 128 of 128: 128-row tiles under 3xtf32 only (their one product a
    # step does not hide B's loads under tf32)
    job = prepare(matmul(2048, 1024, 512), policy, HOPPER, pipe)
    if policy == "3xtf32":
        assert used(job) == {"wgmma-3xtf32": 1}
        assert "reqd_work_group_size(256, 1, 1)" in job.kernel_source(0)
    else:
        assert used(job) == {"mma-tf32": 1}
    # 40 KiB of local memory: tf32's four stages fit (32 KiB), 3xtf32's three of two tiles not
    small = dataclasses.replace(HOPPER, local_mem_bytes=40 * 1024)
    assert used(prepare(prog, policy, small, pipe)) == {
        "tf32": {"wgmma-tf32": 1}, "3xtf32": {"mma-3xtf32": 1}}[policy]
    # A stored K x M: no 16-byte A loads along K
    assert used(prepare(matmul(4096, 2048, 1024, a_transposed=True), policy, HOPPER,
                        pipe)) == {f"mma-{policy}": 1}


def test_x_at_w_through_traced_values_takes_wgmma_3xtf32(pipe, used):
    prog = accy.trace(lambda x, w: (x @ w).relu(), TensorType((4096, 1024), DType.f32),
                      TensorType((1024, 2048), DType.f32))
    job = prepare(prog, "3xtf32", HOPPER, pipe)
    assert used(job) == {"wgmma-3xtf32": 1}
    src = job.kernel_source(0)
    assert wgmma_ptx.tstep(128, 2, 3) in src  # small x big, big x small, big x big
    assert "__local float b_tile[12288]" in src  # three stages of big and small B tiles


def product_nk(m: int, n: int, k: int) -> accy.Program:
    """f32 ``A @ B.T``, B stored N x K."""
    b = accy.Builder()
    f = b.begin_function("f", [TensorType((m, k), DType.f32), TensorType((n, k), DType.f32)])
    f.return_(einsum("ik,jk->ij", f.param(0), f.param(1)))
    f.finish()
    return b.finish()


def check_values(got: np.ndarray, a: np.ndarray, b: np.ndarray, policy: str,
                 bias: np.ndarray | None = None) -> None:
    """``got`` against float64 ``A @ B`` (+ bias, relu): TF32 rounding of the operands (2^-11
    relative each) for tf32; for 3xtf32 only f32's summation error, a bound a kernel that
    dropped its small products would exceed."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    exact, mag = a64 @ b64, np.abs(a64) @ np.abs(b64)
    if bias is not None:
        exact, mag = np.maximum(exact + bias, 0.0), mag + np.abs(bias)
    rtol = 2 * 2.0**-11 if policy == "tf32" else 4 * a.shape[-1] * 2.0**-24
    assert np.all(np.abs(got - exact) <= rtol * mag), np.max(np.abs(got - exact) / mag)


@pytest.mark.skipif(cl is None, reason="needs pyopencl")
@pytest.mark.parametrize("mode", ["eager", "deferred"])
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("m, n, k, batch, bias, layout, warpgroups", [
    (500, 248, 72, 0, True, "kn", 4),  # edges in M, N and K (K steps of 16 over 72), bias, relu
    (256, 128, 104, 0, False, "kn", 4),  # 7 K steps, an odd count, the last one peeled
    (256, 128, 48, 2, False, "kn", 4),  # batched
    (500, 248, 40, 0, False, "nk", 4),  # B stored N x K: 4-byte copies along K, edges
    (250, 248, 72, 0, True, "kn", 2),  # 128-row tiles: edges, bias, relu
    (250, 248, 40, 0, False, "nk", 2),  # 128-row tiles, B stored N x K
], ids=["edges-bias", "stages", "batched", "b-along-k", "edges-bias-128", "b-along-k-128"])
def test_kernels_compute_the_product_in_emulation(device, pipe, used, monkeypatch, mode,
                                                  policy, m, n, k, batch, bias, layout,
                                                  warpgroups):
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("the emulation is checked on PoCL")
    monkeypatch.setattr(wgmma, "MIN_K", 32)  # selection only: short K keeps it quick
    monkeypatch.setitem(wgmma_tf32.WARPGROUPS, policy, (warpgroups,))
    rng = np.random.default_rng(5)
    lead = (batch,) if batch else ()
    a = rng.uniform(-1, 1, (*lead, m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (*lead, k, n)).astype(np.float32)
    prog = product_nk(m, n, k) if layout == "nk" else matmul(m, n, k, batch, bias)
    job = prepare(prog, policy, FEW_UNITS, pipe)
    assert used(job) == {f"wgmma-{policy}": 1}
    assert f"reqd_work_group_size({128 * warpgroups}, 1, 1)" in job.kernel_source(0)
    bias_v = rng.uniform(-1, 1, n).astype(np.float32) if bias else None
    args = [a, np.ascontiguousarray(b.T) if layout == "nk" else b]
    got = run_emulated(device, job, emulated_wgmma(job.kernel_source(0), mode),
                       args + ([bias_v] if bias else []), (*lead, m, n), np.float32)
    check_values(got, a, b, policy, bias_v)


@pytest.mark.skipif(cl is None, reason="needs pyopencl")
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("layout, k", [("kn", 512), ("nk", 480), ("kn", 488)],
                         ids=["whole", "last-shorter", "last-ends-inside-a-step"])
def test_k_split_in_emulation(device, pipe, used, monkeypatch, policy, layout, k):
    """A 256x128 tile on 8 compute units over a long K splits it (8 chunks: as many as the
    units hold, of whole K steps; the last one shorter where they do not tile K, its steps
    counted at run time, a last step K ends inside guarded), each work-group's partial sums
    added by a second kernel. Emulated against float64."""
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("the emulation is checked on PoCL")
    monkeypatch.setattr(wgmma, "MIN_K", 32)  # selection only: short K keeps it quick
    monkeypatch.setattr(wgmma, "SPLIT_K", 256)
    monkeypatch.setitem(wgmma_tf32.WARPGROUPS, policy, (4,))
    rng = np.random.default_rng(6)
    a = rng.uniform(-1, 1, (256, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, 128)).astype(np.float32)
    prog = product_nk(256, 128, k) if layout == "nk" else matmul(256, 128, k)
    target = dataclasses.replace(HOPPER, compute_units=8)
    job = prepare(prog, policy, target, pipe)
    assert used(job) == {f"wgmma-{policy}": 1} and job.kernel_count == 2
    assert job.kernels[0].geometry.global_size == (512 * 8,)
    sources = [emulated_wgmma(job.kernel_source(i), "deferred") if i == 0 else
               job.kernel_source(i) for i in range(job.kernel_count)]
    args = [a, np.ascontiguousarray(b.T) if layout == "nk" else b]
    got = run_kernels(device, job, sources, args, (256, 128), np.float32)
    check_values(got, a, b, policy, None)
    assert ("k_span = min(" in job.kernel_source(0)) == (k % 64 != 0)
    if policy == "3xtf32":  # 128-row tiles keep K whole, and lose to the mma kernels' split
        monkeypatch.setitem(wgmma_tf32.WARPGROUPS, policy, (2,))
        assert used(prepare(prog, policy, target, pipe)) == {"mma-3xtf32": 1}
    a = np.zeros_like(a)  # the last chunk's A loads past K guarded: row 0 never reads row 1
    a[1, 0] = np.nan
    got = run_kernels(device, job, sources, [a, np.ones_like(args[1])], (256, 128), np.float32)
    assert np.all(got[0] == 0) and np.all(np.isnan(got[1]))


@pytest.mark.skipif(cl is None, reason="needs pyopencl")
@pytest.mark.parametrize("cast_a, cast_b, products", [(True, False, 2), (False, True, 2),
                                                      (True, True, 1)])
def test_3xtf32_neither_splits_nor_rounds_operands_exact_in_tf32(device, pipe, used, monkeypatch,
                                                                 cast_a, cast_b, products):
    """An f16 value cast to f32 is exact in TF32: under 3xtf32 its side is neither split nor
    rounded (A's words used as loaded, B's stage words as copied) and the products with its
    zero small part are skipped; both sides so, the products are exact and the sums f32. The
    kernel in emulation against float64, fed the casts' values."""
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("the emulation is checked on PoCL")
    monkeypatch.setattr(wgmma, "MIN_K", 32)  # selection only: short K keeps it quick
    m, n, k = 256, 128, 48
    job = prepare(cast_matmul(m, n, k, cast_a, cast_b), "3xtf32", FEW_UNITS, pipe)
    assert used(job)["wgmma-3xtf32"] == 1
    (kernel,) = [kn for kn in job.kernels if kn.fixed_local_size]
    src = job.kernel_source(job.kernels.index(kernel))
    assert wgmma_ptx.tstep(128, 2, products) in src
    # A's fragments rounded (or split) from a raw value, B's stage words rounded once landed
    assert ("f0_000_f =" in src) == (not cast_a) and ("r0_0_f =" in src) == (not cast_b)
    rng = np.random.default_rng(6)
    a, b = (rng.uniform(-1, 1, shape).astype(np.float16 if cast else np.float32).astype(
        np.float32) for shape, cast in (((m, k), cast_a), ((k, n), cast_b)))
    got = run_emulated(device, SimpleNamespace(kernels=[kernel]), emulated_wgmma(src, "eager"),
                       [a, b], (m, n), np.float32)
    check_values(got, a, b, "3xtf32", None)


@NEEDS_PTXAS
@pytest.mark.parametrize("policy, shape, items", [
    ("tf32", (4096, 2048, 1024), 512), ("3xtf32", (4096, 2048, 1024), 512),
    ("3xtf32", (2048, 1024, 512), 256)], ids=["tf32", "3xtf32", "3xtf32-128-rows"])
def test_expanded_ptx_assembles_for_sm_90a(pipe, tmp_path, policy, shape, items):
    """The generated kernel through clang's PTX (as NVIDIA's compiler would emit it for sm_90,
    markers kept), expanded, assembled by ptxas for sm_90a in the registers its work-group
    size leaves (128 at 512 work-items)."""
    job = prepare(matmul(*shape), policy, HOPPER, pipe)
    assert job.generators() == {f"wgmma-{policy}": 1}
    assert f"reqd_work_group_size({items}, 1, 1)" in job.kernel_source(0)
    log = assembled(job.kernel_source(0), tmp_path, "--maxrregcount",
                    str(min(255, 65536 // items)))
    assert "wgmma" not in log.lower(), log[-2000:]  # no serialization warning


@pytest.mark.parametrize("policy", POLICIES)
def test_k_guards_only_in_a_peeled_last_step_and_edge_rows_wrapped(pipe, policy):
    """K = 1000 ends 8 into step 62: whole steps load and copy without guards, step 62 alone
    has K guards; rows past M = 4000 and columns past N = 2040 read rows and columns from the
    start (never stored), distinct ones, instead of guarding every load
    (accy/kernels/wgmma.py, by_tail and wrapped)."""
    src = prepare(matmul(4000, 2040, 1000), policy, HOPPER, pipe).kernel_source(0)
    ahead = wgmma_tf32.STAGES[policy] - 1  # the step whose copies a step issues
    whole = src.split(f"if (((kt + {ahead}L) < 62L)) {{")[1].split("}")[0]
    assert "[%1], 4;" in whole and "%2" not in whole  # plain copies, no zero-filling
    tail = src.split(f"if (((kt + {ahead}L) == 62L)) {{")[1].split("}")[0]
    assert "[%1], 4, %2;" in tail and "< 1000L" in tail
    assert "% 4000L" in src.split("a_row0 =")[1].split(";")[0]
    assert "% 2040L" in src.split("y_gn0 =")[1].split(";")[0] and "min(" not in src
    assert "ld.global.v4.u32 {%0, %1, %2, %3}, [%4];" in src  # unguarded A loads


def test_tf32_ss_step_expands_to_k8_wgmma_from_two_descriptors():
    ops = ", ".join(f"%f{i}" for i in range(8))
    out = wgmma_ptx.expand(f".version 8.3\n.target sm_90\n\t// @@SSTEPT16_4_2_2 {ops}, "
                           "%rd1, %rd2, %r1\n")
    assert "@@" not in out and "mov.b64 xa, %rd1; mov.b64 xb, %rd2;" in out
    assert out.count("wgmma.mma_async.sync.aligned.m64n16k8.f32.tf32.tf32 {%f0, %f1, %f2, "
                     "%f3, %f4, %f5, %f6, %f7}, xa, xb, p, 1, 1;") == 4
    assert out.count("add.s64 xa, xa, 2; add.s64 xb, xb, 2;") == 3
    for bad in ("SSTEPT16_4_2_2_1", "SSTEP16_4_2_2"):  # a transpose for TF32; none for f16
        with pytest.raises(ValueError, match="unknown"):
            wgmma_ptx.expand(f"\t// @@{bad} {ops}, %rd1, %rd2, %r1\n")


def test_tf32_copies_both_operands_by_tma(pipe, used, encodes, monkeypatch):
    """Under tf32, the probe's TF32-rounding TMA and room for the stages: wgmma_ss's kernel, A
    and B by TFLOAT32 tensor maps (boxes of 32 f32 along K); B stored N x K as it is, B
    stored K x N transposed into scratch by a first kernel (TF32 wgmma reads B only K-major).
    Not under 3xtf32 (its split needs the values in registers, or a kernel before:
    wgmma_ss3, off here), not without the probe's TMA_TF32, not for K below
    wgmma_ss.MIN_K."""
    monkeypatch.setattr(wgmma_ss3, "ENABLED", False)
    job = prepare(product_nk(4096, 4096, 4096), "tf32", TMA_H200, pipe)
    src = job.kernel_source(0)
    assert used(job) == {"wgmma-tf32": 1} and "@@SSTEPT256_4_2_2 " in src
    assert src.count("@@TMA2") == 2 * (3 + 2)  # A's box and B's a step (a tile a group)
    assert ((4096, 4096), (16384,), (32, 128), tma.TF32) in encodes  # A: (K, M)
    assert ((4096, 4096), (16384,), (32, 256), tma.TF32) in encodes  # B: (K, N)
    job = prepare(matmul(4096, 2048, 1024), "tf32", TMA_H200, pipe)
    first, product = job.kernels
    assert [a.name for a in first.args] == ["in1", wgmma_ss.TRANSPOSED_B]
    assert first.args[1].is_output and first.args[1].scratch_elems == 2048 * 1024
    assert wgmma_ss.TRANSPOSED_B in [a.name for a in product.args]
    assert "@@SSTEPT" in job.kernel_source(1) and "scratch_bt" in job.kernel_source(1)
    no_rounding = dataclasses.replace(TMA_H200, tensor_cores=tuple(
        c for c in TMA_H200.tensor_cores if c != TMA_TF32))
    for prog, policy, target in ((product_nk(4096, 4096, 4096), "3xtf32", TMA_H200),
                                 (product_nk(4096, 4096, 4096), "tf32", no_rounding)):
        src = prepare(prog, policy, target, pipe).kernel_source(0)
        assert "@@SSTEPT" not in src and "@@TSTEP" in src
    # K below MIN_K: not taken (TF32 kernels do not walk tiles unless forced: they measured
    # no faster doing so)
    assert "@@SSTEPT" not in prepare(product_nk(4096, 4096, 128), "tf32", TMA_H200,
                                     pipe).kernel_source(0)


@pytest.mark.skipif(cl is None, reason="needs pyopencl")
@pytest.mark.parametrize("m, n, k, batch, layout, form", [
    (250, 488, 200, 0, "nk", (2, 256, 4)),  # 128x256 tiles, edges in M, N and K (7 steps)
    (250, 248, 420, 0, "nk", (2, 128, 3)),  # 14 K steps through three stages, K tail
    (250, 248, 100, 0, "kn", (2, 128, 3)),  # B along N: transposed into scratch first
    (250, 248, 72, 2, "kn", (2, 128, 3)),  # batched, B along N, edges
], ids=["wide", "three-stages", "b-along-n", "batched-b-along-n"])
def test_tf32_ss_kernel_computes_the_product_in_emulation(device, pipe, used, monkeypatch,
                                                          encodes, m, n, k, batch, layout,
                                                          form):
    """wgmma_ss under tf32: the copies round each f32 to TF32 (emulated: to nearest), the
    products of the rounded values summed in f32, within the tf32 bound of float64; B along
    N through transpose_b's kernel first."""
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("the emulation is checked on PoCL")
    monkeypatch.setattr(wgmma, "MIN_K", 32)
    monkeypatch.setitem(wgmma_ss.MIN_K, tma.TF32, 32)  # short K keeps the emulation quick
    monkeypatch.setattr(wgmma_ss, "FORMS", (form,))
    monkeypatch.setitem(wgmma_ss.RATES, tma.TF32, {form: (2.0, 2.0)})
    prog = product_nk(m, n, k) if layout == "nk" else matmul(m, n, k, batch)
    job = prepare(prog, "tf32", dataclasses.replace(TMA_H200, compute_units=1), pipe)
    assert used(job) == {"wgmma-tf32": 1} and "@@SSTEPT" in job.kernel_source(len(job.kernels) - 1)
    assert len(job.kernels) == (2 if layout == "kn" else 1)
    rng = np.random.default_rng(8)
    lead = (batch,) if batch else ()
    a = rng.uniform(-1, 1, (*lead, m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (*lead, k, n)).astype(np.float32)
    got = run_kernels(device, job, [emulated_wgmma(job.kernel_source(i), "eager")
                                    for i in range(len(job.kernels))],
                      [a, np.ascontiguousarray(b.T) if layout == "nk" else b], (*lead, m, n),
                      np.float32)
    check_values(got, a, b, "tf32")
    # the operands were rounded: truncating them instead is outside half the bound
    trunc = [(x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32) for x in (a, b)]
    assert not np.allclose(got, trunc[0].astype(np.float64) @ trunc[1], rtol=0, atol=1e-5)


@pytest.mark.skipif(cl is None, reason="needs pyopencl")
def test_tma_tf32_probe_expects_rounding_to_nearest(device, encodes):
    """The TFLOAT32 TMA probe's check (``tma_tf32_ok``) passes the emulated copy (rounding to
    nearest) and fails a truncating one."""
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("the emulation is checked on PoCL")
    source = emulated_wgmma(one_line(tensor_cores.tma_tf32_probe_source()), "eager")
    y = tensor_cores.tma_tf32_probe_case()
    got = tensor_cores.run_isolated(device.device, source, "accy_tma_tf32_probe", [y],
                                    np.zeros(256, np.uint32), items=128, scratch=tma.MAP_BYTES)
    assert tensor_cores.tma_tf32_ok(y, got)
    truncating = source.replace("+ 0x1000u", "+ 0x0u")
    assert truncating != source
    got = tensor_cores.run_isolated(device.device, truncating, "accy_tma_tf32_probe", [y],
                                    np.zeros(256, np.uint32), items=128, scratch=tma.MAP_BYTES)
    assert not tensor_cores.tma_tf32_ok(y, got)


@NEEDS_PTXAS
@pytest.mark.parametrize("layout", ["nk", "kn"])
def test_tf32_ss_kernels_assemble_for_sm_90a_without_spills(pipe, tmp_path, encodes, layout):
    """wgmma_ss's TF32 kernel (and, B along N, the transposing kernel before it) through
    clang's PTX, expanded, assembled by ptxas for sm_90a."""
    prog = product_nk(2048, 2048, 1024) if layout == "nk" else matmul(2048, 2048, 1024)
    job = prepare(prog, "tf32", TMA_H200, pipe)
    for i in range(len(job.kernels)):
        log = assembled(job.kernel_source(i), tmp_path)
        assert "0 bytes spill stores" in log, log[-2000:]
