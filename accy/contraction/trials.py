"""Fast greedy trials (``hyper``'s and ``greedy``'s engine), with sizes as exact integers
and as logs.

A network is seen as :class:`Graph`: per operand a frozenset of letter ids, per letter its
size and the natural log of it. :func:`greedy_core` builds one tree the way cotengra's greedy
does: every pair of live tensors sharing a letter sits in a heap, scored by

    ``size(ab) / costmod - (size(a) + size(b)) * costmod``, taken to ``sign * log|.|``,

minus ``temperature`` times Gumbel noise (Boltzmann sampling). Plain greedy (``costmod=1``,
no noise) scores by the exact integer ``size(ab) - size(a) - size(b)`` (elements removed, as
opt_einsum's greedy): with floats, equal scores came out unequal by rounding and the ties
went astray (1e15x worse paths at 1,000 operands). Contracting ``a`` and ``b`` changes the
score of pairs touching the new tensor only (a letter summed away by a later pair needs
exactly two live holders, and the new tensor holds every letter the pair kept), so each step
pushes only the new tensor's pairs; stale heap entries are skipped when popped. Costs are
accumulated as logs so nothing overflows at 1,000 operands; :func:`log_costs` rates any SSA
path that way, a quick filter before the exact integer costs of
:func:`accy.contraction.search.pair_costs`.
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
        self.sizes: list[int] = [max(s, 1) for s in net.sizes]
        self.logsize: list[float] = [math.log(s) for s in self.sizes]
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
                sizes: Sequence[int], logsize: Sequence[float], costmod: float = 1.0,
                temperature: float = 0.0, rng: random.Random | None = None,
                log_limit: float | None = None, log_flops_limit: float | None = None,
                lazy: bool = False, by_age: bool = False) -> Ssa | None:
    """One greedy tree over ``legs_list`` (local ids ``0..k-1``), never summing ``keep``'s
    letters; None where an intermediate would exceed ``exp(log_limit)`` elements or the
    FLOPs ``exp(log_flops_limit)`` (a trial already worse than the best found stops early).

    Sizes are exact integers (the score of plain greedy, ``costmod=1`` without noise, is
    exact: ties are real ties); the noisy score is a float. Ties go to the pair queued first,
    or with ``by_age`` to the pair whose younger member is older (opt_einsum's rule).
    ``lazy``: each tensor queues its best pair only (opt_einsum's greedy), not every pair.
    """
    n = len(legs_list)
    legs: dict[int, frozenset[int]] = dict(enumerate(legs_list))
    isz = {i: math.prod(sizes[x] for x in lg) for i, lg in legs.items()}
    lsz = {i: math.fsum(logsize[x] for x in lg) for i, lg in legs.items()}
    holders: dict[int, set[int]] = {}
    for i, lg in legs.items():
        for x in lg:
            holders.setdefault(x, set()).add(i)
    rand = (rng or random.Random(0)).random
    exp, log = math.exp, math.log
    exact = costmod == 1.0 and not temperature
    heap: list[tuple] = []
    counter = iter(range(1 << 62))
    flops = -math.inf
    flops_limit = math.inf if log_flops_limit is None else log_flops_limit

    def push(a: int, b: int) -> tuple | None:
        sa, sb, la, lb = isz[a], isz[b], lsz[a], lsz[b]
        div, l12 = 1, la + lb
        for x in legs[a] & legs[b]:
            div *= sizes[x]
            l12 -= logsize[x]
            if len(holders[x]) == 2 and x not in keep:
                div *= sizes[x]
                l12 -= logsize[x]
        if log_limit is not None and l12 > log_limit + 1e-9:
            return None
        s12 = sa * sb // div
        if exact:
            s: float = s12 - sa - sb
        else:  # cotengra's score, sign * log|.|
            if l12 < 700 and la < 700 and lb < 700:
                raw = s12 / costmod - (sa + sb) * costmod
                s = log(raw) if raw > 0 else -log(-raw) if raw < 0 else 0.0
            else:  # past floats: relative to the largest
                m = max(l12, la, lb)
                raw = exp(l12 - m) / costmod - (exp(la - m) + exp(lb - m)) * costmod
                s = math.copysign(m + log(abs(raw)), raw) if raw else 0.0
            s += temperature * log(-log(rand() or 1e-300))  # minus Gumbel noise
        entry = (s, max(a, b), min(a, b)) if by_age else (s, next(counter), a, b)
        if not lazy:
            heapq.heappush(heap, entry)
        return entry

    seen: set[tuple[int, int]] = set()
    for x in sorted(holders):
        hs = sorted(holders[x])
        for i, a in enumerate(hs):
            if lazy:  # opt_einsum's start: per letter and operand, its best later partner
                found = [e for b in hs[i + 1:] for e in [push(a, b)] if e is not None]
                if found:
                    heapq.heappush(heap, min(found))
                continue
            for b in hs[i + 1:]:
                if (a, b) not in seen:
                    seen.add((a, b))
                    push(a, b)
    path: Ssa = []
    fresh = n

    def merge(a: int, b: int) -> frozenset[int]:
        la, lb = legs.pop(a), legs.pop(b)
        for x in la:
            holders[x].discard(a)
        for x in lb:
            holders[x].discard(b)
        new = frozenset(x for x in la | lb if holders[x] or x in keep)
        legs[fresh] = new
        isz[fresh] = math.prod(sizes[x] for x in new)
        lsz[fresh] = math.fsum(logsize[x] for x in new)
        path.append((min(a, b), max(a, b)))
        return la | lb

    while heap:
        entry = heapq.heappop(heap)
        a, b = entry[-2:] if not by_age else (entry[2], entry[1])
        if a not in legs or b not in legs:
            continue
        union = merge(a, b)
        new = legs[fresh]
        lu = math.fsum(logsize[x] for x in union)
        flops = _log_add(flops, lu + LOG2 if len(new) < len(union) else lu)
        if flops > flops_limit:
            return None
        around: set[int] = set()
        for x in new:
            around |= holders[x]
            holders[x].add(fresh)
        entries = [push(j, fresh) for j in sorted(around)]
        if lazy:
            entries = [e for e in entries if e is not None]
            if entries:
                heapq.heappush(heap, min(entries))
        fresh += 1
    rest = sorted((lsz[i], i) for i in legs)  # what shares no letter: outer products
    while len(rest) > 1:
        (_, a), (_, b) = heapq.heappop(rest), heapq.heappop(rest)
        merge(a, b)
        if log_limit is not None and lsz[fresh] > log_limit + 1e-9:
            return None
        for x in legs[fresh]:
            holders[x].add(fresh)
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
