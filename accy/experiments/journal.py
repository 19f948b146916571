"""The task journal: a sweep's finished tasks, persisted as they finish.

``<out>/<experiment>.journal.jsonl`` holds one JSON line per settled task (key, function,
parameters, status, value or error, attempts, worker), appended, flushed and fsynced the
moment the task settles. A sweep killed half-way (kill -9, a lost machine, Ctrl-C) keeps
every task it finished; ``accy experiment ... --resume`` reads the journal and runs only the
tasks without an ``ok`` line whose function and parameters equal the task's (a task whose
options changed is run again, and so is one that failed, crashed or timed out).

Appending is not atomic the way :func:`accy.experiments.records.atomic_open` is: a process
killed mid-line leaves a torn last line, which :func:`read_journal` skips (that task is run
again). Lines are short enough that this is the only damage a kill can do.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from accy.experiments.executor import Key, Task, TaskResult

__all__ = ["Journal", "entries_by_key", "journal_path", "read_journal"]


def journal_path(out_dir: str | Path, experiment: str) -> Path:
    return Path(out_dir) / f"{experiment}.journal.jsonl"


def _plain(x: Any) -> Any:
    """``x`` as JSON gives it back (tuples as lists, numpy scalars as numbers), so a task's
    parameters compare equal to a journal line's."""
    return json.loads(json.dumps(x, default=_default))


def _default(x: Any) -> Any:
    if hasattr(x, "item") and callable(x.item):  # numpy scalars
        return x.item()
    if hasattr(x, "tolist") and callable(x.tolist):
        return x.tolist()
    return str(x)


def read_journal(path: str | Path) -> list[dict[str, Any]]:
    """The journal's lines, oldest first; a torn or damaged line is skipped."""
    p = Path(path)
    if not p.exists():
        return []
    out = []
    for line in p.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a kill: its task runs again
        if isinstance(entry, dict) and "key" in entry and "status" in entry:
            out.append(entry)
    return out


class Journal:
    """Appends settled tasks to a journal file; knows which tasks are already done."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._fh: TextIO | None = None
        self._done: dict[Key, dict[str, Any]] = {}
        for entry in read_journal(self.path):
            if entry["status"] == "ok":
                self._done[tuple(entry["key"])] = entry

    def finished(self, task: Task) -> TaskResult | None:
        """The journal's ``ok`` result of ``task`` (same function and parameters), or None."""
        entry = self._done.get(task.key)
        if entry is None or entry.get("fn") != task.fn or \
                entry.get("params") != _plain(dict(task.params)):
            return None
        return TaskResult(task.key, "ok", entry.get("value"), "", int(entry.get("attempts", 1)),
                          str(entry.get("worker", "")), task.params)

    def record(self, task: Task, result: TaskResult) -> None:
        """Append ``result`` (of ``task``) as one line and make it durable now."""
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, "a")  # noqa: SIM115 -- held open for the sweep
        entry = {"key": list(result.key), "fn": task.fn, "params": dict(task.params),
                 "status": result.status, "value": result.value, "error": result.error,
                 "attempts": result.attempts, "worker": result.worker}
        self._fh.write(json.dumps(entry, default=_default, separators=(",", ":")) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        if result.ok:
            self._done[result.key] = _plain(entry)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def entries_by_key(path: str | Path) -> Mapping[Key, list[dict[str, Any]]]:
    """Journal lines grouped by task key (tests and tools: was a task run twice?)."""
    out: dict[Key, list[dict[str, Any]]] = {}
    for entry in read_journal(path):
        out.setdefault(tuple(entry["key"]), []).append(entry)
    return out
