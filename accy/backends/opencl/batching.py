"""Joining kernel sources into few OpenCL programs, so a job's kernels build in one go.

Building is paid per program, not per kernel (PoCL: ~0.3 s per clBuildProgram on a loaded
2-core machine, 40 kernels in one program also ~0.3 s), so :meth:`Runtime.build_many` joins
the sources of a job into batches. A source the renderer made (:func:`accy.backends.opencl.
render.render`) is a *prelude* of ``#pragma`` lines and one-line ``static inline`` helpers,
then the kernels. A batch is every prelude line once (in first-seen order), then every body.

Only sources that join without changing meaning share a batch:

* the same non-extension pragmas (``FP_CONTRACT OFF`` applies to the whole file; extension
  ``enable`` pragmas only add and are kept once each);
* no kernel entry defined twice, no helper of one name with two different definitions;
* a body that has no preprocessor line or ``static`` definition of its own (anything the
  split cannot reason about is built alone).

Batches are bounded in source size and kernel count so no single build grows without bound.
A batch that fails to build is not an error by itself: the runtime then builds its sources one
by one, so the error names (and quotes) the kernel at fault.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

MAX_BATCH_BYTES = 256 * 1024  # source bytes per joined program
MAX_BATCH_KERNELS = 256  # kernels per joined program

_ENTRY = re.compile(r"__kernel\s+(?:__attribute__\s*\(\(.*?\)\)\s*)*void\s+(\w+)\s*\(")
_HELPER = re.compile(r"static\s+inline\s+[\w\s*]*?(\w+)\s*\(")
_EXTENSION = re.compile(r"#pragma\s+OPENCL\s+EXTENSION\s+\w+\s*:\s*enable\s*$")


@dataclass(frozen=True)
class Part:
    """One source split for joining."""

    source: str
    prelude: tuple[str, ...]  # pragma and helper lines, in order
    body: str  # from the first ``__kernel`` line on
    entries: frozenset[str]
    helpers: tuple[tuple[str, str], ...]  # (name, defining line)
    pragmas: tuple[str, ...]  # the non-extension pragmas: must agree within a batch


def split(source: str) -> Part | None:
    """``source`` split into prelude and body, or None when it cannot join others safely."""
    lines = source.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("__kernel")), None)
    if start is None:
        return None
    prelude, helpers, pragmas = lines[:start], [], []
    for line in prelude:
        text = line.strip()
        if text.startswith("#pragma"):
            if not _EXTENSION.match(text):
                pragmas.append(text)
        elif text.startswith("static inline"):
            found = _HELPER.match(text)
            if found is None:
                return None
            helpers.append((found[1], text))
        elif text:
            return None
    body_lines = lines[start:]
    if any(line.lstrip().startswith(("#", "static")) for line in body_lines):
        return None
    body = "\n".join(body_lines)
    entries = _ENTRY.findall(body)
    if not entries or len(set(entries)) != len(entries):
        return None
    return Part(source, tuple(line for line in prelude if line.strip()), body,
                frozenset(entries), tuple(helpers), tuple(sorted(pragmas)))


def batches(sources: Sequence[str], max_bytes: int = MAX_BATCH_BYTES,
            max_kernels: int = MAX_BATCH_KERNELS) -> list[list[str]]:
    """``sources`` (distinct) grouped into batches that join safely, in first-seen order; a
    source that cannot join anything is a batch of its own."""
    out: list[list[str]] = []
    open_: dict[tuple[str, ...], _Batch] = {}  # pragmas -> the batch being filled
    for source in sources:
        part = split(source)
        if part is None:
            out.append([source])
            continue
        batch = open_.get(part.pragmas)
        if batch is None or not batch.fits(part, max_bytes, max_kernels):
            batch = open_[part.pragmas] = _Batch([])
            out.append(batch.sources)
        batch.add(part)
    return out


class _Batch:
    def __init__(self, sources: list[str]) -> None:
        self.sources = sources
        self.entries: set[str] = set()
        self.helpers: dict[str, str] = {}
        self.bytes = 0

    def fits(self, part: Part, max_bytes: int, max_kernels: int) -> bool:
        return (not self.sources
                or (self.bytes + len(part.source) <= max_bytes
                    and len(self.entries) + len(part.entries) <= max_kernels
                    and not self.entries & part.entries
                    and not part.entries & self.helpers.keys()
                    and all(self.helpers.get(n, t) == t and n not in self.entries
                            for n, t in part.helpers)))

    def add(self, part: Part) -> None:
        self.sources.append(part.source)
        self.entries |= part.entries
        self.helpers.update(part.helpers)
        self.bytes += len(part.source)


def join(sources: Sequence[str]) -> str:
    """One program's source from ``sources`` (a batch of :func:`batches`): each prelude line
    once, pragmas first, then every body in order."""
    parts = [split(s) for s in sources]
    if len(parts) == 1 or any(p is None for p in parts):
        if len(parts) != 1:
            raise ValueError("join() takes a batch made by batches()")
        return sources[0]
    prelude: dict[str, None] = {}
    for p in parts:
        prelude.update(dict.fromkeys(p.prelude))  # type: ignore[union-attr]
    lines = sorted(prelude, key=lambda line: not line.lstrip().startswith("#"))  # stable
    return "\n".join([*lines, *(p.body for p in parts)]) + "\n"  # type: ignore[union-attr]
