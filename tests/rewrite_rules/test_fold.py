"""The fold rules' splat arithmetic equals the interpreter's, op by op and dtype by dtype."""

from __future__ import annotations

import math

import numpy as np
import pytest

from accy.errors import AccyError, ShapeError
from accy.ir.interpret import interpret
from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.program import Function, Program
from accy.ir.shapes import infer
from accy.ir.types import DType, TensorType
from rewrites._numeric import BINARY, UNARY, foldable, folded

VALUES = {
    "float": [0.0, 1.5, -2.25, 3.0, 0.1, 100.0, 1e-3, -0.5],
    "int": [0, 1, -7, 3, 2**31 - 1, -2],
    "bool": [0.0, 1.0],
}


def _const(value: float, dtype: DType) -> Node:
    arr = np.full((3,), value).astype(dtype.numpy)
    return Node(Op.CONSTANT, TensorType((3,), dtype), (), {"value": arr.tobytes()})


def _interpreted(op: Op, operands: list[Node], **attrs) -> np.ndarray | None:
    try:
        t, norm = infer(op, tuple(o.type for o in operands), attrs)
    except ShapeError:
        return None
    node = Node(op, t, tuple(operands), norm)
    try:
        (out,) = interpret(Program((Function("f", (), (), (node,)),)), [])
    except AccyError:
        return np.asarray([])  # the interpreter refuses (integer division by zero)
    return out


def _check(op_name: str, out_type: str, args: list[tuple[float, DType]], want: np.ndarray
           ) -> None:
    flat = [x for v, d in args for x in (repr(float(np.asarray(v, d.numpy))), f"{d.value}[3]")]
    if want.size == 0:
        assert not foldable(op_name, out_type, *flat)
        return
    value = want.reshape(-1)[0]
    representable = bool(np.isfinite(value)) and not (
        float(value) == 0.0 and math.copysign(1.0, float(value)) < 0)
    if want.dtype.kind in "iu":
        representable = abs(int(value)) <= 2**53
    assert foldable(op_name, out_type, *flat) == representable, (op_name, args, value)
    if representable:
        got = np.asarray(folded(op_name, out_type, *flat)).astype(want.dtype)
        assert got.tobytes() == np.asarray(value).astype(want.dtype).tobytes(), (op_name, args)


def _out_type(want: np.ndarray, dtype: DType) -> str:
    return f"{(DType.from_numpy(want.dtype) if want.size else dtype).value}[3]"


def _kind(d: DType) -> str:
    return "float" if d.is_float else "int" if d.is_int else "bool"


@pytest.mark.parametrize("dtype", list(DType), ids=lambda d: d.value)
@pytest.mark.parametrize("op_name", sorted(UNARY))
def test_unary_folds_like_the_interpreter(op_name, dtype):
    op = Op(op_name)
    for v in VALUES[_kind(dtype)]:
        want = _interpreted(op, [_const(v, dtype)])
        if want is not None:
            _check(op_name, _out_type(want, dtype), [(v, dtype)], want)


@pytest.mark.parametrize("dtype", list(DType), ids=lambda d: d.value)
@pytest.mark.parametrize("op_name", sorted(BINARY))
def test_binary_folds_like_the_interpreter(op_name, dtype):
    op = Op(op_name)
    values = VALUES[_kind(dtype)]
    for a in values:
        for b in values[:4]:
            want = _interpreted(op, [_const(a, dtype), _const(b, dtype)])
            if want is None:
                continue
            _check(op_name, _out_type(want, dtype), [(a, dtype), (b, dtype)], want)


@pytest.mark.parametrize("src", list(DType), ids=lambda d: d.value)
@pytest.mark.parametrize("dst", list(DType), ids=lambda d: d.value)
def test_cast_folds_like_the_interpreter(src, dst):
    for v in VALUES[_kind(src)]:
        want = _interpreted(Op.CAST, [_const(v, src)], dtype=dst)
        _check("cast", f"{dst.value}[3]", [(v, src)], want)


def test_select_folds_like_the_interpreter():
    for cond in (0.0, 1.0):
        want = _interpreted(Op.SELECT, [_const(cond, DType.bool), _const(1.5, DType.f32),
                                        _const(-2.0, DType.f32)])
        _check("select", "f32[3]", [(cond, DType.bool), (1.5, DType.f32), (-2.0, DType.f32)],
               want)


def test_unfoldable_inputs_are_refused_not_raised():
    assert not foldable("div", "i32[3]", "1", "i32[3]", "0", "i32[3]")
    assert not foldable("log", "f32[3]", "-1", "f32[3]")  # nan
    assert not foldable("neg", "f32[3]", "0", "f32[3]")  # -0.0
    assert not foldable("no-such-op", "f32[3]", "1", "f32[3]")
    assert not foldable("add", "f32[3]", "x", "f32[3]", "1", "f32[3]")
