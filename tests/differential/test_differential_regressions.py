"""Bugs the differential suite and `accy fuzz` found, pinned with their shrunk programs.

An open bug's test is marked ``pytest.mark.xfail(strict=True, raises=DifferentialFailure,
reason="BUG: ...")``; when the bug is fixed it XPASSes and, being strict, fails: remove the
marker then (and the bug's entry in diff_support.NONFINITE_BUG_OPS, if it has one). Every test
here is such a fixed bug now.
"""

from __future__ import annotations

import numpy as np
import pytest

from accy.ir.parser import parse_program
from accy.ir.types import DType
from accy.passes.spec import parse_pipeline
from accy.testing import check_end_to_end, check_passes

pytestmark = pytest.mark.filterwarnings("ignore::pyopencl.CompilerWarning")


def test_scalar_parameter_result_keeps_its_shape(device_dtypes: list[DType]) -> None:
    program = parse_program("""
        func @f(%a: f32[]) -> (f32[]) {
          %0 = transpose(%a) {perm=[]} : f32[]
          return %0
        }""")  # shape-layout-propagation makes the result %a itself (was returned as f32[1])
    check_end_to_end(program, [np.float32(0)])


def test_relu_of_nan_is_nan(device_dtypes: list[DType]) -> None:
    program = parse_program("""
        func @f(%a: f32[]) -> (f32[]) {
          %0 = relu(%a) : f32[]
          return %0
        }""")
    check_end_to_end(program, [np.float32(np.nan)])


CROSS_ENTROPY = """
    func @f(%a: f32[2], %b: i32[]) -> (f32[]) {
      %0 = cross_entropy(%a, %b) : f32[]
      return %0
    }"""


# the cross-entropy kept whole for the row kernel (the default) and lowered
LOSS_PIPELINES = ["accy-default", parse_pipeline("accy-default").replacing(
    "loss-lowering{kernel-library=disabled}").text()]


@pytest.mark.parametrize("pipeline", LOSS_PIPELINES)
def test_loss_lowering_keeps_cross_entropy_of_infinite_logits(pipeline: str) -> None:
    # the one-hot lowering gave nan (0 * -inf) where the loss is inf; the gather gives inf
    check_passes(parse_program(CROSS_ENTROPY), [np.float32([np.inf, 0]), np.int32(1)], pipeline)


@pytest.mark.parametrize("pipeline", LOSS_PIPELINES)
def test_cross_entropy_of_infinite_logits_on_opencl(pipeline: str,
                                                    device_dtypes: list[DType]) -> None:
    check_end_to_end(parse_program(CROSS_ENTROPY), [np.float32([np.inf, 0]), np.int32(1)],
                     pipeline=pipeline)


def test_promoted_f16_pow_of_a_base_rounding_to_one_under_nan() -> None:
    """accy fuzz (seed 20261201): f16 ``pow(|a| + 1, nan)`` with ``a`` = 6.1e-5 is 1 in f16
    (the base rounds to 1, and pow(1, y) = 1 for every y) but nan once dtype-legalization
    computes it in f32. Both are correct: the error bounds now call such elements unstable."""
    program = parse_program("""
        func @f(%a: f16[], %c: f16[]) -> (f16[]) {
          %0 = abs(%a) : f16[]
          %1 = constant() {value=dense<[1.0]>} : f16[]
          %2 = add(%0, %1) : f16[]
          %3 = pow(%2, %c) : f16[]
          return %3
        }""")
    result = check_passes(program, [np.float16(6.104e-05), np.float16(np.nan)])
    assert result.status == "ok"


def test_convolution_with_a_nan_weight_over_the_padding(device_dtypes: list[DType]) -> None:
    """accy fuzz (seed 1202): an output whose whole window is padding, under a nan weight, is
    nan in the interpreter (0 * nan) and 0 in the loop-nest kernel of a constant input, which
    skips the padding's terms (the direct convolution multiplies them). Both are correct: the
    error bounds now call such outputs unstable."""
    program = parse_program("""
        func @f(%b: f32[1,1,1,1]) -> (f32[1,1,1,2]) {
          %0 = constant() {value=dense<[0.0]>} : f32[1,1,1,1]
          %1 = conv2d(%0, %b) {dilations=[1, 1], groups=1, pads=[0, 0, 0, 1], strides=[1, 1]} : f32[1,1,1,2]
          return %1
        }""")  # noqa: E501
    result = check_end_to_end(program, [np.full((1, 1, 1, 1), np.nan, np.float32)])
    assert result.status == "ok"


def test_promoted_f16_softmax_whose_exponential_overflows_f16() -> None:
    """accy fuzz (seed 1202): f16 ``softmax(exp(d))`` with ``d`` = [3, inf] is nan at [0] in
    f16 (beside the +inf the row's shift is 0, and exp(exp(3)) overflows f16: inf / inf) but 0
    in f32, where dtype-legalization computes it (5.3e8 / inf). Both are correct: the error
    bounds now call such elements unstable."""
    program = parse_program("""
        func @f(%d: f16[2]) -> (f16[2]) {
          %0 = exp(%d) : f16[2]
          %1 = softmax(%0) {axis=0} : f16[2]
          return %1
        }""")
    result = check_passes(program, [np.float16([3.0, np.inf])])
    assert result.status == "ok"


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_rowwise_along_a_leading_axis_with_infinity(op: str, device_dtypes: list[DType]
                                                    ) -> None:
    program = parse_program(f"""
        func @f(%a: f32[2,1]) -> (f32[2,1]) {{
          %0 = {op}(%a) {{axis=0}} : f32[2,1]
          return %0
        }}""")
    check_end_to_end(program, [np.float32([[0], [np.inf]])])


def test_last_axis_softmax_of_rows_with_infinities_and_nan(device_dtypes: list[DType]
                                                           ) -> None:
    """Found by the one-hour `accy fuzz` run of 2026-11-30 (seed 20261130), shrunk by hand."""
    program = parse_program("""
        func @f(%a: f32[3,3]) -> (f32[9,1,1]) {
          %0 = softmax(%a) {axis=1} : f32[3,3]
          %1 = reshape(%0) {shape=[9, 1, 1]} : f32[9,1,1]
          return %1
        }""")
    inf, nan = np.inf, np.nan
    check_end_to_end(program, [np.float32([[inf, -inf, inf], [inf, nan, nan], [inf, inf, -0.0]])])


def test_nan_constant_in_a_fused_kernel(device_dtypes: list[DType]) -> None:
    chain = """
        func @{op}(%a: f32[64]) -> (f32[64]) {{
          %0 = constant() {{value=dense<[nan]>}} : f32[]
          %1 = add(%a, %0) : f32[64]
          %2 = {op}(%1) : f32[64]
          return %2
        }}"""
    program = parse_program("".join(chain.format(op=op) for op in ("floor", "ceil", "exp")))
    x = (np.zeros(64, np.float32),)
    check_end_to_end(program, {"floor": x, "ceil": x, "exp": x})


def test_pad_of_one_axis_with_a_rank_0_fill(device_dtypes: list[DType]) -> None:
    """`accy fuzz` of 2026-12-05 (seed 3030): row-movement read the fill at no coordinates
    (an IndexError building the kernel)."""
    program = parse_program("""
        func @f0(%a: f32[1]) -> (f32[2], f32[1]) {
          %0 = constant() {value=dense<[nan]>} : f32[]
          %1 = pad(%a, %0) {pads=[0, 1]} : f32[2]
          %2 = neg(%a) : f32[1]
          return %1, %2
        }""")
    check_end_to_end(program, [np.float32([0.0])])


def test_pool_with_a_comparison_epilogue(device_dtypes: list[DType]) -> None:
    """`accy fuzz` of 2026-12-05 (seed 3030, a worker killed by SIGABRT): direct-conv stored
    the pool's doubles into the bool result, past its end (heap corruption)."""
    if DType.f64 not in device_dtypes:
        pytest.skip("the device has no f64")
    program = parse_program("""
        func @f0(%a: f64[1,4,9,9], %b: f64[]) -> (bool[1,4,4,8]) {
          %0 = avg_pool2d(%a) {count_include_pad=true, kernel=[2, 2], pads=[0, 0, 0, 0], strides=[2, 1]} : f64[1,4,4,8]
          %1 = lt(%0, %b) : bool[1,4,4,8]
          return %1
        }""")  # noqa: E501
    a = np.arange(4 * 81, dtype=np.float64).reshape(1, 4, 9, 9) % 7 - 3
    check_end_to_end(program, [a, np.float64(0.5)])


def test_softmax_over_a_concat_with_a_nan_constant(device_dtypes: list[DType]) -> None:
    """`accy fuzz` of 2026-12-05 (seed 3030): PoCL's exp of the NAN literal gave a finite
    value (results 1.2e-24 and 1.0 for NaN and NaN)."""
    program = parse_program("""
        func @f0(%a: f32[1]) -> (f32[2]) {
          %0 = constant() {value=dense<[nan]>} : f32[1]
          %1 = softmax(%0) {axis=0} : f32[1]
          %2 = concat(%1, %a) {axis=0} : f32[2]
          %3 = softmax(%2) {axis=0} : f32[2]
          return %3
        }""")
    check_end_to_end(program, [np.float32([0.0])])


def test_row_group_writing_a_value_a_shared_concat_reads(device_dtypes: list[DType]) -> None:
    """`accy fuzz` of 2026-12-05 (seed 3131, max 16 ops), shrunk by hand: row fusion dropped
    the cast from the merged group's outputs, though the reduction's kernel, recomputing the
    concat, reads it (memory-space-planning: KeyError)."""
    if DType.f16 not in device_dtypes:
        pytest.skip("the device has no f16")
    program = parse_program("""
        func @f0(%a: f16[1,3,1]) -> (f16[1,3,2], f16[1,3,2], f16[1,3,1]) {
          %0 = concat(%a, %a) {axis=2} : f16[1,3,2]
          %1 = softmax(%0) {axis=2} : f16[1,3,2]
          %2 = softmax(%1) {axis=2} : f16[1,3,2]
          %3 = reduce_sum(%0) {axes=[], keepdims=false} : f16[1,3,2]
          %4 = neg(%a) : f16[1,3,1]
          return %2, %3, %4
        }""")
    a = np.float16([[[0.5], [-1.0], [2.0]]])
    check_passes(program, [a])
    check_end_to_end(program, [a])


def test_row_kernel_with_a_fourth_input(device_dtypes: list[DType]) -> None:
    """`accy fuzz` of 2026-12-05 (seed 3535): the row-softmax kernel named its row mask
    ``in3`` (the emitter's prefix "in" and its counter), the name of its fourth argument, so
    the kernel did not build (the scalar added after the select was read through it)."""
    program = parse_program("""
        func @f0(%a: f32[5], %b: f32[], %c: f32[], %d: bool[5]) -> (f32[5]) {
          %0 = softmax(%a) {axis=0} : f32[5]
          %1 = select(%d, %c, %0) : f32[5]
          %2 = add(%b, %1) : f32[5]
          return %2
        }""")
    check_end_to_end(program, [np.float32([0, 1, 2, 3, 4]), np.float32(1), np.float32(-2),
                               np.array([True, False, True, False, False])])


def test_gpu_rows_written_in_place_over_their_input(device_dtypes: list[DType]) -> None:
    """Fuzzing GPU-typed kernels on PoCL (``accy fuzz --device-type gpu``), 2026-12-05: the
    row-movement kernel of pow(|a| + 1, b), written in place over a's f32 cast, clamped the
    extra rows past the end to the last row; another work-item computed that row again from
    the already overwritten input (the last row 2 where 1, in about half the runs)."""
    if DType.f16 not in device_dtypes:
        pytest.skip("the device has no f16")
    program = parse_program("""
        func @f0(%a: f16[11,22,34], %b: f16[11,22,1])
            -> (f16[11,22,34], f16[11,22,34], f16[11,22,34]) {
          %0 = neg(%a) : f16[11,22,34]
          %1 = abs(%a) : f16[11,22,34]
          %2 = constant() {value=dense<[1.0]>} : f16[]
          %3 = add(%1, %2) : f16[11,22,34]
          %4 = pow(%3, %b) : f16[11,22,34]
          %5 = neg(%4) : f16[11,22,34]
          return %0, %5, %4
        }""")
    a = np.zeros((11, 22, 34), np.float16)
    for _ in range(4):  # a race: each run failed about half the time
        check_end_to_end(program, [a, np.ones((11, 22, 1), np.float16)], device_type="gpu")


@pytest.mark.parametrize("device_type", ["gpu", "cpu"])
def test_loop_nest_outputs_of_one_size_in_two_shapes(device_type: str,
                                                     device_dtypes: list[DType]) -> None:
    """Fuzzing GPU-typed kernels on PoCL, 2026-12-06: a sum returned both reshaped to [1] and
    as the scalar under a max shares one loop-nest kernel (one element, domain []), which read
    the [1] output's reshape at the domain's coordinates (none): kernelization failed."""
    program = parse_program("""
        func @f0(%a: f32[5]) -> (f32[1], f32[]) {
          %0 = reduce_sum(%a) {axes=[0], keepdims=false} : f32[]
          %1 = reshape(%0) {shape=[1]} : f32[1]
          %2 = max(%0, %0) : f32[]
          return %1, %2
        }""")
    check_end_to_end(program, [np.arange(5, dtype=np.float32)], device_type=device_type)
