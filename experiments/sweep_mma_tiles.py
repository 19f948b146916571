"""Sweep: the mma kernels' f32 tilings over random products, and how well selection's rates pick.

    python experiments/sweep_mma_tiles.py --device nvidia --out results/sweep_mma_tiles.json
        [--seed 11] [--count 40] [--budget-s 360] [--cases 761x966x313,b45x540x404x95]
        [--tiles 128x128x16:2x2,128x64x16:2x2,64x128x16:2x2,64x64x16:2x2,64x32x16:2x2]
        [--repeat 6] [--rounds 4]
    python experiments/sweep_mma_tiles.py --evaluate results/sweep_mma_tiles.json [...]
        [--rates 128x128=0.9,128x64=1.05,64x32=0.9] [--fit]

A run draws ``--count`` f32 products at random (``--seed``; or takes ``--cases``, bench_mma's
form ``MxNxK`` / ``bBxMxNxK``): K log-uniform in 32..3000, M and N in 300..6000, or a quarter
of them batched (4..47 batches of 200..899 rows and columns), the shapes a researcher's
programs have rather than multiples of the tiles. Each product is prepared under ``3xtf32``
(selection's pick, ``base``: mma, wgmma, any K split, padding kernels) and its product kernel
rebuilt with each of ``--tiles`` (unsplit, stages as ``mma_plan.choose_tiles`` gives them:
3 where local memory holds them, else 2); all are timed interleaved, ``--rounds`` rounds of
``--repeat`` calls (OpenCL profiling events, the operands resident, medians) and checked
against float64 with bench_mma's bounds. Products are drawn until ``--budget-s`` has passed.

``--evaluate`` needs no device. For each measured product it takes the tiling
``choose_tiles``'s scoring would pick (each tiling's balance of work-groups over the compute
units' waves times its rate, ``MAX_PADDING`` and ``BALANCE_TIE`` as there, unsplit) among
selection's candidates (``mma_plan.CANDIDATES`` at ``mma_plan.rate``; ``--rates`` changes or
adds rates, 0 leaves a tiling out), and prints its time over the fastest tiling measured (the
regret), their geometric mean and the largest. ``--fit`` searches a grid
of rates for the least geometric-mean regret, and prints it with the regret of each half of
the products under rates fitted to the other (a check that the fit is not the noise).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from mma_cases import check, inputs_of, parse_case, program, reference  # noqa: E402

from accy.kernels import mma_plan  # noqa: E402
from accy.kernels.mma_plan import MmaTiles, parse_tiles  # noqa: E402

DEFAULT_TILES = "128x128x16:2x2,128x64x16:2x2,64x128x16:2x2,64x64x16:2x2,64x32x16:2x2"
UNITS = 132  # compute units of the H200, where the sweeps ran (a run records its own)


def draw(seed: int, count: int) -> list[str]:
    """``count`` random products (see the module docstring) as bench_mma case texts."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        k = round(math.exp(rng.uniform(math.log(32), math.log(3000))))
        if rng.uniform() < 0.25:
            b, m, n = (int(rng.integers(lo, hi)) for lo, hi in ((4, 48), (200, 900), (200, 900)))
            out.append(f"b{b}x{m}x{n}x{k}")
        else:
            m, n = (round(math.exp(rng.uniform(math.log(300), math.log(6000)))) for _ in "mn")
            out.append(f"{m}x{n}x{k}")
    return out


def staged(t: MmaTiles, k: int, local_bytes: int) -> MmaTiles:
    """``t`` at the stages ``choose_tiles`` gives a pipelined kernel (3 where they fit local
    memory and K has the steps, else 2)."""
    steps = -(-k // t.bk)
    for stages in (3, 2):
        deeper = replace(t, stages=stages)
        if deeper.local_bytes() <= local_bytes and stages <= max(2, steps):
            return deeper
    return replace(t, stages=2)


def time_product(text: str, tiles: dict[str, MmaTiles], target, runtime, rounds: int,
                 repeat: int) -> dict[str, Any]:
    """One product: ``base`` and each tiling, timed interleaved and checked."""
    from bench_mma import error_line, with_mma_tiles

    import accy
    from accy.backends.opencl.device_array import DeviceArray
    from accy.target import resolve_precision

    case = parse_case(text)
    xs = inputs_of(case)
    exact, mag = reference(case, xs)
    base = accy.prepare(program(case), "accy-default", target=target)
    runs, rows = {}, {}
    for name in ("base", *tiles):
        try:
            job = base if name == "base" else with_mma_tiles(
                base, staged(tiles[name], case["k"], target.local_mem_bytes), "3xtf32")
            if name != "base" and not any(g.startswith("mma-") for g in job.generators()):
                raise ValueError("no mma kernel took the product (the target's probe found "
                                 "no TF32 tensor cores, or the product is too small)")
            exe = job.executable(device=runtime)
            dev = [exe.to_device(x) for x in xs]
            (first,) = exe(*dev)
            out = DeviceArray.empty(runtime, first.shape, first.dtype)
            exe(*dev, out=out)
            ok = check(case, out.get(), exact, mag, resolve_precision("3xtf32", target))["ok"]
            runs[name] = (exe, dev, out)
            rows[name] = {"ok": ok, "generators": job.generators(),
                          "kernels": [k.entry for k in job.kernels],
                          "work_groups": [k.geometry.global_size[0] // k.geometry.local_size[0]
                                          for k in job.kernels]}
        except Exception as exc:  # one tiling must not end the run
            rows[name] = {"error": f"{type(exc).__name__}: {error_line(str(exc))}"}
    calls: dict[str, list[list[int]]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, (exe, dev, out) in runs.items():
            for _ in range(repeat):
                exe(*dev, out=out)
                calls[name].append(list(exe.last_kernel_ns))
    for name, samples in calls.items():
        rows[name]["ms"] = statistics.median(sum(c) for c in samples) / 1e6
        rows[name]["ms_each"] = [statistics.median(c[i] for c in samples) / 1e6
                                 for i in range(len(samples[0]))]
    return {"case": text, "rows": rows}


# evaluation ---------------------------------------------------------------------------------
def key(t: MmaTiles) -> str:
    return f"{t.bm}x{t.bn}"


def product_kernel_ms(row: dict[str, Any], base: dict[str, Any]) -> float | None:
    """A tiling's time without the padding kernels the product needs whatever its tiles
    (those before the product kernel in ``base``)."""
    if "ms" not in row:
        return None
    pads = sum(ms for ms, entry in zip(base.get("ms_each", []), base.get("kernels", []),
                                      strict=False) if not entry.startswith("einsum"))
    return row["ms"] - pads


def pick(case: dict[str, Any], tiles: list[MmaTiles], rates: dict[str, float],
         units: int) -> MmaTiles:
    """What ``choose_tiles``'s scoring picks among ``tiles`` (largest first) at ``rates``."""
    batch = max(case["batch"], 1)

    def groups(t: MmaTiles) -> int:
        return batch * -(-case["m"] // t.bm) * -(-case["n"] // t.bn)

    def padding(t: MmaTiles) -> float:
        return -(-case["m"] // t.bm) * t.bm * -(-case["n"] // t.bn) * t.bn / (case["m"] * case["n"])

    snug = ([t for t in tiles if padding(t) <= mma_plan.MAX_PADDING]
            or [min(tiles, key=padding)])
    scores = [mma_plan.balance(groups(t), units) * rates[key(t)] for t in snug]
    return next(t for t, s in zip(snug, scores, strict=True)
                if s >= (1 - mma_plan.BALANCE_TIE) * max(scores))


def measured(results: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, float]]]:
    """(case, product-kernel ms by tiles key) of every product whose tilings all ran."""
    out = []
    for r in results:
        rows = r["rows"]
        times = {}
        for name, row in rows.items():
            if name == "base":
                continue
            ms = product_kernel_ms(row, rows["base"])
            if ms is None or not row.get("ok"):
                break
            times[key(parse_tiles(name))] = ms
        else:
            out.append((parse_case(r["case"]), times))
    return out


def regret(data, tiles: list[MmaTiles], rates: dict[str, float], units: int
           ) -> tuple[float, float, list[tuple[str, float]]]:
    """Geometric-mean and largest regret of the picks, and each product's."""
    each = []
    for case, times in data:
        chosen = key(pick(case, tiles, rates, units))
        each.append((case["name"], times[chosen] / min(times.values())))
    logs = [math.log(r) for _, r in each]
    return math.exp(sum(logs) / len(logs)), max(r for _, r in each), each


def current_rates() -> dict[str, float]:
    """Selection's f32 candidates and their rates."""
    return {key(t): mma_plan.rate(t) for t in mma_plan.CANDIDATES}


def fit(data, tiles: list[MmaTiles], units: int, reference: str = "64x64"
        ) -> tuple[float, dict[str, float]]:
    """The grid's rates (``reference`` tiles at 1) of the least geometric-mean regret."""
    grid = (0.8, 0.85, 0.9, 0.95, 1.0, 1.05, 1.1, 1.15, 1.2)
    free = [key(t) for t in tiles if key(t) != reference]
    best: tuple[float, dict[str, float]] | None = None
    for values in itertools.product(grid, repeat=len(free)):
        rates = {reference: 1.0, **dict(zip(free, values, strict=True))}
        g = regret(data, tiles, rates, units)[0]
        if best is None or g < best[0] - 1e-12:
            best = (g, rates)
    assert best is not None
    return best


def evaluate(paths: list[str], rates_text: str, do_fit: bool) -> dict[str, Any]:
    results, units = [], UNITS
    for path in paths:
        loaded = json.loads(Path(path).read_text())
        results += loaded["rows"]
        units = loaded.get("compute_units", units)
    tile_names = list(results[0]["rows"]) if results else []
    tiles = [parse_tiles(n) for n in tile_names if n != "base"]
    data = measured(results)
    if not data:
        raise SystemExit("--evaluate: no product with every tiling measured")
    rates = current_rates()
    for part in filter(None, rates_text.split(",")):
        name, _, value = part.partition("=")
        rates[name.strip()] = float(value)
    # the candidates: the measured tilings with a rate (0 leaves one out)
    chosen = [t for t in tiles if rates.get(key(t), 0) > 0]
    g, worst, each = regret(data, chosen, rates, units)
    for name, r in each:
        print(f"  {name:<22} {r:.3f}x of the fastest tiling")
    print(f"{len(data)} products, rates {rates}: regret {g:.4f} geometric mean, {worst:.3f} "
          "largest")
    out: dict[str, Any] = {"products": len(data), "rates": rates, "regret": g, "largest": worst}
    if do_fit:
        g_fit, fitted = fit(data, tiles, units)
        halves = (data[::2], data[1::2])
        held = [regret(test, tiles, fit(train, tiles, units)[1], units)[0]
                for train, test in (halves, halves[::-1])]
        print(f"fitted {fitted}: regret {g_fit:.4f}; each half under the other's fit "
              f"{held[0]:.4f}, {held[1]:.4f}")
        out.update(fitted=fitted, fitted_regret=g_fit, held_out_regret=held)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default=os.environ.get("ACCY_DEVICE", "nvidia"))
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--count", type=int, default=40)
    ap.add_argument("--cases", default="", help="bench_mma cases instead of a random draw")
    ap.add_argument("--tiles", default=DEFAULT_TILES)
    ap.add_argument("--budget-s", type=float, default=360.0)
    ap.add_argument("--repeat", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--evaluate", nargs="+", default=None, metavar="JSON")
    ap.add_argument("--rates", default="", help="tiles=rate,... for --evaluate")
    ap.add_argument("--fit", action="store_true", help="with --evaluate: fit the rates")
    ap.add_argument("--out", default="results/sweep_mma_tiles.json")
    args = ap.parse_args(argv)
    if args.evaluate:
        return evaluate(args.evaluate, args.rates, args.fit)
    from accy.backends.registry import open_device
    from accy.experiments.records import git_commit, timestamp, write_json

    tiles = {text: parse_tiles(text) for text in args.tiles.split(",") if text}
    runtime, target = open_device(args.device)
    cases = args.cases.split(",") if args.cases else draw(args.seed, args.count)
    rows, start = [], time.perf_counter()
    for text in cases:
        if time.perf_counter() - start > args.budget_s:
            print(f"budget of {args.budget_s:.0f} s spent: {len(rows)} products", flush=True)
            break
        row = time_product(text, tiles, target, runtime, args.rounds, args.repeat)
        rows.append(row)
        times = {n: r["ms"] for n, r in row["rows"].items() if "ms" in r}
        base = times.get("base")
        print(f"{text:<22} base {base:.4f} " + " ".join(
            f"{n.split(':')[0]} {ms / base:.2f}" for n, ms in times.items() if n != "base")
            if base else f"{text}: {row['rows']['base']}", flush=True)
    result = {"benchmark": "sweep_mma_tiles", "device": target.device,
              "compute_units": target.compute_units, "seed": args.seed, "rows": rows,
              "git_commit": git_commit(), "timestamp": timestamp(), "command": sys.argv}
    write_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
