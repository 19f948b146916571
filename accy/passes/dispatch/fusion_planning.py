"""fusion-planning: group elementwise chains into kernels, recording why each group ends."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from accy.ir.node import Node
from accy.ir.ops import Op, OpKind
from accy.ir.program import Stage
from accy.passes.analysis import analysis
from accy.passes.base import COUNT_MAX, Pass, option
from accy.passes.dispatch.attention_fusion import merge_attention
from accy.passes.dispatch.horizontal import join_sinks
from accy.passes.dispatch.row_fusion import merge_row_groups
from accy.passes.registry import register
from accy.plans import FusionGroup, FusionPlan, ScheduleKind, outside_inputs
from accy.product import Product
from accy.target import TargetProfile

KIND_OF = {
    OpKind.REDUCE: ScheduleKind.reduction, OpKind.EINSUM: ScheduleKind.contraction,
    OpKind.INDEXING: ScheduleKind.indexed, OpKind.ROWWISE: ScheduleKind.rowwise,
    OpKind.LOSS: ScheduleKind.rowwise, OpKind.MOVEMENT: ScheduleKind.movement,
    OpKind.WINDOW: ScheduleKind.contraction,  # conv2d, pools kept by conv-lowering{method=direct}
}


@dataclass(frozen=True)
class Uses:
    users: dict[Node, list[Node]]  # users within the function
    results: set[Node]


@analysis("uses")
def uses(product: Product) -> tuple[Uses, ...]:
    """Per function: the users of every node and the set of result nodes."""
    out = []
    for fn in product.program.functions:
        users: dict[Node, list[Node]] = {n: [] for n in fn.nodes()}
        for n in users:
            for s in n.srcs:
                if n not in users[s]:
                    users[s].append(n)
        out.append(Uses(users, set(fn.results)))
    return tuple(out)


@register
@dataclass(frozen=True)
class FusionPlanning(Pass):
    """Fuse elementwise producers into their consumers; one group per kernel.

    Movement ops over values in memory that several kernels read are recomputed by each of
    them rather than copied (:func:`share_movement`); the statistic ``recomputed movement``
    counts them.
    """

    name = "fusion-planning"
    stage = Stage.dispatch
    preserves = frozenset({"uses"})

    policy: Literal["single-output", "multi-output"] = option(
        "single-output",
        "single-output: a value used twice or returned is written by its own kernel (the "
        "seed's policy); multi-output: it may be written by the kernel of its consumers",
    )
    max_ops: int = option(
        1000,
        "most ops one group (one kernel) fuses; a longer chain is split into kernels that pass "
        "the value through memory (0: no limit); OpenCL compile time grows faster than kernel "
        "size", minimum=0, maximum=COUNT_MAX,
    )
    row_fusion: bool = option(
        True,
        "merge chains of reductions along the same rows (the last axis) with the elementwise "
        "ops between and after them into one group, built as one kernel by the row-fused "
        "generator (a layer norm: one kernel, not four); false: a kernel per reduction",
    )
    attention: Literal["auto", "always", "off"] = option(
        "auto",
        "merge a softmax between two contractions (Q Kᵀ, a scale or mask, a softmax over the "
        "keys, P V) into one group, built as one kernel with an online softmax by the "
        "fused-attention generator (mma-attention on tensor cores): auto where its kernel is "
        "measured to beat the three (the CPU form on CPUs, the tensor-core form on GPUs where "
        "the pipeline's kernelization precision takes it; not the work-group form, measured "
        "slower: papers/kernels.md), always wherever a generator takes it; off: the scores "
        "and probabilities go through memory",
    )
    horizontal: bool = option(
        True,
        "join independent elementwise groups that write function results over one shape "
        "into one kernel (many small outputs: few kernels to build and launch); false: a "
        "kernel per group",
    )
    horizontal_max_args: int = option(
        64,
        "most buffer arguments (inputs and outputs) of a kernel joined by horizontal fusion",
        minimum=2, maximum=1024,
    )

    def run(self, ctx, product):
        groups: list[FusionGroup] = []
        recomputed = merged = joined = attentions = 0
        target = product.target or TargetProfile()
        for fi, fn in enumerate(product.program.functions):
            u = ctx.analysis("uses", product)[fi]
            nodes = fn.nodes()
            planned, shared = self._plan(fi, nodes, u)
            position = {n: i for i, n in enumerate(nodes)}
            if self.attention != "off":  # auto: under the pipeline's kernel precision
                planned, fused = merge_attention(
                    planned, u.users, u.results, position, target, self.max_ops,
                    always=self.attention == "always",
                    precision=ctx.option_of("kernelization", "precision", "f32"))
                attentions += fused
            if self.row_fusion:
                planned, rows = merge_row_groups(planned, u.results, position, self.max_ops)
                merged += rows
            if self.horizontal:
                planned, sinks = join_sinks(planned, u.users, u.results, position,
                                            self.horizontal_max_args, self.max_ops)
                joined += sinks
            groups.extend(planned)
            recomputed += shared
        ctx.stat("groups", len(groups))
        ctx.stat("recomputed movement", recomputed)
        ctx.stat("row groups", merged)
        ctx.stat("attention groups", attentions)
        ctx.stat("horizontally joined groups", joined)
        return product.replace(fusion=FusionPlan(self.policy, tuple(groups)))

    def _plan(self, fi: int, nodes: list[Node], u: Uses) -> tuple[list[FusionGroup], int]:
        """The function's groups, producers first, and how many movement ops
        :func:`share_movement` moved into their consumers' kernels."""
        group_of: dict[Node, int] = {}
        members: list[list[Node]] = []
        outputs: list[list[Node]] = []
        kinds: list[ScheduleKind] = []
        reasons: list[str] = []
        clean = clean_cuts(nodes, u) if self.max_ops else set()
        for node in reversed(nodes):
            if not node.srcs:
                continue
            target, why = self._join(node, u, group_of, members, outputs, kinds, clean)
            if target is None:
                group_of[node] = len(members)
                members.append([node])
                outputs.append([node])
                kinds.append(kind_of(node))
                reasons.append(why)
                continue
            group_of[node] = target
            members[target].append(node)
            if node in u.results:
                outputs[target].append(node)
            if not is_light(node):
                kinds[target] = kind_of(node)
        kept, shared = share_movement(members, kinds, u)
        position = {n: i for i, n in enumerate(nodes)}
        groups = []
        for g in kept:
            ordered = sorted(members[g], key=position.__getitem__)
            groups.append(FusionGroup(fi, tuple(ordered), tuple(reversed(outputs[g])),
                                      outside_inputs(ordered), kinds[g], reasons[g]))
        groups.reverse()  # producers first
        return groups, shared

    def _join(self, node: Node, u: Uses, group_of: dict[Node, int], members: list[list[Node]],
              outputs: list[list[Node]], kinds: list[ScheduleKind],
              clean: set[Node]) -> tuple[int | None, str]:
        """The group ``node`` joins, or None and the reason it starts its own."""
        users = u.users[node]
        if not users:
            return None, "function result"
        targets = {group_of[x] for x in users}
        if len(targets) > 1:
            return None, "consumed by several kernels"
        (target,) = targets
        if self.max_ops and len(members[target]) >= self.max_ops and node in clean:
            return None, f"group reached max-ops={self.max_ops}"
        domain = outputs[target][0].type.shape
        if kinds[target] is ScheduleKind.contraction:
            return None, "contraction kernels read their operands from memory"
        if not is_light(node):
            # one heavy op per kernel, evaluated at most once per element: its consumers are
            # elementwise or movement ops and the kernel's domain is no larger than it
            if kinds[target] is not ScheduleKind.flat:
                return None, f"{node.op.value} and a {kinds[target].value} need separate kernels"
            if math.prod(domain) > node.type.size or not all(is_light(x) for x in users):
                return None, f"{node.op.value} would be recomputed by its consumers"
            if node.op is Op.EINSUM and not epilogue_only(node, u, set(members[target])):
                # the tiled contraction takes elementwise epilogues at the einsum's shape (and
                # reshapes); fused behind e.g. a slice, even one after such an epilogue, the
                # loop nest would compute it instead
                return None, "einsum read by a consumer the tiled contraction cannot fuse"
            if node.op.kind is OpKind.WINDOW and not all(
                    x.op.is_elementwise and x.type.shape == node.type.shape for x in users):
                return None, f"{node.op.value} read by a consumer direct-conv cannot fuse"
        if self.policy == "single-output":
            if node in u.results:
                return None, "function result (single-output policy)"
            return target, ""
        if node.type.shape != domain and (node in u.results or len(users) > 1):
            return None, "shape differs from its consumers' domain"
        return target, ""


def epilogue_only(node: Node, u: Uses, group: set[Node]) -> bool:
    """Whether every node of ``group`` that reads ``node`` (directly or through others) is a
    reshape or elementwise at ``node``'s shape: an epilogue the tiled contraction fuses."""
    seen, todo = set(), list(u.users[node])
    while todo:
        x = todo.pop()
        if x in seen or x not in group:
            continue
        seen.add(x)
        if not (x.op is Op.RESHAPE or (x.op.is_elementwise and x.type.shape == node.type.shape)):
            return False
        todo += u.users[x]
    return True


def clean_cuts(nodes: list[Node], u: Uses) -> set[Node]:
    """The nodes after which no earlier node is read: where ``max-ops`` may end a group.

    Cutting elsewhere would leave a value read on both sides of the cut, hence by two
    kernels, and such a value gets a kernel of its own, as do its operands read by both of
    those, and so on: one cut through a DAG with shared values made hundreds of kernels. A
    full group grows on until the next clean node (every node of a chain is one)."""
    position = {n: i for i, n in enumerate(nodes)}
    clean = set()
    reach = -1  # the last position at which a node before the current one is read
    for i, n in enumerate(nodes):
        if reach <= i:
            clean.add(n)
        if n.srcs:  # params and constants are in memory: any kernel may read them
            reach = max(reach, max((position[x] for x in u.users[n]), default=i))
    return clean


def share_movement(members: list[list[Node]], kinds: list[ScheduleKind],
                   u: Uses) -> tuple[list[int], int]:
    """Move pure movement groups into the kernels of their consumers.

    A group of movement ops only (over params, constants or other groups' outputs, which are
    in memory anyway) that writes no function result would copy a tensor for nothing: each
    consumer's kernel reads its sources through the movement ops as index arithmetic instead,
    so the ops are recomputed by every consumer and written by none. Contractions read their
    operands from memory, so a group a contraction group reads stays. ``members`` of the
    consumers grow in place; returns the groups kept, in order, and the number of movement
    ops moved.
    """
    homes: dict[Node, list[int]] = {n: [g] for g, group in enumerate(members) for n in group}
    kept = []
    moved = 0
    for g, group in enumerate(members):  # users are planned first: consumers come earlier
        if any(n.op.kind is not OpKind.MOVEMENT or n in u.results for n in group):
            kept.append(g)
            continue
        inside = set(group)
        consumers = sorted({h for n in group for x in u.users[n] if x not in inside
                            for h in homes[x]})
        if any(kinds[h] is ScheduleKind.contraction for h in consumers):
            kept.append(g)
            continue
        for h in consumers:
            members[h].extend(group)
        for n in group:
            homes[n] = consumers
        moved += len(group)
    return kept, moved


def is_light(node: Node) -> bool:
    """Elementwise and movement ops: fused into any consumer as index arithmetic and math."""
    return node.op.is_elementwise or node.op.kind is OpKind.MOVEMENT


def kind_of(node: Node) -> ScheduleKind:
    return ScheduleKind.flat if is_light(node) else KIND_OF[node.op.kind]


def op_name(node: Node) -> str:
    return node.op.value if node.op is not Op.CAST else f"cast_{node.attr('dtype').value}"
