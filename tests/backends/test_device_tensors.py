"""Device-resident tensors (issue #18): device inputs, results and ``out=``, named device
errors, bound inputs, chaining executables, asynchronous calls; results equal the numpy path."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

pytest.importorskip("pyopencl")

import pyopencl.array as cl_array  # noqa: E402

import accy  # noqa: E402
from accy.backends.opencl import device_array  # noqa: E402
from accy.backends.opencl import runtime as rt  # noqa: E402
from accy.errors import DeviceMismatchError, InterpretError  # noqa: E402

f32 = accy.f32


@pytest.fixture(params=["unified", "copies"])
def runtime(request, device: rt.Runtime, monkeypatch: pytest.MonkeyPatch) -> rt.Runtime:
    """The device as it is, and with host-unified memory off (numpy inputs copied)."""
    if request.param == "unified" and not device.info.host_unified_memory:
        pytest.skip("the device does not share the host's memory")
    monkeypatch.setattr(device, "info", dataclasses.replace(
        device.info, host_unified_memory=request.param == "unified"))
    return device


@accy.function
def several(a: f32[4, 64], b: f32[64]):
    """An intermediate read by a second kernel and returned, a reduction, a parameter, the same
    value twice."""
    t = a * b + 1.0
    s = (t * t).sum(1)
    return t, s, b, s


def expected(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, ...]:
    t = a * b + np.float32(1.0)
    s = (t * t).sum(1)
    return t, s, b, s


@accy.function
def scale(s: f32[4], k: f32[4]):
    return s * k


def inputs(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((4, 64)).astype(np.float32),
            rng.standard_normal(64).astype(np.float32))


def host(results) -> tuple[np.ndarray, ...]:
    return tuple(r.get() if hasattr(r, "get") else r for r in results)


@pytest.fixture(scope="module")
def job() -> accy.PreparedJob:
    return accy.prepare(several)


@pytest.fixture(scope="module")
def scale_job() -> accy.PreparedJob:
    return accy.prepare(scale)


@pytest.fixture
def transfers(device: rt.Runtime, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Each host-to-device copy or host buffer the runtime makes from now on."""
    seen: list[str] = []
    for owner, name in ((device, "write"), (device, "host_buffer"),
                        (device_array, "allocate_from")):
        original = getattr(owner, name)

        def recording(*args, _original=original, _name=name, **kwargs):
            seen.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(owner, name, recording)
    return seen


def test_device_inputs_and_results_equal_the_numpy_path(job, runtime) -> None:
    exe = job.executable(device=runtime)
    a, b = inputs(0)
    want = exe(a, b)
    da, db = accy.to_device(a, runtime), exe.to_device(b)
    got = exe(da, db)
    assert all(isinstance(g, np.ndarray) for g in got)
    for g, w, e in zip(got, want, expected(a, b), strict=True):
        np.testing.assert_array_equal(g, w)
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-4)
    device_results = exe(da, db, to_host=False)
    assert all(isinstance(d, accy.DeviceArray) for d in device_results)
    assert [d.shape for d in device_results] == [w.shape for w in want]
    for d, w in zip(device_results, want, strict=True):
        np.testing.assert_array_equal(d.get(), w)
        np.testing.assert_array_equal(np.asarray(d), w)
    assert len({d.buffer.int_ptr for d in device_results}) == 4  # each result its own buffer


def test_device_results_are_the_callers_own(job, runtime) -> None:
    """A later call neither overwrites nor reuses the buffers an earlier one returned."""
    exe = job.executable(device=runtime)
    (a0, b0), (a1, b1) = inputs(0), inputs(1)
    first = exe(a0, b0, to_host=False)
    second = exe(a1, b1, to_host=False)
    np.testing.assert_array_equal(host(first)[1], exe(a0, b0)[1])
    np.testing.assert_array_equal(host(second)[1], exe(a1, b1)[1])


def test_device_out_arrays(job, runtime) -> None:
    """``out=`` may hold DeviceArrays, pyopencl arrays and numpy arrays side by side."""
    exe = job.executable(device=runtime)
    a, b = inputs(2)
    want = exe(a, b)
    out = [accy.DeviceArray.empty(runtime, (4, 64), np.float32),
           cl_array.empty(runtime.queue, (4,), np.float32),
           np.empty(64, np.float32),
           accy.DeviceArray.empty(runtime, (4,), np.float32)]
    got = exe(exe.to_device(a), cl_array.to_device(runtime.queue, b), out=out)
    assert all(g is o for g, o in zip(got, out, strict=True))
    for g, w in zip(host(got), want, strict=True):
        np.testing.assert_array_equal(g, w)


def test_device_tensors_are_used_in_place(job, device, transfers: list[str]) -> None:
    exe = job.executable(device=device)
    a, b = inputs(3)
    da, db = exe.to_device(a), exe.to_device(b)
    out = [accy.DeviceArray.empty(device, r.shape, np.float32) for r in expected(a, b)]
    transfers.clear()
    exe(da, db, out=out)
    exe(da, db, out=out, wait=False).wait()
    assert transfers == []  # no input copied, no host buffer made
    for g, w in zip(host(out), expected(a, b), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("bad, message", [
    (lambda rt_: accy.to_device(np.zeros((4, 64), np.float64), rt_),
     r"input a must be f32\[4,64\], got float64\[4, 64\]"),
    (lambda rt_: accy.to_device(np.zeros((64, 4), np.float32), rt_),
     r"input a must be f32\[4,64\], got float32\[64, 4\]"),
])
def test_device_inputs_are_checked(job, device, bad, message) -> None:
    exe = job.executable(device=device)
    with pytest.raises(InterpretError, match=message):
        exe(bad(device), inputs(0)[1])


def test_another_context_is_refused_by_name(job, device) -> None:
    """A tensor of another context (here a second runtime of the same device) is named."""
    other = rt.Runtime(device.device)
    exe = job.executable(device=device)
    a, b = inputs(4)
    with pytest.raises(DeviceMismatchError, match="input b lives on"):
        exe(a, accy.to_device(b, other))
    with pytest.raises(DeviceMismatchError, match="input a is a pyopencl array of another"):
        exe(cl_array.to_device(other.queue, a), b)
    with pytest.raises(DeviceMismatchError, match=r"out\[1\] lives on"):
        exe(a, b, out=[accy.DeviceArray.empty(device, (4, 64), np.float32),
                       accy.DeviceArray.empty(other, (4,), np.float32),
                       np.empty(64, np.float32), np.empty(4, np.float32)])
    with pytest.raises(DeviceMismatchError, match="input b lives on"):
        exe.bind(b=accy.to_device(b, other))
    assert isinstance(DeviceMismatchError("x"), accy.AccyError)


def test_out_may_not_be_an_input(scale_job, device) -> None:
    exe = scale_job.executable(device=device)
    s = exe.to_device(np.ones(4, np.float32))
    with pytest.raises(InterpretError, match=r"out\[0\] overlaps an input"):
        exe(s, s, out=s)
    with pytest.raises(InterpretError, match=r"out\[0\] must be a device tensor"):
        exe(s, s, out=np.empty(4, np.float32), wait=False)


def test_inputs_by_name(job, device) -> None:
    exe = job.executable(device=device)
    a, b = inputs(5)
    want = exe(a, b)
    for got in (exe(b=b, a=a), exe(a, b=b)):
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)
    with pytest.raises(InterpretError, match="has no input 'c'"):
        exe(a, c=b)
    with pytest.raises(InterpretError, match=r"takes 1 more inputs \(b\), 2 given"):
        exe(a, b, a=a)


def test_bound_inputs(job, runtime, transfers: list[str]) -> None:
    exe = job.executable(device=runtime)
    a, b = inputs(6)
    want = exe(a, b)
    kept = b.copy()
    bound = exe.bind(b=b)  # copied now, once
    b[:] = 0  # so changing the array afterwards changes nothing
    assert bound.param_names == ("a",)
    da = exe.to_device(a)
    transfers.clear()
    for got in (bound(da), bound(a=da), bound(da, to_host=False), bound.enqueue(da).wait()):
        for g, w in zip(host(got), want, strict=True):
            np.testing.assert_array_equal(g, w)
    assert transfers == []  # neither the bound input nor the device input copied per call
    both = bound.bind(a=da)
    np.testing.assert_array_equal(both()[0], want[0])
    with pytest.raises(InterpretError, match="input b is bound"):
        bound(da, b=kept)
    with pytest.raises(InterpretError, match="input b is bound already"):
        bound.bind(b=kept)
    with pytest.raises(InterpretError, match=r"input b must be f32\[64\]"):
        exe.bind(b=np.zeros(64, np.float64))
    with pytest.raises(InterpretError, match=r"takes 1 more inputs \(a\), 0 given"):
        bound()


def test_chained_executables_stay_on_the_device(job, scale_job, device,
                                                transfers: list[str]) -> None:
    """The reduction of one executable feeds another, both synchronously and queued."""
    first = job.executable(device=device)
    second = scale_job.executable(device="pocl" if "pocl" in device.info.key.lower()
                                  else device)
    assert second.runtime is first.runtime  # one context and queue per device
    a, b = inputs(7)
    k = first.to_device(np.arange(4, dtype=np.float32))
    want = expected(a, b)[1] * np.arange(4, dtype=np.float32)
    da, db = first.to_device(a), first.to_device(b)
    transfers.clear()
    (s,) = second(first(da, db, to_host=False)[1], k, to_host=False)
    pending = second.enqueue(first.enqueue(da, db).results[1], k)
    assert transfers == []
    np.testing.assert_allclose(s.get(), want, rtol=1e-5)
    np.testing.assert_allclose(pending.get()[0], want, rtol=1e-5)


def test_asynchronous_calls(job, runtime) -> None:
    """Many calls in flight at once, each with its own inputs, and the executable's frames
    reused (a busy one only after waiting) while earlier calls may still run."""
    exe = job.executable(device=runtime)
    exe.max_pending = 2
    cases = [inputs(seed) for seed in range(20)]
    handles = [exe(a, b, wait=False) if i % 2 else exe.enqueue(exe.to_device(a), b)
               for i, (a, b) in enumerate(cases)]
    assert len(exe._free) <= exe.max_pending + 1
    for (a, b), handle in zip(cases, handles, strict=True):
        assert isinstance(handle, accy.PendingCall)
        assert all(isinstance(r, accy.DeviceArray) for r in handle.results)
        for g, w in zip(handle.get(), expected(a, b), strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-4)
        assert handle.done
        assert len(handle.kernel_ns) == len(exe.steps) and all(ns >= 0 for ns in
                                                                handle.kernel_ns)
        assert exe.last_kernel_ns == handle.kernel_ns  # set for the thread that waited


def test_job_run_on_the_device(job, device) -> None:
    a, b = inputs(8)
    got = job.run(accy.to_device(a, device), b, device=device, to_host=False)
    assert all(isinstance(g, accy.DeviceArray) for g in got)
    pending = job.run(a, b, device=device, wait=False)
    for g, p, w in zip(host(got), pending.get(), expected(a, b), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-4)
        np.testing.assert_array_equal(g, p)


def test_same_device_same_runtime(device) -> None:
    """Selectors naming one device give one runtime: one context, one queue."""
    assert rt.select_device() is device
    if "pocl" in device.info.key.lower():
        assert rt.select_device("pocl") is device is rt.select_device("portable")


def test_queued_calls_read_numpy_inputs_as_they_were(job, runtime) -> None:
    """Changing a numpy input right after queueing the call does not change its results."""
    exe = job.executable(device=runtime)
    a, b = inputs(9)
    want = expected(a, b)
    mutable = a.copy()
    pending = exe.enqueue(mutable, b)
    mutable[:] = 0
    for g, w in zip(pending.get(), want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-4)


def test_bench_calls_smoke(experiment_script, device, tmp_path) -> None:
    """experiments/bench_calls.py at its smallest: every way of calling gives the numpy
    path's results, the queued MLP steps match numpy's, and it writes its JSON."""
    bench = experiment_script("bench_calls")
    out = tmp_path / "bench_calls.json"
    result = bench.main(["--benchmarks", "layernorm", "--repeat", "2", "--async-calls", "5",
                         "--mlp-steps", "2", "--mlp", "4,8,16,3", "--front", "lowering",
                         "--out", str(out)])
    (row,) = result["rows"]
    assert all(row[m]["max_diff"] == 0.0 for m in ("numpy_out", "device", "bound"))
    assert row["bound_inputs"] == ["gamma", "beta"]
    assert result["mlp"]["max_diff_vs_numpy"] < 1e-5
    assert result["loop"]["max_diff"] == 0.0
    assert out.exists()


def test_parameter_and_constant_results_on_the_device(runtime) -> None:
    """Results that are a parameter or a constant come back as device arrays of their own."""
    b = accy.Builder()
    f = b.begin_function("passthrough", [b.tensor(accy.DType.f32, (8,))])
    table = np.linspace(0, 1, 8, dtype=np.float32)
    f.return_(f.param(0), f.constant(table), f.param(0) * 2.0)
    f.finish()
    exe = accy.prepare(b.finish()).executable(device=runtime)
    a = np.arange(8, dtype=np.float32)
    for x in (a, exe.to_device(a)):
        got = exe(x, to_host=False)
        assert isinstance(x, np.ndarray) or got[0].buffer is not x.buffer
        for g, w in zip(host(got), (a, table, a * 2), strict=True):
            np.testing.assert_array_equal(g, w)
        for g, w in zip(exe.enqueue(x).get(), (a, table, a * 2), strict=True):
            np.testing.assert_array_equal(g, w)
        for g, w in zip(exe(x), (a, table, a * 2), strict=True):
            np.testing.assert_array_equal(g, w)
