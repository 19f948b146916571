"""The ``vector`` fragment loads of the tensor-core kernels (accy/kernels/mma_layout.py,
mma_frags.py) without a GPU.

The block emulation of test_mma_generator (``emulate_block``) runs with the fragments gathered
as the vector scheme gathers them: f32 A and B read as float4 (float2) at the generator's
addresses in swizzled local tiles, each vector element taken as the register the K and N
permutations say, the mma emulated per the PTX layout, the accumulators placed by
``c_coords_v``: the tile must be A @ B. f16 fragments come from an emulation of ``ldmatrix``
(``.x4``, and ``.trans``: the PTX ISA's semantics, written out below) fed the lanes' row
addresses. Bank conflicts are counted per wavefront (16-byte accesses serve 8 lanes at a time,
8-byte ones 16) for every warp's reads and the work-items' 16-byte copies. Whole kernels with
vector loads run on PoCL with their PTX emulated (test_mma_pipeline's harness, ldmatrix
included). Speed comes from ``experiments/bench_mma.py --loads scalar,vector`` on an H200.
"""

from __future__ import annotations

import dataclasses
import functools
import re

import numpy as np
import pytest
from mma_emulation import emulated_async, run_emulated
from test_mma_generator import NV, emulate_and_check, emulate_block, emulate_mma, matmul, num
from test_mma_generator import prepared as prepare
from test_mma_pipeline import ASYNC, emulate_mma16, matmul16

try:
    import pyopencl as cl
except ImportError:
    cl = None

from accy.ir.types import DType
from accy.kernels import mma_layout
from accy.kernels.ir import idx
from accy.kernels.mma_layout import (
    a_row_offset,
    b16_row_offset,
    b_row_offset,
    c_coords_v,
    f16_a_base,
    f16_b_base,
    f32_a_base,
    f32_a_register,
    f32_b_base,
)
from accy.kernels.mma_plan import (
    SMALL,
    WIDE,
    MmaTiles,
    choose_tiles,
    copy_slot,
    for_dtype,
    lane_parts,
    local_index,
    parse_tiles,
    warp_origin,
)

F32 = ["128x128x16:2x2", "64x64x16:2x2", "128x128x16:2x4", "128x256x16:2x4", "256x128x16:4x2",
       "128x128x8:2x2", "64x64x32:2x2", "128x256x8:2x4", "256x128x8:4x2"]
F16 = ["128x128x32:2x2", "64x64x32:2x2", "128x256x32:2x4", "64x64x16:2x2", "128x128x64:2x2"]


def vector(text: str, f16: bool = False) -> MmaTiles:
    """``text`` (BMxBNxBK:WMxWN) with vector loads, checked for f32 or f16."""
    t = dataclasses.replace(parse_tiles(text), loads="vector")
    return for_dtype(t, DType.f16 if f16 else DType.f32)


# f32: float4 loads through the K and N permutations ------------------------------------------
@functools.cache
def lane_addresses(tiles: MmaTiles, wm: int, wn: int, lane: int):
    """A lane's A loads {(h, v): word} and B loads {(kk, hk, v): word} at fragment row 0."""
    g, t = lane_parts(idx(lane))
    s2 = 2 * (tiles.bk // 8)
    wa = min(s2, 4)
    a = {(h, v): num(f32_a_base(tiles, idx(wm), g, t, v)) + a_row_offset(tiles, 0, h)
         for h in range(2) for v in range(s2 // wa)}
    b = {(kk, hk, v): num(f32_b_base(tiles, idx(wn), g, t, v)) + b_row_offset(tiles, kk, hk)
         for kk in range(tiles.bk // 8) for hk in range(2) for v in range(tiles.frags_n // 4)}
    return a, b


@pytest.mark.parametrize("text", F32)
def test_f32_vector_fragments_compute_the_block_product_in_emulation(text):
    """Each lane loads its A rows' 2S K-permuted words and its B K rows' F N-permuted words as
    vectors; the registers they make, mma'd per the PTX layout, give A @ B at c_coords_v."""
    tiles = vector(text)
    wa = min(2 * (tiles.bk // 8), 4)

    def fragments(a_loc, b_loc, wm, wn, mi, ni, kk, acc):
        ar, br = np.full((32, 4), np.nan), np.full((32, 2), np.nan)
        for lane in range(32):
            a, b = lane_addresses(tiles, num(wm), num(wn), lane)
            for (h, v), at in a.items():
                assert at % wa == 0  # an aligned vector
                at += a_row_offset(tiles, mi, 0)
                for e in range(wa):
                    k_step, hk = f32_a_register(tiles, v, e)
                    if k_step == kk:
                        ar[lane, h + 2 * hk] = a_loc[at + e]
            for (k_step, hk, v), at in b.items():
                assert at % 4 == 0
                if k_step == kk and ni // 4 == v:  # element e of load v: fragment 4 v + e
                    br[lane, hk] = b_loc[at + ni % 4]
        assert not np.isnan(ar).any() and not np.isnan(br).any()
        return emulate_mma(ar, br, acc)

    emulate_block(tiles, 3, 8, fragments,
                  lambda wm, wn, g, t, mi, ni, r: c_coords_v(tiles, wm, wn, g, t, mi, ni, r))


# f16: ldmatrix -------------------------------------------------------------------------------
def ldmatrix(mem: np.ndarray, rows: list[int], trans: bool) -> np.ndarray:
    """PTX ``ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16``: lane l gives ``rows[l]``, the
    address (in halves) of row l % 8 of matrix l // 8; lane l receives, per matrix j, the halves
    at row l // 4, columns 2 (l % 4) and 2 (l % 4) + 1, or with .trans those at rows 2 (l % 4)
    and 2 (l % 4) + 1, column l // 4. Returns (32 lanes, 4 registers, 2 halves)."""
    out = np.zeros((32, 4, 2))
    for lane in range(32):
        for j in range(4):
            for i in range(2):
                if trans:
                    out[lane, j, i] = mem[rows[8 * j + 2 * (lane % 4) + i] + lane // 4]
                else:
                    out[lane, j, i] = mem[rows[8 * j + lane // 4] + 2 * (lane % 4) + i]
    return out


@pytest.mark.parametrize("text", F16)
def test_f16_ldmatrix_fragments_compute_the_block_product_in_emulation(text):
    tiles = vector(text, f16=True)

    def fragments(a_loc, b_loc, wm, wn, mi, ni, kk, acc):
        a_rows = [num(f16_a_base(tiles, wm, idx(lane), kk)) + a_row_offset(tiles, mi, 0)
                  for lane in range(32)]
        b_rows = [num(f16_b_base(tiles, wn, idx(lane), ni // 2)) + b16_row_offset(tiles, kk)
                  for lane in range(32)]
        assert all(r % 8 == 0 for r in a_rows + b_rows)  # 16-byte rows
        ar = ldmatrix(a_loc, a_rows, False).reshape(32, 8)  # a0a1, a2a3, a4a5, a6a7
        # matrices: fragment 2p at k 0-7 (b0b1), 8-15 (b2b3), then fragment 2p + 1
        br = ldmatrix(b_loc, b_rows, True)[:, 2 * (ni % 2):2 * (ni % 2) + 2].reshape(32, 4)
        return emulate_mma16(ar, br, acc)

    emulate_block(tiles, 4, 16, fragments)


def test_ldmatrix_emulation_on_a_known_matrix():
    """The emulation itself: rows of 8 halves 0..63 numbered row-major; without .trans lane 5
    gets row 1, columns 2 and 3 of each matrix; with .trans rows 2 and 3 of column 1."""
    mem = np.arange(4 * 64, dtype=float)
    rows = [8 * i for i in range(32)]  # matrix j = halves 64 j .. 64 j + 63
    plain, trans = ldmatrix(mem, rows, False), ldmatrix(mem, rows, True)
    assert plain[5, 0].tolist() == [10, 11] and plain[5, 3].tolist() == [192 + 10, 192 + 11]
    assert trans[5, 0].tolist() == [17, 25] and trans[5, 2].tolist() == [128 + 17, 128 + 25]


# bank conflicts ------------------------------------------------------------------------------
def wavefronts_ok(words: list[list[int]], lane_bytes: int) -> bool:
    """No bank holds two distinct words within a wavefront (128 bytes: 8 lanes of 16 bytes,
    16 of 8)."""
    per = 128 // lane_bytes
    for i in range(0, 32, per):
        distinct = {w for lane_words in words[i:i + per] for w in lane_words}
        if len({w % 32 for w in distinct}) != len(distinct):
            return False
    return True


def warp_reads(tiles: MmaTiles, wm: int, wn: int):
    """(bytes per lane, each lane's words) of every local read of one warp over a K step."""
    out = []
    if tiles.f16:
        for kk in range(tiles.bk // 16):
            for mi in range(tiles.frags_m):
                out.append((16, [
                    [(num(f16_a_base(tiles, idx(wm), idx(lane), kk))
                      + a_row_offset(tiles, mi, 0)) // 2 + i for i in range(4)]
                    for lane in range(32)]))
            for p in range(tiles.frags_n // 2):
                out.append((16, [
                    [(num(f16_b_base(tiles, idx(wn), idx(lane), p))
                      + b16_row_offset(tiles, kk)) // 2 + tiles.a_size // 2 + i
                     for i in range(4)] for lane in range(32)]))
        return out
    wa = min(2 * (tiles.bk // 8), 4)
    per_lane = [lane_addresses(tiles, wm, wn, lane) for lane in range(32)]
    for mi in range(tiles.frags_m):
        for key in per_lane[0][0]:
            out.append((wa * 4, [[a[key] + a_row_offset(tiles, mi, 0) + i for i in range(wa)]
                                 for a, _ in per_lane]))
    for key in per_lane[0][1]:  # B after A in one local space: any stage offset of 32 words
        out.append((16, [[b[key] + tiles.a_size + i for i in range(4)] for _, b in per_lane]))
    return out


@pytest.mark.parametrize("text, f16", [(t, False) for t in F32] + [(t, True) for t in F16])
def test_vector_reads_and_copies_are_free_of_bank_conflicts(text, f16):
    tiles = vector(text, f16)
    for warp in range(tiles.threads // 32):
        wm, wn = (num(e) for e in warp_origin(tiles, idx(warp)))
        for lane_bytes, words in warp_reads(tiles, wm, wn):
            assert wavefronts_ok(words, lane_bytes), (warp, words)
    per_word = 4 // tiles.elem_bytes
    for side in ("x", "y"):  # 16-byte copies, A along K and B along N, 32 work-items a time
        copies = []
        for tid in range(tiles.threads):
            for i in range(tiles.slots(side)):
                f, k = copy_slot(tiles, side, side == "x", idx(tid + i * tiles.threads))
                at = num(local_index(tiles, side, f, k))
                assert at % tiles.vector == 0  # a whole 16-byte chunk
                copies.append((i, tid, [at // per_word + w for w in range(4)]))
        copies.sort()
        for start in range(0, len(copies), 32):
            assert wavefronts_ok([w for _, _, w in copies[start:start + 32]], 16)


@pytest.mark.parametrize("text, f16", [(t, False) for t in F32] + [(t, True) for t in F16])
def test_swizzled_tiles_hold_each_element_once(text, f16):
    tiles = vector(text, f16)
    for side, rows, cols in (("x", tiles.bm, tiles.bk), ("y", tiles.bk, tiles.bn)):
        seen = {num(local_index(tiles, side, idx(r if side == "x" else c),
                                idx(c if side == "x" else r)))
                for r in range(rows) for c in range(cols)}
        size = tiles.a_size if side == "x" else tiles.b_size
        assert seen == set(range(size))


def test_the_swizzle_search_finds_what_the_layout_needs():
    # 128x128x16 f32: A rows of 4 chunks need none; B reads rows 4t: t's bits move to chunk
    # bits 0 and 2 (g moves bit 1)
    tiles = vector("128x128x16:2x2")
    assert mma_layout.swizzle_bits(tiles, "x") == ()
    assert sorted(mma_layout.swizzle_bits(tiles, "y")) == [(2, 0), (3, 2)]
    # the scalar scheme's padded tiles are untouched
    assert WIDE.lda == 20 and WIDE.ldb == 136 and tiles.lda == 16 and tiles.ldb == 128


# tiles: text, checks, choice -------------------------------------------------------------------
def test_tiles_text_names_the_scheme():
    t = parse_tiles("128x256x16:2x4:2:vector")
    assert (t.loads, t.threads, t.frags_n, t.text()) == ("vector", 256, 8,
                                                        "128x256x16:2x4:2:vector")
    assert parse_tiles("128x128x16:2x2:3:scalar").text() == "128x128x16:2x2:3"
    for bad in ("128x128x16:2x2:2:fast", "128x128x16:2x2:2:vector:1",
                "64x32x16:2x2:2:vector",  # 2 fragment columns per warp: no float4 along N
                "128x128x64:2x2:2:vector"):  # K steps of 64: lanes would need 16 words
        with pytest.raises(ValueError):
            parse_tiles(bad)
    t = parse_tiles("128x128x16:2x2:3:vector:round=tile")
    assert (t.rounding, t.text()) == ("tile", "128x128x16:2x2:3:vector:round=tile")
    assert parse_tiles("64x64x16:2x2:2:round=tile").loads == "scalar"
    assert parse_tiles("64x64x16:2x2:2:ptx").vector_loads
    for bad in ("64x64x16:2x2:2:round=never", "64x64x16:2x2:2:round=tile:vector"):
        with pytest.raises(ValueError):
            parse_tiles(bad)
    with pytest.raises(ValueError, match="pairs"):  # ldmatrix.trans reads two B fragments
        for_dtype(MmaTiles(128, 64, 32, 1, 8, loads="vector"), DType.f16)


def test_choose_tiles_weighs_compute_units_work_group_size_and_local_memory(pipe):
    from accy.kernels.contraction_plan import analyse
    from accy.kernels.mma_plan import plan

    def contraction(m, n, k):
        job = prepare(matmul(m, n, k), "tf32", NV, pipe)
        from accy.ir.program import Stage
        p = job.products[Stage.kernel]
        group = p.fusion.groups[p.schedule.item(p.kernels[0].work_item).group]
        assert not isinstance(plan(group, NV), str)
        return analyse(group)[1]

    big = parse_tiles("128x256x16:2x4:2:vector")
    vectors = tuple(dataclasses.replace(t, loads="vector") for t in (WIDE, SMALL))
    pool = (big, *vectors)
    c = contraction(4096, 4096, 256)
    # full waves of both, at 128x128's rate: the larger tiles
    assert choose_tiles(c, NV, True, pool[:2]) == dataclasses.replace(big, stages=2)
    # 128 work-items at most: the 256-thread tiles are out
    small_groups = dataclasses.replace(NV, max_work_group_size=128)
    assert choose_tiles(c, small_groups, True, pool[:2]).bn == 128
    # 32 KiB of local memory: 128x256 needs 48 KiB for two stages
    assert choose_tiles(c, dataclasses.replace(NV, local_mem_bytes=32 * 1024), True,
                        pool[:2]).bn == 128
    # full waves of 64x64 tiles too, at a higher rate than 128x128's
    assert choose_tiles(c, NV, True, pool).bm == 64
    # 1024x1024 makes 32 tiles of 128x256 on 132 units: 64x64 tiles fill them
    assert choose_tiles(contraction(1024, 1024, 256), NV, False, pool).bm == 64
    # 256 accumulators per lane (one warp 128x64 of a 256x128 block of 2x2 warps): never
    fat = parse_tiles("256x128x16:2x2:2:vector")
    assert choose_tiles(c, NV, False, (fat, vectors[0])) == vectors[0]
    # the defaults, as measured on the H200 (papers/kernels.md): f32 tiles load scalars
    assert choose_tiles(c, NV, True).loads == "scalar"


def test_f16_products_of_short_k_take_the_large_tiles(pipe, used):
    """Short K as long K: 128x128 tiles where they fill the units (a bench_mma sweep of five
    f16 shapes of K 64 to 256 with staged stores, papers/kernels.md "Tenth session": 3-25%
    faster than 64x64 ones); 64x64 where 128x128 would leave units idle."""
    for batch, k, groups in ((32, 64, 32 * 4 * 4), (32, 128, 32 * 4 * 4), (32, 256, 32 * 4 * 4),
                             (1, 64, 8 * 8)):  # 16 tiles of 128x128 for 132 units
        job = prepare(matmul16(512, 512, k, batch=batch), "ieee", ASYNC, pipe)
        assert used(job) == {"mma-f16": 1}
        assert job.kernels[0].geometry.global_size == (groups * 128,)


# whole kernels on PoCL, PTX emulated ---------------------------------------------------------
needs_pocl = pytest.mark.skipif(cl is None, reason="needs pyopencl")


@needs_pocl
@pytest.mark.parametrize("target, m, n, k, precision, a_t, text", [
    ("async", 136, 260, 40, "tf32", False, "128x256x16:2x4:2:vector"),  # edges, 8 warps
    ("plain", 264, 72, 40, "3xtf32", True, "128x64x16:4x2:2:vector"),  # A is K x M, 8 warps
    ("async", 72, 68, 44, "tf32", False, "64x64x32:2x2:3:vector"),  # 2 float4 of A
    ("plain", 130, 64, 36, "tf32", False, "128x128x8:2x2:2:vector"),  # float2 of A
    ("async", 100, 72, 56, "tf32", False, "64x64x16:2x2:3:vector:round=tile"),
    ("async", 70, 64, 40, "tf32", False, "64x64x16:2x2:2:round=tile"),  # scalar loads
    ("async", 130, 136, 48, "3xtf32", False, "64x64x16:2x2:3:ptx"),  # ld.shared.v4.f32
    ("plain", 72, 64, 44, "tf32", True, "128x128x8:2x2:2:ptx"),  # ld.shared.v2.f32
], ids=["128x256-async", "128x64-plain-transposed", "bk32-async", "bk8-plain",
        "round-tile-async", "round-tile-scalar", "ptx-async", "ptx-bk8-plain"])
def test_vector_kernels_compute_the_product_in_emulation(device, pipe, used, experiment_script,
                                                         target, m, n, k, precision, a_t,
                                                         text):
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("the emulation is checked on PoCL")
    tgt = ASYNC if target == "async" else NV
    job = prepare(matmul(m, n, k, a_transposed=a_t), precision, tgt, pipe)
    assert used(job) == {f"mma-{precision}": 1}
    tiles = parse_tiles(text)
    job = experiment_script("bench_mma").with_mma_tiles(job, tiles, precision)
    src = job.kernel_source(0)
    assert ("cp.async" in src) == (target == "async")
    assert ("a_vb0" in src) == tiles.vector_loads
    if tiles.loads == "ptx":  # every fragment load inline PTX, no vload of the tiles
        loop = src.split("staged")[0]  # the K loop, before the staged stores
        assert "ld.shared.v" in src and not re.search(r"vload\d\([^;]*_tile\)", loop)
    if tiles.rounding == "tile":  # each copied element rounded once: 4 per 16-byte slot
        loop = src[src.index("for (long kt"):]
        assert loop.count("cvt.rna.tf32.f32") == 4 * (tiles.slots("x") + tiles.slots("y"))
    if target == "plain":
        emulate_and_check(device, job, m, n, k, 0, False, a_t, precision)
        return
    rng = np.random.default_rng(11)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    from test_mma_generator import tf32_round
    got = run_emulated(device, job, emulated_async(src, "deferred"), [a, b], (m, n), np.float32)
    want = (tf32_round(a).astype(np.float64) @ tf32_round(b).astype(np.float64)
            if precision == "tf32" else a.astype(np.float64) @ b.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * k)


@needs_pocl
@pytest.mark.parametrize("m, n, k, text", [
    (136, 264, 48, "128x256x32:2x4:2"),  # 8 warps, edges in M, N and K
    (64, 80, 96, "64x64x16:2x2:4"),  # one m16n8k16 per step, 4 stages
], ids=["128x256", "bk16-4-stages"])
def test_f16_ldmatrix_kernels_compute_the_product_in_emulation(device, pipe, used,
                                                               experiment_script, m, n, k, text):
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("the emulation is checked on PoCL")
    job = prepare(matmul16(m, n, k), "ieee", ASYNC, pipe)
    assert used(job) == {"mma-f16": 1}
    job = experiment_script("bench_mma").with_mma_tiles(job, parse_tiles(f"{text}:vector"),
                                                       "f16")
    src = job.kernel_source(0)
    assert "ldmatrix" in src and "b_shift" not in src
    rng = np.random.default_rng(13)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float16)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float16)
    got = run_emulated(device, job, emulated_async(src, "deferred"), [a, b], (m, n), np.float16)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got.astype(np.float64), exact, rtol=2**-10, atol=1e-6 * k)



@needs_pocl
@pytest.mark.parametrize("loads", ["vector", "ptx"])
def test_b_stored_n_by_k_is_stored_element_by_element_into_the_swizzled_tile(
        device, pipe, used, experiment_script, loads):
    """B stored N x K (``x @ w.T``): cp.async cannot transpose, so the register path stores B
    element by element along K into the swizzled ``Bs[k][n]``, which the fragment loads read
    back as float4."""
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("the emulation is checked on PoCL")
    from test_mma_generator import emulated, tf32_round

    import accy
    from accy.builder import einsum
    from accy.ir.types import TensorType
    m, n, k = 136, 72, 44
    b = accy.Builder()
    f = b.begin_function("f", [TensorType((m, k), DType.f32), TensorType((n, k), DType.f32)])
    f.return_(einsum("ik,jk->ij", f.param(0), f.param(1)))
    f.finish()
    job = prepare(b.finish(), "tf32", dataclasses.replace(ASYNC, compute_units=1), pipe)
    assert used(job) == {"mma-tf32": 1}
    job = experiment_script("bench_mma").with_mma_tiles(
        job, parse_tiles(f"128x128x16:2x2:2:{loads}"), "tf32")
    src = job.kernel_source(0)
    assert "cp.async" not in src and "b_vb0" in src
    rng = np.random.default_rng(17)
    x = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    w = rng.uniform(-1, 1, (n, k)).astype(np.float32)
    got = run_emulated(device, job, emulated(src), [x, w], (m, n), np.float32)
    want = tf32_round(x).astype(np.float64) @ tf32_round(w).astype(np.float64).T
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * k)


def test_bench_counts_the_k_loop_without_a_device(experiment_script, tmp_path):
    """``bench_mma.py --counts``: per work-item and K step of 128x64x16 tiles of 4 warps
    (selection's), 32 TF32 mma read through 48 scalar local loads; of 128x128x16 ones, 64 mma
    through 64 scalar local loads, or 16 float4 under vector loads (A: 4
    fragment rows x rows g, g+8; B: 2 sub-steps x 2 k rows x 2 float4); f16 through 16
    ldmatrix instead of 48 word loads per 32 mma at K steps of 16."""
    import json
    out = tmp_path / "c.json"
    bench = experiment_script("bench_mma")
    assert bench.main(["--counts", "--cases", "4096", "--policies", "tf32", "--dtypes",
                       "f32,f16", "--tiles", "128x128x16:2x2:2", "--loads", "scalar,vector",
                       "--out", str(out)]) == 0
    rows = {(r["case"], r["tiles"]): r for r in json.loads(out.read_text())["counts"]}
    heuristic = rows[("4096", "heuristic")]  # f32: scalar loads, the measured default
    assert (heuristic["mma"], heuristic["vload"], heuristic["lds32"], heuristic["cvt"]) == (
        32, 0, 48, 48)  # 128x64 tiles: 4 warps of 64x32
    assert rows[("4096", "128x128x16:2x2:2")]["lds32"] == 64
    assert rows[("4096", "128x128x16:2x2:2:vector")]["local loads per mma"] == 0.25
    f16 = rows[("4096.f16", "heuristic")]
    assert (f16["mma"], f16["ldmatrix"], f16["lds32"], f16["cvt"]) == (64, 16, 0, 0)
    assert rows[("4096.f16", "128x128x16:2x2:2")]["lds32"] == 48
