"""The ``greedy`` path strategy (described in :mod:`accy.contraction.paths`): the better of
the log-space score greedy of :mod:`accy.contraction.trials` and, up to
:data:`LAZY_GREEDY_MAX_N` operands, the opt_einsum-style lazy greedy (:func:`greedy_ssa`, also
the bound ``exact`` and ``beam`` start from)."""

from __future__ import annotations

import heapq

from accy.contraction.cost import (
    ContractionError,
    Network,
    bits,
    linear_to_ssa,
    naive_path,
    ssa_cost,
)
from accy.contraction.search import PathOptions, Ssa, cost_key, no_path, pair_costs

LAZY_GREEDY_MAX_N = 300  # past it the lazy greedy's exact integer sizes get slow (1 s at 1,000)


def score_greedy_ssa(net: Network, opts: PathOptions) -> Ssa | None:
    """The cheapest of four plain greedy runs of :func:`accy.contraction.trials.greedy_core`
    (every pair queued or each tensor's best only; ties to the pair queued first or to the
    older pair, which with ``lazy`` is opt_einsum's greedy); None where all break the memory
    limit."""
    import math

    from accy.contraction.trials import Graph, greedy_core, log_costs, log_key

    g = Graph(net)
    limit = None if opts.memory_limit is None else math.log(max(opts.memory_limit, 1))
    found = []
    for by_age in (False, True):
        for lazy in (False, True):
            path = greedy_core(g.legs, g.out, g.sizes, g.logsize, log_limit=limit, lazy=lazy,
                               by_age=by_age)
            if path is not None:
                found.append((log_key(log_costs(g.legs, g.out, g.logsize, path),
                                      opts.objective), len(found), path))
    if not found:
        return None
    found.sort(key=lambda f: (f[0], f[1]))
    close = [f[2] for f in found if f[0][0] <= found[0][0][0] * (1 + 1e-9) + 1e-9]
    if len(close) == 1:
        return close[0]
    return min(close, key=lambda p: cost_key(pair_costs(net, p), opts.objective))


def best_greedy_ssa(net: Network, opts: PathOptions) -> Ssa:
    """The ``greedy`` strategy: the cheapest of the score greedy and (up to
    ``LAZY_GREEDY_MAX_N`` operands) the lazy greedy, within the memory limit."""
    found = [score_greedy_ssa(net, opts)]
    if len(net.reduced) <= LAZY_GREEDY_MAX_N:
        found.append(try_greedy(net, opts))
    fits = []
    for path in found:
        if path is None:
            continue
        costs = pair_costs(net, path)
        if opts.memory_limit is None or costs[2] <= opts.memory_limit:
            fits.append((cost_key(costs, opts.objective), path))
    if not fits:
        return greedy_ssa(net, opts)  # raises the memory limit's error (or finds a path)
    return min(fits, key=lambda f: f[0])[1]


def try_greedy(net: Network, opts: PathOptions, lazy: bool = True) -> Ssa | None:
    """The greedy path, or None where it breaks the memory limit (a bound for other searches)."""
    try:
        return greedy_ssa(net, opts, lazy)
    except ContractionError:  # the memory limit: leave it to the search at hand
        return None


def _naive_ssa(n: int) -> Ssa:
    return linear_to_ssa(naive_path(n), n)


def _better(net: Network, opts: PathOptions, path: Ssa, other: Ssa) -> Ssa:
    """``other`` when it fits the memory limit and beats ``path``, else ``path``."""
    mine, theirs = ssa_cost(net, path), ssa_cost(net, other)
    if opts.memory_limit is not None and theirs.size > opts.memory_limit:
        return path
    return other if theirs.key(opts.objective) < mine.key(opts.objective) else path


def greedy_ssa(net: Network, opts: PathOptions, lazy: bool = True) -> Ssa:
    """Greedy by elements removed (see :mod:`accy.contraction.paths`; ``lazy=False`` queues every
    partner of an operand, not only its best)."""
    size, out, limit = net.size, net.output, opts.memory_limit
    alive: dict[int, int] = dict(enumerate(net.reduced))
    holders: dict[int, set[int]] = {}
    for i, m in alive.items():
        for bit in bits(m & ~out):
            holders.setdefault(bit, set()).add(i)

    def candidate(a: int, b: int) -> tuple[int, int, int, int, int] | None:
        ma, mb = alive[a], alive[b]
        summed = sum(1 << bit for bit in bits(ma & mb & ~out) if len(holders[bit]) == 2)
        u = ma | mb
        result = size[u & ~summed]
        if limit is not None and result > limit:
            return None
        return result - size[ma] - size[mb], size[u] << 1 if summed else size[u], a, b, summed

    heap: list[tuple[int, int, int, int, int]] = []

    def push_best_partner(i: int, later_only: bool = False) -> None:
        partners: set[int] = set()
        for bit in bits(alive[i] & ~out):
            partners |= holders[bit]
        found = [c for j in sorted(partners - {i}) if not later_only or j > i
                 for c in [candidate(min(i, j), max(i, j))] if c is not None]
        for c in [min(found)] if lazy and found else found:
            heapq.heappush(heap, c)

    for i in list(alive):
        push_best_partner(i, later_only=True)
    path: Ssa = []
    while heap:
        c = heapq.heappop(heap)
        a, b = c[2], c[3]
        if a not in alive or b not in alive:
            continue
        now = candidate(a, b)  # letter counts may have changed since it was pushed
        if now != c:
            if now is not None:
                heapq.heappush(heap, now)
            continue
        fresh = len(net.reduced) + len(path)
        for i in (a, b):
            for bit in bits(alive[i] & ~out):
                holders[bit].discard(i)
        alive[fresh] = (alive.pop(a) | alive.pop(b)) & ~c[4]
        for bit in bits(alive[fresh] & ~out):
            holders[bit].add(fresh)
        path.append((a, b))
        push_best_partner(fresh)
    rest = sorted((size[m], i) for i, m in alive.items())
    while len(rest) > 1:
        (_, a), (_, b) = heapq.heappop(rest), heapq.heappop(rest)
        fresh = len(net.reduced) + len(path)
        alive[fresh] = alive.pop(a) | alive.pop(b)
        if limit is not None and size[alive[fresh]] > limit:
            raise no_path(opts)
        path.append((min(a, b), max(a, b)))
        heapq.heappush(rest, (size[alive[fresh]], fresh))
    return _better(net, opts, path, _naive_ssa(len(net.reduced)))
