"""Row fusion (``fusion-planning{row-fusion=true}``): merge the groups of a chain of
reductions over the same rows, with the elementwise ops between and after them, into one
group (:mod:`accy.kernels.rowgroup`), which the ``row-fused`` generator builds as one kernel.

Fusion plans a reduction read by elementwise consumers as its own kernel (they would
recompute it per element); a layer norm is then four kernels: the mean, ``x - mean``, the
variance, the normalisation. A kernel that computes a row's reductions once, in order, and
then its outputs needs none of them to go through memory. Groups are merged producers first:
a flat, reduction or row-softmax group joins the groups it reads from when the union is a row
group, has at most ``max-ops`` ops, and no group outside it both reads from it and feeds it
(so the plan stays acyclic). A merged set is kept only where a member reads a per-row value
another member computes (a broadcast back along the rows); otherwise its groups stay as they
were. The merged group writes what its members wrote and is still read outside it (or
returned).
"""

from __future__ import annotations

import heapq

from accy.ir.node import Node
from accy.kernels import rowgroup
from accy.plans import FusionGroup, ScheduleKind, outside_inputs

_MERGEABLE = (ScheduleKind.flat, ScheduleKind.reduction, ScheduleKind.rowwise)


def merge_row_groups(groups: list[FusionGroup], results: set[Node], position: dict[Node, int],
                     max_ops: int) -> tuple[list[FusionGroup], int]:
    """``groups`` (producers first) with row chains merged; how many merged groups."""
    producer_of = {o: gi for gi, g in enumerate(groups) for o in g.outputs}
    readers: dict[Node, set[int]] = {}  # value -> the groups reading it from memory
    for gi, g in enumerate(groups):
        for s in g.inputs:
            readers.setdefault(s, set()).add(gi)
    kept = (readers, results)  # what decides a merged group's outputs
    producers = [sorted({producer_of[s] for s in g.inputs if s in producer_of})
                 for g in groups]
    ancestors: list[int] = []  # bit masks of the groups each group depends on
    for ps in producers:
        mask = 0
        for p in ps:
            mask |= ancestors[p] | (1 << p)
        ancestors.append(mask)
    descendants = [0] * len(groups)  # bit masks of the groups depending on each group
    for g in reversed(range(len(groups))):
        for p in producers[g]:
            descendants[p] |= descendants[g] | (1 << g)
    cluster_of = list(range(len(groups)))
    members: dict[int, list[int]] = {g: [g] for g in range(len(groups))}
    for g, group in enumerate(groups):
        if group.kind not in _MERGEABLE:
            continue
        for c in sorted({cluster_of[p] for p in producers[g]}):
            if c == cluster_of[g] or groups[c].kind not in _MERGEABLE:
                continue
            trial = members[cluster_of[g]] + members[c]
            if _mergeable(groups, trial, (ancestors, descendants), kept, position, max_ops):
                keep = cluster_of[g]
                for m in members.pop(c):
                    cluster_of[m] = keep
                    members[keep].append(m)
    merged = 0
    out: list[tuple[int, FusionGroup]] = []
    for ms in members.values():
        if len(ms) == 1 or not _broadcasts_rows(groups, ms, producer_of, position):
            out.extend((m, groups[m]) for m in ms)
            continue
        merged += 1
        out.append((max(ms), _union(groups, sorted(ms), kept, position)))
    return _topological(out), merged


def _broadcasts_rows(groups: list[FusionGroup], ms: list[int], producer_of: dict[Node, int],
                     position: dict[Node, int]) -> bool:
    """Whether a member reads a per-row statistic (or a value computed from one) that another
    member writes: only then does merging save a pass over the rows (a reduction merged
    with a producer it merely reads is the tree reduction's, or the row softmax's)."""
    dependent = rowgroup.analyse(_nodes(groups, ms, position)).dependent
    inside = set(ms)
    return any(s in dependent and producer_of.get(s, m) != m and producer_of[s] in inside
               for m in ms for s in groups[m].inputs)


def _nodes(groups: list[FusionGroup], ms: list[int], position: dict[Node, int]) -> list[Node]:
    return sorted({n for m in ms for n in groups[m].nodes}, key=position.__getitem__)


def _outputs(groups: list[FusionGroup], ms: list[int],
             kept: tuple[dict[Node, set[int]], set[Node]]) -> list[Node]:
    """What the members write that is returned or read by a group outside them. (Not "read
    by a node outside them": a movement op shared into several kernels is inside the merged
    group and inside another that reads its operands from memory too.)"""
    readers, results = kept
    inside = set(ms)
    outs = []
    for m in ms:
        for o in groups[m].outputs:
            if o not in outs and (o in results or readers.get(o, set()) - inside):
                outs.append(o)
    return outs


def _mergeable(groups: list[FusionGroup], ms: list[int], lineage: tuple[list[int], list[int]],
               kept: tuple[dict[Node, set[int]], set[Node]], position: dict[Node, int],
               max_ops: int) -> bool:
    nodes = _nodes(groups, ms, position)
    if max_ops and len(nodes) > max_ops:
        return False
    ancestors, descendants = lineage
    mask = above = below = 0
    for m in ms:
        mask |= 1 << m
        above |= ancestors[m]
        below |= descendants[m]
    if above & below & ~mask:  # a group outside fed by the union and feeding it: a cycle
        return False
    return rowgroup.analyse(nodes, _outputs(groups, ms, kept)) is not None


def _union(groups: list[FusionGroup], ms: list[int],
           kept: tuple[dict[Node, set[int]], set[Node]], position: dict[Node, int]
           ) -> FusionGroup:
    nodes = _nodes(groups, ms, position)
    outs = _outputs(groups, ms, kept)
    full = rowgroup.analyse(nodes).full
    outs.sort(key=lambda o: o.type.shape != full)  # the row domain first: the group's domain
    last = groups[ms[-1]]
    return FusionGroup(last.function, tuple(nodes), tuple(outs), outside_inputs(nodes),
                       ScheduleKind.reduction, last.boundary)


def _topological(items: list[tuple[int, FusionGroup]]) -> list[FusionGroup]:
    """The groups producers first, otherwise in the order of their keys."""
    producer_of = {o: i for i, (_, g) in enumerate(items) for o in g.outputs}
    needs = [{producer_of[s] for s in g.inputs if s in producer_of} - {i}
             for i, (_, g) in enumerate(items)]
    readers: list[list[int]] = [[] for _ in items]
    for i, ps in enumerate(needs):
        for p in ps:
            readers[p].append(i)
    waiting = [len(ps) for ps in needs]
    ready = [(key, i) for i, (key, _) in enumerate(items) if not waiting[i]]
    heapq.heapify(ready)
    out = []
    while ready:
        _, i = heapq.heappop(ready)
        out.append(items[i][1])
        for r in readers[i]:
            waiting[r] -= 1
            if not waiting[r]:
                heapq.heappush(ready, (items[r][0], r))
    assert len(out) == len(items), "row fusion made the plan cyclic"
    return out
