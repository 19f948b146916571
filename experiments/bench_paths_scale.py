"""Benchmark (issue #17): contraction paths for 30 to 1,000 tensors, accy against cotengra.

    python experiments/bench_paths_scale.py [--sizes 30,80,200,500,1000] [--repeats 1]
        [--families regular,connected,shuffled-chain] [--hyper-s 1,10] [--cotengra-s 1,10]
        [--seed 0] [--out results/bench_paths_scale.json]

Instances: einsum_benchmark's ``regular(n, 3, d_min=2, d_max=4)`` and
``connected_network`` generators when einsum_benchmark (with its ``generators`` extra) is
installed, else the look-alikes of ``accy.experiments.networks.scale_problem``; plus shuffled
matrix chains. Methods: accy ``greedy``, ``auto`` and ``hyper`` under each of ``--hyper-s`` seconds,
opt_einsum ``greedy``, and cotengra's ``HyperOptimizer`` under each of ``--cotengra-s``
seconds when cotengra is installed (KaHyPar partitioning only if kahypar is). Every path is
costed by ``accy.contraction.path_cost`` (FLOPs in accy's units); the table gives
log10(FLOPs) and search seconds per method, and each method's cost over the best any method
found. Search times, and so the budgeted methods' results, depend on the machine's load.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import time
from collections.abc import Callable
from typing import Any

import opt_einsum

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import accy  # noqa: E402,F401
from accy.contraction import STRATEGIES, PathOptions, path_cost  # noqa: E402
from accy.experiments.networks import SCALE_FAMILIES, scale_problem  # noqa: E402
from accy.experiments.records import provenance, write_json  # noqa: E402

Problem = tuple[list[str], str, dict[str, int]]


def einsum_benchmark_problem(family: str, n: int, seed: int) -> Problem | None:
    """The einsum_benchmark instance of ``family`` (None: not installed or no such family)."""
    try:
        from einsum_benchmark.generators.random import connected_network, regular
    except ImportError:
        return None
    try:
        if family == "regular":
            spec, shapes = regular(n + n % 2, 3, d_min=2, d_max=4, seed=seed)
        elif family == "connected":
            spec, shapes = connected_network(n, regularity=3.0, number_of_output_indices=0,
                                             min_axis_size=2, max_axis_size=4, seed=seed)[:2]
        else:
            return None
    except ImportError:  # einsum_benchmark without its [generators] extra
        return None
    from accy.contraction import parse_spec, sizes_from_shapes

    terms, out = parse_spec(spec)
    return terms, out, sizes_from_shapes(terms, shapes)


def problems(families: list[str], sizes: list[int], repeats: int, seed: int
             ) -> list[dict[str, Any]]:
    out = []
    for family in families:
        for n in sizes:
            for rep in range(repeats):
                s = seed * 1000 + rep
                found = einsum_benchmark_problem(family, n, s)
                source = "einsum_benchmark" if found else "accy"
                if found is None:
                    found = scale_problem(family, n, random.Random(f"{s}-{family}-{n}"))
                out.append({"family": family, "n": n, "repeat": rep, "source": source,
                            "problem": found})
    return out


def methods(hyper_s: list[float], cotengra_s: list[float]) -> dict[str, Callable[[Problem], list]]:
    def accy_fn(name: str, opts: PathOptions | None = None) -> Callable[[Problem], list]:
        return lambda p: STRATEGIES[name](p[0], p[1], p[2], opts)

    def oe_greedy(p: Problem) -> list:
        return opt_einsum.paths.greedy([set(t) for t in p[0]], set(p[1]), p[2])

    table: dict[str, Callable[[Problem], list]] = {
        "accy:greedy": accy_fn("greedy"), "accy:auto": accy_fn("auto"),
        "opt_einsum:greedy": oe_greedy,
    }
    for budget in hyper_s:
        table[f"accy:hyper-{budget:g}s"] = accy_fn("hyper", PathOptions(max_time=budget))
    try:
        import cotengra as ctg
    except ImportError:
        return table
    for budget in cotengra_s:
        def ctg_fn(p: Problem, budget: float = budget) -> list:
            opt = ctg.HyperOptimizer(max_time=budget, max_repeats=1_000_000, minimize="flops",
                                     parallel=False, progbar=False)
            tree = ctg.array_contract_tree([list(t) for t in p[0]], list(p[1]), p[2],
                                           optimize=opt)
            return [tuple(s) for s in tree.get_path()]
        table[f"cotengra:hyper-{budget:g}s"] = ctg_fn
    return table


def run(args: argparse.Namespace) -> dict[str, Any]:
    table = methods(args.hyper_s, args.cotengra_s)
    rows = []
    for inst in problems(args.families, args.sizes, args.repeats, args.seed):
        p = inst["problem"]
        row = {k: v for k, v in inst.items() if k != "problem"}
        row["tensors"], row["indices"] = len(p[0]), len(p[2])
        for name, fn in table.items():
            if name == "accy:auto" and inst["n"] > args.auto_max_n:
                row[name] = {"status": "skipped"}
                continue
            start = time.perf_counter()
            try:
                path = fn(p)
            except Exception as e:  # report any method's failure, keep going
                row[name] = {"status": f"error: {type(e).__name__}: {str(e)[:80]}"}
                continue
            seconds = time.perf_counter() - start
            flops = path_cost(p[0], p[1], p[2], path).flops
            row[name] = {"status": "ok", "flops": flops, "log10_flops": math.log10(max(flops, 1)),
                         "seconds": seconds}
        best = min((r["flops"] for r in row.values() if isinstance(r, dict)
                    and r.get("status") == "ok"), default=None)
        for name in table:
            if row[name].get("status") == "ok":
                row[name]["over_best"] = row[name]["flops"] / best
        rows.append(row)
        print(line(row, table), flush=True)
    extra = ("cotengra", "kahypar", "einsum_benchmark")
    return {"provenance": provenance(device=False, extra_versions=extra),
            "options": {k: v for k, v in vars(args).items() if k != "out"},
            "methods": list(table), "rows": rows}


def header(table: dict[str, Any]) -> str:
    cols = " | ".join(f"`{m}`" for m in table)
    return (f"| family | n | source | {cols} |\n|---|---|---|" + "---|" * len(table))


def line(row: dict[str, Any], table: dict[str, Any]) -> str:
    cells = []
    for m in table:
        r = row[m]
        if r.get("status") == "ok":
            cells.append(f"{r['over_best']:.3g}x / {r['seconds']:.2f}s")
        else:
            cells.append(r["status"].split(":")[0])
    return f"| {row['family']} | {row['tensors']} | {row['source']} | " + " | ".join(cells) + " |"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="30,80,200,500,1000",
                    type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--families", default=",".join(SCALE_FAMILIES),
                    type=lambda s: s.split(","))
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hyper-s", default="1,10", type=lambda s: [float(x) for x in s.split(",")])
    ap.add_argument("--cotengra-s", default="1,10", type=lambda s: [float(x) for x in s.split(",")])
    ap.add_argument("--auto-max-n", type=int, default=1000, help="skip accy:auto above this n")
    ap.add_argument("--out", default="results/bench_paths_scale.json")
    args = ap.parse_args(argv)
    bad = [f for f in args.families if f not in SCALE_FAMILIES]
    if bad:
        ap.error(f"unknown families {bad}; valid: {', '.join(SCALE_FAMILIES)}")
    print("cost over the best method's / search seconds (loaded machine: times are noisy)")
    print(header(methods(args.hyper_s, args.cotengra_s)))
    result = run(args)
    write_json(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
