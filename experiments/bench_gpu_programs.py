"""The programs of ``experiments/bench_gpu.py``: each kind's axes and traced accy function,
the programs at their ``full`` and ``small`` sizes, the timer-calibration programs, their
inputs, and the float64 check of an output slice within accy's error bounds (see
bench_gpu.py's docstring). The torch side's maths is ``bench_gpu_torch.py``'s."""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

import accy
from accy.builder import einsum, trace
from accy.differential import TOLERANCES
from accy.error_bounds import error_bounds
from accy.ir.types import DType, TensorType

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_gpu_torch, beside this file

import bench_gpu_torch as bt  # noqa: E402

CHECK_ROWS = 32  # rows (tokens, query positions) of the output checked against float64
CHECK_ELEMENTS = 1 << 16  # elements of the chain checked


@dataclasses.dataclass(frozen=True)
class Kind:
    """A program kind: each input's axis names, the output's, and the axes cut for the check."""

    inputs: tuple[tuple[str, ...], ...]
    output: tuple[str, ...]
    check: dict[str, int]  # axis -> length of the slice checked against float64


KINDS: dict[str, Kind] = {
    "gemm": Kind((("M", "K"), ("K", "N")), ("M", "N"), {"M": CHECK_ROWS}),
    "bgemm": Kind((("B", "M", "K"), ("B", "K", "N")), ("B", "M", "N"),
                  {"B": 2, "M": CHECK_ROWS}),
    # B stored N x K (x @ W.T, as torch.nn.Linear keeps W): B read along K
    "gemm_nt": Kind((("M", "K"), ("N", "K")), ("M", "N"), {"M": CHECK_ROWS}),
    "bgemm_nt": Kind((("B", "M", "K"), ("B", "N", "K")), ("B", "M", "N"),
                     {"B": 2, "M": CHECK_ROWS}),
    "attention": Kind((("B", "H", "Sq", "D"), ("B", "H", "Sk", "D"), ("B", "H", "Sk", "D")),
                      ("B", "H", "Sq", "D"), {"B": 1, "H": 1, "Sq": CHECK_ROWS}),
    "layernorm": Kind((("R", "C"), ("C",), ("C",)), ("R", "C"), {"R": CHECK_ROWS}),
    "rmsnorm": Kind((("R", "C"), ("C",)), ("R", "C"), {"R": CHECK_ROWS}),
    "softmax": Kind((("R", "C"),), ("R", "C"), {"R": CHECK_ROWS}),
    "mlp": Kind((("T", "D"), ("D", "F"), ("F",), ("F", "D"), ("D",)), ("T", "D"),
                {"T": CHECK_ROWS}),
    "chain": Kind((("N",), ("N",)), ("N",), {"N": CHECK_ELEMENTS}),
    "add": Kind((("N",), ("N",)), ("N",), {"N": CHECK_ELEMENTS}),
}
assert set(KINDS) == set(bt.KINDS)


@dataclasses.dataclass(frozen=True)
class Spec:
    name: str
    kind: str
    shape_class: str
    full: dict[str, int]
    small: dict[str, int]
    dtype: str = "f32"

    def dims(self, size: str) -> dict[str, int]:
        return dict(self.full if size == "full" else self.small)


def _attention(seq: int, small_seq: int, dtype: str = "f32") -> Spec:
    suffix = "_f16" if dtype == "f16" else ""
    return Spec(f"attention_{seq}{suffix}", "attention", "attention",
                {"B": 8, "H": 16, "Sq": seq, "Sk": seq, "D": 64},
                {"B": 1, "H": 2, "Sq": small_seq, "Sk": small_seq, "D": 16}, dtype)


_F32 = (
    Spec("gemm_4096", "gemm", "square GEMM", {"M": 4096, "N": 4096, "K": 4096},
         {"M": 64, "N": 64, "K": 64}),
    Spec("gemm_skinny", "gemm", "skinny GEMM", {"M": 16, "N": 4096, "K": 4096},
         {"M": 4, "N": 96, "K": 80}),
    Spec("gemm_small_k", "gemm", "small-K GEMM", {"M": 4096, "N": 4096, "K": 64},
         {"M": 96, "N": 80, "K": 8}),
    Spec("gemm_long_k", "gemm", "long-K GEMM", {"M": 256, "N": 256, "K": 65536},
         {"M": 16, "N": 16, "K": 1024}),
    Spec("gemm_batched", "bgemm", "batched GEMM", {"B": 32, "M": 512, "N": 512, "K": 64},
         {"B": 3, "M": 32, "N": 24, "K": 16}),
    Spec("gemm_between", "gemm", "GEMM between", {"M": 1000, "N": 1030, "K": 520},
         {"M": 50, "N": 52, "K": 26}),
    _attention(512, 16), _attention(1024, 24), _attention(2048, 32), _attention(4096, 40),
    Spec("layernorm", "layernorm", "row reduction", {"R": 8192, "C": 4096}, {"R": 48, "C": 256}),
    Spec("rmsnorm", "rmsnorm", "row reduction", {"R": 8192, "C": 4096}, {"R": 48, "C": 256}),
    Spec("softmax", "softmax", "row reduction", {"R": 8192, "C": 8192}, {"R": 48, "C": 320}),
    Spec("mlp_gelu", "mlp", "MLP", {"T": 4096, "D": 1024, "F": 4096},
         {"T": 40, "D": 32, "F": 128}),
    Spec("chain", "chain", "elementwise", {"N": 1 << 28}, {"N": 1 << 12}),
)
_F16_OF = ("gemm_4096", "gemm_skinny", "gemm_small_k", "gemm_long_k", "gemm_batched",
           "gemm_between", "layernorm", "softmax", "mlp_gelu")
PROGRAMS: dict[str, Spec] = {s.name: s for s in _F32}
PROGRAMS.update({f"{n}_f16": dataclasses.replace(PROGRAMS[n], name=f"{n}_f16", dtype="f16")
                 for n in _F16_OF})
PROGRAMS["attention_2048_f16"] = _attention(2048, 32, "f16")
# the timer calibration (see the module): a + b on 32 elements (launch cost alone) and on 2^25
# (bandwidth-bound: its net time should match torch's), run first, in no summary
CALIBRATION = (Spec("calibration_tiny", "add", "calibration", {"N": 32}, {"N": 32}),
               Spec("calibration_add", "add", "calibration", {"N": 1 << 25}, {"N": 1 << 12}))


HELD_OUT_SPAN = 2.0  # held-out axes drawn within [size / SPAN, size * SPAN] of the program's
HELD_OUT_ALIGN = {"D": 8}  # axes drawn as multiples (head and model dimensions)
HELD_OUT_TIED = {"square GEMM": {"N": "M", "K": "M"}, "attention": {"Sk": "Sq"}}  # by class


def held_out_dims(spec: Spec, size: str, rng: np.random.Generator) -> dict[str, int]:
    """A held-out shape of ``spec``'s class (``--held-out``): each axis drawn log-uniformly
    within a factor :data:`HELD_OUT_SPAN` of its ``size`` length (any integer, so edges and
    unaligned rows come up; multiples of :data:`HELD_OUT_ALIGN` where given), the axes
    :data:`HELD_OUT_TIED` names equal to theirs (a square GEMM stays square; attention's
    keys as many as its queries)."""
    tied = HELD_OUT_TIED.get(spec.shape_class, {})
    out: dict[str, int] = {}
    for axis, n in spec.dims(size).items():
        if axis in tied:
            out[axis] = out[tied[axis]]
            continue
        step = HELD_OUT_ALIGN.get(axis, 1)
        lo, hi = max(1, round(n / HELD_OUT_SPAN)), round(n * HELD_OUT_SPAN)
        x = math.exp(rng.uniform(math.log(lo), math.log(hi)))
        out[axis] = max(step, round(x / step) * step)
    return out


# ---- programs, inputs and their float64 check -------------------------------------------------

def accy_function(kind: str, dims: dict[str, int]):
    """The traced function of a program kind (the maths of ``bench_gpu_torch.torch_fn``)."""
    if kind == "gemm":
        return lambda a, b: einsum("mk,kn->mn", a, b)
    if kind == "bgemm":
        return lambda a, b: einsum("bmk,bkn->bmn", a, b)
    if kind == "gemm_nt":
        return lambda a, b: einsum("mk,nk->mn", a, b)
    if kind == "bgemm_nt":
        return lambda a, b: einsum("bmk,bnk->bmn", a, b)
    if kind == "attention":
        scale = 1.0 / math.sqrt(dims["D"])

        def attention(q, k, v):
            s = einsum("bhqd,bhkd->bhqk", q, k) * scale
            return einsum("bhqk,bhkd->bhqd", s.softmax(), v)
        return attention
    if kind == "layernorm":
        def layernorm(x, g, b):
            xc = x - x.mean(axes=-1, keepdims=True)
            var = (xc * xc).mean(axes=-1, keepdims=True)
            return xc / (var + bt.LN_EPS).sqrt() * g + b
        return layernorm
    if kind == "rmsnorm":
        return lambda x, g: x * ((x * x).mean(axes=-1, keepdims=True) + bt.RMS_EPS).rsqrt() * g
    if kind == "softmax":
        return lambda x: x.softmax()
    if kind == "mlp":
        def mlp(x, w1, b1, w2, b2):
            h = (einsum("td,df->tf", x, w1) + b1).gelu()
            return einsum("tf,fd->td", h, w2) + b2
        return mlp
    if kind == "chain":
        return lambda a, b: accy.maximum((a + b) * b - b, b)
    if kind == "add":
        return lambda a, b: a + b
    raise ValueError(f"program kind {kind!r}")


def program(spec: Spec, dims: dict[str, int]) -> accy.Program:
    dtype = DType(spec.dtype)
    types = [TensorType(tuple(dims[a] for a in axes), dtype) for axes in KINDS[spec.kind].inputs]
    return trace(accy_function(spec.kind, dims), *types, name=spec.name)


def inputs(spec: Spec, dims: dict[str, int]) -> list[np.ndarray]:
    """Seeded inputs; the MLP's weights scaled by 1/sqrt(fan-in), biases small."""
    rng = np.random.default_rng(0)
    xs = []
    for i, axes in enumerate(KINDS[spec.kind].inputs):
        x = rng.standard_normal(tuple(dims[a] for a in axes), dtype=np.float32)
        if spec.kind == "mlp":
            x *= (1.0, dims["D"] ** -0.5, 0.1, dims["F"] ** -0.5, 0.1)[i]
        elif spec.kind == "layernorm" and i == 0:
            x = 2.0 * x + 0.5
        xs.append(x.astype(DType(spec.dtype).numpy, copy=False))
    return xs


def numpy_reference(kind: str, dims: dict[str, int], xs: list[np.ndarray]) -> np.ndarray:
    """The program's result in float64, computed with numpy (and scipy's erf) alone."""
    x = [a.astype(np.float64) for a in xs]
    if kind in ("gemm", "bgemm"):
        return x[0] @ x[1]
    if kind in ("gemm_nt", "bgemm_nt"):
        return x[0] @ np.swapaxes(x[1], -1, -2)
    def softmax(s: np.ndarray) -> np.ndarray:
        e = np.exp(s - s.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    if kind == "softmax":
        return softmax(x[0])
    if kind == "attention":
        return softmax(x[0] @ np.swapaxes(x[1], -1, -2) / math.sqrt(dims["D"])) @ x[2]
    if kind == "layernorm":
        xc = x[0] - x[0].mean(-1, keepdims=True)
        return xc / np.sqrt((xc * xc).mean(-1, keepdims=True) + bt.LN_EPS) * x[1] + x[2]
    if kind == "rmsnorm":
        return x[0] / np.sqrt((x[0] * x[0]).mean(-1, keepdims=True) + bt.RMS_EPS) * x[1]
    if kind == "mlp":
        from scipy.special import erf

        h = x[0] @ x[1] + x[2]
        return 0.5 * h * (1.0 + erf(h / math.sqrt(2.0))) @ x[3] + x[4]
    if kind == "chain":
        return np.maximum((x[0] + x[1]) * x[1] - x[1], x[1])
    if kind == "add":
        return x[0] + x[1]
    raise ValueError(f"program kind {kind!r}")


def _cut(axes: tuple[str, ...], sub: dict[str, int]) -> tuple[slice, ...]:
    return tuple(slice(0, sub[a]) for a in axes)


class Checker:
    """A slice of a program's output in float64 (numpy) and its error bound per precision
    policy (accy's error bounds, computed on first use), and results judged against them."""

    def __init__(self, spec: Spec, dims: dict[str, int], xs: list[np.ndarray]) -> None:
        kind = KINDS[spec.kind]
        self.sub = {a: min(n, kind.check.get(a, n)) for a, n in dims.items()}
        self.out_cut = _cut(kind.output, self.sub)
        self.program = program(spec, self.sub)
        self.xs = [np.ascontiguousarray(x[_cut(axes, self.sub)])
                   for x, axes in zip(xs, kind.inputs, strict=True)]
        self.atol = TOLERANCES[DType(spec.dtype)].atol
        self.want = numpy_reference(spec.kind, self.sub, self.xs)
        self._bounds: dict[str, Any] = {}

    def __call__(self, got: np.ndarray, precision: str = "ieee") -> dict[str, Any]:
        if precision not in self._bounds:
            rtol = {d: t.rtol for d, t in TOLERANCES.items()}
            (self._bounds[precision],) = error_bounds(self.program, self.xs, rtol,
                                                      precision=precision)
        b, want = self._bounds[precision], self.want
        g = np.asarray(got)[self.out_cut].astype(np.float64)
        limit = 2 * b.error + self.atol
        keep = ~b.unstable
        with np.errstate(invalid="ignore"):
            err = np.where(np.isnan(g) & np.isnan(want), 0.0, np.abs(g - want))
            bad = keep & ~(err <= limit)
            # numpy's float64 against accy's interpreter's (the bounds' value): a few ulp
            gap = float(np.nanmax(np.abs(want - b.value)) / max(np.nanmax(np.abs(want)), 1e-300))
        kept = err[keep]
        return {"ok": not bool(bad.any()), "bad_elements": int(bad.sum()),
                "reference_gap": gap,
                "checked": int(keep.sum()), "skipped_unstable": int(b.unstable.sum()),
                "max_abs_err": float(kept.max()) if kept.size else 0.0,
                "max_rel_err": float(kept.max() / max(np.abs(want[keep]).max(), 1e-30))
                if kept.size else 0.0,
                "bound_use": float((kept / limit[keep]).max()) if kept.size else 0.0,
                "slice": list(b.value.shape), "precision": precision}
