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
        functions.append(Function(fn.name, fn.params, fn.param_names,
                                  tuple(memo[r] for r in fn.results)))
    return Program(tuple(functions))


def make(op: Op, *srcs: Node, **attrs: Any) -> Node:
    """A node of ``op`` over ``srcs`` with its inferred type and normalized attributes."""
    t, norm = infer(op, tuple(s.type for s in srcs), attrs)
    return Node(op, t, srcs, norm)


def constant(value: Any, dtype: DType) -> Node:
    """A constant node holding ``value`` as ``dtype``."""
    arr = np.array(value, dtype=dtype.numpy, order="C")
    return Node(Op.CONSTANT, TensorType(arr.shape, dtype), (), {"value": arr.tobytes()})
