"""Benchmark: equality saturation on programs of 10 to 1000 nodes, and the showcase programs.

    python experiments/bench_saturation.py [--sizes 10,30,100,300,1000] [--seeds 2]
        [--iterations 12] [--node-limit 20000] [--time-limit 2.0] [--match-limit N]
        [--no-fast-math]
        [--out results/bench_saturation.json]

1. Random programs: elementwise and einsum mixes over f32[16,16] matrices and f32[16]
   vectors, seeded, salted with patterns whose redundancy is known (``a*b + a*c``, ``x*1``,
   ``-(-x)``, transpose pairs, right-nested matmul chains, ``log(softmax(x))``, sums of
   broadcasts). Each is saturated with every rule set (``saturate``'s defaults, fast-math on
   unless ``--no-fast-math``) within the budget, then extracted under ``flops-bytes``.
   Reported: saturation time and total time (e-graph, saturation, extraction), e-graph size
   (e-nodes, e-classes), stop reason, extracted cost before and after, the share of the time
   limit used, and whether the run stayed within its budget (time at most 10% over the limit,
   e-nodes within the limit).
2. The showcase: the programs the saturation tests must improve, with their costs.

Prints a table and writes JSON with versions, the git commit, the arguments and every row.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import accy
import rewrites
from accy.builder import FunctionBuilder, Value, einsum
from accy.experiments.records import git_commit, timestamp, versions, write_json
from accy.passes import rewriting
from accy.passes.tensor.saturate import DEFAULT_RULESETS

BUDGET_SLACK = 1.10  # a run may end at most 10% past its time limit
N = 16  # matrices are N x N, vectors N


# ---- programs -----------------------------------------------------------------------------


def random_program(nodes: int, seed: int) -> accy.Program:
    """About ``nodes`` IR nodes of elementwise and einsum ops with known redundancy; every
    value reaches the result (values nothing else used are added into it)."""
    rng = np.random.default_rng(seed)
    b = accy.Builder()
    m_t, v_t = b.tensor(accy.DType.f32, (N, N)), b.tensor(accy.DType.f32, (N,))
    p_t, q_t = b.tensor(accy.DType.f32, (N, 4)), b.tensor(accy.DType.f32, (4, N))
    f = b.begin_function("mix", [m_t, m_t, m_t, v_t, v_t, p_t, q_t],
                         ["a", "b", "c", "u", "v", "p", "q"])
    mats = [f.param(i) for i in range(3)]
    vecs = [f.param(3), f.param(4)]
    p, q = f.param(5), f.param(6)

    def pick(pool: list[Value]) -> Value:  # recent values more often: a deep DAG
        return pool[len(pool) - 1 - min(int(rng.geometric(0.3)) - 1, len(pool) - 1)]

    patterns: list[Callable[[], Value]] = [
        lambda: _factor(pick(mats), pick(mats), pick(mats)),
        lambda: pick(mats) * 1.0,
        lambda: -(pick(mats).__neg__()),
        lambda: pick(mats).T.exp().T,
        lambda: einsum("ij,jk->ik", pick(mats), einsum("ij,jk->ik", p, q)),
        lambda: pick(mats).softmax(-1).log(),
        lambda: pick(mats) + pick(vecs).broadcast_to(N, N).sum(axes=(0,)),
        lambda: _unary(rng, pick(mats)),
        lambda: _binary(f, rng, pick(mats), pick(mats)),
        lambda: pick(mats) @ pick(mats),
        lambda: pick(mats) + pick(vecs),
    ]
    weights = np.array([2, 1, 1, 1, 1, 1, 1, 4, 5, 1, 1], dtype=float)
    while _size(mats + vecs) < nodes:
        mats.append(patterns[int(rng.choice(len(patterns), p=weights / weights.sum()))]())
    used = {id(s) for v in mats for s in v.node.srcs}
    total = mats[-1]
    for v in mats[3:-1]:
        if id(v.node) not in used:
            total = total + v
    f.return_(total)
    f.finish()
    return b.finish()


def _factor(a: Value, b: Value, c: Value) -> Value:
    return a * b + a * c


def _unary(rng: np.random.Generator, x: Value) -> Value:
    name = ("exp", "tanh", "sigmoid", "relu", "neg", "abs")[int(rng.integers(6))]
    return -x if name == "neg" else abs(x) if name == "abs" else getattr(x, name)()


def _binary(f: FunctionBuilder, rng: np.random.Generator, x: Value, y: Value) -> Value:
    name = ("add", "sub", "mul", "max")[int(rng.integers(4))]
    return accy.maximum(x, y) if name == "max" else getattr(f, name)(x, y)


def _size(values: list[Value]) -> int:
    from accy.ir.node import topological

    return sum(1 for _ in topological(v.node for v in values))


@accy.function
def showcase_factor(a: accy.f32[4096], b: accy.f32[4096], c: accy.f32[4096]):
    return a * b + a * c


@accy.function
def showcase_chain(a: accy.f32[64, 8], b: accy.f32[8, 64], c: accy.f32[64, 8]):
    return (a @ b) @ c


@accy.function
def showcase_transpose(x: accy.f32[64, 32]):
    return x.T.T.exp()


@accy.function
def showcase_log_softmax(x: accy.f32[32, 100]):
    return x.softmax(-1).log()


@accy.function
def showcase_sum_broadcast(x: accy.f32[256]):
    return x.broadcast_to(64, 256).sum(axes=(0,))


SHOWCASE = {  # also what tests/rewrite_rules/test_must_show.py checks
    "a*b + a*c": (showcase_factor, True), "(a@b)@c": (showcase_chain, True),
    "(x^T)^T": (showcase_transpose, False), "log(softmax(x))": (showcase_log_softmax, False),
    "sum(broadcast(x))": (showcase_sum_broadcast, False),
}


# ---- measuring ------------------------------------------------------------------------------


def measure(program: accy.Program, *, fast_math: bool, iterations: int, node_limit: int,
            time_limit: float, match_limit: int | None = None) -> dict[str, Any]:
    """Saturate with every rule set and extract, as the saturate pass does, and report."""
    names = rewriting.select(DEFAULT_RULESETS, fast_math=fast_math)
    start = time.perf_counter()
    out = rewriting.rewrite_program(program, DEFAULT_RULESETS, names, iterations=iterations,
                                    node_limit=node_limit, time_limit_s=time_limit,
                                    cost="flops-bytes", match_limit=match_limit)
    total = time.perf_counter() - start
    r = out.report
    row: dict[str, Any] = {
        "nodes": len(program.nodes()), "total_s": round(total, 4),
        "cost_before": out.cost_before, "cost_after": out.cost_after,
        "improvement": round(1 - out.cost_after / out.cost_before, 4) if out.cost_before
        else 0.0,
        "changed": out.changed, "skipped": out.skipped,
    }
    if r is None:
        return {**row, "saturation_s": 0.0, "e_nodes": 0, "e_classes": 0,
                "initial_e_nodes": 0, "iterations": 0, "stop_reason": "skipped",
                "predicted_stop": False, "rolled_back": False, "time_share": 0.0,
                "within_budget": True,
                "rules_fired": {}}
    return {
        **row, "saturation_s": round(r.seconds, 4),
        "e_nodes": r.e_nodes, "e_classes": r.e_classes, "initial_e_nodes": r.initial_e_nodes,
        "iterations": r.kept_iterations, "stop_reason": r.stop_reason,
        "predicted_stop": r.predicted, "rolled_back": r.rolled_back,
        "time_share": round(r.seconds / time_limit, 3),  # of the time limit
        "within_budget": r.seconds <= BUDGET_SLACK * time_limit and r.e_nodes <= r.node_limit,
        "rules_fired": {x.name: x.matches for x in r.rules if x.matches},
    }


def _print_table(rows: list[dict[str, Any]], label: str) -> None:
    print(f"{label:<18} {'nodes':>5} {'e-nodes':>15} {'e-classes':>9} {'it':>3} "
          f"{'stop':<15} {'sat s':>7} {'total s':>7} {'cost before':>12} {'after':>12} "
          f"{'gain':>6} {'t/limit':>7}  budget")
    for r in rows:
        print(f"{r['name']:<18} {r['nodes']:>5} {r['initial_e_nodes']:>6} -> {r['e_nodes']:>6} "
              f"{r['e_classes']:>9} {r['iterations']:>3} {r['stop_reason']:<15} "
              f"{r['saturation_s']:>7.3f} {r['total_s']:>7.3f} {r['cost_before']:>12} "
              f"{r['cost_after']:>12} {100 * r['improvement']:>5.1f}% {r['time_share']:>7.2f}  "
              f"{'ok' if r['within_budget'] else 'OVER'}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,30,100,300,1000",
                        help="program sizes in IR nodes, comma-separated")
    parser.add_argument("--seeds", type=int, default=2, help="programs per size")
    parser.add_argument("--iterations", type=int, default=12)
    parser.add_argument("--node-limit", type=int, default=20_000)
    parser.add_argument("--time-limit", type=float, default=2.0, help="seconds per run")
    parser.add_argument("--match-limit", type=int, default=None,
                        help="egglog backoff: most matches of a rule per step (default: off)")
    parser.add_argument("--no-fast-math", action="store_true",
                        help="only exact and stable rules (saturate's default)")
    parser.add_argument("--no-showcase", action="store_true")
    parser.add_argument("--out", default="results/bench_saturation.json")
    args = parser.parse_args(argv)
    budget = {"iterations": args.iterations, "node_limit": args.node_limit,
              "time_limit": args.time_limit, "match_limit": args.match_limit}
    fast = not args.no_fast_math
    rewrites.load()
    measure(random_program(10, 99), fast_math=fast, **budget)  # warm imports outside timings

    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        for seed in range(args.seeds):
            row = measure(random_program(size, seed), fast_math=fast, **budget)
            rows.append({"name": f"random {size}/{seed}", "target_nodes": size, "seed": seed,
                         **row})
    _print_table(rows, "program")
    showcase = []
    if not args.no_showcase:
        for name, (program, needs_fast) in SHOWCASE.items():
            row = measure(program, fast_math=needs_fast, **budget)
            showcase.append({"name": name, "fast_math": needs_fast, **row})
        print()
        _print_table(showcase, "showcase")
    over = [r["name"] for r in rows + showcase if not r["within_budget"]]
    print(f"\nbudget: {len(rows) + len(showcase) - len(over)} of {len(rows) + len(showcase)} "
          f"runs within limits (time <= {BUDGET_SLACK:.0%} of {args.time_limit:g} s, "
          f"e-nodes <= {args.node_limit})" + (f"; over: {', '.join(over)}" if over else ""))
    result = {
        "benchmark": "saturation", "args": vars(args), "budget": budget, "fast_math": fast,
        "rulesets": list(DEFAULT_RULESETS), "versions": versions(), "git_commit": git_commit(),
        "platform": platform.platform(), "processor": platform.processor(),
        "date": timestamp(),
        "rows": rows, "showcase": showcase, "all_within_budget": not over,
    }
    write_json(result, args.out)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
