"""The tensor-core probe: which matrix and copy instructions an OpenCL device builds and runs
right.

Run once per device at selection (:func:`accy.backends.opencl.runtime._probe`, after the basic
probe), only on NVIDIA devices of compute capability >= 8.0 (read through
``cl_nv_device_attribute_query``); what passes is recorded in ``DeviceInfo.tensor_cores`` and
from there in ``TargetProfile.tensor_cores``. Nothing else assumes tensor cores. Five probes,
each one kernel with the very instruction forms the generators emit (accy/kernels/mma.py):
TF32 ``mma.sync`` (``TF32_MMA``), ``cp.async`` into local memory addressed by ``(int)(long)``
of the ``__local`` pointer, from global memory addressed by ``(long)`` of the ``__global``
pointer plus bytes, with a zero-filled copy and commit/wait groups (``CP_ASYNC``), and
f16 ``mma.sync`` m16n8k16 on half pairs packed as the generator packs them (``F16_MMA``), and
the saturating TF32 rounding of the 3xTF32 split (``TF32_SATFINITE``), and, on compute
capability 9.0 only, a K step of register-A ``wgmma`` as accy/kernels/wgmma.py issues it
(``WGMMA_F16``; built by :func:`build_program`, which every build of the runtime goes through:
deferred PTX expanded for ``sm_90a``) and a K step of TF32 register-A ``wgmma`` as
accy/kernels/wgmma_tf32.py issues it (``WGMMA_TF32``). The last five run in a context of their
own, so that a driver that faults on them (a wrong local address would) leaves the runtime's
context intact; a device that rejects them keeps the plain-load kernels.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyopencl as cl

from accy.errors import DeviceError, KernelBuildError
from accy.kernels import tma, wgmma_ptx
from accy.target import (
    CP_ASYNC,
    F16_MMA,
    TF32_MMA,
    TF32_SATFINITE,
    TMA_COPY,
    TMA_TF32,
    WGMMA_F16,
    WGMMA_TF32,
)

if TYPE_CHECKING:
    from accy.backends.opencl.runtime import Runtime

# One TF32 m16n8k8 mma.sync with operands rounded by cvt.rna.tf32.f32, the two instructions
# accy/kernels/mma.py emits, on small integers (exact in TF32), checked element by element.
# Fragment layout as in accy/kernels/mma_plan.py: lane = 4 g + t; A (16x8) rows g, g+8, cols
# t, t+4; B (8x8) rows t, t+4, col g; C rows g, g+8, cols 2t, 2t+1.
MMA_PROBE_SOURCE = r"""
static inline uint accy_tf32(float x) {
  uint r; asm volatile("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x)); return r; }
__kernel __attribute__((reqd_work_group_size(32, 1, 1)))
void accy_mma_probe(__global float *d) {
  const uint lane = get_local_id(0), g = lane >> 2, t = lane & 3;
  #define A(i, k) ((float)((int)(((i) + 2 * (k)) % 5) - 2))
  #define B(k, n) ((float)((int)((3 * (k) + (n)) % 7) - 3))
  const uint a0 = accy_tf32(A(g, t)), a1 = accy_tf32(A(g + 8, t));
  const uint a2 = accy_tf32(A(g, t + 4)), a3 = accy_tf32(A(g + 8, t + 4));
  const uint b0 = accy_tf32(B(t, g)), b1 = accy_tf32(B(t + 4, g));
  float c0 = 0.0f, c1 = 0.0f, c2 = 0.0f, c3 = 0.0f;
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, "
               "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  d[g * 8 + 2 * t] = c0; d[g * 8 + 2 * t + 1] = c1;
  d[(g + 8) * 8 + 2 * t] = c2; d[(g + 8) * 8 + 2 * t + 1] = c3;
}
"""


# 16-byte cp.async copies as the pipelined kernels issue them: step 1, lanes reversed, into the
# upper half of a local tile; step 2, zero-filled on even lanes (src-size 0), into the lower.
CP_ASYNC_PROBE_SOURCE = r"""
__kernel __attribute__((reqd_work_group_size(32, 1, 1)))
void accy_cp_async_probe(__global const float *src, __global float *dst) {
  __local float tile[256] __attribute__((aligned(16)));
  const int lane = get_local_id(0);
  for (int j = 0; j < 8; j++) tile[8 * lane + j] = -1.0f;
  barrier(CLK_LOCAL_MEM_FENCE);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"
               :  : "r"(((int)((long)(tile + (128 + 4 * (31 - lane)))))),
               "l"((((long)src) + (16L * lane))) : "memory");
  asm volatile("cp.async.commit_group;" :  :  : "memory");
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
               :  : "r"(((int)((long)(tile + 4 * lane)))),
               "l"((((long)src) + (16L * (32 + lane)))), "r"(((lane & 1) ? 16 : 0)) : "memory");
  asm volatile("cp.async.commit_group;" :  :  : "memory");
  asm volatile("cp.async.wait_group 0;" :  :  : "memory");
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int j = 0; j < 8; j++) dst[8 * lane + j] = tile[8 * lane + j];
}
"""

# One f16 m16n8k16 mma.sync: A (16x16 halves, row-major) read as words, B (16x8 halves, k rows)
# as halves packed low (k = 2t) and high (k = 2t + 1), as the generator packs them.
MMA_F16_PROBE_SOURCE = r"""
__kernel __attribute__((reqd_work_group_size(32, 1, 1)))
void accy_mma_f16_probe(__global const uint *a, __global const ushort *b, __global float *d) {
  const uint lane = get_local_id(0), g = lane >> 2, t = lane & 3;
  const uint a0 = a[g * 8 + t], a1 = a[(g + 8) * 8 + t];
  const uint a2 = a[g * 8 + t + 4], a3 = a[(g + 8) * 8 + t + 4];
  const uint b0 = (uint)b[(2 * t) * 8 + g] | ((uint)b[(2 * t + 1) * 8 + g] << 16);
  const uint b1 = (uint)b[(2 * t + 8) * 8 + g] | ((uint)b[(2 * t + 9) * 8 + g] << 16);
  float c0 = 0.0f, c1 = 0.0f, c2 = 0.0f, c3 = 0.0f;
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
               "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  d[g * 8 + 2 * t] = c0; d[g * 8 + 2 * t + 1] = c1;
  d[(g + 8) * 8 + 2 * t] = c2; d[(g + 8) * 8 + 2 * t + 1] = c3;
}
"""


# cvt.rna.satfinite.tf32.f32 as the 3xTF32 split rounds its big part (accy/kernels/mma.py).
SATFINITE_PROBE_SOURCE = r"""
__kernel __attribute__((reqd_work_group_size(32, 1, 1)))
void accy_satfinite_probe(__global const float *x, __global uint *d) {
  const uint lane = get_local_id(0); uint r;
  asm volatile("cvt.rna.satfinite.tf32.f32 %0, %1;" : "=r"(r) : "f"(x[lane]));
  d[lane] = r;
}
"""


# One K step of two register-A wgmma m64n128k16 (a warpgroup), as accy/kernels/wgmma.py issues
# them (accy/kernels/wgmma_ptx.py: markers expanded in the PTX): A (64 x 32 halves) as words in
# each warp's m16n8k16 fragments, B (32 x 128 halves, K x N) stored by plain stores into local
# memory as MN-major core matrices (element (k, n) at byte (n/8) 512 + (k/8) 128 + (k%8) 16 +
# (n%8) 2; or K-major, see wgmma_probe_source), made visible to wgmma by the proxy fence, then
# the wait.
WGMMA_PROBE_N = 128  # the generator's tile width


def wgmma_probe_source(trans_b: int = 1) -> str:
    """The probe kernel; ``trans_b`` 0: B stored into local memory as K-major core matrices
    instead (element (k, n) at byte (n/8) 512 + (k/8) 128 + (n%8) 16 + (k%8) 2), the form of
    a B stored along K."""
    at = "(k % 8) * 16 + (n % 8) * 2" if trans_b else "(n % 8) * 16 + (k % 8) * 2"
    return _wgmma_probe("accy_wgmma_probe", "ushort", 32, f"(k / 8) * 128 + {at}",
                        wgmma_ptx.rstep(WGMMA_PROBE_N, 2, trans_b), True)


# One K step (16) of TF32 register-A wgmma m64n128k8 as accy/kernels/wgmma_tf32.py issues it
# (marker TSTEP, one product): A (64 x 16 f32) as words in each warp's m16n8k8 TF32 fragments
# (rows r, r + 8 at column t, then t + 4: the same words as the f16 probe's), B (16 x 128, K x
# N) stored as K-major core matrices of 4 K words (element (k, n) at byte (n/8) 512 + (k/4)
# 128 + (n%8) 16 + (k%4) 4).
def wgmma_tf32_probe_source() -> str:
    """The TF32 wgmma probe kernel."""
    return _wgmma_probe("accy_wgmma_tf32_probe", "float", 16,
                        "(k / 4) * 128 + (n % 8) * 16 + (k % 4) * 4",
                        wgmma_ptx.tstep(WGMMA_PROBE_N, 2, 1), False)


def _wgmma_probe(name: str, btype: str, k: int, at: str, step: str, flag: bool) -> str:
    """Kernel ``name``: B (``k`` x N of ``btype``) stored into local memory at byte ``(n/8)
    512 + at``, A's fragment words loaded, then ``step`` (operands: the accumulators, the
    eight A words, B's descriptor and, ``flag``, a register holding 1: accumulate) and the
    wait; the accumulators zeroed before and stored unrolled after, so they stay
    registers."""
    n = WGMMA_PROBE_N
    acc = ", ".join(f'"+f"(c{i})' for i in range(n // 2))
    stores = "\n".join(
        f"  d[(r + {8 * (i % 4 // 2)}) * {n} + {8 * (i // 4) + i % 2} + 2 * t] = c{i};"
        for i in range(n // 2))
    ins = [f'"r"(x[{i}])' for i in range(8)] + ['"l"(db)'] + (['"r"(one)'] if flag else [])
    subs = {"@NAME@": name, "@B@": btype, "@K@": str(k), "@AT@": at,
            "@BYTES@": "2" if btype == "ushort" else "4",
            "@N@": str(n), "@C@": ", ".join(f"c{i} = 0.0f" for i in range(n // 2)),
            "@STORES@": stores, "@PROXY@": wgmma_ptx.PROXY, "@WAIT@": wgmma_ptx.WAIT0,
            "@STEP@": step, "@ACC@": acc, "@INS@": ", ".join(ins),
            "@OPS@": ", ".join(f"%{i}" for i in range(n // 2 + len(ins))),
            "@REGS@": ", ".join(f"%{i}" for i in range(n // 2)),
            "@DESC@": f"{wgmma_ptx.descriptor_bits(128, 512)}UL"}
    source = WGMMA_PROBE_SOURCE
    for key, value in subs.items():
        source = source.replace(key, value)
    return source


WGMMA_PROBE_SOURCE = r"""
__kernel __attribute__((reqd_work_group_size(128, 1, 1)))
void @NAME@(__global const uint *a, __global const @B@ *b, __global float *d) {
  __local @B@ b_tile[@K@ * @N@] __attribute__((aligned(128)));
  const int l = get_local_id(0), r = 16 * (l / 32) + (l % 32) / 4, t = l % 4;
  for (int e = l; e < @K@ * @N@; e += 128) {
    const int k = e / @N@, n = e % @N@;
    b_tile[((n / 8) * 512 + @AT@) / @BYTES@] = b[e];
  }
  asm volatile("@PROXY@" ::: "memory");
  barrier(CLK_LOCAL_MEM_FENCE);
  uint x[8];
  for (int i = 0; i < 2; i++) {
    x[4 * i] = a[r * 16 + 8 * i + t]; x[4 * i + 1] = a[(r + 8) * 16 + 8 * i + t];
    x[4 * i + 2] = a[r * 16 + 8 * i + t + 4]; x[4 * i + 3] = a[(r + 8) * 16 + 8 * i + t + 4];
  }
  float @C@;
  const ulong db = ((ulong)((((int)((long)b_tile)) & 262143) >> 4)) | @DESC@;
  const int one = 1;
  asm volatile("@STEP@ @OPS@" : @ACC@ : @INS@ : "memory");
  asm volatile("@WAIT@ @REGS@" : @ACC@ :  : "memory");
@STORES@
}
"""


def wgmma_probe_case(k: int = 32, dtype: type = np.float16
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(A 64 x k, B k x N of ``dtype``, the f32 product) of a wgmma probe: small integers,
    exact (the TF32 probe's: ``k`` 16, f32)."""
    i, kk = np.arange(64)[:, None], np.arange(k)[None, :]
    a = ((i + 2 * kk) % 5 - 2).astype(dtype)
    n = np.arange(WGMMA_PROBE_N)[None, :]
    b = ((3 * np.arange(k)[:, None] + n) % 7 - 3).astype(dtype)
    return a, b, (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)


# TMA as accy/kernels/wgmma_tma.py issues it: one work-item writes each tensor map from its
# template (TMAP) and initialises an mbarrier, then arrives expecting both boxes' bytes and
# issues a 3-d box (64, 2, 4) (an atom) and a 5-d box (64, 2, 4, 4, 1) (a block) of a K x N f16
# matrix into 1024-byte aligned local memory; every work-item waits, then the landed words
# (128-byte swizzled) are written out. Both geometries are wgmma_tma's (:data:`TMA_PROBE_MAPS`).
TMA_PROBE_SOURCE = r"""
__kernel __attribute__((reqd_work_group_size(128, 1, 1)))
void accy_tma_probe(__global ulong* maps, __global const ushort* y, __global uint* out) {
  __local uint b_tile[(5120 + 1024) / 4];
  __local ulong bar[1];
  const int tid = get_local_id(0);
  const int base = (((int)(size_t)b_tile) + 1023) & -1024, b = (int)(size_t)bar;
  if (tid == 0) {
    asm volatile("@TMAP0@" :: "l"((ulong)maps), "l"((ulong)y) : "memory");
    asm volatile("@TMAP1@" :: "l"((ulong)(maps + 16)), "l"((ulong)y) : "memory");
    asm volatile("// @@MBINIT1 %0" :: "r"(b) : "memory");
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (tid == 0) {
    asm volatile("// @@MBEXPECT5120 %0" :: "r"(b) : "memory");
    asm volatile("// @@TMA3 %0, %1, %2, %3, %4, %5 ; @GEO0@" :: "r"(base), "l"((ulong)maps),
                 "r"(64), "r"(2), "r"(4), "r"(b) : "memory");
    asm volatile("// @@TMA5 %0, %1, %2, %3, %4, %5, %6, %7 ; @GEO1@" :: "r"(base + 1024),
                 "l"((ulong)(maps + 16)), "r"(128), "r"(0), "r"(0), "r"(0), "r"(2), "r"(b)
                 : "memory");
  }
  asm volatile("// @@MBWAIT %0, %1" :: "r"(b), "r"(0) : "memory");
  const int off = (base - (int)(size_t)b_tile) / 4;
  for (int i = tid; i < 1280; i += 128) out[i] = b_tile[off + i];
}
"""
TMA_PROBE_K, TMA_PROBE_N = 96, 192
# (dims, strides in bytes, box, coordinates) of the probe's two boxes, as wgmma_tma.geometry
TMA_PROBE_MAPS = (
    ((TMA_PROBE_N, 8, TMA_PROBE_K // 8), (2 * TMA_PROBE_N, 16 * TMA_PROBE_N), (64, 2, 4),
     (64, 2, 4)),
    ((TMA_PROBE_N, 2, 4, 4, TMA_PROBE_K // 32),
     (2 * TMA_PROBE_N, 16 * TMA_PROBE_N, 4 * TMA_PROBE_N, 64 * TMA_PROBE_N), (64, 2, 4, 4, 1),
     (128, 0, 0, 0, 2)))


def tma_box(y: np.ndarray, dims, strides, box, coords) -> np.ndarray:
    """The halves a box of ``y`` (a C-contiguous f16 matrix, as uint16) lands in local
    memory: box elements in order, zero out of bounds, 128-byte swizzled (16-byte chunk c of
    128-byte row r at c ^ (r % 8))."""
    flat, out = y.ravel(), np.zeros(int(np.prod(box)), np.uint16)
    for e, at in enumerate(np.ndindex(*reversed(box))):
        x = [c + i for c, i in zip(coords, reversed(at), strict=True)]
        if all(0 <= v < d for v, d in zip(x, dims, strict=True)):
            byte = 2 * x[0] + sum(v * s for v, s in zip(x[1:], strides, strict=True))
            row, rest = divmod(2 * e, 128)
            out[(row * 128 + ((rest // 16) ^ (row % 8)) * 16 + rest % 16) // 2] = \
                flat[byte // 2]
    return out


def tma_probe_source() -> str | None:
    """The TMA probe kernel with its two templates, or None where none encode (no CUDA
    driver)."""
    source = TMA_PROBE_SOURCE
    for i, (dims, strides, box, _) in enumerate(TMA_PROBE_MAPS):
        words = tma.template(tma.F16, dims, strides, box)
        if isinstance(words, str):
            return None
        source = source.replace(f"@TMAP{i}@", tma.tmap(words)).replace(
            f"@GEO{i}@", tma.geometry_text(dims, strides, box))
    return source


def tma_probe_case() -> tuple[np.ndarray, np.ndarray]:
    """(the probe's K x N matrix of distinct halves, as uint16; the halves its two boxes
    should land, in order)."""
    y = (np.arange(TMA_PROBE_K * TMA_PROBE_N) % 65521).astype(np.uint16).reshape(
        TMA_PROBE_K, TMA_PROBE_N)
    return y, np.concatenate([tma_box(y, *m) for m in TMA_PROBE_MAPS])


# TMA with a TFLOAT32 tensor map (accy/kernels/wgmma_ss.py under tf32): one box of an 8 x 32 f32
# matrix, copied as TMA_PROBE_SOURCE copies; the landed words must be the f32 rounded to TF32
# to nearest (:func:`tma_tf32_ok`), not truncated
TMA_TF32_PROBE_SOURCE = r"""
__kernel __attribute__((reqd_work_group_size(128, 1, 1)))
void accy_tma_tf32_probe(__global ulong* maps, __global const uint* y, __global uint* out) {
  __local uint b_tile[2048 / 4];
  __local ulong bar[1];
  const int tid = get_local_id(0);
  const int base = (((int)(size_t)b_tile) + 1023) & -1024, b = (int)(size_t)bar;
  if (tid == 0) {
    asm volatile("@TMAP@" :: "l"((ulong)maps), "l"((ulong)y) : "memory");
    asm volatile("// @@MBINIT1 %0" :: "r"(b) : "memory");
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (tid == 0) {
    asm volatile("// @@MBEXPECT1024 %0" :: "r"(b) : "memory");
    asm volatile("// @@TMA2 %0, %1, %2, %3, %4 ; @GEO@" :: "r"(base), "l"((ulong)maps),
                 "r"(0), "r"(0), "r"(b) : "memory");
  }
  asm volatile("// @@MBWAIT %0, %1" :: "r"(b), "r"(0) : "memory");
  const int off = (base - (int)(size_t)b_tile) / 4;
  for (int i = tid; i < 256; i += 128) out[i] = b_tile[off + i];
}
"""
TMA_TF32_PROBE_MAP = ((32, 8), (128,), (32, 8))  # dims, strides (bytes), box


def tma_tf32_probe_source() -> str | None:
    """The TFLOAT32 TMA probe kernel with its template, or None where none encodes."""
    dims, strides, box = TMA_TF32_PROBE_MAP
    words = tma.template(tma.TF32, dims, strides, box)
    if isinstance(words, str):
        return None
    return TMA_TF32_PROBE_SOURCE.replace("@TMAP@", tma.tmap(words)).replace(
        "@GEO@", tma.geometry_text(dims, strides, box, tma.TF32))


def tma_tf32_probe_case() -> np.ndarray:
    """The probe's 8 x 32 f32 (as uint32 bits): values in (-4, 4) whose 13 low mantissa bits
    cover below, at and above half a TF32 unit (where truncation and rounding differ)."""
    rng = np.random.default_rng(13)
    x = rng.uniform(-4, 4, 256).astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)
    low = np.array([0, 1, 0xFFF, 0x1000, 0x1001, 0x1FFF, 0x1800, 0x0800], np.uint32)
    return (x | np.resize(low, 256)).reshape(8, 32)


def tma_tf32_ok(y: np.ndarray, got: np.ndarray) -> bool:
    """Whether the probe's landed words are ``y``'s, where the box lands them
    (:func:`tma_box`, 128-byte swizzled), rounded to TF32 to nearest, a tie either way."""
    dims, strides, box = TMA_TF32_PROBE_MAP
    halves = (2 * dims[0], dims[1]), (2 * box[0], box[1])  # (the layout in 2-byte units)
    y = tma_box(y.view(np.uint16), halves[0], strides, halves[1], (0, 0)).view(np.uint32)
    landed = got.astype(np.int64)
    down = (y & np.uint32(0xFFFFE000)).astype(np.int64)
    low = (y & np.uint32(0x1FFF)).astype(np.int64)
    near = np.where(low < 0x1000, landed == down, np.where(
        low > 0x1000, landed == down + 0x2000, (landed == down) | (landed == down + 0x2000)))
    return bool(near.all())


def build_program(context: cl.Context, device: cl.Device, source: str,
                  options: tuple[str, ...] = ()) -> cl.Program:
    """``source`` built for ``device``; a source holding deferred PTX (wgmma markers,
    :mod:`accy.kernels.wgmma_ptx`) is built twice: its PTX taken from the first build, the
    markers expanded and ``.target sm_90a`` set, then built from that PTX (what the program's
    binary, and so the disk cache, then holds)."""
    program = cl.Program(context, source).build(options=list(options))
    if wgmma_ptx.MARK not in source:
        return program
    ptx = wgmma_ptx.expand(program.binaries[0].decode())
    return cl.Program(context, [device], [ptx.encode()]).build(options=list(options))


def satfinite_probe_case() -> tuple[np.ndarray, np.ndarray]:
    """(32 inputs, the bits ``cvt.rna.satfinite.tf32.f32`` must give) of the probe: the
    infinities and the f32 extremes saturate to the largest finite TF32, ordinary values
    round to nearest (ties away), NaN stays NaN (checked apart: any NaN bits)."""
    f32 = np.finfo(np.float32)
    x = np.array([np.inf, -np.inf, f32.max, -f32.max, 1.0, 1.0 + 2**-11, -(1.0 + 2**-11),
                  1.0 + 2**-12, 3.0, np.nan] + [0.0] * 22, np.float32)
    top = 0x7F7FE000  # (2 - 2^-10) * 2^127, the largest finite TF32
    want = np.zeros(32, np.uint32)
    want[:9] = [top, 0x80000000 | top, top, 0x80000000 | top, 0x3F800000, 0x3F802000,
                0xBF802000, 0x3F800000, 0x40400000]
    return x, want


def satfinite_ok(got: np.ndarray, want: np.ndarray) -> bool:
    """The probe's bits right: all but the NaN exactly, the NaN a NaN."""
    nan = got[9:10].view(np.float32)
    return bool(np.array_equal(np.delete(got, 9), np.delete(want, 9)) and np.isnan(nan).all())


def mma_probe_expected() -> np.ndarray:
    """The 16x8 product the tensor-core probe must write (as its macros A and B define)."""
    i, k, n = np.arange(16)[:, None], np.arange(8)[None, :], np.arange(8)[None, :]
    a = ((i + 2 * k) % 5 - 2).astype(np.float64)
    b = ((3 * k.T + n) % 7 - 3).astype(np.float64)
    return (a @ b).astype(np.float32)


def cp_async_probe_case() -> tuple[np.ndarray, np.ndarray]:
    """(source, the local tile the cp.async probe must copy back) of its 256 floats."""
    src = np.arange(1, 257, dtype=np.float32)
    want = np.zeros(256, np.float32)
    for lane in range(32):
        want[128 + 4 * (31 - lane):][:4] = src[4 * lane:][:4]
        if lane % 2:
            want[4 * lane:][:4] = src[128 + 4 * lane:][:4]
    return src, want


def mma_f16_probe_case() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(A 16x16, B 16x8 as f16, the f32 product) of the f16 probe: small integers, exact."""
    i, k = np.arange(16)[:, None], np.arange(16)[None, :]
    a = ((i + 2 * k) % 5 - 2).astype(np.float16)
    b = ((3 * np.arange(16)[:, None] + np.arange(8)[None, :]) % 7 - 3).astype(np.float16)
    return a, b, (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)


def run_isolated(device: cl.Device, source: str, entry: str, args: list[np.ndarray],
                 out: np.ndarray, items: int = 32, scratch: int = 0) -> np.ndarray:
    """Build ``source`` and run ``entry`` on one work-group of ``items`` (default one warp) in
    a context of its own with ``scratch`` bytes of memory (where nonzero), ``args`` (read-only
    buffers) then ``out`` (written back); raises ``cl.Error``."""
    context = cl.Context([device])
    queue = cl.CommandQueue(context)
    program = build_program(context, device, source)
    flags = cl.mem_flags
    bufs = [cl.Buffer(context, flags.READ_WRITE, scratch)] if scratch else []
    bufs += [cl.Buffer(context, flags.READ_ONLY | flags.COPY_HOST_PTR, hostbuf=a)
             for a in args]
    result = cl.Buffer(context, flags.WRITE_ONLY, out.nbytes)
    getattr(program, entry)(queue, (items,), (items,), *bufs, result)
    cl.enqueue_copy(queue, out, result)
    queue.finish()
    return out


def probe_isolated(device: cl.Device, wgmma: bool) -> tuple[str, ...]:
    """``CP_ASYNC``, ``F16_MMA``, ``TF32_SATFINITE`` and (``wgmma``: compute capability 9.0)
    ``WGMMA_F16``, ``WGMMA_TF32``, ``TMA_COPY`` and ``TMA_TF32`` where their probes build and
    compute right (TMA's also needs the CUDA driver library to encode its tensor maps)."""
    found = []
    try:
        src, want = cp_async_probe_case()
        got = run_isolated(device, CP_ASYNC_PROBE_SOURCE, "accy_cp_async_probe", [src],
                           np.zeros(256, np.float32))
        if np.array_equal(got, want):
            found.append(CP_ASYNC)
    except cl.Error:
        pass
    try:
        a, b, want = mma_f16_probe_case()
        got = run_isolated(device, MMA_F16_PROBE_SOURCE, "accy_mma_f16_probe",
                           [a.view(np.uint32), b.view(np.uint16)], np.zeros(128, np.float32))
        if np.array_equal(got.reshape(16, 8), want):
            found.append(F16_MMA)
    except cl.Error:
        pass
    try:
        x, want = satfinite_probe_case()
        got = run_isolated(device, SATFINITE_PROBE_SOURCE, "accy_satfinite_probe", [x],
                           np.zeros(32, np.uint32))
        if satfinite_ok(got, want):
            found.append(TF32_SATFINITE)
    except cl.Error:
        pass
    if wgmma:  # both forms of B the generator uses: MN-major (B along N), K-major (along K)
        try:
            a, b, want = wgmma_probe_case()
            if all(np.array_equal(run_isolated(
                    device, wgmma_probe_source(trans), "accy_wgmma_probe",
                    [a.view(np.uint32), b.view(np.uint16)], np.zeros(want.size, np.float32),
                    items=128).reshape(want.shape), want) for trans in (1, 0)):
                found.append(WGMMA_F16)
        except (cl.Error, ValueError):  # ValueError: binaries that are not PTX text (decode),
            pass  # or PTX the expansion does not know: no wgmma, the device stays usable
        try:
            a, b, want = wgmma_probe_case(16, np.float32)
            got = run_isolated(device, wgmma_tf32_probe_source(), "accy_wgmma_tf32_probe",
                               [a.view(np.uint32), b], np.zeros(want.size, np.float32),
                               items=128)
            if np.array_equal(got.reshape(want.shape), want):
                found.append(WGMMA_TF32)
        except (cl.Error, ValueError):
            pass
        try:
            source = tma_probe_source()  # None: no CUDA driver to encode its maps
            if source is not None:
                y, want = tma_probe_case()
                if np.array_equal(run_isolated(
                        device, source, "accy_tma_probe", [y],
                        np.zeros(want.size // 2, np.uint32), items=128,
                        scratch=2 * tma.MAP_BYTES).view(np.uint16), want):
                    found.append(TMA_COPY)
            source = tma_tf32_probe_source()
            if TMA_COPY in found and source is not None:
                y = tma_tf32_probe_case()
                if tma_tf32_ok(y, run_isolated(device, source, "accy_tma_tf32_probe", [y],
                                               np.zeros(256, np.uint32), items=128,
                                               scratch=tma.MAP_BYTES)):
                    found.append(TMA_TF32)
        except (cl.Error, ValueError):
            pass
    return tuple(found)


# static local arrays tried, largest first (less 1 KiB of the multiprocessors' opt-in limits of
# compute capability 9.0, 8.0 and 8.6/8.9: what else a kernel declares fits the rest)
STATIC_LOCAL_SIZES = (227 * 1024 - 1024, 163 * 1024 - 1024, 99 * 1024 - 1024)
STATIC_LOCAL_SOURCE = r"""
__kernel __attribute__((reqd_work_group_size(256, 1, 1)))
void accy_static_local_probe(__global const uint *in, __global uint *out) {
  __local uint buf[@WORDS@];
  uint l = get_local_id(0);
  for (uint i = l; i < @WORDS@; i += 256) buf[i] = i * 3u + in[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  uint s = 0;
  for (uint i = l; i < @WORDS@; i += 256) s += buf[@WORDS@ - 1 - i] ^ i;
  out[l] = s;
}
"""


def static_local_expected(words: int, seed: int) -> np.ndarray:
    """What the probe's 256 work-items write for an array of ``words`` words."""
    i = np.arange(words, dtype=np.uint64)
    terms = ((words - 1 - i) * 3 + seed) % 2**32 ^ i
    return np.array([terms[lane::256].sum() % 2**32 for lane in range(256)], np.uint32)


def probe_static_local(runtime: Runtime) -> int:
    """The largest of :data:`STATIC_LOCAL_SIZES` a work-group's static ``__local`` array builds
    and runs right with (every word written and read back), beyond the ``local_mem_size`` the
    device reports; 0 where none does. NVIDIA's OpenCL reports 48 KiB and refuses ``__local``
    arguments past it, but builds static arrays up to the opt-in limit CUDA kernels get."""
    for size in STATIC_LOCAL_SIZES:
        if size <= runtime.info.local_mem_size:
            break
        try:
            source = STATIC_LOCAL_SOURCE.replace("@WORDS@", str(size // 4))
            got = run_isolated(runtime.device, source, "accy_static_local_probe",
                               [np.array([7], np.uint32)], np.zeros(256, np.uint32), items=256)
        except cl.Error:
            continue
        if np.array_equal(got, static_local_expected(size // 4, 7)):
            return size
    return 0


def compute_capability(device: cl.Device) -> tuple[int, ...]:
    """(major, minor) of an NVIDIA device, () where the driver does not say."""
    try:
        return (int(device.get_info(cl.device_info.COMPUTE_CAPABILITY_MAJOR_NV)),
                int(device.get_info(cl.device_info.COMPUTE_CAPABILITY_MINOR_NV)))
    except (cl.Error, AttributeError, ValueError, TypeError):
        return ()


def probe_tensor_cores(runtime: Runtime, nvidia: bool) -> tuple[str, ...]:
    """The tensor-core and copy instructions ``runtime``'s device builds and computes right
    (``TF32_MMA``, ``CP_ASYNC``, ``F16_MMA``, ``TF32_SATFINITE``, each if its probe passes)
    on NVIDIA devices (``nvidia``: its platform is NVIDIA's) of compute capability >= 8.0; ()
    anywhere else."""
    info = runtime.info
    if not nvidia or info.compute_capability < (8, 0):
        return ()
    found: tuple[str, ...] = ()
    try:
        kernel = runtime.kernel(MMA_PROBE_SOURCE, "accy_mma_probe")
        out = np.zeros(16 * 8, dtype=np.float32)
        buf = runtime.allocate(out.nbytes)
        runtime.launch(kernel, (32,), (32,), [buf])
        got = runtime.read(buf, out).reshape(16, 8)
        found = (TF32_MMA,) if np.array_equal(got, mma_probe_expected()) else ()
    except (cl.Error, KernelBuildError, DeviceError):
        pass
    return found + probe_isolated(runtime.device, info.compute_capability == (9, 0))
