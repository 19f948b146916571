"""Slicing: fix some letters to each of their values so that every intermediate fits a limit.

Slicing letter ``c`` of size ``d`` turns one contraction into ``d`` contractions of the same
path, each with ``c`` fixed (``c`` drops out of every tensor holding it); their results are
added (``c`` summed) or written side by side (``c`` in the output). Every intermediate of a
slice is smaller by the sliced letters' sizes, at the price of repeating the steps that
did not hold them. :func:`choose_slices` picks letters greedily -- among the letters of the
intermediates over the limit, the one whose slicing costs the fewest total FLOPs -- until
the largest intermediate of a slice fits; :func:`sliced_cost` reports the total:

``flops = slices * flops(one slice) + (summed slices - 1) * size(output)``

(the second term: adding the slices' results), ``size`` = the largest intermediate of one
slice, ``write`` = all slices' writes.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from accy.contraction.cost import (
    ContractionError,
    Indices,
    Network,
    PathCost,
    Sizer,
    bits,
    linear_to_ssa,
    network,
    ssa_cost,
)
from accy.contraction.search import NoPathError, Ssa


@dataclass(frozen=True)
class SlicedCost:
    """What a path costs with ``letters`` sliced (see the module docstring)."""

    letters: tuple[str, ...]
    slices: int  # contractions run: the product of the sliced letters' sizes
    per_slice: PathCost  # one slice's cost
    total: PathCost  # all slices, the additions of their results included
    unsliced: PathCost  # the path without slicing


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
    return SlicedCost(letters, slices, one, total, ssa_cost(net, ssa))


def choose_slices_mask(net: Network, ssa: Ssa, limit: int, allow_output: bool = True) -> int:
    """Letters (a bitmask) to slice so that every intermediate of ``ssa`` fits ``limit``
    elements; raises :class:`NoPathError` when even slicing every candidate letter does not
    fit (``allow_output=False``: never slice output letters)."""
    sliced = 0
    while True:
        cost = sliced_cost_mask(net, ssa, sliced)
        if cost.per_slice.size <= limit:
            return sliced
        sizes = [1 if sliced >> i & 1 else d for i, d in enumerate(net.sizes)]
        over = _over_limit_letters(_with_sizes(net, sizes), ssa, limit)
        if not allow_output:
            over &= ~net.output
        over &= ~sliced
        candidates = [b for b in bits(over) if net.sizes[b] > 1]
        if not candidates:
            raise NoPathError(f"slicing cannot bring every intermediate within "
                              f"{limit} elements (one slice still needs {cost.per_slice.size})",
                              cost.per_slice.size)

        def rank(b: int, now: int = sliced) -> tuple[int, int, int]:
            c = sliced_cost_mask(net, ssa, now | 1 << b)
            return c.total.flops, c.per_slice.size, b

        sliced |= 1 << min(candidates, key=rank)


def _over_limit_letters(net: Network, ssa: Ssa, limit: int) -> int:
    """The union of the letters of every intermediate (and reduced operand) over ``limit``."""
    tensors = dict(enumerate(net.reduced))
    union = 0
    for full, reduced in zip(net.operands, net.reduced, strict=True):
        if full != reduced and net.size[reduced] > limit:
            union |= reduced
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
        if net.size[kept] > limit:
            union |= kept
        tensors[fresh] = kept
        fresh += 1
    return union


def slice_path(inputs: Sequence[Indices], output: Indices, size_dict: Mapping[str, int],
               path: Sequence[Sequence[int]], memory_limit: int,
               allow_output: bool = True) -> SlicedCost:
    """Choose letters to slice so every intermediate of ``path`` (linear form) fits
    ``memory_limit`` elements, and report the sliced contraction's cost.

    >>> c = slice_path(["ab", "bc", "cd"], "ad", dict(a=10, b=2, c=10, d=2), [(0, 1), (0, 1)], 5)
    >>> c.letters, c.slices, c.per_slice.size, c.total.flops, c.unsliced.flops
    (('a', 'c'), 100, 2, 980, 800)
    """
    if isinstance(memory_limit, bool) or not isinstance(memory_limit, int) or memory_limit < 0:
        raise ContractionError(f"memory_limit must be an int >= 0, got {memory_limit!r}")
    net = network(inputs, output, size_dict)
    ssa = linear_to_ssa(path, len(net.operands))
    return sliced_cost_mask(net, ssa, choose_slices_mask(net, ssa, memory_limit, allow_output))


def sliced_cost(inputs: Sequence[Indices], output: Indices, size_dict: Mapping[str, int],
                path: Sequence[Sequence[int]], letters: Collection[str]) -> SlicedCost:
    """The cost of ``path`` (linear form) with ``letters`` sliced."""
    net = network(inputs, output, size_dict)
    unknown = sorted(set(letters) - set(net.letters))
    if unknown:
        raise ContractionError(f"cannot slice letters {unknown}: not in the contraction")
    return sliced_cost_mask(net, linear_to_ssa(path, len(net.operands)), net.mask(letters))
