"""Registers accy's path strategies into opt_einsum as ``accy-exact``, ``accy-beam``,
``accy-greedy``, ``accy-auto`` and ``accy-hyper`` (``import accy`` does this once)::

    import accy, opt_einsum
    opt_einsum.contract_path("ij,jk,kl->il", a, b, c, optimize="accy-auto")

opt_einsum passes ``memory_limit`` (largest intermediate, in elements, or None); the other
options are :class:`~accy.contraction.paths.PathOptions`' defaults, except that
``accy-exact`` gets ``max_time=1`` (its state limit grows to what a second allows, instead
of raising past 1024 states at ~14 operands). For other options (a time or effort budget for
``accy-hyper``, say) pass an optimizer object::

    opt_einsum.contract_path(spec, *arrays, optimize=AccyOptimizer("hyper", max_time=10))

opt_einsum asks for a path only for three or more operands.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import opt_einsum.paths

from accy.contraction.paths import STRATEGIES, PathOptions, Strategy, get_strategy

PREFIX = "accy-"
REGISTERED_OPTIONS: dict[str, dict[str, Any]] = {"exact": {"max_time": 1.0}}


PathFn = Callable[[list[Collection[str]], Collection[str], dict[str, int], int | None],
                  list[tuple[int, ...]]]


def _limit(memory_limit: Any) -> int | None:
    return None if memory_limit in (None, -1, float("inf")) else int(memory_limit)


def as_path_fn(strategy: Strategy, **options: Any) -> PathFn:
    """``strategy`` as an opt_einsum path function ``(inputs, output, size_dict, memory_limit)``
    (``options``: further :class:`PathOptions` fields)."""

    def path_fn(inputs: list[Collection[str]], output: Collection[str], size_dict: dict[str, int],
                memory_limit: int | None = None) -> list[tuple[int, ...]]:
        opts = PathOptions(memory_limit=_limit(memory_limit), **options)
        return strategy(list(inputs), output, size_dict, opts)

    path_fn.__name__ = f"accy_{strategy.__name__}"
    path_fn.__doc__ = strategy.__doc__
    return path_fn


class AccyOptimizer(opt_einsum.paths.PathOptimizer):
    """An accy strategy with any :class:`PathOptions` as an opt_einsum ``optimize=`` object."""

    def __init__(self, strategy: str = "hyper", **options: Any) -> None:
        self.strategy, self.options = strategy, options
        self._fn = get_strategy(strategy)
        PathOptions(**options)  # bad options fail here, not at the first contraction

    def __call__(self, inputs: list[Collection[str]], output: Collection[str],
                 size_dict: dict[str, int], memory_limit: int | None = None
                 ) -> list[tuple[int, ...]]:
        opts = PathOptions(**{**self.options, "memory_limit": _limit(memory_limit)})
        return self._fn(list(inputs), output, size_dict, opts)


def register() -> None:
    """Register every strategy of :data:`STRATEGIES` as ``accy-<name>`` (idempotent)."""
    for name, strategy in STRATEGIES.items():
        try:
            opt_einsum.paths.register_path_fn(
                PREFIX + name, as_path_fn(strategy, **REGISTERED_OPTIONS.get(name, {})))
        except KeyError:  # already there: this module was imported before
            pass


register()
