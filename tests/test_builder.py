"""Building programs: the explicit builder, @accy.function tracing, operators, build-time errors.

No ``from __future__ import annotations`` here: annotations must stay TensorTypes for tracing.
"""

import numpy as np
import pytest

import accy
from accy.builder import (
    Builder,
    Value,
    concat,
    cross_entropy,
    einsum,
    gather,
    scatter_add,
    select,
    trace,
)
from accy.errors import ShapeError
from accy.ir.ops import Op
from accy.ir.types import DType, TensorType

F4 = TensorType((4,), DType.f32)


def one_function(params, names=None):
    b = Builder()
    return b, b.begin_function("f", params, names)


def only(program: accy.Program):
    (fn,) = program.functions
    return fn


# explicit builder -------------------------------------------------------------------------


def test_explicit_builder_program() -> None:
    b = Builder()
    t = b.tensor(DType.f32, [4])
    assert t == F4 == accy.f32[4]
    f = b.begin_function("add_mul", [t, t, t], ["a", "b", "c"])
    s = f.add(f.param(0), f.param(1))
    f.return_(s, f.mul(s, f.parameter(2)))
    fn = f.finish()
    program = b.finish()
    assert program.functions == (fn,)
    assert fn.name == "add_mul" and fn.param_names == ("a", "b", "c")
    assert [r.op for r in fn.results] == [Op.ADD, Op.MUL]
    assert fn.results[1].srcs[0] is fn.results[0]  # shared, not rebuilt
    assert [p.attr("index") for p in fn.params] == [0, 1, 2]
    accy.verify(program)
    a, bb, c = (np.arange(4, dtype=np.float32) + k for k in range(3))
    s_out, p_out = accy.interpret(program, [a, bb, c])
    np.testing.assert_array_equal(s_out, a + bb)
    np.testing.assert_array_equal(p_out, (a + bb) * c)
    # the text form reads back to the same program
    assert accy.parse_program(accy.print_program(program)) == program


def test_builder_several_functions_and_default_names() -> None:
    b = Builder()
    for name in ("first", "second"):
        f = b.begin_function(name, [F4])
        f.return_(-f.param(0))
        f.finish()
    program = b.finish()
    assert [fn.name for fn in program.functions] == ["first", "second"]
    assert program.function("second").param_names == ("arg0",)
    with pytest.raises(KeyError):
        program.function()


def test_explicit_binary_spellings() -> None:
    _, f = one_function([F4, F4])
    x, y = f.param(0), f.param(1)
    spelled = [f.add(x, y), f.sub(x, y), f.mul(x, y), f.div(x, y), f.max(x, y), f.min(x, y)]
    assert [v.node.op for v in spelled] == [Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.MAX, Op.MIN]
    lifted = f.add(x, 3)
    assert lifted.node.srcs[1].op is Op.CONSTANT
    assert lifted.node.srcs[1].type == TensorType((), DType.f32)


def test_param_index_and_names_checked() -> None:
    _, f = one_function([F4])
    with pytest.raises(IndexError, match="no parameter 1"):
        f.param(1)
    b = Builder()
    with pytest.raises(ValueError, match="repeat"):
        b.begin_function("g", [F4, F4], ["x", "x"])
    with pytest.raises(ValueError, match="names"):
        b.begin_function("g", [F4], ["x", "y"])
    with pytest.raises(ValueError, match="identifier"):
        b.begin_function("g", [F4], ["not a name"])
    with pytest.raises(ValueError, match="identifier"):
        b.begin_function("bad name", [F4])


# tracing ----------------------------------------------------------------------------------


def test_function_with_annotations() -> None:
    @accy.function
    def scale_add(a: accy.f32[2, 3], b: accy.f32[3]):
        return a * 2.0 + b

    assert isinstance(scale_add, accy.Program)
    fn = only(scale_add)
    assert fn.name == "scale_add" and fn.param_names == ("a", "b")
    assert [p.type for p in fn.params] == [TensorType((2, 3), DType.f32),
                                          TensorType((3,), DType.f32)]
    assert fn.results[0].type == TensorType((2, 3), DType.f32)
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([1, 2, 3], np.float32)
    (out,) = accy.interpret(scale_add, [a, b])
    np.testing.assert_array_equal(out, a * 2 + b)


def test_function_with_examples() -> None:
    @accy.function(np.zeros((2, 3), np.float32), np.zeros(3, np.int32))
    def f(x, idx):
        return x * 2.0, idx + 1

    fn = only(f)
    assert [p.type for p in fn.params] == [TensorType((2, 3), DType.f32),
                                          TensorType((3,), DType.i32)]
    assert [r.type.dtype for r in fn.results] == [DType.f32, DType.i32]

    @accy.function(accy.f64[5])
    def g(x):
        return x.exp()

    assert only(g).params[0].type == TensorType((5,), DType.f64)

    def h(x, y):
        return x - y

    program = accy.function(h, np.zeros(4, np.float32), accy.f32[4])
    assert only(program).name == "h"
    assert trace(h, accy.f32[4], accy.f32[4], name="renamed").functions[0].name == "renamed"


def test_function_tuple_results_and_scalar_types() -> None:
    @accy.function
    def f(x: accy.f32[()], y: accy.i64[3]):
        return x + 1.0, y * 2

    fn = only(f)
    assert fn.params[0].type == TensorType((), DType.f32)
    assert [r.type for r in fn.results] == [TensorType((), DType.f32),
                                            TensorType((3,), DType.i64)]


def test_function_needs_annotations_or_examples() -> None:
    def f(x, y: accy.f32[4]):
        return x + y

    with pytest.raises(ValueError, match=r"\['x'\].*annotation"):
        accy.function(f)
    with pytest.raises(ValueError, match="2 inputs, 1 examples"):
        accy.function(f, np.zeros(4, np.float32))


def test_function_must_return_values() -> None:
    def f(x: accy.f32[4]):
        return 1.0

    with pytest.raises(TypeError, match="returns 1.0"):
        accy.function(f)

    def g(x: accy.f32[4]):
        return ()

    with pytest.raises(ValueError, match="at least one"):
        accy.function(g)


def test_traced_value_has_no_truth_value() -> None:
    def f(x: accy.f32[4]):
        if x > 0:
            return x
        return -x

    with pytest.raises(TypeError, match="select"):
        accy.function(f)


def test_function_with_postponed_annotations() -> None:
    source = (
        "from __future__ import annotations\n"
        "import accy\n"
        "def add(a: accy.f32[4], b: accy.f32[4]):\n"
        "    return a + b\n"
    )
    namespace: dict = {}
    exec(compile(source, "<postponed>", "exec"), namespace)
    program = accy.function(namespace["add"])
    assert [p.type for p in only(program).params] == [F4, F4]


# operators --------------------------------------------------------------------------------


def test_operators_build_ops() -> None:
    @accy.function
    def f(x: accy.f32[4], y: accy.f32[4]):
        return (x + y, x - y, x * y, x / y, x ** y, -x, abs(x), x < y, x <= y, x > y,
                x >= y, (x < y) & (x > y), (x < y) | (x > y), ~(x < y))

    ops = [r.op for r in only(f).results]
    assert ops == [Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.POW, Op.NEG, Op.ABS, Op.LT, Op.LE,
                   Op.GT, Op.GE, Op.AND, Op.OR, Op.NOT]
    types = [r.type.dtype for r in only(f).results]
    assert types[:7] == [DType.f32] * 7 and types[7:] == [DType.bool] * 7


def test_reflected_operators_keep_operand_order() -> None:
    @accy.function
    def f(x: accy.f32[4]):
        return 2.0 - x, 2.0 / x, 2.0 ** x, 2.0 + x, 2.0 * x

    fn = only(f)
    for r in fn.results:
        const, param = r.srcs
        assert const.op is Op.CONSTANT and param.op is Op.PARAM
    x = np.array([1, 2, 4, 8], np.float32)
    got = accy.interpret(f, [x])
    for g, want in zip(got, [2 - x, 2 / x, 2 ** x, 2 + x, 2 * x], strict=True):
        np.testing.assert_allclose(g, want, rtol=1e-6)


def test_methods_and_free_functions() -> None:
    @accy.function
    def f(x: accy.f32[2, 3], idx: accy.i32[2]):
        return (x.exp(), x.relu(), x.sum(), x.sum(1, keepdims=True), x.mean(0), x.max(),
                x.reshape(3, 2), x.T, x.transpose(1, 0), x[:, 1:], x.broadcast_to(4, 2, 3),
                x.softmax(), x.astype(DType.i32), accy.maximum(x, 0.0), accy.minimum(1.0, x),
                select(x > 0, x, 0.0), concat([x, x], axis=1), gather(x, idx, axis=1),
                x @ x.T)

    ops = [r.op for r in only(f).results]
    assert ops == [Op.EXP, Op.RELU, Op.REDUCE_SUM, Op.REDUCE_SUM, Op.REDUCE_MEAN,
                   Op.REDUCE_MAX, Op.RESHAPE, Op.TRANSPOSE, Op.TRANSPOSE, Op.SLICE,
                   Op.BROADCAST, Op.SOFTMAX, Op.CAST, Op.MAX, Op.MIN, Op.SELECT, Op.CONCAT,
                   Op.GATHER, Op.EINSUM]
    shapes = [r.type.shape for r in only(f).results]
    assert shapes == [(2, 3), (2, 3), (), (2, 1), (3,), (), (3, 2), (3, 2), (3, 2), (2, 2),
                      (4, 2, 3), (2, 3), (2, 3), (2, 3), (2, 3), (2, 3), (2, 6), (2, 2),
                      (2, 2)]
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    idx = np.array([2, 0], np.int32)
    got = accy.interpret(f, [x, idx])
    np.testing.assert_array_equal(got[9], x[:, 1:])
    np.testing.assert_array_equal(got[17], np.take(x, idx, axis=1))
    np.testing.assert_allclose(got[18], x @ x.T)


def test_scalars_lifted_to_constants() -> None:
    @accy.function
    def f(x: accy.f32[4], n: accy.i32[4]):
        return x + 1.5, n * 3, x * True

    r_float, r_int, r_bool = only(f).results
    c = r_float.srcs[1]
    assert c.op is Op.CONSTANT and c.type == TensorType((), DType.f32)
    assert c.value == np.float32(1.5)
    c = r_int.srcs[1]
    assert c.type == TensorType((), DType.i32) and c.value == 3
    assert r_bool.srcs[1].type.dtype is DType.f32 and r_bool.srcs[1].value == 1.0


def test_arrays_lifted_to_constants() -> None:
    @accy.function
    def f(x: accy.f32[3]):
        return x + np.array([1, 2, 3], np.float32), np.arange(3, dtype=np.float32) * x

    a, b = only(f).results
    assert a.srcs[1].op is Op.CONSTANT and a.srcs[1].type == TensorType((3,), DType.f32)
    assert b.srcs[0].op is Op.CONSTANT  # numpy on the left defers to Value
    np.testing.assert_array_equal(a.srcs[1].value, [1, 2, 3])


def test_explicit_constants() -> None:
    _, f = one_function([F4])
    assert f.constant(2.5).type == TensorType((), DType.f32)  # Python floats are f32
    assert f.constant(np.zeros((2, 2), np.float64)).type == TensorType((2, 2), DType.f64)
    assert f.constant(3).type.dtype is DType.i64
    assert f.constant([1, 2], DType.i32).type == TensorType((2,), DType.i32)
    assert f.constant(True).type.dtype is DType.bool


def test_numpy_f64_scalar_constant_keeps_dtype() -> None:
    _, f = one_function([F4])
    assert f.constant(np.float64(2.5)).type.dtype is DType.f64


def test_float_scalar_not_truncated_into_int() -> None:
    _, f = one_function([TensorType((4,), DType.i32)])
    try:
        v = f.param(0) + 0.5
    except (ShapeError, TypeError, ValueError):
        return  # refusing is fine
    assert v.node.srcs[1].value != 0


def test_out_of_range_int_scalar_not_wrapped() -> None:
    _, f = one_function([TensorType((4,), DType.i32)])
    try:
        v = f.param(0) + 2**40
    except (ShapeError, TypeError, ValueError, OverflowError):
        return  # refusing is fine
    assert int(v.node.srcs[1].value) == 2**40


def test_select_with_two_scalar_branches() -> None:
    _, f = one_function([F4])
    try:
        v = select(f.param(0) > 0, 1.0, 2.0)
    except (ShapeError, TypeError, ValueError):
        return  # refusing with a clear error is fine
    assert v.node.op is Op.SELECT


# build-time errors ------------------------------------------------------------------------


def shape_error(fn) -> str:
    with pytest.raises(ShapeError) as info:
        fn()
    return str(info.value)


def test_non_broadcasting_add_names_op_and_types() -> None:
    _, f = one_function([F4, TensorType((3,), DType.f32)])
    message = shape_error(lambda: f.param(0) + f.param(1))
    assert message.startswith("add(f32[4], f32[3])")
    assert "broadcast" in message


def test_einsum_errors() -> None:
    _, f = one_function([F4, TensorType((4, 3), DType.f32), TensorType((3, 5), DType.f32)])
    v, m, n = f.param(0), f.param(1), f.param(2)
    assert einsum("ij,jk->ik", m, n).shape == (4, 5)
    message = shape_error(lambda: einsum("ij,jk->ik", v, m))
    assert message.startswith("einsum(f32[4], f32[4,3])")
    assert "rank" in message
    message = shape_error(lambda: einsum("ij,jk->ik", m, m))
    assert message.startswith("einsum(f32[4,3], f32[4,3])")
    assert "'j'" in message and "3" in message and "4" in message
    message = shape_error(lambda: einsum("ij->iz", m))
    assert message.startswith("einsum(f32[4,3])") and "z" in message
    message = shape_error(lambda: einsum("ij,jk", m))
    assert "2 operand terms" in message or "operand" in message


def test_gather_with_float_indices() -> None:
    _, f = one_function([F4, F4])
    message = shape_error(lambda: gather(f.param(0), f.param(1)))
    assert message.startswith("gather(f32[4], f32[4])")
    assert "indices" in message and "f32" in message


def test_mixed_dtypes() -> None:
    _, f = one_function([F4, TensorType((4,), DType.f64), TensorType((4,), DType.i32)])
    x, d, i = f.param(0), f.param(1), f.param(2)
    message = shape_error(lambda: x + d)
    assert message.startswith("add(f32[4], f64[4])") and "dtype" in message
    message = shape_error(lambda: i * x)
    assert message.startswith("mul(i32[4], f32[4])")
    message = shape_error(lambda: accy.maximum(x, i))
    assert message.startswith("max(f32[4], i32[4])")
    # casting first is the fix
    assert (x + d.astype(DType.f32)).dtype is DType.f32


def test_other_build_time_errors() -> None:
    _, f = one_function([F4, TensorType((2, 2), DType.f32), TensorType((4,), DType.bool)])
    x, m, c = f.param(0), f.param(1), f.param(2)
    assert shape_error(lambda: c + c).startswith("add(bool[4], bool[4])")
    assert shape_error(lambda: x & x).startswith("and(f32[4], f32[4])")
    assert shape_error(lambda: select(x, x, x)).startswith("select(f32[4], f32[4], f32[4])")
    assert shape_error(lambda: x.reshape(3)).startswith("reshape(f32[4])")
    assert shape_error(lambda: m.transpose(0, 0)).startswith("transpose(f32[2,2])")
    assert shape_error(lambda: x.sum(1)).startswith("reduce_sum(f32[4])")
    assert shape_error(lambda: x @ x).startswith("matmul(f32[4], f32[4])")
    assert shape_error(lambda: x[1]).startswith("slice(f32[4])")
    assert shape_error(lambda: x.astype(DType.i32).exp()).startswith("exp(i32[4])")
    assert shape_error(lambda: concat([x, m]))
    idx = x.astype(DType.i32)
    assert shape_error(lambda: scatter_add(x, idx, m)).startswith("scatter_add(")
    assert shape_error(lambda: cross_entropy(m, m)).startswith("cross_entropy(")


def test_values_from_another_function_rejected() -> None:
    b = Builder()
    f = b.begin_function("f", [F4])
    g = b.begin_function("g", [F4])
    with pytest.raises(ValueError, match="another function"):
        f.param(0) + g.param(0)
    with pytest.raises(ValueError, match="another function"):
        f.add(f.param(0), g.param(0))
    with pytest.raises(TypeError, match="not a Value of its own"):
        f.return_(g.param(0))
    with pytest.raises(TypeError):
        f.op(Op.NEG, 1.0)


# return_ and finishing --------------------------------------------------------------------


def test_return_type_checked_against_declared_results() -> None:
    b = Builder()
    f = b.begin_function("f", [F4], results=[TensorType((4,), DType.f64)])
    with pytest.raises(ShapeError) as info:
        f.return_(f.param(0))
    assert "f64[4]" in str(info.value) and "f32[4]" in str(info.value)
    assert "f" in str(info.value)
    f.return_(f.param(0).astype(DType.f64))  # the right type is accepted
    assert f.finish().results[0].type.dtype is DType.f64
    g = b.begin_function("g", [F4], results=[F4, F4])
    with pytest.raises(ShapeError):
        g.return_(g.param(0))


def test_return_rules() -> None:
    b = Builder()
    f = b.begin_function("f", [F4])
    with pytest.raises(ValueError, match="no return_"):
        f.finish()
    with pytest.raises(ValueError, match="at least one"):
        f.return_()
    with pytest.raises(TypeError):
        f.return_(np.zeros(4, np.float32))
    f.return_(f.param(0))
    with pytest.raises(ValueError, match="already returned"):
        f.return_(f.param(0))


def test_duplicate_function_names() -> None:
    b = Builder()
    first = b.begin_function("dup", [F4])
    first.return_(first.param(0))
    first.finish()
    second = b.begin_function("dup", [F4])
    second.return_(-second.param(0))
    with pytest.raises(ValueError, match="'dup' is already defined"):
        second.finish()
    assert [fn.name for fn in b.finish().functions] == ["dup"]
    fn = b.finish().functions[0]
    with pytest.raises(ValueError, match="duplicate function names"):
        accy.Program((fn, fn))


def test_value_repr_and_properties() -> None:
    _, f = one_function([TensorType((2, 3), DType.i64)])
    x = f.param(0)
    assert isinstance(x, Value)
    assert x.shape == (2, 3) and x.dtype is DType.i64 and x.type.rank == 2
    assert "i64[2,3]" in repr(x)


def test_eq_and_ne_are_elementwise_in_the_explicit_builder() -> None:
    b = Builder()
    f = b.begin_function("cmp", [F4, F4])
    x, y = f.param(0), f.param(1)
    eq, ne = x == y, x != 2.0
    assert (eq.node.op, ne.node.op) == (Op.EQ, Op.NE)
    assert eq.type == TensorType((4,), DType.bool)
    assert len({x, y, eq, x}) == 3  # hashing is by identity
    f.return_(eq, ne)
    f.finish()
    a = np.float32([1, 2, 3, 4])
    got = accy.interpret(b.finish(), [a, np.float32([1, 0, 3, 0])])
    np.testing.assert_array_equal(got[0], [True, False, True, False])
    np.testing.assert_array_equal(got[1], a != 2)
