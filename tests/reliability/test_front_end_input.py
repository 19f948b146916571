"""The front end on mistaken or surprising input (issue #12 items 2, 6, 7).

* ``==`` and ``!=`` on traced values build elementwise comparisons, run on OpenCL like numpy's
  (they were object identity, a Python bool that the next op lifted to the constant 0);
* type makers, ``TensorType`` and the builder's entry points reject non-integer dimensions,
  axes and bounds instead of truncating them, and name unfinished functions;
* the ``accy`` command answers bad files and argument values with one error line.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import accy
from accy.builder import Builder, BuilderError, concat, select
from accy.cli import main
from accy.errors import AccyError, ShapeError
from accy.ir.ops import Op
from accy.ir.types import DType, TensorType


def _ops(program: accy.Program) -> list[Op]:
    text = accy.print_program(program)
    return [Op.parse(line.split("= ")[1].split("(")[0]) for line in text.splitlines()
            if " = " in line]


def _run(program: accy.Program, device, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
    return accy.prepare(program).run(*inputs, device=device)


# ---- == and != ----------------------------------------------------------------------------

@accy.function
def masked_equal(x: accy.i32[16], a: accy.i32[16], b: accy.i32[16]):
    return x * (a == b).astype(DType.i32), x * (a != b).astype(DType.i32)


def test_eq_and_ne_build_compare_ops() -> None:
    assert Op.EQ in _ops(masked_equal) and Op.NE in _ops(masked_equal)
    assert [r.type.dtype for r in masked_equal.function().results] == [DType.i32, DType.i32]


def test_eq_on_equal_integer_inputs_is_not_zero(device) -> None:
    x = np.arange(1, 17, dtype=np.int32)
    a = np.full(16, 7, np.int32)
    eq, ne = _run(masked_equal, device, x, a, a.copy())  # equal values, distinct arrays
    np.testing.assert_array_equal(eq, x)
    np.testing.assert_array_equal(ne, np.zeros(16, np.int32))
    b = a.copy()
    b[::3] = 0
    eq, ne = _run(masked_equal, device, x, a, b)
    np.testing.assert_array_equal(eq, x * (a == b))
    np.testing.assert_array_equal(ne, x * (a != b))


@accy.function
def compare_with_scalars(x: accy.f32[4, 8], k: accy.i64[4, 8]):
    return ((x == 0.5).astype(DType.f32) + (x != 0.25).astype(DType.f32) * 2,
            select(k == 3, x, -x), (2 == k) | (k != 1), 1 == x.sum())


def test_eq_and_ne_with_scalars_on_either_side(device) -> None:
    rng = np.random.default_rng(0)
    x = rng.choice(np.float32([0.25, 0.5, 1.0]), (4, 8))
    k = rng.integers(0, 5, (4, 8)).astype(np.int64)
    got = _run(compare_with_scalars, device, x, k)
    want = ((x == 0.5) + (x != 0.25) * np.float32(2), np.where(k == 3, x, -x),
            (k == 2) | (k != 1), np.float32(1) == x.sum(dtype=np.float32))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, np.asarray(w))


@accy.function
def compare_broadcast(a: accy.f32[3, 1], b: accy.f32[5], c: accy.bool_[3, 5]):
    same = a == b
    return same, (same != c), b == np.float32([1, 2, 3, 4, 5])


def test_eq_and_ne_broadcast_like_numpy(device) -> None:
    a = np.float32([[1], [3], [9]])
    b = np.float32([1, 2, 3, 4, 3])
    c = np.random.default_rng(1).random((3, 5)) < 0.5
    got = _run(compare_broadcast, device, a, b, c)
    want = (a == b, (a == b) != c, b == np.float32([1, 2, 3, 4, 5]))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def test_numpy_arrays_on_the_left_compare_elementwise() -> None:
    @accy.function
    def left(a: accy.f32[3]):
        return np.float32([1, 2, 3]) == a, np.float32([1, 2, 3]) != a

    assert _ops(left).count(Op.EQ) == 1 and _ops(left).count(Op.NE) == 1
    a = np.float32([1, 0, 3])
    got = accy.interpret(left, [a])
    np.testing.assert_array_equal(got[0], [True, False, True])
    np.testing.assert_array_equal(got[1], [False, True, False])


def test_comparison_results_have_no_truth_value() -> None:
    def branchy(a: accy.f32[4], b: accy.f32[4]):
        if a == b:
            return a
        return b

    with pytest.raises(TypeError, match="no truth value.*select"):
        accy.function(branchy)

    def membership(a: accy.f32[4], b: accy.f32[4]):
        assert a in [b]  # `in` falls back to ==, elementwise here
        return a

    with pytest.raises(TypeError, match="no truth value"):
        accy.function(membership)


def test_values_hash_by_identity_and_is_still_works() -> None:
    seen: dict = {}

    @accy.function
    def keyed(a: accy.f32[4], b: accy.f32[4]):
        c = a + b
        group = {a, b, c, a}
        table = {a: "a", c: "c"}
        seen.update(size=len(group), a=table[a], c=table[c], member=c in group,
                    in_list=a in [a], identity=(a is a, a is not b))
        return c

    assert Op.EQ not in _ops(keyed)
    assert seen == {"size": 3, "a": "a", "c": "c", "member": True, "in_list": True,
                    "identity": (True, True)}


def test_eq_with_non_numbers_is_plain_python() -> None:
    seen = []

    @accy.function
    def odd(a: accy.f32[4]):
        seen.extend([a == None, a != "text", a == object()])  # noqa: E711
        return a

    assert seen == [False, True, False]


def test_eq_with_a_scalar_the_dtype_cannot_hold_is_an_error() -> None:
    def f(k: accy.i32[4]):
        return k == 2.5

    with pytest.raises(ShapeError, match="not a whole number"):
        accy.function(f)


# ---- tensor types and the builder's entry points ------------------------------------------

@pytest.mark.parametrize("dim", [4.5, 4.0, "4", True, False, np.bool_(True), -1, None, 1j])
def test_type_makers_reject_non_integer_dims(dim) -> None:
    with pytest.raises(ShapeError, match=r"accy\.f32\[.*\]: dimensions must be non-negative "
                       r"integers, got " + repr(dim).replace("(", r"\(").replace(")", r"\)")):
        accy.f32[dim]
    with pytest.raises(ShapeError):
        accy.i64[2, dim]


def test_type_makers_take_numpy_integers() -> None:
    t = accy.f32[np.int64(4), np.int32(2)]
    assert t == TensorType((4, 2), DType.f32) and all(type(d) is int for d in t.shape)
    assert accy.f32[()] == TensorType((), DType.f32)


@pytest.mark.parametrize("shape", [(4.5,), ("4",), (True,), (2, np.bool_(False)), (-3,)])
def test_tensor_type_rejects_bad_dims(shape) -> None:
    with pytest.raises(ShapeError, match="not an integer|negative dimension"):
        TensorType(shape, DType.f32)


def test_tensor_type_rejects_a_non_dtype() -> None:
    with pytest.raises(ShapeError, match="must be a DType"):
        TensorType((4,), accy.f32)
    with pytest.raises(ShapeError, match="must be a DType"):
        TensorType((4,), "f32")


def test_builder_tensor_rejects_a_type_maker() -> None:
    with pytest.raises(BuilderError, match=r"accy\.f32 makes tensor types.*DType\.f32"):
        Builder.tensor(accy.f32, (4,))
    with pytest.raises(BuilderError, match="sequence of integers"):
        Builder.tensor(DType.f32, 4)
    with pytest.raises(ShapeError, match="not an integer"):
        Builder.tensor(DType.f32, (4.0,))
    assert Builder.tensor(DType.f32, [4, 2]) == accy.f32[4, 2]


def test_begin_function_checks_parameter_types() -> None:
    with pytest.raises(BuilderError, match=r"parameter 1 is accy\.f32, not a TensorType"):
        Builder().begin_function("f", [accy.f32[4], accy.f32])


def test_unfinished_function_is_named() -> None:
    b = Builder()
    f = b.begin_function("add_one", [accy.f32[4]])
    f.return_(f.param(0) + 1.0)
    with pytest.raises(BuilderError, match="function 'add_one' was begun but not finished"):
        b.finish()
    f.finish()
    assert [fn.name for fn in b.finish().functions] == ["add_one"]
    g = b.begin_function("g", [accy.f32[4]])
    h = b.begin_function("h", [accy.f32[4]])
    assert g is not h
    with pytest.raises(AccyError, match="functions 'g', 'h' were begun but not finished"):
        b.finish()


def test_builder_errors_are_value_errors_too() -> None:
    # code that caught the builder's ValueErrors keeps working
    assert issubclass(BuilderError, ValueError) and issubclass(BuilderError, AccyError)


def _trace_error(body) -> str:
    def fn(a: accy.f32[4, 6]):
        return body(a)

    with pytest.raises(AccyError) as e:
        accy.function(fn)
    return str(e.value)


@pytest.mark.parametrize(("body", "message"), [
    (lambda a: a.reshape(6.0, 4), "reshape: shape entry must be an integer, got 6.0"),
    (lambda a: a.reshape((4, "6")), "reshape: shape entry must be an integer, got '6'"),
    (lambda a: a.transpose(1.0, 0), "transpose: perm entry must be an integer, got 1.0"),
    (lambda a: a.broadcast_to(2, 4.0, 6), "broadcast: shape entry must be an integer"),
    (lambda a: a.sum(axes=1.0), "reduce_sum: axes entry must be an integer, got 1.0"),
    (lambda a: a.max(axes=(0, True)), "reduce_max: axes entry must be an integer, got True"),
    (lambda a: a.mean(keepdims="yes"), "reduce_mean: keepdims must be True or False"),
    (lambda a: a.softmax(axis=1.0), "softmax: axis must be an integer, got 1.0"),
    (lambda a: a.log_softmax(axis=None), "log_softmax: axis must be an integer, got None"),
    (lambda a: concat([a, a], axis=0.0), "concat: axis must be an integer, got 0.0"),
    (lambda a: a[0:4:1.5], r"slice(f32[4,6]): a bound of slice(0, 4, 1.5) must be an integer"),
    (lambda a: a[:, True:], "must be an integer, got True (bool)"),
    (lambda a: a.astype(accy.f64), "astype: accy.f64 makes tensor types"),
    (lambda a: a.fb.constant(1.0, accy.f32), "constant: accy.f32 makes tensor types"),
    (lambda a: a.fb.param(0.0), "parameter index must be an integer, got 0.0"),
])
def test_builder_names_non_integer_arguments(body, message) -> None:
    assert message in _trace_error(body)


def test_integer_arguments_still_work() -> None:
    @accy.function
    def fine(a: accy.f32[4, 6]):
        return (a.reshape(np.int64(6), 4).transpose().sum(axes=[np.int32(1)], keepdims=True),
                a[np.int64(1):3, ::2], a.sum(axes=range(2)), a.softmax(axis=np.int64(0)))

    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    got = accy.interpret(fine, [x])
    np.testing.assert_allclose(got[0], x.reshape(6, 4).T.sum(axis=1, keepdims=True))
    np.testing.assert_array_equal(got[1], x[1:3, ::2])


# ---- the accy command ---------------------------------------------------------------------

def _main_error(capsys, argv: list[str]) -> str:
    """Run ``accy argv`` in this process: status 2 and its last stderr line (no traceback)."""
    try:
        status = main(argv)
    except SystemExit as e:  # argparse rejected an argument
        status = e.code
    err = capsys.readouterr().err
    assert status == 2, err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


def test_unreadable_program_files(tmp_path, capsys) -> None:
    binary = tmp_path / "bin.accy"
    binary.write_bytes(b"\xff\xfe\x00func")
    for command in ("prepare", "explain"):
        line = _main_error(capsys, [command, str(binary)])
        assert line.startswith(f"accy {command}: error: {binary}: not a UTF-8 text file")
        line = _main_error(capsys, [command, str(tmp_path)])
        assert line == f"accy {command}: error: {tmp_path}: Is a directory"
        line = _main_error(capsys, [command, str(tmp_path / "missing.accy")])
        assert line == f"accy {command}: error: {tmp_path / 'missing.accy'}: No such file or " \
            "directory"


@pytest.mark.parametrize(("argv", "message"), [
    (["prepare", "p.accy", "--until", "bogus"], "argument --until: unknown stage 'bogus'"),
    (["explain", "p.accy", "--until", "later"], "argument --until: unknown stage 'later'"),
    (["fuzz", "--minutes", "nan", "--out", "o"], "argument --minutes: must be a positive number "
     "of minutes (not nan or inf), got nan"),
    (["fuzz", "--minutes", "inf", "--out", "o"], "--minutes: must be a positive number of "
     "minutes (not nan or inf), got inf"),
    (["fuzz", "--minutes", "-1", "--out", "o"], "--minutes: must be a positive number of "
     "minutes (not nan or inf), got -1"),
    (["fuzz", "--minutes", "soon", "--out", "o"], "argument --minutes: must be a positive "
     "number of minutes, got 'soon'"),
    (["fuzz", "--minutes", "1", "--max-nodes", "0", "--out", "o"],
     "argument --max-nodes: must be a positive integer, got 0"),
    (["fuzz", "--minutes", "1", "--max-dim", "0", "--out", "o"],
     "argument --max-dim: must be a positive integer, got 0"),
    (["fuzz", "--minutes", "1", "--ops", "einsum,fma", "--out", "o"],
     "argument --ops: unknown op or op kind 'fma'; ops: neg, abs"),
    (["fuzz", "--minutes", "1", "--ops", ",", "--out", "o"],
     "argument --ops: give at least one op or op-kind name"),
    (["fuzz", "--minutes", "1", "--device-type", "tpu", "--out", "o"],
     "argument --device-type: invalid choice: 'tpu' (choose from 'cpu', 'gpu', 'accelerator')"),
    (["fuzz", "--minutes", "1", "--seed", "-2", "--out", "o"],
     "argument --seed: must be >= 0, got -2"),
    (["fuzz", "--minutes", "1", "--seed", "1.5", "--out", "o"], "argument --seed"),
    (["fuzz", "--minutes", "1", "--round-timeout", "nan", "--out", "o"],
     "argument --round-timeout: must be a positive number of seconds (not nan"),
    (["demo", "--size", "-5"], "argument --size: must be a positive integer, got -5"),
    (["experiment", "ablation", "--seeds", "0,x"], "argument --seeds: must be "
     "comma-separated seeds"),
    (["experiment", "ablation", "--seeds", "-1"], "argument --seeds"),
    (["experiment", "ablation", "--repeats", "0"], "argument --repeats"),
    (["experiment", "ablation", "--workers", "-1"], "argument --workers"),
    (["experiment", "ablation", "--retries", "x"], "argument --retries"),
    (["experiment", "ablation", "--timeout", "inf"], "argument --timeout"),
    (["experiment", "ablation", "--programs", "mlp_gelu,nope"],
     "argument --programs: unknown suite programs nope; valid: mlp_gelu"),
    (["experiment", "ablation", "--programs", ","], "argument --programs"),
    (["experiment", "ablation", "--rulesets", "nope"], "argument --rulesets: unknown rule sets"),
    (["experiment", "contraction", "--families", "ring,web"],
     "argument --families: unknown network families web"),
    (["experiment", "contraction", "--sizes", "4,0"], "argument --sizes"),
    (["experiment", "contraction", "--instances", "0"], "argument --instances"),
])
def test_bad_arguments_are_one_line_errors(argv, message, capsys) -> None:
    line = _main_error(capsys, argv)
    assert line.startswith(f"accy {argv[0]}: error: ") and message in line, line


def test_report_on_files_that_are_not_results(tmp_path, capsys) -> None:
    for name, data, message in [("text.json", b"not json", "is damaged (not valid JSON"),
                                ("bin.json", b"\xff\xfe", "is damaged (not valid JSON"),
                                ("other.json", b'{"rows": []}',
                                 "is not an accy result document (no experiment")]:
        path = tmp_path / name
        path.write_bytes(data)
        line = _main_error(capsys, ["report", str(path), "--out", str(tmp_path / "r")])
        assert line.startswith(f"accy report: error: {path} {message}"), line
    assert not (tmp_path / "r").exists()  # checked before anything was written


def test_the_installed_command_exits_without_traceback(tmp_path) -> None:
    path = tmp_path / "latin1.accy"
    path.write_bytes("func @caf\xe9".encode("latin-1"))
    done = subprocess.run([sys.executable, "-m", "accy.cli", "prepare", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"accy prepare: error: {path}: not a UTF-8 text file (byte 9: unexpected end of "
        "data); expected a program in the IR text form"]
