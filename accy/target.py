"""Target profiles: what a backend device offers, recorded on every prepared job.

A profile is built from a real OpenCL device (:meth:`TargetProfile.from_device`) or written by
hand. ``backend-legalization`` checks every kernel against it before anything is launched.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Literal

from accy.errors import AccyError, CapabilityMismatchError
from accy.ir.types import DType

if TYPE_CHECKING:
    from accy.backends.opencl.runtime import DeviceInfo

OPENCL_C = "opencl-c"


@dataclass(frozen=True)
class TargetProfile:
    """Backend, dtypes, artifact formats, math tier and limits of one target device."""

    backend: str = "opencl"
    device: str = "generic OpenCL 1.2 device"
    dtypes: frozenset[DType] = field(
        default_factory=lambda: frozenset({DType.f32, DType.i32, DType.i64, DType.bool})
    )
    artifact_formats: frozenset[str] = frozenset({OPENCL_C})
    math_tier: Literal["ieee", "fast"] = "ieee"
    max_work_group_size: int = 256
    local_mem_bytes: int = 32 * 1024
    compute_units: int = 1
    constant_mem_bytes: int = 64 * 1024  # __constant bytes one kernel may take in all
    max_constant_args: int = 8  # __constant arguments per kernel
    device_type: str = "gpu"  # "cpu", "gpu" or "accelerator": which kernel shapes suit it
    native_vector_bytes: int = 16  # the SIMD width the device prefers (float lanes * 4)
    atomics64: bool = False  # 64-bit global atomics (cl_khr_int64_base_atomics)

    @classmethod
    def from_device(cls, info: DeviceInfo) -> TargetProfile:
        dtypes = {DType.f32, DType.i32, DType.i64, DType.bool}
        if info.fp16:
            dtypes.add(DType.f16)
        if info.fp64:
            dtypes.add(DType.f64)
        return cls(
            backend="opencl",
            device=f"{info.platform} / {info.name} / {info.driver_version}",
            dtypes=frozenset(dtypes),
            max_work_group_size=info.max_work_group_size,
            local_mem_bytes=info.local_mem_size,
            compute_units=info.compute_units,
            constant_mem_bytes=info.max_constant_buffer_size,
            max_constant_args=info.max_constant_args,
            device_type=info.device_type,
            native_vector_bytes=4 * max(1, info.preferred_vector_width_float),
            atomics64="cl_khr_int64_base_atomics" in info.extensions,
        )

    @property
    def usable_dtypes(self) -> frozenset[DType]:
        """The dtypes kernels may use here: ``dtypes``, and f16 wherever f32 is. OpenCL C stores
        f16 without ``cl_khr_fp16`` (``vload_half``/``vstore_half``), and accy's kernels compute
        f16 in float, rounding every f16 value, so ``dtypes`` lists f16 only for devices that
        compute it natively (what ``dtype-legalization`` asks)."""
        return self.dtypes | ({DType.f16} if DType.f32 in self.dtypes else frozenset())

    def fingerprint(self) -> str:
        text = repr((self.backend, self.device, sorted(d.value for d in self.dtypes),
                     sorted(self.artifact_formats), self.math_tier, self.max_work_group_size,
                     self.local_mem_bytes, self.compute_units, self.constant_mem_bytes,
                     self.max_constant_args, self.device_type, self.native_vector_bytes,
                     self.atomics64))
        return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()

    def describe(self) -> str:
        dts = ",".join(sorted(d.value for d in self.dtypes))
        return (f"{self.backend} on {self.device}: dtypes {dts}; formats "
                f"{','.join(sorted(self.artifact_formats))}; math {self.math_tier}; "
                f"max work-group {self.max_work_group_size}; local memory "
                f"{self.local_mem_bytes} B; constant memory {self.constant_mem_bytes} B in "
                f"{self.max_constant_args} args; {self.compute_units} compute units "
                f"({self.device_type}, {self.native_vector_bytes}-byte vectors"
                f"{', 64-bit atomics' if self.atomics64 else ''})")


class KernelStatus(Enum):
    """Legality of one kernel under a target profile."""

    legal = "legal"
    unsupported_dtype = "unsupported_dtype"
    unsupported_op = "unsupported_op"
    unsupported_artifact = "unsupported_artifact"
    exceeds_limits = "exceeds_limits"


def status_error(status: KernelStatus) -> type[AccyError] | None:
    """The error a kernel of this status raises when launched (None when legal)."""
    return None if status is KernelStatus.legal else CapabilityMismatchError
