"""tree-reduction: sums, maxima and means over any axes, with prologue and epilogue, on PoCL."""

from __future__ import annotations

import numpy as np
import pytest

import accy
from accy.builder import trace
from accy.ir.types import DType
from accy.kernels import reduction, workgroup
from accy.kernels.ir import Barrier, For, LocalArray, walk_stmts
from accy.target import TargetProfile

f32 = accy.f32
# a device wide enough that reductions of few outputs are split over work-groups (two kernels)
WIDE = TargetProfile(compute_units=64, max_work_group_size=256)


def reduce_program(op: str, shape: tuple[int, ...], axes, keepdims: bool = False,
                   dtype: DType = DType.f32) -> accy.Program:
    def fn(x):
        return getattr(x, op)(axes=axes, keepdims=keepdims)

    return trace(fn, accy.TensorType(shape, dtype), name="f")


def data(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("target", [None, WIDE], ids=["one-cu", "wide"])
@pytest.mark.parametrize("op", ["sum", "max", "mean"])
@pytest.mark.parametrize("shape, axes, keepdims", [
    ((4096,), None, False),
    ((1000, 7), None, False),  # odd sizes: scalar steps, partial work-groups
    ((37, 1001), 1, False),
    ((37, 1001), 1, True),
    ((300, 33), 0, False),  # reduced axis outermost: work-items step along the outputs
    ((5, 6, 7), (0, 2), True),
    ((5, 6, 7), (1,), False),
    ((1, 4096), (0, 1), False),
    ((64, 1, 12), (1, 2), True),  # size-1 axes
])
def test_axes_keepdims_and_sizes(check, rng, used, target, op, shape, axes, keepdims) -> None:
    job = check(reduce_program(op, shape, axes, keepdims), [data(rng, shape)],
                generator="tree-reduction", target=target, rtol=1e-4, atol=1e-5)
    assert used(job) == {"tree-reduction": 1}


@pytest.mark.parametrize("n", [1 << 20, (1 << 20) + 3])
@pytest.mark.parametrize("op", ["sum", "max", "mean"])
def test_full_reductions_split_into_partials_and_combine(check, rng, op, n) -> None:
    job = check(reduce_program(op, (n,), None), [data(rng, (n,))], generator="tree-reduction",
                target=WIDE, rtol=1e-4, atol=1e-4)
    assert [k.entry.rsplit("_", 1)[-1] for k in job.kernels] == ["partials", "combine"]
    partials, combine = job.kernels
    scratch = [a for a in partials.args if a.is_scratch]
    assert len(scratch) == 1 and scratch[0].is_output
    assert [a for a in combine.args if a.is_scratch][0].is_output is False
    vector = n % 4 == 0
    assert ("float4*)in0)[" in job.kernel_source(0)) == vector


def test_local_memory_tree_in_the_kernel() -> None:
    (k,) = accy.prepare(reduce_program("sum", (64, 4096), 1)).kernels
    body = list(walk_stmts(k.body))
    assert [s.size for s in body if isinstance(s, LocalArray)] == [256]
    assert sum(isinstance(s, Barrier) for s in body) == 2  # 256 -> 8 -> every work-item
    assert any(isinstance(s, For) and s.step == 256 for s in body)
    assert k.geometry.local_size == (256,) and k.geometry.global_size == (64 * 256,)


def test_split_geometry_fills_the_device() -> None:
    s = workgroup.split(1, 1 << 26, True, TargetProfile(compute_units=132,
                                                        max_work_group_size=1024))
    assert s.width == 1 and s.count == 256
    wanted = workgroup.GROUPS_PER_CU * 132
    assert 0.95 * wanted <= s.chunks <= wanted and s.chunk % s.count == 0
    assert s.chunks * s.chunk >= 1 << 26
    columns = workgroup.split(1000, 64, False, TargetProfile())
    assert columns.width == workgroup.OUTPUTS_PER_GROUP and columns.chunks == 1
    short = workgroup.split(1 << 16, 4, True, TargetProfile())
    assert short.count == 4 and short.width == 64  # many short rows share a work-group


def test_nan_propagates_in_max_and_sum(check, rng) -> None:
    x = data(rng, (16, 1000))
    x[3, 17] = np.nan
    x[9, :] = -np.inf
    for op in ("max", "sum"):
        check(reduce_program(op, (16, 1000), 1), [x], generator="tree-reduction", atol=1e-4)
    full = data(rng, (1 << 18,))
    full[12345] = np.nan
    check(reduce_program("max", full.shape, None), [full], generator="tree-reduction",
          target=WIDE)


def test_prologue_and_epilogue_fuse(check, rng, used) -> None:
    def fn(x, w, y):
        return (x * w).exp().sum(axes=1) * 2.0 + y

    prog = trace(fn, f32[64, 256], f32[256], f32[64], name="f")
    job = check(prog, [data(rng, (64, 256)), data(rng, (256,)), data(rng, (64,))],
                generator="tree-reduction", rtol=1e-4)
    assert job.kernel_count == 1 and used(job) == {"tree-reduction": 1}
    assert "float4*)in0)[" in job.kernel_source(0) and "exp(" in job.kernel_source(0)


@pytest.mark.parametrize("fn, shapes", [
    (lambda x, c: (x + c).sum(axes=1), ((64, 256), (64, 1))),  # inner broadcast: scalar steps
    (lambda x: x.T.sum(axes=1), ((64, 100),)),  # transposed prologue
    (lambda x: (x * x).mean(axes=(0, 2)) - 1.0, ((6, 50, 30),)),
])
def test_other_prologues(check, rng, fn, shapes) -> None:
    prog = trace(fn, *(f32[s] for s in shapes), name="f")
    check(prog, [data(rng, s) for s in shapes], generator="tree-reduction", rtol=1e-4)


@pytest.mark.parametrize("dtype", [DType.i32, DType.i64])
@pytest.mark.parametrize("op", ["sum", "max"])
def test_integers(check, rng, dtype, op) -> None:
    x = rng.integers(-1000, 1000, (50, 300)).astype(dtype.numpy)
    target = TargetProfile(dtypes=frozenset({DType.f32, DType.i32, DType.i64, DType.bool}))
    check(reduce_program(op, x.shape, 1, dtype=dtype), [x], generator="tree-reduction",
          target=target)
    check(reduce_program(op, x.shape, None, dtype=dtype), [x], generator="tree-reduction",
          target=WIDE)


def test_results_are_deterministic_across_calls_and_inputs(device, rng) -> None:
    n = 1 << 19
    job = accy.prepare(reduce_program("sum", (n,), None), target=WIDE)
    exe = job.executable(device=device)
    x, y = data(rng, (n,)), data(rng, (n,))
    first = exe(x)[0]
    exe(y)
    assert exe(x)[0].tobytes() == first.tobytes()
    other = accy.prepare(reduce_program("sum", (n,), None), target=WIDE).executable(
        device=device)
    assert other(x)[0].tobytes() == first.tobytes()


def test_disable_and_declines(used, pipe) -> None:
    prog = reduce_program("sum", (64, 64), 1)
    assert used(accy.prepare(prog, pipe("disable=tree-reduction"))) == {"loop-nest": 1}
    empty = trace(lambda x: x.sum(axes=1), f32[4, 0], name="f")
    assert used(accy.prepare(empty)) == {"loop-nest": 1}
    softmax = accy.prepare(trace(lambda x: x.softmax(), f32[4, 8], name="f"), until="dispatch")
    assert not reduction.accepts(softmax.product.fusion.groups[0], TargetProfile())
