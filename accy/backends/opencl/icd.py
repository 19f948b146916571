"""Registering an installed NVIDIA OpenCL driver that has no ICD file.

Some installations ship ``libnvidia-opencl.so.1`` but no ICD file naming it (containers started
with the NVIDIA container runtime mount the driver's libraries but not
``/etc/OpenCL/vendors/nvidia.icd``), so the ICD loader lists no NVIDIA platform. Before the
first platform query, :func:`register_nvidia_icd` checks for that case. When the library loads,
it writes a vendor directory of accy's own (``nvidia.icd`` plus copies of the system's ICD
files, so nothing listed before disappears), points ``OCL_ICD_VENDORS`` at it and warns once.

It never overrides an ``OCL_ICD_VENDORS`` the user set. It must run before the process's first
OpenCL call: ICD loaders read the vendor list once.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import tempfile
import warnings
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path

NVIDIA_LIBRARY = "libnvidia-opencl.so.1"
VENDORS_ENV = "OCL_ICD_VENDORS"  # read by ocl-icd and by the Khronos ICD loader
SYSTEM_VENDORS = Path("/etc/OpenCL/vendors")
LIBRARY_DIRS = ("/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib/x86_64-linux-gnu",
                "/usr/lib64", "/usr/lib/aarch64-linux-gnu", "/usr/lib")


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


def find_nvidia_library(environ: MutableMapping[str, str] | None = None,
                        loads: Callable[[str], bool] = _loads,
                        exists: Callable[[str], bool] = os.path.exists) -> str | None:
    """What an ICD file should name for the NVIDIA OpenCL library, or None when none loads.

    The bare name when ``dlopen`` finds it (what an ICD loader then does too); else the absolute
    path of a copy that loads in ``LD_LIBRARY_PATH`` or a usual driver folder (containers mount
    the driver under ``/usr/local/nvidia``, often off the loader's search path).
    """
    if loads(NVIDIA_LIBRARY):
        return NVIDIA_LIBRARY
    environ = os.environ if environ is None else environ
    dirs = [d for d in environ.get("LD_LIBRARY_PATH", "").split(":") if d] + list(LIBRARY_DIRS)
    for folder in dict.fromkeys(dirs):
        path = os.path.join(folder, NVIDIA_LIBRARY)
        if exists(path) and loads(path):
            return path
    return None


def decide(environ: MutableMapping[str, str], vendor_dir: Path,
           locate: Callable[[], str | None] | None = None) -> IcdDecision:
    """Whether the NVIDIA driver needs registering; no side effects but ``locate()``, which
    defaults to :func:`find_nvidia_library` and runs only when no ICD file names the driver."""
    if environ.get(VENDORS_ENV):
        return IcdDecision(False, f"{VENDORS_ENV} is set by the user ({environ[VENDORS_ENV]})")
    if "libnvidia-opencl" in environ.get("OCL_ICD_FILENAMES", ""):
        return IcdDecision(False, "OCL_ICD_FILENAMES names the NVIDIA driver")
    entries = icd_entries(vendor_dir)
    named = [name for name, text in entries if "libnvidia-opencl" in text]
    if named:
        return IcdDecision(False, f"{vendor_dir / named[0]} names the NVIDIA driver")
    library = locate() if locate is not None else find_nvidia_library(environ)
    if library is None:
        return IcdDecision(False, f"{NVIDIA_LIBRARY} is not installed (no copy loads)")
    taken = {name for name, _ in entries}
    name = "nvidia.icd" if "nvidia.icd" not in taken else "accy-nvidia.icd"
    return IcdDecision(
        True, f"{library} loads but no ICD file in {vendor_dir} names it",
        entries + ((name, library + "\n"),))


def cache_root(environ: MutableMapping[str, str]) -> Path:
    """``$XDG_CACHE_HOME/accy`` (else ``~/.cache/accy``); a per-user temp dir if unwritable."""
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    root = Path(base) / "accy"
    try:
        root.mkdir(parents=True, exist_ok=True)
        if os.access(root, os.W_OK):
            return root
    except OSError:
        pass
    return Path(tempfile.gettempdir()) / f"accy-{os.getuid()}"


def write_vendor_dir(entries: tuple[tuple[str, str], ...], root: Path) -> Path:
    """A directory under ``root`` holding exactly ``entries``, named by their digest.

    The same entries give the same directory, so processes share it; each file is written to
    a temporary name and renamed, so a concurrent reader never sees half a file.
    """
    digest = hashlib.blake2b(repr(entries).encode(), digest_size=8).hexdigest()
    folder = root / "opencl-vendors" / digest
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in entries:
        path = folder / name
        if path.exists() and path.read_text() == text:
            continue
        tmp = folder / f".{name}.{os.getpid()}.tmp"
        tmp.write_text(text)
        os.replace(tmp, path)
    return folder


def register_nvidia_icd(environ: MutableMapping[str, str] | None = None,
                        vendor_dir: Path | None = None,
                        locate: Callable[[], str | None] | None = None,
                        root: Path | None = None) -> IcdDecision:
    """Register the NVIDIA driver for this process when it lacks an ICD file (see module doc).

    Sets ``OCL_ICD_VENDORS`` in ``environ`` (default ``os.environ``) and warns with an
    :class:`IcdRegistrationWarning` saying what was done and how to make it permanent.
    """
    environ = os.environ if environ is None else environ
    vendor_dir = system_vendor_dir(environ) if vendor_dir is None else vendor_dir
    decision = decide(environ, vendor_dir, locate)
    if not decision.register:
        return decision
    try:
        folder = write_vendor_dir(decision.entries, root or cache_root(environ))
    except OSError as exc:
        return IcdDecision(False, f"could not write a vendor directory: {exc}")
    environ[VENDORS_ENV] = str(folder)
    copied = len(decision.entries) - 1
    library = decision.entries[-1][1].strip()
    warnings.warn(
        f"accy: the NVIDIA OpenCL driver ({library}) is installed but no ICD file in "
        f"{vendor_dir} names it, so OpenCL would not list it. accy set {VENDORS_ENV}={folder} "
        f"for this process ({decision.entries[-1][0]} plus copies of {copied} ICD file(s) "
        f"from {vendor_dir}). To register it for good: echo {library} > "
        f"{vendor_dir}/nvidia.icd", IcdRegistrationWarning, stacklevel=3)
    return decision
