"""Contraction path strategies: a registry of ``exact``, ``beam``, ``greedy`` and ``auto``.

A strategy is ``(inputs, output, size_dict, options) -> path``: ``inputs`` one term per
operand (a string or a set of letters), ``output`` the output letters, ``size_dict`` the size
of each letter, ``options`` a :class:`PathOptions` (None: defaults). It returns a pairwise
path in linear form -- opt_einsum's shape, so each strategy also serves as an opt_einsum path
function (:mod:`accy.contraction.opt_einsum_bridge`). Costs are in the units of
:mod:`accy.contraction.cost`; the search minimizes :meth:`PathCost.key` of the objective.

* ``exact`` -- dynamic programming over subsets of operands. With at most
  ``exact_outer_limit`` operands it tries every pairwise tree, outer products included: the
  true optimum. Larger networks are split into parts connected by summed letters; each part
  is solved over every tree whose steps share a summed letter (the space of opt_einsum's
  ``dp``, asymptotically optimal by Pfeifer et al., PRE 90, 033315) by a best-first search
  that builds only subsets cheaper than the greedy path, and the parts are then joined
  optimally. If the greedy path beats every tree of that space it is returned. A *state* is
  a subset the search may have to solve: all ``2**k - 1`` subsets of a part searched over
  every tree, the connected subsets of the others. They are counted before the search; past
  ``exact_state_limit`` of them ``exact`` raises :class:`ExactStateLimitError` (after
  ``O(limit)`` work) or hands over to ``beam``/``greedy`` as ``fallback`` says.
* ``beam`` -- breadth-first over contraction sequences, keeping the ``width(n)`` partial
  sequences with the lowest cost so far plus a lower bound on the cost to come (each
  remaining operand is read once more, by a step costing at least its size); steps are
  pairs sharing a summed letter (outer products only when none is left). The best sequence,
  the greedy path and an eager greedy path (queuing every partner, not just the best) are
  then polished by *subtree reconfiguration* (every subtree, cut to ``reconfigure_leaves``
  leaves, re-solved exactly) and the cheapest is returned, so ``beam`` is never worse than
  ``greedy``. It costs ``O(width * n**2 log n)``: seconds past a few hundred operands.
* ``greedy`` -- repeatedly contracts the queued pair sharing a summed letter that removes the
  most elements (result size minus operand sizes; ties: fewer FLOPs, lower ids). Like
  opt_einsum's greedy it queues each operand's best partner only (at the start, and when the
  operand is made), then joins what is left smallest first, and returns the left-to-right
  path instead when that is cheaper.
* ``auto`` -- ``exact`` while it stays within ``exact_state_limit``, else ``beam``. Past
  ``exact_outer_limit`` operands it polishes exact's tree by subtree reconfiguration, which
  may bring in the outer products exact's space lacks (so ``auto`` may beat ``exact``).

Determinism: nothing reads the clock, randomness or hash order. Letters are sorted and
operands keep their positions. Ties on the objective's key go to the candidate met first in
a fixed order: subsets by bitmask (lower first), pairs by operand ids (lower first), beam
children in generation order. Equal inputs always give the same path.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from accy.contraction.cost import (
    OBJECTIVES,
    ContractionError,
    Indices,
    Network,
    Objective,
    Path,
    PathCost,
    bits,
    linear_to_ssa,
    naive_path,
    network,
    parse_spec,
    sizes_from_shapes,
    ssa_cost,
    ssa_to_linear,
    tree_to_ssa,
)

Fallback = Literal["error", "beam", "greedy"]
Ssa = list[tuple[int, ...]]
Costs = tuple[int, int, int]  # (flops, write, size) of the pairwise steps of a (sub)tree


class ExactStateLimitError(ContractionError):
    """``exact`` needed more dynamic-programming states than ``exact_state_limit`` allows."""


@dataclass(frozen=True)
class PathOptions:
    """Knobs shared by all strategies (each strategy reads the ones it needs)."""

    objective: Objective = "flops"
    """what to minimize: ``flops``, ``size`` (largest intermediate) or ``write``"""
    memory_limit: int | None = None
    """largest intermediate allowed, in elements (None: no limit)"""
    exact_state_limit: int = 1024
    """most dynamic-programming states (subsets) ``exact`` may have to solve"""
    exact_outer_limit: int = 10
    """networks of at most this many operands are searched over every tree by ``exact``"""
    beam_width: int = 4
    """partial contraction sequences ``beam`` keeps after each step"""
    auto_beam_width: int = 16
    """width ``beam`` widens to for small networks (see :meth:`width`; 0: no widening)"""
    reconfigure_leaves: int = 6
    """``beam`` re-solves every subtree cut to this many leaves exactly (below 3: off)"""
    fallback: Fallback = "error"
    """what ``exact`` does past its state limit: raise, or run ``beam`` or ``greedy``"""

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ContractionError(f"unknown objective {self.objective!r}; valid: "
                                   f"{', '.join(OBJECTIVES)}")
        for name, low in (("exact_state_limit", 1), ("beam_width", 1), ("exact_outer_limit", 0),
                          ("auto_beam_width", 0), ("reconfigure_leaves", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ContractionError(f"{name} must be an int >= {low}, got {value!r}")
        limit = self.memory_limit
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or limit < 0):
            raise ContractionError(f"memory_limit must be None or an int >= 0, got {limit!r}")
        if self.fallback not in ("error", "beam", "greedy"):
            raise ContractionError(f"unknown fallback {self.fallback!r}; valid: error, beam, "
                                   f"greedy")

    def width(self, n: int) -> int:
        """Beam width for ``n`` operands: ``auto_beam_width`` up to 12 operands, then shrinking
        as ``1/n**2`` (the work of a step grows as ``n**2``), never below ``beam_width``."""
        widened = self.auto_beam_width * 144 // max(n, 1) ** 2
        return max(self.beam_width, min(self.auto_beam_width, widened))


Strategy = Callable[[Sequence[Indices], Indices, Mapping[str, int], PathOptions | None], Path]
STRATEGIES: dict[str, Strategy] = {}


def register_strategy(name: str, fn: Strategy) -> Strategy:
    """Add ``fn`` to :data:`STRATEGIES` under ``name`` (duplicate names are errors)."""
    if name in STRATEGIES:
        raise ValueError(f"path strategy {name!r} is already registered")
    STRATEGIES[name] = fn
    return fn


def get_strategy(name: str) -> Strategy:
    """The strategy called ``name``; an unknown name lists the valid ones."""
    try:
        return STRATEGIES[name]
    except KeyError:
        raise ContractionError(f"unknown path strategy {name!r}; valid: "
                               f"{', '.join(sorted(STRATEGIES))}") from None


@dataclass(frozen=True)
class PathResult:
    """A chosen path (linear form) with its cost and the naive left-to-right cost."""

    path: Path
    cost: PathCost
    naive_cost: PathCost
    strategy: str


def search_path(inputs: Sequence[Indices], output: Indices, size_dict: Mapping[str, int],
                strategy: str = "auto", options: PathOptions | None = None) -> PathResult:
    """Run ``strategy`` and cost its path next to the naive left-to-right one.

    >>> search_path(["ij", "jk", "kl"], "il", {"i": 9, "j": 9, "k": 9, "l": 1}).path
    [(1, 2), (0, 1)]
    """
    path = get_strategy(strategy)(inputs, output, size_dict, options)
    net, n = network(inputs, output, size_dict), len(inputs)
    return PathResult(path, ssa_cost(net, linear_to_ssa(path, n)),
                      ssa_cost(net, linear_to_ssa(naive_path(n), n)), strategy)


def find_path(spec: str, shapes: Sequence[Sequence[int]], strategy: str = "auto",
              options: PathOptions | None = None) -> PathResult:
    """:func:`search_path` for an einsum ``spec`` over operands of ``shapes``.

    >>> find_path("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]).path
    [(0, 1), (0, 1)]
    """
    terms, output = parse_spec(spec)
    return search_path(terms, output, sizes_from_shapes(terms, shapes), strategy, options)


# ---- shared machinery ------------------------------------------------------------------------

_KEY = {"flops": (0, 1), "size": (2, 0), "write": (1, 0)}  # positions in Costs


def _key(costs: Costs, objective: Objective) -> tuple[int, int]:
    p, s = _KEY[objective]
    return costs[p], costs[s]


def _join(a: Costs, b: Costs, flops: int, result: int) -> Costs:
    return a[0] + b[0] + flops, a[1] + b[1] + result, max(a[2], b[2], result)


def _pair_costs(net: Network, ssa: Ssa) -> Costs:
    """Costs of the pairwise steps of an SSA path (its local reductions left out)."""
    total = ssa_cost(net, ssa)
    flops, largest, written = net.local_cost()
    return total.flops - flops, total.write - written, total.size


def _no_path(opts: PathOptions) -> ContractionError:
    return ContractionError(f"no pairwise path keeps every intermediate within "
                            f"memory_limit={opts.memory_limit} elements")


# ---- exact: dynamic programming over subsets ---------------------------------------------------


@dataclass
class _Part:
    """A leaf of a DP: an operand or a solved part, with its legs, costs and tree."""

    legs: int
    costs: Costs
    tree: object


class _Budget:
    def __init__(self, limit: int, n: int) -> None:
        self.limit, self.n, self.used = limit, n, 0

    def take(self, states: int) -> None:
        self.used += states
        if self.used > self.limit:
            raise ExactStateLimitError(
                f"exact path search over {self.n} operands needs more than "
                f"exact_state_limit={self.limit} states; raise the limit, or use strategy "
                f"'auto' or fallback='beam'")


def _full_dp(net: Network, parts: list[_Part], opts: PathOptions,
             keep: int | None = None) -> _Part | None:
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
    first, second = _KEY[objective]
    for s in range(3, full + 1):
        if not s & (s - 1):
            continue
        ls = legs[s]
        result = size[ls]
        if limit is not None and result > limit:
            continue
        low, chosen, k1, k2 = s & -s, None, 0, 0
        rest = sub = s ^ low
        while True:  # every split (a, s - a) with the lowest part in a; _join and _key inlined
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

    return _Part(legs[full], best[full][0], tree(full))


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
                  bound: int | None) -> _Part | None:
    """Best tree over ``comp`` whose every step shares a summed letter, or None when every
    such tree costs more than ``bound`` (or breaks the memory limit).

    Best-first (Knuth's generalization of Dijkstra): subsets are finalized cheapest first and
    each newly final subset is joined with every final subset it touches; subsets dearer than
    ``bound`` are never built.
    """
    size, out, limit, objective = net.size, net.output, opts.memory_limit, opts.objective
    primary, additive = _KEY[objective][0], objective != "size"
    cap = bound if bound is not None else -1
    full = sum(1 << t for t in comp)
    entries: dict[int, list] = {1 << t: [(0, 0, 0), net.reduced[t], None, False] for t in comp}
    heap = [((0, 0), 1 << t) for t in comp]  # (key, subset); entry: costs, legs, split, final
    finals: dict[int, list[int]] = {t: [] for t in comp}  # operand -> final subsets holding it
    while heap:
        key, s = heapq.heappop(heap)
        entry = entries[s]
        if entry[3] or key != _key(entry[0], objective):
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
                costs = _join(costs1, costs2, size[u] << 1 if summed else size[u], result)
                if cap >= 0 and costs[primary] > cap:
                    continue
                new_key = _key(costs, objective)
                if known is None:
                    entries[union] = [costs, u & ~summed, (s, other), False]
                elif new_key >= _key(known[0], objective):
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

    return _Part(entries[full][1], entries[full][0], tree(full))


def _exact_ssa(net: Network, opts: PathOptions, hint: Ssa | None = None) -> Ssa:
    """Exact search (see the module docstring); ``hint`` is a known path bounding the search
    of large networks (the greedy path when not given)."""
    n = len(net.reduced)
    budget = _Budget(opts.exact_state_limit, n)
    parts = [_Part(m, (0, 0, 0), i) for i, m in enumerate(net.reduced)]
    if n <= opts.exact_outer_limit:
        budget.take((1 << n) - 1)
        root = _full_dp(net, parts, opts)
        if root is None:
            raise _no_path(opts)
        return tree_to_ssa(root.tree, n)
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
        hint = _try_greedy(net, opts)
    hint_key = None if hint is None else _key(_pair_costs(net, hint), opts.objective)
    solved = []
    for comp in comps:
        if len(comp) <= opts.exact_outer_limit:
            part = _full_dp(net, [parts[i] for i in comp], opts)
        else:
            part = _connected_dp(net, comp, opts, holders, None if hint is None else hint_key[0])
        if part is None and hint is None:
            raise _no_path(opts)
        if part is None:  # nothing in the searched space beats the hint
            return hint  # type: ignore[return-value]
        solved.append(part)
    root = (_full_dp(net, solved, opts) if len(solved) <= 8
            else _chain(net, solved, opts.memory_limit))
    if hint is not None and (root is None or _key(root.costs, opts.objective) > hint_key):
        return hint
    if root is None:
        raise _no_path(opts)
    return tree_to_ssa(root.tree, n)


def _try_greedy(net: Network, opts: PathOptions, lazy: bool = True) -> Ssa | None:
    try:
        return _greedy_ssa(net, opts, lazy)
    except ContractionError:  # the memory limit: leave it to the search at hand
        return None


def _chain(net: Network, parts: list[_Part], limit: int | None) -> _Part | None:
    """Join parts that share no summed letter, the two smallest first (None: over ``limit``)."""
    heap = [(net.size[p.legs], i, p) for i, p in enumerate(parts)]
    heapq.heapify(heap)
    while len(heap) > 1:
        (_, i, a), (_, _, b) = heapq.heappop(heap), heapq.heappop(heap)
        result = net.size[a.legs | b.legs]
        if limit is not None and result > limit:
            return None
        joined = _Part(a.legs | b.legs, _join(a.costs, b.costs, result, result), (a.tree, b.tree))
        heapq.heappush(heap, (result, len(parts) + i, joined))
    return heap[0][2]


# ---- greedy ------------------------------------------------------------------------------------


def _naive_ssa(n: int) -> Ssa:
    return linear_to_ssa(naive_path(n), n)


def _better(net: Network, opts: PathOptions, path: Ssa, other: Ssa) -> Ssa:
    """``other`` when it fits the memory limit and beats ``path``, else ``path``."""
    mine, theirs = ssa_cost(net, path), ssa_cost(net, other)
    if opts.memory_limit is not None and theirs.size > opts.memory_limit:
        return path
    return other if theirs.key(opts.objective) < mine.key(opts.objective) else path


def _greedy_ssa(net: Network, opts: PathOptions, lazy: bool = True) -> Ssa:
    """Greedy by elements removed (see the module docstring; ``lazy=False`` queues every
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
            raise _no_path(opts)
        path.append((min(a, b), max(a, b)))
        heapq.heappush(rest, (size[alive[fresh]], fresh))
    return _better(net, opts, path, _naive_ssa(len(net.reduced)))


# ---- beam --------------------------------------------------------------------------------------


def _beam_ssa(net: Network, opts: PathOptions, greedy_path: Ssa | None = None) -> Ssa:
    """Beam search, polished by subtree reconfiguration (see the module docstring)."""
    candidates = [_beam_search(net, opts)]
    greedy_path = _try_greedy(net, opts) if greedy_path is None else greedy_path
    eager_path = _try_greedy(net, opts, lazy=False)
    candidates += [p for p in (greedy_path, eager_path) if p is not None]
    chosen, chosen_key, memo = candidates[0], None, {}
    for path in candidates:
        if opts.reconfigure_leaves >= 3 and len(net.reduced) <= _RECONFIGURE_MAX_N:
            path = _reconfigure(net, path, opts, memo)
        key = _key(_pair_costs(net, path), opts.objective)
        if chosen_key is None or key < chosen_key:
            chosen, chosen_key = path, key
    return chosen


def _beam_search(net: Network, opts: PathOptions) -> Ssa:
    """The cheapest contraction sequence a beam of ``opts.width(n)`` finds."""
    size, out, limit, objective = net.size, net.output, opts.memory_limit, opts.objective
    n = len(net.reduced)
    primary, secondary = _KEY[objective]
    bound = objective == "flops"
    hashes: dict[int, int] = {}
    letters: dict[int, list[int]] = {}  # mask -> its letters that may be summed

    def mix(group: int) -> int:
        value = hashes.get(group)
        if value is None:
            value = hashes[group] = _mix(group)
        return value

    # a state: (ssa ids, letter masks, operand groups, costs, ssa path, signature)
    beam = [(tuple(range(n)), net.reduced, tuple(1 << i for i in range(n)), (0, 0, 0), (), 0)]
    for depth in range(n - 1):
        best: dict[int, tuple] = {}
        for si, (ids, masks, groups, costs, _, sig) in enumerate(beam):
            once = twice = thrice = 0
            for m in masks:
                thrice |= twice & m
                twice |= once & m
                once |= m
            keep, count, holding = out | thrice, len(masks), {}
            for i, m in enumerate(masks):
                summable = letters.get(m)
                if summable is None:
                    summable = letters[m] = bits(m & ~out)
                for bit in summable:
                    holding.setdefault(bit, []).append(i)
            pairs = sorted({(i, j) for held in holding.values() for k, i in enumerate(held)
                            for j in held[k + 1:]})
            if not pairs:
                a, b = sorted(range(count), key=lambda i: (size[masks[i]], ids[i]))[:2]
                pairs = [(min(a, b), max(a, b))]
            total = sum(size[m] for m in masks) if bound and count > 2 else 0
            for i, j in pairs:
                a, b = masks[i], masks[j]
                u, kept = a | b, (a ^ b) | (a & b & keep)
                result = size[kept]
                if limit is not None and result > limit:
                    continue
                new = (costs[0] + (size[u] << 1 if u != kept else size[u]),
                       costs[1] + result, max(costs[2], result))
                rest = (total - size[a] - size[b] + result) // 2 if total else 0
                gi, gj = groups[i], groups[j]
                child = sig ^ mix(gi) ^ mix(gj) ^ mix(gi | gj)
                rank = (new[primary] + rest, new[secondary], len(best))
                old = best.get(child)
                if old is None or rank < old[0]:
                    best[child] = (rank, si, i, j, kept, new)
        if not best:
            raise _no_path(opts)
        next_beam = []
        for child, (_, si, i, j, kept, new) in heapq.nsmallest(
                opts.width(n), best.items(), key=lambda item: item[1][0]):
            ids, masks, groups, _, path, _ = beam[si]

            def drop(t: tuple, last: object, i: int = i, j: int = j) -> tuple:
                return t[:i] + t[i + 1:j] + t[j + 1:] + (last,)

            next_beam.append((drop(ids, n + depth), drop(masks, kept),
                              drop(groups, groups[i] | groups[j]), new,
                              path + ((ids[i], ids[j]),), child))
        beam = next_beam
    return list(min(beam, key=lambda st: _key(st[3], objective))[4])


_MASK64 = (1 << 64) - 1
_RECONFIGURE_MAX_N = 256  # its recursion follows the tree's depth
_SWEEPS = 8


def _mix(group: int) -> int:
    """64-bit hash of an operand group; a beam state's signature is the xor over its groups.
    (A collision merges two states: it costs quality, never correctness or determinism.)"""
    x = 0
    while True:
        x = (x ^ (group & _MASK64)) + 0x9E3779B97F4A7C15
        x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & _MASK64
        x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _MASK64
        x ^= x >> 31
        group >>= 64
        if not group:
            return x


def _reconfigure(net: Network, ssa: Ssa, opts: PathOptions,
                 memo: dict[tuple[int, ...], _Part | None] | None = None) -> Ssa:
    """Polish a tree: re-solve each subtree, cut to ``reconfigure_leaves`` leaves, exactly.

    Nodes are visited children first; a subtree is cut by opening its largest inner leaf
    until there are enough leaves; sweeps repeat until nothing improves (at most 8).
    """
    n, size, red, objective = len(net.reduced), net.size, net.reduced, opts.objective
    holders, legs_of = net.holders(), {}
    memo = {} if memo is None else memo  # frontier groups -> best tree over them

    def legs(group: int) -> int:
        value = legs_of.get(group)
        if value is None:
            u = 0
            for i in bits(group):
                u |= red[i]
            gone = sum(1 << b for b in bits(u & ~net.output) if not holders[b] & ~group)
            value = legs_of[group] = u & ~gone
        return value

    def inner(node: tuple, frontier: set[int]) -> Costs:  # node: (group, left, right)
        if node[0] in frontier or node[1] is None:
            return (0, 0, 0)
        u, kept = legs(node[1][0]) | legs(node[2][0]), legs(node[0])
        return _join(inner(node[1], frontier), inner(node[2], frontier),
                     size[u] << 1 if u != kept else size[u], size[kept])

    def improve(node: tuple) -> tuple:
        frontier = [node[1], node[2]]
        while len(frontier) < opts.reconfigure_leaves:
            inner_nodes = [f for f in frontier if f[1] is not None]
            if not inner_nodes:
                break
            f = max(inner_nodes, key=lambda f: (size[legs(f[0])], f[0]))
            frontier.remove(f)
            frontier += [f[1], f[2]]
        if len(frontier) < 3:
            return node
        frontier.sort(key=lambda f: f[0])
        key = tuple(f[0] for f in frontier)
        if key not in memo:  # the best tree over a frontier depends on its groups only
            memo[key] = _full_dp(net, [_Part(legs(g), (0, 0, 0), i) for i, g in enumerate(key)],
                                 opts, keep=legs(node[0]))
        found = memo[key]
        now = inner(node, set(key))
        if found is None or _key(found.costs, objective) >= _key(now, objective):
            return node
        return build(found.tree, frontier)

    def build(tree: object, frontier: list[tuple]) -> tuple:
        if isinstance(tree, int):
            return frontier[tree]
        left, right = build(tree[0], frontier), build(tree[1], frontier)  # type: ignore[index]
        return (left[0] | right[0], left, right)

    settled: set[tuple] = set()

    def sweep(node: tuple) -> tuple:
        if node[1] is None or node in settled:
            return node
        left, right = sweep(node[1]), sweep(node[2])
        if left is not node[1] or right is not node[2]:
            node = (node[0], left, right)
        better = improve(node)
        if better is node:
            settled.add(node)
        return better

    nodes: dict[int, tuple] = {i: (1 << i, None, None) for i in range(n)}
    for j, (a, b) in enumerate(ssa):
        left, right = nodes.pop(a), nodes.pop(b)
        nodes[n + j] = (left[0] | right[0], left, right)
    (root,) = nodes.values()
    for _ in range(_SWEEPS):
        polished = sweep(root)
        if polished is root:
            break
        root = polished

    def as_tree(node: tuple) -> object:
        if node[1] is None:
            return node[0].bit_length() - 1
        return (as_tree(node[1]), as_tree(node[2]))

    return tree_to_ssa(as_tree(root), n)


# ---- auto and the registry ---------------------------------------------------------------------


def _auto_ssa(net: Network, opts: PathOptions) -> Ssa:
    """``exact`` while within ``exact_state_limit``, else ``beam``."""
    n = len(net.reduced)
    hint = None if n <= opts.exact_outer_limit else _try_greedy(net, opts)
    try:
        path = _exact_ssa(net, opts, hint)
    except ExactStateLimitError:
        return _beam_ssa(net, opts, hint)
    if n > opts.exact_outer_limit and 3 <= opts.reconfigure_leaves and n <= _RECONFIGURE_MAX_N:
        path = _reconfigure(net, path, opts)  # exact's space there has no outer products
    return path


def _exact_or_fallback_ssa(net: Network, opts: PathOptions) -> Ssa:
    """Exact search by dynamic programming over subsets (see the module docstring)."""
    try:
        return _exact_ssa(net, opts)
    except ExactStateLimitError:
        if opts.fallback == "beam":
            return _beam_ssa(net, opts)
        if opts.fallback == "greedy":
            return _greedy_ssa(net, opts)
        raise


def _strategy(name: str, search: Callable[[Network, PathOptions], Ssa]) -> Strategy:
    def strategy(inputs: Sequence[Indices], output: Indices, size_dict: Mapping[str, int],
                 options: PathOptions | None = None) -> Path:
        opts = PathOptions() if options is None else options
        if not isinstance(opts, PathOptions):
            raise ContractionError(f"options must be PathOptions, got {type(opts).__name__}")
        net = network(inputs, output, size_dict)
        if len(net.operands) == 1:
            return [(0,)]
        if opts.memory_limit is not None and net.size[net.output] > opts.memory_limit:
            raise ContractionError(f"the output alone has {net.size[net.output]} elements, "
                                   f"more than memory_limit={opts.memory_limit}")
        return ssa_to_linear(search(net, opts), len(net.operands))

    strategy.__name__ = strategy.__qualname__ = name
    strategy.__doc__ = f"The ``{name}`` path strategy: {search.__doc__}"
    return register_strategy(name, strategy)


exact = _strategy("exact", _exact_or_fallback_ssa)
beam = _strategy("beam", _beam_ssa)
greedy = _strategy("greedy", _greedy_ssa)
auto = _strategy("auto", _auto_ssa)
