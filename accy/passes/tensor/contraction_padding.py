"""contraction-padding: products whose summed rows are not whole 16-byte vectors, padded.

On a target with TF32 tensor cores (``TF32_MMA``), an f32 product of two operands whose first
operand holds a summed axis last (A along K: rows of K elements) with K not a multiple of
``multiple`` (4: rows of whole 16-byte vectors) gets that axis padded with zeros in both
operands to the next multiple. The zeros add nothing, so the result is the same. The
tensor-core kernels then copy A's rows 16 bytes at a time instead of 4, and the TMA kernels
(``wgmma-*``), which need 16-byte row strides, can copy them at all.

The padded operands are copies (a concat with zeros: :func:`dtype_legalization.pad_letters`),
written by kernels of their own, so the pass pads only where the product does at least
``intensity`` flops per operand element copied, ``2 M N / (M + N)``: well below it (skinny
products, small M and N over a long K) the product is bound by reading its operands and the
copy costs about as much as it saves; the default leaves a margin for the copies' kernels.
Over a K of at least ``long_k``, or for a product of at least ``large_flops`` flops
(``2 M N K`` times its batch entries), the product outlasts the copies' kernels by far, and it
pads from ``long_intensity`` (the bounds ``dtype-legalization`` pads f16 products from).
Measured on the H100 (papers/kernels.md, "Thirty-fourth session", "Forty-second session",
"Forty-third session"): padded from ``long_intensity`` the products of at least ``2^33`` flops
ran faster (wgmma-3xtf32 taking them), batches of smaller ones counted as a whole too,
smaller ones slower (the copies' kernels cost more than the wider copies save), and products
of 2MN/(M+N) below 300 lost over any K.
f16 products are padded by ``dtype-legalization`` (:func:`dtype_legalization.padded_product`),
where it keeps them in f16.

Stats: ``padded`` (products padded).
"""

from __future__ import annotations

from dataclasses import dataclass

from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.program import Stage
from accy.ir.types import DType
from accy.kernels.mma_plan import MIN_K, MIN_MN
from accy.passes.base import Pass, option
from accy.passes.rebuild import make, rebuild, with_srcs
from accy.passes.registry import register
from accy.passes.tensor.dtype_legalization import pad_letters, product_axes, product_flops
from accy.target import TF32_MMA, TargetProfile


def padded_k(node: Node, srcs: tuple[Node, ...], multiple: int, intensity: int,
             long_k: int = 0, long_intensity: int = 0, large_flops: int = 0) -> Node | None:
    """``node`` (an f32 product over operands ``srcs``) with A's last axis, summed, padded to
    a multiple of ``multiple`` in both operands; None where it needs no padding or does not
    pay (the module docstring: ``intensity``, or ``long_intensity`` over a K of at least
    ``long_k`` or from ``large_flops``; 0 turns either off)."""
    found = product_axes(node, DType.f32)
    if found is None:
        return None
    a, b, out, size, (m, n, k) = found
    letter = a[-1]
    grow = -size[letter] % multiple
    if (long_k and k >= long_k) or (large_flops and product_flops(node, k) >= large_flops):
        intensity = min(intensity, long_intensity)
    if (not grow or letter not in b or letter in out  # summed, not a batch letter
            or m < MIN_MN or n < MIN_MN or k < MIN_K or 2 * m * n < intensity * (m + n)):
        return None
    return make(Op.EINSUM, pad_letters(srcs[0], a, {letter: grow}),
                pad_letters(srcs[1], b, {letter: grow}), spec=node.attr("spec"))


@register
@dataclass(frozen=True)
class ContractionPadding(Pass):
    """Pad the summed rows of f32 products on tensor-core targets to whole 16-byte vectors."""

    name = "contraction-padding"
    stage = Stage.tensor

    multiple: int = option(4, "elements the summed axis is padded to a multiple of (4: "
                           "16-byte rows of f32); 1: off", minimum=1, maximum=64)
    intensity: int = option(1024, "pad only products of at least this many flops per operand "
                            "element copied (2MN/(M+N))", minimum=0, maximum=1 << 20)
    long_k: int = option(16384, "products over a K of at least this pad from long-intensity "
                         "(0: never)", minimum=0, maximum=1 << 30)
    long_intensity: int = option(384, "the intensity threshold over a K of at least long-k "
                                 "or from large-flops", minimum=0, maximum=1 << 20)
    large_flops: int = option(1 << 33, "products of at least this many flops (2MNK times "
                              "the batch) pad from long-intensity (0: never)", minimum=0,
                              maximum=1 << 62)

    def run(self, ctx, product):
        target = product.target or TargetProfile()
        count = 0

        def rewrite(node: Node, srcs: tuple[Node, ...]) -> Node:
            nonlocal count
            made = padded_k(node, srcs, self.multiple, self.intensity, self.long_k,
                            self.long_intensity, self.large_flops)
            if made is not None:
                count += 1
                return made
            return node if not srcs else with_srcs(node, srcs)

        if self.multiple > 1 and TF32_MMA in target.tensor_cores:
            product = product.replace(program=rebuild(product.program, rewrite))
        ctx.stat("padded", count)
        return product
