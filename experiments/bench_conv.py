"""Benchmark: accy's convolutions and pools on an OpenCL device against onnxruntime on the CPU.

    python experiments/bench_conv.py [--sets vgg,resnext,pointwise,pool] [--scale 1]
        [--only NAME,...] [--method im2col|offsets|direct | --pipeline TEXT] [--threads 1,2]
        [--repeat 5] [--batch 1] [--torch] [--tiles tm=8,sn=4,lanes=1,wg=128]
        [--device SELECTOR] [--out results/bench_conv.json]
    python experiments/bench_conv.py --compare BEFORE.json AFTER.json   (a Markdown table)

Layers (batch 1, f32, NCHW):

* ``vgg``: VGG-19's sixteen 3x3 convolutions (pad 1) as their nine distinct shapes, each with
  its count in the network (totals weight by it);
* ``resnext``: ResNeXt-50 (32x4d)'s grouped 3x3 convolutions (groups 32, one per stage, the
  stride-2 ones included) and its 7x7 stride-2 stem;
* ``pointwise``: 1x1 convolutions of ResNeXt-50's bottlenecks;
* ``pool``: VGG's 2x2 max pools, ResNeXt's 3x3 stride-2 max pool and an Inception-style 3x3
  stride-1 average pool (pad 1, padding not counted).

``--scale S`` divides every spatial size by ``S`` (channel counts stay). Each layer is one
program (``accy.conv2d`` / ``max_pool2d`` / ``avg_pool2d`` through the builder) prepared with
``--pipeline`` (or accy-default with ``conv-lowering{method=--method}``) for the device's own
target profile and run through its executable: accy's time is the sum of the OpenCL profiling
events of one call (every kernel the layer needs). onnxruntime (CPU execution provider) runs
the same layer as a one-node ONNX model built with ``onnx.helper``, timed as the wall time of
``session.run``, once per ``--threads`` setting (``intra_op_num_threads``; PoCL uses every
core, so the fair comparison is onnxruntime with as many threads as the device has compute
units). After two warm-up calls of each, ``--repeat`` rounds call accy and then onnxruntime
(each setting) once, so that both see the same load on a shared machine; medians over the
rounds. Outputs are checked against onnxruntime's (numpy's float64 reference with
``--threads ''``).

On a GPU (``--device`` naming its OpenCL platform), ``--torch`` also times torch's
``conv2d`` / ``max_pool2d`` / ``avg_pool2d`` on CUDA (cuDNN, TF32 off, ``cudnn.benchmark``)
with CUDA events in the same rounds, ``--batch`` sets the batch size and ``--tiles`` overrides
fields of the direct-conv generator's tile choice (:class:`accy.kernels.conv.ConvTiles`) for
every layer, to sweep shapes::

    python experiments/bench_conv.py --device nvidia --torch --threads '' --batch 16 \
        --sets vgg,resnext --out results/bench_conv_h200.json
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

import accy
from accy.experiments.peers import cuda_torch
from accy.experiments.records import provenance, write_json
from accy.target import TargetProfile


@dataclass(frozen=True)
class Layer:
    """One layer: ``kind`` conv / maxpool / avgpool over ``x[1, c, h, w]``."""

    name: str
    kind: str
    c: int
    h: int
    w: int
    out: int = 0  # conv output channels
    kernel: int = 3
    stride: int = 1
    pad: int = 0
    groups: int = 1
    count: int = 1  # how often the layer occurs in its network
    set: str = ""
    batch: int = 1

    def scaled(self, s: int) -> Layer:
        return replace(self, h=max(self.kernel, self.h // s), w=max(self.kernel, self.w // s))

    @property
    def out_hw(self) -> tuple[int, int]:
        return ((self.h + 2 * self.pad - self.kernel) // self.stride + 1,
                (self.w + 2 * self.pad - self.kernel) // self.stride + 1)

    @property
    def flops(self) -> int:
        oh, ow = self.out_hw
        if self.kind != "conv":
            return self.batch * self.c * oh * ow * self.kernel * self.kernel
        return (2 * self.batch * self.out * oh * ow * (self.c // self.groups) * self.kernel
                * self.kernel)


def _vgg() -> list[Layer]:
    shapes = [(3, 64, 224, 1), (64, 64, 224, 1), (64, 128, 112, 1), (128, 128, 112, 1),
              (128, 256, 56, 1), (256, 256, 56, 3), (256, 512, 28, 1), (512, 512, 28, 3),
              (512, 512, 14, 4)]
    return [Layer(f"vgg_{c}_{o}_{s}", "conv", c, s, s, o, 3, 1, 1, 1, n)
            for c, o, s, n in shapes]


def _resnext() -> list[Layer]:
    out = [Layer("resnext_stem_7x7s2", "conv", 3, 224, 224, 64, 7, 2, 3)]
    for width, size, n in ((128, 56, 3), (256, 28, 4), (512, 14, 6), (1024, 7, 3)):
        out.append(Layer(f"resnext_g32_{width}_{size}", "conv", width, size, size, width, 3,
                         1, 1, 32, n - 1 if size != 56 else n))
        if size != 56:  # the stage's first block: stride 2 from the previous stage's size
            out.append(Layer(f"resnext_g32_{width}_{2 * size}s2", "conv", width, 2 * size,
                             2 * size, width, 3, 2, 1, 32))
    return out


def _pointwise() -> list[Layer]:
    shapes = [(64, 128, 56), (128, 256, 56), (256, 128, 56), (512, 256, 28), (1024, 512, 14),
              (2048, 1024, 7)]
    return [Layer(f"pointwise_{c}_{o}_{s}", "conv", c, s, s, o, 1, 1, 0) for c, o, s in shapes]


def _pool() -> list[Layer]:
    vgg = [Layer(f"maxpool2_{c}_{s}", "maxpool", c, s, s, kernel=2, stride=2)
           for c, s in ((64, 224), (128, 112), (256, 56), (512, 28), (512, 14))]
    return vgg + [Layer("maxpool3s2_64_112", "maxpool", 64, 112, 112, kernel=3, stride=2,
                        pad=1),
                  Layer("avgpool3_192_28", "avgpool", 192, 28, 28, kernel=3, stride=1, pad=1)]


SETS = {"vgg": _vgg, "resnext": _resnext, "pointwise": _pointwise, "pool": _pool}


def inputs_of(layer: Layer, rng: np.random.Generator) -> list[np.ndarray]:
    x = rng.standard_normal((layer.batch, layer.c, layer.h, layer.w)).astype(np.float32)
    if layer.kind != "conv":
        return [x]
    fan = layer.c // layer.groups * layer.kernel ** 2
    w = rng.standard_normal((layer.out, layer.c // layer.groups, layer.kernel, layer.kernel))
    return [x, (w / np.sqrt(fan)).astype(np.float32)]


def accy_program(layer: Layer) -> accy.Program:
    b = accy.Builder()
    types = [accy.TensorType((layer.batch, layer.c, layer.h, layer.w), accy.DType.f32)]
    if layer.kind == "conv":
        types.append(accy.TensorType((layer.out, layer.c // layer.groups, layer.kernel,
                                      layer.kernel), accy.DType.f32))
    f = b.begin_function(layer.name, types)
    x = f.param(0)
    if layer.kind == "conv":
        y = accy.conv2d(x, f.param(1), stride=layer.stride, padding=layer.pad,
                        groups=layer.groups)
    elif layer.kind == "maxpool":
        y = accy.max_pool2d(x, layer.kernel, layer.stride, layer.pad)
    else:
        y = accy.avg_pool2d(x, layer.kernel, layer.stride, layer.pad)
    f.return_(y)
    f.finish()
    return b.finish()


def onnx_model(layer: Layer):
    import onnx
    from onnx import TensorProto, helper

    oh, ow = layer.out_hw
    outs = layer.out if layer.kind == "conv" else layer.c
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                         [layer.batch, layer.c, layer.h, layer.w])]
    attrs: dict[str, Any] = {"kernel_shape": [layer.kernel] * 2, "strides": [layer.stride] * 2,
                             "pads": [layer.pad] * 4}
    if layer.kind == "conv":
        ins.append(helper.make_tensor_value_info(
            "w", TensorProto.FLOAT, [layer.out, layer.c // layer.groups, layer.kernel,
                                     layer.kernel]))
        attrs["group"] = layer.groups
    op = {"conv": "Conv", "maxpool": "MaxPool", "avgpool": "AveragePool"}[layer.kind]
    node = helper.make_node(op, [i.name for i in ins], ["y"], **attrs)
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [layer.batch, outs, oh, ow])
    graph = helper.make_graph([node], layer.name, ins, [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def onnxruntime_call(layer: Layer, inputs: list[np.ndarray], threads: int
                     ) -> Callable[[], np.ndarray]:
    """One call of the layer's one-node model in an onnxruntime CPU session."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(onnx_model(layer).SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    feed = dict(zip(("x", "w"), inputs, strict=False))
    return lambda: sess.run(None, feed)[0]


def torch_call(layer: Layer, inputs: list[np.ndarray]) -> Callable[[], float] | None:
    """One call of the layer in torch on CUDA (cuDNN, TF32 off), returning its milliseconds
    from CUDA events; None without torch or CUDA."""
    torch, _ = cuda_torch()
    if torch is None:
        return None
    import torch.nn.functional as F
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    x, *rest = (torch.from_numpy(a).cuda() for a in inputs)

    def run():
        if layer.kind == "conv":
            return F.conv2d(x, rest[0], stride=layer.stride, padding=layer.pad,
                            groups=layer.groups)
        if layer.kind == "maxpool":
            return F.max_pool2d(x, layer.kernel, layer.stride, layer.pad)
        return F.avg_pool2d(x, layer.kernel, layer.stride, layer.pad, count_include_pad=False)

    def timed() -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end)

    return timed


def bench_layer(layer: Layer, args: argparse.Namespace, runtime, target: TargetProfile
                ) -> dict[str, Any]:
    """accy and onnxruntime (each thread setting) timed in interleaved rounds, so that both
    see the same load on a shared machine; medians over the rounds."""
    inputs = inputs_of(layer, np.random.default_rng(0))
    row: dict[str, Any] = {"name": layer.name, "set": layer.set, "kind": layer.kind,
                           "c": layer.c, "h": layer.h, "w": layer.w, "out": layer.out,
                           "kernel": layer.kernel, "stride": layer.stride, "pad": layer.pad,
                           "groups": layer.groups, "count": layer.count,
                           "flops": layer.flops}
    start = time.perf_counter()
    job = accy.prepare(accy_program(layer), args.pipeline, target=target)
    row["prepare_s"] = time.perf_counter() - start
    row["kernels"] = [k.entry for k in job.kernels]
    row["generators"] = job.generators()
    exe = job.executable(device=runtime)
    ort = {t: onnxruntime_call(layer, inputs, t) for t in args.threads}
    cudnn = torch_call(layer, inputs) if args.torch else None
    if args.torch and cudnn is None:
        raise SystemExit("--torch: torch with CUDA is not importable here")
    ort_out = {}
    for _ in range(3):  # warm-up: builds, first launches, first runs (cuDNN's search)
        (out,) = exe(*inputs)
        ort_out = {t: call() for t, call in ort.items()}
        if cudnn is not None:
            cudnn()
    totals: list[int] = []
    per: list[list[int]] = []
    walls: dict[int, list[float]] = {t: [] for t in args.threads}
    cuda_ms: list[float] = []
    for _ in range(args.repeat):
        (out,) = exe(*inputs)
        totals.append(sum(exe.last_kernel_ns))
        per.append(list(exe.last_kernel_ns))
        for t, call in ort.items():
            begin = time.perf_counter()
            call()
            walls[t].append(time.perf_counter() - begin)
        if cudnn is not None:
            cuda_ms.append(cudnn())
    row["accy_ms"] = statistics.median(totals) / 1e6
    row["accy_kernel_ms"] = [statistics.median(col) / 1e6 for col in zip(*per, strict=True)]
    for t in args.threads:
        row[f"ort_ms_t{t}"] = statistics.median(walls[t]) * 1e3
        row[f"ratio_t{t}"] = row["accy_ms"] / row[f"ort_ms_t{t}"]
    if cudnn is not None:
        row["torch_ms"] = statistics.median(cuda_ms)
        row["ratio_torch"] = row["accy_ms"] / row["torch_ms"]
    if ort_out:
        ref = ort_out[args.threads[0]]
    else:  # no onnxruntime run: numpy's float64 reference
        ref = accy.interpret(accy_program(layer), inputs, precision="float64")[0]
    scale = max(float(np.abs(ref).max()), 1e-30)
    row["rel_error"] = float(np.abs(out - ref).max() / scale)
    return row


def print_rows(rows: list[dict[str, Any]], threads: list[int]) -> None:
    head = f"{'layer':<28} {'n':>2} {'GFLOP':>6} {'accy ms':>9}"
    for t in threads:
        head += f" {'ort' + str(t) + ' ms':>9} {'x' + str(t):>6}"
    cuda = any("torch_ms" in r for r in rows)
    if cuda:
        head += f" {'torch ms':>9} {'x torch':>7}"
    print(head + f" {'GFLOP/s':>8} {'rel err':>8} kernels")
    for r in rows:
        line = f"{r['name']:<28} {r['count']:>2} {r['flops'] / 1e9:>6.3f} {r['accy_ms']:>9.3f}"
        for t in threads:
            line += f" {r[f'ort_ms_t{t}']:>9.3f} {r[f'ratio_t{t}']:>6.2f}"
        if cuda:
            line += f" {r['torch_ms']:>9.3f} {r['ratio_torch']:>7.2f}"
        print(line + f" {r['flops'] / r['accy_ms'] / 1e6:>8.1f} {r['rel_error']:>8.1e} "
              f"{len(r['kernels'])}")


def totals(rows: list[dict[str, Any]], threads: list[int]) -> dict[str, dict[str, float]]:
    """Per set (the name's prefix): count-weighted sums of accy's and onnxruntime's times."""
    out: dict[str, dict[str, float]] = {}
    for r in rows:
        key = r["set"]
        t = out.setdefault(key, {"accy_ms": 0.0, **{f"ort_ms_t{n}": 0.0 for n in threads}})
        t["accy_ms"] += r["count"] * r["accy_ms"]
        if "torch_ms" in r:
            t["torch_ms"] = t.get("torch_ms", 0.0) + r["count"] * r["torch_ms"]
        for n in threads:
            t[f"ort_ms_t{n}"] += r["count"] * r[f"ort_ms_t{n}"]
    for t in out.values():
        for n in threads:
            t[f"ratio_t{n}"] = t["accy_ms"] / t[f"ort_ms_t{n}"]
        if "torch_ms" in t:
            t["ratio_torch"] = t["accy_ms"] / t["torch_ms"]
    return out


def pipeline_for(method: str | None) -> str:
    """accy-default, with ``conv-lowering{method=METHOD}`` when a method is given."""
    if method is None:
        return "accy-default"
    return (f"accy-contract,saturate,conv-lowering{{method={method}}},shape-layout-propagation,"
            "dtype-legalization,activation-lowering,einsum-lowering,indexing-lowering,"
            "loss-lowering,accy-dispatch,accy-memory,accy-kernel,accy-target")


def compare(before: str, after: str) -> str:
    """A Markdown table of two result files (e.g. ``--method im2col`` and the default) of the
    same layers: accy before and after, onnxruntime's times from the after run."""
    from accy.experiments.records import read_results

    old = {r["name"]: r for r in read_results(before)["rows"]}
    new = read_results(after)
    threads = new["threads"]
    head = ("| layer | count | GFLOP | before ms | after ms | "
            + " | ".join(f"ort {t}T ms | after / ort {t}T" for t in threads) + " | after GFLOP/s |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in new["rows"]:
        was = old.get(r["name"], {}).get("accy_ms")
        cells = [r["name"], str(r["count"]), f"{r['flops'] / 1e9:.3f}",
                 f"{was:.2f}" if was is not None else "-", f"{r['accy_ms']:.2f}"]
        for t in threads:
            cells += [f"{r[f'ort_ms_t{t}']:.2f}", f"{r[f'ratio_t{t}']:.2f}"]
        cells.append(f"{r['flops'] / r['accy_ms'] / 1e6:.0f}")
        lines.append("| " + " | ".join(cells) + " |")
    olds = totals(list(old.values()), threads)
    for key, t in new["totals"].items():
        cells = [f"**total {key}**", "", "", f"{olds[key]['accy_ms']:.2f}" if key in olds
                 else "-", f"{t['accy_ms']:.2f}"]
        for n in threads:
            cells += [f"{t[f'ort_ms_t{n}']:.2f}", f"**{t[f'ratio_t{n}']:.2f}**"]
        lines.append("| " + " | ".join(cells + [""]) + " |")
    return "\n".join(lines)


@contextlib.contextmanager
def tile_override(fields: dict[str, int]) -> Iterator[None]:
    """While open, every direct-conv kernel takes these tile fields (an experiment's knob;
    ``tm`` only where it divides the channels per group; a tile that outgrows an input read
    in place copies it instead)."""
    from accy.kernels import conv

    heuristic = conv.choose_tiles

    def override(s, dtype, target):
        given = {k: v for k, v in fields.items() if k != "tm" or s.og % v == 0}
        tiles = replace(heuristic(s, dtype, target), **given)
        return replace(tiles, in_place=False) if tiles.span > s.pixels else tiles

    if fields:
        conv.choose_tiles = override
    try:
        yield
    finally:
        conv.choose_tiles = heuristic


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sets", default="vgg,resnext,pointwise,pool",
                   help=f"comma-separated layer sets: {', '.join(SETS)}")
    p.add_argument("--only", default="", help="comma-separated layer names (default: all)")
    p.add_argument("--scale", type=int, default=1, help="divide spatial sizes by this")
    p.add_argument("--pipeline", default=None,
                   help="pipeline text (default: accy-default with conv-lowering{method=...})")
    p.add_argument("--method", default=None, choices=("im2col", "offsets", "direct"),
                   help="conv-lowering's method in the default pipeline (default: its default)")
    p.add_argument("--threads", default="1,2",
                   help="onnxruntime intra-op thread counts ('': no onnxruntime)")
    p.add_argument("--batch", type=int, default=1, help="batch size of every layer")
    p.add_argument("--torch", action="store_true",
                   help="also time torch on CUDA (cuDNN, TF32 off): GPU runs")
    p.add_argument("--tiles", default="",
                   help="direct-conv tile override for every layer, e.g. tm=8,sn=4,lanes=1,wg=128")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--device", default=None, help="OpenCL selector (default: $ACCY_DEVICE/pocl)")
    p.add_argument("--out", default="results/bench_conv.json")
    p.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"),
                   help="print a Markdown table of two result files and exit")
    args = p.parse_args(argv)
    unknown = [s for s in args.sets.split(",") if s and s not in SETS]
    if unknown:
        p.error(f"--sets: unknown {unknown}; choose from {sorted(SETS)}")
    if args.pipeline and args.method:
        p.error("give --pipeline or --method, not both")
    args.pipeline = args.pipeline or pipeline_for(args.method)
    args.threads = [int(t) for t in args.threads.split(",") if t.strip()]
    if args.scale < 1 or args.repeat < 1 or args.batch < 1 or min(args.threads, default=1) < 1:
        p.error("--scale, --repeat, --batch and --threads must be positive")
    try:
        args.tiles = {k.strip(): int(v) for k, v in
                      (item.split("=") for item in args.tiles.split(",") if item.strip())}
    except ValueError:
        p.error(f"--tiles: give name=integer pairs, got {args.tiles!r}")
    unknown = set(args.tiles) - {"tm", "sn", "lanes", "wg"}
    if unknown:
        p.error(f"--tiles: unknown fields {sorted(unknown)}; ConvTiles has tm, sn, lanes, wg")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from accy.backends.registry import open_device

    args = parse_args(argv)
    if args.compare:
        print(compare(*args.compare))
        return {}
    runtime, target = open_device(args.device)
    only = {n for n in args.only.split(",") if n}
    layers = [replace(layer.scaled(args.scale), set=s, batch=args.batch)
              for s in args.sets.split(",") if s
              for layer in SETS[s]() if not only or layer.name in only]
    print(f"device: {runtime.info.key} ({target.compute_units} compute units); "
          f"pipeline {args.pipeline}; scale 1/{args.scale}")
    rows = []
    with tile_override(args.tiles):
        for layer in layers:
            rows.append(bench_layer(layer, args, runtime, target))
            print_rows(rows[-1:], args.threads)
            sys.stdout.flush()
    print()
    print_rows(rows, args.threads)
    sums = totals(rows, args.threads)
    for key, t in sums.items():
        print(f"total {key}: accy {t['accy_ms']:.2f} ms; " + "; ".join(
            [f"onnxruntime {n} thread(s) {t[f'ort_ms_t{n}']:.2f} ms ({t[f'ratio_t{n}']:.2f}x)"
             for n in args.threads] + ([f"torch {t['torch_ms']:.2f} ms "
                                        f"({t['ratio_torch']:.2f}x)"] if "torch_ms" in t
                                       else [])))
    result = {"experiment": "bench_conv", "pipeline": args.pipeline, "scale": args.scale,
              "batch": args.batch, "tiles": args.tiles,
              "repeat": args.repeat, "threads": args.threads, "rows": rows, "totals": sums,
              "compute_units": target.compute_units,
              **provenance(args.device or None, ("onnx", "onnxruntime"),
                           [sys.argv[0], *(sys.argv[1:] if argv is None else argv)])}
    write_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
