"""Registering an installed NVIDIA OpenCL driver that has no ICD file.

Some installations ship ``libnvidia-opencl.so.1`` but no ICD file naming it (containers started
with the NVIDIA container runtime mount the driver's libraries but not
``/etc/OpenCL/vendors/nvidia.icd``), or name it where it does not load (an ICD file or
``OCL_ICD_FILENAMES`` pointing at a path that is missing or of another driver version), so the
ICD loader lists no NVIDIA platform. Before the first platform query,
:func:`register_nvidia_icd` checks for that case: every NVIDIA library an ICD file of the
vendor directory names is tried with ``dlopen``. When none loads but a copy of the library
does (found like the dynamic linker would: ``LD_LIBRARY_PATH``, ``ldconfig -p``, the usual
driver folders), it writes a vendor directory of accy's own (``nvidia.icd`` naming that copy by
absolute path, plus copies of the system's ICD files, so nothing listed before disappears),
points ``OCL_ICD_VENDORS`` at it and warns once. The folders are private and checked (0700,
this user's, no symbolic links; see :mod:`accy.files`): another user able to add an ICD file
there would make this process load a library of their choosing.

``OCL_ICD_FILENAMES`` does not count: the ICD loader in pyopencl's wheels ignores it (on the
H200 machine it names ``libpocl.so.2:libnvidia-opencl.so.1``, both load, and neither platform
is listed unless a vendor directory names it), so it is left as it is.

It never overrides an ``OCL_ICD_VENDORS`` the user set. It must run before the process's first
OpenCL call: ICD loaders read the vendor list once.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
import warnings
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path

from accy.files import atomic_write, private_dir

NVIDIA_LIBRARY = "libnvidia-opencl.so.1"
VENDORS_ENV = "OCL_ICD_VENDORS"  # read by ocl-icd and by the Khronos ICD loader
SYSTEM_VENDORS = Path("/etc/OpenCL/vendors")
LIBRARY_DIRS = ("/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib/x86_64-linux-gnu",
                "/usr/lib64", "/usr/lib/aarch64-linux-gnu", "/usr/lib")
FILENAMES_ENV = "OCL_ICD_FILENAMES"  # ICD libraries to load, ':'-separated (ocl-icd, Khronos)


class IcdRegistrationWarning(UserWarning):
    """accy registered an OpenCL driver for this process (the message says how)."""


@dataclass(frozen=True)
class IcdDecision:
    """Whether to register the NVIDIA driver, why, and the vendor directory's files."""

    register: bool
    reason: str
    entries: tuple[tuple[str, str], ...] = ()  # (file name, content), the system's and nvidia's


def system_vendor_dir(environ: MutableMapping[str, str]) -> Path:
    """Where the loader looks without ``OCL_ICD_VENDORS``: ``OPENCL_VENDOR_PATH`` (ocl-icd)."""
    return Path(environ.get("OPENCL_VENDOR_PATH") or SYSTEM_VENDORS)


def icd_entries(vendor_dir: Path) -> tuple[tuple[str, str], ...]:
    """``(name, content)`` of every readable ``*.icd`` file in ``vendor_dir``, by name."""
    try:
        paths = sorted(p for p in vendor_dir.iterdir() if p.name.endswith(".icd"))
    except OSError:  # no such directory
        return ()
    out = []
    for path in paths:
        try:
            out.append((path.name, path.read_text()))
        except (OSError, UnicodeDecodeError):
            continue
    return tuple(out)


def _loads(name: str) -> bool:
    try:
        ctypes.CDLL(name)
    except OSError:
        return False
    return True


def ldconfig_paths(name: str, listing: str) -> list[str]:
    """Absolute paths of library ``name`` in ``ldconfig -p`` output, in its order."""
    found = []
    for line in listing.splitlines():
        soname, sep, path = line.strip().partition(" => ")
        if sep and soname.split(" (")[0] == name and os.path.isabs(path.strip()):
            found.append(path.strip())
    return found


def _ldconfig_listing() -> str:
    """``ldconfig -p`` (the dynamic linker's cache); empty when it cannot be run."""
    program = shutil.which("ldconfig") or next(
        (p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.path.exists(p)), None)
    if program is None:
        return ""
    try:
        done = subprocess.run([program, "-p"], capture_output=True, text=True, timeout=10,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout


def find_nvidia_library(environ: MutableMapping[str, str] | None = None,
                        loads: Callable[[str], bool] = _loads,
                        exists: Callable[[str], bool] = os.path.exists,
                        listing: Callable[[], str] | None = None) -> str | None:
    """The absolute path of a copy of the NVIDIA OpenCL library that loads, or None.

    Looked for where the dynamic linker looks: ``LD_LIBRARY_PATH``, then its cache (``ldconfig
    -p``), then the usual driver folders (containers mount the driver under
    ``/usr/local/nvidia``, often off the linker's search path); copies of another architecture
    fail to load and are passed over. The bare name, when only ``dlopen`` finds it (an rpath).
    ``listing`` gives the ``ldconfig -p`` text (default: runs it).
    """
    environ = os.environ if environ is None else environ
    listing = _ldconfig_listing if listing is None else listing
    dirs = [d for d in environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    paths = ([os.path.join(d, NVIDIA_LIBRARY) for d in dirs]
             + ldconfig_paths(NVIDIA_LIBRARY, listing())
             + [os.path.join(d, NVIDIA_LIBRARY) for d in LIBRARY_DIRS])
    for path in dict.fromkeys(paths):
        if exists(path) and loads(path):
            return path
    return NVIDIA_LIBRARY if loads(NVIDIA_LIBRARY) else None


def _is_nvidia(library: str) -> bool:
    return "libnvidia-opencl" in library


def decide(environ: MutableMapping[str, str], vendor_dir: Path,
           locate: Callable[[], str | None] | None = None,
           loads: Callable[[str], bool] = _loads) -> IcdDecision:
    """Whether the NVIDIA driver needs registering; no side effects but ``loads(library)`` on
    the NVIDIA libraries the vendor directory names and ``locate()`` (default
    :func:`find_nvidia_library`), which runs only when none of those loads."""
    if environ.get(VENDORS_ENV):
        return IcdDecision(False, f"{VENDORS_ENV} is set by the user ({environ[VENDORS_ENV]})")
    entries = icd_entries(vendor_dir)
    named = [(file, text.strip()) for file, text in entries if _is_nvidia(text)]
    for file, library in named:
        if loads(library):
            return IcdDecision(False, f"{vendor_dir / file} names the NVIDIA driver")
    library = locate() if locate is not None else find_nvidia_library(environ, loads)
    broken = [f"{vendor_dir / file} ({text})" for file, text in named]
    verb = "does" if len(broken) == 1 else "do"
    why = f" (named by {', '.join(broken)}, which {verb} not load)" if broken else ""
    if any(_is_nvidia(n) for n in environ.get(FILENAMES_ENV, "").split(":")):
        why += f"; {FILENAMES_ENV} names it, but pyopencl's ICD loader ignores that variable"
    if library is None:
        return IcdDecision(False, f"{NVIDIA_LIBRARY} is not installed (no copy loads){why}")
    taken = {name for name, _ in entries}
    name = "nvidia.icd" if "nvidia.icd" not in taken else "accy-nvidia.icd"
    what = "names it" if not broken else "names a copy that loads"
    return IcdDecision(
        True, f"{library} loads but no ICD file in {vendor_dir} {what}{why}",
        entries + ((name, library + "\n"),))


def cache_root(environ: MutableMapping[str, str]) -> Path:
    """``$XDG_CACHE_HOME/accy`` (an absolute one, as the XDG spec asks), else
    ``~/.cache/accy``. Nothing is created here."""
    base = environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "accy"


def fallback_root() -> Path:
    """The per-user temp folder, ``$TMPDIR/accy-<uid>``, for when the cache cannot be used."""
    return Path(tempfile.gettempdir()) / f"accy-{os.getuid()}"


def _read_regular(path: Path) -> str | None:
    """The text of ``path`` if it is a regular file (never through a link), else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        try:
            return f.read().decode()
        except UnicodeDecodeError:
            return None


def write_vendor_dir(entries: tuple[tuple[str, str], ...], root: Path) -> Path:
    """A directory under ``root`` holding exactly ``entries``, named by their digest.

    The same entries give the same directory, so processes share it. ``root``,
    ``root/opencl-vendors`` and the directory are private (:func:`accy.files.private_dir`:
    created 0700; an existing one that is a symbolic link, another user's, or writable by
    group or others raises :class:`~accy.files.UnsafePathError`, since ``OCL_ICD_VENDORS``
    will make this process load whatever library an ICD file there names). Each file is
    written with :func:`accy.files.atomic_write`, so a concurrent reader never sees half a
    file and a planted link is never written through.
    """
    digest = hashlib.blake2b(repr(entries).encode(), digest_size=8).hexdigest()
    folder = private_dir(private_dir(private_dir(root) / "opencl-vendors") / digest)
    for name, text in entries:
        path = folder / name
        if _read_regular(path) != text:
            atomic_write(path, text, mode=0o644)
    return folder


def _write_somewhere(entries: tuple[tuple[str, str], ...], roots: list[Path]) -> Path:
    """:func:`write_vendor_dir` under the first of ``roots`` where it succeeds."""
    problems = []
    for root in roots:
        try:
            return write_vendor_dir(entries, root)
        except OSError as exc:  # UnsafePathError included: the next root, or give up
            problems.append(str(exc))
    raise OSError("; ".join(problems))


def register_nvidia_icd(environ: MutableMapping[str, str] | None = None,
                        vendor_dir: Path | None = None,
                        locate: Callable[[], str | None] | None = None,
                        root: Path | None = None,
                        loads: Callable[[str], bool] = _loads) -> IcdDecision:
    """Register the NVIDIA driver for this process when no ICD file names a copy that loads
    (see module doc).

    Sets ``OCL_ICD_VENDORS`` in ``environ`` (default ``os.environ``) and warns with an
    :class:`IcdRegistrationWarning` saying why, what was done and how to make it permanent.
    The vendor directory goes under ``root`` if given, else under :func:`cache_root`, else
    (that one unusable or unsafe, e.g. a symbolic link) under :func:`fallback_root`, which
    must be safe too (:func:`write_vendor_dir`). When no root is safe nothing is written, the
    variable is left unset and the decision says why (``register`` False).
    """
    environ = os.environ if environ is None else environ
    vendor_dir = system_vendor_dir(environ) if vendor_dir is None else vendor_dir
    decision = decide(environ, vendor_dir, locate, loads)
    if not decision.register:
        return decision
    roots = [root] if root is not None else [cache_root(environ), fallback_root()]
    try:
        folder = _write_somewhere(decision.entries, roots)
    except OSError as exc:  # nothing written anywhere unsafe: OpenCL goes on without NVIDIA
        return IcdDecision(False, f"could not write a vendor directory: {exc}")
    environ[VENDORS_ENV] = str(folder)
    copied = len(decision.entries) - 1
    library = decision.entries[-1][1].strip()
    warnings.warn(
        f"accy: the NVIDIA OpenCL driver {decision.reason}, so OpenCL would not list it. "
        f"accy set {VENDORS_ENV}={folder} for this process ({decision.entries[-1][0]} plus "
        f"copies of {copied} ICD file(s) from {vendor_dir}). To register it for good: "
        f"echo {library} > {vendor_dir}/nvidia.icd", IcdRegistrationWarning, stacklevel=3)
    return decision
