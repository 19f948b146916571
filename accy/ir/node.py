"""Immutable, hash-consed IR nodes.

``Node(op, type, srcs, attrs)`` returns the one live node with that structure, so structural
equality is identity and common subexpressions are shared for free. A node's ``digest`` is a
stable hash of its structure (the same in every process), from which fingerprints are built.

Pickling is iterative: a node pickles as the flat list of every node it reaches, operands
first, with operands named by position, so graphs of any depth pickle (a chain of 50,000 ops
too) and shared subterms are written once. Unpickling re-interns, so a node comes back as the
live twin of an equal node when one exists, and digests are unchanged. Nodes pickled separately
(not through one common root) each carry their own ancestors; :func:`pack` and :func:`unpack`
write several roots as one table.
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from accy.ir.ops import ATTRS, Op
from accy.ir.types import DType, TensorType

AttrValue = int | float | bool | str | bytes | DType | tuple


def _normalize(value: Any) -> AttrValue:
    if isinstance(value, list | tuple):
        return tuple(_normalize(v) for v in value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def attr_text(value: AttrValue) -> str:
    """Canonical text of an attribute value (used for digests and by the printer)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, DType):
        return value.value
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, bytes):
        return "0x" + value.hex()
    if isinstance(value, tuple):
        return "[" + ", ".join(attr_text(v) for v in value) + "]"
    if isinstance(value, float):
        return repr(value)
    return str(value)


class Node:
    """One operation producing one tensor. Build nodes with the builder, not by hand."""

    __slots__ = ("op", "type", "srcs", "attrs", "_digest", "_verified", "__weakref__")
    _interned: weakref.WeakValueDictionary[tuple, Node] = weakref.WeakValueDictionary()

    op: Op
    type: TensorType
    srcs: tuple[Node, ...]
    attrs: tuple[tuple[str, AttrValue], ...]

    def __new__(
        cls,
        op: Op,
        type: TensorType,
        srcs: Iterable[Node] = (),
        attrs: Mapping[str, Any] | None = None,
    ) -> Node:
        srcs = tuple(srcs)
        norm = tuple(sorted((k, _normalize(v)) for k, v in (attrs or {}).items()))
        _check_attrs(op, norm)
        # bools and ints hash alike; the type names keep True and 1 apart in the key
        key = (op, type, srcs, tuple((k, type_of(v), v) for k, v in norm))
        node = cls._interned.get(key)
        if node is None:
            node = object.__new__(cls)
            object.__setattr__(node, "op", op)
            object.__setattr__(node, "type", type)
            object.__setattr__(node, "srcs", srcs)
            object.__setattr__(node, "attrs", norm)
            object.__setattr__(node, "_digest", None)
            object.__setattr__(node, "_verified", False)  # set by verify_node once it passes
            cls._interned[key] = node
        return node

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Node is immutable")

    def __reduce__(self):
        return (_unpickle, pack((self,)))

    def attr(self, name: str) -> Any:
        for k, v in self.attrs:
            if k == name:
                return v
        raise KeyError(f"{self.op.value} has no attribute {name!r}")

    @property
    def value(self) -> np.ndarray:
        """The value of a constant node as a numpy array."""
        if self.op is not Op.CONSTANT:
            raise TypeError(f"{self.op.value} node has no constant value")
        arr = np.frombuffer(self.attr("value"), dtype=self.type.dtype.numpy)
        return arr.reshape(self.type.shape)

    @property
    def digest(self) -> bytes:
        """A stable 16-byte hash of this node's structure (names play no part)."""
        if self._digest is None:
            for node in topological((self,)):  # operands first, so no deep recursion
                if node._digest is None:
                    object.__setattr__(node, "_digest", node._hash())
        return self._digest

    def _hash(self) -> bytes:
        h = hashlib.blake2b(digest_size=16)
        h.update(f"{self.op.value}:{self.type}".encode())
        for k, v in self.attrs:
            h.update(f"|{k}={attr_text(v)}".encode())
        for s in self.srcs:
            h.update(s._digest)
        return h.digest()

    def __repr__(self) -> str:
        attrs = "".join(f" {k}={attr_text(v)}" for k, v in self.attrs if k != "value")
        return f"<{self.op.value}{attrs} : {self.type}>"


def pack(roots: Iterable[Node]) -> tuple[tuple, tuple[int, ...]]:
    """Every node reachable from ``roots`` as a flat, picklable table, and the roots' rows.

    A row is ``(op, type, operand rows, attrs)``, operands before users, so no step recurses
    and a shared node is one row. :func:`unpack` rebuilds the roots.
    """
    roots = tuple(roots)
    index: dict[int, int] = {}
    table = []
    for node in topological(roots):
        index[id(node)] = len(table)
        table.append((node.op, node.type, tuple(index[id(s)] for s in node.srcs), node.attrs))
    return tuple(table), tuple(index[id(r)] for r in roots)


def unpack(table: tuple, roots: tuple[int, ...]) -> tuple[Node, ...]:
    """The nodes at rows ``roots`` of a table made by :func:`pack` (re-interned)."""
    built: list[Node] = []
    for op, type, srcs, attrs in table:
        built.append(Node(op, type, (built[i] for i in srcs), dict(attrs)))
    return tuple(built[i] for i in roots)


def _unpickle(table: tuple, roots: tuple[int, ...]) -> Node:
    return unpack(table, roots)[0]


def type_of(value: AttrValue) -> str:
    return type(value).__name__


def _check_attrs(op: Op, attrs: tuple[tuple[str, AttrValue], ...]) -> None:
    expected = ATTRS.get(op, {})
    names = {k for k, _ in attrs}
    if names != set(expected):
        raise ValueError(
            f"{op.value} takes attributes {sorted(expected)}, got {sorted(names)}"
        )
    for k, v in attrs:
        want = expected[k]
        if want is tuple and any(isinstance(x, bool) or not isinstance(x, int) for x in v):
            raise ValueError(f"{op.value} attribute {k}={v!r} must be a list of integers")
        if not isinstance(v, want) or (want is int and isinstance(v, bool)):
            raise ValueError(f"{op.value} attribute {k}={v!r} must be {want.__name__}")


def topological(roots: Iterable[Node]) -> Iterator[Node]:
    """Every node reachable from ``roots``, each once, operands before users (deterministic)."""
    seen: set[int] = set()
    for root in roots:
        if id(root) in seen:
            continue
        stack: list[tuple[Node, int]] = [(root, 0)]
        while stack:
            node, i = stack.pop()
            if i < len(node.srcs):
                stack.append((node, i + 1))
                src = node.srcs[i]
                if id(src) not in seen:
                    stack.append((src, 0))
            elif id(node) not in seen:
                seen.add(id(node))
                yield node
