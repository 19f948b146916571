"""The numpy reference interpreter against direct numpy computations."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from accy.errors import InterpretError
from accy.ir.interpret import interpret
from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.program import Function, Program
from accy.ir.shapes import infer
from accy.ir.types import DType, TensorType

F16, F32, F64, I32, I64, BOOL = DType.f16, DType.f32, DType.f64, DType.i32, DType.i64, DType.bool
RNG = np.random.default_rng(1234)


def T(dtype: DType, *shape: int) -> TensorType:
    return TensorType(shape, dtype)


def mk(op: Op, *srcs: Node, **attrs) -> Node:
    typ, norm = infer(op, tuple(s.type for s in srcs), attrs)
    return Node(op, typ, srcs, norm)


def const(arr) -> Node:
    arr = np.asarray(arr)
    return Node(Op.CONSTANT, TensorType(arr.shape, DType.from_numpy(arr.dtype)), (),
                {"value": arr.tobytes()})


def program(types: list[TensorType], body, names: list[str] | None = None, name: str = "f"):
    params = tuple(Node(Op.PARAM, t, (), {"index": i}) for i, t in enumerate(types))
    names = names or [f"x{i}" for i in range(len(types))]
    results = body(*params)
    results = results if isinstance(results, tuple) else (results,)
    return Program((Function(name, params, tuple(names), results),))


def run(op: Op, inputs: list[np.ndarray], precision="native", **attrs) -> np.ndarray:
    """Interpret ``op`` applied to parameters typed like ``inputs``."""
    types = [TensorType(x.shape, DType.from_numpy(x.dtype)) for x in inputs]
    p = program(types, lambda *ps: mk(op, *ps, **attrs))
    (out,) = interpret(p, inputs, precision=precision)
    return out


def rand(dtype: DType, *shape: int, lo: float = -3.0, hi: float = 3.0) -> np.ndarray:
    if dtype is BOOL:
        return RNG.random(shape) < 0.5
    if dtype.is_int:
        return RNG.integers(int(lo), int(hi) + 1, shape).astype(dtype.numpy)
    return RNG.uniform(lo, hi, shape).astype(dtype.numpy)


def check(out: np.ndarray, want, dtype: np.dtype, rtol: float) -> None:
    want = np.asarray(want)
    assert isinstance(out, np.ndarray)
    assert out.dtype == dtype and out.shape == want.shape
    np.testing.assert_allclose(out.astype(np.float64), want.astype(np.float64), rtol=rtol,
                               atol=rtol, equal_nan=True)


def erf(x):
    return np.vectorize(math.erf)(x)


UNARY = {
    Op.NEG: np.negative, Op.ABS: np.abs, Op.EXP: np.exp, Op.LOG: np.log, Op.SQRT: np.sqrt,
    Op.RSQRT: lambda x: 1 / np.sqrt(x), Op.SIN: np.sin, Op.COS: np.cos,
    Op.RECIPROCAL: lambda x: 1 / x, Op.FLOOR: np.floor, Op.CEIL: np.ceil, Op.ERF: erf,
    Op.RELU: lambda x: np.maximum(x, 0), Op.GELU: lambda x: 0.5 * x * (1 + erf(x / np.sqrt(2))),
    Op.SIGMOID: lambda x: 1 / (1 + np.exp(-x)), Op.TANH: np.tanh,
}
POSITIVE = {Op.LOG, Op.SQRT, Op.RSQRT}


@pytest.mark.parametrize("op", list(UNARY), ids=lambda o: o.value)
def test_unary_float(op):
    x = rand(F32, 3, 4, lo=0.1 if op in POSITIVE else -3.0)
    want = UNARY[op](x.astype(np.float64))
    check(run(op, [x]), want, np.dtype(np.float32), 1e-6)
    check(run(op, [x], "float64"), want, np.dtype(np.float64), 1e-12)
    h = x.astype(np.float16)
    check(run(op, [h]), UNARY[op](h.astype(np.float64)), np.dtype(np.float16), 2e-3)


@pytest.mark.parametrize("op", [Op.NEG, Op.ABS, Op.RELU], ids=lambda o: o.value)
def test_unary_int(op):
    x = rand(I32, 7, lo=-5, hi=5)
    out = run(op, [x], "float64")
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, UNARY[op](x))


def test_activation_edge_values():
    x = np.array([-1000.0, -50.0, 0.0, 50.0, 1000.0, np.inf, -np.inf], np.float32)
    s = run(Op.SIGMOID, [x])
    assert np.all(np.isfinite(s)) and s[0] == 0.0 and s[-3] == 1.0 and s[2] == 0.5
    g = run(Op.GELU, [x])
    np.testing.assert_array_equal(g, [-0.0, -0.0, 0.0, 50.0, 1000.0, np.inf, 0.0])
    assert np.isnan(run(Op.GELU, [np.array([np.nan], np.float32)])[0])


BINARY = {Op.ADD: np.add, Op.SUB: np.subtract, Op.MUL: np.multiply, Op.DIV: np.divide,
          Op.MAX: np.maximum, Op.MIN: np.minimum, Op.POW: np.power}


@pytest.mark.parametrize("op", list(BINARY), ids=lambda o: o.value)
def test_binary_float_broadcasting(op):
    a = rand(F32, 2, 3, 4, lo=0.5 if op is Op.POW else -3)
    b = rand(F32, 3, 1, lo=0.5)
    want = BINARY[op](a.astype(np.float64), b.astype(np.float64))
    check(run(op, [a, b]), want, np.dtype(np.float32), 1e-6)
    check(run(op, [a, b], "float64"), want, np.dtype(np.float64), 1e-12)


def test_max_min_propagate_nan():
    a = np.array([np.nan, 1.0], np.float32)
    b = np.array([0.0, np.nan], np.float32)
    assert np.isnan(run(Op.MAX, [a, b])).all() and np.isnan(run(Op.MIN, [a, b])).all()


@pytest.mark.parametrize("op", [Op.ADD, Op.SUB, Op.MUL, Op.MAX, Op.MIN], ids=lambda o: o.value)
def test_binary_int(op):
    a, b = rand(I64, 4, 5, lo=-9, hi=9), rand(I64, 5, lo=-9, hi=9)
    out = run(op, [a, b])
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, BINARY[op](a, b))


def test_int_div_truncates_toward_zero():
    a = np.array([-7, 7, -7, 7, 0, -1, 6], np.int32)
    b = np.array([2, 2, -2, -2, 3, 5, -3], np.int32)
    out = run(Op.DIV, [a, b])
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, [-3, 3, 3, -3, 0, 0, -2])
    np.testing.assert_array_equal(out, np.trunc(a / b).astype(np.int32))
    with pytest.raises(InterpretError, match="division by zero"):
        run(Op.DIV, [a, np.zeros_like(b)])


def test_int_arithmetic_wraps():
    big = np.array([2**31 - 1], np.int32)
    np.testing.assert_array_equal(run(Op.ADD, [big, big]), [-2])


COMPARE = {Op.EQ: np.equal, Op.NE: np.not_equal, Op.LT: np.less, Op.LE: np.less_equal,
           Op.GT: np.greater, Op.GE: np.greater_equal}


@pytest.mark.parametrize("op", list(COMPARE), ids=lambda o: o.value)
@pytest.mark.parametrize("dtype", [F32, I32], ids=lambda d: d.value)
def test_compare(op, dtype):
    a, b = rand(dtype, 3, 4, lo=-2, hi=2), rand(dtype, 4, lo=-2, hi=2)
    b[0] = a[0, 0]
    for precision in ("native", "float64"):
        out = run(op, [a, b], precision)
        assert out.dtype == np.bool_
        np.testing.assert_array_equal(out, COMPARE[op](a, b))


def test_logical_select_cast():
    p, q = rand(BOOL, 6), rand(BOOL, 1)
    np.testing.assert_array_equal(run(Op.NOT, [p]), ~p)
    np.testing.assert_array_equal(run(Op.AND, [p, q]), p & q)
    np.testing.assert_array_equal(run(Op.OR, [p, q]), p | q)
    np.testing.assert_array_equal(run(Op.EQ, [p, q]), p == q)
    a, b = rand(F32, 2, 6), rand(F32, 6)
    np.testing.assert_array_equal(run(Op.SELECT, [p, a, b]), np.where(p, a, b))
    x = np.array([-2.7, -0.5, 0.0, 0.5, 2.7], np.float32)
    np.testing.assert_array_equal(run(Op.CAST, [x], dtype=I32), [-2, 0, 0, 0, 2])
    np.testing.assert_array_equal(run(Op.CAST, [x], dtype=BOOL), [True, True, False, True, True])
    out = run(Op.CAST, [x], dtype=F16)
    assert out.dtype == np.float16 and np.array_equal(out, x.astype(np.float16))
    wide = run(Op.CAST, [x], "float64", dtype=F16)
    assert wide.dtype == np.float64 and np.array_equal(wide, x.astype(np.float64))
    n = np.array([1, -3], np.int32)
    assert run(Op.CAST, [n], "float64", dtype=F32).dtype == np.float64


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axes", [(0,), (1, 2), (), (0, 1, 2), (-1,)])
def test_reductions(axes, keepdims):
    x = rand(F32, 2, 3, 4)
    x64 = x.astype(np.float64)
    for op, f in [(Op.REDUCE_SUM, np.sum), (Op.REDUCE_MAX, np.max), (Op.REDUCE_MEAN, np.mean)]:
        want = f(x64, axis=axes, keepdims=keepdims)
        check(run(op, [x], axes=axes, keepdims=keepdims), want, np.dtype(np.float32), 1e-6)
        check(run(op, [x], "float64", axes=axes, keepdims=keepdims), want,
              np.dtype(np.float64), 1e-12)
    n = rand(I32, 2, 3, 4, lo=-100, hi=100)
    out = run(Op.REDUCE_SUM, [n], axes=axes, keepdims=keepdims)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, np.sum(n, axis=axes, keepdims=keepdims))
    out = run(Op.REDUCE_MAX, [n], axes=axes, keepdims=keepdims)
    np.testing.assert_array_equal(out, np.max(n, axis=axes, keepdims=keepdims))


def test_reductions_over_empty_axis():
    x = np.zeros((0, 3), np.float32)
    np.testing.assert_array_equal(run(Op.REDUCE_SUM, [x], axes=(0,), keepdims=False), [0, 0, 0])
    assert np.all(run(Op.REDUCE_MAX, [x], axes=(0,), keepdims=False) == -np.inf)
    assert np.all(np.isnan(run(Op.REDUCE_MEAN, [x], axes=(0,), keepdims=False)))
    assert run(Op.REDUCE_SUM, [np.array(2.5, np.float32)], axes=(), keepdims=False) == 2.5


@pytest.mark.parametrize("spec,shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij->ji", [(3, 4)]),
    ("ij,j->", [(3, 4), (4,)]),
    ("i,j,k->ijk", [(2,), (3,), (4,)]),
    ("ii->i", [(3, 3)]),
])
def test_einsum(spec, shapes):
    xs = [rand(F32, *s) for s in shapes]
    want = np.einsum(spec, *[x.astype(np.float64) for x in xs])
    check(run(Op.EINSUM, xs, spec=spec), want, np.dtype(np.float32), 1e-5)
    check(run(Op.EINSUM, xs, "float64", spec=spec), want, np.dtype(np.float64), 1e-12)
    ns = [rand(I32, *s, lo=-4, hi=4) for s in shapes]
    out = run(Op.EINSUM, ns, spec=spec)
    assert out.dtype == np.int32 and np.array_equal(out, np.einsum(spec, *ns))


def test_einsum_of_a_large_network_contracts_pairwise():
    # the overlap of two periodic matrix-product states: np.einsum(optimize=True) caps
    # intermediates at the largest operand and so loops over all 12 letters at once (~1e13
    # multiply-adds, hours); a pairwise order needs ~1e6
    spec = "aib,bjc,ckd,dla,eif,fjg,gkh,hle->"
    xs = [rand(F32, 16, 4, 16, lo=-1, hi=1) for _ in range(8)]
    start = time.perf_counter()
    native = run(Op.EINSUM, xs, spec=spec)
    wide = run(Op.EINSUM, xs, "float64", spec=spec)
    assert time.perf_counter() - start < 10
    # reference: the transfer matrices of the two rings, multiplied around the ring
    p, q = [x.astype(np.float64) for x in xs[:4]], [x.astype(np.float64) for x in xs[4:]]
    ring = np.eye(16 * 16)
    for a, b in zip(p, q, strict=True):
        ring = ring @ np.einsum("aib,eif->aebf", a, b).reshape(256, 256)
    want = np.trace(ring)
    check(wide, want, np.dtype(np.float64), 1e-10)
    check(native, want, np.dtype(np.float32), 1e-4)


def test_movement():
    x = rand(F32, 2, 3, 4)
    np.testing.assert_array_equal(run(Op.RESHAPE, [x], shape=(4, -1)), x.reshape(4, 6))
    np.testing.assert_array_equal(run(Op.TRANSPOSE, [x], perm=(2, 0, 1)), x.transpose(2, 0, 1))
    v = rand(F32, 3, 1)
    out = run(Op.BROADCAST, [v], shape=(2, 3, 5))
    np.testing.assert_array_equal(out, np.broadcast_to(v, (2, 3, 5)))
    assert out.flags.writeable and out.flags.c_contiguous
    got = run(Op.SLICE, [x], starts=(1, -2, 0), stops=(2, 3, 4), steps=(1, 1, 3))
    np.testing.assert_array_equal(got, x[1:2, -2:3, 0:4:3])
    y = rand(F32, 2, 5, 4)
    np.testing.assert_array_equal(run(Op.CONCAT, [x, y, x], axis=1),
                                  np.concatenate([x, y, x], axis=1))
    wide = run(Op.CONCAT, [x, y], "float64", axis=-2)
    assert wide.dtype == np.float64 and np.array_equal(wide, np.concatenate([x, y], 1))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_and_scatter_add(axis):
    x = rand(F32, 4, 5, 3)
    size = x.shape[axis]
    idx = RNG.integers(0, size, (2, 3)).astype(np.int32)
    idx[0, 0] = idx[1, 1] = size - 1  # repeated indices
    out = run(Op.GATHER, [x, idx], axis=axis)
    np.testing.assert_array_equal(out, np.take(x, idx, axis=axis))
    a = axis % 3
    upd = rand(F32, *(x.shape[:a] + idx.shape + x.shape[a + 1:]))
    want = x.astype(np.float64).copy()
    np.add.at(want, (slice(None),) * a + (idx,), upd.astype(np.float64))
    check(run(Op.SCATTER_ADD, [x, idx.astype(np.int64), upd], axis=axis), want,
          np.dtype(np.float32), 1e-6)
    check(run(Op.SCATTER_ADD, [x, idx, upd], "float64", axis=axis), want,
          np.dtype(np.float64), 1e-12)


def test_scatter_add_accumulates_ints():
    x = np.zeros(4, np.int64)
    idx = np.array([1, 1, 3, 1], np.int32)
    out = run(Op.SCATTER_ADD, [x, idx, np.array([1, 2, 3, 4], np.int64)], axis=0)
    np.testing.assert_array_equal(out, [0, 7, 0, 3])
    assert np.array_equal(x, np.zeros(4, np.int64))  # input untouched


@pytest.mark.parametrize("bad", [5, -1, 100])
def test_index_out_of_range(bad):
    x = rand(F32, 5, 2)
    idx = np.array([0, 4, bad, 1], np.int32)
    with pytest.raises(InterpretError, match=rf"gather: index {bad} at position \[2\] is out of "
                                             r"range \[0, 5\)"):
        run(Op.GATHER, [x, idx], axis=0)
    with pytest.raises(InterpretError, match=rf"scatter_add: index {bad}"):
        run(Op.SCATTER_ADD, [x, idx, rand(F32, 4, 2)], axis=0)


def ref_log_softmax(x, axis):
    x = x.astype(np.float64)
    m = x.max(axis=axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax_and_log_softmax(axis):
    x = rand(F32, 3, 4, 5, lo=-10, hi=10)
    want = ref_log_softmax(x, axis)
    check(run(Op.LOG_SOFTMAX, [x], axis=axis), want, np.dtype(np.float32), 1e-5)
    check(run(Op.LOG_SOFTMAX, [x], "float64", axis=axis), want, np.dtype(np.float64), 1e-12)
    check(run(Op.SOFTMAX, [x], axis=axis), np.exp(want), np.dtype(np.float32), 1e-6)
    check(run(Op.SOFTMAX, [x], "float64", axis=axis), np.exp(want), np.dtype(np.float64), 1e-12)


def test_softmax_is_stable():
    x = np.array([[1000.0, 1000.0], [-1000.0, 0.0]], np.float32)
    np.testing.assert_allclose(run(Op.SOFTMAX, [x], axis=1), [[0.5, 0.5], [0.0, 1.0]])
    out = run(Op.LOG_SOFTMAX, [x], axis=1)
    assert np.all(np.isfinite(out))


@pytest.mark.parametrize("shape", [(5,), (4, 5), (2, 3, 5)])
def test_cross_entropy(shape):
    logits = rand(F32, *shape, lo=-5, hi=5)
    labels = RNG.integers(0, shape[-1], shape[:-1]).astype(np.int32)
    ls = ref_log_softmax(logits, -1)
    want = -np.take_along_axis(ls, labels[..., None].astype(np.intp), -1).mean()
    out = run(Op.CROSS_ENTROPY, [logits, labels])
    check(out, want, np.dtype(np.float32), 1e-6)
    assert out.shape == ()
    check(run(Op.CROSS_ENTROPY, [logits, labels.astype(np.int64)], "float64"), want,
          np.dtype(np.float64), 1e-12)
    bad = labels.copy()
    bad.flat[-1] = shape[-1]
    with pytest.raises(InterpretError, match=f"cross_entropy: label {shape[-1]}"):
        run(Op.CROSS_ENTROPY, [logits, bad])


@pytest.mark.parametrize("dtype", list(DType), ids=lambda d: d.value)
def test_constants(dtype):
    vals = rand(dtype, 2, 3)
    p = program([], lambda: (const(vals), const(vals[0, 0])))
    a, b = interpret(p, [])
    assert a.dtype == dtype.numpy and np.array_equal(a, vals)
    assert b.shape == () and b == vals[0, 0]
    a.fill(0)  # results are writable copies
    (w, _) = interpret(p, [], precision="float64")
    assert w.dtype == (np.float64 if dtype.is_float else dtype.numpy)
    assert np.array_equal(w, vals)


# ---- inputs -------------------------------------------------------------------------------


def two_params():
    return program([T(F32, 2, 3), T(I32, 3)],
                   lambda a, n: mk(Op.ADD, a, mk(Op.CAST, n, dtype=F32)), names=["a", "n"])


def test_inputs_by_position_and_name():
    p = two_params()
    a, n = rand(F32, 2, 3), np.array([1, 2, 3], np.int32)
    (x,) = interpret(p, [a, n])
    (y,) = interpret(p, {"n": n, "a": a})
    np.testing.assert_array_equal(x, a + n.astype(np.float32))
    np.testing.assert_array_equal(x, y)
    (z,) = interpret(p, (a.tolist(), [1, 2, 3]))  # lists convert when the shape fits
    np.testing.assert_array_equal(z, x)
    (s,) = interpret(program([T(F32)], lambda a: mk(Op.NEG, a)), [2])
    assert s.shape == () and s.dtype == np.float32 and s == -2


@pytest.mark.parametrize("inputs,fragment", [
    ([np.zeros((2, 3), np.float32)], r"takes 2 inputs \(a, n\), got 1"),
    ([np.zeros((2, 3), np.float32)] * 3, "takes 2 inputs"),
    ([np.zeros((3, 2), np.float32), np.zeros(3, np.int32)],
     r"parameter %a expects f32\[2,3\], got f32\[3,2\]"),
    ([np.zeros((2, 3), np.float64), np.zeros(3, np.int32)],
     r"parameter %a expects f32\[2,3\], got f64\[2,3\]"),
    ([np.zeros((2, 3), np.float32), np.zeros(3, np.uint8)],
     r"parameter %n expects i32\[3\], got an array of numpy dtype uint8"),
    ([np.zeros((2, 3), np.float32), [1.5, 2.0, 3.0]], r"parameter %n expects i32\[3\], got list"),
    ([np.zeros((2, 3), np.float32), [1, 2]], r"parameter %n expects i32\[3\], got list"),
    ([np.zeros((2, 3), np.float32), [1, 2, 2**40]], r"parameter %n expects i32\[3\]"),
    ([np.zeros((2, 3), np.float32), "abc"], r"parameter %n expects i32\[3\]"),
    ({"a": np.zeros((2, 3), np.float32)}, r"missing \['n'\], unknown \[\]"),
    ({"a": 1, "n": 2, "q": 3}, r"unknown \['q'\]"),
    (np.zeros((2, 3), np.float32), "inputs must be a sequence"),
])
def test_input_errors(inputs, fragment):
    with pytest.raises(InterpretError, match=fragment):
        interpret(two_params(), inputs)


def test_function_selection_and_precision_errors():
    f = program([T(F32, 2)], lambda a: mk(Op.NEG, a), name="f").functions[0]
    g = program([T(F32, 2)], lambda a: mk(Op.EXP, a), name="g").functions[0]
    p = Program((f, g))
    x = np.array([0.0, 1.0], np.float32)
    np.testing.assert_array_equal(interpret(p, [x], function="f")[0], -x)
    np.testing.assert_array_equal(interpret(p, [x], function="g")[0], np.exp(x))
    with pytest.raises(InterpretError, match="name one of"):
        interpret(p, [x])
    with pytest.raises(InterpretError, match="no function 'h'"):
        interpret(p, [x], function="h")
    with pytest.raises(InterpretError, match="unknown precision"):
        interpret(p, [x], function="f", precision="f16")  # type: ignore[arg-type]


def test_float64_mode_is_more_accurate_for_f16():
    x = np.full(4096, 0.1, np.float16)
    p = program([T(F16, 4096)], lambda a: mk(Op.REDUCE_SUM, a, axes=(0,), keepdims=False))
    (native,) = interpret(p, [x])
    (wide,) = interpret(p, [x], precision="float64")
    assert native.dtype == np.float16 and wide.dtype == np.float64
    assert abs(wide - 4096 * float(np.float16(0.1))) < 1e-9


def test_results_are_copies_of_params():
    p = program([T(F32, 2)], lambda a: (a, mk(Op.NEG, a)))
    x = np.array([1.0, 2.0], np.float32)
    r, _ = interpret(p, [x])
    r[0] = 99
    assert x[0] == 1.0


def test_long_chain_and_shared_dag():
    def chain(a):
        x = a
        for i in range(5000):
            x = mk(Op.ADD if i % 2 else Op.MUL, x, a)
        return x

    p = program([T(F64, 3)], chain)
    assert len(p.functions[0].nodes()) == 5001
    a = np.array([0.5, -0.25, 0.125])
    want = a.copy()
    for i in range(5000):
        want = want + a if i % 2 else want * a
    np.testing.assert_allclose(interpret(p, [a])[0], want)

    def doubling(a):  # 2**200 paths without memoization
        x = a
        for _ in range(200):
            x = mk(Op.ADD, x, x)
        return x

    q = program([T(I64, 1)], doubling)
    assert interpret(q, [np.array([1], np.int64)])[0][0] == 0  # 2**200 wraps to 0
