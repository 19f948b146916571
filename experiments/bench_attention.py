"""Benchmark: attention (softmax(Q Kᵀ / sqrt(d) [+ causal mask]) V over batch x heads) as accy
kernels with the fused-attention generators and without them, against torch where it has CUDA.

    python experiments/bench_attention.py [--device nvidia] [--batch 1] [--heads 8]
        [--seqs 512,1024] [--head-dim 64] [--causal] [--dtype f32|f16]
        [--variants fused,unfused[,mma,wgmma]] [--variant NAME=MODULE.ATTR=VALUE] [--repeat 10]
        [--out results/bench_attention.json] [--no-torch]

Each shape is prepared for the device's own :class:`~accy.target.TargetProfile` once per
variant: ``fused``, ``fusion-planning{attention=always}`` (one kernel with an online softmax:
``fused-attention``, or on tensor cores ``mma-attention-*``), ``unfused``, ``attention=off``
(the scores, the softmax and P V as separate kernels, the scores and probabilities through
memory), and for f16 on Hopper (where ``fused`` takes ``tma-attention-f16``) ``mma``, ``fused``
with ``kernelization{disable=tma-attention-f16}`` (``mma-attention-f16``), and ``wgmma``, with
``mma-attention-f16`` disabled too (``wgmma-attention-f16``); ``--variant`` adds ``fused`` with
module attributes set while it is prepared (a generator's knobs: e.g.
``nolead=accy.kernels.attention_tma.LEAD=False``). ``--dtype f16`` makes Q, K, V
and the output f16. Inputs and output stay on the device (as ``bench_gpu.py`` times); kernel
time is the sum of the OpenCL profiling events of one call, median over ``--repeat`` calls
after a warm-up; the variants are timed in turn, so a busy machine slows them alike. Outputs
are checked against numpy in f64 (f32: within 1e-4; f16: 4e-3, a few f16 roundings of values
near 1). When torch with CUDA is importable, the same attention runs in torch eager (the math
spelling), ``scaled_dot_product_attention`` and torch.compile of the math spelling, in the
same dtype, timed with CUDA events; otherwise those fields are null with the reason.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ab_gemm import Variant, applied, parse_variant  # noqa: E402

import accy  # noqa: E402
from accy.backends.opencl.device_array import DeviceArray  # noqa: E402
from accy.backends.registry import get_backend  # noqa: E402
from accy.builder import einsum, trace  # noqa: E402
from accy.experiments.peers import cuda_torch  # noqa: E402
from accy.experiments.records import command_line, median_ms, provenance, write_json  # noqa: E402
from accy.passes.spec import parse_pipeline  # noqa: E402

VARIANTS = {"fused": ("fusion-planning{attention=always}",),
            "unfused": ("fusion-planning{attention=off}",),
            "mma": ("fusion-planning{attention=always}",
                    "kernelization{disable=tma-attention-f16}"),
            "wgmma": ("fusion-planning{attention=always}",
                      "kernelization{disable=tma-attention-f16,mma-attention-f16}")}
DTYPES = {"f32": (accy.f32, np.float32, 1e-4), "f16": (accy.f16, np.float16, 4e-3)}


def pipeline(variant: str, custom: dict[str, Variant] | None = None) -> str:
    """accy's default pipeline with ``variant``'s passes (:data:`VARIANTS`) in place; a
    ``--variant`` (in ``custom``) is ``fused``'s with its own passes after."""
    own = (custom or {}).get(variant)
    spec = parse_pipeline("accy-default")
    for passes in (*VARIANTS["fused"], *own.passes) if own else VARIANTS[variant]:
        spec = spec.replacing(passes)
    return spec.text()


def program(b: int, h: int, s: int, d: int, causal: bool, dtype: str = "f32") -> accy.Program:
    def attention(q, k, v):
        scores = einsum("bhqd,bhkd->bhqk", q, k) * (1.0 / math.sqrt(d))
        if causal:
            tri = accy.constant(np.tril(np.ones((s, s), dtype=bool)))
            scores = accy.where(tri, scores, -np.inf)
        return einsum("bhqk,bhkd->bhqd", accy.softmax(scores, -1), v)

    return trace(attention, *[DTYPES[dtype][0][b, h, s, d]] * 3, name="attention")


def inputs(b: int, h: int, s: int, d: int, dtype: str = "f32") -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal((b, h, s, d)).astype(DTYPES[dtype][1]) for _ in range(3)]


def reference(xs: list[np.ndarray], causal: bool) -> np.ndarray:
    q, k, v = (x.astype(np.float64) for x in xs)
    s = q @ k.swapaxes(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], dtype=bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


def bench_torch(xs: list[np.ndarray], causal: bool, repeat: int) -> dict[str, Any]:
    """torch eager, SDPA and torch.compile ms per call, or the reason they are missing."""
    out: dict[str, Any] = {"torch_eager_ms": None, "torch_sdpa_ms": None,
                           "torch_compile_ms": None, "torch_note": None}
    torch, out["torch_note"] = cuda_torch()
    if torch is None:
        return out
    torch.backends.cuda.matmul.allow_tf32 = False  # f32 on both sides (f16: f16 tensors)
    q, k, v = (torch.from_numpy(a).cuda() for a in xs)
    d = xs[0].shape[-1]
    mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device="cuda").tril()

    def math_form(q, k, v):
        s = q @ k.transpose(-1, -2) / math.sqrt(d)
        if causal:
            s = s.masked_fill(~mask, float("-inf"))
        return torch.softmax(s, -1) @ v

    def sdpa(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def timed(fn: Any) -> float:
        for _ in range(3):
            fn(q, k, v)
        torch.cuda.synchronize()
        samples = []
        for _ in range(repeat):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(q, k, v)
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1e6)  # ms -> ns
        return median_ms(samples)

    out["torch_version"] = torch.__version__
    out["torch_eager_ms"] = timed(math_form)
    out["torch_sdpa_ms"] = timed(sdpa)
    try:
        out["torch_compile_ms"] = timed(torch.compile(math_form))
    except Exception as e:  # noqa: BLE001  (no compiler toolchain, Triton missing, ...)
        out["torch_note"] = f"torch.compile failed: {type(e).__name__}: {e}"[:300]
    return out


def bench_shape(b: int, h: int, s: int, d: int, causal: bool, runtime: Any,
                repeat: int, dtype: str = "f32",
                variants: tuple[str, ...] = ("fused", "unfused"),
                custom: dict[str, Variant] | None = None) -> dict[str, Any]:
    target = get_backend().target_profile(runtime)
    prog = program(b, h, s, d, causal, dtype)
    xs = inputs(b, h, s, d, dtype)
    want = reference(xs, causal)
    jobs, exes, samples, outs = {}, {}, {}, {}
    for variant in variants:
        own = (custom or {}).get(variant)
        with applied(own.settings if own else []):  # (the kernels are generated here)
            jobs[variant] = accy.prepare(prog, pipeline(variant, custom), target=target)
        exes[variant] = jobs[variant].executable(device=runtime)
        outs[variant] = DeviceArray.empty(runtime, (b, h, s, d), xs[0].dtype)
        samples[variant] = []
    dev = [exes[variants[0]].to_device(x) for x in xs]  # resident, as bench_gpu times
    for variant, exe in exes.items():
        exe(*dev, out=outs[variant])  # warm-up: builds the kernels
    for _ in range(repeat):
        for variant, exe in exes.items():
            exe(*dev, out=outs[variant])
            samples[variant].append(sum(exe.last_kernel_ns))
    flops = 4 * b * h * s * s * d  # two products of 2 s^2 d FLOPs per (batch, head)
    row: dict[str, Any] = {"shape": {"batch": b, "heads": h, "seq": s, "head_dim": d},
                           "causal": causal, "dtype": dtype}
    tol = DTYPES[dtype][2]
    for variant in variants:
        ms = median_ms(samples[variant])
        got = outs[variant].get().astype(np.float64)
        row[variant] = {"pipeline": pipeline(variant, custom),
                        "settings": custom[variant].texts() if variant in (custom or {}) else [],
                        "kernel_count": jobs[variant].kernel_count,
                        "generators": jobs[variant].generators(), "kernel_ms": ms,
                        "GFLOPs": flops / (ms * 1e6),
                        "max_abs_error": float(np.max(np.abs(got - want))),
                        "matches": bool(np.allclose(got, want, rtol=tol, atol=tol))}
    if "fused" in variants and "unfused" in variants:
        row["fusion_speedup"] = row["unfused"]["kernel_ms"] / row["fused"]["kernel_ms"]
    return row


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None, help="OpenCL selector (default: $ACCY_DEVICE/pocl)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--seqs", default="512,1024", help="comma-separated sequence lengths")
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--causal", action="store_true", help="a causal mask (where over a tril)")
    p.add_argument("--dtype", choices=tuple(DTYPES), default="f32", help="Q, K, V and output")
    p.add_argument("--variants", default="fused,unfused",
                   help="comma-separated accy pipelines: " + ",".join(VARIANTS))
    p.add_argument("--variant", action="append", default=[], metavar="NAME=SETTING",
                   help="another variant (repeatable): fused with module attributes set while "
                        "it is prepared (MODULE.ATTR=VALUE) and passes (pass:PASS{OPTIONS}), "
                        "';'-separated, as ab_gemm.py's")
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--out", default="results/bench_attention.json")
    args = p.parse_args(argv)
    try:
        args.seq_list = [int(x) for x in args.seqs.split(",")]
    except ValueError:
        p.error(f"--seqs: comma-separated integers, got {args.seqs!r}")
    if min(args.batch, args.heads, args.head_dim, args.repeat, *args.seq_list) < 1:
        p.error("--batch, --heads, --head-dim, --repeat and --seqs must be positive")
    args.variant_list = tuple(v.strip() for v in args.variants.split(",") if v.strip())
    bad = [v for v in args.variant_list if v not in VARIANTS]
    if bad or not args.variant_list:
        p.error(f"--variants: unknown {', '.join(bad) or '(none given)'}; choose from "
                f"{','.join(VARIANTS)}")
    args.custom = {}
    for text in args.variant:
        try:
            v = parse_variant(text)
        except ValueError as e:
            p.error(f"--variant: {e}")
        if v.name in VARIANTS or v.name in args.custom:
            p.error(f"--variant: {v.name} is taken (by --variants' names or another --variant)")
        args.custom[v.name] = v
    args.variant_list += tuple(args.custom)
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    runtime = get_backend().select_device(args.device)
    rows = []
    for s in args.seq_list:
        row = bench_shape(args.batch, args.heads, s, args.head_dim, args.causal, runtime,
                          args.repeat, args.dtype, args.variant_list, args.custom)
        if not args.no_torch:
            row.update(bench_torch(inputs(args.batch, args.heads, s, args.head_dim, args.dtype),
                                   args.causal, args.repeat))
        rows.append(row)
        timings = "  ".join(
            f"{v} {row[v]['kernel_ms']:9.3f} ms ({row[v]['kernel_count']} kernels, "
            f"{row[v]['GFLOPs']:7.1f} GFLOP/s)" for v in args.variant_list)
        ok = all(row[v]["matches"] for v in args.variant_list)
        print(f"seq {s:>5}  {timings}  sdpa {row.get('torch_sdpa_ms')}  compile "
              f"{row.get('torch_compile_ms')}  ok={ok}", flush=True)
    result = {"rows": rows, "repeat": args.repeat,
              **provenance(args.device, ("pyopencl", "torch"),
                           command_line(argv))}
    write_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
