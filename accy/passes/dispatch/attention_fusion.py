"""Attention fusion (``fusion-planning{attention=auto|always}``): the softmax between two
contractions, planned as three groups (the scores einsum; the score chain and the softmax;
the P V einsum with its epilogue), becomes one group in the online-softmax attention form
:func:`accy.kernels.attention_plan.analyse` recognises, which the ``fused-attention``
generator (or, on tensor cores, ``mma-attention-*``: :mod:`accy.kernels.attention_mma`)
builds as one kernel; the scores and probabilities never go through memory.

A merge needs: the softmax group writes only the softmax (or its cast to f16, where
dtype-legalization computed an f16 softmax in f32), read only by the P V einsum's group;
the scores group is the scores einsum alone, read only by the softmax group; and the union
is an attention of at most ``max-ops`` ops that a generator takes for the target and, under
``auto``, where the fused kernel pays (:func:`pays`: the tensor-core form on GPUs that have
it under the pipeline's kernelization precision; on CPUs the CPU form only where the scores
would not fit a buffer; ``always`` merges wherever the work-group generator takes it too).
The merged group takes the P V group's place: every group it reads from comes before it.
"""

from __future__ import annotations

from accy.ir.node import Node
from accy.ir.ops import Op
from accy.kernels import attention, attention_mma_plan
from accy.plans import FusionGroup, ScheduleKind, outside_inputs
from accy.target import TargetProfile


def merge_attention(groups: list[FusionGroup], users: dict[Node, list[Node]],
                    results: set[Node], position: dict[Node, int], target: TargetProfile,
                    max_ops: int = 0, always: bool = False, precision: str = "f32"
                    ) -> tuple[list[FusionGroup], int]:
    """``groups`` (producers first) with each attention's three groups merged into one; how
    many were merged. Unless ``always``, only where the fused kernel pays (module
    docstring)."""
    group_of = {n: gi for gi, g in enumerate(groups) for n in g.nodes}
    replaced: dict[int, FusionGroup] = {}
    dropped: set[int] = set()
    for si, soft in enumerate(groups):
        sms = [n for n in soft.nodes if n.op is Op.SOFTMAX]
        if len(sms) != 1 or len(soft.outputs) != 1:
            continue
        (sm,), (probs,) = sms, soft.outputs  # the softmax, or its cast (f16 attention)
        if probs in results or not (probs is sm or probs.op is Op.CAST and probs.srcs[0] is sm):
            continue
        readers = users[probs]
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
        found = attention.plan(merged, target)  # f32 attention; f16 only on tensor cores
        cpu_form = not isinstance(found, str) and found[1].cpu
        held = scores[0].type.size * scores[0].type.dtype.itemsize  # (the probabilities too)
        if not (pays(target, cpu_form, merged, precision, held)
                or always and not isinstance(found, str)):
            continue
        replaced[vi] = merged
        dropped |= {ki, si}
    out = [replaced.get(gi, g) for gi, g in enumerate(groups) if gi not in dropped]
    return out, len(replaced)


def pays(target: TargetProfile, cpu_form: bool, group: FusionGroup,
         precision: str = "f32", held: int = 0) -> bool:
    """Whether the fused kernel beats the three (``experiments/bench_attention.py``,
    ``experiments/bench_gpu.py``, ``experiments/bench_cpu.py``): on a GPU the tensor-core
    form (:mod:`accy.kernels.attention_mma`) does, where it takes the group under
    kernelization's ``precision`` (f32 attention: TF32 tensor cores and a TF32 policy, which
    the default ``f32`` is with the saturating rounding; f16: f16 tensor cores, any policy).
    The work-group form is slower than the three kernels on a CPU and on the GPU, and so is
    the CPU form since the CPU product reads K transposed
    (:mod:`accy.kernels.contraction_cpu`; papers/kernels.md, "Thirty-seventh session"): a
    CPU fuses (its CPU form) only where the scores, ``held`` bytes (and so the probabilities,
    a buffer of their own as large), would not fit the device's largest buffer. GPUs keep the
    three otherwise (``precision=ieee`` too)."""
    if target.device_type == "cpu":
        return cpu_form and held > target.max_mem_alloc_size
    return attention_mma_plan.kind_for(group, target, precision) is not None
