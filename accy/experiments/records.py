"""Result records: provenance (versions, device, commit, machine, time) and JSON/CSV files.

Every experiment row carries what reproducing it needs: the program's name and fingerprint,
the pipeline text, the seed, per-stage fingerprints (from the experiment), and a
``provenance`` block made here -- versions of accy, egglog, numpy, pyopencl and opt_einsum
(plus any optional package the experiment used), the OpenCL device and driver, the git commit
(``+dirty`` when the working tree differs from it), the machine and a UTC timestamp. The
scripts in ``experiments/`` use the same helpers.

Files: ``write_results(result, out_dir)`` writes ``<experiment>.json`` (the whole result:
rows, one line each; failures, summary, provenance) and ``<experiment>.csv`` (one line per
row, nested fields flattened to dotted column names, so a spreadsheet or pandas reads it).

Every result file accy writes (JSON, CSV, Markdown, figures, fuzz records and summaries) goes
through :func:`atomic_open` / :func:`atomic_write` (which use ``accy.files.atomic_write``):
the bytes go to a hidden temporary file of an unpredictable name in the same folder
(``.<name>.<random>.tmp``), are fsynced, and the file is then renamed over its target
(``os.replace``). A process killed mid-write or a full disk leaves the
earlier file intact (and at worst a hidden ``.tmp`` file), never half a result.
:func:`read_results` names a damaged file (:class:`DamagedResultError`) instead of raising
a JSON traceback.
"""

from __future__ import annotations

import csv
import datetime
import functools
import importlib
import io
import json
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from accy import files
from accy.errors import AccyError

__all__ = [
    "REQUIRED_VERSIONS", "DamagedResultError", "ResultsExistError", "atomic_open",
    "atomic_write", "check_fresh", "device_record", "flatten", "git_commit", "machine", "median_ms",
    "provenance", "read_results", "stage_fingerprints", "timestamp", "versions",
    "write_json", "write_results",
]


class DamagedResultError(AccyError):
    """A result file that is not valid JSON or not a result document; names the file."""


class ResultsExistError(AccyError):
    """An output would replace an earlier run's results; names the file and the flags."""

REQUIRED_VERSIONS = ("accy", "egglog", "numpy", "pyopencl", "opt_einsum", "python")
"""Packages every record names the version of."""

_DIST_NAMES = {"opt_einsum": "opt-einsum", "dask": "dask", "distributed": "distributed"}


def _version(module: str) -> str | None:
    """The installed version of ``module`` (None when it is not installed)."""
    if module == "python":
        return platform.python_version()
    from importlib import metadata

    try:
        return metadata.version(_DIST_NAMES.get(module, module))
    except metadata.PackageNotFoundError:
        pass
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return None
    return str(getattr(mod, "__version__", getattr(mod, "VERSION_TEXT", "unknown")))


@functools.cache
def versions(extra: tuple[str, ...] = ()) -> dict[str, str | None]:
    """Versions of :data:`REQUIRED_VERSIONS` and of ``extra`` packages (None: not installed)."""
    return {name: _version(name) for name in (*REQUIRED_VERSIONS, *extra)}


COMMIT_ENV = "ACCY_GIT_COMMIT"
"""Names the commit where the code runs outside its git checkout (a copied tree)."""


@functools.cache
def git_commit(where: str | None = None) -> str:
    """``ACCY_GIT_COMMIT`` when set (a copy of a checkout run elsewhere, whose ``.git`` may be
    stale or missing); else ``HEAD``'s commit of the repository holding ``where`` (default:
    this package), with ``+dirty`` when tracked or untracked files differ from it; else
    ``unknown``."""
    if os.environ.get(COMMIT_ENV):
        return os.environ[COMMIT_ENV]
    cwd = where or str(Path(__file__).resolve().parent)
    fallback = "unknown"
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              cwd=cwd, check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True,
                               cwd=cwd, check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return fallback
    return (head + ("+dirty" if dirty else "")) if head else fallback


def timestamp() -> str:
    """Now, UTC, ISO 8601 to the second."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


@functools.cache
def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; ``platform.processor()`` elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def machine() -> dict[str, Any]:
    """The host: CPU model, architecture, OS, CPU count, load average, host name."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"cpu": cpu_model(), "processor": platform.processor(),
            "machine": platform.machine(), "system": platform.platform(),
            "cpu_count": os.cpu_count(), "load": [round(x, 2) for x in load] if load else None,
            "host": platform.node()}


@functools.cache
def device_record(selector: str | None = None) -> dict[str, Any]:
    """The OpenCL device ``selector`` picks (``ACCY_DEVICE`` or PoCL by default): platform,
    name, driver and OpenCL versions; ``{"error": ...}`` when there is none."""
    from accy.errors import DeviceError

    try:
        from accy.backends.registry import get_backend

        info = get_backend().select_device(selector).info
    except DeviceError as e:
        return {"selector": selector, "error": str(e).splitlines()[0]}
    return {"selector": selector, "platform": info.platform, "name": info.name,
            "vendor": info.vendor, "driver": info.driver_version,
            "opencl": info.opencl_version, "key": info.key}


def provenance(device: str | None | bool = None, extra_versions: Sequence[str] = (),
               command: Sequence[str] | None = None) -> dict[str, Any]:
    """The provenance block of a record. ``device=False`` records no device (experiments that
    run nothing on OpenCL); otherwise the device of that selector."""
    out: dict[str, Any] = {
        "versions": versions(tuple(extra_versions)),
        "device": None if device is False else device_record(device or None),
        "git_commit": git_commit(),
        "machine": machine(),
        "timestamp": timestamp(),
    }
    if command is not None:
        out["command"] = list(command)
    return out


def command_line(argv: Sequence[str] | None) -> list[str]:
    """The command a record keeps: ``sys.argv`` where a script's ``main`` read it (``argv``
    None), else ``"main"`` and the ``argv`` it was called with."""
    return list(sys.argv) if argv is None else ["main", *argv]


def median_ms(samples_ns: Iterable[int | float]) -> float:
    """Median of nanosecond samples, in milliseconds."""
    return statistics.median(samples_ns) / 1e6


def stage_fingerprints(job: Any) -> dict[str, str]:
    """Stage name -> fingerprint of a :class:`~accy.job.PreparedJob`'s products."""
    return dict(job.stamps())


# ---- files -----------------------------------------------------------------------------------


@contextmanager
def atomic_open(path: str | Path, mode: str = "w", newline: str | None = None
                ) -> Iterator[IO[Any]]:
    """A file object (text for ``"w"``, bytes for ``"wb"``) whose contents, when the block
    ends without an exception, replace ``path`` at once (:func:`atomic_write`); on an
    exception ``path`` is untouched. Makes the folder."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes whole files: mode 'w' or 'wb', not {mode!r}")
    buffer: IO[Any] = io.StringIO(newline=newline) if mode == "w" else io.BytesIO()
    yield buffer
    atomic_write(path, buffer.getvalue())


def atomic_write(path: str | Path, data: str | bytes) -> Path:
    """Write ``data`` (text or bytes) to ``path`` atomically, readable by all like any result
    file (``accy.files.atomic_write``: a hidden temporary file of an unpredictable name,
    fsynced and renamed over ``path``); makes the folder."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    return files.atomic_write(target, data, mode=0o644)


def flatten(row: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as dotted keys; lists and tuples as JSON text (one CSV cell each)."""
    out: dict[str, Any] = {}
    for k, v in row.items():
        name = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, name + "."))
        elif isinstance(v, list | tuple):
            out[name] = json.dumps(v, sort_keys=True)
        else:
            out[name] = v
    return out


def _jsonable(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    if hasattr(x, "item") and callable(x.item):  # numpy scalars
        return x.item()
    return x


def _json_text(data: Mapping[str, Any]) -> str:
    """JSON with one line per row (compact files, readable diffs); the rest indented."""
    parts = [f"{json.dumps(k)}: {json.dumps(v, indent=1)}" for k, v in data.items()
             if k != "rows"]
    rows = ",\n".join(json.dumps(r, separators=(",", ":")) for r in data.get("rows", []))
    parts.append(f'"rows": [\n{rows}\n]')
    return "{\n" + ",\n".join(parts) + "\n}\n"


def write_results(result: Mapping[str, Any], out_dir: str | Path,
                  name: str | None = None) -> tuple[Path, Path]:
    """Write ``<name>.json`` (everything) and ``<name>.csv`` (the rows, flattened) into
    ``out_dir``; ``name`` defaults to the result's ``experiment``. Returns both paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = name or str(result["experiment"])
    data = _jsonable(result)
    json_path = atomic_write(out / f"{name}.json", _json_text(data))
    rows = [flatten(r) for r in data.get("rows", [])]
    columns: list[str] = []
    for r in rows:
        columns += [c for c in r if c not in columns]
    csv_path = out / f"{name}.csv"
    with atomic_open(csv_path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return json_path, csv_path


def write_json(result: Mapping[str, Any], path: str | Path, quiet: bool = False) -> Path:
    """Write a benchmark script's ``result`` to ``path`` as indented JSON (making its folder),
    and say where (``quiet``: not; a partial record rewritten as a run goes on)."""
    path = atomic_write(path, json.dumps(result, indent=2) + "\n")
    if not quiet:
        print(f"\nwrote {path}")
    return path


# the top-level keys `accy report` reads from a result document
REPORT_KEYS = ("experiment", "suite", "provenance", "rows", "summary")


def read_results(path: str | Path, required: Sequence[str] = ("experiment", "rows")
                 ) -> dict[str, Any]:
    """A result written by :func:`write_results` (the JSON file, or a folder and experiment
    given as ``folder/experiment``). A file that is not valid JSON, or not a result
    document (without one of the ``required`` keys), raises :class:`DamagedResultError`
    naming it (a missing one ``OSError``)."""
    p = Path(path)
    if p.suffix != ".json":
        p = p.with_suffix(".json")
    try:
        data = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DamagedResultError(f"{p} is damaged (not valid JSON: {e}); rerun the "
                                 "experiment (--resume keeps its finished tasks)") from None
    missing = [k for k in required if not isinstance(data, dict) or k not in data]
    if missing:
        raise DamagedResultError(f"{p} is not an accy result document (no "
                                 f"{', '.join(missing)})")
    return data


def check_fresh(paths: Iterable[str | Path]) -> None:
    """Raise :class:`ResultsExistError` naming the first of ``paths`` that exists: a run
    would replace an earlier run's results without ``--force`` (or ``--resume``)."""
    for p in map(Path, paths):
        if p.exists():
            raise ResultsExistError(
                f"{p} holds an earlier run's results; pass --force to replace them, or "
                "--resume to continue that run without redoing its finished tasks")
