"""f16 without cl_khr_fp16: half buffers, float registers, rounding at every f16 value."""

from __future__ import annotations

import numpy as np
import pytest

import accy
from accy.backends.opencl.render import literal
from accy.ir.interpret import interpret
from accy.ir.parser import parse_program
from accy.ir.types import DType
from accy.passes.pipelines import PIPELINES
from accy.target import KernelStatus, TargetProfile

PROGRAM = """
func @f(%a: f16[1024], %b: f16[1024]) -> (f16[1024], f16[]) {
  %0 = add(%a, %b) : f16[1024]
  %1 = exp(%0) : f16[1024]
  %2 = reduce_sum(%1) {axes=[0], keepdims=false} : f16[]
  return %1, %2
}"""

# the default pipeline, computing f16 natively (rounded per op) instead of promoting it
NATIVE = ",".join(PIPELINES[f"accy-{s}"].text for s in
                  ("contract", "tensor", "dispatch", "memory", "kernel", "target")
                  ).replace("dtype-legalization", "dtype-legalization{f16=keep}")


def inputs() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal(1024).astype(np.float16) for _ in range(2)]


def test_f16_kernels_need_no_fp16_extension() -> None:
    job = accy.prepare(parse_program(PROGRAM), pipeline=NATIVE)
    assert DType.f16 not in job.target.dtypes
    assert job.product.legality.is_legal
    source = "".join(job.kernel_source(i) for i in range(job.kernel_count))
    assert "cl_khr_fp16" not in source and "half* restrict" in source
    assert "vload_half" in source and "vstore_half" in source and "accy_half(" in source


def test_f16_needs_f32_to_be_computed() -> None:
    job = accy.prepare(parse_program(PROGRAM), target=TargetProfile(dtypes=frozenset({DType.i32})))
    assert {k.status for k in job.product.legality.kernels} == {KernelStatus.unsupported_dtype}


def test_f16_literals_are_the_nearest_half() -> None:
    assert literal(0.1, DType.f16) == repr(float(np.float16(0.1))) + "f"
    assert literal(1e5, DType.f16) == "INFINITY"
    assert literal(-65519.0, DType.f16) == "-65504.0f"


def test_native_f16_matches_interpret_bit_for_bit(device) -> None:
    program = parse_program(PROGRAM)
    got = accy.prepare(program, pipeline=NATIVE).run(*inputs(), device=device)
    want = interpret(program, inputs())
    np.testing.assert_array_equal(got[0], want[0])  # each f16 op rounded as numpy rounds it
    np.testing.assert_allclose(got[1].astype(np.float64), want[1].astype(np.float64),
                               rtol=1e-2)  # the sum's order differs


def test_promoted_f16_is_close_to_interpret(device) -> None:
    program = parse_program(PROGRAM)
    got = accy.prepare(program).run(*inputs(), device=device)
    want = interpret(program, inputs(), precision="float64")
    for g, w in zip(got, want, strict=True):
        assert g.dtype == np.float16
        np.testing.assert_allclose(g.astype(np.float64), w, rtol=2e-3, atol=1e-3)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_f16_row_ops_run(op: str, device) -> None:
    program = parse_program(f"""
        func @f(%a: f16[8,64]) -> (f16[8,64]) {{
          %0 = {op}(%a) {{axis=1}} : f16[8,64]
          return %0
        }}""")
    x = np.random.default_rng(1).standard_normal((8, 64)).astype(np.float16)
    (got,) = accy.prepare(program, pipeline=NATIVE).run(x, device=device)
    (want,) = interpret(program, [x], precision="float64")
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=4e-3, atol=4e-3)
