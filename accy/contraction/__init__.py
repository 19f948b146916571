"""Contraction paths: which pairs of operands an einsum contracts, in which order.

Strategies (``exact``, ``beam``, ``greedy``, ``auto``, ``hyper``) live in :data:`STRATEGIES`
(:mod:`accy.contraction.paths`, which describes them; one module each, sharing
:mod:`accy.contraction.search`); costs are in accy's own units (:mod:`accy.contraction.cost`).
Importing :mod:`accy` also registers the strategies into opt_einsum as ``accy-exact``,
``accy-beam``, ``accy-greedy``, ``accy-auto``, ``accy-hyper``; slicing for memory limits is
in :mod:`accy.contraction.slicing`::

    from accy.contraction import find_path
    find_path("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]).path   # [(0, 1), (0, 1)]

This package imports nothing from accy but :mod:`accy.errors`.
"""

from accy.contraction.cost import (
    ContractionError,
    Objective,
    PathCost,
    linear_to_ssa,
    naive_path,
    parse_spec,
    path_cost,
    sizes_from_shapes,
    ssa_to_linear,
)
from accy.contraction.paths import (
    STRATEGIES,
    PathResult,
    Strategy,
    find_path,
    get_strategy,
    register_strategy,
    search_path,
)
from accy.contraction.search import ExactStateLimitError, NoPathError, PathOptions
from accy.contraction.slicing import SlicedCost, slice_path, sliced_cost

__all__ = [
    "STRATEGIES", "ContractionError", "ExactStateLimitError", "NoPathError", "Objective",
    "PathCost", "PathOptions", "PathResult", "SlicedCost", "Strategy", "find_path",
    "get_strategy", "linear_to_ssa", "naive_path", "parse_spec", "path_cost",
    "register_strategy", "search_path", "sizes_from_shapes", "slice_path", "sliced_cost",
    "ssa_to_linear",
]
