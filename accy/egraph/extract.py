"""Extractors: the term each e-class contributes, chosen by name (``saturate{extractor=...}``).

An extractor maps every e-class reachable from the roots to a ``cost.Choice`` (its root
e-node; for an operand-list class, the list's elements) such that following the choices
from any root ends: the chosen terms form a DAG. Built in:

``greedy-dag`` (the default)
    DAG cost: a choice costs its own e-node plus the e-classes below it counted once each,
    however many times they are used (what a program pays: a shared subterm is computed
    once). Knuth's algorithm as in ``tree``, keyed by DAG cost: an e-node is priced once all
    its operand classes are final, as its own cost plus the union of their sets of e-classes
    (bitsets, so a 20 000-node chain costs one OR per node); the class with the cheapest
    priced e-node is final next. A DAG cost is never below an operand's, so the order is
    well-founded and each e-node is priced once. Greedy, like extraction-gym's
    ``faster-greedy-dag``: each class takes its cheapest term given its operands' final
    choices, which need not be the cheapest program overall.
``tree``
    ``cost.extract_best``: tree cost (a subterm counts once per use), optimal for that cost;
    for ablation. Kept DAG costs differ from it only where sharing matters.
``ilp``
    exact DAG cost through an integer linear program (``accy.egraph.ilp``, scipy's HiGHS),
    within a time limit; at the limit it returns the ``greedy-dag`` choices and says so.

Every extractor breaks ties by ``(cost, size, digest)``, the digest a hash of the term's
structure, so equal e-graphs give equal choices whatever e-class ids egglog assigned.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from accy.egraph.cost import (
    DEFAULT_COST_MODEL,
    Choice,
    CostModel,
    EClassGraph,
    NodePricer,
    _reachable,
    cost_model,
    extract_best,
)
from accy.egraph.defaults import DEFAULT_EXTRACTOR, EXTRACTOR_NAMES

__all__ = ["DEFAULT_EXTRACTOR", "EXTRACTORS", "Extractor", "extractor", "greedy_dag", "tree"]

# (graph, roots, model, options) -> choices; options carry extractor-specific settings
# (``ilp``'s time limit) and come back with what the extractor wants reported
Extractor = Callable[[EClassGraph, list[int], CostModel, dict[str, Any]], dict[int, Choice]]
_SMALL = 16  # below this many bits, sum a bitset's costs bit by bit; above, through numpy


def tree(graph: EClassGraph, roots: list[int], model: CostModel,
         options: dict[str, Any]) -> dict[int, Choice]:
    """Tree cost: ``cost.extract_best``."""
    return extract_best(graph, roots, model)


def greedy_dag(graph: EClassGraph, roots: list[int], model: CostModel,
               options: dict[str, Any]) -> dict[int, Choice]:
    """DAG cost, greedily (module docstring)."""
    entries = [(c, n) for c in _reachable(graph, roots) for n in graph.classes[c]]
    parents: dict[int, list[int]] = {}
    waiting: list[int] = []
    uses: dict[int, int] = {}  # per class: entries that have yet to read its set
    for i, (_, n) in enumerate(entries):
        distinct = dict.fromkeys(n.children)
        waiting.append(len(distinct))
        for ch in distinct:
            parents.setdefault(ch, []).append(i)
            uses[ch] = uses.get(ch, 0) + 1
    best: dict[int, Choice] = {}
    sets: dict[int, int] = {}  # final class -> bitset of the classes of its term, itself too
    owns: list[int] = []  # own cost of the class of each bit (bits in finalization order)
    heap: list[tuple[int, int, bytes, int, Choice, int]] = []
    pricer = NodePricer(model)
    heappush, heappop = heapq.heappush, heapq.heappop

    def weight(bits: int) -> int:
        """The summed own costs of the classes in ``bits``."""
        if bits.bit_count() <= _SMALL:
            total = 0
            while bits:
                low = bits & -bits
                total += owns[low.bit_length() - 1]
                bits ^= low
            return total
        raw = np.frombuffer(bits.to_bytes((bits.bit_length() + 7) // 8, "little"), np.uint8)
        return sum([owns[i] for i in np.flatnonzero(np.unpackbits(raw, bitorder="little"))
                    .tolist()])

    def price(i: int) -> None:
        c, n = entries[i]
        kids = [best[ch] for ch in n.children]
        own, elements = pricer.own(n, kids, best)
        # the union of the operands' sets, starting from the dearest (most of it, usually)
        distinct = sorted(dict.fromkeys(n.children), key=lambda ch: -best[ch].cost)
        union, below = 0, 0
        for k, ch in enumerate(distinct):
            if k == 0:
                union, below = sets[ch], best[ch].cost
            elif extra := sets[ch] & ~union:
                below += weight(extra)
                union |= extra
            uses[ch] -= 1
            if uses[ch] == 0:  # no other e-node reads it: free it (a chain keeps O(1) sets)
                del sets[ch]
        cost = own + below
        size = (0 if n.op is None else 1) + union.bit_count()
        digest = pricer.digest(n, kids)
        heappush(heap, (cost, size, digest, i, Choice(n, own, cost, size, digest, elements),
                        union))

    for i, count in enumerate(waiting):
        if count == 0:
            price(i)
    while heap:
        _, _, _, i, choice, union = heappop(heap)
        c = entries[i][0]
        if c in best:
            continue
        best[c] = choice
        if uses.get(c):
            sets[c] = union | (1 << len(owns))
        owns.append(choice.own)
        for j in parents.get(c, ()):
            waiting[j] -= 1
            if waiting[j] == 0:
                price(j)
    missing = [r for r in roots if r not in best]
    if missing:
        raise ValueError(f"e-classes {missing} have no finite term (every e-node is cyclic)")
    return best


def _ilp(graph: EClassGraph, roots: list[int], model: CostModel,
         options: dict[str, Any]) -> dict[int, Choice]:
    from accy.egraph.ilp import extract_ilp  # scipy loads only when asked for

    return extract_ilp(graph, roots, model, options, greedy_dag)


EXTRACTORS: dict[str, Extractor] = {"greedy-dag": greedy_dag, "tree": tree, "ilp": _ilp}
assert tuple(EXTRACTORS) == EXTRACTOR_NAMES


def extractor(name: str) -> Extractor:
    """The extractor called ``name``; an unknown name lists the valid ones."""
    try:
        return EXTRACTORS[name]
    except KeyError:
        raise KeyError(f"unknown extractor {name!r}; valid extractors: "
                       f"{', '.join(EXTRACTORS)}") from None


def choose(graph: EClassGraph, roots: Iterable[int],
           model: str | CostModel = DEFAULT_COST_MODEL, name: str = DEFAULT_EXTRACTOR,
           options: dict[str, Any] | None = None) -> dict[int, Choice]:
    """The choices of extractor ``name`` for every e-class reachable from ``roots``."""
    return extractor(name)(graph, list(roots), cost_model(model),
                           options if options is not None else {})
