"""row-fused: chains of reductions over the same rows (layer norm, RMS norm, softmax with a
scale and a mask, log-softmax + NLL) as one kernel, on PoCL; row-fusion=false as before."""

from __future__ import annotations

import numpy as np
import pytest

import accy
from accy.builder import einsum, trace
from accy.differential import check_end_to_end
from accy.ir.ops import Op
from accy.ir.types import DType
from accy.kernels import rowfused, rowfused_cpu
from accy.passes.spec import parse_pipeline
from accy.target import TargetProfile

f32 = accy.f32
GPU = TargetProfile(max_work_group_size=1024, compute_units=132)
CPU = TargetProfile(device_type="cpu", max_work_group_size=4096, compute_units=2)
OFF = parse_pipeline("accy-default").replacing("fusion-planning{row-fusion=false}").text()


def layernorm(rows: int, n: int, dt=f32) -> accy.Program:
    def f(x, gamma, beta):
        mu = x.mean(axes=-1, keepdims=True)
        xc = x - mu
        var = (xc ** 2.0).mean(axes=-1, keepdims=True)
        return xc / (var + 1e-5).sqrt() * gamma + beta

    return trace(f, dt[rows, n], dt[n], dt[n], name="layernorm")


def rmsnorm(rows: int, n: int) -> accy.Program:
    def f(x, gamma):
        return x * ((x * x).mean(axes=-1, keepdims=True) + 1e-6).rsqrt() * gamma

    return trace(f, f32[rows, n], f32[n], name="rmsnorm")


def masked_softmax(rows: int, n: int) -> accy.Program:
    def f(x, mask):
        y = x * 0.125 + mask
        e = (y - y.max(axes=-1, keepdims=True)).exp()
        return e / e.sum(axes=-1, keepdims=True) * 2.0

    return trace(f, f32[rows, n], f32[n], name="masked_softmax")


def logsoftmax_nll(rows: int, n: int) -> accy.Program:
    def f(x, labels):
        iota = labels.fb.constant(np.arange(n, dtype=np.int32))
        onehot = labels.fb.op(Op.EQ, labels.reshape(rows, 1), iota).astype(DType.f32)
        y = x - x.max(axes=-1, keepdims=True)
        logp = y - y.exp().sum(axes=-1, keepdims=True).log()
        return -(logp * onehot).sum(axes=-1)

    return trace(f, f32[rows, n], accy.i32[rows], name="logsoftmax_nll")


PROGRAMS = {"layernorm": layernorm, "rmsnorm": rmsnorm, "masked_softmax": masked_softmax,
            "logsoftmax_nll": logsoftmax_nll}


def inputs(name: str, rows: int, n: int, rng: np.random.Generator) -> list[np.ndarray]:
    x = (3.0 * rng.standard_normal((rows, n)) + 1.0).astype(np.float32)
    if name == "layernorm":
        return [x, rng.standard_normal(n).astype(np.float32),
                rng.standard_normal(n).astype(np.float32)]
    if name == "rmsnorm":
        return [x, rng.standard_normal(n).astype(np.float32)]
    if name == "masked_softmax":
        mask = np.where(rng.random(n) < 0.2, -1e9, 0.0).astype(np.float32)
        return [x, mask]
    return [x, rng.integers(0, n, rows).astype(np.int32)]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("target", [GPU, CPU, None, "device"],
                         ids=["gpu", "cpu", "generic", "pocl"])
def test_one_kernel_and_option_off(device, name, target) -> None:
    if target == "device":
        target = TargetProfile.from_device(device.info)
    prog = PROGRAMS[name](64, 1000)
    job = accy.prepare(prog, "accy-default", target=target)
    before = accy.prepare(prog, OFF, target=target)
    assert "row-fused" not in before.generators()
    if name == "masked_softmax":  # accy-tensor makes it a softmax op: row-softmax's already
        assert job.generators() == before.generators() == {"row-softmax": 1}
        return
    assert job.kernel_count == 1 and job.generators() == {"row-fused": 1}, job.generators()
    assert before.kernel_count == {"layernorm": 4, "rmsnorm": 2, "logsoftmax_nll": 2}[name]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("rows, n", [
    (5, 1), (3, 7), (64, 1000),  # short rows share work-groups; odd lengths
    (4, 4096), (65, 9001),  # held in registers on the GPU profile; odd row count
    (64, 40000),  # read again per level everywhere
])
@pytest.mark.parametrize("target", [None, GPU, "device"], ids=["generic", "gpu", "pocl"])
def test_matches_the_interpreter(check, device, rng, name, rows, n, target) -> None:
    if target == "device":  # the CPU forms (vectors; scalar rows where an op has no vector form)
        target = TargetProfile.from_device(device.info)
    job = check(PROGRAMS[name](rows, n), inputs(name, rows, n, rng), target=target,
                rtol=2e-5, atol=2e-5)
    assert job.kernel_count == 1


def test_forms(rng) -> None:
    def plan(rows: int, n: int, target: TargetProfile) -> rowfused.RowPlan:
        job = accy.prepare(layernorm(rows, n), "accy-default", target=target)
        found = rowfused.analyse(job.product.fusion.groups[0], job.target)
        assert found is not None and len(found.rows.levels) == 2
        return found

    assert plan(64, 16384, GPU).held == 32  # 512 work-items hold a row
    assert plan(64, 40000, GPU).held == 0
    assert plan(1000, 32, GPU).split.width == 8  # short rows: 8 per work-group of 256
    assert plan(8, 4096, CPU).cpu == CPU.native_vector_bytes // 4  # the CPU vector form
    job = accy.prepare(logsoftmax_nll(8, 4096), "accy-default", target=CPU)
    found = rowfused.analyse(job.product.fusion.groups[0], job.target)
    assert found is not None and found.cpu == CPU.native_vector_bytes // 4
    assert len(found.rows.levels) == 3  # max, sum of exp, the picked log-probability
    group = job.product.fusion.groups[0]
    vector = [rowfused_cpu.vector_stat(group, found.rows, st, found.cpu)
              for st in found.rows.stats]
    assert vector == [True, True, False]  # the one-hot (a comparison, a cast): scalar loop


def test_f16_rows(check, rng) -> None:
    """f16 rows, stored f16 and computed in f32 (the GPU profile has no f16 arithmetic), held
    in registers: one kernel, against the interpreter."""
    xs = [v.astype(np.float16) for v in inputs("layernorm", 4, 4096, rng)]
    job = check(layernorm(4, 4096, accy.f16), xs, target=GPU, rtol=2e-3, atol=2e-3)
    assert job.generators() == {"row-fused": 1}
    assert "vload_half(" in job.kernel_source(0)


def test_few_long_rows_stay_tree_reductions() -> None:
    """One work-group per row would leave a GPU idle: 8 rows of 40,000 keep their kernels."""
    job = accy.prepare(layernorm(8, 40000), "accy-default", target=GPU)
    assert "row-fused" not in job.generators() and job.kernel_count == 4
    assert accy.prepare(layernorm(8, 4096), "accy-default", target=GPU).kernel_count == 1


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_within_the_differential_error_bounds(device, rng, name) -> None:
    """accy's end-to-end check (error bounds of accy.error_bounds) on the device's profile."""
    result = check_end_to_end(PROGRAMS[name](100, 777), inputs(name, 100, 777, rng))
    assert result.status == "ok", result


def test_no_merge_around_a_kernel_in_between(check, rng) -> None:
    """A contraction reads the centred rows and feeds the last reduction: merging across it
    would make a cycle, so the groups on either side are merged only within themselves."""
    def f(x, w):
        xc = x - x.mean(axes=-1, keepdims=True)
        z = einsum("ij,jk->ik", xc, w)
        return xc / (z * z).sum(axes=-1, keepdims=True)

    prog = trace(f, f32[64, 48], f32[48, 48], name="between")
    job = check(prog, [rng.standard_normal((64, 48)).astype(np.float32),
                       rng.standard_normal((48, 48)).astype(np.float32)], rtol=1e-4, atol=1e-5)
    # mean and x - mean; the contraction; the sum of squares and the division
    assert [g.kind.value for g in job.product.fusion.groups] == [
        "reduction", "contraction", "reduction"]
    assert job.generators() == {"row-fused": 2, "tiled-contraction": 1}


def test_a_merged_group_writes_what_another_reads_through_a_shared_movement_op(check, rng
                                                                                ) -> None:
    """``exp(x)`` feeds a concat that two kernels recompute (the row group's softmaxes and a
    reduction's): the row group also computes ``-exp(x)``, so ``exp(x)`` joins it, and it must
    still write ``exp(x)`` for the other kernel (`accy fuzz`: no slot for it, a KeyError)."""
    def f(x):
        e = accy.exp(x)
        c = accy.concat([e, e], 2)
        return accy.softmax(accy.softmax(c, 2), 2), accy.sum(c, ()), -e

    prog = trace(f, f32[1, 3, 1], name="shared")
    job = check(prog, [rng.standard_normal((1, 3, 1)).astype(np.float32)])
    groups = job.product.fusion.groups
    (exp,) = {n for g in groups for n in g.nodes if n.op is Op.EXP}
    assert [g.kind.value for g in groups if exp in g.outputs] == ["reduction"]  # the row group
    assert [exp in g.inputs for g in groups].count(True) == 1
