"""Benchmark: Tensat's multi-pattern merges (rule sets ``merge`` and ``concat``) on the
programs Tensat reports its largest wins on.

    python experiments/bench_tensat.py [--size small|bert] [--caps 0,1,2,unbounded]
        [--iterations 6] [--node-limit 50000] [--time-limit 20] [--repeats 5] [--no-run]
        [--out results/bench_tensat.json]

Programs (accy builder, einsums/matmuls, f32):

``bert_attention``  one BERT self-attention layer: Q, K, V projections of one ``x``
                    (``[tokens, hidden]``), heads, scaled scores, softmax, context, output
                    projection.
``nasrnn``          a NasRNN cell as in Tensat/TASO: 8 gate projections (4 of ``x``, 4 of
                    ``h``), relu/sigmoid/tanh gates, the tree of adds and multiplies.
``inception``       an Inception-like block in matmul form: four parallel branches of one
                    input (1, 2, 2 and 1 layers deep), concatenated.

For every program and multi-pattern cap (``saturate{multi-pattern-iterations=N}``, N = 0, 1,
2 and unbounded = the iteration limit): search time, e-graph size, stop reason, cost before
and after (``flops-bytes``) of the extracted program, whether the merged form is in the
e-graph (the outputs' e-classes hold slices of one contraction over a concat), its cost
(``merged_cost``: the program the merges describe, built by :func:`merged_program`, priced
as a DAG) and kernel counts; with ``--size small`` (the default) also the measured kernel
time on the first OpenCL device (PoCL here) of the original and the merged program.
Prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

import accy
import rewrites
from accy.builder import Value, concat, einsum
from accy.egraph.convert import term, to_egraph
from accy.egraph.cost import cost_model, program_cost
from accy.egraph.driver import saturate
from accy.experiments.records import git_commit, timestamp, versions, write_json
from accy.ir.ops import Op
from accy.passes import rewriting
from accy.passes.tensor.saturate import DEFAULT_RULESETS

RULESETS = (*DEFAULT_RULESETS, "concat", "merge")
F32 = accy.DType.f32


@dataclass(frozen=True)
class Sizes:
    tokens: int  # batch x sequence
    hidden: int
    heads: int
    batch: int  # of the NasRNN cell and the Inception block


SIZES = {"small": Sizes(tokens=64, hidden=64, heads=4, batch=32),
         "bert": Sizes(tokens=4096, hidden=768, heads=12, batch=64)}


# ---- programs ---------------------------------------------------------------------------------


def _function(name: str, params: list[tuple[str, tuple[int, ...]]]):  # noqa: ANN202
    b = accy.Builder()
    f = b.begin_function(name, [b.tensor(F32, shape) for _, shape in params],
                         [n for n, _ in params])
    return b, f, [f.param(i) for i in range(len(params))]


def bert_attention(sz: Sizes, *, merged: bool = False) -> accy.Program:
    """One self-attention layer; ``merged``: Q, K, V as slices of ``x @ [Wq Wk Wv]``."""
    n, h, heads = sz.tokens, sz.hidden, sz.heads
    d, seq = h // heads, max(1, sz.tokens // 4)
    b, f, (x, wq, wk, wv, wo) = _function(
        "bert_attention", [("x", (n, h)), ("wq", (h, h)), ("wk", (h, h)), ("wv", (h, h)),
                           ("wo", (h, h))])
    if merged:
        m = x @ concat([wq, wk, wv], axis=1)
        q, k, v = m[:, :h], m[:, h:2 * h], m[:, 2 * h:]
    else:
        q, k, v = x @ wq, x @ wk, x @ wv
    batch = n // seq

    def heads_of(t: Value) -> Value:
        return t.reshape(batch, seq, heads, d)

    scores = einsum("bqhd,bkhd->bhqk", heads_of(q), heads_of(k)) * (1.0 / math.sqrt(d))
    ctx = einsum("bhqk,bkhd->bqhd", scores.softmax(-1), heads_of(v)).reshape(n, h)
    f.return_(ctx @ wo)
    f.finish()
    return b.finish()


def nasrnn(sz: Sizes, *, merged: bool = False) -> accy.Program:
    """A NasRNN cell (Tensat/TASO's ``nas_node``) with 4 projections of x and 4 of h."""
    n, h = sz.batch, sz.hidden
    params = [("x", (n, h)), ("h", (n, h))]
    params += [(f"w{i}", (h, h)) for i in range(4)] + [(f"u{i}", (h, h)) for i in range(4)]
    b, f, (x, hs, *ws) = _function("nasrnn", params)
    if merged:
        mx, mh = x @ concat(ws[:4], axis=1), hs @ concat(ws[4:], axis=1)
        t = [mx[:, i * h:(i + 1) * h] for i in range(4)]
        t += [mh[:, i * h:(i + 1) * h] for i in range(4)]
    else:
        t = [x @ w for w in ws[:4]] + [hs @ u for u in ws[4:]]
    mid = [t[0].relu() + t[3].sigmoid(), t[1].sigmoid() + t[2].tanh(),
           t[4].sigmoid() * t[5].tanh(), t[6].sigmoid() * t[7].relu()]
    mid.append(mid[1].sigmoid() + mid[2].tanh())
    mid.append(mid[0].tanh() * mid[3].tanh())
    f.return_((mid[4].tanh() * mid[5].tanh()).tanh())
    f.finish()
    return b.finish()


INCEPTION_WIDTHS = (1, 2, 2, 1)  # branch widths in units of hidden/4


def inception(sz: Sizes, *, merged: bool = False) -> accy.Program:
    """Four parallel branches of x (1, 2, 2, 1 layers), their outputs concatenated."""
    n, h = sz.batch, sz.hidden
    q = h // 4
    first = [(f"a{i}", (h, q * w)) for i, w in enumerate(INCEPTION_WIDTHS)]
    second = [("b1", (2 * q, q)), ("b2", (2 * q, q))]
    b, f, (x, *ws) = _function("inception", [("x", (n, h)), *first, *second])
    if merged:
        m = x @ concat(ws[:4], axis=1)
        bounds = [int(v) for v in np.cumsum((0, *INCEPTION_WIDTHS)) * q]
        heads = [m[:, bounds[i]:bounds[i + 1]].relu() for i in range(4)]
    else:
        heads = [(x @ w).relu() for w in ws[:4]]
    branches = [heads[0], (heads[1] @ ws[4]).relu(), (heads[2] @ ws[5]).relu(), heads[3]]
    f.return_(concat(branches, axis=1))
    f.finish()
    return b.finish()


PROGRAMS = {"bert_attention": bert_attention, "nasrnn": nasrnn, "inception": inception}
