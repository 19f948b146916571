"""Optimisation benefit: the saturated pipeline against the unsaturated one, end to end.

Per suite program and seed, three pipelines:

``unsaturated``          ``accy-default`` without the ``saturate`` pass (contract-stage
                         canonicalization still runs);
``saturated``            ``accy-default``;
``saturated-fast-math``  ``accy-default`` with ``fast-math=true`` for ``canonicalize`` and
                         ``saturate`` (reassociation, distributivity, einsum re-pathing).

Each records the compile side (prepare time with saturation time, OpenCL build time), the
first call, the steady-state call wall time and kernel time, and the extracted cost and kernel
count, so the summary can say what saturation costs at compile time and what it buys at run
time, per program.
"""

from __future__ import annotations

import statistics
from typing import Any

from accy.experiments import measure
from accy.experiments.executor import Executor, Task
from accy.experiments.runner import SweepOptions, run_tasks
from accy.experiments.suite import benchmarks
from accy.passes.base import Pass

__all__ = ["CONFIGS", "pipeline_for", "run", "summarize"]

CONFIGS = ("unsaturated", "saturated", "saturated-fast-math")


def pipeline_for(config: str) -> str:
    """The pipeline text of a benefit configuration."""
    if config not in CONFIGS:
        raise KeyError(f"unknown configuration {config!r}; valid: {', '.join(CONFIGS)}")

    def edit(p: Pass) -> Pass | None:
        if config == "unsaturated" and p.name == "saturate":
            return None
        if config == "saturated-fast-math" and p.name in ("saturate", "canonicalize"):
            return measure.with_options(p, fast_math=True)
        return p

    return measure.edit_pipeline("accy-default", edit).text()


def benefit_task(program: str, size: str, seed: int, config: str, pipeline: str,
                 device: str | None, repeats: int, run: bool) -> dict[str, Any]:
    """One (program, configuration, seed)."""
    row = measure.measure_program(program, size, seed, pipeline, device=device,
                                  repeats=repeats, run=run, extra={"config": config})
    m = row["measured"]
    parts = (m["prepare_ms"], m["build_ms"], m["first_call_ms"])
    m["end_to_end_ms"] = sum(parts) if all(p is not None for p in parts) else None
    return row


def run(options: SweepOptions, executor: Executor | None = None) -> dict[str, Any]:
    """Run the benefit sweep (programs x configurations x seeds) and summarize it."""
    tasks = [Task((b.name, CONFIGS.index(c), seed), "accy.experiments.benefit:benefit_task",
                  {"program": b.name, "size": options.suite, "seed": seed, "config": c,
                   "pipeline": pipeline_for(c), "device": options.device,
                   "repeats": options.repeats, "run": options.run})
             for b in benchmarks(options.programs) for c in CONFIGS for seed in options.seeds]
    result = run_tasks("benefit", tasks, options, executor, "benefit")
    result["summary"] = summarize(result["rows"])
    return result


def _mean(group: list[dict[str, Any]], key: str) -> float | None:
    vals = [g["measured"][key] for g in group if g["measured"].get(key) is not None]
    return statistics.fmean(vals) if vals else None


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per program and configuration (means over seeds), and the speedups of each saturated
    configuration over ``unsaturated`` (kernel time: best of the timed calls; call wall time:
    median)."""
    by: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for r in rows:
        by.setdefault(r["program"], {}).setdefault(r["config"], []).append(r)
    out: dict[str, Any] = {}
    for program, configs in by.items():
        entry: dict[str, Any] = {}
        for config, group in configs.items():
            entry[config] = {
                "cost": group[0]["cost"]["extracted"], "kernels": group[0]["kernels"],
                "bytes_moved": group[0]["bytes_moved"],
                "correct": all(g["correct"] is not False for g in group),
                **{k: _mean(group, k) for k in ("prepare_ms", "saturation_s", "build_ms",
                                                "first_call_ms", "wall_ms", "kernel_ms",
                                                "kernel_ms_min", "end_to_end_ms")},
            }
        base = entry.get("unsaturated")
        for config, e in entry.items():
            if base is None or config == "unsaturated":
                continue
            for k in ("kernel_ms_min", "wall_ms"):  # kernel time: best of the timed calls
                e[f"{k.removesuffix('_min')}_speedup"] = (
                    base[k] / e[k] if base[k] and e[k] else None)
        out[program] = entry
    return {"programs": out}
