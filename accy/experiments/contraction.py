"""Contraction search: accy's path strategies against opt_einsum (and cotengra when installed).

Instances: the suite's N-ary contractions at the sweep's size (``tensor_network``'s 8-operand
einsum; ``matrix_chain`` as one chain) and seeded random networks of
:mod:`accy.experiments.networks` (regular graphs, rings, lattices, trees, matrix chains) at
operand counts that grow with the size. Each instance is one task; it runs every method and
records the path's cost (FLOPs in accy's units, :func:`accy.contraction.path_cost`, for every
method's path alike) and the search time (median of ``timing_runs`` for the fast methods).

Methods: ``accy:exact``, ``accy:beam``, ``accy:greedy``, ``accy:auto`` (the strategies of
``einsum-lowering{strategy=...}``), ``opt_einsum:dp`` (up to ``dp_max_n`` operands),
``opt_einsum:greedy``, ``opt_einsum:auto``, ``opt_einsum:branch-2`` (up to
``branch_max_n``), and ``cotengra:hyper-greedy`` (cotengra's ``HyperOptimizer`` over greedy
trials) when cotengra is importable. ``exact`` past its state limit is reported as
``state-limit``.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import time
from collections.abc import Sequence
from typing import Any

from accy.experiments import records
from accy.experiments.executor import Executor, Task
from accy.experiments.networks import FAMILIES, instances
from accy.experiments.runner import SweepOptions, run_tasks
from accy.experiments.suite import benchmark

__all__ = ["METHODS", "run", "search", "summarize"]

ACCY_METHODS = ("exact", "beam", "greedy", "auto")
OE_METHODS = ("dp", "greedy", "auto", "branch-2")
METHODS = (*(f"accy:{m}" for m in ACCY_METHODS), *(f"opt_einsum:{m}" for m in OE_METHODS),
           "cotengra:hyper-greedy")
SIZES = {"ci": [4, 6, 8], "paper": [4, 6, 8, 10, 12, 16, 20, 24],
         "full": [4, 6, 8, 10, 12, 14, 16, 20, 24, 30, 40]}
REPEATS = {"ci": 1, "paper": 2, "full": 3}
SLOW = ("accy:exact", "opt_einsum:dp", "opt_einsum:branch-2", "cotengra:hyper-greedy")


def cotengra_available() -> bool:
    try:
        import cotengra  # noqa: F401
    except ImportError:
        return False
    return True


def search(method: str, inputs: list[str], output: str, sizes: dict[str, int],
           exact_state_limit: int = 1_000_000) -> list[tuple[int, ...]]:
    """The path ``method`` (``kind:name``) finds, in linear (opt_einsum) form."""
    kind, _, name = method.partition(":")
    if kind == "accy":
        from accy.contraction import STRATEGIES, PathOptions

        options = PathOptions(exact_state_limit=exact_state_limit) if name == "exact" else None
        return [tuple(p) for p in STRATEGIES[name](inputs, output, sizes, options)]
    if kind == "opt_einsum":
        import opt_einsum

        fn = opt_einsum.paths.get_path_fn(name)
        return [tuple(p) for p in fn([frozenset(t) for t in inputs], frozenset(output),
                                     sizes, None)]
    if kind == "cotengra":
        import cotengra

        opt = cotengra.HyperOptimizer(methods=["greedy"], max_repeats=32, minimize="flops",
                                      parallel=False, progbar=False)
        return [tuple(p) for p in opt(list(inputs), output, sizes)]
    raise ValueError(f"unknown method {method!r}; valid: {', '.join(METHODS)}")


def instance_task(name: str, family: str, n: int, repeat: int, inputs: list[str], output: str,
                  sizes: dict[str, int], methods: list[str], timing_runs: int,
                  dp_max_n: int, branch_max_n: int) -> dict[str, Any]:
    """Every method on one instance: status, FLOPs, log10, search ms and path per method."""
    from accy.contraction import ContractionError, path_cost

    results: dict[str, Any] = {}
    for method in methods:
        if (method == "opt_einsum:dp" and n > dp_max_n) or (
                method == "opt_einsum:branch-2" and n > branch_max_n):
            results[method] = {"status": "skipped"}
            continue
        runs = 1 if method in SLOW else max(timing_runs, 1)
        times, path = [], None
        try:
            for _ in range(runs):
                start = time.perf_counter()
                path = search(method, inputs, output, sizes)
                times.append((time.perf_counter() - start) * 1e3)
        except ContractionError as e:
            results[method] = {"status": "state-limit", "error": str(e).splitlines()[0]}
            continue
        assert path is not None
        flops = path_cost(inputs, output, sizes, path).flops
        results[method] = {"status": "ok", "flops": flops, "log10": math.log10(max(flops, 1)),
                           "path": [list(p) for p in path],
                           "measured": {"ms": statistics.median(times)}}
    problem = json.dumps([inputs, output, sorted(sizes.items())])
    return {
        "program": name, "family": family, "n": n, "repeat": repeat,
        "program_fingerprint": hashlib.blake2b(problem.encode(), digest_size=16).hexdigest(),
        "spec": ",".join(inputs) + "->" + output, "sizes": sizes,
        "pipeline": {m: f"einsum-lowering{{strategy={m.split(':')[1]}}}" for m in methods
                     if m.startswith("accy:")},
        "results": {m: {k: v for k, v in r.items() if k != "measured"}
                    for m, r in results.items()},
        "measured": {m: r.get("measured", {}).get("ms") for m, r in results.items()},
        "provenance": records.provenance(False, ("cotengra",)),
    }


def suite_instances(size: str) -> list[dict[str, Any]]:
    """The suite's N-ary contractions at ``size``."""
    from accy.ir.ops import Op
    from accy.ir.shapes import parse_einsum

    out = []
    tn = benchmark("tensor_network").program(size)
    for node in tn.nodes():
        if node.op is Op.EINSUM and len(node.srcs) >= 3:
            terms, output = parse_einsum(str(node.attr("spec")), [s.type.rank for s in node.srcs])
            sizes: dict[str, int] = {}
            for term, src in zip(terms, node.srcs, strict=True):
                sizes.update(zip(term, src.type.shape, strict=True))
            out.append({"family": "suite", "name": "tensor_network", "n": len(terms),
                        "repeat": 0, "inputs": list(terms), "output": output, "sizes": sizes})
    chain = benchmark("matrix_chain").program(size).function()
    letters = "abcdefghij"
    dims = [chain.params[0].type.shape[0]] + [p.type.shape[1] for p in chain.params]
    out.append({"family": "suite", "name": "matrix_chain", "n": len(chain.params), "repeat": 0,
                "inputs": [letters[i:i + 2] for i in range(len(chain.params))],
                "output": letters[0] + letters[len(chain.params)],
                "sizes": {letters[i]: d for i, d in enumerate(dims)}})
    return out


def run(options: SweepOptions, *, families: Sequence[str] = FAMILIES,
        sizes: Sequence[int] | None = None, repeats: int | None = None, timing_runs: int = 3,
        dp_max_n: int = 20, branch_max_n: int = 14,
        executor: Executor | None = None) -> dict[str, Any]:
    """Run the contraction sweep (seeds draw the random networks) and summarize it."""
    methods = [m for m in METHODS if not m.startswith("cotengra") or cotengra_available()]
    ns = list(sizes) if sizes else SIZES[options.suite]
    reps = repeats or REPEATS[options.suite]
    found = suite_instances(options.suite)
    for seed in options.seeds:
        for inst in instances(ns, reps, seed, tuple(families)):
            inst["name"] = f"{inst['family']}-{inst['n']}-{inst['repeat']}-s{seed}"
            found.append(inst)
    tasks = [Task((inst["family"], inst["n"], inst["name"]),
                  "accy.experiments.contraction:instance_task",
                  {"name": inst["name"], "family": inst["family"], "n": inst["n"],
                   "repeat": inst["repeat"], "inputs": inst["inputs"], "output": inst["output"],
                   "sizes": inst["sizes"], "methods": methods, "timing_runs": timing_runs,
                   "dp_max_n": dp_max_n, "branch_max_n": branch_max_n})
             for inst in found]
    result = run_tasks("contraction", tasks, options, executor, "contraction",
                       extra_versions=("cotengra",), device=False)
    result["options"]["extra"] = {"families": list(families), "sizes": ns, "repeats": reps,
                                  "timing_runs": timing_runs, "dp_max_n": dp_max_n,
                                  "branch_max_n": branch_max_n, "methods": methods}
    result["summary"] = summarize(result["rows"], methods)
    return result


def summarize(rows: Sequence[dict[str, Any]], methods: Sequence[str] = METHODS
              ) -> dict[str, Any]:
    """Per method: instances solved, geometric mean and worst cost over the best known cost,
    how often it found the best, median and max search ms; per (family, n) the mean log10
    cost and search ms."""
    per_method: dict[str, Any] = {}
    ratios: dict[str, list[float]] = {m: [] for m in methods}
    times: dict[str, list[float]] = {m: [] for m in methods}
    for r in rows:
        ok = {m: c["flops"] for m, c in r["results"].items() if c["status"] == "ok"}
        best = min(ok.values()) if ok else None
        for m in methods:
            if m in ok and best:
                ratios[m].append(ok[m] / best)
                times[m].append(r["measured"][m])
    for m in methods:
        rs = ratios[m]
        per_method[m] = {
            "solved": len(rs),
            "geomean_ratio": math.exp(statistics.fmean(math.log(x) for x in rs)) if rs else None,
            "worst_ratio": max(rs) if rs else None,
            "best_share": sum(x == 1.0 for x in rs) / len(rs) if rs else None,
            "median_ms": statistics.median(times[m]) if times[m] else None,
            "max_ms": max(times[m]) if times[m] else None,
        }
    groups: dict[str, dict[str, Any]] = {}
    for r in rows:
        g = groups.setdefault(f"{r['family']}:{r['n']}", {"family": r["family"], "n": r["n"],
                                                          "count": 0, "log10": {}, "ms": {},
                                                          "solved": {}})
        g["count"] += 1
        for m in methods:
            cell = r["results"].get(m, {})
            if cell.get("status") == "ok":
                g["log10"].setdefault(m, []).append(cell["log10"])
                g["ms"].setdefault(m, []).append(r["measured"][m])
                g["solved"][m] = g["solved"].get(m, 0) + 1
    for g in groups.values():
        g["log10"] = {m: statistics.fmean(v) for m, v in g["log10"].items()}
        g["ms"] = {m: statistics.fmean(v) for m, v in g["ms"].items()}
    return {"methods": per_method, "groups": groups}
