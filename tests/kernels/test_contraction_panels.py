"""CPU products reading Y from panels a tile wide (:func:`accy.kernels.contraction_cpu.layout`):
where the panels are chosen, the copy and product kernels' structure, and their numbers
against numpy in float64 on the default device for random shapes (panels forced on small
products), batches, Y shared by a batch, K-contiguous Y and epilogues; through a traced
``x @ w`` too."""

from __future__ import annotations

import contextlib
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
from accy.kernels.contraction_plan import classify


def panels(spec: str, shapes, target=AVX512) -> tuple[int, int]:
    """(width of Y's panels, tile width) the product of ``spec`` takes on ``target``."""
    b = accy.Builder()
    f = b.begin_function("f", [TensorType(s, DType.f32) for s in shapes])
    c = classify(einsum(spec, f.param(0), f.param(1)).node)
    reads, t, width = contraction_cpu.layout(c, target, None)
    assert width == 0 or reads.k.y == width
    return width, t.bn


@contextlib.contextmanager
def panels_from(rows: int | None, tiles: int):
    """PANEL_ROWS and PANEL_TILES set for the block."""
    old = contraction_cpu.PANEL_ROWS, contraction_cpu.PANEL_TILES
    contraction_cpu.PANEL_ROWS, contraction_cpu.PANEL_TILES = rows, tiles
    try:
        yield
    finally:
        contraction_cpu.PANEL_ROWS, contraction_cpu.PANEL_TILES = old


def test_y_is_copied_into_panels_where_the_product_has_enough_rows_and_tiles():
    rows = contraction_cpu.PANEL_ROWS
    width, bn = panels("ik,kj->ij", [(rows, 512), (512, 512)])
    assert width == bn == 48  # 3 vectors of 16
    assert panels("ik,kj->ij", [(rows - 1, 512), (512, 512)])[0] == 0
    assert panels("bik,bkj->bij", [(2, rows, 64), (2, 64, 512)])[0] == 48
    assert panels("ik,kj->ij", [(rows, 512), (512, 4 * 48)])[0] == 0  # not past 4 tiles
    assert panels("ik,kj->ij", [(rows, 512), (512, 500)])[0] == 0  # no whole vectors
    # Y K-contiguous: copied anyway from 32 rows (summed along K below 256), in panels
    assert panels("ik,jk->ij", [(64, 100), (512, 100)]) == (48, 48)
    assert panels("ik,jk->ij", [(64, 100), (150, 100)])[0] == 160  # rows of 10 vectors
    gpu = dataclasses.replace(AVX512, device_type="gpu")
    assert panels("ik,kj->ij", [(rows, 512), (512, 512)], gpu)[0] == 0
    with panels_from(None, 4):
        assert panels("ik,kj->ij", [(rows, 512), (512, 512)])[0] == 0
        assert panels("ik,jk->ij", [(64, 100), (512, 100)])[0] == 512  # one panel, N wide


def test_the_copy_writes_panels_and_each_tile_reads_its_own(cpu):
    job = accy.prepare(program("ik,kj->ij", [(400, 72), (72, 512)]), target=cpu)
    assert [k.entry for k in job.kernels] == ["einsum_kernel_yt", "einsum_kernel"]
    copy, product = job.kernel_source(0), job.kernel_source(1)
    assert copy.count("vload16(0, in1 + ") == 4 and copy.count("vstore16(") == 4
    # a tile's panel: K rows of 64 from n0 * K, no clamp, no guard
    assert "vload16(0, scratch_yt + (((n0 * 72L) + (16L + (tx * 16L))) + ((kt + kk) * 64L)))" \
        in product
    assert "__local" not in product
    assert not any("min(" in line for line in product.splitlines() if "scratch_yt +" in line)


@st.composite
def paneled(draw):
    """A streamed product with Y N-contiguous in whole vectors (plain, X transposed, batched,
    Y shared by a batch of X, a batch of Y only) or K-contiguous; rows, columns and K past
    the tiles or not."""
    form = draw(st.sampled_from(["ik,kj->ij", "ki,kj->ij", "bik,bkj->bij", "bik,kj->bij",
                                 "ik,bkj->bij", "ik,jk->ij", "bik,bjk->bij"]))
    k_contiguous = form.split(",")[1].endswith("k")
    size = {"i": draw(st.integers(4 if not k_contiguous else 32, 60)),
            "k": draw(st.integers(16 if k_contiguous else 2, 150)),
            "j": 16 * draw(st.integers(2, 10)) + (draw(st.integers(0, 15)) if k_contiguous
                                                   else 0),
            "b": draw(st.integers(1, 3))}
    return form, operand_shapes(form, size)


@settings(max_examples=25, deadline=None)
@given(case=paneled(), relu=st.booleans())
def test_products_reading_panels_match_numpy(device, cpu, case, relu):
    spec, shapes = case
    with panels_from(1, 1):
        width, bn = panels(spec, shapes, cpu)
        job = accy.prepare(program(spec, shapes, epilogue=(lambda out: accy.relu(out))
                                   if relu else None), target=cpu)
    rows_n = shapes[1][-1] if spec.split(",")[1].startswith(("k", "bk")) else None
    if rows_n is not None and rows_n > bn:  # N-contiguous Y past one tile: in panels
        assert width == bn and job.kernels[0].entry.endswith("_yt")
    matches_twice(device, job, spec, shapes, relu, seed=5)


def test_a_traced_product_of_many_rows_reads_y_from_panels(device, cpu):
    """``x @ w + b`` of 400 rows on a CPU: the copy into panels, then the product with its
    bias, against numpy."""
    @accy.function
    def dense(x: f32[400, 72], w: f32[72, 320], b: f32[320]):
        return x @ w + b

    job = accy.prepare(dense, target=cpu)
    assert job.kernel_count == 2 and job.kernels[0].entry.endswith("_yt")
    rng = np.random.default_rng(6)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((400, 72), (72, 320),
                                                                   (320,)))
    (out,) = job.run(x, w, b, device=device)
    want = x.astype(np.float64) @ w + b
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
