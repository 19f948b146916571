"""What the contraction path strategies share: options, path and cost shapes, cost keys.

The strategies themselves are :mod:`accy.contraction.exact`, :mod:`~accy.contraction.beam`
and :mod:`~accy.contraction.greedy`; :mod:`accy.contraction.paths` registers them and
describes each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from accy.contraction.cost import OBJECTIVES, ContractionError, Network, Objective, ssa_cost

Fallback = Literal["error", "beam", "greedy"]
Ssa = list[tuple[int, ...]]
Costs = tuple[int, int, int]  # (flops, write, size) of the pairwise steps of a (sub)tree


class ExactStateLimitError(ContractionError):
    """``exact`` needed more dynamic-programming states than ``exact_state_limit`` allows."""


class NoPathError(ContractionError):
    """No pairwise path keeps every intermediate within the memory limit.

    ``smallest`` is the smallest largest intermediate of any path the strategies found (None
    where no search ran to the end): the lowest limit that is known to work, or the one to
    slice down from (:func:`accy.contraction.slicing.slice_path`).
    """

    def __init__(self, message: str, smallest: int | None = None) -> None:
        super().__init__(message)
        self.smallest = smallest


EXACT_STATES_PER_S = 100_000
"""states ``exact`` is allowed per second of ``max_time``: a conservative rate (170k-550k
states/s measured on 16-24-operand regular graphs and lattices on a loaded 2-core machine), so
the search stays within the budget on slower machines too"""


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
    max_time: float | None = None
    """seconds a budgeted search may take (``hyper``'s anytime loop; ``exact``'s state
    limit grows to what the budget allows, see :meth:`state_limit`). None: no time budget.
    A result under a time budget depends on the machine's speed; ``max_repeats`` does not"""
    max_repeats: int | None = None
    """most randomized trials ``hyper`` runs (None: 64 when ``max_time`` is None too, else no
    bound but the time); an effort budget, so the result is reproducible"""
    seed: int = 0
    """seed of ``hyper``'s random trials"""

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ContractionError(f"unknown objective {self.objective!r}; valid: "
                                   f"{', '.join(OBJECTIVES)}")
        for name, low in (("exact_state_limit", 1), ("beam_width", 1), ("exact_outer_limit", 0),
                          ("auto_beam_width", 0), ("reconfigure_leaves", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ContractionError(f"{name} must be an int >= {low}, got {value!r}")
        if self.max_repeats is not None and (isinstance(self.max_repeats, bool)
                                             or not isinstance(self.max_repeats, int)
                                             or self.max_repeats < 1):
            raise ContractionError(f"max_repeats must be None or an int >= 1, "
                                   f"got {self.max_repeats!r}")
        budget = self.max_time
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int | float)
                                   or not budget > 0 or budget == float("inf")):
            raise ContractionError(f"max_time must be None or a finite number of seconds > 0, "
                                   f"got {budget!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ContractionError(f"seed must be an int, got {self.seed!r}")
        limit = self.memory_limit
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or limit < 0):
            raise ContractionError(f"memory_limit must be None or an int >= 0, got {limit!r}")
        if self.fallback not in ("error", "beam", "greedy"):
            raise ContractionError(f"unknown fallback {self.fallback!r}; valid: error, beam, "
                                   f"greedy")

    def state_limit(self) -> int:
        """States ``exact`` may solve: ``exact_state_limit``, raised to what ``max_time``
        allows at :data:`EXACT_STATES_PER_S` when a time budget is given."""
        if self.max_time is None:
            return self.exact_state_limit
        return max(self.exact_state_limit, int(self.max_time * EXACT_STATES_PER_S))

    def width(self, n: int) -> int:
        """Beam width for ``n`` operands: ``auto_beam_width`` up to 12 operands, then shrinking
        as ``1/n**2`` (the work of a step grows as ``n**2``), never below ``beam_width``."""
        widened = self.auto_beam_width * 144 // max(n, 1) ** 2
        return max(self.beam_width, min(self.auto_beam_width, widened))


KEY = {"flops": (0, 1), "size": (2, 0), "write": (1, 0)}  # objective -> positions in Costs


def cost_key(costs: Costs, objective: Objective) -> tuple[int, int]:
    """What the search minimizes: the objective's cost, then its tie-breaker."""
    p, s = KEY[objective]
    return costs[p], costs[s]


def join_costs(a: Costs, b: Costs, flops: int, result: int) -> Costs:
    """Costs of a tree joining subtrees of costs ``a`` and ``b`` by one pairwise step."""
    return a[0] + b[0] + flops, a[1] + b[1] + result, max(a[2], b[2], result)


def pair_costs(net: Network, ssa: Ssa) -> Costs:
    """Costs of the pairwise steps of an SSA path (its local reductions left out)."""
    total = ssa_cost(net, ssa)
    flops, largest, written = net.local_cost()
    return total.flops - flops, total.write - written, total.size


def no_path(opts: PathOptions, smallest: int | None = None) -> NoPathError:
    """The error of a search that found no path within the memory limit (``smallest``: the
    smallest largest intermediate found without the limit)."""
    found = "" if smallest is None else (f"; the smallest largest intermediate found is "
                                         f"{smallest} elements (slice letters to go lower)")
    return NoPathError(f"no pairwise path keeps every intermediate within "
                       f"memory_limit={opts.memory_limit} elements{found}", smallest)


@dataclass
class Part:
    """A leaf of a DP: an operand or a solved part, with its legs, costs and tree."""

    legs: int
    costs: Costs
    tree: object
