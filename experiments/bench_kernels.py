"""Benchmark: accy's kernels for the main op kinds against the device's copy bandwidth.

    python experiments/bench_kernels.py [--device SELECTOR] [--elements 268435456]
        [--repeat 10] [--out results/bench_kernels.json] [--baseline] [--front lowering]

On ``--elements`` f32 values (2^28 = 1 GiB by default; fewer on a CPU):

* chain: the seed's fused ``max(((a+b)*b)-b, b)``: 2 reads + 1 write per element;
* softmax: row softmax of ``[elements / cols, cols]`` (cols = 2^14): read once + write once;
* sum: the full sum: one read per element;
* xent: cross-entropy of the softmax's logits against int32 labels: one read per element.

Each is prepared for the device's own :class:`~accy.target.TargetProfile` and run through its
:class:`~accy.backends.opencl.executable.Executable`; kernel time is the sum of the OpenCL
profiling events of one call, median over ``--repeat`` calls after a warm-up. Effective
bandwidth counts the bytes above; the reference is a device-to-device ``enqueue_copy`` of a
buffer of the same size on the same queue (read + write). Results are checked against numpy,
and on a CPU device numpy's own time is measured too. ``--baseline`` also times the chain with
every specialised generator disabled (the loop nest) and the cross-entropy lowered to
log-softmax + gather + mean (``loss-lowering{kernel-library=disabled}``). ``--front lowering``
replaces the egglog passes of the contract and tensor stages by the tensor stage's lowerings
alone, for machines without egglog (these programs get the same kernels either way).
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyopencl as cl

import accy
from accy.backends.opencl.runtime import Runtime
from accy.backends.registry import get_backend, open_device
from accy.builder import Value, cross_entropy, trace
from accy.experiments.kernels import copy_bandwidth
from accy.experiments.records import command_line, git_commit, median_ms, timestamp, write_json
from accy.passes.spec import parse_pipeline

# fraction of copy bandwidth (H200)
TARGETS = {"chain": 0.90, "softmax": 0.70, "sum": 0.70, "xent": 0.70}
SPECIALISED = ("vector-flat", "tree-reduction", "row-softmax")
SOFTMAX_COLS = 1 << 14
# the passes before the dispatch stage: the default's, or its lowerings without egglog
FRONTS = {"egglog": "accy-contract,accy-tensor",
          "lowering": "shape-layout-propagation,activation-lowering,einsum-lowering,loss-lowering"}
LOWERED_LOSS = "loss-lowering{kernel-library=disabled}"


def _chain(a: Value, b: Value) -> Value:
    return accy.maximum((a + b) * b - b, b)


def programs(elements: int) -> dict[str, tuple[accy.Program, tuple[tuple[int, ...], ...], int]]:
    """name -> (program, input shapes, bytes moved per call); inputs are f32, but the last of
    xent (int32 labels)."""
    cols = min(SOFTMAX_COLS, elements)
    rows = max(1, elements // cols)
    n = 4 * elements
    return {
        "chain": (trace(_chain, accy.f32[elements], accy.f32[elements], name="chain"),
                  ((elements,), (elements,)), 3 * n),
        "softmax": (trace(lambda x: x.softmax(), accy.f32[rows, cols], name="softmax"),
                    ((rows, cols),), 2 * 4 * rows * cols),
        "sum": (trace(lambda x: x.sum(), accy.f32[elements], name="full_sum"),
                ((elements,),), n),
        "xent": (trace(cross_entropy, accy.f32[rows, cols], accy.i32[rows], name="xent"),
                 ((rows, cols), (rows,)), 4 * rows * cols + 4 * rows),
    }


def inputs(name: str, shapes: tuple[tuple[int, ...], ...]) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(s, dtype=np.float32) for s in shapes]
    if name == "xent":
        xs[1] = rng.integers(0, shapes[0][-1], shapes[1]).astype(np.int32)
    return xs


def reference(name: str, xs: list[np.ndarray]) -> np.ndarray:
    """numpy's result (float64 for the sum, so its own rounding does not count against us)."""
    if name == "chain":
        a, b = xs
        return np.maximum((a + b) * b - b, b)
    if name == "softmax":
        x = xs[0]
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    if name == "xent":
        x, labels = xs[0].astype(np.float64), xs[1]
        top = x.max(axis=-1)
        lse = top + np.log(np.exp(x - top[:, None]).sum(axis=-1))
        return np.asarray((lse - x[np.arange(len(labels)), labels]).mean())
    return np.asarray(xs[0].sum(dtype=np.float64))


def error(name: str, got: np.ndarray, want: np.ndarray, xs: list[np.ndarray]) -> tuple[float, bool]:
    """(max error in the check's units, within tolerance)."""
    if name == "chain":  # op-by-op rounding, FP_CONTRACT OFF: bit-equal
        err = float(np.max(np.abs(got - want)))
        return err, err == 0.0
    if name in ("softmax", "xent"):
        err = float(np.max(np.abs(got.astype(np.float64) - want)))
        return err, bool(np.allclose(got, want, rtol=1e-5, atol=1e-6))
    scale = float(np.abs(xs[0]).astype(np.float64).sum()) or 1.0
    err = abs(float(got) - float(want)) / scale  # relative to the sum of magnitudes
    return err, err < 1e-5


def bench_one(name: str, program: accy.Program, shapes: tuple[tuple[int, ...], ...],
              nbytes: int, runtime: Runtime, repeat: int, copy_gbps: float,
              with_numpy: bool, front: str = "egglog", disable: tuple[str, ...] = (),
              lowered_loss: bool = False) -> dict[str, Any]:
    kernel = "accy-kernel"
    if disable:
        kernel = f"kernel-outlining-planning,kernelization{{disable={','.join(disable)}}}"
    pipeline = f"{FRONTS[front]},accy-dispatch,accy-memory,{kernel},accy-target"
    if lowered_loss:
        pipeline = parse_pipeline(pipeline).replacing(LOWERED_LOSS).text()
    job = accy.prepare(program, pipeline, target=open_device(runtime)[1])
    xs = inputs(name, shapes)
    exe = job.executable(device=runtime)
    exe(*xs)  # warm-up: build, buffers, first launch
    samples, out = [], None
    for _ in range(repeat):
        (out,) = exe(*xs)
        samples.append(sum(exe.last_kernel_ns))
    assert out is not None
    ms = median_ms(samples)
    gbps = nbytes / (ms * 1e6)
    want = reference(name, xs)
    err, ok = error(name, out, want, xs)
    row: dict[str, Any] = {
        "name": f"{name} (loop nest)" if disable else f"{name} (lowered)" if lowered_loss else name,
        "shape": [list(s) for s in shapes],
        "pipeline": pipeline, "kernels": [k.entry for k in job.kernels],
        "generators": job.generators(), "kernel_ms": ms, "bytes": nbytes, "GBps": gbps,
        "fraction_of_copy": gbps / copy_gbps, "target_fraction": TARGETS[name],
        "target_met": gbps / copy_gbps >= TARGETS[name], "max_error": err, "matches": ok,
        "numpy_ms": None, "speedup_vs_numpy": None,
    }
    if with_numpy:
        numpy_fn: Callable[[], Any] = {
            "chain": lambda: np.maximum((xs[0] + xs[1]) * xs[1] - xs[1], xs[1]),
            "softmax": lambda: reference("softmax", xs),
            "sum": lambda: xs[0].sum(),
            "xent": lambda: reference("xent", xs),
        }[name]
        times = []
        for _ in range(max(3, min(repeat, 5))):
            start = time.perf_counter_ns()
            numpy_fn()
            times.append(time.perf_counter_ns() - start)
        row["numpy_ms"] = median_ms(times)
        row["speedup_vs_numpy"] = row["numpy_ms"] / ms
    return row


def print_table(result: dict[str, Any]) -> None:
    dev, copy = result["device"], result["copy"]
    print(f"\ndevice: {dev['key']}  ({dev['compute_units']} compute units)")
    print(f"copy (enqueue_copy, device to device): {copy['bytes'] / 2**20:.0f} MiB in "
          f"{copy['ms']:.3f} ms = {copy['GBps']:.1f} GB/s (read + write)")
    head = (f"{'kernel':<20} {'ms':>9} {'GB/s':>9} {'% copy':>7} {'target':>7} {'ok':>3} "
            f"{'numpy ms':>9} {'speedup':>8}  generators")
    print(head)
    for r in result["rows"]:
        numpy_ms = f"{r['numpy_ms']:>9.3f}" if r["numpy_ms"] is not None else f"{'-':>9}"
        speedup = (f"{r['speedup_vs_numpy']:>7.2f}x" if r["speedup_vs_numpy"] is not None
                   else f"{'-':>8}")
        met = "met" if r["target_met"] else "NOT"
        print(f"{r['name']:<20} {r['kernel_ms']:>9.3f} {r['GBps']:>9.1f} "
              f"{100 * r['fraction_of_copy']:>6.1f}% {met:>7} {'yes' if r['matches'] else 'NO':>3} "
              f"{numpy_ms} {speedup}  {','.join(r['generators'])}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None, help="OpenCL selector (default: $ACCY_DEVICE/pocl)")
    p.add_argument("--elements", type=int, default=None,
                   help="f32 elements per program (default 2^28 on a GPU, 2^24 on a CPU)")
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--out", default="results/bench_kernels.json")
    p.add_argument("--baseline", action="store_true",
                   help="also time the chain with the loop-nest generator only")
    p.add_argument("--front", choices=sorted(FRONTS), default="egglog",
                   help="passes before dispatch: egglog's (default) or the lowerings alone")
    args = p.parse_args(argv)
    if args.repeat < 1 or (args.elements is not None and args.elements < 1):
        p.error("--repeat and --elements must be positive")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    runtime = get_backend().select_device(args.device)
    info = runtime.info
    is_cpu = bool(runtime.device.type & cl.device_type.CPU)
    elements = args.elements or (1 << 24 if is_cpu else 1 << 28)
    copy = copy_bandwidth(runtime, 4 * elements, args.repeat)
    rows = []
    for name, (program, shapes, nbytes) in programs(elements).items():
        rows.append(bench_one(name, program, shapes, nbytes, runtime, args.repeat,
                              copy["GBps"], is_cpu, args.front))
        if args.baseline and name == "chain":
            rows.append(bench_one(name, program, shapes, nbytes, runtime, args.repeat,
                                  copy["GBps"], False, args.front, SPECIALISED))
        if args.baseline and name == "xent":
            rows.append(bench_one(name, program, shapes, nbytes, runtime, args.repeat,
                                  copy["GBps"], False, args.front, lowered_loss=True))
    result: dict[str, Any] = {
        "rows": rows, "copy": copy, "elements": elements, "repeat": args.repeat,
        "front": args.front,
        "device": {"key": info.key, "platform": info.platform, "name": info.name,
                   "driver": info.driver_version, "compute_units": info.compute_units,
                   "cpu": is_cpu},
        "command": command_line(argv),
        "versions": {"accy": accy.__version__, "numpy": np.__version__,
                     "pyopencl": cl.VERSION_TEXT, "python": platform.python_version()},
        "git_commit": git_commit(),
        "timestamp": timestamp(),
    }
    print_table(result)
    write_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
