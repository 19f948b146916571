"""Render a kernel (:mod:`accy.kernels.ir`) as OpenCL C. A pure function of the kernel."""

from __future__ import annotations

import math

from accy.ir.types import DType
from accy.kernels.ir import (
    INDEX,
    VECTOR_LANES,
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
    Lane,
    Let,
    Lit,
    Load,
    LocalArray,
    Return,
    Splat,
    Stmt,
    Store,
    Un,
    Var,
    VectorLoad,
    VectorStore,
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


def _lanes(lanes: int) -> int:
    if lanes not in VECTOR_LANES:
        raise ValueError(f"OpenCL C has no vectors of {lanes} lanes (only {VECTOR_LANES})")
    return lanes


def vector_type(dtype: DType, lanes: int = 1) -> str:
    """``float`` or ``float4``: the C type of ``lanes`` values of ``dtype``."""
    return C_TYPE[dtype] if lanes == 1 else f"{C_TYPE[dtype]}{_lanes(lanes)}"


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
        case VectorLoad(buf, index, lanes):
            return f"vload{_lanes(lanes)}({expr(index)}, {buf})"
        case Lane(vec, lane):
            base = expr(vec) if isinstance(vec, Var) else f"({expr(vec)})"
            return f"{base}.s{lane:x}"
        case Splat(dtype, lanes, value):
            return f"(({vector_type(dtype, lanes)})({expr(value)}))"
    raise TypeError(f"cannot render expression {e!r}")


def stmts(body: tuple[Stmt, ...], indent: str) -> list[str]:
    out = []
    for s in body:
        match s:
            case Let(var, dtype, value, mutable, lanes):
                const = "" if mutable else "const "
                out.append(f"{indent}{const}{vector_type(dtype, lanes)} {var} = {expr(value)};")
            case Assign(var, value):
                out.append(f"{indent}{var} = {expr(value)};")
            case Store(buf, index, value):
                out.append(f"{indent}{buf}[{expr(index)}] = {expr(value)};")
            case VectorStore(buf, index, dtype, values):
                vec = f"({vector_type(dtype, len(values))})({', '.join(expr(v) for v in values)})"
                out.append(f"{indent}vstore{_lanes(len(values))}({vec}, {expr(index)}, {buf});")
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
            case LocalArray(name, dtype, size, align):
                attr = f" __attribute__((aligned({align})))" if align else ""
                out.append(f"{indent}__local {C_TYPE[dtype]} {name}[{size}]{attr};")
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
    slots = [a.slot for a in kernel.args if not a.is_scratch]
    for a in kernel.args:
        if a.space == "constant":
            qual = "__constant "
        else:
            qual = "__global " if a.is_output else "__global const "
        # an output written in place over an input aliases it: no restrict on either
        alias = not a.is_scratch and slots.count(a.slot) > 1
        restrict = "" if alias else " restrict"
        params.append(f"{qual}{C_TYPE[a.dtype]}*{restrict} {a.name}")
    attrs = ""
    if kernel.fixed_local_size:
        dims = (*kernel.geometry.local_size, 1, 1)[:3]
        attrs = f"__attribute__((reqd_work_group_size({dims[0]}, {dims[1]}, {dims[2]}))) "
    lines.append(f"__kernel {attrs}void {kernel.entry}({', '.join(params)}) {{")
    lines.extend(stmts(kernel.body, "  "))
    lines.append("}")
    return "\n".join(lines) + "\n"
