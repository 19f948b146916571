"""tiled-contraction: classification, tile heuristic, generated structure, numerics on OpenCL.

Numerical tests run on the default device (``ACCY_DEVICE``, else PoCL) with both the CPU tiles
of its real profile and GPU-style tiles (a profile saying ``device_type="gpu"``), so the kernels
the H200 runs are checked here too; results are compared with numpy in float64.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from contraction_support import AVX512, check, program
from hypothesis import given, settings
from hypothesis import strategies as st

import accy
from accy.backends.opencl.render import render
from accy.builder import einsum
from accy.errors import DeviceError
from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.types import DType, TensorType
from accy.job import PreparedJob
from accy.kernels import contraction
from accy.kernels.contraction_plan import (
    Tiles,
    bank_padding,
    choose_tiles,
    classify,
    transposing,
)
from accy.kernels.ir import (
    Assign,
    Barrier,
    Call,
    If,
    Kernel,
    KernelArg,
    Lane,
    Let,
    Lit,
    LocalArray,
    Splat,
    Var,
    VectorLoad,
    VectorStore,
    idx,
)
from accy.plans import LaunchGeometry, ScheduleKind
from accy.target import TargetProfile

H200 = TargetProfile(device="H200-like", device_type="gpu", compute_units=132,
                     max_work_group_size=1024, local_mem_bytes=48 * 1024,
                     dtypes=frozenset({DType.f32, DType.f64}))
AVX2 = dataclasses.replace(AVX512, native_vector_bytes=32)


def einsum_node(spec: str, *shapes: tuple[int, ...], dtype: DType = DType.f32) -> Node:
    b = accy.Builder()
    f = b.begin_function("f", [TensorType(s, dtype) for s in shapes])
    out = einsum(spec, *(f.param(i) for i in range(len(shapes))))
    return out.node


# classification ---------------------------------------------------------------------------
def test_plain_matmul_classifies_with_row_major_strides():
    c = classify(einsum_node("ik,kj->ij", (5, 7), (7, 9)))
    assert not isinstance(c, str)
    assert (c.x, c.batch) == (0, ())
    assert (c.m.size, c.m.x, c.m.out) == (5, 7, 9)
    assert (c.n.size, c.n.y, c.n.out) == (9, 1, 1)
    assert (c.k.size, c.k.x, c.k.y) == (7, 1, 9)


def test_transposed_operands_are_absorbed_by_strides():
    c = classify(einsum_node("ki,jk->ij", (7, 5), (9, 7)))
    assert (c.m.x, c.k.x) == (1, 5)  # X is K x M in memory
    assert (c.n.y, c.k.y) == (7, 1)  # Y is N x K in memory


def test_output_innermost_letter_decides_which_operand_is_x():
    c = classify(einsum_node("ik,kj->ji", (5, 7), (7, 9)))
    assert c.x == 1 and c.m.size == 9 and c.n.size == 5 and c.n.out == 1


def test_letters_of_a_class_flatten_when_strides_chain():
    c = classify(einsum_node("bij,jk->bik", (2, 3, 4), (4, 5)))
    assert c.batch == () and (c.m.size, c.m.x, c.m.out) == (6, 4, 5)
    c = classify(einsum_node("ikl,klj->ij", (3, 4, 5), (4, 5, 6)))
    assert (c.k.size, c.k.x, c.k.y) == (20, 1, 6)


def test_unchained_free_letters_become_batch_dimensions_with_stride_zero():
    c = classify(einsum_node("ij,bjk->bik", (3, 4), (2, 4, 5)))
    assert len(c.batch) == 1
    assert (c.batch[0].size, c.batch[0].x, c.batch[0].y, c.batch[0].out) == (2, 0, 20, 15)
    assert c.coords == (("b", 0, 1, 2), ("m", 0, 1, 3), ("n", 0, 1, 5))


@pytest.mark.parametrize("spec, shapes, why", [
    ("ii,ij->j", [(3, 3), (3, 4)], "repeats a letter"),
    ("ij,jk->i", [(3, 4), (4, 5)], "one operand only"),
    ("ikl,lkj->ij", [(3, 4, 5), (5, 4, 6)], "do not flatten"),
    ("i,j->ij", [(3,), (4,)], "outer product"),
    ("bik,bjk->bij", [(2, 3, 1), (2, 4, 1)], "outer product"),  # K of size 1
])
def test_declines_what_the_loop_nest_should_take(spec, shapes, why):
    assert why in classify(einsum_node(spec, *shapes))


def test_declines_single_operand_and_integer_einsums():
    assert "two-operand" in classify(einsum_node("ij->ji", (3, 4)))
    assert "dtype" in classify(einsum_node("ij,jk->ik", (3, 4), (4, 5), dtype=DType.i32))


def test_groups_with_epilogues_are_accepted_and_marked_in_the_job():
    prog = program("ik,kj->ij", [(8, 8), (8, 8)], epilogue=lambda y, b: (y + b).relu(),
                   extra=[(8,)])
    job = accy.prepare(prog, target=H200)
    (kernel,) = job.kernels
    assert kernel.fixed_local_size and {op for op, _ in kernel.ops} == {Op.EINSUM, Op.ADD,
                                                                        Op.RELU}
    off = accy.prepare(prog, "accy-contract,accy-tensor,accy-dispatch,accy-memory,"
                             "kernel-outlining-planning,kernelization{disable=tiled-contraction}"
                             ",accy-target", target=H200)
    assert not off.kernels[0].fixed_local_size  # the loop nest took it


def test_reshape_outputs_are_accepted_but_not_ops_after_them():
    def reshaped(epilogue) -> list[Kernel]:
        prog = program("ik,jk->ij", [(8, 16), (12, 16)], epilogue=epilogue, extra=[(12,)])
        return list(accy.prepare(prog, target=H200).kernels)

    (kernel,) = reshaped(lambda y, b: (y + b).relu().reshape(8, 3, 4))  # a head split
    assert kernel.fixed_local_size and Op.RESHAPE in {op for op, _ in kernel.ops}
    after = reshaped(lambda y, b: y.reshape(8, 3, 4) * b.reshape(1, 3, 4))
    # an op after the reshape: the einsum keeps a tiled kernel of its own (fusion-planning's
    # epilogue_only) and the op a kernel after it, rather than the loop nest computing both
    assert [k.fixed_local_size for k in after] == [True, False]
    assert Op.MUL not in {op for op, _ in after[0].ops}


# tile heuristic ---------------------------------------------------------------------------
def tiles_for(spec: str, shapes, target: TargetProfile, dtype: DType = DType.f32) -> Tiles:
    return choose_tiles(classify(einsum_node(spec, *shapes, dtype=dtype)), target)


def test_gpu_tiles_for_a_large_matmul_are_128_square_with_8x8_per_work_item():
    t = tiles_for("ik,kj->ij", [(4096, 4096), (4096, 4096)], H200)
    assert t == Tiles(16, 16, 4, 2, 4, 2, 16, 16, True, 4, 4, 8)
    assert (t.bm, t.bn, t.threads, t.local_bytes(4)) == (128, 128, 256, 16 * 264 * 4)


def test_gpu_tiles_shrink_until_the_device_is_filled():
    mid = tiles_for("ik,kj->ij", [(1024, 1024), (1024, 1024)], H200)
    assert (mid.bm, mid.split) == (128, 2)  # 64 tiles, K in 2: H200 26.6 against 21.7 TFLOP/s
    assert tiles_for("ik,kj->ij", [(1024, 600), (600, 1024)], H200).bm == 64  # K too short
    small = tiles_for("ik,kj->ij", [(100, 64), (64, 100)], H200)
    assert (small.bm, small.bn, small.threads) == (32, 32, 64)
    batched = tiles_for("bik,bkj->bij", [(64, 512, 512), (64, 512, 512)], H200)
    assert batched.bm == 128  # 64 batches x 16 tiles fill the device with large tiles


def test_gpu_tiles_for_a_product_of_at_most_256_outputs_are_one_group_one_output_each():
    t = tiles_for("ik,kj->ij", [(8, 16), (16, 16)], H200)
    assert (t.bm, t.bn, t.threads, t.vm * t.sm * t.vn * t.sn, t.bk) == (8, 16, 128, 1, 16)
    t = tiles_for("bik,bkj->bij", [(2, 5, 3), (2, 3, 7)], H200)  # rounded up: 8 x 8, K 4
    assert (t.bm, t.bn, t.bk) == (8, 8, 4)
    # 9 x 17 rounds up to 16 x 32 = 512 outputs: register tiles as before
    assert tiles_for("ik,kj->ij", [(9, 5), (5, 17)], H200).bm == 32


def test_gpu_tiles_for_f64_use_two_lane_vectors_and_fewer_outputs():
    t = tiles_for("ik,kj->ij", [(4096, 4096), (4096, 4096)], H200, DType.f64)
    assert (t.vm, t.vn, t.bm * t.bn // t.threads) == (2, 2, 16)


def test_gpu_tiles_respect_the_work_group_and_local_memory_limits():
    tiny = dataclasses.replace(H200, max_work_group_size=64, local_mem_bytes=4096)
    t = tiles_for("ik,kj->ij", [(4096, 4096), (4096, 4096)], tiny)
    assert t.threads <= 64 and t.local_bytes(4) <= 4096


def test_cpu_tiles_use_the_native_vector_width_and_waste_least():
    t = tiles_for("ik,kj->ij", [(1024, 1024), (1024, 1024)], AVX512)
    assert (t.vn, t.vm, t.sm, t.sn, t.wx, t.wy, t.bk, t.prefetch) == (16, 8, 1, 3, 1, 4, 64,
                                                                       False)
    t = tiles_for("ik,kj->ij", [(64, 64), (64, 64)], AVX512)
    # 8x48 would pad 64 columns to 96, 6x64 in groups of 4 work-items 64 rows to 72
    assert (t.vm * t.sm, t.sn, t.wy) == (4, 4, 4)
    t = tiles_for("ik,kj->ij", [(256, 1024), (1024, 256)], AVX512)
    # 8x48 pads 256 columns to 288 and 12x32 in groups of 4 work-items 256 rows to 288; 6x64's
    # groups of 24 rows pad them to 264 (as timed on PoCL: papers/kernels.md)
    assert (t.vm * t.sm, t.sn * t.vn, t.wy) == (6, 64, 4)
    t = tiles_for("ik,kj->ij", [(1024, 1024), (1024, 1024)], AVX2)
    assert t.vn == 8 and (t.vm * t.sm) * t.sn == 12  # 12 accumulators for 16 registers
    # staged tiles (rows of 12: shorter than a vector) split K = 130 into three steps of 44,
    # not 64 + 64 + 2 padded to 64; streamed ones peel the tail
    staged = tiles_for("ik,kj->ij", [(250, 130), (130, 12)], AVX512)
    assert (staged.stream, staged.bk) == (False, 44)
    assert tiles_for("ik,kj->ij", [(250, 130), (130, 256)], AVX512).bk == 64
    matvec = tiles_for("ik,k->i", [(64, 32), (32,)], AVX512)  # i is N: M = 1
    # one row, the 4 columns' vectors over 4 groups (2 a compute unit); Y is K-contiguous but
    # K of 2 vectors too short to sum each output along K
    assert (matvec.vm * matvec.sm, matvec.sn, matvec.vn, matvec.dot) == (1, 1, 16, 0)
    assert tiles_for("k,k->", [(32,), (32,)], AVX512).vn == 1  # N = 1: scalar lanes


@pytest.mark.parametrize(("row", "itemsize", "vector", "pad"), [
    (128, 4, 4, 4),  # 128 words: every row starts in bank 0; +4 keeps float4 reads aligned
    (64, 4, 4, 4), (32, 4, 4, 4),
    (128, 4, 1, 1),  # scalar reads: the classic +1
    (100, 4, 4, 0),  # 100 words: rows already start 4 banks apart
    (64, 8, 2, 2), (16, 8, 2, 2),  # f64: two banks per element
])
def test_bank_padding_on_gpus(row, itemsize, vector, pad):
    assert bank_padding(row, itemsize, vector, H200) == pad
    assert bank_padding(row, itemsize, vector, AVX512) == 0  # no banks on CPUs


def test_gpu_tiles_pad_by_bank_padding_cpu_tiles_not_at_all():
    for shapes, dtype in [([(4096, 4096)] * 2, DType.f32), ([(100, 64), (100, 64)], DType.f32),
                          ([(4096, 4096)] * 2, DType.f64)]:
        t = tiles_for("ik,jk->ij", shapes, H200, dtype)
        assert t.pad == bank_padding(t.bm, dtype.itemsize, t.vm, H200) > 0
    assert tiles_for("ik,jk->ij", [(1024, 1024)] * 2, AVX512).pad == 0


def test_transposing_sides():
    form = classify(einsum_node("ik,jk->ij", (8, 4), (6, 4)))
    assert (transposing(form, "x"), transposing(form, "y")) == (True, True)
    form = classify(einsum_node("ik,kj->ij", (8, 4), (4, 6)))
    assert (transposing(form, "x"), transposing(form, "y")) == (True, False)
    form = classify(einsum_node("ki,kj->ij", (4, 8), (4, 6)))
    assert (transposing(form, "x"), transposing(form, "y")) == (False, False)


def test_only_transposing_copies_get_padded_local_rows():
    src = source(program("ik,kj->ij", [(2048, 256), (256, 2048)]), H200)
    assert "x_tile[2112]" in src and "y_tile[2048]" in src  # X copied along K: 16 x 132
    src = source(program("ki,kj->ij", [(256, 2048), (256, 2048)]), H200)
    assert "x_tile[2048]" in src and "y_tile[2048]" in src


# generated structure ----------------------------------------------------------------------
def source(prog: accy.Program, target: TargetProfile, kernels: int = 1) -> str:
    job = accy.prepare(prog, target=target)
    assert job.kernel_count == kernels
    return "\n".join(job.kernel_source(i) for i in range(kernels))


def test_gpu_kernel_structure_for_an_aligned_matmul():
    src = source(program("ik,kj->ij", [(2048, 256), (256, 2048)]), H200)
    assert "reqd_work_group_size(256, 1, 1)" in src
    assert "__local float x_tile[" in src and "aligned(16)" in src
    assert src.count("barrier(CLK_LOCAL_MEM_FENCE);") == 2
    assert "float4*)in0)[" in src and "((__global float4*)out0)[" in src and "fma(" in src
    assert "? " not in src  # sizes divide the tiles: no guards anywhere
    assert src.count("acc_") >= 16 * 3  # 16 float4 accumulators: declared, updated, stored


def fetches(src: str, reg: str) -> list[str]:
    """The lines that load prefetch register ``reg``: before the K loop, then the next step's
    inside the loop (unguarded where the step's tiles are inside, then guarded)."""
    return [line.strip() for line in src.splitlines() if f"{reg} =" in line]


def test_edges_get_guards_only_where_tiles_overhang():
    src = source(program("ik,kj->ij", [(130, 240), (240, 384)]), H200)  # M overhangs
    guarded = "< 130L) ? ((__global const float4*)in0)"
    first, inside, edge = fetches(src, "x_tile_r0")
    assert guarded in first and guarded in edge and "?" not in inside
    assert "if (((m0 + 32L) <= 130L)) {" in src  # the next step's tile inside along M
    assert not any("?" in line for line in fetches(src, "y_tile_r0"))
    assert "if ((row0 < 130L))" in src and "(col0 <" not in src
    src = source(program("ik,kj->ij", [(128, 250), (250, 384)]), H200)  # K overhangs
    # gcd(250, 16): two-lane vectors along K
    first, inside, edge = fetches(src, "x_tile_r0")
    assert "x_tile_k0 < 250L) ? ((__global const float2*)in0)" in first
    assert "x_tile_k0) < 250L) ? ((__global const float2*)in0)" in edge and "?" not in inside
    assert "y_tile_k0) < 250L) ? ((__global const float4*)in1)" in src
    assert "if ((((kt + 16L) + 16L) <= 250L)) {" in src  # the next step inside K
    assert "(row0 <" not in src and "(col0 <" not in src
    src = source(program("ik,kj->ij", [(20, 192), (192, 384)]), H200)  # M below one tile
    assert "<= 20L" not in src  # no tile inside along M: one guarded fetch
    assert all("< 20L) ?" in line for line in fetches(src, "x_tile_r0"))


def test_a_work_items_prefetch_slots_share_one_address_plus_constants():
    # 128 work-items over 32 x 128 tiles: each copies one column of Y's tile (rows k0 + i),
    # and X's rows f0 + 8 i at one K: no coordinates of their own for slots past the first
    src = source(program("ik,kj->ij", [(30, 201), (201, 2501)]), H200)
    assert "y_tile_f1" not in src and "y_tile_k1" not in src and "(y_tile_k0 + 15L)" in src
    assert "x_tile_f1" not in src and "x_tile_k1" not in src and "(x_tile_f0 + 24L)" in src
    # 15 work-items over slots that do not divide into rows: each slot its own coordinates
    _, kernel = built_kernel("ik,kj->ij", [(40, 24), (24, 72)], GPU_TILES[4], H200)
    lets = {s.var for s in kernel.body if isinstance(s, Let)}
    assert {"y_tile_f1", "y_tile_k1"} <= lets


def test_generated_source_is_deterministic():
    prog = program("bik,bjk->bij", [(3, 50, 20), (3, 40, 20)])
    assert source(prog, H200) == source(prog, H200)
    assert source(prog, AVX512, 2) == source(prog, AVX512, 2)  # on a CPU: Y's copy first


# rendering of the kernel IR nodes the generator added -------------------------------------
def test_render_vector_nodes_golden():
    body = (
        LocalArray("t", DType.f32, 64, align=16),
        Let("v", DType.f32, VectorLoad("t", idx(2), 4), lanes=4),
        Let("acc", DType.f32, Splat(DType.f32, 4, Lit(0.0, DType.f32)), mutable=True, lanes=4),
        Let("s", DType.f32, Call("fma", (Splat(DType.f32, 4, Lane(Var("v"), 3)), Var("v"),
                                         Var("acc"))), lanes=4),
        Barrier(),
        VectorStore("out0", idx(0), DType.f32, tuple(Lane(Var("s"), i) for i in range(4))),
    )
    kernel = Kernel("k", 0, ScheduleKind.contraction, (4,),
                    (KernelArg("out0", DType.f32, True, 0),), body,
                    LaunchGeometry((64,), (64,)), fixed_local_size=True)
    assert render(kernel) == (
        "#pragma OPENCL FP_CONTRACT OFF\n"
        "__kernel __attribute__((reqd_work_group_size(64, 1, 1))) void k("
        "__global float* restrict out0) {\n"
        "  __local float t[64] __attribute__((aligned(16)));\n"
        "  const float4 v = ((__local float4*)t)[2L];\n"
        "  float4 acc = ((float4)(0.0f));\n"
        "  const float4 s = fma(((float4)(v.s3)), v, acc);\n"
        "  barrier(CLK_LOCAL_MEM_FENCE);\n"
        "  ((__global float4*)out0)[0L] = (float4)(s.s0, s.s1, s.s2, s.s3);\n"
        "}\n")
    plain = dataclasses.replace(kernel, fixed_local_size=False)
    assert "__kernel void k(" in render(plain)
    assert plain.fingerprint() != kernel.fingerprint()


# numerics on the device -------------------------------------------------------------------
CASES = [
    ("ik,kj->ij", [(64, 48), (48, 96)]),  # tiles divide
    ("ik,kj->ij", [(67, 45), (45, 129)]),  # every edge overhangs
    ("ik,kj->ij", [(1, 7), (7, 1)]),  # a dot product as a 1x1 matmul
    ("ik,jk->ij", [(33, 20), (50, 20)]),  # Y is K-contiguous: transposing copy
    ("ki,kj->ij", [(17, 40), (17, 24)]),  # X is M-contiguous
    ("ki,jk->ij", [(9, 31), (23, 9)]),
    ("ik,kj->ji", [(30, 12), (12, 20)]),  # output transposed: operands swap roles
    ("bik,bkj->bij", [(3, 20, 24), (3, 24, 36)]),
    ("bik,bjk->bij", [(2, 64, 32), (2, 48, 32)]),  # attention scores
    ("bij,jk->bik", [(3, 5, 16), (16, 12)]),  # b and i flatten into M
    ("ij,bjk->bik", [(20, 16), (3, 16, 24)]),  # b: batch with stride 0 in X
    ("bqd,bkd->bqk", [(2, 7, 5), (2, 9, 5)]),
    ("ikl,klj->ij", [(12, 3, 5), (3, 5, 10)]),  # two summed letters flatten
    ("ak,bk->ab", [(3, 5), (1, 5)]),  # N = 1: 3 work-items share copies that do not divide
    ("ik,k->i", [(40, 64), (64,)]),  # matrix-vector: i is N, M = 1
    ("abik,abkj->abij", [(2, 3, 9, 7), (2, 3, 7, 11)]),  # two batch letters
    ("ik,kj->ij", [(256, 96), (96, 256)]),  # gpu-tiles: 4 groups of 128x128 as one wave, bk 32
    ("ik,kj->ij", [(250, 100), (100, 250)]),  # ... with every edge overhanging
    ("ik,kj->ij", [(128, 2048), (2048, 128)]),  # gpu-tiles: one tile, K split in 4 chunks
    ("bik,bkj->bij", [(2, 120, 1100), (2, 1100, 128)]),  # 2 tiles, K in 2 uneven chunks
]


@pytest.mark.parametrize("kind", ["device", "gpu-tiles"])
@pytest.mark.parametrize("spec, shapes", CASES, ids=[f"{s}:{x}" for s, x in CASES])
def test_matches_numpy_f32(device, profiles, kind, spec, shapes):
    check(device, program(spec, shapes), profiles[kind],
          lambda x, y: np.einsum(spec, x, y))


@pytest.mark.parametrize("kind", ["device", "gpu-tiles"])
@pytest.mark.parametrize("spec, shapes", [CASES[1], CASES[3], CASES[8], CASES[10], CASES[-3],
                                          CASES[-1]])
def test_matches_numpy_f64(device, profiles, kind, spec, shapes):
    if DType.f64 not in profiles["device"].dtypes:
        pytest.skip("the device has no fp64")
    check(device, program(spec, shapes, DType.f64), profiles[kind],
          lambda x, y: np.einsum(spec, x, y))


GPU_TILES = [
    Tiles(16, 16, 4, 2, 4, 2, 16, 16, True, 4, 4, 8),  # the H200's choice for large problems
    Tiles(16, 16, 4, 2, 4, 2, 8, 8, False, 0, 4, 0),  # no prefetch, no padding, no swizzle
    Tiles(8, 16, 4, 2, 4, 4, 8, 8, True, 4, 4, 2),  # 8x16 per work-item, swizzled
    Tiles(4, 2, 2, 3, 8, 1, 12, 4, False, 0, 2, 0),  # odd sub-blocks, partly unrolled K
    Tiles(3, 5, 2, 1, 2, 2, 8, 8, True, 2, 2, 3),  # 15 work-items: copies do not divide
    Tiles(32, 2, 4, 1, 4, 1, 16, 16, True, 4, 4, 0),  # 8x128: more work-items than X slots
]


# 8 x 128 tiles over an 8-row X tile: its copy has 32 vector slots for 64 work-items, and
# the tiles divide M = 40, so no edge guard stops a work-item past the slots from reading
# rows 40-47: their first prefetched load must be guarded like the later ones (Oclgrind
# found it: an invalid read past the end of X)
NARROW = Tiles(32, 2, 4, 1, 4, 1, 16, 16, True, 4, 4, 0)


def built_kernel(spec: str, shapes, tiles: Tiles, target: TargetProfile
                 ) -> tuple[PreparedJob, Kernel]:
    job = accy.prepare(program(spec, shapes), target=target)
    group = job.product.fusion.groups[0]
    outline = job.product.outline.outlines[0]
    (kernel,) = contraction.build(group, outline, ScheduleKind.contraction, target, tiles)
    return job, dataclasses.replace(kernel, args=job.kernels[-1].args)  # (after Y's copy)


def test_prefetch_slots_past_the_copy_load_nothing():
    _, kernel = built_kernel("ik,kj->ij", [(40, 24), (24, 72)], NARROW, H200)
    regs = [s for s in kernel.body if isinstance(s, Let) and s.var.startswith("x_tile_r")]
    assert regs and all(isinstance(r.expr, Splat | Lit) for r in regs)  # zero, not a load
    guarded = {a.var for s in kernel.body if isinstance(s, If) for a in s.then
               if isinstance(a, Assign)}
    assert {r.var for r in regs} <= guarded


def test_narrow_tiles_read_within_their_operands_under_oclgrind(capfd):
    """Oclgrind (an OpenCL simulator that checks every memory access; Debian's ``oclgrind``,
    registered through ``OCL_ICD_VENDORS``) runs the tiles where it is installed."""
    from accy.backends.opencl.runtime import select_device

    try:
        sim = select_device("oclgrind")
    except DeviceError:
        pytest.skip("Oclgrind is not installed")
    target = dataclasses.replace(TargetProfile.from_device(sim.info), device_type="gpu",
                                 max_work_group_size=1024)
    for tiles in (NARROW, GPU_TILES[4]):
        job, kernel = built_kernel("ik,kj->ij", [(40, 24), (24, 72)], tiles, target)
        job = PreparedJob({**job.products, job.stage: job.product.replace(
            kernels=(kernel,))}, job.records, job.pipeline)
        rng = np.random.default_rng(5)
        x, y = rng.standard_normal((40, 24), np.float32), rng.standard_normal((24, 72), np.float32)
        (out,) = job.run(x, y, device=sim)
        np.testing.assert_allclose(out, x @ y, rtol=1e-4, atol=1e-4)
    # its own (CPU) tiles overhang N = 50: the lanes past it compute their epilogue, which
    # read the bias past its end before they were clamped to the last column
    prog = program("ik,kj->ij", [(37, 20), (20, 50)], epilogue=lambda y, b: (y + b).relu(),
                   extra=[(50,)])
    job = accy.prepare(prog, target=TargetProfile.from_device(sim.info))
    rng = np.random.default_rng(6)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((37, 20), (20, 50), (50,)))
    (out,) = job.run(x, w, b, device=sim)
    np.testing.assert_allclose(out, np.maximum(x @ w + b, 0), rtol=1e-4, atol=1e-4)
    assert "Invalid" not in capfd.readouterr().err


@pytest.mark.parametrize("shapes", [
    [(20, 200), (200, 300)],  # skinny tiles: N inside but the last tile, a K tail, M short
    [(70, 40), (40, 150)],  # 32-row tiles: M and N inside but the last, K whole
    [(9, 2100), (2100, 260)],  # skinny, K split in chunks: each chunk's last step unguarded
], ids=str)
def test_unguarded_prefetches_read_within_their_operands_under_oclgrind(capfd, shapes):
    """The next step's loads skip their guards where its tiles lie inside the operands
    (``_Builder.prefetched``); every other step and tile keeps them."""
    from accy.backends.opencl.runtime import select_device

    try:
        sim = select_device("oclgrind")
    except DeviceError:
        pytest.skip("Oclgrind is not installed")
    target = dataclasses.replace(TargetProfile.from_device(sim.info), device_type="gpu",
                                 max_work_group_size=1024, compute_units=64)
    job = accy.prepare(program("ik,kj->ij", shapes), target=target)
    src = job.kernel_source(0)
    assert src.count("} else {") == 1  # the next step: unguarded, else guarded
    rng = np.random.default_rng(7)
    x, y = (rng.standard_normal(s).astype(np.float32) for s in shapes)
    (out,) = job.run(x, y, device=sim)
    np.testing.assert_allclose(out, x @ y, rtol=1e-4, atol=1e-4)
    assert "Invalid" not in capfd.readouterr().err


@pytest.mark.parametrize("tiles", GPU_TILES, ids=lambda t: f"{t.bm}x{t.bn}x{t.bk}")
@pytest.mark.parametrize("spec, shapes", [("ik,kj->ij", [(200, 70), (70, 260)]),
                                          ("ki,jk->ij", [(33, 130), (129, 33)]),
                                          ("bik,bkj->bij", [(2, 64, 16), (2, 16, 128)])])
def test_explicit_tiles_with_edges(device, profiles, tiles, spec, shapes):
    target = dataclasses.replace(profiles["device"], max_work_group_size=4096)
    job, kernel = built_kernel(spec, shapes, tiles, target)
    job = PreparedJob({**job.products, job.stage: job.product.replace(
        kernels=(kernel,))}, job.records, job.pipeline)
    rng = np.random.default_rng(5)
    x, y = (rng.standard_normal(s).astype(np.float32) for s in shapes)
    (out,) = job.run(x, y, device=device)
    np.testing.assert_allclose(out, np.einsum(spec, x, y), rtol=1e-4, atol=1e-4)


@st.composite
def contractions(draw):
    """Random two-operand einsums with every letter in two of (x, y, out), random sizes."""
    letters = iter("abcdefgh")
    classes = {"b": draw(st.integers(0, 2)), "m": draw(st.integers(0, 2)),
               "n": draw(st.integers(0, 2)), "k": draw(st.integers(0, 2))}
    where = {"b": "xyo", "m": "xo", "n": "yo", "k": "xy"}
    terms = {"x": [], "y": [], "o": []}
    sizes = {}
    for cls, count in classes.items():
        for _ in range(count):
            c = next(letters)
            sizes[c] = draw(st.integers(1, 19))
            for t in where[cls]:
                terms[t].append(c)
    for t in terms.values():
        draw(st.randoms()).shuffle(t)
    if not terms["x"] or not terms["y"]:
        terms["x"].append("z"), terms["y"].append("z")
        sizes["z"] = draw(st.integers(1, 9))
    spec = f"{''.join(terms['x'])},{''.join(terms['y'])}->{''.join(terms['o'])}"
    return spec, [tuple(sizes[c] for c in terms[t]) for t in "xy"]


@settings(max_examples=12)
@given(case=contractions(), gpu=st.booleans())
def test_random_contractions_match_numpy(device, profiles, case, gpu):
    spec, shapes = case
    prog = program(spec, shapes)
    target = profiles["gpu-tiles" if gpu else "device"]
    job = accy.prepare(prog, target=target)
    rng = np.random.default_rng(7)
    x, y = (rng.standard_normal(s).astype(np.float32) for s in shapes)
    (out,) = job.run(x, y, device=device)
    ref = np.einsum(spec, x.astype(np.float64), y.astype(np.float64))
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(ref).max()))


def test_gpu_large_tiles_fill_most_units_split_k_and_run_one_wave_twice_as_deep():
    """512x4096x1024 on 132 units: 128 groups of 128x128 (97%) beat 512 of 64x64, and as one
    wave they take bk=32; at 512x1024x4096 the 32 tiles of 128x128 split K in 4 instead of
    falling back to 32x32 tiles; K chunks stay >= 512 long."""
    wide = tiles_for("ik,kj->ij", [(512, 1024), (1024, 4096)], H200)
    assert (wide.bm, wide.bn, wide.bk, wide.split) == (128, 128, 32, 1)
    deep = tiles_for("ik,kj->ij", [(512, 4096), (4096, 1024)], H200)
    assert (deep.bm, deep.bn, deep.bk, deep.split) == (128, 128, 32, 4)
    big = tiles_for("ik,kj->ij", [(4096, 4096), (4096, 4096)], H200)
    assert (big.bk, big.split) == (16, 1)  # many waves
    short = tiles_for("ik,kj->ij", [(512, 600), (600, 1024)], H200)  # K too short to split
    assert short.split == 1 and short.bm < 128
    # no size fills the device: the most groups, large tiles on a tie (64 either way)
    narrow = tiles_for("ik,kj->ij", [(256, 8192), (8192, 256)], H200)
    assert (narrow.bm, narrow.split) == (128, 16)
    # ... and small tiles split a long K too: 8 groups of 32x32 in 16 chunks of 80
    thin = tiles_for("ik,kj->ij", [(128, 1280), (1280, 64)], H200)
    assert (thin.bm, thin.bn, thin.split) == (32, 32, 16)
    assert tiles_for("ik,kj->ij", [(130, 240), (240, 384)], H200).split == 1  # K too short
    # from SHORT_K where the groups fill at most half the units: 60 groups of 32x32 in 4
    assert tiles_for("ik,kj->ij", [(130, 256), (256, 384)], H200).split == 4
    assert tiles_for("ik,kj->ij", [(300, 400), (400, 300)], H200).split == 1  # 100 groups


def test_gpu_tiles_for_a_skinny_product_stream_the_long_side_with_k_split():
    """M or N at most 32 (f32 or f16): a tile that short and 128 long, K split until each of the 132
    units has 3 groups, in chunks of at least 128 (the H200 and H100 sweeps: contraction_plan)."""
    def shape(m, n, k, batch=0, dtype=DType.f32):
        lead = (batch,) if batch else ()
        spec = "bik,bkj->bij" if batch else "ik,kj->ij"
        t = tiles_for(spec, [(*lead, m, k), (*lead, k, n)], H200, dtype)
        return t.bm, t.bn, t.threads, t.bk, t.split

    assert shape(16, 4096, 4096) == (16, 128, 128, 32, 16)  # 32 tiles x 16 = 512 >= 396
    assert shape(8, 4096, 16384) == (8, 128, 64, 32, 16)
    assert shape(1, 4096, 4096) == (8, 128, 64, 32, 16)  # a GEMV: the short side padded to 8
    assert shape(32, 8192, 4096) == (32, 128, 128, 16, 8)
    assert shape(4096, 16, 4096) == (128, 16, 128, 32, 16)  # N short: the mirror image
    assert shape(16, 4096, 4096, batch=4) == (16, 128, 128, 32, 4)
    assert shape(16, 4096, 200)[-1] == 1  # K too short to split into chunks of 128
    assert shape(16, 4096, 4096, dtype=DType.f16) == (16, 128, 128, 32, 16)  # halves loaded
    assert shape(16, 4096, 4096, dtype=DType.f64)[:2] == (16, 16)  # not f64: square tiles
    assert shape(48, 4096, 4096)[:2] == (32, 32)  # not skinny: the square tiles


@pytest.mark.parametrize("m, n, k", [(16, 300, 1000), (1, 257, 700), (600, 24, 900)],
                         ids=["m16", "gemv-edges", "n24"])
def test_skinny_tiles_compute_the_product(device, profiles, m, n, k):
    """Skinny tiles with edges in every dimension, K split, and a bias + relu epilogue."""
    prog = program("ik,kj->ij", [(m, k), (k, n)], epilogue=lambda y, b: (y + b).relu(),
                   extra=[(n,)])
    target = profiles["gpu-tiles"]
    t = tiles_for("ik,kj->ij", [(m, k), (k, n)], target)
    assert min(t.bm, t.bn) <= 32 < max(t.bm, t.bn) and t.split > 1
    check(device, prog, target, lambda x, w, b: np.maximum(x @ w + b, 0))


def test_split_k_sums_partials_in_a_second_kernel_with_the_epilogue(device, profiles):
    """gpu-tiles, one 128x128 tile, K = 4100 in 4 chunks: a partials kernel writes each chunk's
    sums to scratch, a second kernel adds them in chunk order (deterministic) and applies the
    bias, relu and the reshape of the output."""
    prog = program("ik,kj->ij", [(128, 4100), (4100, 128)],
                   epilogue=lambda y, b: (y + b).relu().reshape(128, 16, 8), extra=[(128,)])
    target = profiles["gpu-tiles"]
    job = accy.prepare(prog, target=target)
    first, second = job.kernels
    assert first.entry.endswith("_partials") and not second.entry.endswith("_partials")
    scratch = [a for a in first.args if a.is_scratch]
    assert len(scratch) == 1 and scratch[0].scratch_elems == 4 * 128 * 128
    check(device, prog, target, lambda x, w, b: np.maximum(x @ w + b, 0).reshape(128, 16, 8))
    x, w, b = (np.random.default_rng(1).standard_normal(p.type.shape).astype(np.float32)
               for p in prog.functions[0].params)
    exe = job.executable(device=device)
    np.testing.assert_array_equal(exe(x, w, b)[0], exe(x, w, b)[0])
