"""Running from many threads at once gives every caller its own result (issue #12 item 1).

Each test starts 8 threads together (a barrier) and has each make ``CALLS`` calls with inputs
of its own, comparing every result to numpy; a result of another call, a torn one or an
exception counts as wrong, and the test wants none. Tensors are small so the module stays
quick on a busy 2-core PoCL machine; contention comes from the calls overlapping, not from
their size.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

pytest.importorskip("pyopencl")

import accy  # noqa: E402
from accy.backends.opencl import runtime as rt  # noqa: E402
from accy.ir.program import Program  # noqa: E402
from accy.ir.types import DType  # noqa: E402

THREADS = 8
CALLS = 100
ROWS, COLS = 4, 32


def _program(k: int) -> Program:
    """Elementwise ops, then reductions reading their intermediate (several kernels), with a
    constant; ``k`` makes programs of different fingerprints."""
    b = accy.Builder()
    f = b.begin_function(f"prog{k}", [b.tensor(DType.f32, (ROWS, COLS)),
                                      b.tensor(DType.f32, (COLS,))])
    a, v = f.param(0), f.param(1)
    t = (a * v + f.constant(np.linspace(0, 1, COLS, dtype=np.float32))) * float(k + 1)
    f.return_(t, (t * t).sum(1), t.max(1))
    f.finish()
    return b.finish()


def _expected(k: int, a: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, ...]:
    t = (a * v + np.linspace(0, 1, COLS, dtype=np.float32)) * np.float32(k + 1)
    return t, (t * t).sum(1), t.max(1)


def _inputs(thread: int, call: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(thread * 100_003 + call)
    return (rng.standard_normal((ROWS, COLS)).astype(np.float32),
            rng.standard_normal(COLS).astype(np.float32))


def _wrong(got: tuple[np.ndarray, ...], want: tuple[np.ndarray, ...]) -> bool:
    return len(got) != len(want) or not all(
        np.allclose(g, w, rtol=1e-5, atol=1e-4) for g, w in zip(got, want, strict=True))


def _hammer(run: Callable[[int, int, np.ndarray, np.ndarray], tuple[np.ndarray, ...]],
            program_of: Callable[[int], int] = lambda thread: 0) -> list[str]:
    """Every wrong call of ``THREADS`` threads making ``CALLS`` calls ``run(thread, call, a,
    v)`` at once; thread ``t`` runs program ``program_of(t)``."""
    start = threading.Barrier(THREADS)

    def worker(thread: int) -> list[str]:
        start.wait()
        wrong = []
        for call in range(CALLS):
            a, v = _inputs(thread, call)
            try:
                got = run(thread, call, a, v)
            except Exception as exc:  # noqa: BLE001 -- a failed call is a wrong result too
                wrong.append(f"thread {thread} call {call}: {type(exc).__name__}: {exc}")
                continue
            if _wrong(got, _expected(program_of(thread), a, v)):
                wrong.append(f"thread {thread} call {call}: wrong result")
        return wrong

    with ThreadPoolExecutor(THREADS) as pool:
        return [w for ws in pool.map(worker, range(THREADS)) for w in ws]


@pytest.fixture(autouse=True)
def switch_threads_often():
    """Python switches threads every 5 ms; switching far more often interleaves the calls'
    steps (set arguments, enqueue, read back) finely, which is what exposes races."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


@pytest.fixture(scope="module")
def job() -> accy.PreparedJob:
    return accy.prepare(_program(0))


def _no_wrong(wrong: list[str]) -> None:
    assert not wrong, f"{len(wrong)} of {THREADS * CALLS} calls wrong, e.g. {wrong[:3]}"


def test_same_executable_from_many_threads(job, device: rt.Runtime) -> None:
    """Half the calls write into ``out=`` arrays of the thread's own, half get fresh ones."""
    exe = job.executable(device=device)
    assert len(exe.steps) >= 2  # intermediates pass between kernels
    outs = [[np.empty((ROWS, COLS), np.float32), np.empty(ROWS, np.float32),
             np.empty(ROWS, np.float32)] for _ in range(THREADS)]

    def run(thread: int, call: int, a: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, ...]:
        if call % 2:
            got = exe(a, v, out=outs[thread])
            assert all(g is o for g, o in zip(got, outs[thread], strict=True))
            return got
        return exe(a, v)

    _no_wrong(_hammer(run))


def test_kernel_times_are_the_calling_threads_own(job, device: rt.Runtime) -> None:
    """``last_kernel_ns`` read after a call is that call's: one entry per kernel launched, and
    a thread that never called sees none."""
    exe = job.executable(device=device)

    def run(thread: int, call: int, a: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, ...]:
        got = exe(a, v)
        times = exe.last_kernel_ns
        assert len(times) == len(exe.steps) and all(ns >= 0 for ns in times)
        return got

    _no_wrong(_hammer(run))
    assert exe.last_kernel_ns == []  # this thread made no call


def test_same_job_run_from_many_threads(job, device: rt.Runtime) -> None:
    _no_wrong(_hammer(lambda thread, call, a, v: job.run(a, v, device=device)))


def test_independently_prepared_jobs_of_one_program(device: rt.Runtime) -> None:
    """Same program, same fingerprint, separate jobs and executables: on the old runtime they
    shared the pooled device buffers."""
    jobs = [accy.prepare(_program(0)) for _ in range(THREADS)]
    assert len({j.product.fingerprint() for j in jobs}) == 1
    exes = [j.executable(device=device) for j in jobs]
    _no_wrong(_hammer(lambda thread, call, a, v: exes[thread](a, v)))


def test_different_programs_at_once(device: rt.Runtime) -> None:
    """Each thread its own program, half through ``job.run`` and half through an executable
    with ``out=``."""
    jobs = [accy.prepare(_program(k)) for k in range(THREADS)]
    exes = [j.executable(device=device) for j in jobs]

    def run(thread: int, call: int, a: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, ...]:
        if thread % 2:
            return jobs[thread].run(a, v, device=device)
        out = [np.empty((ROWS, COLS), np.float32), np.empty(ROWS, np.float32),
               np.empty(ROWS, np.float32)]
        return exes[thread](a, v, out=out)

    _no_wrong(_hammer(run, program_of=lambda thread: thread))


def test_one_kernel_launched_from_many_threads(device: rt.Runtime) -> None:
    """The runtime's cached kernel object is shared: ``launch`` sets its arguments and
    enqueues it as one step, so each launch runs with its own arguments."""
    source = ("__kernel void fill(__global int *out, const int v) "
              "{ out[get_global_id(0)] = v; }\n")
    kernel = device.kernel(source, "fill")

    def run(thread: int, call: int, a: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, ...]:
        buf = device.allocate(64 * 4)
        value = np.int32(thread * CALLS + call)
        device.elapsed_ns(device.launch(kernel, (64,), None, [buf, value]))
        got = device.read(buf, np.empty(64, np.int32))
        # answered in the shape _hammer compares: program 0's result when the fill is right
        return _expected(0, a, v) if (got == value).all() else (got,)

    _no_wrong(_hammer(run))
