"""Benchmark: pipeline overhead of ``accy.prepare`` and a fused 4-op chain against numpy.

    python experiments/bench_pipeline.py [--sizes 10,100,1000] [--elements 16777216]
        [--repeat 5] [--out results/bench_pipeline.json] [--device SELECTOR]

1. Pipeline overhead: random elementwise DAGs of N ops (seeded), ``accy.prepare`` only (no
   OpenCL build); median time, ms/op, per-stage medians, kernel and buffer-slot counts.
2. Fused chain ``max(((a+b)*b)-b, b)`` vs numpy's four passes on ``--elements`` f32 values.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyopencl

import accy
from accy.builder import FunctionBuilder, Value, trace
from accy.errors import DeviceError
from accy.experiments.records import command_line, git_commit, median_ms, timestamp, write_json

PREPARE_TARGET_MS_PER_OP = 2.0  # at the largest size
CHAIN_TARGET_SPEEDUP = 3.0
VECTOR = 1024
OPS: tuple[str, ...] = ("add", "sub", "mul", "max", "min", "neg", "abs")


def build_program(n_ops: int, seed: int = 0) -> accy.Program:
    """N elementwise ops over 2..4 f32[1024] params; each op takes the previous value and (for
    binary ops) a random earlier value or parameter, so the program is a DAG."""
    rng = np.random.default_rng(seed)
    n_params = int(rng.integers(2, 5))
    b = accy.Builder()
    t = b.tensor(accy.DType.f32, (VECTOR,))
    f = b.begin_function("mix", [t] * n_params)
    values: list[Value] = [f.param(i) for i in range(n_params)]
    cur = values[-1]
    for _ in range(n_ops):
        name = OPS[int(rng.integers(len(OPS)))]
        other = values[int(rng.integers(len(values)))]
        cur = _apply(f, name, cur, other)
        values.append(cur)
    f.return_(cur)
    f.finish()
    return b.finish()


def _apply(f: FunctionBuilder, name: str, x: Value, y: Value) -> Value:
    if name == "neg":
        return -x
    if name == "abs":
        return abs(x)
    method: Callable[[Value, Value], Value] = getattr(f, name)
    return method(x, y)


def bench_pipeline(sizes: list[int], repeat: int) -> dict[str, Any]:
    accy.prepare(build_program(4, seed=1))  # warm imports and caches outside the timings
    rows = []
    for n in sizes:
        program = build_program(n)
        totals: list[int] = []
        stages: dict[str, list[int]] = {}
        job = None
        for _ in range(repeat):
            start = time.perf_counter_ns()
            job = accy.prepare(program)
            totals.append(time.perf_counter_ns() - start)
            for r in job.records:
                stages.setdefault(r.stage.value, []).append(r.elapsed_ns)
        assert job is not None
        total = median_ms(totals)
        rows.append({
            "ops": n, "params": len(program.functions[0].params), "prepare_ms": total,
            "ms_per_op": total / n, "stage_ms": {s: median_ms(v) for s, v in stages.items()},
            "kernels": job.kernel_count, "buffer_slots": len(job.product.buffers),
        })
    first, last = rows[0], rows[-1]
    ratio = last["ms_per_op"] / first["ms_per_op"]
    return {
        "rows": rows,
        "growth_ratio": ratio,  # ms/op at the largest size over ms/op at the smallest
        "linear": ratio <= 2.0,  # per-op cost does not grow with N (superlinear would be >> 1)
        "target": f"< {PREPARE_TARGET_MS_PER_OP} ms/op at {last['ops']} ops",
        "target_met": last["ms_per_op"] < PREPARE_TARGET_MS_PER_OP,
    }


def _chain(a: Value, b: Value) -> Value:
    return accy.maximum((a + b) * b - b, b)


def chain_program(elements: int) -> accy.Program:
    t = accy.f32[elements]
    return trace(_chain, t, t, name="chain")  # TensorTypes as examples


def bench_chain(elements: int, repeat: int, device: str | None) -> dict[str, Any]:
    from accy.backends.registry import get_backend, open_device

    runtime = get_backend().select_device(device)  # raises DeviceError when nothing is usable
    job = accy.prepare(chain_program(elements), target=open_device(runtime)[1])
    rng = np.random.default_rng(0)
    a = rng.standard_normal(elements, dtype=np.float32)
    b = rng.standard_normal(elements, dtype=np.float32)
    exe = job.executable(device=runtime)
    exe(a, b)  # warm-up: buffers allocated, constants written
    kernel_ns: list[int] = []
    wall_ns: list[int] = []
    out = None
    for _ in range(repeat):
        start = time.perf_counter_ns()
        (out,) = exe(a, b)
        wall_ns.append(time.perf_counter_ns() - start)
        kernel_ns.append(sum(exe.last_kernel_ns))
    numpy_ns: list[int] = []
    ref = None
    for _ in range(repeat):
        start = time.perf_counter_ns()
        ref = np.maximum((a + b) * b - b, b)
        numpy_ns.append(time.perf_counter_ns() - start)
    assert out is not None and ref is not None
    err = np.abs(out.astype(np.float64) - ref) / np.maximum(np.abs(ref.astype(np.float64)), 1e-30)
    kernel, wall, numpy_ms = median_ms(kernel_ns), median_ms(wall_ns), median_ms(numpy_ns)
    return {
        "elements": elements, "kernels": job.kernel_count, "kernel_ms": kernel,
        "call_wall_ms": wall, "numpy_ms": numpy_ms, "speedup": numpy_ms / kernel,
        "speedup_wall": numpy_ms / wall, "max_rel_error": float(err.max()),
        "target": f"speedup >= {CHAIN_TARGET_SPEEDUP}x (kernel time vs numpy)",
        "target_met": numpy_ms / kernel >= CHAIN_TARGET_SPEEDUP,
        "device": runtime.info.key,
    }


def print_pipeline(res: dict[str, Any]) -> None:
    stages = list(res["rows"][0]["stage_ms"])
    head = f"{'ops':>6} {'prep ms':>9} {'ms/op':>7} {'kern':>5} {'slots':>5} "
    print("\n== pipeline overhead: accy.prepare (default pipeline, no OpenCL build) ==")
    print(head + " ".join(f"{s:>9}" for s in stages))
    for r in res["rows"]:
        print(f"{r['ops']:>6} {r['prepare_ms']:>9.2f} {r['ms_per_op']:>7.3f} {r['kernels']:>5} "
              f"{r['buffer_slots']:>5} " + " ".join(f"{r['stage_ms'][s]:>9.2f}" for s in stages))
    print(f"growth ratio (ms/op largest / smallest): {res['growth_ratio']:.2f} "
          f"({'linear or better' if res['linear'] else 'SUPERLINEAR'}); target {res['target']}: "
          f"{'met' if res['target_met'] else 'NOT met'}")


def print_chain(res: dict[str, Any] | None, reason: str | None) -> None:
    print("\n== fused chain max(((a+b)*b)-b, b) vs numpy (4 passes) ==")
    if res is None:
        print(f"skipped: no OpenCL device ({reason})")
        return
    print(f"device: {res['device']}   elements: {res['elements']}   kernels: {res['kernels']}")
    print(f"{'kernel ms':>10} {'call ms':>10} {'numpy ms':>10} {'speedup':>8} {'wall x':>7} "
          f"{'max rel err':>12}")
    print(f"{res['kernel_ms']:>10.3f} {res['call_wall_ms']:>10.3f} {res['numpy_ms']:>10.3f} "
          f"{res['speedup']:>7.2f}x {res['speedup_wall']:>6.2f}x {res['max_rel_error']:>12.3g}")
    print(f"target {res['target']}: {'met' if res['target_met'] else 'NOT met'}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="10,100,1000", help="comma-separated op counts")
    p.add_argument("--elements", type=int, default=1 << 24, help="chain vector length")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--out", default="results/bench_pipeline.json")
    p.add_argument("--device", default=None, help="OpenCL selector (default: $ACCY_DEVICE/pocl)")
    args = p.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if not args.sizes or min(args.sizes) < 1 or args.repeat < 1 or args.elements < 1:
        p.error("--sizes, --repeat and --elements must be positive")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    pipeline = bench_pipeline(args.sizes, args.repeat)
    print_pipeline(pipeline)
    chain: dict[str, Any] | None = None
    reason: str | None = None
    try:
        chain = bench_chain(args.elements, args.repeat, args.device)
    except DeviceError as exc:
        reason = str(exc).splitlines()[0]
    print_chain(chain, reason)
    result: dict[str, Any] = {
        "pipeline": pipeline, "chain": chain, "chain_skipped": reason,
        "command": command_line(argv),
        "versions": {"accy": accy.__version__, "numpy": np.__version__,
                     "pyopencl": pyopencl.VERSION_TEXT, "python": platform.python_version()},
        "device": chain["device"] if chain else None, "git_commit": git_commit(),
        "processor": platform.processor(), "cpu_count": os.cpu_count(),
        "timestamp": timestamp(),
    }
    write_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
