"""Benchmark: call time against kernel time, with and without host round trips (issue #18).

    python experiments/bench_calls.py [--device SELECTOR] [--size ci|paper|full]
        [--benchmarks mlp_gelu,attention,...] [--repeat 50] [--async-calls 1000]
        [--mlp-steps 20] [--front egglog|lowering] [--out results/bench_calls.json]

For each suite program (``accy.experiments.suite``), the median wall time of one call and the
median of its kernels' summed times (OpenCL profiling), in four ways:

* ``numpy``: numpy inputs, fresh numpy results (every input copied in, every result out);
* ``numpy_out``: numpy inputs and ``out=`` numpy arrays kept across calls;
* ``device``: every input a DeviceArray, results into ``out=`` DeviceArrays (no transfers);
* ``bound``: weights bound once (``exe.bind``), activations numpy, results numpy.

Then a small MLP's training step kept on the device: forward + MSE loss, the gradient program
(written by hand with accy ops) and an SGD update, chained as device tensors and queued
without waiting (weights double-buffered through ``out=``), checked against numpy; and a
loop of ``--async-calls`` calls of a 1-kernel program: synchronous with numpy, synchronous
with device tensors, queued (``exe.enqueue``) — calls per second and host CPU µs per call.
Where torch and a CUDA device are available (``ACCY_DEVICE=nvidia`` on the H200), torch eager
times the same MLP step and the forward of mlp_gelu, layernorm and attention beside accy.

Every mode's results are compared with the ``numpy`` mode's (they must be equal). Prints a
table and writes JSON (``accy.experiments.records``).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import accy
from accy.backends.opencl.runtime import Runtime
from accy.backends.registry import get_backend, open_device
from accy.builder import einsum, trace
from accy.experiments import records, suite
from accy.experiments.peers import cuda_torch
from accy.ir.types import DType

FRONTS = {"egglog": "accy-contract,accy-tensor",
          "lowering": "shape-layout-propagation,activation-lowering,einsum-lowering,loss-lowering"}
# per benchmark: the parameters that are not weights (passed every call); the rest are bound
ACTIVATIONS = {"mlp_gelu": ("x",), "attention": ("x",), "layernorm": ("x",),
               "softmax_xent": ("x", "labels"), "embedding": ("ids", "dy"),
               "tensor_network": ("p1", "p2", "p3", "p4"), "nasrnn": ("x", "state"),
               "matrix_chain": ("a",)}


def _torch(runtime: Runtime) -> Any:
    """torch with a CUDA device when both exist and the accy device is a GPU, else None."""
    if runtime.info.device_type != "gpu":
        return None
    return cuda_torch()[0]


def _time_calls(call: Callable[[], Any], repeat: int, kernel_ns: Callable[[], list[int]]
                ) -> dict[str, float]:
    """Median wall µs per call, median host CPU µs per call (this thread: Python and driver
    calls, not waiting) and median summed kernel µs, after two warm-up calls."""
    call()
    call()
    wall, cpu, kern = [], [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        call()
        cpu.append(time.thread_time_ns() - c0)
        wall.append(time.perf_counter_ns() - t0)
        kern.append(sum(kernel_ns()))
    return {"call_us": statistics.median(wall) / 1e3, "cpu_us": statistics.median(cpu) / 1e3,
            "kernel_us": statistics.median(kern) / 1e3}


def _max_diff(got: tuple, want: tuple) -> float:
    got = [g.get() if hasattr(g, "get") else np.asarray(g) for g in got]
    return max((float(np.max(np.abs(g.astype(np.float64) - w.astype(np.float64))))
                if g.size else 0.0) for g, w in zip(got, want, strict=True))


def bench_suite(bench: suite.Benchmark, size: str, runtime: Runtime, pipeline: str,
                repeat: int) -> dict[str, Any]:
    job = accy.prepare(bench.program(size), pipeline,
                       target=open_device(runtime)[1])
    exe = job.executable(device=runtime)
    inputs = bench.inputs(size)
    names = exe.param_names
    want = exe(*inputs)
    out_np = [np.empty_like(w) for w in want]
    dev_in = [exe.to_device(x) for x in inputs]
    out_dev = [accy.DeviceArray.empty(runtime, w.shape, w.dtype) for w in want]
    active = ACTIVATIONS.get(bench.name, names[:1])
    bound = exe.bind(**{n: x for n, x in zip(names, dev_in, strict=True) if n not in active})
    act = {n: x for n, x in zip(names, inputs, strict=True) if n in active}
    row: dict[str, Any] = {"benchmark": bench.name, "size": size, "kernels": len(exe.steps),
                           "input_bytes": sum(x.nbytes for x in inputs),
                           "bound_inputs": [n for n in names if n not in active]}
    modes = {"numpy": lambda: exe(*inputs),
             "numpy_out": lambda: exe(*inputs, out=out_np),
             "device": lambda: exe(*dev_in, out=out_dev),
             "bound": lambda: bound(**act, out=out_np)}
    for mode, call in modes.items():
        row[mode] = _time_calls(call, repeat, lambda: exe.last_kernel_ns)
        row[mode]["max_diff"] = _max_diff(call(), want)
    return row


# ---- a training step kept on the device ------------------------------------------------------

def _mlp_programs(b: int, d: int, h: int, c: int, lr: float):
    f32 = accy.f32

    def forward_loss(x, y, w1, b1, w2, b2):
        hid = (einsum("bd,hd->bh", x, w1) + b1).relu()
        out = einsum("bh,ch->bc", hid, w2) + b2
        return ((out - y) * (out - y)).mean(), hid, out

    def gradient(x, y, w2, hid, pred):  # (a parameter named `out` could only go positionally)
        d_out = (pred - y) * (2.0 / (b * c))
        d_hid = einsum("bc,ch->bh", d_out, w2) * (hid > 0.0).astype(DType.f32)
        return (einsum("bh,bd->hd", d_hid, x), d_hid.sum(axes=0),
                einsum("bc,bh->ch", d_out, hid), d_out.sum(axes=0))

    def sgd(w1, b1, w2, b2, g1, gb1, g2, gb2):
        return w1 - g1 * lr, b1 - gb1 * lr, w2 - g2 * lr, b2 - gb2 * lr

    shapes = {"x": f32[b, d], "y": f32[b, c], "w1": f32[h, d], "b1": f32[h], "w2": f32[c, h],
              "b2": f32[c], "hid": f32[b, h], "pred": f32[b, c]}
    return (trace(forward_loss, *(shapes[n] for n in ("x", "y", "w1", "b1", "w2", "b2"))),
            trace(gradient, *(shapes[n] for n in ("x", "y", "w2", "hid", "pred"))),
            trace(sgd, *(shapes[n] for n in ("w1", "b1", "w2", "b2", "w1", "b1", "w2", "b2"))))


def _mlp_numpy(x, y, params, lr, steps):
    w1, b1, w2, b2 = (p.astype(np.float64) for p in params)
    bsz, c = y.shape
    for _ in range(steps):
        hid = np.maximum(x @ w1.T + b1, 0)
        out = hid @ w2.T + b2
        d_out = (out - y) * (2.0 / (bsz * c))
        d_hid = (d_out @ w2) * (hid > 0)
        w1, b1, w2, b2 = (w1 - lr * d_hid.T @ x, b1 - lr * d_hid.sum(0),
                          w2 - lr * d_out.T @ hid, b2 - lr * d_out.sum(0))
    loss = float((((np.maximum(x @ w1.T + b1, 0) @ w2.T + b2) - y) ** 2).mean())
    return (w1, b1, w2, b2), loss


def bench_mlp(runtime: Runtime, pipeline: str, steps: int, dims: tuple[int, int, int, int],
              torch: Any) -> dict[str, Any]:
    b, d, h, c = dims
    lr = 0.05
    target = open_device(runtime)[1]
    fwd, grad, sgd = (accy.prepare(p, pipeline, target=target).executable(device=runtime)
                      for p in _mlp_programs(b, d, h, c, lr))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((b, d)).astype(np.float32)
    y = rng.standard_normal((b, c)).astype(np.float32)
    params = [(rng.standard_normal(s) / math.sqrt(s[-1])).astype(np.float32)
              for s in ((h, d), (h,), (c, h), (c,))]
    fwd_x = fwd.bind(x=x, y=y)  # the batch stays on the device too
    grad_x = grad.bind(x=x, y=y)
    sets = [[fwd.to_device(p) for p in params],
            [accy.DeviceArray.empty(runtime, p.shape, p.dtype) for p in params]]

    def step(i: int) -> Any:
        w1, b1, w2, b2 = sets[i % 2]
        loss, hid, pred = fwd_x.enqueue(w1=w1, b1=b1, w2=w2, b2=b2).results
        grads = grad_x.enqueue(w2=w2, hid=hid, pred=pred).results
        return sgd.enqueue(w1, b1, w2, b2, *grads, out=sets[(i + 1) % 2]), loss

    for i in range(steps):  # checked against numpy first (an even count ends in set 0)
        step(i)
    want, want_loss = _mlp_numpy(x, y, params, lr, steps)
    got = [p.get() for p in sets[steps % 2]]
    diff = max(float(np.max(np.abs(g - w))) for g, w in zip(got, want, strict=True))
    walls = []
    for _ in range(3):
        t0 = time.perf_counter_ns()
        for i in range(steps):
            last, loss = step(i)
        last.wait()
        walls.append((time.perf_counter_ns() - t0) / steps)
    kernel_ns = sum(fwd.last_kernel_ns) if fwd.last_kernel_ns else None
    row = {"benchmark": "mlp_train_step", "dims": {"batch": b, "in": d, "hidden": h, "out": c},
           "steps": steps, "step_us": min(walls) / 1e3, "max_diff_vs_numpy": diff,
           "kernels_per_step": len(fwd.steps) + len(grad.steps) + len(sgd.steps),
           "forward_kernel_us": kernel_ns and kernel_ns / 1e3}
    if torch is not None:
        row["torch_step_us"] = _torch_mlp_step_us(torch, x, y, params, lr, steps)
    return row


def _torch_mlp_step_us(torch, x, y, params, lr, steps) -> float:
    dev = torch.device("cuda")
    xt, yt = torch.tensor(x, device=dev), torch.tensor(y, device=dev)
    ws = [torch.tensor(p, device=dev, requires_grad=True) for p in params]

    def step():
        w1, b1, w2, b2 = ws
        out = torch.relu(xt @ w1.T + b1) @ w2.T + b2
        loss = ((out - yt) ** 2).mean()
        grads = torch.autograd.grad(loss, ws)
        with torch.no_grad():
            for w, g in zip(ws, grads, strict=True):
                w -= lr * g
        return loss

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter_ns()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter_ns() - t0) / steps / 1e3


def _torch_forward_us(torch, bench: suite.Benchmark, size: str, repeat: int
                      ) -> float | None:
    """torch eager call time of the forward (inputs already on the GPU, synchronised per
    call); ``None`` for benchmarks without a torch version here."""
    F = torch.nn.functional
    name = bench.name
    t = [torch.tensor(x, device="cuda") for x in bench.inputs(size)]
    if name == "mlp_gelu":
        x, w1, b1, w2, b2 = t
        fn = lambda: F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2) + x  # noqa: E731
    elif name == "layernorm":
        x, g, bt = t
        fn = lambda: F.layer_norm(x, (x.shape[-1],), g, bt, 1e-5)  # noqa: E731
    elif name == "attention":
        x, wq, wk, wv, wo = t
        s, m = x.shape
        nh = bench.dims(size)["heads"]

        def fn():
            q, k, v = (F.linear(x, w).reshape(s, nh, m // nh).transpose(0, 1)
                       for w in (wq, wk, wv))
            p = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(m // nh), -1)
            return F.linear((p @ v).transpose(0, 1).reshape(s, m), wo)
    else:
        return None
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        fn()
        torch.cuda.synchronize()
        samples.append(time.perf_counter_ns() - t0)
    return statistics.median(samples) / 1e3


# ---- launch overhead: a 1-kernel program -----------------------------------------------------

def bench_loop(runtime: Runtime, pipeline: str, calls: int, n: int) -> dict[str, Any]:
    def chain(a, b):
        return accy.maximum((a + b) * b - b, b)

    target = open_device(runtime)[1]
    program = trace(chain, accy.f32[n], accy.f32[n])
    exe = accy.prepare(program, pipeline, target=target).executable(device=runtime)
    a = np.random.default_rng(0).random(n, dtype=np.float32)
    out = np.empty_like(a)
    da, out_d = exe.to_device(a), accy.DeviceArray.empty(runtime, (n,), np.float32)
    want = np.maximum((a + a) * a - a, a)

    def loop(call: Callable[[], Any], finish: Callable[[Any], Any] = lambda r: r):
        call()
        t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        for _ in range(calls):
            r = call()
        finish(r)
        wall, cpu = time.perf_counter_ns() - t0, time.thread_time_ns() - c0
        return {"calls_per_s": calls / (wall / 1e9), "us_per_call": wall / calls / 1e3,
                "cpu_us_per_call": cpu / calls / 1e3}

    row: dict[str, Any] = {"benchmark": "1-kernel loop", "elements": n, "calls": calls,
                           "kernels": len(exe.steps)}
    row["numpy"] = loop(lambda: exe(a, a))
    row["numpy_out"] = loop(lambda: exe(a, a, out=out))
    row["device"] = loop(lambda: exe(da, da, out=out_d))
    row["async"] = loop(lambda: exe.enqueue(da, da, out=out_d), lambda h: h.wait())
    row["kernel_us"] = sum(exe.last_kernel_ns) / 1e3
    row["max_diff"] = float(np.max(np.abs(out_d.get() - want)))
    return row


# ---- driver ----------------------------------------------------------------------------------

def _fmt(x: Any) -> str:
    return "-" if x is None else f"{x:.1f}" if isinstance(x, float) else str(x)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default=None, help="OpenCL selector (default ACCY_DEVICE/pocl)")
    p.add_argument("--size", choices=suite.SIZES, default="ci")
    p.add_argument("--benchmarks", default="all")
    p.add_argument("--repeat", type=int, default=50)
    p.add_argument("--async-calls", type=int, default=1000)
    p.add_argument("--loop-elements", type=int, default=1024)
    p.add_argument("--mlp-steps", type=int, default=20)
    p.add_argument("--mlp", default="32,64,128,10", help="batch,in,hidden,out of the MLP")
    p.add_argument("--front", choices=sorted(FRONTS), default="egglog")
    p.add_argument("--out", default="results/bench_calls.json")
    args = p.parse_args(argv)
    if args.mlp_steps % 2:
        p.error("--mlp-steps must be even (the weights are double-buffered)")
    runtime = get_backend().select_device(args.device)
    pipeline = f"{FRONTS[args.front]},accy-dispatch,accy-memory,accy-kernel,accy-target"
    torch = _torch(runtime)
    print(f"device: {runtime.info.key}; torch eager: {'yes' if torch else 'no'}")
    rows = []
    head = (f"{'benchmark':<15}{'k':>3}" + "".join(
        f"{m + ' call/kern us':>26}" for m in ("numpy", "numpy_out", "device", "bound"))
        + f"{'torch us':>10}")
    print(head)
    for bench in suite.benchmarks(args.benchmarks):
        row = bench_suite(bench, args.size, runtime, pipeline, args.repeat)
        if torch is not None:
            row["torch_us"] = _torch_forward_us(torch, bench, args.size, args.repeat)
        rows.append(row)
        print(f"{bench.name:<15}{row['kernels']:>3}" + "".join(
            f"{_fmt(row[m]['call_us']) + ' / ' + _fmt(row[m]['kernel_us']):>26}"
            for m in ("numpy", "numpy_out", "device", "bound"))
            + f"{_fmt(row.get('torch_us')):>10}")
        # the same kernels on the same inputs: equal, up to the order of atomic f32 adds
        bad = [m for m in ("numpy_out", "device", "bound") if row[m]["max_diff"] > 1e-4]
        if bad:
            print(f"  results differ from the numpy path in: {', '.join(bad)}", file=sys.stderr)
    mlp = bench_mlp(runtime, pipeline, args.mlp_steps,
                    tuple(int(v) for v in args.mlp.split(",")), torch)
    print(f"\nMLP training step on the device ({mlp['kernels_per_step']} kernels, queued): "
          f"{mlp['step_us']:.1f} us/step; torch eager {_fmt(mlp.get('torch_step_us'))} "
          f"us/step; max |accy - numpy| after {mlp['steps']} steps {mlp['max_diff_vs_numpy']:.2e}")
    loop = bench_loop(runtime, pipeline, args.async_calls, args.loop_elements)
    print(f"\n{args.async_calls} calls of a 1-kernel program ({loop['elements']} elements, "
          f"kernel {loop['kernel_us']:.1f} us):")
    for mode in ("numpy", "numpy_out", "device", "async"):
        m = loop[mode]
        print(f"  {mode:<10} {m['calls_per_s']:>10.0f} calls/s  {m['us_per_call']:>8.1f} us/call"
              f"  {m['cpu_us_per_call']:>8.1f} host CPU us/call")
    result = {"experiment": "bench_calls", "size": args.size, "front": args.front,
              "provenance": records.provenance(args.device, command=sys.argv),
              "rows": rows, "mlp": mlp, "loop": loop}
    records.write_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
