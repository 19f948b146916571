"""Fast randomized greedy trials in log space (``hyper``'s and ``greedy``'s engine).

A network is seen as :class:`Graph`: per operand a frozenset of letter ids, per letter the
natural log of its size. :func:`greedy_core` builds one tree the way cotengra's greedy does:
every pair of live tensors sharing a letter sits in a heap, scored by

    ``size(ab) / costmod - (size(a) + size(b)) * costmod``, taken to ``sign * log|.|``,

minus ``temperature`` times Gumbel noise (Boltzmann sampling; ``temperature=0``: plain
greedy). Contracting ``a`` and ``b`` changes the score of pairs touching the new tensor only
(a letter summed away by a later pair needs exactly two live holders, and the new tensor
holds every letter the pair kept), so each step pushes only the new tensor's pairs; stale
heap entries are skipped when popped. Sizes are handled as logs so nothing overflows at
1,000 operands. :func:`log_costs` rates any SSA path in the same log space, a quick filter
before the exact integer costs of :func:`accy.contraction.search.pair_costs`.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Sequence

from accy.contraction.cost import Network, bits
from accy.contraction.search import Ssa

LOG2 = math.log(2.0)
LogCosts = tuple[float, float, float]  # log of (flops, write, size)


class Graph:
    """A network's operands as letter-id sets, letters with log sizes and holders."""

    def __init__(self, net: Network) -> None:
        self.n = len(net.reduced)
        self.legs: list[frozenset[int]] = [frozenset(bits(m)) for m in net.reduced]
        self.out: frozenset[int] = frozenset(bits(net.output))
        self.logsize: list[float] = [math.log(max(s, 1)) for s in net.sizes]
        self.holders: dict[int, list[int]] = {}
        for i, legs in enumerate(self.legs):
            for ltr in legs:
                self.holders.setdefault(ltr, []).append(i)

    def boundary(self, group: Sequence[int]) -> frozenset[int]:
        """Letters of ``group`` that stay open when it is contracted alone: the output's and
        those held outside it."""
        inside = set(group)
        letters: set[int] = set()
        for v in group:
            letters |= self.legs[v]
        return frozenset(ltr for ltr in letters if ltr in self.out
                         or any(h not in inside for h in self.holders[ltr]))


def _log_add(x: float, y: float) -> float:
    if x < y:
        x, y = y, x
    return x if y == -math.inf else x + math.log1p(math.exp(y - x))


def greedy_core(legs_list: Sequence[frozenset[int]], keep: frozenset[int],
                logsize: Sequence[float], costmod: float = 1.0, temperature: float = 0.0,
                rng: random.Random | None = None, log_limit: float | None = None,
                log_flops_limit: float | None = None) -> Ssa | None:
    """One greedy tree over ``legs_list`` (local ids ``0..k-1``), never summing ``keep``'s
    letters; None where an intermediate would exceed ``exp(log_limit)`` elements or the
    FLOPs ``exp(log_flops_limit)`` (a trial already worse than the best found stops early).
    Ties on the score go to the pair queued first."""
    n = len(legs_list)
    legs: dict[int, frozenset[int]] = dict(enumerate(legs_list))
    lsz = {i: math.fsum(logsize[x] for x in lg) for i, lg in legs.items()}
    holders: dict[int, set[int]] = {}
    for i, lg in legs.items():
        for x in lg:
            holders.setdefault(x, set()).add(i)
    rand = (rng or random.Random(0)).random
    exp, log = math.exp, math.log
    inv = 1.0 / costmod
    heap: list[tuple[float, int, int, int]] = []
    counter = iter(range(1 << 62))
    flops = -math.inf
    flops_limit = math.inf if log_flops_limit is None else log_flops_limit

    def push(a: int, b: int) -> None:
        la, lb = lsz[a], lsz[b]
        l12 = la + lb
        for x in legs[a] & legs[b]:
            l12 -= logsize[x]
            if len(holders[x]) == 2 and x not in keep:
                l12 -= logsize[x]
        if log_limit is not None and l12 > log_limit + 1e-9:
            return
        m = max(l12, la, lb)
        s = exp(l12 - m) * inv - (exp(la - m) + exp(lb - m)) * costmod
        if s > 0:
            s = m + log(s)
        elif s < 0:
            s = -m - log(-s)
        if temperature:
            s += temperature * log(-log(rand() or 1e-300))  # minus Gumbel noise
        heapq.heappush(heap, (s, next(counter), a, b))

    seen: set[tuple[int, int]] = set()
    for x in sorted(holders):
        hs = sorted(holders[x])
        for i, a in enumerate(hs):
            for b in hs[i + 1:]:
                if (a, b) not in seen:
                    seen.add((a, b))
                    push(a, b)
    path: Ssa = []
    fresh = n
    while heap:
        _, _, a, b = heapq.heappop(heap)
        if a not in legs or b not in legs:
            continue
        la, lb = legs.pop(a), legs.pop(b)
        union = la | lb
        lu = math.fsum(logsize[x] for x in union)
        for x in la:
            holders[x].discard(a)
        for x in lb:
            holders[x].discard(b)
        new = frozenset(x for x in union if holders[x] or x in keep)
        flops = _log_add(flops, lu + LOG2 if len(new) < len(union) else lu)
        if flops > flops_limit:
            return None
        legs[fresh] = new
        lsz[fresh] = math.fsum(logsize[x] for x in new)
        around: set[int] = set()
        for x in new:
            around |= holders[x]
            holders[x].add(fresh)
        path.append((a, b))
        for j in sorted(around):
            push(j, fresh)
        fresh += 1
    rest = sorted((lsz[i], i) for i in legs)  # what shares no letter: outer products
    while len(rest) > 1:
        (_, a), (_, b) = heapq.heappop(rest), heapq.heappop(rest)
        la, lb = legs.pop(a), legs.pop(b)
        for x in la:
            holders[x].discard(a)
        for x in lb:
            holders[x].discard(b)
        new = frozenset(x for x in la | lb if holders[x] or x in keep)
        legs[fresh] = new
        lsz[fresh] = math.fsum(logsize[x] for x in new)
        if log_limit is not None and lsz[fresh] > log_limit + 1e-9:
            return None
        for x in new:
            holders[x].add(fresh)
        path.append((min(a, b), max(a, b)))
        heapq.heappush(rest, (lsz[fresh], fresh))
        fresh += 1
    return path


def log_costs(legs_list: Sequence[frozenset[int]], keep: frozenset[int],
              logsize: Sequence[float], ssa: Ssa) -> LogCosts:
    """log of (flops, write, largest intermediate) of ``ssa``'s pairwise steps, in accy's
    units (2 x the union's size where a step sums a letter)."""
    legs = dict(enumerate(legs_list))
    count: dict[int, int] = {}
    for lg in legs_list:
        for x in lg:
            count[x] = count.get(x, 0) + 1
    for x in keep:
        count[x] = count.get(x, 0) + 1
    flops = write = size = -math.inf
    fresh = len(legs_list)
    for a, b in ssa:
        la, lb = legs.pop(a), legs.pop(b)
        union = la | lb
        lu = math.fsum(logsize[x] for x in union)
        gone = False
        kept = []
        for x in union:
            if x in la and x in lb:
                count[x] -= 1
            if count[x] == 1:
                gone = True
                count[x] = 0
            else:
                kept.append(x)
        lk = math.fsum(logsize[x] for x in kept)
        legs[fresh] = frozenset(kept)
        fresh += 1
        flops = _log_add(flops, lu + LOG2 if gone else lu)
        write = _log_add(write, lk)
        size = max(size, lk)
    return flops, write, size


def log_key(costs: LogCosts, objective: str) -> tuple[float, float]:
    """The objective's (primary, secondary) figure of ``costs``, as in ``PathCost.key``."""
    flops, write, size = costs
    if objective == "size":
        return size, flops
    if objective == "write":
        return write, flops
    return flops, write


def tree_of(ssa: Ssa, ids: Sequence[object]) -> object:
    """The nested-pair tree of a local SSA path whose leaf ``i`` is ``ids[i]``."""
    trees: dict[int, object] = dict(enumerate(ids))
    for j, (a, b) in enumerate(ssa):
        trees[len(ids) + j] = (trees.pop(a), trees.pop(b))
    (tree,) = trees.values()
    return tree
