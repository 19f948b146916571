"""loss-lowering: cross-entropy as log-softmax, a one-hot pick of the labels, and a mean."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.program import Stage
from accy.passes.base import Pass
from accy.passes.rebuild import constant, make, rebuild
from accy.passes.registry import register


def lower(logits: Node, labels: Node) -> Node:
    """``mean(-sum(log_softmax(logits) * onehot(labels), classes))``.

    The label pick is a one-hot mask (labels == arange(classes)) rather than a gather: it is
    elementwise, fuses into the row reduction, and needs no index arithmetic.
    """
    classes = logits.type.shape[-1]
    axis = logits.type.rank - 1
    logp = make(Op.LOG_SOFTMAX, logits, axis=axis)
    iota = constant(np.arange(classes), labels.type.dtype)
    column = make(Op.RESHAPE, labels, shape=(*labels.type.shape, 1))
    onehot = make(Op.CAST, make(Op.EQ, column, iota), dtype=logits.type.dtype)
    picked = make(Op.REDUCE_SUM, make(Op.MUL, logp, onehot), axes=(axis,), keepdims=False)
    return make(Op.NEG, make(Op.REDUCE_MEAN, picked, axes=tuple(range(labels.type.rank)),
                             keepdims=False))


@register
@dataclass(frozen=True)
class LossLowering(Pass):
    """Lower cross-entropy to log-softmax, a one-hot label pick and a mean (all parallel ops)."""

    name = "loss-lowering"
    stage = Stage.tensor

    def run(self, ctx, product):
        lowered = 0

        def rewrite(node: Node, srcs: tuple[Node, ...]) -> Node:
            nonlocal lowered
            if node.op is Op.CROSS_ENTROPY:
                lowered += 1
                return lower(*srcs)
            return node if not srcs else Node(node.op, node.type, srcs, dict(node.attrs))

        program = rebuild(product.program, rewrite)
        ctx.stat("lowered", lowered)
        return product.replace(program=program)
