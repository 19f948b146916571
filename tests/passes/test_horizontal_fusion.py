"""Horizontal fusion (issue #15): independent elementwise results of one shape share a kernel,
bounded in buffer arguments and ops, without keeping any intermediate alive longer."""

from __future__ import annotations

import numpy as np
import pytest

import accy
from accy.ir.interpret import interpret
from accy.plans import SlotRole

f32 = accy.f32


def with_fusion(options: str) -> str:
    return ("accy-contract,accy-tensor,fusion-planning{" + options + "},schedule-planning,"
            "accy-memory,accy-kernel,accy-target")


@pytest.fixture(scope="module")
def many_outputs(experiment_script):
    """``outputs`` independent results over two 16-vectors: the program bench_prepare times."""
    bench = experiment_script("bench_prepare")
    return lambda outputs: bench.many_outputs(outputs, n=16)


def kernel_args(job: accy.PreparedJob) -> list[int]:
    return [len(k.args) for k in job.kernels]


def test_independent_results_share_kernels_within_the_argument_bound(device, many_outputs):
    program = many_outputs(100)
    apart = accy.prepare(program, with_fusion("horizontal=false"))
    joined = accy.prepare(program)
    bounded = accy.prepare(program, with_fusion("horizontal-max-args=10"))
    assert apart.kernel_count >= 100  # one per result (x + y, read by many, is one too)
    assert joined.kernel_count < 5 < bounded.kernel_count < 30
    assert max(kernel_args(joined)) <= 64 and max(kernel_args(bounded)) <= 10
    stats = dict(joined.record("dispatch").passes[0].stats)
    assert stats["horizontally joined groups"] == apart.kernel_count - joined.kernel_count
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(16).astype(np.float32) for _ in range(2))
    want = interpret(program, [a, b])
    for job in (joined, bounded):
        got = job.run(a, b, device=device)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)


def test_max_ops_bounds_a_joined_kernel(many_outputs) -> None:
    job = accy.prepare(many_outputs(40), with_fusion("max-ops=10"))
    assert all(len(g.nodes) <= 10 for g in job.product.fusion.groups)
    assert job.kernel_count < 41


@accy.function
def chain(a: f32[64], b: f32[64]):
    """t(k+1) = t(k) * t(k), each t(k) - 1 a result: joining the results would keep every
    t(k) alive to the end (and stop the squares from writing in place). Only the last two
    results, both last readers of t3, may share a kernel."""
    t = a + b
    outs = []
    for _ in range(4):
        outs.append(t - 1.0)
        t = t * t
    return (*outs, t)


def test_no_intermediate_lives_longer() -> None:
    on = accy.prepare(chain, until="memory")
    off = accy.prepare(chain, with_fusion("horizontal=false"), until="memory")
    assert len(on.product.fusion.groups) == len(off.product.fusion.groups) - 1
    (joined,) = [g for g in on.product.fusion.groups if len(g.outputs) > 1]
    assert [n.op.value for n in joined.outputs] == ["sub", "mul"]
    on_b, off_b = on.product.buffers, off.product.buffers
    assert (on_b.peak_bytes, on_b.in_place) == (off_b.peak_bytes, off_b.in_place)
    assert ([s.values for s in on_b.slots if s.role is SlotRole.intermediate]
            == [s.values for s in off_b.slots if s.role is SlotRole.intermediate])


@accy.function
def shapes(a: f32[8], b: f32[8], m: f32[4, 8]):
    return a + b, a * b, m * 2.0, m - 1.0, (m + a).sum(axes=-1)


def test_only_flat_results_of_one_shape_join(device) -> None:
    job = accy.prepare(shapes)
    groups = job.product.fusion.groups
    domains = sorted(g.domain for g in groups if len(g.outputs) > 1)
    assert domains == [(4, 8), (8,)]  # the reduction's kernel stays its own
    got = job.run(np.arange(8, dtype=np.float32), np.ones(8, np.float32),
                  np.ones((4, 8), np.float32), device=device)
    want = interpret(shapes, [np.arange(8, dtype=np.float32), np.ones(8, np.float32),
                              np.ones((4, 8), np.float32)])
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6)


@pytest.mark.parametrize("value", ["1", "1025"])
def test_the_argument_bound_is_checked(value: str, many_outputs) -> None:
    with pytest.raises(Exception, match="horizontal-max-args"):
        accy.prepare(many_outputs(4), with_fusion(f"horizontal-max-args={value}"))
