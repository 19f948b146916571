"""f16 without cl_khr_fp16: half buffers, float registers, rounding at every f16 value."""

from __future__ import annotations

import numpy as np
import pytest

import accy
from accy.backends.opencl.render import literal, render
from accy.ir.interpret import interpret
from accy.ir.parser import parse_program
from accy.ir.types import DType
from accy.kernels.ir import (
    Call,
    Id,
    Kernel,
    KernelArg,
    Lane,
    Let,
    Load,
    Var,
    VectorLoad,
    VectorStore,
    add,
    idx,
    mul,
)
from accy.passes.pipelines import PIPELINES
from accy.plans import LaunchGeometry, ScheduleKind
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


def _assert_same_halves(got: np.ndarray, want: np.ndarray) -> None:
    """``got`` is ``want`` bit for bit, but NaNs (any NaN: payloads differ)."""
    nan = np.isnan(want)
    assert np.isnan(got[nan]).all()
    np.testing.assert_array_equal(got[~nan].view(np.uint16), want[~nan].view(np.uint16))


def _pack_kernel(lanes: int) -> Kernel:
    """Work-item i rounds floats 2 lanes i .. 2 lanes (i + 1) - 1 to halves two to a word
    (``pack_half2``) and stores the words into the half buffer (a word, or ``vstore`` of
    ``lanes`` words)."""
    i = Id("global", 0)
    words = tuple(Call("pack_half2", (Load("in0", add(mul(i, idx(2 * lanes)), idx(2 * j))),
                                      Load("in0", add(mul(i, idx(2 * lanes)), idx(2 * j + 1)))))
                  for j in range(lanes))
    return Kernel("pack", 0, ScheduleKind.flat, (64,),
                  (KernelArg("in0", DType.f32, False, 0), KernelArg("out0", DType.f16, True, 1)),
                  (VectorStore("out0", i, DType.i32, words),), LaunchGeometry((32,), (32,)))


@pytest.mark.parametrize("lanes", [1, 2, 4])
def test_packed_halves_are_numpys_rounding_in_order(device, lanes: int) -> None:
    """``pack_half2`` rounds as numpy (nearest even; overflow to inf, subnormals, -0, NaN) and
    i32 lanes stored into a half buffer put the first operand at the lower address."""
    from accy.backends.opencl.tensor_cores import run_isolated

    rng = np.random.default_rng(3)
    x = (rng.standard_normal(64 * lanes) * 100).astype(np.float32)
    special = np.array([1 + 2.0**-11, 1 + 3 * 2.0**-11, 65519, 65520, -np.inf, np.nan, -0.0,
                        1e-7, 2.0**-25, 70000], np.float32)
    x[:special.size] = special
    src = render(_pack_kernel(lanes))
    words = "int" if lanes == 1 else f"int{lanes}"
    assert "accy_pack_half2" in src and f"(__global {words}*)out0" in src
    got = run_isolated(device.device, src, "pack", [x], np.zeros(x.size, np.float16))
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    _assert_same_halves(got, want)


@pytest.mark.parametrize("lanes", [2, 4, 8, 16])
def test_f16_vectors_move_as_words_with_numpys_rounding(device, lanes: int) -> None:
    """A vector of 2-8 halves of an f16 argument is read and written as one vector of words
    (NVIDIA's compiler makes vload_halfN N 2-byte loads), 16 through vload_half16 / vstore_
    half16; either way f16 values come through exactly (infinities, NaN, -0, subnormals) and
    floats round as numpy does."""
    from accy.backends.opencl.tensor_cores import run_isolated

    i = Id("global", 0)
    body = (Let("v", DType.f32, VectorLoad("in0", i, lanes), lanes=lanes),
            VectorStore("out0", i, DType.f32,
                        tuple(mul(Lane(Var("v"), j), Load("in1", idx(j % 2)))
                              for j in range(lanes))))
    k = Kernel("words", 0, ScheduleKind.flat, (32 * lanes,),
               (KernelArg("in0", DType.f16, False, 0), KernelArg("in1", DType.f32, False, 1),
                KernelArg("out0", DType.f16, True, 2)), body, LaunchGeometry((32,), (32,)))
    src = render(k)
    w = "uint" if lanes == 2 else f"uint{lanes // 2}"
    assert (f"(__global const {w}*)in0" in src and f"(__global {w}*)out0" in src) == (lanes < 16)
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(32 * lanes) * 300).astype(np.float16)
    x[:8] = [np.inf, -np.inf, np.nan, -0.0, 6e-8, -3e-5, 65504, 1 + 2.0**-10]
    scale = np.array([1.0, 1 + 2.0**-11], np.float32)  # odd lanes: a tie or overflow to round
    got = run_isolated(device.device, src, "words", [x, scale], np.zeros(x.size, np.float16))
    with np.errstate(over="ignore", invalid="ignore"):
        want = (x.astype(np.float32) * np.tile(scale, x.size // 2)).astype(np.float16)
    _assert_same_halves(got, want)
