"""The PTX the tensor-core generators emit through inline assembly
(:class:`accy.kernels.ir.InlineAsm`), and the TF32 operand registers and products of the
``tf32`` / ``3xtf32`` precision policies, shared by :mod:`accy.kernels.mma` (contractions) and
:mod:`accy.kernels.attention_mma` (attention). The NVIDIA OpenCL compiler accepts them inside
OpenCL C; the target's probe (:mod:`accy.backends.opencl.tensor_cores`) says which run."""

from __future__ import annotations

from accy.ir.node import Node
from accy.ir.ops import Op, OpKind
from accy.ir.types import DType
from accy.kernels.ir import (
    INDEX,
    Bin,
    Call,
    Cast,
    Cond,
    Expr,
    InlineAsm,
    Let,
    Lit,
    Stmt,
    Var,
    idx,
    mul,
)

MMA_TF32 = ("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, "
            "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};")
MMA_F16 = ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
           "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};")
CVT_TF32 = "cvt.rna.tf32.f32 %0, %1;"
# the 3xtf32 split's big part, saturating (+-inf and overflow: the largest finite TF32): x
# clamped to the largest f32 that rounds to it (max.f32 and min.f32 give the other operand
# for a NaN, whose small part x - big is then NaN, as the product), then rounded to nearest,
# ties away (half the dropped bits' weight added, those bits cleared). For every other x the
# bits of cvt.rna.satfinite.tf32.f32, in four instructions where ptxas makes the cvt six.
TF32_BIG_SAT = ("{ .reg .f32 c; max.f32 c, %1, 0fFF7FEFFF; min.f32 c, c, 0f7F7FEFFF; "
                "mov.b32 %0, c; add.s32 %0, %0, 4096; and.b32 %0, %0, -8192; }")
# 16 bytes global -> local, bypassing L1; the second form copies the first %2 bytes and fills
# the rest with zeros (0: zeros outside the operands). Local addresses are the 32-bit
# shared-window address, (uint)(size_t) of the __local pointer (the probe checks it).
CP_ASYNC_16 = "cp.async.cg.shared.global [%0], [%1], 16;"
CP_ASYNC_ZFILL = "cp.async.cg.shared.global [%0], [%1], 16, %2;"
# 4 or 8 bytes ({} the size; through L1, as .cg takes 16 only), plain and zero-filling
CP_ASYNC_CA = "cp.async.ca.shared.global [%0], [%1], {};"
CP_ASYNC_CA_ZFILL = "cp.async.ca.shared.global [%0], [%1], {}, %2;"
CP_COMMIT = "cp.async.commit_group;"
CP_WAIT = "cp.async.wait_group {};"  # groups that may stay in flight
# two f32 values rounded to f16 (to nearest even) as one register of halves: %1 the high
# half, %2 the low one (sm_80 PTX, as mma.m16n8k16.f16)
CVT_F16X2 = "cvt.rn.f16x2.f32 %0, %1, %2;"
# 2^x, approximate (about 2 ulp), subnormal results flushed to zero
EX2_APPROX = "ex2.approx.ftz.f32 %0, %1;"
# the value of the lane ``lane ^ MASK`` of the warp (all 32 lanes take part): quad reductions
# over a row of an mma accumulator fragment
SHFL_BFLY = "shfl.sync.bfly.b32 %0, %1, {}, 0x1f, 0xffffffff;"


def cp_async(dst: Expr, buf: str, at: Expr, elem_bytes: int, size: int,
             guard: Expr | None) -> InlineAsm:
    """``cp.async`` of ``size`` bytes (16: ``.cg``, else ``.ca``) from element ``at`` of
    global argument ``buf`` (addressed as an integer: no pointer arithmetic on ``half*``) to
    local address ``dst``; where ``guard`` is given and false, from element 0 with a source
    size of 0 (zeros)."""
    base = Cast(INDEX, Var(buf))
    if guard is None:
        return cp_async_from(dst, Bin("+", base, mul(at, idx(elem_bytes))), size, None)
    return cp_async_from(dst, Bin("+", base, mul(Cond(guard, at, idx(0)), idx(elem_bytes))),
                         size, Cond(guard, Lit(size, DType.i32), Lit(0, DType.i32)))


def cp_async_from(dst: Expr, src: Expr, size: int, n: Expr | None) -> InlineAsm:
    """``cp.async`` of ``size`` bytes from byte address ``src`` (an integer) to local address
    ``dst``, of which the first ``n`` (an i32; None: all) are read and the rest zero-filled."""
    if n is None:
        return InlineAsm(CP_ASYNC_16 if size == 16 else CP_ASYNC_CA.format(size), (),
                         (("r", dst), ("l", src)), True, ("memory",))
    return InlineAsm(CP_ASYNC_ZFILL if size == 16 else CP_ASYNC_CA_ZFILL.format(size), (),
                     (("r", dst), ("l", src), ("r", n)), True, ("memory",))


def tf32_registers(name: str, value: Expr, policy: str, big_cvt: str = CVT_TF32
                   ) -> list[Stmt]:
    """The registers of one f32 fragment value under ``policy``: ``name``, its TF32 rounding
    (``tf32``), or ``name``, the big part (rounded by ``big_cvt``), and ``name``_s, the small
    part ``tf32(value - big)`` (``3xtf32``)."""
    raw, small = f"{name}_f", f"{name}_s"
    cvt = CVT_TF32 if policy == "tf32" else big_cvt
    out: list[Stmt] = [Let(raw, DType.f32, value),
                       Let(name, DType.i32, Lit(0, DType.i32), True),
                       InlineAsm(cvt, (("=r", name),), (("f", Var(raw)),), False)]
    if policy == "tf32":
        return out
    return out + [Let(small, DType.i32, Lit(0, DType.i32), True),
                  InlineAsm(CVT_TF32, (("=r", small),), (("f", Bin(
                      "-", Var(raw), Call("bitcast_f32", (Var(name),)))),), False)]


def tf32_products(acc: list[str], a: list[str], b: list[str], split_a: bool, split_b: bool
                  ) -> list[Stmt]:
    """The TF32 ``mma.sync`` of one fragment pair into accumulators ``acc``, from registers
    ``a`` (4) and ``b`` (2); a side that is split (:func:`tf32_registers` under 3xtf32) adds
    the product of its small parts (``name``_s) with the other's big ones, first: the small
    products are summed before big*big."""
    terms = [(sa, sb) for sa, sb, used in (("_s", "", split_a), ("", "_s", split_b)) if used]
    return [InlineAsm(MMA_TF32, tuple(("+f", c) for c in acc),
                      tuple(("r", Var(f"{v}{sa}")) for v in a)
                      + tuple(("r", Var(f"{v}{sb}")) for v in b))
            for sa, sb in (*terms, ("", ""))]


def exact_in_tf32(node: Node) -> bool:
    """Whether every value of ``node`` is exact in TF32 (10 explicit mantissa bits, f32's
    exponent range): f16 values cast to f32 (11 significant bits), through views and concats
    of them."""
    if node.op.kind is OpKind.MOVEMENT:
        return all(exact_in_tf32(s) for s in node.srcs)
    return node.op is Op.CAST and node.srcs[0].type.dtype is DType.f16
