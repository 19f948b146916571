"""One input form for interpret and accy.testing: a positional sequence, parameter name ->
array, or function name -> either, accepted by both."""

from __future__ import annotations

import numpy as np
import pytest

from accy.errors import InterpretError
from accy.ir.interpret import function_inputs, interpret
from accy.ir.parser import parse_program
from accy.testing import check_passes, program_inputs

ONE = parse_program("""
func @f(%x: f32[3], %y: f32[3]) -> (f32[3]) {
  %0 = sub(%x, %y) : f32[3]
  return %0
}
""")
TWO = parse_program("""
func @f(%x: f32[3], %y: f32[3]) -> (f32[3]) {
  %0 = sub(%x, %y) : f32[3]
  return %0
}
func @g(%f: f32[2]) -> (f32[2]) {
  %0 = exp(%f) : f32[2]
  return %0
}
""")
X = np.array([1, 2, 3], np.float32)
Y = np.array([0.5, 0.5, 4], np.float32)
WANT = X - Y
FORMS = [(X, Y), [X, Y], {"x": X, "y": Y}, {"y": Y, "x": X}, {"f": (X, Y)},
         {"f": {"y": Y, "x": X}}]


@pytest.mark.parametrize("inputs", FORMS, ids=range(len(FORMS)))
def test_interpret_and_testing_take_the_same_forms(inputs: object) -> None:
    (got,) = interpret(ONE, inputs)
    np.testing.assert_array_equal(got, WANT)
    assert set(program_inputs(ONE, inputs)) == {"f"}
    np.testing.assert_array_equal(program_inputs(ONE, inputs)["f"][0], X)
    assert check_passes(ONE, inputs, "accy-contract").status == "ok"


def test_several_functions_by_function_name() -> None:
    inputs = {"f": {"x": X, "y": Y}, "g": [np.zeros(2, np.float32)]}
    np.testing.assert_array_equal(interpret(TWO, inputs, "f")[0], WANT)
    np.testing.assert_array_equal(interpret(TWO, inputs, "g")[0], np.ones(2, np.float32))
    assert sorted(program_inputs(TWO, inputs)) == ["f", "g"]


def test_a_parameter_named_like_a_function_is_by_parameter() -> None:
    (got,) = interpret(TWO, {"f": np.zeros(2, np.float32)}, "g")
    np.testing.assert_array_equal(got, np.ones(2, np.float32))
    assert function_inputs(TWO, {"f": [1.0, 2.0]}, "g") == {"f": [1.0, 2.0]}


def test_missing_and_unknown_names_are_errors() -> None:
    with pytest.raises(InterpretError, match="none for function f"):
        interpret(TWO, {"g": [np.zeros(2, np.float32)]}, "f")
    with pytest.raises(InterpretError, match="missing"):
        interpret(ONE, {"x": X})
    with pytest.raises(ValueError, match="exactly its parameters"):
        program_inputs(ONE, {"x": X})
    with pytest.raises(KeyError):  # a positional sequence needs a single function
        program_inputs(TWO, (X, Y))


def test_docstrings_say_so() -> None:
    assert "function name" in (interpret.__doc__ or "")
    assert "function name" in (check_passes.__doc__ or "")
