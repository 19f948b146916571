"""Rewriting a program node by node (used by passes that change the program)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.program import Function, Program
from accy.ir.shapes import infer
from accy.ir.types import DType, TensorType


def rebuild(program: Program, rewrite: Callable[[Node, tuple[Node, ...]], Node]) -> Program:
    """Rebuild every function bottom-up; ``rewrite(old, new_srcs)`` returns the new node."""
    memo: dict[Node, Node] = {}
    functions = []
    for fn in program.functions:
        for node in fn.nodes():
            if node not in memo:
                srcs = tuple(memo[s] for s in node.srcs)
                memo[node] = rewrite(node, srcs)
        results = tuple(memo[r] for r in fn.results)
        functions.append(fn if results == fn.results else  # nodes compare by identity
                         Function(fn.name, fn.params, fn.param_names, results))
    if all(a is b for a, b in zip(functions, program.functions, strict=True)):
        return program  # nothing changed: the same (immutable) program, its memos kept
    return Program(tuple(functions))


def with_srcs(node: Node, srcs: tuple[Node, ...]) -> Node:
    """``node`` over ``srcs``: ``node`` itself when they are its operands (what the interning
    ``Node(...)`` would return, without normalizing and looking it up again)."""
    if srcs == node.srcs:
        return node
    return Node(node.op, node.type, srcs, dict(node.attrs))


def make(op: Op, *srcs: Node, **attrs: Any) -> Node:
    """A node of ``op`` over ``srcs`` with its inferred type and normalized attributes."""
    t, norm = infer(op, tuple(s.type for s in srcs), attrs)
    return Node(op, t, srcs, norm)


def constant(value: Any, dtype: DType) -> Node:
    """A constant node holding ``value`` as ``dtype``."""
    arr = np.array(value, dtype=dtype.numpy, order="C")
    return Node(Op.CONSTANT, TensorType(arr.shape, dtype), (), {"value": arr.tobytes()})
