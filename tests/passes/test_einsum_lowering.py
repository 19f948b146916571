"""einsum-lowering: local reductions, diagonals and pairwise einsums that mean the same."""

from __future__ import annotations

import random
import typing

import numpy as np
import opt_einsum
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import accy
from accy.builder import Builder, einsum
from accy.contraction import STRATEGIES
from accy.errors import PassFailure, PipelineError
from accy.ir.ops import Op
from accy.ir.program import Program, Stage
from accy.ir.shapes import parse_einsum
from accy.ir.types import DType
from accy.passes.spec import parse_pipeline
from accy.passes.tensor.einsum_lowering import EinsumLowering


def program_of(spec: str, shapes: list[tuple[int, ...]], dtype: DType = DType.f64) -> Program:
    b = Builder()
    f = b.begin_function("e", [b.tensor(dtype, s) for s in shapes])
    f.return_(einsum(spec, *[f.param(i) for i in range(len(shapes))]))
    f.finish()
    return b.finish()


def lower(program: Program, pipeline: str = "einsum-lowering") -> tuple[Program, dict]:
    job = accy.prepare(program, pipeline, until=Stage.tensor)
    (record,) = [p for p in job.record("tensor").passes if p.spec.startswith("einsum-lowering")]
    return job.products[Stage.tensor].program, dict(record.stats)


def inputs_for(program: Program, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for p in program.functions[0].params:
        x = rng.standard_normal(p.type.shape) if p.type.dtype.is_float else rng.integers(
            -3, 4, p.type.shape)
        out.append(np.asarray(x, dtype=p.type.dtype.numpy))
    return out


def assert_lowered(program: Program) -> None:
    """At most two operands per einsum; no pairwise einsum holds a letter it could have summed
    locally; single-operand einsums only take diagonals (or copy)."""
    for node in program.nodes():
        if node.op is not Op.EINSUM:
            continue
        terms, out = parse_einsum(node.attr("spec"), [s.type.rank for s in node.srcs])
        assert len(terms) <= 2, node
        if len(terms) == 2:
            for t, other in zip(terms, reversed(terms), strict=True):
                assert len(set(t)) == len(t), node
                assert all(c in other or c in out for c in t), node
        else:
            assert out == "".join(dict.fromkeys(terms[0])), node


def assert_same_meaning(before: Program, after: Program) -> None:
    xs = inputs_for(before)
    for want, got in zip(accy.interpret(before, xs, precision="float64"),
                         accy.interpret(after, xs, precision="float64"), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


def count(program: Program, op: Op) -> int:
    return sum(n.op is op for n in program.nodes())


# ---- the seed's rows 6 and 7 ------------------------------------------------------------------


def test_seed_row_6_local_reductions_then_outer_product():
    before = program_of("ab,cd->ac", [(16, 16), (16, 16)], DType.f32)
    after, stats = lower(before)
    assert count(after, Op.REDUCE_SUM) == 2 and count(after, Op.EINSUM) == 1
    (outer,) = [n for n in after.nodes() if n.op is Op.EINSUM]
    assert outer.attr("spec") == "a,c->ac"
    assert all(s.op is Op.REDUCE_SUM for s in outer.srcs)
    assert_same_meaning(before, after)
    assert stats["lowered"] == 1 and stats["einsum-0"]["spec"] == "ab,cd->ac"


def test_seed_row_7_attention_goes_pairwise():
    before = program_of("bqd,bkd,bkv->bqv", [(2, 16, 8), (2, 12, 8), (2, 12, 4)], DType.f32)
    after, stats = lower(before)
    assert count(after, Op.EINSUM) == 2 and count(after, Op.REDUCE_SUM) == 0
    assert_lowered(after)
    assert_same_meaning(before, after)
    record = stats["einsum-0"]
    assert record["spec"] == "bqd,bkd,bkv->bqv" and record["strategy"] == "auto"
    assert record["path"] == ((1, 2), (0, 1))  # k.v first: 3584 FLOPs against 9216
    assert record["cost"]["flops"] == 3584 and record["naive_cost"]["flops"] == 9216
    assert set(record["cost"]) == {"flops", "size", "write"}


def test_the_default_pipeline_lowers_einsums():
    assert "einsum-lowering" in [p.name for p in parse_pipeline("accy-tensor").passes]
    before = program_of("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)])
    after = accy.prepare(before, until=Stage.tensor).products[Stage.tensor].program
    assert count(after, Op.EINSUM) == 2
    assert_same_meaning(before, after)


# ---- meaning kept -----------------------------------------------------------------------------

SPECS = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bqd,bkd,bkv->bqv", [(2, 5, 3), (2, 4, 3), (2, 4, 6)]),
    ("ii->", [(4, 4)]),
    ("ii->i", [(4, 4)]),
    ("iij,jk->ki", [(3, 3, 4), (4, 2)]),
    ("ij->ji", [(2, 3)]),
    ("ij->j", [(2, 3)]),
    ("ij->ij", [(2, 3)]),
    (",ij,j->i", [(), (2, 3), (3,)]),
    (",->", [(), ()]),
    ("ab,bc->ac", [(3, 1), (1, 4)]),
    ("ab,ab,ab->", [(2, 3), (2, 3), (2, 3)]),
    ("ab,b,cb->ca", [(1, 3), (3,), (2, 3)]),
    ("abc,cda,db->", [(2, 3, 4), (4, 5, 2), (5, 3)]),
    ("ijk,jil->kl", [(2, 3, 4), (3, 2, 5)]),
    ("aab,bcc,cd->ad", [(2, 2, 3), (3, 4, 4), (4, 5)]),
]


@pytest.mark.parametrize("spec, shapes", SPECS)
def test_lowering_keeps_meaning(spec, shapes):
    before = program_of(spec, shapes)
    after, _ = lower(before)
    assert_lowered(after)
    assert_same_meaning(before, after)


@pytest.mark.parametrize("n", range(4, 11))
def test_matrix_chains(n):
    rng = random.Random(n)
    dims = [rng.randint(1, 9) for _ in range(n + 1)]
    letters = "abcdefghijklmnopqrstuvwxyz"
    spec = ",".join(letters[i:i + 2] for i in range(n)) + f"->{letters[0]}{letters[n]}"
    before = program_of(spec, [(dims[i], dims[i + 1]) for i in range(n)])
    after, stats = lower(before)
    assert count(after, Op.EINSUM) == n - 1
    assert_lowered(after)
    assert_same_meaning(before, after)
    record = stats["einsum-0"]
    assert record["cost"]["flops"] <= record["naive_cost"]["flops"]


@pytest.mark.parametrize("n", range(4, 11))
def test_random_networks(n):
    rng = random.Random(1000 + n)
    letters = iter("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    terms: list[str] = [""] * n
    sizes: dict[str, int] = {}
    for i in range(1, n):  # a spanning tree, then a few more edges, open legs and a batch
        for a, b in [(i, rng.randrange(i))] + ([(i, rng.randrange(n))] if rng.random() < .5
                                               else []):
            if a != b:
                c = next(letters)
                sizes[c] = rng.randint(1, 4)
                terms[a] += c
                terms[b] += c
    out = ""
    for i in rng.sample(range(n), 2):
        c = next(letters)
        sizes[c] = rng.randint(1, 3)
        terms[i] += c
        out += c
    batch = next(letters)
    sizes[batch] = 2
    terms = [t + batch for t in terms]
    before = program_of(",".join(terms) + "->" + batch + out,
                        [tuple(sizes[c] for c in t) for t in terms])
    for strategy in STRATEGIES:
        after, _ = lower(before, f"einsum-lowering{{strategy={strategy}}}")
        assert count(after, Op.EINSUM) == n - 1
        assert_lowered(after)
        assert_same_meaning(before, after)


@st.composite
def einsum_programs(draw):
    letters = "abcdef"[:draw(st.integers(1, 6))]
    sizes = {c: draw(st.integers(1, 4)) for c in letters}
    terms = [draw(st.text(alphabet=letters, max_size=4)) for _ in range(draw(st.integers(1, 6)))]
    seen = sorted(set("".join(terms)))
    out = draw(st.permutations(seen))[:draw(st.integers(0, len(seen)))] if seen else []
    return program_of(",".join(terms) + "->" + "".join(out),
                      [tuple(sizes[c] for c in t) for t in terms])


@settings(max_examples=60, deadline=None)
@given(einsum_programs())
def test_random_einsums_keep_their_meaning(before):
    after, _ = lower(before)
    assert_lowered(after)
    assert_same_meaning(before, after)


def test_integer_einsums_are_exact():
    before = program_of("ab,bc,cd->ad", [(3, 4), (4, 5), (5, 2)], DType.i64)
    after, _ = lower(before)
    xs = inputs_for(before)
    np.testing.assert_array_equal(accy.interpret(after, xs)[0], accy.interpret(before, xs)[0])


def test_shared_operands_and_several_einsums():
    b = Builder()
    f = b.begin_function("two", [b.tensor(DType.f64, (3, 4)), b.tensor(DType.f64, (4, 3))])
    x, y = f.param(0), f.param(1)
    first = einsum("ij,jk,kl->il", x, y, x)
    f.return_(einsum("ab,bc->", first, y) + einsum("ii->", einsum("ij,jk->ik", x, y)))
    f.finish()
    before = b.finish()
    after, stats = lower(before)
    assert stats["lowered"] == 4 and [stats[f"einsum-{k}"]["spec"] for k in range(4)]
    assert_lowered(after)
    assert_same_meaning(before, after)


# ---- options and pipeline text ----------------------------------------------------------------


def test_pipeline_text_round_trip():
    text = ("einsum-lowering{strategy=beam exact-state-limit=64 beam-width=8 auto-beam-width=32 "
            "objective=size}")
    pipeline = parse_pipeline(text)
    (p,) = pipeline.passes
    assert isinstance(p, EinsumLowering) and pipeline.text() == text
    assert parse_pipeline(pipeline.text()) == pipeline
    assert (p.strategy, p.exact_state_limit, p.beam_width, p.auto_beam_width, p.objective) == (
        "beam", 64, 8, 32, "size")
    assert parse_pipeline("einsum-lowering").text() == "einsum-lowering"
    full = parse_pipeline("einsum-lowering").text(full=True)
    assert parse_pipeline(full) == parse_pipeline("einsum-lowering")


def test_options_reach_the_search():
    before = program_of("ab,bc,cd,de->ae", [(2, 9), (9, 9), (9, 9), (9, 2)])
    _, stats = lower(before, "einsum-lowering{strategy=greedy objective=write}")
    assert stats["einsum-0"]["strategy"] == "greedy"
    assert stats["einsum-0"]["objective"] == "write"


def test_strategy_choices_are_the_registry():
    hints = typing.get_type_hints(EinsumLowering)
    assert set(typing.get_args(hints["strategy"])) == set(STRATEGIES)


@pytest.mark.parametrize("text, message", [
    ("einsum-lowering{strategy=dp}", "allowed values: auto, exact, beam, greedy, hyper"),
    ("einsum-lowering{beam-width=0}", "got 0; allowed: 1 <= beam-width"),
    ("einsum-lowering{objective=time}", "allowed values: flops, size, write"),
])
def test_bad_options_fail_when_read(text, message):
    with pytest.raises(PipelineError, match=message):
        parse_pipeline(text)


def test_exact_past_its_limit_names_the_pass():
    before = program_of(",".join("ab" for _ in range(10)) + "->", [(2, 2)] * 10)
    with pytest.raises(PassFailure, match=r"einsum-lowering\{strategy=exact exact-state-limit=16\}"
                                          r".*exact_state_limit=16"):
        lower(before, "einsum-lowering{strategy=exact exact-state-limit=16}")
    after, _ = lower(before, "einsum-lowering{exact-state-limit=16}")  # auto falls back to beam
    assert_same_meaning(before, after)


PRIMITIVE = "einsum-lowering{kernel-library=disabled}"


@pytest.mark.parametrize("spec, shapes", SPECS)
def test_kernel_library_disabled_leaves_no_pairwise_einsum(spec, shapes):
    """Every pairwise step as transpose/reshape + broadcasting mul + reduce_sum: only
    single-operand einsums (diagonals) remain, and the meaning is the same."""
    before = program_of(spec, shapes)
    after, _ = lower(before, PRIMITIVE)
    assert all(len(n.srcs) == 1 for n in after.nodes() if n.op is Op.EINSUM)
    assert_same_meaning(before, after)


@settings(max_examples=40, deadline=None)
@given(einsum_programs())
def test_kernel_library_disabled_keeps_the_meaning_of_random_einsums(before):
    after, _ = lower(before, PRIMITIVE)
    assert all(len(n.srcs) == 1 for n in after.nodes() if n.op is Op.EINSUM)
    assert_same_meaning(before, after)


def test_kernel_library_disabled_computes_f16_in_f32():
    before = program_of("ab,bc->ac", [(3, 40), (40, 2)], DType.f16)
    after, _ = lower(before, PRIMITIVE)
    assert {DType.f32} == {n.type.dtype for n in after.nodes() if n.op is Op.MUL}
    xs = inputs_for(before)
    np.testing.assert_allclose(accy.interpret(after, xs)[0].astype(np.float32),
                               accy.interpret(before, xs)[0].astype(np.float32), rtol=2e-3)


def test_kernel_library_disabled_runs_without_contraction_kernels(device):
    before = program_of("ab,bc,cd->ad", [(30, 40), (40, 20), (20, 10)], DType.f32)
    tensor = "shape-layout-propagation,einsum-lowering{kernel-library=disabled}"
    job = accy.prepare(before, f"{tensor},accy-dispatch,accy-memory,accy-kernel,accy-target")
    assert job.generators() and "tiled-contraction" not in job.generators()
    xs = inputs_for(before)
    np.testing.assert_allclose(job.run(*xs, device=device)[0],
                               accy.interpret(before, xs)[0], rtol=1e-4, atol=1e-4)


# ---- issue #17: budgets, slicing, any number of indices ---------------------------------------


def test_budget_and_memory_options_round_trip_and_reach_the_search():
    text = "einsum-lowering{strategy=hyper memory-limit=500 max-time=0.5 max-repeats=4}"
    pipeline = parse_pipeline(text)
    assert pipeline.text() == text
    (p,) = pipeline.passes
    opts = p.path_options()
    assert (opts.memory_limit, opts.max_time, opts.max_repeats) == (500, 0.5, 4)
    assert parse_pipeline("einsum-lowering").passes[0].path_options().memory_limit is None
    before = program_of("ab,bc,cd,de->ae", [(2, 9), (9, 9), (9, 9), (9, 2)])
    after, stats = lower(before, "einsum-lowering{strategy=hyper max-repeats=3}")
    assert stats["einsum-0"]["strategy"] == "hyper"
    assert_same_meaning(before, after)


@pytest.mark.parametrize("text, message", [
    ("einsum-lowering{memory-limit=-1}", "got -1; allowed: 0 <= memory-limit"),
    ("einsum-lowering{max-repeats=-2}", "got -2; allowed: 0 <= max-repeats"),
    ("einsum-lowering{max-time=-1.0}", "got -1.0; allowed: 0 <= max-time"),
    ("einsum-lowering{max-time=nan}", "got nan; allowed: 0 <= max-time"),
])
def test_bad_budget_options_fail_when_read(text, message):
    with pytest.raises(PipelineError, match=message):
        parse_pipeline(text)


def test_an_einsum_no_path_fits_is_sliced():
    before = program_of("ab,bc,cd->ad", [(3, 40), (40, 40), (40, 3)])
    after, stats = lower(before, "einsum-lowering{memory-limit=40}")
    record = stats["einsum-0"]
    assert record["sliced"] == ("c",) and record["slices"] == 40
    assert record["sliced_cost"]["size"] <= 40
    assert record["sliced_cost"]["flops"] > record["cost"]["flops"]
    assert count(after, Op.SLICE) >= 40 and count(after, Op.ADD) == 39
    assert all(n.type.size <= 40 for n in after.nodes() if n.op is Op.EINSUM)
    assert_same_meaning(before, after)


def test_a_limit_slicing_cannot_meet_names_the_smallest():
    before = program_of("ab,bc->ac", [(10, 10), (10, 10)])
    with pytest.raises(PassFailure, match=r"einsum 'ab,bc->ac': slicing cannot bring every "
                                          r"intermediate within 50 elements \(one slice still "
                                          r"needs 100\)"):
        lower(before, "einsum-lowering{memory-limit=50}")


def ladder(n: int, bonds: int = 1, every: int = 0) -> tuple[str, list[tuple[int, ...]]]:
    """A 2 x n ladder of tensors, each edge ``bonds`` indices of size 2, an open leg on every
    ``every``-th tensor (default: ``n // 8``): ``bonds * (3n - 2)`` indices and more, narrow
    to contract."""
    edges = [(i, i + 1) for i in range(n - 1)] + [(n + i, n + i + 1) for i in range(n - 1)]
    edges += [(i, n + i) for i in range(n)]
    terms: list[list[str]] = [[] for _ in range(2 * n)]
    symbols = 0
    for a, b in edges:
        for _ in range(bonds):
            c = opt_einsum.get_symbol(symbols)
            symbols += 1
            terms[a].append(c)
            terms[b].append(c)
    every = every or max(n // 8, 1)
    for t in terms[::every]:  # a few open legs: the output
        t.append(opt_einsum.get_symbol(symbols))
        symbols += 1
    out = "".join(t[-1] for t in terms[::every])
    return ",".join("".join(t) for t in terms) + "->" + out, [(2,) * len(t) for t in terms]


def test_300_indices_through_builder_text_lowering_and_interpret():
    spec, shapes = ladder(60)
    assert len(set(spec) - set(",->")) > 52
    before = program_of(spec, shapes)
    text = accy.print_program(before)
    assert accy.print_program(accy.parse_program(text)) == text  # the text form round-trips
    after, stats = lower(accy.parse_program(text))
    assert stats["lowered"] == 1
    assert_lowered(after)
    xs = inputs_for(before)
    terms = spec.split("->")[0].split(",")
    path = stats["einsum-0"]["path"]
    want = opt_einsum.contract(spec, *xs, optimize=list(path))
    np.testing.assert_allclose(accy.interpret(after, xs)[0], want, rtol=1e-9)
    assert len(terms) == 120



DEVICE_PIPELINE = "accy-dispatch,accy-memory,accy-kernel,accy-target"


def test_a_sliced_einsum_runs_on_the_device_and_matches_numpy(device):
    spec = "ab,bc,cd->ad"
    before = program_of(spec, [(3, 8), (8, 8), (8, 3)], DType.f32)
    job = accy.prepare(before, "shape-layout-propagation,einsum-lowering{memory-limit=9},"
                       + DEVICE_PIPELINE)
    (record,) = [p for p in job.record("tensor").passes if p.spec.startswith("einsum-lowering")]
    sliced = dict(record.stats)["einsum-0"]
    assert sliced["slices"] > 1 and sliced["sliced_cost"]["size"] <= 9
    tensor = job.products[Stage.tensor].program
    assert all(n.type.size <= 9 for n in tensor.nodes() if n.op is Op.EINSUM)
    xs = inputs_for(before)
    np.testing.assert_allclose(job.run(*xs, device=device)[0], np.einsum(spec, *xs),
                               rtol=1e-4, atol=1e-4)


def test_300_indices_through_builder_prepare_and_run(device):
    spec, shapes = ladder(21, bonds=5, every=10)  # 42 tensors, 310 indices
    assert len(set(spec) - set(",->")) >= 300
    before = program_of(spec, shapes, DType.f32)
    job = accy.prepare(before, "shape-layout-propagation,einsum-lowering," + DEVICE_PIPELINE)
    xs = [np.float32(0.25) * x for x in inputs_for(before)]  # keep the result within f32
    want = opt_einsum.contract(spec, *[x.astype(np.float64) for x in xs])
    np.testing.assert_allclose(job.run(*xs, device=device)[0], want, rtol=1e-3,
                               atol=1e-4 * float(np.abs(want).max()))
