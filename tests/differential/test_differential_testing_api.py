"""accy.testing itself: strategies are valid by construction, inputs fit, tolerances judge
terms, unstable elements are skipped, and the documented examples hold."""

from __future__ import annotations

import dataclasses
import doctest
from typing import ClassVar

import numpy as np
import pytest
from diff_support import examples
from hypothesis import find as _find
from hypothesis import given, settings
from hypothesis import strategies as st

import accy
import accy.differential
import accy.testing
from accy.error_bounds import error_bounds
from accy.errors import PassFailure
from accy.ir.interpret import interpret
from accy.ir.ops import Op
from accy.ir.parser import parse_program
from accy.ir.program import Stage
from accy.ir.types import DType
from accy.ir.verify import verify
from accy.passes.base import Pass, option
from accy.target import TargetProfile
from accy.testing import (
    TOLERANCES,
    DifferentialFailure,
    assert_close,
    check_passes,
    index_bounds,
    programs,
    programs_with,
    programs_with_inputs,
    random_inputs,
    unsupported_reason,
)


@examples(1.0)
@given(programs_with_inputs(functions=(1, 3), max_nodes=10, max_rank=4))
def test_programs_are_valid_and_inputs_fit(case) -> None:
    program, inputs = case
    verify(program, Stage.semantic)
    for (name, i), bound in index_bounds(program).items():
        assert ((inputs[name][i] >= 0) & (inputs[name][i] < bound)).all()
    for fn in program.functions:
        interpret(program, inputs[fn.name], function=fn.name)  # in range, right types
        floats = [a for a in inputs[fn.name] if a.dtype.kind == "f"]
        assert all(np.isfinite(a).all() for a in floats)


@examples(0.5)
@given(programs(dtypes=["f32"], ops=[Op.ADD, Op.EXP, Op.GATHER, Op.CROSS_ENTROPY]))
def test_options_restrict_data_dtypes_and_ops(program) -> None:
    for n in program.nodes():
        assert n.op in (Op.PARAM, Op.CONSTANT, Op.ADD, Op.EXP, Op.ABS, Op.GATHER,
                        Op.CROSS_ENTROPY)
        if n.op is not Op.PARAM or not n.type.dtype.is_int:  # indices and labels are ints
            assert n.type.dtype is accy.DType.f32


@examples(0.5)
@given(programs_with(Op.EINSUM, max_nodes=4))
def test_programs_with_an_op_contain_it(program) -> None:
    assert any(n.op is Op.EINSUM for n in program.nodes())


@examples(0.5)
@given(programs_with(lambda x, y: (x * y) + (x * y), max_nodes=4))
def test_programs_with_a_builder_pattern_contain_it(program) -> None:
    adds = [n for n in program.nodes() if n.op is Op.ADD and n.srcs[0] is n.srcs[1]]
    assert any(a.srcs[0].op is Op.MUL for a in adds)


def test_random_inputs_follow_the_same_rules() -> None:
    program = parse_program("""
        func @f(%x: f32[3], %i: i64[5], %l: i32[2]) -> (f32[5], f32[]) {
          %0 = gather(%x, %i) {axis=0} : f32[5]
          %1 = broadcast(%x) {shape=[2,3]} : f32[2,3]
          %2 = cross_entropy(%1, %l) : f32[]
          return %0, %2
        }""")
    inputs = random_inputs(program, np.random.default_rng(0))["f"]
    assert index_bounds(program) == {("f", 1): 3, ("f", 2): 3}
    assert [a.dtype for a in inputs] == [np.float32, np.int64, np.int32]
    interpret(program, inputs)


SUM = """
    func @f(%a: f32[3]) -> (f32[]) {
      %0 = reduce_sum(%a) {axes=[0], keepdims=false} : f32[]
      return %0
    }"""


def test_reductions_are_judged_against_the_magnitude_of_their_terms() -> None:
    program = parse_program(SUM)
    x = np.float32([1e8, 1.0, -1e8])
    # a sum in another order may lose the 1 entirely: within rtol of sum(|terms|)
    assert assert_close([np.float32(0.0)], [np.float32(1.0)], program, [x]) == (1, 0)
    with pytest.raises(DifferentialFailure, match="differ"):  # dropping a term is not
        assert_close([np.float32(1e8)], [np.float32(1.0)], program, [x])
    small = np.float32([0.5, 0.25, 0.25])
    with pytest.raises(DifferentialFailure):
        assert_close([np.float32(1.001)], [np.float32(1.0)], program, [small])


def test_comparisons_within_rounding_of_their_threshold_are_skipped() -> None:
    program = parse_program("""
        func @f(%a: f32[2]) -> (bool[2]) {
          %0 = exp(%a) : f32[2]
          %1 = constant() {value=dense<[1.0]>} : f32[]
          %2 = gt(%0, %1) : bool[2]
          return %2
        }""")
    x = np.float32([1e-9, 1.0])  # exp(1e-9) rounds to 1 or just above: either is right
    rtol = {d: t.rtol for d, t in TOLERANCES.items()}
    (bound,) = error_bounds(program, [x], rtol)
    assert bound.unstable.tolist() == [True, False]
    assert assert_close([np.array([False, True])], [np.array([True, True])], program, [x]) == (
        1, 1)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_exponentials_overflowing_f16_are_unstable(op: str) -> None:
    program = parse_program(f"""
        func @f(%a: f16[3,3]) -> (f16[3,3]) {{
          %0 = {op}(%a) {{axis=1}} : f16[3,3]
          return %0
        }}""")
    # row 0: beside +inf the shift is 0 and exp(20) overflows f16 (not float64);
    # row 1: finite, terms at most 1; row 2: beside +inf, exp(3) fits
    x = np.float16([[20, np.inf, 0], [20, 0, -1], [3, np.inf, 0]])
    (bound,) = error_bounds(program, [x], {d: t.rtol for d, t in TOLERANCES.items()})
    want = [[True, False, False], [False] * 3, [False] * 3]
    assert bound.unstable.tolist() == (want if op == "softmax" else [[False] * 3] * 3)
    # 70000 terms of exp(0) = 1 sum past f16's largest value (65504): the whole row
    (long,) = error_bounds(parse_program(f"""
        func @f(%a: f16[1,70000]) -> (f16[1,70000]) {{
          %0 = {op}(%a) {{axis=1}} : f16[1,70000]
          return %0
        }}"""), [np.zeros((1, 70000), np.float16)], {d: t.rtol for d, t in TOLERANCES.items()})
    assert long.unstable.all()


def test_sums_whose_terms_may_overflow_f16_are_unstable() -> None:
    program = parse_program("""
        func @f(%a: f16[3,3]) -> (f16[3], f16[3], f16[3]) {
          %0 = reduce_mean(%a) {axes=[1], keepdims=false} : f16[3]
          %1 = reduce_sum(%a) {axes=[1], keepdims=false} : f16[3]
          %2 = einsum(%a, %a) {spec="ij,ij->i"} : f16[3]
          return %0, %1, %2
        }""")
    # row 0: 60000 + 60000 overflows f16 before the mean divides (and cancels in the sum);
    # row 1: small; row 2: an inf beside small terms is inf in every order
    x = np.float16([[6e4, 6e4, -6e4], [1, 2, 3], [np.inf, 1, 2]])
    rtol = {d: t.rtol for d, t in TOLERANCES.items()}
    mean, total, dot = error_bounds(program, [x], rtol)
    assert mean.unstable.tolist() == total.unstable.tolist() == [True, False, False]
    assert dot.unstable.tolist() == [True, False, True]  # squares of 6e4; an inf term
    # an average pool sums its window before dividing: beside the inf, -6e4 - 6e4 decides
    # between inf and nan (accy fuzz's f16 search)
    pool = parse_program("""
        func @f(%c: f16[1,1,2,4]) -> (f16[1,1,1,2]) {
          %0 = avg_pool2d(%c) {count_include_pad=false, kernel=[2, 2], pads=[0, 0, 0, 0], strides=[2, 2]} : f16[1,1,1,2]
          return %0
        }""")  # noqa: E501
    (pooled,) = error_bounds(pool, [np.float16([[[[np.inf, -6e4, 1, 2], [-6e4, 1, 3, 4]]]])], rtol)
    assert pooled.unstable.tolist() == [[[[True, False]]]]
    # the f16 mean promoted to f32 by dtype-legalization (6e4, where f16 gives inf) passes
    mean_only = parse_program("""
        func @f(%a: f16[2]) -> (f16[]) {
          %0 = reduce_mean(%a) {axes=[0], keepdims=false} : f16[]
          return %0
        }""")
    assert check_passes(mean_only, [np.float16([6e4, 6e4])]).status == "ok"


def test_nan_matches_nan_and_infinities_match_exactly() -> None:
    program = parse_program("""
        func @f(%a: f32[3]) -> (f32[3]) {
          %0 = log(%a) : f32[3]
          return %0
        }""")
    x = np.float32([-1, 0, 2])
    want = interpret(program, [x])[0]
    assert assert_close([want.copy()], [want], program, [x]) == (3, 0)
    with pytest.raises(DifferentialFailure, match="nan"):
        assert_close([np.float32([0, -np.inf, np.log(2)])], [want], program, [x])


def test_unsupported_means_no_lowering_or_a_refused_capability() -> None:
    text = "pass kernelization failed: work item 0: no kernel lowering for einsum yet"
    assert unsupported_reason(PassFailure(text)) == text
    assert unsupported_reason(PassFailure("pass kernelization failed: index error")) is None
    assert unsupported_reason(ValueError("no kernel lowering")) is None
    program = parse_program("func @f(%a: f64[2]) -> (f64[2]) {\n  %0 = neg(%a) : f64[2]\n"
                            "  return %0\n}")
    no_f64 = TargetProfile(dtypes=frozenset({DType.f32}))
    with pytest.raises(PassFailure) as refused:
        accy.prepare(program, "dtype-legalization{f64=error}", target=no_f64)
    assert "f64" in unsupported_reason(refused.value)


def test_documented_examples() -> None:
    for module, least in ((accy.testing, 1), (accy.differential, 3)):
        result = doctest.testmod(module, extraglobs={"accy": accy, "np": np},
                                 optionflags=doctest.ELLIPSIS)
        assert result.failed == 0 and result.attempted >= least, module.__name__


@given(st.just(0))
def test_profile_is_deadline_free(_: int) -> None:
    from hypothesis import settings

    assert settings.default.deadline is None


def test_ops_without_an_error_rule_are_bounded_by_perturbing_operands(monkeypatch) -> None:
    import accy.error_bounds as bounds

    program = parse_program("""
        func @f(%a: f32[3]) -> (f32[3], bool[3]) {
          %0 = exp(%a) : f32[3]
          %1 = tanh(%0) : f32[3]
          %2 = constant() {value=dense<[1.0]>} : f32[]
          %3 = gt(%0, %2) : bool[3]
          return %1, %3
        }""")
    x = np.float32([-1.0, 1e-9, 0.25])
    rtol = {d: t.rtol for d, t in TOLERANCES.items()}
    ruled = error_bounds(program, [x], rtol)
    monkeypatch.delitem(bounds._RULES, Op.TANH)
    guessed = error_bounds(program, [x], rtol)
    assert np.allclose(guessed[0].error, ruled[0].error, rtol=0.5)
    assert guessed[1].unstable.tolist() == ruled[1].unstable.tolist() == [False, True, False]


# ---- pipelines(): only runnable pipelines ---------------------------------------------------


@accy.function
def _small(a: accy.f32[4, 8], b: accy.f32[8, 3], i: accy.i32[5]):
    from accy import builder as B

    h = B.einsum("ij,jk->ik", a, b) * 1.0
    return (h.softmax(axis=-1).sigmoid() + h.sum(axes=(1,), keepdims=True),
            B.gather(a, i, axis=0).exp())


_RNG = np.random.default_rng(0)
_SMALL_INPUTS = (_RNG.uniform(-1, 1, (4, 8)).astype(np.float32),
                 _RNG.uniform(-1, 1, (8, 3)).astype(np.float32),
                 np.array([0, 3, 1, 1, 2], np.int32))


@examples(0.3)
@given(accy.testing.pipelines())
def test_drawn_pipelines_prepare_and_run(device_dtypes, pipeline) -> None:
    names = [p.name for p in pipeline.passes]
    for i, name in enumerate(names):  # prerequisites come first, stages in order
        assert set(accy.testing.prerequisites(name)) <= set(names[:i])
    assert [p.stage.index for p in pipeline.passes] == sorted(
        p.stage.index for p in pipeline.passes)
    got = accy.prepare(_small, pipeline).run(*_SMALL_INPUTS)
    for g, w in zip(got, interpret(_small, _SMALL_INPUTS), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_each_pass_with_its_prerequisites_runs(device_dtypes) -> None:
    """Every registered pass at its defaults, alone with what it needs: the prerequisite table
    is complete (a missing entry fails here with 'needs the ... plan')."""
    from accy.passes.registry import all_passes
    from accy.passes.spec import Pipeline

    registry = all_passes()
    for name in sorted(registry):
        names = accy.testing._ordered(
            accy.testing._closure([name, *accy.testing.RUN_REQUIRES]), registry)
        job = accy.prepare(_small, Pipeline(tuple(registry[n]() for n in names)))
        assert len(job.run(*_SMALL_INPUTS)) == 2, name


@dataclasses.dataclass(frozen=True)
class _Mine(Pass):
    """A pass of one's own whose options declare their ranges through ``option()``."""

    name: ClassVar[str] = "mine"
    stage: ClassVar[Stage] = Stage.tensor
    width: int = option(4, "", minimum=2, maximum=5)
    tags: tuple[str, ...] = option((), "", choices=("a", "b"))
    other: int = option(3, "no range: only the default")


def find(strategy, condition):
    """hypothesis.find without the example database: a shrunk example saved by one call (or
    an earlier run) must not be replayed as another call's first example."""
    return _find(strategy, condition, settings=settings(database=None))


def test_option_values_read_declared_ranges() -> None:
    """The range or choices an option declares are what a pass the built-in table does not
    know draws from."""
    infos = {o.field: o for o in _Mine.options()}
    values = accy.testing.option_values(_Mine, infos["width"])
    assert find(values, lambda v: True) == 2 and find(values, lambda v: v >= 5) == 5
    assert set(find(accy.testing.option_values(_Mine, infos["tags"]), lambda v: len(v) == 2)
               ) == {"a", "b"}
    assert find(accy.testing.option_values(_Mine, infos["other"]), lambda v: True) == 3
