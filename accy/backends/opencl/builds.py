"""What builds share: source digests, build statistics, error sites quoted from the source."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, replace

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
