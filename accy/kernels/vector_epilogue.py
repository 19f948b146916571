"""A contraction's elementwise epilogue on whole vectors, for CPU targets.

The tiled contraction keeps ``vn`` consecutive outputs of a row in one vector accumulator. Its
epilogue (bias, activation, ...) is generated lane by lane by the loop-nest machinery, which is
what a GPU wants (lanes are registers) but not a CPU: PoCL compiles each lane's ``erf`` or
``exp`` as a scalar library call, which can cost more than the product itself (see
papers/kernels.md). Here the epilogue computes on the accumulator as a whole:
every op in its vector form (the forms :class:`accy.kernels.reduction.VectorEvaluator` uses),
inputs read as vectors along the row (``vloadN`` at the first lane's element) or splat where
they are broadcast along it, comparisons as lane masks for ``select`` and casts to float.

:func:`accepts` says whether an epilogue has that form: every op between the contraction and
the stored values elementwise over f32 (comparisons of f32 values only feeding a ``select``
or a cast to f32), every input f32 and broadcast against the output by trailing dimensions.
"""

from __future__ import annotations

from collections.abc import Sequence

from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.types import DType
from accy.kernels import exprs
from accy.kernels.ir import (
    Bin,
    Cond,
    Expr,
    Let,
    Load,
    Splat,
    Var,
    VectorLoadAt,
    linear,
    row_major,
)
from accy.kernels.loopnest import EpilogueBuilder, broadcast_coords
from accy.kernels.reduction import _VECTOR_FLOAT
from accy.plans import is_inlined

__all__ = ["accepts", "value"]

_F32, _MASK = DType.f32, DType.i32  # a float vector's comparison is a mask of ints (-1 or 0)


def accepts(values: Sequence[Node], given: Node, inside: set[Node], lanes: int) -> bool:
    """Whether the epilogue computing ``values`` from ``given`` (the contraction's result)
    has the vector form (module docstring)."""
    shape = given.type.shape
    if not shape or shape[-1] % lanes or any(
            v.type.dtype is not _F32 or v.type.shape != shape for v in values):
        return False
    seen: set[Node] = set()
    stack = list(values)
    while stack:
        n = stack.pop()
        if n in seen or n is given:
            continue
        seen.add(n)
        if n not in inside:
            if not (is_inlined(n) and n.type.size == 1) and (
                    n.type.dtype is not _F32 or (n.type.size > 1 and n.type.shape[-1]
                                                 not in (1, shape[-1]))):
                return False
            continue
        # a comparison's mask (its bool result) may only be a select's condition or cast
        # to f32: every other op takes f32 operands
        condition = n.srcs[0]
        if n.op in exprs.COMPARE:
            ok = all(s.type.dtype is _F32 for s in n.srcs)
        elif n.op in (Op.SELECT, Op.CAST):
            ok = (n.type.dtype is _F32 and condition.op in exprs.COMPARE and condition in inside
                  and all(s.type.dtype is _F32 for s in n.srcs[1:]))
        else:
            ok = (n.op in _VECTOR_FLOAT and n.type.dtype is _F32
                  and all(s.type.dtype is _F32 for s in n.srcs))
        if not ok:
            return False
        stack.extend(n.srcs)
    return True


def value(epi: EpilogueBuilder, node: Node, acc: Expr, coords: tuple[Expr, ...],
          lanes: int, memo: dict[Node, Expr]) -> Expr:
    """``node`` (an :func:`accepts`-ed epilogue value) as a vector of ``lanes`` outputs, the
    contraction's being the vector ``acc`` and the first lane's coordinates ``coords``;
    bound in ``epi.em``'s current scope (``memo``: values already bound there)."""
    memo.setdefault(epi.given, acc)
    stack: list[tuple[Node, bool]] = [(node, False)]
    while stack:  # iterative: fused chains may be thousands of ops deep
        n, ready = stack.pop()
        if n in memo:
            continue
        if n not in epi.inside:
            memo[n] = _leaf(epi, n, coords, lanes)
            continue
        if not ready:
            stack.append((n, True))
            stack.extend((s, False) for s in n.srcs if s not in memo)
            continue
        args = [memo[s] for s in n.srcs]
        if n.op in exprs.COMPARE:
            memo[n] = _bind(epi, Bin(exprs.COMPARE[n.op], args[0], args[1]), _MASK, lanes)
        elif n.op is Op.SELECT:
            memo[n] = _bind(epi, Cond(args[0], args[1], args[2]), _F32, lanes)
        elif n.op is Op.CAST:
            one, zero = (Splat(_F32, lanes, exprs.const(v, _F32)) for v in (1.0, 0.0))
            memo[n] = _bind(epi, Cond(args[0], one, zero), _F32, lanes)
        else:
            memo[n] = _bind(epi, exprs.elementwise(n.op, args, _F32, _F32), _F32, lanes)
    return memo[node]


def _leaf(epi: EpilogueBuilder, n: Node, coords: tuple[Expr, ...], lanes: int) -> Expr:
    """An input: a literal, or read along the row (one element per lane) or once (splat)."""
    if is_inlined(n):
        return Splat(_F32, lanes, exprs.const(n.value.reshape(-1)[0].item(), _F32))
    at = linear(broadcast_coords(coords, n.type.shape), row_major(n.type.shape))
    arg = epi.arg_of[n]
    if n.type.size == 1 or n.type.shape[-1] == 1:
        return _bind(epi, Splat(_F32, lanes, Load(arg, at)), _F32, lanes)
    return _bind(epi, VectorLoadAt(arg, at, lanes), _F32, lanes)


def _bind(epi: EpilogueBuilder, e: Expr, dtype: DType, lanes: int) -> Expr:
    name = epi.em.fresh("x")
    epi.em.emit(Let(name, dtype, e, lanes=lanes))
    return Var(name)
