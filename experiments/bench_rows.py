"""Benchmark: row fusions (layer norm, RMS norm, softmax with scale + mask, log-softmax + NLL)
as accy kernels against torch eager, torch.compile and the device's copy bandwidth.

    python experiments/bench_rows.py [--device nvidia] [--rows 8192] [--cols 4096]
        [--repeat 20] [--out results/bench_rows.json] [--no-torch]

Each program is prepared for the device's own :class:`~accy.target.TargetProfile` three
times: ``fused``, ``fusion-planning{row-fusion=true}`` (the default: one ``row-fused``
kernel); ``unfused``, ``row-fusion=false`` (a kernel per reduction, as before); and
``fused_global``, fused with ``memory-space-planning{use-constant=false}`` (the small
per-column inputs in global rather than __constant memory). Kernel time is the sum of the OpenCL
profiling events of one call, median over ``--repeat`` calls after a warm-up; effective
bandwidth counts one read of the rows and one write of the outputs, against a device-to-device
``enqueue_copy`` of the same size (read + write). Outputs are checked against numpy in f64.
When torch with CUDA is importable, the same functions run in torch eager and torch.compile
(Inductor), timed with CUDA events (median ms per call after warm-up; includes launch
overhead, negligible at these sizes); without torch (or when compile fails) those fields are
null with the reason, and the script still writes its JSON.
"""

from __future__ import annotations

import argparse
import platform
from typing import Any

import numpy as np
import pyopencl as cl

import accy
from accy.backends.registry import get_backend, open_device
from accy.builder import trace
from accy.experiments.kernels import copy_bandwidth
from accy.experiments.peers import cuda_torch
from accy.experiments.records import command_line, git_commit, median_ms, timestamp, write_json
from accy.ir.ops import Op
from accy.ir.types import DType
from accy.passes.spec import parse_pipeline

f32 = accy.f32
VARIANTS = {  # name -> passes replaced in accy-default
    "fused": "fusion-planning{row-fusion=true}",
    "unfused": "fusion-planning{row-fusion=false}",
    # gamma/beta/mask go to __constant memory by default; lanes reading different addresses
    # of it may serialise on a GPU: this variant keeps them in global memory
    "fused_global": "fusion-planning{row-fusion=true},memory-space-planning{use-constant=false}",
}
# layernorm squares with x * x, as the torch version does; layernorm_pow is the suite's
# spelling, pow(x - mean, 2.0), which OpenCL computes as a pow call (PoCL: ~5 ns an element)
NAMES = ("layernorm", "layernorm_pow", "rmsnorm", "masked_softmax", "logsoftmax_nll")


def program(name: str, rows: int, n: int) -> accy.Program:
    if name in ("layernorm", "layernorm_pow"):
        def layernorm(x, gamma, beta):
            mu = x.mean(axes=-1, keepdims=True)
            xc = x - mu
            var = ((xc ** 2.0) if name == "layernorm_pow" else xc * xc).mean(axes=-1,
                                                                            keepdims=True)
            return xc / (var + 1e-5).sqrt() * gamma + beta
        return trace(layernorm, f32[rows, n], f32[n], f32[n])
    if name == "rmsnorm":
        def rmsnorm(x, gamma):
            return x * ((x * x).mean(axes=-1, keepdims=True) + 1e-6).rsqrt() * gamma
        return trace(rmsnorm, f32[rows, n], f32[n])
    if name == "masked_softmax":
        def masked_softmax(x, mask):
            y = x * 0.125 + mask
            e = (y - y.max(axes=-1, keepdims=True)).exp()
            return e / e.sum(axes=-1, keepdims=True)
        return trace(masked_softmax, f32[rows, n], f32[n])

    def logsoftmax_nll(x, labels):
        iota = labels.fb.constant(np.arange(n, dtype=np.int32))
        onehot = labels.fb.op(Op.EQ, labels.reshape(rows, 1), iota).astype(DType.f32)
        y = x - x.max(axes=-1, keepdims=True)
        logp = y - y.exp().sum(axes=-1, keepdims=True).log()
        return -(logp * onehot).sum(axes=-1)
    return trace(logsoftmax_nll, f32[rows, n], accy.i32[rows])


def inputs(name: str, rows: int, n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    x = (2.0 * rng.standard_normal((rows, n)) + 0.5).astype(np.float32)
    vec = rng.standard_normal(n).astype(np.float32)
    if name.startswith("layernorm"):
        return [x, vec, rng.standard_normal(n).astype(np.float32)]
    if name == "rmsnorm":
        return [x, vec]
    if name == "masked_softmax":
        return [x, np.where(rng.random(n) < 0.1, -1e9, 0.0).astype(np.float32)]
    return [x, rng.integers(0, n, rows).astype(np.int32)]


def reference(name: str, xs: list[np.ndarray]) -> np.ndarray:
    x = xs[0].astype(np.float64)
    if name.startswith("layernorm"):
        xc = x - x.mean(-1, keepdims=True)
        return xc / np.sqrt((xc ** 2).mean(-1, keepdims=True) + 1e-5) * xs[1] + xs[2]
    if name == "rmsnorm":
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * xs[1]
    if name == "masked_softmax":
        y = x * 0.125 + xs[1]
        e = np.exp(y - y.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    y = x - x.max(-1, keepdims=True)
    logp = y - np.log(np.exp(y).sum(-1, keepdims=True))
    return -logp[np.arange(len(x)), xs[1]]


def moved_bytes(name: str, xs: list[np.ndarray], out: np.ndarray) -> int:
    """One read of every input, one write of the output."""
    return sum(a.nbytes for a in xs) + out.nbytes


def bench_accy(name: str, rows: int, n: int, runtime: Any, repeat: int, variant: str,
               copy_gbps: float) -> dict[str, Any]:
    pipeline = parse_pipeline("accy-default").replacing(VARIANTS[variant]).text()
    job = accy.prepare(program(name, rows, n), pipeline,
                       target=open_device(runtime)[1])
    xs = inputs(name, rows, n)
    exe = job.executable(device=runtime)
    exe(*xs)
    samples, out = [], None
    for _ in range(repeat):
        (out,) = exe(*xs)
        samples.append(sum(exe.last_kernel_ns))
    ms = median_ms(samples)
    nbytes = moved_bytes(name, xs, out)
    want = reference(name, xs)
    return {"program": name, "variant": variant, "pipeline": pipeline,
            "kernel_count": job.kernel_count,
            "generators": job.generators(), "kernel_ms": ms, "bytes": nbytes,
            "GBps": nbytes / (ms * 1e6), "fraction_of_copy": nbytes / (ms * 1e6) / copy_gbps,
            "max_abs_error": float(np.max(np.abs(out - want))),
            "matches": bool(np.allclose(out, want, rtol=1e-4, atol=1e-4))}


def torch_fn(name: str, torch: Any) -> Any:
    if name.startswith("layernorm"):
        def f(x, g, b):
            mu = x.mean(-1, keepdim=True)
            xc = x - mu
            return xc / ((xc * xc).mean(-1, keepdim=True) + 1e-5).sqrt() * g + b
    elif name == "rmsnorm":
        def f(x, g):
            return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * g
    elif name == "masked_softmax":
        def f(x, mask):
            return torch.softmax(x * 0.125 + mask, -1)
    else:
        def f(x, labels):
            return torch.nn.functional.nll_loss(torch.log_softmax(x, -1), labels.long(),
                                                reduction="none")
    return f


def bench_torch(name: str, rows: int, n: int, repeat: int) -> dict[str, Any]:
    """torch eager and torch.compile ms per call, or the reason they are missing."""
    out: dict[str, Any] = {"torch_eager_ms": None, "torch_compile_ms": None, "torch_note": None}
    torch, out["torch_note"] = cuda_torch()
    if torch is None:
        return out
    xs = [torch.from_numpy(a).cuda() for a in inputs(name, rows, n)]
    f = torch_fn(name, torch)
    out["torch_version"] = torch.__version__

    def timed(fn: Any) -> float:
        for _ in range(3):
            fn(*xs)
        torch.cuda.synchronize()
        samples = []
        for _ in range(repeat):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(*xs)
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1e6)  # ms -> ns
        return median_ms(samples)

    out["torch_eager_ms"] = timed(f)
    try:
        out["torch_compile_ms"] = timed(torch.compile(f))
    except Exception as e:  # noqa: BLE001  (no compiler toolchain, Triton missing, ...)
        out["torch_note"] = f"torch.compile failed: {type(e).__name__}: {e}"[:300]
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None, help="OpenCL selector (default: $ACCY_DEVICE/pocl)")
    p.add_argument("--rows", type=int, default=8192)
    p.add_argument("--cols", type=int, default=4096)
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--programs", default=",".join(NAMES))
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--out", default="results/bench_rows.json")
    args = p.parse_args(argv)
    if min(args.rows, args.cols, args.repeat) < 1:
        p.error("--rows, --cols and --repeat must be positive")
    if set(args.programs.split(",")) - set(NAMES):
        p.error(f"--programs: choose from {','.join(NAMES)}")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    runtime = get_backend().select_device(args.device)
    info = runtime.info
    copy = copy_bandwidth(runtime, 4 * args.rows * args.cols, args.repeat)
    results = []
    for name in args.programs.split(","):
        row: dict[str, Any] = {"program": name, "shape": [args.rows, args.cols]}
        for variant in VARIANTS:
            row[variant] = bench_accy(name, args.rows, args.cols, runtime, args.repeat, variant,
                                      copy["GBps"])
        if not args.no_torch:
            row.update(bench_torch(name, args.rows, args.cols, args.repeat))
        ms = row["fused"]["kernel_ms"]
        for key in ("torch_eager_ms", "torch_compile_ms"):
            if row.get(key):
                row[key.replace("_ms", "_speedup")] = row[key] / ms  # > 1: accy is faster
        row["fusion_speedup"] = row["unfused"]["kernel_ms"] / ms
        results.append(row)
        print(f"{name:<16} fused {ms:8.3f} ms ({row['fused']['kernel_count']} kernel, "
              f"{100 * row['fused']['fraction_of_copy']:5.1f}% copy)  unfused "
              f"{row['unfused']['kernel_ms']:8.3f} ms ({row['unfused']['kernel_count']})  "
              f"global {row['fused_global']['kernel_ms']:8.3f} ms  "
              f"eager {row.get('torch_eager_ms')}  compile {row.get('torch_compile_ms')}  "
              f"ok={row['fused']['matches']}")
    result = {
        "rows": results, "copy": copy, "repeat": args.repeat,
        "device": {"key": info.key, "platform": info.platform, "name": info.name,
                   "driver": info.driver_version, "compute_units": info.compute_units},
        "command": command_line(argv),
        "versions": {"accy": accy.__version__, "numpy": np.__version__,
                     "pyopencl": cl.VERSION_TEXT, "python": platform.python_version()},
        "git_commit": git_commit(), "timestamp": timestamp(),
    }
    write_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
