"""Benchmark: tiled contraction kernels against numpy, torch (CUDA) and the loop nest.

    python experiments/bench_contraction.py [--sizes 1024,512x768x256] [--spec ik,kj->ij]
        [--dtype f32] [--device SELECTOR] [--repeat 10] [--out results/bench_contraction.json]
        [--tiles "wx=16,wy=16,sm=2,sn=2,bk=8;..."] [--baseline] [--no-check]

For each size (``N`` for N^3, or ``MxNxK``) the einsum ``--spec`` over random operands is
prepared for the device's target profile and run: kernel time from OpenCL profiling events
after warm-up (median of ``--repeat``), TFLOP/s, and the error against numpy. numpy's time is
taken on the CPU as the environment has it (OPENBLAS_CORETYPE noted); when torch with CUDA is
importable, ``torch.matmul`` (``torch.einsum`` for other specs) with TF32 off is timed with CUDA
events. ``--tiles`` sweeps tile configurations (``;``-separated overrides of
:class:`accy.kernels.contraction.Tiles` fields) besides the heuristic's choice;
``--baseline`` also times the loop-nest kernel (``kernelization{disable=tiled-contraction}``).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import statistics
import time
from typing import Any

import numpy as np

import accy
from accy.builder import einsum
from accy.experiments.peers import cuda_torch
from accy.experiments.records import command_line, git_commit, timestamp, write_json
from accy.ir.program import Stage
from accy.ir.shapes import parse_einsum
from accy.job import PreparedJob
from accy.kernels import contraction, contraction_plan
from accy.passes.kernel.kernelization import with_spaces
from accy.target import TargetProfile

DEFAULT_SPEC = "ik,kj->ij"


def parse_size(text: str) -> tuple[int, int, int]:
    parts = [int(p) for p in text.lower().split("x")]
    if len(parts) == 1:
        parts *= 3
    if len(parts) != 3 or min(parts) < 1:
        raise ValueError(f"size {text!r}: give N or MxNxK with positive numbers")
    return parts[0], parts[1], parts[2]


def operand_shapes(spec: str, m: int, n: int, k: int, batch: int) -> list[tuple[int, ...]]:
    """Shapes of the two operands of ``spec``: letters of lhs only and out are M, of rhs only
    and out N, of both operands and not out K, of all three the batch (``batch`` each)."""
    terms, out = parse_einsum(spec, [len(t) for t in spec.split("->")[0].split(",")])
    sizes = {}
    for c in set("".join(terms)):
        in_a, in_b, in_o = c in terms[0], c in terms[1], c in out
        sizes[c] = (batch if in_a and in_b and in_o else m if in_a and in_o
                    else n if in_b and in_o else k)
    return [tuple(sizes[c] for c in t) for t in terms]


def build_job(spec: str, shapes: list[tuple[int, ...]], dtype: accy.DType,
              target: TargetProfile, pipeline: str = "accy-default") -> PreparedJob:
    b = accy.Builder()
    f = b.begin_function("contract", [accy.TensorType(s, dtype) for s in shapes])
    f.return_(einsum(spec, f.param(0), f.param(1)))
    f.finish()
    return accy.prepare(b.finish(), pipeline, target=target)


def with_tiles(job: PreparedJob, tiles: contraction.Tiles) -> PreparedJob:
    """``job`` with its tiled-contraction kernels rebuilt from ``tiles`` (a work item's one
    kernel, or its two with K split), legalized again."""
    p = job.products[Stage.kernel]
    outlines = {o.work_item: o for o in p.outline.outlines}
    kernels: list = []
    done: set[int] = set()
    for k in p.kernels:
        item = p.schedule.item(k.work_item)
        group = p.fusion.groups[item.group]
        if not contraction.accepts(group, p.target):
            kernels.append(k)
        elif k.work_item not in done:
            done.add(k.work_item)
            built = contraction.build(group, outlines[k.work_item], item.kind, p.target, tiles)
            kernels += [with_spaces(b, p.spaces) for b in built]
    products = {s: q for s, q in job.products.items() if s.index < Stage.target.index}
    products[Stage.kernel] = p.replace(kernels=tuple(kernels))
    records = tuple(r for r in job.records if r.stage is not Stage.target)
    kernel_stage = PreparedJob(products, records, job.pipeline)
    return accy.prepare(kernel_stage, job.pipeline)


def time_job(job: PreparedJob, inputs: list[np.ndarray], runtime, repeat: int
             ) -> tuple[float, np.ndarray]:
    """Median kernel milliseconds (profiling events, after two warm-up calls) and the output."""
    exe = job.executable(device=runtime)
    for _ in range(2):
        exe(*inputs)
    samples = []
    out = None
    for _ in range(repeat):
        (out,) = exe(*inputs)
        samples.append(sum(exe.last_kernel_ns))
    assert out is not None
    return statistics.median(samples) / 1e6, out


def time_numpy(spec: str, inputs: list[np.ndarray], repeat: int) -> float:
    plain = spec.replace(" ", "") == DEFAULT_SPEC

    def call() -> np.ndarray:
        return inputs[0] @ inputs[1] if plain else np.einsum(spec, *inputs, optimize=True)

    call()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3


def time_torch(spec: str, inputs: list[np.ndarray], repeat: int) -> dict[str, Any] | None:
    """torch on CUDA with TF32 off (median of CUDA-event times), or None without it."""
    torch, _ = cuda_torch()
    if torch is None:
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    a, b = (torch.from_numpy(x).cuda() for x in inputs)
    plain = spec.replace(" ", "") == DEFAULT_SPEC

    def call():
        return torch.matmul(a, b) if plain else torch.einsum(spec, a, b)

    for _ in range(3):
        call()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end))
    return {"ms": statistics.median(samples), "device": torch.cuda.get_device_name(),
            "version": torch.__version__, "tf32": False}


def parse_tiles(text: str) -> list[dict[str, int]]:
    """``"wx=16,bk=8;sm=1"`` -> [{"wx": 16, "bk": 8}, {"sm": 1}]."""
    out = []
    for part in text.split(";"):
        if not part.strip():
            continue
        fields = {}
        for item in part.split(","):
            key, _, value = item.partition("=")
            fields[key.strip()] = int(value)
        out.append(fields)
    return out


def rel_error(out: np.ndarray, ref: np.ndarray) -> float:
    scale = max(float(np.abs(ref).max()), 1e-30)
    return float(np.abs(out.astype(np.float64) - ref).max() / scale)


LOOP_NEST_PIPELINE = ("accy-contract,accy-tensor,accy-dispatch,accy-memory,"
                      "kernel-outlining-planning,kernelization{disable=tiled-contraction},"
                      "accy-target")


def bench_size(size: tuple[int, int, int], args: argparse.Namespace, runtime,
               target: TargetProfile) -> dict[str, Any]:
    """Every configuration of one size, numpy and torch."""
    m, n, k = size
    dtype = accy.DType.parse(args.dtype)
    shapes = operand_shapes(args.spec, m, n, k, args.batch)
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(s).astype(dtype.numpy) for s in shapes]
    flops = 2 * m * n * k * batch_count(args.spec, args.batch)
    ref = (np.einsum(args.spec, *(x.astype(np.float64) for x in inputs), optimize=True)
           if args.check else None)
    job = build_job(args.spec, shapes, dtype, target)
    form = contraction.analyse(job.product.fusion.groups[0])
    heuristic = None if isinstance(form, str) else contraction_plan.choose_tiles(form[1], target)
    configs: list[tuple[str, PreparedJob, contraction.Tiles | None]] = [
        ("heuristic", job, heuristic)]
    for override in args.tiles if heuristic is not None else []:
        tiles = dataclasses.replace(heuristic, **override)
        name = ",".join(f"{key}={value}" for key, value in override.items())
        configs.append((name, with_tiles(job, tiles), tiles))
    if args.baseline:
        configs.append(("loop-nest", build_job(args.spec, shapes, dtype, target,
                                               LOOP_NEST_PIPELINE), None))
    rows = []
    for name, cjob, tiles in configs:
        kernel = cjob.kernels[0]
        row: dict[str, Any] = {
            "config": name, "tiles": dataclasses.asdict(tiles) if tiles else None,
            "generator": "tiled-contraction" if kernel.fixed_local_size else "other",
            "geometry": [list(kernel.geometry.global_size), list(kernel.geometry.local_size)]}
        try:
            ms, out = time_job(cjob, inputs, runtime, args.repeat)
        except accy.AccyError as exc:  # a configuration that does not build or fit
            row["error"] = str(exc).splitlines()[0]
        else:
            row.update(ms=ms, tflops=flops / ms / 1e9,
                       rel_error=rel_error(out, ref) if ref is not None else None)
        rows.append(row)
    numpy_ms = time_numpy(args.spec, inputs, max(3, min(args.repeat, 10)))
    torch = time_torch(args.spec, inputs, args.repeat)
    if torch is not None:
        torch["tflops"] = flops / torch["ms"] / 1e9
    timed = [r for r in rows if "ms" in r and r["config"] != "loop-nest"]
    best = min(timed, key=lambda r: r["ms"]) if timed else None
    head = rows[0].get("ms")
    return {
        "size": {"m": m, "n": n, "k": k, "batch": args.batch}, "shapes": shapes,
        "flops": flops, "batched": batch_count(args.spec, 2) > 1, "rows": rows,
        "numpy_ms": numpy_ms,
        "numpy_tflops": flops / numpy_ms / 1e9, "torch": torch,
        "heuristic_over_numpy": head / numpy_ms if head else None,
        "heuristic_over_torch": head / torch["ms"] if head and torch else None,
        "best": best["config"] if best else None,
    }


def batch_count(spec: str, batch: int) -> int:
    """``batch`` per batch letter of ``spec`` (letters of both operands and the output)."""
    terms, out = parse_einsum(spec, [len(t) for t in spec.split("->")[0].split(",")])
    return batch ** sum(1 for c in out if c in terms[0] and c in terms[1])


def blas_info() -> list[dict[str, Any]] | None:
    """numpy's BLAS libraries and the kernels they run (threadpoolctl), when importable."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    keys = ("internal_api", "architecture", "num_threads", "version")
    return [{k: lib.get(k) for k in keys} for lib in threadpool_info()]


def print_size(res: dict[str, Any]) -> None:
    s = res["size"]
    batch = f" (batch {s['batch']} per batch letter)" if res["batched"] else ""
    print(f"\n== {s['m']}x{s['n']}x{s['k']}{batch}, {res['flops'] / 1e9:.2f} GFLOP")
    print(f"{'config':<34} {'ms':>9} {'TFLOP/s':>8} {'rel err':>9}  tiles (bm x bn x bk)")
    for r in res["rows"]:
        t = r["tiles"]
        shape = (f"{t['wy'] * t['vm'] * t['sm']}x{t['wx'] * t['vn'] * t['sn']}x{t['bk']}"
                 if t else "-")
        if "error" in r:
            print(f"{r['config']:<34} error: {r['error']}")
            continue
        err = f"{r['rel_error']:.2e}" if r["rel_error"] is not None else "-"
        print(f"{r['config']:<34} {r['ms']:>9.3f} {r['tflops']:>8.2f} {err:>9}  {shape}")
    print(f"{'numpy (CPU)':<34} {res['numpy_ms']:>9.3f} {res['numpy_tflops']:>8.2f}")
    if res["torch"]:
        t = res["torch"]
        print(f"{'torch (' + t['device'] + ', TF32 off)':<34} {t['ms']:>9.3f} {t['tflops']:>8.2f}")
    if res["heuristic_over_numpy"]:
        print(f"heuristic / numpy time: {res['heuristic_over_numpy']:.2f}x"
              + (f"; heuristic / torch time: {res['heuristic_over_torch']:.2f}x"
                 if res["heuristic_over_torch"] else ""))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1024", help="comma-separated N (N^3) or MxNxK")
    p.add_argument("--spec", default=DEFAULT_SPEC, help="two-operand einsum")
    p.add_argument("--batch", type=int, default=4, help="extent of each batch letter")
    p.add_argument("--dtype", default="f32", choices=("f32", "f64"))
    p.add_argument("--device", default=None, help="OpenCL selector (default: $ACCY_DEVICE/pocl)")
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--tiles", default="", help="';'-separated Tiles overrides to sweep")
    p.add_argument("--baseline", action="store_true", help="also time the loop-nest kernel")
    p.add_argument("--no-check", dest="check", action="store_false",
                   help="skip the float64 numpy reference")
    p.add_argument("--out", default="results/bench_contraction.json")
    args = p.parse_args(argv)
    try:
        args.sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
        args.tiles = parse_tiles(args.tiles)
    except ValueError as exc:
        p.error(str(exc))
    fields = {f.name for f in dataclasses.fields(contraction.Tiles)}
    unknown = sorted({key for t in args.tiles for key in t} - fields)
    if unknown:
        p.error(f"--tiles: unknown fields {unknown}; Tiles has {sorted(fields)}")
    if not args.sizes or args.repeat < 1 or args.batch < 1:
        p.error("--sizes, --repeat and --batch must be positive")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    import pyopencl

    from accy.backends.registry import open_device

    args = parse_args(argv)
    runtime, target = open_device(args.device)
    blas = blas_info()
    kernels = ", ".join(f"{b['internal_api']} {b['architecture']}" for b in blas or [])
    print(f"device: {runtime.info.key} ({target.device_type}, {target.compute_units} compute "
          f"units); numpy BLAS: {kernels or 'unknown'} "
          f"(OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')})")
    sizes = [bench_size(size, args, runtime, target) for size in args.sizes]
    for res in sizes:
        print_size(res)
    result: dict[str, Any] = {
        "spec": args.spec, "dtype": args.dtype, "repeat": args.repeat, "sizes": sizes,
        "command": command_line(argv),
        "device": runtime.info.key, "device_type": target.device_type,
        "target": target.describe(),
        "versions": {"accy": accy.__version__, "numpy": np.__version__,
                     "pyopencl": pyopencl.VERSION_TEXT, "python": platform.python_version()},
        "environment": {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE",
                                                       "OMP_NUM_THREADS")},
        "numpy_blas": blas,
        "git_commit": git_commit(), "processor": platform.processor(),
        "cpu_count": os.cpu_count(),
        "timestamp": timestamp(),
    }
    write_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
