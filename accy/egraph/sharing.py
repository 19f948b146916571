"""The sharing search: an extraction improved where a term pays only once several e-classes
share it.

Greedy extraction decides one e-class at a time. The class of ``x.W1`` also holds a slice of
the merged ``x.[W1 W2]`` (rule set ``merge``), but priced alone that slice costs the whole
merged contraction, so the class keeps ``x.W1``; the merge pays only when the class of
``x.W2`` takes its slice too, which no per-class decision sees (Tensat's extraction is an ILP
for this reason; ``ilp`` here is exact too, but only for small e-graphs). :func:`improve`
starts from a selection (the extraction as accepted by region: never dearer than the input)
and tries two moves, each priced incrementally (``accy.egraph.live``) and kept only when the
whole program gets strictly cheaper and stays acyclic:

share ``m``
    every live e-class with an e-node that reads e-class ``m`` takes the cheapest such e-node,
    so ``m`` is computed once for all of them; then each of those switches is taken back alone
    where that is cheaper (a user for which ``m`` does not pay keeps its term).
switch ``c``
    a live e-class takes another of its e-nodes, priced with its operands as they are (one
    computed elsewhere already costs nothing more): a step per-class greedy cannot make.

Shares are tried for the classes with the most live users first (a merge of four contractions
before the pairs inside it), then switches; rounds repeat until one keeps nothing, the
deadline passes or ``MAX_WORK`` units of work are spent. Every kept move lowered the cost, so
the result is never dearer than its start. Moves are visited in e-class order, so equal
e-graphs give equal results.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from accy.egraph.cost import Choice, CostModel, EClassGraph, NodePricer
from accy.egraph.live import LiveSelection, Pick
from accy.egraph.regions import extracted_picks, same_pick

__all__ = ["MAX_ROUNDS", "MAX_WORK", "ShareReport", "improve"]

MAX_WORK = 2_000_000  # units of work (classes counted or walked) of one search
MAX_ROUNDS = 8


@dataclass(frozen=True)
class ShareReport:
    """What the sharing search did: moves tried and kept, the cost it took off, and why it
    stopped (``converged``, ``rounds``, ``work`` or ``deadline``)."""

    shares_tried: int
    shares_kept: int
    switches_tried: int
    switches_kept: int
    saved: int
    stopped: str


def _alternatives(graph: EClassGraph, choices: Mapping[int, Choice], model: CostModel
                  ) -> tuple[dict[int, list[Pick]], dict[int, list[tuple[int, Pick]]]]:
    """Per tensor class its e-nodes as picks (operand lists as the extraction chose them),
    and per class the (class, pick) pairs that read it."""
    pricer = NodePricer(model)
    alts: dict[int, list[Pick]] = {}
    users: dict[int, list[tuple[int, Pick]]] = {}
    for c in sorted(choices):
        if choices[c].node.op is None:
            continue
        mine = alts[c] = []
        for n in graph.classes[c]:
            if n.op is None or not all(k in choices for k in n.children):
                continue
            own, _ = pricer.own(n, [choices[k] for k in n.children], choices)
            operands = n.children if n.op.arity is not None else choices[n.children[0]].elements
            assert n.type is not None
            p = Pick(n.op, n.type, n.attrs, tuple(operands), own, enode=n)
            mine.append(p)
            for o in dict.fromkeys(operands):
                if o != c:
                    users.setdefault(o, []).append((c, p))
    return alts, users


def improve(graph: EClassGraph, roots: list[int], choices: Mapping[int, Choice],
            picks: Mapping[int, Pick], model: CostModel, deadline: float | None = None
            ) -> tuple[dict[int, Pick], ShareReport]:
    """The picks of the classes used after the search (module docstring), starting from
    ``picks`` (classes they leave out take the extraction's ``choices``)."""
    alts, users = _alternatives(graph, choices, model)
    live = LiveSelection({**extracted_picks(choices), **picks}, roots)
    start = live.total
    tried = {"share": 0, "switch": 0}
    kept = {"share": 0, "switch": 0}

    def keep(kind: str, switched: list[int]) -> bool:
        if live.delta() < 0 and all(live.acyclic_at(c) for c in switched):
            live.commit()
            kept[kind] += 1
            return True
        live.undo()
        return False

    def share(m: int) -> bool:
        group: dict[int, Pick] = {}
        for c, p in users[m]:
            if live.live(c) and m not in live.picks[c].operands and (
                    c not in group or p.own < group[c].own):
                group[c] = p
        if len(group) < 2:
            return False
        tried["share"] += 1
        live.begin()
        old = {c: live.picks[c] for c in group}
        for c, p in group.items():
            live.set(c, p)
        for c in list(group):  # take back the users the shared term does not pay for
            before = live.total
            live.set(c, old[c])
            if live.total < before:
                del group[c]
            else:
                live.set(c, group[c])
        return keep("share", list(group))

    def switch(c: int) -> bool:
        if not live.live(c):
            return False
        current = live.picks[c]
        for p in alts[c]:
            if not same_pick(p, current):
                tried["switch"] += 1
                live.begin()
                live.set(c, p)
                if keep("switch", [c]):
                    return True
        return False

    stopped = "rounds"
    for _ in range(MAX_ROUNDS):
        order = sorted(users, key=lambda m: (-sum(live.live(c) for c, _ in users[m]), m))
        moves = [(share, m) for m in order] + [(switch, c) for c in sorted(alts)]
        changed, reason = False, None
        for move, x in moves:
            if live.work > MAX_WORK:
                reason = "work"
            elif deadline is not None and time.perf_counter() > deadline:
                reason = "deadline"
            if reason is not None:
                break
            changed = move(x) or changed
        if reason is not None or not changed:
            stopped = reason or "converged"
            break
    used = {c: live.picks[c] for c, n in live.count.items() if n > 0}
    return used, ShareReport(tried["share"], kept["share"], tried["switch"], kept["switch"],
                             start - live.total, stopped)
