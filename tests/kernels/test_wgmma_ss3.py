"""wgmma-3xtf32 with both operands split first (accy/kernels/wgmma_ss3.py): the three-run TF32
step marker, selection, the split kernel and the product in emulation against float64 (the
3xtf32 bound, which a kernel that dropped its small products exceeds), ptxas."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from mma_emulation import emulated_wgmma, run_kernels
from test_mma_generator import matmul
from test_mma_generator import prepared as prepare
from test_mma_precision import cast_matmul
from test_wgmma import NEEDS_PTXAS, assembled
from test_wgmma_tf32 import TMA_H200, check_values, product_nk

try:
    import pyopencl as cl
except ImportError:  # pragma: no cover
    cl = None

import accy
from accy.builder import einsum, trace
from accy.ir.types import DType, TensorType
from accy.kernels import tma, wgmma_ptx, wgmma_ss3
from accy.target import TMA_TF32

MARKER = "@@SSTEPT128_4_2_2x3 "


@pytest.fixture
def enabled(monkeypatch):
    monkeypatch.setattr(wgmma_ss3, "ENABLED", True)


def test_three_run_step_expands_to_one_fenced_block_of_twelve_wgmma():
    ops = ", ".join(f"%f{i}" for i in range(8))
    out = wgmma_ptx.expand(f".version 8.3\n.target sm_90\n\t// @@SSTEPT16_4_2_2x3 {ops}, "
                           "%rd1, %rd2, %rd3, %rd4, %rd5, %rd6, %r1\n")
    assert "@@" not in out and out.count("wgmma.fence.sync.aligned;") == 1
    assert out.count("wgmma.commit_group.sync.aligned;") == 1
    assert out.count("wgmma.mma_async.sync.aligned.m64n16k8.f32.tf32.tf32 {%f0, %f1, %f2, "
                     "%f3, %f4, %f5, %f6, %f7}, xa, xb, p, 1, 1;") == 12
    runs = [f"mov.b64 xa, %rd{2 * j + 1}; mov.b64 xb, %rd{2 * j + 2};" for j in range(3)]
    assert all(r in out for r in runs) and out.index(runs[0]) < out.index(runs[1]) < \
        out.index(runs[2])
    with pytest.raises(ValueError, match="operands"):  # two pairs for three runs
        wgmma_ptx.expand(f"\t// @@SSTEPT16_4_2_2x3 {ops}, %rd1, %rd2, %rd3, %rd4, %r1\n")


def test_taken_under_3xtf32_where_the_probe_rounds_by_tma(pipe, used, encodes, monkeypatch):
    """The 1000x1030x520 product (B along N) is a split kernel (A's 32x32 blocks, then B's)
    and the product copying four boxes a stage from the two split maps, in the three-run
    step. Not with ``ENABLED`` off, not under tf32, not without the probe's TMA_TF32, not
    where an operand is an f16 cast (exact in TF32: the register forms skip its small
    products), not for K below ``MIN_K``, not where its 128x128 tiles fill too few units."""
    def sources(job) -> str:
        return "".join(job.kernel_source(i) for i in range(len(job.kernels)))

    prog = matmul(1000, 1030, 520)
    job = prepare(prog, "3xtf32", TMA_H200, pipe)
    assert used(job) == {"wgmma-3xtf32": 1} and len(job.kernels) == 2
    split, product = job.kernels
    assert [a.name for a in split.args] == ["in0", "in1", *wgmma_ss3.SPLIT.values()]
    assert split.args[2].scratch_elems == 2 * 1000 * 520  # big and small parts, K contiguous
    assert split.geometry.global_size == (256 * (17 * 32 + 17 * 33),)
    src = job.kernel_source(1)
    assert MARKER in src and "@@TMA2" not in src  # (K, rows, part): four boxes a stage
    assert src.count("@@TMA3") % 4 == 0 and src.count("@@TMAP") == 2
    assert ((520, 1030, 2), (2080, 2142400), (32, 128, 1), tma.TF32) in encodes  # B's parts
    assert MARKER not in sources(prepare(prog, "tf32", TMA_H200, pipe))
    no_rounding = dataclasses.replace(TMA_H200, tensor_cores=tuple(
        c for c in TMA_H200.tensor_cores if c != TMA_TF32))
    assert MARKER not in sources(prepare(prog, "3xtf32", no_rounding, pipe))
    cast = prepare(cast_matmul(1000, 1030, 520, True, False), "3xtf32", TMA_H200, pipe)
    assert MARKER not in sources(cast)
    for short in (matmul(2000, 2000, 280), matmul(512, 512, 512)):  # short K, 16 tiles
        assert MARKER not in sources(prepare(short, "3xtf32", TMA_H200, pipe))
    monkeypatch.setattr(wgmma_ss3, "ENABLED", False)
    assert MARKER not in sources(prepare(prog, "3xtf32", TMA_H200, pipe))


@pytest.mark.skipif(cl is None, reason="needs pyopencl")
@pytest.mark.parametrize("m, n, k, batch, layout", [
    (250, 248, 200, 0, "kn"),  # B along N: transposed by the split; edges in M, N; 7 steps
    (250, 248, 150, 0, "nk"),  # B stored N x K; K not a multiple of 4 (rows padded to 152)
    (120, 120, 72, 2, "kn"),  # batched
    (250, 248, 96, 0, "bias"),  # B along N, a bias and relu epilogue
    (250, 250, 64, 0, "gram"),  # x @ x.T: one argument split as both operands
], ids=["b-along-n", "b-along-k-odd-k", "batched", "epilogue", "gram"])
def test_split_and_product_compute_3xtf32_in_emulation(device, pipe, used, encodes, enabled,
                                                       monkeypatch, m, n, k, batch, layout):
    """The split kernel (its roundings as the mma kernels' emulation computes them) and the
    product (TMA copies rounding to TF32 as the probe found, three runs a k8 step) within the
    3xtf32 bound of float64, which TF32 products alone exceed."""
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("the emulation is checked on PoCL")
    monkeypatch.setattr(wgmma_ss3, "MIN_K", 32)  # short K keeps the emulation quick
    prog = (product_nk(m, n, k) if layout == "nk" else gram(m, k) if layout == "gram" else
            matmul(m, n, k, batch, layout == "bias"))
    job = prepare(prog, "3xtf32", dataclasses.replace(TMA_H200, compute_units=1), pipe)
    assert used(job) == {"wgmma-3xtf32": 1} and len(job.kernels) == 2
    assert MARKER in job.kernel_source(1)
    rng = np.random.default_rng(9)
    lead = (batch,) if batch else ()
    a = rng.uniform(-1, 1, (*lead, m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (*lead, k, n)).astype(np.float32) if layout != "gram" else a.T
    args = [a, np.ascontiguousarray(np.swapaxes(b, -1, -2)) if layout == "nk" else b]
    args = args[:1] if layout == "gram" else args
    bias = rng.uniform(-1, 1, n).astype(np.float32) if layout == "bias" else None
    sources = [emulated_wgmma(job.kernel_source(i), "eager") for i in range(2)]
    got = run_kernels(device, job, sources, args + ([bias] if layout == "bias" else []),
                      (*lead, m, n), np.float32)
    check_values(got, a, b, "3xtf32", bias)
    tf32 = [(x.view(np.uint32) + np.uint32(0x1000) & np.uint32(0xFFFFE000)).view(np.float32)
            for x in (a, b)]
    with pytest.raises(AssertionError):  # TF32 products alone: outside the bound
        check_values(tf32[0].astype(np.float64) @ tf32[1], a, b, "3xtf32")


def gram(m: int, k: int) -> accy.Program:
    """``X @ X.T`` in f32."""
    return trace(lambda x: einsum("ik,jk->ij", x, x), TensorType((m, k), DType.f32), name="g")


@NEEDS_PTXAS
@pytest.mark.parametrize("layout", ["kn", "nk"])
def test_kernels_assemble_for_sm_90a_without_spills(pipe, tmp_path, encodes, enabled, layout):
    """Both kernels through clang's PTX, expanded, assembled by ptxas for sm_90a: no spills,
    no wgmma serialized."""
    prog = product_nk(1000, 1030, 520) if layout == "nk" else matmul(1000, 1030, 520)
    job = prepare(prog, "3xtf32", TMA_H200, pipe)
    assert len(job.kernels) == 2
    for i in range(2):
        log = assembled(job.kernel_source(i), tmp_path)
        assert "0 bytes spill stores" in log and "wgmma" not in log.lower(), log[-2000:]


def test_through_traced_values(pipe, used, encodes, enabled):
    """``x @ w`` traced from the front end, planned for the probed H200, takes the form."""
    prog = trace(lambda x, w: einsum("mk,kn->mn", x, w), TensorType((1000, 520), DType.f32),
                 TensorType((520, 1030), DType.f32), name="f")
    job = accy.prepare(prog, pipe("precision=3xtf32"), target=TMA_H200)
    assert used(job) == {"wgmma-3xtf32": 1} and MARKER in job.kernel_source(1)
