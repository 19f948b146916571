"""Device probe: do accy's timer (OpenCL profiling events) and torch's (torch.profiler, CUPTI)
agree on the same work? (NVIDIA; the torch half needs torch on CUDA.)

    python experiments/probe_timers.py --device nvidia --out results/probe_timers.json

Times an empty kernel (1 and 33,792 work-items) and a float4 copy of 128 MiB by OpenCL events,
each launch alone (waited for, then a 2 ms pause), back to back, and in bursts of four
waited for together (as a call's kernels; each one's median by its place in the burst); then
a 1-element ``add_`` and a 128 MiB ``copy_`` by torch.profiler (each call profiled alone,
and 30 calls in one session), and the copy by CUDA events. Medians; microseconds. The
difference on the same work is what ``bench_gpu.py``'s timer calibration takes off each of
accy's kernels (results: ``papers/data/probe_timers_tenth_h200.json``, papers/kernels.md
"Tenth session"; with the bursts on the H100, ``probe_timers_thirtyninth_h100.json``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from accy.backends.registry import open_device

SOURCE = """
__kernel void empty(__global float* y) { if (get_global_id(0) == (1L << 40)) y[0] = 1.0f; }
__kernel void copy4(__global const float4* restrict x, __global float4* restrict y) {
  const long i = get_global_id(0); y[i] = x[i]; }
"""
N = 8192 * 4096  # floats copied: 128 MiB
BURST = 4  # launches waited for together


def opencl_side(runtime, res: dict) -> None:
    import pyopencl as cl

    ctx, q = runtime.context, runtime.queue
    prg = cl.Program(ctx, SOURCE).build()
    empty, copy4 = cl.Kernel(prg, "empty"), cl.Kernel(prg, "copy4")
    x = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    bx = cl.Buffer(ctx, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR, hostbuf=x)
    by = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, size=x.nbytes)
    empty.set_args(by)
    copy4.set_args(bx, by)
    launches = {"empty 1": (empty, (1,), (1,)), "empty 33792": (empty, (33792,), (256,)),
                "copy4 128MiB": (copy4, (N // 4,), (256,))}
    for alone in (True, False):
        for name, (k, g, ls) in launches.items():
            events = []
            for _ in range(40):
                e = cl.enqueue_nd_range_kernel(q, k, g, ls)
                if alone:
                    e.wait()
                    time.sleep(0.002)
                events.append(e)
            q.finish()
            key = f"opencl {name} {'alone' if alone else 'back-to-back'}"
            res[key] = statistics.median((e.profile.end - e.profile.start) / 1e3
                                         for e in events[5:])
            print(f"{key:40s} {res[key]:9.2f} us", flush=True)
    for name, (k, g, ls) in launches.items():
        bursts = []
        for _ in range(40):
            events = [cl.enqueue_nd_range_kernel(q, k, g, ls) for _ in range(BURST)]
            events[-1].wait()
            bursts.append([(e.profile.end - e.profile.start) / 1e3 for e in events])
        key = f"opencl {name} burst of {BURST}"
        res[key] = [statistics.median(b[i] for b in bursts[5:]) for i in range(BURST)]
        print(f"{key:40s} {' '.join(f'{us:.2f}' for us in res[key])} us", flush=True)


def torch_side(res: dict) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    t = torch.randn(N, device="cuda")
    o, z = torch.empty_like(t), torch.zeros(1, device="cuda")
    calls = {"add_ 1": lambda: z.add_(1), "copy_ 128MiB": lambda: o.copy_(t)}

    def device_us(p) -> float:
        return sum(e.device_time_total for e in p.key_averages())

    for alone in (True, False):
        for name, fn in calls.items():
            for _ in range(5):
                fn()
            torch.cuda.synchronize()
            if alone:
                samples = []
                for _ in range(30):
                    with profile(activities=[ProfilerActivity.CUDA]) as p:
                        fn()
                        torch.cuda.synchronize()
                    samples.append(device_us(p))
                us = statistics.median(samples)
            else:
                with profile(activities=[ProfilerActivity.CUDA]) as p:
                    for _ in range(30):
                        fn()
                    torch.cuda.synchronize()
                us = device_us(p) / 30
            key = f"torch {name} {'alone' if alone else 'back-to-back'}"
            res[key] = us
            print(f"{key:40s} {us:9.2f} us", flush=True)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ms = []
    for _ in range(30):
        start.record()
        o.copy_(t)
        end.record()
        end.synchronize()
        ms.append(start.elapsed_time(end))
    res["torch copy_ 128MiB cuda events"] = 1e3 * statistics.median(ms)
    print(f"{'torch copy_ 128MiB cuda events':40s} {res['torch copy_ 128MiB cuda events']:9.2f} us")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--out", default="results/probe_timers.json")
    args = ap.parse_args()
    runtime, _ = open_device(args.device)
    res: dict = {"device": runtime.info.key, "unit": "us"}
    opencl_side(runtime, res)
    try:
        torch_side(res)
    except Exception as exc:  # noqa: BLE001  (no torch, no CUDA)
        res["torch"] = f"skipped: {type(exc).__name__}: {exc}"
        print(res["torch"])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
