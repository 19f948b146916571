"""loss-lowering: cross-entropy as log-softmax, a gather of the labels' entries, and a mean.

``kernel-library=enabled`` (the default, as in the seed) keeps a cross-entropy of float logits
whole for the kernel library: the ``row-softmax`` generator computes it as one pass over each
row (row max, sum of exponentials and the label's entry together) and a mean kernel, without
writing the log-probabilities out (PoCL, [4096, 1024] f32: 0.61 ms against 1.81 ms for the
three kernels of the lowered form). ``kernel-library=disabled`` lowers every cross-entropy to
primitive ops (:func:`lower`), which fuse with their neighbours and reach any generator: the
form for ablations and for targets without the row kernels.

``row-sparse-cross-entropy-thread-blocks=N`` (the seed's name: labels are sparse, one class per
row) asks the row-loss kernel for N work-groups walking the rows in a grid-stride loop; 0, the
default, is one work-group per set of rows. It travels to the kernel stage in the product's
:class:`~accy.plans.LaunchPlan` and applies to cross-entropies kept whole.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

import numpy as np

from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.program import Stage
from accy.ir.types import DType
from accy.passes.base import COUNT_MAX, Pass, option
from accy.passes.rebuild import constant, make, rebuild, with_srcs
from accy.passes.registry import register
from accy.passes.tensor.indexing_lowering import lower as indexed
from accy.plans import LaunchPlan, check_thread_blocks


def flat(x: Node) -> Node:
    """``x`` as a 1-d tensor."""
    return x if x.type.rank == 1 else make(Op.RESHAPE, x, shape=(x.type.size,))


def lower(logits: Node, labels: Node) -> Node:
    """``-mean(flat(log_softmax(logits))[arange(rows) * classes + clamp(labels)])``.

    ``logits[..., classes]`` has one row per label (``rows`` in all). The label's entry of each
    row is gathered from the flattened log-probabilities, so no other entry enters the sum: a
    one-hot mask would multiply the other entries by 0, and ``0 * -inf`` (the log-probability
    of a finite logit next to a ``+inf`` one) is NaN where the loss is ``inf``.

    Labels outside ``[0, classes)`` are invalid input (``interpret`` raises on them); the
    lowered form clamps each label into ``[0, classes)`` first, as the cross-entropy kernels
    do, so such a label picks an entry of its own row, never of another. Indices are computed
    in the labels' dtype (i64 when the logits have more than 2**31 - 1 elements).
    """
    classes, size = logits.type.shape[-1], logits.type.size
    index_dtype = labels.type.dtype if size <= np.iinfo(np.int32).max else DType.i64
    picks = flat(labels)
    if picks.type.dtype is not index_dtype:
        picks = make(Op.CAST, picks, dtype=index_dtype)
    picks = make(Op.MIN, make(Op.MAX, picks, constant(0, index_dtype)),
                 constant(max(classes - 1, 0), index_dtype))
    starts = constant(np.arange(labels.type.size) * classes, index_dtype)
    logp = flat(make(Op.LOG_SOFTMAX, logits, axis=logits.type.rank - 1))
    gather = make(Op.GATHER, logp, make(Op.ADD, starts, picks), axis=0)
    picked = indexed(gather, gather.srcs)  # for the indexed kernel (indexing-lowering ran)
    return make(Op.NEG, make(Op.REDUCE_MEAN, picked, axes=(0,), keepdims=False))


@register
@dataclass(frozen=True)
class LossLowering(Pass):
    """Lower cross-entropy to log-softmax, a gather of each row's label entry and a mean."""

    name = "loss-lowering"
    stage = Stage.tensor

    kernel_library: Literal["enabled", "disabled"] = option(
        "enabled", "enabled: cross-entropy of float logits stays whole for the row-loss kernel "
        "(one pass per row); disabled: lower every cross-entropy to log-softmax + gather + mean")
    row_sparse_cross_entropy_thread_blocks: int = option(
        0, "work-groups the cross-entropy row-loss kernel launches, walking the rows in a "
        "grid-stride loop (0: one work-group per set of rows)", minimum=0, maximum=COUNT_MAX)

    def __post_init__(self) -> None:  # bad values fail when the pipeline is read
        check_thread_blocks("row-sparse-cross-entropy-thread-blocks",
                            self.row_sparse_cross_entropy_thread_blocks)

    def run(self, ctx, product):
        lowered = 0

        def rewrite(node: Node, srcs: tuple[Node, ...]) -> Node:
            nonlocal lowered
            if node.op is Op.CROSS_ENTROPY and not (self.kernel_library == "enabled"
                                                    and srcs[0].type.dtype.is_float):
                lowered += 1
                return lower(*srcs)
            return node if not srcs else with_srcs(node, srcs)

        program = rebuild(product.program, rewrite)
        ctx.stat("lowered", lowered)
        launch = dataclasses.replace(product.launch or LaunchPlan(),
                                     cross_entropy=self.row_sparse_cross_entropy_thread_blocks)
        return product.replace(program=program, launch=launch)
