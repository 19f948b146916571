"""Random programs with the window ops (conv2d, max_pool2d, avg_pool2d, pad) keep their
meaning through every pass and match ``interpret`` end to end on OpenCL, under both ways
conv-lowering has of reaching the kernels: ``direct`` (conv2d and the pools kept whole for the
direct-conv generator) and ``im2col`` (lowered to slices, concats and one contraction)."""

from __future__ import annotations

import pytest
from diff_support import record
from hypothesis import given, settings
from hypothesis import strategies as st

from accy.ir.ops import Op, OpKind
from accy.ir.types import DType
from accy.job import prepare
from accy.passes.spec import parse_pipeline
from accy.testing import (
    check_end_to_end,
    check_passes,
    check_rule,
    pipelines,
    programs_with,
    programs_with_inputs,
)

pytestmark = pytest.mark.filterwarnings("ignore::pyopencl.CompilerWarning")

WINDOW_OPS = tuple(o for o in Op if o.kind is OpKind.WINDOW)
# what the window ops are mixed with: bias-like adds, activations, a residual-style max
NEIGHBOURS = (OpKind.WINDOW, Op.ADD, Op.MUL, Op.MAX, Op.RELU, Op.TANH, Op.REDUCE_SUM)
METHODS = ("direct", "im2col")


def _pipeline(method: str):
    return parse_pipeline("accy-default").replacing(f"conv-lowering{{method={method}}}")


@st.composite
def _cases(draw: st.DrawFn, dtypes: list[DType]):
    """A program holding at least one window op (drawn first, so shrinking may swap it)."""
    op = draw(st.sampled_from(WINDOW_OPS))
    return draw(programs_with_inputs(programs_with(op, ops=NEIGHBOURS, dtypes=dtypes,
                                                   max_nodes=4)))


def test_the_generator_draws_every_window_op() -> None:
    from hypothesis import find

    for op in WINDOW_OPS:
        program = find(programs_with(op, ops=[OpKind.WINDOW], dtypes=["f32"]), lambda p: True)
        assert any(n.op is op for n in program.nodes())


@settings(max_examples=30, deadline=None)
@given(programs_with(Op.CONV2D, ops=[OpKind.WINDOW, Op.ADD], dtypes=["f32", "i32"],
                     max_nodes=5))
def test_drawn_windows_stay_in_their_ranges(program) -> None:
    for n in program.nodes():
        if n.op in (Op.CONV2D, Op.MAX_POOL2D, Op.AVG_POOL2D):
            x = n.srcs[0].type
            assert x.rank == 4 and x.dtype is DType.f32 and n.type.size >= 1
            kernel = n.srcs[1].type.shape[2:] if n.op is Op.CONV2D else n.attr("kernel")
            assert all(1 <= k <= 3 for k in kernel)
            assert all(s in (1, 2) for s in n.attr("strides"))
            assert all(p in (0, 1) for p in n.attr("pads"))
        if n.op is Op.CONV2D:
            assert all(d in (1, 2) for d in n.attr("dilations"))
            assert n.srcs[0].type.shape[1] % n.attr("groups") == 0


def test_window_ops_need_float_dtypes_except_pad() -> None:
    from hypothesis import find

    with pytest.raises(ValueError, match="conv2d"):
        programs_with(Op.CONV2D, dtypes=["i32", "bool"])
    program = find(programs_with(Op.PAD, ops=[OpKind.WINDOW], dtypes=["i32"]), lambda p: True)
    assert {n.op for n in program.nodes()} <= {Op.PAD, Op.PARAM, Op.CONSTANT}


@pytest.mark.parametrize("method", METHODS)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_window_programs_keep_their_meaning_per_pass(method: str, data: st.DataObject) -> None:
    program, inputs = data.draw(_cases([DType.f32, DType.f64]))
    result = check_passes(program, inputs, _pipeline(method))
    assert result.status == "ok", result.detail  # compared: 0 when no pass changed it
    record(f"passes window ops ({method})", result)


@pytest.mark.parametrize("method", METHODS)
@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_window_programs_match_interpret_end_to_end(device, method: str,
                                                    data: st.DataObject) -> None:
    from accy.target import TargetProfile

    floats = sorted((d for d in TargetProfile.from_device(device.info).usable_dtypes
                     if d.is_float), key=lambda d: d.value)
    program, inputs = data.draw(_cases(floats))
    result = check_end_to_end(program, inputs, pipeline=_pipeline(method))
    assert result.status == "ok" and result.compared, result
    record(f"end-to-end window ops ({method})", result)


@settings(max_examples=10, deadline=None)
@given(pipelines(runnable=False), programs_with(Op.PAD, ops=NEIGHBOURS, dtypes=["f32"],
                                                max_nodes=3))
def test_drawn_pipelines_prepare_window_programs(pipeline, program) -> None:
    """``pipelines()`` always lowers pads (no op after the tensor stage may be a pad)."""
    assert "conv-lowering" in [p.name for p in pipeline.passes]
    prepare(program, pipeline)


def test_a_rule_alone_passes_over_a_pad() -> None:
    """check_rule runs saturate alone and stops after its stage: the pad it leaves is fine."""
    import numpy as np

    from accy.ir.parser import parse_program

    program = parse_program("""func @f(%a: f32[3,4]) -> (f32[3,6], f32[3,4]) {
      %0 = constant() {value=dense<[0.5]>} : f32[]
      %1 = pad(%a, %0) {pads=[0, 1, 0, 1]} : f32[3,6]
      %2 = broadcast(%a) {shape=[3, 4]} : f32[3,4]
      return %1, %2
    }""")
    result = check_rule(program, {"f": (np.ones((3, 4), np.float32),)}, "broadcast-identity")
    assert result.status == "ok" and result.matches
