"""Backends by name: what runs kernels, behind one interface.

A :class:`Backend` selects a device, describes it as a :class:`~accy.target.TargetProfile`,
renders kernels (:mod:`accy.kernels.ir`) as its artifact, builds them, runs a prepared job
and reads kernel times. Backends are registered here by name with their artifact format and a
loader, so looking one up (``backend-legalization``, ``accy.prepare``) imports nothing heavy;
the loader runs on first use. OpenCL is ``"opencl"`` (:mod:`accy.backends.opencl.backend`).

A second backend is a package ``accy/backends/<name>/`` (its ``Backend`` and its renderer of
the neutral kernel IR) plus one :func:`register_backend` line below; see docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from accy.errors import BackendLookupError
from accy.target import OPENCL_C, TargetProfile

if TYPE_CHECKING:
    from accy.job import PreparedJob
    from accy.kernels.ir import Kernel

DEFAULT_BACKEND = "opencl"


class Backend(ABC):
    """One way of running kernels: device selection, target profile, build, run, profiling.

    A *device* is whatever the backend runs on (OpenCL: a ``Runtime``); selectors are the
    backend's own strings (``None``: its default device)."""

    name: str
    artifact_format: str  # what render() emits; TargetProfile.artifact_formats must list it

    @abstractmethod
    def select_device(self, selector: str | None = None) -> Any:
        """The device ``selector`` names (a clear error when none matches)."""

    @abstractmethod
    def is_device(self, obj: object) -> bool:
        """Whether ``obj`` is a device of this backend (rather than a selector)."""

    @abstractmethod
    def target_profile(self, device: Any) -> TargetProfile:
        """The profile kernels are generated and legalized for on ``device``."""

    @abstractmethod
    def render(self, kernel: Kernel, target: TargetProfile | None = None) -> str:
        """The source of ``kernel`` in :attr:`artifact_format` (``target``: refuse what it
        cannot take)."""

    @abstractmethod
    def build(self, device: Any, sources: Sequence[str], max_threads: int = 1) -> None:
        """Build ``sources`` on ``device`` (cached: later runs only look them up)."""

    @abstractmethod
    def executable(self, job: PreparedJob, function: str | None, device: Any,
                   max_threads: int = 1) -> Any:
        """A callable running one function of ``job`` on ``device`` (a device or selector):
        ``exe(*inputs, out=None, to_host=True, wait=True)`` returns the results, and
        ``exe.last_kernel_ns`` holds the kernel times of the calling thread's last call (what
        :meth:`PreparedJob.run` and the experiments use)."""

    @abstractmethod
    def elapsed_ns(self, device: Any, event: Any) -> int:
        """Nanoseconds the device spent on the command of ``event`` (profiling)."""

    def describe_device(self, device: Any) -> str:
        """A line naming ``device`` for people (demo output, failure messages)."""
        return str(device)

    def device_key(self, device: Any) -> str:
        """A stable identifier of ``device`` (records, calibration files)."""
        return str(device)

    def device(self, device: Any = None) -> Any:
        """``device`` if it is one of this backend's, else the device it selects."""
        return device if self.is_device(device) else self.select_device(device)

    def open(self, device: Any = None) -> tuple[Any, TargetProfile]:
        """The device (or selector) ``device`` and its target profile: the one place the two
        are paired."""
        dev = self.device(device)
        return dev, self.target_profile(dev)


@dataclass(frozen=True)
class Registration:
    name: str
    artifact_format: str
    load: Callable[[], Backend]  # makes the backend (imports its modules) on first use
    summary: str


_REGISTRY: dict[str, Registration] = {}
_LOADED: dict[str, Backend] = {}
_LOCK = threading.Lock()


def register_backend(name: str, artifact_format: str, load: Callable[[], Backend],
                     summary: str = "") -> Registration:
    """Register a backend under ``name`` (duplicates are errors)."""
    if name in _REGISTRY:
        raise ValueError(f"backend {name!r} is already registered")
    reg = _REGISTRY[name] = Registration(name, artifact_format, load, summary)
    return reg


def registered() -> tuple[str, ...]:
    """The registered backend names, in registration order."""
    return tuple(_REGISTRY)


def registration(name: str) -> Registration:
    """The registration of ``name`` (imports nothing); a BackendLookupError listing the
    registered names when there is none."""
    reg = _REGISTRY.get(name)
    if reg is None:
        raise BackendLookupError(f"unknown backend {name!r} (registered: "
                                 f"{', '.join(_REGISTRY) or 'none'})")
    return reg


def get_backend(name: str | None = None) -> Backend:
    """The backend registered as ``name`` (default :data:`DEFAULT_BACKEND`), loaded once."""
    reg = registration(name or DEFAULT_BACKEND)
    with _LOCK:
        backend = _LOADED.get(reg.name)
        if backend is None:
            backend = _LOADED[reg.name] = reg.load()
    return backend


def open_device(device: Any = None, backend: str | None = None) -> tuple[Any, TargetProfile]:
    """``get_backend(backend).open(device)``: a device and its target profile."""
    return get_backend(backend).open(device)


def _opencl() -> Backend:
    from accy.backends.opencl.backend import OpenCLBackend

    return OpenCLBackend()


register_backend("opencl", OPENCL_C, _opencl, "OpenCL C through pyopencl (PoCL, NVIDIA, ...)")
