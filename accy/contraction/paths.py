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
* ``greedy`` -- the cheapest of four plain greedy runs (:mod:`accy.contraction.trials`):
  repeatedly contract the pair sharing a letter that removes the most elements (result size
  minus operand sizes, exact integers), with every pair queued or each tensor's best only,
  ties to the pair queued first or to the older pair (the last two: opt_einsum's greedy);
  up to 300 operands also the lazy greedy :func:`accy.contraction.greedy.greedy_ssa` (the
  bound ``exact`` and ``beam`` start from). What shares no letter is joined smallest first.
  About 0.1 s at 1,000 operands on an idle machine (the four runs together).
* ``auto`` -- ``exact`` while it stays within ``exact_state_limit`` (chain-like networks by
  the interval DP of :mod:`accy.contraction.chain`, at any size up to 200 operands), else
  ``beam``. Past ``exact_outer_limit`` operands it polishes exact's tree by subtree
  reconfiguration, which may bring in the outer products exact's space lacks (so ``auto``
  may beat ``exact``). Past :data:`AUTO_HYPER_MIN_N` operands it also runs ``hyper`` with a
  small effort budget (:data:`AUTO_HYPER_REPEATS` trials, no clock) from that path and the
  greedy one and keeps the cheapest, so it is never worse than the beam path alone. Past
  :data:`AUTO_BEAM_MAX_N` operands (where beam takes seconds to minutes) it runs no
  exact/beam: only ``hyper`` with :data:`AUTO_LARGE_REPEATS` trials from the greedy path and
  at most :data:`AUTO_RECONFIGURE_BUDGET` reconfigured subtrees of the best tree (an effort
  bound: about a second at 1,000 operands on an idle machine, deterministic).
* ``hyper`` -- a budgeted anytime search (:mod:`accy.contraction.hyper`): Boltzmann-sampled
  greedy restarts, recursive partitioning (KaHyPar when installed, else a built-in spectral
  bisection) and reconfiguration of the best trees, within ``max_time`` seconds or
  ``max_repeats`` trials (64 by default), starting from the greedy path and, up to 120
  operands, ``auto``'s. The one strategy meant to be given time.

Under a memory limit every strategy that finds no path falls back, in order, to greedy,
eager greedy, and a search minimizing the largest intermediate; only when none fits does it
raise :class:`NoPathError`, whose message and ``smallest`` attribute give the smallest
largest intermediate found. :func:`search_path` goes one step further when
``slicing=True``: it slices letters of the unconstrained path, re-searching the path for the
sliced sizes after each letter (:mod:`accy.contraction.slicing`), and reports the sliced
contraction's total cost.

Determinism: nothing reads the clock, randomness or hash order, except ``hyper`` (and
``exact``'s grown state limit) under ``max_time``, whose result depends on the machine's
speed; ``hyper``'s trials are seeded (``seed``), so under ``max_repeats`` it is reproducible.
Letters are sorted and operands keep their positions. Ties on the objective's key go to the
candidate met first in a fixed order: subsets by bitmask (lower first), pairs by operand ids
(lower first), beam children in generation order. Equal inputs always give the same path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from accy.contraction.beam import RECONFIGURE_MAX_N, beam_ssa, reconfigure
from accy.contraction.chain import chain_order
from accy.contraction.cost import (
    ContractionError,
    Indices,
    Network,
    Path,
    PathCost,
    linear_to_ssa,
    naive_path,
    network,
    parse_spec,
    sizes_from_shapes,
    ssa_cost,
    ssa_to_linear,
)
from accy.contraction.exact import exact_ssa
from accy.contraction.greedy import best_greedy_ssa, greedy_ssa, score_greedy_ssa, try_greedy
from accy.contraction.hyper import hyper_ssa
from accy.contraction.search import (
    ExactStateLimitError,
    NoPathError,
    PathOptions,
    Ssa,
    cost_key,
    no_path,
    pair_costs,
)
from accy.contraction.slicing import SlicedCost, slice_and_search, sliced_cost_mask

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
    sliced: SlicedCost | None = None
    """set when the path only fits the memory limit with letters sliced (``slicing=True``)"""


def search_path(inputs: Sequence[Indices], output: Indices, size_dict: Mapping[str, int],
                strategy: str = "auto", options: PathOptions | None = None,
                slicing: bool = False, slice_output: bool = True) -> PathResult:
    """Run ``strategy`` and cost its path next to the naive left-to-right one.

    With ``slicing``, a memory limit no pairwise path meets is met by slicing letters of the
    unconstrained path (output letters only when ``slice_output``), re-searched for the
    sliced sizes (:func:`accy.contraction.slicing.slice_and_search`); the result's ``path``
    is then the sliced path, and ``sliced`` says which letters and what the sliced
    contraction costs in total.

    >>> search_path(["ij", "jk", "kl"], "il", {"i": 9, "j": 9, "k": 9, "l": 1}).path
    [(1, 2), (0, 1)]
    """
    fn = get_strategy(strategy)
    net, n = network(inputs, output, size_dict), len(inputs)
    sliced = None
    try:
        path = fn(inputs, output, size_dict, options)
    except NoPathError:
        if not slicing or options is None or options.memory_limit is None:
            raise
        free = PathOptions(**{**options.__dict__, "memory_limit": None})
        ssa, mask = slice_and_search(net, linear_to_ssa(fn(inputs, output, size_dict, free), n),
                                     options.memory_limit, options, slice_output)
        sliced = sliced_cost_mask(net, ssa, mask)
        path = sliced.path
    return PathResult(path, ssa_cost(net, linear_to_ssa(path, n)),
                      ssa_cost(net, linear_to_ssa(naive_path(n), n)), strategy, sliced)


def find_path(spec: str, shapes: Sequence[Sequence[int]], strategy: str = "auto",
              options: PathOptions | None = None) -> PathResult:
    """:func:`search_path` for an einsum ``spec`` over operands of ``shapes``.

    >>> find_path("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]).path
    [(0, 1), (0, 1)]
    """
    terms, output = parse_spec(spec)
    return search_path(terms, output, sizes_from_shapes(terms, shapes), strategy, options)


AUTO_HYPER_MIN_N = 30
FALLBACK_BEAM_MAX_N = 300  # past it, a failing limited search does not also try beam
AUTO_HYPER_REPEATS = 8
AUTO_BEAM_MAX_N = 300  # past it auto runs no exact/beam (seconds to minutes there), only:
AUTO_LARGE_REPEATS = 4  # hyper trials (score greedy and partitioning, alternately), and
AUTO_RECONFIGURE_BUDGET = 200  # subtrees reconfiguration re-solves, at most


def cheap_candidates(net: Network, opts: PathOptions) -> list[Ssa | None]:
    """Today's ``auto`` path: ``exact`` within the state limit, else ``beam`` (None where
    neither fits the memory limit)."""
    n = len(net.reduced)
    hint = None if n <= opts.exact_outer_limit else try_greedy(net, opts)
    try:
        try:
            path = exact_ssa(net, opts, hint)
        except ExactStateLimitError:
            return [beam_ssa(net, opts, hint)]
    except NoPathError:
        return [hint]
    if n > opts.exact_outer_limit and 3 <= opts.reconfigure_leaves and n <= RECONFIGURE_MAX_N:
        path = reconfigure(net, path, opts)  # exact's space there has no outer products
    return [path]


def _auto_ssa(net: Network, opts: PathOptions) -> Ssa:
    """``exact`` within the state limit, else ``beam``; past 30 operands also a small
    ``hyper``; past ``AUTO_BEAM_MAX_N`` operands a small ``hyper`` alone."""
    if len(net.reduced) > AUTO_BEAM_MAX_N:
        large = PathOptions(**{**opts.__dict__, "max_time": None,
                               "max_repeats": AUTO_LARGE_REPEATS})
        return hyper_ssa(net, large, lambda: [score_greedy_ssa(net, opts)],
                         AUTO_RECONFIGURE_BUDGET)
    (path,) = cheap_candidates(net, opts)
    if len(net.reduced) < AUTO_HYPER_MIN_N or chain_order(net) is not None:
        if path is None:
            raise no_path(opts)
        return path
    small = PathOptions(**{**opts.__dict__, "max_time": None,
                           "max_repeats": AUTO_HYPER_REPEATS})
    return hyper_ssa(net, small, lambda: [path, score_greedy_ssa(net, opts)])


def _hyper_ssa(net: Network, opts: PathOptions) -> Ssa:
    """A budgeted anytime search (see :mod:`accy.contraction.hyper`)."""
    return hyper_ssa(net, opts)


def _limited_fallback(net: Network, opts: PathOptions,
                      search: Callable[[Network, PathOptions], Ssa]) -> Ssa:
    """Under a memory limit: greedy, eager greedy, the strategy's own unconstrained path (a
    limit taken from it is then always met), then the smallest-intermediate search; a
    :class:`NoPathError` naming the smallest largest intermediate found when none fits."""
    for path in (try_greedy(net, opts), try_greedy(net, opts, False),
                 score_greedy_ssa(net, opts)):
        if path is not None and ssa_cost(net, path).size <= opts.memory_limit:  # type: ignore
            return path
    unlimited = PathOptions(**{**opts.__dict__, "memory_limit": None})
    searches = [search] + [s for s in (_auto_ssa, beam_ssa) if s is not search]
    if len(net.reduced) > FALLBACK_BEAM_MAX_N:
        searches = searches[:2]
    fitting, own = [], None
    for fn in searches:  # a limit any of these strategies' own paths meets is met
        try:
            path = fn(net, unlimited)
        except ContractionError:  # e.g. exact past its state limit
            continue
        own = path if own is None else own
        if ssa_cost(net, path).size <= opts.memory_limit:  # type: ignore[operator]
            fitting.append(path)
    if fitting:
        return min(fitting, key=lambda p: cost_key(pair_costs(net, p), opts.objective))
    free = PathOptions(**{**opts.__dict__, "memory_limit": None, "objective": "size",
                          "max_time": None, "max_repeats": AUTO_HYPER_REPEATS})
    found = [p for p in [*cheap_candidates(net, free), own] if p is not None]
    found += [greedy_ssa(net, free), greedy_ssa(net, free, lazy=False)]
    if len(net.reduced) >= 3:
        found.append(hyper_ssa(net, free, lambda: list(found)))
    smallest = min(found, key=lambda p: cost_key(pair_costs(net, p), "size"))
    size = ssa_cost(net, smallest).size
    if size <= opts.memory_limit:  # type: ignore[operator]
        return smallest
    raise no_path(opts, size)


def _exact_or_fallback_ssa(net: Network, opts: PathOptions) -> Ssa:
    """Exact search by dynamic programming over subsets (see :mod:`accy.contraction.paths`)."""
    try:
        return exact_ssa(net, opts)
    except ExactStateLimitError:
        if opts.fallback == "beam":
            return beam_ssa(net, opts)
        if opts.fallback == "greedy":
            return greedy_ssa(net, opts)
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
            raise NoPathError(f"the output alone has {net.size[net.output]} elements, "
                              f"more than memory_limit={opts.memory_limit}",
                              net.size[net.output])
        try:
            ssa = search(net, opts)
        except NoPathError:
            if opts.memory_limit is None:
                raise
            ssa = _limited_fallback(net, opts, search)
        return ssa_to_linear(ssa, len(net.operands))

    strategy.__name__ = strategy.__qualname__ = name
    strategy.__doc__ = f"The ``{name}`` path strategy: {search.__doc__}"
    return register_strategy(name, strategy)


exact = _strategy("exact", _exact_or_fallback_ssa)
beam = _strategy("beam", beam_ssa)
greedy = _strategy("greedy", best_greedy_ssa)
auto = _strategy("auto", _auto_ssa)
hyper = _strategy("hyper", _hyper_ssa)
