"""Contraction trees by recursive bisection of the operand graph (``hyper``'s second driver).

A set of operands is split into two parts that cut few, small letters (a cut letter is an
index of the intermediate each part becomes, so its cost is ``log2`` of its size); each part
is split again until it has at most ``cutoff`` operands, which random greedy contracts. The
tree joins the parts in the order of the splits: the top-down scheme of cotengra's
``kahypar`` driver (Gray & Kourtis, Quantum 5, 410). The bisection is a seeded BFS growth
to a random balance followed by Fiduccia-Mattheyses-style single-operand moves; it needs
nothing beyond the standard library (KaHyPar would cut better on large graphs; it is not a
dependency of accy).
"""

from __future__ import annotations

import math
import random
from collections import deque

from accy.contraction.cost import Network, bits, tree_to_ssa
from accy.contraction.search import PathOptions, Ssa

_PASSES = 4


def _weights(net: Network) -> tuple[list[list[int]], list[float]]:
    """Per summed letter, its holders; and its cut weight ``log2(size)``."""
    holders = net.holders()
    letters = [bits(h) for h in holders]
    weight = [math.log2(max(s, 2)) for s in net.sizes]
    return letters, weight


def bisect(nodes: list[int], incident: dict[int, list[int]], members: list[list[int]],
           weight: list[float], rng: random.Random, imbalance: float) -> tuple[set[int], set[int]]:
    """Split ``nodes`` in two parts of sizes within ``imbalance`` of half, cutting little weight.

    ``incident[v]``: the letters at node ``v``; ``members[l]``: the nodes holding letter ``l``.
    """
    inside = set(nodes)
    target = len(nodes) * rng.uniform(0.5 - imbalance, 0.5 + imbalance)
    target = min(max(1, round(target)), len(nodes) - 1)
    start = rng.choice(nodes)
    part, queue, order = {start}, deque([start]), [start]
    while len(part) < target:
        if not queue:  # another component: start a new BFS there
            rest = [v for v in nodes if v not in part]
            nxt = rng.choice(rest)
            part.add(nxt)
            queue.append(nxt)
            continue
        v = queue.popleft()
        around = sorted({u for ltr in incident[v] for u in members[ltr] if u in inside
                         and u not in part})
        rng.shuffle(around)
        for u in around:
            if len(part) >= target:
                break
            part.add(u)
            order.append(u)
            queue.append(u)
    low = max(1, math.floor(len(nodes) * (0.5 - imbalance)))
    high = min(len(nodes) - 1, math.ceil(len(nodes) * (0.5 + imbalance)))

    def gain(v: int) -> float:  # cut weight saved by moving v to the other side
        here = v in part
        g = 0.0
        for ltr in incident[v]:
            held = [u for u in members[ltr] if u in inside]
            same = sum(1 for u in held if (u in part) == here)
            other = len(held) - same
            if same == 1 and other:
                g += weight[ltr]  # the letter stops being cut
            elif other == 0 and same > 1:
                g -= weight[ltr]  # the letter starts being cut
        return g

    for _ in range(_PASSES):
        moved = False
        for v in sorted(nodes, key=lambda v: -gain(v)):
            g = gain(v)
            if g <= 0:
                break
            size = len(part) + (-1 if v in part else 1)
            if low <= size <= high:
                part.symmetric_difference_update({v})
                moved = True
        if not moved:
            break
    return part, inside - part


def partition_ssa(net: Network, opts: PathOptions, rng: random.Random,
                  cutoff: int | None = None) -> Ssa | None:
    """One tree by recursive bisection (None where it breaks the memory limit)."""
    from accy.contraction.hyper import random_greedy_ssa  # hyper imports this module

    n = len(net.reduced)
    members, weight = _weights(net)
    out = net.output
    incident = {v: [b for b in bits(net.reduced[v] & ~out)] for v in range(n)}
    cutoff = cutoff if cutoff is not None else rng.randint(4, 16)
    imbalance = rng.uniform(0.0, 0.3)

    def legs_of(group: list[int]) -> int:
        inside, union = set(group), 0
        for v in group:
            union |= net.reduced[v]
        keep = out
        for b in bits(union & ~out):
            if any(u not in inside for u in members[b]):
                keep |= 1 << b
        return union & keep

    def solve(group: list[int]) -> object | None:
        if len(group) == 1:
            return group[0]
        if len(group) <= cutoff:
            sub = Network(net.letters, net.sizes, tuple(net.reduced[v] for v in group),
                          legs_of(group), 0, tuple(net.reduced[v] for v in group), net.size)
            ssa = random_greedy_ssa(sub, opts, rng, 1.0, 0.0)
            if ssa is None:
                return None
            trees: dict[int, object] = dict(enumerate(group))
            for j, (a, b) in enumerate(ssa):
                trees[len(group) + j] = (trees.pop(a), trees.pop(b))
            (tree,) = trees.values()
            return tree
        left, right = bisect(group, incident, members, weight, rng, imbalance)
        a, b = solve(sorted(left)), solve(sorted(right))
        if a is None or b is None:
            return None
        return (a, b)

    tree = solve(list(range(n)))
    if tree is None:
        return None
    ssa = tree_to_ssa(tree, n)
    if opts.memory_limit is not None:
        from accy.contraction.search import pair_costs
        if pair_costs(net, ssa)[2] > opts.memory_limit:
            return None
    return ssa
