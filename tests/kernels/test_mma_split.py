"""K split over work-groups in the tensor-core kernels: where the tiles make at most 1.5 waves
of work-groups (``mma_plan.SPLIT_WAVES``) over a long K, each group sums one chunk of its
tile's K into scratch memory and a second kernel (the tiled contraction's ``Partials``; or
with ``split_k.FUSED``, where few partial sums are read, the last of a tile's groups to
finish) adds the chunks in a fixed order and applies the epilogue. Checked on PoCL with the
PTX emulated, both ways, to the bit."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from mma_emulation import emulated_async, product_sources, run_kernels
from test_mma_generator import NV, emulated, matmul, prepared
from test_mma_pipeline import ASYNC, matmul16

from accy.kernels import split_k
from accy.kernels.mma_plan import MmaTiles, parse_tiles

try:
    import pyopencl as cl
except ImportError:  # the emulation test skips without it
    cl = None


@pytest.fixture
def two_kernels(monkeypatch):
    """K split always ends in the second kernel (split_k.FUSED off)."""
    monkeypatch.setattr(split_k, "FUSED", False)


def both_ways(monkeypatch, run) -> np.ndarray:
    """``run(fused)``'s output with K split ending in the product kernel and in a second
    kernel: the same to the bit (the chunks summed in the same order), returned once."""
    outs = []
    for fuse in (True, False):
        monkeypatch.setattr(split_k, "FUSED", fuse)
        outs.append(run(fuse))
    np.testing.assert_array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))
    return outs[0]


def test_a_tiles_last_group_sums_the_chunks_where_they_are_few(pipe, used, monkeypatch):
    """70x66 over K = 2600 in ten chunks: one kernel whose groups count themselves in a
    counter a tile, the last summing the chunks; 256x256 over K = 65536 in 66 chunks of
    128x64 tiles (2 MiB of partial sums a tile): the second kernel sums them."""
    monkeypatch.setattr(split_k, "FUSED", True)
    job = prepared(matmul(70, 66, 2600, epilogue=True), "3xtf32",
                   dataclasses.replace(NV, compute_units=132), pipe)
    (kernel,) = job.kernels
    assert kernel.entry == "einsum_add_relu"
    scratch = sorted((a.name, a.dtype.value, a.scratch_elems) for a in kernel.args
                     if a.is_scratch)
    tiles = kernel.geometry.global_size[0] // kernel.geometry.local_size[0] // 10
    assert scratch == [("scratch0", "f32", 10 * 70 * 66), ("scratch0_count", "i32", tiles)]
    src = job.kernel_source(0)
    assert "int fx_old = atomic_add(&scratch0_count[grp_t], ((int)1));" in src
    assert src.count('asm volatile("fence.acq_rel.gpu;" ::: "memory");') == 3
    assert {a.name for a in kernel.args if a.is_output and not a.is_scratch} == {"out0"}
    assert len(prepared(matmul(256, 256, 65536), "3xtf32", NV, pipe).kernels) == 2


@pytest.mark.usefixtures("two_kernels")
@pytest.mark.parametrize("precision", ["tf32", "3xtf32"])
def test_long_k_on_few_tiles_splits_k_over_work_groups(precision, pipe, used):
    # 256x256: 8 tiles of 128x64 (or 4 of 128x128, 16 of 64x64) on 132 units: K in 66
    # chunks of 1008 (the last 1016): 528 groups, four full waves (as many as the units hold at
    # once), at 128x64's rate
    job = prepared(matmul(256, 256, 65536), precision, NV, pipe)
    assert used(job) == {f"mma-{precision}": 1}
    first, second = job.kernels
    assert first.entry.endswith("_partials") and not second.entry.endswith("_partials")
    assert first.geometry.global_size == (8 * 66 * 128,)
    (scratch,) = [a for a in first.args if a.is_scratch]
    assert scratch.scratch_elems == 66 * 256 * 256
    assert "k0 = (chunk * 1008L)" in job.kernel_source(0)
    # 192x192: no 128x128 tile pads it little enough; 9 tiles of 64x64 in 58 chunks: 522
    # groups, four waves nearly full (16 chunks made a wave of 132 and a second of 12)
    job = prepared(matmul(192, 192, 65536), precision, NV, pipe)
    assert job.kernels[0].geometry.global_size == (9 * 58 * 128,)
    # 128 tiles of 128x64 with K split in four fill four waves as well as 256 of 64x64 fill
    # two, at a higher rate (papers/kernels.md, "Twenty-ninth session"): split; one
    # kernel where the tiles fill the units without a split; a K of 1536 over 8 tiles in 4
    # chunks of 384 (of at least MIN_SPLIT_K, 256), and one shorter than two chunks never
    assert len(prepared(matmul(1024, 1024, 4096), precision, NV, pipe).kernels) == 2
    assert len(prepared(matmul(2048, 2048, 4096), precision, NV, pipe).kernels) == 1
    assert "k0 = (chunk * 384L)" in prepared(matmul(256, 256, 1536), precision, NV,
                                               pipe).kernel_source(0)
    assert len(prepared(matmul(256, 256, 500), precision, NV, pipe).kernels) == 1


@pytest.mark.usefixtures("two_kernels")
def test_tiles_of_up_to_one_and_a_half_waves_split(pipe, used):
    """On 132 units, 145 tiles of 64x32 (1808x154) walked K whole, one or two a unit: they
    split in three (435 groups; H100, "Forty-third session": 48 products held out, 45
    faster, 1.26x); 1280x1280's 200 tiles of 128x64, 1.52 waves, do not. 1152x1152 splits
    its 162 tiles of 128x64 in three rather than run 648 of 64x32 unsplit."""
    def groups(m: int, n: int) -> list[int]:
        job = prepared(matmul(m, n, 4096), "3xtf32", NV, pipe)
        assert used(job) == {"mma-3xtf32": 1}
        return [k.geometry.global_size[0] // k.geometry.local_size[0] for k in job.kernels]

    assert groups(1808, 154)[0] == 435
    assert groups(1280, 1280) == [200]
    assert groups(1152, 1152)[0] == 486


@pytest.mark.usefixtures("two_kernels")
def test_a_short_k_is_walked_unsplit(pipe, used):
    """K splits only over SPLIT_BYTES (2 KiB) of K a row or more (``long_walk``): a shorter
    walk, split, saves less than the partial sums' kernel costs. f16 (64x64 tiles, 84 of
    them on 132 units; skinny 32x128 tiles, 3, and 32x64 below K = 1024) from K = 1024, not
    below; 16-row skinny tiles (K steps of 64) too; f32 (K steps of 16) from 512, as two
    chunks of MIN_SPLIT_K allow."""
    def kernels(m: int, n: int, k: int) -> int:
        job = prepared(matmul16(m, n, k), "ieee", ASYNC, pipe)
        assert used(job) == {"mma-f16": 1}
        return len(job.kernels)

    assert (kernels(360, 848, 1024), kernels(360, 848, 1022), kernels(360, 848, 600)) == (2, 1, 1)
    assert (kernels(31, 360, 1024), kernels(31, 360, 536)) == (2, 1)
    assert (kernels(16, 2000, 1200), kernels(16, 2000, 1000)) == (2, 1)
    assert len(prepared(matmul(256, 256, 512), "3xtf32", NV, pipe).kernels) == 2


def test_split_is_part_of_the_tiles_text():
    t = parse_tiles("64x64x16:2x2:3:split=4")
    assert (t.split, t.stages) == (4, 3) and t.text() == "64x64x16:2x2:3:split=4"
    assert parse_tiles("64x64x16:2x2:2:vector:split=2").loads == "vector"
    for bad in ("64x64x16:2x2:2:split=0", "64x64x16:2x2:2:split=2:vector"):
        with pytest.raises(ValueError):
            parse_tiles(bad)
    with pytest.raises(ValueError):
        MmaTiles(64, 64, 16, 2, 2, split=0).check()


@pytest.mark.skipif(cl is None, reason="needs pyopencl")
@pytest.mark.parametrize("precision", ["tf32", "3xtf32"])
def test_split_kernels_compute_the_product_in_emulation(device, pipe, used, precision,
                                                        monkeypatch):
    """70x66 (edges in M and N) over K = 2600 on 132 units: ten chunks of 272, the last
    overhanging K (zeros); the bias + relu epilogue runs where the chunks are summed."""
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("the emulation is checked on PoCL")
    m, n, k = 70, 66, 2600
    rng = np.random.default_rng(2)
    a, b = (rng.uniform(-1, 1, s).astype(np.float32) for s in ((m, k), (k, n)))
    bias = rng.uniform(-1, 1, n).astype(np.float32)

    def run(fused: bool) -> np.ndarray:
        job = prepared(matmul(m, n, k, epilogue=True), precision,
                       dataclasses.replace(NV, compute_units=132), pipe)
        assert used(job) == {f"mma-{precision}": 1} and len(job.kernels) == 2 - fused
        (scratch, *_) = [a for a in job.kernels[0].args if a.is_scratch]
        assert scratch.scratch_elems == 10 * m * n
        assert "k0 = (chunk * 272L)" in job.kernel_source(0)
        return run_kernels(device, job, product_sources(job, emulated), [a, b, bias], (m, n),
                           np.float32)

    out = both_ways(monkeypatch, run)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    tol = 2e-3 * np.sqrt(k) if precision == "tf32" else 1e-6 * k  # TF32: operands rounded
    np.testing.assert_allclose(out, np.maximum(exact + bias, 0), rtol=0, atol=tol)


@pytest.mark.parametrize("mode", ["eager", "deferred"])
def test_split_cp_async_kernels_of_128x64_tiles_compute_the_product_in_emulation(
        device, pipe, used, experiment_script, mode):
    """The cp.async pipeline with K split: 200x100 (edges in M and N) over K = 2601 in three
    chunks of 880, the last ending inside its last K step (its guarded issue), the others'
    steps issued from the hoisted addresses offset by the chunk's K; 128x64 tiles (64
    elements a work-item: a second kernel sums the chunks)."""
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("the emulation is checked on PoCL")
    from test_mma_pipeline import ASYNC

    m, n, k = 200, 100, 2601
    job = prepared(matmul(m, n, k, epilogue=True), "3xtf32", ASYNC, pipe)
    job = experiment_script("bench_mma").with_mma_tiles(
        job, parse_tiles("128x64x16:2x2:3:split=3"), "3xtf32")
    first, second = job.kernels
    assert "k0 = (chunk * 880L)" in job.kernel_source(0) and "x_ko" in job.kernel_source(0)
    rng = np.random.default_rng(4)
    a, b = (rng.uniform(-1, 1, s).astype(np.float32) for s in ((m, k), (k, n)))
    bias = rng.uniform(-1, 1, n).astype(np.float32)
    out = run_kernels(device, job, product_sources(job, lambda s: emulated_async(s, mode)),
                      [a, b, bias], (m, n), np.float32)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(out, np.maximum(exact + bias, 0), rtol=0, atol=1e-6 * k)


def test_tiles_padding_the_product_much_are_passed_over(pipe, used):
    """Attention's P V: N = 64 (the head dimension) would leave half of each 128x128 tile
    empty; 128x64 tiles compute no padding (and still fill the units)."""
    job = prepared(matmul(2048, 64, 2048, batch=16), "3xtf32", NV, pipe)
    assert used(job) == {"mma-3xtf32": 1}
    assert job.kernels[0].geometry.global_size == (16 * 16 * 128,)  # 128x64 tiles, 4 warps
    # N = 72: every tiling pads over 1.25x; the least padding, 64x32 tiles (96 columns)
    job = prepared(matmul(2048, 72, 2048, batch=16), "3xtf32", NV, pipe)
    assert job.kernels[0].geometry.global_size == (16 * 32 * 3 * 128,)
    wide = prepared(matmul(2048, 128, 2048, batch=16), "3xtf32", NV, pipe)
    assert wide.kernels[0].geometry.global_size == (16 * 16 * 2 * 128,)  # 128x64 tiles


@pytest.mark.usefixtures("two_kernels")
def test_bench_mma_rebuilds_a_job_with_split_tiles(pipe, used, experiment_script):
    """``bench_mma --tiles ...:split=N``: the rebuilt job holds both kernels (the chunks' and
    the summing one), its scratch sized for N chunks."""
    job = prepared(matmul(128, 128, 400), "tf32", NV, pipe)
    assert len(job.kernels) == 1  # a K shorter than two chunks of MIN_SPLIT_K: no split
    job = experiment_script("bench_mma").with_mma_tiles(
        job, parse_tiles("64x64x16:2x2:2:split=4"), "tf32")
    first, second = job.kernels
    (scratch,) = [a for a in first.args if a.is_scratch]
    assert scratch.scratch_elems == 4 * 128 * 128
    assert "k0 = (chunk * 112L)" in job.kernel_source(0)  # 400 / 4, in whole K steps of 16
    assert [a.name for a in second.args if a.is_scratch] == [scratch.name]  # sums the chunks


@pytest.mark.usefixtures("two_kernels")
def test_bench_mma_rebuilds_a_split_job_once(pipe, used, experiment_script):
    """A job the heuristic split already has two kernels of one work item: rebuilt with other
    tiles it has the new tiles' kernels only (it had both pairs, every product computed twice)."""
    job = prepared(matmul(256, 256, 65536), "3xtf32", NV, pipe)
    assert len(job.kernels) == 2 and len({k.work_item for k in job.kernels}) == 1
    bench = experiment_script("bench_mma")
    split = bench.with_mma_tiles(job, parse_tiles("64x64x16:2x2:2:split=8"), "3xtf32")
    assert [k.entry for k in split.kernels] == ["einsum_kernel_partials", "einsum_kernel"]
    whole = bench.with_mma_tiles(job, parse_tiles("64x64x16:2x2:2"), "3xtf32")
    assert [k.entry for k in whole.kernels] == ["einsum_kernel"]
