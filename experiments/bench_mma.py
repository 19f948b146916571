"""Check and benchmark: f32 GEMMs under each precision policy, and f16 GEMMs, against cuBLAS.

    python experiments/bench_mma.py --device nvidia --out results/bench_mma.json
        [--repeat 20] [--cases 4096,2048,8192x8192x1024,1000x1030x520,b32x512x512x64,bias2048]
        [--policies ieee,tf32,3xtf32] [--tiles 128x128x16:2x4,128x128x16:2x2:3]
        [--stages 2,3,4] [--loads scalar,vector,ptx] [--rounding fragment,tile]
        [--dtypes f32,f16] [--no-torch] [--sources DIR] [--disable wgmma-f16]
        [--force-tensor-cores] [--counts]

Each case (``N`` is N^3, ``MxNxK``, ``bBxMxNxK`` batched, ``biasN`` N^3 with a bias + relu
epilogue; a trailing ``t``, e.g. ``4096x4096x4096t``: B stored N x K, ``A @ B.T``) is
prepared for the device's own target profile (``TargetProfile.from_device``, whose
``tensor_cores`` the device probe fills) with ``kernelization{precision=P}`` for each policy P,
run on uniform(-1, 1) operands, and checked against numpy in float64 with the policy's error
bound: per element ``2 * bound + atol``, bound = ``rtol_f32 * sqrt(K) * (|A| @ |B|) +
EXTRA_EINSUM_RTOL[P] * (|A| @ |B|)``, which is :func:`accy.error_bounds.error_bounds`'s einsum
rule for exact inputs (computed here with BLAS: the interpreter's einsum would take minutes at
these sizes) and :class:`accy.error_bounds.Comparison`'s limit. Kernel time: OpenCL profiling
events, two warm-up calls, median of ``--repeat``, the operands uploaded once beforehand and
the result written to a device buffer (as ``bench_gpu.py`` times). torch (optional, skipped
when absent or without CUDA): ``torch.matmul`` timed with CUDA events (same warm-up and median) with
``torch.backends.cuda.matmul.allow_tf32`` off (cuBLAS FP32 SGEMM) and on (cuBLAS TF32).

``--tiles`` also times the tensor-core kernels with other tiles (``BMxBNxBK:WMxWN[:S]``: block
tile, warps along M and N, S local-memory stages, default 2), besides the heuristic's choice,
for sweeps. ``--stages 2,3,4`` times each of those tiles (or, without ``--tiles``, the
128x128 and 64x64 defaults: K steps of 16 for f32, 32 for f16) at each number of stages;
tiles whose stages exceed the device's local memory are skipped with a note. Stages above 2
need the probe's ``cp.async`` entry (the kernel copies global -> local with ``cp.async`` then,
waiting for the oldest group in flight before each step's one barrier); without it they fail
with that reason.

``--loads scalar,vector,ptx`` times each of those tiles (after ``--stages``; or, alone, the
128x128 and 64x64 defaults) with each fragment-load scheme (``MmaTiles.loads``): ``scalar``,
one 32-bit local load per fragment register from padded tiles (the original kernels), or
``vector``, the heuristic's default (float4 loads through a K/N permutation for f32,
``ldmatrix`` for f16, swizzled unpadded tiles: ``accy/kernels/mma_layout.py``), or ``ptx``,
the vector layout with the f32 loads as inline ``ld.shared.v4.f32`` (16-byte loads even where
the OpenCL compiler would split a ``vload4`` it cannot prove aligned). A tiles entry
can also name its scheme itself: ``--tiles 128x256x16:2x4:2:vector``; without one it is
``scalar``. Tiles a scheme cannot take (e.g. vector loads of 2 fragment columns per warp) are
skipped with the reason.

``--rounding fragment,tile`` times each of those tiles (after ``--loads``) with each place
``tf32`` rounds (``3xtf32`` splits) operands that ``cp.async`` copied (``MmaTiles.rounding``):
``fragment``, each register as it is loaded (the default), or ``tile``, each work-item
rounding the chunks it copied in local memory once before the step's barrier (``:round=tile``
in a tiles entry; under 3xtf32 the small parts in a second tile, so twice the local memory,
refused where the target lacks it, and scalar fragment loads only); f16 ignores it.

``--dtypes f32,f16`` also runs every case with f16 operands (named ``CASE.f16``): f16 products
take f16 tensor cores (``mma-f16``: m16n8k16, f32 accumulators, fed by ``cp.async``) whatever
the policy, so they run once, under the first of ``--policies``; checked against float64 with
``rtol_f32 * sqrt(K) * |A|@|B| + 2^-11 * |C|`` (f32 sums, one f16 rounding of the result;
twice that and the bias for bias cases) and compared with torch's f16 ``matmul`` (cuBLAS
tensor cores; reported as "vs cuBLAS" for them).

``--force-tensor-cores`` marks the profile with TF32 and f16 tensor cores and ``cp.async``
(and f16 among its dtypes) even when the device probes did not (to see the generated kernels'
own build errors when a probe fails); each failed probe's build or run error is printed first.

``--counts`` needs no device: it prepares each case for an H200-like profile (TF32 and f16
tensor cores, ``cp.async``, 48 KiB of local memory, 132 compute units) and prints, per kernel
(the heuristic's and each swept tiling), what its K loop issues per work-item and step: mma,
cvt, local loads by kind (32-bit, vload, ``ld.shared.v``, ``ldmatrix``), ``cp.async``,
barriers, and local loads and cvt per mma.

A failing case (build error, launch error, wrong result) is reported with its first build-log
error line and the run goes on; ``--sources DIR`` (default: next to ``--out``) receives the
OpenCL C of every failed case and of every tensor-core kernel, for reading the PTX path.
Prints a table; writes JSON to ``--out``. The issue's targets (H200): TF32 at 4096^3 at least
60% of cuBLAS TF32; 3xTF32 at 4096^3 at least 1.2x cuBLAS FP32; f16 at 4096^3 at least 50%
of torch's f16 matmul.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import statistics
import sys
import traceback
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # mma_counts, mma_cases, beside this file

import mma_counts  # noqa: E402
from mma_cases import (  # noqa: E402  (tests and scripts reach them through this module)
    check,
    dtype_of,
    flops,
    inputs_of,
    parse_case,
    program,
    reference,
    with_dtype,
)

import accy  # noqa: E402
from accy.backends.opencl import tensor_cores  # noqa: E402
from accy.backends.opencl.device_array import DeviceArray  # noqa: E402
from accy.backends.opencl.runtime import _first_error_line  # noqa: E402
from accy.backends.registry import open_device  # noqa: E402
from accy.experiments.records import git_commit, timestamp, write_json  # noqa: E402
from accy.ir.program import Stage  # noqa: E402
from accy.kernels import mma  # noqa: E402
from accy.kernels.mma_plan import (  # noqa: E402
    LOADS,
    ROUNDINGS,
    SMALL,
    SMALL16,
    WIDE,
    WIDE16,
    MmaTiles,
    for_dtype,
    parse_tiles,
)
from accy.passes.kernel.kernelization import with_spaces  # noqa: E402
from accy.target import (  # noqa: E402
    CP_ASYNC,
    F16_MMA,
    PRECISIONS,
    TF32_MMA,
    TargetProfile,
    resolve_precision,
)

DEFAULT_CASES = "4096,2048,8192x8192x1024,1000x1030x520,b32x512x512x64,bias2048"
DTYPES = ("f32", "f16")


def error_line(text: str) -> str:
    """The first error line of a build log in an exception's text (not the "error sites:"
    heading), with the source line it points at when the message quotes one."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    log = next((ln for ln in lines if re.search(r"error\s*(\(\d+\))?\s*:", ln, re.I)
                and ln.lower() != "error sites:"), None)
    if log is None:
        return _first_error_line(text)
    site = next((ln for ln in lines if re.match(r"\d+ \| ", ln)), None)
    return log + (f"  [source {site}]" if site else "")


def pipeline(precision: str, disable: str = "") -> str:
    off = f" disable={disable}" if disable else ""
    return ("accy-contract,accy-tensor,accy-dispatch,accy-memory,kernel-outlining-planning,"
            f"kernelization{{precision={precision}{off}}},accy-target")


def with_mma_tiles(job: accy.PreparedJob, tiles: MmaTiles, policy: str) -> accy.PreparedJob:
    """``job`` (prepared under ``policy``) with its tensor-core kernels rebuilt from ``tiles``
    (f32 products under tf32 or 3xtf32; f16 products under any policy), legalized again."""
    p = job.products[Stage.kernel]
    outlines = {o.work_item: o for o in p.outline.outlines}
    kernels, rebuilt = [], set()
    for k in p.kernels:
        if k.work_item in rebuilt:  # a split K's partial sums: rebuilt with its products
            continue
        item = p.schedule.item(k.work_item)
        group = p.fusion.groups[item.group]
        kind = ("f16" if mma.accepts(group, p.target, accy.DType.f16) else
                policy if policy in mma.POLICIES and mma.accepts(group, p.target) else None)
        if kind is not None:
            built = mma.build(group, outlines[k.work_item], item.kind, p.target, kind, tiles)
            kernels += [with_spaces(b, p.spaces) if p.spaces is not None else b for b in built]
            rebuilt.add(k.work_item)
        else:
            kernels.append(k)
    products = {s: q for s, q in job.products.items() if s.index < Stage.target.index}
    products[Stage.kernel] = p.replace(kernels=tuple(kernels))
    records = tuple(r for r in job.records if r.stage is not Stage.target)
    return accy.prepare(accy.PreparedJob(products, records, job.pipeline), job.pipeline)


def time_accy(job: accy.PreparedJob, xs: list[np.ndarray], runtime, repeat: int
              ) -> tuple[float, np.ndarray]:
    """Median kernel milliseconds (profiling events, two warm-up calls: the first, which
    gives the result's shape, and one into the device buffer) and the result. The operands
    are uploaded once and the result written to a device buffer, as ``bench_gpu.py`` times
    its programs: no upload just before each call leaves them in the L2 cache, which made
    small products look faster (papers/kernels.md, "Twenty-second session")."""
    exe = job.executable(device=runtime)
    dev = [exe.to_device(x) for x in xs]
    (first,) = exe(*dev)
    out = DeviceArray.empty(runtime, first.shape, first.dtype)
    exe(*dev, out=out)
    samples = []
    for _ in range(repeat):
        exe(*dev, out=out)
        samples.append(sum(exe.last_kernel_ns))
    return statistics.median(samples) / 1e6, out.get()


def time_torch(case: dict[str, Any], xs: list[np.ndarray], repeat: int, tf32: bool
               ) -> dict[str, Any] | None:
    """torch.matmul on CUDA (+ bias and relu for bias cases), median of CUDA-event times."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    a, b = (torch.from_numpy(x).cuda() for x in xs[:2])  # f16 cases: f16 cuBLAS
    if case.get("bt"):
        b = b.transpose(-1, -2)  # a view: cuBLAS reads it as stored
    bias = torch.from_numpy(xs[2]).cuda() if case["bias"] else None

    def call():
        y = torch.matmul(a, b)
        return torch.relu(y + bias) if bias is not None else y

    for _ in range(3):
        out = call()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = call()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end))
    result = out.float().cpu().numpy()  # the operands are freed when this returns
    return {"ms": statistics.median(samples), "device": torch.cuda.get_device_name(),
            "version": torch.__version__, "tf32": tf32, "result": result}


def run_case(case: dict[str, Any], precision: str, target: TargetProfile, runtime,
             xs: list[np.ndarray], exact: np.ndarray, mag: np.ndarray, args: argparse.Namespace,
             sources: Path, tiles: MmaTiles | None = None) -> dict[str, Any]:
    """One case under one policy (and tiles); failures are caught and described, never
    raised."""
    res: dict[str, Any] = {"case": case["name"], "precision": precision}
    job = None
    stem = f"{case['name'].replace('^', '')}.{precision}"
    if tiles is not None:
        res["tiles"] = tiles.text()
        stem += "." + res["tiles"].replace(":", "_")
    try:
        job = accy.prepare(program(case), pipeline(precision, args.disable), target=target)
        if tiles is not None:
            job = with_mma_tiles(job, tiles, precision)
        res["generators"] = job.generators()
        res["kernels"] = [{"entry": k.entry, "global": list(k.geometry.global_size),
                           "local": list(k.geometry.local_size)} for k in job.kernels]
        if any("mma" in name for name in res["generators"]):
            sources.mkdir(parents=True, exist_ok=True)
            (sources / f"{stem}.cl").write_text(job.kernel_source(0))
        ms, out = time_accy(job, xs, runtime, args.repeat)
        res["ms"] = ms
        res["tflops"] = flops(case) / ms / 1e9
        res["check"] = check(case, out, exact, mag, resolve_precision(precision, target))
        res["status"] = "ok" if res["check"]["ok"] else "wrong"
    except Exception as exc:  # one case must not end the run
        res["status"] = "failed"
        res["error"] = f"{type(exc).__name__}: {error_line(str(exc))}"
        res["traceback"] = traceback.format_exc(limit=4)
        if job is not None:
            sources.mkdir(parents=True, exist_ok=True)
            for i in range(job.kernel_count):
                (sources / f"{stem}.failed.{i}.cl").write_text(job.kernel_source(i))
    return res


def print_table(results: list[dict[str, Any]], torch_rows: dict[str, dict[str, Any]]) -> None:
    def generator(r: dict[str, Any]) -> str:
        gen = ",".join(r.get("generators", {})) or "-"
        return f"{gen} {r['tiles']}" if "tiles" in r else gen

    w = max([30] + [len(generator(r)) for r in results])  # whole tiles texts: sweeps differ
    head = (f"{'case':<18} {'policy':<7} {'generator':<{w}} {'ms':>9} {'TFLOP/s':>8} "
            f"{'rel err':>9} {'bound':>6} {'vs cuBLAS':>10}  status")
    print(head)
    print("-" * len(head))
    for r in results:
        gen = generator(r)
        chk = r.get("check", {})
        key = ("f16" if r["case"].endswith(".f16") else
               "tf32" if r["precision"] == "tf32" else "fp32")
        ref = torch_rows.get(r["case"], {}).get(key)
        ratio = f"{ref['ms'] / r['ms']:.2f}x" if ref and r.get("ms") else "-"
        ms = f"{r['ms']:.3f}" if "ms" in r else "-"
        tf = f"{r['tflops']:.1f}" if "tflops" in r else "-"
        rel = f"{chk['rel_err']:.2e}" if chk else "-"
        use = f"{chk['bound_use']:.2f}" if chk else "-"
        print(f"{r['case']:<18} {r['precision']:<7} {gen:<{w}} {ms:>9} {tf:>8} {rel:>9} "
              f"{use:>6} {ratio:>10}  {r['status']}" + (f": {r['error']}" if "error" in r
                                                        else ""))
    for name, rows in torch_rows.items():
        for key, t in rows.items():
            if t:
                print(f"{name:<18} {'torch':<7} {'cuBLAS ' + key:<{w}} {t['ms']:>9.3f} "
                      f"{t['tflops']:>8.1f} {t['rel_err']:>9.2e}")


def targets(results: list[dict[str, Any]], torch_rows: dict[str, dict[str, Any]]
            ) -> dict[str, Any]:
    """The issue's goals at 4096^3, where measured."""
    out: dict[str, Any] = {}
    rows = torch_rows.get("4096", {})
    for policy, ref, goal in (("tf32", "tf32", 0.6), ("3xtf32", "fp32", 1.2)):
        runs = [r for r in results if r["case"] == "4096" and r["precision"] == policy
                and r["status"] == "ok"]
        if runs and rows.get(ref):
            best = max(runs, key=lambda r: r["tflops"])
            ratio = best["tflops"] / rows[ref]["tflops"]
            out[f"{policy}_over_cublas_{ref}"] = ratio
            out[f"{policy}_best_tiles"] = best.get("tiles", "heuristic")
            out[f"{policy}_goal_met"] = ratio >= goal
    runs = [r for r in results if r["case"] == "4096.f16" and r["status"] == "ok"]
    ref16 = torch_rows.get("4096.f16", {}).get("f16")
    if runs and ref16:
        best = max(runs, key=lambda r: r["tflops"])
        out["f16_over_torch_f16"] = best["tflops"] / ref16["tflops"]
        out["f16_best_tiles"] = best.get("tiles", "heuristic")
        out["f16_goal_met"] = out["f16_over_torch_f16"] >= 0.5
    return out


def probe_report(runtime) -> str:
    """What the tensor-core probes say on this device, with the build or run error of each
    probe that did not pass."""
    found = runtime.info.tensor_cores
    parts = [f"passed: {', '.join(found)}"] if found else []
    probes = [(TF32_MMA, tensor_cores.MMA_PROBE_SOURCE, "accy_mma_probe", []),
              (CP_ASYNC, tensor_cores.CP_ASYNC_PROBE_SOURCE, "accy_cp_async_probe",
               [tensor_cores.cp_async_probe_case()[0]]),
              (F16_MMA, tensor_cores.MMA_F16_PROBE_SOURCE, "accy_mma_f16_probe",
               [x.view(np.uint16) for x in tensor_cores.mma_f16_probe_case()[:2]])]
    for name, source, entry, args in probes:
        if name in found:
            continue
        try:
            tensor_cores.run_isolated(runtime.device, source, entry, args,
                                      np.zeros(256, np.float32))
        except Exception as exc:
            parts.append(f"{name} failed: {error_line(str(exc))}")
            continue
        parts.append(f"{name} built and ran, not recorded (not NVIDIA, compute capability "
                     "below 8.0, or a wrong result)")
    return "; ".join(parts)


def loop_counts(case: dict[str, Any], precision: str, tiles: MmaTiles | None
                ) -> dict[str, Any]:
    """Instructions the tensor-core kernel's K loop issues per work-item and K step (from its
    OpenCL C source on ``mma_counts.COUNT_TARGET``; no device)."""
    job = accy.prepare(program(case), pipeline(precision), target=mma_counts.COUNT_TARGET)
    if tiles is not None:
        job = with_mma_tiles(job, tiles, precision)
    if not any(g.startswith("mma") for g in job.generators()):
        return {"generators": job.generators()}
    sources = (job.kernel_source(i) for i in range(job.kernel_count))
    return mma_counts.count_k_loop(next(s for s in sources if "mma.sync" in s))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default=os.environ.get("ACCY_DEVICE", "nvidia"))
    ap.add_argument("--cases", default=DEFAULT_CASES)
    ap.add_argument("--policies", default="ieee,tf32,3xtf32",
                    help="precision policies, of " + ",".join(PRECISIONS) + " (f32: what the "
                    "device's default is, 3xtf32 with tensor cores)")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--tiles", default="", help="other tiles for the tensor-core kernels, "
                    "BMxBNxBK:WMxWN[:STAGES],... (e.g. 128x128x16:2x2,64x64x16:2x2:3)")
    ap.add_argument("--stages", default="", help="local-memory stages to sweep, e.g. 2,3,4: "
                    "each --tiles entry (default: 128x128 and 64x64 tiles) at each; more than "
                    "2 needs the probe's cp.async; tiles over the local memory are skipped")
    ap.add_argument("--loads", default="", help="fragment-load schemes to sweep, e.g. "
                    f"scalar,vector (of {', '.join(LOADS)}): each --tiles entry (after "
                    "--stages; default: 128x128 and 64x64 tiles) with each")
    ap.add_argument("--rounding", default="", help="where tf32 rounds cp.async-copied "
                    f"operands, to sweep, e.g. fragment,tile (of {', '.join(ROUNDINGS)}): each "
                    "--tiles entry (after --loads; default: 128x128 and 64x64 tiles) with each")
    ap.add_argument("--dtypes", default="f32", help="operand dtypes of the cases: f32, f16 or "
                    "f32,f16 (f16: f16 tensor cores under the first policy, against torch's "
                    "f16 matmul)")
    ap.add_argument("--counts", action="store_true", help="no device: print what each "
                    "tensor-core kernel's K loop issues per work-item and step (mma, cvt, "
                    "local loads by kind, cp.async, barriers) for the cases and tiles asked")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--disable", default="", help="generators switched off, e.g. wgmma-f16")
    ap.add_argument("--force-tensor-cores", action="store_true",
                    help="use the mma generators (TF32, f16 and cp.async) even if the device "
                    "probe did not record them")
    ap.add_argument("--sources", default=None, help="folder for OpenCL C (default: beside --out)")
    ap.add_argument("--out", default="results/bench_mma.json")
    args = ap.parse_args(argv)
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    unknown = sorted(set(policies) - set(PRECISIONS))
    if unknown:
        ap.error(f"unknown policies {unknown}; known: {', '.join(PRECISIONS)}")
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    if not dtypes or set(dtypes) - set(DTYPES):
        ap.error(f"--dtypes {args.dtypes!r}: a list of {', '.join(DTYPES)}")
    cases = [with_dtype(parse_case(c), d) for c in args.cases.split(",") if c.strip()
             for d in dtypes]
    sweep = [parse_tiles(t) for t in args.tiles.split(",") if t.strip()]
    try:
        stages = [int(v) for v in args.stages.split(",") if v.strip()]
    except ValueError:
        ap.error(f"--stages {args.stages!r}: a list of 2, 3 or 4")
    sweeps = {accy.DType.f32: sweep, accy.DType.f16: sweep}
    if stages:  # each tile (default: the 128x128 and 64x64 ones) at each number of stages
        for dt, default in ((accy.DType.f32, [WIDE, SMALL]), (accy.DType.f16, [WIDE16, SMALL16])):
            sweeps[dt] = [dataclasses.replace(t, stages=n) for t in (sweep or default)
                          for n in stages]
    loads = [v.strip() for v in args.loads.split(",") if v.strip()]
    if set(loads) - set(LOADS):
        ap.error(f"--loads {args.loads!r}: a list of {', '.join(LOADS)}")
    if loads:  # each tile (default: the 128x128 and 64x64 ones) with each scheme
        for dt, default in ((accy.DType.f32, [WIDE, SMALL]), (accy.DType.f16, [WIDE16, SMALL16])):
            sweeps[dt] = [dataclasses.replace(t, loads=v) for t in (sweeps[dt] or default)
                          for v in loads]
    rounding = [v.strip() for v in args.rounding.split(",") if v.strip()]
    if set(rounding) - set(ROUNDINGS):
        ap.error(f"--rounding {args.rounding!r}: a list of {', '.join(ROUNDINGS)}")
    if rounding:
        for dt, default in ((accy.DType.f32, [WIDE, SMALL]), (accy.DType.f16, [WIDE16, SMALL16])):
            sweeps[dt] = [dataclasses.replace(t, rounding=v) for t in (sweeps[dt] or default)
                          for v in rounding]
    sources = Path(args.sources) if args.sources else Path(args.out).with_suffix("") / "sources"
    if args.counts:  # no device: the K loops' instruction counts, to set beside the timings
        rows = mma_counts.print_counts(cases, policies, sweeps, loop_counts, dtype_of)
        write_json({"benchmark": "bench_mma --counts", "timestamp": timestamp(),
                    "commit": git_commit(), "target": mma_counts.COUNT_TARGET.describe(),
                    "counts": rows}, args.out)
        return 0

    runtime, target = open_device(args.device)
    probe = probe_report(runtime)
    if args.force_tensor_cores:
        target = dataclasses.replace(target, tensor_cores=(TF32_MMA, CP_ASYNC, F16_MMA),
                                     dtypes=target.dtypes | {accy.DType.f16})
    print(f"device: {runtime.info.key}; compute capability "
          f"{runtime.info.compute_capability or 'unknown'}; tensor-core probe: {probe}")
    print(f"target: {target.describe()}")
    if not target.tensor_cores:
        print("NOTE: no tensor cores recorded (probe failed or not NVIDIA sm_80+): tf32 and "
              "3xtf32 fall back to the f32 generators")

    results: list[dict[str, Any]] = []
    torch_rows: dict[str, dict[str, Any]] = {}
    for case in cases:
        xs = inputs_of(case)
        exact, mag = reference(case, xs)
        f16 = dtype_of(case) is accy.DType.f16
        for precision in policies[:1] if f16 else policies:  # f16: one kernel for all
            first = run_case(case, precision, target, runtime, xs, exact, mag, args, sources)
            tried = [first]
            if any(g.startswith("mma") for g in first.get("generators", {})):
                for t in sweeps[dtype_of(case)]:
                    try:
                        t = for_dtype(t, dtype_of(case))
                    except ValueError as exc:  # e.g. K steps of 8 for f16
                        print(f"  {case['name']} {precision} {t.text()}: skipped, {exc}")
                        continue
                    if t.local_bytes() > target.local_mem_bytes:
                        print(f"  {case['name']} {precision} {t.text()}: skipped, "
                              f"{t.local_bytes()} bytes of local memory > "
                              f"{target.local_mem_bytes}")
                        continue
                    tried.append(run_case(case, precision, target, runtime, xs, exact, mag,
                                          args, sources, t))
            for r in tried:
                results.append(r)
                print(f"  {case['name']} {precision} {r.get('tiles', '')}: {r['status']}"
                      + (f" {r['ms']:.3f} ms {r['tflops']:.1f} TFLOP/s" if "ms" in r else "")
                      + (f" ({r['error']})" if "error" in r else ""), flush=True)
        if not args.no_torch:
            rows = {}
            for key, tf32 in (("f16", False),) if f16 else (("fp32", False), ("tf32", True)):
                try:
                    t = time_torch(case, xs, args.repeat, tf32)
                except Exception as exc:  # torch present but broken: note it, go on
                    t = {"error": f"{type(exc).__name__}: {exc}"}
                if t and "result" in t:
                    chk = check(case, t.pop("result"), exact, mag,
                                "tf32" if tf32 else "ieee")
                    t["tflops"] = flops(case) / t["ms"] / 1e9
                    t["rel_err"], t["bound_use"] = chk["rel_err"], chk["bound_use"]
                rows[key] = t if t and "ms" in t else None
            torch_rows[case["name"]] = rows
        del xs, exact, mag
    print()
    print_table(results, torch_rows)
    goals = targets(results, torch_rows)
    if goals:
        print("goals at 4096^3:", goals)
    write_json({
        "benchmark": "bench_mma", "timestamp": timestamp(), "commit": git_commit(),
        "device": runtime.info.key, "compute_capability": list(runtime.info.compute_capability),
        "target": target.describe(), "tensor_cores": list(target.tensor_cores),
        "probe": probe, "forced_tensor_cores": args.force_tensor_cores,
        "dtypes": dtypes, "stages": stages, "loads": loads,
        "rounding": rounding,
        "repeat": args.repeat, "results": results, "torch": torch_rows, "goals": goals,
        "bound": "2 * ((rtol_f32 * sqrt(K) + EXTRA_EINSUM_RTOL[policy]) * |A|@|B| + tiny) "
                 "+ atol_f32",
    }, args.out)
    return 0 if all(r["status"] == "ok" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
