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
import re
import statistics
import sys

import numpy as np
import pyopencl as cl

from accy.backends.registry import open_device

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


def sm90a(ptx: str) -> str:
    ptx = re.sub(r"\.target\s+sm_90\b", ".target sm_90a", ptx)
    m = re.search(r"\.version\s+(\d+)\.(\d+)", ptx)
    if m and (int(m.group(1)), int(m.group(2))) < (8, 0):
        ptx = ptx.replace(m.group(0), ".version 8.0")
    return ptx


WG = {
    "FENCE": lambda ops: "wgmma.fence.sync.aligned;",
    "COMMIT": lambda ops: "wgmma.commit_group.sync.aligned;",
    "WAIT0": lambda ops: "wgmma.wait_group.sync.aligned 0;",  # operands: registers it settles
    "PROXY": lambda ops: "fence.proxy.async.shared::cta;",
}


def mma_text(n: int):
    def f(ops: list[str]) -> str:
        d, da, db, one = ops[:-3], ops[-3], ops[-2], ops[-1]
        assert len(d) == n // 2, (n, len(d))
        return (f"{{ .reg .pred p; setp.ne.b32 p, {one}, 0; "
                f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16 {{{', '.join(d)}}}, "
                f"{da}, {db}, p, 1, 1, 0, 0; }}")
    return f


def step_text(n: int, steps: int):
    """A K step of ``steps`` wgmma m64n``n``k16: fence, the wgmma (descriptors advanced 256
    bytes, two core matrices along K, each), commit."""
    def f(ops: list[str]) -> str:
        d, da, db, one = ops[:-3], ops[-3], ops[-2], ops[-1]
        regs = ", ".join(d)
        text = [f"{{ .reg .pred p; .reg .b64 xa, xb; setp.ne.b32 p, {one}, 0; "
                f"mov.b64 xa, {da}; mov.b64 xb, {db}; wgmma.fence.sync.aligned;"]
        for i in range(steps):
            if i:
                text.append("add.s64 xa, xa, 16; add.s64 xb, xb, 16;")
            text.append(f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16 {{{regs}}}, "
                        "xa, xb, p, 1, 1, 0, 0;")
        return " ".join(text) + " wgmma.commit_group.sync.aligned; }"
    return f


def rstep_text(n: int, steps: int, trans_b: int):
    """As ``step_text`` with A from registers: each wgmma takes 4 registers of f16 pairs (the
    mma.sync m16n8k16 A fragment of the warp's 16 rows) and only B's descriptor (B MN-major
    where ``trans_b``)."""
    def f(ops: list[str]) -> str:
        d, a, db, one = ops[:n // 2], ops[n // 2:-2], ops[-2], ops[-1]
        assert len(a) == 4 * steps, (n, steps, len(ops))
        regs = ", ".join(d)
        text = [f"{{ .reg .pred p; .reg .b64 xb; setp.ne.b32 p, {one}, 0; mov.b64 xb, {db}; "
                "wgmma.fence.sync.aligned;"]
        for i in range(steps):
            if i:
                text.append("add.s64 xb, xb, 16;")
            text.append(f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16 {{{regs}}}, "
                        f"{{{', '.join(a[4 * i:4 * i + 4])}}}, xb, p, 1, 1, {trans_b};")
        return " ".join(text) + " wgmma.commit_group.sync.aligned; }"
    return f


def substitute(ptx: str) -> str:
    def repl(m):
        name, rest = m.group(1), m.group(2)
        ops = [o.strip() for o in rest.split(",") if o.strip()]
        if name.startswith("RSTEP"):
            n, steps, trans = name[5:].split("_")
            return rstep_text(int(n), int(steps), int(trans))(ops)
        if name.startswith("STEP"):
            n, steps = name[4:].split("_")
            return step_text(int(n), int(steps))(ops)
        if name.startswith("MMA"):
            return mma_text(int(name[3:]))(ops)
        return WG[name](ops)
    return re.sub(r"//\s*@@(\w+)([^\n]*)", repl, ptx)


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
COMMON = r"""
#define PAD 64 /* halves: room to move a tile to a 128-byte boundary */
ulong desc(uint addr, uint lbo, uint sbo) {
  return (ulong)((addr & 0x3FFFF) >> 4) | ((ulong)((lbo >> 4) & 0x3FFF) << 16)
       | ((ulong)((sbo >> 4) & 0x3FFF) << 32);
}
/* element (r, k) of a rows x K f16 tile at byte (r/8)*S + (k/8)*128 + (r%8)*16 + (k%8)*2,
   S = K/8*128: 8x16-byte core matrices, K-adjacent ones 128 bytes apart */
int cm(int r, int k, int K) {
  return ((r / 8) * (K / 8) * 128 + (k / 8) * 128 + (r % 8) * 16 + (k % 8) * 2) / 2;
}
/* the GEMMs' accumulators d (rows r0 and r0 + 8 of a wgmma m64nBN fragment) as f16 pairs */
#define STORE_C() for (int j = 0; j < BN / 8; j++) { uint h0, h1; \
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(h0) : "f"(d[4 * j + 1]), "f"(d[4 * j])); \
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(h1) : "f"(d[4 * j + 3]), "f"(d[4 * j + 2])); \
  C[(r0 * N + n0 + 8 * j + 2 * qq) / 2] = h0; C[((r0 + 8) * N + n0 + 8 * j + 2 * qq) / 2] = h1; }
"""
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

# (5) a GEMM: C (f16, M x N) = A (M x K) @ Bt (N x K)^T, f32 accumulation ----------------------
# 256 work-items (two warpgroups, 64 rows each) a 128 x BN tile; A and B tiles in S stages of
# core matrices filled by cp.async (16 bytes a work-item); wgmma m64nBNk16 on each 16 of BK.
# A step: wait for its copies, barrier, issue its wgmma, issue the copies of a later step,
# wait for wgmma. WAIT1=0: copies S-1 steps ahead, each step's wgmma waited for before the
# next barrier; WAIT1=1: copies S-2 steps ahead, one step's wgmma left in flight.
GEMM = COMMON + r"""
#define BN @BN@
#define BK @BK@
#define S @S@
#define SBO (BK / 8 * 128)
#define A_ST (128 * BK * 2)
#define B_ST (BN * BK * 2)
#define NPAD @NPAD@

void load(uint dst, __global const ushort* src, int rows, int ld, int k0, int t) {
  for (int c = t; c < rows * BK / 8; c += 256) {  /* row (c / BK) * 8 + c % 8, K chunk */
    const int r = (c / BK) * 8 + c % 8, kc = (c / 8) % (BK / 8);
    const uint d = dst + (c / BK) * SBO + kc * 128 + (c % 8) * 16;
    const ulong g = (ulong)(size_t)(src + (long)r * ld + k0 + kc * 8);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(d), "l"(g) : "memory");
  }
}

__kernel __attribute__((reqd_work_group_size(256, 1, 1)))
void gemm(__global const ushort* A, __global const ushort* Bt, __global uint* C, int M, int N,
          int K) {
  __local ushort raw[(S * (A_ST + B_ST)) / 2 + NPAD] __attribute__((aligned(128)));
  const int t = get_local_id(0), wg = t / 128, l = t % 128;
  const uint ra = (uint)(size_t)raw;
  const uint a0 = NPAD ? (ra + 127u) & ~127u : ra, b0 = a0 + S * A_ST;
  const int m0 = get_group_id(1) * 128, n0 = get_group_id(0) * BN;
  __global const ushort* Ag = A + (long)m0 * K;
  __global const ushort* Bg = Bt + (long)n0 * K;
  float d[BN / 2];
  for (int i = 0; i < BN / 2; i++) d[i] = 0.0f;
  const int KT = K / BK, one = 1;
  for (int s = 0; s < S - 1 - @WAIT1@; s++) {
    if (s < KT) {
      load(a0 + s * A_ST, Ag, 128, K, s * BK, t);
      load(b0 + s * B_ST, Bg, BN, K, s * BK, t);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  }
  for (int kt = 0; kt < KT; kt++) {
    asm volatile("cp.async.wait_group @WAITN@;" ::: "memory");
    asm volatile("// @@PROXY" ::: "memory");
    barrier(CLK_LOCAL_MEM_FENCE);
    const uint sa = a0 + (kt % S) * A_ST + wg * 8 * SBO, sb = b0 + (kt % S) * B_ST;
    /* fence, the BK / 16 wgmma of the step and their commit in one statement: the compiler
       moves no accumulator between them */
    asm volatile("// @@STEP@BN@_@NK@ @D@, %@I@, %@J@, %@K@"
                 : @C@ : "l"(desc(sa, 128, SBO)), "l"(desc(sb, 128, SBO)), "r"(one) : "memory");
    const int nk = kt + S - 1 - @WAIT1@;  /* its stage was read by step kt - 1 (- 1) */
    if (nk < KT) {
      load(a0 + (nk % S) * A_ST, Ag, 128, K, nk * BK, t);
      load(b0 + (nk % S) * B_ST, Bg, BN, K, nk * BK, t);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
    asm volatile("// @@WAIT@WAIT1@ @D@" : @C@ :: "memory");
  }
  asm volatile("// @@WAIT0 @D@" : @C@ :: "memory");
  const int w = l / 32, g = (l % 32) / 4, qq = l % 4;
  const long r0 = m0 + wg * 64 + 16 * w + g;
  STORE_C();
}
"""
WG["WAIT1"] = lambda ops: "wgmma.wait_group.sync.aligned 1;"


def gemm_source(bn: int, bk: int, stages: int, wait1: int, npad: int) -> str:
    n = bn // 2
    src = GEMM
    for key, val in (("BN", bn), ("BK", bk), ("S", stages), ("WAIT1", wait1), ("NPAD", npad),
                     ("WAITN", stages - 2 - wait1), ("NK", bk // 16),
                     ("I", n), ("J", n + 1), ("K", n + 2),
                     ("D", ", ".join(f"%{i}" for i in range(n))),
                     ("C", ", ".join(f'"+f"(d[{i}])' for i in range(n)))):
        src = src.replace(f"@{key}@", str(val))
    return src


# (7) the same GEMM with A from registers (WG_RA=1): W warpgroups of 64 rows a 64W x BN tile,
# only B staged in local memory (S stages), so each stage can hold twice the K of (5). Each
# work-item loads its A fragments (4-byte f16 pairs: rows g and g + 8, K 2t and 2t + 8 of each
# 16; or, APERM, 16-byte vectors along a permuted K) for a later step from global memory while
# this step's wgmma run; the wgmma statement takes them as inputs and the wait keeps them live,
# so the compiler reuses none before it.
RA_GEMM = COMMON + r"""
#define W @W@
#define BMN @BMN@ /* 0: B given N x K; 1, 2: K x N, MN-major core matrices, descriptor fields
                     (LBO, SBO) = (128, SBO) or swapped */
#define DEFER @DEFER@
#define APERM @APERM@ /* (BMN 1) A loaded 16 bytes at a time along K, K permuted to match */
#define ADIST @ADIST@ /* steps ahead A's fragments are loaded: 1 or 2 */
#define BN @BN@
#define BK @BK@
#define S @S@
#define KS (BK / 16)
#define SBO (BK / 8 * 128)
#define B_ST (BN * BK * 2)
#define NPAD @NPAD@

void load(uint dst, __global const ushort* src, int ld, int k0, int t) {
  for (int c = t; c < BN * BK / 8; c += 128 * W) {
#if BMN  /* core matrix (N block nc, K block c / BN) rows: 8 K rows of 8 N halves */
    const int kr = (c / BN) * 8 + c % 8, nc = (c / 8) % (BN / 8);
    /* K row kr of the stage holds (APERM) the row a lane's 16-byte A loads put there:
       position 16 i + 8 h + 2 t + e <- K t BK / 4 + 4 i + 2 h + e */
    const int kg = APERM ? ((kr % 8) / 2) * (BK / 4) + 4 * (kr / 16) + 2 * ((kr / 8) % 2)
                           + kr % 2 : kr;
    const uint d = dst + nc * SBO + (c / BN) * 128 + (c % 8) * 16;
    const ulong g = (ulong)(size_t)(src + (long)(k0 + kg) * ld + nc * 8);
#else
    const int r = (c / BK) * 8 + c % 8, kc = (c / 8) % (BK / 8);
    const uint d = dst + (c / BK) * SBO + kc * 128 + (c % 8) * 16;
    const ulong g = (ulong)(size_t)(src + (long)r * ld + k0 + kc * 8);
#endif
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(d), "l"(g) : "memory");
  }
}

#if APERM  /* lane t: K t BK / 4 .. + BK / 4 of rows g and g + 8, 16 bytes a load */
#define LOADA(X, kk) { const int k8 = ((kk) * BK + qq * (BK / 4)) / 8; \
  for (int v = 0; v < BK / 32; v++) { const uint4 p0 = A0v[k8 + v], p1 = A1v[k8 + v]; \
    X[8 * v] = p0.x; X[8 * v + 1] = p1.x; X[8 * v + 2] = p0.y; X[8 * v + 3] = p1.y; \
    X[8 * v + 4] = p0.z; X[8 * v + 5] = p1.z; X[8 * v + 6] = p0.w; X[8 * v + 7] = p1.w; } }
#else
/* A's fragments of step kk into X */
#define LOADA(X, kk) { const int k2 = (kk) * BK / 2; for (int i = 0; i < KS; i++) { \
  X[4 * i] = A0[k2 + 8 * i]; X[4 * i + 1] = A1[k2 + 8 * i]; \
  X[4 * i + 2] = A0[k2 + 8 * i + 4]; X[4 * i + 3] = A1[k2 + 8 * i + 4]; } }
#endif
#define ISSUE(X, kt) \
  asm volatile("cp.async.wait_group @WAITN@;" ::: "memory"); \
  asm volatile("// @@PROXY" ::: "memory"); \
  barrier(CLK_LOCAL_MEM_FENCE); \
  asm volatile("// @@RSTEP@BN@_@KS@_@TB@ @D@, @A@, %@J@, %@K@" : @C@ : @AC(X)@, \
               "l"(desc(b0 + ((kt) % S) * B_ST, BMN == 2 ? SBO : 128, BMN == 2 ? 128 : SBO)), \
               "r"(one) : "memory");
#define COPY(nk) { if ((nk) < KT) load(b0 + ((nk) % S) * B_ST, Bg, BLD, (nk) * BK, t); \
  asm volatile("cp.async.commit_group;" ::: "memory"); }
#if DEFER
/* step kt's wgmma left in flight: the wait settles kt - 1's, which read Y and the stage the
   copies S - 2 steps ahead go to; then Y takes step kt + ADIST's fragments */
#define STEP(X, Y, kt) { ISSUE(X, kt) \
  asm volatile("// @@WAIT1 @D@, @A@" : @C@ : @AC(Y)@ : "memory"); \
  if ((kt) + ADIST < KT) LOADA(Y, (kt) + ADIST); COPY((kt) + S - 2) }
#else
/* Y (read by step kt - 1's wgmma, waited for) takes step kt + ADIST's fragments first */
#define STEP(X, Y, kt) { if ((kt) + ADIST < KT) LOADA(Y, (kt) + ADIST); ISSUE(X, kt) \
  COPY((kt) + S - 1) \
  asm volatile("// @@WAIT0 @D@, @A@" : @C@ : @AC(X)@ : "memory"); }
#endif

__kernel __attribute__((reqd_work_group_size(128 * W, 1, 1)))
void gemm(__global const ushort* A, __global const ushort* Bt, __global uint* C, int M, int N,
          int K) {
  __local ushort raw[(S * B_ST) / 2 + NPAD] __attribute__((aligned(128)));
  const int t = get_local_id(0), wg = t / 128, l = t % 128;
  const uint ra = (uint)(size_t)raw;
  const uint b0 = NPAD ? (ra + 127u) & ~127u : ra;
  const int m0 = get_group_id(1) * 64 * W, n0 = get_group_id(0) * BN;
  const int w = l / 32, g = (l % 32) / 4, qq = l % 4;
  const long r0 = m0 + wg * 64 + 16 * w + g;
  __global const uint* A0 = (__global const uint*)(A + r0 * K) + qq;
  __global const uint* A1 = A0 + 4 * (long)K;
  __global const uint4* A0v = (__global const uint4*)(A + r0 * K);
  __global const uint4* A1v = (__global const uint4*)(A + (r0 + 8) * K);
#if BMN
  __global const ushort* Bg = Bt + n0;
  const int BLD = N;
#else
  __global const ushort* Bg = Bt + (long)n0 * K;
  const int BLD = K;
#endif
  float d[BN / 2];
  for (int i = 0; i < BN / 2; i++) d[i] = 0.0f;
  uint aE[4 * KS], aO[4 * KS];
  for (int i = 0; i < 4 * KS; i++) aO[i] = 0;
  const int KT = K / BK, one = 1;
  for (int s = 0; s < S - 1 - DEFER; s++) {
    if (s < KT) load(b0 + s * B_ST, Bg, BLD, s * BK, t);
    asm volatile("cp.async.commit_group;" ::: "memory");
  }
  LOADA(aE, 0);
#if ADIST == 2  /* three sets: A loaded two steps ahead */
  uint aT[4 * KS];
  if (KT > 1) LOADA(aO, 1);
  for (int kt = 0; kt < KT; kt += 3) {
    STEP(aE, aT, kt);
    if (kt + 1 < KT) STEP(aO, aE, kt + 1);
    if (kt + 2 < KT) STEP(aT, aO, kt + 2);
  }
#else
  for (int kt = 0; kt < KT; kt += 2) {
    STEP(aE, aO, kt);
    if (kt + 1 < KT) STEP(aO, aE, kt + 1);
  }
#endif
  asm volatile("// @@WAIT0 @D@" : @C@ :: "memory");
  STORE_C();
}
"""


def ra_gemm_source(warpgroups: int, bn: int, bk: int, stages: int, defer: int, b_mn: int,
                   aperm: int, adist: int, npad: int) -> str:
    n, na = bn // 2, 4 * (bk // 16)
    src = RA_GEMM.replace("@AC(X)@", ", ".join(f'"r"(X[{i}])' for i in range(na)))
    src = src.replace("@AC(Y)@", ", ".join(f'"r"(Y[{i}])' for i in range(na)))
    for key, val in (("W", warpgroups), ("BN", bn), ("BK", bk), ("S", stages), ("NPAD", npad),
                     ("DEFER", defer), ("WAITN", stages - 2 - defer), ("KS", bk // 16),
                     ("BMN", b_mn), ("TB", int(b_mn > 0)), ("APERM", aperm), ("ADIST", adist),
                     ("J", n + na), ("K", n + na + 1),
                     ("D", ", ".join(f"%{i}" for i in range(n))),
                     ("A", ", ".join(f"%{n + i}" for i in range(na))),
                     ("C", ", ".join(f'"+f"(d[{i}])' for i in range(n)))):
        src = src.replace(f"@{key}@", str(val))
    return src


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
