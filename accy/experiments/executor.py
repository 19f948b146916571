"""Running sweeps: one executor interface, local processes or a Dask cluster.

A sweep is a list of :class:`Task` s (programs x configurations x seeds): each names a
module-level function by ``"module:function"`` and its keyword arguments (plain data), so
any worker that can import accy can run it. ``executor.map(tasks)`` returns one
:class:`TaskResult` per task, **sorted by task key** -- the merge is deterministic whatever
the order in which tasks finish, on whichever worker.

Failures are never lost; every task ends in one of four statuses:

* ``ok``: the function returned;
* ``failed``: it raised, on every one of its ``1 + retries`` attempts (the last traceback is
  kept);
* ``crashed``: its worker process died under it (a segfault in a driver, ``os._exit``, the
  OOM killer) on every attempt;
* ``timeout``: it ran longer than ``timeout`` seconds (counted from its start on a worker,
  not from when it was queued) and its worker process was killed. A timeout is not retried:
  a hung configuration would hang again.

A task that is not ``ok`` is reported by :meth:`TaskResult.failure` with its key, status,
parameters (the configuration and seed it ran with), error, attempts and worker.

``map(tasks, on_result=f)`` calls ``f(task, result)`` in the calling process the moment each
task settles (the task journal of :mod:`accy.experiments.journal` persists them so).

``LocalExecutor`` (the default) runs tasks in ``workers`` processes of a pebble
``ProcessPool`` (spawned, so OpenCL and egglog state is never forked), one task per process
at a time. Pebble charges a dead process to the task it was running and starts a fresh one,
and kills the process of a task past its timeout. Pebble can lose a task whose process dies
before the pool has read that it started (noxdafox/pebble#153): each task notes its process
id as it starts, and a task whose process has been gone for ``lost_after_s`` while its
future is still pending is charged a crash here, and the pool replaced (the other running
tasks start again in the new one, uncharged). ``max_tasks`` replaces a worker process
after that many tasks (per-process state of a driver stays bounded: ``accy fuzz``'s
``--rounds-per-worker``). ``workers=0`` runs tasks in this process (no isolation and no
timeout: for debugging and profiling).

``DaskExecutor`` (:mod:`accy.experiments.dask_executor`) runs the same tasks on a Dask
cluster.

Progress bars (tqdm) are shown only when stderr is a terminal and tqdm is installed.
"""

from __future__ import annotations

import concurrent.futures as cf
import importlib
import itertools
import multiprocessing
import os
import platform
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pebble import ProcessExpired, ProcessPool

__all__ = [
    "LOCALHOST", "Executor", "LocalExecutor", "OnResult", "Task",
    "TaskResult", "exit_text", "make_executor", "probe", "progress", "run_task", "sort_key",
]

Key = tuple[str | int, ...]
Status = Literal["ok", "failed", "crashed", "timeout"]
LOCALHOST = "127.0.0.1"  # where a local Dask cluster listens unless asked otherwise


@dataclass(frozen=True)
class Task:
    """One unit of a sweep: ``fn`` (``"module:function"``) called with ``params``."""

    key: Key  # unique in the sweep; results are sorted by it
    fn: str
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TaskResult:
    """What became of a task: ``ok`` with the function's ``value``, or ``failed``,
    ``crashed`` or ``timeout`` with why (``error``)."""

    key: Key
    status: Status
    value: Any = None
    error: str = ""
    attempts: int = 1
    worker: str = ""
    params: Mapping[str, Any] = field(default_factory=dict)  # the task's

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def failure(self) -> dict[str, Any]:
        """The JSON-ready record of a task that is not ``ok``: what it ran (key and
        parameters: configuration, seed, ...) and what became of it."""
        return {"key": list(self.key), "status": self.status, "params": dict(self.params),
                "error": self.error, "attempts": self.attempts, "worker": self.worker}


OnResult = Callable[[Task, TaskResult], None]
"""Called in the calling process with each task and its result as the task settles."""


def sort_key(key: Key) -> tuple[tuple[int, Any], ...]:
    """A total order on keys mixing ints and strings (ints first at a position)."""
    return tuple((0, k) if isinstance(k, int) else (1, str(k)) for k in key)


def _resolve(fn: str) -> Callable[..., Any]:
    module, _, name = fn.partition(":")
    if not name:
        raise ValueError(f"task function {fn!r} must be 'module:function'")
    return getattr(importlib.import_module(module), name)


def _worker_name(pid: int | None = None) -> str:
    return f"{platform.node()}:{os.getpid() if pid is None else pid}"


def _run_noted(task: Task, note: str) -> tuple[str, Any, str]:
    """:func:`run_task`, having written this process's id to the file ``note`` (the pool's
    watchdog looks for it to tell a task the pool lost)."""
    with open(note, "w") as f:
        f.write(str(os.getpid()))
    return run_task(task)


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (reaped, or a zombie waiting to be)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return False


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
    exist yet (creating it first), so a retry succeeds. A ``sleep`` past the executor's
    timeout makes a hung task.
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

    def map(self, tasks: Sequence[Task], desc: str = "",
            on_result: OnResult | None = None) -> list[TaskResult]: ...

    def close(self) -> None: ...


def _check_options(retries: int, timeout: float | None) -> None:
    if retries < 0:
        raise ValueError(f"retries must be >= 0, got {retries}")
    if timeout is not None and not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout}")


def exit_text(exitcode: int | None) -> str:
    """How a process ended: ``exit code 3`` or ``killed by SIGKILL``."""
    if exitcode is not None and exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


def _timeout_error(timeout: float) -> str:
    return f"timed out after {timeout:g} s; its worker process was killed and replaced"


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


WATCH_S = 1.0  # how often a running map looks for tasks the pool lost


class LocalExecutor:
    """Tasks in local processes (a pebble ``ProcessPool``), retried on error or crash,
    killed past ``timeout`` seconds (None: no limit)."""

    name = "local"
    lost_after_s = 5.0  # a pending task whose process has been gone this long was lost

    def __init__(self, workers: int | None = None, retries: int = 2,
                 show_progress: bool | None = None, timeout: float | None = None,
                 max_tasks: int = 0, initializer: Callable[[], None] | None = None) -> None:
        self.workers = (os.cpu_count() or 1) if workers is None else workers
        if self.workers < 0:
            raise ValueError(f"workers must be >= 0, got {self.workers}")
        _check_options(retries, timeout)
        if max_tasks < 0:
            raise ValueError(f"max_tasks must be >= 0 (0: no limit), got {max_tasks}")
        self.max_tasks = max_tasks  # tasks per worker process before it is replaced
        self.initializer = initializer  # run in each worker process as it starts
        if timeout is not None and self.workers == 0:
            raise ValueError("a timeout needs worker processes (workers >= 1): a task running "
                             "in this process cannot be killed")
        self.retries = retries
        self.timeout = timeout
        self.show_progress = show_progress
        self._pool: ProcessPool | None = None

    def describe(self) -> dict[str, Any]:
        return {"executor": self.name, "workers": self.workers, "retries": self.retries,
                "timeout": self.timeout}

    def map(self, tasks: Sequence[Task], desc: str = "",
            on_result: OnResult | None = None) -> list[TaskResult]:
        _check_keys(tasks)
        state = _Attempts(self.retries, on_result)
        with progress(len(tasks), desc, self.show_progress) as bar:
            if self.workers == 0:
                for task in tasks:
                    while not state.settle(task, *run_task(task)):
                        pass
                    bar.update()
            else:
                self._map_pool(tasks, state, bar)
        return _sorted(state.results)

    def _map_pool(self, tasks: Sequence[Task], state: _Attempts, bar: Any) -> None:
        with tempfile.TemporaryDirectory(prefix="accy-tasks-") as notes:
            self._watch_pool(tasks, state, bar, notes)

    def _start_pool(self) -> ProcessPool:
        if self._pool is None:
            self._pool = ProcessPool(max_workers=self.workers, max_tasks=self.max_tasks,
                                     initializer=self.initializer,
                                     context=multiprocessing.get_context("spawn"))
        return self._pool

    def _stop_pool(self) -> None:
        if self._pool is not None:
            self._pool.stop()
            self._pool.join()
            self._pool = None

    def _watch_pool(self, tasks: Sequence[Task], state: _Attempts, bar: Any,
                    notes: str) -> None:
        submitted = itertools.count()
        note_of: dict[cf.Future, str] = {}
        gone_since: dict[cf.Future, float] = {}

        def submit(task: Task) -> cf.Future:
            note = os.path.join(notes, str(next(submitted)))
            future = self._start_pool().schedule(_run_noted, (task, note), timeout=self.timeout)
            note_of[future] = note
            return future

        def settle(future: cf.Future, outcome: tuple[str, Any, str]) -> None:
            task = running.pop(future)
            note_of.pop(future)
            gone_since.pop(future, None)
            if state.settle(task, *outcome):
                bar.update()
            else:
                running[submit(task)] = task

        running = {submit(task): task for task in tasks}
        try:
            while running:
                done, _ = cf.wait(running, timeout=WATCH_S, return_when=cf.FIRST_COMPLETED)
                for future in done:
                    settle(future, self._outcome(future))
                lost = self._lost(running, note_of, gone_since)
                if lost:  # the pool's books are wrong: a new pool, the others start again
                    self._stop_pool()
                    others = [f for f in running if f not in dict(lost)]
                    for future, pid in lost:
                        settle(future, ("crash", "worker process died and the pool lost its "
                                        "task", _worker_name(pid)))
                    for future in others:
                        note_of.pop(future)
                        gone_since.pop(future, None)
                        task = running.pop(future)
                        running[submit(task)] = task
        except BaseException:  # Ctrl-C and the like: kill the workers rather than wait
            self._stop_pool()
            raise

    def _lost(self, running: Mapping[cf.Future, Task], note_of: Mapping[cf.Future, str],
              gone_since: dict[cf.Future, float]) -> list[tuple[cf.Future, int]]:
        """The pending futures whose worker process has been gone for ``lost_after_s``."""
        now, lost = time.monotonic(), []
        for future in running:
            try:
                with open(note_of[future]) as f:
                    pid = int(f.read())
            except (OSError, ValueError):
                continue  # not started yet (or its note half-written)
            if future.done() or not _gone(pid):
                gone_since.pop(future, None)
            elif now - gone_since.setdefault(future, now) >= self.lost_after_s:
                lost.append((future, pid))
        return lost

    def _outcome(self, future: cf.Future) -> tuple[str, Any, str]:
        try:
            return future.result()
        except TimeoutError:
            return "timeout", _timeout_error(self.timeout or 0), ""
        except ProcessExpired as e:
            return ("crash", f"worker process died ({exit_text(e.exitcode)})",
                    _worker_name(e.pid))
        except Exception as e:  # noqa: BLE001 -- e.g. a value that does not pickle
            return "error", f"{type(e).__name__}: {e}", ""

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool.join()
            self._pool = None

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Attempts:
    """Counts attempts per task and decides: settled (ok, timed out, or out of retries) or
    retry. ``settle`` takes an outcome: ``ok`` with the value, or ``error``, ``crash`` or
    ``timeout`` with a message."""

    STATUS: Mapping[str, Status] = {"ok": "ok", "error": "failed", "crash": "crashed",
                                    "timeout": "timeout"}

    def __init__(self, retries: int, on_result: OnResult | None = None) -> None:
        self.retries = retries
        self.on_result = on_result
        self.count: dict[Key, int] = {}
        self.results: dict[Key, TaskResult] = {}

    def settle(self, task: Task, outcome: str, value: Any, worker: str) -> bool:
        n = self.count[task.key] = self.count.get(task.key, 0) + 1
        status = self.STATUS[outcome]
        if status == "ok":
            result = TaskResult(task.key, "ok", value, "", n, worker, task.params)
        elif status != "timeout" and n <= self.retries:
            return False
        else:
            result = TaskResult(task.key, status, None, str(value), n, worker, task.params)
        self.results[task.key] = result
        if self.on_result is not None:
            self.on_result(task, result)
        return True


def make_executor(kind: str = "local", *, workers: int | None = None, retries: int = 2,
                  scheduler: str | None = None, show_progress: bool | None = None,
                  timeout: float | None = None, max_tasks: int = 0,
                  host: str = LOCALHOST) -> Executor:
    """``local`` (processes) or ``dask`` (``scheduler`` address, or a local cluster listening
    on ``host``); tasks are retried ``retries`` times on error or crash and killed past
    ``timeout`` seconds; a worker is replaced after ``max_tasks`` tasks (0: never)."""
    if kind == "local":
        return LocalExecutor(workers, retries, show_progress, timeout, max_tasks)
    if kind == "dask":
        from accy.experiments.dask_executor import DaskExecutor

        return DaskExecutor(scheduler, workers or 2, retries, show_progress, timeout,
                            max_tasks, host)
    raise ValueError(f"unknown executor {kind!r}; valid: local, dask")
