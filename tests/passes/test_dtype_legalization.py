"""dtype-legalization: f16 computed in f32, f64/i64 demoted on request, errors, no-ops."""

import numpy as np
import pytest

import accy
from accy.errors import CapabilityMismatchError, PassFailure
from accy.ir.ops import Op
from accy.ir.parser import parse_program
from accy.ir.program import Program, Stage
from accy.ir.types import DType
from accy.passes.spec import parse_pipeline
from accy.target import KernelStatus, TargetProfile
from accy.testing import assert_close

RNG = np.random.default_rng(11)
F32_ONLY = TargetProfile(device="no-f16 device",
                         dtypes=frozenset({DType.f32, DType.i32, DType.bool}))
EVERYTHING = TargetProfile(dtypes=frozenset(DType))

HALF = parse_program("""
func @f(%a: f16[3,4], %b: f16[4], %n: i32[3,4]) -> (f16[3,4], f16[3], f16[4], f32[3,4]) {
  %0 = mul(%a, %b) : f16[3,4]
  %1 = constant() {value=dense<[0.5]>} : f16[]
  %2 = add(%0, %1) : f16[3,4]
  %3 = cast(%n) {dtype=f16} : f16[3,4]
  %4 = sub(%2, %3) : f16[3,4]
  %5 = exp(%4) : f16[3,4]
  %6 = reduce_sum(%5) {axes=[1], keepdims=false} : f16[3]
  %7 = cast(%4) {dtype=f32} : f32[3,4]
  return %4, %6, %b, %7
}""")


def stats(job) -> dict:
    (record,) = [p for p in job.record("tensor").passes if p.spec.startswith("dtype-legal")]
    return dict(record.stats)


def legalize(program: Program, target: TargetProfile, spec: str = "dtype-legalization"):
    job = accy.prepare(program, spec, target=target, until=Stage.tensor)
    return job.products[Stage.tensor], stats(job)


def half_inputs() -> list[np.ndarray]:
    return [RNG.uniform(-2, 2, (3, 4)).astype(np.float16),
            RNG.uniform(-2, 2, 4).astype(np.float16),
            RNG.integers(-3, 4, (3, 4)).astype(np.int32)]


def test_f16_is_computed_in_f32_with_the_signature_kept():
    product, stats = legalize(HALF, F32_ONLY)
    after = product.program
    fn, before = after.function(), HALF.function()
    assert fn.params == before.params
    assert [r.type for r in fn.results] == [r.type for r in before.results]
    assert fn.results[2] is fn.params[1]  # a parameter returned as it is stays uncast
    computed = [n for n in after.nodes() if n.srcs and n.op is not Op.CAST]
    assert computed and all(n.type.dtype is not DType.f16 for n in computed)
    # f16 appears only in parameters and in the casts at the boundary
    f16_casts = [n for n in after.nodes() if n.op is Op.CAST and n.type.dtype is DType.f16]
    assert len(f16_casts) == 2
    assert stats == {"promoted": 9, "demoted": 0, "kept": 0}
    for _ in range(5):
        inputs = half_inputs()
        want = accy.interpret(HALF, inputs)
        got = accy.interpret(after, inputs)
        assert [g.dtype for g in got] == [w.dtype for w in want]
        assert_close(got, want, HALF, inputs)


def test_single_f16_ops_are_exact_in_f32():
    # rounding to f32 and then to f16 gives the correctly rounded f16 result
    program = parse_program("""
        func @f(%a: f16[64], %b: f16[64]) -> (f16[64], f16[64], f16[64]) {
          %0 = mul(%a, %b) : f16[64]
          %1 = div(%a, %b) : f16[64]
          %2 = add(%a, %b) : f16[64]
          return %0, %1, %2
        }""")
    after = legalize(program, F32_ONLY)[0].program
    inputs = [RNG.uniform(-100, 100, 64).astype(np.float16) for _ in range(2)]
    for got, want in zip(accy.interpret(after, inputs), accy.interpret(program, inputs),
                         strict=True):
        np.testing.assert_array_equal(got, want)


def test_supported_dtypes_leave_the_product_as_it_is():
    start = accy.prepare(HALF, "", target=EVERYTHING, until=Stage.contract).product
    product, stats = legalize(HALF, EVERYTHING)
    assert product.program == HALF
    assert product.fingerprint() == start.replace(stage=Stage.tensor).fingerprint()
    assert stats == {"promoted": 0, "demoted": 0, "kept": 0}
    f32 = parse_program("func @g(%a: f32[2]) -> (f32[2]) {\n  %0 = neg(%a) : f32[2]\n"
                        "  return %0\n}")
    assert legalize(f32, F32_ONLY)[0].program == f32  # the target lacks f16; f32 is untouched


def test_f16_keep_leaves_it_to_backend_legalization():
    product, stats = legalize(HALF, F32_ONLY, "dtype-legalization{f16=keep}")
    assert product.program == HALF
    assert stats == {"promoted": 0, "demoted": 0, "kept": 9}


F64 = parse_program("""
func @d(%a: f64[4]) -> (f64[4], f64[4]) {
  %0 = constant() {value=dense<[0.1]>} : f64[]
  %1 = mul(%a, %0) : f64[4]
  return %1, %a
}""")


def test_f64_is_kept_by_default_and_marked_illegal():
    job = accy.prepare(F64, target=F32_ONLY)  # the pipeline does not fail
    assert job.products[Stage.tensor].program.function().results[0].type.dtype is DType.f64
    assert stats(job) == {"promoted": 0, "demoted": 0, "kept": 3}
    assert {k.status for k in job.product.legality.kernels} == {KernelStatus.unsupported_dtype}


def test_f64_demote_computes_in_f32():
    product, stats = legalize(F64, F32_ONLY, "dtype-legalization{f64=demote}")
    fn = product.program.function()
    assert [r.type.dtype for r in fn.results] == [DType.f64, DType.f64]
    assert fn.results[1] is fn.params[0]
    mul = next(n for n in product.program.nodes() if n.op is Op.MUL)
    assert mul.type.dtype is DType.f32
    assert stats == {"promoted": 0, "demoted": 3, "kept": 0}
    a = RNG.standard_normal(4)
    got, same = accy.interpret(product.program, [a])
    np.testing.assert_array_equal(same, a)
    np.testing.assert_array_equal(got, (a.astype(np.float32) * np.float32(0.1)).astype(np.float64))


@pytest.mark.parametrize("dtype, text", [("f64", "f64[4]"), ("f16", "f16[4]")])
def test_error_names_the_node_dtype_and_target(dtype: str, text: str):
    program = parse_program(f"""
        func @h(%x: f32[4]) -> ({text}) {{
          %0 = abs(%x) : f32[4]
          %1 = cast(%0) {{dtype={dtype}}} : {text}
          return %1
        }}""")
    with pytest.raises(PassFailure) as info:
        legalize(program, F32_ONLY, f"dtype-legalization{{{dtype}=error}}")
    cause = info.value.__cause__
    assert isinstance(cause, CapabilityMismatchError)
    message = str(cause)
    assert f"function @h, %1 (cast : {text})" in message
    assert f"computes in {dtype}" in message and "no-f16 device" in message
    assert ("promote" if dtype == "f16" else "demote") in message


def test_error_names_a_parameter():
    with pytest.raises(PassFailure, match=r"@d, %a \(parameter : f64\[4\]\)"):
        legalize(F64, F32_ONLY, "dtype-legalization{f64=error}")


I64 = parse_program("""
func @i(%a: i64[5], %x: f32[5,3]) -> (i64[5], f32[5]) {
  %0 = constant() {value=dense<[2]>} : i64[]
  %1 = mul(%a, %0) : i64[5]
  %2 = gather(%x, %a) {axis=1} : f32[5,5]
  %3 = reduce_sum(%2) {axes=[1], keepdims=false} : f32[5]
  return %1, %3
}""")
NO_I64 = TargetProfile(dtypes=frozenset({DType.f32, DType.i32, DType.bool}))


def test_i64_demote_computes_in_i32():
    product, stats = legalize(I64, NO_I64, "dtype-legalization{i64=demote}")
    assert stats == {"promoted": 0, "demoted": 3, "kept": 0}
    assert all(n.type.dtype is not DType.i64 for n in product.program.nodes()
               if n.srcs and n.op is not Op.CAST)
    inputs = [np.array([0, 1, 2, 1, 0], np.int64), RNG.standard_normal((5, 3)).astype(np.float32)]
    for got, want in zip(accy.interpret(product.program, inputs), accy.interpret(I64, inputs),
                         strict=True):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_i64_constant_that_does_not_fit_is_an_error():
    program = parse_program("""
        func @big(%a: i64[2]) -> (i64[2]) {
          %0 = constant() {value=dense<[4294967296]>} : i64[]
          %1 = add(%a, %0) : i64[2]
          return %1
        }""")
    with pytest.raises(PassFailure, match=r"@big, %0 \(constant : i64\[\]\) holds 4294967296"):
        legalize(program, NO_I64, "dtype-legalization{i64=demote}")
    assert legalize(program, NO_I64)[1]["kept"] == 3  # kept by default: no error


def test_substitute_the_target_lacks_is_not_used():
    only_f16 = TargetProfile(dtypes=frozenset({DType.i32, DType.bool}))
    product, stats = legalize(HALF, only_f16)
    assert product.program == HALF and stats["kept"] > 0


def test_pipeline_text_round_trip_and_options():
    text = "dtype-legalization{f16=keep f64=demote i64=error}"
    pipe = parse_pipeline(text)
    assert pipe.text() == text
    (p,) = pipe.passes
    assert (p.f16, p.f64, p.i64) == ("keep", "demote", "error")
    assert parse_pipeline("dtype-legalization").text() == "dtype-legalization"
    assert "dtype-legalization" in parse_pipeline("accy-tensor").text()
    with pytest.raises(Exception, match="f16"):
        parse_pipeline("dtype-legalization{f16=demote}")
