"""Benchmark (issue #15): how long preparation takes per op, and the first run's kernel builds.

    python experiments/bench_prepare.py [--sizes 100,1000] [--deep] [--outputs 1000]
        [--before] [--modes auto,on] [--first-run-size 100] [--device pocl]
        [--skip-first-run]
        [--block-repeats 5] [--out results/bench_prepare.json]

1. Preparation: transformer stacks (attention, layernorm, GELU MLP, residuals), NasRNN stacks
   (the cell of ``accy.experiments.suite`` unrolled over time steps) and random elementwise
   DAGs, each at about ``--sizes`` IR nodes (``--deep`` adds 10,000: needs the iterative
   walks of issue #15's other half). Per stage: milliseconds and microseconds per node, from
   the stage records; the passes that took longest, from the ``--timing`` instrument; saving
   and loading the job. The process is warmed first (the saturation worker started, a block
   and a 300-node stack prepared), as an ablation loop's is after its first configuration.
   Then the pre-LN transformer block (``preln_block``) prepared
   ``--block-repeats`` times in the warm process (issue #15: at most 50 ms).
2. First run (every workload at ``--first-run-size`` nodes, and a program of ``--outputs``
   independent elementwise outputs of two inputs): in fresh processes that load the saved job,
   the time to build the kernels and to make the first call, with cold caches (a new
   ``ACCY_BUILD_CACHE_DIR`` and, on PoCL, a new ``POCL_CACHE_DIR``) and then warm (a second
   process on the same folders). accy's disk cache runs ``auto`` (off on PoCL, which keeps its
   own kernel cache) and ``on`` (forced). ``--before`` also runs the many-output program as
   accy did before issue #15: a kernel per output (``fusion-planning{horizontal=false}``), each
   built as a program of its own (slow: minutes on PoCL). ``--sweep-args 4,8,64`` also runs
   the many-output program (cold and warm, ``auto``) with ``fusion-planning{horizontal-max-args=N}``
   for each N: how PoCL's per-kernel compile at the first launch grows with the kernel.

Prints tables and writes JSON (provenance, arguments, every row) with
``accy.experiments.records``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import accy
from accy.builder import Value, einsum, trace
from accy.experiments.records import provenance, write_json
from accy.experiments.suite import nasrnn_cell
from accy.passes import rewrite_worker
from accy.passes.instrument import TimingReport

Row = dict[str, Any]


# ---- programs -----------------------------------------------------------------------------


def _linear(x: Value, w: Value, b: Value | None = None) -> Value:
    y = einsum("si,oi->so", x, w)
    return y if b is None else y + b


def _layernorm(x: Value, gamma: Value, beta: Value) -> Value:
    mu = x.mean(axes=-1, keepdims=True)
    xc = x - mu
    var = (xc * xc).mean(axes=-1, keepdims=True)
    return xc / (var + 1e-5).sqrt() * gamma + beta


def transformer(blocks: int, seq: int = 8, model: int = 16, heads: int = 2,
                hidden: int = 32) -> accy.Program:
    """``blocks`` post-norm transformer blocks; the weights are shared between blocks (the
    program, not the parameter count, is what preparation pays for)."""
    dh = model // heads

    def stack(x, wq, wk, wv, wo, w1, b1, w2, b2, g1, be1, g2, be2):
        for _ in range(blocks):
            q, k, v = (_linear(x, w).reshape(seq, heads, dh) for w in (wq, wk, wv))
            s = einsum("qhd,khd->hqk", q, k) / math.sqrt(dh)
            e = (s - s.max(axes=-1, keepdims=True)).exp()
            p = e / e.sum(axes=-1, keepdims=True)
            att = _linear(einsum("hqk,khd->qhd", p, v).reshape(seq, model), wo)
            x = _layernorm(x + att, g1, be1)
            x = _layernorm(x + _linear(_linear(x, w1, b1).gelu(), w2, b2), g2, be2)
        return x

    m, h = model, hidden
    f = accy.f32
    return trace(stack, f[seq, m], *(f[m, m] for _ in range(4)), f[h, m], f[h], f[m, h],
                 f[m], f[m], f[m], f[m], f[m])


def preln_block(seq: int = 8, model: int = 16, heads: int = 2, hidden: int = 32
                ) -> accy.Program:
    """One pre-LN transformer block (layernorm before attention and before the MLP, residuals
    around both): issue #15's first target, about 47 ops."""
    dh = model // heads

    def block(x, wq, wk, wv, wo, w1, b1, w2, b2, g1, be1, g2, be2):
        h = _layernorm(x, g1, be1)
        q, k, v = (_linear(h, w).reshape(seq, heads, dh) for w in (wq, wk, wv))
        s = einsum("qhd,khd->hqk", q, k) / math.sqrt(dh)
        e = (s - s.max(axes=-1, keepdims=True)).exp()
        p = e / e.sum(axes=-1, keepdims=True)
        x = x + _linear(einsum("hqk,khd->qhd", p, v).reshape(seq, model), wo)
        return x + _linear(_linear(_layernorm(x, g2, be2), w1, b1).gelu(), w2, b2)

    m, h = model, hidden
    f = accy.f32
    return trace(block, f[seq, m], *(f[m, m] for _ in range(4)), f[h, m], f[h], f[m, h],
                 f[m], f[m], f[m], f[m], f[m])


def nasrnn(steps: int, batch: int = 4, hidden: int = 16) -> accy.Program:
    """The NasRNN-like cell of the benchmark suite over ``steps`` time steps."""
    b, h = batch, hidden

    def cell(x, state, wx, wh):
        for _ in range(steps):
            state = nasrnn_cell(x, state, wx, wh)
        return state

    f = accy.f32
    return trace(cell, f[b, h], f[b, h], f[8, h, h], f[8, h, h])


def random_dag(ops: int, seed: int = 0, n: int = 256) -> accy.Program:
    """About ``ops`` random elementwise ops over four f32[n] inputs, operands drawn mostly
    from recent values (a deep DAG); values nothing uses are summed into the one result."""
    rng = np.random.default_rng(seed)
    b = accy.Builder()
    t = b.tensor(accy.DType.f32, (n,))
    f = b.begin_function("dag", [t] * 4, ["a", "b", "c", "d"])
    pool = [f.param(i) for i in range(4)]
    used: set[int] = set()

    def pick() -> Value:
        i = len(pool) - 1 - min(int(rng.geometric(0.3)) - 1, len(pool) - 1)
        used.add(i)
        return pool[i]

    unary = [lambda x: x.tanh(), lambda x: x.sigmoid(), lambda x: x.relu(), abs,
             lambda x: x * float(rng.uniform(0.5, 2)), lambda x: x + float(rng.uniform(-1, 1))]
    binary = [lambda x, y: x + y, lambda x, y: x - y, lambda x, y: x * y,
              lambda x, y: f.max(x, y), lambda x, y: f.min(x, y)]
    while len(pool) < ops + 4:
        if rng.random() < 0.4:
            pool.append(unary[rng.integers(len(unary))](pick()))
        else:
            pool.append(binary[rng.integers(len(binary))](pick(), pick()))
    out = None
    for i, v in enumerate(pool[4:], start=4):
        if i not in used:
            out = v if out is None else out + v
    f.return_(out)
    f.finish()
    return b.finish()


NO_HORIZONTAL = ("accy-contract,accy-tensor,fusion-planning{horizontal=false},schedule-planning,"
                 "accy-memory,accy-kernel,accy-target")


def max_args(n: int) -> str:
    """The default pipeline with horizontal fusion bounded to ``n`` buffer arguments."""
    return NO_HORIZONTAL.replace("horizontal=false", f"horizontal-max-args={n}")


def many_outputs(outputs: int, n: int = 64) -> accy.Program:
    """``outputs`` independent small elementwise expressions of two inputs, each a result."""
    b = accy.Builder()
    t = b.tensor(accy.DType.f32, (n,))
    f = b.begin_function("many", [t, t], ["a", "b"])
    x, y = f.param(0), f.param(1)
    forms = [lambda c: (x + y) * c, lambda c: (x - c) * y, lambda c: f.max(x * c, y),
             lambda c: f.min(x, y + c)]
    f.return_(*(forms[i % 4](1.0 + i / 8.0) for i in range(outputs)))
    f.finish()
    return b.finish()


def node_count(program: accy.Program) -> int:
    return len(program.nodes())


def sized(make, nodes: int) -> accy.Program:
    """``make(k)`` with the k whose program is nearest ``nodes`` nodes (linear in k)."""
    per = node_count(make(2)) - node_count(make(1))
    base = node_count(make(1)) - per
    return make(max(1, round((nodes - base) / max(per, 1))))


WORKLOADS = {
    "transformer": lambda nodes: sized(transformer, nodes),
    "nasrnn": lambda nodes: sized(nasrnn, nodes),
    # constants and the closing sum add nodes: scale the op count to land near ``nodes``
    "random-dag": lambda nodes: random_dag(max(1, round(
        nodes * nodes / node_count(random_dag(nodes))))),
}


# ---- preparation --------------------------------------------------------------------------


def measure_prepare(name: str, program: accy.Program, tmp: Path) -> tuple[Row, accy.PreparedJob]:
    nodes = node_count(program)
    timing = TimingReport()
    with timing.measure():
        cpu = time.process_time()  # this process's CPU time: a loaded machine moves it less
        job = accy.prepare(program, instruments=[timing])
        cpu_ms = (time.process_time() - cpu) * 1e3
        with timing.phase("render"):
            for i in range(job.kernel_count):
                job.kernel_source(i)
    start = time.perf_counter_ns()
    path = job.save(tmp / f"{name}-{nodes}.job")
    save_ms = (time.perf_counter_ns() - start) / 1e6
    start = time.perf_counter_ns()
    accy.load_job(path)
    load_ms = (time.perf_counter_ns() - start) / 1e6
    stages = {r.stage.value: r.elapsed_ns / 1e6 for r in job.records}
    top = sorted(timing.rows, key=lambda r: -r[2])[:3]
    row = {
        "workload": name, "nodes": nodes, "kernels": job.kernel_count,
        "total_ms": timing.total_ns / 1e6, "cpu_ms": cpu_ms, "stage_ms": stages,
        "stage_us_per_node": {s: 1e3 * ms / nodes for s, ms in stages.items()},
        "render_ms": timing.phases[0][1] / 1e6,
        "manager_ms": (timing.bookkeeping_ns + timing.between_ns) / 1e6,
        "top_passes": [[spec, ns / 1e6] for _, spec, ns in top],
        "save_ms": save_ms, "load_ms": load_ms, "job_bytes": path.stat().st_size,
    }
    return row, job


# ---- first runs (in fresh processes) ---------------------------------------------------------


def worker(job_path: str, device: str | None, batch: bool) -> None:
    """Load the job, build its kernels, call it twice; print one JSON line."""
    start = time.perf_counter_ns()
    from accy.backends.registry import get_backend

    runtime = get_backend().select_device(device)
    job = accy.load_job(job_path)
    ready = time.perf_counter_ns()
    before = runtime.stats.copy()
    if not batch:  # as before issue #15: the executable builds one program per kernel source
        unbatched = runtime.build_many
        runtime.build_many = (  # type: ignore[method-assign]
            lambda sources, options=(), max_threads=1: unbatched(sources, options,
                                                                 max_threads, batch=False))
    exe = job.executable(device=runtime)
    built = time.perf_counter_ns()
    inputs = [np.full(p.type.shape, 0.5, p.type.dtype.numpy) for p in exe.function.params]
    exe(*inputs)
    first = time.perf_counter_ns()
    exe(*inputs)
    second = time.perf_counter_ns()
    s = runtime.stats.minus(before)
    print(json.dumps({
        "setup_ms": (ready - start) / 1e6, "build_ms": (built - ready) / 1e6,
        "first_call_ms": (first - built) / 1e6, "second_call_ms": (second - first) / 1e6,
        "first_run_ms": (first - ready) / 1e6, "compiled": s.compiled,
        "compiled_sources": s.compiled_sources, "loaded": s.loaded,
        "store_ms": s.store_ns / 1e6}))


def first_runs(name: str, job: accy.PreparedJob, path: Path, device: str | None,
               modes: list[tuple[str, bool]], tmp: Path) -> list[Row]:
    """Cold then warm first runs of a saved job for each (accy cache mode, batch) pair."""
    rows = []
    for mode, batch in modes:
        folder = Path(tempfile.mkdtemp(prefix=f"{name}-{mode}-", dir=tmp))
        env = dict(os.environ, ACCY_BUILD_CACHE=mode,
                   ACCY_BUILD_CACHE_DIR=str(folder / "accy"),
                   POCL_CACHE_DIR=str(folder / "pocl"))
        for cache in ("cold", "warm"):
            cmd = [sys.executable, __file__, "--worker", str(path)]
            cmd += (["--device", device] if device else []) + ([] if batch else ["--no-batch"])
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            result = json.loads(done.stdout.strip().splitlines()[-1])
            rows.append({"workload": name, "kernels": job.kernel_count,
                         "build_cache": mode, "batched": batch, "caches": cache, **result})
            print(f"  {name:<14} {job.kernel_count:>5} kernels  accy cache {mode:<4} "
                  f"{'joined' if batch else 'one per kernel':<14} {cache}: build "
                  f"{result['build_ms']:9.1f} ms  first call {result['first_call_ms']:9.1f} ms"
                  f"  compiled {result['compiled']:>4}  loaded {result['loaded']:>3}",
                  flush=True)
    return rows


# ---- main ---------------------------------------------------------------------------------


def print_prepare_table(rows: list[Row]) -> None:
    stages = ["contract", "tensor", "dispatch", "memory", "kernel", "target"]
    print(f"\n{'workload':<12} {'nodes':>6} {'kern':>5} {'total ms':>9}  "
          + "  ".join(f"{s:>8}" for s in stages) + "   (us per node)  save/load ms")
    for r in rows:
        per = r["stage_us_per_node"]
        print(f"{r['workload']:<12} {r['nodes']:>6} {r['kernels']:>5} {r['total_ms']:9.1f}  "
              + "  ".join(f"{per.get(s, 0):8.1f}" for s in stages)
              + f"   {r['save_ms']:6.1f}/{r['load_ms']:.1f}")
    print("slowest passes:")
    for r in rows:
        print(f"  {r['workload']:<12} {r['nodes']:>6}: " + ", ".join(
            f"{spec.split('{')[0]} {ms:.0f} ms" for spec, ms in r["top_passes"]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100,1000")
    ap.add_argument("--deep", action="store_true", help="also 10,000 nodes")
    ap.add_argument("--outputs", type=int, default=1000)
    ap.add_argument("--first-run-size", type=int, default=100)
    ap.add_argument("--before", action="store_true",
                    help="also build the many-output program one program per kernel")
    ap.add_argument("--modes", default="auto,on",
                    help="accy build cache modes of the joined first runs (auto, on; empty: "
                    "none, e.g. with --before alone)")
    ap.add_argument("--sweep-args", default="",
                    help="horizontal-max-args values for first runs of the many-output program")
    ap.add_argument("--skip-first-run", action="store_true")
    ap.add_argument("--block-repeats", type=int, default=5,
                    help="warm prepares of the pre-LN transformer block (0: none)")
    ap.add_argument("--device", default=None)
    ap.add_argument("--out", default="results/bench_prepare.json")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--no-batch", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args.worker, args.device, not args.no_batch)
        return 0
    sizes = [int(s) for s in args.sizes.split(",") if s] + ([10_000] if args.deep else [])
    tmp = Path(tempfile.mkdtemp(prefix="bench-prepare-"))
    # a warm process: the saturation worker started (programs over 100 ops saturate in it;
    # a cold start takes seconds, the whole budget of a 1,000-op program) and the e-graphs
    # declaring the default rule sets built, in it and in this process (the first prepare of
    # a program of each kind pays them)
    rewrite_worker.warm_up()
    accy.prepare(preln_block())
    accy.prepare(sized(transformer, 300))
    prep_rows, jobs = [], {}
    for nodes in sizes:
        for name, make in WORKLOADS.items():
            row, job = measure_prepare(name, make(nodes), tmp)
            prep_rows.append(row)
            jobs[(name, nodes)] = job
            print(f"prepared {name} at {row['nodes']} nodes: {row['total_ms']:.0f} ms, "
                  f"{row['kernels']} kernels", flush=True)
    print_prepare_table(prep_rows)
    block_rows: list[Row] = []
    if args.block_repeats:  # issue #15's first target, in a warm process
        block_rows = [measure_prepare("preln-block", preln_block(), tmp)[0]
                      for _ in range(args.block_repeats)]
        ms = sorted(r["total_ms"] for r in block_rows)
        cpu = sorted(r["cpu_ms"] for r in block_rows)
        print(f"\npre-LN block ({block_rows[0]['nodes']} nodes, {block_rows[0]['kernels']} "
              f"kernels), {len(ms)} warm prepares: median {ms[len(ms) // 2]:.1f} ms, "
              f"best {ms[0]:.1f} ms (CPU of this process: median {cpu[len(cpu) // 2]:.1f} ms)")
    run_rows: list[Row] = []
    if not args.skip_first_run:
        print("\nfirst runs (fresh processes loading the saved job):")
        modes = [(m, True) for m in args.modes.split(",") if m]
        cases = [(f"{name}-{args.first_run_size}", make(args.first_run_size))
                 for name, make in WORKLOADS.items()]
        cases.append((f"{args.outputs}-outputs", many_outputs(args.outputs)))
        if args.before and not modes:  # the build as before issue #15 alone
            cases = cases[-1:]
        for name, program in cases:
            job = accy.prepare(program)
            path = job.save(tmp / f"{name}.first.job")
            run_rows += first_runs(name, job, path, args.device, modes, tmp)
            if args.before and name.endswith("-outputs"):  # a kernel per output, unbatched
                job = accy.prepare(program, NO_HORIZONTAL)
                path = job.save(tmp / f"{name}.before.job")
                run_rows += first_runs(name, job, path, args.device, [("auto", False)], tmp)
        for n in (int(v) for v in args.sweep_args.split(",") if v):
            job = accy.prepare(many_outputs(args.outputs), max_args(n))
            path = job.save(tmp / f"sweep-{n}.job")
            for row in first_runs(f"{args.outputs}-outputs", job, path, args.device,
                                  [("auto", True)], tmp):
                run_rows.append({**row, "horizontal_max_args": n})
    write_json({"experiment": "bench_prepare", "arguments": vars(args),
                "provenance": provenance(args.device or None, command=sys.argv),
                "prepare": prep_rows, "block": block_rows, "first_runs": run_rows}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
