"""The benchmark suite: named programs that look like real workloads, at named sizes.

Each :class:`Benchmark` builds a :class:`~accy.ir.program.Program` for a size (``ci``: tiny,
seconds for the whole suite; ``paper``: what ``papers/`` is regenerated at on a two-core CPU;
``full``: large enough for real measurements on a GPU) and draws its inputs from a seed.

Programs are written the way a framework's tracer emits them, not hand-optimised: weights in
``[out, in]`` layout used through an explicit transpose, softmax spelled ``exp(x - max) /
sum(...)``, ``pow(x, 2)``, a one-hot cross-entropy, divisions by constants, projections of
stacked weights sliced per gate. That gives the rewrite rules real work, as they would have
on a model exported from a framework.

==================  ==========================================================================
name                what
==================  ==========================================================================
``mlp_gelu``        two linear layers with GELU and a residual (a transformer MLP block)
``attention``       multi-head self-attention: projections, QK^T / sqrt(d), softmax, PV, out
``layernorm``       layer normalisation with mean, variance through pow(x, 2), scale, shift
``softmax_xent``    classifier head: logits, log(softmax), one-hot cross-entropy and its grad
``embedding``       embedding lookup (gather) and its gradient (scatter-add into the table)
``tensor_network``  overlap of two periodic matrix-product states (one 8-operand einsum)
``nasrnn``          NasRNN-like cell: 16 gate projections and a tree of elementwise ops
``matrix_chain``    a chain of five matrix products written left to right
==================  ==========================================================================

>>> bench = SUITE["attention"]
>>> program = bench.program("ci")
>>> inputs = bench.inputs("ci", seed=0)      # numpy arrays, one per parameter
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import accy
from accy.builder import Value, einsum, gather, scatter_add, trace
from accy.ir.ops import Op
from accy.ir.program import Program
from accy.ir.types import DType, TensorType

__all__ = ["SIZES", "SUITE", "Benchmark", "benchmark", "benchmarks"]

SIZES = ("ci", "paper", "full")
"""Size names, smallest first."""

Dims = Mapping[str, int]


@dataclass(frozen=True)
class Benchmark:
    """A named program family: ``program(size)`` and ``inputs(size, seed)``.

    ``build`` makes the program from ``dims`` (``sizes[size]``); ``index_bounds`` gives, per
    integer parameter position, the exclusive upper bound of its values (ids, labels).
    """

    name: str
    description: str
    sizes: Mapping[str, Dims]
    build: Callable[[Dims], Program]
    index_bounds: Callable[[Dims], Mapping[int, int]] = field(default=lambda d: {})

    def dims(self, size: str) -> Dims:
        if size not in self.sizes:
            raise KeyError(f"benchmark {self.name}: no size {size!r}; sizes: "
                           f"{', '.join(self.sizes)}")
        return self.sizes[size]

    def program(self, size: str = "ci") -> Program:
        """The program at ``size`` (its function is named after the benchmark)."""
        return self.build(self.dims(size))

    def inputs(self, size: str = "ci", seed: int = 0) -> tuple[np.ndarray, ...]:
        """Seeded inputs, one per parameter: weights ~ N(0, 1/fan_in), activations ~ N(0, 1),
        indices uniform below their bound. The same (benchmark, size, seed) always gives the
        same arrays, on every machine (numpy's PCG64 stream, seeded from the name too)."""
        dims = self.dims(size)
        program = self.build(dims)
        bounds = self.index_bounds(dims)
        rng = np.random.default_rng([seed, zlib.crc32(self.name.encode())])
        out = []
        for i, p in enumerate(program.function().params):
            out.append(_draw(p.type, bounds.get(i), rng))
        return tuple(out)


def _draw(t: TensorType, bound: int | None, rng: np.random.Generator) -> np.ndarray:
    if bound is not None or t.dtype.is_int:
        return rng.integers(0, bound or 8, t.shape).astype(t.dtype.numpy)
    if t.dtype is DType.bool:
        return rng.random(t.shape) < 0.5
    scale = 1.0 / math.sqrt(t.shape[-1]) if t.rank >= 2 else 1.0
    return (rng.standard_normal(t.shape) * scale).astype(t.dtype.numpy)


SUITE: dict[str, Benchmark] = {}
"""Benchmark name -> benchmark, in the order of the table above."""


def _register(bench: Benchmark) -> Benchmark:
    if bench.name in SUITE:
        raise ValueError(f"benchmark {bench.name!r} is registered twice")
    for size in SIZES:
        if size not in bench.sizes:
            raise ValueError(f"benchmark {bench.name!r} has no {size!r} size")
    SUITE[bench.name] = bench
    return bench


def benchmark(name: str) -> Benchmark:
    """The benchmark called ``name``; an unknown name lists the valid ones."""
    try:
        return SUITE[name]
    except KeyError:
        raise KeyError(f"unknown benchmark {name!r}; valid: {', '.join(SUITE)}") from None


def benchmarks(names: str | list[str] | tuple[str, ...] | None = None) -> list[Benchmark]:
    """Benchmarks by name (a comma-separated string or a list; None or "all": every one)."""
    if names is None or names == "all":
        return list(SUITE.values())
    if isinstance(names, str):
        names = [n for n in names.split(",") if n]
    return [benchmark(n) for n in names]


def _f32(*shape: int) -> TensorType:
    return accy.f32[shape]


def _linear(x: Value, w: Value, b: Value | None = None) -> Value:
    """``x @ w.T + b`` with ``w`` in ``[out, in]`` layout, as torch.nn.Linear stores it."""
    y = einsum("...i,io->...o".replace("...", "bcdefg"[: x.type.rank - 1]), x, w.T)
    return y if b is None else y + b


# ---- the programs ----------------------------------------------------------------------------


def _mlp_gelu(d: Dims) -> Program:
    def mlp_gelu(x, w1, b1, w2, b2):
        return _linear(_linear(x, w1, b1).gelu(), w2, b2) + x

    b, m, h = d["batch"], d["model"], d["hidden"]
    return trace(mlp_gelu, _f32(b, m), _f32(h, m), _f32(h), _f32(m, h), _f32(m))


_register(Benchmark(
    "mlp_gelu", "two linear layers with GELU and a residual (a transformer MLP block)",
    {"ci": {"batch": 8, "model": 16, "hidden": 64},
     "paper": {"batch": 64, "model": 128, "hidden": 512},
     "full": {"batch": 512, "model": 1024, "hidden": 4096}},
    _mlp_gelu))


def _attention(d: Dims) -> Program:
    s, m, heads = d["seq"], d["model"], d["heads"]
    dh = m // heads

    def attention(x, wq, wk, wv, wo):
        q, k, v = (_linear(x, w).reshape(s, heads, dh) for w in (wq, wk, wv))
        scores = einsum("qhd,khd->hqk", q, k) / math.sqrt(dh)
        e = (scores - scores.max(axes=-1, keepdims=True)).exp()
        p = e / e.sum(axes=-1, keepdims=True)
        return _linear(einsum("hqk,khd->qhd", p, v).reshape(s, m), wo)

    return trace(attention, _f32(s, m), *(_f32(m, m) for _ in range(4)))


_register(Benchmark(
    "attention", "multi-head self-attention: projections, QK^T/sqrt(d), softmax, PV, output",
    {"ci": {"seq": 8, "model": 32, "heads": 2},
     "paper": {"seq": 128, "model": 128, "heads": 8},
     "full": {"seq": 1024, "model": 1024, "heads": 16}},
    _attention))


def _layernorm(d: Dims) -> Program:
    def layernorm(x, gamma, beta):
        mu = x.mean(axes=-1, keepdims=True)
        xc = x - mu
        var = (xc ** 2.0).mean(axes=-1, keepdims=True)
        return xc / (var + 1e-5).sqrt() * gamma + beta

    n, m = d["rows"], d["model"]
    return trace(layernorm, _f32(n, m), _f32(m), _f32(m))


_register(Benchmark(
    "layernorm", "layer normalisation: mean, variance via pow(x, 2), scale and shift",
    {"ci": {"rows": 16, "model": 32}, "paper": {"rows": 1024, "model": 256},
     "full": {"rows": 16384, "model": 1024}},
    _layernorm))


def _softmax_xent(d: Dims) -> Program:
    n, m, c = d["batch"], d["model"], d["classes"]

    def softmax_xent(x, w, labels):
        logits = _linear(x, w)
        iota = labels.fb.constant(np.arange(c, dtype=np.int32))
        onehot = labels.fb.op(Op.EQ, labels.reshape(n, 1), iota).astype(DType.f32)
        logp = logits.softmax(-1).log()
        loss = -(logp * onehot).sum(axes=1).mean()
        grad = (logp.exp() - onehot) / float(n)
        return loss, grad

    return trace(softmax_xent, _f32(n, m), _f32(c, m), accy.i32[n])


_register(Benchmark(
    "softmax_xent", "classifier head: logits, log(softmax), one-hot cross-entropy and its grad",
    {"ci": {"batch": 8, "model": 16, "classes": 10},
     "paper": {"batch": 256, "model": 128, "classes": 512},
     "full": {"batch": 4096, "model": 1024, "classes": 8192}},
    _softmax_xent, lambda d: {2: d["classes"]}))


def _embedding(d: Dims) -> Program:
    vocab, m, n = d["vocab"], d["model"], d["tokens"]
    scale = math.sqrt(m)

    def embedding(table, ids, dy, grad_table):
        out = gather(table, ids, axis=0) * scale
        return out, scatter_add(grad_table, ids, dy * scale, axis=0)

    return trace(embedding, _f32(vocab, m), accy.i32[n], _f32(n, m), _f32(vocab, m))


_register(Benchmark(
    "embedding", "embedding lookup (gather) and its gradient (scatter-add into the table)",
    {"ci": {"vocab": 32, "model": 16, "tokens": 24},
     "paper": {"vocab": 1024, "model": 64, "tokens": 512},
     "full": {"vocab": 32768, "model": 1024, "tokens": 8192}},
    _embedding, lambda d: {1: d["vocab"]}))


_MPS_SPEC = "aib,bjc,ckd,dla,eif,fjg,gkh,hle->"


def _tensor_network(d: Dims) -> Program:
    chi, phys = d["bond"], d["physical"]

    def tensor_network(p1, p2, p3, p4, q1, q2, q3, q4):
        return einsum(_MPS_SPEC, p1, p2, p3, p4, q1, q2, q3, q4)

    return trace(tensor_network, *(_f32(chi, phys, chi) for _ in range(8)))


_register(Benchmark(
    "tensor_network", "overlap of two periodic matrix-product states (one 8-operand einsum)",
    {"ci": {"bond": 3, "physical": 2}, "paper": {"bond": 24, "physical": 4},
     "full": {"bond": 96, "physical": 4}},
    _tensor_network))


def nasrnn_cell(x: Value, state: Value, wx: Value, wh: Value) -> Value:
    """One NasRNN-like cell on traced values: ``x``, ``state`` [batch, hidden], the 8 gate
    projections of each in ``wx``, ``wh`` [8, hidden, hidden]; the next state. (The suite's
    ``nasrnn`` program; benchmark scripts stack it.)"""
    b, h = state.shape
    gx = einsum("bk,gkh->gbh", x, wx)  # the 8 input projections at once
    gh = einsum("bk,gkh->gbh", state, wh)
    xs = [gx[i:i + 1].reshape(b, h) for i in range(8)]
    hs = [gh[i:i + 1].reshape(b, h) for i in range(8)]
    mid = [xs[0].relu() + hs[0].relu(), xs[1].sigmoid() + hs[1].sigmoid(),
           xs[2].sigmoid() + hs[2].sigmoid(), xs[3].sigmoid() * hs[3].sigmoid(),
           xs[4].tanh() * hs[4].sigmoid(), xs[5].relu() * hs[5].sigmoid(),
           xs[6].sigmoid() * hs[6].tanh(), xs[7].sigmoid() * hs[7].tanh()]
    mid2 = [mid[0].tanh() + mid[1].tanh(), mid[2].tanh() + mid[3].tanh(),
            mid[4].tanh() + mid[5].tanh(), mid[6].tanh() + mid[7].tanh()]
    mid3 = [(mid2[0] * mid2[1]).tanh(), (mid2[2] * mid2[3]).tanh()]
    return (mid3[0] * mid3[1]).tanh()


def _nasrnn(d: Dims) -> Program:
    b, h = d["batch"], d["hidden"]
    return trace(nasrnn_cell, _f32(b, h), _f32(b, h), _f32(8, h, h), _f32(8, h, h))


_register(Benchmark(
    "nasrnn", "NasRNN-like cell: 16 gate projections and a tree of elementwise ops",
    {"ci": {"batch": 4, "hidden": 16}, "paper": {"batch": 64, "hidden": 128},
     "full": {"batch": 512, "hidden": 1024}},
    _nasrnn))


def _matrix_chain(d: Dims) -> Program:
    n = d["n"]
    shapes = [(n, 10 * n), (10 * n, n // 2), (n // 2, 5 * n), (5 * n, 20 * n), (20 * n, n)]

    def matrix_chain(a, b, c, e, f):
        return (((a @ b) @ c) @ e) @ f

    return trace(matrix_chain, *(_f32(*s) for s in shapes))


_register(Benchmark(
    "matrix_chain", "five matrix products written left to right (a bad order for its sizes)",
    {"ci": {"n": 4}, "paper": {"n": 32}, "full": {"n": 128}},
    _matrix_chain))


def describe(size: str = "ci") -> list[dict[str, Any]]:
    """One line of facts per benchmark at ``size``: parameters, ops, fingerprint."""
    rows = []
    for bench in SUITE.values():
        program = bench.program(size)
        fn = program.function()
        rows.append({"program": bench.name, "size": size, "dims": dict(bench.dims(size)),
                     "params": [str(p.type) for p in fn.params],
                     "ops": sum(n.op not in (Op.PARAM, Op.CONSTANT) for n in program.nodes()),
                     "fingerprint": program.fingerprint()})
    return rows
