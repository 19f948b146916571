"""Which part of the ``measured`` cost model ranks programs like the clock? An ablation.

    python experiments/cost_ablation.py RESULTS/costs.json [--calibration FILE] [--out F.json]

Takes a finished ``accy experiment costs`` run (its rows: program, size, variant, pipeline,
kernel time), prepares each row's program again (compile only: no device, the times are the
run's own), and prices the program ``saturate`` produced under the run's calibration with
one part of the model taken away at a time:

* ``measured``: the whole model;
* ``-element-ops``: every elementwise op priced by its class (cheap / transcendental), not by
  its own series;
* ``-shape-classes``: every contraction step priced by the fit pooled over all contractions;
* ``-interpolation``: the linear fits only, no series points;
* ``-all``: all three taken away (about the model before these parts were added, but for the
  searched einsum path, which it keeps).

For each it prints Spearman's rho over all points and within programs (points merged as the
experiment merges them: ``accy.experiments.costs.summarize``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any


def ablations(model: Any) -> dict[str, Any]:
    from accy.egraph.kernel_cost import Fit

    def linear(kinds: dict[str, Fit]) -> dict[str, Fit]:
        return {k: dataclasses.replace(f, points=()) for k, f in kinds.items()}

    pooled = {k: f for k, f in model.kinds.items() if not k.startswith("contraction:")}
    return {
        "measured": model,
        "-element-ops": dataclasses.replace(model, element_ops={}),
        "-shape-classes": dataclasses.replace(model, kinds=pooled),
        "-interpolation": dataclasses.replace(model, kinds=linear(dict(model.kinds))),
        "-all": dataclasses.replace(model, kinds=linear(pooled), element_ops={}),
    }


def main(argv: list[str]) -> int:
    import accy
    from accy.egraph.cost import program_cost
    from accy.egraph.kernel_cost import load_calibration
    from accy.experiments import costs
    from accy.experiments.suite import benchmark
    from accy.ir.program import Stage

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", help="costs.json of `accy experiment costs`")
    ap.add_argument("--calibration", help="calibration file (default: the run's own)")
    ap.add_argument("--out", help="write the summaries as JSON here")
    args = ap.parse_args(argv)
    doc = json.loads(open(args.results).read())
    path = args.calibration or doc.get("calibration")
    if not path:
        ap.error(f"{args.results} names no calibration; pass --calibration")
    models = ablations(load_calibration(path))
    rows = []
    for r in doc["rows"]:
        if r["measured"].get("kernel_ms") is None:
            continue
        capture = costs._Capture()
        job = accy.prepare(benchmark(r["program"]).program(r["size"]), r["pipeline"],
                           until="tensor", instruments=[capture])
        priced = capture.program or job.products[Stage.contract].program
        rows.append({**r, "cost": {name: program_cost(priced, m) for name, m in
                                   models.items()}})
    out: dict[str, Any] = {}
    saved = costs.MODELS
    try:
        costs.MODELS = tuple(models)
        summary = costs.summarize(rows)
    finally:
        costs.MODELS = saved
    print(f"{len(rows)} rows of {args.results}, calibration {path}")
    print("| model | rho (all points) | rho within programs | pairs agreeing |")
    print("|---|---|---|---|")
    for name, s in summary["models"].items():
        out[name] = {k: s[k] for k in ("spearman", "within", "pairs", "points", "pairs_judged")}
        fmt = [("-" if s[k] is None else f"{s[k]:.2f}") for k in ("spearman", "within", "pairs")]
        print(f"| {name} | {' | '.join(fmt)} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
