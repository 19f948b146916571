"""The builder a researcher uses from the docs alone: accy's top-level op functions, operators
on traced values, gelu's two forms, tracing *args functions and annotations naming local
variables, and the message for a job prepared only part of the way.

No ``from __future__ import annotations`` here: some annotations must stay TensorTypes.
"""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opt_einsum import get_symbol

import accy
from accy.builder import Value
from accy.errors import NotPreparedError, ShapeError, VerifyError
from accy.ir.ops import Op
from accy.testing import check_end_to_end, programs_with, programs_with_inputs
from accy.tracing import TracingError

RNG = np.random.default_rng(16)


def ops_of(program):
    return [n.op for n in program.functions[0].nodes()]


def gelu_tanh_ref(x):
    x = x.astype(np.float64)
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_erf_ref(x):
    x = x.astype(np.float64)
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


# ---- exports ---------------------------------------------------------------------------------

EXPECTED = ["einsum", "gather", "scatter_add", "select", "where", "concat", "cross_entropy",
            "one_hot", "arange", "constant", "exp", "log", "sqrt", "tanh", "sigmoid", "relu",
            "gelu", "erf", "softmax", "log_softmax", "sum", "mean", "max", "reshape",
            "transpose", "broadcast_to", "matmul", "abs", "maximum", "minimum", "conv2d",
            "max_pool2d", "avg_pool2d", "pad", "trace", "function", "astype"]


def test_every_op_function_is_exported_at_the_top_level():
    missing = [n for n in EXPECTED if not callable(getattr(accy, n, None))]
    assert not missing
    builtin_names = {"abs", "max", "sum"}  # a star import must not hide Python's builtins
    assert not [n for n in EXPECTED if n not in accy.__all__ and n not in builtin_names]
    assert not builtin_names & set(accy.__all__)
    assert not [n for n in accy.__all__ if not hasattr(accy, n)]


# ---- functions against numpy -----------------------------------------------------------------

def test_elementwise_reductions_and_movement_match_numpy():
    @accy.function
    def f(x: accy.f32[3, 4], y: accy.f32[4, 2]):
        p = accy.abs(x) + 0.5
        return (accy.exp(x), accy.log(p), accy.sqrt(p), accy.tanh(x), accy.sigmoid(x),
                accy.relu(x), accy.erf(x), accy.softmax(x), accy.log_softmax(x, axis=0),
                accy.sum(x), accy.mean(x, 1), accy.max(x, [0], keepdims=True),
                accy.reshape(x, (2, 6)), accy.transpose(x), accy.broadcast_to(y, (3, 4, 2)),
                accy.matmul(x, y), accy.maximum(x, 0.0), accy.minimum(1.0, x),
                accy.astype(x, accy.DType.i32))

    x = RNG.standard_normal((3, 4)).astype(np.float32)
    y = RNG.standard_normal((4, 2)).astype(np.float32)
    e = np.exp(x - x.max(-1, keepdims=True))
    sm = e / e.sum(-1, keepdims=True)
    ls0 = x - x.max(0) - np.log(np.exp(x - x.max(0)).sum(0))
    want = [np.exp(x), np.log(np.abs(x) + 0.5), np.sqrt(np.abs(x) + 0.5), np.tanh(x),
            1 / (1 + np.exp(-x)), np.maximum(x, 0), np.vectorize(math.erf)(x), sm, ls0,
            x.sum(), x.mean(1), x.max(0, keepdims=True), x.reshape(2, 6), x.T,
            np.broadcast_to(y, (3, 4, 2)), x @ y, np.maximum(x, 0), np.minimum(1, x),
            x.astype(np.int32)]
    got = accy.interpret(f, [x, y])
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_where_one_hot_arange_constant_and_indexing_match_numpy():
    @accy.function
    def f(x: accy.f32[4, 3], labels: accy.i32[4], rows: accy.i64[5]):
        return (accy.where(x > 0, x, 0.0), accy.where(x < 0, -1.0, 1.0),
                accy.one_hot(labels, 3), accy.one_hot(labels, 3, accy.DType.i32, axis=0),
                accy.arange(4), accy.arange(1.0, 2.0, 0.25), accy.constant([[1, 2]]),
                accy.constant(2.0) * x, accy.gather(x, rows),
                accy.scatter_add(x, rows, accy.constant(np.ones((5, 3), np.float32))),
                accy.concat([x, x], axis=1), accy.cross_entropy(x, accy.minimum(labels, 2)))

    x = RNG.standard_normal((4, 3)).astype(np.float32)
    labels = np.array([0, 2, 1, 7], np.int32)  # 7: outside [0, 3) -> a zero row
    rows = np.array([3, 0, 3, 1, 2], np.int64)
    got = accy.interpret(f, [x, labels, rows])
    eye = np.eye(3, dtype=np.float32)
    hot = np.array([eye[i] if i < 3 else np.zeros(3, np.float32) for i in labels])
    scattered = x.copy()
    np.add.at(scattered, rows, 1.0)
    ls = x - x.max(-1, keepdims=True)
    ls = ls - np.log(np.exp(ls).sum(-1, keepdims=True))
    want = [np.where(x > 0, x, 0), np.where(x < 0, -1, 1).astype(np.float32), hot,
            hot.T.astype(np.int32), np.arange(4), np.arange(1.0, 2.0, 0.25, np.float32),
            np.array([[1, 2]]), 2 * x, x[rows], scattered, np.concatenate([x, x], 1),
            -ls[np.arange(4), np.minimum(labels, 2)].mean()]
    for g, w in zip(got, want, strict=True):
        assert g.dtype == np.asarray(w).dtype or g.dtype == np.float32
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_comparisons_build_ops_and_count_with_astype():
    @accy.function
    def f(x: accy.f32[5], y: accy.f32[5]):
        return accy.sum((x == y).astype(accy.DType.f32)), (x != y) & (x < y), x >= 0.5

    assert {Op.EQ, Op.NE, Op.LT, Op.GE, Op.AND} <= set(ops_of(f))
    x = np.array([1, 2, 3, 4, 5], np.float32)
    y = np.array([1, 0, 3, 9, 0], np.float32)
    same, less, big = accy.interpret(f, [x, y])
    assert same == 2
    np.testing.assert_array_equal(less, (x != y) & (x < y))
    np.testing.assert_array_equal(big, x >= 0.5)


def test_einsum_sublists_past_52_indices_match_opt_einsum_symbols():
    n = 60  # a ring of 60 2x2 matrices: 60 indices, past the 52 letters
    mats = [RNG.standard_normal((2, 2)).astype(np.float64) for _ in range(n)]

    def ring(*ms):
        args = []
        for i, m in enumerate(ms):
            args += [m, [i, (i + 1) % n]]
        return accy.einsum(*args, [])

    program = accy.trace(ring, *mats)
    (node,) = [nd for nd in program.functions[0].nodes() if nd.op is Op.EINSUM]
    assert get_symbol(59) in node.attr("spec")
    (got,) = accy.interpret(program, mats)
    want = np.trace(np.linalg.multi_dot(mats))
    np.testing.assert_allclose(got, want, rtol=1e-9)
    spec = ",".join(get_symbol(i) + get_symbol((i + 1) % n) for i in range(n)) + "->"
    by_spec = accy.trace(lambda *ms: accy.einsum(spec, *ms), *mats)
    np.testing.assert_allclose(accy.interpret(by_spec, mats)[0], want, rtol=1e-9)


def test_einsum_past_52_indices_prepares_and_runs_on_opencl(device):
    n = 53  # a ring of 53 2x2 matrices, one index past the 52 letters
    mats = [RNG.standard_normal((2, 2)).astype(np.float32) for _ in range(n)]

    def ring(*ms):
        return accy.einsum(*(a for i, m in enumerate(ms) for a in (m, [i, (i + 1) % n])), [])

    (got,) = accy.prepare(accy.trace(ring, *mats)).run(*mats, device=device)
    want = np.trace(np.linalg.multi_dot([m.astype(np.float64) for m in mats]))
    np.testing.assert_allclose(got, want, rtol=1e-4)


def test_einsum_sublists_implicit_output_is_numpy_order():
    @accy.function
    def f(a: accy.f32[2, 3], b: accy.f32[3, 4]):
        return accy.einsum(a, [30, 1], b, [1, 0])

    a = RNG.standard_normal((2, 3)).astype(np.float32)
    b = RNG.standard_normal((3, 4)).astype(np.float32)
    (got,) = accy.interpret(f, [a, b])
    np.testing.assert_allclose(got, np.einsum(a, [30, 1], b, [1, 0]), rtol=1e-5)
    assert got.shape == (4, 2)


def test_function_errors_name_the_mistake():
    with pytest.raises(TracingError, match=r"accy.constant .* none is: call it inside"):
        accy.constant(1.0)
    with pytest.raises(TracingError, match="accy.exp"):
        accy.exp(np.ones(3, np.float32))

    def bad_index(x):
        return accy.einsum(x, [0, -1])
    with pytest.raises(ValueError, match=r"must be >= 0"):
        accy.trace(bad_index, accy.f32[2, 2])

    def bad_depth(i):
        return accy.one_hot(i, 0)
    with pytest.raises(ValueError, match="depth must be at least 1"):
        accy.trace(bad_depth, accy.i32[3])

    def float_labels(x):
        return accy.one_hot(x, 3)
    with pytest.raises(ValueError, match="indices must be integers"):
        accy.trace(float_labels, accy.f32[3])

    def gelu_kind(x):
        return accy.gelu(x, approximate="sigmoid")
    with pytest.raises(ValueError, match="'none' or 'tanh'"):
        accy.trace(gelu_kind, accy.f32[3])


def test_constant_dtypes_follow_python_and_numpy():
    @accy.function
    def f(x: accy.f32[2]):
        return (accy.constant([1.0, 2.0]), accy.constant([1, 2]), accy.constant(True),
                accy.constant(np.ones(2)), accy.constant(np.int32(3)),
                accy.constant(1, accy.DType.f16), accy.constant([0.5, 1.5]) * x)

    assert [r.type.dtype.value for r in f.functions[0].results] == [
        "f32", "i64", "bool", "f64", "i32", "f16", "f32"]


def test_constant_with_like_builds_into_that_values_function():
    b = accy.Builder()
    f = b.begin_function("f", [accy.f32[3]])
    x = f.param(0)
    c = accy.constant([1.0, 2.0, 3.0], accy.DType.f32, like=x)
    assert isinstance(c, Value) and c.fb is f
    f.return_(x + c + accy.arange(3, dtype=accy.DType.f32, like=x))
    f.finish()
    (got,) = accy.interpret(b.finish(), [np.zeros(3, np.float32)])
    np.testing.assert_array_equal(got, [1, 3, 5])


# ---- gelu ------------------------------------------------------------------------------------

def test_gelu_erf_and_tanh_forms_match_their_numpy_formulas():
    @accy.function
    def f(x: accy.f32[41]):
        return accy.gelu(x), accy.gelu(x, approximate="tanh"), x.gelu(approximate="none")

    assert [r.op for r in f.functions[0].results] == [Op.GELU, Op.GELU_TANH, Op.GELU]
    x = np.linspace(-8, 8, 41).astype(np.float32)
    exact, approx, exact2 = accy.interpret(f, [x])
    np.testing.assert_allclose(exact, gelu_erf_ref(x), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(approx, gelu_tanh_ref(x), rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(exact, exact2)
    assert not np.allclose(exact, approx, rtol=0, atol=1e-6)  # two different functions
    text = accy.print_program(f)
    assert "gelu_tanh(" in text
    assert accy.print_program(accy.parse_program(text)) == text


def _default_with(tensor_stage: str) -> str:
    from accy.passes.pipelines import PIPELINES

    text = ",".join(PIPELINES[n].text for n in ("accy-contract", "accy-tensor"))
    rest = ",".join(f"accy-{s}" for s in ("dispatch", "memory", "kernel", "target"))
    return text.replace("activation-lowering", tensor_stage) + "," + rest


@pytest.mark.parametrize("lowering", ["activation-lowering",  # lowered to tanh, mul, add
                                      "activation-lowering{ops=sigmoid}"])  # kept: one op
def test_gelu_tanh_runs_on_opencl_lowered_and_as_one_op(device, lowering):
    @accy.function
    def f(x: accy.f32[64, 32], w: accy.f32[32, 16]):
        return accy.gelu(x @ w, approximate="tanh")

    x = RNG.standard_normal((64, 32)).astype(np.float32)
    w = RNG.standard_normal((32, 16)).astype(np.float32) / 4
    job = accy.prepare(f, _default_with(lowering))
    kept = Op.GELU_TANH in {op for k in job.kernels for op, _ in k.ops}
    assert kept == ("ops=" in lowering)
    (got,) = job.run(x, w, device=device)
    np.testing.assert_allclose(got, gelu_tanh_ref(x @ w), rtol=1e-4, atol=1e-5)


@pytest.mark.filterwarnings("ignore::pyopencl.CompilerWarning")
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_programs_with_gelu_tanh_match_interpret(device, data):
    program, inputs = data.draw(programs_with_inputs(
        programs_with(Op.GELU_TANH, max_nodes=5, dtypes=[accy.DType.f32])))
    assert check_end_to_end(program, inputs).status == "ok"


# ---- tracing ---------------------------------------------------------------------------------

def test_tracing_a_star_args_function_with_examples():
    def total(first, *rest):
        out = first
        for r in rest:
            out = out + r
        return out

    program = accy.trace(total, *(accy.f32[3] for _ in range(4)))
    assert program.functions[0].param_names == ("first", "rest0", "rest1", "rest2")
    xs = [np.full(3, i, np.float32) for i in range(4)]
    np.testing.assert_array_equal(accy.interpret(program, xs)[0], np.full(3, 6))

    @accy.function(accy.f32[2], accy.f32[2])
    def pair(*xs):
        return xs[0] * xs[1]
    assert pair.functions[0].param_names == ("xs0", "xs1")

    def needs_examples(*xs: accy.f32[2]):
        return xs[0]
    with pytest.raises(TracingError, match=r"takes \*xs: pass example inputs"):
        accy.function(needs_examples)
    with pytest.raises(TracingError, match=r"takes \*rest: pass example inputs"):
        accy.trace(total)  # no examples: the count of rest is unknown
    with pytest.raises(TracingError, match=r"2 named inputs and \*c, 1 examples given"):
        accy.trace(lambda a, b, *c: a, accy.f32[2])


def test_annotations_may_name_local_and_closure_variables():
    n = 8

    @accy.function
    def square(x: accy.f32[n, n]):
        return x @ x
    assert square.functions[0].params[0].type == accy.f32[8, 8]

    def make(m):
        def inner(x: "accy.f32[m, 2]"):  # a string annotation naming a closure variable
            return x * m
        return inner
    assert accy.function(make(5)).functions[0].params[0].type == accy.f32[5, 2]


def test_postponed_annotations_name_the_decorating_scope_and_closures():
    source = (
        "from __future__ import annotations\n"
        "import accy\n"
        "def build(n):\n"
        "    @accy.function\n"
        "    def f(x: accy.f32[n, 3]):\n"
        "        return x\n"
        "    return f\n"
        "def closure(k):\n"
        "    def g(x: accy.f32[k]):\n"
        "        return x * k\n"
        "    return g\n"
        "def missing():\n"
        "    @accy.function\n"
        "    def h(x: accy.f32[nowhere]):\n"
        "        return x\n"
    )
    namespace: dict = {}
    exec(compile(source, "<postponed>", "exec"), namespace)
    assert namespace["build"](7).functions[0].params[0].type == accy.f32[7, 3]
    assert accy.function(namespace["closure"](4)).functions[0].params[0].type == accy.f32[4]
    with pytest.raises(TracingError, match=r"'x', 'accy.f32\[nowhere\]', names 'nowhere'"):
        namespace["missing"]()


def test_annotations_that_are_not_tensor_types_are_named():
    def f(x: int):
        return x
    with pytest.raises(TracingError, match=r"\['x'\] need a TensorType annotation"):
        accy.function(f)

    def g(x: "accy.f32[1/0]"):
        return x
    with pytest.raises(TracingError, match="does not evaluate.*ZeroDivisionError"):
        accy.function(g)

    def k(x: accy.f32[2], *, scale):
        return x
    with pytest.raises(TracingError, match="keyword-only parameter 'scale'"):
        accy.function(k)


def test_free_functions_build_into_the_innermost_traced_function():
    def inner(x):
        return x + accy.constant(1.0)

    def outer(x):
        nested = accy.trace(inner, accy.f32[2])  # a trace inside a trace
        assert len(nested.functions[0].nodes()) == 3
        return x * accy.constant(2.0)

    program = accy.trace(outer, accy.f32[2])
    np.testing.assert_array_equal(accy.interpret(program, [np.ones(2, np.float32)])[0], [2, 2])
    with pytest.raises(TracingError):
        accy.constant(0.0)  # the tracing context is gone afterwards


# ---- a job prepared part of the way ----------------------------------------------------------

@accy.function
def _add(a: accy.f32[8], b: accy.f32[8]):
    return a + b


@pytest.mark.parametrize("until", ["tensor", "kernel"])
def test_running_a_job_prepared_part_way_says_how_to_continue(device, until):
    job = accy.prepare(_add, until=until)
    ones = np.ones(8, np.float32)
    with pytest.raises(NotPreparedError,
                       match=rf"stops at the {until} stage .*continue with accy.prepare\(job\)"):
        job.run(ones, ones, device=device)
    with pytest.raises(VerifyError):  # still the error class callers caught before
        job.executable(device=device)
    (got,) = accy.prepare(job).run(ones, ones, device=device)
    np.testing.assert_array_equal(got, 2 * ones)


def test_kernel_questions_on_a_tensor_stage_job_say_how_to_continue():
    job = accy.prepare(_add, until="tensor")
    with pytest.raises(NotPreparedError, match="through the kernel stage; this one stops at "
                                               "the tensor stage"):
        job.kernel_source(0)
    assert accy.prepare(job).kernel_count >= 1


def test_shape_errors_from_functions_name_the_op():
    def f(x, y):
        return accy.matmul(x, y)
    with pytest.raises(ShapeError, match="einsum"):
        accy.trace(f, accy.f32[2, 3], accy.f32[4, 5])


def test_movement_functions_take_an_int_or_a_sequence():
    @accy.function
    def f(x: accy.f32[2, 3]):
        return (accy.reshape(x, 6), accy.reshape(x, [3, -1]), accy.broadcast_to(x, [4, 2, 3]),
                accy.transpose(x, (1, 0)))

    assert [r.type for r in f.functions[0].results] == [
        accy.f32[6], accy.f32[3, 2], accy.f32[4, 2, 3], accy.f32[3, 2]]


def test_reductions_take_numpys_axis_keyword_too():
    @accy.function
    def f(x: accy.f32[2, 3]):
        return accy.sum(x, axis=1), accy.mean(x, axis=[0, 1]), accy.max(x, axis=0, keepdims=True)

    x = RNG.standard_normal((2, 3)).astype(np.float32)
    for g, w in zip(accy.interpret(f, [x]), [x.sum(1), x.mean(), x.max(0, keepdims=True)],
                    strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6)
    with pytest.raises(ValueError, match="not both"):
        accy.trace(lambda x: accy.sum(x, 0, axis=0), accy.f32[2])
