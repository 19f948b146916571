"""row-softmax: softmax, log-softmax and cross-entropy rows, both forms, on PoCL."""

from __future__ import annotations

import numpy as np
import pytest

import accy
from accy.builder import cross_entropy, trace
from accy.ir.types import DType
from accy.kernels import rowwise
from accy.kernels.ir import Barrier, For, walk_stmts
from accy.passes.spec import parse_pipeline
from accy.target import TargetProfile

f32 = accy.f32
GPU = TargetProfile(max_work_group_size=1024, compute_units=132)


def row_program(op: str, shape: tuple[int, ...], axis: int = -1) -> accy.Program:
    return trace(lambda x: getattr(x, op)(axis=axis), f32[shape], name="f")


def data(rng: np.random.Generator, shape: tuple[int, ...], scale: float = 3.0) -> np.ndarray:
    return (scale * rng.standard_normal(shape)).astype(np.float32)


def shape_of(job: accy.PreparedJob) -> rowwise.Rows:
    group = job.product.fusion.groups[job.product.schedule.items[-1].group]
    found = rowwise.analyse(group, job.target)
    assert found is not None
    return found


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("shape, form", [
    ((8, 128), "held"),
    ((3, 5, 1001), "held"),  # odd rows: scalar reads, guarded slots
    ((7, 4096), "held"),
    ((3, 20000), "online"),
    ((2, 30001), "online"),  # odd and long
    ((33, 10), "held"),  # short rows share work-groups
    ((5, 1), "held"),
    ((4096,), "held"),
])
def test_shapes_and_forms(check, rng, op, shape, form) -> None:
    job = check(row_program(op, shape), [data(rng, shape)], generator="row-softmax")
    assert (shape_of(job).held > 0) == (form == "held")
    assert job.kernel_count == 1


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("n, target", [(1000, None), (20000, None), (20000, GPU)])
def test_infinities_and_nans_match_the_interpreter(check, rng, op, n, target) -> None:
    x = data(rng, (6, n))
    x[1, 5] = np.inf  # a +inf: the shift is 0
    x[2, :] = -np.inf  # all -inf: 0/0
    x[3, 7] = np.nan
    x[4] += 100.0  # exp would overflow unshifted
    x[5, 3] = -np.inf
    job = check(row_program(op, (6, n)), [x], generator="row-softmax", target=target)
    assert (shape_of(job).held > 0) == (n == 1000 or target is GPU)  # both forms


def test_local_reductions_of_both_forms(check, rng) -> None:
    x = data(rng, (4, 16384))
    prog = row_program("softmax", (4, 16384))
    job = check(prog, [x], generator="row-softmax", target=TargetProfile())
    body = list(walk_stmts(job.kernels[0].body))
    assert shape_of(job).held == 0  # 256 work-items at most: 64 values each is too many
    assert sum(isinstance(s, Barrier) for s in body) == 2  # one (max, sum) pair: 256 -> 8
    assert sum(isinstance(s, For) and s.step == 256 for s in body) == 2  # two passes
    job = check(prog, [x], generator="row-softmax", target=GPU)
    body = list(walk_stmts(job.kernels[0].body))
    assert shape_of(job).held == 32 and shape_of(job).lanes == 1  # 512 work-items hold it
    assert sum(isinstance(s, Barrier) for s in body) == 6  # max, then sum: 512 -> 16 -> 1
    assert not any(isinstance(s, For) and s.step == 512 for s in body)  # one read
    cpu = TargetProfile(device_type="cpu", max_work_group_size=4096)
    odd = row_program("softmax", (4, 16383))  # no vectors: the CPU's work-group form
    job = check(odd, [data(rng, (4, 16383))], generator="row-softmax", target=cpu)
    body = list(walk_stmts(job.kernels[0].body))
    assert shape_of(job).held == 16  # 1024 work-items hold 16 elements each
    assert sum(isinstance(s, Barrier) for s in body) == 6  # max, then sum: 1024 -> 32 -> 1
    assert not any(isinstance(s, For) and s.step == 1024 for s in body)  # one read
    job = check(prog, [x], generator="row-softmax", target=cpu)
    body = list(walk_stmts(job.kernels[0].body))
    assert shape_of(job).cpu and not any(isinstance(s, Barrier) for s in body)  # a row each


def test_prologue_and_epilogue_fuse(check, rng, used) -> None:
    def fn(x, b):
        return (x * 2.0 + b).softmax() * 3.0 - 1.0

    prog = trace(fn, f32[9, 256], f32[256], name="f")
    inputs = [data(rng, (9, 256)), data(rng, (256,))]
    cpu = TargetProfile(device_type="cpu", max_work_group_size=4096)
    job = check(prog, inputs, generator="row-softmax", target=cpu)
    assert used(job) == {"row-softmax": 1} and job.kernel_count == 1
    src = job.kernel_source(0)
    assert "float4*)in0)[" in src and "((__global float4*)out0)[" in src
    job = check(prog, inputs, generator="row-softmax", target=GPU)  # held: coalesced scalars
    assert used(job) == {"row-softmax": 1} and "vload" not in job.kernel_source(0)


def test_epilogue_inputs_and_scalar_reads(check, rng) -> None:
    def fn(x, y):
        return x.log_softmax() + y

    prog = trace(fn, f32[7, 333], f32[7, 333], name="f")
    check(prog, [data(rng, (7, 333)), data(rng, (7, 333))], generator="row-softmax")


def test_epilogue_of_three_more_inputs(check, rng) -> None:
    # the row mask was named in3 after the emitter's counter: the fourth argument's name
    def fn(x, s, t, mask):
        return s + accy.where(mask, t, x.softmax())

    prog = trace(fn, f32[5], f32[()], f32[()], accy.bool_[5], name="f")
    check(prog, [data(rng, (5,)), np.float32(1), np.float32(-2), rng.random(5) < 0.5],
          generator="row-softmax")


@pytest.mark.parametrize("shape", [(37, 5), (6, 3000), (2, 3, 30000)])
def test_cross_entropy_rows_then_mean(check, rng, used, pipe, shape) -> None:
    def fn(logits, labels):
        return cross_entropy(logits * 0.5, labels) + 1.0

    prog = trace(fn, f32[shape], accy.i32[shape[:-1]], name="f")
    labels = rng.integers(0, shape[-1], shape[:-1]).astype(np.int32)
    for target in (None, GPU):
        job = check(prog, [data(rng, shape), labels], generator="row-softmax",
                    pipeline=pipe(tensor=""), target=target)
        assert [k.entry.rsplit("_", 1)[-1] for k in job.kernels] == ["rows", "combine"]
        assert used(job) == {"row-softmax": 1}


def with_loss(options: str) -> str:
    """accy-default with ``loss-lowering{options}``."""
    return parse_pipeline("accy-default").replacing(f"loss-lowering{options}").text()


def test_lowered_cross_entropy_uses_row_softmax(check, rng, used) -> None:
    prog = trace(lambda x, y: cross_entropy(x, y), f32[37, 5], accy.i32[37], name="f")
    labels = rng.integers(0, 5, 37).astype(np.int32)
    job = check(prog, [data(rng, (37, 5)), labels],
                pipeline=with_loss("{kernel-library=disabled}"))
    assert used(job)["row-softmax"] == 1  # the log-softmax; the pick and mean are not ours


@pytest.mark.parametrize("shape, target", [
    ((37, 5), None), ((300, 70), GPU), ((5, 20000), GPU), ((40, 64), TargetProfile(
        device_type="cpu", native_vector_bytes=32))])
@pytest.mark.parametrize("blocks", [1, 3])
def test_cross_entropy_thread_blocks_walk_the_rows(check, rng, shape, target, blocks) -> None:
    """loss-lowering{row-sparse-cross-entropy-thread-blocks=N}: the row-loss kernel runs N
    work-groups in a grid-stride loop over the row sets (held, online and CPU forms), each trip
    ended by a barrier; the mean kernel is unchanged."""
    prog = trace(lambda x, y: cross_entropy(x * 0.5, y), f32[shape], accy.i32[shape[:-1]],
                 name="f")
    labels = rng.integers(0, shape[-1], shape[:-1]).astype(np.int32)
    options = f"{{row-sparse-cross-entropy-thread-blocks={blocks}}}"
    job = check(prog, [data(rng, shape), labels], generator="row-softmax",
                pipeline=with_loss(options), target=target)
    rows, _ = job.kernels
    local = rows.geometry.local_size[0]
    assert rows.geometry.global_size == (blocks * local,)
    (loop,) = [s for s in rows.body if isinstance(s, For)]
    assert loop.step == blocks
    if local > 1:
        assert isinstance(loop.body[-1], Barrier)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_loop_nest_rows_with_infinities_match_the_interpreter(check, used, pipe, rng, op
                                                             ) -> None:
    x = data(rng, (5, 6))
    x[1, 2] = np.inf  # the column's shift is 0: nan there, 0 (or -inf) elsewhere
    x[:, 3] = -np.inf  # all -inf: 0/0
    x[4, 4] = np.nan
    x[:, 5] += 100.0  # exp would overflow unshifted
    job = check(row_program(op, (5, 6), axis=0), [x])
    assert used(job) == {"loop-nest": 1}
    job = check(row_program(op, (5, 6)), [x], pipeline=pipe("disable=row-softmax"))
    assert used(job) == {"loop-nest": 1}


@pytest.mark.parametrize("inf_at", [(1, 2), (1, 0)])  # the label's logit finite, then +inf
def test_loop_nest_cross_entropy_with_infinity_matches_the_interpreter(check, used, pipe, rng,
                                                                      inf_at) -> None:
    prog = trace(lambda x, y: cross_entropy(x, y), f32[3, 4], accy.i32[3], name="f")
    x = data(rng, (3, 4))
    x[inf_at] = np.inf
    x[2, :] += 100.0
    labels = np.int32([1, 0, 3])
    job = check(prog, [x, labels], pipeline=pipe("disable=row-softmax", tensor=""))
    assert used(job) == {"loop-nest": 1}


def test_declines_other_axes_and_disable(used, pipe) -> None:
    assert used(accy.prepare(row_program("softmax", (8, 16), axis=0))) == {"loop-nest": 1}
    assert used(accy.prepare(row_program("softmax", (8, 16)),
                             pipe("disable=row-softmax"))) == {"loop-nest": 1}


def test_cpu_targets_take_wider_rows() -> None:
    cpu = TargetProfile(device_type="cpu", max_work_group_size=4096)
    prog = row_program("softmax", (4, 16384))
    assert accy.prepare(prog, target=cpu).kernels[0].geometry.local_size == (1,)  # vectors
    odd = row_program("softmax", (4, 16383))
    wide = accy.prepare(odd, target=cpu).kernels[0].geometry.local_size
    assert wide == (rowwise.CPU_ROW_THREADS,)
    assert accy.prepare(prog, target=TargetProfile()).kernels[0].geometry.local_size == (
        rowwise.ROW_THREADS,)


@pytest.mark.parametrize("n, threads, held", [
    (4096, 256, 16),
    (16384, 512, 32),
    (32768, 1024, 32),  # the most a 1024-item work-group holds
    (32769, 256, 0),  # online, at ROW_THREADS
])
def test_gpu_rows_take_work_items_to_be_held(n, threads, held) -> None:
    job = accy.prepare(row_program("softmax", (2, n)), target=GPU)
    assert job.kernels[0].geometry.local_size == (threads,)
    assert shape_of(job).held == held
    assert shape_of(job).lanes == 1 or not held  # held rows: coalesced scalar loads


def test_f64_rows(check, device, rng) -> None:
    target = TargetProfile.from_device(device.info)
    if DType.f64 not in target.dtypes:
        pytest.skip("device without f64")
    prog = trace(lambda x: x.softmax(), accy.f64[5, 999], name="f")
    check(prog, [rng.standard_normal((5, 999))], generator="row-softmax", target=target,
          rtol=1e-12, atol=1e-14)
