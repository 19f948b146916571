"""What every experiment shares: the sweep options, running tasks, the result document.

A result document (``write_results`` turns it into ``<experiment>.json`` and ``.csv``)::

    {"experiment": "ablation", "suite": "ci", "seeds": [0], "options": {...},
     "executor": {"executor": "local", "workers": 2, "retries": 2, "timeout": None},
     "provenance": {"versions": ..., "device": ..., "git_commit": ..., "machine": ...,
                    "timestamp": ..., "command": [...]},
     "rows": [...],          # one per task that succeeded, sorted by task key
     "failed": [...],        # one per task not ok: failed, crashed or timeout (key, status,
                             # params, error, attempts, worker; see executor.TaskResult)
     "summary": {...}}       # the experiment's own summary of the rows

With ``SweepOptions.journal`` set (``accy experiment`` sets ``<out>/<experiment>.journal.jsonl``)
every task is appended to that journal as it settles, and tasks the journal already holds as
``ok`` (same function and parameters) are not run again: how ``--resume`` continues a killed
sweep (:mod:`accy.experiments.journal`).

Rows carry their own provenance (the worker's versions, device, commit and time), since on
a cluster each may come from another machine.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from accy.experiments import executor as executors
from accy.experiments import records
from accy.experiments.executor import Executor, Task, TaskResult
from accy.experiments.journal import Journal

__all__ = ["DETERMINISTIC_EXCLUDE", "SweepOptions", "deterministic", "executor_for",
           "run_tasks"]

DETERMINISTIC_EXCLUDE = ("measured", "provenance")
"""Row fields that vary run to run (times) or machine to machine (provenance)."""


@dataclass
class SweepOptions:
    """Options every experiment takes (the CLI's common flags)."""

    suite: str = "ci"
    programs: tuple[str, ...] | None = None  # None: the whole suite
    seeds: tuple[int, ...] = (0,)
    device: str | None = None  # OpenCL selector; None: ACCY_DEVICE or PoCL
    repeats: int = 5  # timed calls per measurement (after one warm-up call)
    run: bool = True  # build and run kernels (False: compile-side fields only)
    executor: str = "local"  # local | dask
    workers: int | None = None  # local: processes (0: in this process); dask: local cluster
    retries: int = 2  # of a task that raised or whose worker died
    timeout: float | None = None  # seconds a task may run before it is killed; None: no limit
    scheduler: str | None = None  # dask scheduler address; None: a local cluster
    show_progress: bool | None = None  # None: when stderr is a terminal
    extra: dict[str, Any] = field(default_factory=dict)
    dask_host: str = executors.LOCALHOST  # where a local Dask cluster listens
    journal: str | None = None  # task journal file (finished tasks are not run again)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        del out["journal"]  # where the run kept its journal is not an option of the result
        out["programs"] = list(self.programs) if self.programs else None
        out["seeds"] = list(self.seeds)
        return out


def executor_for(options: SweepOptions) -> Executor:
    """The executor ``options`` ask for (kind, workers, retries, timeout, scheduler)."""
    return executors.make_executor(
        options.executor, workers=options.workers, retries=options.retries,
        scheduler=options.scheduler, show_progress=options.show_progress,
        timeout=options.timeout, host=options.dask_host)


def deterministic(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` without the fields that vary between runs and machines."""
    return {k: v for k, v in row.items() if k not in DETERMINISTIC_EXCLUDE}


def run_tasks(experiment: str, tasks: Sequence[Task], options: SweepOptions,
              executor: Executor | None = None, desc: str = "",
              extra_versions: Sequence[str] = (), device: bool = True) -> dict[str, Any]:
    """Run ``tasks`` on ``executor`` (made from ``options`` when None, and closed after) and
    return the result document without its summary."""
    own = executor is None
    journal = Journal(options.journal) if options.journal else None
    done: list[TaskResult] = []
    todo = list(tasks)
    if journal is not None:
        found = {t.key: journal.finished(t) for t in todo}
        done = [r for r in found.values() if r is not None]
        todo = [t for t in todo if found[t.key] is None]
    ex = executor or executor_for(options)
    try:
        results = ex.map(todo, desc or experiment,
                         on_result=journal.record if journal is not None else None)
        described = ex.describe() if hasattr(ex, "describe") else {"executor": ex.name}
    finally:
        if own:
            ex.close()
        if journal is not None:
            journal.close()
    results = sorted([*done, *results], key=lambda r: executors.sort_key(r.key))
    return {
        "experiment": experiment,
        "suite": options.suite,
        "seeds": list(options.seeds),
        "options": options.to_dict(),
        "executor": described,
        "provenance": records.provenance(options.device if device else False, extra_versions,
                                         command=sys.argv),
        "rows": [r.value for r in results if r.ok],
        "failed": [r.failure() for r in results if not r.ok],
    }
