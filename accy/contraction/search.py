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


def no_path(opts: PathOptions) -> ContractionError:
    """The error of a search that found no path within the memory limit."""
    return ContractionError(f"no pairwise path keeps every intermediate within "
                            f"memory_limit={opts.memory_limit} elements")


@dataclass
class Part:
    """A leaf of a DP: an operand or a solved part, with its legs, costs and tree."""

    legs: int
    costs: Costs
    tree: object
