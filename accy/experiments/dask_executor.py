"""Sweeps on a Dask cluster: the executor interface of :mod:`accy.experiments.executor`.

``DaskExecutor`` submits the same tasks to a ``distributed`` cluster: ``scheduler`` is the
address of a running one (``tcp://host:8786``), or None for a local cluster of ``workers``
processes (tests). Retries are this module's, not Dask's ``submit(retries=)``, which covers
only exceptions: a worker that dies is rescheduled by Dask until the scheduler's
``distributed.scheduler.allowed-failures`` is exhausted (``KilledWorker``), which counts as
one crashed attempt here. A task past its timeout is cancelled and its worker restarted
through its nanny (workers started by ``dask worker`` have one). Its clock starts when the
scheduler hands it to a worker, so give the scheduler ``distributed.scheduler.
worker-saturation: 1.0`` (the local cluster's setting): then a worker holds only the task it
runs, and a crash or timeout is charged to that task alone. ``max_tasks`` restarts a worker
(through its nanny) once it has run that many tasks, when the ``map`` that ran them ends.

The local cluster (``scheduler=None``) listens on ``host`` only -- scheduler, workers and
dashboard -- which is ``127.0.0.1`` unless asked otherwise (``accy experiment --dask-host``):
a cluster runs whatever function it is sent, so it must not be reachable from the network by
default.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from accy.experiments.executor import (
    LOCALHOST,
    Key,
    OnResult,
    Task,
    TaskResult,
    _Attempts,
    _check_keys,
    _check_options,
    _sorted,
    _timeout_error,
    progress,
    run_task,
)

__all__ = ["DaskExecutor"]


def _run_task_on_dask(task: Task) -> tuple[str, Any, str, str]:
    """:func:`run_task` and the address of the Dask worker it ran on (for recycling)."""
    from distributed import get_worker

    return (*run_task(task), get_worker().address)


def _bracketed(host: str) -> str:
    """An IPv6 literal in brackets, as an address with a port needs it."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


class DaskExecutor:
    """Tasks on a Dask ``distributed`` cluster (an address, or a local cluster for tests),
    retried on error or crash, cancelled and their worker restarted past ``timeout``
    seconds (None: no limit)."""

    name = "dask"
    poll_s = 0.2  # how often running tasks are checked against the timeout
    # how long a worker's restart may take before the scheduler drops it instead; a nanny that
    # restarted its worker after a crash moments ago can take distributed's whole default
    # (120 s) to kill the next one
    restart_s = 30.0

    def __init__(self, scheduler: str | None = None, workers: int = 2, retries: int = 2,
                 show_progress: bool | None = None, timeout: float | None = None,
                 max_tasks: int = 0, host: str = LOCALHOST) -> None:
        try:
            from distributed import Client, LocalCluster
        except ImportError as e:
            raise ImportError("the Dask executor needs dask[distributed]: "
                              "pip install 'accy[dist]'") from e
        _check_options(retries, timeout)
        if max_tasks < 0:
            raise ValueError(f"max_tasks must be >= 0 (0: no limit), got {max_tasks}")
        self.retries = retries
        self.timeout = timeout
        self.show_progress = show_progress
        self.scheduler = scheduler
        self.max_tasks = max_tasks
        self._ran: dict[str, int] = {}  # worker address -> tasks run since it (re)started
        self._cluster = None
        if scheduler is None:
            import dask

            # one task per worker process at a time, so a crash is charged to its own task
            # host binds the scheduler and the workers (and their nannies); the dashboard
            # needs its own, since ":0" alone binds it to every interface
            with dask.config.set({"distributed.scheduler.worker-saturation": 1.0}):
                self._cluster = LocalCluster(n_workers=workers, threads_per_worker=1,
                                             processes=True, host=host,
                                             dashboard_address=f"{_bracketed(host)}:0")
            self.client = Client(self._cluster)
        else:
            self.client = Client(scheduler)

    def describe(self) -> dict[str, Any]:
        info = self.client.scheduler_info()
        return {"executor": self.name, "scheduler": self.scheduler or "local",
                "workers": len(info.get("workers", {})), "retries": self.retries,
                "timeout": self.timeout}

    def map(self, tasks: Sequence[Task], desc: str = "",
            on_result: OnResult | None = None) -> list[TaskResult]:
        from distributed import as_completed

        _check_keys(tasks)
        state = _Attempts(self.retries, on_result)
        stamp = f"{time.time_ns():x}"
        tries: dict[Key, int] = {}
        ran: list[str] = []  # the Dask worker address of each task that returned
        live: dict[str, tuple[Task, Any]] = {}  # Dask key -> (task, future) not settled yet
        started: dict[str, tuple[float, str]] = {}  # Dask key -> (start, worker address)

        def submit(task: Task) -> Any:
            n = tries[task.key] = tries.get(task.key, 0) + 1
            name = "accy-" + "-".join(map(str, task.key)) + f"-{stamp}-{n}"
            future = self.client.submit(_run_task_on_dask, task, key=name, pure=False)
            live[future.key] = (task, future)
            return future

        with progress(len(tasks), desc, self.show_progress) as bar:
            pending = as_completed([submit(t) for t in tasks])

            def settle(task: Task, outcome: tuple[str, Any, str]) -> None:
                if state.settle(task, *outcome):
                    bar.update()
                else:
                    pending.add(submit(task))

            while not pending.is_empty():
                batch = pending.next_batch(block=self.timeout is None)
                for future in batch:
                    if future.key not in live:  # cancelled at its timeout, settled then
                        continue
                    task, _ = live.pop(future.key)
                    try:
                        *outcome, address = future.result()
                        ran.append(address)
                    except Exception as e:  # noqa: BLE001 -- KilledWorker, lost worker
                        outcome = ("crash", f"worker lost: {type(e).__name__}: {e}", "")
                    settle(task, outcome)
                    future.release()
                if self.timeout is not None:
                    for key, worker in self._expired(live, started, self.timeout):
                        task, future = live.pop(key)
                        future.cancel()
                        restart = self._restart(worker)
                        error = _timeout_error(self.timeout)
                        if not restart.startswith("OK"):  # no nanny: the worker stays hung
                            error += f" (restarting it: {restart})"
                        settle(task, ("timeout", error, worker))
                    if not batch:
                        time.sleep(self.poll_s)
        self._recycle(ran)
        return _sorted(state.results)

    def _restart(self, worker: str) -> str:
        """Restart ``worker`` through its nanny: ``OK``, or why not. A worker that left the
        cluster meanwhile (it died, or its nanny restarted it) needs no restart: distributed
        then raises ``KeyError`` from inside ``restart_workers``, a race this absorbs."""
        self._ran.pop(worker, None)
        try:
            out = self.client.restart_workers([worker], timeout=self.restart_s,
                                              raise_for_error=False)
        except KeyError:
            return "OK (it had already left the cluster)"
        except (ValueError, OSError, TimeoutError) as e:  # no nanny, scheduler unreachable
            return f"{type(e).__name__}: {e}"
        return str(out.get(worker, "OK (it had already left the cluster)"))

    def _recycle(self, ran: Iterable[str]) -> None:
        """Restart the workers that have run ``max_tasks`` tasks (0: never)."""
        if not self.max_tasks:
            return
        for address in ran:  # (a timed-out task's worker was restarted already)
            self._ran[address] = self._ran.get(address, 0) + 1
        for worker, n in list(self._ran.items()):
            if n >= self.max_tasks:
                self._restart(worker)

    def _expired(self, live: Mapping[str, Any], started: dict[str, tuple[float, str]],
                 timeout: float) -> list[tuple[str, str]]:
        """Keys of ``live`` running longer than ``timeout``, with their workers. A task's
        clock starts when it is first seen processing on a worker."""
        now = time.monotonic()
        for worker, keys in self.client.processing().items():
            for key in keys:
                if key in live:
                    started.setdefault(key, (now, worker))
        return [(key, worker) for key, (t0, worker) in started.items()
                if key in live and now - t0 > timeout]

    def close(self) -> None:
        self.client.close()
        if self._cluster is not None:
            self._cluster.close()

    def __enter__(self) -> DaskExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
