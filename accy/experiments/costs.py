"""Do the cost models predict the clock? Spearman rank correlation of predicted cost and
measured kernel time over the suite programs and their rewrite variants.

Per suite program, each variant (``VARIANTS``: the program before and after ``saturate``
under several rule selections, policies, extraction cost models, and the fusion policy) is
prepared with ``accy-default`` so edited, run on the device, and its kernel time taken as the
median of ``repeats`` calls (sum of the OpenCL profiling events of a call). The program each
cost model prices is the one ``saturate`` produced (the contract stage's output where the
variant has no ``saturate``): what extraction compares. Its cost is taken under every model
of ``MODELS``: ``flops-bytes`` (the default, kept for ablation), ``kernels`` (analytical)
and ``measured`` (the device's calibration, made first when missing; see
``accy.experiments.calibrate``); and ``measured-groups``, the same calibration over the fused
kernel groups of the prepared program (:func:`group_cost`): not a cost extraction can use
(fusion comes after it), but what it would take for a cost to see the fusion policy.

Variants that give the same priced program and the same fusion policy run the same kernels:
the summary merges them into one point (median of their times), so duplicates cannot inflate
a correlation. It reports per model:

* ``spearman``: over every point of every program (programs of different sizes: mostly a
  test that a model scales with the work);
* ``within``: the mean over programs of the Spearman coefficient among that program's own
  variants (programs with at least three points whose times differ): does it rank the
  rewrites of one program as the clock does, which is what extraction needs;
* ``pairs``: over pairs of variants of one program whose times differ by more than
  ``NOISE`` (relative), the fraction the model orders as the clock (a tie counts one half).

A tensor-stage cost cannot see the fusion policy (``multi-output`` has the cost of the
default variant), so that variant measures what no such model can predict; the kernel-group
view (``measured-groups``) can.
"""

from __future__ import annotations

import itertools
import statistics
from typing import Any

from accy.experiments import measure
from accy.experiments.executor import Executor, Task
from accy.experiments.runner import SweepOptions, run_tasks
from accy.experiments.suite import benchmark, benchmarks
from accy.passes.base import Pass
from accy.passes.manager import Instrument

__all__ = ["MODELS", "NOISE", "VARIANTS", "group_cost", "pipeline_for", "run", "summarize",
           "tables"]

MODELS = ("flops-bytes", "kernels", "measured", "measured-groups")
NOISE = 0.10  # relative time difference below which a pair of variants is not judged
# variant -> (saturate options or None to drop it, canonicalize options, fusion policy)
VARIANTS: dict[str, tuple[dict[str, Any] | None, dict[str, Any], str]] = {
    "unsaturated": (None, {}, "single-output"),
    "saturated": ({}, {}, "single-output"),
    "fast-math": ({"fast_math": True}, {"fast_math": True}, "single-output"),
    "kernels": ({"cost": "kernels"}, {}, "single-output"),
    "measured": ({"cost": "measured"}, {}, "single-output"),
    "fast-math-kernels": ({"fast_math": True, "cost": "kernels"}, {"fast_math": True},
                          "single-output"),
    "fast-math-measured": ({"fast_math": True, "cost": "measured"}, {"fast_math": True},
                           "single-output"),
    "-activation": ({"disable": ("activation",)}, {}, "single-output"),
    "-einsum": ({"disable": ("einsum",)}, {}, "single-output"),
    "multi-output": ({}, {}, "multi-output"),
}


def pipeline_for(variant: str, device: str | None = None) -> str:
    """The pipeline text of a variant (``measured`` extraction names the device)."""
    from accy.experiments.calibrate import selector_of

    sat, canon, policy = VARIANTS[variant]

    def edit(p: Pass) -> Pass | None:
        if p.name == "saturate":
            if sat is None:
                return None
            opts = dict(sat)
            if opts.get("cost") == "measured":
                opts["cost"] = f"measured:{selector_of(device)}"
            return measure.with_options(p, **opts)
        if p.name == "canonicalize":
            return measure.with_options(p, **canon)
        if p.name == "fusion-planning":
            return measure.with_options(p, policy=policy)
        return p

    return measure.edit_pipeline("accy-default", edit).text()


class _Capture(Instrument):
    """An instrument keeping the program ``saturate`` produced."""

    def __init__(self) -> None:
        self.program: Any = None

    def after_pass(self, p: Any, product: Any, record: Any) -> None:
        if p.name == "saturate":
            self.program = product.program


def group_cost(product: Any, model: Any) -> int:
    """The kernel-group view of a cost model (``measured-groups``): the fused kernel groups
    of a prepared program's fusion plan priced with the model's coefficients, where a
    tensor-stage cost prices e-nodes before fusion decides the kernels. Each group is one
    kernel: one launch (its heavy ops' largest, else the elementwise chains'), the work of
    each of its heavy ops (:meth:`KernelCost.kernels` by the linear fits, less their launch:
    bytes, FLOPs, and a contraction's time to run its summed length), its elementwise ops'
    arithmetic, and, at the chains' bytes rate, what it reads and writes beyond its heavy
    ops' operands and results (a multi-output group's extra results, a prologue's extra
    inputs). So the fusion policy is seen (each kernel it makes is a launch, each value it
    writes a trip through memory), and launch-bound programs of many small kernels are priced
    by their kernels, not by the ops inside them."""
    from accy.egraph.cost import bytes_moved, priced_operands
    from accy.egraph.kernel_cost import HEAVY_KINDS, Fit, op_class
    from accy.plans import is_inlined

    plan = product.require("fusion", "the kernel-group cost", "fusion-planning")
    flat: Fit = model.kinds.get("elementwise") or model.kinds["reduce"]
    total = 0.0
    for g in plan.groups:
        own = heavy_bytes = 0.0
        parts: list[tuple[float, float]] = []
        for n in g.nodes:
            types = tuple(s.type for s in priced_operands(n.op, n.srcs))
            attrs = dict(n.attrs)
            if op_class(n.op) in HEAVY_KINDS:
                parts += model.kernels(n.op, n.type, types, attrs, series=False)
                heavy_bytes += bytes_moved(n.op, n.type, types, attrs)
            else:
                own += model.node_cost(n.op, n.type, types, attrs)
        moved = float(sum(n.type.nbytes for n in g.inputs if not is_inlined(n))
                      + sum(n.type.nbytes for n in g.outputs))
        if parts:
            total += (max(launch for launch, _ in parts)
                      + sum(max(t - launch, 0.0) for launch, t in parts)
                      + own + flat.per_byte * max(moved - heavy_bytes, 0.0))
        else:
            total += own + flat.time(moved, 0.0)
    return round(total)


def kernel_detail(product: Any, times_us: list[float]) -> list[dict[str, Any]]:
    """Per kernel: its fusion group's kind, ops, bytes in and out and FLOPs, and its median
    time: the points a kernel-level model is judged on."""
    from accy.egraph.cost import flops
    from accy.plans import is_inlined

    items = product.require("schedule", "kernel detail", "schedule-planning").items
    groups = product.fusion.groups
    out = []
    for k, us in zip(product.kernels, times_us, strict=True):
        g = groups[items[k.work_item].group]
        out.append({
            "entry": k.entry, "kind": g.kind.value, "ops": [n.op.value for n in g.nodes],
            "bytes": sum(n.type.nbytes for n in g.inputs if not is_inlined(n))
            + sum(n.type.nbytes for n in g.outputs),
            "flops": sum(flops(n.op, n.type, tuple(s.type for s in n.srcs), dict(n.attrs))
                         for n in g.nodes),
            "us": us})
    return out


def costs_task(program: str, size: str, seed: int, variant: str, pipeline: str,
               device: str | None, repeats: int, run: bool,
               calibration: str | None) -> dict[str, Any]:
    """One (program, variant): predicted costs under every model, kernel time."""
    import time

    import accy
    from accy.egraph.cost import program_cost
    from accy.egraph.kernel_cost import load_calibration
    from accy.experiments import records
    from accy.experiments.baselines import expected
    from accy.ir.program import Stage

    bench = benchmark(program)
    prog = bench.program(size)
    runtime, target, no_device = (measure._runtime(device) if run
                                  else (None, None, "not asked to run"))
    capture = _Capture()
    start = time.perf_counter_ns()
    job = accy.prepare(prog, pipeline, target=target, instruments=[capture])
    prepare_ms = (time.perf_counter_ns() - start) / 1e6
    priced = capture.program or job.products[Stage.contract].program
    models: dict[str, Any] = {"flops-bytes": "flops-bytes", "kernels": "kernels"}
    if calibration is not None:
        models["measured"] = load_calibration(calibration)
    row: dict[str, Any] = {
        "program": program, "size": size, "seed": seed, "variant": variant,
        "pipeline": job.pipeline.text(), "priced_fingerprint": priced.fingerprint(),
        "policy": VARIANTS[variant][2],
        "cost": {name: program_cost(priced, m) for name, m in models.items()},
        "kernels": job.kernel_count, "bytes_moved": job.product.buffers.bytes_moved,
        "correct": None,
    }
    if "measured" in models:  # the same calibration over the kernels fusion made
        row["cost"]["measured-groups"] = group_cost(job.product, models["measured"])
    measured: dict[str, Any] = {"prepare_ms": prepare_ms, "kernel_ms": None,
                                "kernel_ms_min": None}
    if runtime is not None:
        inputs = bench.inputs(size, seed)
        timed = measure._run(job, runtime, inputs, repeats)
        err = measure.max_rel_error(timed.pop("outputs"), expected(program, bench.dims(size),
                                                                   inputs))
        each = timed.pop("kernel_us_each")
        measured.update(timed, max_rel_error=err)
        row["correct"] = bool(err <= measure.TOLERANCE)
        if len(each) == job.kernel_count:
            row["kernel_detail"] = kernel_detail(job.product, each)
    row["measured"] = measured
    if no_device and run:
        row["device_error"] = no_device
    row["provenance"] = records.provenance(device if runtime is not None else False)
    return row


def run(options: SweepOptions, executor: Executor | None = None,
        calibration: str | None = None, variants: tuple[str, ...] | None = None
        ) -> dict[str, Any]:
    """Run the sweep (programs x variants x seeds) and summarize it. ``calibration``: the
    measured model's file; by default the device's, calibrated first when missing (without
    a device: the measured model and its variants are left out)."""
    names = tuple(variants or VARIANTS)
    if calibration is None and options.run:
        from accy.errors import DeviceError
        from accy.experiments.calibrate import calibrate

        try:
            calibration = str(calibrate(options.device))
        except DeviceError:  # no device: the tasks say so in their rows; nothing to fit
            calibration = None
    if calibration is None:
        names = tuple(v for v in names if VARIANTS[v][0] is None
                      or VARIANTS[v][0].get("cost") != "measured")
    tasks = [Task((b.name, names.index(v), seed), "accy.experiments.costs:costs_task",
                  {"program": b.name, "size": options.suite, "seed": seed, "variant": v,
                   "pipeline": pipeline_for(v, options.device), "device": options.device,
                   "repeats": options.repeats, "run": options.run,
                   "calibration": calibration})
             for b in benchmarks(options.programs) for v in names for seed in options.seeds]
    result = run_tasks("costs", tasks, options, executor, "costs")
    result["calibration"] = calibration
    result["summary"] = summarize(result["rows"])
    return result


def spearman(xs: list[float], ys: list[float]) -> float | None:
    """Spearman's rho (ties ranked by their mean rank); None when either side is constant
    or there are fewer than three points."""
    from scipy.stats import spearmanr

    if len(xs) < 3 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return None
    return float(spearmanr(xs, ys).statistic)


def _points(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per program: one point per (priced program, fusion policy), time the median."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        if r["measured"].get("kernel_ms") is None:
            continue
        groups.setdefault((r["program"], r["priced_fingerprint"], r["policy"]), []).append(r)
    out: dict[str, list[dict[str, Any]]] = {}
    for (program, _, _), group in sorted(groups.items()):
        out.setdefault(program, []).append({
            "variants": sorted(g["variant"] for g in group), "cost": group[0]["cost"],
            "kernels": group[0]["kernels"],
            "ms": statistics.median(g["measured"]["kernel_ms"] for g in group),
            "ms_best": statistics.median(g["measured"].get("kernel_ms_min")
                                         or g["measured"]["kernel_ms"] for g in group)})
    return out


def _pairs(points: list[dict[str, Any]], model: str) -> tuple[float, int]:
    agree, judged = 0.0, 0
    for a, b in itertools.combinations(points, 2):
        if abs(a["ms"] - b["ms"]) <= NOISE * max(a["ms"], b["ms"]):
            continue
        judged += 1
        ca, cb = a["cost"][model], b["cost"][model]
        agree += 0.5 if ca == cb else float((ca < cb) == (a["ms"] < b["ms"]))
    return agree, judged


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per model: pooled and within-program Spearman, pairwise agreement (module docstring);
    per program: its points."""
    by = _points(rows)
    models = [m for m in MODELS if any(m in p["cost"] for ps in by.values() for p in ps)]
    out: dict[str, Any] = {"models": {}, "programs": by, "noise": NOISE}
    for m in models:
        pts = [p for ps in by.values() for p in ps if m in p["cost"]]
        within = {prog: spearman([p["cost"][m] for p in ps], [p["ms"] for p in ps])
                  for prog, ps in by.items()}
        agree = judged = 0.0
        for ps in by.values():
            a, j = _pairs(ps, m)
            agree, judged = agree + a, judged + j
        vals = [v for v in within.values() if v is not None]
        out["models"][m] = {
            "spearman": spearman([p["cost"][m] for p in pts], [p["ms"] for p in pts]),
            "spearman_best": spearman([p["cost"][m] for p in pts],
                                      [p["ms_best"] for p in pts]),
            "points": len(pts), "within": statistics.fmean(vals) if vals else None,
            "within_programs": within, "pairs": agree / judged if judged else None,
            "pairs_judged": int(judged)}
    return out


def _f(x: float | None, digits: int = 2) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def tables(result: dict[str, Any]) -> list[str]:
    """Markdown: the models' correlations, then per program its points."""
    s = result["summary"]
    lines = ["**Predicted cost against measured kernel time** (Spearman ρ against the median "
             "of the timed calls; `best`: against the fastest call; `within`: mean over "
             "programs of ρ among one program's variants; `pairs`: variant pairs more than "
             f"{int(100 * s['noise'])}% apart in time that the model orders as the clock).",
             "", "| model | ρ (all points) | ρ best | points | ρ within programs | "
             "pairs agreeing | pairs judged |", "|---|---|---|---|---|---|---|"]
    for m, e in s["models"].items():
        lines.append(f"| {m} | {_f(e['spearman'])} | {_f(e.get('spearman_best'))} | "
                     f"{e['points']} | {_f(e['within'])} | {_f(e['pairs'])} | "
                     f"{e['pairs_judged']} |")
    models = list(s["models"])
    lines += ["", "**Per program** (ρ among its variants per model).", "",
              "| program | points | " + " | ".join(models) + " |",
              "|---|---|" + "---|" * len(models)]
    for prog, pts in s["programs"].items():
        lines.append(f"| {prog} | {len(pts)} | " + " | ".join(
            _f(s["models"][m]["within_programs"].get(prog)) for m in models) + " |")
    lines += ["", "**Points** (variants merged where they price the same program under the "
              "same fusion policy).", "",
              "| program | variants | kernels | kernel ms | " + " | ".join(models) + " |",
              "|---|---|---|---|" + "---|" * len(models)]
    for prog, pts in s["programs"].items():
        for p in sorted(pts, key=lambda p: p["ms"]):
            lines.append(f"| {prog} | {', '.join(p['variants'])} | {p['kernels']} | "
                         f"{p['ms']:.3f} | " + " | ".join(
                             f"{p['cost'].get(m, 0):.3g}" for m in models) + " |")
    return lines
