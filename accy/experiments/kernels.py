"""Kernel performance: accy's kernels against numpy (and torch), and the device's copy speed.

Per suite program and seed: the default pipeline for the device's own target profile, kernel
time (sum of one call's OpenCL profiling events, median of ``repeats`` after a warm-up) and
call wall time (host-device transfers included); the hand-written numpy baseline of
:mod:`accy.experiments.baselines` on the host; torch's (on CUDA when available, else CPU)
when torch is importable; and the device's measured copy bandwidth (a device-to-device
``enqueue_copy``, read + write) next to the program's effective bandwidth (bytes moved by its
kernels over kernel time). On a CPU device the numpy comparison is the meaningful one; on a
GPU the copy bandwidth and torch are.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from accy.experiments import measure, records
from accy.experiments.baselines import NumpyOps, TorchOps, reference
from accy.experiments.executor import Executor, Task
from accy.experiments.runner import SweepOptions, run_tasks
from accy.experiments.suite import benchmark, benchmarks

__all__ = ["COPY_BYTES", "copy_bandwidth", "run", "summarize", "time_host"]

COPY_BYTES = 256 << 20


def copy_bandwidth(runtime: Any, nbytes: int, repeat: int) -> dict[str, Any]:
    """Device-to-device ``enqueue_copy`` of ``nbytes``: median ms, bytes read + written / s."""
    import pyopencl as cl

    src = cl.Buffer(runtime.context, cl.mem_flags.READ_WRITE, size=nbytes)
    dst = cl.Buffer(runtime.context, cl.mem_flags.READ_WRITE, size=nbytes)
    cl.enqueue_fill_buffer(runtime.queue, src, np.float32(1.0), 0, nbytes)
    samples = []
    for i in range(repeat + 2):
        event = cl.enqueue_copy(runtime.queue, dst, src)
        ns = runtime.elapsed_ns(event)
        if i >= 2:  # warm-up
            samples.append(ns)
    src.release()
    dst.release()
    ms = records.median_ms(samples)
    return {"bytes": nbytes, "ms": ms, "GBps": 2 * nbytes / (ms * 1e6)}


def time_host(fn: Callable[[], Any], repeats: int, sync: Callable[[], None] = lambda: None
              ) -> float:
    """Median ms of ``fn()`` over ``repeats`` calls after one warm-up call."""
    fn()
    sync()
    times = []
    for _ in range(max(repeats, 1)):
        start = time.perf_counter_ns()
        fn()
        sync()
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times) / 1e6


def _torch_ms(program: str, dims: Any, inputs: tuple[np.ndarray, ...], repeats: int
              ) -> dict[str, Any] | None:
    try:
        import torch
    except ImportError:
        return None
    device = "cuda" if torch.cuda.is_available() else "cpu"
    ops = TorchOps(device)
    fn = reference(program, ops, dims, inputs)
    return {"ms": time_host(fn, repeats, ops.sync), "device": device,
            "version": torch.__version__}


def kernels_task(program: str, size: str, seed: int, device: str | None,
                 repeats: int) -> dict[str, Any]:
    """accy, numpy, torch and copy bandwidth for one (program, seed)."""
    row = measure.measure_program(program, size, seed, "accy-default", device=device,
                                  repeats=repeats, run=True)
    bench = benchmark(program)
    inputs = bench.inputs(size, seed)
    m = row["measured"]
    m["numpy_ms"] = time_host(reference(program, NumpyOps(), bench.dims(size), inputs), repeats)
    torch_row = _torch_ms(program, bench.dims(size), inputs, repeats)
    m["torch_ms"] = torch_row["ms"] if torch_row else None
    m["torch_device"] = torch_row["device"] if torch_row else None
    m["copy_GBps"] = None
    if m["kernel_ms"]:
        from accy.backends.registry import get_backend

        m["copy_GBps"] = copy_bandwidth(get_backend().select_device(device), COPY_BYTES,
                                        repeats)["GBps"]
        m["effective_GBps"] = row["bytes_moved"] / (m["kernel_ms"] * 1e6)
        m["fraction_of_copy"] = m["effective_GBps"] / m["copy_GBps"]
        m["speedup_vs_numpy"] = m["numpy_ms"] / m["kernel_ms"]
        m["speedup_vs_numpy_wall"] = m["numpy_ms"] / m["wall_ms"]
        if m["torch_ms"]:
            m["speedup_vs_torch"] = m["torch_ms"] / m["kernel_ms"]
    row["provenance"] = records.provenance(device, ("torch",))
    return row


def run(options: SweepOptions, executor: Executor | None = None) -> dict[str, Any]:
    """Run the kernels sweep (programs x seeds) and summarize it."""
    tasks = [Task((b.name, seed), "accy.experiments.kernels:kernels_task",
                  {"program": b.name, "size": options.suite, "seed": seed,
                   "device": options.device, "repeats": options.repeats})
             for b in benchmarks(options.programs) for seed in options.seeds]
    result = run_tasks("kernels", tasks, options, executor, "kernels", extra_versions=("torch",))
    result["summary"] = summarize(result["rows"])
    return result


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per program (mean over seeds): kernel, wall, numpy and torch ms, speedups, GB/s."""
    keys = ("kernel_ms", "wall_ms", "numpy_ms", "torch_ms", "speedup_vs_numpy",
            "speedup_vs_numpy_wall", "speedup_vs_torch", "effective_GBps", "copy_GBps",
            "fraction_of_copy")
    out: dict[str, Any] = {}
    for r in rows:
        out.setdefault(r["program"], []).append(r)
    summary = {}
    for program, group in out.items():
        entry: dict[str, Any] = {"kernels": group[0]["kernels"],
                                 "bytes_moved": group[0]["bytes_moved"],
                                 "correct": all(g["correct"] is not False for g in group)}
        for k in keys:
            vals = [g["measured"].get(k) for g in group if g["measured"].get(k) is not None]
            entry[k] = statistics.fmean(vals) if vals else None
        summary[program] = entry
    return {"programs": summary}
