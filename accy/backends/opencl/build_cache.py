"""The on-disk cache of built OpenCL programs, shared by processes of one user.

A program built from source is stored as the driver's binary (``CL_PROGRAM_BINARIES``) under a
key made of everything the binary depends on: platform and device names and versions, driver
version, build options and the source's digest. Another process asking for the same source on
the same device loads the binary (``clCreateProgramWithBinary``) instead of compiling it.

Where, and whether (read from the environment at each build unless a :class:`Runtime` was given
``cache_dir``):

* ``ACCY_BUILD_CACHE_DIR``: the folder; default ``$XDG_CACHE_HOME/accy/kernels``, else
  ``~/.cache/accy/kernels``, made private (0700, owner checked: :func:`accy.files.private_dir`).
* ``ACCY_BUILD_CACHE``: ``0``/``off`` disables it, ``1``/``on`` uses it on every device,
  ``auto`` (default) on every device except PoCL with its own kernel cache on
  (``POCL_KERNEL_CACHE`` unset or not ``0``): PoCL already keeps programs and compiled
  work-group functions in ``~/.cache/pocl/kcache``, and asking PoCL for a binary compiles
  every kernel of the program once more (measured: as long as the first launches).
* ``ACCY_BUILD_CACHE_MIB``: size bound in MiB (default 512); beyond it the least recently used
  entries (by modification time, refreshed on every hit) are removed.

Safe against concurrent processes without a lock: entries are written with
:func:`accy.files.atomic_write` (a reader sees a whole entry or none), carry their key and a
digest of the binary, and an entry that is truncated, foreign or that the driver refuses is
removed and rebuilt; it never fails a build. A folder that is unsafe or cannot be made turns
the cache off with a warning. PoCL's own kernel cache is not that safe (pocl/pocl#430, #1480):
processes compiling the same program at once into one cold ``POCL_CACHE_DIR`` can crash inside
PoCL, so give concurrent processes on PoCL their own ``POCL_CACHE_DIR``.
"""

from __future__ import annotations

import hashlib
import os
import time
import warnings
from collections.abc import Mapping
from pathlib import Path

import pyopencl as cl

from accy.backends.opencl.icd import cache_root
from accy.files import atomic_write, private_dir

ENV_SWITCH = "ACCY_BUILD_CACHE"
ENV_DIR = "ACCY_BUILD_CACHE_DIR"
ENV_SIZE = "ACCY_BUILD_CACHE_MIB"
DEFAULT_MIB = 512
FORMAT = b"accy-clbin-1"  # bump when the entry layout changes: old entries then never match
SUFFIX = ".clbin"
_STALE_TMP_S = 3600  # temporary files older than this are a crashed writer's leftovers

_WARNED: set[str] = set()  # folders already warned about (once per process each)


def entry_key(identity: tuple[str, ...], options: tuple[str, ...], source_digest: str) -> str:
    """The hex key of one program: device identity, build options and source digest."""
    text = "\0".join((FORMAT.decode(), *identity, "\x01", *options, "\x01", source_digest))
    return hashlib.sha256(text.encode()).hexdigest()


class DiskCache:
    """Program binaries in one private folder, bounded to ``max_bytes`` (LRU by mtime)."""

    def __init__(self, root: str | os.PathLike[str], max_bytes: int) -> None:
        self.root = private_dir(root)
        self.max_bytes = max_bytes

    def __repr__(self) -> str:
        return f"DiskCache({str(self.root)!r}, max_bytes={self.max_bytes})"

    def _path(self, key: str) -> Path:
        return self.root / f"{key}{SUFFIX}"

    def load(self, key: str) -> bytes | None:
        """The binary stored under ``key``, or None (missing, or damaged: then removed)."""
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:  # missing, or removed by another process's trim meanwhile
            return None
        header, sep, binary = data.partition(b"\n\n")
        fields = header.split(b"\n")
        if (not sep or len(fields) != 3 or fields[0] != FORMAT or fields[1] != key.encode()
                or fields[2] != hashlib.sha256(binary).hexdigest().encode()):
            self.discard(key)
            return None
        try:
            os.utime(path)  # recently used: trimmed last
        except OSError:
            pass
        return binary

    def store(self, key: str, binary: bytes) -> None:
        """Store ``binary`` under ``key`` atomically; failures (disk full...) are ignored: the
        cache only ever saves time."""
        digest = hashlib.sha256(binary).hexdigest().encode()
        try:
            atomic_write(self._path(key), b"\n".join((FORMAT, key.encode(), digest)) + b"\n\n"
                         + binary)
        except OSError:
            pass

    def discard(self, key: str) -> None:
        """Remove the entry of ``key`` (a damaged or unloadable one), if still there."""
        try:
            os.unlink(self._path(key))
        except OSError:
            pass

    def entries(self) -> list[tuple[float, int, Path]]:
        """``(mtime, size, path)`` of every entry, oldest first."""
        found = []
        try:
            with os.scandir(self.root) as it:
                for e in it:
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if e.name.endswith(SUFFIX):
                        found.append((st.st_mtime, st.st_size, Path(e.path)))
                    elif e.name.endswith(".tmp") and time.time() - st.st_mtime > _STALE_TMP_S:
                        _unlink(Path(e.path))
        except OSError:
            return []
        return sorted(found)

    def size(self) -> int:
        return sum(size for _, size, _ in self.entries())

    def trim(self) -> int:
        """Remove the least recently used entries until at most ``max_bytes`` remain; the
        number removed. Another process trimming at once may remove some of the same."""
        entries = self.entries()
        total = sum(size for _, size, _ in entries)
        removed = 0
        for _, size, path in entries:
            if total <= self.max_bytes:
                break
            _unlink(path)
            total -= size
            removed += 1
        return removed


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _enabled(switch: str, is_pocl: bool, environ: Mapping[str, str]) -> bool:
    """Whether the environment's ``ACCY_BUILD_CACHE`` value turns the cache on here."""
    value = switch.strip().lower()
    if value in ("0", "off", "false", "no"):
        return False
    if value in ("1", "on", "true", "yes"):
        return True
    # auto: PoCL caches builds itself, and handing out binaries costs it a second compile
    return not (is_pocl and environ.get("POCL_KERNEL_CACHE", "1").strip() != "0")


def max_bytes_from(environ: Mapping[str, str]) -> int:
    """``ACCY_BUILD_CACHE_MIB`` in bytes (default 512 MiB; a bad value warns, default)."""
    text = environ.get(ENV_SIZE, "").strip()
    if not text:
        return DEFAULT_MIB << 20
    try:
        mib = float(text)
        if not mib >= 0 or mib == float("inf"):
            raise ValueError(text)
    except ValueError:
        _warn_once(f"size:{text}", f"{ENV_SIZE}={text!r} is not a size in MiB; "
                                   f"using {DEFAULT_MIB}")
        return DEFAULT_MIB << 20
    return int(mib * (1 << 20))


_OPENED: dict[tuple[str, int], DiskCache] = {}  # (folder, max bytes) -> cache (checked once)


def open_cache(root: str | os.PathLike[str], max_bytes: int) -> DiskCache | None:
    """The cache in ``root`` (made private), or None with a warning when it cannot be used."""
    key = (os.fspath(root), max_bytes)
    if key not in _OPENED:
        try:
            _OPENED[key] = DiskCache(root, max_bytes)
        except OSError as exc:  # UnsafePathError, permissions, read-only file system
            _warn_once(key[0], f"accy's build cache is off: {exc}")
            return None
    return _OPENED[key]


def from_environment(is_pocl: bool, environ: Mapping[str, str] | None = None
                     ) -> DiskCache | None:
    """The cache the environment asks for on a device (see the module doc), or None."""
    environ = os.environ if environ is None else environ
    if not _enabled(environ.get(ENV_SWITCH, "auto"), is_pocl, environ):
        return None
    root = environ.get(ENV_DIR, "").strip() or cache_root(dict(environ)) / "kernels"
    return open_cache(root, max_bytes_from(environ))


def _warn_once(what: str, message: str) -> None:
    if what not in _WARNED:
        _WARNED.add(what)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def load_program(cache: DiskCache, key: str, context: cl.Context, device: cl.Device,
                 options: tuple[str, ...]) -> cl.Program | None:
    """The program of the binary stored under ``key``, built for ``device``; None when there
    is none or the driver refuses it (then the entry is removed)."""
    binary = cache.load(key)
    if binary is None:
        return None
    try:
        return cl.Program(context, [device], [binary]).build(options=list(options))
    except (cl.Error, ValueError, TypeError):  # a binary this driver does not take
        cache.discard(key)
        return None


def store_program(cache: DiskCache, key: str, program: cl.Program) -> bool:
    """Store ``program``'s binary under ``key`` and trim the cache; whether it was stored (a
    driver may hand out no binary)."""
    try:
        binaries = program.get_info(cl.program_info.BINARIES)
    except cl.Error:
        return False
    if len(binaries) != 1 or not binaries[0]:
        return False
    cache.store(key, bytes(binaries[0]))
    cache.trim()
    return True
