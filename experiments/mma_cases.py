"""The cases of ``experiments/bench_mma.py``: a case's text (``N``, ``MxNxK``, ``bBxMxNxK``,
``biasN``; a trailing ``t``: B stored N x K), its program and inputs, the float64 reference and
the policy's error bound (see bench_mma's docstring), and its FLOPs."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import accy
from accy.builder import einsum
from accy.differential import TOLERANCES
from accy.error_bounds import EXTRA_EINSUM_RTOL


def parse_case(text: str) -> dict[str, Any]:
    """``{"name", "batch", "m", "n", "k", "bias", "bt"}`` of a case's text (a trailing ``t``:
    B stored N x K, ``A @ B.T``)."""
    t = text.strip().lower()
    bias = t.startswith("bias")
    t = t[4:] if bias else t
    bt = t.endswith("t")
    t = t[:-1] if bt else t
    batch = 0
    if t.startswith("b"):
        parts = [int(p) for p in t[1:].split("x")]
        if len(parts) != 4:
            raise ValueError(f"case {text!r}: batched cases are bBxMxNxK")
        batch, parts = parts[0], parts[1:]
    else:
        parts = [int(p) for p in t.split("x")]
        parts = parts * 3 if len(parts) == 1 else parts
    if len(parts) != 3 or min(parts) < 1:
        raise ValueError(f"case {text!r}: give N, MxNxK, bBxMxNxK or biasN (a trailing t: "
                         "B stored N x K)")
    m, n, k = parts
    return {"name": text.strip(), "batch": batch, "m": m, "n": n, "k": k, "bias": bias,
            "bt": bt}


def with_dtype(case: dict[str, Any], dtype: str) -> dict[str, Any]:
    """``case`` with operands of ``dtype`` (f16 cases are named ``CASE.f16``)."""
    if dtype == "f32":
        return case
    return {**case, "name": f"{case['name']}.{dtype}", "dtype": dtype}


def dtype_of(case: dict[str, Any]) -> accy.DType:
    return accy.DType(case.get("dtype", "f32"))


def program(case: dict[str, Any]) -> accy.Program:
    lead = (case["batch"],) if case["batch"] else ()
    m, n, k = case["m"], case["n"], case["k"]
    b = accy.Builder()
    dt = dtype_of(case)
    bt = case.get("bt", False)
    types = [accy.TensorType((*lead, m, k), dt),
             accy.TensorType((*lead, *((n, k) if bt else (k, n))), dt)]
    if case["bias"]:
        types.append(accy.TensorType((n,), dt))
    f = b.begin_function("gemm", types)
    spec = "ik,jk->ij" if bt else "ik,kj->ij"
    y = einsum(f"b{spec.replace(',', ',b').replace('->', '->b')}" if lead else spec,
               f.param(0), f.param(1))
    f.return_((y + f.param(2)).relu() if case["bias"] else y)
    f.finish()
    return b.finish()


def inputs_of(case: dict[str, Any], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    lead = (case["batch"],) if case["batch"] else ()
    dt = dtype_of(case).numpy
    b = (case["n"], case["k"]) if case.get("bt") else (case["k"], case["n"])
    xs = [rng.uniform(-1, 1, (*lead, case["m"], case["k"])).astype(dt),
          rng.uniform(-1, 1, (*lead, *b)).astype(dt)]
    if case["bias"]:
        xs.append(rng.uniform(-1, 1, case["n"]).astype(dt))
    return xs


def reference(case: dict[str, Any], xs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """float64 result and ``|A| @ |B|`` (the magnitude the error bound scales)."""
    a, b = (x.astype(np.float64) for x in xs[:2])
    if case.get("bt"):
        b = np.swapaxes(b, -1, -2)
    exact, mag = a @ b, np.abs(a) @ np.abs(b)
    if case["bias"]:
        # bias add and relu: one more f32 rounding of |y| + |bias|, relu exact
        exact = np.maximum(exact + xs[2].astype(np.float64), 0.0)
        mag = mag + np.abs(xs[2].astype(np.float64))
    return exact, mag


def check(case: dict[str, Any], got: np.ndarray, exact: np.ndarray, mag: np.ndarray,
          precision: str) -> dict[str, Any]:
    """The policy's bound (see the module docstring) against the result."""
    tol = TOLERANCES[accy.DType.f32]
    tiny = float(np.finfo(np.float32).tiny)
    if dtype_of(case) is accy.DType.f16:  # f32 sums of exact products, f16 roundings
        bound = tol.rtol * math.sqrt(case["k"]) * mag + 2.0**-11 * np.abs(exact) + tiny
        if case["bias"]:
            bound = bound + 2.0**-11 * mag
        limit = 2 * bound + TOLERANCES[accy.DType.f16].atol
    else:
        bound = (tol.rtol * math.sqrt(case["k"]) + EXTRA_EINSUM_RTOL[precision]) * mag + tiny
        if case["bias"]:
            bound = bound + tol.rtol * mag + tiny
        limit = 2 * bound + tol.atol
    err = np.abs(got.astype(np.float64) - exact)
    finite = bool(np.isfinite(got).all())
    worst = np.unravel_index(int(np.argmax(err / limit)), err.shape)
    return {
        "ok": finite and bool((err <= limit).all()),
        "finite": finite,
        "bad_elements": int((~(err <= limit)).sum()),
        "max_abs_err": float(err.max()),
        "rel_err": float(err.max() / max(float(np.abs(exact).max()), tiny)),
        "bound_use": float((err / limit).max()),  # <= 1 passes
        "worst_at": [int(i) for i in worst],
    }


def flops(case: dict[str, Any]) -> float:
    return 2.0 * max(case["batch"], 1) * case["m"] * case["n"] * case["k"]
