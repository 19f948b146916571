"""shape-layout-propagation: fold chains of movement ops and drop the ones that do nothing."""

from __future__ import annotations

from dataclasses import dataclass

from accy.ir.node import Node
from accy.ir.ops import Op, OpKind
from accy.ir.program import Stage
from accy.passes.base import Pass
from accy.passes.rebuild import make, rebuild, with_srcs
from accy.passes.registry import register


def simplify(node: Node) -> Node:
    """One movement node with its operand chain folded (or its operand, when it is a no-op)."""
    x = node.srcs[0] if node.srcs else None
    if node.op in (Op.RESHAPE, Op.BROADCAST) and node.type.shape == x.type.shape:
        return x
    if node.op is Op.TRANSPOSE:
        perm = node.attr("perm")
        if perm == tuple(range(len(perm))):
            return x
        if x.op is Op.TRANSPOSE:  # transpose(transpose(y, p), q) = transpose(y, p o q)
            inner = x.attr("perm")
            return simplify(make(Op.TRANSPOSE, x.srcs[0], perm=tuple(inner[i] for i in perm)))
    if node.op is Op.RESHAPE and x.op is Op.RESHAPE:
        return simplify(make(Op.RESHAPE, x.srcs[0], shape=node.type.shape))
    if node.op is Op.BROADCAST and x.op is Op.BROADCAST:
        return make(Op.BROADCAST, x.srcs[0], shape=node.type.shape)
    if node.op is Op.SLICE and node.type.shape == x.type.shape and all(
            s == 0 for s in node.attr("starts")) and all(s == 1 for s in node.attr("steps")):
        return x
    return node


@register
@dataclass(frozen=True)
class ShapeLayoutPropagation(Pass):
    """Fold transpose/reshape/broadcast chains and remove identity movement ops."""

    name = "shape-layout-propagation"
    stage = Stage.tensor

    def run(self, ctx, product):
        removed = 0

        def rewrite(node: Node, srcs: tuple[Node, ...]) -> Node:
            nonlocal removed
            if not srcs:
                return node
            new = with_srcs(node, srcs)
            if node.op.kind is not OpKind.MOVEMENT:
                return new
            out = simplify(new)
            removed += out is not new
            return out

        program = rebuild(product.program, rewrite)
        ctx.stat("simplified", removed)
        return product.replace(program=program)
