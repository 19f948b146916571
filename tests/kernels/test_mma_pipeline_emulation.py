"""The mma generators' whole kernels run on PoCL with their PTX replaced by C
(mma_emulation.py): the cp.async pipeline (copies "eager" and "deferred") under tf32 and
3xtf32, f16 tensor cores, the probes' kernels against their expected results, and
``bench_mma.py`` on a device without tensor cores. The formulas, selection and sources are
test_mma_pipeline.py's."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from mma_emulation import (
    check_f16_product,
    emulated_async,
    one_line,
    product_sources,
    run_emulated,
)
from test_mma_generator import matmul, tf32_round
from test_mma_generator import prepared as prepare
from test_mma_pipeline import ASYNC, matmul16

from accy.backends.opencl import tensor_cores
from accy.kernels import mma_skinny, split_k
from accy.kernels.mma_plan import parse_tiles

try:
    import pyopencl as cl
except ImportError:  # the emulation tests skip without it
    cl = None

needs_pocl = pytest.mark.skipif(cl is None, reason="needs pyopencl")


@needs_pocl
@pytest.mark.parametrize("mode", ["eager", "deferred"])
@pytest.mark.parametrize("m, n, k, batch, bias, precision, tiles", [
    (130, 96, 40, 0, True, "tf32", None),  # 3 stages of 64x64, edges in M and K, epilogue
    (64, 72, 36, 2, False, "3xtf32", "32x16x8:1x1:2"),  # batched, N edge, one warp
    (96, 64, 200, 0, False, "tf32", "64x64x16:2x2:4"),  # 13 K steps through 4 stages
    (72, 64, 96, 0, False, "3xtf32", "64x64x8:2x2:3"),  # K steps of 8
    (66, 70, 40, 2, True, "3xtf32", "32x16x8:1x1:3"),  # B rows of 70: 8-byte copies, edges
    (64, 65, 33, 0, False, "tf32", None),  # odd N and K: 4-byte copies of both sides
    # 3xtf32 split once in local memory (small parts in a second tile), edges in M and K
    (130, 96, 40, 0, True, "3xtf32", "64x32x16:2x2:3:round=tile"),
    (96, 64, 48, 2, False, "tf32", "64x64x16:2x2:3:round=tile"),  # tf32 rounded in place
    # split once where rows are copied 8 or 4 bytes at a time: each chunk of 2 or 1
    (66, 70, 40, 2, True, "3xtf32", "32x16x8:1x1:3:round=tile"),
    (64, 65, 33, 0, False, "3xtf32", "64x32x16:2x2:3:round=tile"),
    (64, 65, 33, 0, False, "tf32", "64x64x16:2x2:2:round=tile"),
    (20, 24, 100, 0, True, "3xtf32", None),  # a small product (mma_plan.SMALL_MN): edges
], ids=["bias-tf32-3", "batched-3xtf32-2", "tf32-4", "3xtf32-bk8-3", "8-byte", "4-byte",
        "3xtf32-tile-split", "tf32-tile-round", "8-byte-split", "4-byte-split",
        "4-byte-round", "small"])
def test_pipelined_kernels_compute_the_product_in_emulation(device, pipe, used, experiment_script,
                                                            mode, m, n, k, batch, bias,
                                                            precision, tiles):
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("the emulation is checked on PoCL")
    job = prepare(matmul(m, n, k, batch, bias), precision, ASYNC, pipe)
    assert used(job) == {f"mma-{precision}": 1}
    if tiles is not None:
        job = experiment_script("bench_mma").with_mma_tiles(job, parse_tiles(tiles), precision)
    source = job.kernel_source(0)
    assert "cp.async" in source and (
        tiles is None or f"wait_group {int(tiles.split(':')[2]) - 2};" in source)
    # split in local memory: the small parts' tiles
    assert ("round=tile" in (tiles or "") and precision == "3xtf32") == ("b_small" in source)
    rng = np.random.default_rng(7)
    lead = (batch,) if batch else ()
    a = rng.uniform(-1, 1, (*lead, m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (*lead, k, n)).astype(np.float32)
    args = [a, b] + ([rng.uniform(-1, 1, n).astype(np.float32)] if bias else [])
    got = run_emulated(device, job, emulated_async(source, mode), args, (*lead, m, n),
                       np.float32)
    want = (tf32_round(a).astype(np.float64) @ tf32_round(b).astype(np.float64)
            if precision == "tf32" else a.astype(np.float64) @ b.astype(np.float64))
    if bias:
        want = np.maximum(want + args[2], 0.0)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * k)


@needs_pocl
@pytest.mark.parametrize("mode", ["eager", "deferred"])
@pytest.mark.parametrize("m, n, k, batch, bias, tiles", [
    (130, 72, 48, 0, True, None),  # edges in M, N and K (3 steps of 32 over 48), epilogue
    (64, 64, 64, 3, False, None),  # batched
    (80, 64, 112, 0, False, "64x64x16:2x2:4"),  # 7 steps through 4 stages
    # staged stores: packed halves a word at a time (N = 70), 8 bytes (N = 100); one warp row
    # a pass; 128x128 tiles, four passes through both tiles in turn
    (64, 70, 32, 0, True, None),
    (96, 100, 32, 2, False, None),
    (70, 64, 48, 0, True, "64x64x16:2x2:2:vector"),
    (200, 136, 64, 0, True, "128x128x32:2x2:2:vector"),
    (12, 100, 40, 0, True, None),  # a small product (mma_plan.SMALL_MN): 12 of a tile's rows
], ids=["bias", "batched", "4-stages", "word-stores", "8-byte-stores", "warp-row-passes",
        "128x128", "small"])
def test_f16_kernels_compute_the_product_in_emulation(device, pipe, used, experiment_script, mode,
                                                      m, n, k, batch, bias, tiles):
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("the emulation is checked on PoCL")
    job = prepare(matmul16(m, n, k, batch, bias), "ieee", ASYNC, pipe)
    assert used(job) == {"mma-f16": 1}
    if tiles is not None:
        job = experiment_script("bench_mma").with_mma_tiles(job, parse_tiles(tiles), "f16")
    check_f16_product(device, job, emulated_async(job.kernel_source(0), mode), m, n, k, batch,
                      bias, seed=5)


@needs_pocl
@pytest.mark.parametrize("mode", ["eager", "deferred"])
def test_cp_async_probe_expects_what_its_kernel_copies(device, mode):
    src, want = tensor_cores.cp_async_probe_case()
    got = tensor_cores.run_isolated(
        device.device, emulated_async(one_line(tensor_cores.CP_ASYNC_PROBE_SOURCE), mode),
        "accy_cp_async_probe", [src], np.zeros(256, np.float32))
    np.testing.assert_array_equal(got, want)
    assert (want[0:4] == 0).all() and (want[4:8] == src[132:136]).all()


@needs_pocl
def test_f16_probe_expects_what_its_kernel_computes(device):
    a, b, want = tensor_cores.mma_f16_probe_case()
    got = tensor_cores.run_isolated(
        device.device, emulated_async(one_line(tensor_cores.MMA_F16_PROBE_SOURCE), "eager"),
        "accy_mma_f16_probe", [a.view(np.uint32), b.view(np.uint16)], np.zeros(128, np.float32))
    np.testing.assert_array_equal(got.reshape(16, 8), want)


def test_the_probe_lists_nothing_on_pocl(device):
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("PoCL only")
    assert device.info.tensor_cores == ()


def test_bench_mma_sweeps_stages_and_f16(device, experiment_script, tmp_path):
    """``--stages`` and ``--dtypes``: on PoCL the cases run on the other generators; forced
    tensor cores give each tile at each stage count, f16 under one policy, every failure with
    its build-log line (PoCL's compiler has no PTX asm)."""
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("the smoke run is on PoCL")
    bench = experiment_script("bench_mma")
    out = tmp_path / "m.json"
    common = ["--device", "pocl", "--cases", "64x64x32", "--dtypes", "f32,f16", "--repeat",
              "1", "--no-torch", "--out", str(out)]
    assert bench.main(common + ["--policies", "ieee"]) == 0
    data = json.loads(out.read_text())
    assert [r["case"] for r in data["results"]] == ["64x64x32", "64x64x32.f16"]
    assert all(r["status"] == "ok" for r in data["results"])
    rc = bench.main(common + ["--policies", "tf32,3xtf32", "--stages", "2,4",
                              "--force-tensor-cores"])
    data = json.loads(out.read_text())
    assert rc == 1 and data["stages"] == [2, 4] and data["dtypes"] == ["f32", "f16"]
    tiles = [(r["case"], r["precision"], r.get("tiles")) for r in data["results"]]
    assert tiles[:5] == [("64x64x32", "tf32", None), ("64x64x32", "tf32", "128x128x16:2x2:2"),
                         ("64x64x32", "tf32", "128x128x16:2x2:4"),
                         ("64x64x32", "tf32", "64x64x16:2x2:2"),
                         ("64x64x32", "tf32", "64x64x16:2x2:4")]
    f16 = [t for t in tiles if t[0].endswith(".f16")]
    assert {p for _, p, _ in f16} == {"tf32"} and ("64x64x32.f16", "tf32",
                                                   "128x128x32:2x2:4") in f16
    assert all(r["status"] == "failed" and "asm" in r["error"] for r in data["results"])
    assert {"mma-f16"} == set(data["results"][-1]["generators"])
    with pytest.raises(SystemExit):
        bench.main(common + ["--dtypes", "f64"])


@needs_pocl
@pytest.mark.parametrize("m, n, k, b_transposed, bias, rows", [
    (16, 700, 3000, False, True, 16),  # 16 x 128 tiles, K steps of 64, K split, epilogue
    (5, 260, 300, False, False, 16),  # a side padded to 16, edges along N; 16 x 64 (short K)
    (20, 300, 512, True, True, 32),  # x @ W.T: B along K; 32 x 64 tiles (short K), ldmatrix
    (300, 12, 1024, False, False, 16),  # N short: 128 x 16 tiles
    (300, 12, 500, False, True, 16),  # and over a short K: 64 x 16 tiles
    (400, 30, 200, True, False, 32),  # N short with B along K: 64 x 32 tiles (short K)
    (8, 200, 2104, True, True, 16),  # B along K: 16 x 64 tiles (ldmatrix), K split
    (160, 8, 300, True, False, 16),  # the mirror: 64 x 16 tiles
], ids=["m16-split", "m5", "m20-bt", "n12", "n12-short", "n30-bt", "m8-bt", "n8-bt"])
def test_skinny_f16_products_on_16_and_32_row_tiles_in_emulation(device, pipe, used, m, n, k,
                                                                 b_transposed, bias, rows,
                                                                 monkeypatch):
    """f16 products with a side of at most 32 run on mma-f16's skinny tiles (the tiled
    contraction's skinny tiles would be bound by their FMAs): the short side in one tile of
    16 or 32, the long in tiles of 128 (64 over a K under 1024, or 16-row tiles with B along
    K), K split where the tiles leave units idle, the chunks summed by each tile's last
    work-group (split_k.fused)."""
    monkeypatch.setattr(split_k, "FUSED", True)
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("the emulation is checked on PoCL")
    job = prepare(matmul16(m, n, k, 0, bias, b_transposed), "ieee", ASYNC, pipe)
    assert used(job) == {"mma-f16": 1}
    src = job.kernel_source(0)
    assert ("ldmatrix" in src) == (rows == 32 or b_transposed)
    long_tile = 64 if k < 1024 or (rows == 16 and b_transposed) else 128
    geometry = job.kernels[0].geometry
    groups = geometry.global_size[0] // geometry.local_size[0]
    tiles = -(-max(m, n) // long_tile)  # the short side in one tile
    chunks = groups // tiles
    assert chunks >= 1 and groups == chunks * tiles and len(job.kernels) == 1  # (few chunks)
    assert ("fx_last" in src) == (chunks > 1)  # the tile's last group sums them
    check_f16_product(device, job, product_sources(job, lambda s: emulated_async(s, "eager")),
                      m, n, k, 0, bias, seed=7, b_transposed=b_transposed)


# ASYNC with the static local memory an H200's probe found, and 8 or 132 compute units
ROOMY = dataclasses.replace(ASYNC, static_local_bytes=226 * 1024, compute_units=8)


@needs_pocl
@pytest.mark.parametrize("m, n, k, b_transposed, waits, chunks", [
    (16, 700, 3000, False, 6, 1),  # 6 tiles of 16 x 128 on 8 units: one chunk, 8 stages
    (300, 12, 1024, False, 6, 2),  # N short: 3 tiles of 128 x 16, two chunks of 8 steps
    (8, 200, 2104, True, 6, 2),  # B along K: 4 tiles of 16 x 64 (ldmatrix), K tail
    (5, 260, 300, False, 3, 1),  # 5 K steps: 5 stages, no more
], ids=["m16", "n12-split", "m8-bt", "short-k"])
def test_skinny_f16_tiles_stream_through_deep_stages_in_emulation(device, pipe, used, m, n, k,
                                                                  b_transposed, waits,
                                                                  chunks):
    """Where static local memory holds them, skinny f16 tiles stream the long operand through
    eight stages (no more than a K chunk has steps: ``wait_group`` S - 2), one work-group a
    unit, K split for one wave: emulated against float64, bias and relu in the epilogue."""
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("the emulation is checked on PoCL")
    job = prepare(matmul16(m, n, k, 0, True, b_transposed), "ieee", ROOMY, pipe)
    assert used(job) == {"mma-f16": 1} and len(job.kernels) == (2 if chunks > 1 else 1)
    assert f"cp.async.wait_group {waits};" in job.kernel_source(0)
    check_f16_product(device, job, product_sources(job, lambda s: emulated_async(s, "eager")),
                      m, n, k, 0, True, seed=8, b_transposed=b_transposed)


def test_skinny_f16_tiles_take_eight_stages_where_static_local_memory_holds_them(
        pipe, monkeypatch):
    """16x4096x4096 on 132 units: 32 tiles of 16 x 128 in 8 stages (144 KiB), K in 4 chunks
    (128 work-groups, one a unit); 48 KiB of local memory or ``SKINNY_STAGES`` None: two
    stages, 16 chunks (four a unit)."""
    def tiles(target):
        job = prepare(matmul16(16, 4096, 4096), "ieee", target, pipe)
        src = job.kernel_source(0)
        return (src.count("cp.async.wait_group 6;"), src.count("cp.async.wait_group 0;"),
                job.kernels[0].geometry.global_size[0] // 128)

    wide = dataclasses.replace(ROOMY, compute_units=132)
    assert tiles(wide) == (1, 0, 32 * 4)
    assert tiles(dataclasses.replace(wide, static_local_bytes=0)) == (0, 1, 32 * 16)
    monkeypatch.setattr(mma_skinny, "SKINNY_STAGES", None)
    assert tiles(wide) == (0, 1, 32 * 16)
