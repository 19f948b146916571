"""The PTX of the tensor-core kernels replaced by C, for running whole generated kernels on
PoCL (test_mma_pipeline.py and the mma and attention tests after it): ``cp.async`` either
copied at once ("eager": catches a copy into a stage still being read) or held back until the
``cp.async.wait_group`` that covers it ("deferred": catches a stage read before its copies
were waited for), the group accounting emulated per work-item as PTX defines it;
``ldmatrix`` and f16 ``mma.sync`` by exchanges through local memory in the PTX ISA's layouts;
TF32 ``mma.sync`` and ``cvt`` as test_mma_generator's :func:`emulated` replaces them."""

from __future__ import annotations

import re

import numpy as np
from test_mma_generator import EMULATED_MMA, build_emulated, emulated

from accy.kernels import tma

try:
    import pyopencl as cl
except ImportError:  # the emulation tests skip without it
    cl = None

EMULATED_ASYNC = r"""
#define ACCY_CP_NOW(dst, src, n, size) { \
  __local uchar *d_ = (__local uchar *)(dst); \
  __global const uchar *s_ = (__global const uchar *)(src); \
  for (int q_ = 0; q_ < (size); q_++) d_[q_] = q_ < (n) ? s_[q_] : 0; }
#define ACCY_CP_LATER(dst, src, n, size) { \
  pd_[np_] = (__local uchar *)(dst); ps_[np_] = (__global const uchar *)(src); pn_[np_] = (n); \
  pz_[np_] = (size); pg_[np_] = ng_; np_++; if (np_ > 96) overflow_ = 1; }
#define ACCY_COMMIT() { ng_++; }
#define ACCY_WAIT(keep) { int kept_ = 0; \
  for (int p_ = 0; p_ < np_; p_++) { \
    if (pg_[p_] < ng_ - (keep)) { ACCY_CP_NOW(pd_[p_], ps_[p_], pn_[p_], pz_[p_]); } \
    else { pd_[kept_] = pd_[p_]; ps_[kept_] = ps_[p_]; pn_[kept_] = pn_[p_]; \
           pz_[kept_] = pz_[p_]; pg_[kept_] = pg_[p_]; kept_++; } } \
  np_ = kept_; }
static float accy_h(uint bits) {
  ushort b = (ushort)bits; return vload_half(0, (__private const half *)&b); }
#define ACCY_LDSM(trans, buf, off, r0, r1, r2, r3) { \
  const int l_ = get_local_id(0) % 32, w_ = get_local_id(0) / 32, c_ = l_ / 4; \
  emu_off[w_][l_] = (int)(off); \
  barrier(CLK_LOCAL_MEM_FENCE); \
  uint q_[4]; \
  for (int j_ = 0; j_ < 4; j_++) { \
    if (!(trans)) { q_[j_] = (uint)(buf)[emu_off[w_][8 * j_ + c_] + l_ % 4]; } \
    else { \
      const int lo_ = emu_off[w_][8 * j_ + 2 * (l_ % 4)]; \
      const int hi_ = emu_off[w_][8 * j_ + 2 * (l_ % 4) + 1]; \
      q_[j_] = ((((uint)(buf)[lo_ + c_ / 2]) >> (16 * (c_ % 2))) & 0xffffu) \
               | (((((uint)(buf)[hi_ + c_ / 2]) >> (16 * (c_ % 2))) & 0xffffu) << 16); } } \
  barrier(CLK_LOCAL_MEM_FENCE); \
  r0 = q_[0]; r1 = q_[1]; r2 = q_[2]; r3 = q_[3]; }
#define ACCY_EMU_MMA16(c0, c1, c2, c3, a0, a1, a2, a3, b0, b1) { \
  const int l_ = get_local_id(0) % 32, w_ = get_local_id(0) / 32, g_ = l_ >> 2, t_ = l_ & 3; \
  const uint ar_[4] = {a0, a1, a2, a3}, br_[2] = {b0, b1}; \
  for (int r_ = 0; r_ < 4; r_++) for (int h_ = 0; h_ < 2; h_++) \
    emu_a16[w_][g_ + 8 * (r_ % 2)][2 * t_ + h_ + 8 * (r_ / 2)] = accy_h(ar_[r_] >> (16 * h_)); \
  for (int r_ = 0; r_ < 2; r_++) for (int h_ = 0; h_ < 2; h_++) \
    emu_b16[w_][2 * t_ + h_ + 8 * r_][g_] = accy_h(br_[r_] >> (16 * h_)); \
  barrier(CLK_LOCAL_MEM_FENCE); \
  float d_[4] = {c0, c1, c2, c3}; \
  for (int r_ = 0; r_ < 4; r_++) { \
    const int row_ = g_ + 8 * (r_ / 2), col_ = 2 * t_ + (r_ % 2); \
    float s_ = 0.0f; \
    for (int k_ = 0; k_ < 16; k_++) s_ += emu_a16[w_][row_][k_] * emu_b16[w_][k_][col_]; \
    d_[r_] += s_; } \
  barrier(CLK_LOCAL_MEM_FENCE); \
  c0 = d_[0]; c1 = d_[1]; c2 = d_[2]; c3 = d_[3]; }
"""
# cp.async.cg (16 bytes) or .ca (4 or 8), optionally zero-filling past its source size
_CP = re.compile(r'asm volatile\("cp\.async\.c[ag]\.shared\.global \[%0\], \[%1\], '
                 r'(?P<size>\d+)(?:, %2)?;" :  : '
                 r'"r"\(\(\(int\)\(\(long\)\((?P<dst>.*)\)\)\)\), '
                 r'"l"\((?P<src>.*?)\)(?:, "r"\((?P<n>.*?)\))? : "memory"\);$',
                 re.M)
_COMMIT = re.compile(r'asm volatile\("cp\.async\.commit_group;" :  :  : "memory"\);')
_WAIT = re.compile(r'asm volatile\("cp\.async\.wait_group (\d);" :  :  : "memory"\);')
# ldmatrix: lane l gives the row address of row l % 8 of matrix l / 8 (16 bytes); it receives
# from each matrix j the word at row l / 4, column l % 4, or with .trans the halves at rows
# 2 (l % 4) and 2 (l % 4) + 1, column l / 4 (PTX ISA, "ldmatrix")
_LDSM = re.compile(r'asm volatile\("ldmatrix\.sync\.aligned\.m8n8\.x4(?P<trans>\.trans)?'
                   r'\.shared\.b16 [^"]*" : ' + ", ".join([r'"=r"\((\w+)\)'] * 4)
                   + r' : "r"\(\(\(int\)\(\(long\)\((?P<buf>\w+) \+ (?P<off>.*)\)\)\)\)\);$', re.M)
_MMA16 = re.compile(r'asm volatile\("mma\.sync\.aligned\.m16n8k16[^"]*" : '
                    + ", ".join([r'"\+f"\((\w+)\)'] * 4) + " : "
                    + ", ".join([r'"r"\((\w+)\)'] * 6) + r"\);")


def emulated_async(src: str, mode: str) -> str:
    """``src`` with cp.async (``mode``: "eager" or "deferred"), its groups and f16 mma.sync
    replaced by C, then TF32 mma.sync and cvt as test_mma_generator's :func:`emulated` does."""
    copy = "ACCY_CP_NOW" if mode == "eager" else "ACCY_CP_LATER"
    src = _CP.sub(lambda m: f"{copy}({m['dst']}, {m['src']}, {m['n'] or m['size']}, "
                  f"{m['size']});", src)
    src = _COMMIT.sub("ACCY_COMMIT();" if mode == "deferred" else ";", src)
    src = _WAIT.sub((lambda m: f"ACCY_WAIT({m[1]});") if mode == "deferred" else ";", src)
    src = _LDSM.sub(lambda m: f"ACCY_LDSM({int(bool(m['trans']))}, {m['buf']}, {m['off']}, "
                    f"{', '.join(m.groups()[1:5])});", src)
    src = _MMA16.sub(lambda m: f"ACCY_EMU_MMA16({', '.join(m.groups())});", src)
    if "mma.sync" in src or "cvt.rna" in src or "fence.acq_rel" in src:
        src = emulated(src)
    else:
        assert "asm" not in src, src
        src = EMULATED_MMA + src
    lines = src.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("__kernel"))
    body = next(i for i in range(at, len(lines)) if lines[i].rstrip().endswith("{"))
    lines[body + 1:body + 1] = [
        "  __local float emu_a16[8][16][16]; __local float emu_b16[8][16][8];",
        "  __local int emu_off[8][32];",
        "  __local uchar *pd_[128]; __global const uchar *ps_[128]; int pn_[128], pg_[128], "
        "pz_[128];",
        "  int np_ = 0, ng_ = 0, overflow_ = 0;"]
    lines.insert(at, EMULATED_ASYNC)
    return "\n".join(lines) + "\n"


def one_line(src: str) -> str:
    """A probe's source with each asm statement on one line, as the generators write them."""
    return re.sub(r'\n\s+(?=[:"])', " ", re.sub(r'"\n\s+"', "", src))


def run_emulated(device, job, source: str, args: list[np.ndarray], shape, dtype) -> np.ndarray:
    """The one kernel of ``job`` built from ``source`` (its emulated form), run on ``args``;
    the output."""
    (_,) = job.kernels
    return run_kernels(device, job, [source], args, shape, dtype)


def run_kernels(device, job, sources: list[str], args: list[np.ndarray], shape, dtype
                ) -> np.ndarray:
    """Every kernel of ``job`` in order (a split product's two), each built from its entry of
    ``sources``, its arguments bound by name (``in<i>`` the i-th of ``args``, scratch filled
    with nan, ``out0``); the output."""
    ctx, queue, flags = device.context, device.queue, cl.mem_flags

    def buf(x):
        return cl.Buffer(ctx, flags.READ_WRITE | flags.COPY_HOST_PTR, hostbuf=x)

    bufs = {f"in{i}": buf(x) for i, x in enumerate(args)}
    got = np.zeros(shape, dtype)
    bufs["out0"] = buf(got)
    for kernel, source in zip(job.kernels, sources, strict=True):
        for a in kernel.args:
            if a.is_scratch and a.name not in bufs:
                bufs[a.name] = buf(np.full(a.scratch_elems, np.nan, a.dtype.numpy)
                                   if a.dtype.numpy.kind == "f" else
                                   np.zeros(a.scratch_elems, a.dtype.numpy))
        program = build_emulated(ctx, source)
        getattr(program, kernel.entry)(queue, kernel.geometry.global_size,
                                       kernel.geometry.local_size,
                                       *(bufs[a.name] for a in kernel.args))
    cl.enqueue_copy(queue, got, bufs["out0"])
    queue.finish()
    return got


# wgmma (accy/kernels/wgmma.py, markers of accy/kernels/wgmma_ptx.py): a K step of S register-A
# wgmma m64nNk16, B MN-major (trans-b 1) or K-major (0) through its descriptor; the A fragments
# of each warpgroup's 64 rows exchanged through local memory (mma.sync m16n8k16's A layout per
# warp), B's halves read at the core-matrix address the descriptor gives (start: the 18-bit
# local address >> 4, made relative to b_tile; leading offset between K-adjacent core
# matrices, stride between N-adjacent ones; 256 bytes further per wgmma; swizzled by 128
# bytes: MN-major as TMA lands wgmma-f16's B, K-major as it lands tma-attention-f16's K, 64 K
# a 128-byte row); the waits and fences have nothing to do
_RSTEP = re.compile(r'asm volatile\("// @@RSTEP(\d+)_(\d+)_([01])(?:_(?P<adv>\d+))? [^"]*" : '
                    r'(?P<outs>[^:]*) : '
                    r'(?P<ins>[^:]*), "l"\((?P<desc>\w+)\), "r"\([^:]*\) : "memory"\);')
_WG_NOP = re.compile(r'asm volatile\("// @@(?:WAIT[01]|PROXY|HOLD|MBINIT\d+|MBEXPECT\d+|'
                     r'MBARRIVE|MBWAIT)[^"]*" :[^;]*;')
_LD_V4 = re.compile(r'asm volatile\("(?:\{ \.reg \.pred p; setp\.ne\.b32 p, %5, 0; @p )?'
                    r'ld\.global\.v4\.u32 [^"]*" : '
                    + ", ".join([r'"=r"\((\w+)\)'] * 4)
                    + r' : "l"\((?P<at>.*?)\)(?:, "r"\((?P<ok>.*)\))?\);$', re.M)
WGMMA_STEP = r"""{
  const int l_ = get_local_id(0) % 128, wg_ = get_local_id(0) / 128, w_ = l_ / 32;
  const int g_ = (l_ % 32) / 4, t_ = l_ % 4;
  float d_[@ND@] = {@D@};
  const uint a_[@NA@] = {@A@};
  const ulong desc_ = @DESC@;
  const int base_ = (((int)((desc_ & 0x3FFF) << 4)) - (((int)((long)b_tile)) & 0x3FFFF)) & 0x3FFFF;
  const int lbo_ = (int)(((desc_ >> 16) & 0x3FFF) << 4);
  const int sbo_ = (int)(((desc_ >> 32) & 0x3FFF) << 4);
  const int swizzled_ = (int)(desc_ >> 62) == 1;
  for (int s_ = 0; s_ < @S@; s_++) {
    for (int r_ = 0; r_ < 4; r_++) for (int h_ = 0; h_ < 2; h_++)
      emu_wa[wg_][16 * w_ + g_ + 8 * (r_ % 2)][2 * t_ + h_ + 8 * (r_ / 2)] =
        accy_h(a_[4 * s_ + r_] >> (16 * h_));
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int j_ = 0; j_ < @ND@ / 4; j_++) for (int r_ = 0; r_ < 4; r_++) {
      const int row_ = 16 * w_ + g_ + 8 * (r_ / 2), col_ = 8 * j_ + 2 * t_ + r_ % 2;
      float sum_ = 0.0f;
      for (int k_ = 0; k_ < 16; k_++) {
        const int at_ = swizzled_ && @TRANS@  /* MN-major, 128-byte swizzle: 64 columns a
                                                 128-byte row */
          ? base_ + 16 * @ADV@ * s_ + (col_ / 64) * lbo_ + (k_ / 8) * sbo_ + (k_ % 8) * 128
            + ((((col_ % 64) / 8) ^ (k_ % 8)) * 16) + (col_ % 8) * 2
          : swizzled_  /* K-major, 128-byte swizzle: a column's 64 K a row, steps inside it */
          ? base_ + (col_ / 8) * sbo_ + (col_ % 8) * 128
            + ((((16 * @ADV@ * s_ + 2 * k_) / 16) ^ (col_ % 8)) * 16) + (2 * k_) % 16
          : base_ + 16 * @ADV@ * s_ + (col_ / 8) * sbo_ + (k_ / 8) * lbo_ + (@TRANS@
                        ? (k_ % 8) * 16 + (col_ % 8) * 2 : (col_ % 8) * 16 + (k_ % 8) * 2);
        sum_ += emu_wa[wg_][row_][k_] * accy_h(((__local const ushort *)b_tile)[at_ / 2]);
      }
      d_[4 * j_ + r_] += sum_;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
@OUT@
}"""


# wgmma with A and B from local memory (accy/kernels/wgmma_ss.py, marker SSTEP; SSTEPT: TF32's
# k8 steps of f32, the values the TMA copies rounded, both operands K-major): S k16 steps,
# A's halves read at the K-major 128-byte swizzled address of A's descriptor (8-row atoms its
# stride offset apart; the 16-byte chunk of K in a row XORed with the row % 8; 32 bytes
# further per step), B's as the MN-major swizzled ones of RSTEP or (trans-b 0) as A's; barriers
# before (the copies
# work-item 0 made landed) and after (every work-item read the stage before it is refilled)
_SSTEP = re.compile(r'asm volatile\("// @@SSTEP(?P<tf32>T?)(\d+)_(\d+)_(\d+)_(\d+)(?:_([01]))? '
                    r'[^"]*" : (?P<outs>[^:]*) : "l"\((?P<adesc>.*?)\), '
                    r'"l"\((?P<bdesc>\w+)\), "r"\([^:]*\) : "memory"\);')
# SSTEPT..x{p} (accy/kernels/wgmma_ss3.py): p runs of the TF32 step, a pair of descriptors a run
_SSTEP_RUNS = re.compile(r'asm volatile\("// @@SSTEPT(\d+)_(\d+)_(\d+)_(\d+)x(\d+) [^"]*" : '
                         r'(?P<outs>[^:]*) : (?P<ins>"l"\(.*?), "r"\([^:]*\) : "memory"\);')
WGMMA_SS_STEP = r"""{
  const int l_ = get_local_id(0) % 128, w_ = l_ / 32;
  const int g_ = (l_ % 32) / 4, t_ = l_ % 4;
  float d_[@ND@] = {@D@};
  const ulong adesc_ = @ADESC@, desc_ = @DESC@;
  const int tile_ = ((int)((long)b_tile)) & 0x3FFFF;
  const int abase_ = (((int)((adesc_ & 0x3FFF) << 4)) - tile_) & 0x3FFFF;
  const int asbo_ = (int)(((adesc_ >> 32) & 0x3FFF) << 4);
  const int base_ = (((int)((desc_ & 0x3FFF) << 4)) - tile_) & 0x3FFFF;
  const int lbo_ = (int)(((desc_ >> 16) & 0x3FFF) << 4);
  const int sbo_ = (int)(((desc_ >> 32) & 0x3FFF) << 4);
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s_ = 0; s_ < @S@; s_++)
    for (int j_ = 0; j_ < @ND@ / 4; j_++) for (int r_ = 0; r_ < 4; r_++) {
      const int row_ = 16 * w_ + g_ + 8 * (r_ / 2), col_ = 8 * j_ + 2 * t_ + r_ % 2;
      float sum_ = 0.0f;
      for (int k_ = 0; k_ < 32 / @E@; k_++) {
        const int kb_ = 16 * @AADV@ * s_ + @E@ * k_;
        const int aat_ = abase_ + (row_ / 8) * asbo_ + (row_ % 8) * 128
          + (((kb_ / 16) ^ (row_ % 8)) * 16) + kb_ % 16;
        const int at_ = @TRANS@
          ? base_ + 16 * @BADV@ * s_ + (col_ / 64) * lbo_ + (k_ / 8) * sbo_ + (k_ % 8) * 128
            + ((((col_ % 64) / 8) ^ (k_ % 8)) * 16) + (col_ % 8) * 2
          : base_ + (col_ / 8) * sbo_ + (col_ % 8) * 128
            + ((((16 * @BADV@ * s_ + @E@ * k_) / 16) ^ (col_ % 8)) * 16) + (@E@ * k_) % 16;
        sum_ += @EL(aat_)@ * @EL(at_)@;
      }
      d_[4 * j_ + r_] += sum_;
    }
  barrier(CLK_LOCAL_MEM_FENCE);
@OUT@
}"""


# TF32 wgmma (accy/kernels/wgmma_tf32.py, marker TSTEP): P products of S k8 steps each, A's
# fragments (mma.sync m16n8k8 TF32's layout per warp: rows g, g + 8 at column t, then t + 4)
# exchanged through local memory, B's words read at the K-major core-matrix address of the
# product's descriptor (4 K words a 16-byte core-matrix row; 256 bytes further per k8 step)
_TSTEP = re.compile(r'asm volatile\("// @@TSTEP(\d+)_(\d+)_(\d+) [^"]*" : (?P<outs>[^:]*) : '
                    r'(?P<ins>[^:]*) : "memory"\);')
WGMMA_TF32_STEP = r"""{
  const int l_ = get_local_id(0) % 128, wg_ = get_local_id(0) / 128, w_ = l_ / 32;
  const int g_ = (l_ % 32) / 4, t_ = l_ % 4;
  float d_[@ND@] = {@D@};
  const uint a_[@NA@] = {@A@};
  const ulong descs_[@P@] = {@DESCS@};
  for (int j_ = 0; j_ < @P@; j_++) {
    const ulong desc_ = descs_[j_];
    const int base_ = (((int)((desc_ & 0x3FFF) << 4))
                       - (((int)((long)b_tile)) & 0x3FFFF)) & 0x3FFFF;
    const int lbo_ = (int)(((desc_ >> 16) & 0x3FFF) << 4);
    const int sbo_ = (int)(((desc_ >> 32) & 0x3FFF) << 4);
    for (int s_ = 0; s_ < @S@; s_++) {
      for (int r_ = 0; r_ < 4; r_++)
        emu_wa[wg_][16 * w_ + g_ + 8 * (r_ % 2)][t_ + 4 * (r_ / 2)] =
          as_float(a_[4 * (@S@ * j_ + s_) + r_]);
      barrier(CLK_LOCAL_MEM_FENCE);
      for (int q_ = 0; q_ < @ND@ / 4; q_++) for (int r_ = 0; r_ < 4; r_++) {
        const int row_ = 16 * w_ + g_ + 8 * (r_ / 2), col_ = 8 * q_ + 2 * t_ + r_ % 2;
        float sum_ = 0.0f;
        for (int k_ = 0; k_ < 8; k_++) {
          const int at_ = base_ + 256 * s_ + (col_ / 8) * sbo_ + (k_ / 4) * lbo_
                          + (col_ % 8) * 16 + (k_ % 4) * 4;
          sum_ += emu_wa[wg_][row_][k_] * ((__local const float *)b_tile)[at_ / 4];
        }
        d_[4 * q_ + r_] += sum_;
      }
      barrier(CLK_LOCAL_MEM_FENCE);
    }
  }
@OUT@
}"""


# TMA (accy/kernels/tma.py, accy/kernels/wgmma_tma.py): the tensor map's first word holds the
# operand's address (TMAP; under KEEP_MAPS its tag is left alone), the work-item issuing a copy
# copies the box at once, 128-byte swizzled (16-byte chunk c of a box row r at c ^ (r % 8))
# from the geometry the marker's text gives (dims / strides / box); the mbarriers have nothing
# to do (the emulated wgmma steps hold every work-item together by their barriers)
_TMAP = re.compile(r'asm volatile\("// @@TMAP [^"]*"\s*:\s*:\s*"l"\((?P<map>.*?)\), '
                   r'"l"\((?P<ptr>.*?)\)(, "l"\(.*\))?\s*:\s*"memory"\);$', re.M)
_TMA = re.compile(r'asm volatile\("// @@TMA(\d) [^;"]*; (?P<geo>[^"]*)"\s*:\s*:\s*(?P<ins>.*?)'
                  r'\s*:\s*"memory"\);$', re.M)
TMA_COPY = r"""{
  __global const uchar *src_ = (__global const uchar *)(*(__global const ulong *)(@MAP@));
  __local uchar *dst_ = (__local uchar *)b_tile + ((@DST@) - (int)((long)b_tile));
  const long c_[@R@] = {@C@}, dims_[@R@] = {@DIMS@}, str_[@R@] = {@E@, @STRIDES@};
  const int box_[@R@] = {@BOX@};
  int n_ = 1;
  for (int d_ = 0; d_ < @R@; d_++) n_ *= box_[d_];
  for (int e_ = 0; e_ < n_; e_++) {
    int rest_ = e_, in_ = 1;
    long off_ = 0;
    for (int d_ = 0; d_ < @R@; d_++) {
      const long x_ = c_[d_] + rest_ % box_[d_];
      rest_ /= box_[d_];
      in_ = in_ && x_ >= 0 && x_ < dims_[d_];
      off_ += x_ * str_[d_];
    }
    const int byte_ = @E@ * e_, row_ = byte_ / 128;
    *(__local @T@ *)(dst_ + row_ * 128 + ((((byte_ % 128) / 16) ^ (row_ % 8)) * 16)
                     + byte_ % 16) = in_ ? @ROUND(*(__global const @T@ *)(src_ + off_))@ : 0;
  }
}"""


def tma_copy(m: re.Match) -> str:
    ins = [re.fullmatch(r'"[rl]"\((.*)\)', op.strip())[1]
           for op in re.split(r',\s*(?=")', m["ins"])]
    rank = int(m[1])
    dims, strides, box, (dtype,) = (v.split() for v in m["geo"].split("/"))
    assert len(ins) == rank + 3 and len(dims) == len(box) == rank, m[0][:300]
    tf32 = int(dtype) == tma.TF32  # f32 rounded to TF32 to nearest (ties away), else halves
    text = re.sub(r"@ROUND\((.*)\)@", (lambda r: f"((({r[1]}) + 0x1000u) & 0xFFFFE000u)")
                  if tf32 else (lambda r: r[1]), TMA_COPY)
    text = text.replace("@T@", "uint" if tf32 else "ushort").replace("@E@", "4" if tf32 else "2")
    for key, value in (("@MAP@", ins[1]), ("@DST@", ins[0]), ("@R@", str(rank)),
                       ("@C@", ", ".join(ins[2:2 + rank])), ("@DIMS@", ", ".join(dims)),
                       ("@STRIDES@", ", ".join(strides)), ("@BOX@", ", ".join(box))):
        text = text.replace(key, value)
    return text


def element(at: str, tf32: bool) -> str:
    """The operand element at local byte ``at`` of b_tile: an f32 (TF32, already rounded by the
    copy) or a half."""
    return (f"((__local const float *)b_tile)[{at} / 4]" if tf32 else
            f"accy_h(((__local const ushort *)b_tile)[{at} / 2])")


def emulated_wgmma(src: str, mode: str) -> str:
    """``src`` (a wgmma-f16, -tf32 or -3xtf32 kernel) with its wgmma steps, waits, fences and
    16-byte A loads replaced by C, then its cp.async (and TF32 roundings) as
    :func:`emulated_async` replaces them (``mode``)."""
    def tstep(m: re.Match) -> str:
        outs = re.findall(r'"\+f"\((\w+)\)', m["outs"])
        ins = re.findall(r'"r"\(([\w\[\]]+)\)', m["ins"])
        descs = re.findall(r'"l"\((\(?\w+(?: \+ \d+L\))?)\)', m["ins"])
        n, steps, products = int(m[1]), int(m[2]), int(m[3])
        assert len(outs) == n // 2 and len(ins) == 4 * steps * products, m[0][:200]
        assert len(descs) == products, m["ins"][-200:]
        text = WGMMA_TF32_STEP
        for key, value in (("@ND@", str(len(outs))), ("@D@", ", ".join(outs)),
                           ("@NA@", str(len(ins))), ("@A@", ", ".join(ins)),
                           ("@P@", str(products)), ("@DESCS@", ", ".join(descs)),
                           ("@S@", str(steps)),
                           ("@OUT@", " ".join(f"{o} = d_[{i}];" for i, o in enumerate(outs)))):
            text = text.replace(key, value)
        return text

    def step(m: re.Match) -> str:
        outs = re.findall(r'"\+f"\((\w+)\)', m["outs"])
        ins = re.findall(r'"r"\(([\w\[\]]+)\)', m["ins"])
        assert len(outs) == int(m[1]) // 2 and len(ins) == 4 * int(m[2]), m[0][:200]
        text = WGMMA_STEP
        for key, value in (("@ND@", str(len(outs))), ("@D@", ", ".join(outs)),
                           ("@NA@", str(len(ins))), ("@A@", ", ".join(ins)),
                           ("@DESC@", m["desc"]), ("@S@", m[2]), ("@TRANS@", m[3]),
                           ("@ADV@", m["adv"] or "16"),
                           ("@OUT@", " ".join(f"{o} = d_[{i}];" for i, o in enumerate(outs)))):
            text = text.replace(key, value)
        return text

    def ss_block(outs: list[str], adesc: str, bdesc: str, steps: str, a_adv: str, b_adv: str,
                 trans: str, tf32: bool) -> str:
        text = WGMMA_SS_STEP.replace("@EL(aat_)@", element("aat_", tf32)).replace(
            "@EL(at_)@", element("at_", tf32))
        for key, value in (("@ND@", str(len(outs))), ("@D@", ", ".join(outs)),
                           ("@ADESC@", adesc), ("@DESC@", bdesc), ("@S@", steps),
                           ("@AADV@", a_adv), ("@BADV@", b_adv), ("@TRANS@", trans),
                           ("@E@", "4" if tf32 else "2"),
                           ("@OUT@", " ".join(f"{o} = d_[{i}];" for i, o in enumerate(outs)))):
            text = text.replace(key, value)
        return text

    def ss_step(m: re.Match) -> str:
        outs = re.findall(r'"\+f"\((\w+)\)', m["outs"])
        assert len(outs) == int(m[2]) // 2, m[0][:200]
        return ss_block(outs, m["adesc"], m["bdesc"], m[3], m[4], m[5], m[6] or "0",
                        bool(m["tf32"]))

    def ss_runs(m: re.Match) -> str:
        outs = re.findall(r'"\+f"\((\w+)\)', m["outs"])
        descs = [d.rstrip(", ")[:-1] for d in m["ins"].split('"l"(')[1:]]
        assert len(outs) == int(m[1]) // 2 and len(descs) == 2 * int(m[5]), m[0][-400:]
        return "\n".join(ss_block(outs, descs[2 * j], descs[2 * j + 1], m[2], m[3], m[4], "0",
                                   True) for j in range(int(m[5])))

    def load(m: re.Match) -> str:
        regs = m.groups()[:4]
        got = " ".join(f"{r} = q_[{i}];" for i, r in enumerate(regs))
        zero = " ".join(f"{r} = 0;" for r in regs)
        body = f"{{ __global const uint *q_ = (__global const uint *)({m['at']}); {got} }}"
        return body if m["ok"] is None else f"if ({m['ok']}) {body} else {{ {zero} }}"

    src = _TMA.sub(tma_copy, _TMAP.sub(lambda m: f"*(__global ulong *)({m['map']}) = "
                                       f"(ulong)({m['ptr']});", src))
    src = _LD_V4.sub(load, _WG_NOP.sub(";", _TSTEP.sub(tstep, _RSTEP.sub(step, src))))
    src = _SSTEP.sub(ss_step, _SSTEP_RUNS.sub(ss_runs, src))
    assert "@@" not in src and "ld.global" not in src, src
    lines = src.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("__kernel"))
    body = next(i for i in range(at, len(lines)) if lines[i].rstrip().endswith("{"))
    lines.insert(body + 1, "  __local float emu_wa[4][64][16];")
    return emulated_async("\n".join(lines) + "\n", mode)


def product_sources(job, emulate) -> list[str]:
    """``job``'s kernel sources in order, the first (the product's, its K chunks' sums
    included where it adds them itself) with its PTX emulated by ``emulate``."""
    return [emulate(job.kernel_source(0)), *map(job.kernel_source, range(1, len(job.kernels)))]


def check_f16_product(device, job, source: str | list[str], m: int, n: int, k: int, batch: int,
                      bias: bool, seed: int, b_transposed: bool = False) -> None:
    """Run ``job``'s one kernel from ``source`` (its emulated form; or its kernels in order,
    from a list of them) on seeded f16 operands of
    ``A @ B`` (B stored N x K when ``b_transposed``; + bias and relu when ``bias``) and check
    the result (:func:`check_f16`)."""
    rng = np.random.default_rng(seed)
    lead = (batch,) if batch else ()
    a = rng.uniform(-1, 1, (*lead, m, k)).astype(np.float16)
    b = rng.uniform(-1, 1, (*lead, *((n, k) if b_transposed else (k, n)))).astype(np.float16)
    args = [a, b] + ([rng.uniform(-1, 1, n).astype(np.float16)] if bias else [])
    got = (run_kernels(device, job, source, args, (*lead, m, n), np.float16)
           if isinstance(source, list) else
           run_emulated(device, job, source, args, (*lead, m, n), np.float16))
    check_f16(got, a, np.swapaxes(b, -1, -2) if b_transposed else b,
              args[2] if bias else None)


def check_f16(got: np.ndarray, a: np.ndarray, b: np.ndarray, bias: np.ndarray | None
              ) -> None:
    """An f16 product ``a @ b`` (+ bias, relu) against float64: f32 sums of exact products,
    the product rounded to f16, and with a bias the sum rounded again (each half an f16 step
    of what it rounds: a bias cancelling the product keeps the first rounding's error)."""
    product = a.astype(np.float64) @ b.astype(np.float64)
    exact = np.maximum(product + bias, 0.0) if bias is not None else product
    bound = 2**-11 * (np.abs(product) + np.abs(exact)) + 1e-6 * a.shape[-1]
    assert np.all(np.abs(got.astype(np.float64) - exact) <= bound), \
        np.max(np.abs(got.astype(np.float64) - exact) - bound)

