"""The cp.async pipeline and f16 tensor cores of the mma generators, without a GPU.

As in test_mma_generator.py: the index formulas the kernels use (mma_plan) are evaluated with
literals against a NumPy emulation of one warp's ``mma.sync`` m16n8k16 ``.f16`` (the PTX ISA's
"Matrix Fragments for mma.m16n8k16" layout, written out independently below), bank conflicts
and 16-byte alignment of the local tiles are counted, selection is checked (only with the
probe's ``cp.async`` / f16 entries, never on PoCL), and padded products run on PoCL with
their PTX replaced by C (mma_emulation.py). The pipelined kernels and the probes run emulated
in test_mma_pipeline_emulation.py. Speed and the real PTX come from
``experiments/bench_mma.py`` on a GPU.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from mma_emulation import emulated_async
from test_mma_generator import NV, emulate_block, emulated_builds, matmul, num
from test_mma_generator import prepared as prepare

try:
    import pyopencl as cl
except ImportError:  # the emulation tests skip without it
    cl = None

import accy
from accy.backends.opencl import tensor_cores
from accy.builder import einsum
from accy.ir.types import DType, TensorType
from accy.kernels import mma, mma_ptx
from accy.kernels.ir import idx
from accy.kernels.mma_plan import (
    SMALL,
    SMALL16,
    WIDE,
    WIDE16,
    MmaTiles,
    a_lane_base,
    a_offset,
    b16_lane_base,
    b16_offset,
    b_lane_base,
    b_offset,
    copy_slot,
    lane_parts,
    local_index,
    parse_tiles,
)
from accy.passes.pipelines import PIPELINES
from accy.target import CP_ASYNC, F16_MMA, TF32_MMA, TargetProfile

ASYNC = dataclasses.replace(NV, tensor_cores=(TF32_MMA, CP_ASYNC, F16_MMA),
                            dtypes=NV.dtypes | {DType.f16})


def ptx_a16(lane: int, i: int) -> tuple[int, int]:
    """(row, col) of A element a_i (i in 0..7) of m16n8k16 .f16 (PTX ISA)."""
    group, tig = lane >> 2, lane % 4
    row = group if i < 2 or 4 <= i < 6 else group + 8
    return row, tig * 2 + (i & 1) + (8 if i >= 4 else 0)


def ptx_b16(lane: int, i: int) -> tuple[int, int]:
    """(row k, col n) of B element b_i (i in 0..3)."""
    group, tig = lane >> 2, lane % 4
    return tig * 2 + (i & 1) + (8 if i >= 2 else 0), group


def ptx_c(lane: int, i: int) -> tuple[int, int]:
    group, tig = lane >> 2, lane % 4
    return group + 8 * (i // 2), 2 * tig + (i % 2)


def emulate_mma16(a_el: np.ndarray, b_el: np.ndarray, c: np.ndarray) -> np.ndarray:
    """One warp's m16n8k16: A elements (32 lanes x 8), B (32 x 4), C (32 x 4) -> D."""
    a, b, acc = np.zeros((16, 16)), np.zeros((16, 8)), np.zeros((16, 8))
    for lane in range(32):
        for i in range(8):
            a[ptx_a16(lane, i)] = a_el[lane, i]
        for i in range(4):
            b[ptx_b16(lane, i)] = b_el[lane, i]
            acc[ptx_c(lane, i)] = c[lane, i]
    d = a @ b + acc
    return np.array([[d[ptx_c(lane, i)] for i in range(4)] for lane in range(32)])


TILES16 = pytest.mark.parametrize("tiles", [WIDE16, SMALL16, dataclasses.replace(
    SMALL16, bk=16, stages=4)], ids=["128x128x32", "64x64x32", "64x64x16:4"])


@TILES16
def test_f16_fragment_formulas_compute_the_block_product_in_emulation(tiles: MmaTiles):
    """Halves laid out as the cp.async copies leave them (``As[m][k]``, ``Bs[k][n]``), A
    registers read as words at the generator's addresses, B halves picked from their words by
    the lane's shift, a warp's m16n8k16 emulated per the PTX layout: the tile is A @ B."""

    def fragments(a_loc, b_loc, wm, wn, mi, ni, kk, acc):
        ar, br = np.zeros((32, 8)), np.zeros((32, 4))
        for lane in range(32):
            g, t = lane_parts(idx(lane))
            word = num(a_lane_base(tiles, wm, g, t))
            for r in range(4):  # word w holds halves 2w (low) and 2w + 1
                w = word + a_offset(tiles, mi, kk, r)
                ar[lane, 2 * r:2 * r + 2] = a_loc[2 * w:2 * w + 2]
            half = num(b16_lane_base(tiles, wn, g, t))
            shift = half % 2  # the generator's b_shift / 16
            for i in range(4):
                off = b16_offset(tiles, ni, kk, i)
                assert off % 2 == 0
                w = half // 2 + off // 2
                br[lane, i] = b_loc[2 * w + shift]
        return emulate_mma16(ar, br, acc)

    emulate_block(tiles, 2, 16, fragments)


def conflict_free(words: list[int]) -> bool:
    """One warp's 32-bit local reads need no replay: lanes reading the same word share it
    (a broadcast), distinct words sit in distinct banks."""
    distinct = set(words)
    return len({w % 32 for w in distinct}) == len(distinct)


@pytest.mark.parametrize("tiles", [WIDE, SMALL, WIDE16, SMALL16,
                                   parse_tiles("128x128x8:2x2:4"),
                                   parse_tiles("64x64x32:2x2:3")])
def test_fragment_loads_of_every_stage_are_free_of_bank_conflicts(tiles: MmaTiles):
    words = 2 if tiles.f16 else 1
    for stage in range(tiles.stages):
        a0, b0 = stage * tiles.a_size // words, stage * tiles.b_size // words
        for kk in range(tiles.bk // tiles.mma_k):
            for mi, ni, r in [(0, 0, 0), (tiles.frags_m - 1, tiles.frags_n - 1, 1),
                              (0, tiles.frags_n - 1, 3)]:
                a_words, b_words = [], []
                for lane in range(32):
                    g, t = lane_parts(idx(lane))
                    a_words.append(a0 + num(a_lane_base(tiles, idx(0), g, t))
                                   + a_offset(tiles, mi, kk, r))
                    if tiles.f16:
                        b_words.append(b0 + (num(b16_lane_base(tiles, idx(0), g, t))
                                             + b16_offset(tiles, ni, kk, r)) // 2)
                    else:
                        b_words.append(b0 + num(b_lane_base(tiles, idx(0), g, t))
                                       + b_offset(tiles, ni, kk, r % 2))
                assert conflict_free(a_words) and conflict_free(b_words)
                assert len(set(a_words)) == 32  # every lane its own A word


@pytest.mark.parametrize("tiles", [WIDE, SMALL16, parse_tiles("128x128x8:2x2:4"),
                                   parse_tiles("64x64x16:2x2:3")])
def test_async_copies_are_aligned_16_byte_rows_covering_each_element_once(tiles: MmaTiles):
    """cp.async moves 16 aligned bytes: A along K into ``As[m][k]``, B along N into
    ``Bs[k][n]``; every slot of every work-item lands 16-byte aligned in every stage, and the
    slots cover each tile element exactly once."""
    for side, k_major, size in (("x", True, tiles.a_size), ("y", False, tiles.b_size)):
        seen = []
        for tid in range(tiles.threads):
            for i in range(tiles.slots(side)):
                f, k = copy_slot(tiles, side, k_major, idx(tid + i * tiles.threads))
                at = num(local_index(tiles, side, f, k))
                for stage in range(tiles.stages):
                    assert (stage * size + at) * tiles.elem_bytes % 16 == 0
                seen += [at + j for j in range(tiles.vector)]  # along the local row
        free = tiles.bm if side == "x" else tiles.bn
        assert len(seen) == len(set(seen)) == free * tiles.bk


def test_tiles_text_and_stages():
    t = parse_tiles("64x64x16:2x2:3")
    assert (t.stages, t.text()) == (3, "64x64x16:2x2:3")
    assert parse_tiles("128x128x16:2x2") == WIDE and WIDE.text() == "128x128x16:2x2:2"
    assert parse_tiles("16x128x64:1x4:8").stages == 8  # (skinny f16 tiles stream through 8)
    for bad in ("64x64x16:2x2:9", "64x64x16:2x2:1", "64x64x16:2x2:3:4", "64x64x16:2x2:x"):
        with pytest.raises(ValueError):
            parse_tiles(bad)
    with pytest.raises(ValueError):  # f16 steps are 16 deep
        dataclasses.replace(SMALL16, bk=8).check()
    assert WIDE16.local_bytes() == 2 * (128 * 40 + 32 * 136) * 2
    for t in (WIDE, WIDE16, SMALL16, parse_tiles("128x128x8:2x2:4")):
        assert t.local_bytes() <= 48 * 1024


# selection and rendering --------------------------------------------------------------------
def matmul16(m: int, n: int, k: int, batch: int = 0, bias: bool = False,
             b_transposed: bool = False) -> accy.Program:
    """f16 ``A @ B`` (B stored N x K when ``b_transposed``), + bias and relu when asked."""
    lead = (batch,) if batch else ()
    b = accy.Builder()
    types = [TensorType((*lead, m, k), DType.f16),
             TensorType((*lead, n, k) if b_transposed else (*lead, k, n), DType.f16)]
    if bias:
        types.append(TensorType((n,), DType.f16))
    f = b.begin_function("f", types)
    spec = ("bik,bjk->bij" if b_transposed else "bik,bkj->bij") if batch else (
        "ik,jk->ij" if b_transposed else "ik,kj->ij")
    y = einsum(spec, f.param(0), f.param(1))
    f.return_((y + f.param(2)).relu() if bias else y)
    f.finish()
    return b.finish()


@pytest.mark.parametrize("precision", ["tf32", "3xtf32"])
def test_pipelined_with_cp_async(precision, pipe, used):
    job = prepare(matmul(2048, 2048, 256), precision, ASYNC, pipe)
    assert used(job) == {f"mma-{precision}": 1}
    src = job.kernel_source(0)
    # 128x64 tiles, scalar loads (the f32 default): three 14.5 KiB stages fit 48 KiB
    assert "cp.async.wait_group 1;" in src and src.count("cp.async.commit_group") == 3
    assert src.count("cp.async.cg.shared.global") == 3 * 6  # 6 slots: 2 prologue steps, loop
    assert "__local float a_tile[7680]" in src and ", in0)" not in src  # no register copies
    assert "cp.async.cg.shared.global [%0], [%1], 16;" in src  # no guards: dividing tiles
    assert src.count("cvt.rna.tf32.f32") == (2 * (4 * 4 + 4 * 2)
                                             * (2 if precision == "3xtf32" else 1))
    assert [s.status.value for s in job.kernel_summaries()] == ["legal"]


def test_steps_inside_k_copy_from_hoisted_addresses(pipe):
    """Each copy slot's source address is computed once (its row clamped inside A, its size 0
    past M); a step inside K adds the step's offset, and only the K tail's step evaluates the
    guards (4-byte copies of A: K = 313; 8-byte copies of B: N = 966)."""
    src = prepare(matmul(761, 966, 313), "3xtf32", ASYNC, pipe).kernel_source(0)
    head, loop = src.split("for (long kt")
    assert "const int x_p0 = ((int)((min((m0 + x_f0), 760L) * 313L) + x_k0));" in head
    assert "const int x_n0 = (((m0 + x_f0) < 761L) ? ((int)4) : ((int)0));" in head
    # B's 8-byte copies along N: a column pair past N clamped to the last whole pair
    assert "const int y_p0 = ((int)(min((n0 + y_f0), 964L) + (y_k0 * 966L)));" in head
    # B's second slot: the same column 8 rows on (128 work-items over rows of 16 slots), so
    # its address is the first's plus a constant and its source size the first's
    assert "const long y_f1 = y_f0;" in head and "const long y_k1 = (y_k0 + 8L);" in head
    assert "const int y_p1 = ((int)(y_p0 + 7728L));" in head and "y_n1" not in src
    inside, tail = loop.split("} else {")[:2]
    assert "x_ko" in inside and "< 313L" not in inside and "\"r\"(x_n0)" in inside
    assert "< 313L" in tail  # the K tail: every guard
    whole = prepare(matmul(1000, 1024, 512), "3xtf32", ASYNC, pipe).kernel_source(0)
    assert "} else {" not in whole.split("for (long kt")[1].split("mma.sync")[0]  # no K tail
    # A of 65536 x 40000 elements: offsets past 2^31, 64-bit (B's fit 32 bits)
    big = prepare(matmul(65536, 64, 40000), "3xtf32", ASYNC, pipe).kernel_source(0)
    assert "const long x_p0 = " in big and "const int y_p0 = " in big


def test_deeper_pipelines_where_local_memory_allows(pipe):
    src = prepare(matmul(1000, 1024, 520, epilogue=True), "tf32", ASYNC, pipe).kernel_source(0)
    assert "cp.async.wait_group 1;" in src  # 128x64 tiles: 3 stages
    assert "__local float a_tile[7680]" in src
    assert '16, %2;" ' in src and "? ((int)16) : ((int)0)" in src  # zero-filled edges


def test_3xtf32_operands_split_once_in_local_memory(pipe, experiment_script):
    """``round=tile`` under 3xtf32: each work-item splits the chunks it copied, the big part
    in place and the small part into ``a_small`` / ``b_small``; fragments load both, no cvt;
    local memory doubles (refused where the target lacks it)."""
    job = prepare(matmul(1024, 1024, 256), "3xtf32", ASYNC, pipe)
    tiled = experiment_script("bench_mma").with_mma_tiles(
        job, parse_tiles("64x64x16:2x2:2:round=tile"), "3xtf32")
    src = tiled.kernel_source(0)
    assert "__local float a_small[2560]" in src and "__local float b_small[" in src
    loop = src.split("for (long kt")[1]
    # A's two slots and B's two, 4 elements each, a cvt for the big part (this target has no
    # saturating rounding) and one for the small
    per_step = 2 * 2 * 4 * 2
    assert loop.count("cvt.rna.tf32.f32") == per_step  # the copies' split, none at fragments
    assert "((__local float4*)a_small)[(((cur * 1280L) + x_l0) / 4L)] = " in loop  # split
    assert "= as_int(a_small[(a_off + a_lane)]);" in loop  # a fragment's small part, loaded
    with pytest.raises(ValueError, match="doubles the tiles"):
        experiment_script("bench_mma").with_mma_tiles(
            job, parse_tiles("128x128x16:2x2:2:round=tile"), "3xtf32")


@pytest.mark.parametrize("split_once", [True, False])
def test_split_once_switch_splits_3xtf32_operands_in_local_memory(pipe, monkeypatch,
                                                                   split_once):
    """``mma.SPLIT_ONCE``: 3xtf32 tiles take ``round=tile`` where local memory holds the
    small parts' tiles too, B rows of 1030 floats (copied 8 bytes at a time) included; tf32
    tiles keep rounding at the fragments."""
    monkeypatch.setattr(mma, "SPLIT_ONCE", split_once)
    src = prepare(matmul(1000, 1030, 520), "3xtf32", ASYNC, pipe).kernel_source(0)
    assert ("__local float b_small[" in src) == split_once
    assert ("(__local float2*)b_small)" in src.split("for (long kt")[1]) == split_once  # 8 bytes
    assert "b_small" not in prepare(matmul(1000, 1030, 520), "tf32", ASYNC, pipe).kernel_source(0)


def test_copied_operands_stay_in_global_memory(pipe):
    """cp.async reads global addresses: operands small enough for constant memory stay global
    in the pipelined kernel (``Kernel.global_args``); the bias, read plainly, may go there."""
    head = {t: prepare(matmul(130, 96, 40, 0, True), "tf32", t, pipe).kernel_source(0).split(
        "{")[0] for t in (ASYNC, NV)}
    assert ("__global const float* restrict in0, __global const float* restrict in1, "
            "__constant float* restrict in2") in head[ASYNC]
    assert "__constant float* restrict in0, __constant float* restrict in1" in head[NV]


def test_no_more_stages_than_k_steps(pipe):
    """128x64 tiles take 3 stages, but K = 32 has 2 steps of 16: 2 stages."""
    src = prepare(matmul(1000, 1024, 32), "tf32", ASYNC, pipe).kernel_source(0)
    assert "cp.async.wait_group 0;" in src and "__local float a_tile[5120]" in src


def test_plain_loads_where_cp_async_cannot_copy(pipe):
    """cp.async cannot transpose: A stored K x M keeps the register path (two buffers), as do
    targets without the probe's entry; f32 rows not a multiple of 4 go 8 or 4 bytes a copy."""
    for n, copy in ((258, "cp.async.ca.shared.global [%0], [%1], 8"),
                    (257, "cp.async.ca.shared.global [%0], [%1], 4")):
        src = prepare(matmul(256, n, 64), "tf32", ASYNC, pipe).kernel_source(0)
        assert copy in src and "cp.async.cg.shared.global [%0], [%1], 16" in src  # A: 16
    # f16 likewise: rows of 4 or 2 halves (N = 1030) copied 8 or 4 bytes at a time, B
    # stored along N or along K
    for prog, copy in ((matmul16(256, 516, 64), "8"), (matmul16(256, 1030, 64), "4"),
                       (matmul16(256, 256, 36, b_transposed=True), "8")):
        job = prepare(prog, "ieee", ASYNC, pipe)
        src = job.kernel_source(0)
        assert "mma.sync.aligned.m16n8k16" in src
        assert f"cp.async.ca.shared.global [%0], [%1], {copy}" in src
    for prog, target in ((matmul(256, 256, 64, a_transposed=True), ASYNC),
                         (matmul(256, 256, 64), NV)):
        src = prepare(prog, "tf32", target, pipe).kernel_source(0)
        assert "mma.sync" in src and "cp.async" not in src
    with pytest.raises(ValueError, match="stages need cp.async"):
        prepared_with_tiles(matmul(256, 256, 64), NV, parse_tiles("64x64x16:2x2:3"), pipe)


def prepared_with_tiles(prog, target, tiles, pipe, precision="tf32"):
    from accy.ir.program import Stage
    job = prepare(prog, precision, target, pipe)
    p = job.products[Stage.kernel]
    work_item = p.kernels[0].work_item
    item = p.schedule.item(work_item)
    outline = next(o for o in p.outline.outlines if o.work_item == work_item)
    return mma.build(p.fusion.groups[item.group], outline, item.kind, p.target,
                     "f16" if precision == "f16" else precision, tiles)


@pytest.mark.parametrize("precision", ["ieee", "tf32", "3xtf32"])
def test_f16_products_take_f16_tensor_cores_under_any_policy(precision, pipe, used):
    job = prepare(matmul16(2048, 2048, 256), precision, ASYNC, pipe)
    assert used(job) == {"mma-f16": 1}
    src = job.kernel_source(0)
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in src
    assert "cvt" not in src and "__local int a_tile[6144]" in src  # 3 stages of 16 KiB
    assert "__global const half* restrict in0" in src and "vstore_half" in src
    assert src.count("mma.sync") == 2 * 4 * 8
    # per sub-step an ldmatrix per A fragment, an ldmatrix.trans per pair of B fragments
    assert src.count("ldmatrix.sync.aligned.m8n8.x4.shared.b16") == 2 * 4
    assert src.count("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16") == 2 * 4


@pytest.mark.parametrize("prog, precision, passes, packs, vstores", [
    # f16 out, 128x128 tiles, 3 stages: 64 rows (2 fragment rows of both warp rows) a pass
    (matmul16(2048, 2048, 256), "ieee", 2, 64, 16),
    # f32 out, 128x64 tiles of padded rows: 32 rows (a fragment row of both warp rows) a pass
    (matmul(2048, 2048, 256), "tf32", 4, 0, 16),
], ids=["f16", "f32"])
def test_staged_stores_take_the_tiles_in_turn(prog, precision, passes, packs, vstores, pipe,
                                              used):
    """Every warp writes in every pass, passes alternate between the A and B tiles (one
    barrier a pass, after the K loop's), f16 outputs go two halves a word, 16 bytes a store."""
    src = prepare(prog, precision, ASYNC, pipe).kernel_source(0)
    assert src.count("barrier(") == 1 + 1 + passes
    assert src.count("accy_pack_half2(") == packs + (1 if packs else 0)  # calls, definition
    assert src.count("4*)out0)[") == vstores and "if ((wm" not in src
    stores = [line for line in src.splitlines() if "_tile[" in line and "] = " in line]
    assert {s.split("[")[0].strip() for s in stores} == {"a_tile", "b_tile"}


@pytest.mark.parametrize("target, prog", [
    (dataclasses.replace(ASYNC, tensor_cores=(TF32_MMA, CP_ASYNC)), matmul16(512, 512, 64)),
    (dataclasses.replace(ASYNC, tensor_cores=(TF32_MMA, F16_MMA)), matmul16(512, 512, 64)),
    (ASYNC, matmul16(512, 512, 37, b_transposed=True)),  # rows of odd halves: no 4 bytes
    (ASYNC, matmul16(512, 511, 64)),  # B's rows of odd halves
    (ASYNC, matmul16(512, 512, 20)),  # K too small
], ids=["no-f16-mma", "no-cp-async", "rows-of-odd-halves", "b-rows-of-odd-halves", "small-k"])
def test_f16_not_chosen_without_everything_it_needs(target, prog, pipe, used):
    job = prepare(prog, "ieee", target, pipe)
    assert not any(name.startswith("mma") for name in used(job))
    assert "asm" not in job.kernel_source(0)


def test_f16_products_stay_f16_for_tensor_cores_without_cl_khr_fp16(pipe, used):
    # the H200's OpenCL has no cl_khr_fp16: dtype-legalization promotes f16 to f32 but keeps
    # the product in f16 (mma-f16 needs no f16 arithmetic), the bias and relu in f32
    from accy.ir.ops import Op
    from accy.ir.program import Stage
    from accy.ir.types import DType

    job = prepare(matmul16(512, 512, 64, bias=True), "ieee",
                  dataclasses.replace(ASYNC, dtypes=NV.dtypes), pipe)
    assert used(job) == {"mma-f16": 1}
    nodes = job.products[Stage.tensor].program.nodes()
    (product,) = [n for n in nodes if n.op is Op.EINSUM]
    assert product.type.dtype is DType.f16
    assert all(s.type.dtype is DType.f16 and s.op is Op.PARAM for s in product.srcs)
    assert {n.type.dtype for n in nodes if n.op is Op.ADD} == {DType.f32}
    # B stored along K (x @ W.T): kept too, its tile along K as well; rows that are not
    # whole 16-byte vectors too (copied 8 or 4 bytes at a time); rows of odd halves padded
    # (test_f16_products_of_odd_rows_are_padded_onto_tensor_cores)
    for prog in (matmul16(512, 512, 64, b_transposed=True), matmul16(1000, 1030, 520),
                 matmul16(512, 512, 36, b_transposed=True)):
        job = prepare(prog, "ieee", dataclasses.replace(ASYNC, dtypes=NV.dtypes), pipe)
        assert used(job) == {"mma-f16": 1}
    # without f16 tensor cores the product is promoted with everything else
    job = prepare(matmul16(512, 512, 64, bias=True), "ieee",
                  dataclasses.replace(NV, tensor_cores=(TF32_MMA, CP_ASYNC)), pipe)
    nodes = job.products[Stage.tensor].program.nodes()
    assert [n.type.dtype for n in nodes if n.op is Op.EINSUM] == [DType.f32]


@pytest.mark.skipif(cl is None, reason="needs pyopencl")
@pytest.mark.parametrize("m, n, k, b_transposed, mode", [
    (70, 75, 91, False, "eager"),  # K and B's rows (N) odd: both padded, the result sliced
    (64, 72, 37, True, "deferred"),  # B stored along K: K padded in both, nothing sliced
    (66, 64, 64, False, "eager"),  # even rows: as stored
], ids=["k-and-n-odd", "b-along-k", "even"])
def test_f16_products_of_odd_rows_are_padded_onto_tensor_cores(device, pipe, used, m, n, k,
                                                              b_transposed, mode):
    """dtype-legalization pads an f16 product's odd last axes with zeros to whole 16-byte rows
    (padding kernels, then mma-f16, then the result sliced back where N was padded) instead of
    computing it in f32; run in emulation through the job's own executable against float64."""
    from accy.ir.ops import Op
    from accy.ir.program import Stage

    job = prepare(matmul16(m, n, k, b_transposed=b_transposed), "ieee",
                  dataclasses.replace(ASYNC, dtypes=NV.dtypes), pipe)
    nodes = job.products[Stage.tensor].program.nodes()
    (product,) = [x for x in nodes if x.op is Op.EINSUM]
    assert product.type.dtype is DType.f16
    assert all(s.type.shape[-1] % 8 == 0 for s in product.srcs) or k % 2 == 0
    assert any(x.op is Op.SLICE for x in nodes) == (n % 2 == 1)
    assert used(job).get("mma-f16") == 1
    assert "loop-nest" not in used(job) or len(job.kernels) > 1  # only the copies
    rng = np.random.default_rng(m + n + k)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float16)
    b = rng.uniform(-1, 1, (n, k) if b_transposed else (k, n)).astype(np.float16)
    for i in range(len(job.kernels)):
        if "asm" in job.kernel_source(i):
            job._sources[i] = emulated_async(job.kernel_source(i), mode)
    with emulated_builds(device):
        (got,) = job.executable(device=device)(a, b)
    exact = a.astype(np.float64) @ (b.T if b_transposed else b).astype(np.float64)
    assert got.shape == (m, n)
    np.testing.assert_allclose(got.astype(np.float64), exact, rtol=2**-10, atol=1e-6 * k)


@pytest.mark.skipif(cl is None, reason="needs pyopencl")
def test_padded_hidden_layer_stays_padded_through_its_epilogue(device, pipe, used):
    """An f16 MLP whose hidden width (75) is odd: the first product's N and the second's K
    are padded to 80. The bias and GELU between them are computed at the padded width in the
    first product's epilogue, and the columns past 75 are selected to zero there (a constant
    mask, not a slice and a pad: two kernels fewer); an infinity in x, which makes the
    padded columns NaN before the mask, still gives the interpreter's values. Emulated."""
    from accy.ir.interpret import interpret

    t, d, f = 70, 64, 75

    def mlp(x, w1, b1, w2):
        return einsum("tf,fd->td", (einsum("td,df->tf", x, w1) + b1).gelu(), w2)

    types = [TensorType(s, DType.f16) for s in ((t, d), (d, f), (f,), (f, d))]
    prog = accy.trace(mlp, *types, name="mlp")
    job = prepare(prog, "ieee", dataclasses.replace(ASYNC, dtypes=NV.dtypes), pipe)
    assert used(job) == {"row-movement": 2, "mma-f16": 2}  # the pads of w1 and w2
    assert not any("slice" in k.entry for k in job.kernels)
    rng = np.random.default_rng(11)
    xs = [(rng.uniform(-1, 1, ty.shape) / np.sqrt(ty.shape[0])).astype(np.float16)
          for ty in types]
    xs[0][3, 5] = np.inf  # row 3 of the product: +inf where w1[5] > 0, NaN past 75 unmasked
    xs[1][5] = np.abs(xs[1][5]) + np.float16(0.01)
    xs[3] = np.abs(xs[3]) + np.float16(0.01)  # so the interpreter's row 3 is +inf
    for i in range(len(job.kernels)):
        if "asm" in job.kernel_source(i):
            job._sources[i] = emulated_async(job.kernel_source(i), "eager")
    with emulated_builds(device):
        (got,) = job.executable(device=device)(*xs)
    (want,) = interpret(prog, xs)
    assert np.isinf(want[3]).all()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=2e-2,
                               atol=2e-2)


@pytest.mark.skipif(cl is None, reason="needs pyopencl")
def test_f32_products_of_unaligned_rows_are_padded_and_exact(device, pipe, used):
    """contraction-padding pads K = 101 to 104 (copies of A and B with zeros), so mma-3xtf32
    copies A's rows 16 bytes at a time (a small product: its intensity lowered to take it);
    run in emulation through the job's executable."""
    tensor = PIPELINES["accy-tensor"].text.replace("contraction-padding",
                                                   "contraction-padding{intensity=256}")
    job = accy.prepare(matmul(300, 290, 101), pipe("precision=3xtf32", tensor), target=ASYNC)
    assert used(job)["mma-3xtf32"] == 1 and len(job.kernels) == 3
    src = job.kernel_source(2)
    assert "cp.async.cg.shared.global [%0], [%1], 16" in src and ", 4, %2" not in src
    rng = np.random.default_rng(3)
    a = rng.standard_normal((300, 101)).astype(np.float32)
    b = rng.standard_normal((101, 290)).astype(np.float32)
    job._sources[2] = emulated_async(src, "deferred")
    with emulated_builds(device):
        (got,) = job.executable(device=device)(a, b)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=0, atol=1e-5 * 101)


def test_never_chosen_on_the_pocl_device(device, pipe, used):
    if device.info.platform != "Portable Computing Language":
        pytest.skip(f"about PoCL; the default device is {device.info.platform}")
    target = TargetProfile.from_device(device.info)
    assert not set(target.tensor_cores) & {CP_ASYNC, F16_MMA}
    for prog in (matmul16(256, 256, 64), matmul(256, 256, 64)):
        job = prepare(prog, "tf32", target, pipe)
        assert not any(name.startswith("mma") for name in used(job))


def test_generated_c_builds_with_the_ptx_stubbed_out(device, pipe):
    for prog in (matmul(1000, 1024, 520, epilogue=True), matmul16(130, 72, 48, bias=True),
                 matmul16(512, 512, 64, batch=4)):
        src = prepare(prog, "tf32", ASYNC, pipe).kernel_source(0)
        assert "cp.async" in src
        stub = re.sub(r'asm(?: volatile)?\("[^"]*" : [^;]*\);', ";", src)
        assert "asm" not in stub
        device.build(stub)


def test_probe_sources_use_the_generators_instruction_forms():
    assert mma_ptx.MMA_F16.split(" {")[0] in tensor_cores.MMA_F16_PROBE_SOURCE.replace('"\n', "")
    for form in (mma_ptx.CP_ASYNC_16, mma_ptx.CP_ASYNC_ZFILL, mma_ptx.CP_COMMIT,
                 mma_ptx.CP_WAIT.format(0)):
        assert form in tensor_cores.CP_ASYNC_PROBE_SOURCE, form
    assert '"r"(((int)((long)(tile + ' in tensor_cores.CP_ASYNC_PROBE_SOURCE
