"""Running an executable: results into caller arrays (``out=``), zero-copy host buffers."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

pytest.importorskip("pyopencl")

import accy  # noqa: E402
from accy.backends.opencl import runtime as rt  # noqa: E402
from accy.errors import DeviceError, InterpretError  # noqa: E402

f32 = accy.f32


@pytest.fixture(params=["unified", "copies"])
def runtime(request, device: rt.Runtime, monkeypatch: pytest.MonkeyPatch) -> rt.Runtime:
    """The device as it is, and with host-unified memory off: inputs and results copied."""
    if request.param == "unified" and not device.info.host_unified_memory:
        pytest.skip("the device does not share the host's memory")
    unified = request.param == "unified"
    monkeypatch.setattr(device, "info",
                        dataclasses.replace(device.info, host_unified_memory=unified))
    return device


@accy.function
def several(a: f32[4, 64], b: f32[64]):
    """Results: one written by one kernel and read by the next, a reduction, a parameter,
    the same value twice."""
    t = a * b + 1.0
    s = (t * t).sum(1)
    return t, s, b, s


def expected(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, ...]:
    t = a * b + np.float32(1.0)
    s = (t * t).sum(1)
    return t, s, b, s


def inputs(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((4, 64)).astype(np.float32),
            rng.standard_normal(64).astype(np.float32))


def check(got: tuple[np.ndarray, ...], a: np.ndarray, b: np.ndarray) -> None:
    for g, e in zip(got, expected(a, b), strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-4)


@pytest.fixture(scope="module")
def job() -> accy.PreparedJob:
    return accy.prepare(several)


def test_fresh_results_every_call_and_inputs_untouched(job, runtime) -> None:
    exe = job.executable(device=runtime)
    a, b = inputs(0)
    a.flags.writeable = False  # read-only inputs are fine: kernels never write them
    first = exe(a, b)
    check(first, a, b)
    assert first[2] is not b and first[1] is not first[3]
    second = exe(*inputs(1))
    check(first, a, b)  # not overwritten by the second call
    check(second, *inputs(1))
    np.testing.assert_array_equal(a, inputs(0)[0])


def test_out_arrays_are_filled_and_returned_across_calls(job, runtime) -> None:
    exe = job.executable(device=runtime)
    out = [np.full((4, 64), np.nan, np.float32), np.full(4, np.nan, np.float32),
           np.full(64, np.nan, np.float32), np.full(4, np.nan, np.float32)]
    for seed in (0, 1):
        a, b = inputs(seed)
        got = exe(a, b, out=out)
        assert all(g is o for g, o in zip(got, out, strict=True))
        check(got, a, b)


@accy.function
def chain(a: f32[8], b: f32[8]):
    return accy.maximum((a + b) * b - b, b)


def test_single_result_takes_a_bare_array(runtime) -> None:
    exe = accy.prepare(chain).executable(device=runtime)
    a = np.arange(8, dtype=np.float32)
    out = np.empty(8, np.float32)
    (got,) = exe(a, a, out=out)
    assert got is out
    np.testing.assert_array_equal(out, np.maximum((a + a) * a - a, a))


def _misaligned(n: int) -> np.ndarray:
    """A C-contiguous float32 array of ``n`` whose address is 4 bytes past a 16-byte boundary."""
    base = np.zeros(n + 4, np.float32)
    skip = (4 - base.ctypes.data // 4 % 4 + 1) % 4  # elements to the address 16 k + 4
    return base[skip:skip + n]


def test_arrays_off_the_kernels_vector_alignment(runtime) -> None:
    """Kernels read and write 16-byte vectors through vector pointers (arguments' bases are
    16-byte aligned): host arrays that are not are copied, never used in place."""

    @accy.function
    def rows(a: f32[64, 1004], b: f32[64, 1004]):
        return (a * b).sum(1)  # rows of whole float4s, not float8s

    job = accy.prepare(rows, device=runtime)
    assert "float4*)in0)[" in job.kernel_source(0)
    a, b = (_misaligned(64 * 1004).reshape(64, 1004) for _ in range(2))
    out = _misaligned(64)
    assert a.ctypes.data % 16 == 4 and out.ctypes.data % 16 == 4
    a[:] = np.arange(64 * 1004).reshape(64, 1004) % 7 - 3.0
    b[:] = np.arange(64 * 1004).reshape(64, 1004) % 5 - 2.0
    (got,) = job.executable(device=runtime)(a, b, out=out)
    assert got is out
    np.testing.assert_array_equal(out, (a * b).sum(1))


@pytest.mark.parametrize("bad, message", [
    (lambda: [np.empty((4, 64), np.float32)], "has 4 results, out= gives 1 arrays"),
    (lambda: [np.empty((4, 64), np.float64), *_good()[1:]], r"out\[0\] must be a numpy array "
                                                            r"of f32\[4,64\], got float64"),
    (lambda: [_good()[0], [0.0] * 4, *_good()[2:]], r"out\[1\] .* got list"),
    (lambda: [np.empty((64, 4), np.float32).T, *_good()[1:]], r"out\[0\] must be C-contiguous"),
    (lambda: [*_good()[:3], _good()[1]], None),  # distinct arrays: fine
])
def test_out_is_checked(job, device, bad, message) -> None:
    exe = job.executable(device=device)
    a, b = inputs(0)
    if message is None:
        check(exe(a, b, out=bad()), a, b)
        return
    with pytest.raises(InterpretError, match=message):
        exe(a, b, out=bad())


def _good() -> list[np.ndarray]:
    return [np.empty((4, 64), np.float32), np.empty(4, np.float32), np.empty(64, np.float32),
            np.empty(4, np.float32)]


def test_out_must_not_alias_inputs_or_each_other(job, device) -> None:
    exe = job.executable(device=device)
    a, b = inputs(0)
    with pytest.raises(InterpretError, match=r"several: out\[2\] overlaps an input"):
        exe(a, b, out=[*_good()[:2], b, _good()[3]])
    shared = np.empty(4, np.float32)
    with pytest.raises(InterpretError, match=r"out\[3\] overlaps another out array"):
        exe(a, b, out=[*_good()[:1], shared, _good()[2], shared])


def test_host_buffer_needs_contiguous_memory(device) -> None:
    with pytest.raises(DeviceError, match="non-contiguous or empty"):
        device.host_buffer(np.empty((4, 4), np.float32).T, writable=False)
    with pytest.raises(DeviceError, match="non-contiguous or empty"):
        device.host_buffer(np.empty(0, np.float32), writable=True)


@accy.function
def scaled_sum(a: f32[16], s: f32[()]):
    return a.sum() * s, a * s


def test_scalar_inputs_and_results(runtime) -> None:
    exe = accy.prepare(scaled_sum).executable(device=runtime)
    a, s = np.arange(16, dtype=np.float32), np.array(2.0, np.float32)
    out = (np.empty((), np.float32), np.empty(16, np.float32))
    total, scaled = exe(a, s, out=out)
    assert total is out[0] and float(total) == 240.0
    np.testing.assert_array_equal(scaled, a * 2)
