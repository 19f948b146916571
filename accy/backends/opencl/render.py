"""Render a kernel (:mod:`accy.kernels.ir`) as OpenCL C. A pure function of the kernel."""

from __future__ import annotations

import math

from accy.ir.types import DType
from accy.kernels.ir import (
    INDEX,
    Assign,
    Barrier,
    Bin,
    Call,
    Cast,
    Cond,
    Expr,
    For,
    Id,
    If,
    Kernel,
    Let,
    Lit,
    Load,
    LocalArray,
    Return,
    Stmt,
    Store,
    Un,
    Var,
)

C_TYPE = {
    DType.f16: "half", DType.f32: "float", DType.f64: "double",
    DType.i32: "int", DType.i64: "long", DType.bool: "uchar",
}


def literal(value: float | int | bool, dtype: DType) -> str:
    if dtype is DType.bool:
        return "(uchar)1" if value else "(uchar)0"
    if dtype is INDEX:
        return f"{int(value)}L"
    if dtype.is_int:
        return f"(({C_TYPE[dtype]}){int(value)})"
    v = float(value)
    if math.isnan(v):
        text = "NAN"
    elif math.isinf(v):
        text = "INFINITY" if v > 0 else "(-INFINITY)"
    elif dtype is DType.f64:
        text = repr(v)
    else:
        text = repr(v) + "f"
    return text if dtype is DType.f32 and text[0] != "(" else f"(({C_TYPE[dtype]}){text})"


def expr(e: Expr) -> str:
    match e:
        case Var(name):
            return name
        case Lit(value, dtype):
            return literal(value, dtype)
        case Bin(op, a, b):
            return f"({expr(a)} {op} {expr(b)})"
        case Un(op, a):
            return f"({op}{expr(a)})"
        case Call(fn, args):
            return f"{fn}({', '.join(expr(a) for a in args)})"
        case Cond(c, a, b):
            return f"({expr(c)} ? {expr(a)} : {expr(b)})"
        case Cast(dtype, a):
            return f"(({C_TYPE[dtype]}){expr(a)})"
        case Load(buf, index):
            return f"{buf}[{expr(index)}]"
        case Id(fn, dim):
            return f"(long){fn}({dim})"
    raise TypeError(f"cannot render expression {e!r}")


def stmts(body: tuple[Stmt, ...], indent: str) -> list[str]:
    out = []
    for s in body:
        match s:
            case Let(var, dtype, value, mutable):
                const = "" if mutable else "const "
                out.append(f"{indent}{const}{C_TYPE[dtype]} {var} = {expr(value)};")
            case Assign(var, value):
                out.append(f"{indent}{var} = {expr(value)};")
            case Store(buf, index, value):
                out.append(f"{indent}{buf}[{expr(index)}] = {expr(value)};")
            case For(var, start, stop, body_, step):
                out.append(f"{indent}for (long {var} = {expr(start)}; {var} < {expr(stop)}; "
                           f"{var} += {step}) {{")
                out.extend(stmts(body_, indent + "  "))
                out.append(f"{indent}}}")
            case If(cond, then, orelse):
                out.append(f"{indent}if ({expr(cond)}) {{")
                out.extend(stmts(then, indent + "  "))
                if orelse:
                    out.append(f"{indent}}} else {{")
                    out.extend(stmts(orelse, indent + "  "))
                out.append(f"{indent}}}")
            case Return():
                out.append(f"{indent}return;")
            case Barrier():
                out.append(f"{indent}barrier(CLK_LOCAL_MEM_FENCE);")
            case LocalArray(name, dtype, size):
                out.append(f"{indent}__local {C_TYPE[dtype]} {name}[{size}];")
            case _:
                raise TypeError(f"cannot render statement {s!r}")
    return out


def render(kernel: Kernel) -> str:
    """OpenCL C source of ``kernel``."""
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
    lines.append(f"__kernel void {kernel.entry}({', '.join(params)}) {{")
    lines.extend(stmts(kernel.body, "  "))
    lines.append("}")
    return "\n".join(lines) + "\n"
