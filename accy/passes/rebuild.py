"""Rewriting a program node by node (used by passes that change the program)."""

from __future__ import annotations

from collections.abc import Callable

from accy.ir.node import Node
from accy.ir.program import Function, Program


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
