"""Probe: Hopper's wgmma from OpenCL through PTX program binaries (NVIDIA H100/H200 only).

    ACCY_DEVICE=nvidia OUT=results python experiments/probe_wgmma.py
        [WG_VARIANT=k_adjacent.lbo=k] [WG_DECODE=a_lo|a_hi|b] [WG_SINGLE=1] [WG_ITERS=4000]
        [WG_GEMM=0] [WG_GEMM_TILES="256x16x3x0 ..."] [WG_GEMM_SHAPES="4096x4096x4096 ..."]
        [WG_RA=1] [WG_RA_TILES="4x128x32x6x0x1x1x1 ..."]

NVIDIA's OpenCL compiles OpenCL C to PTX for `.target sm_90`, where ptxas rejects wgmma.* (an
sm_90a feature), and has no option for sm_90a. Its program binaries are PTX text, and a program
can be created from a binary. So: build OpenCL C whose inline asm holds placeholder comments
(`// @@NAME operands`: ptxas ignores comments; the operands make the compiler keep and bind
the registers), take the PTX, replace the placeholders by wgmma instructions and the target by
sm_90a, build the program from that PTX. Steps: (1) round trip of a plain kernel through its
PTX; (2) the same at .target sm_90a; (3) one wgmma m64n8k16 f16 -> f32 against numpy, A and B
in local memory as 8x16-byte core matrices (no swizzle), K-adjacent or row-adjacent, the
descriptor's (LBO, SBO) both ways; (4) a loop of wgmma m64n128k16 (4 per K step of 64) on
local tiles: TFLOP/s with no global traffic, as the mma.sync probes; (5) f16 GEMMs (f32
accumulation, f16 out) on wgmma fed by cp.async over tilings ``BNxBKxSxW`` (``WG_GEMM_TILES``;
BM 128, two warpgroups) and shapes (``WG_GEMM_SHAPES``), checked against numpy; (6) how much
local memory a work-group may take as a ``__local`` kernel argument; (7, ``WG_RA=1``, in place
of (5)) the GEMMs with A's fragments in registers, loaded from global memory, and only B in
local memory, over tilings ``WxBNxBKxSxDxBxPxL`` (``WG_RA_TILES``): W warpgroups (BM = 64 W),
S stages of B, D = 1 leaves one step's wgmma in flight, B = 0 takes B as N x K (K-major core
matrices), 1 or 2 as K x N (MN-major, ``trans-b``; descriptor (LBO, SBO) = (K step, N step) or
swapped), P = 1 (with B = 1) loads A 16 bytes at a time, K permuted to match, L the steps
ahead A is loaded, 1 or 2. Results to
$OUT/probe_wgmma.json.

``WG_VARIANT`` runs another variant of step (3) (a fault ends the OpenCL context, so each in
its own process); ``WG_DECODE`` replaces its random operands by ones that show which element
lands where (``a_lo``/``a_hi``: A numbered 16r + k, B picking column k = c or c + 8; ``b``: A
picking row k = r % 16 of B numbered 8k + n); ``WG_SINGLE=1`` has one work-item write both
tiles; ``WG_GEMM=0`` skips steps (5) and (6). On the H200 (papers/kernels.md, "Eleventh
session"): the tiles must start on a 16-byte boundary (a descriptor drops the address's low 4
bits: tiles at 2 bytes past one read every core-matrix row from 2 bytes early, the tenth
session's decodes), then K-adjacent core matrices with LBO = 128 (K) and SBO = the 8-row
stride are exact; the GEMMs are exact but slower than the mma.sync kernels, local memory
capped at 48 KiB a work-group. Step (7) ("Thirteenth session"): MN-major B takes (LBO, SBO) =
(K step, N step) (B = 1; swapped is wrong); 4x128x32x6x0x1x1x1 (256x128 tiles, 16-byte A
loads) is 15-27% faster than the mma.sync f16 kernel on the four shapes swept."""
import json
import os
import statistics
import sys

import numpy as np
import pyopencl as cl

from accy.backends.registry import open_device

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # wgmma_kernels, beside this
from wgmma_kernels import (  # noqa: E402
    COMMON,
    gemm_source,
    ra_gemm_source,
    sm90a,
    substitute,
)

OUT = os.environ.get("OUT", "/tmp")
runtime, target = open_device(os.environ.get("ACCY_DEVICE", "nvidia"))
ctx, q, dev = runtime.context, runtime.queue, runtime.device
res: dict = {"device": dev.name}


VARIANT = os.environ.get("WG_VARIANT")  # one layout.fields of step (3) alone, in its own process


def save():
    tag = "".join(f"_{v}" for v in (VARIANT, os.environ.get("WG_DECODE"),
                                    os.environ.get("WG_SINGLE")) if v)
    with open(os.path.join(OUT, f"probe_wgmma{tag.replace('=', '_')}.json"), "w") as f:
        json.dump(res, f, indent=1, default=str)


def ptx_of(src: str) -> str:
    prg = cl.Program(ctx, src).build()
    return prg.binaries[0].decode()


def from_ptx(ptx: str, options: tuple[str, ...] = ()) -> cl.Program:
    return cl.Program(ctx, [dev], [ptx.encode()]).build(options=list(options))


def build_log(prg: cl.Program) -> str:
    return prg.get_build_info(dev, cl.program_build_info.LOG).strip()


def step(name, fn):
    try:
        r = fn()
        res[name] = {"ok": True, **(r or {})}
        print(name, "ok", r if r else "", flush=True)
        return True
    except Exception as exc:  # noqa: BLE001
        res[name] = {"ok": False, "error": str(exc)[:1500]}
        print(name, "FAILED", str(exc)[:1500], flush=True)
        return False
    finally:
        save()


# (1), (2): round trips --------------------------------------------------------------------
AXPY = """__kernel void axpy(__global float* y, __global const float* x) {
  const int i = get_global_id(0); y[i] += 2.0f * x[i]; }"""


def round_trip(edit):
    ptx = edit(ptx_of(AXPY))
    prg = from_ptx(ptx)
    x = np.arange(256, dtype=np.float32)
    y = np.ones(256, np.float32)
    bx = cl.Buffer(ctx, cl.mem_flags.COPY_HOST_PTR, hostbuf=x)
    by = cl.Buffer(ctx, cl.mem_flags.COPY_HOST_PTR, hostbuf=y)
    prg.axpy(q, (256,), (64,), by, bx)
    out = np.empty_like(y)
    cl.enqueue_copy(q, out, by)
    q.finish()
    assert np.array_equal(out, 1 + 2 * x), out[:8]
    head = [ln for ln in ptx.splitlines() if ln.startswith((".version", ".target"))]
    return {"ptx_head": head}


if not VARIANT:
    step("round_trip", lambda: round_trip(lambda p: p))
    step("round_trip_sm90a", lambda: round_trip(sm90a))

# (3) one wgmma m64n8k16 -----------------------------------------------------------------------
ONE = COMMON + r"""
/* element (r, k) of a tile at byte (r/8)*smn + (k/8)*sk + (r%8)*16 + (k%8)*2 */
int at(int r, int k, uint smn, uint sk) {
  return ((r / 8) * smn + (k / 8) * sk + (r % 8) * 16 + (k % 8) * 2) / 2;
}
__kernel __attribute__((reqd_work_group_size(128, 1, 1)))
void wg1(__global const ushort* A, __global const ushort* Bt, __global float* D,
         __global uint* info, uint amn, uint ak, uint bmn, uint bk, uint alo, uint aso,
         uint blo, uint bso) {
  __local ushort raw[64 * 16 + 8 * 16 + PAD] __attribute__((aligned(128)));
  const int t = get_local_id(0);
  /* the tiles from the first 128-byte boundary of raw: a descriptor's address drops its low
     4 bits, so a tile off a 16-byte boundary is read from before its start */
  const uint ra = (uint)(size_t)raw;
  __local ushort* As = raw + ((((ra + 127u) & ~127u) - ra) / 2);
  __local ushort* Bs = As + 64 * 16;
  if (t == 0) info[0] = ra;
#if SINGLE_WRITER
  if (t == 0) {
    for (int i = 0; i < 64 * 16; i++) As[at(i / 16, i % 16, amn, ak)] = A[i];
    for (int i = 0; i < 8 * 16; i++) Bs[at(i / 16, i % 16, bmn, bk)] = Bt[i];
  }
#else
  for (int i = t; i < 64 * 16; i += 128) As[at(i / 16, i % 16, amn, ak)] = A[i];
  for (int i = t; i < 8 * 16; i += 128) Bs[at(i / 16, i % 16, bmn, bk)] = Bt[i];
#endif
  asm volatile("// @@PROXY" ::: "memory");
  barrier(CLK_LOCAL_MEM_FENCE);
  asm volatile("// @@PROXY" ::: "memory");
  float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;
  const ulong da = desc((uint)(size_t)As, alo, aso), db = desc((uint)(size_t)Bs, blo, bso);
  const int one = 1;
  asm volatile("// @@FENCE" ::: "memory");
  asm volatile("// @@MMA8 %0, %1, %2, %3, %4, %5, %6"
               : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "l"(da), "l"(db), "r"(one) : "memory");
  asm volatile("// @@COMMIT" ::: "memory");
  asm volatile("// @@WAIT0 %0, %1, %2, %3" : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) :: "memory");
  const int w = t / 32, g = (t % 32) / 4, qq = t % 4;
  D[(16 * w + g) * 8 + 2 * qq] = d0; D[(16 * w + g) * 8 + 2 * qq + 1] = d1;
  D[(16 * w + g + 8) * 8 + 2 * qq] = d2; D[(16 * w + g + 8) * 8 + 2 * qq + 1] = d3;
}
"""
rng = np.random.default_rng(0)
# (name, A strides (mn, k), B strides (mn, k)) of two layouts: K-adjacent core matrices (as
# CUTLASS's K-major INTERLEAVE: ((8,m),(1,k)):((1,SBO),(1,LBO)) in 16-byte units) or M/N-adjacent
LAYOUTS = (("k_adjacent", (256, 128), (256, 128)), ("mn_adjacent", (128, 1024), (128, 128)))


def one_wgmma():
    ptx = ptx_of(f"#define SINGLE_WRITER {int(os.environ.get('WG_SINGLE', '0'))}\n" + ONE)
    res["wg1_ptx_placeholders"] = [ln.strip() for ln in ptx.splitlines() if "@@" in ln]
    res["wg1_ptx"] = sm90a(substitute(ptx))  # what runs, to read
    prg = from_ptx(res["wg1_ptx"])
    A = rng.integers(-4, 5, (64, 16)).astype(np.float16)
    B = rng.integers(-4, 5, (16, 8)).astype(np.float16)
    decode = os.environ.get("WG_DECODE")  # inputs that show which element lands where
    if decode == "a_lo" or decode == "a_hi":  # A numbered, B picks column k = c (+8)
        A = np.arange(64 * 16).reshape(64, 16).astype(np.float16)
        B = np.zeros((16, 8), np.float16)
        for c in range(8):
            B[c + (8 if decode == "a_hi" else 0), c] = 1
    elif decode == "b":  # A picks row k = r % 16 of a numbered B
        A = np.zeros((64, 16), np.float16)
        A[np.arange(64), np.arange(64) % 16] = 1
        B = np.arange(16 * 8).reshape(16, 8).astype(np.float16)
    want = A.astype(np.float32) @ B.astype(np.float32)
    res["wg1_inputs"] = {"A": A.astype(np.float32).tolist(), "B": B.astype(np.float32).tolist()}
    bA = cl.Buffer(ctx, cl.mem_flags.COPY_HOST_PTR, hostbuf=A.view(np.uint16).copy())
    bB = cl.Buffer(ctx, cl.mem_flags.COPY_HOST_PTR,
                   hostbuf=np.ascontiguousarray(B.T).view(np.uint16).copy())
    bD = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, size=64 * 8 * 4)
    bI = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, size=4)
    out = {}
    for name, (amn, ak), (bmn, bk) in LAYOUTS:
        for fields in ("lbo=k", "lbo=mn"):
            if (VARIANT or "k_adjacent.lbo=k") != f"{name}.{fields}":
                continue  # one variant a process: a wrong descriptor can end the context
            a_desc = (ak, amn) if fields == "lbo=k" else (amn, ak)
            b_desc = (bk, bmn) if fields == "lbo=k" else (bmn, bk)
            D = np.full((64, 8), np.nan, np.float32)
            cl.enqueue_copy(q, bD, D)
            prg.wg1(q, (128,), (128,), bA, bB, bD, bI,
                    *(np.uint32(v) for v in (amn, ak, bmn, bk, *a_desc, *b_desc)))
            cl.enqueue_copy(q, D, bD)
            q.finish()
            out[f"{name}.{fields}"] = {"exact": bool(np.array_equal(D, want)), "D": D.tolist(),
                                       "max_err": None if np.isnan(D).all()
                                       else float(np.nanmax(np.abs(D - want)))}
    res["wgmma_m64n8k16_variants"] = out
    info = np.empty(1, np.uint32)
    cl.enqueue_copy(q, info, bI)
    res["local_array_address_mod_128"] = int(info[0] % 128)  # aligned(128) honoured if 0
    save()
    assert any(v["exact"] for v in out.values()), {k: v["max_err"] for k, v in out.items()}
    return {"exact": [k for k, v in out.items() if v["exact"]]}


have_one = step("wgmma_m64n8k16", one_wgmma)
if VARIANT:
    sys.exit(0)

# (4) throughput ---------------------------------------------------------------------------------
N, KT, ITERS = 128, 64, int(os.environ.get("WG_ITERS", "4000"))
d = ", ".join(f"%{i}" for i in range(N // 2))
cons = ", ".join(f'"+f"(d[{i}])' for i in range(N // 2))
LOOP = COMMON + r"""
#define N %(N)d
#define KT %(KT)d
__kernel __attribute__((reqd_work_group_size(128, 1, 1)))
void wgloop(__global const ushort* A, __global const ushort* Bt, __global float* D, uint lbo,
            uint sbo, int iters) {
  __local ushort raw[(64 + N) * KT + PAD] __attribute__((aligned(128)));
  const int t = get_local_id(0);
  const uint ra = (uint)(size_t)raw;
  __local ushort* As = raw + ((((ra + 127u) & ~127u) - ra) / 2);
  __local ushort* Bs = As + 64 * KT;
  for (int i = t; i < 64 * KT; i += 128) As[cm(i / KT, i %% KT, KT)] = A[i];
  for (int i = t; i < N * KT; i += 128) Bs[cm(i / KT, i %% KT, KT)] = Bt[i];
  asm volatile("// @@PROXY" ::: "memory");
  barrier(CLK_LOCAL_MEM_FENCE);
  float d[N / 2];
  for (int i = 0; i < N / 2; i++) d[i] = 0.0f;
  const uint a0 = (uint)(size_t)As, b0 = (uint)(size_t)Bs;
  const int one = 1;
  for (int it = 0; it < iters; it++) {
    asm volatile("// @@FENCE" ::: "memory");
    for (int ks = 0; ks < KT / 16; ks++) {
      const ulong da = desc(a0 + ks * 256, lbo, sbo), db = desc(b0 + ks * 256, lbo, sbo);
      asm volatile("// @@MMA%(N)d %(D)s, %%%(I)d, %%%(J)d, %%%(K)d"
                   : %(C)s : "l"(da), "l"(db), "r"(one) : "memory");
    }
    asm volatile("// @@COMMIT" ::: "memory");
    asm volatile("// @@WAIT0 %(D)s" : %(C)s :: "memory");
  }
  const int w = t / 32, g = (t %% 32) / 4, qq = t %% 4;
  __global float* o = D + (long)get_group_id(0) * 64 * N;
  for (int j = 0; j < N / 8; j++) {
    o[(16 * w + g) * N + 8 * j + 2 * qq] = d[4 * j];
    o[(16 * w + g) * N + 8 * j + 2 * qq + 1] = d[4 * j + 1];
    o[(16 * w + g + 8) * N + 8 * j + 2 * qq] = d[4 * j + 2];
    o[(16 * w + g + 8) * N + 8 * j + 2 * qq + 1] = d[4 * j + 3];
  }
}
""" % {"N": N, "KT": KT, "D": d.replace("%", "%%"), "C": cons,  # noqa: UP031  (C's braces)
       "I": N // 2, "J": N // 2 + 1, "K": N // 2 + 2}
LOOP = LOOP.replace("%%", "%")


def loop():
    lbo, sbo = 128, KT // 8 * 128
    if have_one and res["wgmma_m64n8k16"]["exact"][0].endswith("lbo=mn"):
        lbo, sbo = sbo, lbo  # the descriptor fields as step (3) found them
    ptx = ptx_of(LOOP)
    prg = from_ptx(sm90a(substitute(ptx)))
    A = rng.integers(-2, 3, (64, KT)).astype(np.float16)
    B = rng.integers(-2, 3, (KT, N)).astype(np.float16)
    bA = cl.Buffer(ctx, cl.mem_flags.COPY_HOST_PTR, hostbuf=A.view(np.uint16).copy())
    bB = cl.Buffer(ctx, cl.mem_flags.COPY_HOST_PTR,
                   hostbuf=np.ascontiguousarray(B.T).view(np.uint16).copy())
    groups = target.compute_units * 4
    bD = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, size=groups * 64 * N * 4)
    k = prg.wgloop
    k(q, (128,), (128,), bA, bB, bD, np.uint32(lbo), np.uint32(sbo), np.int32(1))
    D = np.empty((64, N), np.float32)
    cl.enqueue_copy(q, D, bD)
    q.finish()
    exact = bool(np.array_equal(D, A.astype(np.float32) @ B.astype(np.float32)))
    times = []
    for _ in range(7):
        e = k(q, (groups * 128,), (128,), bA, bB, bD, np.uint32(lbo), np.uint32(sbo),
              np.int32(ITERS))
        e.wait()
        times.append((e.profile.end - e.profile.start) * 1e-9)
    s = statistics.median(times[2:])
    flops = 2.0 * 64 * N * KT * ITERS * groups
    return {"exact_one_step": exact, "lbo": lbo, "sbo": sbo, "groups": groups, "iters": ITERS,
            "seconds": s, "tflops": flops / s / 1e12}


step(f"wgmma_m64n{N}k16_loop", loop)
save()

# (5), (7) the GEMMs (their sources: wgmma_kernels.py) -------------------------------------
def tiles(var: str, default: str) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(int(v) for v in c.split("x")) for c in os.environ.get(var, default).split())


GEMM_TILES = tiles("WG_GEMM_TILES", "256x16x3x0 256x16x3x1 256x16x2x0 128x16x4x0 128x16x4x1 "
                   "128x16x5x1 128x32x3x0 128x32x3x1 128x32x2x0 256x32x2x0 64x32x4x1 64x64x2x0")
RA_TILES = tiles("WG_RA_TILES", "4x128x32x6x0x1x1x1 4x128x32x6x0x1x1x2 4x128x32x5x0x1x1x1 "
                 "2x128x32x6x0x1x1x1 4x128x64x3x0x0x0x1 4x128x32x6x1x0x0x1")
GEMM_SHAPES = tiles("WG_GEMM_SHAPES",
                    "4096x4096x4096 2048x2048x2048 8192x8192x1024 4096x4096x512")


def configs(npad: int):
    """(tag, source, tile rows, tile columns, work-items, K step, whether B is given K x N)
    of each tiling that fits"""
    if os.environ.get("WG_RA") == "1":
        for tile in RA_TILES:  # fields left off: D, B, P 0 and L 1
            w, bn, bk, stages, defer, b_mn, aperm, adist = tile + (0, 0, 0, 1)[len(tile) - 4:]
            fits = stages * bn * bk * 2 + npad * 2 <= dev.local_mem_size + 128
            # 16-byte A loads: B along N (its rows take the permutation), a vector a lane a row
            if fits and stages >= 2 + defer and (not aperm or b_mn == 1 and bk >= 32):
                yield (f"ra{w}x{bn}x{bk}x{stages}x{defer}x{b_mn}x{aperm}x{adist}",
                       ra_gemm_source(w, bn, bk, stages, defer, b_mn, aperm, adist, npad),
                       64 * w, bn, 128 * w, bk, b_mn > 0)
        return
    for bn, bk, stages, wait1 in GEMM_TILES:
        fits = stages * (128 + bn) * bk * 2 + npad * 2 <= dev.local_mem_size
        if fits and stages - 2 - wait1 >= 0:
            yield (f"{bn}x{bk}x{stages}x{wait1}", gemm_source(bn, bk, stages, wait1, npad),
                   128, bn, 256, bk, False)


def gemm():
    mod = res.get("local_array_address_mod_128")
    npad = 0 if mod == 0 else 64
    out = {"npad": npad, "local_mem_size": dev.local_mem_size, "runs": [], "build_logs": {}}
    res["gemm_runs"] = out
    for tag, source, bm, bn, items, bk, b_mn in configs(npad):
        try:
            prg = from_ptx(sm90a(substitute(ptx_of(source))), ("-cl-nv-verbose",))
            out["build_logs"][tag] = build_log(prg)[-1500:]  # ptxas: registers, serialization
            kernel = prg.gemm
        except Exception as exc:  # noqa: BLE001
            out["runs"].append({"tiles": tag, "error": str(exc)[:800]})
            save()
            continue
        for m, n, k in GEMM_SHAPES:
            if m % bm or n % bn or k % bk:
                continue
            A = rng.standard_normal((m, k)).astype(np.float16)
            Bt = rng.standard_normal((n, k)).astype(np.float16)
            bA = cl.Buffer(ctx, cl.mem_flags.COPY_HOST_PTR, hostbuf=A.view(np.uint16))
            bB = cl.Buffer(ctx, cl.mem_flags.COPY_HOST_PTR, hostbuf=np.ascontiguousarray(
                Bt.T if b_mn else Bt).view(np.uint16))  # K x N where B is MN-major
            bC = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, size=m * n * 2)
            args = (q, (n // bn * items, m // bm), (items, 1), bA, bB, bC,
                    *(np.int32(v) for v in (m, n, k)))
            run: dict = {"tiles": tag, "shape": [m, n, k]}
            try:
                kernel(*args).wait()
                Cv = np.empty((m, n), np.float16)
                cl.enqueue_copy(q, Cv, bC)
                q.finish()
                rows = slice(0, m, max(1, m // 256))  # a sample of rows against numpy
                want = A[rows].astype(np.float32) @ Bt.astype(np.float32).T
                run["max_rel_err"] = float(np.max(np.abs(Cv[rows] - want)) / np.max(np.abs(want)))
                times = []
                for _ in range(12):
                    e = kernel(*args)
                    e.wait()
                    times.append((e.profile.end - e.profile.start) * 1e-9)
                s = statistics.median(times[2:])
                run.update(ms=s * 1e3, tflops=2.0 * m * n * k / s / 1e12)
            except Exception as exc:  # noqa: BLE001
                run["error"] = str(exc)[:800]
            out["runs"].append(run)
            print(run, flush=True)
            save()
            if "error" in run:
                return {"stopped_at": tag}
    best = {}
    for r in out["runs"]:
        if "shape" not in r:
            continue
        key = "x".join(map(str, r["shape"]))
        if r.get("tflops") and r["max_rel_err"] < 1e-2 and r["tflops"] > best.get(key, {}).get(
                "tflops", 0):
            best[key] = r
    return {"best": best}


LOCAL_ARG = r"""__kernel void k(__global float* out, __local float* buf, int n) {
  const int t = get_local_id(0);
  for (int i = t; i < n; i += get_local_size(0)) buf[i] = (float)i;
  barrier(CLK_LOCAL_MEM_FENCE);
  float s = 0.0f;
  for (int i = t; i < n; i += get_local_size(0)) s += buf[n - 1 - i];
  out[get_global_id(0)] = s;
}"""


def local_limit():
    """Whether a ``__local`` argument of 32-227 KiB launches (the device reports a limit; the
    hardware has 228 KiB a multiprocessor)."""
    k = cl.Program(ctx, LOCAL_ARG).build().k
    out = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, size=256 * 4)
    found = {"local_mem_size": dev.local_mem_size}
    for kib in (32, 48, 64, 96, 160, 227):
        n = kib * 1024 // 4
        try:
            k(q, (256,), (256,), out, cl.LocalMemory(n * 4), np.int32(n)).wait()
            o = np.empty(256, np.float32)
            cl.enqueue_copy(q, o, out)
            found[f"{kib}KiB"] = "ok" if o.sum() == n * (n - 1) / 2 else f"wrong {o.sum()}"
        except cl.Error as exc:
            found[f"{kib}KiB"] = str(exc)[:200]
    return found


if os.environ.get("WG_GEMM", "1") == "1":
    step("gemm", gemm)
    step("local_argument", local_limit)
    save()
