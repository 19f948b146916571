"""Random programs prepared and run on OpenCL (PoCL by default) agree with ``interpret``.

Programs over ops without a kernel lowering yet come back ``unsupported`` and are counted
(see the "differential programs" summary), so an op is covered as soon as it prepares.
"""

from __future__ import annotations

import pytest
from diff_support import NONFINITE_BUG_OPS, examples, record
from hypothesis import given
from hypothesis import strategies as st

from accy.ir.types import DType
from accy.passes.spec import Pipeline, parse_pipeline
from accy.testing import (
    ALL_OPS,
    ELEMENTWISE_OPS,
    check_end_to_end,
    programs,
    programs_with_inputs,
)

pytestmark = pytest.mark.filterwarnings("ignore::pyopencl.CompilerWarning")


@examples(1.0)
@given(st.data())
def test_elementwise_programs(device_dtypes: list[DType], data: st.DataObject) -> None:
    program, inputs = data.draw(programs_with_inputs(ops=ELEMENTWISE_OPS, dtypes=device_dtypes,
                                                     max_nodes=8))
    record("end-to-end elementwise", check_end_to_end(program, inputs))


@examples(3.0)
@given(st.data())
def test_programs_over_every_op(device_dtypes: list[DType], data: st.DataObject) -> None:
    program, inputs = data.draw(programs_with_inputs(ops=ALL_OPS, dtypes=device_dtypes,
                                                     functions=(1, 2)))
    record("end-to-end every op", check_end_to_end(program, inputs))


@examples(1.0)
@given(st.data())
def test_nan_and_infinity_inputs(device_dtypes: list[DType], data: st.DataObject) -> None:
    """nan/inf inputs and constants (ops with known nan/inf bugs or policies left out)."""
    floats = [d for d in device_dtypes if d.is_float]
    ops = [o for o in ALL_OPS if o not in NONFINITE_BUG_OPS]
    program, inputs = data.draw(programs_with_inputs(ops=ops, dtypes=floats, allow_nan=True,
                                                     max_nodes=4))
    record("end-to-end nan/inf", check_end_to_end(program, inputs))


@examples(0.5)
@given(st.data())
def test_pipeline_option_variants(device_dtypes: list[DType], data: st.DataObject) -> None:
    """accy-default with random choices for its bool and enum options (fusion policy, ...)."""
    variant = data.draw(_default_variants())
    program, inputs = data.draw(programs_with_inputs(
        programs(ops=ALL_OPS, dtypes=device_dtypes, max_nodes=5)))
    record("end-to-end pipeline variants", check_end_to_end(program, inputs, pipeline=variant))


@st.composite
def _default_variants(draw: st.DrawFn) -> Pipeline:
    passes = []
    for p in parse_pipeline("accy-default").passes:
        changes = {o.field: draw(st.sampled_from(o.choices or (False, True)))
                   for o in p.options()
                   if not o.is_list and (o.choices is not None or o.type is bool)}
        passes.append(type(p)(**changes))
    return Pipeline(tuple(passes))
