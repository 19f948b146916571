"""Chain-like networks solved exactly by dynamic programming over intervals.

A network is *chain-like* when its operands can be put in an order in which every summed
letter is held by consecutive operands only and the operands form one path (each shares
summed letters with at most its two neighbours): matrix chains, MPS-like strings, shuffled
or not. For such a network every tree whose steps each share a summed letter -- the space of
``exact`` past ``exact_outer_limit`` and of opt_einsum's ``dp`` -- has intervals of the order
as subtrees, so the textbook matrix-chain recurrence over the ``n (n + 1) / 2`` intervals
(``O(n**3)`` splits) finds the optimum of that space. Ordering is ``O(n)``; it replaces a
subset search whose state count grows with ``n**2`` and hits the default state limit at ~45
operands.
"""

from __future__ import annotations

from accy.contraction.cost import Network, bits, tree_to_ssa
from accy.contraction.search import KEY, PathOptions, Ssa, no_path

CHAIN_MAX_N = 200
"""longest chain solved by interval DP (``n**3 / 6`` splits: 0.3 s at 100 operands, 4 s at
200 on a loaded 2-core machine, in CPython)"""


def chain_order(net: Network) -> list[int] | None:
    """The operands in chain order (from the lower-numbered end), or None if not chain-like."""
    n = len(net.reduced)
    holders = net.holders()
    neighbours: list[set[int]] = [set() for _ in range(n)]
    for bit in bits(_summed(net)):
        held = bits(holders[bit])
        if len(held) > 2:
            return None  # a letter shared by three operands: not a chain (no interval DP)
        if len(held) == 2:
            a, b = held
            neighbours[a].add(b)
            neighbours[b].add(a)
    if n < 3 or any(len(nb) > 2 for nb in neighbours):
        return None
    ends = [i for i in range(n) if len(neighbours[i]) == 1]
    if len(ends) != 2:
        return None  # a ring, disconnected parts or isolated operands
    order, prev = [ends[0]], -1
    while len(order) < n:
        step = [j for j in neighbours[order[-1]] if j != prev]
        if len(step) != 1:
            return None
        prev = order[-1]
        order.append(step[0])
    return order


def _summed(net: Network) -> int:
    union = 0
    for m in net.reduced:
        union |= m
    return union & ~net.output


def chain_ssa(net: Network, opts: PathOptions, order: list[int]) -> Ssa:
    """The best tree over intervals of ``order`` for ``opts.objective`` within the memory
    limit (raises :class:`~accy.contraction.search.NoPathError` when no tree fits)."""
    n, size, out, limit = len(order), net.size, net.output, opts.memory_limit
    first, second = KEY[opts.objective]
    masks = [net.reduced[i] for i in order]
    before, after = [0] * (n + 1), [0] * (n + 1)
    for i in range(n):
        before[i + 1] = before[i] | masks[i]
        after[n - 1 - i] = after[n - i] | masks[n - 1 - i]
    # legs[i][j]: letters of interval i..j that outlive it (output, or held outside it)
    legs = [[0] * n for _ in range(n)]
    costs: list[list[tuple[int, int, int] | None]] = [[None] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    for i in range(n):
        legs[i][i] = masks[i]
        costs[i][i] = (0, 0, 0)
    unions = [[0] * n for _ in range(n)]
    for i in range(n):
        acc = 0
        for j in range(i, n):
            acc |= masks[j]
            unions[i][j] = acc
    lsize = [[0] * n for _ in range(n)]  # size of legs[i][j]
    col: list[list[tuple[int, int, int] | None]] = [[None] * n for _ in range(n)]  # [j][i]
    for i in range(n):
        lsize[i][i] = size[masks[i]]
        col[i][i] = costs[i][i]
    # size[a | b] as size[a] * size[b] // size[a & b]: a few distinct shared masks (the bonds)
    # instead of O(n**3) distinct unions, each a product over ~n letters
    divide = all(net.sizes)
    for length in range(2, n + 1):
        for i in range(n - length + 1):
            j = i + length - 1
            kept = unions[i][j] & (out | before[i] | after[j + 1])
            legs[i][j] = kept
            lsize[i][j] = result = size[kept]
            if limit is not None and result > limit:
                continue
            gone = ~kept
            best, k1, k2, at = None, 0, 0, 0
            row, lrow, srow, cj = costs[i], legs[i], lsize[i], col[j]
            for k in range(i, j):
                a, b = row[k], cj[k + 1]
                if a is None or b is None:
                    continue
                la, lb = lrow[k], legs[k + 1][j]
                shared = la & lb
                flops = (srow[k] * lsize[k + 1][j] // size[shared] if divide
                         else size[la | lb])
                if shared & gone:
                    flops <<= 1
                m = a[2] if a[2] > b[2] else b[2]
                c = (a[0] + b[0] + flops, a[1] + b[1] + result, m if m > result else result)
                c1, c2 = c[first], c[second]
                if best is None or c1 < k1 or (c1 == k1 and c2 < k2):
                    best, k1, k2, at = c, c1, c2, k
            costs[i][j] = col[j][i] = best
            split[i][j] = at
    if costs[0][n - 1] is None:
        raise no_path(opts)

    def tree(i: int, j: int) -> object:
        if i == j:
            return order[i]
        k = split[i][j]
        return (tree(i, k), tree(k + 1, j))

    return tree_to_ssa(tree(0, n - 1), len(net.reduced))
