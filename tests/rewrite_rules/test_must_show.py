"""What saturation must show: it lowers the extracted cost of programs with known redundancy,
and what the rewritten program computes on OpenCL (PoCL) still matches numpy."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

import accy
from accy.builder import Builder
from accy.egraph.cost import program_cost
from accy.ir.ops import Op
from accy.ir.types import DType
from accy.passes.spec import Pipeline, parse_pipeline
from accy.passes.tensor.saturate import Saturate


def default_with(saturate: Saturate) -> Pipeline:
    """accy-default with its saturate pass configured."""
    passes = parse_pipeline("accy-default").passes
    return Pipeline(tuple(saturate if p.name == "saturate" else p for p in passes))


@accy.function
def factor(a: accy.f32[4096], b: accy.f32[4096], c: accy.f32[4096]):
    return a * b + a * c


@accy.function
def matmul_chain(a: accy.f32[64, 8], b: accy.f32[8, 64], c: accy.f32[64, 8]):
    return (a @ b) @ c


@accy.function
def double_transpose(x: accy.f32[64, 32]):
    return x.T.T.exp()


@accy.function
def log_of_softmax(x: accy.f32[32, 100]):
    return x.softmax(-1).log()


@accy.function
def sum_of_broadcast(x: accy.f32[256]):
    return x.broadcast_to(64, 256).sum(axes=(0,))


@dataclass(frozen=True)
class Show:
    program: accy.Program
    saturate: Saturate
    reference: Callable[..., np.ndarray]
    fired: str  # a rule that must have fired
    gone: Op | None = None  # an op the result no longer has


SHOWS = {
    "a*b + a*c": Show(factor, Saturate(fast_math=True), lambda a, b, c: a * b + a * c,
                      "factor-mul-add"),
    "(a@b)@c": Show(matmul_chain, Saturate(fast_math=True), lambda a, b, c: (a @ b) @ c,
                    "einsum-split"),
    "(x^T)^T": Show(double_transpose, Saturate(), lambda x: np.exp(x), "transpose-transpose",
                    Op.TRANSPOSE),
    "log(softmax(x))": Show(log_of_softmax, Saturate(), lambda x: _log_softmax(x),
                            "log-of-softmax", Op.LOG),
    "sum(broadcast(x))": Show(sum_of_broadcast, Saturate(), lambda x: 64 * x,
                              "sum-of-broadcast", Op.BROADCAST),
}


def _log_softmax(x: np.ndarray) -> np.ndarray:
    z = x - x.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


@pytest.mark.parametrize("name", list(SHOWS))
def test_saturation_lowers_the_cost(name):
    """accy-contract then saturate: canonicalize (contract) or saturate (tensor) fires."""
    show = SHOWS[name]
    job = accy.prepare(show.program, Pipeline((*parse_pipeline("accy-contract").passes,
                                               show.saturate)), until="tensor")
    assert program_cost(job.program) < program_cost(show.program)
    fired: dict[str, int] = {}
    for record in job.records:
        for p in record.passes:
            fired.update(dict(p.stats).get("rules-fired", {}))
    assert fired.get(show.fired, 0) >= 1, fired
    if show.gone is not None:
        assert show.gone not in {n.op for n in job.program.nodes()}


@pytest.mark.parametrize("name", list(SHOWS))
def test_saturated_program_runs_like_numpy(name, device):
    show = SHOWS[name]
    job = accy.prepare(show.program, default_with(show.saturate))
    rng = np.random.default_rng(0)
    args = [rng.uniform(-1, 1, p.type.shape).astype(np.float32)
            for p in show.program.function().params]
    (got,) = job.run(*args, device=device)
    want = show.reference(*(a.astype(np.float64) for a in args))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


def test_fast_math_rules_stay_off_by_default():
    job = accy.prepare(factor, until="tensor")
    stats = dict(job.record("tensor").passes[0].stats)
    assert not stats["changed"]
    assert job.program == factor


def test_seed_constant_add_has_no_add_after_the_contract_stage():
    b = Builder()
    f = b.begin_function("consts", [b.tensor(DType.f32, (3,))], ["x"])
    c1 = f.constant(np.array([1, 2, 3], np.float32))
    c2 = f.constant(np.array([10, 20, 30], np.float32))
    f.return_(f.add(c1, c2), f.mul(f.param(0), f.add(c1, c2)))
    f.finish()
    job = accy.prepare(b.finish(), until="contract")
    assert Op.ADD not in {n.op for n in job.program.nodes()}


def test_splat_constants_fold_in_egglog():
    @accy.function
    def splats(x: accy.f32[8]):
        one = x.fb.constant(np.full(8, 1.0, np.float32))
        return x * (one + x.fb.constant(2.0)).exp()

    job = accy.prepare(splats, until="contract")
    stats = dict(job.record("contract").passes[0].stats)
    assert stats["folded-by-rules"] == 2 and stats["folded-by-evaluation"] == 0
    assert stats["rules: rules-fired"] == {"fold-add": 1, "fold-exp": 1}
    (mul,) = (n for n in job.program.nodes() if n.op is Op.MUL)
    assert np.allclose(next(s for s in mul.srcs if s.op is Op.CONSTANT).value,
                       np.exp(np.float32(3.0)))
