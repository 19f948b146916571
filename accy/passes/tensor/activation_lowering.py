"""activation-lowering: activations as primitive ops, in numerically stable forms."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.program import Stage
from accy.ir.types import DType
from accy.passes.base import Pass, option
from accy.passes.rebuild import constant, make, rebuild, with_srcs
from accy.passes.registry import register

LOWERABLE = ("relu", "gelu", "gelu_tanh", "sigmoid", "softmax", "log_softmax")
LIBRARY = ("softmax", "log_softmax")  # what the kernel library (row-softmax) computes whole
# gelu and sigmoid of these dtypes are computed in the wider one and rounded once, as interpret
# computes them (in f64, rounded once to the tensor's dtype): gelu in f16 steps rounded six
# times (and 1/sqrt(2) itself), up to 2,000 f16 ulps off where the result is small; sigmoid
# three times, 14% of f16 inputs not on the nearest half (at most 2 ulps).
WIDER = {DType.f16: DType.f32}
ROUNDED_ONCE = (Op.GELU, Op.GELU_TANH, Op.SIGMOID)


def lower(node: Node, x: Node) -> Node:
    """The primitive form of activation ``node`` applied to ``x``."""
    dtype = x.type.dtype
    if node.op in ROUNDED_ONCE and dtype in WIDER:
        return make(Op.CAST, lower(node, make(Op.CAST, x, dtype=WIDER[dtype])), dtype=dtype)
    one, half = constant(1.0, dtype), constant(0.5, dtype)
    if node.op is Op.RELU:
        return make(Op.MAX, x, constant(0, dtype))
    if node.op in (Op.GELU, Op.GELU_TANH):
        if node.op is Op.GELU:  # exact: x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))
            inner = make(Op.ERF, make(Op.MUL, x, constant(0.7071067811865476, dtype)))
        else:  # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
            cube = make(Op.MUL, x, make(Op.MUL, x, x))
            u = make(Op.ADD, x, make(Op.MUL, constant(0.044715, dtype), cube))
            inner = make(Op.TANH, make(Op.MUL, constant(0.7978845608028654, dtype), u))
        gelu = make(Op.MUL, make(Op.MUL, half, x), make(Op.ADD, one, inner))
        # at -inf the formula is -inf * 0 (NaN); the function's limit is 0
        return make(Op.SELECT, make(Op.EQ, x, constant(-math.inf, dtype)),
                    constant(0.0, dtype), gelu)
    if node.op is Op.SIGMOID:  # exp(-|x|) never overflows; pick the branch by sign
        z = make(Op.EXP, make(Op.NEG, make(Op.ABS, x)))
        positive = make(Op.DIV, one, make(Op.ADD, one, z))
        negative = make(Op.DIV, z, make(Op.ADD, one, z))
        return make(Op.SELECT, make(Op.GE, x, constant(0, dtype)), positive, negative)
    axis = node.attr("axis")  # softmax family: subtract the row maximum first
    shifted = make(Op.SUB, x, make(Op.REDUCE_MAX, x, axes=(axis,), keepdims=True))
    total = make(Op.REDUCE_SUM, make(Op.EXP, shifted), axes=(axis,), keepdims=True)
    if node.op is Op.LOG_SOFTMAX:
        return make(Op.SUB, shifted, make(Op.LOG, total))
    return make(Op.DIV, make(Op.EXP, shifted), total)


@register
@dataclass(frozen=True)
class ActivationLowering(Pass):
    """Lower activations to primitive ops (stable forms: max-subtraction, sign-split sigmoid)."""

    name = "activation-lowering"
    stage = Stage.tensor

    ops: tuple[str, ...] = option(
        ("gelu", "gelu_tanh", "sigmoid"),
        "activations to lower, of relu, gelu, gelu_tanh, sigmoid, softmax, log_softmax (softmax "
        "and log_softmax are off by default: one row kernel beats their three lowered kernels)",
        choices=LOWERABLE,
    )
    kernel_library: Literal["enabled", "disabled"] = option(
        "enabled", "enabled: lower the activations in ops; disabled: softmax and log_softmax, "
        "which the row-softmax kernels compute whole, are lowered too")

    def run(self, ctx, product):
        unknown = sorted(set(self.ops) - set(LOWERABLE))
        if unknown:
            raise ValueError(f"cannot lower {unknown}; lowerable: {', '.join(LOWERABLE)}")
        names = set(self.ops) | (set(LIBRARY) if self.kernel_library == "disabled" else set())
        chosen = {Op(name) for name in names}
        lowered = 0

        def rewrite(node: Node, srcs: tuple[Node, ...]) -> Node:
            nonlocal lowered
            if node.op in chosen:
                lowered += 1
                return lower(node, srcs[0])
            return node if not srcs else with_srcs(node, srcs)

        program = rebuild(product.program, rewrite)
        ctx.stat("lowered", lowered)
        return product.replace(program=program)
