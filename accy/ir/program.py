"""Programs: named functions over nodes, and the stages a program goes through."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import Enum

from accy.ir.memo import memoized
from accy.ir.node import Node, pack, topological, unpack
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


def _packed(functions: tuple[Function, ...]) -> tuple:
    """The functions' nodes as one table (``node.pack``) and each function's name, parameter
    names and counts: a node pickled on its own carries every node it reaches, so the results
    of a function (a region has hundreds) pickled one by one would repeat their shared
    operands once per result, quadratic in size. Caches are not pickled."""
    table, rows = pack(n for f in functions for n in (*f.params, *f.results))
    return table, rows, tuple((f.name, f.param_names, len(f.params), len(f.results))
                              for f in functions)


def _unpacked(table: tuple, rows: tuple[int, ...], heads: tuple) -> tuple[Function, ...]:
    nodes, out, at = unpack(table, rows), [], 0
    for name, param_names, n_params, n_results in heads:
        out.append(Function(name, nodes[at:at + n_params], param_names,
                            nodes[at + n_params:at + n_params + n_results]))
        at += n_params + n_results
    return tuple(out)


def _function(table: tuple, rows: tuple[int, ...], heads: tuple) -> Function:
    return _unpacked(table, rows, heads)[0]


def _program(table: tuple, rows: tuple[int, ...], heads: tuple) -> Program:
    return Program(_unpacked(table, rows, heads))


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

    def __reduce__(self):
        return (_function, _packed((self,)))

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

    def __reduce__(self):
        return (_program, _packed(self.functions))

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
