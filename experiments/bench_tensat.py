"""Benchmark: Tensat's multi-pattern merges (rule sets ``merge`` and ``concat``) on the
programs Tensat reports its largest wins on.

    python experiments/bench_tensat.py [--size tiny|small|bert] [--caps 0,1,2,unbounded]
        [--iterations 6] [--node-limit 50000] [--time-limit 20] [--repeats 5] [--no-run]
        [--costs kernels,measured] [--device nvidia] [--pass-repeats 1]
        [--no-saturation-rows] [--out results/bench_tensat.json]

Programs (accy builder, einsums/matmuls, f32):

``bert_attention``  one BERT self-attention layer: Q, K, V projections of one ``x``
                    (``[tokens, hidden]``), heads, scaled scores, softmax, context, output
                    projection.
``nasrnn``          a NasRNN cell as in Tensat/TASO: 8 gate projections (4 of ``x``, 4 of
                    ``h``), relu/sigmoid/tanh gates, the tree of adds and multiplies.
``nasrnn_stack``    the cell unrolled over 4 time steps, weights shared (the x projections
                    of all steps can be one product).
``transformer_block`` a pre-norm block: layer norm, the attention above, residual, layer
                    norm, a GELU MLP four times as wide, residual.
``mlp_stack``       three GELU layers with biases: nothing to merge (saturation must not
                    make it dearer).
``inception``       an Inception-like block in matmul form: four parallel branches of one
                    input (1, 2, 2 and 1 layers deep), concatenated.

For every program and multi-pattern cap (``saturate{multi-pattern-iterations=N}``, N = 0, 1,
2 and unbounded = the iteration limit): search time, e-graph size, stop reason, cost before
and after (``flops-bytes``) of the extracted program, whether the merged form is in the
e-graph (the outputs' e-classes hold slices of one contraction over a concat), its cost
(``merged_cost``: the program the merges describe, ``PROGRAMS[name](sizes, merged=True)``,
priced as a DAG) and kernel counts; unless ``--no-run``, also the kernel time on the first
OpenCL device (PoCL here) of the original and the merged program, per kernel too, of the
merged one without its weight-concat kernels (``merged_prepacked``: weights stored
concatenated, as Tensat folds them), and of the original prepared by ``accy-default`` with its
``saturate`` given the ``concat`` and ``merge`` rule sets and cost model COST
(``saturated:COST``, one per ``--costs`` entry, the pass's default budgets): what saturation
itself finds and extracts, with the pass's time, e-graph size and sharing-search report
(``--pass-repeats N``: prepared N times, the median time, ``pass_s_all`` each; the first
includes declaring the rules to a fresh e-graph). ``--no-saturation-rows`` skips the cap
sweep. Prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

import accy
import rewrites
from accy.builder import Value, concat, einsum
from accy.egraph.convert import term, to_egraph
from accy.egraph.cost import cost_model, program_cost
from accy.egraph.driver import saturate
from accy.experiments.records import git_commit, timestamp, versions, write_json
from accy.ir.ops import Op
from accy.passes import rewriting
from accy.passes.tensor.saturate import DEFAULT_RULESETS

RULESETS = (*DEFAULT_RULESETS, "concat", "merge")
F32 = accy.DType.f32


@dataclass(frozen=True)
class Sizes:
    tokens: int  # batch x sequence
    hidden: int
    heads: int
    batch: int  # of the NasRNN cell and the Inception block


SIZES = {"tiny": Sizes(tokens=8, hidden=8, heads=2, batch=4),  # tests
         "small": Sizes(tokens=64, hidden=64, heads=4, batch=32),
         "bert": Sizes(tokens=4096, hidden=768, heads=12, batch=64)}


# ---- programs ---------------------------------------------------------------------------------


def _function(name: str, params: list[tuple[str, tuple[int, ...]]]):  # noqa: ANN202
    b = accy.Builder()
    f = b.begin_function(name, [b.tensor(F32, shape) for _, shape in params],
                         [n for n, _ in params])
    return b, f, [f.param(i) for i in range(len(params))]


def _attention(x: Value, wq: Value, wk: Value, wv: Value, wo: Value, sz: Sizes,
               merged: bool) -> Value:
    """Multi-head self-attention of ``x`` [tokens, hidden]; ``merged``: Q, K, V as slices of
    ``x @ [Wq Wk Wv]``."""
    n, h, heads = sz.tokens, sz.hidden, sz.heads
    d, seq = h // heads, max(1, sz.tokens // 4)
    if merged:
        m = x @ concat([wq, wk, wv], axis=1)
        q, k, v = m[:, :h], m[:, h:2 * h], m[:, 2 * h:]
    else:
        q, k, v = x @ wq, x @ wk, x @ wv
    batch = n // seq

    def heads_of(t: Value) -> Value:
        return t.reshape(batch, seq, heads, d)

    scores = einsum("bqhd,bkhd->bhqk", heads_of(q), heads_of(k)) * (1.0 / math.sqrt(d))
    ctx = einsum("bhqk,bkhd->bqhd", scores.softmax(-1), heads_of(v)).reshape(n, h)
    return ctx @ wo


def bert_attention(sz: Sizes, *, merged: bool = False) -> accy.Program:
    """One self-attention layer; ``merged``: Q, K, V as slices of ``x @ [Wq Wk Wv]``."""
    n, h = sz.tokens, sz.hidden
    b, f, (x, *ws) = _function(
        "bert_attention", [("x", (n, h)), ("wq", (h, h)), ("wk", (h, h)), ("wv", (h, h)),
                           ("wo", (h, h))])
    f.return_(_attention(x, *ws, sz, merged))
    f.finish()
    return b.finish()


def transformer_block(sz: Sizes, *, merged: bool = False) -> accy.Program:
    """A pre-norm transformer block: layer norm, attention (``_attention``), residual, layer
    norm, a GELU MLP four times as wide, residual."""
    n, h = sz.tokens, sz.hidden
    b, f, (x, wq, wk, wv, wo, w1, w2) = _function(
        "transformer_block", [("x", (n, h)), ("wq", (h, h)), ("wk", (h, h)), ("wv", (h, h)),
                              ("wo", (h, h)), ("w1", (h, 4 * h)), ("w2", (4 * h, h))])

    def norm(v: Value) -> Value:
        c = v - v.mean(axes=-1, keepdims=True)
        return c / ((c * c).mean(axes=-1, keepdims=True) + 1e-5).sqrt()

    x = x + _attention(norm(x), wq, wk, wv, wo, sz, merged)
    f.return_(x + (norm(x) @ w1).gelu() @ w2)
    f.finish()
    return b.finish()


def mlp_stack(sz: Sizes, *, merged: bool = False, layers: int = 3) -> accy.Program:
    """``layers`` GELU layers with biases on ``[tokens, hidden]``: nothing shares an operand,
    so the merged program is the program itself (the row saturation must not make dearer)."""
    del merged
    n, h = sz.tokens, sz.hidden
    params = [("x", (n, h))]
    for i in range(layers):
        params += [(f"w{i}", (h, h)), (f"b{i}", (h,))]
    b, f, (x, *ws) = _function("mlp_stack", params)
    for i in range(layers):
        x = (x @ ws[2 * i] + ws[2 * i + 1]).gelu()
    f.return_(x)
    f.finish()
    return b.finish()


def _nas_cell(t: list[Value]) -> Value:
    """A NasRNN cell's gates from its 8 projections (4 of x, 4 of h)."""
    mid = [t[0].relu() + t[3].sigmoid(), t[1].sigmoid() + t[2].tanh(),
           t[4].sigmoid() * t[5].tanh(), t[6].sigmoid() * t[7].relu()]
    mid.append(mid[1].sigmoid() + mid[2].tanh())
    mid.append(mid[0].tanh() * mid[3].tanh())
    return (mid[4].tanh() * mid[5].tanh()).tanh()


def _projections(v: Value, ws: list[Value], h: int, merged: bool) -> list[Value]:
    """``v @ w`` for each weight, or slices of ``v @ [w ...]`` when ``merged``."""
    if not merged:
        return [v @ w for w in ws]
    m = v @ concat(ws, axis=1)
    return [m[:, i * h:(i + 1) * h] for i in range(len(ws))]


def nasrnn(sz: Sizes, *, merged: bool = False) -> accy.Program:
    """A NasRNN cell (Tensat/TASO's ``nas_node``) with 4 projections of x and 4 of h."""
    n, h = sz.batch, sz.hidden
    params = [("x", (n, h)), ("h", (n, h))]
    params += [(f"w{i}", (h, h)) for i in range(4)] + [(f"u{i}", (h, h)) for i in range(4)]
    b, f, (x, hs, *ws) = _function("nasrnn", params)
    f.return_(_nas_cell(_projections(x, ws[:4], h, merged) + _projections(hs, ws[4:], h, merged)))
    f.finish()
    return b.finish()


NAS_STEPS = 4


def nasrnn_stack(sz: Sizes, *, merged: bool = False) -> accy.Program:
    """The NasRNN cell unrolled over ``NAS_STEPS`` steps, weights shared; ``merged``: every
    step's x projections as slices of one product of all steps' inputs with ``[w0 ... w3]``,
    each step's h projections as slices of ``h @ [u0 ... u3]``."""
    n, h = sz.batch, sz.hidden
    params = [("xs", (NAS_STEPS, n, h)), ("h", (n, h))]
    params += [(f"w{i}", (h, h)) for i in range(4)] + [(f"u{i}", (h, h)) for i in range(4)]
    b, f, (xs, hs, *ws) = _function("nasrnn_stack", params)
    if merged:
        every = _projections(xs.reshape(NAS_STEPS * n, h), ws[:4], h, True)
        per_step = [[p[t * n:(t + 1) * n] for p in every] for t in range(NAS_STEPS)]
    else:
        per_step = [_projections(xs[t:t + 1].reshape(n, h), ws[:4], h, False)
                    for t in range(NAS_STEPS)]
    for t in range(NAS_STEPS):
        hs = _nas_cell(per_step[t] + _projections(hs, ws[4:], h, merged))
    f.return_(hs)
    f.finish()
    return b.finish()


INCEPTION_WIDTHS = (1, 2, 2, 1)  # branch widths in units of hidden/4


def inception(sz: Sizes, *, merged: bool = False) -> accy.Program:
    """Four parallel branches of x (1, 2, 2, 1 layers), their outputs concatenated."""
    n, h = sz.batch, sz.hidden
    q = h // 4
    first = [(f"a{i}", (h, q * w)) for i, w in enumerate(INCEPTION_WIDTHS)]
    second = [("b1", (2 * q, q)), ("b2", (2 * q, q))]
    b, f, (x, *ws) = _function("inception", [("x", (n, h)), *first, *second])
    if merged:
        m = x @ concat(ws[:4], axis=1)
        bounds = [int(v) for v in np.cumsum((0, *INCEPTION_WIDTHS)) * q]
        heads = [m[:, bounds[i]:bounds[i + 1]].relu() for i in range(4)]
    else:
        heads = [(x @ w).relu() for w in ws[:4]]
    branches = [heads[0], (heads[1] @ ws[4]).relu(), (heads[2] @ ws[5]).relu(), heads[3]]
    f.return_(concat(branches, axis=1))
    f.finish()
    return b.finish()


PROGRAMS = {"bert_attention": bert_attention, "nasrnn": nasrnn, "nasrnn_stack": nasrnn_stack,
            "transformer_block": transformer_block, "mlp_stack": mlp_stack,
            "inception": inception}


# ---- measurement ------------------------------------------------------------------------------


def _inputs(program: accy.Program, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, p.type.shape).astype(np.float32)
            for p in program.function().params]


def _contains(peg: Any, other: accy.Program) -> bool:
    """Whether ``other``'s result lies in the e-class of the saturated program's result."""
    from egglog import eq

    mine, theirs = term(peg.program.function().results[0]), term(other.function().results[0])
    peg.egraph.register(theirs)
    peg.egraph.run(0)
    return bool(peg.egraph.check_bool(eq(mine).to(theirs)))


def saturation_row(name: str, sz: Sizes, cap: int | None, args: argparse.Namespace
                   ) -> dict[str, Any]:
    """Saturate ``name`` with every rule set plus concat and merge, multi-pattern rules in
    the first ``cap`` iterations (None: all), and extract under flops-bytes."""
    from accy.egraph.convert import extract

    program, merged = PROGRAMS[name](sz), PROGRAMS[name](sz, merged=True)
    model = cost_model("flops-bytes")
    names = rewriting.select(RULESETS)
    multi = [n for n in names if rewrites.rule_info(n).multi]
    peg = to_egraph(program)
    start = time.perf_counter()
    report = saturate(peg, RULESETS, rules=names, iterations=args.iterations,
                      node_limit=args.node_limit, time_limit_s=args.time_limit,
                      capped=multi, capped_iterations=cap)
    search_s = time.perf_counter() - start
    before = program_cost(program, model)
    out = extract(peg, model, input_cost=before)
    found = _contains(peg, merged)  # after extraction: registering adds e-nodes
    return {
        "program": name, "cap": "unbounded" if cap is None else cap,
        "search_s": round(search_s, 4), "stop_reason": report.stop_reason,
        "iterations": report.kept_iterations, "e_nodes": report.e_nodes,
        "e_classes": report.e_classes,
        "merge_matches": sum(report.matches()[n] for n in multi),
        "cost_before": before, "cost_after": min(out.cost, before),
        "extracted_changed": out.cost < before and out.program != program,
        "merged_in_egraph": found, "merged_cost": program_cost(merged, model),
        "einsums_before": _einsums(program),
        "einsums_after": _einsums(out.program if out.cost < before else program),
        "einsums_merged": _einsums(merged),
    }


def _einsums(program: accy.Program) -> int:
    return sum(n.op is Op.EINSUM for n in program.nodes())


def saturate_spec(cost: str) -> str:
    """The ``saturate`` pass with ``concat`` and ``merge`` added, under cost model ``cost``
    (its budgets the pass's defaults)."""
    return f"saturate{{rulesets={','.join(RULESETS)} cost={cost}}}"


def _saturate_record(job: Any) -> dict[str, Any]:
    (rec,) = [p for p in job.record("tensor").passes if p.spec.startswith("saturate")]
    stats = dict(rec.stats)
    return {"pass_s": rec.elapsed_ns / 1e9, "e_nodes": stats.get("e-nodes"),
            "stop_reason": stats.get("stop-reason"), "sharing": stats.get("sharing"),
            "cost_before": stats.get("cost-before"), "cost_after": stats.get("cost-after")}


def kernel_row(name: str, sz: Sizes, repeats: int, device: str | None, *, run: bool = True,
               costs: tuple[str, ...] = (), pass_repeats: int = 1) -> dict[str, Any]:
    """Kernel counts and, where OpenCL runs, the kernel time of the original program
    (``accy-default``), of it saturated with the merge rules under each cost model in
    ``costs`` (``saturated:COST``: ``accy-default`` with :func:`saturate_spec`), and of the
    hand-merged program (timed call by call in turn, so load changes hit all), and their
    agreement."""
    from accy.backends.registry import get_backend, open_device
    from accy.experiments.records import median_ms

    program, merged = PROGRAMS[name](sz), PROGRAMS[name](sz, merged=True)
    row: dict[str, Any] = {"program": name}
    runtime = None
    if run:
        try:
            runtime = get_backend().select_device(device)
        except Exception as e:  # noqa: BLE001 - no OpenCL: counts only
            row["device_error"] = str(e)
    target = open_device(runtime)[1] if runtime is not None else None
    default = accy.parse_pipeline("accy-default")
    pipelines = {"original": default, "merged": default}
    pipelines.update({f"saturated:{c}": default.replacing(saturate_spec(c)) for c in costs})
    jobs = {k: accy.prepare(merged if k == "merged" else program, pl, target=target)
            for k, pl in pipelines.items()}
    row["kernels"] = {k: j.kernel_count for k, j in jobs.items()}
    row["saturate"] = {k: _saturate_record(j) for k, j in jobs.items() if k != "merged"}
    for k, pl in pipelines.items():  # the pass again: its time is a median over repeats
        if k.startswith("saturated:") and pass_repeats > 1:
            times = [row["saturate"][k]["pass_s"]] + [
                _saturate_record(accy.prepare(program, pl, target=target))["pass_s"]
                for _ in range(pass_repeats - 1)]
            row["saturate"][k]["pass_s_all"] = [round(t, 4) for t in times]
            row["saturate"][k]["pass_s"] = float(np.median(times))
    if runtime is None:
        return row
    inputs = _inputs(program)
    exes = {k: j.executable(device=runtime) for k, j in jobs.items()}
    outs = {k: e(*inputs) for k, e in exes.items()}  # warm-up
    ns: dict[str, list[int]] = {k: [] for k in (*exes, "merged_prepacked")}
    weight_concat = [s.entry.startswith("concat") for s in jobs["merged"].kernel_summaries()]
    per_kernel: dict[str, list[list[int]]] = {k: [] for k in exes}
    for _ in range(max(repeats, 1)):
        for k, e in exes.items():
            e(*inputs)
            ns[k].append(sum(e.last_kernel_ns))
            per_kernel[k].append(list(e.last_kernel_ns))
        # the merged program without its weight concats: weights stored concatenated, as
        # Tensat/TASO fold them (constants there; parameters here)
        ns["merged_prepacked"].append(sum(
            t for t, w in zip(per_kernel["merged"][-1], weight_concat, strict=True) if not w))
    row["kernel_ms"] = {k: median_ms(v) for k, v in ns.items()}
    row["per_kernel_us"] = {
        k: {s.entry: round(float(np.median([r[i] for r in per_kernel[k]])) / 1e3, 1)
            for i, s in enumerate(jobs[k].kernel_summaries())} for k in exes}
    row["kernel_ms_min"] = {k: min(v) / 1e6 for k, v in ns.items()}
    row["speedup"] = {k: round(row["kernel_ms"]["original"] / max(row["kernel_ms"][k], 1e-9), 3)
                      for k in row["kernel_ms"] if k != "original"}
    row["max_abs_diff"] = {k: float(max(np.max(np.abs(a - b)) for a, b in
                                        zip(outs["original"], outs[k], strict=True)))
                           for k in outs if k != "original"}
    row["device"] = runtime.info.name
    return row


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", choices=sorted(SIZES), default="small")
    ap.add_argument("--programs", default=",".join(PROGRAMS))
    ap.add_argument("--caps", default="0,1,2,unbounded",
                    help="multi-pattern iteration caps (unbounded: no cap)")
    ap.add_argument("--iterations", type=int, default=6)
    ap.add_argument("--node-limit", type=int, default=50_000)
    ap.add_argument("--time-limit", type=float, default=20.0)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default=None)
    ap.add_argument("--costs", default="kernels",
                    help="cost models to saturate the programs under in the pipeline, "
                         "comma-separated (measured needs `accy calibrate` on the device)")
    ap.add_argument("--no-run", action="store_true", help="kernel counts only, no timing")
    ap.add_argument("--pass-repeats", type=int, default=1,
                    help="prepare the saturated variants this many times: the pass's time is "
                         "the median")
    ap.add_argument("--no-saturation-rows", action="store_true",
                    help="skip the driver-level rows (cap sweep): the pipeline runs only")
    ap.add_argument("--out", default="results/bench_tensat.json")
    args = ap.parse_args(argv)
    sz = SIZES[args.size]
    names = [n for n in args.programs.split(",") if n]
    caps = [None if c == "unbounded" else int(c) for c in args.caps.split(",") if c]
    rows = ([] if args.no_saturation_rows else
            [saturation_row(n, sz, cap, args) for n in names for cap in caps])
    print(f"{'program':<16}{'cap':>10}{'search s':>10}{'e-nodes':>9}{'stop':>17}"
          f"{'cost before':>13}{'cost after':>12}{'merged cost':>13}{'merged found':>14}")
    for r in rows:
        print(f"{r['program']:<16}{r['cap']!s:>10}{r['search_s']:>10.2f}{r['e_nodes']:>9}"
              f"{r['stop_reason']:>17}{r['cost_before']:>13}{r['cost_after']:>12}"
              f"{r['merged_cost']:>13}{r['merged_in_egraph']!s:>14}")
    costs = tuple(c for c in args.costs.split(",") if c)
    kernels = [kernel_row(n, sz, args.repeats, args.device, run=not args.no_run, costs=costs,
                          pass_repeats=args.pass_repeats) for n in names]
    for k in kernels:
        print(f"{k['program']:<16} kernels {k['kernels']}  kernel ms {k.get('kernel_ms')}"
              f"  speed-up {k.get('speedup')}")
        for variant, sat in k["saturate"].items():
            print(f"    {variant:<20} saturate {sat['pass_s']:.2f} s  {sat['e_nodes']} e-nodes"
                  f"  {sat['stop_reason']}  cost {sat['cost_before']} -> {sat['cost_after']}"
                  f"  sharing: {sat['sharing']}")
    result = {"versions": versions(), "git_commit": git_commit(), "time": timestamp(),
              "python": platform.python_version(), "arguments": vars(args),
              "sizes": asdict(sz),
              "saturation": rows, "kernels": kernels}
    write_json(result, args.out)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
    sys.exit(0)
