"""Benchmark: accy's contraction path strategies against opt_einsum on random tensor networks.

    python experiments/bench_paths.py [--sizes 4,6,8,...] [--repeats 3] [--seed 0]
        [--cap-s 10] [--out results/bench_paths.json]

Instances (seeded, drawn by ``accy.experiments.networks``): random regular graphs of degree 3
and 4, rings, 2-D lattices and random trees (bond sizes 2..8, a few open legs), and matrix
chains with random sizes 2..64, from 4 to 40 operands. For each instance and each method --
accy ``exact``, ``beam`` (default width), ``greedy``, ``auto`` and opt_einsum ``dp`` (skipped
past ``--dp-max-n`` operands or a time cap), ``greedy``, ``auto``, ``branch-2`` -- it
records the path cost (FLOPs in accy's units, see ``accy.contraction.cost``; every path is
evaluated by ``path_cost``) and the search time. Summary lines check the targets of issue 4:

* exact equals dp wherever both finish;
* beam is not worse than opt_einsum greedy on >= 95% of instances and within 1.10x of the
  best known cost in geometric mean;
* auto is never worse than opt_einsum auto, and searches 24-operand networks in < 50 ms.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import opt_einsum

import accy
from accy.contraction import STRATEGIES, ContractionError, PathOptions, path_cost
from accy.experiments.networks import FAMILIES, instances
from accy.experiments.records import command_line, git_commit, timestamp, write_json

ACCY_METHODS = ("exact", "exact-connected", "beam", "greedy", "auto")
OE_METHODS = ("dp", "greedy", "auto", "branch-2")
AUTO_TARGET_MS = 50.0


# ---- running methods ------------------------------------------------------------------------


def search(kind: str, method: str, inputs: list[str], output: str, sizes: dict[str, int],
           exact_state_limit: int) -> list[tuple[int, ...]]:
    """The path of one method (``kind`` is ``accy`` or ``opt_einsum``)."""
    if kind == "accy" and method.startswith("exact"):
        # exact-connected: exact in dp's own space (no intermediate outer products at all)
        options = PathOptions(exact_state_limit=exact_state_limit)
        if method == "exact-connected":
            options = PathOptions(exact_state_limit=exact_state_limit, exact_outer_limit=0)
        return STRATEGIES["exact"](inputs, output, sizes, options)
    if kind == "accy":
        return STRATEGIES[method](inputs, output, sizes)
    fn = opt_einsum.paths.get_path_fn(method)
    return [tuple(p) for p in fn([frozenset(t) for t in inputs], frozenset(output), sizes, None)]


def _worker(conn: Any) -> None:  # runs in a child process: one task at a time
    while True:
        task = conn.recv()
        if task is None:
            return
        start = time.perf_counter()
        try:
            path = search(*task)
            conn.send(("ok", path, (time.perf_counter() - start) * 1e3))
        except ContractionError as e:
            conn.send(("state-limit", str(e).splitlines()[0], None))


class CappedRunner:
    """Runs slow searches (exact, dp, branch-2) in a child process with a wall-clock cap;
    a search past the cap is killed and reported as ``timeout``."""

    def __init__(self, cap_s: float) -> None:
        import multiprocessing

        self.cap_s = cap_s
        self.ctx = multiprocessing.get_context("spawn")
        self.proc: Any = None
        self.conn: Any = None

    def _start(self) -> None:
        parent, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=_worker, args=(child,), daemon=True)
        self.proc.start()
        self.conn = parent

    def run(self, *task: Any) -> tuple[str, Any, float | None]:
        if self.proc is None or not self.proc.is_alive():
            self._start()
        self.conn.send(task)
        if self.conn.poll(self.cap_s):
            return self.conn.recv()
        self.proc.kill()
        self.proc.join()
        self.proc = None
        return "timeout", None, None

    def close(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            self.conn.send(None)
            self.proc.join(5)


def timed(runs: int, fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """``fn()``'s result, its median wall time and its median CPU time (this process only)
    over ``runs`` runs, in ms. Other load on the machine (its load average is in the JSON)
    inflates wall time; CPU time shows the search's own cost."""
    wall, cpu, result = [], [], None
    for _ in range(runs):
        start, start_cpu = time.perf_counter(), time.process_time()
        result = fn()
        cpu.append((time.process_time() - start_cpu) * 1e3)
        wall.append((time.perf_counter() - start) * 1e3)
    return result, statistics.median(wall), statistics.median(cpu)


def run_instance(inst: dict[str, Any], args: argparse.Namespace,
                 runner: CappedRunner | None) -> dict[str, Any]:
    problem = (inst["inputs"], inst["output"], inst["sizes"])
    rows: dict[str, Any] = {}
    methods = [("accy", m) for m in ACCY_METHODS] + [("opt_einsum", m) for m in OE_METHODS]
    for kind, method in methods:
        key = f"{kind}:{method}"
        slow = method.startswith("exact") or (kind, method) in (("opt_einsum", "dp"),
                                                                  ("opt_einsum", "branch-2"))
        if kind == "opt_einsum" and method == "dp" and inst["n"] > args.dp_max_n:
            rows[key] = {"status": "skipped"}
            continue
        if slow and runner is not None:
            status, path, ms = runner.run(kind, method, *problem, args.exact_state_limit)
            cpu_ms = ms
        else:
            try:
                path, ms, cpu_ms = timed(args.timing_runs if not slow else 1,
                                         lambda k=kind, m=method: search(k, m, *problem,
                                                                         args.exact_state_limit))
                status = "ok"
            except ContractionError:
                status, path, ms = "state-limit", None, None
        if status != "ok":
            rows[key] = {"status": status}
            continue
        flops = path_cost(*problem, path).flops
        rows[key] = {"status": "ok", "flops": flops, "log10": math.log10(max(flops, 1)),
                     "ms": ms, "cpu_ms": cpu_ms, "path": [list(p) for p in path]}
    return rows


# ---- summary --------------------------------------------------------------------------------


def _flops(row: dict[str, Any], key: str) -> int | None:
    cell = row["results"].get(key, {})
    return cell.get("flops") if cell.get("status") == "ok" else None


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The issue's targets over all instances."""
    def pairs(key: str) -> list[tuple[int, int]]:
        found = [(_flops(r, key), _flops(r, "opt_einsum:dp")) for r in rows]
        return [(e, d) for e, d in found if e is not None and d is not None]

    both, same_space = pairs("accy:exact"), pairs("accy:exact-connected")
    beam_vs_greedy, ratios, auto_worse, auto24 = [], [], [], []
    for r in rows:
        known = [c["flops"] for c in r["results"].values() if c.get("status") == "ok"]
        best = min(known)
        beam, greedy = _flops(r, "accy:beam"), _flops(r, "opt_einsum:greedy")
        beam_vs_greedy.append(beam <= greedy)
        ratios.append(beam / best if best else 1.0)
        auto, oe_auto = _flops(r, "accy:auto"), _flops(r, "opt_einsum:auto")
        if auto > oe_auto:
            auto_worse.append(f"{r['family']}-{r['n']}-{r['repeat']}")
        if r["n"] == 24:
            auto24.append((r["results"]["accy:auto"]["ms"], r["results"]["accy:auto"]["cpu_ms"]))
    geomean = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
    share = sum(beam_vs_greedy) / len(beam_vs_greedy)
    return {
        "instances": len(rows),
        "exact_vs_dp": {  # dp's space: trees without intermediate outer products
            "same_space": {"both_finished": len(same_space),
                           "equal": sum(e == d for e, d in same_space)},
            "both_finished": len(both), "equal": sum(e == d for e, d in both),
            "exact_cheaper": sum(e < d for e, d in both),
            "exact_dearer": sum(e > d for e, d in both),
            "target": "exact-connected == dp everywhere; exact never dearer than dp",
            "target_met": all(e == d for e, d in same_space) and all(e <= d for e, d in both),
        },
        "beam_vs_greedy": {"not_worse_share": share, "target": ">= 0.95",
                           "target_met": share >= 0.95},
        "beam_vs_best": {"geomean_ratio": geomean, "worst_ratio": max(ratios),
                         "target": "<= 1.10", "target_met": geomean <= 1.10},
        "auto_vs_opt_einsum_auto": {"worse_on": auto_worse, "target_met": not auto_worse},
        "auto_24_operands_ms": {  # over instances, of each instance's median time
            "instances": len(auto24),
            "wall_median": statistics.median(w for w, _ in auto24) if auto24 else None,
            "wall_max": max(w for w, _ in auto24) if auto24 else None,
            "cpu_median": statistics.median(c for _, c in auto24) if auto24 else None,
            "cpu_max": max(c for _, c in auto24) if auto24 else None,
            "target": f"CPU time < {AUTO_TARGET_MS} ms on every instance",
            "target_met": bool(auto24) and max(c for _, c in auto24) < AUTO_TARGET_MS,
        },
    }


def print_table(rows: list[dict[str, Any]]) -> None:
    keys = [f"accy:{m}" for m in ACCY_METHODS] + [f"opt_einsum:{m}" for m in OE_METHODS]
    names = [k.replace("opt_einsum:", "oe ").replace("accy:", "") for k in keys]
    print("\n== path cost log10(FLOPs) / search wall ms (median of runs), mean over repeats "
          "(-: timeout, state limit or skipped) ==")
    print(f"{'family':<9}{'n':>3} " + "".join(f"{n:>16}" for n in names))
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["family"], r["n"]), []).append(r)
    for (family, n), group in groups.items():
        cells = []
        for k in keys:
            ok = [r["results"][k] for r in group if r["results"][k]["status"] == "ok"]
            if len(ok) < len(group):
                cells.append(f"{'-':>16}")
                continue
            log10 = statistics.mean(c["log10"] for c in ok)
            ms = statistics.mean(c["ms"] for c in ok)
            cells.append(f"{f'{log10:.3f}/{ms:.1f}':>16}")
        print(f"{family:<9}{n:>3} " + "".join(cells))


def print_summary(s: dict[str, Any]) -> None:
    e, bg, bb = s["exact_vs_dp"], s["beam_vs_greedy"], s["beam_vs_best"]
    au, t24 = s["auto_vs_opt_einsum_auto"], s["auto_24_operands_ms"]

    def met(flag: bool) -> str:
        return "met" if flag else "NOT met"

    print(f"\n{s['instances']} instances")
    same = e["same_space"]
    print(f"exact == dp wherever both finish: in dp's space (exact-connected) "
          f"{same['equal']}/{same['both_finished']} equal; default exact (outer products up to "
          f"{PathOptions().exact_outer_limit} operands) {e['equal']}/{e['both_finished']} equal, "
          f"{e['exact_cheaper']} cheaper, {e['exact_dearer']} dearer -- {met(e['target_met'])}")
    print(f"beam (default width) not worse than opt_einsum greedy: "
          f"{100 * bg['not_worse_share']:.1f}% (target >= 95%) -- {met(bg['target_met'])}")
    print(f"beam / best known cost: geomean {bb['geomean_ratio']:.4f}, worst "
          f"{bb['worst_ratio']:.3f} (target geomean <= 1.10) -- {met(bb['target_met'])}")
    print(f"auto never worse than opt_einsum auto: worse on {len(au['worse_on'])} "
          f"{au['worse_on'] or ''} -- {met(au['target_met'])}")
    if t24["instances"]:
        print(f"auto on {t24['instances']} 24-operand networks (median of runs): CPU median "
              f"{t24['cpu_median']:.1f} ms, max {t24['cpu_max']:.1f} ms; wall median "
              f"{t24['wall_median']:.1f} ms, max {t24['wall_max']:.1f} ms (target: CPU < "
              f"{AUTO_TARGET_MS:.0f} ms) -- {met(t24['target_met'])}")


# ---- main -----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--sizes", default="4,6,8,10,12,14,16,20,24,30,40",
                   help="comma-separated operand counts")
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--repeats", type=int, default=3, help="instances per family and size")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cap-s", type=float, default=10.0,
                   help="time cap of exact, dp and branch-2 (0: no cap, run in this process)")
    p.add_argument("--dp-max-n", type=int, default=24, help="skip opt_einsum dp past this")
    p.add_argument("--exact-state-limit", type=int, default=1_000_000,
                   help="exact_state_limit of the accy exact column (auto uses the default)")
    p.add_argument("--timing-runs", type=int, default=5, help="median of this many runs")
    p.add_argument("--out", default="results/bench_paths.json")
    args = p.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    args.families = tuple(f for f in args.families.split(",") if f)
    unknown = set(args.families) - set(FAMILIES)
    if unknown or not args.sizes or min(args.sizes) < 3 or args.repeats < 1:
        p.error(f"families from {FAMILIES}, sizes >= 3 and repeats >= 1 please")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    runner = CappedRunner(args.cap_s) if args.cap_s > 0 else None
    rows = []
    try:
        for inst in instances(args.sizes, args.repeats, args.seed, args.families):
            inst["results"] = run_instance(inst, args, runner)
            rows.append(inst)
            done = inst["results"]
            print(f"{inst['family']:<9}{inst['n']:>3} #{inst['repeat']}: " + " ".join(
                f"{k.split(':')[1]}={v.get('log10', float('nan')):.2f}" for k, v in done.items()),
                flush=True)
    finally:
        if runner is not None:
            runner.close()
    print_table(rows)
    summary = summarize(rows)
    print_summary(summary)
    result = {
        "summary": summary,
        "instances": rows,
        "defaults": {k: v for k, v in vars(PathOptions()).items()},
        "args": {k: v for k, v in vars(args).items()},
        "command": command_line(argv),
        "seed": args.seed,
        "versions": {"accy": accy.__version__, "numpy": np.__version__,
                     "opt_einsum": opt_einsum.__version__, "python": platform.python_version()},
        "git_commit": git_commit(),
        "machine": {"processor": platform.processor(), "machine": platform.machine(),
                    "system": platform.platform(), "cpu_count": os.cpu_count(),
                    "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None},
        "timestamp": timestamp(),
    }
    write_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
