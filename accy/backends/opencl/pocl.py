"""PoCL's vector width, as its compiler can use it.

PoCL reports the host CPU's preferred vector width (16 floats where the CPU has AVX-512) but
compiles for the CPU its LLVM knows. A PoCL whose LLVM is older than the CPU (the PyPI wheel's
LLVM 14 on AMD Zen 4, whose device name then carries no CPU) targets one without AVX-512, and
there LLVM aborts the whole process ("Do not know how to scalarize this operator's operand!")
when a kernel taking ``sqrt`` of a ``float16`` is first launched. Building is safe, and the
build log tells: passing such vectors to a function changes the ABI "without 'avx512f'
enabled". :func:`pocl_vector_width` builds (never runs) one such function; the runtime gives the
device that width instead of the reported one (:func:`accy.backends.opencl.runtime._probe`).
"""

from __future__ import annotations

import pyopencl as cl

# a function of accy's own, not a builtin: a program calling sqrt on float16 left references
# that made the PyPI PoCL abort at process exit
WIDE_VECTOR_SOURCE = (
    "float16 accy_twice(float16 v) { return v + v; }\n"
    "__kernel void accy_wide(__global float16 *x) { x[0] = accy_twice(x[0]); }\n")
WIDE_VECTOR_WARNING = "without 'avx512f' enabled"
NARROW = 8  # floats: AVX2's width, which such a compiler handles


def pocl_vector_width(context: cl.Context, device: cl.Device, reported: int) -> int:
    """The float vector width for a PoCL ``device`` reporting ``reported`` (> 8): 8 when its
    compiler targets a CPU without AVX-512, else ``reported``."""
    program = cl.Program(context, WIDE_VECTOR_SOURCE).build()
    log = program.get_build_info(device, cl.program_build_info.LOG)
    return NARROW if WIDE_VECTOR_WARNING in log else reported
