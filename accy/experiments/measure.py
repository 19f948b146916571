"""Preparing a suite program with a pipeline, running it, and recording what happened.

:func:`measure_program` is what the ablation and benefit experiments run per task. Its row
has two parts:

* **deterministic** fields, equal on every run of the same (program, pipeline, seed) on the
  same kind of device: stage fingerprints, extracted cost, kernel count, bytes moved, e-graph
  size, stop reason, rules that fired, whether the results match the reference;
* ``measured``: wall-clock and kernel times, which vary run to run (medians of ``repeats``
  calls after a warm-up call; kernel time is the sum of the OpenCL profiling events of one
  call). Results are checked against the float64 baseline of
  :func:`accy.experiments.baselines.expected` (which the tests check against
  ``accy.interpret``).

The pipeline helpers change the options of the three rewrite passes (``constant-fold``,
``canonicalize``, ``saturate``) of a pipeline, leaving everything else as it is.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from accy.experiments import records
from accy.experiments.baselines import expected
from accy.experiments.suite import benchmark
from accy.passes.base import Pass
from accy.passes.spec import Pipeline, parse_pipeline

__all__ = [
    "REWRITE_PASSES", "TOLERANCE", "edit_pipeline", "max_rel_error", "measure_program",
    "rewrite_stats",
]

REWRITE_PASSES = ("constant-fold", "canonicalize", "saturate")
TOLERANCE = 1e-3
"""Largest error (relative to the result's magnitude) for a result to count as correct."""


def edit_pipeline(pipeline: str | Pipeline, edit: Callable[[Pass], Pass | None]) -> Pipeline:
    """``pipeline`` (named pipelines expanded) with every pass replaced by ``edit(pass)``;
    ``None`` drops the pass."""
    pipe = parse_pipeline(pipeline) if isinstance(pipeline, str) else pipeline
    out = [edit(p) for p in pipe.passes]
    return Pipeline(tuple(p for p in out if p is not None))


def with_options(p: Pass, **changes: Any) -> Pass:
    """``p`` with the given options changed (only those it has)."""
    fields = {f.name for f in dataclasses.fields(p)}
    return dataclasses.replace(p, **{k: v for k, v in changes.items() if k in fields})


def _number(text: Any) -> int | None:
    """The last number of ``"a -> b"`` (e-graph sizes), or the value itself."""
    if isinstance(text, int | float):
        return int(text)
    try:
        return int(str(text).split("->")[-1].strip())
    except ValueError:
        return None


def rewrite_stats(job: Any) -> dict[str, dict[str, Any]]:
    """Per rewrite pass of a prepared job: stop reason, whether it changed the program,
    cost before and after, e-graph size, iterations, seconds, and the rules that fired."""
    out: dict[str, dict[str, Any]] = {}
    for record in job.records:
        for p in record.passes:
            name = p.spec.split("{")[0]
            if name not in REWRITE_PASSES:
                continue
            stats = dict(p.stats)
            prefix = "rules: " if name == "constant-fold" else ""
            get = lambda key, s=stats, pre=prefix: s.get(pre + key)  # noqa: E731
            cost_before = next((v for k, v in stats.items()
                                if k.startswith(prefix + "cost-before")), None)
            cost_after = next((v for k, v in stats.items()
                               if k.startswith(prefix + "cost-after")), None)
            out[name] = {
                "stop_reason": get("stop-reason"), "changed": bool(get("changed")),
                "cost_before": cost_before, "cost_after": cost_after,
                "e_nodes": _number(get("e-nodes")), "e_classes": _number(get("e-classes")),
                "iterations": get("iterations"), "seconds": get("seconds") or 0.0,
                "rules_fired": dict(sorted((get("rules-fired") or {}).items())),
            }
    return out


def max_rel_error(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> float:
    """Largest ``|got - want|`` over every result, relative to that result's largest
    ``|want|`` (at least 1e-30); ``inf`` on a shape mismatch or NaN where want has none."""
    worst = 0.0
    for g, w in zip(got, want, strict=True):
        g64, w64 = np.asarray(g, np.float64), np.asarray(w, np.float64)
        if g64.shape != w64.shape:
            return math.inf
        if np.any(np.isnan(g64) & ~np.isnan(w64)):
            return math.inf
        scale = max(float(np.max(np.abs(w64), initial=0.0)), 1e-30)
        diff = np.abs(np.nan_to_num(g64) - np.nan_to_num(w64))
        worst = max(worst, float(np.max(diff, initial=0.0)) / scale)
    return worst


def _runtime(device: str | None) -> tuple[Any, Any, str | None]:
    """(device, its target profile, None), or (None, None, why there is no device)."""
    from accy.backends.registry import open_device
    from accy.errors import DeviceError

    try:
        return (*open_device(device), None)
    except DeviceError as e:
        return None, None, str(e).splitlines()[0]


def measure_program(program: str, size: str, seed: int, pipeline: str, *,
                    device: str | None = None, repeats: int = 5, run: bool = True,
                    extra: dict[str, Any] | None = None,
                    paired: str | None = None) -> dict[str, Any]:
    """Prepare suite ``program`` at ``size`` with ``pipeline``, run it ``repeats`` times on
    ``device`` with the inputs of ``seed``, and return its row (module docstring).

    ``paired``: a baseline pipeline whose kernels are timed interleaved with these (one call
    of each in turn), so that slow changes of the machine's load hit both alike;
    ``measured.paired_ratio`` is then the median of the call-by-call ratios of this
    pipeline's kernel time to the baseline's, ``paired_ratio_q1``/``q3`` their quartiles
    (``paired_ratio_of_best``: best over best, which one lucky call can skew), and
    ``measured.paired`` says ``"identical"`` when both give the same kernels (nothing to
    time twice). With ``run=False`` or without a usable OpenCL device, nothing is built or
    run: the row has the compile-side fields and ``measured.kernel_ms`` is None.
    """
    import accy
    from accy.egraph.cost import program_cost

    bench = benchmark(program)
    prog = bench.program(size)
    inputs = bench.inputs(size, seed)
    runtime, target, no_device = _runtime(device) if run else (None, None, "not asked to run")
    start = time.perf_counter_ns()
    job = accy.prepare(prog, pipeline, target=target)
    prepare_ns = time.perf_counter_ns() - start
    rewrites = rewrite_stats(job)
    sat = rewrites.get("saturate", {})
    initial = program_cost(prog)
    extracted = sat.get("cost_after")
    row: dict[str, Any] = {
        "program": program, "size": size, "seed": seed, "dims": dict(bench.dims(size)),
        "program_fingerprint": prog.fingerprint(), "pipeline": job.pipeline.text(),
        **(extra or {}),
        "target_profile": "device" if target is not None else "generic",
        "stages": records.stage_fingerprints(job),
        "cost": {"model": "flops-bytes", "initial": initial,
                 "extracted": extracted if extracted is not None else initial},
        "kernels": job.kernel_count,
        "bytes_moved": job.product.buffers.bytes_moved,
        "peak_bytes": job.product.buffers.peak_bytes,
        "e_nodes": sat.get("e_nodes"), "e_classes": sat.get("e_classes"),
        "stop_reason": sat.get("stop_reason"),
        "rewrites": {k: {f: v for f, v in r.items() if f != "seconds"}
                     for k, r in rewrites.items()},
    }
    measured: dict[str, Any] = {
        "prepare_ms": prepare_ns / 1e6,
        "stage_ms": {r.stage.value: r.elapsed_ns / 1e6 for r in job.records},
        "saturation_s": sat.get("seconds", 0.0),
        "rewrite_s": sum(r["seconds"] for r in rewrites.values()),
        "build_ms": None, "first_call_ms": None, "kernel_ms": None, "kernel_ms_min": None,
        "wall_ms": None, "max_rel_error": None,
    }
    row["correct"] = None
    if runtime is not None:
        other = None
        if paired is not None:
            other = accy.prepare(prog, paired, target=target)
            if other.product.fingerprint() == job.product.fingerprint():
                measured["paired"], other = "identical", None
        measured.update(_run(job, runtime, inputs, repeats, other))
        got = measured.pop("outputs")
        want = expected(program, bench.dims(size), inputs)
        err = max_rel_error(got, want)
        measured["max_rel_error"] = err
        row["correct"] = bool(err <= TOLERANCE)
    row["measured"] = measured
    row["provenance"] = records.provenance(device if runtime is not None else False)
    if no_device and run:
        row["provenance"]["device"] = {"selector": device, "error": no_device}
    return row


def _run(job: Any, runtime: Any, inputs: Sequence[np.ndarray], repeats: int,
         other: Any = None) -> dict[str, Any]:
    """Build, warm up and time ``job`` (interleaved with ``other``'s kernels when given)."""
    start = time.perf_counter_ns()
    exe = job.executable(device=runtime)
    built = time.perf_counter_ns()
    outputs = exe(*inputs)  # warm-up: buffers, constants, the driver's first launch
    first = time.perf_counter_ns()
    base = other.executable(device=runtime) if other is not None else None
    if base is not None:
        base(*inputs)
    kernel_ns, wall_ns, base_ns, each_ns = [], [], [], []
    for _ in range(max(repeats, 1)):
        t0 = time.perf_counter_ns()
        exe(*inputs)
        wall_ns.append(time.perf_counter_ns() - t0)
        kernel_ns.append(sum(exe.last_kernel_ns))
        each_ns.append(list(exe.last_kernel_ns))
        if base is not None:
            base(*inputs)
            base_ns.append(sum(base.last_kernel_ns))
    out = {"build_ms": (built - start) / 1e6, "first_call_ms": (first - built) / 1e6,
           "kernel_ms": records.median_ms(kernel_ns), "kernel_ms_min": min(kernel_ns) / 1e6,
           "wall_ms": records.median_ms(wall_ns), "outputs": outputs,
           # each launch's median (launch order), for models priced kernel by kernel
           "kernel_us_each": [statistics.median(ns) / 1e3 for ns in zip(*each_ns, strict=True)]}
    if base_ns:
        ratios = sorted(k / max(b, 1) for k, b in zip(kernel_ns, base_ns, strict=True))
        out.update(paired="timed", paired_kernel_ms_min=min(base_ns) / 1e6,
                   paired_ratio=_quantile(ratios, 0.5),
                   paired_ratio_q1=_quantile(ratios, 0.25),
                   paired_ratio_q3=_quantile(ratios, 0.75),
                   paired_ratio_of_best=min(kernel_ns) / max(min(base_ns), 1))
    return out


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of sorted values (linear interpolation)."""
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)
