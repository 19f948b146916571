"""indexing-lowering: options, the indexed form for every axis and rank, same meaning."""

import numpy as np
import pytest

import accy
from accy.builder import gather, scatter_add, trace
from accy.cli import main
from accy.errors import PipelineError
from accy.ir.ops import Op
from accy.ir.program import Program, Stage
from accy.kernels.indexed import is_indexed_form
from accy.passes.pipelines import PIPELINES
from accy.passes.spec import parse_pipeline

RNG = np.random.default_rng(11)


def lowered(program: Program, pipeline: str = "indexing-lowering") -> accy.PreparedJob:
    return accy.prepare(program, pipeline, until=Stage.tensor)


def program_of(job: accy.PreparedJob) -> Program:
    return job.products[Stage.tensor].program


def indexing_ops(program: Program) -> list:
    return [n for n in program.nodes() if n.op in (Op.GATHER, Op.SCATTER_ADD)]


def same_meaning(before: Program, after: Program, inputs) -> None:
    for want, got in zip(accy.interpret(before, inputs), accy.interpret(after, inputs),
                         strict=True):
        np.testing.assert_array_equal(got, want)


CASES = [  # (x shape, indices shape)
    ((7,), ()), ((7,), (4,)), ((7,), (2, 3)),
    ((5, 6), (4,)), ((5, 6), ()), ((5, 6), (3, 2)),
    ((3, 4, 5), (6,)), ((2, 3, 4, 5), (2, 2)), ((2, 1, 3, 1), (5,)),
]


def gather_cases():
    for shape, ishape in CASES:
        for axis in range(len(shape)):
            yield shape, ishape, axis


@pytest.mark.parametrize("shape, ishape, axis", list(gather_cases()))
def test_gather_takes_the_indexed_form_with_the_same_meaning(shape, ishape, axis):
    program = trace(lambda x, i: gather(x, i, axis=axis), accy.f32[shape], accy.i32[ishape],
                    name="g")
    job = lowered(program)
    after = program_of(job)
    (node,) = indexing_ops(after)
    n = shape[axis]
    outer, inner = int(np.prod(shape[:axis])), int(np.prod(shape[axis + 1:]))
    assert is_indexed_form(node)
    assert node.srcs[0].type.shape == (outer, n, inner)
    assert node.srcs[1].type.shape == (int(np.prod(ishape)),)
    assert after.function().results[0].type == program.function().results[0].type
    already = len(shape) == 3 and axis == 1 and len(ishape) == 1
    assert dict(job.record("tensor").passes[0].stats)["gathers"] == (0 if already else 1)
    x = RNG.standard_normal(shape).astype(np.float32)
    i = RNG.integers(0, n, ishape).astype(np.int32)
    same_meaning(program, after, [x, i])


@pytest.mark.parametrize("shape, ishape, axis", list(gather_cases()))
def test_scatter_add_takes_the_indexed_form_with_the_same_meaning(shape, ishape, axis):
    ushape = shape[:axis] + ishape + shape[axis + 1:]
    program = trace(lambda x, i, u: scatter_add(x, i, u, axis=axis), accy.i32[shape],
                    accy.i64[ishape], accy.i32[ushape], name="s")
    after = program_of(lowered(program))
    (node,) = indexing_ops(after)
    outer, inner = int(np.prod(shape[:axis])), int(np.prod(shape[axis + 1:]))
    m = int(np.prod(ishape))
    assert is_indexed_form(node)
    assert [s.type.shape for s in node.srcs] == [(outer, shape[axis], inner), (m,),
                                                 (outer, m, inner)]
    assert after.function().results[0].type == program.function().results[0].type
    x = RNG.integers(-50, 50, shape).astype(np.int32)
    i = RNG.integers(0, shape[axis], ishape).astype(np.int64)
    u = RNG.integers(-50, 50, ushape).astype(np.int32)
    same_meaning(program, after, [x, i, u])


def embedding() -> Program:
    def fn(table, ids, grad):
        rows = gather(table, ids, axis=0)
        return rows, scatter_add(table, ids, grad, axis=0)

    return trace(fn, accy.f32[10, 4], accy.i32[2, 3], accy.f32[2, 3, 4], name="emb")


def test_the_pass_is_idempotent_and_composes_reshapes():
    once = program_of(lowered(embedding()))
    twice = program_of(lowered(embedding(), "indexing-lowering,indexing-lowering"))
    assert twice.fingerprint() == once.fingerprint()
    for node in once.nodes():
        if node.op is Op.RESHAPE:
            assert node.srcs[0].op is not Op.RESHAPE


def test_options_choose_which_ops_are_lowered():
    def forms(pipeline: str) -> list[bool]:
        return [is_indexed_form(n) for n in indexing_ops(program_of(lowered(embedding(),
                                                                              pipeline)))]

    assert forms("indexing-lowering") == [True, True]
    assert forms("indexing-lowering{kernel-library=disabled}") == [False, False]
    assert forms("indexing-lowering{kernel-library=disabled scatter=conflict-free}") == [
        False, False]
    ops = indexing_ops(program_of(lowered(embedding(), "indexing-lowering{scatter=conflict-free}")))
    assert [(n.op, is_indexed_form(n)) for n in ops] == [(Op.GATHER, True),
                                                       (Op.SCATTER_ADD, False)]
    unchanged = program_of(lowered(embedding(), "indexing-lowering{kernel-library=disabled}"))
    assert unchanged.fingerprint() == embedding().fingerprint()


@pytest.mark.parametrize("text", [
    "indexing-lowering",
    "indexing-lowering{kernel-library=disabled}",
    "indexing-lowering{scatter=conflict-free}",
    "indexing-lowering{kernel-library=disabled scatter=conflict-free}",
    "indexing-lowering{gather-thread-blocks=4 scatter-thread-blocks=5}",
])
def test_options_round_trip(text):
    pipeline = parse_pipeline(text)
    assert pipeline.text() == text
    assert parse_pipeline(pipeline.text()) == pipeline


@pytest.mark.parametrize("text, where", [
    ("indexing-lowering{kernel-library=on}", "kernel-library"),
    ("indexing-lowering{scatter=atomic}", "scatter"),
    ("indexing-lowering{gather-thread-blocks=-1}", "0 <= gather-thread-blocks"),
    ("indexing-lowering{scatter-thread-blocks=many}", "scatter-thread-blocks"),
])
def test_bad_options_are_errors_naming_the_option(text, where):
    with pytest.raises(PipelineError, match=where):
        parse_pipeline(text)


def test_default_tensor_pipeline_lowers_indexing_and_accy_passes_lists_it(capsys):
    assert "einsum-lowering,contraction-padding,indexing-lowering,loss-lowering" in \
        PIPELINES["accy-tensor"].text
    ops = indexing_ops(program_of(lowered(embedding(), "accy-tensor")))
    assert ops and all(is_indexed_form(n) for n in ops)
    assert main(["passes"]) == 0
    out = capsys.readouterr().out
    for words in ("indexing-lowering", "kernel-library", "enabled|disabled", "scatter",
                  "auto|conflict-free", "gather-thread-blocks", "scatter-thread-blocks"):
        assert words in out


def test_thread_blocks_reach_the_indexed_groups_outlines_only():
    """The plan rides on the product to kernel-outlining-planning, which gives each indexed
    group its op's work-group count and every other group 0."""
    def fn(table, ids, grad):
        return gather(table, ids, axis=0) * 2.0, scatter_add(table, ids, grad, axis=0), table + 1

    program = trace(fn, accy.f32[10, 4], accy.i32[6], accy.f32[6, 4], name="emb")
    pipeline = parse_pipeline("accy-default").replacing(
        "indexing-lowering{gather-thread-blocks=3 scatter-thread-blocks=7}")
    job = accy.prepare(program, pipeline, until=Stage.kernel)
    product = job.products[Stage.kernel]
    blocks = {}
    for item, outline in zip(product.schedule.items, product.outline.outlines, strict=True):
        ops = {n.op for n in product.fusion.groups[item.group].nodes}
        blocks[Op.GATHER if Op.GATHER in ops else Op.SCATTER_ADD if Op.SCATTER_ADD in ops
               else Op.ADD] = outline.thread_blocks
    assert blocks == {Op.GATHER: 3, Op.SCATTER_ADD: 7, Op.ADD: 0}
    default = accy.prepare(program, until=Stage.kernel).products[Stage.kernel]
    assert {o.thread_blocks for o in default.outline.outlines} == {0}
    assert default.fingerprint() != product.fingerprint()
