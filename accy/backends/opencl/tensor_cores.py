"""The tensor-core probe: which matrix instructions an OpenCL device builds and runs right.

Run once per device at selection (:func:`accy.backends.opencl.runtime._probe`, after the basic
probe), only on NVIDIA devices of compute capability >= 8.0 (read through
``cl_nv_device_attribute_query``); what passes is recorded in ``DeviceInfo.tensor_cores`` and
from there in ``TargetProfile.tensor_cores``. Nothing else assumes tensor cores.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyopencl as cl

from accy.errors import DeviceError, KernelBuildError
from accy.target import TF32_MMA

if TYPE_CHECKING:
    from accy.backends.opencl.runtime import Runtime

# One TF32 m16n8k8 mma.sync with operands rounded by cvt.rna.tf32.f32, the two instructions
# accy/kernels/mma.py emits, on small integers (exact in TF32), checked element by element.
# Fragment layout as in accy/kernels/mma_plan.py: lane = 4 g + t; A (16x8) rows g, g+8, cols
# t, t+4; B (8x8) rows t, t+4, col g; C rows g, g+8, cols 2t, 2t+1.
MMA_PROBE_SOURCE = r"""
static inline uint accy_tf32(float x) {
  uint r; asm volatile("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x)); return r; }
__kernel __attribute__((reqd_work_group_size(32, 1, 1)))
void accy_mma_probe(__global float *d) {
  const uint lane = get_local_id(0), g = lane >> 2, t = lane & 3;
  #define A(i, k) ((float)((int)(((i) + 2 * (k)) % 5) - 2))
  #define B(k, n) ((float)((int)((3 * (k) + (n)) % 7) - 3))
  const uint a0 = accy_tf32(A(g, t)), a1 = accy_tf32(A(g + 8, t));
  const uint a2 = accy_tf32(A(g, t + 4)), a3 = accy_tf32(A(g + 8, t + 4));
  const uint b0 = accy_tf32(B(t, g)), b1 = accy_tf32(B(t + 4, g));
  float c0 = 0.0f, c1 = 0.0f, c2 = 0.0f, c3 = 0.0f;
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, "
               "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  d[g * 8 + 2 * t] = c0; d[g * 8 + 2 * t + 1] = c1;
  d[(g + 8) * 8 + 2 * t] = c2; d[(g + 8) * 8 + 2 * t + 1] = c3;
}
"""


def mma_probe_expected() -> np.ndarray:
    """The 16x8 product the tensor-core probe must write (as its macros A and B define)."""
    i, k, n = np.arange(16)[:, None], np.arange(8)[None, :], np.arange(8)[None, :]
    a = ((i + 2 * k) % 5 - 2).astype(np.float64)
    b = ((3 * k.T + n) % 7 - 3).astype(np.float64)
    return (a @ b).astype(np.float32)


def compute_capability(device: cl.Device) -> tuple[int, ...]:
    """(major, minor) of an NVIDIA device, () where the driver does not say."""
    try:
        return (int(device.get_info(cl.device_info.COMPUTE_CAPABILITY_MAJOR_NV)),
                int(device.get_info(cl.device_info.COMPUTE_CAPABILITY_MINOR_NV)))
    except (cl.Error, AttributeError, ValueError, TypeError):
        return ()


def probe_tensor_cores(runtime: Runtime, nvidia: bool) -> tuple[str, ...]:
    """The tensor-core instructions ``runtime``'s device builds and computes right: (TF32_MMA,)
    on NVIDIA devices (``nvidia``: its platform is NVIDIA's) of compute capability >= 8.0
    whose OpenCL compiler takes the inline PTX of ``MMA_PROBE_SOURCE``; () anywhere else, and
    on any failure (build, launch, result)."""
    info = runtime.info
    if not nvidia or info.compute_capability < (8, 0):
        return ()
    try:
        kernel = runtime.kernel(MMA_PROBE_SOURCE, "accy_mma_probe")
        out = np.zeros(16 * 8, dtype=np.float32)
        buf = runtime.buffer(("accy_mma_probe", 0), out.nbytes)
        runtime.launch(kernel, (32,), (32,), [buf])
        got = runtime.read(buf, out).reshape(16, 8)
    except (cl.Error, KernelBuildError, DeviceError):
        return ()
    return (TF32_MMA,) if np.array_equal(got, mma_probe_expected()) else ()
