"""Split K, shared by the tiled and tensor-core contractions: where a product kernel stores
(the group's outputs, or one K chunk's partial sums in scratch memory), and the second kernel
that sums the chunks in a fixed order (deterministic) and applies the group's epilogue."""

from __future__ import annotations

from accy.ir.node import Node
from accy.ir.walk import Pending
from accy.kernels import loopnest
from accy.kernels.contraction_plan import stored_value
from accy.kernels.ir import Bin, Expr, KernelArg, Load, add, idx, linear, mul, row_major
from accy.plans import FusionGroup, KernelOutline


def chunk_k(k: int, split: int, step: int) -> int:
    """K a chunk of a K of ``k`` split ``split`` ways, in multiples of ``step`` (a kernel's K
    step): the chunks are ``ceil(k / chunk)``, none empty."""
    return -(-k // (split * step)) * step


def store_targets(group: FusionGroup, outline: KernelOutline, given: Node, chunk: Expr | None,
                  scratch: KernelArg, obase: Expr
                  ) -> tuple[list[KernelArg], list[Node], Expr]:
    """What a contraction kernel stores, and from where: the group's outputs (the values they
    store) at ``obase``; with K split (``chunk``: the group's chunk) this chunk's partial sums
    of the einsum (``given``) in ``scratch``, laid out as the einsum after the other chunks'."""
    if chunk is None:
        args = [KernelArg(f"out{i}", n.type.dtype, True, slot) for i, (n, slot) in
                enumerate(zip(group.outputs, outline.output_slots, strict=True))]
        return args, [stored_value(o) for o in group.outputs], obase
    return [scratch], [given], add(mul(chunk, idx(given.type.size)), obase)


class Partials(loopnest.LoopNestBuilder):
    """The group's outputs, one work-item per element, with the einsum's value the sum of the
    split-K partials in ``scratch`` (chunk by chunk, in a fixed order: deterministic)."""

    def __init__(self, group: FusionGroup, outline: KernelOutline, einsum: Node,
                 scratch: KernelArg, chunks: int) -> None:
        super().__init__(group, outline)
        self.einsum, self.chunks = einsum, chunks
        self.scratch = KernelArg(scratch.name, scratch.dtype, False, -1, scratch.scratch_elems)
        self.args.append(self.scratch)

    def _open(self, node: Node, coords: tuple[Expr, ...]) -> Expr | Pending:
        if node is not self.einsum:
            return super()._open(node, coords)
        key = (node, coords)
        hit = self.em.lookup(key)
        if hit is not None:
            return hit
        at = (self.flat_id if coords == self.coords and node.type.shape == self.group.domain
              else linear(coords, row_major(node.type.shape)))
        total: Expr = Load(self.scratch.name, at)
        for k in range(1, self.chunks):
            total = Bin("+", total, Load(self.scratch.name, add(at, idx(k * node.type.size))))
        return self.em.bind(total, node.type.dtype, key)
