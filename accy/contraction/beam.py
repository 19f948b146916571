"""The ``beam`` path strategy and subtree reconfiguration (described in
:mod:`accy.contraction.paths`)."""

from __future__ import annotations

import heapq
import time

from accy.contraction.cost import Network, bits, tree_to_ssa
from accy.contraction.exact import full_dp
from accy.contraction.greedy import try_greedy
from accy.contraction.search import (
    KEY,
    Costs,
    NoPathError,
    Part,
    PathOptions,
    Ssa,
    cost_key,
    join_costs,
    no_path,
    pair_costs,
)

_MASK64 = (1 << 64) - 1
RECONFIGURE_MAX_N = 256  # its recursion follows the tree's depth
_SWEEPS = 8
BREADTH_FIRST_MAX_N = 300  # past it subtrees are cut largest-first only: two cuts per subtree
# made a 1,000-operand reconfiguration too slow for hyper's time budgets


def beam_ssa(net: Network, opts: PathOptions, greedy_path: Ssa | None = None) -> Ssa:
    """Beam search, polished by subtree reconfiguration (see :mod:`accy.contraction.paths`)."""
    try:
        candidates = [_beam_search(net, opts)]
    except NoPathError:  # every beam state dead-ended under the memory limit: greedy may not
        candidates = []
    greedy_path = try_greedy(net, opts) if greedy_path is None else greedy_path
    eager_path = try_greedy(net, opts, lazy=False)
    candidates += [p for p in (greedy_path, eager_path) if p is not None]
    if not candidates:
        raise no_path(opts)
    chosen, chosen_key, memo = candidates[0], None, {}
    for path in candidates:
        if opts.reconfigure_leaves >= 3 and len(net.reduced) <= RECONFIGURE_MAX_N:
            path = reconfigure(net, path, opts, memo)
        key = cost_key(pair_costs(net, path), opts.objective)
        if chosen_key is None or key < chosen_key:
            chosen, chosen_key = path, key
    return chosen


def _beam_search(net: Network, opts: PathOptions) -> Ssa:
    """The cheapest contraction sequence a beam of ``opts.width(n)`` finds."""
    size, out, limit, objective = net.size, net.output, opts.memory_limit, opts.objective
    n = len(net.reduced)
    primary, secondary = KEY[objective]
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
            raise no_path(opts)
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
    return list(min(beam, key=lambda st: cost_key(st[3], objective))[4])


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


def reconfigure(net: Network, ssa: Ssa, opts: PathOptions,
                memo: dict[tuple[int, ...], Part | None] | None = None,
                deadline: float | None = None, budget: int | None = None) -> Ssa:
    """Polish a tree: re-solve each subtree, cut to ``reconfigure_leaves`` leaves, exactly.

    Nodes are visited children first; a subtree is cut breadth-first (cotengra's ``bfs``:
    balanced subtrees; up to :data:`BREADTH_FIRST_MAX_N` operands) and, where that does not
    improve it, by opening its largest inner leaf until there are enough leaves; sweeps
    repeat until nothing improves (at most 8). Past
    ``deadline`` (``time.perf_counter()``), or once ``budget`` subtrees were re-solved (an
    effort bound: reproducible; both cuts of a subtree count once), subtrees are left as
    they are.
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
        return join_costs(inner(node[1], frontier), inner(node[2], frontier),
                     size[u] << 1 if u != kept else size[u], size[kept])

    remaining = [budget]

    def cut_breadth_first(node: tuple) -> list[tuple]:
        queue, frontier = [node[1], node[2]], []
        while queue and len(queue) + len(frontier) < opts.reconfigure_leaves:
            f = queue.pop(0)
            if f[1] is None:
                frontier.append(f)
            else:
                queue += [f[1], f[2]]
        return frontier + queue

    def cut_largest_first(node: tuple) -> list[tuple]:
        frontier = [node[1], node[2]]
        while len(frontier) < opts.reconfigure_leaves:
            inner_nodes = [f for f in frontier if f[1] is not None]
            if not inner_nodes:
                break
            f = max(inner_nodes, key=lambda f: (size[legs(f[0])], f[0]))
            frontier.remove(f)
            frontier += [f[1], f[2]]
        return frontier

    cuts = (cut_largest_first,) if n > BREADTH_FIRST_MAX_N else (cut_breadth_first,
                                                                 cut_largest_first)

    def improve(node: tuple) -> tuple:
        if remaining[0] is not None:
            if remaining[0] <= 0:
                return node
            remaining[0] -= 1
        for cut in cuts:
            if deadline is not None and time.perf_counter() > deadline:
                return node
            frontier = cut(node)
            if len(frontier) < 3:
                continue
            frontier.sort(key=lambda f: f[0])
            key = tuple(f[0] for f in frontier)
            if key not in memo:  # the best tree over a frontier depends on its groups only
                memo[key] = full_dp(net, [Part(legs(g), (0, 0, 0), i)
                                          for i, g in enumerate(key)], opts, keep=legs(node[0]))
            found = memo[key]
            now = inner(node, set(key))
            if found is not None and cost_key(found.costs, objective) < cost_key(now, objective):
                return build(found.tree, frontier)
        return node

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
