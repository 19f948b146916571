"""Benchmark (issue #17): slicing under memory limits, accy against cotengra.

    python experiments/bench_slicing.py [--sizes 30,80,120,200] [--families regular,connected]
        [--fractions 4,16,64] [--seed 0] [--out results/bench_slicing.json]

For each instance (einsum_benchmark's ``regular(n, 3, d_min=2, d_max=4)`` and
``connected_network`` generators, as in ``bench_paths_scale.py``; accy's look-alikes without
einsum_benchmark) a base path is found once (accy ``hyper``, 16 trials: deterministic),
polished to a fixed point by accy's subtree reconfiguration and cotengra's
``subtree_reconfigure`` in turn (so that neither slicer's reconfiguration gains by merely
improving the unsliced path: the overheads measure slicing), and its largest intermediate
``S`` taken; for each memory limit ``S // k`` (``k`` in ``--fractions``)
the methods slice it:

* ``accy:slice`` -- :func:`accy.contraction.slice_path` on the base path (letters only);
* ``accy:slice+search`` -- the same with ``search=True`` (``slice_and_search``: each letter
  followed by subtree reconfiguration for the sliced sizes), what ``search_path`` and
  ``einsum-lowering`` use;
* ``cotengra:slice`` -- ``ContractionTree.slice(target_size=limit)`` (``SliceFinder``, 16
  randomized repeats) on the base path;
* ``cotengra:slice+reconf`` -- ``ContractionTree.slice_and_reconfigure(target_size=limit)``
  (it takes no seed: the best of three runs).

Every result is costed by :func:`accy.contraction.sliced_cost` (FLOPs in accy's units,
every slice and the additions of their results included) and given as its *overhead*: total
FLOPs over the base path's unsliced FLOPs. Each one's largest intermediate per slice is
checked against the limit.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_paths_scale import problems  # noqa: E402

import accy  # noqa: E402,F401
from accy.contraction import STRATEGIES, PathOptions, path_cost, slice_path, sliced_cost  # noqa: E402,E501
from accy.experiments.records import provenance, write_json  # noqa: E402

METHODS = ("accy:slice", "accy:slice+search", "cotengra:slice", "cotengra:slice+reconf")


def slicers(inputs: list[str], out: str, sizes: dict[str, int], path: list
            ) -> dict[str, Any]:
    """Method name -> (limit -> (linear path, sliced letters))."""
    def accy_fn(search: bool) -> Any:
        def fn(limit: int) -> tuple[list, tuple[str, ...]]:
            c = slice_path(inputs, out, sizes, path, limit, search=search)
            return c.path, c.letters
        return fn

    table: dict[str, Any] = {"accy:slice": accy_fn(False), "accy:slice+search": accy_fn(True)}
    try:
        import cotengra as ctg
    except ImportError:
        return table
    tree = ctg.ContractionTree.from_path([list(t) for t in inputs], list(out), sizes, path=path)

    def ctg_slice(limit: int) -> tuple[list, tuple[str, ...]]:
        t = tree.slice(target_size=limit, max_repeats=16, seed=0)
        return path, tuple(t.sliced_inds)

    def ctg_reconf(limit: int) -> tuple[list, tuple[str, ...]]:  # unseeded: best of three
        runs = [tree.slice_and_reconfigure(target_size=limit) for _ in range(3)]
        t = min(runs, key=lambda t: sliced_cost(inputs, out, sizes, t.get_path(),
                                                t.sliced_inds).total.flops)
        return [tuple(s) for s in t.get_path()], tuple(t.sliced_inds)

    table["cotengra:slice"], table["cotengra:slice+reconf"] = ctg_slice, ctg_reconf
    return table


def polish(inputs: list[str], out: str, sizes: dict[str, int], path: list) -> list:
    """``path`` reconfigured by accy and cotengra in turn until neither makes it cheaper."""
    from accy.contraction.beam import reconfigure
    from accy.contraction.cost import linear_to_ssa, network, ssa_to_linear

    net, n = network(inputs, out, sizes), len(inputs)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 4 * n + 200))
    for _ in range(4):
        before = path_cost(inputs, out, sizes, path).flops
        path = ssa_to_linear(reconfigure(net, linear_to_ssa(path, n), PathOptions()), n)
        try:
            import cotengra as ctg
        except ImportError:
            break
        tree = ctg.ContractionTree.from_path([list(t) for t in inputs], list(out), sizes,
                                             path=path)
        other = [tuple(s) for s in tree.subtree_reconfigure().get_path()]
        if path_cost(inputs, out, sizes, other).flops < path_cost(inputs, out, sizes,
                                                                    path).flops:
            path = other
        if path_cost(inputs, out, sizes, path).flops >= before:
            break
    return path


def run(args: argparse.Namespace) -> dict[str, Any]:
    rows = []
    for inst in problems(args.families, args.sizes, 1, args.seed):
        inputs, out, sizes = inst["problem"]
        start = time.perf_counter()
        path = STRATEGIES["hyper"](inputs, out, sizes, PathOptions(max_repeats=16))
        path = polish(inputs, out, sizes, path)
        base = path_cost(inputs, out, sizes, path)
        base_s = time.perf_counter() - start
        table = slicers(inputs, out, sizes, path)
        for k in args.fractions:
            limit = base.size // k
            row: dict[str, Any] = {"family": inst["family"], "n": inst["n"],
                                   "source": inst["source"], "tensors": len(inputs),
                                   "base_flops": base.flops, "base_size": base.size,
                                   "base_seconds": base_s, "fraction": k, "limit": limit}
            for name, fn in table.items():
                start = time.perf_counter()
                try:
                    sliced_path, letters = fn(limit)
                except Exception as e:  # report any method's failure, keep going
                    row[name] = {"status": f"error: {type(e).__name__}: {str(e)[:80]}"}
                    continue
                seconds = time.perf_counter() - start
                c = sliced_cost(inputs, out, sizes, sliced_path, letters)
                row[name] = {"status": "ok" if c.per_slice.size <= limit else "over limit",
                             "letters": list(letters), "slices": c.slices,
                             "per_slice_size": c.per_slice.size, "total_flops": c.total.flops,
                             "overhead": c.total.flops / base.flops, "seconds": seconds}
            rows.append(row)
            print(line(row, table), flush=True)
    extra = ("cotengra", "kahypar", "einsum_benchmark")
    return {"provenance": provenance(device=False, extra_versions=extra),
            "options": {k: v for k, v in vars(args).items() if k != "out"},
            "methods": [m for m in METHODS if m in rows[0]] if rows else [], "rows": rows}


def ratio(row: dict[str, Any]) -> float | None:
    """accy's best overhead over cotengra's best (None without both)."""
    def best(prefix: str) -> float | None:
        ok = [r["overhead"] for m, r in row.items() if m.startswith(prefix)
              and isinstance(r, dict) and r.get("status") == "ok"]
        return min(ok, default=None)
    a, c = best("accy:"), best("cotengra:")
    return None if a is None or c is None else a / c


def header(table: dict[str, Any]) -> str:
    cols = " | ".join(f"`{m}`" for m in table)
    return (f"| family | n | limit | {cols} | accy / cotengra |\n|---|---|---|"
            + "---|" * (len(table) + 1))


def line(row: dict[str, Any], table: dict[str, Any]) -> str:
    cells = []
    for m in table:
        r = row[m]
        cells.append(f"{r['overhead']:.3g}x / {r['seconds']:.2f}s" if r.get("status") == "ok"
                     else r["status"].split(":")[0])
    q = ratio(row)
    return (f"| {row['family']} | {row['tensors']} | S/{row['fraction']} | " + " | ".join(cells)
            + f" | {'-' if q is None else f'{q:.2f}'} |")


def geomean(xs: list[float]) -> float:
    return math.exp(sum(map(math.log, xs)) / len(xs))


def render(result: dict[str, Any]) -> str:
    """The per-instance table and, per limit, the geometric means over the instances."""
    rows, methods = result["rows"], result["methods"]
    out = [header({m: None for m in methods})]
    out += [line(r, {m: None for m in methods}) for r in rows]
    out += ["", "| limit | " + " | ".join(f"`{m}`" for m in methods)
            + " | accy / cotengra (geomean, worst) |", "|---|" + "---|" * (len(methods) + 1)]
    for k in sorted({r["fraction"] for r in rows}):
        sel = [r for r in rows if r["fraction"] == k]
        cells = []
        for m in methods:
            ok = [r[m]["overhead"] for r in sel if r[m].get("status") == "ok"]
            cells.append(f"{geomean(ok):.3g}x" if len(ok) == len(sel) else "-")
        qs = [q for q in map(ratio, sel) if q is not None]
        cells.append(f"{geomean(qs):.2f}, {max(qs):.2f}" if qs else "-")
        out.append(f"| S/{k} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="30,80,120,200",
                    type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--families", default="regular,connected", type=lambda s: s.split(","))
    ap.add_argument("--fractions", default="4,16,64",
                    type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="results/bench_slicing.json")
    ap.add_argument("--render", metavar="JSON", help="print the tables of an earlier run's "
                    "results and exit")
    args = ap.parse_args(argv)
    if args.render:
        import json

        with open(args.render) as f:
            print(render(json.load(f)))
        return 0
    print("overhead (total FLOPs of all slices over the unsliced base path's) / seconds")
    print(header({m: None for m in METHODS}))
    result = run(args)
    write_json(result, args.out)
    rs = [q for q in map(ratio, result["rows"]) if q is not None]
    if rs:
        print(f"geomean accy/cotengra best overhead: "
              f"{math.exp(sum(map(math.log, rs)) / len(rs)):.3f}, worst {max(rs):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
