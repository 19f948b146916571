"""Slicing: fix some letters to each of their values so that every intermediate fits a limit.

Slicing letter ``c`` of size ``d`` turns one contraction into ``d`` contractions of the same
path, each with ``c`` fixed (``c`` drops out of every tensor holding it); their results are
added (``c`` summed) or written side by side (``c`` in the output). Every intermediate of a
slice is smaller by the sliced letters' sizes, at the price of repeating the steps that
did not hold them. :func:`choose_slices_mask` picks letters greedily among the letters of the
intermediates over the limit -- the one that removes the most *excess* (the sum over
intermediates of ``log(size / limit)`` where above the limit) per unit of ``log`` total
FLOPs added, and, as a second run, the one that costs the fewest total FLOPs -- until the
largest intermediate of a slice fits, and keeps the cheaper run. :func:`slice_and_search`
also changes the path (cotengra's ``slice_and_reconfigure``): after each letter it slices,
the path is re-searched for the sliced sizes by subtree reconfiguration
(:func:`accy.contraction.beam.reconfigure`), never letting the largest intermediate grow, so
later letters are chosen for a path that suits the slices. :func:`sliced_cost` reports the
total:

``flops = slices * flops(one slice) + (summed slices - 1) * size(output)``

(the second term: adding the slices' results), ``size`` = the largest intermediate of one
slice, ``write`` = all slices' writes.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass

from accy.contraction.beam import reconfigure
from accy.contraction.cost import (
    ContractionError,
    Indices,
    Network,
    Path,
    PathCost,
    Sizer,
    bits,
    linear_to_ssa,
    network,
    ssa_cost,
    ssa_to_linear,
)
from accy.contraction.search import NoPathError, PathOptions, Ssa

Step = tuple[int, int, int]  # (letters involved, letters kept, FLOPs per element: 1 or 2)


@dataclass(frozen=True)
class SlicedCost:
    """What a path costs with ``letters`` sliced (see the module docstring)."""

    letters: tuple[str, ...]
    slices: int  # contractions run: the product of the sliced letters' sizes
    per_slice: PathCost  # one slice's cost
    total: PathCost  # all slices, the additions of their results included
    unsliced: PathCost  # the path without slicing
    path: Path  # the path sliced (linear form)


def _with_sizes(net: Network, sizes: Sequence[int]) -> Network:
    return Network(net.letters, tuple(sizes), net.operands, net.output, net.local, net.reduced,
                   Sizer(sizes))


def sliced_cost_mask(net: Network, ssa: Ssa, sliced: int) -> SlicedCost:
    """:class:`SlicedCost` of ``ssa`` with the letters of bitmask ``sliced`` sliced."""
    sizes = [1 if sliced >> i & 1 else d for i, d in enumerate(net.sizes)]
    one = ssa_cost(_with_sizes(net, sizes), ssa)
    slices = summed = 1
    for b in bits(sliced):
        slices *= net.sizes[b]
        if not net.output >> b & 1:
            summed *= net.sizes[b]
    adds = (summed - 1) * net.size[net.output] if slices else 0
    total = PathCost(one.flops * slices + adds, one.size, one.write * slices)
    letters = tuple(net.letters[b] for b in bits(sliced))
    return SlicedCost(letters, slices, one, total, ssa_cost(net, ssa),
                      ssa_to_linear(ssa, len(net.operands)))


def _unions(net: Network, ssa: Ssa) -> Iterator[tuple[tuple[int, ...], int, int]]:
    """Per pairwise step of ``ssa``: its operands, the letters they hold and the letters the
    intermediate keeps (the output's and those another tensor still holds)."""
    tensors = dict(enumerate(net.reduced))
    counts: dict[int, int] = {}
    for m in tensors.values():
        for b in bits(m):
            counts[b] = counts.get(b, 0) + 1
    fresh = len(net.reduced)
    for step in ssa:
        u = 0
        for s in step:
            m = tensors.pop(s)
            u |= m
            for b in bits(m):
                counts[b] -= 1
        kept = u & (net.output | sum(1 << b for b in bits(u) if counts[b] > 0))
        for b in bits(kept):
            counts[b] += 1
        yield tuple(step), u, kept
        tensors[fresh] = kept
        fresh += 1


def _steps(net: Network, ssa: Ssa) -> list[Step]:
    """Each pairwise step's letters involved and kept, and its FLOPs per element (the
    operands' local reductions left out: they are repeated by every slice alike)."""
    return [(u, kept, len(step) - 1 + (1 if u & ~kept else 0))
            for step, u, kept in _unions(net, ssa)]


def _rate(net: Network, steps: list[Step], sliced: int, log_limit: float
          ) -> tuple[int, int, float]:
    """(total FLOPs of the pairwise steps over all slices, the largest intermediate of one
    slice, the excess over the limit) with the letters of ``sliced`` sliced."""
    size = net.size
    flops = sum(f * size[u & ~sliced] for u, _, f in steps)
    slices, summed = size[sliced], size[sliced & ~net.output]
    adds = (summed - 1) * size[net.output & ~sliced] * (slices // max(summed, 1))
    largest, excess = 0, 0.0
    for _, kept, _ in steps:
        k = size[kept & ~sliced]
        largest = max(largest, k)
        if k > 1 and math.log(k) > log_limit:
            excess += math.log(k) - log_limit
    for full, reduced in zip(net.operands, net.reduced, strict=True):
        if full != reduced:
            largest = max(largest, size[reduced & ~sliced])
    return slices * flops + adds, largest, excess


def _candidates(net: Network, ssa: Ssa, sliced: int, limit: int, allow_output: bool) -> list[int]:
    """Letters (not yet sliced, of size > 1) of the intermediates over ``limit``."""
    sizes = [1 if sliced >> i & 1 else d for i, d in enumerate(net.sizes)]
    over = _over_limit_letters(_with_sizes(net, sizes), ssa, limit) & ~sliced
    if not allow_output:
        over &= ~net.output
    return [b for b in bits(over) if net.sizes[b] > 1]


def _next_letter(net: Network, steps: list[Step], sliced: int, limit: int,
                 candidates: list[int], by_excess: bool) -> int:
    """The candidate to slice next: most excess removed per log FLOPs added (``by_excess``),
    else the fewest total FLOPs; ties to the smaller slice, then the lower letter."""
    log_limit = math.log(max(limit, 1))
    total, _, excess = _rate(net, steps, sliced, log_limit)

    def rank(b: int) -> tuple[float, int, int]:
        t, largest, e = _rate(net, steps, sliced | 1 << b, log_limit)
        if not by_excess:
            return t, largest, b
        removed = excess - e
        added = math.log(max(t, 1)) - math.log(max(total, 1))
        return (added / removed if removed > 1e-12 else math.inf), largest, b

    return min(candidates, key=rank)


def _choose(net: Network, ssa: Ssa, limit: int, allow_output: bool, by_excess: bool,
            sliced: int = 0) -> int:
    steps = _steps(net, ssa)
    while True:
        cost = sliced_cost_mask(net, ssa, sliced)
        if cost.per_slice.size <= limit:
            return sliced
        candidates = _candidates(net, ssa, sliced, limit, allow_output)
        if not candidates:
            raise NoPathError(f"slicing cannot bring every intermediate within "
                              f"{limit} elements (one slice still needs {cost.per_slice.size})",
                              cost.per_slice.size)
        sliced |= 1 << _next_letter(net, steps, sliced, limit, candidates, by_excess)


def choose_slices_mask(net: Network, ssa: Ssa, limit: int, allow_output: bool = True) -> int:
    """Letters (a bitmask) to slice so that every intermediate of ``ssa`` fits ``limit``
    elements: the cheaper of the two greedy runs of the module docstring. Raises
    :class:`NoPathError` when even slicing every candidate letter does not fit
    (``allow_output=False``: never slice output letters)."""
    runs = [_choose(net, ssa, limit, allow_output, by_excess) for by_excess in (True, False)]
    return min(runs, key=lambda m: (sliced_cost_mask(net, ssa, m).total.flops, m))


def slice_and_search(net: Network, ssa: Ssa, limit: int, opts: PathOptions | None = None,
                     allow_output: bool = True) -> tuple[Ssa, int]:
    """A path and letters to slice (bitmask) so that every intermediate fits ``limit``:
    one letter at a time, by the excess rule, each followed by subtree reconfiguration of the
    path for the sliced sizes (``opts``' ``reconfigure_leaves``; the largest intermediate
    never grows); returned only where cheaper in total than :func:`choose_slices_mask` on
    ``ssa`` unchanged. Raises :class:`NoPathError` as :func:`choose_slices_mask` does."""
    opts = opts or PathOptions()
    fixed = choose_slices_mask(net, ssa, limit, allow_output)
    best = (sliced_cost_mask(net, ssa, fixed).total.flops, ssa, fixed)
    if opts.reconfigure_leaves < 3:
        return best[1], best[2]
    old = sys.getrecursionlimit()  # reconfiguration recurses along the tree's depth
    sys.setrecursionlimit(max(old, 4 * len(net.reduced) + 200))
    try:
        path, sliced = ssa, 0
        while True:
            steps = _steps(net, path)
            largest = sliced_cost_mask(net, path, sliced).per_slice.size
            if largest <= limit:
                break
            candidates = _candidates(net, path, sliced, limit, allow_output)
            if not candidates:
                return best[1], best[2]
            sliced |= 1 << _next_letter(net, steps, sliced, limit, candidates, True)
            now = sliced_cost_mask(net, path, sliced).per_slice.size
            sizes = [1 if sliced >> i & 1 else d for i, d in enumerate(net.sizes)]
            local = PathOptions(**{**opts.__dict__, "memory_limit": max(limit, now),
                                   "objective": "flops", "max_time": None})
            path = reconfigure(_with_sizes(net, sizes), path, local)
    finally:
        sys.setrecursionlimit(old)
    total = sliced_cost_mask(net, path, sliced).total.flops
    return (path, sliced) if total < best[0] else (best[1], best[2])


def _over_limit_letters(net: Network, ssa: Ssa, limit: int) -> int:
    """The union of the letters of every intermediate (and reduced operand) over ``limit``."""
    union = 0
    for full, reduced in zip(net.operands, net.reduced, strict=True):
        if full != reduced and net.size[reduced] > limit:
            union |= reduced
    for _, _, kept in _unions(net, ssa):
        if net.size[kept] > limit:
            union |= kept
    return union


def slice_path(inputs: Sequence[Indices], output: Indices, size_dict: Mapping[str, int],
               path: Sequence[Sequence[int]], memory_limit: int,
               allow_output: bool = True, search: bool = False,
               options: PathOptions | None = None) -> SlicedCost:
    """Choose letters to slice so every intermediate of ``path`` (linear form) fits
    ``memory_limit`` elements, and report the sliced contraction's cost. With ``search``
    the path may change too (:func:`slice_and_search`, with ``options``' reconfiguration
    settings); the result's ``path`` is the one sliced.

    >>> c = slice_path(["ab", "bc", "cd"], "ad", dict(a=10, b=2, c=10, d=2), [(0, 1), (0, 1)], 5)
    >>> c.letters, c.slices, c.per_slice.size, c.total.flops, c.unsliced.flops
    (('a', 'c'), 100, 2, 980, 800)
    """
    if isinstance(memory_limit, bool) or not isinstance(memory_limit, int) or memory_limit < 0:
        raise ContractionError(f"memory_limit must be an int >= 0, got {memory_limit!r}")
    net = network(inputs, output, size_dict)
    ssa = linear_to_ssa(path, len(net.operands))
    if search:
        ssa, mask = slice_and_search(net, ssa, memory_limit, options, allow_output)
    else:
        mask = choose_slices_mask(net, ssa, memory_limit, allow_output)
    return sliced_cost_mask(net, ssa, mask)


def sliced_cost(inputs: Sequence[Indices], output: Indices, size_dict: Mapping[str, int],
                path: Sequence[Sequence[int]], letters: Collection[str]) -> SlicedCost:
    """The cost of ``path`` (linear form) with ``letters`` sliced."""
    net = network(inputs, output, size_dict)
    unknown = sorted(set(letters) - set(net.letters))
    if unknown:
        raise ContractionError(f"cannot slice letters {unknown}: not in the contraction")
    return sliced_cost_mask(net, linear_to_ssa(path, len(net.operands)), net.mask(letters))
