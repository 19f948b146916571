"""The ``hyper`` path strategy: a budgeted, anytime search for large networks.

It spends ``max_time`` seconds or ``max_repeats`` trials (an effort budget: reproducible) on

* **Boltzmann-sampled greedy** (cotengra's ``random-greedy`` score): greedy over pairs
  sharing a summed letter, each pair scored by ``result / costmod - (size_a + size_b) *
  costmod`` taken to ``sign * log|.|`` minus Gumbel noise of weight ``temperature``;
  ``costmod`` (uniform in 0.1..4) and ``temperature`` (log-uniform in 0.001..1) are drawn per
  trial, so the trials sample the neighbourhood of the greedy path;
* **recursive bisection** (:mod:`accy.contraction.partition`, every third trial past 24
  operands): the operands are split into two parts cutting few, small letters, recursively,
  and the parts are joined in the order of the splits (cotengra's ``kahypar`` driver, with a
  simple partitioner standing in for KaHyPar);
* **subtree reconfiguration** of the best trees found (the one ``beam`` uses), in the last
  30% of a time budget (without one, only up to ``RECONFIGURE_MAX_N`` operands).

It starts from the greedy path, the chain DP where the network is chain-like and ``auto``'s
path where that is cheap (up to :data:`AUTO_START_MAX_N` operands), so it is never worse than
those. With ``max_time`` the loop stops at the deadline and returns the best tree so far; the
result then depends on the machine's speed. Without ``max_time`` it runs ``max_repeats``
trials (64 by default) and is deterministic for a given ``seed``.
"""

from __future__ import annotations

import heapq
import math
import random
import sys
import time
from collections.abc import Callable

from accy.contraction.beam import RECONFIGURE_MAX_N, reconfigure
from accy.contraction.cost import Network, bits
from accy.contraction.partition import partition_ssa
from accy.contraction.search import NoPathError, PathOptions, Ssa, cost_key, pair_costs

DEFAULT_REPEATS = 64
AUTO_START_MAX_N = 120  # auto (beam) costs ~0.1-1 s at this size; past it, start from greedy
KEEP = 4  # best distinct trees kept for reconfiguration
RECONFIGURE_SHARE = 0.3  # share of a time budget left to reconfiguration


def random_greedy_ssa(net: Network, opts: PathOptions, rng: random.Random,
                      costmod: float, temperature: float) -> Ssa | None:
    """One Boltzmann-sampled greedy path (None where it breaks the memory limit)."""
    size, out, limit = net.size, net.output, opts.memory_limit
    alive: dict[int, int] = dict(enumerate(net.reduced))
    holders: dict[int, set[int]] = {}
    for i, m in alive.items():
        for bit in bits(m & ~out):
            holders.setdefault(bit, set()).add(i)
    gumbel = (lambda: -math.log(-math.log(rng.random() or 1e-300))) if temperature else None

    def score(a: int, b: int) -> tuple[float, int, int, int] | None:
        ma, mb = alive[a], alive[b]
        summed = 0
        for bit in bits(ma & mb & ~out):
            if len(holders[bit]) == 2:
                summed |= 1 << bit
        kept = (ma | mb) & ~summed
        result = size[kept]
        if limit is not None and result > limit:
            return None
        s = result / costmod - (size[ma] + size[mb]) * costmod
        s = math.copysign(math.log(abs(s)), s) if s else 0.0
        if gumbel is not None:
            s -= temperature * gumbel()
        return s, a, b, kept

    heap: list[tuple[float, int, int, int]] = []

    def push_partners(i: int) -> None:
        partners: set[int] = set()
        for bit in bits(alive[i] & ~out):
            partners |= holders[bit]
        for j in sorted(partners - {i}):
            c = score(min(i, j), max(i, j))
            if c is not None:
                heapq.heappush(heap, c)

    for i in range(len(net.reduced)):
        push_partners(i)
    path: Ssa = []
    while heap:
        _, a, b, kept = heapq.heappop(heap)
        if a not in alive or b not in alive:
            continue
        now = score(a, b)  # letter counts may have changed since it was pushed
        if now is None:
            continue
        if now[3] != kept:
            heapq.heappush(heap, now)
            continue
        fresh = len(net.reduced) + len(path)
        for i in (a, b):
            for bit in bits(alive.pop(i) & ~out):
                holders[bit].discard(i)
        alive[fresh] = kept
        for bit in bits(kept & ~out):
            holders[bit].add(fresh)
        path.append((a, b))
        push_partners(fresh)
    rest = sorted((size[m], i) for i, m in alive.items())
    while len(rest) > 1:  # what shares no summed letter: outer products, smallest first
        (_, a), (_, b) = heapq.heappop(rest), heapq.heappop(rest)
        fresh = len(net.reduced) + len(path)
        alive[fresh] = alive.pop(a) | alive.pop(b)
        if limit is not None and size[alive[fresh]] > limit:
            return None
        path.append((min(a, b), max(a, b)))
        heapq.heappush(rest, (size[alive[fresh]], fresh))
    return path


class _Best:
    """The best distinct paths found so far, by the objective's key."""

    def __init__(self, net: Network, opts: PathOptions) -> None:
        self.net, self.opts, self.found = net, opts, []  # (key, order, path)
        self.seen: set[tuple] = set()

    def offer(self, path: Ssa | None) -> None:
        if path is None:
            return
        costs = pair_costs(self.net, path)
        if self.opts.memory_limit is not None and costs[2] > self.opts.memory_limit:
            return
        sig = tuple(path)
        if sig in self.seen:
            return
        self.seen.add(sig)
        self.found.append((cost_key(costs, self.opts.objective), len(self.seen), path))
        self.found.sort(key=lambda f: (f[0], f[1]))
        del self.found[KEEP:]

    @property
    def best(self) -> Ssa | None:
        return self.found[0][2] if self.found else None


def hyper_ssa(net: Network, opts: PathOptions, starts: Callable[[], list[Ssa | None]]
              | None = None) -> Ssa:
    """The anytime search (see the module docstring); ``starts`` gives the starting paths
    (default: greedy, chain DP, ``auto`` where cheap)."""
    begin = time.perf_counter()
    deadline = None if opts.max_time is None else begin + opts.max_time
    repeats = opts.max_repeats
    if repeats is None:
        repeats = DEFAULT_REPEATS if deadline is None else sys.maxsize
    n = len(net.reduced)
    best = _Best(net, opts)
    for path in (starts or (lambda: _default_starts(net, opts)))():
        best.offer(path)
    rng = random.Random(opts.seed)
    search_end = None if deadline is None else begin + (1 - RECONFIGURE_SHARE) * opts.max_time
    for trial in range(repeats):
        if search_end is not None and time.perf_counter() > search_end:
            break
        if n >= 24 and trial % 3 == 2:
            best.offer(partition_ssa(net, opts, rng))
        else:
            costmod = rng.uniform(0.1, 4.0) if trial else 1.0
            temperature = math.exp(rng.uniform(math.log(0.001), 0.0)) if trial else 0.0
            best.offer(random_greedy_ssa(net, opts, rng, costmod, temperature))
    if not best.found:
        raise NoPathError(f"no pairwise path keeps every intermediate within "
                          f"memory_limit={opts.memory_limit} elements")
    # without a deadline, reconfiguring trees past RECONFIGURE_MAX_N is unbounded (seconds per
    # sweep at 500 operands): only a time budget lets it run there
    if opts.reconfigure_leaves >= 3 and (n <= RECONFIGURE_MAX_N or deadline is not None):
        old = sys.getrecursionlimit()  # reconfiguration recurses along the tree's depth
        sys.setrecursionlimit(max(old, 4 * n + 200))
        try:
            memo: dict = {}
            for _, _, path in list(best.found):
                if deadline is not None and time.perf_counter() > deadline:
                    break
                best.offer(reconfigure(net, path, opts, memo, deadline))
        finally:
            sys.setrecursionlimit(old)
    return best.best  # type: ignore[return-value]


def _default_starts(net: Network, opts: PathOptions) -> list[Ssa | None]:
    from accy.contraction.greedy import try_greedy
    from accy.contraction.paths import cheap_candidates

    if len(net.reduced) <= AUTO_START_MAX_N:
        return cheap_candidates(net, opts)
    return [try_greedy(net, opts), try_greedy(net, opts, lazy=False)]
