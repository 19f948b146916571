"""The kernels of ``probe_wgmma.py`` as text, and the rewriting of their PTX: no device here.

NVIDIA's OpenCL compiler emits PTX for ``.target sm_90``, where ``wgmma`` is rejected. The
kernels hold placeholder comments in inline asm (``// @@NAME operands``: the compiler binds the
registers and keeps them, ptxas ignores the text); :func:`substitute` replaces each by its
instructions in the program's PTX and :func:`sm90a` sets the target, after which the program is
built from that PTX. ``COMMON`` is what every kernel shares (descriptors, core-matrix offsets,
the GEMMs' f16 stores); :func:`gemm_source` is step (5)'s GEMM (A and B in local memory),
:func:`ra_gemm_source` step (7)'s (A's fragments in registers, only B in local memory)."""
import re

from accy.kernels.wgmma_ptx import step_instructions


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
    "WAIT1": lambda ops: "wgmma.wait_group.sync.aligned 1;",
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
    where ``trans_b``): accy's own expansion (accy/kernels/wgmma_ptx.py)."""
    return lambda ops: step_instructions(n, steps, trans_b, ops)


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
