"""A/B planning knobs on matrix products: the same products under variants that set module
attributes of accy (thresholds, tile tables, switches), interleaved, against torch eager.

    python experiments/ab_gemm.py --device nvidia --cases f16:31x360x536,f32:2000x30x900 \
        --variant unsplit=accy.kernels.mma_plan.SPLIT_BYTES=1e12 --out results/ab.json
    python experiments/ab_gemm.py --device nvidia --seed 7 --count 30 --max-k 2048 \
        --variant fused=accy.kernels.split_k.FUSED=True  # products drawn as sweep_gemm draws
    python experiments/ab_gemm.py --cases f32:2x512x256 --no-torch \
        --variant narrow=accy.kernels.contraction_plan.STREAM_VECTORS=1  # PoCL's CPU tiles
    python experiments/ab_gemm.py --device nvidia --cases f32:1298x445x8643 \
        --variant "pad=pass:contraction-padding{intensity=384}"  # a pass's options
    python experiments/ab_gemm.py --plans-only papers/data/h100_profile.json --count 400 \
        --dtypes f16 --variant old=accy.kernels.wgmma.LONE=0.5  # which plans change, no GPU

The products: ``--cases`` (``dtype:MxNxK``, or ``dtype:BxMxNxK`` for a batch of B, comma
separated; ``:nt`` after the sizes: B stored N x K, ``x @ W.T`` as ``torch.nn.Linear`` keeps
W, where B is otherwise K x N) and/or ``--count`` products drawn with ``--seed`` by
``experiments/sweep_gemm.py``'s draw and bounds (``--dtypes``, ``--min-side`` ...
``--max-macs``, ``--max-batch``), B laid out as ``--layout`` says. The
variants: ``base`` (accy as it is) first, then each ``--variant NAME=SETTING[;SETTING...]``, a
setting either ``MODULE.ATTR=VALUE`` (a Python literal: numbers, True/False/None, strings,
tuples; the attribute must exist) or ``pass:PASS{OPTIONS}``, pipeline text of a pass of
``accy-default`` run with those options instead (``bench_gpu.pipeline_text``). Each variant
sets its attributes for its own runs and restores them after, so the variants of a product run
in turn in every one of ``--rounds`` rounds (drift in the machine's speed falls on all alike);
each records its least kernel time over the rounds (``bench_gpu.py``'s accy side: OpenCL
events, medians of ``--repeat`` calls, the float64 check within accy's error bounds), its call
time, its plan (each kernel's entry and launch geometry) and generators. A module that binds a
name from another (``from m import X``) keeps its own binding: set the attribute where it is
read. Prints each product's times, and per variant the geometric mean of base's kernel time
over its own over the products whose plan it changes, how many and the least; writes every row
and the target profile (what the plans were made for) to ``--out``, rewritten after every
product (``complete`` false until the end, the products left as ``not_run``: a run killed by
its time limit keeps its rows); ``--minutes`` starts no product past it. ``--plans-only PROFILE``
times nothing: it plans each product under each variant for a saved profile (tensor maps
planned offline, ``accy.kernels.tma.offline``) and lists, as ``--cases``, the products whose
plan each variant changes: the device run's cases.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import gc
import importlib
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_gpu as bg  # noqa: E402
import bench_gpu_programs as bp  # noqa: E402
import bench_gpu_torch as bt  # noqa: E402
import sweep_gemm  # noqa: E402

import accy  # noqa: E402
from accy.backends.registry import open_device  # noqa: E402
from accy.errors import PipelineError  # noqa: E402
from accy.experiments.records import command_line, provenance, write_json  # noqa: E402
from accy.kernels import tma  # noqa: E402
from accy.target import TargetProfile  # noqa: E402

Setting = tuple[Any, str, Any]  # (module, attribute, value)


@dataclass(frozen=True)
class Variant:
    """A variant: module attributes it sets and pipeline text of passes it runs instead."""

    name: str
    settings: list[Setting] = field(default_factory=list)
    passes: tuple[str, ...] = ()  # each one pass's pipeline text

    def texts(self) -> list[str]:
        return [f"{m.__name__}.{a}={v!r}" for m, a, v in self.settings] + [
            f"pass:{p}" for p in self.passes]


def parse_variant(text: str) -> Variant:
    """``NAME=SETTING[;...]`` as a :class:`Variant` (see the module); a ValueError naming what
    is wrong otherwise."""
    name, sep, rest = text.partition("=")
    if not sep or not name.isidentifier() or name == "base":
        raise ValueError(f"variant {text!r}: want NAME=MODULE.ATTR=VALUE or "
                         "NAME=pass:PASS{OPTIONS} (NAME an identifier, not 'base')")
    settings, passes = [], []
    for part in rest.split(";"):
        if part.strip().startswith("pass:"):
            passes.append(part.strip()[5:])
            named = [t.partition("{")[0].strip() for t in passes]
            if named.count(named[-1]) > 1:
                raise ValueError(f"variant {name}: pass {named[-1]} given twice")
            try:
                bg.pipeline_text("f32", passes=passes[-1])
            except PipelineError as e:
                raise ValueError(f"variant {name}: {part.strip()!r}: {e}") from None
            continue
        target, sep, value = part.partition("=")
        module_name, _, attr = target.strip().rpartition(".")
        if not sep or not module_name:
            raise ValueError(f"variant {name}: {part!r} is neither MODULE.ATTR=VALUE nor "
                             "pass:PASS{OPTIONS}")
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            raise ValueError(f"variant {name}: cannot import {module_name} ({e})") from None
        if not hasattr(module, attr):
            raise ValueError(f"variant {name}: {module_name} has no attribute {attr}")
        try:
            parsed = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            raise ValueError(f"variant {name}: {value.strip()!r} is not a Python literal "
                             "(quote strings)") from None
        settings.append((module, attr, parsed))
    return Variant(name, settings, tuple(passes))


def settings_of(text: str) -> list[Setting]:
    """``MODULE.ATTR=VALUE[;...]`` (a script's ``--set``) as settings; a ValueError naming
    what is wrong, passes included (a pipeline option's work, not a knob's)."""
    found = parse_variant(f"set={text}")
    if found.passes:
        raise ValueError("module attributes only (passes: the script's pipeline options)")
    return found.settings


@contextlib.contextmanager
def applied(settings: list[Setting]) -> Iterator[None]:
    """The variant's attributes set for the block, restored after it (even on an error)."""
    saved = [(module, attr, getattr(module, attr)) for module, attr, _ in settings]
    try:
        for module, attr, value in settings:
            setattr(module, attr, value)
        yield
    finally:
        for module, attr, value in reversed(saved):
            setattr(module, attr, value)


Product = tuple[str, dict[str, int], str]  # dtype, sizes, B's layout (sweep_gemm.LAYOUTS)


def parse_case(text: str) -> Product:
    dtype, _, rest = text.strip().partition(":")
    dims, _, layout = rest.partition(":")
    sizes = dims.split("x")
    if (dtype not in sweep_gemm.DTYPES or len(sizes) not in (3, 4) or not all(
            s.isdigit() and int(s) > 0 for s in sizes) or layout not in ("", "nt")):
        raise ValueError(f"case {text!r}: want DTYPE:MxNxK or DTYPE:BxMxNxK (then :nt for a B "
                         f"stored N x K) with DTYPE one of {', '.join(sweep_gemm.DTYPES)} and "
                         "positive sizes")
    return dtype, dict(zip("BMNK"[-len(sizes):], map(int, sizes), strict=True)), layout or "nn"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None, help="OpenCL selector (default: $ACCY_DEVICE/pocl)")
    p.add_argument("--cases", default="",
                   help="DTYPE:MxNxK (or DTYPE:BxMxNxK) products, comma separated")
    p.add_argument("--count", type=int, default=0, help="products drawn as sweep_gemm draws")
    p.add_argument("--seed", type=int, default=0)
    sweep_gemm.add_bounds(p)
    p.add_argument("--variant", action="append", default=[], metavar="NAME=SETTING",
                   help="a variant (repeatable; settings MODULE.ATTR=VALUE or "
                        "pass:PASS{OPTIONS}, joined by ';')")
    p.add_argument("--rounds", type=int, default=2, help="rounds of every variant in turn")
    p.add_argument("--repeat", type=int, default=6, help="timed calls a product and variant")
    p.add_argument("--no-torch", action="store_true", help="time accy only")
    p.add_argument("--minutes", type=float, default=0.0,
                   help="start no product past this many minutes (0: no bound); the record, "
                        "rewritten after every product, lists those not run")
    p.add_argument("--plans-only", metavar="PROFILE", default=None,
                   help="no device: plan every product under every variant for the target "
                        "profile in this JSON file (accy target --save, or a record of this "
                        "script or sweep_gemm holding one) and list those a variant changes")
    p.add_argument("--out", default="results/ab_gemm.json")
    args = p.parse_args(argv)
    sweep_gemm.check_bounds(p, args)
    try:
        args.products = [parse_case(c) for c in args.cases.split(",") if c.strip()]
        args.variants = [Variant("base")] + [parse_variant(v) for v in args.variant]
    except ValueError as e:
        p.error(str(e))
    if len({v.name for v in args.variants}) != len(args.variants):
        p.error("--variant: names must differ")
    if args.count < 0 or args.rounds < 1 or args.repeat < 1 or not args.minutes >= 0:
        p.error("--count and --minutes must be at least 0, --rounds and --repeat at least 1")
    rng = random.Random(args.seed)
    args.products += [(*sweep_gemm.draw(rng, args), args.layout) for _ in range(args.count)]
    if not args.products:
        p.error("no products: give --cases or --count")
    if len(args.variants) < 2:
        p.error("give at least one --variant (base is accy as it is)")
    if args.plans_only is not None:
        try:
            args.target = TargetProfile.load(args.plans_only)
        except (OSError, ValueError) as e:
            p.error(f"--plans-only: {e}")
    return args


def plan_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    """``--plans-only``: each product's plan (``bench_gpu.plan_record``) under each variant,
    prepared for ``args.target`` with tensor maps encoded offline (``tma.offline``); nothing
    runs."""
    rows = []
    with tma.offline():
        for dtype, dims, layout in args.products:
            spec = sweep_gemm.spec("ab", dtype, dims, layout)
            row: dict[str, Any] = {"dtype": dtype, "dims": dims, "layout": layout,
                                   "variants": {}}
            for v in args.variants:
                with applied(v.settings):
                    try:
                        job = accy.prepare(bp.program(spec, dims), bg.pipeline_text(
                            "f32", passes=",".join(v.passes)), target=args.target)
                        row["variants"][v.name] = bg.plan_record(job)
                    except Exception as e:  # one variant's failure must not end the run
                        row["variants"][v.name] = {"error": bg._error(e)}
            rows.append(row)
            print(f"{dtype:5s} {shape(dims, layout)} " + " ".join(
                f"{n}:{verdict(row, n)}{moved(row, n)}" for n in row["variants"] if n != "base"),
                flush=True)
    return rows


def verdict(row: dict[str, Any], name: str) -> str:
    """How variant ``name`` planned ``row``'s product against base: ``changed``, ``same`` or
    ``error`` (either failed)."""
    base, mine = row["variants"]["base"], row["variants"][name]
    if "error" in base or "error" in mine:
        return "error"
    return "same" if sweep_gemm.same_plan(base, mine) else "changed"


def moved(row: dict[str, Any], name: str) -> str:
    """`` (BASE'S -> VARIANT'S generators)`` where variant ``name`` changed them, else ``""``."""
    base, mine = row["variants"]["base"], row["variants"][name]
    if verdict(row, name) != "changed" or base["generators"] == mine["generators"]:
        return ""
    return f" ({'+'.join(base['generators'])} -> {'+'.join(mine['generators'])})"


def case_text(dtype: str, dims: dict[str, int], layout: str) -> str:
    """A product as ``--cases`` gives it (:func:`parse_case`'s inverse)."""
    return f"{dtype}:{shape(dims, layout).strip()}"


def shape(dims: dict[str, int], layout: str) -> str:
    """``sweep_gemm.shape``'s cell, ``:nt`` after it where B is stored N x K."""
    return sweep_gemm.shape(dims) + (":nt" if layout == "nt" else "   ")


def changed_cases(rows: list[dict[str, Any]], names: list[str]) -> dict[str, list[str]]:
    """Per variant but base: the products (as ``--cases`` gives them) whose plan it changes."""
    return {name: [case_text(r["dtype"], r["dims"], r["layout"]) for r in rows
                   if verdict(r, name) == "changed"] for name in names[1:]}


def run_product(product: Product, args: argparse.Namespace, runtime: Any, target: Any,
                torch: Any) -> dict[str, Any]:
    """One product's row: each variant's least kernel ms over the rounds and its record."""
    dtype, dims, layout = product
    spec = sweep_gemm.spec("ab", dtype, dims, layout)
    xs = bp.inputs(spec, dims)
    check = bp.Checker(spec, dims, xs)
    runs: dict[str, list[dict[str, Any]]] = {v.name: [] for v in args.variants}
    for _ in range(args.rounds):
        for v in args.variants:
            with applied(v.settings):
                try:
                    runs[v.name].append(bg.bench_accy(
                        spec, dims, xs, "f32", runtime, target, args.repeat, check,
                        passes=",".join(v.passes)))
                except Exception as e:  # one variant's failure must not end the run
                    runs[v.name].append({"error": bg._error(e)})
            gc.collect()
    row: dict[str, Any] = {"dtype": dtype, "dims": dims, "layout": layout, "torch_ms": None,
                           "variants": {}}
    for name, records in runs.items():
        ok = [r for r in records if "error" not in r]
        if not ok:
            row["variants"][name] = {"error": records[-1]["error"]}
            continue
        best = min(ok, key=lambda r: r["kernel_ms"])
        row["variants"][name] = {**best, "kernel_ms_rounds": [r["kernel_ms"] for r in ok]}
    if torch is not None:
        row["torch_ms"] = sweep_gemm.torch_ms(spec, dims, xs, torch, args.repeat)
    return row


def summarise(rows: list[dict[str, Any]], names: list[str]) -> dict[str, dict[str, Any]]:
    """Per variant but base: over the products both ran whose plan it changes, how many, the
    geometric mean and least of base's kernel time over its own, and how many it ran wrong."""
    out = {}
    for name in names[1:]:
        speed, wrong = [], 0
        for r in rows:
            base, mine = r["variants"]["base"], r["variants"][name]
            if "error" in base or "error" in mine:
                continue
            wrong += not mine["check"]["ok"]
            if not sweep_gemm.same_plan(base, mine):
                speed.append(base["kernel_ms"] / mine["kernel_ms"])
        out[name] = {"changed": len(speed), "geomean_speedup": bg.geomean(speed),
                     "least": min(speed) if speed else None, "wrong": wrong}
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    names = [v.name for v in args.variants]
    command = command_line(argv)
    if args.plans_only is not None:
        rows = plan_rows(args)
        changed = changed_cases(rows, names)
        for name, cases in changed.items():
            print(f"{name}: {len(cases)} of {len(rows)} products change plan"
                  + (f": --cases {','.join(cases)}" if cases else ""))
        result = {"benchmark": "ab_gemm --plans-only", "variants": {
            v.name: v.texts() for v in args.variants}, "target": args.target.describe(),
            "target_profile": args.target.to_dict(), "rows": rows, "changed": changed,
            **provenance(False, command=command)}
        write_json(result, args.out)
        return result
    runtime, target = open_device(args.device)
    torch, torch_note = (None, "--no-torch") if args.no_torch else bt.load_torch()
    if torch is not None:
        bt.configure(torch, False)
    rows: list[dict[str, Any]] = []
    start = time.monotonic()
    head = {"benchmark": "ab_gemm", "variants": {v.name: v.texts() for v in args.variants},
            "rounds": args.rounds, "repeat": args.repeat, "accy_device": runtime.info.key,
            "target": target.describe(), "target_profile": target.to_dict(),
            "torch_note": torch_note,
            **provenance(args.device, extra_versions=("torch",), command=command)}

    def record(complete: bool) -> dict[str, Any]:
        return {**head, "rows": rows, "summary": summarise(rows, names), "complete": complete,
                "not_run": [case_text(*p) for p in args.products[len(rows):]],
                "seconds": time.monotonic() - start}

    print(f"{'dtype':5s} {'[B x] M x N x K':>25s} {'torch ms':>9s} " +
          " ".join(f"{n[:12]:>14s}" for n in names))
    for product in args.products:
        if args.minutes and time.monotonic() - start >= 60 * args.minutes:
            print(f"--minutes {args.minutes:g} spent: {len(args.products) - len(rows)} "
                  "products not run (the record lists them)")
            break
        row = run_product(product, args, runtime, target, torch)
        rows.append(row)
        write_json(record(False), args.out, quiet=True)  # kept if killed
        cells = []
        for n in names:
            v = row["variants"][n]
            cells.append(f"{'error':>14s}" if "error" in v else
                         f"{v['kernel_ms']:>9.4f} ({v['kernels']})"
                         f"{'' if v['check']['ok'] else '!'}")
        t = row["torch_ms"]
        print(f"{row['dtype']:5s} {shape(row['dims'], row['layout'])} "
              f"{'-' if t is None else f'{t:.4f}':>9s} " + " ".join(cells), flush=True)
    result = record(True)
    for name, s in result["summary"].items():
        gm = "-" if s["geomean_speedup"] is None else f"{s['geomean_speedup']:.3f}x"
        least = "-" if s["least"] is None else f"{s['least']:.2f}x"
        print(f"{name}: {s['changed']} products changed plan, geometric mean {gm} of base's "
              f"kernel time, least {least}; wrong {s['wrong']}")
    write_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
