"""What saturation must show: it lowers the extracted cost of programs with known redundancy,
and what the rewritten program computes on OpenCL (PoCL) still matches numpy. (The seed's
constant-add program losing its add in the contract stage: tests/test_seed_behaviours.py,
row 8.)"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

import accy
from accy.egraph.cost import program_cost
from accy.ir.ops import Op
from accy.passes.spec import Pipeline, parse_pipeline
from accy.passes.tensor.saturate import Saturate


def default_with(saturate: Saturate) -> Pipeline:
    """accy-default with its saturate pass configured."""
    passes = parse_pipeline("accy-default").passes
    return Pipeline(tuple(saturate if p.name == "saturate" else p for p in passes))


@pytest.fixture(scope="module")
def showcase(experiment_script) -> dict[str, tuple[accy.Program, bool]]:
    """name -> (program, fast-math): the programs experiments/bench_saturation.py reports the
    must-show gains for."""
    return experiment_script("bench_saturation").SHOWCASE


@dataclass(frozen=True)
class Show:
    reference: Callable[..., np.ndarray]
    fired: str  # a rule that must have fired
    gone: Op | None = None  # an op the result no longer has


SHOWS = {
    "a*b + a*c": Show(lambda a, b, c: a * b + a * c, "factor-mul-add"),
    "(a@b)@c": Show(lambda a, b, c: (a @ b) @ c, "einsum-split"),
    "(x^T)^T": Show(lambda x: np.exp(x), "transpose-transpose", Op.TRANSPOSE),
    "log(softmax(x))": Show(lambda x: _log_softmax(x), "log-of-softmax", Op.LOG),
    "sum(broadcast(x))": Show(lambda x: 64 * x, "sum-of-broadcast", Op.BROADCAST),
}


def test_the_benchmark_reports_these_programs(showcase) -> None:
    assert sorted(showcase) == sorted(SHOWS)


def _log_softmax(x: np.ndarray) -> np.ndarray:
    z = x - x.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


@pytest.mark.parametrize("name", list(SHOWS))
def test_saturation_lowers_the_cost(name, showcase):
    """accy-contract then saturate: canonicalize (contract) or saturate (tensor) fires."""
    show, (program, fast_math) = SHOWS[name], showcase[name]
    job = accy.prepare(program, Pipeline((*parse_pipeline("accy-contract").passes,
                                          Saturate(fast_math=fast_math))), until="tensor")
    assert program_cost(job.program) < program_cost(program)
    fired: dict[str, int] = {}
    for record in job.records:
        for p in record.passes:
            fired.update(dict(p.stats).get("rules-fired", {}))
    assert fired.get(show.fired, 0) >= 1, fired
    if show.gone is not None:
        assert show.gone not in {n.op for n in job.program.nodes()}


@pytest.mark.parametrize("name", list(SHOWS))
def test_saturated_program_runs_like_numpy(name, showcase, device):
    show, (program, fast_math) = SHOWS[name], showcase[name]
    job = accy.prepare(program, default_with(Saturate(fast_math=fast_math)))
    rng = np.random.default_rng(0)
    args = [rng.uniform(-1, 1, p.type.shape).astype(np.float32)
            for p in program.function().params]
    (got,) = job.run(*args, device=device)
    want = show.reference(*(a.astype(np.float64) for a in args))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


def test_fast_math_rules_stay_off_by_default(showcase):
    factor, fast_math = showcase["a*b + a*c"]
    assert fast_math
    job = accy.prepare(factor, until="tensor")
    stats = dict(job.record("tensor").passes[0].stats)
    assert not stats["changed"]
    assert job.program == factor


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
