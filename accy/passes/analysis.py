"""Analyses: lazily computed facts about a product, cached by (analysis, product fingerprint).

A pass asks ``ctx.analysis(name, product)``. When a pass returns a new product, the manager
carries over only the cached analyses the pass declares in ``preserves``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from accy.product import Product

ANALYSES: dict[str, Callable[[Product], Any]] = {}


def analysis[F: Callable[[Product], Any]](name: str) -> Callable[[F], F]:
    """Register an analysis function under ``name`` (duplicate names are errors)."""

    def deco(fn: F) -> F:
        if name in ANALYSES:
            raise ValueError(f"analysis {name!r} is already registered")
        ANALYSES[name] = fn
        return fn

    return deco


@dataclass
class AnalysisCache:
    entries: dict[tuple[str, str], Any] = field(default_factory=dict)
    hits: int = 0
    misses: int = 0

    def get(self, name: str, product: Product) -> Any:
        if name not in ANALYSES:
            raise KeyError(f"unknown analysis {name!r}; known: {', '.join(sorted(ANALYSES))}")
        key = (name, product.fingerprint())
        if key in self.entries:
            self.hits += 1
            return self.entries[key]
        self.misses += 1
        value = ANALYSES[name](product)
        self.entries[key] = value
        return value

    def carry_over(self, before: Product, after: Product, preserved: frozenset[str]) -> None:
        """Keep the preserved analyses of ``before`` for ``after``; drop the rest of ``before``."""
        old, new = before.fingerprint(), after.fingerprint()
        if old == new:
            return
        for (name, fp), value in list(self.entries.items()):
            if fp != old:
                continue
            del self.entries[(name, fp)]
            if name in preserved:
                self.entries[(name, new)] = value
