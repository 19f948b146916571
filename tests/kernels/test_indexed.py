"""indexed-gather and indexed-scatter on PoCL against numpy: every axis, f32/i32, repeated
and edge indices, prologues and epilogues, the bounds policy, the deterministic fallback."""

from __future__ import annotations

import numpy as np
import pytest

import accy
from accy.builder import gather, scatter_add, trace
from accy.errors import InterpretError
from accy.ir.types import DType
from accy.kernels.ir import For, idx, walk_stmts
from accy.passes.spec import parse_pipeline
from accy.plans import LaunchPlan
from accy.target import KernelStatus, TargetProfile

SHAPES = [((9,), 0), ((6, 5), 0), ((6, 5), 1), ((3, 4, 5), 0), ((3, 4, 5), 1), ((3, 4, 5), 2),
          ((2, 3, 2, 4), 2)]


def table(rng: np.random.Generator, shape, dtype: str) -> np.ndarray:
    if dtype == "f32":
        return rng.standard_normal(shape).astype(np.float32)
    return rng.integers(-1000, 1000, shape).astype(np.int32)


def edge_indices(rng: np.random.Generator, n: int, shape) -> np.ndarray:
    """Random indices with the first and last row and repeats among them."""
    i = rng.integers(0, n, shape).reshape(-1)
    i[:2] = [0, n - 1][: i.size]
    if i.size > 3:
        i[3] = i[2]
    return i.reshape(shape).astype(np.int32)


def numpy_scatter(x, i, u, axis):
    out = x.copy()
    np.add.at(out, (slice(None),) * axis + (i,), u)
    return out


@pytest.mark.parametrize("dtype", ["f32", "i32"])
@pytest.mark.parametrize("shape, axis", SHAPES)
@pytest.mark.parametrize("ishape", [(7,), (2, 3)])
def test_gather(check, rng, dtype, shape, axis, ishape) -> None:
    program = trace(lambda x, i: gather(x, i, axis=axis), getattr(accy, dtype)[shape],
                    accy.i32[ishape], name="g")
    x, i = table(rng, shape, dtype), edge_indices(rng, shape[axis], ishape)
    job = check(program, [x, i], generator="indexed-gather")
    assert job.kernel_count == 1
    np.testing.assert_array_equal(job.run(x, i)[0], np.take(x, i, axis=axis))


@pytest.mark.parametrize("dtype", ["f32", "i32"])
@pytest.mark.parametrize("shape, axis", SHAPES)
@pytest.mark.parametrize("ishape", [(5,), (2, 4)])
def test_scatter_add(check, rng, dtype, shape, axis, ishape) -> None:
    ushape = shape[:axis] + ishape + shape[axis + 1:]
    t = getattr(accy, dtype)
    program = trace(lambda x, i, u: scatter_add(x, i, u, axis=axis), t[shape],
                    accy.i32[ishape], t[ushape], name="s")
    # small integers (as f32 too): every order of adding them gives the same sums, so the
    # repeated runs `check` compares bit for bit agree even with atomics
    x = rng.integers(-100, 100, shape).astype(np.float32 if dtype == "f32" else np.int32)
    u = rng.integers(-100, 100, ushape).astype(x.dtype)
    i = edge_indices(rng, shape[axis], ishape)
    job = check(program, [x, i, u], generator="indexed-scatter")
    assert job.kernel_count == 2  # copy, then atomic adds: no epilogue kernel
    np.testing.assert_array_equal(job.run(x, i, u)[0], numpy_scatter(x, i, u, axis))
    add = job.kernel_source(1)
    assert ("atomic_cmpxchg" if dtype == "f32" else "atomic_add") in add
    loops = [s for s in walk_stmts(job.kernels[1].body) if isinstance(s, For)]
    assert all(s.stop == idx(1) for s in loops)  # O(updates): at most the f32 retry loop


def test_f32_scatter_of_random_values_matches_within_rounding(device, used, rng) -> None:
    """Many updates on few rows: the atomic sums' order varies, the sums stay close."""
    program = trace(lambda x, i, u: scatter_add(x, i, u), accy.f32[4, 16], accy.i32[3000],
                    accy.f32[3000, 16], name="s")
    x, u = rng.standard_normal((4, 16)), rng.standard_normal((3000, 16))
    x, u = x.astype(np.float32), u.astype(np.float32)
    i = rng.integers(0, 4, 3000).astype(np.int32)
    job = accy.prepare(program)
    assert used(job) == {"indexed-scatter": 1}
    (got,) = job.executable(device=device)(x, i, u)
    want = numpy_scatter(x.astype(np.float64), i, u.astype(np.float64), 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def test_prologue_and_epilogue(check, used, rng) -> None:
    """x * 2 gathered, plus one; a step w - 0.5 * scatter_add(w, ids, -grad)."""

    def fn(w, ids, grad):
        rows = gather(w * 2.0, ids, axis=0) + 1.0
        return rows, w - 0.5 * scatter_add(w, ids, -grad, axis=0)

    program = trace(fn, accy.f32[12, 8], accy.i32[10], accy.f32[10, 8], name="sgd")
    w = rng.integers(-8, 8, (12, 8)).astype(np.float32)
    ids = edge_indices(rng, 12, (10,))
    grad = rng.integers(-8, 8, (10, 8)).astype(np.float32)
    job = check(program, [w, ids, grad])
    assert used(job) == {"indexed-gather": 1, "indexed-scatter": 1}
    assert job.kernel_count == 4  # gather; copy, atomic adds, epilogue from scratch
    assert any(a.is_scratch for k in job.kernels for a in k.args)


@pytest.mark.parametrize("generators", ["", "disable=indexed-gather,indexed-scatter"])
def test_out_of_range_indices_are_clamped_by_every_kernel(device, pipe, generators) -> None:
    """The bounds policy: the interpreter raises, the kernels (indexed and loop nest alike)
    clamp each index into [0, n - 1]."""
    program = trace(lambda x, i, u: (gather(x, i, axis=1), scatter_add(x, i, u, axis=1)),
                    accy.i32[2, 5], accy.i32[4], accy.i32[2, 4], name="oob")
    x = np.arange(10, dtype=np.int32).reshape(2, 5)
    i = np.array([-3, 7, 4, 0], np.int32)
    u = np.array([[1, 10, 100, 1000], [2, 20, 200, 2000]], np.int32)
    with pytest.raises(InterpretError, match="out of range"):
        accy.interpret(program, [x, i, u])
    job = accy.prepare(program, pipe(generators))
    got_rows, got_sums = job.executable(device=device)(x, i, u)
    clamped = np.clip(i, 0, 4)
    np.testing.assert_array_equal(got_rows, np.take(x, clamped, axis=1))
    np.testing.assert_array_equal(got_sums, numpy_scatter(x, clamped, u, 1))


@pytest.mark.parametrize("pipeline, kernelization", [
    ("accy-tensor", "disable=indexed-scatter"),
    ("saturate,shape-layout-propagation,indexing-lowering{scatter=conflict-free}", ""),
])
def test_deterministic_scatter_is_the_loop_nest(check, used, pipe, rng, pipeline,
                                                kernelization) -> None:
    program = trace(lambda x, i, u: scatter_add(x, i, u), accy.f32[6, 3], accy.i32[40],
                    accy.f32[40, 3], name="s")
    x, u = rng.standard_normal((6, 3)), rng.standard_normal((40, 3))
    i = rng.integers(0, 6, 40).astype(np.int32)
    job = check(program, [x.astype(np.float32), i, u.astype(np.float32)],
                pipeline=pipe(kernelization, pipeline))
    assert used(job) == {"loop-nest": 1}


@pytest.mark.parametrize("dtype", ["i64", "f64"])
@pytest.mark.parametrize("atomics64", [False, True])
def test_64_bit_scatter_needs_64_bit_atomics(check, used, rng, device, dtype, atomics64
                                             ) -> None:
    """With 64-bit atomics the atomic kernel, else the conflict-free loop nest."""
    if atomics64 and "cl_khr_int64_base_atomics" not in device.info.extensions:
        pytest.skip("the device has no 64-bit atomics")
    t = getattr(accy, dtype)
    program = trace(lambda x, i, u: scatter_add(x, i, u), t[5, 2], accy.i32[9], t[9, 2],
                    name="s")
    x, u = (rng.integers(-9, 9, shape).astype(t.dtype.numpy) for shape in ((5, 2), (9, 2)))
    target = TargetProfile(dtypes=frozenset({DType.f32, DType.f64, DType.i32, DType.i64}),
                           atomics64=atomics64)
    job = check(program, [x, rng.integers(0, 5, 9).astype(np.int32), u], target=target)
    if atomics64:
        assert used(job) == {"indexed-scatter": 1}
        assert any("atom" in job.kernel_source(k) for k in range(job.kernel_count))
    else:
        assert used(job) == {"loop-nest": 1}


def test_64_bit_atomics_are_illegal_without_the_extension() -> None:
    program = trace(lambda x, i, u: scatter_add(x, i, u), accy.f64[5, 2], accy.i32[9],
                    accy.f64[9, 2], name="s")
    dtypes = frozenset({DType.f32, DType.f64, DType.i32})
    job = accy.prepare(program, until="kernel",
                       target=TargetProfile(dtypes=dtypes, atomics64=True))
    elsewhere = accy.prepare(job, target=TargetProfile(dtypes=dtypes))
    assert {k.status for k in elsewhere.product.legality.kernels} == {
        KernelStatus.legal, KernelStatus.unsupported_op}
    assert "64-bit atomics" in " ".join(k.detail for k in elsewhere.product.legality.kernels)


@pytest.mark.parametrize("gather_blocks, scatter_blocks", [(1, 1), (2, 3), (0, 5), (64, 0)])
def test_thread_blocks_launch_grid_stride_kernels(check, used, pipe, rng, gather_blocks,
                                                  scatter_blocks) -> None:
    """indexing-lowering{gather-thread-blocks=N scatter-thread-blocks=N}: N work-groups walk
    the elements (many per work-item when N x local < elements), same results."""

    def fn(w, ids, grad):
        rows = gather(w * 2.0, ids, axis=0) + 1.0
        return rows, scatter_add(w, ids, grad, axis=0)

    program = trace(fn, accy.f32[300, 8], accy.i32[200], accy.f32[200, 8], name="emb")
    w = rng.integers(-8, 8, (300, 8)).astype(np.float32)
    ids = edge_indices(rng, 300, (200,))
    grad = rng.integers(-8, 8, (200, 8)).astype(np.float32)
    options = f"gather-thread-blocks={gather_blocks} scatter-thread-blocks={scatter_blocks}"
    pipeline = parse_pipeline("accy-default").replacing(f"indexing-lowering{{{options}}}")
    job = check(program, [w, ids, grad], pipeline=pipeline.text())
    assert used(job) == {"indexed-gather": 1, "indexed-scatter": 1}
    assert job.product.launch == LaunchPlan(gather=gather_blocks, scatter_add=scatter_blocks)
    gather_kernel, init_kernel, add_kernel = job.kernels  # gather; scatter: copy, adds
    for kernel, blocks, elements in ((gather_kernel, gather_blocks, 1600),
                                     (add_kernel, scatter_blocks, 1600)):
        local = kernel.geometry.local_size[0]
        strided = [s for s in walk_stmts(kernel.body) if isinstance(s, For) and s.step > 1]
        if blocks:
            assert kernel.geometry.global_size == (blocks * local,)
            assert [s.step for s in strided] == [blocks * local]
        else:
            assert kernel.geometry.global_size[0] >= elements and not strided
    assert init_kernel.geometry.global_size[0] >= 2400  # the copy: one work-item per element


@pytest.mark.parametrize("units, device_type, elements, waves", [
    (2, "gpu", 5000, True), (2, "gpu", 4096, False), (1, "gpu", 50_000, False),
    (2, "cpu", 50_000, False)])
def test_auto_launch_is_one_wave_on_gpus_with_known_compute_units(check, rng, units, device_type,
                                                                  elements, waves) -> None:
    """thread blocks 0: on a GPU profile with compute units, a grid-stride wave of 8 work-groups
    per unit once there are more elements than it has work-items; else one per element. Every
    kernel of the scatter-add (copy, adds, epilogue) follows it."""

    def fn(w, ids, grad):
        return gather(w, ids, axis=0) + 1.0, w * 0.5 + scatter_add(w, ids, grad, axis=0)

    rows = elements // 10
    program = trace(fn, accy.f32[rows, 10], accy.i32[rows], accy.f32[rows, 10], name="emb")
    w = rng.integers(-8, 8, (rows, 10)).astype(np.float32)
    ids = edge_indices(rng, rows, (rows,))
    grad = rng.integers(-8, 8, (rows, 10)).astype(np.float32)
    target = TargetProfile(compute_units=units, device_type=device_type)
    job = check(program, [w, ids, grad], target=target)
    assert len(job.kernels) == 4  # gather; copy, adds, epilogue
    for kernel in job.kernels:
        strided = [s for s in walk_stmts(kernel.body) if isinstance(s, For) and s.step > 1]
        if waves:
            assert kernel.geometry.global_size == (8 * units * 256,) and len(strided) == 1
        else:  # one work-item per element (per row for the CPU gather)
            assert not strided
            assert kernel.geometry.global_size[0] >= elements or device_type == "cpu"


@pytest.mark.parametrize("shape, axis, ishape", [
    ((40, 8), 0, (7,)), ((3, 20, 16), 1, (2, 5)), ((30, 9), 0, (4, 3)), ((5, 6, 2, 4), 1, (3,))])
def test_cpu_gathers_copy_whole_rows(check, rng, shape, axis, ishape) -> None:
    """On a CPU profile a gather whose rows hold >= 8 elements takes one work-item per row and
    a loop over the row, prologue and epilogue included (the epilogue reads another input at
    the same flat offset). Shorter rows, and epilogues that broadcast, keep one work-item per
    element."""

    def fn(x, i, y, b):
        return (gather(x * 2.0, i, axis=axis) + y).exp(), gather(x, i, axis=axis) * b

    ushape = shape[:axis] + ishape + shape[axis + 1:]
    program = trace(fn, accy.f32[shape], accy.i32[ishape], accy.f32[ushape],
                    accy.f32[shape[-1]], name="g")
    x, y, b = table(rng, shape, "f32"), table(rng, ushape, "f32"), table(rng, shape[-1], "f32")
    job = check(program, [x, edge_indices(rng, shape[axis], ishape), y, b],
                generator="indexed-gather", target=TargetProfile(device_type="cpu"))
    rows_form, broadcast = job.kernels
    inner = int(np.prod(shape[axis + 1:]))
    loops = [s for s in walk_stmts(rows_form.body) if isinstance(s, For)]
    rows = int(np.prod(shape[:axis])) * int(np.prod(ishape))
    if inner >= 8:
        assert [s.stop for s in loops] == [idx(inner)]
        assert rows_form.geometry.global_size[0] >= rows > rows_form.geometry.global_size[0] // 2
    else:
        assert not loops
    assert not any(isinstance(s, For) for s in walk_stmts(broadcast.body))
