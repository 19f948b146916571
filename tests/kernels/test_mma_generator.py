"""mma-tf32 / mma-3xtf32 without a GPU: the fragment index arithmetic against a NumPy emulation
of one warp's ``mma.sync`` (the PTX ISA's layout, written out independently below), copy
coverage, bank conflicts, selection (never on PoCL, never under ``precision=ieee``), the
rendered source, that the generated C builds once its PTX is stubbed out, and whole generated
kernels run on PoCL with the PTX replaced by C (``cvt.rna`` by its bit formula, ``mma.sync``
by a warp exchange through local memory, in the PTX layout), checked against numpy. The
precision option, the profile's tensor cores and the error bound: ``test_mma_precision``.
Speed comes from ``experiments/bench_mma.py`` on an H200."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

try:
    import pyopencl as cl
except ImportError:  # the emulation tests skip without it (the device fixture does too)
    cl = None

import accy
from accy.builder import einsum
from accy.ir.types import DType, TensorType
from accy.kernels import mma_plan
from accy.kernels.ir import Lit, idx
from accy.kernels.mma_plan import (
    LARGE,
    MID,
    MMA_K,
    MMA_M,
    MMA_N,
    NARROW,
    SMALL,
    VECTOR,
    WIDE,
    MmaTiles,
    a_lane_base,
    a_offset,
    b_lane_base,
    b_offset,
    c_coords,
    copy_slot,
    lane_parts,
    local_index,
    warp_origin,
)
from accy.kernels.mma_ptx import TF32_BIG_SAT
from accy.target import TF32_MMA, TargetProfile


def tf32_round(x: np.ndarray) -> np.ndarray:
    """f32 values rounded to TF32 as ``cvt.rna.tf32.f32`` does (nearest, ties away from zero;
    the low 13 mantissa bits cleared), for emulations and tests: add half of the dropped
    bits' weight to the magnitude, then truncate (infinities stay infinite)."""
    bits = np.asarray(x, np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


NV = TargetProfile(device="H200-like", device_type="gpu", compute_units=132,
                   max_work_group_size=1024, local_mem_bytes=48 * 1024,
                   dtypes=frozenset({DType.f32, DType.f64, DType.i32, DType.i64, DType.bool}),
                   tensor_cores=(TF32_MMA,))
NO_CORES = dataclasses.replace(NV, tensor_cores=())


def num(e) -> int:
    """The value of a formula called with literals (the IR helpers fold them)."""
    assert isinstance(e, Lit), e
    return int(e.value)


# the PTX ISA's fragment layout for mma.m16n8k8 .tf32, independent of mma_plan's tables
def ptx_a(lane: int, i: int) -> tuple[int, int]:
    group, tig = lane >> 2, lane % 4
    return group + 8 * (i % 2), tig + 4 * (i // 2)


def ptx_b(lane: int, i: int) -> tuple[int, int]:
    group, tig = lane >> 2, lane % 4
    return tig + 4 * i, group


def ptx_c(lane: int, i: int) -> tuple[int, int]:
    group, tig = lane >> 2, lane % 4
    return group + 8 * (i // 2), 2 * tig + (i % 2)


def emulate_mma(a_regs: np.ndarray, b_regs: np.ndarray, c_regs: np.ndarray) -> np.ndarray:
    """One warp's mma.sync m16n8k8: registers per lane in, per lane out (float64)."""
    a, b, c = np.zeros((16, 8)), np.zeros((8, 8)), np.zeros((16, 8))
    for lane in range(32):
        for i in range(4):
            a[ptx_a(lane, i)] = a_regs[lane, i]
            c[ptx_c(lane, i)] = c_regs[lane, i]
        for i in range(2):
            b[ptx_b(lane, i)] = b_regs[lane, i]
    d = a @ b + c
    return np.array([[d[ptx_c(lane, i)] for i in range(4)] for lane in range(32)])


TILES = pytest.mark.parametrize("tiles", [LARGE, SMALL, WIDE, NARROW],
                                ids=["128x128:2x4", "64x64:2x2", "128x128:2x2", "64x32:2x2"])


def emulate_block(tiles: MmaTiles, seed: int, k_step: int, fragments, coords=c_coords) -> None:
    """A work-group's tile computed in emulation: A and B laid out in local memory as the
    copies store them (``local_index``), each warp's accumulators advanced per K sub-step of
    ``k_step`` by ``fragments(a_loc, b_loc, wm, wn, mi, ni, kk, acc)`` (the fragments gathered
    at the generator's addresses and one emulated mma), then placed by ``coords`` (``c_coords``
    or the vector scheme's ``c_coords_v``, with the tiles bound): the tile must be A @ B with
    every element stored once."""
    rng = np.random.default_rng(seed)
    a = rng.integers(-4, 5, (tiles.bm, tiles.bk)).astype(np.float64)
    b = rng.integers(-4, 5, (tiles.bk, tiles.bn)).astype(np.float64)
    a_loc, b_loc = np.full(tiles.a_size, np.nan), np.full(tiles.b_size, np.nan)
    for m in range(tiles.bm):
        for k in range(tiles.bk):
            a_loc[num(local_index(tiles, "x", idx(m), idx(k)))] = a[m, k]
    for k in range(tiles.bk):
        for n in range(tiles.bn):
            b_loc[num(local_index(tiles, "y", idx(n), idx(k)))] = b[k, n]
    c = np.full((tiles.bm, tiles.bn), np.nan)
    for warp in range(tiles.threads // 32):
        wm, wn = warp_origin(tiles, idx(warp))
        acc = np.zeros((tiles.frags_m, tiles.frags_n, 32, 4))
        for kk in range(tiles.bk // k_step):
            for mi in range(tiles.frags_m):
                for ni in range(tiles.frags_n):
                    acc[mi, ni] = fragments(a_loc, b_loc, wm, wn, mi, ni, kk, acc[mi, ni])
        for mi in range(tiles.frags_m):
            for ni in range(tiles.frags_n):
                for lane in range(32):
                    g, t = lane_parts(idx(lane))
                    for r in range(4):
                        row, col = coords(wm, wn, g, t, mi, ni, r)
                        assert np.isnan(c[num(row), num(col)]), "an element stored twice"
                        c[num(row), num(col)] = acc[mi, ni, lane, r]
    np.testing.assert_array_equal(c, a @ b)


@TILES
def test_fragment_formulas_compute_the_block_product_in_emulation(tiles: MmaTiles):
    """Fragments gathered at the generator's addresses, a warp's TF32 mma emulated per the
    PTX layout: the work-group's tile is A @ B."""

    def fragments(a_loc, b_loc, wm, wn, mi, ni, kk, acc):
        ar, br = np.zeros((32, 4)), np.zeros((32, 2))
        for lane in range(32):
            g, t = lane_parts(idx(lane))
            abase, bbase = a_lane_base(tiles, wm, g, t), b_lane_base(tiles, wn, g, t)
            ar[lane] = [a_loc[num(abase) + a_offset(tiles, mi, kk, r)] for r in range(4)]
            br[lane] = [b_loc[num(bbase) + b_offset(tiles, ni, kk, r)] for r in range(2)]
        return emulate_mma(ar, br, acc)

    emulate_block(tiles, 1, MMA_K, fragments)


@TILES
def test_fragment_loads_are_free_of_bank_conflicts(tiles: MmaTiles):
    for kk in range(tiles.bk // MMA_K):
        for mi, ni, r in [(0, 0, 0), (tiles.frags_m - 1, tiles.frags_n - 1, 1)]:
            banks_a, banks_b = set(), set()
            for lane in range(32):
                g, t = lane_parts(idx(lane))
                banks_a.add((num(a_lane_base(tiles, idx(0), g, t))
                             + a_offset(tiles, mi, kk, r)) % 32)
                banks_b.add((num(b_lane_base(tiles, idx(0), g, t))
                             + b_offset(tiles, ni, kk, r % 2)) % 32)
            assert len(banks_a) == 32 and len(banks_b) == 32


@TILES
@pytest.mark.parametrize("side", ["x", "y"])
@pytest.mark.parametrize("k_major", [True, False])
def test_copy_slots_cover_each_tile_element_once(tiles, side, k_major):
    free = tiles.bm if side == "x" else tiles.bn
    seen = []
    for tid in range(tiles.threads):
        for i in range(tiles.slots(side)):
            f, k = copy_slot(tiles, side, k_major, idx(tid + i * tiles.threads))
            for j in range(VECTOR):
                fj, kj = (num(f), num(k) + j) if k_major else (num(f) + j, num(k))
                assert 0 <= fj < free and 0 <= kj < tiles.bk
                seen.append(num(local_index(tiles, side, idx(fj), idx(kj))))
    assert len(seen) == len(set(seen)) == free * tiles.bk


def test_tiles_divide_and_fit_48k_of_local_memory():
    assert mma_plan.parse_tiles("128x128x16:2x2") == WIDE
    with pytest.raises(ValueError):
        mma_plan.parse_tiles("128x128x12:2x4")  # bk not a multiple of 8
    with pytest.raises(ValueError):
        mma_plan.parse_tiles("128x128")
    for t in (LARGE, SMALL, WIDE):
        t.check()
        assert t.local_bytes() <= 48 * 1024 and t.threads % 32 == 0
    assert (LARGE.threads, LARGE.warp_m, LARGE.warp_n) == (256, 64, 32)
    assert (MMA_M, MMA_N, MMA_K) == (16, 8, 8)


def test_tf32_round_is_round_to_nearest_ties_away():
    x = np.float32([1 + 2**-11, 1 + 2**-12, -(1 + 2**-11), 1 + 3 * 2**-11, np.inf, 0.0])
    np.testing.assert_array_equal(tf32_round(x),
                                  np.float32([1 + 2**-10, 1, -(1 + 2**-10), 1 + 2**-9,
                                              np.inf, 0.0]))


# selection and rendering --------------------------------------------------------------------
def matmul(m: int, n: int, k: int, batch: int = 0, epilogue: bool = False,
           a_transposed: bool = False) -> accy.Program:
    """``A @ B`` (batched over ``batch``; A stored K x M when ``a_transposed``), with a bias
    and relu epilogue when asked."""
    lead = (batch,) if batch else ()
    b = accy.Builder()
    types = [TensorType((*lead, k, m) if a_transposed else (*lead, m, k), DType.f32),
             TensorType((*lead, k, n), DType.f32)]
    if epilogue:
        types.append(TensorType((n,), DType.f32))
    f = b.begin_function("f", types)
    spec = "bik,bkj->bij" if batch else "ik,kj->ij"
    if a_transposed:
        spec = spec.replace("ik,", "ki,")
    y = einsum(spec, f.param(0), f.param(1))
    f.return_((y + f.param(2)).relu() if epilogue else y)
    f.finish()
    return b.finish()


def prepared(prog: accy.Program, precision: str, target: TargetProfile, pipe):
    return accy.prepare(prog, pipe(f"precision={precision}"), target=target)


@pytest.mark.parametrize("precision", ["tf32", "3xtf32"])
def test_chosen_with_tensor_cores_and_a_tf32_policy(precision, pipe, used):
    job = prepared(matmul(2048, 2048, 256), precision, NV, pipe)
    assert used(job) == {f"mma-{precision}": 1}
    src = job.kernel_source(0)
    assert "reqd_work_group_size(128, 1, 1)" in src
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in src
    assert "cvt.rna.tf32.f32" in src
    assert job.kernels[0].geometry.local_size == (128,)
    assert job.kernels[0].geometry.global_size == (16 * 32 * 128,)  # 128x64 tiles
    assert [s.status.value for s in job.kernel_summaries()] == ["legal"]
    per_step = (MID.bk // MMA_K) * MID.frags_m * MID.frags_n
    assert src.count("mma.sync") == per_step * (3 if precision == "3xtf32" else 1)


@pytest.mark.parametrize("m, n, mma", [(32, 2048, False), (33, 2048, True), (48, 2048, True),
                                     (2048, 48, True), (2048, 32, False)])
def test_skinny_sides_past_the_skinny_tiles_take_tensor_cores(m, n, mma, pipe, used):
    """A side of at most 32 keeps the tiled contraction's skinny tiles (split K); from 33 the
    tensor cores take the product (mma_plan.MIN_MN)."""
    job = prepared(matmul(m, n, 256), "3xtf32", NV, pipe)
    assert any(name.startswith("mma") for name in used(job)) is mma


@pytest.mark.parametrize("target, precision, size", [
    (NV, "ieee", 2048),  # f32 arithmetic, never tensor cores
    (NO_CORES, "tf32", 2048),  # no tensor cores recorded
    (NV, "tf32", 12),  # too small (sides under mma_plan.SMALL_MN: the tiled contraction)
])
def test_not_chosen_without_cores_policy_or_size(target, precision, size, pipe, used):
    job = prepared(matmul(size, size, 64), precision, target, pipe)
    assert not any(name.startswith("mma") for name in used(job))
    assert "asm" not in job.kernel_source(0)


def test_never_chosen_on_the_pocl_device(device, pipe, used):
    if device.info.platform != "Portable Computing Language":
        pytest.skip(f"about PoCL; the default device is {device.info.platform}")
    target = TargetProfile.from_device(device.info)
    assert target.tensor_cores == () and device.info.tensor_cores == ()
    for precision in ("tf32", "3xtf32"):
        job = prepared(matmul(256, 256, 64), precision, target, pipe)
        assert not any(name.startswith("mma") for name in used(job))


def test_small_tiles_where_large_ones_leave_units_idle(pipe):
    job = prepared(matmul(1000, 1030, 520, epilogue=True), "tf32", NV, pipe)
    src = job.kernel_source(0)
    assert "reqd_work_group_size(128, 1, 1)" in src  # 9x8 tiles of 128 < 132 units: 64x64
    # edges: M, N (and the K step of 16 over 520) guarded, zeros outside; stores guarded
    assert "< 1000L" in src and "< 1030L" in src and "< 520L" in src
    assert ": 0.0f)" in src and "(float4)(0.0f)" in src
    assert "fmax" in src  # the relu epilogue is fused


def test_no_guards_when_tiles_divide(pipe):
    src = prepared(matmul(2048, 2048, 256), "tf32", NV, pipe).kernel_source(0)
    assert "< 2048L" not in src and "< 256L)" not in src
    assert "((__global float4*)out0)[" in src  # staged stores


def test_batched_products_take_the_batch_from_the_group_id(pipe, used):
    job = prepared(matmul(512, 512, 64, batch=32), "tf32", NV, pipe)
    assert used(job) == {"mma-tf32": 1}
    src = job.kernel_source(0)
    assert "bz = (grp / 32L)" in src and "x_base" in src  # 4 x 8 tiles of 128x64 a batch


def test_3xtf32_splits_each_operand(pipe):
    src = prepared(matmul(2048, 2048, 256), "3xtf32", NV, pipe).kernel_source(0)
    assert "as_float(a0_0_0)" in src and "a0_0_0_s" in src and "b0_0_0_s" in src


def test_generated_c_builds_with_the_ptx_stubbed_out(device, pipe):
    """Everything but the PTX is ordinary OpenCL C that PoCL's compiler accepts."""
    for prog in (matmul(1000, 1030, 520, epilogue=True), matmul(512, 512, 64, batch=4)):
        for precision in ("tf32", "3xtf32"):
            src = prepared(prog, precision, NV, pipe).kernel_source(0)
            stub = re.sub(r'asm(?: volatile)?\("[^"]*" : [^;]*\);', ";", src)
            assert "asm" not in stub
            device.build(stub)


# whole kernels, emulated on PoCL ---------------------------------------------------------------
EMULATED_MMA = r"""
static inline uint accy_emu_tf32(uint x, int sat) {  /* cvt.rna[.satfinite].tf32.f32 */
  const uint r = (x + 0x1000u) & 0xffffe000u;
  const int nan = (x & 0x7fffffffu) > 0x7f800000u;
  return (sat && !nan && (r & 0x7f800000u) == 0x7f800000u) ? (r & 0x80000000u) | 0x7f7fe000u
                                                           : r; }
#define ACCY_EMU_MMA(c0, c1, c2, c3, a0, a1, a2, a3, b0, b1) { \
  const uint l_ = get_local_id(0) % 32, w_ = get_local_id(0) / 32; \
  emu_a[w_][l_][0] = as_float(a0); emu_a[w_][l_][1] = as_float(a1); \
  emu_a[w_][l_][2] = as_float(a2); emu_a[w_][l_][3] = as_float(a3); \
  emu_b[w_][l_][0] = as_float(b0); emu_b[w_][l_][1] = as_float(b1); \
  barrier(CLK_LOCAL_MEM_FENCE); \
  float d_[4] = {c0, c1, c2, c3}; \
  for (int r_ = 0; r_ < 4; r_++) { \
    const int row_ = (l_ >> 2) + 8 * (r_ / 2), col_ = 2 * (l_ & 3) + (r_ % 2); \
    float s_ = 0.0f; \
    for (int k_ = 0; k_ < 8; k_++) \
      s_ += emu_a[w_][(row_ % 8) * 4 + (k_ % 4)][(row_ >= 8) + 2 * (k_ >= 4)] \
            * emu_b[w_][col_ * 4 + (k_ % 4)][k_ >= 4]; \
    d_[r_] += s_; } \
  barrier(CLK_LOCAL_MEM_FENCE); \
  c0 = d_[0]; c1 = d_[1]; c2 = d_[2]; c3 = d_[3]; }
"""
_CVT = re.compile(r'asm\("cvt\.rna(\.satfinite)?\.tf32\.f32 %0, %1;" : "=r"\((\w+)\) : '
                  r'"f"\((.*)\)\);$', re.M)
# the 3xtf32 split's saturating big part (mma_ptx.TF32_BIG_SAT): as cvt.rna.satfinite (a NaN
# gives the largest TF32 there, NaN here: the products are NaN either way)
_BIG = re.compile(re.escape(f'asm("{TF32_BIG_SAT}" : "=r"(') + r'(\w+)\) : "f"\((.*)\)\);$',
                  re.M)
_MMA = re.compile(r'asm volatile\("mma\.sync[^"]*" : ' + ", ".join([r'"\+f"\((\w+)\)'] * 4)
                  + " : " + ", ".join([r'"r"\((\w+)\)'] * 6) + r"\);")


_LDS = re.compile(r'asm volatile\("ld\.shared\.v\d\.f32 [^"]*" : (?P<outs>[^:]*) : '
                  r'"r"\(\(\(int\)\(\(long\)\((?P<buf>\w+) \+ (?P<off>.*)\)\)\)\)\);$', re.M)


def _lds(m: re.Match) -> str:
    """``ld.shared.vN.f32 {outs}, [buf + off]``: N consecutive floats of ``buf``."""
    outs = re.findall(r'"=f"\((\w+)\)', m["outs"])
    reads = " ".join(f"{o} = {m['buf']}[o_ + {i}];" for i, o in enumerate(outs))
    return f"{{ const long o_ = {m['off']}; {reads} }}"


def emulated(src: str) -> str:
    """``src`` with its PTX replaced by C: ``cvt.rna.tf32.f32`` by the rounding formula of
    :func:`tf32_round` (``.satfinite`` and :data:`TF32_BIG_SAT`: infinite results the largest
    finite TF32, NaN kept), each
    ``mma.sync`` by a work-group-wide exchange of the warp's registers through local memory and the
    products in the PTX layout (every work-item runs the same mma sequence, so the barriers are
    uniform), the device-scope fence by OpenCL's."""
    src = _CVT.sub(lambda m: f"{m[2]} = (int)accy_emu_tf32(as_uint({m[3]}), {int(bool(m[1]))});",
                   src)
    src = _BIG.sub(lambda m: f"{m[1]} = (int)accy_emu_tf32(as_uint({m[2]}), 1);", src)
    src = _LDS.sub(_lds, src)
    src = _MMA.sub(lambda m: f"ACCY_EMU_MMA({', '.join(m.groups())});", src)
    src = src.replace('asm volatile("fence.acq_rel.gpu;" ::: "memory");',
                      "mem_fence(CLK_GLOBAL_MEM_FENCE);")  # (a CPU's threads: enough)
    assert "asm" not in src
    lines = src.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("__kernel"))
    lines.insert(at + 1, "  __local float emu_a[8][32][4]; __local float emu_b[8][32][2];")
    lines.insert(at, EMULATED_MMA)
    return "\n".join(lines) + "\n"


# Emulated kernels are built unoptimized: every emulated mma is a work-group exchange behind
# barriers, and PoCL's LLVM optimizing them took most of a cold suite's time (the wide-tile
# kernel: 19 s to build and run once, 3.4 s unoptimized). The values are the same: the
# kernels turn FP_CONTRACT off and the emulation rounds with integer operations.
EMULATION_OPTIONS = ("-cl-opt-disable",)


def build_emulated(context, source: str):
    """``source`` (an emulated kernel) built for PoCL's ``context`` with
    :data:`EMULATION_OPTIONS`."""
    return cl.Program(context, source).build(options=list(EMULATION_OPTIONS))


@contextlib.contextmanager
def emulated_builds(device):
    """Inside: ``device`` (a session's runtime) builds every program with
    :data:`EMULATION_OPTIONS` (jobs whose source was swapped for an emulated one, run through
    their own executable)."""
    build = device.build
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(device, "build", lambda source, options=(): build(
            source, (*options, *EMULATION_OPTIONS)))
        yield


@pytest.mark.skipif(cl is None, reason="needs pyopencl")
@pytest.mark.parametrize("m, n, k, batch, bias, a_t, precision, units, tiles", [
    (130, 96, 40, 0, True, False, "tf32", 132, None),  # 64x32 tiles, edges, epilogue
    (64, 72, 36, 2, False, False, "3xtf32", 1, None),  # 128x128 tiles (one unit), batched
    # A stored K x M, K not a multiple of 4; one warp (PoCL builds 3xtf32's 64x64 slowly)
    (70, 66, 33, 0, False, True, "3xtf32", 132, "32x16x8:1x1"),
    (68, 64, 34, 0, False, True, "tf32", 1, None),  # float4 loads along M, 128x128 tiles
], ids=["bias-tf32", "batched-3xtf32", "transposed-3xtf32", "transposed-tf32"])
def test_generated_kernels_compute_the_product_in_emulation(device, pipe, used,
                                                            experiment_script, m, n, k, batch,
                                                            bias, a_t, precision, units, tiles):
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("the emulation is checked on PoCL")
    target = dataclasses.replace(NV, compute_units=units)
    job = prepared(matmul(m, n, k, batch, bias, a_t), precision, target, pipe)
    assert used(job) == {f"mma-{precision}": 1}
    if tiles is not None:
        job = experiment_script("bench_mma").with_mma_tiles(job, mma_plan.parse_tiles(tiles),
                                                           precision)
    emulate_and_check(device, job, m, n, k, batch, bias, a_t, precision)


def emulate_and_check(device, job, m: int, n: int, k: int, batch: int, bias: bool, a_t: bool,
                      precision: str) -> None:
    """Run ``job``'s one kernel emulated on PoCL and compare with numpy."""
    rng = np.random.default_rng(7)
    lead = (batch,) if batch else ()
    a = rng.uniform(-1, 1, (*lead, m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (*lead, k, n)).astype(np.float32)
    args = [np.ascontiguousarray(np.swapaxes(a, -1, -2)) if a_t else a, b]
    if bias:
        args.append(rng.uniform(-1, 1, n).astype(np.float32))
    (kernel,) = job.kernels
    program = build_emulated(device.context, emulated(job.kernel_source(0)))
    flags = cl.mem_flags
    bufs = [cl.Buffer(device.context, flags.READ_ONLY | flags.COPY_HOST_PTR, hostbuf=x)
            for x in args]
    got = np.zeros((*lead, m, n), np.float32)
    out = cl.Buffer(device.context, flags.READ_WRITE | flags.COPY_HOST_PTR, hostbuf=got)
    getattr(program, kernel.entry)(device.queue, kernel.geometry.global_size,
                                   kernel.geometry.local_size, *bufs, out)
    cl.enqueue_copy(device.queue, got, out)
    device.queue.finish()
    exact = a.astype(np.float64) @ b.astype(np.float64)
    rounded = tf32_round(a).astype(np.float64) @ tf32_round(b).astype(np.float64)
    want = rounded if precision == "tf32" else exact
    if bias:
        exact, want = (np.maximum(x + args[2], 0.0) for x in (exact, want))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * k)
    if precision == "tf32":  # the operands were rounded: not the f32 product
        assert np.abs(got - exact).max() > 1e-5


@pytest.mark.parametrize("m, n, k, tiles, groups", [
    # 64x64 tiles make 272 groups: three waves on 132 units, the last holding 8
    (1000, 1030, 520, NARROW, 16 * 33),
    (1024, 1040, 512, NARROW, 16 * 33),
    (1536, 1536, 512, SMALL, 24 * 24),  # 144 tiles of 128x128: two waves, the last of 12
    (2048, 1024, 512, MID, 16 * 16),  # 256 tiles of 128x64: two waves, nearly full
    (4096, 4096, 64, MID, 32 * 64),  # a tie of full waves: the larger tiles at the best rate
    (1100, 1000, 700, NARROW, 18 * 32),  # 64x32 tiles fill theirs better (576 of 660 slots)
    (8192, 8192, 1024, MID, 64 * 128),  # full waves either way: 128x64's rate
    (1024, 1024, 4096, MID, 8 * 16 * 4),  # K split in four: 512 groups, four a unit
])
def test_tiles_fill_their_waves_of_work_groups(pipe, m, n, k, tiles, groups):
    """The tiles whose waves of work-groups (one a compute unit) are best filled, weighed by
    the tiling's rate: the H200 sweeps of papers/kernels.md, "Twenty-ninth session"."""
    job = prepared(matmul(m, n, k), "3xtf32", NV, pipe)
    assert job.kernels[0].geometry.global_size == (groups * tiles.threads,)


def test_balance_is_the_share_of_the_waves_slots_filled():
    assert mma_plan.balance(272, 132) == 272 / 396
    assert mma_plan.balance(264, 132) == mma_plan.balance(132, 132) == 1
    assert mma_plan.balance(66, 132) == 0.5


@pytest.mark.skipif(cl is None, reason="needs pyopencl")
def test_wide_warp_tiles_compute_the_product_in_emulation(device, pipe, experiment_script):
    """128x128 tiles of 4 warps of 64x64 (the sweep candidate), through the benchmark's
    rebuild with other tiles."""
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("the emulation is checked on PoCL")
    bench = experiment_script("bench_mma")
    for precision in ("tf32", "3xtf32"):
        job = prepared(matmul(136, 130, 40), precision, NV, pipe)
        job = bench.with_mma_tiles(job, WIDE, precision)
        assert job.kernels[0].geometry.local_size == (128,)
        assert job.kernel_source(0).count("mma.sync") == (
            2 * 4 * 8 * (3 if precision == "3xtf32" else 1))
        emulate_and_check(device, job, 136, 130, 40, 0, False, False, precision)


def test_bench_mma_smoke(device, experiment_script, tmp_path):
    """The benchmark runs tiny cases, writes JSON, and reports a failing case (tensor cores
    forced on PoCL: its compiler has no PTX asm) with its build-log line instead of dying."""
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("the smoke run is on PoCL")
    bench = experiment_script("bench_mma")
    assert bench.parse_case("b32x512x512x64") == {
        "name": "b32x512x512x64", "batch": 32, "m": 512, "n": 512, "k": 64, "bias": False,
        "bt": False}
    assert bench.parse_case("bias2048")["bias"] and bench.parse_case("4096")["k"] == 4096
    assert bench.parse_case("64x32x48t")["bt"]  # B stored N x K
    out = tmp_path / "m.json"
    rc = bench.main(["--device", "pocl", "--cases", "64,b2x64x64x32,bias72x80x40,b2x40x24x16t",
                     "--repeat", "1", "--no-torch", "--out", str(out)])
    data = json.loads(out.read_text())
    assert rc == 0 and len(data["results"]) == 12 and data["tensor_cores"] == []
    assert all(r["status"] == "ok" and r["check"]["bound_use"] <= 1 for r in data["results"])
    rc = bench.main(["--device", "pocl", "--cases", "64x64x32", "--policies", "tf32",
                     "--tiles", "128x128x16:2x2", "--repeat", "1", "--no-torch",
                     "--force-tensor-cores", "--out", str(out)])
    data = json.loads(out.read_text())
    assert rc == 1 and [r["status"] for r in data["results"]] == ["failed", "failed"]
    assert all("asm" in r["error"] for r in data["results"])
    assert data["results"][1]["tiles"] == "128x128x16:2x2:2"
    assert list((tmp_path / "m" / "sources").glob("*.cl"))


def test_priority_does_not_depend_on_import_order() -> None:
    """Importing the mma module first (as experiments/bench_mma.py does) registers it last;
    kernelization still tries it before the f32 tiled contraction (generators.PRIORITY)."""
    code = (
        "import accy.kernels.mma, dataclasses, sys\n"
        "sys.path.insert(0, 'tests/kernels')\n"
        "import test_mma_generator as t\n"
        "from conftest import pipeline\n"
        "from accy.kernels.generators import GENERATORS, PRIORITY\n"
        "assert list(GENERATORS)[-1].startswith('mma'), list(GENERATORS)\n"
        "assert set(GENERATORS) - {'loop-nest'} <= set(PRIORITY)\n"
        "job = t.prepared(t.matmul(256, 256, 64), 'tf32', t.NV, pipeline)\n"
        "print(job.generators())\n")
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "'mma-tf32': 1" in done.stdout
