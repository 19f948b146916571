"""Programs: named functions over nodes, and the stages a program goes through."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import Enum

from accy.ir.memo import memoized
from accy.ir.node import Node, topological
from accy.ir.ops import Op


class Stage(Enum):
    """The stages of preparation, in order. The value is the product name."""

    semantic = "semantic"
    contract = "contract"
    tensor = "tensor"
    dispatch = "dispatch"
    memory = "memory"
    kernel = "kernel"
    target = "target"

    @property
    def index(self) -> int:
        return list(Stage).index(self)

    @classmethod
    def parse(cls, text: str) -> Stage:
        try:
            return cls(text)
        except ValueError:
            raise ValueError(
                f"unknown stage {text!r}; valid stages: {', '.join(s.value for s in cls)}"
            ) from None


_ORDER = "_memo_nodes"  # the topological order, kept on the immutable function or program


def _order(owner: Function | Program, roots) -> tuple[Node, ...]:
    """``topological(roots)``, computed once per ``owner``: passes, analyses and verification
    ask for a function's nodes many times per stage."""
    found = owner.__dict__.get(_ORDER)
    if found is None:
        found = tuple(topological(roots))
        object.__setattr__(owner, _ORDER, found)
    return found


def _without_order(state: dict) -> dict:
    """Pickled state without the cached order (recomputed on demand after loading)."""
    return {k: v for k, v in state.items() if k != _ORDER} if _ORDER in state else state


@dataclass(frozen=True)
class Function:
    """A named function: typed parameters (``param`` nodes 0..n-1) and one or more results.

    Names are labels: they are printed but play no part in fingerprints.
    """

    name: str
    params: tuple[Node, ...]
    param_names: tuple[str, ...]
    results: tuple[Node, ...]

    def __post_init__(self) -> None:
        if len(self.params) != len(self.param_names):
            raise ValueError(f"function {self.name}: {len(self.params)} params but "
                             f"{len(self.param_names)} names")
        if len(set(self.param_names)) != len(self.param_names):
            raise ValueError(f"function {self.name}: parameter names repeat: {self.param_names}")
        for i, p in enumerate(self.params):
            if p.op is not Op.PARAM or p.attr("index") != i:
                raise ValueError(f"function {self.name}: parameter {i} is not param #{i}")
        if not self.results:
            raise ValueError(f"function {self.name} has no results")

    def nodes(self) -> list[Node]:
        """Parameters, then every node the results need, operands before users (a new list
        each call; the order is computed once per function)."""
        return list(_order(self, (*self.params, *self.results)))

    def __getstate__(self) -> dict:
        return _without_order(self.__dict__)

    @memoized
    def fingerprint(self) -> str:
        h = hashlib.blake2b(digest_size=16)
        for p in self.params:
            h.update(p.digest)
        h.update(b"->")
        for r in self.results:
            h.update(r.digest)
        return h.hexdigest()


@dataclass(frozen=True)
class Program:
    """A program: functions in order. ``parse(print_program(p)) == p`` holds for every program."""

    functions: tuple[Function, ...]

    def __post_init__(self) -> None:
        names = [f.name for f in self.functions]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"duplicate function names: {sorted(dup)}")
        if not self.functions:
            raise ValueError("a program needs at least one function")

    def function(self, name: str | None = None) -> Function:
        """The function called ``name``; with no name, the only function."""
        if name is None:
            if len(self.functions) != 1:
                raise KeyError(
                    f"program has {len(self.functions)} functions; name one of "
                    f"{[f.name for f in self.functions]}"
                )
            return self.functions[0]
        for f in self.functions:
            if f.name == name:
                return f
        raise KeyError(f"no function {name!r}; functions: {[f.name for f in self.functions]}")

    def nodes(self) -> list[Node]:
        """Every node of every function once, operands before users (a new list each call)."""
        return list(_order(self, [n for f in self.functions for n in (*f.params, *f.results)]))

    def __getstate__(self) -> dict:
        return _without_order(self.__dict__)

    @memoized
    def fingerprint(self) -> str:
        """Structural hash (hex) of the program, ignoring function and parameter names."""
        h = hashlib.blake2b(digest_size=16)
        for f in self.functions:
            h.update(f.fingerprint().encode())
        return h.hexdigest()

    def replace_results(self, mapping: dict[Node, Node]) -> Program:
        """A program whose results are rewritten by ``mapping`` (names kept)."""
        return Program(tuple(
            Function(f.name, f.params, f.param_names, tuple(mapping.get(r, r) for r in f.results))
            for f in self.functions
        ))
