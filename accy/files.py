"""Private folders and atomic file writes that never follow a symbolic link.

accy writes a few files of its own under shared locations (the OpenCL vendor directory under
the cache, results), where another local user may have planted a link or made the folder
first. Two primitives, for every such writer:

* :func:`private_dir` creates a folder (and missing parents) with mode 0700, or accepts an
  existing one only when it is a real folder (not a symbolic link), owned by this user and not
  writable by group or others; anything else raises :class:`UnsafePathError`.
* :func:`atomic_write` writes ``bytes`` or ``str`` to a temporary file of an unpredictable name
  made with ``O_CREAT | O_EXCL | O_NOFOLLOW`` (:func:`tempfile.mkstemp`) in the target's
  folder, fsyncs it, and renames it over the target: a reader sees the old file or the new one,
  never half of one, and a link planted at the target's name is replaced, never written
  through (``rename`` replaces a link itself).
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

__all__ = ["UnsafePathError", "atomic_write", "check_private_dir", "private_dir"]


class UnsafePathError(OSError):
    """A folder accy would write into is a link, not this user's, or open to other users."""


def check_private_dir(path: str | os.PathLike[str]) -> Path:
    """``path`` if it is a real folder (``lstat``: a symbolic link is refused, not followed),
    owned by this user, and not writable by group or others; else :class:`UnsafePathError`
    (:class:`FileNotFoundError` when it does not exist)."""
    path = Path(path)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(f"{path} is a symbolic link; accy does not write through links")
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePathError(f"{path} is not a folder")
    if st.st_uid != os.getuid():
        raise UnsafePathError(f"{path} belongs to uid {st.st_uid}, not to this user "
                              f"(uid {os.getuid()})")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafePathError(f"{path} is writable by other users (mode "
                              f"{stat.S_IMODE(st.st_mode):o}); make it 0700 or remove it")
    return path


def private_dir(path: str | os.PathLike[str], mode: int = 0o700) -> Path:
    """The folder ``path``, created with ``mode`` (default 0700) when missing, with any missing
    parents (also ``mode``); an existing one must pass :func:`check_private_dir`.

    Only ``path`` itself is checked, not the folders above it: those are the user's (a home
    folder, ``$XDG_CACHE_HOME``) or the system's (``/tmp``), and a sticky ``/tmp`` is fine.
    """
    path = Path(path)
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ValueError(f"a private folder cannot be group or world writable ({mode:o})")
    try:
        os.mkdir(path, mode)  # does not follow a link at path: EEXIST instead
    except FileNotFoundError:
        private_parents(path.parent, mode)
        try:
            os.mkdir(path, mode)
        except FileExistsError:
            pass
    except FileExistsError:
        pass
    else:
        os.chmod(path, mode, follow_symlinks=False)  # the umask may have taken bits away
    return check_private_dir(path)


def private_parents(path: Path, mode: int) -> None:
    """Create the missing folders of ``path`` with ``mode``; existing ones are left as they
    are (a parent is not ours to judge, see :func:`private_dir`)."""
    if path.exists():
        return
    private_parents(path.parent, mode)
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        pass


def atomic_write(path: str | os.PathLike[str], data: bytes | str, mode: int = 0o600,
                 encoding: str = "utf-8") -> Path:
    """Write ``data`` (``str`` is encoded with ``encoding``) to ``path`` atomically, with file
    permissions ``mode``; the folder must exist. Returns ``path``.

    The temporary file lies in ``path``'s folder (so the rename stays on one file system),
    named unpredictably and created exclusively, so nothing planted beforehand is opened; it is
    fsynced before the rename and removed if anything fails.
    """
    path = Path(path)
    payload = data.encode(encoding) if isinstance(data, str) else bytes(data)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_dir(path.parent)
    return path


def _fsync_dir(path: Path) -> None:
    """Make a rename in ``path`` durable (best effort: not every file system allows it)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
