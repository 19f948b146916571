"""constant-fold: evaluate ops whose operands are all constants."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from accy.ir.interpret import interpret
from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.program import Function, Program, Stage
from accy.passes.base import Pass, option
from accy.passes.rebuild import rebuild
from accy.passes.registry import register


def fold(node: Node) -> Node:
    """The constant node equal to ``node``, whose operands are all constants."""
    (value,) = interpret(Program((Function("fold", (), (), (node,)),)), ())
    value = np.ascontiguousarray(value, dtype=node.type.dtype.numpy)
    return Node(Op.CONSTANT, node.type, (), {"value": value.tobytes()})


@register
@dataclass(frozen=True)
class ConstantFold(Pass):
    """Evaluate every op whose operands are all constants (with the reference interpreter)."""

    name = "constant-fold"
    stage = Stage.contract

    max_elements: int = option(1 << 16, "largest result (in elements) to fold into a constant")

    def run(self, ctx, product):
        folded = 0

        def rewrite(node: Node, srcs: tuple[Node, ...]) -> Node:
            nonlocal folded
            if node.op in (Op.PARAM, Op.CONSTANT):
                return node
            new = Node(node.op, node.type, srcs, dict(node.attrs))
            if all(s.op is Op.CONSTANT for s in srcs) and node.type.size <= self.max_elements:
                folded += 1
                return fold(new)
            return new

        program = rebuild(product.program, rewrite)
        ctx.stat("folded", folded)
        return product.replace(program=program)
