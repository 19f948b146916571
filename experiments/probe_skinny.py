"""Device probe: a skinny f16 product (M at most 64) without local memory, against accy's
kernels and torch (NVIDIA only: inline PTX ``mma.sync``).

    ACCY_DEVICE=nvidia OUT=results python experiments/probe_skinny.py

Each warp loads rows of B (K x N, N contiguous) 8 or 16 bytes a lane (``VEC`` halves) straight
into registers, packs pairs of K rows into m16n8k16 B registers (two 32-bit words, two
permutes), reads A's fragments from global memory, and runs ``MT`` m16 rows of A against
``VEC`` n8 fragments; K is split over the work-group's ``WARPS`` warps (steps interleaved,
``UNR`` at a time) and summed in local memory, and over ``KS`` work-groups (f32 partial sums,
then a second kernel). Every form of a shape is checked against float64 and timed (OpenCL
events, median of 15 calls after 3); accy's own kernels and torch eager run the same shape.
Writes ``$OUT/skinny_probe.json`` (the H100's: ``papers/data/thirtyeighth_skinny_probe_h100.json``,
papers/kernels.md "Thirty-eighth session"). ``BUDGET`` seconds (default 400) bound the sweep."""
import json
import os
import sys
import time
import traceback

import numpy as np
import pyopencl as cl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
OUT = os.environ.get("OUT", "/tmp")
MMA = ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
       "{%8,%9}, {%0,%1,%2,%3};")
SRC = r"""
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#define MMA(c, a, b0, b1) asm volatile(MMA_TEXT \
  : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) \
  : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))
__kernel __attribute__((reqd_work_group_size(32*WARPS,1,1)))
void skinny(__global const ushort* restrict X, __global const ushort* restrict W,
            __global float* restrict P, __global half* restrict C, int M, int N, int K,
            int kchunk) {
  const int lid = get_local_id(0), lane = lid & 31, warp = lid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int cb = get_group_id(0) * (8*VEC);
  const int col = cb + g*VEC;
  const int kc = get_group_id(1);
  const int kbeg = kc * kchunk, kend = min(K, kbeg + kchunk);
  float acc[MT][VEC][4];
  for (int m = 0; m < MT; m++)
    for (int j = 0; j < VEC; j++)
      for (int r = 0; r < 4; r++) acc[m][j][r] = 0.f;
  const bool colok = col < N;
  for (int k0 = kbeg + warp*16*UNR; k0 < kend; k0 += 16*WARPS*UNR) {
    uint bw[UNR][4][VEC/2];
    uint a[UNR][MT][4];
    #pragma unroll
    for (int u = 0; u < UNR; u++) {
      #pragma unroll
      for (int r = 0; r < 4; r++) {
        int row = k0 + u*16 + 2*t + (r&1) + (r>>1)*8;
        bool ok = colok && row < kend;
#if VEC == 8
        uint4 v = ok ? *(__global const uint4*)(W + (size_t)row*N + col) : (uint4)(0);
        bw[u][r][0] = v.s0; bw[u][r][1] = v.s1; bw[u][r][2] = v.s2; bw[u][r][3] = v.s3;
#elif VEC == 4
        uint2 v = ok ? *(__global const uint2*)(W + (size_t)row*N + col) : (uint2)(0);
        bw[u][r][0] = v.s0; bw[u][r][1] = v.s1;
#else
        uint v = ok ? *(__global const uint*)(W + (size_t)row*N + col) : 0u;
        bw[u][r][0] = v;
#endif
      }
      #pragma unroll
      for (int m = 0; m < MT; m++) {
        #pragma unroll
        for (int q = 0; q < 4; q++) {
          int row = m*16 + g + (q&1)*8, k = k0 + u*16 + 2*t + (q>>1)*8;
          a[u][m][q] = (row < M && k < kend) ? *(__global const uint*)(X + (size_t)row*K + k) : 0u;
        }
      }
    }
    #pragma unroll
    for (int u = 0; u < UNR; u++) {
      #pragma unroll
      for (int j = 0; j < VEC; j++) {
        uint w0 = bw[u][0][j>>1], w1 = bw[u][1][j>>1], w2 = bw[u][2][j>>1], w3 = bw[u][3][j>>1];
        uint b0 = (j&1) ? ((w0 >> 16) | (w1 & 0xffff0000u)) : ((w0 & 0xffffu) | (w1 << 16));
        uint b1 = (j&1) ? ((w2 >> 16) | (w3 & 0xffff0000u)) : ((w2 & 0xffffu) | (w3 << 16));
        #pragma unroll
        for (int m = 0; m < MT; m++) MMA(acc[m][j], a[u][m], b0, b1);
      }
    }
  }
  __local float red[WARPS][MT*16][8*VEC];
  #pragma unroll
  for (int m = 0; m < MT; m++)
    #pragma unroll
    for (int j = 0; j < VEC; j++)
      #pragma unroll
      for (int r = 0; r < 4; r++)
        red[warp][m*16 + g + 8*(r>>1)][(2*t + (r&1))*VEC + j] = acc[m][j][r];
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int e = lid; e < MT*16*8*VEC; e += 32*WARPS) {
    int row = e / (8*VEC), c = e % (8*VEC);
    float s = 0.f;
    for (int w = 0; w < WARPS; w++) s += red[w][row][c];
    if (row < M && cb + c < N) {
      if (KS == 1) vstore_half(s, 0, C + (size_t)row*N + cb + c);
      else P[((size_t)kc*M + row)*N + cb + c] = s;
    }
  }
}
__kernel void sums(__global const float* restrict P, __global half* restrict C, int MN) {
  int i = get_global_id(0);
  if (i < MN) {
    float s = 0.f;
    for (int k = 0; k < KS; k++) s += P[(size_t)k*MN + i];
    vstore_half(s, 0, C + i);
  }
}
"""

SHAPES = ((16, 4096, 4096), (8, 16384, 4096), (32, 8000, 3000), (1, 8192, 8192),
          (20, 2000, 20000), (64, 4096, 4096))
# (VEC, WARPS, UNR, KS): halves a lane loads a row, warps splitting K, steps a load batch,
# work-groups splitting K (more than one: f32 partial sums and the sums kernel)
FORMS = tuple((v, w, u, ks) for v in (4, 8) for w in (4, 8, 16) for u in (1, 2)
              for ks in (1, 2, 4) if not (v == 8 and w == 16))


def build(ctx: cl.Context, vec: int, warps: int, unr: int, ks: int, mt: int):
    opts = [f"-DVEC={vec}", f"-DWARPS={warps}", f"-DUNR={unr}", f"-DKS={ks}", f"-DMT={mt}"]
    prg = cl.Program(ctx, SRC.replace("MMA_TEXT", f'"{MMA}"')).build(options=opts)
    return cl.Kernel(prg, "skinny"), cl.Kernel(prg, "sums")


def time_form(q, kernels, form, m, n, k, bufs, ref):
    """(median ms of both kernels, of the product kernel, error relative to the largest)."""
    vec, warps, unr, ks = form
    skinny, sums = kernels
    d_x, d_w, d_p, d_c = bufs
    kchunk = -(-k // (ks * 16 * warps * unr)) * 16 * warps * unr
    grid = (-(-n // (8 * vec)) * 32 * warps, ks)

    def call():
        evs = [skinny(q, grid, (32 * warps, 1), d_x, d_w, d_p, d_c, np.int32(m), np.int32(n),
                      np.int32(k), np.int32(kchunk))]
        if ks > 1:
            evs.append(sums(q, (-(-m * n // 256) * 256,), (256,), d_p, d_c, np.int32(m * n)))
        return evs

    for _ in range(3):
        call()
    q.finish()
    got = np.empty((m, n), np.float16)
    cl.enqueue_copy(q, got, d_c)
    q.finish()
    err = float(np.abs(got.astype(np.float32) - ref).max() / np.abs(ref).max())
    both, product = [], []
    for _ in range(15):
        evs = call()
        q.finish()
        ns = [e.profile.end - e.profile.start for e in evs]
        both.append(sum(ns) / 1e6)
        product.append(ns[0] / 1e6)
    return float(np.median(both)), float(np.median(product)), err


def main() -> None:
    import bench_gpu as bg
    import bench_gpu_programs as bp
    import bench_gpu_torch as bt

    from accy.backends.registry import open_device

    runtime, target = open_device(None)
    ctx, q = runtime.context, runtime.queue
    torch, _ = bt.load_torch()
    bt.configure(torch, False)
    budget, start, built, rows = float(os.environ.get("BUDGET", "400")), time.time(), {}, []
    for m, n, k in SHAPES:
        mt = -(-m // 16)
        rng = np.random.default_rng(0)
        x = rng.standard_normal((m, k)).astype(np.float16)
        w = rng.standard_normal((k, n)).astype(np.float16)
        ref = x.astype(np.float32) @ w.astype(np.float32)
        mf = cl.mem_flags
        bufs = (cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x),
                cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=w),
                cl.Buffer(ctx, mf.READ_WRITE, 4 * m * n * 4),
                cl.Buffer(ctx, mf.READ_WRITE, m * n * 2))
        found = {}
        for form in FORMS:
            vec, warps, _, _ = form
            if time.time() - start > budget or warps * mt * 16 * 8 * vec * 4 > 48 * 1024:
                continue  # (the sums of every warp in local memory)
            key = (*form, mt)
            try:
                if key not in built:
                    built[key] = build(ctx, *key)
                ms, product, err = time_form(q, built[key], form, m, n, k, bufs, ref)
                found[str(key)] = {"ms": ms, "product_ms": product, "err": err}
            except Exception as e:  # a form the device rejects: recorded
                found[str(key)] = {"error": str(e)[:500]}
        spec = bp.Spec("g", "gemm", "x", {"M": m, "N": n, "K": k}, {}, "f16")
        dims = spec.full
        xs = bp.inputs(spec, dims)
        try:
            a = bg.bench_accy(spec, dims, xs, "f32", runtime, target, 8, bp.Checker(spec, dims, xs))
            accy_row = {"ms": a["kernel_ms"], "each": a["kernel_ms_each"], "gen": a["generators"]}
        except Exception:
            accy_row = {"error": traceback.format_exc(limit=2)[-400:]}
        xt = [torch.from_numpy(v).cuda() for v in xs]
        eager, _ = bt.time_calls(torch, bt.torch_fn("gemm", dims, torch), xt, 8)
        best = sorted((v["ms"], f) for f, v in found.items() if "ms" in v)[:3]
        print((m, n, k), f"torch {eager['kernel_ms']:.4f}", "accy", accy_row.get("ms"),
              "best", [(f, round(t, 4)) for t, f in best], flush=True)
        rows.append({"dims": [m, n, k], "torch_ms": eager["kernel_ms"], "accy": accy_row,
                     "probe": found})
        with open(os.path.join(OUT, "skinny_probe.json"), "w") as f:
            json.dump({"device": runtime.info.key, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
