"""Benchmark: accy on a CPU OpenCL device (PoCL) against onnxruntime on the same CPU, over
``bench_gpu``'s programs (GEMMs of each shape class, attention, layernorm, RMSNorm, softmax,
the MLP with GELU, the elementwise chain) at CPU-sized shapes.

    python experiments/bench_cpu.py [--programs gemm_square,softmax,...] [--repeat 9]
        [--scale 1.0] [--out results/bench_cpu.json]

Each program is the same maths on both sides: accy traces ``bench_gpu_programs``' function and
prepares it with ``accy-default`` for the device's profile; onnxruntime runs an ONNX graph of
the same ops (``MatMul``, ``Softmax``, ``LayerNormalization``, ``Erf`` ...) built here with
``onnx.helper``, CPU provider, its graph optimisations on and its default threads. Both get the
same inputs (``bench_gpu_programs.inputs``), and both results are checked on a slice against
float64 within accy's error bounds (``bench_gpu_programs.Checker``).

Timing: accy's kernel time is the sum of one call's OpenCL profiling events and its call time
the wall clock of ``Executable.__call__`` with device-resident inputs and output; onnxruntime's
time is the wall clock of ``InferenceSession.run`` with numpy inputs (its only form), so
``speed_vs_ort`` (> 1: accy faster) compares accy's call time with it. Medians over
``--repeat`` calls after a warm-up, the two sides called in turn (a busy spell of a shared
machine falls on both; on the 2-core development VM single timings of either side still move
by 2x between runs, so compare rows of one run). Before and after the programs it records
how much of the device's parallelism short kernels get (:func:`parallel_ratio`, ``parallel``
in the JSON): on that VM PoCL's two worker threads run them one after the other for spells,
which moves accy's timings (onnxruntime's threads spin between calls). ``--scale``
multiplies every axis.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_gpu as bg  # noqa: E402
import bench_gpu_programs as bp  # noqa: E402
import bench_gpu_torch as bt  # noqa: E402

import accy  # noqa: E402
from accy.backends.opencl.device_array import DeviceArray  # noqa: E402
from accy.backends.registry import open_device  # noqa: E402
from accy.experiments.records import command_line, provenance, write_json  # noqa: E402

# CPU-sized shapes of bench_gpu's programs (f32): each takes milliseconds on two cores
PROGRAMS: dict[str, tuple[str, dict[str, int]]] = {
    "gemm_square": ("gemm_4096", {"M": 512, "N": 512, "K": 512}),
    "gemm_skinny": ("gemm_skinny", {"M": 16, "N": 2048, "K": 2048}),
    "gemm_small_k": ("gemm_small_k", {"M": 1024, "N": 1024, "K": 64}),
    "gemm_long_k": ("gemm_long_k", {"M": 64, "N": 64, "K": 32768}),
    "gemm_batched": ("gemm_batched", {"B": 16, "M": 128, "N": 128, "K": 64}),
    "gemm_between": ("gemm_between", {"M": 250, "N": 258, "K": 130}),
    "attention": ("attention_512", {"B": 1, "H": 8, "Sq": 256, "Sk": 256, "D": 64}),
    "layernorm": ("layernorm", {"R": 2048, "C": 1024}),
    "rmsnorm": ("rmsnorm", {"R": 2048, "C": 1024}),
    "softmax": ("softmax", {"R": 1024, "C": 2048}),
    "mlp_gelu": ("mlp_gelu", {"T": 256, "D": 256, "F": 1024}),
    "chain": ("chain", {"N": 1 << 22}),
}
WARMUP = 2


def onnx_model(kind: str, dims: dict[str, int]) -> Any:
    """The ONNX graph of a program kind (``bench_gpu_programs.accy_function``'s maths)."""
    from onnx import TensorProto, helper

    f32 = TensorProto.FLOAT
    axes = bp.KINDS[kind].inputs
    names = [f"x{i}" for i in range(len(axes))]
    ins = [helper.make_tensor_value_info(n, f32, [dims[a] for a in ax])
           for n, ax in zip(names, axes, strict=True)]
    out = helper.make_tensor_value_info("y", f32, [dims[a] for a in bp.KINDS[kind].output])
    consts: list[Any] = []

    def const(name: str, value: float | list[int], dtype: int = f32) -> str:
        vals = value if isinstance(value, list) else [value]
        consts.append(helper.make_tensor(name, dtype, [len(vals)] if isinstance(value, list)
                                         else [], vals))
        return name

    n = helper.make_node
    x = names
    if kind in ("gemm", "bgemm"):
        nodes = [n("MatMul", [x[0], x[1]], ["y"])]
    elif kind == "attention":
        nodes = [n("Transpose", [x[1]], ["kt"], perm=[0, 1, 3, 2]),
                 n("MatMul", [x[0], "kt"], ["s"]),
                 n("Mul", ["s", const("scale", 1.0 / math.sqrt(dims["D"]))], ["ss"]),
                 n("Softmax", ["ss"], ["p"], axis=-1),
                 n("MatMul", ["p", x[2]], ["y"])]
    elif kind == "layernorm":
        nodes = [n("LayerNormalization", [x[0], x[1], x[2]], ["y"], axis=-1,
                   epsilon=bt.LN_EPS)]
    elif kind == "rmsnorm":
        nodes = [n("Mul", [x[0], x[0]], ["sq"]),
                 n("ReduceMean", ["sq", const("axis", [-1], TensorProto.INT64)], ["ms"],
                   keepdims=1),
                 n("Add", ["ms", const("eps", bt.RMS_EPS)], ["mse"]),
                 n("Sqrt", ["mse"], ["rms"]),
                 n("Div", [x[0], "rms"], ["xn"]),
                 n("Mul", ["xn", x[1]], ["y"])]
    elif kind == "softmax":
        nodes = [n("Softmax", [x[0]], ["y"], axis=-1)]
    elif kind == "mlp":
        nodes = [n("MatMul", [x[0], x[1]], ["h0"]), n("Add", ["h0", x[2]], ["h"]),
                 n("Div", ["h", const("sqrt2", math.sqrt(2.0))], ["hs"]),
                 n("Erf", ["hs"], ["e"]), n("Add", ["e", const("one", 1.0)], ["e1"]),
                 n("Mul", ["h", "e1"], ["he"]), n("Mul", ["he", const("half", 0.5)], ["g"]),
                 n("MatMul", ["g", x[3]], ["o0"]), n("Add", ["o0", x[4]], ["y"])]
    elif kind == "chain":
        nodes = [n("Add", [x[0], x[1]], ["s"]), n("Mul", ["s", x[1]], ["p"]),
                 n("Sub", ["p", x[1]], ["d"]), n("Max", ["d", x[1]], ["y"])]
    else:
        raise ValueError(f"program kind {kind!r}")
    graph = helper.make_graph(nodes, kind, ins, [out], initializer=consts)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


class Accy:
    """accy's side of one program: prepared for the device, inputs and output on it."""

    def __init__(self, spec: Any, dims: dict[str, int], xs: list[np.ndarray], runtime: Any,
                 target: Any) -> None:
        self.job = accy.prepare(bp.program(spec, dims), bg.pipeline_text("f32"), target=target)
        self.exe = self.job.executable(device=runtime)
        self.dev = [self.exe.to_device(x) for x in xs]
        shape = tuple(dims[a] for a in bp.KINDS[spec.kind].output)
        self.out = DeviceArray.empty(runtime, shape, xs[0].dtype)

    def __call__(self) -> tuple[float, float]:
        """One call: (kernel ms from its OpenCL events, wall-clock ms)."""
        t0 = time.perf_counter_ns()
        self.exe(*self.dev, out=self.out)
        wall = time.perf_counter_ns() - t0
        return sum(self.exe.last_kernel_ns) / 1e6, wall / 1e6


class Ort:
    """onnxruntime's side of one program: a session of its graph and the inputs."""

    def __init__(self, kind: str, dims: dict[str, int], xs: list[np.ndarray]) -> None:
        import onnxruntime as ort

        self.session = ort.InferenceSession(onnx_model(kind, dims).SerializeToString(),
                                            providers=["CPUExecutionProvider"])
        self.feed = {f"x{i}": x for i, x in enumerate(xs)}

    def __call__(self) -> float:
        """One ``run``: wall-clock ms."""
        t0 = time.perf_counter_ns()
        self.result = self.session.run(None, self.feed)[0]
        return (time.perf_counter_ns() - t0) / 1e6


def measure(a: Accy, o: Ort, repeat: int) -> dict[str, float]:
    """Medians over ``repeat`` calls of each side after a warm-up, one of each in turn (so
    a busy spell of the machine falls on both)."""
    for _ in range(WARMUP):
        a()
        o()
    kernel, call, ort_ms = [], [], []
    for _ in range(repeat):
        k, w = a()
        kernel.append(k)
        call.append(w)
        ort_ms.append(o())
    return {"kernel_ms": statistics.median(kernel), "call_ms": statistics.median(call),
            "ort_ms": statistics.median(ort_ms)}


# one work-item's chain of FMAs on four float8 values, about a millisecond of a core's time
# (PARALLEL_STEPS): a work-group of it alone, then two at once (parallel_ratio)
PARALLEL_SOURCE = """__kernel void fmas(__global float* out, int steps) {
  float8 a = (float8)(get_group_id(0)), d = a + 1, e = a + 2, f = a + 3;
  const float8 b = (float8)(1.0001f), c = (float8)(0.5f);
  for (int i = 0; i < steps; i++) {
    a = fma(a, b, c); d = fma(d, b, c); e = fma(e, b, c); f = fma(f, b, c); }
  out[get_group_id(0)] = a.s0 + d.s1 + e.s2 + f.s3; }"""
PARALLEL_STEPS = 600_000
PARALLEL_LAUNCHES = 11


def parallel_ratio(runtime) -> dict[str, float]:
    """How much of the device's parallelism short kernels get now: the median OpenCL-event
    time of one work-group of :data:`PARALLEL_SOURCE` over that of two (2 on two cores both
    running them, 1 where the two ran one after the other). On the 2-core development VM it
    moves between about 1 and 2 for spells of seconds (papers/kernels.md, "Forty-ninth
    session"), and accy's CPU timings with it."""
    import pyopencl as cl

    kernel = runtime.kernel(PARALLEL_SOURCE, "fmas")
    out = cl.Buffer(runtime.context, cl.mem_flags.READ_WRITE, size=64)
    ms = {}
    for groups in (1, 2):
        times = []
        for _ in range(PARALLEL_LAUNCHES):
            event = runtime.launch(kernel, (groups,), (1,), [out, np.int32(PARALLEL_STEPS)])
            event.wait()
            times.append((event.profile.end - event.profile.start) / 1e6)
        ms[groups] = statistics.median(times)
    return {"one_group_ms": ms[1], "two_groups_ms": ms[2], "ratio": 2 * ms[1] / ms[2]}


def scaled(dims: dict[str, int], scale: float) -> dict[str, int]:
    return {a: max(1, round(n * scale)) for a, n in dims.items()}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None, help="OpenCL selector (default: $ACCY_DEVICE/pocl)")
    p.add_argument("--programs", default=",".join(PROGRAMS),
                   help="comma-separated subset of: " + ",".join(PROGRAMS))
    p.add_argument("--repeat", type=int, default=9, help="timed calls per program and side")
    p.add_argument("--scale", type=float, default=1.0, help="every axis times this")
    p.add_argument("--out", default="results/bench_cpu.json")
    args = p.parse_args(argv)
    chosen = [x.strip() for x in args.programs.split(",") if x.strip()]
    unknown = [x for x in chosen if x not in PROGRAMS]
    if unknown or not chosen:
        p.error(f"--programs: unknown {', '.join(unknown) or '(none given)'}; choose from "
                f"{','.join(PROGRAMS)}")
    if args.repeat < 1 or args.scale <= 0:
        p.error("--repeat must be at least 1 and --scale positive")
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        p.error("onnxruntime is not installed (pip install onnxruntime; it is a test "
                "dependency of accy)")
    runtime, target = open_device(args.device)
    parallel = {"before": parallel_ratio(runtime)}
    rows = []
    print(f"{'program':14s} {'shape':22s} {'accy kernel ms':>14s} {'accy call ms':>12s} "
          f"{'ort ms':>8s} {'speed':>6s} kernels  check")
    for name in chosen:
        base, dims = PROGRAMS[name]
        spec = bp.PROGRAMS[base]
        dims = scaled(dims, args.scale)
        xs = bp.inputs(spec, dims)
        check = bp.Checker(spec, dims, xs)
        a, o = Accy(spec, dims, xs, runtime, target), Ort(spec.kind, dims, xs)
        times = measure(a, o, args.repeat)
        mine = {"kernels": a.job.kernel_count, "generators": a.job.generators(),
                "kernel_ms": times["kernel_ms"], "call_ms": times["call_ms"],
                "check": check(a.out.get())}
        row = {"program": name, "kind": spec.kind, "dims": dims, "accy": mine,
               "ort_ms": times["ort_ms"], "ort_check": check(o.result),
               "speed_vs_ort": times["ort_ms"] / times["call_ms"]}
        del a, o
        rows.append(row)
        shape = "x".join(str(v) for v in dims.values())
        ok = "ok" if mine["check"]["ok"] and row["ort_check"]["ok"] else (
            f"accy {mine['check']['ok']} ort {row['ort_check']['ok']}")
        print(f"{name:14s} {shape:22s} {mine['kernel_ms']:14.3f} {mine['call_ms']:12.3f} "
              f"{row['ort_ms']:8.3f} {row['speed_vs_ort']:5.2f}x {mine['kernels']:7d}  {ok}",
              flush=True)
    speeds = [r["speed_vs_ort"] for r in rows]
    geomean = math.exp(statistics.fmean(math.log(x) for x in speeds))
    print(f"geometric mean speed against onnxruntime (accy's call time): {geomean:.2f}x")
    parallel["after"] = parallel_ratio(runtime)
    print("two work-groups against one (2: both cores at once; parallel_ratio): "
          f"{parallel['before']['ratio']:.2f}x before, {parallel['after']['ratio']:.2f}x after")
    result = {"benchmark": "bench_cpu", "repeat": args.repeat, "scale": args.scale,
              "rows": rows, "parallel": parallel,
              "summary": {"geomean_speed_vs_ort": geomean,
                                        "programs": len(rows),
                                        "all_ok": all(r["accy"]["check"]["ok"] and
                                                      r["ort_check"]["ok"] for r in rows)},
              **provenance(args.device, extra_versions=("onnxruntime",),
                           command=command_line(argv))}
    write_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
