"""Executables own their device memory: one frame reused by calls in turn, constants written
once, ``job.run`` reusing its executable."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pyopencl")

import accy  # noqa: E402
from accy.backends.opencl import runtime as rt  # noqa: E402
from accy.ir.types import DType  # noqa: E402

WEIGHTS = np.linspace(-1, 1, 64, dtype=np.float32)


@pytest.fixture(scope="module")
def job() -> accy.PreparedJob:
    """A constant, an intermediate read by a reduction (two kernels)."""
    b = accy.Builder()
    f = b.begin_function("weighted", [b.tensor(DType.f32, (4, 64))])
    t = f.param(0) * f.constant(WEIGHTS) + 1.0
    f.return_((t * t).sum(1))
    f.finish()
    return accy.prepare(b.finish())


def _want(a: np.ndarray) -> np.ndarray:
    t = a * WEIGHTS + np.float32(1.0)
    return (t * t).sum(1)


@pytest.fixture
def allocations(device: rt.Runtime, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the buffers ``device.allocate`` hands out from now on."""
    sizes: list[int] = []
    allocate = device.allocate

    def counting(nbytes: int):
        sizes.append(nbytes)
        return allocate(nbytes)

    monkeypatch.setattr(device, "allocate", counting)
    return sizes


def test_calls_in_turn_reuse_one_frame(job, device: rt.Runtime, allocations: list[int]
                                       ) -> None:
    exe = job.executable(device=device)
    a = np.ones((4, 64), np.float32)
    np.testing.assert_allclose(exe(a)[0], _want(a), rtol=1e-5)
    after_first = len(allocations)
    for seed in range(3):
        a = np.random.default_rng(seed).standard_normal((4, 64)).astype(np.float32)
        np.testing.assert_allclose(exe(a)[0], _want(a), rtol=1e-5)
    assert len(allocations) == after_first  # later calls found the first call's frame free


def test_constants_are_written_once(job, device: rt.Runtime,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    written: list[np.ndarray] = []
    write = device.write

    def recording(buf, array, **kw):
        written.append(np.asarray(array))
        write(buf, array, **kw)

    monkeypatch.setattr(device, "write", recording)
    exe = job.executable(device=device)
    for _ in range(3):
        exe(np.ones((4, 64), np.float32))
    assert sum(w.shape == WEIGHTS.shape and np.array_equal(w, WEIGHTS) for w in written) == 1


def test_job_run_reuses_its_executable(job, device: rt.Runtime, allocations: list[int]
                                       ) -> None:
    a = np.ones((4, 64), np.float32)
    np.testing.assert_allclose(job.run(a, device=device)[0], _want(a), rtol=1e-5)
    after_first = len(allocations)
    np.testing.assert_allclose(job.run(2 * a, device=device)[0], _want(2 * a), rtol=1e-5)
    np.testing.assert_allclose(job.run(a, function="weighted", device=device)[0], _want(a),
                               rtol=1e-5)
    assert len(allocations) == after_first


def test_a_job_with_run_executables_still_pickles(job, device: rt.Runtime) -> None:
    import pickle

    job.run(np.ones((4, 64), np.float32), device=device)
    again = pickle.loads(pickle.dumps(job))
    a = np.ones((4, 64), np.float32)
    np.testing.assert_allclose(again.run(a, device=device)[0], _want(a), rtol=1e-5)


def test_allocate_rejects_negative_sizes(device: rt.Runtime) -> None:
    with pytest.raises(rt.DeviceError, match="negative buffer size"):
        device.allocate(-1)
    assert device.allocate(0).size == 1  # OpenCL has no empty buffers
