"""What builds share: source digests, build statistics, error sites quoted from the source."""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from accy.errors import KernelBuildError

# Error locations in build logs: clang/PoCL "file:3:5: error" or "error: file:3:5: ...",
# NVIDIA "<kernel>:3:5: error:" and "<kernel>(3): error".
_LINE_COL = re.compile(r"(?:^|[\s'\"])(?:<[^<>\s]*>|[^\s:()<>'\"]+):(\d+):(\d+)")
_LINE_ONLY = re.compile(r"\((\d+)\)\s*:\s*(?:catastrophic\s+)?error", re.IGNORECASE)


def digest(source: str, options: tuple[str, ...]) -> str:
    return hashlib.sha256("\0".join((source, *options)).encode()).hexdigest()


@dataclass
class BuildStats:
    """What this runtime's builds cost: programs compiled from source (each batch counts one),
    programs loaded from the disk cache, binaries stored, and the wall time of each kind."""

    compiled: int = 0
    compiled_sources: int = 0  # kernel sources in the compiled programs
    compile_ns: int = 0
    loaded: int = 0  # from the disk cache
    loaded_sources: int = 0
    load_ns: int = 0
    stored: int = 0  # binaries written to the disk cache
    store_ns: int = 0  # asking the driver for binaries and writing them
    failed_batches: int = 0  # batches that failed and were built source by source

    def copy(self) -> BuildStats:
        return replace(self)

    def minus(self, before: BuildStats) -> BuildStats:
        """What happened since ``before`` (a :meth:`copy` taken earlier)."""
        return BuildStats(**{k: v - getattr(before, k) for k, v in self.__dict__.items()})


def error_sites(log: str, source: str) -> str:
    """Each error location the log names, quoted from ``source`` with a caret under the column."""
    lines = source.splitlines()
    sites: list[tuple[int, int | None]] = []
    for log_line in log.splitlines():
        if "error" not in log_line.lower():
            continue
        found: list[tuple[int, int | None]] = [
            (int(m[1]), int(m[2])) for m in _LINE_COL.finditer(log_line)
        ]
        found += [(int(m[1]), None) for m in _LINE_ONLY.finditer(log_line)]
        sites += [site for site in found if site not in sites]
    quoted: list[str] = []
    for line_no, col in sites[:20]:
        if not 1 <= line_no <= len(lines):
            continue
        text = lines[line_no - 1]
        where = f"line {line_no}" + (f", column {col}" if col is not None else "")
        quoted.append(f"  at {where}:\n    {line_no:>4} | {text}")
        if col is not None:
            pad = "".join("\t" if ch == "\t" else " " for ch in text[: max(col - 1, 0)])
            quoted.append(f"         | {pad}^")
    return "\n".join(quoted)


def build_error(device_key: str, source: str, options: tuple[str, ...], log: str
                ) -> KernelBuildError:
    """The error of a failed build: device, options, the error sites quoted, the whole log."""
    parts = [f"OpenCL build failed on {device_key}"]
    if options:
        parts.append(f"options: {' '.join(options)}")
    sites = error_sites(log, source)
    if sites:
        parts.append(f"error sites:\n{sites}")
    parts.append("build log:\n" + "\n".join(f"  {line}" for line in log.splitlines()))
    return KernelBuildError("\n".join(parts))


class ProgramCache(OrderedDict):
    """(device key, source digest) -> built program, least recently used first. Sources built
    together in one batch map to one program, so the bound counts distinct programs. Callers
    hold the runtime's lock."""

    def __init__(self) -> None:
        super().__init__()
        self._keys: dict[int, int] = {}  # id(program) -> how many keys refer to it

    def remember(self, keys: Sequence[tuple[str, str]], program: Any, limit: int) -> None:
        """Cache ``program`` (only ever a fully built one) under ``keys``, evicting the least
        recently used programs beyond ``limit`` distinct ones."""
        for key in keys:
            old = self.pop(key, None)
            if old is not None:
                self._forget(old)
            self[key] = program
            self._keys[id(program)] = self._keys.get(id(program), 0) + 1
        while len(self._keys) > limit:
            self._forget(self.popitem(last=False)[1])

    def _forget(self, program: Any) -> None:
        left = self._keys.get(id(program), 0) - 1
        if left > 0:
            self._keys[id(program)] = left
        else:
            self._keys.pop(id(program), None)


def in_threads(work: Callable[[Any], Any], items: list, max_threads: int) -> list:
    """``work`` over ``items`` in order, ``max_threads`` at once (threads named
    ``accy-build``); the first failure in order raises, after every item ran."""
    if max_threads == 1 or len(items) <= 1:
        return [work(x) for x in items]
    with ThreadPoolExecutor(min(max_threads, len(items)), thread_name_prefix="accy-build") as pool:
        futures = [pool.submit(work, x) for x in items]
    return [f.result() for f in futures]
