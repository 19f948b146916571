"""The ``exact`` path strategy: dynamic programming over subsets of operands (described in
:mod:`accy.contraction.paths`)."""

from __future__ import annotations

import heapq

from accy.contraction.chain import CHAIN_MAX_N, chain_order, chain_ssa
from accy.contraction.cost import Network, bits, tree_to_ssa
from accy.contraction.greedy import try_greedy
from accy.contraction.search import (
    KEY,
    Costs,
    ExactStateLimitError,
    Part,
    PathOptions,
    Ssa,
    cost_key,
    join_costs,
    no_path,
    pair_costs,
)


class _Budget:
    def __init__(self, limit: int, n: int) -> None:
        self.limit, self.n, self.used = limit, n, 0

    def take(self, states: int) -> None:
        self.used += states
        if self.used > self.limit:
            raise ExactStateLimitError(
                f"exact path search over {self.n} operands needs more than "
                f"exact_state_limit={self.limit} states; raise the limit or give it max_time, "
                f"or use strategy 'auto' or fallback='beam'")


def full_dp(net: Network, parts: list[Part], opts: PathOptions,
             keep: int | None = None) -> Part | None:
    """Best tree over every way of pairing ``parts`` (outer products included); ``keep`` are
    the letters the result must keep (default: the network's output). None: nothing fits."""
    k = len(parts)
    if k == 1:
        return parts[0]
    full = (1 << k) - 1
    size, limit, objective = net.size, opts.memory_limit, opts.objective
    out = net.output if keep is None else keep
    union = [0] * (full + 1)
    for s in range(1, full + 1):
        low = s & -s
        union[s] = union[s ^ low] | parts[low.bit_length() - 1].legs
    legs = [union[s] & (out | union[full ^ s]) for s in range(full + 1)]
    best: list[tuple[Costs, tuple[int, int]] | None] = [None] * (full + 1)
    for i, p in enumerate(parts):
        best[1 << i] = (p.costs, (0, 0))
    first, second = KEY[objective]
    for s in range(3, full + 1):
        if not s & (s - 1):
            continue
        ls = legs[s]
        result = size[ls]
        if limit is not None and result > limit:
            continue
        low, chosen, k1, k2 = s & -s, None, 0, 0
        rest = sub = s ^ low
        while True:  # every split (a, s - a), the lowest part in a; join_costs, cost_key inlined
            sub = (sub - 1) & rest
            a = low | sub
            ea, eb = best[a], best[s ^ a]
            if ea is not None and eb is not None:
                ca, cb, u = ea[0], eb[0], legs[a] | legs[s ^ a]
                m = ca[2] if ca[2] > cb[2] else cb[2]
                costs = (ca[0] + cb[0] + (size[u] << 1 if u & ~ls else size[u]),
                         ca[1] + cb[1] + result, m if m > result else result)
                c1, c2 = costs[first], costs[second]
                if chosen is None or c1 < k1 or (c1 == k1 and c2 < k2):
                    chosen, k1, k2 = (costs, (a, s ^ a)), c1, c2
            if not sub:
                break
        best[s] = chosen
    if best[full] is None:
        return None

    def tree(s: int) -> object:
        if not s & (s - 1):
            return parts[s.bit_length() - 1].tree
        a, b = best[s][1]  # type: ignore[index]
        return (tree(a), tree(b))

    return Part(legs[full], best[full][0], tree(full))


def _components(net: Network) -> list[list[int]]:
    """Operands grouped into parts connected by summed letters (each part in operand order)."""
    parent = list(range(len(net.reduced)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[int, int] = {}
    for i, m in enumerate(net.reduced):
        for bit in bits(m & ~net.output):
            a, b = find(owner.setdefault(bit, i)), find(i)
            parent[max(a, b)] = min(a, b)
    groups: dict[int, list[int]] = {}
    for i in range(len(parent)):
        groups.setdefault(find(i), []).append(i)
    return list(groups.values())


def _count_connected(comp: list[int], adjacent: list[int], budget: _Budget) -> None:
    """Count the connected subsets of ``comp`` (the states of :func:`_connected_dp`) against
    ``budget``, so an over-limit search fails after ``O(limit)`` work, before it starts."""

    def extend(s: int, nb: int, excluded: int) -> None:
        grow = nb & ~excluded
        subs, sub = [], grow
        while sub:
            subs.append(sub)
            sub = (sub - 1) & grow
        budget.take(len(subs))
        for sub in subs:
            reach = nb
            for i in bits(sub):
                reach |= adjacent[i]
            extend(s | sub, reach & ~(s | sub), excluded | grow)

    for v in reversed(comp):
        budget.take(1)
        extend(1 << v, adjacent[v], (2 << v) - 1)


def _connected_dp(net: Network, comp: list[int], opts: PathOptions, holders: list[int],
                  bound: int | None) -> Part | None:
    """Best tree over ``comp`` whose every step shares a summed letter, or None when every
    such tree costs more than ``bound`` (or breaks the memory limit).

    Best-first (Knuth's generalization of Dijkstra): subsets are finalized cheapest first and
    each newly final subset is joined with every final subset it touches; subsets dearer than
    ``bound`` are never built.
    """
    size, out, limit, objective = net.size, net.output, opts.memory_limit, opts.objective
    primary, additive = KEY[objective][0], objective != "size"
    cap = bound if bound is not None else -1
    full = sum(1 << t for t in comp)
    entries: dict[int, list] = {1 << t: [(0, 0, 0), net.reduced[t], None, False] for t in comp}
    heap = [((0, 0), 1 << t) for t in comp]  # (key, subset); entry: costs, legs, split, final
    finals: dict[int, list[int]] = {t: [] for t in comp}  # operand -> final subsets holding it
    while heap:
        key, s = heapq.heappop(heap)
        entry = entries[s]
        if entry[3] or key != cost_key(entry[0], objective):
            continue
        entry[3] = True
        if s == full:
            break
        costs1, legs, nb, seen = entry[0], entry[1], 0, set()
        for bit in bits(legs & ~out):
            nb |= holders[bit]
        for t in bits(nb & ~s):
            for other in finals[t]:
                if other & s or other in seen:
                    continue
                seen.add(other)
                union = s | other
                known = entries.get(union)
                if known is not None and known[3]:
                    continue
                e2 = entries[other]
                costs2, l2 = e2[0], e2[1]
                floor = (costs1[primary] + costs2[primary] if additive
                         else max(costs1[primary], costs2[primary]))
                if cap >= 0 and floor > cap:
                    continue
                summed, shared = 0, legs & l2 & ~out
                while shared:
                    low = shared & -shared
                    if not holders[low.bit_length() - 1] & ~union:
                        summed |= low
                    shared ^= low
                u = legs | l2
                result = size[u & ~summed]
                if limit is not None and result > limit:
                    continue
                costs = join_costs(costs1, costs2, size[u] << 1 if summed else size[u], result)
                if cap >= 0 and costs[primary] > cap:
                    continue
                new_key = cost_key(costs, objective)
                if known is None:
                    entries[union] = [costs, u & ~summed, (s, other), False]
                elif new_key >= cost_key(known[0], objective):
                    continue
                else:
                    known[0], known[2] = costs, (s, other)
                heapq.heappush(heap, (new_key, union))
        for t in bits(s):
            finals[t].append(s)
    if full not in entries or not entries[full][3]:
        return None

    def tree(s: int) -> object:
        if not s & (s - 1):
            return s.bit_length() - 1
        a, b = entries[s][2]
        return (tree(a), tree(b))

    return Part(entries[full][1], entries[full][0], tree(full))


def exact_ssa(net: Network, opts: PathOptions, hint: Ssa | None = None) -> Ssa:
    """Exact search (see :mod:`accy.contraction.paths`); ``hint`` is a known path bounding
    the search of large networks (the greedy path when not given)."""
    n = len(net.reduced)
    budget = _Budget(opts.state_limit(), n)
    parts = [Part(m, (0, 0, 0), i) for i, m in enumerate(net.reduced)]
    if n <= opts.exact_outer_limit:
        budget.take((1 << n) - 1)
        root = full_dp(net, parts, opts)
        if root is None:
            raise no_path(opts)
        return tree_to_ssa(root.tree, n)
    order = chain_order(net) if n <= CHAIN_MAX_N else None
    if order is not None:  # interval DP: O(n**3), no state limit needed
        path = chain_ssa(net, opts, order)
        if hint is None:
            hint = try_greedy(net, opts)
        if hint is not None and (cost_key(pair_costs(net, hint), opts.objective)
                                 < cost_key(pair_costs(net, path), opts.objective)):
            return hint  # greedy found an outer product the interval space lacks
        return path
    holders, comps = net.holders(), _components(net)
    adjacent = [0] * n
    for i, m in enumerate(net.reduced):
        for bit in bits(m & ~net.output):
            adjacent[i] |= holders[bit]
        adjacent[i] &= ~(1 << i)
    for comp in comps:  # count the states first: an over-limit search fails fast
        if len(comp) <= opts.exact_outer_limit:
            budget.take((1 << len(comp)) - 1)
        else:
            _count_connected(comp, adjacent, budget)
    if 1 < len(comps) <= 8:
        budget.take((1 << len(comps)) - 1)
    if hint is None:
        hint = try_greedy(net, opts)
    hint_key = None if hint is None else cost_key(pair_costs(net, hint), opts.objective)
    solved = []
    for comp in comps:
        if len(comp) <= opts.exact_outer_limit:
            part = full_dp(net, [parts[i] for i in comp], opts)
        else:
            part = _connected_dp(net, comp, opts, holders, None if hint is None else hint_key[0])
        if part is None and hint is None:
            raise no_path(opts)
        if part is None:  # nothing in the searched space beats the hint
            return hint  # type: ignore[return-value]
        solved.append(part)
    root = (full_dp(net, solved, opts) if len(solved) <= 8
            else _chain(net, solved, opts.memory_limit))
    if hint is not None and (root is None or cost_key(root.costs, opts.objective) > hint_key):
        return hint
    if root is None:
        raise no_path(opts)
    return tree_to_ssa(root.tree, n)


def _chain(net: Network, parts: list[Part], limit: int | None) -> Part | None:
    """Join parts that share no summed letter, the two smallest first (None: over ``limit``)."""
    heap = [(net.size[p.legs], i, p) for i, p in enumerate(parts)]
    heapq.heapify(heap)
    while len(heap) > 1:
        (_, i, a), (_, _, b) = heapq.heappop(heap), heapq.heappop(heap)
        result = net.size[a.legs | b.legs]
        if limit is not None and result > limit:
            return None
        costs = join_costs(a.costs, b.costs, result, result)
        joined = Part(a.legs | b.legs, costs, (a.tree, b.tree))
        heapq.heappush(heap, (result, len(parts) + i, joined))
    return heap[0][2]


# ---- greedy ------------------------------------------------------------------------------------
