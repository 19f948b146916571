"""Horizontal fusion (``fusion-planning{horizontal=true}``): independent elementwise groups
that write function results over one domain become one kernel.

A program with many independent outputs (a thousand small expressions of the same inputs)
is planned as a group per output, so as many kernels: each is a separate launch, and on PoCL
each kernel is compiled to machine code on its first launch, a fixed cost per kernel that
dominates a first run. Groups that

* are flat (elementwise and movement ops only),
* write only function results, and nothing another group reads (sinks of the group graph,
  so joining any of them can never make the plan cyclic),
* share their function and their domain (output shape),

are joined in plan order into groups of at most ``max_args`` buffer arguments (inputs and
outputs together, literal constants not counted: every OpenCL device takes 1,024 bytes of
kernel arguments, which 64 pointers stay well inside) and at most ``max_ops`` ops. A joined
group runs where its last member did, after every group any member reads; a sink joins only
if that keeps no value it reads from another kernel in memory longer than before (so buffer
reuse and in-place writes are untouched). It reads a value its members share once per
element instead of once per member.
"""

from __future__ import annotations

from accy.ir.node import Node
from accy.plans import FusionGroup, ScheduleKind, is_inlined, outside_inputs


def join_sinks(groups: list[FusionGroup], users: dict[Node, list[Node]], results: set[Node],
               position: dict[Node, int], max_args: int, max_ops: int
               ) -> tuple[list[FusionGroup], int]:
    """``groups`` (one function's, producers first) with independent result groups of one
    domain joined; how many groups were joined away."""
    last_read = _last_reads(groups, results)
    open_: dict[tuple[int, ...], _Batch] = {}  # domain -> the batch being filled
    batches: list[_Batch] = []
    for gi, g in enumerate(groups):
        if not _sink(g, users, results):
            continue
        batch = open_.get(g.domain)
        if batch is None or not batch.fits(g, gi, max_args, max_ops):
            batch = open_[g.domain] = _Batch()
            batches.append(batch)
        batch.add(g, gi, last_read)
    joined = {b.members[-1]: b for b in batches if len(b.members) > 1}
    dropped = {m for b in joined.values() for m in b.members[:-1]}
    out = []
    for gi, g in enumerate(groups):
        if gi in joined:
            out.append(_union([groups[m] for m in joined[gi].members], position))
        elif gi not in dropped:
            out.append(g)
    return out, len(dropped)


def _last_reads(groups: list[FusionGroup], results: set[Node]) -> dict[Node, float]:
    """For each value a group writes: the plan position of its last reader (infinity for a
    function result, which keeps its buffer to the end)."""
    written = {o for g in groups for o in g.outputs}
    last: dict[Node, float] = {}
    for gi, g in enumerate(groups):
        for s in g.inputs:
            if s in written:
                last[s] = gi
    for o in written & results:
        last[o] = float("inf")
    return last


class _Batch:
    """Sinks being joined: their plan positions, nodes, buffer arguments and the position
    by which the joined group must run so no value it reads lives longer than it did."""

    def __init__(self) -> None:
        self.members: list[int] = []
        self.nodes: set[Node] = set()
        self.inputs: set[Node] = set()  # buffer arguments read
        self.outputs = 0
        self.deadline = float("inf")

    def fits(self, g: FusionGroup, gi: int, max_args: int, max_ops: int) -> bool:
        if gi > self.deadline:  # the joined group would keep an earlier member's input alive
            return False
        if max_ops and len(self.nodes) + len(set(g.nodes) - self.nodes) > max_ops:
            return False
        return len(self.inputs | _reads(g)) + self.outputs + len(g.outputs) <= max_args

    def add(self, g: FusionGroup, gi: int, last_read: dict[Node, float]) -> None:
        self.members.append(gi)
        self.nodes.update(g.nodes)
        self.inputs |= _reads(g)
        self.outputs += len(g.outputs)
        # values other groups write (params and constants are in memory throughout)
        self.deadline = min([self.deadline, *(last_read[s] for s in g.inputs if s in last_read)])


def _sink(g: FusionGroup, users: dict[Node, list[Node]], results: set[Node]) -> bool:
    if g.kind is not ScheduleKind.flat:
        return False
    inside = set(g.nodes)
    return all(o in results and all(x in inside for x in users[o]) for o in g.outputs)


def _reads(g: FusionGroup) -> set[Node]:
    """The values ``g`` reads through buffer arguments (a sink's nodes are read by no other
    group, so what one member reads is never computed inside another)."""
    return {s for s in g.inputs if not is_inlined(s)}


def _union(members: list[FusionGroup], position: dict[Node, int]) -> FusionGroup:
    nodes = sorted({n for g in members for n in g.nodes}, key=position.__getitem__)
    outputs = tuple(o for g in members for o in g.outputs)
    return FusionGroup(members[0].function, tuple(nodes), outputs, outside_inputs(nodes),
                       ScheduleKind.flat,
                       f"function results ({len(members)} independent groups joined)")
