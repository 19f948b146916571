"""wgmma-f16 with B copied by TMA (accy/kernels/tma.py, accy/kernels/wgmma_tma.py) without a
GPU: the markers' expansion, the tensor map's geometry (a box a block or a box an atom, the K
order A's loads give), when the generator takes TMA (the probe's ``TMA_COPY`` and a driver to
encode the template), whole generated kernels on PoCL with TMA and wgmma emulated
(mma_emulation.py: the box copied at once, 128-byte swizzled) against float64, and, where
clang and CUDA's ptxas are installed, the expanded PTX assembled for sm_90a. On the H200:
``experiments/probe_tma.py`` (the box layout, the kernels against the cp.async ones)."""

from __future__ import annotations

import dataclasses
import itertools
import operator
import re

import numpy as np
import pytest
from mma_emulation import (
    check_f16_product,
    emulated_wgmma,
    one_line,
    product_sources,
    run_kernels,
)
from test_mma_generator import prepared as prepare
from test_mma_pipeline import matmul16
from test_wgmma import HOPPER, NEEDS_PTXAS, assembled

try:
    import pyopencl as cl
except ImportError:  # the emulation tests skip without it
    cl = None

from accy.backends.opencl import tensor_cores
from accy.ir.program import Stage
from accy.kernels import mma_plan, tma, wgmma, wgmma_ptx, wgmma_ss, wgmma_tma
from accy.kernels.contraction_plan import analyse
from accy.kernels.ir import idx
from accy.target import TMA_COPY

WITH_TMA = dataclasses.replace(HOPPER, tensor_cores=(*HOPPER.tensor_cores, TMA_COPY))
FEW_UNITS = dataclasses.replace(WITH_TMA, compute_units=1)
ROOMY_H200 = dataclasses.replace(WITH_TMA, static_local_bytes=226 * 1024)  # as probed there
ROOMY = dataclasses.replace(ROOMY_H200, compute_units=1)


def test_expand_writes_the_copies_and_barriers():
    ptx = (".version 7.8\n.target sm_90\n"
           "\t// @@TMAP %rd1, %rd2 ; 0x1 0x2\n"
           "\t// @@MBINIT16 %r1\n\t// @@MBEXPECT8192 %r1\n\t// @@MBARRIVE %r2\n"
           "\t// @@MBWAIT %r1, %r3\n\t// @@TMA3 %r4, %rd1, %r5, %r6, %r7, %r1 ; 9 / 9 / 9\n")
    out = wgmma_ptx.expand(ptx)
    assert ".version 8.3" in out and ".target sm_90a" in out and "@@" not in out
    assert "mov.b64 w, 0x2; st.global.u64 [%rd1+8], w;" in out
    assert "tensormap.replace.tile.global_address.global.b1024.b64 [%rd1], %rd2;" in out
    assert "fence.proxy.tensormap::generic.acquire.gpu [%rd1], 128;" in out
    assert "mbarrier.init.shared::cta.b64 [%r1], 16;" in out
    assert "mbarrier.arrive.expect_tx.shared::cta.b64 s, [%r1], 8192;" in out
    assert "mbarrier.arrive.shared::cta.b64 s, [%r2];" in out
    assert "mbarrier.try_wait.parity.shared::cta.b64 p, [%r1], %r3;" in out
    assert ("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
            "[%r4], [%rd1, {%r5, %r6, %r7}], [%r1];") in out


def test_expand_writes_a_kept_map_only_where_its_tag_differs():
    """KEEP_MAPS: the tag read and compared first; the map written, released and tagged only
    where it differs; the acquire for the copies either way."""
    out = wgmma_ptx.expand(".version 8.3\n.target sm_90\n\t// @@TMAP %rd1, %rd2, %rd3 ; 0x1\n")
    parts = ["ld.global.u64 w, [%rd3]; setp.eq.u64 p, w, %rd2; @p bra KEPT;",
             "mov.b64 w, 0x1; st.global.u64 [%rd1+0], w;",
             "tensormap.replace.tile.global_address.global.b1024.b64 [%rd1], %rd2;",
             "fence.proxy.tensormap::generic.release.gpu; st.global.u64 [%rd3], %rd2; KEPT:",
             "fence.proxy.tensormap::generic.acquire.gpu [%rd1], 128;"]
    at = [out.index(p) for p in parts]
    assert at == sorted(at), out


def test_kept_maps_tagged_after_each_work_groups_maps(device, pipe, used, monkeypatch, encodes):
    """KEEP_MAPS: a work-group's region a block longer, each map's TMAP given its tag (8 bytes
    a map after the maps); the product unchanged (the emulation writes every map)."""
    monkeypatch.setattr(tma, "KEEP_MAPS", True)
    monkeypatch.setattr(wgmma, "MIN_K", 32)  # selection only: short K keeps the emulation quick
    job = prepare(matmul16(256, 248, 64, 2), "ieee", FEW_UNITS, pipe)
    src = job.kernel_source(0)
    assert used(job) == {"wgmma-f16": 1} and tma.region(1) == 2 * tma.MAP_BYTES
    assert job.kernels[0].args[-1].scratch_elems % (tma.region(1) // 8) == 0
    assert re.search(r'@@TMAP %0, %1, %2 ;[^"]*" : +: "l"\(tma_map\), "l"\(.*in1.*\), '
                     r'"l"\(\(tma_map \+ 128L\)\)', src), src
    if "Portable Computing Language" in device.info.platform:
        check_f16_product(device, job, emulated_wgmma(src, "eager"), 256, 248, 64, 2, False,
                          seed=5)


def test_expand_writes_both_descriptors_steps():
    """SSTEP: A and B from local memory, each descriptor advanced its own way a wgmma."""
    ops = ", ".join(f"%f{i}" for i in range(8))
    out = wgmma_ptx.expand(f".version 8.3\n.target sm_90\n\t// @@SSTEP16_2_2_128_1 {ops}, "
                           "%rd1, %rd2, %r1\n")
    assert "@@" not in out and "mov.b64 xa, %rd1; mov.b64 xb, %rd2;" in out
    assert out.count("wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {%f0, %f1, %f2, %f3, "
                     "%f4, %f5, %f6, %f7}, xa, xb, p, 1, 1, 0, 1;") == 2
    assert "add.s64 xa, xa, 2; add.s64 xb, xb, 128;" in out
    with pytest.raises(ValueError, match="operands"):
        wgmma_ptx.expand("\t// @@SSTEP16_2_2_128_1 %f0, %rd1, %rd2, %r1\n")


def test_descriptor_of_the_swizzled_layout():
    bits = wgmma_ptx.descriptor_bits(wgmma_tma.BLOCK, wgmma_tma.ATOM, True)
    assert bits >> 62 == 1 and (bits >> 16) & 0x3FFF == 256 and (bits >> 32) & 0x3FFF == 64


def geometry_of(prog, pipe):
    job = prepare(prog, "ieee", HOPPER, pipe)
    return wgmma_tma.geometry(analyse(job.products[Stage.kernel].fusion.groups[0])[1])


def test_geometry_boxes_hold_the_k_rows_the_a_loads_want(pipe):
    """A box's rows, in the order it lands them, are the K rows the stage's row order
    (:func:`accy.kernels.wgmma.k_row`) wants: a block's four atoms where K is a multiple of
    BK and nothing is batched, one atom a box otherwise; B along K or K not a multiple of 8
    take no TMA."""
    g = geometry_of(matmul16(512, 384, 1024), pipe)
    assert g.blocks and g.dims == (384, 2, 4, 4, 32) and g.box == (64, 2, 4, 4, 1)
    rowb = 2 * 384
    assert g.strides == (rowb, 8 * rowb, 2 * rowb, 32 * rowb)
    # box element (e, t, a) lands in stage row e + 2t + 8a and is K row e + 8t + 2a
    for e in range(2):
        for t in range(4):
            for a in range(4):
                row = e + 2 * t + 8 * a
                assert int(wgmma.k_row(idx(row)).value) == \
                    (e * g.strides[0] + t * g.strides[1] + a * g.strides[2]) // rowb
    atoms = geometry_of(matmul16(512, 384, 72, batch=3), pipe)
    assert not atoms.blocks and atoms.box == (64, 2, 4, 1) and atoms.dims == (384, 8, 9, 3)
    # atom a's box at K (2a, 0): element (e, t) is K 8t + 2a + e, stage row 8a + 2t + e
    for a in range(4):
        for e in range(2):
            for t in range(4):
                assert int(wgmma.k_row(idx(8 * a + 2 * t + e)).value) == \
                    8 * t + 2 * a + e
    assert "along N" in geometry_of(matmul16(512, 384, 1024, b_transposed=True), pipe)
    assert "multiple of 8" in geometry_of(matmul16(512, 384, 1028), pipe)


def test_taken_with_the_probe_and_a_driver_else_cp_async(pipe, used, encodes, monkeypatch):
    job = prepare(matmul16(2048, 2048, 1024), "ieee", WITH_TMA, pipe)
    assert used(job) == {"wgmma-f16": 1}
    src = job.kernel_source(0)
    # 2 blocks a step: 3 steps before the loop, the loop body's 2
    assert src.count("@@TMA5") == 2 * (3 + 2) and "cp.async" not in src
    assert "@@TMAP" in src and "0x10f" in src and "tmaps0" in src
    assert job.kernels[0].args[-1].scratch_elems == 8 * 16 * tma.region(1) // 8  # a map a group
    assert set(encodes) == {((2048, 2, 4, 4, 32), (4096, 32768, 8192, 131072), (64, 2, 4, 4, 1),
                             tma.F16)}
    for target in (HOPPER, WITH_TMA):  # no probe entry; no driver (the template's reason)
        if target is WITH_TMA:
            monkeypatch.undo()
            monkeypatch.setattr(tma, "_libcuda", lambda: None)
        job = prepare(matmul16(2048, 2048, 1024), "ieee", target, pipe)
        assert "@@TMA" not in job.kernel_source(0)
        assert "cp.async.cg.shared.global" in job.kernel_source(0)
        c = analyse(job.products[Stage.kernel].fusion.groups[0])[1]
        assert [r for _, r, _ in wgmma.tilings(c, target)] == \
            [wgmma.RATES[h] for h in wgmma.WARPGROUPS]  # scored as the kernel it gets
    assert "CUDA driver" in tma.template(tma.F16, (64, 8), (128,), (64, 8))


@pytest.mark.parametrize("m, n, k, without, with_tma", [
    (1024, 1024, 1024, ("mma-f16", 128), ("wgmma-f16", 256)),  # 64 tiles of 128 rows
    # K split over 32 tiles of 256 rows (wgmma.split_tiles)
    (512, 2048, 2048, ("wgmma-f16", 512), ("wgmma-f16", 512)),
    (960, 5120, 1024, ("wgmma-f16", 512), ("wgmma-f16", 256)),  # 128-row tiles gain the most
])
def test_selection_scores_the_tma_kernel_at_its_rates(pipe, used, encodes, m, n, k, without,
                                                      with_tma):
    """Measured on the H200 (papers/kernels.md, "Nineteenth session"): 1024^3 0.0160 ms on
    128-row TMA tiles against 0.0193 for mma-f16, 960x5120x1024 0.0345 against 0.0388 on
    256-row ones; on the H100 ("Thirty-fourth session") 512x2048x2048 without TMA 0.0273 ms
    with K split against 0.0470 for mma-f16."""
    for target, (gen, items) in ((HOPPER, without), (WITH_TMA, with_tma)):
        job = prepare(matmul16(m, n, k), "ieee", target, pipe)
        assert used(job) == {gen: 1} and job.kernels[0].geometry.local_size == (items,)


@pytest.mark.skipif(cl is None, reason="needs pyopencl")
@pytest.mark.parametrize("m, n, k, batch, bias, warpgroups, bn", [
    (500, 248, 96, 0, True, 4, 128),  # a box a block: edges in M and N (zero-filled), bias
    (256, 128, 72, 0, False, 4, 128),  # a box an atom: K ends inside a step (zero-filled rows)
    (256, 248, 64, 2, False, 4, 128),  # batched: the batch a coordinate of the map, N edge
    (250, 248, 160, 0, True, 2, 128),  # 128-row tiles, 5 K steps through 4 stages (phases wrap)
    (1100, 256, 64, 0, False, 2, 128),  # 9 x 2 tiles walked in bands of 4 tile rows (the last 1)
    (250, 488, 160, 0, True, 2, 256),  # 128x256 tiles: four blocks a stage, N edge
    (250, 248, 40, 2, False, 2, 256),  # 128x256 tiles, batched (boxes an atom), K tail
], ids=["blocks-edges-bias", "atoms-k-tail", "batched", "rows-128", "bands", "wide",
        "wide-batched"])
def test_kernels_compute_the_product_in_emulation(device, pipe, used, monkeypatch, encodes, m,
                                                  n, k, batch, bias, warpgroups, bn):
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("the emulation is checked on PoCL")
    monkeypatch.setattr(wgmma, "MIN_K", 32)  # selection only: short K keeps the emulation quick
    monkeypatch.setattr(wgmma, "WARPGROUPS", (warpgroups,))
    monkeypatch.setattr(wgmma, "tiles", lambda w, _bn=bn, t=wgmma.tiles: t(w, _bn))
    job = prepare(matmul16(m, n, k, batch, bias), "ieee", FEW_UNITS, pipe)
    assert used(job) == {"wgmma-f16": 1} and "@@TMA" in job.kernel_source(0)
    check_f16_product(device, job, emulated_wgmma(job.kernel_source(0), "eager"), m, n, k,
                      batch, bias, seed=5)


def test_a_copied_too_where_static_local_memory_holds_the_stages(pipe, used, encodes):
    """wgmma_ss where the target's static local memory holds its stages (four of 48 KiB for
    128x256 tiles) and K is at least wgmma_ss.MIN_K (or SHORT_K where the kernel walks
    tiles); B along N in 64-column blocks, B along K in one box."""
    job = prepare(matmul16(4096, 4096, 4096), "ieee", ROOMY_H200, pipe)
    src = job.kernel_source(0)
    assert used(job) == {"wgmma-f16": 1} and "@@SSTEP256_4_2_128_1" in src
    # A's box and B's four blocks a step; 512 tiles walked by 132 work-groups: three steps
    # ahead before the tile loop, one in its K loop, and a store buffer of their own
    assert src.count("@@TMA2") == 5 * (3 + 1) and "c_stage" in src
    assert job.kernels[0].geometry.local_size == (256,)  # 128x256 tiles
    assert job.kernels[0].args[-1].scratch_elems == 132 * tma.region(2) // 8  # two maps a group
    assert ((4096, 4096), (8192,), (64, 128), tma.F16) in encodes  # A: (K, M), 64 x 128 boxes
    assert ((4096, 4096), (8192,), (64, 64), tma.F16) in encodes  # B: (N, K), 64-column blocks
    src = prepare(matmul16(4096, 4096, 4096, b_transposed=True), "ieee", ROOMY_H200,
                  pipe).kernel_source(0)
    assert "@@SSTEP256_4_2_2_0" in src and src.count("@@TMA2") == 2 * (3 + 1)
    for prog, target in ((matmul16(1024, 1024, 256), ROOMY_H200),  # K below MIN_K, tiles
                         (matmul16(4096, 4096, 1024), WITH_TMA)):  # too few to walk; 48 KiB
        src = prepare(prog, "ieee", target, pipe).kernel_source(0)
        assert "@@SSTEP" not in src and "@@RSTEP" in src
    # K below MIN_K where the kernel walks tiles (1024 of 128x128 for 264 work-groups)
    src = prepare(matmul16(4096, 4096, 256), "ieee", ROOMY_H200, pipe).kernel_source(0)
    assert "@@SSTEP128" in src and "c_stage" in src
    # only where the tiles cover the product exactly, batched or not: partial tiles at an
    # edge keep a tile a work-group (from MIN_K; below it the kernel is not taken)
    for prog, walking, taken in ((matmul16(1024, 1024, 1024, 8), True, True),
                                 (matmul16(4000, 4096, 1024), False, True),
                                 (matmul16(4096, 4000, 256), False, False)):
        src = prepare(prog, "ieee", ROOMY_H200, pipe).kernel_source(0)
        assert ("c_stage" in src, "@@SSTEP" in src) == (walking, taken)


@pytest.mark.skipif(cl is None, reason="needs pyopencl")
@pytest.mark.parametrize("m, n, k, batch, bias, warpgroups, bn, stages, bt, walk, overlap", [
    (500, 248, 160, 0, True, 4, 128, 4, False, True, False),  # 256x128 walked, edges, bias
    (250, 488, 200, 0, False, 2, 256, 4, False, None, False),  # 128x256 tiles, 4 K steps
    (250, 248, 96, 2, False, 2, 128, 3, False, None, False),  # batched: the batch a
    # coordinate of both maps
    (250, 488, 200, 0, True, 2, 256, 4, True, True, False),  # B along K: K-major, one box
    (250, 248, 400, 0, False, 2, 128, 3, True, None, False),  # 7 K steps through 3 stages
    (250, 248, 64, 3, True, 2, 128, 3, False, True, False),  # walking batched, one K step a
    # tile: the ring two tiles ahead, batch coordinates of tiles ahead, bias
    (250, 248, 400, 0, False, 2, 128, 3, True, False, False),  # a tile a work-group
    (250, 248, 400, 0, True, 2, 128, 3, False, False, True),  # OVERLAP: 7 steps, 3 stages
    (250, 248, 160, 3, True, 2, 128, 3, False, True, True),  # OVERLAP walking, 3 steps a tile
], ids=["edges-bias", "wide", "batched", "b-along-k", "three-stages", "short-k",
        "not-walking", "overlap", "overlap-walking"])
def test_kernel_with_a_copied_computes_the_product_in_emulation(
        device, pipe, used, monkeypatch, encodes, m, n, k, batch, bias, warpgroups, bn, stages,
        bt, walk, overlap):
    """wgmma_ss: A and B both copied by TMA into the static local memory's deep stages, a tile
    a work-group (partial tiles at the edges: :func:`wgmma_ss.walks` says no) or walking
    tiles where ``walk`` forces it; under ``OVERLAP`` each step waits for the step before's
    products (``WAIT1``), gives that step's stage back, then copies ahead, and the stores wait
    for all (``WAIT0``). (The emulation runs each wgmma when issued: it checks the ring's
    stages and steps, not the hardware's wait.)"""
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("the emulation is checked on PoCL")
    monkeypatch.setattr(wgmma_ss, "PERSISTENT", walk)
    monkeypatch.setattr(wgmma_ss, "OVERLAP", overlap)
    monkeypatch.setattr(wgmma, "MIN_K", 32)
    monkeypatch.setitem(wgmma_ss.MIN_K, tma.F16, 32)  # short K keeps the emulation quick
    monkeypatch.setattr(wgmma_ss, "FORMS", ((warpgroups, bn, stages),))
    monkeypatch.setitem(wgmma_ss.RATES, tma.F16, {(warpgroups, bn, stages): (2.0, 2.0)})
    job = prepare(matmul16(m, n, k, batch, bias, b_transposed=bt), "ieee", ROOMY, pipe)
    assert used(job) == {"wgmma-f16": 1} and "@@SSTEP" in job.kernel_source(0)
    src = job.kernel_source(0)
    assert ("c_stage" in src) == bool(walk)
    waits = (True, 1) if overlap else (False, 1 if walk else 2)  # (the K loop unrolled twice)
    assert ("@@WAIT1" in src, src.count("@@WAIT0")) == waits
    check_f16_product(device, job, emulated_wgmma(src, "eager"), m, n, k,
                      batch, bias, seed=7, b_transposed=bt)


@pytest.mark.skipif(cl is None, reason="needs pyopencl")
@pytest.mark.parametrize("by_tma, m, n, k, bias, chunks", [
    (False, 256, 128, 512, True, 4),  # B by cp.async: 4 chunks of 128, bias, relu
    (False, 256, 128, 488, False, 4),  # the last chunk 104: its last step K ends inside
    (True, 250, 248, 384, False, 2),  # B by TMA: 2 chunks of 192 (boxes a K step further)
    (True, 250, 248, 328, False, 2),  # B by TMA, the last chunk 136 (K guards on A's loads)
], ids=["cp-async", "cp-async-tail", "tma", "tma-tail"])
def test_register_a_kernels_split_k_in_emulation(device, pipe, used, monkeypatch, encodes,
                                                 by_tma, m, n, k, bias, chunks):
    """wgmma-f16 with A in registers, B copied by cp.async or by TMA: 128x128 tiles leaving
    most of 8 compute units idle over a long K split it in chunks of whole K steps (the last
    one shorter where they do not tile K: its steps counted at run time, a step K ends
    inside guarded), a second kernel adding the chunks."""
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("the emulation is checked on PoCL")
    monkeypatch.setattr(wgmma, "MIN_K", 32)  # selection only: short K keeps the emulation quick
    monkeypatch.setattr(wgmma, "SPLIT_K", 256)
    monkeypatch.setattr(wgmma, "WARPGROUPS", (2,))
    target = dataclasses.replace(WITH_TMA if by_tma else HOPPER, compute_units=8)
    job = prepare(matmul16(m, n, k, 0, bias), "ieee", target, pipe)
    assert used(job) == {"wgmma-f16": 1} and ("@@TMA" in job.kernel_source(0)) == by_tma
    tiles = -(-m // 128) * -(-n // 128)
    assert job.kernels[0].geometry.global_size == (256 * tiles * chunks,)
    sources = product_sources(job, lambda s: emulated_wgmma(s, "deferred"))
    check_f16_product(device, job, sources, m, n, k, 0, bias, seed=4)
    # the last chunk's A loads past K are guarded: row 0 never reads row 1's first halves
    a = np.zeros((m, k), np.float16)
    a[1, 0] = np.nan
    b = np.ones((k, n), np.float16)
    got = run_kernels(device, job, sources, [a, b] + ([np.zeros(n, np.float16)] if bias else []),
                      (m, n), np.float16)
    assert np.all(got[0] == 0) and np.all(np.isnan(got[1]))


@pytest.mark.skipif(cl is None, reason="needs pyopencl")
@pytest.mark.parametrize("m, n, k, batch, bias, bt, chunks", [
    (128, 128, 400, 0, True, False, 4),  # 128-K chunks, the last 16: a step K ends inside
    (120, 250, 704, 0, False, True, 4),  # B along K, partial edge tiles; 6 stages, 1 a unit
    (112, 128, 304, 2, False, False, 3),  # batched: each entry's tile split alike
], ids=["bias", "b-along-k", "batched"])
def test_k_split_over_work_groups_in_emulation(device, pipe, used, monkeypatch, encodes, m, n,
                                               k, batch, bias, bt, chunks):
    """Tiles leaving compute units idle over a long K split it: each work-group copies its
    chunk's boxes (the last chunk shorter, its tail zero-filled by the copies), stores its
    partial sums, and a second kernel adds them in a fixed order and applies the epilogue.
    Emulated, against float64; the score counts the chunks' work-groups (one tile alone
    loses to the mma kernels' split tiles)."""
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("the emulation is checked on PoCL")
    monkeypatch.setitem(wgmma_ss.MIN_K, tma.F16, 64)  # chunks of 64 or more: quick emulation
    monkeypatch.setattr(wgmma, "SPLIT_K", 256)  # (split past it)
    monkeypatch.setattr(wgmma_ss, "SPLIT_K_F16", 256)
    monkeypatch.setattr(wgmma_ss, "FORMS", ((2, 128, 3),))
    monkeypatch.setitem(wgmma_ss.RATES, tma.F16, {(2, 128, 3): (2.0, 2.0)})
    target = dataclasses.replace(ROOMY_H200, compute_units=8)
    job = prepare(matmul16(m, n, k, batch, bias, b_transposed=bt), "ieee", target, pipe)
    product, partials = job.kernels  # (a tile's 64 elements a work-item: not split_k.fused)
    assert used(job) == {"wgmma-f16": 1} and "@@SSTEP128" in job.kernel_source(0)
    assert product.entry.endswith("_partials") and "scratch0" in [a.name for a in partials.args]
    groups = chunks * max(batch, 1) * -(-n // 128)
    assert product.geometry.global_size == (256 * groups,)
    check_f16_product(device, job, product_sources(job, lambda s: emulated_wgmma(s, "eager")),
                      m, n, k, batch, bias, seed=3, b_transposed=bt)


@pytest.mark.skipif(cl is None, reason="needs pyopencl")
@pytest.mark.parametrize("m, n, k, batch", [(250, 230, 104, 0), (250, 246, 72, 2)],
                         ids=["unbatched", "batched"])
def test_b_rows_fitting_no_tensor_map_are_transposed_first(device, pipe, used, monkeypatch,
                                                          encodes, m, n, k, batch):
    """An f16 B along N whose rows fit no tensor map (N halves, not a multiple of 16 bytes) is
    transposed into scratch first (K-major, rows of K halves), and wgmma_ss copies it from
    there: emulated, against float64. Without the transpose the product is mma-f16's."""
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("the emulation is checked on PoCL")
    monkeypatch.setattr(wgmma, "MIN_K", 32)
    monkeypatch.setitem(wgmma_ss.MIN_K, tma.F16, 32)  # short K keeps the emulation quick
    monkeypatch.setattr(wgmma_ss, "FORMS", ((2, 128, 3),))
    monkeypatch.setitem(wgmma_ss.RATES, tma.F16, {(2, 128, 3): (2.0, 2.0)})
    monkeypatch.setattr(wgmma_ss, "TRANSPOSE_MIN_M", 0)  # (250 rows: partial tiles)
    job = prepare(matmul16(m, n, k, batch), "ieee", ROOMY, pipe)
    first, product = job.kernels
    assert used(job) == {"wgmma-f16": 1} and "@@SSTEP128_4_2_2_0" in job.kernel_source(1)
    assert [a.name for a in first.args] == ["in1", wgmma_ss.TRANSPOSED_B]
    assert first.args[1].scratch_elems == max(batch, 1) * n * k
    assert ((k, n, *((batch,) if batch else ())), (2 * k, *((2 * n * k,) if batch else ())),
            (64, 128, *((1,) if batch else ())), tma.F16) in encodes  # B: (K, N) from scratch
    check_f16_product(device, job, [emulated_wgmma(job.kernel_source(i), "eager")
                                    for i in range(2)], m, n, k, batch, False, seed=5)
    monkeypatch.setattr(wgmma_ss, "ENABLED", False)
    assert used(prepare(matmul16(m, n, k, batch), "ieee", ROOMY, pipe)) == {"mma-f16": 1}


@NEEDS_PTXAS
@pytest.mark.parametrize("m, k, batch, bt, roomy, keep", [
    (2048, 1024, 0, False, False, False), (2048, 520, 2, False, False, False),
    (2048, 1024, 0, False, True, False), (2048, 1000, 2, True, True, False),
    (4096, 256, 2, False, True, False), (2048, 520, 2, False, False, True),
    (4096, 256, 2, False, True, True)],
    ids=["blocks", "atoms-batched", "a-copied", "a-copied-b-along-k", "walking",
         "atoms-batched-kept", "walking-kept"])
def test_expanded_ptx_assembles_for_sm_90a_without_spills(pipe, tmp_path, encodes, monkeypatch,
                                                          m, k, batch, bt, roomy, keep):
    monkeypatch.setattr(tma, "KEEP_MAPS", keep)
    job = prepare(matmul16(m, 2048, k, batch, b_transposed=bt), "ieee",
                  ROOMY_H200 if roomy else WITH_TMA, pipe)
    assert "@@TMA" in job.kernel_source(0) and ("@@SSTEP" in job.kernel_source(0)) == roomy
    log = assembled(job.kernel_source(0), tmp_path)
    assert "0 bytes spill stores" in log, log[-2000:]


@pytest.mark.skipif(cl is None, reason="needs pyopencl")
def test_tma_probe_expects_what_its_kernel_copies(device, encodes):
    """The probe's expected layout (``tma_box``, numpy) is what the emulated copies land (the
    emulation the generated kernels' tests trust), for both of its boxes."""
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("the emulation is checked on PoCL")
    source = tensor_cores.tma_probe_source()
    y, want = tensor_cores.tma_probe_case()
    got = tensor_cores.run_isolated(device.device, emulated_wgmma(one_line(source), "eager"),
                                    "accy_tma_probe", [y], np.zeros(want.size // 2, np.uint32),
                                    items=128, scratch=2 * tma.MAP_BYTES)
    np.testing.assert_array_equal(got.view(np.uint16), want)
    assert (want != 0).sum() > 2000  # boxes of the matrix, not of zeros


def _value(e) -> int:
    """An index expression of literals (tile_of's of a literal tile), evaluated."""
    from accy.kernels.ir import Bin, Call, Lit
    if isinstance(e, Lit):
        return int(e.value)
    if isinstance(e, Call):
        assert e.fn == "min"
        return min(_value(a) for a in e.args)
    assert isinstance(e, Bin), e
    ops = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.floordiv,
           "%": operator.mod}
    return ops[e.op](_value(e.a), _value(e.b))


@pytest.mark.parametrize("m, n, k, batch", [(4096, 4096, 256, 0), (1400, 3000, 64, 3),
                                            (2500, 700, 128, 2)])
def test_walked_tiles_cover_the_product_once(pipe, m, n, k, batch):
    """mma_plan.tile_of and batch_of (where a work-group's tile lies, or a walking
    work-group's tile i and its copies' tiles ahead) map the tile indexes onto every (batch,
    tile row, tile column) once, in bands of tile rows."""
    job = prepare(matmul16(m, n, k, batch), "ieee", HOPPER, pipe)
    c = analyse(job.products[Stage.kernel].fusion.groups[0])[1]
    t = dataclasses.replace(wgmma_ss.form_tiles((2, 128, 3)), swizzle=wgmma_tma.SWIZZLE)
    tiles_m, tiles_n = -(-m // t.bm), -(-n // t.bn)
    seen = set()
    for tile in range(c.batch_size * tiles_m * tiles_n):
        tm, tn = mma_plan.tile_of(c, t, idx(tile))
        seen.add((*map(_value, mma_plan.batch_of(c, t, idx(tile))), _value(tm), _value(tn)))
    assert seen == {(*b, i, j) for b in itertools.product(*(range(d.size) for d in c.batch))
                    for i in range(tiles_m) for j in range(tiles_n)}


@pytest.mark.parametrize("geometry, why", [
    ((tma.F16, (1024, 512), (2048,), (64, 128)), None),
    ((tma.TF32, (520, 1000, 3), (2080, 2080000), (32, 128, 1)), None),
    ((tma.F16, (1030, 512), (2060,), (64, 128)), "strides (2060,)"),
    ((tma.F16, (1024, 512), (2048,), (64, 257)), "box (64, 257)"),
    ((tma.F16, (1024, 512), (2048,), (72, 128)), "inner box of 144 bytes swizzled"),
    ((tma.F16, (1024, 512), (2048,), (60, 128)), "inner box of 120 bytes (a multiple"),
    ((tma.F16, (1 << 33, 2), (1 << 34,), (64, 2)), "sizes"),
    ((tma.F16, (64,) * 6, (128,) * 5, (64,) * 6), "rank 6"),
    ((tma.F16, (64, 64), (), (64, 64)), "0 strides"),
])
def test_refusal_states_the_drivers_documented_requirements(geometry, why) -> None:
    found = tma.refusal(*geometry)
    assert (found is None) if why is None else (why in found and "would refuse" in found)


def test_offline_templates_are_zeros_where_the_geometry_encodes(monkeypatch) -> None:
    """Without a driver, only inside tma.offline(): zeros for a geometry refusal allows, its
    reason otherwise; the driver's reason outside (and the flag restored)."""
    monkeypatch.setattr(tma, "_libcuda", lambda: None)
    tma._encoded.cache_clear()
    good, bad = (tma.F16, (64, 8), (128,), (64, 8)), (tma.F16, (64, 8), (130,), (64, 8))
    assert "CUDA driver" in tma.template(*good)
    with tma.offline():
        assert tma.template(*good) == (0,) * 16
        assert "strides (130,)" in tma.template(*bad)
    assert not tma.OFFLINE and "CUDA driver" in tma.template(*good)
