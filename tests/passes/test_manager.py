"""The pass manager: records, verification after each pass, failures, hooks, order, analyses."""

from dataclasses import dataclass

import pytest

import accy
from accy.errors import PassFailure
from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.program import Function, Program, Stage
from accy.ir.types import DType, TensorType
from accy.passes.base import Pass, option
from accy.passes.manager import Instrument, PassManager, StageRecord
from accy.passes.pipelines import PIPELINES
from accy.passes.spec import Pipeline, parse_pipeline
from accy.plans import FusionPlan
from accy.product import Product
from accy.target import TargetProfile

F4 = TensorType((4,), DType.f32)


@accy.function
def add_mul(a: accy.f32[4], b: accy.f32[4], c: accy.f32[4]):
    return (a + b) * c


def start(program: Program = add_mul) -> Product:
    return Product(Stage.semantic, program, target=TargetProfile())


# throwaway passes (never registered) ------------------------------------------------------


@dataclass(frozen=True)
class MistypedNode(Pass):
    """Replaces the result by an add whose type disagrees with its operands."""

    name = "mistyped-node"
    stage = Stage.contract

    def run(self, ctx, product):
        fn = product.program.functions[0]
        bad = Node(Op.ADD, TensorType((5,), DType.f32), fn.params[:2])
        return product.replace(program=Program((
            Function(fn.name, fn.params, fn.param_names, (bad,)),)))


@dataclass(frozen=True)
class EmptyFusion(Pass):
    """Attaches a fusion plan that covers none of the ops."""

    name = "empty-fusion"
    stage = Stage.dispatch

    def run(self, ctx, product):
        return product.replace(fusion=FusionPlan("single-output", ()))


@dataclass(frozen=True)
class Boom(Pass):
    """Raises a plain Python exception."""

    name = "boom"
    stage = Stage.contract
    code: int = option(7, "which code to raise")

    def run(self, ctx, product):
        raise RuntimeError(f"exploded with code {self.code}")


@dataclass(frozen=True)
class AskUses(Pass):
    """Requests the `uses` analysis and changes nothing."""

    name = "ask-uses"
    stage = Stage.dispatch
    tag: int = option(0, "tells instances apart")

    def run(self, ctx, product):
        ctx.analysis("uses", product)
        ctx.stat("asked", True)
        return product


@dataclass(frozen=True)
class Retarget(Pass):
    """Changes the product's fingerprint (a new target) and preserves nothing."""

    name = "retarget"
    stage = Stage.dispatch
    device: str = option("changed", "device name of the new target")

    def run(self, ctx, product):
        return product.replace(target=TargetProfile(device=self.device))


@dataclass(frozen=True)
class RetargetPreserving(Retarget):
    """Like retarget, but declares `uses` preserved."""

    name = "retarget-preserving"
    preserves = frozenset({"uses"})


@dataclass(frozen=True)
class Identity(Pass):
    name = "identity"
    stage = Stage.dispatch

    def run(self, ctx, product):
        return product


class Recorder(Instrument):
    def __init__(self) -> None:
        self.events: list[tuple] = []

    def before_pass(self, p, product):
        self.events.append(("before", p.name, product.stage))

    def after_pass(self, p, product, record):
        assert record.spec == p.spec() and record.fingerprint == product.fingerprint()
        self.events.append(("after", p.name, product.stage))

    def on_failure(self, p, product, error):
        self.events.append(("failure", p.name, type(error).__name__))


# records ----------------------------------------------------------------------------------


def test_per_stage_records() -> None:
    pipe = parse_pipeline("accy-default")
    final, records = PassManager(pipe).run(start())
    assert final.stage is Stage.target
    assert [r.stage for r in records] == list(Stage)[1:]
    runs = {r.stage: r.pass_runs for r in records}
    stage_pipeline = {q.stage: q.name for q in PIPELINES.values() if q.stage is not None}
    assert runs == {s: len(parse_pipeline(stage_pipeline[s])) for s in runs}
    for r in records:
        assert isinstance(r, StageRecord)
        assert r.elapsed_ns > 0
        assert len(r.passes) == r.pass_runs
        assert r.stamp == (r.stage.value, r.fingerprint)
        assert r.analysis_hits == sum(p.analysis_hits for p in r.passes)
        assert r.analysis_misses == sum(p.analysis_misses for p in r.passes)
        for p in r.passes:
            assert p.elapsed_ns > 0
            assert len(p.fingerprint) == 32
        if r.passes:
            assert r.fingerprint == r.passes[-1].fingerprint
        assert [p.spec for p in r.passes] == [
            x.spec() for x in pipe.passes if x.stage is r.stage]
    assert records[-1].fingerprint == final.fingerprint()
    by_stage = {r.stage: r for r in records}
    assert dict(by_stage[Stage.memory].passes[0].stats)["slots"] == 4  # three inputs, one output


def test_run_stages_until() -> None:
    manager = PassManager(parse_pipeline("accy-default"))
    out = list(manager.run_stages(start(), Stage.dispatch))
    assert [p.stage for p, _ in out] == [Stage.contract, Stage.tensor, Stage.dispatch]
    product = out[-1][0]
    assert product.fusion is not None and product.buffers is None
    assert out[-1][1].fingerprint == product.fingerprint()


# verify_each ------------------------------------------------------------------------------


def test_verify_each_catches_mistyped_node() -> None:
    with pytest.raises(PassFailure, match=r"mistyped-node") as info:
        PassManager(Pipeline((MistypedNode(),))).run(start())
    assert "add" in str(info.value) and "f32[5]" in str(info.value)


def test_verify_each_catches_plan_not_covering_ops() -> None:
    pipe = Pipeline((EmptyFusion(),))
    with pytest.raises(PassFailure, match=r"empty-fusion.*does not cover"):
        PassManager(pipe).run(start())


def test_without_verify_each_the_broken_product_passes() -> None:
    final, _ = PassManager(Pipeline((EmptyFusion(),)), verify_each=False).run(
        start(), Stage.dispatch)
    assert final.fusion == FusionPlan("single-output", ())


def test_exception_in_pass_is_wrapped_with_spec() -> None:
    with pytest.raises(PassFailure) as info:
        PassManager(Pipeline((Boom(code=3),))).run(start())
    message = str(info.value)
    assert "boom{code=3}" in message
    assert "RuntimeError" in message and "exploded with code 3" in message
    assert isinstance(info.value.__cause__, RuntimeError)


def test_real_pass_failure_names_pass() -> None:
    # (a bad option value is refused when the text is read: tests/reliability/test_option_ranges)
    with pytest.raises(PassFailure, match=r"layout-planning\{alignment=16\}.*bufferization"):
        accy.prepare(add_mul, "accy-contract,accy-dispatch,layout-planning{alignment=16}")


# instruments ------------------------------------------------------------------------------


def test_instrument_hooks_around_each_pass() -> None:
    rec = Recorder()
    pipe = Pipeline((AskUses(), Identity()))
    PassManager(pipe, instruments=[rec]).run(start(), Stage.dispatch)
    assert rec.events == [
        ("before", "ask-uses", Stage.dispatch), ("after", "ask-uses", Stage.dispatch),
        ("before", "identity", Stage.dispatch), ("after", "identity", Stage.dispatch),
    ]


def test_instrument_failure_hook() -> None:
    rec = Recorder()
    with pytest.raises(PassFailure):
        PassManager(Pipeline((Boom(),)), instruments=[rec]).run(start())
    assert rec.events == [("before", "boom", Stage.contract),
                          ("failure", "boom", "RuntimeError")]
    rec = Recorder()
    with pytest.raises(PassFailure):
        PassManager(Pipeline((EmptyFusion(),)), instruments=[rec]).run(start())
    assert rec.events[-1] == ("failure", "empty-fusion", "VerifyError")


def test_instruments_through_prepare() -> None:
    rec = Recorder()
    accy.prepare(add_mul, instruments=[rec])
    befores = [e[1] for e in rec.events if e[0] == "before"]
    afters = [e[1] for e in rec.events if e[0] == "after"]
    assert befores == afters == [p.name for p in parse_pipeline("accy-default").passes]


# ordering ---------------------------------------------------------------------------------


def test_passes_out_of_stage_order_are_rejected() -> None:
    pipe = parse_pipeline("fusion-planning,constant-fold")
    with pytest.raises(PassFailure, match=r"constant-fold.*after.*fusion-planning"):
        PassManager(pipe).run(start())
    with pytest.raises(PassFailure):
        accy.prepare(add_mul, "accy-memory,accy-dispatch")


def test_pass_for_an_earlier_stage_than_the_product_is_rejected() -> None:
    product = start().replace(stage=Stage.dispatch)
    with pytest.raises(PassFailure, match=r"constant-fold.*stage contract.*dispatch"):
        PassManager(parse_pipeline("constant-fold")).run(product)


# analysis cache ---------------------------------------------------------------------------


def _pass_counts(records) -> list[tuple[str, int, int]]:
    return [(p.spec, p.analysis_hits, p.analysis_misses) for r in records for p in r.passes]


def test_analysis_cache_hits_and_misses() -> None:
    manager = PassManager(Pipeline((AskUses(tag=1), AskUses(tag=2))))
    _, records = manager.run(start(), Stage.dispatch)
    assert _pass_counts(records) == [("ask-uses{tag=1}", 0, 1), ("ask-uses{tag=2}", 1, 0)]
    assert (manager.cache.hits, manager.cache.misses) == (1, 1)
    dispatch = records[-1]
    assert (dispatch.analysis_hits, dispatch.analysis_misses) == (1, 1)


def test_preserved_analysis_carried_over() -> None:
    pipe = Pipeline((AskUses(tag=1), RetargetPreserving(), AskUses(tag=2)))
    _, records = PassManager(pipe).run(start(), Stage.dispatch)
    assert _pass_counts(records) == [
        ("ask-uses{tag=1}", 0, 1), ("retarget-preserving", 0, 0), ("ask-uses{tag=2}", 1, 0)]


def test_non_preserved_analysis_dropped() -> None:
    manager = PassManager(Pipeline((AskUses(tag=1), Retarget(), AskUses(tag=2))))
    final, records = manager.run(start(), Stage.dispatch)
    assert _pass_counts(records) == [
        ("ask-uses{tag=1}", 0, 1), ("retarget", 0, 0), ("ask-uses{tag=2}", 0, 1)]
    # nothing is kept under the old fingerprint either
    old = start().fingerprint()
    assert all(fp != old for _, fp in manager.cache.entries)
    assert ("uses", final.fingerprint()) in manager.cache.entries


def test_real_passes_preserve_uses() -> None:
    pipe = Pipeline((*parse_pipeline("fusion-planning,schedule-planning").passes, AskUses()))
    _, records = PassManager(pipe).run(start(), Stage.dispatch)
    counts = _pass_counts(records)
    assert counts[0] == ("fusion-planning", 0, 1)
    assert counts[-1] == ("ask-uses", 1, 0)


def test_unchanged_product_keeps_analyses() -> None:
    pipe = Pipeline((AskUses(tag=1), Identity(), AskUses(tag=2)))
    _, records = PassManager(pipe).run(start(), Stage.dispatch)
    assert _pass_counts(records)[-1] == ("ask-uses{tag=2}", 1, 0)


def test_unknown_analysis_is_a_pass_failure() -> None:
    @dataclass(frozen=True)
    class AskNothing(Pass):
        name = "ask-nothing"
        stage = Stage.dispatch

        def run(self, ctx, product):
            return ctx.analysis("no-such-analysis", product)

    with pytest.raises(PassFailure, match=r"ask-nothing.*no-such-analysis"):
        PassManager(Pipeline((AskNothing(),))).run(start())
