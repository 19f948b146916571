"""fusion-planning: movement ops shared by several kernels are recomputed by each, not copied."""

from __future__ import annotations

import numpy as np
import pytest

import accy
from accy.builder import einsum, gather, scatter_add, trace
from accy.ir.interpret import interpret
from accy.ir.ops import Op, OpKind

f32, i32 = accy.f32, accy.i32
POLICIES = ("single-output", "multi-output")


def prepare(program: accy.Program, policy: str = "single-output") -> accy.PreparedJob:
    return accy.prepare(program, "accy-contract,accy-tensor,"
                                 f"fusion-planning{{policy={policy}}},schedule-planning,"
                                 "accy-memory,accy-kernel,accy-target")


def groups(job: accy.PreparedJob) -> list:
    p = job.product
    return [p.fusion.groups[item.group] for item in p.schedule.items]


def is_copy(group) -> bool:
    return all(n.op.kind is OpKind.MOVEMENT for n in group.nodes)


def recomputed(job: accy.PreparedJob) -> int:
    return dict(job.record("dispatch").passes[0].stats)["recomputed movement"]


def check_runs(program: accy.Program, job: accy.PreparedJob, device, *inputs) -> None:
    got = job.run(*inputs, device=device)
    for g, w in zip(got, interpret(program, list(inputs)), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def shared_table(table, ids, dy):
    return gather(table, ids, axis=0) * 2.0, scatter_add(table, ids, dy, axis=0)


def shared_reshape(x):
    r = x.reshape(4, 6)
    return r.exp(), r.sum(axes=(1,))


def shared_chain(x):
    r = x.reshape(4, 6).T
    return r.exp(), r.sum(axes=(1,)), r.max(axes=(0,))


TABLE = trace(shared_table, f32[32, 16], i32[24], f32[24, 16])
RESHAPE = trace(shared_reshape, f32[24])
CHAIN = trace(shared_chain, f32[24])


@pytest.mark.parametrize("policy", POLICIES)
def test_table_read_by_gather_and_scatter_add_is_not_copied(policy, device) -> None:
    job = prepare(TABLE, policy)
    (reshape,) = {n for n in job.program.nodes() if n.op is Op.RESHAPE
                  and n.srcs[0] is job.program.functions[0].params[0]}
    # was three work items: the reshaped table copied, then the gather and the scatter-add
    assert len(groups(job)) == 2 and not any(is_copy(g) for g in groups(job))
    assert all(reshape in g.nodes for g in groups(job)) and recomputed(job) == 1
    assert set(job.generators()) == {"indexed-gather", "indexed-scatter"}
    with pytest.raises(KeyError):  # recomputed by both kernels, written by neither
        job.product.buffers.slot_of(0, reshape)
    ids = np.random.default_rng(1).integers(0, 32, 24).astype(np.int32)
    check_runs(TABLE, job, device, rand(32, 16), ids, rand(24, 16, seed=2))


@pytest.mark.parametrize("policy", POLICIES)
def test_reshape_read_by_elementwise_and_reduction_kernels_is_recomputed(policy, device) -> None:
    job = prepare(RESHAPE, policy)
    # was three: the reshape copied, then exp and the row sums
    assert [g.kind.value for g in groups(job)] == ["flat", "reduction"]
    assert not any(is_copy(g) for g in groups(job)) and recomputed(job) == 1
    assert all(g.inputs == job.program.functions[0].params for g in groups(job))
    check_runs(RESHAPE, job, device, rand(24))


def test_movement_chains_are_recomputed_whole(device) -> None:
    job = prepare(CHAIN)
    assert len(groups(job)) == 3 and not any(is_copy(g) for g in groups(job))
    assert recomputed(job) == 2  # the reshape and the transpose, in each of three kernels
    assert all([n.op for n in g.nodes][:2] == [Op.RESHAPE, Op.TRANSPOSE] for g in groups(job))
    check_runs(CHAIN, job, device, rand(24))


def test_movement_results_are_written_by_their_own_kernel(device) -> None:
    def returned(x):
        r = x.reshape(4, 6)
        return r, r.exp(), r.sum(axes=(1,))

    program = trace(returned, f32[24])
    job = prepare(program)
    first = groups(job)[0]
    assert is_copy(first) and first.boundary == "consumed by several kernels"
    assert all(g.inputs == first.outputs for g in groups(job)[1:]) and recomputed(job) == 0
    check_runs(program, job, device, rand(24))


def test_movement_over_computed_values_is_not_recomputed() -> None:
    def scaled(x):
        r = (x * 3.0).reshape(4, 6)
        return r.exp(), r.sum(axes=(1,))

    job = prepare(trace(scaled, f32[24]))
    first = groups(job)[0]  # the multiply stays computed once, with the reshape
    assert [n.op for n in first.nodes] == [Op.MUL, Op.RESHAPE] and recomputed(job) == 0
    assert len(groups(job)) == 3


def test_operands_shared_by_contractions_stay_in_memory(device) -> None:
    """A transpose shared by two einsums is folded into their specs; a movement chain that
    does not fold is copied once, and both tiled contractions read the copy."""

    def transposed(w, x, y):
        return x @ w.T, y @ w.T

    def regrouped(w, x, y):
        wt = w.reshape(4, 2, 6).transpose(1, 0, 2).reshape(8, 6)
        return einsum("ij,kj->ik", x, wt), einsum("ij,kj->ik", y, wt)

    types = (f32[8, 6], f32[5, 6], f32[3, 6])
    inputs = (rand(8, 6), rand(5, 6, seed=1), rand(3, 6, seed=2))
    folded = trace(transposed, *types)
    job = prepare(folded)
    assert len(groups(job)) == 2 and not any(is_copy(g) for g in groups(job))
    check_runs(folded, job, device, *inputs)
    program = trace(regrouped, *types)
    job = prepare(program)
    copy, *contractions = groups(job)
    assert is_copy(copy) and recomputed(job) == 0
    assert all(copy.outputs[0] in g.inputs for g in contractions)
    assert "tiled-contraction" in job.generators()
    check_runs(program, job, device, *inputs)


@pytest.mark.parametrize("policy", POLICIES)
def test_einsums_read_through_slices_keep_their_own_contraction_kernel(policy, device) -> None:
    """An einsum whose consumers slice it would be computed by the loop nest inside their
    kernel (nasrnn's gate projections: 5x slower on the H200); it stays in its own group for
    the tiled contraction, while elementwise epilogues at its shape still fuse into it."""

    def gates(x, w, b):
        g = einsum("bk,gkh->gbh", x, w)
        return (g[0:1].reshape(4, 8).tanh() * g[1:2].reshape(4, 8).exp(),
                (einsum("bk,gkh->gbh", x, w * 2.0) + b).relu())

    program = trace(gates, f32[4, 16], f32[2, 16, 8], f32[2, 4, 8])
    job = prepare(program, policy)
    contractions = [g for g in groups(job) if any(n.op is Op.EINSUM for n in g.nodes)]
    assert len(contractions) == 2
    sliced, fused = sorted(contractions, key=lambda g: len(g.nodes))
    assert [n.op for n in sliced.nodes] == [Op.EINSUM]
    assert sliced.boundary == "einsum read by a consumer the tiled contraction cannot fuse"
    assert {Op.ADD, Op.RELU} <= {n.op for n in fused.nodes}
    assert job.generators()["tiled-contraction"] == 2
    check_runs(program, job, device, rand(4, 16), rand(2, 16, 8, seed=1), rand(2, 4, 8, seed=2))
