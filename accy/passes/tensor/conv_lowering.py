"""conv-lowering: convolutions, pools and constant pads as ops the kernels already take.

``method`` says how convolutions and pools reach the kernels:

* ``auto`` (default): ``direct``, except a pointwise convolution (1x1, stride 1, no padding or
  dilation, one group: a plain matrix product) for a target that is not a CPU, which takes
  ``im2col`` (for it a reshape feeding the tiled contraction, faster than ``direct`` on a GPU,
  slower on a CPU: ``papers/conv.md``).
* ``direct``: ``conv2d``, ``max_pool2d`` and ``avg_pool2d`` stay whole for the
  ``direct-conv`` kernel generator (:mod:`accy.kernels.conv`: a padded, stride-phase copy of
  the input, then register tiles of output channels x pixels; no im2col copy); the loop nest
  computes them where that generator is switched off. Pads are lowered as below.
* ``im2col`` and ``offsets`` lower them to ops the other generators take, as follows.

Every window op reads a padded input, so padding comes first: ``pad(x, value)`` becomes, per
padded dimension, ``concat([broadcast(value, before), x, broadcast(value, after)], axis)``
(the loop nest reads the constant where an index falls in a pad). Then, for each kernel
offset ``(i, j)`` (dilated by ``dilations``), a strided ``slice`` of the padded input picks
the input element every output position sees at that offset: ``[N, C, OH, OW]``.

* ``im2col``: the ``KH*KW`` slices concatenated into ``cols[N, C, KH*KW, OH, OW]`` and one
  contraction with the weights ``[O, C, KH*KW]``: ``nckhw,ock->nohw`` (with groups,
  ``ngckhw,gock->ngohw`` over ``[N, G, C/G, ...]``); one tiled contraction of depth
  ``C*KH*KW`` (the im2col copy is ``KH*KW`` times the input).
* ``offsets``: one pairwise contraction per offset, ``nchw,oc->nohw`` with the weights'
  ``[:, :, i, j]`` plane, accumulated with adds: ``KH*KW`` contractions of depth ``C``, no
  copy.

``max_pool2d`` pads with ``-inf`` (a pad never wins the max; shapes keep every window on at
least one input element) and takes ``max`` over the slices; ``avg_pool2d`` pads with zeros,
adds the slices and divides by the window size (``count_include_pad``) or by a constant
``[OH, OW]`` table of how many input elements each window covers (ONNX's default).
Bias, batch norm and global average pooling need nothing here: the builder and the ONNX
importer write them as elementwise ops and ``reduce_mean``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.program import Stage
from accy.passes.base import Pass, option
from accy.passes.rebuild import constant, make, rebuild
from accy.passes.registry import register

WINDOW_OPS = (Op.CONV2D, Op.MAX_POOL2D, Op.AVG_POOL2D, Op.PAD)
KEPT_BY_DIRECT = (Op.CONV2D, Op.MAX_POOL2D, Op.AVG_POOL2D)  # for the direct-conv generator


def padded(x: Node, value: Node, pads: tuple[int, ...]) -> Node:
    """``x`` with ``pads`` ([before..., after...]) of the scalar ``value`` around it."""
    rank = x.type.rank
    for axis in range(rank):
        before, after = pads[axis], pads[rank + axis]
        if not before and not after:
            continue
        parts = []
        for n in (before, after):
            shape = list(x.type.shape)
            shape[axis] = n
            parts.append(make(Op.BROADCAST, value, shape=tuple(shape)) if n else None)
        x = make(Op.CONCAT, *[p for p in (parts[0], x, parts[1]) if p is not None], axis=axis)
    return x


def _spatial_padded(x: Node, pads4: tuple[int, ...], fill: float) -> Node:
    top, left, bottom, right = pads4
    return padded(x, constant(fill, x.type.dtype), (0, 0, top, left, 0, 0, bottom, right))


def offsets(node: Node, xp: Node, kernel: tuple[int, int],
            dilations: tuple[int, int]) -> list[Node]:
    """The strided slice of the padded input ``xp`` at each kernel offset, row-major."""
    n, c = xp.type.shape[:2]
    oh, ow = node.type.shape[2:]
    sh, sw = node.attr("strides")
    out = []
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            h0, w0 = i * dilations[0], j * dilations[1]
            out.append(make(Op.SLICE, xp, starts=(0, 0, h0, w0),
                            stops=(n, c, h0 + sh * (oh - 1) + 1, w0 + sw * (ow - 1) + 1),
                            steps=(1, 1, sh, sw)))
    return out


def lower_conv2d(node: Node, x: Node, w: Node, method: str = "im2col") -> Node:
    o, cg, kh, kw = w.type.shape
    n, c = x.type.shape[:2]
    oh, ow = node.type.shape[2:]
    g = node.attr("groups")
    slices = offsets(node, _spatial_padded(x, node.attr("pads"), 0.0), (kh, kw),
                     node.attr("dilations"))
    grouped = g > 1
    if method == "offsets":
        acc = None
        for k, s in enumerate(slices):
            i, j = divmod(k, kw)
            plane = make(Op.SLICE, w, starts=(0, 0, i, j), stops=(o, cg, i + 1, j + 1),
                         steps=(1, 1, 1, 1))
            if grouped:
                term = make(Op.EINSUM, make(Op.RESHAPE, s, shape=(n, g, cg, oh, ow)),
                            make(Op.RESHAPE, plane, shape=(g, o // g, cg)),
                            spec="ngchw,goc->ngohw")
            else:
                term = make(Op.EINSUM, s, make(Op.RESHAPE, plane, shape=(o, cg)),
                            spec="nchw,oc->nohw")
            acc = term if acc is None else make(Op.ADD, acc, term)
        assert acc is not None
        return make(Op.RESHAPE, acc, shape=node.type.shape) if grouped else acc
    k = kh * kw
    cols = slices[0] if k == 1 else make(
        Op.CONCAT, *[make(Op.RESHAPE, s, shape=(n, c, 1, oh, ow)) for s in slices], axis=2)
    if grouped:
        out = make(Op.EINSUM, make(Op.RESHAPE, cols, shape=(n, g, cg, k, oh, ow)),
                   make(Op.RESHAPE, w, shape=(g, o // g, cg, k)), spec="ngckhw,gock->ngohw")
        return make(Op.RESHAPE, out, shape=node.type.shape)
    return make(Op.EINSUM, make(Op.RESHAPE, cols, shape=(n, c, k, oh, ow)),
                make(Op.RESHAPE, w, shape=(o, c, k)), spec="nckhw,ock->nohw")


def window_counts(node: Node, shape: tuple[int, int]) -> np.ndarray:
    """How many input elements (not pads) each output window of an avg pool covers."""
    (kh, kw), (sh, sw) = node.attr("kernel"), node.attr("strides")
    top, left = node.attr("pads")[:2]
    oh, ow = node.type.shape[2:]
    rows = [min(r * sh - top + kh, shape[0]) - max(r * sh - top, 0) for r in range(oh)]
    cols = [min(q * sw - left + kw, shape[1]) - max(q * sw - left, 0) for q in range(ow)]
    return np.outer(rows, cols)


def lower_pool2d(node: Node, x: Node) -> Node:
    is_max = node.op is Op.MAX_POOL2D
    dtype = x.type.dtype
    kernel = node.attr("kernel")
    xp = _spatial_padded(x, node.attr("pads"), -np.inf if is_max else 0.0)
    acc = None
    for s in offsets(node, xp, kernel, (1, 1)):
        acc = s if acc is None else make(Op.MAX if is_max else Op.ADD, acc, s)
    assert acc is not None
    if is_max:
        return acc
    counts = window_counts(node, x.type.shape[2:])
    if node.attr("count_include_pad") or np.all(counts == kernel[0] * kernel[1]):
        return make(Op.DIV, acc, constant(kernel[0] * kernel[1], dtype))
    return make(Op.DIV, acc, constant(counts, dtype))


def pointwise(node: Node) -> bool:
    """A 1x1 convolution without stride, padding, dilation or groups: a matrix product."""
    return (node.op is Op.CONV2D and node.srcs[1].type.shape[2:] == (1, 1)
            and node.attr("strides") == (1, 1) and not any(node.attr("pads"))
            and node.attr("groups") == 1)


def lower(node: Node, srcs: tuple[Node, ...], method: str = "direct") -> Node:
    """The lowered form of the window op ``node`` over (new) operands ``srcs``."""
    if method == "direct" and node.op in KEPT_BY_DIRECT:
        return Node(node.op, node.type, srcs, dict(node.attrs))
    if node.op is Op.CONV2D:
        return lower_conv2d(node, srcs[0], srcs[1], method)
    if node.op is Op.PAD:
        return padded(srcs[0], srcs[1], node.attr("pads"))
    return lower_pool2d(node, srcs[0])


@register
@dataclass(frozen=True)
class ConvLowering(Pass):
    """Lower conv2d, max/avg pools and pads to slices, concats, elementwise ops and einsums."""

    name = "conv-lowering"
    stage = Stage.tensor

    method: Literal["auto", "direct", "im2col", "offsets"] = option(
        "auto", "auto: direct, but im2col for pointwise convs on a target that is not a CPU; "
        "direct: conv2d and the pools kept for the direct-conv kernel generator (no gathered "
        "copy); im2col: one contraction over the gathered windows (C*KH*KW deep); offsets: one "
        "contraction per kernel offset, accumulated with adds")

    def run(self, ctx, product):
        lowered = 0
        gpu = product.target is not None and product.target.device_type != "cpu"

        def rewrite(node: Node, srcs: tuple[Node, ...]) -> Node:
            nonlocal lowered
            method = self.method
            if method == "auto":
                method = "im2col" if gpu and pointwise(node) else "direct"
            if node.op in WINDOW_OPS and not (method == "direct" and node.op in KEPT_BY_DIRECT):
                lowered += 1
                return lower(node, srcs, method)
            return node if not srcs else Node(node.op, node.type, srcs, dict(node.attrs))

        program = rebuild(product.program, rewrite)
        ctx.stat("lowered", lowered)
        return product.replace(program=program)
