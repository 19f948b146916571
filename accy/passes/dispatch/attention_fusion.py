"""Attention fusion (``fusion-planning{attention=auto|always}``): the softmax between two
contractions, planned as three groups (the scores einsum; the score chain and the softmax;
the P V einsum with its epilogue), becomes one group in the online-softmax attention form
:func:`accy.kernels.attention_plan.analyse` recognises, which the ``fused-attention``
generator builds as one kernel; the scores and probabilities never go through memory.

A merge needs: the softmax group writes only the softmax, read only by the P V einsum's
group; the scores group is the scores einsum alone, read only by the softmax group; and
the union is an attention (:func:`~accy.kernels.attention_plan.analyse`) of at most
``max-ops`` ops that the generator takes for the target and, under ``auto``, where the fused
kernel pays (:func:`pays`: the CPU form on CPUs; ``always`` merges wherever the generator
takes it, the GPU work-group form too). The merged group
takes the P V group's place: every group it reads from comes before it.
"""

from __future__ import annotations

from accy.ir.node import Node
from accy.ir.ops import Op
from accy.kernels import attention
from accy.plans import FusionGroup, ScheduleKind, outside_inputs
from accy.target import TargetProfile


def merge_attention(groups: list[FusionGroup], users: dict[Node, list[Node]],
                    results: set[Node], position: dict[Node, int], target: TargetProfile,
                    max_ops: int = 0, always: bool = False) -> tuple[list[FusionGroup], int]:
    """``groups`` (producers first) with each attention's three groups merged into one; how
    many were merged. Unless ``always``, only where the fused kernel pays (module
    docstring)."""
    group_of = {n: gi for gi, g in enumerate(groups) for n in g.nodes}
    replaced: dict[int, FusionGroup] = {}
    dropped: set[int] = set()
    for si, soft in enumerate(groups):
        sms = [n for n in soft.nodes if n.op is Op.SOFTMAX]
        if len(sms) != 1 or soft.outputs != (sms[0],) or sms[0] in results:
            continue
        (sm,) = sms
        readers = users[sm]
        if len(readers) != 1 or readers[0].op is not Op.EINSUM:
            continue
        vi = group_of[readers[0]]
        scores = [s for n in soft.nodes for s in n.srcs
                  if s.op is Op.EINSUM and s not in soft.nodes]
        if len(scores) != 1 or scores[0] in results or scores[0] not in group_of:
            continue
        ki = group_of[scores[0]]
        if (len({ki, si, vi}) != 3 or {ki, si, vi} & (dropped | set(replaced))
                or groups[ki].nodes != (scores[0],)
                or any(group_of.get(x) != si for x in users[scores[0]])
                or groups[vi].kind is not ScheduleKind.contraction):
            continue
        nodes = sorted({*groups[ki].nodes, *soft.nodes, *groups[vi].nodes},
                       key=position.__getitem__)
        if max_ops and len(nodes) > max_ops:
            continue
        last = groups[vi]
        merged = FusionGroup(last.function, tuple(nodes), groups[vi].outputs,
                             outside_inputs(nodes), ScheduleKind.contraction, last.boundary)
        found = attention.plan(merged, target)
        if isinstance(found, str) or not (always or pays(target, found[1].cpu)):
            continue
        replaced[vi] = merged
        dropped |= {ki, si}
    out = [replaced.get(gi, g) for gi, g in enumerate(groups) if gi not in dropped]
    return out, len(replaced)


def pays(target: TargetProfile, cpu_form: bool) -> bool:
    """Whether the fused kernel beats the three (``experiments/bench_attention.py``): on a CPU
    its CPU form does; the work-group form is slower than the three kernels on a CPU, and on
    the GPU measured (papers/kernels.md), so GPUs keep the three by default."""
    return target.device_type == "cpu" and cpu_form
