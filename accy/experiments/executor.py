"""Running sweeps: one executor interface, local processes or a Dask cluster.

A sweep is a list of :class:`Task` s (programs x configurations x seeds): each names a
module-level function by ``"module:function"`` and its keyword arguments (plain data), so
any worker that can import accy can run it. ``executor.map(tasks)`` returns one
:class:`TaskResult` per task, **sorted by task key** -- the merge is deterministic whatever
the order in which tasks finish, on whichever worker.

Failures are never lost: a task that raises is retried up to ``retries`` times, then reported
``failed`` with its traceback; a task whose worker process dies (a segfault in a driver,
``os._exit``, the OOM killer) is retried the same way and then reported ``failed`` with why.

``LocalExecutor`` (the default) runs tasks in ``workers`` processes of a
``concurrent.futures.ProcessPoolExecutor`` (spawned, so OpenCL and egglog state is never
forked), at most one task per process at a time. When a process dies, the pool breaks and
every task then running is a suspect: each is rerun alone in a fresh one-process pool, so the
crash is charged to the task that caused it and the others finish normally. ``workers=0``
runs tasks in this process (no isolation: for debugging and profiling).

``DaskExecutor`` submits the same tasks to a ``distributed`` cluster: ``scheduler`` is the
address of a running one (``tcp://host:8786``), or None for a local cluster of ``workers``
processes (tests). A worker that dies is rescheduled by Dask until the scheduler's
``distributed.scheduler.allowed-failures`` is exhausted (``KilledWorker``), which counts as
one failed attempt here.

Progress bars (tqdm) are shown only when stderr is a terminal and tqdm is installed.
"""

from __future__ import annotations

import concurrent.futures as cf
import importlib
import multiprocessing
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

__all__ = [
    "DaskExecutor", "Executor", "LocalExecutor", "Task", "TaskResult", "make_executor",
    "probe", "progress", "run_task", "sort_key",
]

Key = tuple[str | int, ...]


@dataclass(frozen=True)
class Task:
    """One unit of a sweep: ``fn`` (``"module:function"``) called with ``params``."""

    key: Key  # unique in the sweep; results are sorted by it
    fn: str
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TaskResult:
    """What became of a task: ``ok`` with the function's ``value``, or ``failed`` with why."""

    key: Key
    status: Literal["ok", "failed"]
    value: Any = None
    error: str = ""
    attempts: int = 1
    worker: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def failure(self) -> dict[str, Any]:
        """The JSON-ready record of a failed task."""
        return {"key": list(self.key), "error": self.error, "attempts": self.attempts,
                "worker": self.worker}


def sort_key(key: Key) -> tuple[tuple[int, Any], ...]:
    """A total order on keys mixing ints and strings (ints first at a position)."""
    return tuple((0, k) if isinstance(k, int) else (1, str(k)) for k in key)


def _resolve(fn: str) -> Callable[..., Any]:
    module, _, name = fn.partition(":")
    if not name:
        raise ValueError(f"task function {fn!r} must be 'module:function'")
    return getattr(importlib.import_module(module), name)


def _worker_name() -> str:
    return f"{platform.node()}:{os.getpid()}"


def run_task(task: Task) -> tuple[str, Any, str]:
    """Run one task where it lands: (``"ok"``, value, worker) or (``"error"``, traceback,
    worker). Exceptions become text, so every result pickles."""
    try:
        return "ok", _resolve(task.fn)(**task.params), _worker_name()
    except Exception:  # noqa: BLE001 -- reported as the task's failure, never swallowed
        return "error", traceback.format_exc(), _worker_name()


def probe(value: int, fail: str = "", sleep: float = 0.0) -> dict[str, Any]:
    """A task for checking an executor or a cluster: returns ``value`` and its square after
    ``sleep`` seconds.

    ``fail``: ``"raise"`` raises, ``"exit"`` kills the worker process (``os._exit``), and
    ``"exit-once:PATH"`` / ``"raise-once:PATH"`` do so only while the file ``PATH`` does not
    exist yet (creating it first), so a retry succeeds.
    """
    mode, _, marker = fail.partition(":")
    if marker:
        if os.path.exists(marker):
            mode = ""
        else:
            open(marker, "w").close()
    time.sleep(sleep)
    if mode.startswith("raise"):
        raise RuntimeError(f"probe {value} was asked to fail")
    if mode.startswith("exit"):
        os._exit(3)
    return {"value": value, "square": value * value}


class Executor(Protocol):
    """Runs tasks; ``map`` returns one result per task, sorted by key."""

    name: str

    def map(self, tasks: Sequence[Task], desc: str = "") -> list[TaskResult]: ...

    def close(self) -> None: ...


def _check_keys(tasks: Sequence[Task]) -> None:
    seen: set[Key] = set()
    for t in tasks:
        if t.key in seen:
            raise ValueError(f"two tasks have the key {t.key!r}; keys must be unique")
        seen.add(t.key)


def _sorted(results: Mapping[Key, TaskResult]) -> list[TaskResult]:
    return [results[k] for k in sorted(results, key=sort_key)]


# ---- progress --------------------------------------------------------------------------------


class _NoBar:
    def update(self, n: int = 1) -> None: ...


@contextmanager
def progress(total: int, desc: str = "", enabled: bool | None = None) -> Iterator[Any]:
    """A tqdm bar on stderr when it is a terminal (or ``enabled``) and tqdm is installed."""
    show = sys.stderr.isatty() if enabled is None else enabled
    if show:
        try:
            from tqdm import tqdm
        except ImportError:
            show = False
    if not show:
        yield _NoBar()
        return
    with tqdm(total=total, desc=desc or None, file=sys.stderr, leave=False) as bar:
        yield bar


# ---- local processes -------------------------------------------------------------------------


class LocalExecutor:
    """Tasks in local processes (``concurrent.futures``), retried on error or crash."""

    name = "local"

    def __init__(self, workers: int | None = None, retries: int = 2,
                 show_progress: bool | None = None) -> None:
        self.workers = (os.cpu_count() or 1) if workers is None else workers
        if self.workers < 0 or retries < 0:
            raise ValueError("workers and retries must be >= 0")
        self.retries = retries
        self.show_progress = show_progress
        self._context = multiprocessing.get_context("spawn")
        self._pool: cf.ProcessPoolExecutor | None = None

    def describe(self) -> dict[str, Any]:
        return {"executor": self.name, "workers": self.workers, "retries": self.retries}

    def _fresh_pool(self, workers: int) -> cf.ProcessPoolExecutor:
        return cf.ProcessPoolExecutor(max_workers=workers, mp_context=self._context)

    def map(self, tasks: Sequence[Task], desc: str = "") -> list[TaskResult]:
        _check_keys(tasks)
        state = _Attempts(self.retries)
        with progress(len(tasks), desc, self.show_progress) as bar:
            if self.workers == 0:
                for task in tasks:
                    while not state.settle(task, *run_task(task)):
                        pass
                    bar.update()
            else:
                self._map_pool(list(tasks), state, bar)
        return _sorted(state.results)

    def _map_pool(self, pending: list[Task], state: _Attempts, bar: Any) -> None:
        pending.reverse()  # pop() from the end takes tasks in the order given
        while pending:
            pool = self._pool = self._pool or self._fresh_pool(self.workers)
            running: dict[cf.Future, Task] = {}
            broken = False
            while (pending or running) and not broken:
                while pending and len(running) < self.workers:
                    task = pending.pop()
                    running[pool.submit(run_task, task)] = task
                done, _ = cf.wait(running, return_when=cf.FIRST_COMPLETED)
                for future in done:
                    try:
                        outcome = future.result()
                    except BrokenProcessPool:
                        broken = True
                        continue
                    task = running.pop(future)
                    if state.settle(task, *outcome):
                        bar.update()
                    else:
                        pending.append(task)
            if broken:
                pool.shutdown(wait=True, cancel_futures=True)
                self._pool = None
                self._recover(list(running.values()), state, bar)

    def _recover(self, suspects: list[Task], state: _Attempts, bar: Any) -> None:
        """Rerun each task that was running when a process died, alone, until it settles."""
        for task in sorted(suspects, key=lambda t: sort_key(t.key)):
            settled = False
            while not settled:
                with self._fresh_pool(1) as solo:
                    try:
                        outcome = solo.submit(run_task, task).result()
                    except BrokenProcessPool as e:
                        outcome = ("crash", f"worker process died: {e}", "")
                settled = state.settle(task, *outcome)
            bar.update()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Attempts:
    """Counts attempts per task and decides: settled (ok, or out of retries) or retry."""

    def __init__(self, retries: int) -> None:
        self.retries = retries
        self.count: dict[Key, int] = {}
        self.results: dict[Key, TaskResult] = {}

    def settle(self, task: Task, status: str, value: Any, worker: str) -> bool:
        n = self.count[task.key] = self.count.get(task.key, 0) + 1
        if status == "ok":
            self.results[task.key] = TaskResult(task.key, "ok", value, "", n, worker)
            return True
        if n <= self.retries:
            return False
        self.results[task.key] = TaskResult(task.key, "failed", None, str(value), n, worker)
        return True


# ---- Dask ------------------------------------------------------------------------------------


class DaskExecutor:
    """Tasks on a Dask ``distributed`` cluster (an address, or a local cluster for tests)."""

    name = "dask"

    def __init__(self, scheduler: str | None = None, workers: int = 2, retries: int = 2,
                 show_progress: bool | None = None) -> None:
        try:
            from distributed import Client, LocalCluster
        except ImportError as e:
            raise ImportError("the Dask executor needs dask[distributed]: "
                              "pip install 'accy[dist]'") from e
        self.retries = retries
        self.show_progress = show_progress
        self.scheduler = scheduler
        self._cluster = None
        if scheduler is None:
            import dask

            # one task per worker process at a time, so a crash is charged to its own task
            with dask.config.set({"distributed.scheduler.worker-saturation": 1.0}):
                self._cluster = LocalCluster(n_workers=workers, threads_per_worker=1,
                                             processes=True, dashboard_address=":0")
            self.client = Client(self._cluster)
        else:
            self.client = Client(scheduler)

    def describe(self) -> dict[str, Any]:
        info = self.client.scheduler_info()
        return {"executor": self.name, "scheduler": self.scheduler or "local",
                "workers": len(info.get("workers", {})), "retries": self.retries}

    def map(self, tasks: Sequence[Task], desc: str = "") -> list[TaskResult]:
        from distributed import as_completed

        _check_keys(tasks)
        state = _Attempts(self.retries)
        stamp = f"{time.time_ns():x}"
        tries: dict[Key, int] = {}

        def submit(task: Task) -> Any:
            n = tries[task.key] = tries.get(task.key, 0) + 1
            name = "accy-" + "-".join(map(str, task.key)) + f"-{stamp}-{n}"
            future = self.client.submit(run_task, task, key=name, pure=False)
            owner[future.key] = task
            return future

        owner: dict[str, Task] = {}
        with progress(len(tasks), desc, self.show_progress) as bar:
            pending = as_completed([submit(t) for t in tasks])
            for future in pending:
                task = owner[future.key]
                try:
                    outcome = future.result()
                except Exception as e:  # noqa: BLE001 -- KilledWorker, lost worker, cancelled
                    outcome = ("crash", f"worker lost: {type(e).__name__}: {e}", "")
                if state.settle(task, *outcome):
                    bar.update()
                else:
                    pending.add(submit(task))
                future.release()
        return _sorted(state.results)

    def close(self) -> None:
        self.client.close()
        if self._cluster is not None:
            self._cluster.close()

    def __enter__(self) -> DaskExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make_executor(kind: str = "local", *, workers: int | None = None, retries: int = 2,
                  scheduler: str | None = None, show_progress: bool | None = None
                  ) -> LocalExecutor | DaskExecutor:
    """``local`` (processes) or ``dask`` (``scheduler`` address, or a local cluster)."""
    if kind == "local":
        return LocalExecutor(workers, retries, show_progress)
    if kind == "dask":
        return DaskExecutor(scheduler, workers or 2, retries, show_progress)
    raise ValueError(f"unknown executor {kind!r}; valid: local, dask")
