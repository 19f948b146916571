"""Sweep: the wgmma kernels' tile heights against the mma kernels, and what selection picks.

    python experiments/sweep_wgmma.py --device nvidia --out results/sweep_wgmma.json
        [--cases 1536x1536x768,2048x1024x512,b8x700x700x256] [--policies f16,tf32,3xtf32]
        [--forms 4,2,s2x256,s2] [--repeat 10] [--plan]

Each case (``bench_mma``'s form: ``MxNxK``, ``bBxMxNxK``, a trailing ``t`` for B stored
N x K) runs under each policy (``f16``: the case's operands are f16; ``tf32``, ``3xtf32``:
f32 operands under that precision policy), as

* ``mma``: the job prepared with the wgmma generators switched off (``mma-f16``,
  ``mma-tf32``, ``mma-3xtf32`` or what else takes it);
* ``w4``, ``w2``, ``ws2x256``, ``ws2``, ``wp2`` (``--forms``): that job's product kernel rebuilt
  by the wgmma generator at that many warpgroups a work-group (256- or 128-row tiles), A in
  registers or, with ``s``, A and B both copied by TMA (f16 and tf32,
  :mod:`accy.kernels.wgmma_ss`; ``x256`` its 256 columns) a tile a work-group, with ``p`` so
  with each work-group walking tiles (``wgmma_ss.PERSISTENT``), the selection's limits lifted
  (``wgmma.WARPGROUPS``, ``wgmma_tf32.WARPGROUPS``, ``wgmma.RATES``, ``wgmma.MIN_K``,
  ``wgmma_ss.FORMS`` ...);
* ``auto``: the default pipeline, whatever selection (``wgmma.plan_for``) picks.

Each is timed (OpenCL profiling events, two warm-up calls, median of ``--repeat``) and checked
against float64 numpy with ``bench_mma``'s bounds; torch's ``matmul`` (cuBLAS, TF32 as the
policy says) is timed with CUDA events where torch has CUDA. The JSON holds every time, and
for each case the regret of ``auto`` (its time over the fastest variant's).

``--plan`` needs no device: it prepares each case for an H200-like profile with the wgmma
probes' entries and its static local memory, and prints what selection picks and why (the mma
kernels' tiles, each wgmma tiling's score: ``w`` rows the register-A or TMA ones, ``s`` rows
3xtf32's form splitting both operands first, wgmma_ss3), for setting beside the timings.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_mma, mma_cases, mma_counts

import bench_mma  # noqa: E402
import mma_counts  # noqa: E402
from mma_cases import check, flops, inputs_of, parse_case, program, reference, with_dtype  # noqa

import accy  # noqa: E402
from accy.backends.registry import open_device  # noqa: E402
from accy.experiments.records import git_commit, timestamp, write_json  # noqa: E402
from accy.ir.program import Stage  # noqa: E402
from accy.kernels import mma_plan, tma, wgmma, wgmma_ss, wgmma_ss3, wgmma_tf32  # noqa: E402
from accy.kernels.contraction_plan import tile_groups  # noqa: E402
from accy.passes.kernel.kernelization import with_spaces  # noqa: E402
from accy.target import TMA_COPY, TMA_TF32, WGMMA_F16, WGMMA_TF32  # noqa: E402

DEFAULT_CASES = "1536x1536x768,2048x1024x512,b8x700x700x256,4096x1024x4096"
OFF = "wgmma-f16,wgmma-tf32,wgmma-3xtf32"
PLAN_TARGET = dataclasses.replace(  # H200-like, with the wgmma probes' entries: --plan
    mma_counts.COUNT_TARGET, device="H200-like (plan only)",
    tensor_cores=(*mma_counts.COUNT_TARGET.tensor_cores, WGMMA_F16, WGMMA_TF32, TMA_COPY,
                  TMA_TF32),
    static_local_bytes=231424)  # as the H200's probe found


def precision_of(policy: str) -> str:
    """The precision policy a case runs under (f16 products take f16 tensor cores under any)."""
    return "3xtf32" if policy == "f16" else policy


def parse_form(text: str) -> tuple[bool, int, int, bool]:
    """``--forms`` entry ``[s|p]W[xN]`` as (A copied too, warpgroups, columns, persistent:
    ``p``, A copied too with each work-group walking tiles, ``wgmma_ss.PERSISTENT``)."""
    persistent = text.startswith("p")
    copied = persistent or text.startswith("s")
    height, _, columns = text.lstrip("sp").partition("x")
    return copied, int(height), int(columns or wgmma.BN), persistent


@contextlib.contextmanager
def forced(form: tuple[bool, int, int, bool]):
    """Selection's limits lifted and only ``form`` (:func:`parse_form`) tried, while inside."""
    copied, height, columns, persistent = form
    saved = (wgmma.WARPGROUPS, dict(wgmma_tf32.WARPGROUPS), wgmma.RATES, wgmma.TMA_RATES,
             wgmma.MIN_K, wgmma_ss.ENABLED, wgmma_ss.FORMS, wgmma_ss.RATES, wgmma_ss.MIN_K,
             wgmma_ss.PERSISTENT)
    wgmma_ss.PERSISTENT = persistent
    wgmma.WARPGROUPS, wgmma.MIN_K = (height,), 0
    wgmma.RATES = wgmma.TMA_RATES = {height: math.inf}
    wgmma_tf32.WARPGROUPS.update({p: (height,) for p in wgmma_tf32.WARPGROUPS})
    form = next((f for f in wgmma_ss.FORMS if f[:2] == (height, columns)),
                (height, columns, 4))  # the stages selection gives it, else four
    wgmma_ss.ENABLED, wgmma_ss.FORMS = copied, (form,)
    wgmma_ss.MIN_K = {d: 0 for d in wgmma_ss.MIN_K}
    wgmma_ss.RATES = {d: {form: (math.inf, math.inf)} for d in wgmma_ss.RATES}
    try:
        yield
    finally:
        (wgmma.WARPGROUPS, tf32, wgmma.RATES, wgmma.TMA_RATES, wgmma.MIN_K, wgmma_ss.ENABLED,
         wgmma_ss.FORMS, wgmma_ss.RATES, wgmma_ss.MIN_K, wgmma_ss.PERSISTENT) = saved
        wgmma_tf32.WARPGROUPS.update(tf32)


def rebuilt(job: accy.PreparedJob, policy: str, form: tuple[bool, int, int, bool]
            ) -> accy.PreparedJob:
    """``job`` with its product kernel rebuilt by the wgmma generator of ``policy`` in
    ``form`` (:func:`parse_form`; selection's limits lifted), legalized again; ValueError
    where the generator cannot take it (its layout, its probe, a form not its own)."""
    if form[0] and policy == "3xtf32":
        raise ValueError("A copied by TMA (wgmma_ss) is wgmma-f16's and wgmma-tf32's")
    if not form[0] and form[2] != wgmma.BN:
        raise ValueError(f"A in registers takes {wgmma.BN} columns (wider: the s forms)")
    p = job.products[Stage.kernel]
    outlines = {o.work_item: o for o in p.outline.outlines}
    kernels, rebuilt_one, why = [], False, "no kernel"
    with forced(form):
        for k in p.kernels:
            item = p.schedule.item(k.work_item)
            group = p.fusion.groups[item.group]
            found = (wgmma.plan(group, p.target) if policy == "f16"
                     else wgmma_tf32.plan(group, p.target, policy))
            if isinstance(found, str):
                kernels.append(k)
                why = found
                continue
            built = (wgmma.build(group, outlines[k.work_item], item.kind, p.target)
                     if policy == "f16" else
                     wgmma_tf32.build(group, outlines[k.work_item], item.kind, p.target, policy))
            kernels += [with_spaces(b, p.spaces) if p.spaces is not None else b for b in built]
            rebuilt_one = True
    if not rebuilt_one:
        raise ValueError(why)
    products = {s: q for s, q in job.products.items() if s.index < Stage.target.index}
    products[Stage.kernel] = p.replace(kernels=tuple(kernels))
    records = tuple(r for r in job.records if r.stage is not Stage.target)
    return accy.prepare(accy.PreparedJob(products, records, job.pipeline), job.pipeline)


def case_of(text: str, policy: str) -> dict[str, Any]:
    case = parse_case(text)
    return with_dtype(case, "f16") if policy == "f16" else case


def plan_row(text: str, policy: str) -> dict[str, Any]:
    """What selection picks for a case on :data:`PLAN_TARGET` and the scores behind it."""
    case = case_of(text, policy)
    job = accy.prepare(program(case), bench_mma.pipeline(precision_of(policy)),
                       target=PLAN_TARGET)
    group = job.products[Stage.kernel].fusion.groups[0]
    found = mma_plan.plan(group, PLAN_TARGET)
    units = PLAN_TARGET.compute_units
    row: dict[str, Any] = {"case": text, "policy": policy, "picked": job.generators()}
    mine = (wgmma.plan(group, PLAN_TARGET) if policy == "f16"
            else wgmma_tf32.plan(group, PLAN_TARGET, policy))
    if isinstance(mine, str):
        row["why_not_wgmma"] = mine
    if isinstance(found, str):
        return {**row, "mma": found}
    c, theirs = found
    row["mma"] = {"tiles": theirs.text(),
                  "groups": tile_groups(c, theirs.bm, theirs.bn) * theirs.split,
                  "score": wgmma.mma_score(c, theirs, units)}
    tilings = (wgmma.tilings(c, PLAN_TARGET) if policy == "f16" else
               wgmma_tf32.tilings(c, PLAN_TARGET, policy))
    if policy == "3xtf32":  # the split-first form's (key s...)
        tilings = wgmma_ss3.tilings(c, wgmma_tf32.splits(group, c), PLAN_TARGET) + tilings
    for t, rate, per_unit in tilings:
        key = "s" if t.rounding == wgmma_ss3.ROUNDING else "w"
        row[f"{key}{t.bm}x{t.bn}"] = {"tiles": tile_groups(c, t.bm, t.bn), "rate": rate,
                                  "per_unit": per_unit, "stages": t.stages,
                                  "score": wgmma.wgmma_score(c, t, units, rate, per_unit)}
    return row


def run_row(text: str, policy: str, forms: list[str], target, runtime, repeat: int
            ) -> dict[str, Any]:
    """Every variant of a case timed and checked (see the module docstring)."""
    case = case_of(text, policy)
    precision = precision_of(policy)
    xs = inputs_of(case)
    exact, mag = reference(case, xs)
    row: dict[str, Any] = {"case": text, "policy": policy, "gflop": flops(case) / 1e9}
    base = accy.prepare(program(case), bench_mma.pipeline(precision, OFF), target=target)
    variants = {"mma": base,
                "auto": accy.prepare(program(case), bench_mma.pipeline(precision), target=target)}
    for form in forms:
        try:
            variants[f"w{form}"] = rebuilt(base, policy, parse_form(form))
        except ValueError as e:
            row[f"w{form}"] = {"error": str(e)}
    for name, job in variants.items():
        try:
            ms, got = bench_mma.time_accy(job, xs, runtime, repeat)
        except Exception as e:  # noqa: BLE001  (a build or run error is a result here)
            row[name] = {"error": bench_mma.error_line(str(e))}
            continue
        verdict = check(case, got, exact, mag, precision)
        row[name] = {"ms": ms, "ok": verdict["ok"], "bound_use": verdict["bound_use"],
                     "generators": job.generators()}
    timed = {k: v["ms"] for k, v in row.items() if isinstance(v, dict) and "ms" in v
             and k != "auto"}
    if "ms" in row["auto"] and timed:
        row["auto_regret"] = row["auto"]["ms"] / min(timed.values())
    torch = bench_mma.time_torch(case, xs, repeat, policy == "tf32")
    if torch is not None:
        row["torch_ms"] = torch["ms"]
    return row


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default=os.environ.get("ACCY_DEVICE", "nvidia"))
    ap.add_argument("--cases", default=DEFAULT_CASES)
    ap.add_argument("--policies", default="f16,tf32,3xtf32")
    ap.add_argument("--forms", default="4,2,s2x256,s2",
                    help="[s|p]W[xN]: W warpgroups a work-group, A copied too (s; p: and "
                    "each work-group walking tiles), N columns")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--plan", action="store_true", help="no device: what selection picks")
    ap.add_argument("--out", default="results/sweep_wgmma.json")
    args = ap.parse_args(argv)
    cases, policies = args.cases.split(","), args.policies.split(",")
    for p in policies:
        if p not in ("f16", *wgmma_tf32.WARPGROUPS):
            ap.error(f"--policies: unknown policy {p!r} (f16, tf32, 3xtf32)")
    rows = []
    if args.plan:
        with tma.offline():
            for text in cases:
                for policy in policies:
                    rows.append(plan_row(text, policy))
                    print(rows[-1], flush=True)
        result = {"benchmark": "sweep_wgmma --plan", "target": PLAN_TARGET.describe(),
                  "rows": rows}
    else:
        runtime, target = open_device(args.device)
        forms = [f for f in args.forms.split(",") if f]
        for text in cases:
            for policy in policies:
                row = run_row(text, policy, forms, target, runtime, args.repeat)
                rows.append(row)
                times = " ".join(f"{k}={v['ms']:.4f}" for k, v in row.items()
                                 if isinstance(v, dict) and "ms" in v)
                print(f"{text:18s} {policy:6s} {times} picked {row['auto'].get('generators')}"
                      + ("" if all(v.get("ok", True) for v in row.values()
                                   if isinstance(v, dict)) else "  OUT OF BOUNDS"), flush=True)
        regrets = [r["auto_regret"] for r in rows if "auto_regret" in r]
        result = {"benchmark": "sweep_wgmma", "device": target.describe(), "rows": rows,
                  "auto_regret_geomean": math.exp(sum(map(math.log, regrets)) / len(regrets))
                  if regrets else None}
    result |= {"timestamp": timestamp(), "commit": git_commit(),
               "command": " ".join(sys.argv if argv is None else ["sweep_wgmma.py", *argv])}
    write_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
