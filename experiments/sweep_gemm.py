"""Sweep random matrix products on a device: accy's default plan against torch eager, to find
the shapes where accy's tile choice is worst (a sweep, not a table of special cases).

    python experiments/sweep_gemm.py --device nvidia --minutes 4 --seed 39 \
        --out results/sweep_gemm.json
    python experiments/sweep_gemm.py --count 4 --max-side 64 --max-k 256 --no-torch  # PoCL
    python experiments/sweep_gemm.py --compare before.json after.json  # two sweeps' rows

Each product ``(M, K) @ (K, N)`` draws M and N log-uniformly in ``[--min-side, --max-side]``, K
in ``[--min-k, --max-k]`` and its dtype from ``--dtypes`` (f16 N and K rounded up to even:
whole pairs of halves); with ``--max-batch`` above 1, a batch of B such products ``(B, M, K) @
(B, K, N)`` (B log-uniform in ``[1, --max-batch]``; B of 1 an unbatched product), otherwise the
same draws as without it; ``--layout nt`` stores each B as N x K (``x @ W.T``) instead;
products of more than ``--max-macs`` multiply-adds (all entries') are drawn again. Each runs
under ``experiments/bench_gpu.py``'s accy side (OpenCL-event kernel time and call time,
medians of ``--repeat`` after warm-up; generators and kernel count; the float64 check of 32
rows within accy's error bounds) and, with torch on CUDA, torch eager's ``matmul``
(torch.profiler kernel time; TF32 off). Stops after ``--count`` products or ``--minutes``,
whichever comes first. Prints the ``--show`` worst by speed against torch (accy's kernel time
over torch's; without torch, the slowest by accy's kernel time a multiply-add) and each shape
class's geometric mean and least speed (dtype, batched or not, the shorter side's range, K's:
:func:`by_class`), and writes every row, with the geometric mean, the classes and the target
profile, to ``--out``, rewritten after every product (``complete`` false until the end, so a
sweep killed by its time limit keeps its rows). OpenCL events read a few microseconds more than
torch.profiler on the same kernel, so small products of several kernels read slow by that much:
with torch, the sweep first times ``bench_gpu.py``'s calibration (``a + b`` on 32 elements both
ways; the difference is ``offset_ms``) and gives each row ``speed_vs_torch_net`` (accy's kernel
time less the offset for each kernel it launched, :func:`with_net`), each class and the summary
its geometric mean.

``--compare BEFORE AFTER`` runs nothing: it reads two sweeps' JSON (the same ``--seed`` draws
the same products, so a sweep before a change and one after time the same ones) and prints,
for the products in both, those whose plan differs (generators, and each kernel's entry and
launch geometry where both sweeps recorded them, else the kernel count: :func:`same_plan`), slowest
first, with the geometric means of accy's speed-up (BEFORE's kernel time over AFTER's) over
them and over the rest (the runs' own difference), and of the speed against torch in each
(raw and net; net only where the sweep has it).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_gpu as bg  # noqa: E402
import bench_gpu_programs as bp  # noqa: E402
import bench_gpu_torch as bt  # noqa: E402

from accy.backends.registry import open_device  # noqa: E402
from accy.experiments.records import command_line, provenance, write_json  # noqa: E402

DTYPES = ("f32", "f16")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None, help="OpenCL selector (default: $ACCY_DEVICE/pocl)")
    p.add_argument("--count", type=int, default=1000, help="products at most")
    p.add_argument("--minutes", type=float, default=5.0, help="time at most (the last product "
                   "started within it finishes)")
    p.add_argument("--seed", type=int, default=0)
    add_bounds(p)
    p.add_argument("--repeat", type=int, default=6, help="timed calls a product and side")
    p.add_argument("--show", type=int, default=20, help="worst products printed")
    p.add_argument("--no-torch", action="store_true", help="time accy only")
    p.add_argument("--out", default="results/sweep_gemm.json")
    p.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"),
                   help="compare two sweeps' JSON instead of sweeping (see the module)")
    args = p.parse_args(argv)
    if args.compare:
        args.sweeps = []
        for path in args.compare:
            try:
                data = json.loads(Path(path).read_text())
            except (OSError, ValueError) as e:
                p.error(f"--compare: cannot read {path} ({e})")
            if not isinstance(data, dict) or data.get("benchmark") != "sweep_gemm":
                p.error(f"--compare: {path} is not a sweep_gemm result (its \"benchmark\")")
            args.sweeps.append(data)
        return args
    check_bounds(p, args)
    if args.count < 1 or args.repeat < 1 or args.minutes <= 0:
        p.error("--count and --repeat must be at least 1, --minutes above 0")
    return args


def add_bounds(p: argparse.ArgumentParser) -> None:
    """The options :func:`draw` reads (also ``ab_gemm.py``'s)."""
    p.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated: f32,f16")
    p.add_argument("--min-side", type=int, default=16)
    p.add_argument("--max-side", type=int, default=4096)
    p.add_argument("--min-k", type=int, default=64)
    p.add_argument("--max-k", type=int, default=32768)
    p.add_argument("--max-macs", type=float, default=2.0 ** 34,
                   help="products of more multiply-adds are drawn again")
    p.add_argument("--max-batch", type=int, default=1,
                   help="batches of up to this many products (1: unbatched)")
    p.add_argument("--layout", choices=LAYOUTS, default="nn",
                   help="B stored K x N (nn) or N x K (nt: x @ W.T, nn.Linear's W)")


def check_bounds(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """:func:`add_bounds`' options checked (``p.error`` naming the bad one), ``--dtypes`` as
    a tuple."""
    args.dtypes = tuple(d.strip() for d in args.dtypes.split(",") if d.strip())
    if not args.dtypes or any(d not in DTYPES for d in args.dtypes):
        p.error(f"--dtypes: choose from {','.join(DTYPES)}")
    if args.max_batch < 1:
        p.error("--max-batch must be at least 1")
    for lo, hi in (("min_side", "max_side"), ("min_k", "max_k")):
        if not 1 <= getattr(args, lo) <= getattr(args, hi):
            p.error(f"--{lo.replace('_', '-')} must be at least 1 and at most "
                    f"--{hi.replace('_', '-')}")
    f16 = "f16" in args.dtypes  # its N and K rounded up to even
    if args.min_side * (args.min_side + f16) * (args.min_k + f16) > args.max_macs:
        p.error("--max-macs is below the smallest product's multiply-adds")


def draw(rng: random.Random, args: argparse.Namespace) -> tuple[str, dict[str, int]]:
    """A product's dtype and ``{"M", "N", "K"}``, with ``"B"`` first where a batch of more
    than one was drawn (see the module)."""
    def log_uniform(lo: int, hi: int) -> int:
        return round(math.exp(rng.uniform(math.log(lo), math.log(hi))))

    while True:
        dtype = rng.choice(args.dtypes)
        m, n = log_uniform(args.min_side, args.max_side), log_uniform(args.min_side, args.max_side)
        k = log_uniform(args.min_k, args.max_k)
        if dtype == "f16":
            n, k = n + n % 2, k + k % 2
        b = log_uniform(1, args.max_batch) if args.max_batch > 1 else 1
        if b * m * n * k <= args.max_macs:
            return dtype, {"B": b, "M": m, "N": n, "K": k} if b > 1 else {"M": m, "N": n, "K": k}


LAYOUTS = ("nn", "nt")  # B stored K x N (x @ W) or N x K (x @ W.T)


def spec(name: str, dtype: str, dims: dict[str, int], layout: str = "nn") -> bp.Spec:
    """The bench_gpu program of a drawn product: ``bgemm`` where ``dims`` has a batch,
    ``..._nt`` where B is stored N x K (``layout`` "nt")."""
    kind = ("bgemm" if "B" in dims else "gemm") + ("_nt" if layout == "nt" else "")
    return bp.Spec(name, kind, name, dims, dims, dtype)


def shape(dims: dict[str, int]) -> str:
    """``dims`` as a table cell of 22 characters: ``MxNxK``, ``BxMxNxK`` with a batch."""
    return f"{'x'.join(str(dims[a]) for a in 'BMNK' if a in dims):>22s}"


def measure(dtype: str, dims: dict[str, int], runtime: Any, target: Any, torch: Any,
            repeat: int, layout: str = "nn") -> dict[str, Any]:
    """One product's row: accy's record (bench_gpu.bench_accy) and torch eager's kernel ms."""
    return {**timed(spec("sweep", dtype, dims, layout), dims, runtime, target, torch, repeat),
            "layout": layout}


def timed(spec: bp.Spec, dims: dict[str, int], runtime: Any, target: Any, torch: Any,
          repeat: int) -> dict[str, Any]:
    """``spec``'s row at ``dims`` (see :func:`measure`)."""
    xs = bp.inputs(spec, dims)
    a = bg.bench_accy(spec, dims, xs, "f32", runtime, target, repeat, bp.Checker(spec, dims, xs))
    row: dict[str, Any] = {"dtype": spec.dtype, "dims": dims, "accy": a, "torch_ms": None,
                           "speed_vs_torch": None}
    if torch is not None:
        row["torch_ms"] = torch_ms(spec, dims, xs, torch, repeat)
        row["speed_vs_torch"] = row["torch_ms"] / a["kernel_ms"]
    return row


def torch_ms(spec: bp.Spec, dims: dict[str, int], xs: list[Any], torch: Any,
             repeat: int) -> float:
    """torch eager's kernel ms of ``spec`` at ``dims`` on ``xs`` (torch.profiler)."""
    res, _ = bt.time_calls(torch, bt.torch_fn(spec.kind, dims, torch),
                           [torch.from_numpy(x).cuda() for x in xs], repeat)
    return res["kernel_ms"]


def same_plan(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Whether two accy records (``bench_gpu.bench_accy``) ran one plan: the same generators
    and, where both recorded them, the same kernel bodies (``bodies``) and launches
    (``plan``), else as many kernels."""
    if before["generators"] != after["generators"]:
        return False
    if "bodies" in before and "bodies" in after and before["bodies"] != after["bodies"]:
        return False
    if "plan" in before and "plan" in after:
        return before["plan"] == after["plan"]
    return before["kernels"] == after["kernels"]


def offset_ms(runtime: Any, target: Any, torch: Any, repeat: int) -> float | None:
    """The timer offset a kernel (``bench_gpu.py``'s calibration): accy's kernel time of
    ``a + b`` on 32 elements (the launch alone) less torch eager's; None without torch."""
    if torch is None:
        return None
    spec = bp.CALIBRATION[0]
    row = timed(spec, spec.full, runtime, target, torch, repeat)
    return row["accy"]["kernel_ms"] - row["torch_ms"]


def with_net(rows: list[dict[str, Any]], offset: float | None) -> None:
    """Each row's ``speed_vs_torch_net``: torch's kernel time over accy's less ``offset`` for
    each kernel it launched (None without an offset, or where that leaves nothing)."""
    for r in rows:
        a = r.get("accy")
        net = a["kernel_ms"] - offset * a["kernels"] if a and offset is not None else None
        r["speed_vs_torch_net"] = (r["torch_ms"] / net if net and net > 0 and r.get("torch_ms")
                                   else None)


def worst(rows: list[dict[str, Any]], show: int) -> list[dict[str, Any]]:
    """The ``show`` worst rows: the slowest against torch, else by kernel time a MAC."""
    def badness(r: dict[str, Any]) -> float:
        if r["speed_vs_torch"] is not None:
            return r["speed_vs_torch"]
        return -r["accy"]["kernel_ms"] / math.prod(r["dims"].values())
    return sorted((r for r in rows if r.get("accy")), key=badness)[:show]


def compare(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Two sweeps' products in common: those whose plan changed (slowest first, each with
    BEFORE's kernel ms over AFTER's), and geometric means (see the module)."""
    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        return r["dtype"], r.get("layout", "nn"), *(r["dims"].get(a, 1) for a in "BMNK")

    def plan(r: dict[str, Any]) -> tuple[Any, ...]:
        return r["accy"]["generators"], r["accy"]["kernels"]

    old = {key(r): r for r in before["rows"] if r.get("accy")}
    pairs = [(old[key(r)], r) for r in after["rows"] if r.get("accy") and key(r) in old]
    changed, same = [], []
    for b, a in pairs:
        row = {"dtype": a["dtype"], "dims": a["dims"], "before": plan(b), "after": plan(a),
               "before_ms": b["accy"]["kernel_ms"], "after_ms": a["accy"]["kernel_ms"],
               "speedup": b["accy"]["kernel_ms"] / a["accy"]["kernel_ms"]}
        (same if same_plan(b["accy"], a["accy"]) else changed).append(row)
    changed.sort(key=lambda r: r["speedup"])

    def speeds(side: int, key: str = "speed_vs_torch") -> float | None:
        return bg.geomean([p[side][key] for p in pairs if p[side].get(key)])

    return {"common": len(pairs), "changed": changed,
            "geomean_changed": bg.geomean([r["speedup"] for r in changed]),
            "geomean_unchanged": bg.geomean([r["speedup"] for r in same]),
            "vs_torch": {"before": speeds(0), "after": speeds(1)},
            "vs_torch_net": {"before": speeds(0, "speed_vs_torch_net"),
                             "after": speeds(1, "speed_vs_torch_net")}}


def print_comparison(c: dict[str, Any]) -> None:
    def x(v: float | None) -> str:
        return "-" if v is None else f"{v:.3f}x"
    print(f"{c['common']} products in both; {len(c['changed'])} changed plan "
          f"(geometric mean {x(c['geomean_changed'])}), the rest {x(c['geomean_unchanged'])}; "
          f"against torch {x(c['vs_torch']['before'])} -> {x(c['vs_torch']['after'])} (net "
          f"{x(c['vs_torch_net']['before'])} -> {x(c['vs_torch_net']['after'])})")
    for r in c["changed"]:
        d = r["dims"]
        print(f"{r['dtype']:5s} {shape(d)} {r['before_ms']:>9.4f} "
              f"-> {r['after_ms']:>9.4f} {r['speedup']:>6.2f}x  "
              f"{'/'.join(r['before'][0])} ({r['before'][1]}) -> "
              f"{'/'.join(r['after'][0])} ({r['after'][1]})")


SIDES = ((32, "side <= 32"), (128, "side 33-128"), (512, "side 129-512"), (math.inf, "side > 512"))
KS = ((1023, "K < 1024"), (8191, "K < 8192"), (math.inf, "K >= 8192"))


def shape_class(dtype: str, dims: dict[str, int]) -> tuple[str, bool, int, int]:
    """A product's class: its dtype, whether it is a batch, its shorter side's range and K's
    (indices into :data:`SIDES` and :data:`KS`)."""
    def bin_of(v: int, bins: tuple[tuple[float, str], ...]) -> int:
        return next(i for i, (top, _) in enumerate(bins) if v <= top)
    return (dtype, "B" in dims, bin_of(min(dims["M"], dims["N"]), SIDES),
            bin_of(dims["K"], KS))


def by_class(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per :func:`shape_class` of the rows timed against torch, in order: how many, the
    geometric mean and the least of their speeds (the issue's goal: every class at 0.9x or
    more), and the geometric mean by net kernel time (:func:`with_net`; None uncalibrated)."""
    classes: dict[tuple[str, bool, int, int], list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("speed_vs_torch"):
            classes.setdefault(shape_class(r["dtype"], r["dims"]), []).append(r)

    def gm(of: list[dict[str, Any]], key: str) -> float | None:
        return bg.geomean([r[key] for r in of if r.get(key)])
    return {f"{d}{' batched' if b else ''} {SIDES[si][1]}, {KS[ki][1]}": {
        "products": len(v), "geomean_vs_torch": gm(v, "speed_vs_torch"),
        "least": min(r["speed_vs_torch"] for r in v), "geomean_net": gm(v, "speed_vs_torch_net")}
        for (d, b, si, ki), v in sorted(classes.items())}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.compare:
        result = compare(*args.sweeps)
        print_comparison(result)
        return result
    runtime, target = open_device(args.device)
    torch, torch_note = (None, "--no-torch") if args.no_torch else bt.load_torch()
    if torch is not None:
        bt.configure(torch, False)
    offset = offset_ms(runtime, target, torch, args.repeat)
    rng = random.Random(args.seed)
    rows: list[dict[str, Any]] = []
    start = time.monotonic()
    prov = provenance(args.device, extra_versions=("torch",), command=command_line(argv))

    def record(complete: bool) -> dict[str, Any]:
        with_net(rows, offset)
        speeds = [r["speed_vs_torch"] for r in rows if r.get("speed_vs_torch")]
        nets = [r["speed_vs_torch_net"] for r in rows if r.get("speed_vs_torch_net")]
        wrong = [r for r in rows if r.get("accy") and not r["accy"]["check"]["ok"]]
        return {
            "benchmark": "sweep_gemm", "seed": args.seed, "count": args.count,
            "minutes": args.minutes, "dtypes": list(args.dtypes), "repeat": args.repeat,
            "sides": [args.min_side, args.max_side], "k": [args.min_k, args.max_k],
            "max_macs": args.max_macs, "max_batch": args.max_batch, "layout": args.layout,
            "accy_device": runtime.info.key, "target": target.describe(),
            "target_profile": target.to_dict(), "torch_note": torch_note,
            "offset_ms": offset, "complete": complete,
            "rows": rows, "classes": by_class(rows),
            "summary": {"products": len(rows), "failed": sum(1 for r in rows if "error" in r),
                        "wrong": len(wrong), "geomean_vs_torch": bg.geomean(speeds),
                        "geomean_vs_torch_net": bg.geomean(nets),
                        "below_0.5": sum(s < 0.5 for s in speeds)},
            **prov,
        }

    while len(rows) < args.count and time.monotonic() - start < 60 * args.minutes:
        dtype, dims = draw(rng, args)
        try:
            rows.append(measure(dtype, dims, runtime, target, torch, args.repeat, args.layout))
        except Exception as e:  # one product must not end the sweep
            rows.append({"dtype": dtype, "dims": dims, "layout": args.layout, "accy": None,
                         "error": bg._error(e)})
        gc.collect()
        write_json(record(False), args.out, quiet=True)  # kept if killed
    result = record(True)
    print(f"{len(rows)} products on {runtime.info.key}"
          f"{' (B stored N x K)' if args.layout == 'nt' else ''}; torch: {torch_note or 'eager'}")
    print(f"{'dtype':5s} {'[B x] M x N x K':>22s} {'kernels':>7s} {'accy ms':>9s} {'torch ms':>9s} "
          f"{'speed':>6s}  generators")
    for r in worst(rows, args.show):
        a, d = r["accy"], r["dims"]
        t, s = r["torch_ms"], r["speed_vs_torch"]
        print(f"{r['dtype']:5s} {shape(d)} {a['kernels']:>7d} "
              f"{a['kernel_ms']:>9.4f} {'-' if t is None else f'{t:.4f}':>9s} "
              f"{'-' if s is None else f'{s:.2f}x':>6s}  {'/'.join(a['generators'])}"
              f"{'' if a['check']['ok'] else '  WRONG'}")
    def x(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}x"
    for name, c in result["classes"].items():
        print(f"{name:36s} {c['products']:>4d} products  geometric mean "
              f"{x(c['geomean_vs_torch'])} (net {x(c['geomean_net'])})  least {c['least']:.2f}x")
    s = result["summary"]
    note = "" if offset is None else f" (net of {offset * 1e3:.1f} us a kernel: " \
        f"{x(s['geomean_vs_torch_net'])})"
    print(f"geometric mean vs torch eager: {x(s['geomean_vs_torch'])}{note}; below 0.5x: "
          f"{s['below_0.5']}; wrong: {s['wrong']}; failed: {s['failed']}")
    write_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
