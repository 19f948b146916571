"""tiled-contraction on CPUs: operands read where used (``Tiles.stream``), no local tiles,
and K-contiguous operands summed along K (``Tiles.dot``).

The tile rule (:func:`~accy.kernels.contraction_plan.choose_tiles` for a CPU profile), the
kernels' structure, and their numbers against numpy in float64 on the default device, for
random shapes with every edge (rows, columns and K past the tiles), batches, transposed X and
epilogues. GPU profiles never stream.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from contraction_support import AVX512, matches_twice, operand_shapes, program
from hypothesis import given, settings
from hypothesis import strategies as st

import accy
from accy import f32
from accy.builder import einsum
from accy.ir.types import DType, TensorType
from accy.kernels import contraction_cpu
from accy.kernels.contraction_plan import choose_tiles, classify

AVX2 = dataclasses.replace(AVX512, native_vector_bytes=32)


def tiles(spec: str, shapes, target=AVX512, dtype: DType = DType.f32):
    b = accy.Builder()
    f = b.begin_function("f", [TensorType(s, dtype) for s in shapes])
    node = einsum(spec, *(f.param(i) for i in range(len(shapes)))).node
    return choose_tiles(classify(node), target)


def test_cpu_tiles_stream_where_y_gives_vectors_of_half_the_native_width():
    t = tiles("ik,kj->ij", [(1024, 1024), (1024, 1024)])
    assert (t.stream, t.vn, t.vm * t.sm, t.sn) == (True, 16, 8, 3)
    t = tiles("ik,kj->ij", [(64, 1000), (1000, 1000)])  # 1000 = 8 x 125: float8 columns
    assert (t.stream, t.vn) == (True, 8)
    # 1020 = 4 x 255: float16 all the same, unaligned, the last of a row overlapping
    t = tiles("ik,kj->ij", [(64, 1000), (1000, 1020)])
    assert (t.stream, t.vn, t.overlap) == (True, 16, True)
    assert not tiles("ik,kj->ij", [(64, 1000), (1000, 1024)]).overlap
    assert not tiles("ik,kj->ij", [(64, 100), (100, 12)]).stream  # rows shorter than a vector
    assert tiles("ik,kj->ij", [(64, 100), (100, 1020)], AVX2).stream  # AVX2: 4 of 8 lanes
    t = tiles("ik,jk->ij", [(64, 100), (1024, 100)])  # Y K-contiguous: staged
    assert (t.stream, t.vn) == (False, 16)
    assert not tiles("ik,kj->ij", [(64, 64), (64, 64)], dtype=DType.f16).stream


def test_streamed_k_past_the_last_whole_step_runs_one_at_a_time_unguarded(cpu):
    src = accy.prepare(program("ik,kj->ij", [(64, 1041), (1041, 1024)]),
                       target=cpu).kernel_source(0)
    assert "kt < 1024L; kt += 64)" in src and "(long kt = 1024L; kt < 1041L; kt += 1)" in src
    assert ") < 1041L) ?" not in src  # no (k < K) ? load : 0


def test_cpu_tiles_for_fewer_than_4_rows_take_them_all_and_spread_the_columns():
    for n, sn in [(4096, 8), (512, 8), (128, 2), (16, 1)]:
        t = tiles("ik,kj->ij", [(1, 512), (512, n)])
        assert (t.bm, t.sn, t.vn, t.stream) == (1, sn, 16, True), n
    t = tiles("ik,kj->ij", [(3, 512), (512, 4096)])
    assert (t.bm, t.vm, t.sn) == (3, 1, 8)  # 3 rows apart, 24 accumulators
    t = tiles("ik,kj->ij", [(1, 512), (512, 999)])  # any width when reading Y bounds it
    assert (t.stream, t.vn, t.sn) == (True, 1, 8)
    assert tiles("ik,kj->ij", [(2, 64), (64, 4096)], AVX2).sn == 6  # 12 accumulators


def test_cpu_tiles_of_k_contiguous_operands_sum_along_k():
    t = tiles("ik,jk->ij", [(1, 25088), (4096, 25088)])
    assert (t.dot, t.bm, t.sn, t.vn, t.stream) == (16, 1, 8, 1, True)
    assert tiles("ik,jk->ij", [(3, 1000), (100, 1000)]).dot == 16  # 1000 = 62 x 16 + 8
    assert tiles("ik,jk->ij", [(2, 1000), (100, 1000)], AVX2).dot == 8
    assert tiles("ik,jk->ij", [(64, 1021), (100, 1021)]).dot == 16
    assert tiles("ik,jk->ij", [(64, 112), (100, 112)]).dot == 0  # K of 7 vectors: staged
    t = tiles("ik,jk->ij", [(64, 1024), (1024, 1024)])  # 24 accumulators, least padding
    assert (t.dot, t.bm, t.sn) == (16, 4, 6)
    assert (tiles("ik,jk->ij", [(64, 1024), (1024, 1024)], AVX2).bm,) == (4,)
    assert tiles("ki,jk->ij", [(1024, 2), (100, 1024)]).dot == 0  # X M-contiguous
    narrow = dataclasses.replace(AVX512, native_vector_bytes=4)  # f64: scalar lanes
    assert tiles("ik,jk->ij", [(1, 64), (100, 64)], narrow, DType.f64).dot == 1
    t = tiles("ki,jk->ij", [(64, 2), (100, 64)], narrow, DType.f64)  # no dot, even of 1 lane
    assert (t.dot, t.vn) == (0, 1) and t.bk > 0


def test_streamed_tiles_past_the_edges_read_the_last_row_or_vector_unguarded(cpu):
    """Rows past M and vectors past N (67 rows in tiles of 24, 160 columns in tiles of 64)
    load the operand's last row or vector instead of a zero behind a branch at every load
    (their outputs are never stored); vectors load at their element offset, not at a vector
    index divided out of it (a signed division on every load)."""
    src = accy.prepare(program("ik,kj->ij", [(67, 45), (45, 160)]), target=cpu).kernel_source(0)
    assert "in0[((min((m0 + (ty * 2L)), 66L) * 45L)" in src
    assert "vload16(0, in1 + (min((n0 + (tx * 16L)), 144L)" in src
    assert "?" not in src


def test_streamed_kernels_have_no_local_tiles_or_barriers(cpu, profiles):
    prog = program("ik,kj->ij", [(67, 45), (45, 160)])
    src = accy.prepare(prog, target=cpu).kernel_source(0)
    assert "__local" not in src and "barrier" not in src
    assert "vload16" in src and "fma(" in src
    gpu = accy.prepare(prog, target=profiles["gpu-tiles"]).kernel_source(0)
    assert "__local" in gpu and "barrier" in gpu
    # X: rows one by one where K-contiguous, as vectors where M-contiguous (8 rows: float8)
    assert "const float a0_0_1 = " in accy.prepare(
        program("ik,kj->ij", [(64, 40), (40, 128)]), target=cpu).kernel_source(0)
    assert "const float8 a0_0 = " in accy.prepare(
        program("ki,kj->ij", [(40, 64), (40, 128)]), target=cpu).kernel_source(0)
    # summed along K: vectors loaded at their element offset (no signed division at every
    # load, aligned or not), then the K tail one at a time
    aligned = accy.prepare(program("ik,jk->ij", [(5, 256), (40, 256)]), target=cpu)
    assert "vload16(0, " in aligned.kernel_source(0) and "vload16((" not in (
        aligned.kernel_source(0)) and "kt += 1)" not in aligned.kernel_source(0)
    tail = accy.prepare(program("ik,jk->ij", [(5, 260), (40, 260)]), target=cpu)
    assert "vload16(0, " in tail.kernel_source(0) and "(long kt = 256L; kt < 260L; kt += 1)" in (
        tail.kernel_source(0))
    staged = accy.prepare(program("ik,jk->ij", [(20, 45), (160, 45)]), target=cpu)
    assert staged.kernel_count == 1 and "y_tile" in staged.kernel_source(0)


def test_tiles_short_of_registers_load_each_b_vector_just_before_its_fmas(device):
    """AVX2 (16 vector registers): 3 rows x 4 vectors (12 accumulators, 4 B vectors and a
    broadcast: 17) interleave each B vector's load with its column's FMAs; 4 rows x 3 vectors
    (16) and AVX-512's 6 x 4 (29 of 32) load a step's B vectors first. Right on the device."""
    def loop(shapes, target):  # the job, and the names its K loop's first lines assign
        job = accy.prepare(program("ik,kj->ij", shapes), target=target)
        src = job.kernel_source(job.kernel_count - 1)
        return job, [line.split(" = ")[0].split()[-1] for line in
                     src[src.index("for (long kk"):].splitlines()[1:30] if " = " in line]

    def b_first(order):  # the step's second B vector loaded before its first FMA
        return order.index("b0_1") < next(i for i, n in enumerate(order) if "acc" in n)

    shapes = [(60, 200), (200, 320)]
    assert (tiles("ik,kj->ij", shapes, AVX2).sm, tiles("ik,kj->ij", shapes, AVX2).sn) == (3, 4)
    job, order = loop(shapes, AVX2)
    assert order[3:11] == ["b0_0", "acc_0_0", "acc_1_0", "acc_2_0", "b0_1", "acc_0_1",
                           "acc_1_1", "acc_2_1"]
    rng = np.random.default_rng(7)
    x, y = rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])
    (out,) = job.run(x.astype(np.float32), y.astype(np.float32), device=device)
    np.testing.assert_allclose(out, x @ y, rtol=1e-4, atol=1e-4 * np.abs(x @ y).max())
    assert b_first(loop([(64, 200), (200, 96)], AVX2)[1])  # 4 x 3
    assert b_first(loop(shapes, AVX512)[1])


@st.composite
def streamed(draw):
    """A product that streams: plain, X transposed, batched, or Y shared by a batch of X; N a
    multiple of 8 or 16, or any N past 1 for fewer than 4 rows."""
    form = draw(st.sampled_from(["ik,kj->ij", "ki,kj->ij", "bik,bkj->bij", "bik,kj->bij"]))
    m, k, b = draw(st.integers(1, 40)), draw(st.integers(2, 150)), draw(st.integers(1, 3))
    rows = m * b if form == "bik,kj->bij" else m  # b and i flatten into M there
    n = (draw(st.integers(2, 100)) if rows < 4
         else draw(st.sampled_from([8, 16])) * draw(st.integers(1, 12)))
    size = {"i": m, "k": k, "j": n, "b": b}
    return form, operand_shapes(form, size)


def run_and_compare(device, target, spec: str, shapes, relu: bool, *markers: str) -> None:
    """Prepare ``spec`` (with a relu epilogue or none) for ``target``: one tiled-contraction
    kernel whose source holds ``markers`` and no local memory; its result on ``device``
    against numpy in float64."""
    prog = program(spec, shapes, epilogue=(lambda out: accy.relu(out)) if relu else None)
    job = accy.prepare(prog, target=target)
    assert job.generators() == {"tiled-contraction": 1}
    src = job.kernel_source(0)
    assert "__local" not in src and all(m in src for m in markers), "staged, not streamed"
    rng = np.random.default_rng(3)
    x, y = (rng.standard_normal(s).astype(np.float32) for s in shapes)
    (out,) = job.run(x, y, device=device)
    ref = np.einsum(spec, x.astype(np.float64), y.astype(np.float64))
    ref = np.maximum(ref, 0) if relu else ref
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(ref).max()))


@settings(max_examples=25, deadline=None)
@given(case=streamed(), relu=st.booleans())
def test_streamed_products_match_numpy(device, cpu, case, relu):
    run_and_compare(device, cpu, *case, relu)


@st.composite
def overlapping(draw):
    """A product of at least 4 rows whose Y rows (N of 16 or more, not a multiple of 8) give
    no aligned vectors: streamed unaligned, the last vector of a row overlapping the one
    before (``Tiles.overlap``); plain, batched, or Y shared by a batch."""
    form = draw(st.sampled_from(["ik,kj->ij", "bik,bkj->bij", "bik,kj->bij"]))
    m, k, b = draw(st.integers(4, 40)), draw(st.integers(2, 150)), draw(st.integers(1, 3))
    n = draw(st.integers(17, 300).filter(lambda v: v % 8))  # (a multiple of 8: aligned)
    size = {"i": m, "k": k, "j": n, "b": b}
    return form, operand_shapes(form, size)


@settings(max_examples=25, deadline=None)
@given(case=overlapping(), relu=st.booleans())
def test_overlapping_last_vectors_match_numpy(device, cpu, case, relu):
    run_and_compare(device, cpu, *case, relu, "min(")


def test_a_traced_product_with_rows_of_no_whole_vectors_streams(device, cpu):
    """N = 258: streamed, the last vector of each row moved back to end at N, not staged."""
    @accy.function
    def dense(x: f32[250, 130], w: f32[130, 258], b: f32[258]):
        return accy.relu(x @ w + b)

    job = accy.prepare(dense, target=cpu)
    src = job.kernel_source(0)
    assert job.kernel_count == 1 and "__local" not in src and "vstore16(" in src
    rng = np.random.default_rng(1)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((250, 130), (130, 258),
                                                                   (258,)))
    (out,) = job.run(x, w, b, device=device)
    want = np.maximum(x.astype(np.float64) @ w + b, 0)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_a_traced_matrix_vector_product_streams_on_the_cpu(device, cpu):
    @accy.function
    def mv(x: f32[1, 300], w: f32[300, 256], b: f32[256]):
        return accy.tanh(x @ w + b)

    job = accy.prepare(mv, target=cpu)
    assert job.kernel_count == 1 and "__local" not in job.kernel_source(0)
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((1, 300), (300, 256), (256,)))
    (out,) = job.run(x, w, b, device=device)
    np.testing.assert_allclose(out, np.tanh(x.astype(np.float64) @ w + b), rtol=1e-5, atol=1e-5)


@st.composite
def dots(draw):
    """A product with both operands K-contiguous, K of at least 8 vectors of 16 (a multiple
    of 16 or not), any number of rows and columns (some past the last tile), maybe
    batched."""
    form = draw(st.sampled_from(["ik,jk->ij", "bik,bjk->bij", "k,jk->j"]))
    m, b = draw(st.integers(1, 20)), draw(st.integers(1, 3))
    k = draw(st.one_of(st.integers(128, 480), st.integers(8, 30).map(lambda v: 16 * v)))
    size = {"i": m, "k": k, "j": draw(st.integers(1, 70)), "b": b}
    return form, operand_shapes(form, size)


@settings(max_examples=20, deadline=None)
@given(case=dots(), relu=st.booleans())
def test_products_summed_along_k_match_numpy(device, cpu, case, relu):
    run_and_compare(device, cpu, *case, relu, "sum_0_0")


# Y K-contiguous, copied N-contiguous first (accy.kernels.contraction_cpu) --------------------
def copies_y(spec: str, shapes, target=AVX512, dtype: DType = DType.f32) -> bool:
    b = accy.Builder()
    f = b.begin_function("f", [TensorType(s, dtype) for s in shapes])
    return contraction_cpu.pays(classify(einsum(spec, f.param(0), f.param(1)).node), target)


def test_y_is_copied_transposed_where_the_product_has_enough_rows():
    staged, summed = contraction_cpu.TRANSPOSE_ROWS, contraction_cpu.TRANSPOSE_ROWS_DOT
    assert copies_y("ik,jk->ij", [(staged, 100), (300, 100)])  # else staged (K < 8 x 16)
    assert not copies_y("ik,jk->ij", [(staged - 1, 100), (300, 100)])
    assert copies_y("ik,jk->ij", [(summed, 128), (300, 128)])  # else summed along K
    assert not copies_y("ik,jk->ij", [(summed - 1, 128), (300, 128)])
    assert copies_y("ki,jk->ij", [(128, summed - 1), (300, 128)])  # X M-contiguous: no dot
    assert copies_y("bik,jk->bij", [(2, staged, 40), (50, 40)])  # Y shared by the batch
    assert not copies_y("ik,kj->ij", [(64, 100), (100, 300)])  # Y N-contiguous already
    assert not copies_y("ik,jk->ij", [(64, 15), (300, 15)])  # K under a vector
    assert not copies_y("ik,jk->ij", [(64, 100), (300, 100)], dtype=DType.f16)
    gpu = dataclasses.replace(AVX512, device_type="gpu")
    assert not copies_y("ik,jk->ij", [(64, 100), (300, 100)], gpu)


def test_the_copy_writes_whole_vectors_and_the_product_streams_it(cpu):
    job = accy.prepare(program("ik,jk->ij", [(67, 45), (160, 45)]), target=cpu)
    copy, product = job.kernel_source(0), job.kernel_source(1)
    assert [k.entry for k in job.kernels] == ["einsum_kernel_yt", "einsum_kernel"]
    assert copy.count("vload16(0, ") == 16 and copy.count("vstore16(") == 16
    assert "__local" not in product and "scratch_yt" in product and "vload16(" in product
    # K = 45: the last block of 16 moves back to end at K
    assert "const long k0 = min(((gid % 3L) * 16L), 29L);" in copy
    assert accy.prepare(program("ik,jk->ij", [(67, 45), (160, 45)]), target=cpu,
                        ).kernel_count == 2


@st.composite
def transposed_ys(draw):
    """A product of enough rows whose Y is K-contiguous (f32 or f64, K of at least a vector of
    64 bytes and under 8 of them, so it would be staged): plain, X M-contiguous, batched, Y
    shared by the batch, or a batch of Y only, two batch letters, Y's batch letter between N
    and K; N and K multiples of the vector or not."""
    form = draw(st.sampled_from(["ik,jk->ij", "ki,jk->ij", "bik,bjk->bij", "bik,jk->bij",
                                 "ik,bjk->bij", "abik,abjk->abij", "bik,jbk->bij"]))
    dtype = draw(st.sampled_from([DType.f32, DType.f64]))
    lanes = 64 // dtype.itemsize
    size = {"i": draw(st.integers(32, 80)), "k": draw(st.integers(lanes, 8 * lanes - 1)),
            "j": draw(st.integers(1, 70)), "b": draw(st.integers(1, 3)),
            "a": draw(st.integers(1, 2))}
    return form, operand_shapes(form, size), dtype


@settings(max_examples=20, deadline=None)
@given(case=transposed_ys(), relu=st.booleans())
def test_products_reading_y_transposed_match_numpy(device, cpu, case, relu):
    spec, shapes, dtype = case
    prog = program(spec, shapes, dtype, epilogue=(lambda out: accy.relu(out)) if relu else None)
    job = accy.prepare(prog, target=cpu)
    assert job.kernels[0].entry.endswith("_yt") and job.kernel_count == 2
    matches_twice(device, job, spec, shapes, relu, dtype)


def test_a_traced_product_with_a_transposed_weight_reads_it_transposed(device, cpu):
    """``x @ w.T`` (a classifier's weight stored out x in) on a CPU: the copy, then the
    streamed product with its bias and activation, against numpy."""
    @accy.function
    def dense(x: f32[96, 100], w: f32[130, 100], b: f32[130]):
        return accy.relu(x @ w.T + b)

    job = accy.prepare(dense, target=cpu)
    assert job.kernel_count == 2 and "_yt" in job.kernels[0].entry
    rng = np.random.default_rng(2)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((96, 100), (130, 100),
                                                                   (130,)))
    (out,) = job.run(x, w, b, device=device)
    want = np.maximum(x.astype(np.float64) @ w.T + b, 0)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
