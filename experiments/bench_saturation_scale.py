"""Benchmark: saturation budgets at 100, 1,000 and 10,000 nodes (issue #13, item 5).

    python experiments/bench_saturation_scale.py [--sizes 100,1000,10000]
        [--programs transformer,nasrnn,elementwise] [--no-fast-math] [--no-tracemalloc]
        [--region-context N] [--patience N] [--seeds N]
        [--out results/bench_saturation_scale.json]

Three program families, each built at about the target number of operations: a transformer
stack (layer norm, multi-head attention with softmax, GELU MLP, residuals, repeated), a
NasRNN stack (the NasRNN-like cell of ``accy.experiments.suite`` unrolled over time steps),
and random elementwise DAGs (adds, multiplies, subtractions, maxima of reused values: the
program that explodes under fast-math), ``--seeds`` of them per size (5): one random program's
gain says little about its size (seeds 0-5 at 1,000 ops gain 0.8-2.9%), so a size's gain is
their mean. Each runs through ``rewriting.rewrite_program`` as
the ``saturate`` pass runs it with its defaults: time and node limits scaled with the program
(``accy.egraph.defaults``), region by region above ``region-size`` (2000), each region with
its inputs' definitions ``region-context`` deep, ``patience``, large regions in the worker
process killed at the deadline.

Reported per run: the time limit, the wall time of the whole pass (e-graph build,
saturation, extraction, region acceptance, stitching), whether it ended within budget (wall
time at most the limit plus max(10% of it, 0.5 s)), the largest e-graph (e-nodes), the cost
gain, the peak memory of this process's Python objects during the run (tracemalloc; it slows
Python down, ``--no-tracemalloc`` to leave it off) and the worker's peak resident memory.
The saturation worker is started (``worker.warm_up``) before the first measurement.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import math
import platform
import resource
import sys
import time
import tracemalloc
from typing import Any

import numpy as np

import accy
import rewrites
from accy.builder import einsum, trace
from accy.egraph import defaults
from accy.experiments.records import git_commit, timestamp, versions, write_json
from accy.experiments.suite import nasrnn_cell
from accy.ir.ops import Op
from accy.passes import rewriting
from accy.passes.tensor.saturate import DEFAULT_RULESETS

# whether this tree has budgets scaled with the program (region-size, the worker); main
# before them is measured at its pass's fixed defaults (2 s, 20 000 e-nodes)
_SCALED = "region_size" in inspect.signature(rewriting.rewrite_program).parameters
# the pass's other defaults where this tree has them (patience, region context)
_EXTRA = {k: getattr(defaults, f"DEFAULT_{k.upper()}") for k in ("patience", "region_context")
          if k in inspect.signature(rewriting.rewrite_program).parameters
          and hasattr(defaults, f"DEFAULT_{k.upper()}")}
SLACK_S, SLACK_SHARE = 0.5, 0.10  # a run may end max(10%, 0.5 s) past its time limit


def _operations(program: accy.Program) -> int:
    """IR nodes other than parameters and constants (``rewriting.operations``)."""
    return sum(n.op not in (Op.PARAM, Op.CONSTANT) for n in program.nodes())


# ---- programs -----------------------------------------------------------------------------


def transformer_stack(layers: int, seq: int = 8, model: int = 32, heads: int = 2
                      ) -> accy.Program:
    """``layers`` pre-norm transformer blocks: attention and a GELU MLP with residuals."""
    dh = model // heads

    def norm(x):
        mu = x.mean(axes=-1, keepdims=True)
        xc = x - mu
        return xc / ((xc ** 2.0).mean(axes=-1, keepdims=True) + 1e-5).sqrt()

    def lin(x, w):
        return einsum("si,oi->so", x, w)

    def stack(x, wq, wk, wv, wo, w1, w2):
        for _ in range(layers):
            h = norm(x)
            q, k, v = (lin(h, w).reshape(seq, heads, dh) for w in (wq, wk, wv))
            s = einsum("qhd,khd->hqk", q, k) / math.sqrt(dh)
            e = (s - s.max(axes=-1, keepdims=True)).exp()
            p = e / e.sum(axes=-1, keepdims=True)
            x = x + lin(einsum("hqk,khd->qhd", p, v).reshape(seq, model), wo)
            x = x + lin(lin(norm(x), w1).gelu(), w2)
        return x

    m = accy.f32[model, model]
    return trace(stack, accy.f32[seq, model], m, m, m, m, accy.f32[4 * model, model],
                 accy.f32[model, 4 * model])


def nasrnn_stack(steps: int, batch: int = 4, hidden: int = 16) -> accy.Program:
    """The NasRNN-like cell of the benchmark suite unrolled over ``steps`` time steps."""
    b, h = batch, hidden

    def unrolled(xs, state, wx, wh):
        for t in range(steps):
            state = nasrnn_cell(xs[t:t + 1].reshape(b, h), state, wx, wh)
        return state

    return trace(unrolled, accy.f32[steps, b, h], accy.f32[b, h], accy.f32[8, h, h],
                 accy.f32[8, h, h])


def elementwise_dag(ops: int, seed: int = 0, n: int = 16) -> accy.Program:
    """Random elementwise ops over four vectors, recent values reused often."""
    rng = np.random.default_rng(seed)
    b = accy.Builder()
    t = b.tensor(accy.DType.f32, (n,))
    f = b.begin_function("dag", [t] * 4, ["a", "b", "c", "d"])
    pool = [f.param(i) for i in range(4)]
    while len(pool) - 4 < ops:
        x = pool[len(pool) - 1 - min(int(rng.geometric(0.2)) - 1, len(pool) - 1)]
        y = pool[int(rng.integers(len(pool)))]
        k = int(rng.integers(5))
        v = (x + y if k == 0 else x * y if k == 1 else x - y if k == 2
             else accy.maximum(x, y) if k == 3 else x * 2.0)
        if all(v.node is not p.node for p in pool[-8:]):  # hash-consing: skip repeats
            pool.append(v)
    total = pool[-1]
    used = {id(s) for v in pool for s in v.node.srcs}
    for v in pool[4:-1]:
        if id(v.node) not in used:
            total = total + v
    f.return_(total)
    f.finish()
    return b.finish()


def build(family: str, target: int, seed: int = 0) -> accy.Program:
    """A program of ``family`` with about ``target`` operations (``seed``: the random DAG's)."""
    if family == "elementwise":
        return elementwise_dag(target, seed)
    make = transformer_stack if family == "transformer" else nasrnn_stack
    per = _operations(make(2)) - _operations(make(1))
    return make(max(1, round(target / per)))


# ---- measuring ------------------------------------------------------------------------------


def measure(program: accy.Program, names: tuple[str, ...], *, use_tracemalloc: bool
            ) -> dict[str, Any]:
    ops = _operations(program)
    if use_tracemalloc:
        tracemalloc.start()
    start = time.perf_counter()
    if _SCALED:
        out = rewriting.rewrite_program(program, DEFAULT_RULESETS, names,
                                        iterations=defaults.DEFAULT_ITERATIONS,
                                        node_limit=None, time_limit_s=None, cost="flops-bytes",
                                        region_size=defaults.DEFAULT_REGION_SIZE, **_EXTRA)
    else:  # a tree without scaled budgets (main before them): the pass's fixed defaults
        out = rewriting.rewrite_program(program, DEFAULT_RULESETS, names,
                                        iterations=defaults.DEFAULT_ITERATIONS,
                                        node_limit=defaults.DEFAULT_NODE_LIMIT,
                                        time_limit_s=defaults.DEFAULT_TIME_LIMIT_S,
                                        cost="flops-bytes")
    wall = time.perf_counter() - start
    peak = 0
    if use_tracemalloc:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    r = out.report
    limit = getattr(out, "time_limit_s", defaults.DEFAULT_TIME_LIMIT_S)
    parts = getattr(out, "regions", ()) or (out,)
    return {
        "operations": ops, "nodes": len(program.nodes()), "time_limit_s": round(limit, 3),
        "wall_s": round(wall, 3),
        "within_budget": wall <= limit + max(SLACK_SHARE * limit, SLACK_S),
        "regions": len(parts),
        "workers": {k: sum(getattr(o, "worker", "") == k for o in parts)
                    for k in ("", "finished", "killed", "late")},
        "stop_reasons": sorted({o.report.stop_reason if o.report else "skipped"
                                for o in parts}),
        "e_nodes": r.e_nodes if r else 0,
        "cost_before": out.cost_before, "cost_after": out.cost_after,
        "gain": round(1 - out.cost_after / out.cost_before, 4) if out.cost_before else 0.0,
        "python_peak_mib": round(peak / 2**20, 1),
        "worker_maxrss_mib": round(getattr(out, "worker_maxrss_kb", 0) / 1024, 1),
        "children_maxrss_mib": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
                                     / 1024, 1),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--programs", default="transformer,nasrnn,elementwise")
    parser.add_argument("--no-fast-math", action="store_true")
    parser.add_argument("--no-tracemalloc", action="store_true")
    parser.add_argument("--region-context", type=int, default=None,
                        help="saturate{region-context=N} (default: the pass's)")
    parser.add_argument("--patience", type=int, default=None,
                        help="saturate{patience=N} (default: the pass's)")
    parser.add_argument("--seeds", type=int, default=5,
                        help="random DAGs per size (seeds 0..N-1); their mean gain is its gain")
    parser.add_argument("--out", default="results/bench_saturation_scale.json")
    args = parser.parse_args(argv)
    for key in ("region_context", "patience"):
        if getattr(args, key) is not None:
            if key not in _EXTRA:
                parser.error(f"--{key.replace('_', '-')}: this tree's pass has no such option")
            _EXTRA[key] = getattr(args, key)
    rewrites.load()
    names = rewriting.select(DEFAULT_RULESETS, fast_math=not args.no_fast_math)
    if _SCALED:
        importlib.import_module("accy.passes.rewrite_worker").warm_up()
    measure(build("transformer", 100), names, use_tracemalloc=False)  # warm caches
    rows = []
    print(f"{'program':<12} {'ops':>6} {'limit s':>7} {'wall s':>7} {'budget':>6} "
          f"{'regions':>7} {'e-nodes':>8} {'gain':>6} {'py MiB':>7} {'worker MiB':>10}  stops")
    for family in args.programs.split(","):
        for size in (int(s) for s in args.sizes.split(",")):
            for seed in range(args.seeds if family == "elementwise" else 1):
                row = {"program": family, "target": size, "seed": seed,
                       **measure(build(family, size, seed), names,
                                 use_tracemalloc=not args.no_tracemalloc)}
                rows.append(row)
                _print(family, row)
    gains = _gains(rows)
    for (family, size), g in gains.items():
        print(f"{family:<12} size {size:>6}: gain {100 * g['mean']:.2f}% (mean of {g['runs']}; "
              f"{100 * g['min']:.1f}-{100 * g['max']:.1f}%)")
    result = {"benchmark": "saturation-scale", "args": vars(args), "versions": versions(),
              "git_commit": git_commit(), "platform": platform.platform(),
              "date": timestamp(), "rows": rows,
              "gains": [{"program": f, "target": s, **g} for (f, s), g in gains.items()],
              "all_within_budget": all(r["within_budget"] for r in rows),
              "scaled_budgets": _SCALED, "accy_path": accy.__file__}
    write_json(result, args.out)
    return result


def _gains(rows: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    """Per program and size: the mean, least and greatest gain over its runs (seeds)."""
    by: dict[tuple[str, int], list[float]] = {}
    for r in rows:
        by.setdefault((r["program"], r["target"]), []).append(r["gain"])
    return {k: {"mean": round(sum(g) / len(g), 4), "min": min(g), "max": max(g),
                "runs": len(g)} for k, g in by.items()}


def _print(family: str, row: dict[str, Any]) -> None:
    print(f"{family:<12} {row['operations']:>6} {row['time_limit_s']:>7.2f} "
          f"{row['wall_s']:>7.2f} {'ok' if row['within_budget'] else 'OVER':>6} "
          f"{row['regions']:>7} {row['e_nodes']:>8} {100 * row['gain']:>5.1f}% "
          f"{row['python_peak_mib']:>7.1f} {row['worker_maxrss_mib']:>10.1f}  "
          f"{','.join(row['stop_reasons'])}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
