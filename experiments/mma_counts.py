"""What a tensor-core kernel's K loop issues per work-item and K step, read from its OpenCL C
source (``experiments/bench_mma.py --counts``: no device needed)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import accy
from accy.kernels.mma_plan import MmaTiles, for_dtype
from accy.target import CP_ASYNC, F16_MMA, TF32_MMA, TargetProfile

COUNT_TARGET = TargetProfile(  # an H200-like profile: --counts needs no device
    device="H200-like (counts only)", device_type="gpu", compute_units=132,
    max_work_group_size=1024, local_mem_bytes=48 * 1024,
    dtypes=frozenset({accy.DType.f32, accy.DType.f16, accy.DType.i32, accy.DType.i64,
                      accy.DType.bool}),
    tensor_cores=(TF32_MMA, CP_ASYNC, F16_MMA))
COUNTED = {  # what the K loop issues per work-item and step, by the pattern of its source
    "mma": r"mma\.sync", "cvt": r"cvt\.rna", "lds32": r"[ab]_tile\[[^\]]*\](?!\s*=[^=])",
    "vload": r"(?:vload\d\([^;]*_tile\)|\(__local \w+\*\)\w*_tile\)\[[^\]]*\](?!\s*=[^=]))",
    "ld.shared.v": r"ld\.shared\.v", "ldmatrix": r"ldmatrix",
    "cp.async": r"cp\.async\.cg", "barrier": r"barrier\("}


def k_loop(src: str) -> str:
    """The source of a kernel's K loop (``for (long kt ...) { ... }``)."""
    start = src.index("for (long kt")
    depth = 0
    for end in range(src.index("{", start), len(src)):
        depth += {"{": 1, "}": -1}.get(src[end], 0)
        if depth == 0:
            return src[start:end + 1]
    raise ValueError("the K loop's braces do not close")


def count_k_loop(src: str) -> dict[str, Any]:
    """Each :data:`COUNTED` pattern's occurrences in ``src``'s K loop, the tiles' local memory
    (KiB of float or int words, against a device's 48 KiB), and local loads and TF32
    conversions per mma."""
    body = k_loop(src)
    out: dict[str, Any] = {k: len(re.findall(v, body)) for k, v in COUNTED.items()}
    out["local KiB"] = sum(4 * int(n) for n in re.findall(r"__local (?:float|int) \w+\[(\d+)\]",
                                                          src)) / 1024
    loads = out["lds32"] + out["vload"] + out["ld.shared.v"] + out["ldmatrix"]
    out["local loads per mma"] = loads / max(out["mma"], 1)
    out["cvt per mma"] = out["cvt"] / max(out["mma"], 1)
    return out


def print_counts(cases: list[dict[str, Any]], policies: list[str],
                 sweeps: dict[accy.DType, list[MmaTiles]],
                 count: Callable[[dict[str, Any], str, MmaTiles | None], dict[str, Any]],
                 dtype_of: Callable[[dict[str, Any]], accy.DType]) -> list[dict[str, Any]]:
    """``--counts``: each case's heuristic kernel and swept tiles, counted by ``count``
    (bench_mma's ``loop_counts``), one line each."""
    rows = []
    for case in cases:
        dt = dtype_of(case)
        for precision in policies[:1] if dt is accy.DType.f16 else policies:
            for tiles in [None, *sweeps[dt]]:
                try:
                    row = count(case, precision, None if tiles is None else for_dtype(tiles, dt))
                except ValueError as exc:
                    row = {"error": str(exc)}
                row = {"case": case["name"], "precision": precision,
                       "tiles": "heuristic" if tiles is None else tiles.text(), **row}
                rows.append(row)
                print(" ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}"
                               for k, v in row.items()), flush=True)
    return rows
