"""The torch side of ``experiments/bench_gpu.py``: each program kind as a torch function, and
torch eager and torch.compile (Inductor) timed the way accy's kernels are.

Imports numpy only; torch is imported on first use, so this module (and bench_gpu.py) loads
without torch, and without accy (these functions can be tried on any torch install).

Timing, per call (both modes, after warm-up; torch.compile compiles in its warm-up):

* ``kernel_ms``: the GPU work of one call as torch.profiler (Kineto/CUPTI) records it: the
  durations of the call's kernels, memsets and memcopies summed (user annotations, which span
  other work, are left out); median over ``repeat`` calls, each profiled alone and
  synchronised, so every recorded kernel belongs to that call. This is how accy's kernel time is
  taken (the OpenCL profiling events of one call summed).
* ``call_ms``: wall clock of one call followed by ``torch.cuda.synchronize()`` (inputs already on
  the device, output left there), median over ``repeat`` calls, without the profiler.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

KINDS = ("gemm", "bgemm", "gemm_nt", "bgemm_nt", "attention", "layernorm", "rmsnorm", "softmax",
         "mlp", "chain", "add")
WARMUP = 3
LN_EPS, RMS_EPS = 1e-5, 1e-6
GPU_WORK = ("kernel", "gpu_memset", "gpu_memcpy")  # Kineto activity types of GPU work
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def load_torch() -> tuple[Any | None, str | None]:
    """(torch, None) when torch with a CUDA device is importable, else (None, the reason).
    (``accy.experiments.peers.cuda_torch`` again: this script loads without accy.)"""
    try:
        import torch
    except ImportError as e:
        return None, f"torch is not installed ({e})"
    if not torch.cuda.is_available():
        return None, f"torch {torch.__version__} sees no CUDA device"
    return torch, None


def configure(torch: Any, tf32: bool) -> dict[str, Any]:
    """Set torch's TF32 switches (off unless ``tf32``) and say what torch runs on."""
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "triton": triton_version,
            "device": torch.cuda.get_device_name(), "allow_tf32": tf32,
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "fp16_reduced_precision_reduction":
                bool(torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction)}


def torch_fn(kind: str, dims: dict[str, int], torch: Any) -> Callable[..., Any]:
    """A fresh torch function of program kind ``kind`` (new each call, so torch.compile never
    reuses one compiled for other shapes). The same maths as bench_gpu's accy programs; library
    ops where torch has them (layer_norm, rms_norm, softmax, gelu), as a user would write."""
    fn = torch.nn.functional
    if kind in ("gemm", "bgemm"):
        def f(a, b):
            return torch.matmul(a, b)
    elif kind in ("gemm_nt", "bgemm_nt"):
        def f(a, b):
            return torch.matmul(a, b.transpose(-2, -1))
    elif kind == "attention":
        scale = 1.0 / math.sqrt(dims["D"])

        def f(q, k, v):
            return torch.matmul(torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * scale, -1),
                                v)
    elif kind == "layernorm":
        def f(x, g, b):
            return fn.layer_norm(x, (x.shape[-1],), g, b, LN_EPS)
    elif kind == "rmsnorm":
        if hasattr(fn, "rms_norm"):
            def f(x, g):
                return fn.rms_norm(x, (x.shape[-1],), g, RMS_EPS)
        else:  # torch before 2.4
            def f(x, g):
                return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + RMS_EPS) * g
    elif kind == "softmax":
        def f(x):
            return torch.softmax(x, -1)
    elif kind == "mlp":
        def f(x, w1, b1, w2, b2):
            return torch.matmul(fn.gelu(torch.matmul(x, w1) + b1), w2) + b2
    elif kind == "chain":
        def f(a, b):
            return torch.maximum((a + b) * b - b, b)
    elif kind == "add":
        def f(a, b):
            return a + b
    else:
        raise ValueError(f"program kind {kind!r}: one of {', '.join(KINDS)}")
    return f


def gpu_work(prof: Any, torch: Any) -> tuple[int, int, list[str]]:
    """(ns of GPU work, kernel count, kernel names) of a finished torch.profiler session."""
    cuda = torch.autograd.DeviceType.CUDA
    ns, count, names = 0, 0, []
    for e in prof.profiler.kineto_results.events():
        if e.device_type() != cuda:
            continue
        if hasattr(e, "activity_type"):
            kind = e.activity_type()
        else:  # older torch: everything on the device but user annotations
            user = getattr(e, "is_user_annotation", lambda: False)()
            kind = "gpu_user_annotation" if user else "kernel"
        if kind not in GPU_WORK:
            continue
        ns += int(e.duration_ns())
        if kind == "kernel":
            count += 1
            names.append(e.name()[:100])
    return ns, count, names


def time_calls(torch: Any, fn: Callable[..., Any], xs: Sequence[Any], repeat: int
               ) -> tuple[dict[str, Any], Any]:
    """``kernel_ms``, ``call_ms`` (see the module doc), kernels per call and their names, and
    the last result."""
    from torch.profiler import ProfilerActivity, profile

    out = None
    for _ in range(WARMUP):
        out = fn(*xs)
    torch.cuda.synchronize()
    kernel_ns, counts, names = [], [], []
    for i in range(repeat + 1):  # the first profiled call (CUPTI starting) is not counted
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            out = fn(*xs)
            torch.cuda.synchronize()
        ns, count, names = gpu_work(prof, torch)
        if i:
            kernel_ns.append(ns)
            counts.append(count)
    wall_ns = []
    for _ in range(repeat):
        start = time.perf_counter_ns()
        out = fn(*xs)
        torch.cuda.synchronize()
        wall_ns.append(time.perf_counter_ns() - start)
    res: dict[str, Any] = {
        "kernel_ms": statistics.median(kernel_ns) / 1e6 if any(kernel_ns) else None,
        "call_ms": statistics.median(wall_ns) / 1e6,
        "kernels": max(counts), "kernel_names": names,
    }
    if res["kernel_ms"] is None:
        res["note"] = "torch.profiler recorded no GPU work (CUPTI unavailable?)"
    return res, out


def bench_torch(kind: str, dims: dict[str, int], arrays: Sequence[np.ndarray], repeat: int,
                compile_mode: str = "default",
                check: Callable[[np.ndarray], dict[str, Any]] | None = None,
                torch: Any = None) -> dict[str, Any]:
    """torch eager and torch.compile on ``arrays`` (copied to the GPU): ``{"eager": ...,
    "compile": ...}``, each :func:`time_calls`'s record plus ``check(result)`` when given, or
    ``None`` with the reason under ``"note"``. ``torch`` defaults to :func:`load_torch`'s."""
    out: dict[str, Any] = {"eager": None, "compile": None, "note": None}
    if torch is None:
        torch, out["note"] = load_torch()
        if torch is None:
            return out
    xs = [torch.from_numpy(np.ascontiguousarray(a)).cuda() for a in arrays]
    notes = []
    try:
        for mode in ("eager", "compile"):
            try:
                f = torch_fn(kind, dims, torch)
                if mode == "compile":
                    torch._dynamo.reset()  # nothing compiled for an earlier program is reused
                    f = torch.compile(f, mode=compile_mode, dynamic=False)
                res, result = time_calls(torch, f, xs, repeat)
                if check is not None:
                    res["check"] = check(result.cpu().numpy())
                del result
                out[mode] = res
            except Exception as e:  # noqa: BLE001  (no Triton, compiler error, out of memory)
                notes.append(f"torch {mode} failed: {type(e).__name__}: {e}"[:400])
    finally:
        del xs
        torch.cuda.empty_cache()
    out["note"] = "; ".join(notes) or None
    return out
