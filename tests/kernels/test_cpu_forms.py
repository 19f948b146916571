"""The CPU forms of tree-reduction and row-softmax: one work-item per work-group streaming
contiguous vectors into independent accumulators, on PoCL."""

from __future__ import annotations

import re

import numpy as np
import pytest

import accy
from accy.builder import cross_entropy, trace
from accy.ir.ops import Op
from accy.ir.types import DType
from accy.kernels import reduction, rowwise
from accy.kernels.ir import Barrier, LocalArray, walk_stmts
from accy.target import TargetProfile

f32 = accy.f32
# PoCL on a 2-core AVX-512 machine, as TargetProfile.from_device describes it
CPU = TargetProfile(device="avx512-like", device_type="cpu", compute_units=2,
                    native_vector_bytes=64, max_work_group_size=4096,
                    local_mem_bytes=1 << 20)
SSE = TargetProfile(device="sse-like", device_type="cpu", max_work_group_size=4096)


def reduce_program(op: str, shape: tuple[int, ...], axes, dtype: DType = DType.f32
                   ) -> accy.Program:
    return trace(lambda x: getattr(x, op)(axes=axes), accy.TensorType(shape, dtype), name="f")


def data(rng: np.random.Generator, shape: tuple[int, ...], scale: float = 1.0) -> np.ndarray:
    return (scale * rng.standard_normal(shape)).astype(np.float32)


def group_of(job: accy.PreparedJob, item: int = -1):
    return job.product.fusion.groups[job.product.schedule.items[item].group]


def first_body(job: accy.PreparedJob) -> list:
    return list(walk_stmts(job.kernels[0].body))


@pytest.mark.parametrize("op", ["sum", "max", "mean"])
@pytest.mark.parametrize("shape, axes, lanes, kernels", [
    ((1 << 20,), None, 16, 2),  # split into 8 ranges, then combined
    ((16 * 8195,), None, 16, 2),  # ranges of 1028 vectors, the last with a tail of 3
    ((16 * 1027,), None, 16, 1),  # too short to split: one range with a tail
    ((64, 4096), (1,), 16, 1),  # one output per work-group
    ((3, 5, 48), (1, 2), 16, 1),
    ((37, 24), 1, 8, 1),  # 8 lanes divide the rows, 16 do not
    ((37, 1002), 1, 2, 1),
    ((1000, 40), 1, 8, 1),  # short rows: 125 per work-item, 5 vectors each
    ((4099, 16), 1, 16, 1),  # one vector per row, the last work-item's rows cut short
])
def test_reductions_along_memory(check, rng, used, op, shape, axes, lanes, kernels) -> None:
    job = check(reduce_program(op, shape, axes), [data(rng, shape)],
                generator="tree-reduction", target=CPU, rtol=1e-4, atol=1e-5)
    assert used(job) == {"tree-reduction": 1} and job.kernel_count == kernels
    assert reduction.analyse(group_of(job), CPU).cpu == lanes
    first = job.kernels[0]
    assert first.geometry.local_size == (1,)
    assert not any(isinstance(s, Barrier | LocalArray) for s in first_body(job))
    view = f"((__global const float{lanes}*)in0)[" if lanes * 4 <= 16 else f"vload{lanes}("
    assert view in job.kernel_source(0)  # vectors of up to 16 bytes through a vector pointer
    if kernels == 2:
        groups = first.geometry.global_size[0]
        assert groups == reduction.CPU_GROUPS_PER_CU * CPU.compute_units


def test_short_rows_share_a_work_item(check, rng) -> None:
    job = check(reduce_program("sum", (4099, 16), 1), [data(rng, (4099, 16))], target=CPU,
                rtol=1e-4, atol=1e-5)
    assert job.kernels[0].geometry.global_size == (9,)  # 4099 // 8 = 512 rows each
    assert "min(" in job.kernel_source(0)  # the last work-item stops at the last row
    job = check(reduce_program("sum", (64, 4096), 1), [data(rng, (64, 4096))], target=CPU,
                rtol=1e-4, atol=1e-5)
    assert job.kernels[0].geometry.global_size == (16,)  # 256 vectors a row: 4 rows each
    job = check(reduce_program("sum", (16, 16384), 1), [data(rng, (16, 16384))], target=CPU,
                rtol=1e-4, atol=1e-5)
    assert job.kernels[0].geometry.global_size == (16,)  # CPU_MIN_UNITS vectors: one each


def test_nan_and_infinities(check, rng) -> None:
    x = data(rng, (1 << 18,))
    x[12345] = np.nan
    for op in ("sum", "max"):
        check(reduce_program(op, x.shape, None), [x], target=CPU, rtol=1e-4, atol=1e-4)
    rows = data(rng, (6, 4096))
    rows[1, 7] = np.inf
    rows[2, :] = -np.inf
    rows[3, 100] = np.nan
    rows[4, 5], rows[4, 6] = np.inf, -np.inf  # inf - inf
    for op in ("sum", "max", "mean"):
        job = check(reduce_program(op, rows.shape, 1), [rows], target=CPU, rtol=1e-4,
                    atol=1e-4)
        assert reduction.analyse(group_of(job), CPU).cpu == 16


@pytest.mark.parametrize("dtype", [DType.i32, DType.i64])
@pytest.mark.parametrize("op", ["sum", "max"])
def test_integers(check, rng, dtype, op) -> None:
    x = rng.integers(-1000, 1000, (3, 4096)).astype(dtype.numpy)
    job = check(reduce_program(op, x.shape, 1, dtype), [x], target=CPU)
    assert reduction.analyse(group_of(job), CPU).cpu == 64 // dtype.itemsize


def test_prologue_and_epilogue(check, rng, used) -> None:
    def fn(x, b, s):
        return ((accy.maximum(x * b, s) + 1.0).exp().sum(axes=(1,)) * 2.0).sqrt()

    shapes = [(16, 2048), (2048,), (1,)]
    prog = trace(fn, f32[shapes[0]], f32[shapes[1]], f32[shapes[2]], name="f")
    job = check(prog, [data(rng, s, 0.5) for s in shapes], target=CPU, rtol=1e-4)
    assert used(job) == {"tree-reduction": 1} and job.kernel_count == 1
    assert reduction.analyse(group_of(job), CPU).cpu == 16
    src = job.kernel_source(0)
    assert "float16 x" in src and "exp(" in src


@pytest.mark.parametrize("target", [CPU, None], ids=["cpu", "generic"])
def test_square_is_a_multiplication(check, rng, pipe, target) -> None:
    # pow(x, 2) is x * x in every kernel form (exact; PoCL's pow is a slow call): without
    # canonicalize and saturate, which rewrite it first, through reductions, rows, flat and
    # loop-nest kernels
    def fn(x, y):
        return ((x - y) ** 2.0).mean(axes=-1), (x ** 2.0).softmax(-1), x ** 2.0 + y, x.T ** 2.0

    prog = trace(fn, f32[64, 256], f32[64, 256], name="f")
    x, y = data(rng, (64, 256)), data(rng, (64, 256))
    job = check(prog, [x, y], pipeline=pipe(tensor="").replace("accy-contract,", ""),
                target=target)
    assert any(n.op is Op.POW for n in job.product.program.nodes())  # reaches the kernels
    assert not any(re.search(r"[^_]pow\(", job.kernel_source(k))  # kernel names say "_pow"
                   for k in range(job.kernel_count))
    exe = job.executable()
    np.testing.assert_array_equal(exe(x, y)[2], x * x + y)  # exactly numpy's square


def test_declines_to_the_work_group_tree(check, rng) -> None:
    cases = [
        (reduce_program("sum", (300, 48), 0), (300, 48)),  # reduced axis outermost
        (reduce_program("sum", (1001, 7), None), (1001, 7)),  # odd size: no vectors
        (trace(lambda x: (x > 0.0).astype(DType.f32).sum(), f32[4096], name="f"), (4096,)),
    ]
    for prog, shape in cases:
        job = check(prog, [data(rng, shape)], target=CPU, rtol=1e-4, atol=1e-5)
        assert reduction.analyse(group_of(job), CPU).cpu == 0
    job = accy.prepare(reduce_program("sum", (1 << 20,), None), target=TargetProfile())
    assert reduction.analyse(group_of(job), TargetProfile()).cpu == 0  # GPUs: the tree
    assert job.kernels[0].geometry.local_size == (256,)


def test_sse_width(check, rng) -> None:
    job = check(reduce_program("sum", (8, 4096), 1), [data(rng, (8, 4096))], target=SSE,
                rtol=1e-4, atol=1e-5)
    assert reduction.analyse(group_of(job), SSE).cpu == 4


def row_program(op: str, shape: tuple[int, ...]) -> accy.Program:
    return trace(lambda x: getattr(x, op)(axis=-1), f32[shape], name="f")


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("shape, lanes", [
    ((4, 16384), 16),
    ((6, 20000), 16),  # 1250 vectors: a tail of 2
    ((3, 5, 1000), 8),
    ((33, 10), 2),
])
def test_rows(check, rng, op, shape, lanes) -> None:
    x = data(rng, shape, 3.0)
    job = check(row_program(op, shape), [x], generator="row-softmax", target=CPU)
    rows = rowwise.analyse(group_of(job), CPU)
    assert rows.cpu and rows.lanes == lanes and job.kernel_count == 1
    assert job.kernels[0].geometry.local_size == (1,)
    assert not any(isinstance(s, Barrier | LocalArray) for s in first_body(job))


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_row_infinities_and_nans_match_the_interpreter(check, rng, op) -> None:
    x = data(rng, (6, 1000), 3.0)
    x[1, 5] = np.inf  # a +inf: the shift is 0
    x[2, :] = -np.inf  # all -inf: 0/0
    x[3, 7] = np.nan
    x[4] += 100.0  # exp would overflow unshifted
    x[5, 3] = -np.inf
    job = check(row_program(op, (6, 1000)), [x], generator="row-softmax", target=CPU)
    assert rowwise.analyse(group_of(job), CPU).cpu


def test_row_prologue_epilogue_and_cross_entropy(check, rng, used, pipe) -> None:
    def fn(x, b, y):
        return (x * 2.0 + b).softmax() * 3.0 - y

    prog = trace(fn, f32[9, 256], f32[256], f32[9, 256], name="f")
    job = check(prog, [data(rng, (9, 256)), data(rng, (256,)), data(rng, (9, 256))],
                generator="row-softmax", target=CPU)
    assert used(job) == {"row-softmax": 1} and job.kernel_count == 1
    assert rowwise.analyse(group_of(job), CPU).cpu

    def loss(logits, labels):
        return cross_entropy(logits * 0.5, labels) + 1.0

    ce = trace(loss, f32[37, 48], accy.i32[37], name="f")
    labels = rng.integers(0, 48, 37).astype(np.int32)
    job = check(ce, [data(rng, (37, 48)), labels], generator="row-softmax",
                pipeline=pipe(tensor=""), target=CPU)
    assert [k.entry.rsplit("_", 1)[-1] for k in job.kernels] == ["rows", "combine"]
    assert rowwise.analyse(group_of(job), CPU).cpu


def exps(job: accy.PreparedJob) -> int:
    """``exp`` calls in the first kernel's source."""
    return len(re.findall(r"\bexp\(", job.kernel_source(0)))


@pytest.mark.parametrize("shape", [(4, 16384), (6, 20000), (33, 10)])
def test_softmax_keeps_each_exp_in_its_output(check, rng, shape) -> None:
    """A plain f32 softmax computes each element's exp once: the sum's pass stores it in the
    output, which the last pass scales in place (log-softmax and epilogues recompute it)."""
    x = data(rng, shape, 3.0)
    x[0, 1] = np.inf if shape[1] > 10 else x[0, 1]
    job = check(row_program("softmax", shape), [x], generator="row-softmax", target=CPU)
    group = group_of(job)
    assert rowwise.kept_exp(group, job.product.outline.outlines[0], rowwise.analyse(group, CPU))
    kept = exps(job)
    job = check(row_program("log_softmax", shape), [x], generator="row-softmax", target=CPU)
    assert exps(job) == kept  # the sum's pass alone: log-softmax's outputs need no exp

    def scaled(v):
        return v.softmax() * 3.0

    job = check(trace(scaled, f32[shape], name="f"), [x], generator="row-softmax", target=CPU)
    assert exps(job) == kept + 1  # the epilogue's outputs from x again, an exp each


def test_rows_decline_to_work_groups(check, rng) -> None:
    job = check(row_program("softmax", (4, 1001)), [data(rng, (4, 1001))],
                generator="row-softmax", target=CPU)  # odd rows: no vectors
    rows = rowwise.analyse(group_of(job), CPU)
    assert not rows.cpu and rows.held
    job = accy.prepare(row_program("softmax", (4, 16384)), target=TargetProfile())
    assert not rowwise.analyse(group_of(job), TargetProfile()).cpu  # GPUs: work-groups
