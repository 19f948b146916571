"""Registers accy's path strategies into opt_einsum as ``accy-exact``, ``accy-beam``,
``accy-greedy`` and ``accy-auto`` (``import accy`` does this once)::

    import accy, opt_einsum
    opt_einsum.contract_path("ij,jk,kl->il", a, b, c, optimize="accy-auto")

opt_einsum passes ``memory_limit`` (largest intermediate, in elements, or None); every other
option is :class:`~accy.contraction.paths.PathOptions`' default. opt_einsum asks for a path
only for three or more operands.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

import opt_einsum.paths

from accy.contraction.paths import STRATEGIES, PathOptions, Strategy

PREFIX = "accy-"


PathFn = Callable[[list[Collection[str]], Collection[str], dict[str, int], int | None],
                  list[tuple[int, ...]]]


def as_path_fn(strategy: Strategy) -> PathFn:
    """``strategy`` as an opt_einsum path function ``(inputs, output, size_dict, memory_limit)``."""

    def path_fn(inputs: list[Collection[str]], output: Collection[str], size_dict: dict[str, int],
                memory_limit: int | None = None) -> list[tuple[int, ...]]:
        limit = None if memory_limit in (None, -1, float("inf")) else int(memory_limit)
        return strategy(list(inputs), output, size_dict, PathOptions(memory_limit=limit))

    path_fn.__name__ = f"accy_{strategy.__name__}"
    path_fn.__doc__ = strategy.__doc__
    return path_fn


def register() -> None:
    """Register every strategy of :data:`STRATEGIES` as ``accy-<name>`` (idempotent)."""
    for name, strategy in STRATEGIES.items():
        try:
            opt_einsum.paths.register_path_fn(PREFIX + name, as_path_fn(strategy))
        except KeyError:  # already there: this module was imported before
            pass


register()
