"""Probe: Hopper's TMA (cp.async.bulk.tensor) from OpenCL C (NVIDIA H100/H200 only).

    ACCY_DEVICE=nvidia OUT=results python experiments/probe_tma.py [TMA_GEMM=1] [TMA_FUZZ=60]

NVIDIA's OpenCL exposes no tensor maps. A tensor map's template is encoded on the host through
the CUDA driver (``accy.kernels.tma.template``, ctypes on libcuda.so.1, placeholder address);
the kernel writes its words to global memory, puts the operand's address in with
``tensormap.replace`` and fences the tensor-map proxy; one work-item then issues the copy,
which completes on an ``mbarrier`` the work-group waits on. Steps: (1) the templates encode;
(2) the device probe's kernel (accy.backends.opencl.tensor_cores.TMA_PROBE_SOURCE: a box of
each of wgmma_tma's tensor-map forms over a K x N f16 matrix) lands them in local memory
128-byte swizzled (chunk c of row r at c ^ (r % 8)), checked element by element;
(3, ``TMA_GEMM=1``) the wgmma-f16 kernel with B through TMA against the one with B through
cp.async, and at 3, 4 and 5 stages, f16 GEMMs (``TMA_CASES``) checked against float64 and
timed by OpenCL events; (4, ``TMA_FUZZ=N``) N random f16 products and f32 ones under tf32
(ragged, batched, with a bias epilogue) the TMA kernels take, each checked against float64.
Results to $OUT/probe_tma.json. (The session that wrote it first
checked a 3-d box at six coordinates in six work-groups, and four forms of the kernel:
papers/kernels.md, "Nineteenth session".)
"""
import json
import os
import sys

import numpy as np

from accy.backends.opencl import tensor_cores
from accy.backends.registry import open_device
from accy.kernels import tma

OUT = os.environ.get("OUT", "/tmp")
runtime, target = open_device(os.environ.get("ACCY_DEVICE", "nvidia"))
dev = runtime.device
res: dict = {"device": dev.name, "tensor_cores": list(target.tensor_cores)}


def save():
    with open(os.path.join(OUT, "probe_tma.json"), "w") as f:
        json.dump(res, f, indent=1, default=str)


def step(name, fn):
    try:
        r = fn()
        res[name] = {"ok": True, **(r or {})}
        print(name, "ok", r if r else "", flush=True)
        return True
    except Exception as exc:  # noqa: BLE001
        res[name] = {"ok": False, "error": str(exc)[:3000]}
        print(name, "FAILED", str(exc)[:3000], flush=True)
        return False
    finally:
        save()


def encode():
    words = [tma.template(tma.F16, *m[:3]) for m in tensor_cores.TMA_PROBE_MAPS]
    if any(isinstance(w, str) for w in words):
        raise RuntimeError(next(w for w in words if isinstance(w, str)))
    return {"words": [[hex(x) for x in w] for w in words]}


def box():
    """The device probe's kernel (two boxes: a 3-d and a 5-d tensor map), element by element
    against the swizzled layout it predicts."""
    y, want = tensor_cores.tma_probe_case()
    got = tensor_cores.run_isolated(dev, tensor_cores.tma_probe_source(), "accy_tma_probe", [y],
                                    np.zeros(want.size // 2, np.uint32), items=128,
                                    scratch=2 * tma.MAP_BYTES).view(np.uint16)
    bad = int((got != want).sum())
    if bad:
        raise RuntimeError(f"{bad} of {want.size} halves wrong; first 16 got "
                           f"{got[:16].tolist()} want {want[:16].tolist()}")
    return {"halves": int(want.size)}


CASES = os.environ.get("TMA_CASES", "4096x4096x4096,8192x8192x1024,4096x4096x1024,"
                       "4096x1024x4096,2048x1024x512,b8x1024x1024x256,1000x1032x520,"
                       "3000x2040x1000,2048x2048x2048").split(",")
# (name, TMA on, stages of the TMA kernel)
VARIANTS = [("cp_async", False, 4), ("tma", True, 4), ("tma_s5", True, 5), ("tma_s3", True, 3)]


def gemm():
    """wgmma-f16 with B through TMA against B through cp.async, the same job otherwise."""
    import dataclasses

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_mma
    from mma_cases import check, flops, inputs_of, parse_case, program, reference, with_dtype

    import accy
    from accy.kernels import wgmma_tma
    from accy.target import TMA_COPY
    with_tma = dataclasses.replace(target, tensor_cores=(
        *(x for x in target.tensor_cores if x != TMA_COPY), TMA_COPY))
    without = dataclasses.replace(target, tensor_cores=tuple(
        x for x in target.tensor_cores if x != TMA_COPY))
    rows = []
    for text in CASES:
        case = with_dtype(parse_case(text), "f16")
        xs = inputs_of(case)
        exact, mag = reference(case, xs)
        row = {"case": text, "gflop": flops(case) / 1e9}
        for name, tgt, stages in VARIANTS:
            wgmma_tma._WgmmaTma.stages = lambda self, s=stages: s
            tgt = with_tma if tgt else without
            try:
                job = accy.prepare(program(case), bench_mma.pipeline("3xtf32"), target=tgt)
                ms, got = bench_mma.time_accy(job, xs, runtime, 15)
                verdict = check(case, got, exact, mag, "3xtf32")
                row[name] = {"ms": ms, "ok": verdict["ok"], "bound_use": verdict["bound_use"],
                             "generators": job.generators(),
                             "tma": "@@TMA" in job.kernel_source(0)}
            except Exception as exc:  # noqa: BLE001
                row[name] = {"error": str(exc)[:1500]}
        for name, *_ in VARIANTS[1:]:
            if "ms" in row["cp_async"] and "ms" in row[name]:
                row[name]["speedup"] = row["cp_async"]["ms"] / row[name]["ms"]
        print(row, flush=True)
        rows.append(row)
        res["gemm_rows"] = rows
        save()
    return {"rows": len(rows)}


def fuzz():
    """``TMA_FUZZ`` random f16 products, and f32 ones under the ``tf32`` policy, the TMA
    kernels take (ragged M, N a multiple of 8; or whole tiles of 128 x 256, which the walking
    kernel takes; or N 2-6 past a multiple of 8, B's rows then fitting no f16 tensor map; K a
    multiple of 8 from 128, batched or not, bias and relu or not, B stored N x K or not: the
    kernel copying A too takes f16 from K 512, f32 from K 256, B along N transposed first),
    each checked against float64 with bench_mma's bounds."""
    import random

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_mma
    from mma_cases import check, inputs_of, program, reference

    import accy
    rng, rows, bad = random.Random(19), [], 0
    for i in range(int(os.environ["TMA_FUZZ"])):
        batch = rng.choice([0, 0, 0, rng.randint(2, 6)])
        shape = rng.choice(["ragged", "ragged", "whole", "rows"])
        m, n = rng.randint(64, 3000), 8 * rng.randint(8, 400)
        if shape == "whole":  # whole tiles (the walking kernel's products)
            m, n = 128 * rng.randint(1, 24), 256 * rng.randint(1, 12)
        elif shape == "rows":  # f16 rows of B that no tensor map fits (transposed first)
            n = 8 * rng.randint(8, 400) + 2 * rng.randint(1, 3)
        case = {"name": "", "batch": batch, "m": m, "n": n, "k": 8 * rng.randint(16, 300),
                "bias": rng.random() < 0.3, "bt": rng.random() < 0.25,
                "dtype": rng.choice(["f16", "f32"])}
        policy = "3xtf32" if case["dtype"] == "f16" else "tf32"
        case["name"] = (f"{'bias' if case['bias'] else ''}{f'b{batch}x' if batch else ''}"
                        f"{case['m']}x{case['n']}x{case['k']}{'t' if case['bt'] else ''}"
                        f".{case['dtype']}")
        job = accy.prepare(program(case), bench_mma.pipeline(policy), target=target)
        source = "".join(job.kernel_source(j) for j in range(len(job.kernels)))
        if "@@TMA" not in source:
            rows.append({"case": case["name"], "tma": False, "generators": job.generators()})
            continue
        xs = inputs_of(case, seed=i)
        exact, mag = reference(case, xs)
        ms, got = bench_mma.time_accy(job, xs, runtime, 3)
        verdict = check(case, got, exact, mag, policy)
        bad += not verdict["ok"]
        rows.append({"case": case["name"], "tma": True, "ms": ms, "ok": verdict["ok"],
                     "a_copied": "@@SSTEP" in source, "walks": "c_stage" in source,
                     "kernels": len(job.kernels),
                     "bound_use": verdict["bound_use"]})
        print(rows[-1], flush=True)
    res["fuzz_rows"] = rows
    if bad:
        raise RuntimeError(f"{bad} products out of bounds")
    return {"cases": len(rows), "tma": sum(r["tma"] for r in rows),
            "a_copied": sum(r.get("a_copied", False) for r in rows),
            "walks": sum(r.get("walks", False) for r in rows)}


if __name__ == "__main__":
    if step("encode", encode) and step("box", box):
        if os.environ.get("TMA_GEMM") == "1":
            step("gemm", gemm)
        if os.environ.get("TMA_FUZZ"):
            step("fuzz", fuzz)
    sys.exit(0)
