"""Acceptance by region: keep every independent win of an extraction, and nothing dearer.

After saturation every e-class holding a node of the input program has two candidate
terms: the input's own node (over its operands' classes) and the extractor's choice. A
*selection* picks one per class; classes only the extraction reaches take its choice. The
program of a selection is priced as a DAG (each class once), which is what it costs.

``accept`` starts from the input's selection (never dearer than the input: classes merged by
saturation are computed once) and visits the input's classes from the results down (reverse
topological order). At a class whose extracted e-node differs from the input's it tries two
switches, keeping the first that makes the whole program strictly cheaper and stays acyclic:

1. the region: the class and every class its extracted term reaches (skipped when it is
   more than half of a region refused before that holds the class: mostly what was refused,
   and retrying it at every class below made acceptance quadratic);
2. the class alone (its operands keep whatever the selection has for them).

So a win in one part of a program is kept even when another part's extraction is dearer
than its input (the extraction duplicated a shared matmul, say): that part's region is
refused and its sub-regions are tried on their own. The result is also compared with the
whole extraction (one more pricing), so it is never dearer than the extraction either.

Tries are priced incrementally (``accy.egraph.live``): a try costs what it changes, not the
program's size, and a refused try is undone from a journal. A region's switch never closes a
cycle (a region is closed under the extraction, whose choices are acyclic); a single class's
switch that would pay is checked by a walk from its new operands. Acceptance stops at
``deadline`` (``time.perf_counter()``) or after ``MAX_VISITS`` units of work (a count that
does not depend on the machine's speed), keeping the switches made so far: every kept switch
lowered the cost, so the result is never dearer than the input. Tries left are reported as
skipped.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from accy.egraph.cost import Choice, CostModel, EClassGraph, priced_operands
from accy.egraph.live import LiveSelection, Pick
from accy.ir.node import Node
from accy.ir.program import Program

__all__ = ["MAX_VISITS", "Pick", "RegionReport", "accept", "same_pick"]

MAX_VISITS = 5_000_000  # units of work (classes counted or walked) of one acceptance


@dataclass(frozen=True)
class RegionReport:
    """What acceptance did: tries made, switches kept, tries skipped (past ``MAX_VISITS`` or
    the deadline)."""

    differing: int  # input classes whose extracted e-node differs from the input's
    tried: int
    kept: int
    skipped: int
    whole: bool  # the whole extraction was cheaper than any selection built by regions


def extracted_picks(choices: Mapping[int, Choice]) -> dict[int, Pick]:
    """The tensor classes' picks of an extractor's choices."""
    out: dict[int, Pick] = {}
    for c, ch in choices.items():
        n = ch.node
        if n.op is None:
            continue
        assert n.type is not None
        operands = n.children if n.op.arity is not None else choices[n.children[0]].elements
        out[c] = Pick(n.op, n.type, n.attrs, tuple(operands), ch.own, enode=n)
    return out


def input_picks(program: Program, class_of: Mapping[Node, int], model: CostModel,
                graph: EClassGraph) -> tuple[dict[int, Pick], list[int], set[int]]:
    """Per input class its first input node (operands first, so the picks form a DAG: an
    operand's first node comes before its user's), the classes in that order, and the
    classes whose picked node a rule subsumed (they must take the extraction)."""
    picks: dict[int, Pick] = {}
    order: list[int] = []
    forced: set[int] = set()
    prices: dict[tuple[Any, ...], int] = {}
    for n in program.nodes():
        c = class_of[n]
        if c in picks:
            continue
        types = tuple([s.type for s in priced_operands(n.op, n.srcs)])
        key = (id(n.op), n.type, types, n.attrs)
        own = prices.get(key)
        if own is None:
            own = prices[key] = model.node_cost(n.op, n.type, types, dict(n.attrs))
        picks[c] = Pick(n.op, n.type, n.attrs, tuple([class_of[s] for s in n.srcs]), own,
                        node=n)
        order.append(c)
        if graph.subsumed and (c, n.op, n.type, n.attrs) in graph.subsumed:
            forced.add(c)
    return picks, order, forced


class _Selection:
    """Input picks, extracted picks, and the set of input classes switched to the latter."""

    def __init__(self, inputs: dict[int, Pick], extracted: dict[int, Pick], roots: list[int]):
        self.inputs, self.extracted, self.roots = inputs, extracted, roots
        self.visits = 0

    def pick(self, c: int, switched: set[int] | frozenset[int]) -> Pick:
        if c in switched or c not in self.inputs:
            return self.extracted[c]
        return self.inputs[c]

    def cost(self, switched: set[int] | frozenset[int]) -> int | None:
        """The DAG cost of the selection's program, or None if it has a cycle."""
        state: dict[int, int] = {}  # 1: on the walk's path, 2: done
        total = 0
        for root in self.roots:
            if root in state:
                continue
            stack = [(root, 0)]
            state[root] = 1
            while stack:  # post-order without recursion: programs may be thousands deep
                c, i = stack[-1]
                ops = self.pick(c, switched).operands
                if i < len(ops):
                    stack[-1] = (c, i + 1)
                    o = ops[i]
                    s = state.get(o)
                    if s is None:
                        state[o] = 1
                        stack.append((o, 0))
                    elif s == 1:
                        return None
                else:
                    stack.pop()
                    state[c] = 2
                    total += self.pick(c, switched).own
        self.visits += len(state)
        return total

    def region(self, c: int) -> set[int]:
        """``c`` and every class its extracted term reaches."""
        seen = {c}
        stack = [c]
        while stack:
            for o in self.extracted[stack.pop()].operands:
                if o not in seen:
                    seen.add(o)
                    stack.append(o)
        return seen


def accept(inputs: dict[int, Pick], order: list[int], forced: set[int],
           extracted: dict[int, Pick], roots: Iterable[int], deadline: float | None = None
           ) -> tuple[dict[int, Pick], RegionReport]:
    """The selection (class -> pick, for the classes the program uses) chosen by region
    (module docstring), and what was tried; no try starts after ``deadline``."""
    sel = _Selection(inputs, extracted, list(roots))
    switched: set[int] = set()
    for c in forced:
        switched |= sel.region(c)
    if sel.cost(switched) is None:  # only forced switches can close a cycle: take the whole
        switched = set(inputs)      # extraction
    live = _Live(sel, switched)
    differing = [c for c in reversed(order) if c in extracted and not same_pick(
        inputs[c], extracted[c])]
    regions = _differing_below(sel, differing)
    tried = kept = skipped = 0
    failed: dict[int, int] = {}  # class -> size of the smallest refused region holding it
    for c in differing:
        if c in live.switched:
            continue
        if live.work > MAX_VISITS or (deadline is not None and time.perf_counter() > deadline):
            skipped += 1
            continue
        bits = regions.get(c, 0)
        # deepest first: a class whose operands are switched already adds them as they end
        below = [d for d in _members(bits, differing) if d not in live.switched]
        region = [*reversed(below), c]
        # a region more than half of a refused one holding it is mostly what was refused:
        # only the class alone is tried (so each class is in O(log n) region tries)
        again = len(region) > 1 and len(region) * 2 > failed.get(c, len(differing) * 2 + 2)
        for k, candidate in enumerate((region, [c])):
            if k == 0 and again:
                continue
            tried += 1
            live.begin()
            delta = live.switch(candidate)
            if delta < 0 and (k == 0 or live.acyclic_at(c)):
                live.commit()
                kept += 1
                break
            live.undo()
            if k == 0:
                size = len(region)
                for d in region:
                    if failed.get(d, size + 1) > size:
                        failed[d] = size
            if len(region) == 1:
                break
    switched = live.switched
    best = sel.cost(switched)
    assert best is not None
    whole = sel.cost(set(inputs))
    use_whole = whole is not None and whole < best
    if use_whole:
        switched = set(inputs)
    picks = _used(sel, switched)
    return picks, RegionReport(len(differing), tried, kept, skipped, use_whole)


def _differing_below(sel: _Selection, differing: list[int]) -> dict[int, int]:
    """Per differing class, the differing classes its extracted term reaches (itself left
    out), as a bitset over indices into ``differing``: one walk of the extraction."""
    index = {c: i for i, c in enumerate(differing)}
    below: dict[int, int] = {}  # class -> bits of differing classes at or below it
    for root in differing:
        if root in below:
            continue
        stack = [(root, False)]
        while stack:  # post-order without recursion
            c, ready = stack.pop()
            if c in below:
                continue
            ops = sel.extracted[c].operands
            if ready:
                bits = 1 << index[c] if c in index else 0
                for o in ops:
                    bits |= below[o]
                below[c] = bits
            else:
                stack.append((c, True))
                stack.extend((o, False) for o in ops if o not in below)
    return {c: below[c] & ~(1 << index[c]) for c in differing}


def _members(bits: int, differing: list[int]) -> Iterable[int]:
    while bits:
        low = bits & -bits
        yield differing[low.bit_length() - 1]
        bits ^= low


class _Live:
    """The selection of input picks with ``switched`` classes taking their extracted picks,
    priced incrementally (``accy.egraph.live``)."""

    def __init__(self, sel: _Selection, switched: set[int]) -> None:
        self.sel, self.switched = sel, set(switched)
        picks = {c: sel.pick(c, self.switched) for c in (*sel.extracted, *sel.inputs)}
        self.selection = LiveSelection(picks, sel.roots)
        self.flipped: list[int] = []  # classes switched in this try

    @property
    def work(self) -> int:
        return self.selection.work

    def begin(self) -> None:
        self.selection.begin()
        self.flipped = []

    def switch(self, classes: list[int]) -> int:
        """Switch ``classes`` to their extracted picks; the change in cost."""
        for c in classes:
            if c not in self.switched:
                self.switched.add(c)
                self.flipped.append(c)
                self.selection.set(c, self.sel.extracted[c])
        return self.selection.delta()

    def acyclic_at(self, c: int) -> bool:
        return self.selection.acyclic_at(c)

    def commit(self) -> None:
        self.selection.commit()

    def undo(self) -> None:
        self.selection.undo()
        self.switched.difference_update(self.flipped)


def same_pick(a: Pick, b: Pick) -> bool:
    return (a.op is b.op and a.type == b.type and a.attrs == b.attrs
            and a.operands == b.operands)


def _used(sel: _Selection, switched: set[int]) -> dict[int, Pick]:
    out: dict[int, Pick] = {}
    stack = list(sel.roots)
    while stack:
        c = stack.pop()
        if c in out:
            continue
        p = out[c] = sel.pick(c, switched)
        stack.extend(o for o in p.operands if o not in out)
    return out
