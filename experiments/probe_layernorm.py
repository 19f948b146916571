"""Device probe: layernorm / RMSNorm on 8192x4096 (NVIDIA or any OpenCL device).

    ACCY_DEVICE=nvidia OUT=results python experiments/probe_layernorm.py [--small]

(A) accy's programs (bench_gpu's layernorm, rmsnorm, the MLPs; ``LN_PROGRAMS`` to choose) under
the default pipeline and under ``memory-space-planning{use-constant=false}`` (small read-only
inputs in ``__global`` instead of ``__constant``), timed as bench_gpu times them; (B) the
generated layernorm kernel launched by hand, with hand edits of its source (``__constant`` ->
``__global``, the divisions by the row's deviation as one reciprocal), hand-written float4
kernels (T work-items a row, reductions through local memory or warp shuffles, division or
reciprocal) and a float4 copy of the same bytes: median event time of 30 back-to-back launches,
GB/s (read + write), error against float64. ``--small``: 48x256 rows (PoCL). Writes
``$OUT/ln_probe.json`` (the H200's: ``papers/data/probe_layernorm_tenth_h200.json``)."""
import importlib.util
import json
import os
import re
import statistics
import sys

import numpy as np
import pyopencl as cl

import accy
from accy.backends.registry import open_device
from accy.passes.spec import parse_pipeline

_spec = importlib.util.spec_from_file_location(
    "bench_gpu", os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench_gpu.py"))
assert _spec is not None and _spec.loader is not None
bg = importlib.util.module_from_spec(_spec)
sys.modules["bench_gpu"] = bg
_spec.loader.exec_module(bg)

OUT = os.environ.get("OUT", "/tmp")
dev = os.environ.get("ACCY_DEVICE", "nvidia")
small = "--small" in sys.argv
runtime, target = open_device(dev)
res = {"device": str(target.device), "A": {}, "B": {}}

# (A) accy programs, default vs use-constant=false
orig = bg.pipeline_text


def noconst(precision):
    return parse_pipeline(orig(precision)).replacing(
        "memory-space-planning{use-constant=false}").text()


names = os.environ.get("LN_PROGRAMS",
                       "layernorm,rmsnorm,mlp_gelu,mlp_gelu_f16,layernorm_f16").split(",")
for name in names:
    spec = bg.PROGRAMS[name]
    dims = spec.dims("small" if small else "full")
    xs = bg.inputs(spec, dims)
    check = bg.Checker(spec, dims, xs)
    for label, fn in (("default", orig), ("global", noconst)):
        bg.pipeline_text = fn
        try:
            r = bg.bench_accy(spec, dims, xs, "f32", runtime, target, 3 if small else 20, check)
            res["A"][f"{name}.{label}"] = r
            print(f"A {name:14s} {label:8s} {r['kernel_ms']:.4f} ms  kernels {r['kernels']} "
                  f"{r['kernel_ms_each']} ok={r['check'].get('ok', r['check'])}", flush=True)
        except Exception as exc:  # noqa: BLE001
            print(f"A {name} {label} FAILED {exc!r}", flush=True)
bg.pipeline_text = orig

# (B) hand kernels
R, N = (48, 256) if small else (8192, 4096)
ctx, q = runtime.context, runtime.queue
rng = np.random.default_rng(0)
x = (2 * rng.standard_normal((R, N)) + 0.5).astype(np.float32)
g = rng.standard_normal(N).astype(np.float32)
b = rng.standard_normal(N).astype(np.float32)
xd = x.astype(np.float64)
xc = xd - xd.mean(-1, keepdims=True)
ref = xc / np.sqrt((xc * xc).mean(-1, keepdims=True) + 1e-5) * g + b
mf = cl.mem_flags
bx = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x)
bgm = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=g)
bb = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=b)
by = cl.Buffer(ctx, mf.READ_WRITE, size=x.nbytes)
nv = "NVIDIA" in ctx.devices[0].platform.name


def timeit(name, src, kname, gsize, lsize, args, check=True):
    try:
        prg = cl.Program(ctx, src).build(options=["-cl-std=CL1.2"])
        k = getattr(prg, kname)
        evs = []
        for _ in range(35):
            e = k(q, (gsize,), (lsize,), *args)
            evs.append(e)
        q.finish()
        ms = statistics.median((e.profile.end - e.profile.start) / 1e6 for e in evs[5:])
        out = np.empty_like(x)
        cl.enqueue_copy(q, out, by)
        q.finish()
        err = float(np.abs(out - ref).max() / np.abs(ref).max()) if check else None
        gbs = 2 * x.nbytes / ms / 1e6
        res["B"][name] = {"ms": ms, "GB/s": gbs, "rel_err": err}
        print(f"B {name:28s} {ms:.4f} ms {gbs:7.0f} GB/s err {err}", flush=True)
    except Exception as exc:  # noqa: BLE001
        print(f"B {name} FAILED {str(exc)[:400]}", flush=True)

# generated source and edits
spec = bg.PROGRAMS["layernorm"]
dims = {"R": R, "C": N}
job = accy.prepare(bg.program(spec, dims), orig("f32"), target=target)
src = job.kernel_source(0)
kname = job.kernel_summary(0).entry
geo = job.kernel_summary(0).geometry
gs, ls = geo.global_size[0], geo.local_size[0]
args = (bx, bgm, bb, by)
timeit("gen", src, kname, gs, ls, args)
glob = src.replace("__constant float*", "__global const float*")
timeit("gen.global", glob, kname, gs, ls, args)
m = re.search(r"const float (v\d+) = sqrt\((v\d+)\);", glob)
if m:
    s = m.group(1)
    rec = glob.replace(m.group(0), m.group(0) + f"\n  const float rinv = 1.0f / {s};")
    rec = rec.replace(f" / {s})", " * rinv)")
    timeit("gen.global.recip", rec, kname, gs, ls, args)
    res["gen_source"] = src

HAND = r"""
#define T %(T)d
#define H %(H)d
#define N4 %(N4)d
float wsum(float s) {
#if SHFL
  for (int m = 16; m >= 1; m >>= 1) { float o;
    asm volatile("shfl.sync.bfly.b32 %%0, %%1, %%2, 0x1f, 0xffffffff;" : "=f"(o) : "f"(s), "r"(m));
    s += o; }
#endif
  return s;
}
float rowsum(float s, __local float* red, int l) {
#if SHFL
  s = wsum(s);
  if ((l & 31) == 0) red[l >> 5] = s;
  barrier(CLK_LOCAL_MEM_FENCE);
  float t = 0.0f;
  for (int j = 0; j < T / 32; j++) t += red[j];
#else
  red[l] = s;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (l < 32) { float a = 0.0f; for (int j = 0; j < T / 32; j++) a += red[l + 32 * j]; red[l] = a; }
  barrier(CLK_LOCAL_MEM_FENCE);
  float t = 0.0f;
  for (int j = 0; j < 32; j++) t += red[j];
#endif
  barrier(CLK_LOCAL_MEM_FENCE);
  return t;
}
__kernel __attribute__((reqd_work_group_size(T, 1, 1)))
void ln4(__global const float4* restrict x, __global const float4* restrict g,
         __global const float4* restrict b, __global float4* restrict y) {
  __local float red[T];
  const int l = get_local_id(0);
  const long base = (long)get_group_id(0) * N4;
  float4 v[H];
  float s = 0.0f;
  for (int k = 0; k < H; k++) {
    v[k] = x[base + l + k * T];
    s += (v[k].x + v[k].y) + (v[k].z + v[k].w);
  }
  const float mean = rowsum(s, red, l) / (4.0f * N4);
  float qq = 0.0f;
  for (int k = 0; k < H; k++) {
    v[k] -= mean;
    float4 d = v[k] * v[k];
    qq += (d.x + d.y) + (d.z + d.w);
  }
  const float sd = sqrt(rowsum(qq, red, l) / (4.0f * N4) + 1e-5f);
#if RECIP
  const float r = 1.0f / sd;
#endif
  for (int k = 0; k < H; k++) {
    const int c = l + k * T;
#if RECIP
    y[base + c] = v[k] * r * g[c] + b[c];
#else
    y[base + c] = v[k] / sd * g[c] + b[c];
#endif
  }
}
__kernel void copy4(__global const float4* restrict x, __global float4* restrict y) {
  const long i = get_global_id(0); y[i] = x[i];
}
"""
N4 = N // 4
for T in ((64,) if small else (128, 256, 512, 1024)):
    if N4 % T:
        continue
    for shfl in ((0, 1) if nv else (0,)):
        for recip in (0, 1):
            s = (f"#define SHFL {shfl}\n#define RECIP {recip}\n"
                 + HAND % {"T": T, "H": N4 // T, "N4": N4})
            timeit(f"f4.T{T}.{'shfl' if shfl else 'local'}.{'recip' if recip else 'div'}",
                   s, "ln4", R * T, T, args)
s = "#define SHFL 0\n#define RECIP 0\n" + HAND % {"T": 64, "H": 1, "N4": N4}
timeit("copy4", s, "copy4", R * N4, 256, (bx, by), check=False)
res["B"]["copy4"]["note"] = "GB/s counts read + write"
with open(os.path.join(OUT, "ln_probe.json"), "w") as f:
    json.dump(res, f, indent=1, default=str)
