"""Benchmark: the indexed gather and scatter-add kernels over ``indexing-lowering``'s
``gather-thread-blocks`` / ``scatter-thread-blocks`` (work-groups in a grid-stride loop).

    python experiments/bench_indexing.py [--device SELECTOR] [--rows V] [--cols D]
        [--indices M] [--blocks auto,element,4,...] [--repeat 10]
        [--out results/bench_indexing.json]

An embedding of ``[V, D]`` f32 rows (2^20 x 64 on a GPU, 2^16 x 64 on a CPU) and ``M``
uniformly random row ids (2^22 on a GPU, 2^16 on a CPU):

* gather: ``table[ids]``: reads and writes ``M x D`` values;
* scatter-add: ``scatter_add(table, ids, grad)``: copies the table, then adds ``M x D``
  updates atomically (the add kernel is the one the option changes).

For every ``--blocks`` value (default: ``auto``, the generator's choice, i.e. N = 0;
``element``, one work-item per element, i.e. N = elements / 256; then 1, 2, 4, 8, 16 and 32
work-groups per compute unit) both programs are prepared with
``indexing-lowering{gather-thread-blocks=N scatter-thread-blocks=N}`` for the device's own
target profile; kernel time is the sum of one call's OpenCL profiling events, median over
``--repeat`` calls after a warm-up, checked against numpy. Effective bandwidth counts the
bytes the program must move (ids included, atomics as one read and one write per update)
against a device-to-device ``enqueue_copy``. The passes before dispatch are the tensor
stage's lowerings alone (egglog changes nothing in these programs), so the script runs where
egglog is not installed.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import pyopencl as cl

import accy
from accy.backends.opencl.runtime import Runtime
from accy.backends.registry import get_backend, open_device
from accy.builder import gather, scatter_add, trace
from accy.experiments.kernels import copy_bandwidth
from accy.experiments.records import command_line, median_ms, provenance, write_json

FRONT = "shape-layout-propagation,dtype-legalization,indexing-lowering{{{options}}}"
BACK = "accy-dispatch,accy-memory,accy-kernel,accy-target"


def pipeline(blocks: int) -> str:
    options = f"gather-thread-blocks={blocks} scatter-thread-blocks={blocks}"
    return f"{FRONT.format(options=options)},{BACK}"


def programs(rows: int, cols: int, m: int) -> dict[str, tuple[accy.Program, int]]:
    """name -> (program, bytes it must move)."""
    value, index = 4, 4
    return {
        "gather": (trace(lambda t, i: gather(t, i, axis=0), accy.f32[rows, cols],
                         accy.i32[m], name="gather"), 2 * m * cols * value + m * index),
        "scatter-add": (trace(lambda t, i, g: scatter_add(t, i, g, axis=0),
                              accy.f32[rows, cols], accy.i32[m], accy.f32[m, cols],
                              name="scatter"),
                        2 * rows * cols * value + 3 * m * cols * value + m * index),
    }


LOCAL = 256  # kernel-outlining-planning's default work-group size


def bench_one(name: str, program: accy.Program, nbytes: int, label: str, blocks: int,
              inputs: list[np.ndarray], runtime: Runtime, repeat: int,
              copy_gbps: float) -> dict[str, Any]:
    job = accy.prepare(program, pipeline(blocks), target=open_device(runtime)[1])
    exe = job.executable(device=runtime)
    exe(*inputs)  # warm-up: build, buffers, first launch
    samples, per_kernel, out = [], [], None
    for _ in range(repeat):
        (out,) = exe(*inputs)
        samples.append(sum(exe.last_kernel_ns))
        per_kernel.append(list(exe.last_kernel_ns))
    assert out is not None
    if name == "gather":
        want = inputs[0][inputs[1]]
    else:
        want = inputs[0].copy()
        np.add.at(want, inputs[1], inputs[2])
    err = float(np.max(np.abs(out.astype(np.float64) - want)))
    ms = median_ms(samples)
    gbps = nbytes / (ms * 1e6)
    return {
        "program": name, "blocks": label, "thread_blocks": blocks, "kernel_ms": ms,
        "kernels": [k.entry for k in job.kernels],
        "kernel_ms_each": [median_ms(col) for col in zip(*per_kernel, strict=True)],
        "global_size": [k.geometry.global_size[0] for k in job.kernels],
        "bytes": nbytes, "GBps": gbps, "fraction_of_copy": gbps / copy_gbps,
        "max_error": err, "matches": bool(np.allclose(out, want, rtol=1e-5, atol=1e-4)),
    }


def print_table(result: dict[str, Any]) -> None:
    copy = result["copy"]
    print(f"\n{result['device']['name']}: {result['compute_units']} compute units; copy "
          f"{copy['GBps']:.1f} GB/s; table [{result['rows']}, {result['cols']}], "
          f"{result['indices']} ids")
    print(f"{'program':<12} {'blocks':>7} {'ms':>9} {'GB/s':>9} {'% copy':>7} {'ok':>3}  "
          "per kernel ms")
    for r in result["results"]:
        each = " ".join(f"{t:.3f}" for t in r["kernel_ms_each"])
        print(f"{r['program']:<12} {r['blocks']:>7} {r['kernel_ms']:>9.3f} {r['GBps']:>9.1f} "
              f"{100 * r['fraction_of_copy']:>6.1f}% {'yes' if r['matches'] else 'NO':>3}  "
              f"{each}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None, help="OpenCL selector (default: $ACCY_DEVICE/pocl)")
    p.add_argument("--rows", type=int, default=None, help="table rows V")
    p.add_argument("--cols", type=int, default=64, help="table columns D")
    p.add_argument("--indices", type=int, default=None, help="row ids M")
    p.add_argument("--blocks", default=None,
                   help="comma-separated work-group counts, 'auto' (the generator's choice) "
                   "or 'element' (one work-item per element)")
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--out", default="results/bench_indexing.json")
    args = p.parse_args(argv)
    for name in ("rows", "cols", "indices", "repeat"):
        value = getattr(args, name)
        if value is not None and value < 1:
            p.error(f"--{name} must be positive, got {value}")
    if args.blocks is not None:
        args.blocks = args.blocks.split(",")
        for b in args.blocks:
            if b not in ("auto", "element") and not (b.isdigit() and int(b) > 0):
                p.error(f"--blocks takes auto, element or positive integers, got {b!r}")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    runtime = get_backend().select_device(args.device)
    info = runtime.info
    is_cpu = bool(runtime.device.type & cl.device_type.CPU)
    rows = args.rows or (1 << 16 if is_cpu else 1 << 20)
    m = args.indices or (1 << 16 if is_cpu else 1 << 22)
    units = info.compute_units
    labels = args.blocks or ["auto", "element"] + [str(k * units) for k in (1, 2, 4, 8, 16, 32)]
    per_element = -(-m * args.cols // LOCAL)  # the gather's and the atomic adds' elements
    named = {"auto": 0, "element": per_element}
    blocks = {b: named[b] if b in named else int(b) for b in labels}
    rng = np.random.default_rng(0)
    table = rng.standard_normal((rows, args.cols), dtype=np.float32)
    ids = rng.integers(0, rows, m).astype(np.int32)
    grad = rng.standard_normal((m, args.cols), dtype=np.float32)
    inputs = {"gather": [table, ids], "scatter-add": [table, ids, grad]}
    copy = copy_bandwidth(runtime, 4 * m * args.cols, args.repeat)
    results = [bench_one(name, program, nbytes, label, n, inputs[name], runtime, args.repeat,
                         copy["GBps"])
               for name, (program, nbytes) in programs(rows, args.cols, m).items()
               for label, n in blocks.items()]
    command = command_line(argv)
    result: dict[str, Any] = {
        "results": results, "copy": copy, "rows": rows, "cols": args.cols, "indices": m,
        "repeat": args.repeat, "compute_units": units,
        **provenance(args.device, ("pyopencl",), command),
    }
    print_table(result)
    write_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
