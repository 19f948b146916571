"""The OpenCL backend (registered as ``"opencl"`` in :mod:`accy.backends.registry`): devices
through :func:`~accy.backends.opencl.runtime.select_device`, profiles through
:meth:`TargetProfile.from_device`, OpenCL C from :mod:`~accy.backends.opencl.render`, builds
and runs through the runtime and :class:`~accy.backends.opencl.executable.Executable`.

pyopencl loads on first device use: rendering needs no OpenCL driver."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from accy.backends.opencl.render import render
from accy.backends.registry import Backend
from accy.kernels.ir import Kernel
from accy.target import OPENCL_C, TargetProfile

if TYPE_CHECKING:
    from accy.backends.opencl.runtime import Runtime


class OpenCLBackend(Backend):
    name = "opencl"
    artifact_format = OPENCL_C

    def select_device(self, selector: str | None = None) -> Runtime:
        from accy.backends.opencl.runtime import select_device

        return select_device(selector)

    def is_device(self, obj: object) -> bool:
        if obj is None or isinstance(obj, str):
            return False
        from accy.backends.opencl.runtime import Runtime

        return isinstance(obj, Runtime)

    def describe_device(self, device: Runtime) -> str:
        info = device.info
        return f"{info.name} ({info.platform}, driver {info.driver_version})"

    def device_key(self, device: Runtime) -> str:
        return device.info.key

    def target_profile(self, device: Runtime) -> TargetProfile:
        return TargetProfile.from_device(device.info)

    def render(self, kernel: Kernel, target: TargetProfile | None = None) -> str:
        return render(kernel, target)

    def build(self, device: Runtime, sources: Sequence[str], max_threads: int = 1) -> None:
        device.build_many(list(sources), max_threads=max_threads)

    def executable(self, job, function: str | None, device: Any, max_threads: int = 1):
        from accy.backends.opencl.executable import Executable

        # a selector is resolved by the executable, after the legality checks (no device needed
        # to refuse an illegal kernel)
        return Executable(job, function, device, max_threads=max_threads)

    def elapsed_ns(self, device: Runtime, event: Any) -> int:
        return device.elapsed_ns(event)
