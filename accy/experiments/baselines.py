"""Hand-written baselines of the suite's programs: numpy on the CPU, torch when importable.

Each reference is written once against a small array-library adapter (:class:`NumpyOps`,
:class:`TorchOps`), the way a user of that library would write the workload: vectorised,
``einsum(..., optimize=True)`` for N-ary contractions, ``np.add.at`` / ``index_add`` for
scatter-add. They compute what the accy programs compute (the tests check the numpy one
against ``accy.interpret``), so their times are a fair comparison for the kernels experiment.
(``accy.interpret`` is not used as the baseline: it evaluates GELU and erf element by element
in Python, which no numpy user would do.)

numpy has no ``erf``: :meth:`NumpyOps.erf` is Abramowitz & Stegun 7.1.26 (error < 1.5e-7),
vectorised, as numpy code without scipy writes it. N-ary einsums go through
``opt_einsum.contract``: ``np.einsum(optimize=True)`` limits intermediates to the largest
input and then contracts a ring of eight tensors in one naive step (so does
``accy.interpret``, which is why :func:`expected` is the correctness reference at scale).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import opt_einsum

__all__ = ["REFERENCES", "NumpyOps", "TorchOps", "expected", "reference"]


class NumpyOps:
    """numpy spellings of the operations the references use."""

    name = "numpy"

    def asarray(self, x: np.ndarray) -> Any:
        return x

    def to_numpy(self, x: Any) -> np.ndarray:
        return np.asarray(x)

    def einsum(self, spec: str, *xs: Any) -> Any:
        if len(xs) <= 2:
            return np.einsum(spec, *xs)
        # np.einsum(optimize=True) caps intermediates at the largest input, which leaves a
        # ring of tensors uncontracted: 10^14 FLOPs for the paper's tensor network
        return opt_einsum.contract(spec, *xs)

    def erf(self, x: Any) -> Any:
        t = 1.0 / (1.0 + 0.3275911 * np.abs(x))
        poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (
            -1.453152027 + t * 1.061405429))))
        return np.sign(x) * (1.0 - poly * np.exp(-x * x))

    def gelu(self, x: Any) -> Any:
        return (0.5 * x * (1.0 + self.erf(x / math.sqrt(2.0)))).astype(x.dtype)

    def sigmoid(self, x: Any) -> Any:
        return (1.0 / (1.0 + np.exp(-x))).astype(x.dtype)

    def relu(self, x: Any) -> Any:
        return np.maximum(x, 0)

    def tanh(self, x: Any) -> Any:
        return np.tanh(x)

    def exp(self, x: Any) -> Any:
        return np.exp(x)

    def log(self, x: Any) -> Any:
        return np.log(x)

    def sqrt(self, x: Any) -> Any:
        return np.sqrt(x)

    def amax(self, x: Any, axis: int) -> Any:
        return x.max(axis=axis, keepdims=True)

    def sum(self, x: Any, axis: int, keepdims: bool = False) -> Any:
        return x.sum(axis=axis, keepdims=keepdims)

    def mean(self, x: Any, axis: int | None = None, keepdims: bool = False) -> Any:
        return x.mean(axis=axis, keepdims=keepdims)

    def take(self, table: Any, ids: Any) -> Any:
        return np.take(table, ids, axis=0)

    def index_add(self, acc: Any, ids: Any, updates: Any) -> Any:
        out = acc.copy()
        np.add.at(out, ids, updates)
        return out

    def one_hot(self, labels: Any, classes: int, like: Any) -> Any:
        return (labels[:, None] == np.arange(classes)).astype(like.dtype)

    def sync(self) -> None: ...


class TorchOps(NumpyOps):
    """torch spellings (tensors on ``device``, TF32 off so float32 means float32)."""

    name = "torch"

    def __init__(self, device: str = "cuda") -> None:
        import torch

        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        self.torch = torch
        self.device = device

    def asarray(self, x: np.ndarray) -> Any:
        t = self.torch.from_numpy(np.ascontiguousarray(x)).to(self.device)
        return t.long() if x.dtype.kind == "i" else t

    def to_numpy(self, x: Any) -> np.ndarray:
        return x.detach().cpu().numpy()

    def einsum(self, spec: str, *xs: Any) -> Any:
        return self.torch.einsum(spec, *xs)

    def erf(self, x: Any) -> Any:
        return self.torch.erf(x)

    def gelu(self, x: Any) -> Any:
        return self.torch.nn.functional.gelu(x)

    def sigmoid(self, x: Any) -> Any:
        return self.torch.sigmoid(x)

    def relu(self, x: Any) -> Any:
        return self.torch.relu(x)

    def tanh(self, x: Any) -> Any:
        return self.torch.tanh(x)

    def exp(self, x: Any) -> Any:
        return self.torch.exp(x)

    def log(self, x: Any) -> Any:
        return self.torch.log(x)

    def sqrt(self, x: Any) -> Any:
        return self.torch.sqrt(x)

    def amax(self, x: Any, axis: int) -> Any:
        return x.amax(dim=axis, keepdim=True)

    def sum(self, x: Any, axis: int, keepdims: bool = False) -> Any:
        return x.sum(dim=axis, keepdim=keepdims)

    def mean(self, x: Any, axis: int | None = None, keepdims: bool = False) -> Any:
        return x.mean() if axis is None else x.mean(dim=axis, keepdim=keepdims)

    def take(self, table: Any, ids: Any) -> Any:
        return table.index_select(0, ids)

    def index_add(self, acc: Any, ids: Any, updates: Any) -> Any:
        return acc.index_add(0, ids, updates)

    def one_hot(self, labels: Any, classes: int, like: Any) -> Any:
        return (labels[:, None] == self.torch.arange(classes, device=labels.device)).to(
            like.dtype)

    def sync(self) -> None:
        if self.device.startswith("cuda"):
            self.torch.cuda.synchronize()


# ---- the references (one per suite program) --------------------------------------------------

Dims = Mapping[str, int]


def _linear(o: NumpyOps, x: Any, w: Any, b: Any = None) -> Any:
    y = x @ w.T
    return y if b is None else y + b


def mlp_gelu(o: NumpyOps, d: Dims, x: Any, w1: Any, b1: Any, w2: Any, b2: Any) -> tuple:
    return (_linear(o, o.gelu(_linear(o, x, w1, b1)), w2, b2) + x,)


def attention(o: NumpyOps, d: Dims, x: Any, wq: Any, wk: Any, wv: Any, wo: Any) -> tuple:
    s, m, heads = d["seq"], d["model"], d["heads"]
    dh = m // heads
    q, k, v = (_linear(o, x, w).reshape(s, heads, dh) for w in (wq, wk, wv))
    scores = o.einsum("qhd,khd->hqk", q, k) / math.sqrt(dh)
    e = o.exp(scores - o.amax(scores, -1))
    p = e / o.sum(e, -1, keepdims=True)
    return (_linear(o, o.einsum("hqk,khd->qhd", p, v).reshape(s, m), wo),)


def layernorm(o: NumpyOps, d: Dims, x: Any, gamma: Any, beta: Any) -> tuple:
    xc = x - o.mean(x, -1, keepdims=True)
    var = o.mean(xc * xc, -1, keepdims=True)
    return (xc / o.sqrt(var + 1e-5) * gamma + beta,)


def softmax_xent(o: NumpyOps, d: Dims, x: Any, w: Any, labels: Any) -> tuple:
    logits = _linear(o, x, w)
    z = logits - o.amax(logits, -1)
    logp = z - o.log(o.sum(o.exp(z), -1, keepdims=True))
    onehot = o.one_hot(labels, d["classes"], logits)
    loss = -o.mean(o.sum(logp * onehot, 1))
    return loss, (o.exp(logp) - onehot) / float(d["batch"])


def embedding(o: NumpyOps, d: Dims, table: Any, ids: Any, dy: Any, grad_table: Any) -> tuple:
    scale = math.sqrt(d["model"])
    return o.take(table, ids) * scale, o.index_add(grad_table, ids, dy * scale)


def tensor_network(o: NumpyOps, d: Dims, *xs: Any) -> tuple:
    return (o.einsum("aib,bjc,ckd,dla,eif,fjg,gkh,hle->", *xs),)


def nasrnn(o: NumpyOps, d: Dims, x: Any, state: Any, wx: Any, wh: Any) -> tuple:
    gx, gh = o.einsum("bk,gkh->gbh", x, wx), o.einsum("bk,gkh->gbh", state, wh)
    sg, th, re = o.sigmoid, o.tanh, o.relu
    mid = [re(gx[0]) + re(gh[0]), sg(gx[1]) + sg(gh[1]), sg(gx[2]) + sg(gh[2]),
           sg(gx[3]) * sg(gh[3]), th(gx[4]) * sg(gh[4]), re(gx[5]) * sg(gh[5]),
           sg(gx[6]) * th(gh[6]), sg(gx[7]) * th(gh[7])]
    mid2 = [th(mid[0]) + th(mid[1]), th(mid[2]) + th(mid[3]), th(mid[4]) + th(mid[5]),
            th(mid[6]) + th(mid[7])]
    return (th(th(mid2[0] * mid2[1]) * th(mid2[2] * mid2[3])),)


def matrix_chain(o: NumpyOps, d: Dims, a: Any, b: Any, c: Any, e: Any, f: Any) -> tuple:
    return ((((a @ b) @ c) @ e) @ f,)


REFERENCES: dict[str, Callable[..., tuple]] = {
    f.__name__: f for f in (mlp_gelu, attention, layernorm, softmax_xent, embedding,
                            tensor_network, nasrnn, matrix_chain)
}


def reference(name: str, ops: NumpyOps, dims: Dims, inputs: tuple[np.ndarray, ...]
              ) -> Callable[[], tuple]:
    """A no-argument callable running the reference of ``name`` on ``inputs`` moved to
    ``ops``'s library and device once (so timing it times the computation only)."""
    fn = REFERENCES[name]
    args = [ops.asarray(x) for x in inputs]
    return lambda: fn(ops, dims, *args)


def expected(name: str, dims: Dims, inputs: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """The reference's results computed in float64 (float inputs widened): what accy's
    results are checked against in the experiments."""
    wide = tuple(x.astype(np.float64) if x.dtype.kind == "f" else x for x in inputs)
    return tuple(np.asarray(r) for r in REFERENCES[name](NumpyOps(), dims, *wide))
