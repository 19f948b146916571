"""Render a kernel (:mod:`accy.kernel_ir`) to OpenCL C. A pure, table-driven function."""

from __future__ import annotations

import math

import numpy as np

from accy.ir.ops import Op
from accy.ir.types import DType
from accy.kernel_ir import Compute, Const, Kernel, Load, Store

C_TYPE = {
    DType.f16: "half", DType.f32: "float", DType.f64: "double",
    DType.i32: "int", DType.i64: "long", DType.bool: "uchar",
}

# Templates over operands {a}, {b}, {c} and the C type {t} of the operand.
FLOAT_TEMPLATES: dict[Op, str] = {
    Op.NEG: "(-{a})", Op.ABS: "fabs({a})", Op.EXP: "exp({a})", Op.LOG: "log({a})",
    Op.SQRT: "sqrt({a})", Op.RSQRT: "rsqrt({a})", Op.SIN: "sin({a})", Op.COS: "cos({a})",
    Op.RECIPROCAL: "(({t})1 / {a})", Op.FLOOR: "floor({a})", Op.CEIL: "ceil({a})",
    Op.RELU: "fmax({a}, ({t})0)",
    Op.GELU: "(({t})0.5 * {a} * (({t})1 + erf({a} * ({t})0.70710678118654752440)))",
    Op.SIGMOID: "(({t})1 / (({t})1 + exp(-{a})))", Op.TANH: "tanh({a})",
    Op.ADD: "({a} + {b})", Op.SUB: "({a} - {b})", Op.MUL: "({a} * {b})", Op.DIV: "({a} / {b})",
    Op.MAX: "fmax({a}, {b})", Op.MIN: "fmin({a}, {b})", Op.POW: "pow({a}, {b})",
}
INT_TEMPLATES: dict[Op, str] = {
    Op.NEG: "(-{a})", Op.ABS: "(({t})abs({a}))", Op.RELU: "max({a}, ({t})0)",
    Op.ADD: "({a} + {b})", Op.SUB: "({a} - {b})", Op.MUL: "({a} * {b})", Op.DIV: "({a} / {b})",
    Op.MAX: "max({a}, {b})", Op.MIN: "min({a}, {b})",
}
COMMON_TEMPLATES: dict[Op, str] = {
    Op.EQ: "(uchar)({a} == {b})", Op.NE: "(uchar)({a} != {b})", Op.LT: "(uchar)({a} < {b})",
    Op.LE: "(uchar)({a} <= {b})", Op.GT: "(uchar)({a} > {b})", Op.GE: "(uchar)({a} >= {b})",
    Op.NOT: "(uchar)(!{a})", Op.AND: "(uchar)({a} && {b})", Op.OR: "(uchar)({a} || {b})",
    Op.SELECT: "({a} ? {b} : {c})",
}

# NaN-propagating max/min, as numpy's maximum/minimum (fmax/fmin drop NaNs).
NAN_MAX = "(isnan({a}) || isnan({b}) ? ({a} + {b}) : fmax({a}, {b}))"
NAN_MIN = "(isnan({a}) || isnan({b}) ? ({a} + {b}) : fmin({a}, {b}))"


def supported(op: Op, dtype: DType) -> bool:
    """Whether the renderer has an expression for ``op`` on operands of ``dtype``."""
    if op in COMMON_TEMPLATES or op is Op.CAST:
        return True
    table = FLOAT_TEMPLATES if dtype.is_float else INT_TEMPLATES if dtype.is_int else {}
    return op in table


def literal(value: float | int | bool, dtype: DType) -> str:
    if dtype is DType.bool:
        return "(uchar)1" if value else "(uchar)0"
    if dtype.is_int:
        return f"(({C_TYPE[dtype]}){int(value)})"
    v = float(value)
    if math.isnan(v):
        text = "NAN"
    elif math.isinf(v):
        text = "INFINITY" if v > 0 else "(-INFINITY)"
    else:
        text = repr(float(np.float32(v))) + "f" if dtype is not DType.f64 else repr(v)
    return f"(({C_TYPE[dtype]}){text})"


def _expr(s: Compute) -> str:
    a, b, c = (*s.operands, None, None)[:3]
    t = C_TYPE[s.operand_dtype]
    if s.op is Op.CAST:
        if s.dtype is DType.bool:
            return f"(uchar)({a} != ({t})0)"
        return f"(({C_TYPE[s.dtype]}){a})"
    if s.op in COMMON_TEMPLATES:
        return COMMON_TEMPLATES[s.op].format(a=a, b=b, c=c, t=t)
    if s.operand_dtype.is_float:
        if s.op is Op.MAX:
            return NAN_MAX.format(a=a, b=b)
        if s.op is Op.MIN:
            return NAN_MIN.format(a=a, b=b)
        return FLOAT_TEMPLATES[s.op].format(a=a, b=b, t=t)
    return INT_TEMPLATES[s.op].format(a=a, b=b, t=t)


def _index(load: Load, domain: tuple[int, ...]) -> str:
    contiguous = tuple(int(np.prod(domain[i + 1:], dtype=np.int64)) for i in range(len(domain)))
    if load.offset == 0 and load.strides == contiguous:
        return "gid"
    terms = [str(load.offset)] if load.offset else []
    for axis, stride in enumerate(load.strides):
        if stride == 0:
            continue
        coord = f"(gid / {contiguous[axis]}UL)" if contiguous[axis] != 1 else "gid"
        if axis > 0:
            coord = f"({coord} % {domain[axis]}UL)"
        terms.append(coord if stride == 1 else f"{coord} * {stride}UL")
    return " + ".join(terms) or "0"


def render(kernel: Kernel) -> str:
    """OpenCL C source of ``kernel``: one work-item per point of its domain."""
    dtypes = kernel.dtypes
    lines = ["#pragma OPENCL FP_CONTRACT OFF"]
    if DType.f16 in dtypes:
        lines.append("#pragma OPENCL EXTENSION cl_khr_fp16 : enable")
    if DType.f64 in dtypes:
        lines.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
    params = []
    for a in kernel.args:
        qual = "" if a.is_output else "const "
        params.append(f"__global {qual}{C_TYPE[a.dtype]}* restrict {a.name}")
    size = int(np.prod(kernel.domain, dtype=np.int64))
    lines.append(f"__kernel void {kernel.entry}({', '.join(params)}) {{")
    lines.append("  const size_t gid = get_global_id(0);")
    if math.prod(kernel.geometry.global_size) > size:
        # only when the launch overshoots: the guard costs PoCL its vectorization
        lines.append(f"  if (gid >= {size}UL) return;")
    for s in kernel.body:
        if isinstance(s, Load):
            arg = kernel.args[s.arg]
            lines.append(f"  const {C_TYPE[arg.dtype]} {s.var} = "
                         f"{arg.name}[{_index(s, kernel.domain)}];")
        elif isinstance(s, Const):
            lines.append(f"  const {C_TYPE[s.dtype]} {s.var} = {literal(s.value, s.dtype)};")
        elif isinstance(s, Compute):
            lines.append(f"  const {C_TYPE[s.dtype]} {s.var} = {_expr(s)};")
        elif isinstance(s, Store):
            lines.append(f"  {kernel.args[s.arg].name}[gid] = {s.var};")
    lines.append("}")
    return "\n".join(lines) + "\n"
