"""Device tensors, bound inputs and asynchronous calls from many threads at once (issue #18):
every caller gets its own results, and a frame is never reused by one call while another
call's commands in it are still queued.

As in test_thread_safety: 8 threads start together (a barrier), each makes ``CALLS`` calls
with inputs of its own and compares every result to numpy; tensors are small, contention
comes from overlapping calls. Asynchronous calls are kept ``IN_FLIGHT`` deep per thread, so
frames are taken back while other threads' calls are pending.
"""

from __future__ import annotations

import sys
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

pytest.importorskip("pyopencl")

import accy  # noqa: E402
from accy.backends.opencl import runtime as rt  # noqa: E402
from accy.ir.types import DType  # noqa: E402

THREADS = 8
CALLS = 60
IN_FLIGHT = 4
ROWS, COLS = 4, 32
OFFSET = np.linspace(0, 1, COLS, dtype=np.float32)


@pytest.fixture(scope="module")
def job() -> accy.PreparedJob:
    """Elementwise ops with a constant, then reductions reading the intermediate (several
    kernels, so frames hold intermediates)."""
    b = accy.Builder()
    f = b.begin_function("prog", [b.tensor(DType.f32, (ROWS, COLS)),
                                  b.tensor(DType.f32, (COLS,))])
    a, v = f.param(0), f.param(1)
    t = a * v + f.constant(OFFSET)
    f.return_(t, (t * t).sum(1), t.max(1))
    f.finish()
    return accy.prepare(b.finish())


@pytest.fixture(scope="module")
def scale_job() -> accy.PreparedJob:
    @accy.function
    def scale(s: accy.f32[ROWS], k: accy.f32[ROWS]):
        return s * k + 1.0

    return accy.prepare(scale)


def _expected(a: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, ...]:
    t = a * v + OFFSET
    return t, (t * t).sum(1), t.max(1)


def _inputs(thread: int, call: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(thread * 100_003 + call)
    return (rng.standard_normal((ROWS, COLS)).astype(np.float32),
            rng.standard_normal(COLS).astype(np.float32))


def _wrong(got, want) -> bool:
    got = [g.get() if hasattr(g, "get") else g for g in got]
    return len(got) != len(want) or not all(
        np.allclose(g, w, rtol=1e-5, atol=1e-4) for g, w in zip(got, want, strict=True))


def _threads(worker: Callable[[int], list[str]]) -> None:
    start = threading.Barrier(THREADS)

    def run(thread: int) -> list[str]:
        start.wait()
        try:
            return worker(thread)
        except Exception as exc:  # noqa: BLE001 -- a failed thread is a wrong result too
            return [f"thread {thread}: {type(exc).__name__}: {exc}"]

    with ThreadPoolExecutor(THREADS) as pool:
        wrong = [w for ws in pool.map(run, range(THREADS)) for w in ws]
    assert not wrong, f"{len(wrong)} wrong, e.g. {wrong[:3]}"


@pytest.fixture(autouse=True)
def switch_threads_often():
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def test_device_tensors_and_async_calls_from_many_threads(job, device: rt.Runtime) -> None:
    """A third of the calls synchronous with device results, a third into device ``out=``
    arrays of the thread's own, a third queued ``IN_FLIGHT`` deep."""
    exe = job.executable(device=device)
    exe.max_pending = 3  # fewer than the calls in flight: takers wait for pending frames

    def worker(thread: int) -> list[str]:
        wrong: list[str] = []
        out = [accy.DeviceArray.empty(device, s, np.float32)
               for s in ((ROWS, COLS), (ROWS,), (ROWS,))]
        queued: deque = deque()
        for call in range(CALLS):
            a, v = _inputs(thread, call)
            da, dv = exe.to_device(a), exe.to_device(v)
            if call % 3 == 0:
                got = exe(da, dv, to_host=False)
            elif call % 3 == 1:
                got = exe(da, dv, out=out)
            else:
                queued.append((call, exe.enqueue(da, v), (a, v)))
                if len(queued) < IN_FLIGHT:
                    continue
                call, pending, (a, v) = queued.popleft()
                got = pending.wait()
                if len(exe.last_kernel_ns) != len(exe.steps):
                    wrong.append(f"thread {thread} call {call}: kernel times")
            if _wrong(got, _expected(a, v)):
                wrong.append(f"thread {thread} call {call}: wrong result")
        for call, pending, (a, v) in queued:
            if _wrong(pending.get(), _expected(a, v)):
                wrong.append(f"thread {thread} call {call}: wrong queued result")
        return wrong

    _threads(worker)


def test_bound_and_chained_from_many_threads(job, scale_job, device: rt.Runtime) -> None:
    """One bound executable shared by every thread; its queued reduction feeds a second
    executable, queued too, with nothing read back until the chain's end."""
    exe = job.executable(device=device)
    second = scale_job.executable(device=device)
    v = np.linspace(-1, 1, COLS, dtype=np.float32)
    bound = exe.bind(**{exe.param_names[1]: v})  # the second input, whatever its name
    k = second.to_device(np.arange(ROWS, dtype=np.float32))

    def worker(thread: int) -> list[str]:
        wrong: list[str] = []
        queued: deque = deque()
        for call in range(CALLS):
            a, _ = _inputs(thread, call)
            first = bound.enqueue(a)
            queued.append((call, a, first, second.enqueue(first.results[1], k)))
            if len(queued) >= IN_FLIGHT or call == CALLS - 1:
                while queued:
                    call_, a_, first_, chained = queued.popleft()
                    want = _expected(a_, v)
                    (got,) = chained.get()
                    if _wrong(first_.wait(), want) or not np.allclose(
                            got, want[1] * np.arange(ROWS) + 1, rtol=1e-5, atol=1e-4):
                        wrong.append(f"thread {thread} call {call_}: wrong result")
        return wrong

    _threads(worker)
