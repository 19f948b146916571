"""A selection of terms priced incrementally: what acceptance by region (``regions``) and the
sharing search (``sharing``) both change one e-class at a time.

A *selection* picks one term (a :class:`Pick`: an op over operand e-classes) per e-class; the
program it gives is priced as a DAG (each class used counted once). :class:`LiveSelection`
keeps a reference count per class (uses by live classes, and the roots), so changing a class's
pick changes the cost by its own cost's difference plus the classes that become live (count
0 -> 1, their operands counted in turn) or dead (1 -> 0). A try is undone from a journal, so a
try costs what it changes, not the program's size. ``work`` counts the classes counted or
walked: a measure of effort that does not depend on the machine's speed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from accy.egraph.cost import ENode
from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.types import TensorType

__all__ = ["LiveSelection", "Pick"]


@dataclass(frozen=True)
class Pick:
    """The term an e-class contributes: an op over operand classes (list classes flattened)."""

    op: Op
    type: TensorType
    attrs: tuple[tuple[str, Any], ...]
    operands: tuple[int, ...]
    own: int
    enode: ENode | None = None  # the extracted e-node (type-checked when rebuilt)
    node: Node | None = None  # the input node (valid already)


class LiveSelection:
    """``picks`` (owned: changed in place) priced incrementally from ``roots`` (module
    docstring)."""

    def __init__(self, picks: dict[int, Pick], roots: Iterable[int]) -> None:
        self.picks = picks
        self.count: dict[int, int] = {}
        self.total = 0
        self.work = 0
        self._counts: list[tuple[int, int]] | None = None  # journal: (class, count before)
        self._picks: list[tuple[int, Pick]] = []  # journal: (class, pick before)
        self._before = 0
        for r in roots:
            self._add(r)

    def live(self, c: int) -> bool:
        return self.count.get(c, 0) > 0

    def _set_count(self, c: int, n: int) -> None:
        if self._counts is not None:
            self._counts.append((c, self.count.get(c, 0)))
        self.count[c] = n

    def _add(self, c: int) -> None:
        """One more use of ``c``: a class that becomes live counts its own cost and uses its
        operands in turn."""
        stack = [c]
        while stack:
            c = stack.pop()
            n = self.count.get(c, 0)
            self._set_count(c, n + 1)
            self.work += 1
            if n == 0:
                p = self.picks[c]
                self.total += p.own
                stack.extend(p.operands)

    def _drop(self, c: int) -> None:
        """One use of ``c`` fewer: a class no longer used gives back its cost and uses."""
        stack = [c]
        while stack:
            c = stack.pop()
            n = self.count[c]
            self._set_count(c, n - 1)
            self.work += 1
            if n == 1:
                p = self.picks[c]
                self.total -= p.own
                stack.extend(p.operands)

    def begin(self) -> None:
        """Start a try: what follows until ``commit`` or ``undo`` is journaled."""
        self._counts, self._picks, self._before = [], [], self.total

    def set(self, c: int, pick: Pick) -> None:
        """Let ``c`` take ``pick``; a live class's uses move to the new operands."""
        old = self.picks[c]
        if self._counts is not None:
            self._picks.append((c, old))
        self.picks[c] = pick
        if self.count.get(c, 0) > 0:
            self.total += pick.own - old.own
            for o in pick.operands:
                self._add(o)
            for o in old.operands:
                self._drop(o)

    def delta(self) -> int:
        """The change in cost since ``begin``."""
        return self.total - self._before

    def acyclic_at(self, c: int) -> bool:
        """Whether ``c`` cannot reach itself through the picks: a walk from its operands."""
        seen: set[int] = set()
        stack = list(self.picks[c].operands)
        while stack:
            o = stack.pop()
            if o == c:
                return False
            if o not in seen:
                seen.add(o)
                stack.extend(self.picks[o].operands)
        self.work += len(seen)
        return True

    def commit(self) -> None:
        self._counts, self._picks = None, []

    def undo(self) -> None:
        assert self._counts is not None, "undo without begin"
        for c, n in reversed(self._counts):
            self.count[c] = n
        for c, p in reversed(self._picks):
            self.picks[c] = p
        self.total = self._before
        self.commit()
