"""Parallel kernel builds (seed row 15): the same executable as a serial build."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

pytest.importorskip("pyopencl")

import accy  # noqa: E402
from accy.backends.opencl import runtime as rt  # noqa: E402
from accy.errors import KernelBuildError  # noqa: E402

f32 = accy.f32


def fresh(device: rt.Runtime) -> rt.Runtime:
    """A runtime of its own context on the same device: nothing built there yet (and no disk
    cache, so builds are real)."""
    return rt.Runtime(device.device, cache_dir=False)


@accy.function
def many(a: f32[256], b: f32[256]):
    """Eight kernels with distinct sources (each t is read by two kernels; the last two
    results share one)."""
    t = a + b
    outs = []
    for _ in range(4):
        outs.append(t - 1.0)
        t = t * t
    return (*outs, t)


def traced_builds(runtime: rt.Runtime) -> list[str]:
    """Record the thread of every build call on ``runtime``."""
    threads: list[str] = []
    original = runtime.build

    def build(source, options=()):
        threads.append(threading.current_thread().name)
        return original(source, options)

    runtime.build = build  # type: ignore[method-assign]
    return threads


def test_parallel_build_gives_the_serial_executable(device) -> None:
    job = accy.prepare(many)
    assert job.kernel_count == 8
    sources = [job.kernel_source(i) for i in range(job.kernel_count)]
    assert len(set(sources)) == 8

    serial_rt, parallel_rt = fresh(device), fresh(device)
    serial_threads = traced_builds(serial_rt)
    serial = job.executable(device=serial_rt, max_threads=1)
    parallel = job.executable(device=parallel_rt, max_threads=4)

    # the eight sources built as one joined program on each runtime (batching.py)
    assert serial_rt.build_count() == parallel_rt.build_count() == 1
    assert serial_rt.stats.compiled_sources == parallel_rt.stats.compiled_sources == 8
    assert all(name == threading.current_thread().name for name in serial_threads)
    # same kernels in schedule order, same sources, same entry points
    assert [k for k, _ in serial.steps] == [k for k, _ in parallel.steps] == list(job.kernels)
    assert ([c.function_name for _, c in serial.steps]
            == [c.function_name for _, c in parallel.steps]
            == [k.entry for k in job.kernels])
    assert [job.kernel_source(i) for i in range(job.kernel_count)] == sources
    # same outputs, bit for bit
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(256).astype(np.float32) * 0.5 for _ in range(2))
    for x, y in zip(serial(a, b), parallel(a, b), strict=True):
        np.testing.assert_array_equal(x, y)


def test_unbatched_builds_run_in_threads(device) -> None:
    runtime = fresh(device)
    threads = traced_builds(runtime)
    job = accy.prepare(many)
    sources = [job.kernel_source(i) for i in range(job.kernel_count)]
    runtime.build_many(sources, max_threads=4, batch=False)
    assert runtime.build_count() == 8  # one program per source
    assert sum(name.startswith("accy-build") for name in threads) == 8


@pytest.mark.parametrize("batch", [True, False])
def test_build_many_keeps_order_and_builds_duplicates_once(device, batch: bool) -> None:
    runtime = fresh(device)
    job = accy.prepare(many)
    sources = [job.kernel_source(i) for i in (3, 1, 3, 0, 1)]
    programs = runtime.build_many(sources, max_threads=3, batch=batch)
    builds = 1 if batch else 3  # three distinct sources, joined or not
    assert runtime.build_count() == builds
    assert programs[0] is programs[2] and programs[1] is programs[4]
    assert [p is runtime.build(s) for p, s in zip(programs, sources, strict=True)] == [True] * 5
    assert runtime.build_count() == builds  # all cached now


def test_concurrent_builds_of_one_source_build_it_once(device) -> None:
    runtime = fresh(device)
    source = accy.prepare(many).kernel_source(0)
    results: list[object] = []
    barrier = threading.Barrier(6)

    def build() -> None:
        barrier.wait()
        results.append(runtime.build(source))

    threads = [threading.Thread(target=build) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert runtime.build_count() == 1
    assert len(results) == 6 and all(p is results[0] for p in results)


def test_build_many_raises_the_first_failure_in_order(device) -> None:
    runtime = fresh(device)
    good = accy.prepare(many).kernel_source(0)
    broken = [f"__kernel void bad{i}(__global float *x) {{ x[0] = nope{i}; }}\n"
              for i in range(2)]
    with pytest.raises(KernelBuildError, match="nope0"):
        runtime.build_many([good, broken[0], broken[1]], max_threads=3)
    assert runtime.build(good) is not None  # a failure leaves the good build usable
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="max_threads"):
            runtime.build_many([good], max_threads=bad)


def test_prepare_with_build_leaves_nothing_to_build(device) -> None:
    selector = os.environ.get("ACCY_DEVICE", "pocl")  # the device the fixture selected
    job = accy.prepare(many, device=selector, build=True, max_threads=4)
    runtime = rt.select_device(selector)
    before = runtime.build_count()
    exe = job.executable(device=selector, max_threads=4)
    assert runtime.build_count() == before
    assert len(exe.steps) == job.kernel_count
    assert job.build(selector, max_threads=2) is runtime
    assert runtime.build_count() == before
