"""accy's NVIDIA kernels through CUDA's assembler without a GPU: clang's NVPTX target compiles
the OpenCL C (as NVIDIA's OpenCL compiler would emit it for ``sm_90``, inline PTX kept; there
is no OpenCL library, so :data:`BUILTINS` stand in for the builtins a kernel calls), accy's
deferred markers are expanded (:func:`accy.kernels.wgmma_ptx.expand`) and ``ptxas`` assembles
it for ``sm_90a``. Its log says what the device's compiler would likely do with registers:
used, spilled, and whether it serialized the kernel's wgmma. A developer's check (the tests'
and ``experiments/kernel_asm.py``'s): it needs ``clang-15`` and ``ptxas`` on the PATH, and the
device's own compiler may allocate differently."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from accy.kernels import wgmma_ptx

TOOLS = ("clang-15", "ptxas")
_SPACES = ("__global", "__private", "__constant")
# the OpenCL builtins a generated kernel calls, for clang's NVPTX target (there is no OpenCL
# library): work-item ids, barriers, vector and half loads and stores, math; exp and erf are
# stand-ins of like cost (one ex2.approx; a division), not the functions
BUILTINS = r"""
#define get_local_id(i) ((size_t)__nvvm_read_ptx_sreg_tid_x())
#define get_group_id(i) ((size_t)__nvvm_read_ptx_sreg_ctaid_x())
#define barrier(f) __nvvm_bar_sync(0)
int4 __attribute__((overloadable)) vload4(size_t i, const __local int *p) {
  return ((const __local int4 *)p)[i]; }
void __attribute__((overloadable)) vstore4(int4 v, size_t i, __global int *p) {
  ((__global int4 *)p)[i] = v; }
float4 __attribute__((overloadable)) vload4(size_t i, const __local float *p) {
  return ((const __local float4 *)p)[i]; }
void __attribute__((overloadable)) vstore4(float4 v, size_t i, __global float *p) {
  ((__global float4 *)p)[i] = v; }
long __attribute__((overloadable)) min(long a, long b) { return a < b ? a : b; }
long __attribute__((overloadable)) max(long a, long b) { return a > b ? a : b; }
void __attribute__((overloadable)) vstore_half2(float2 v, size_t i, __private half *p) {
  ((__private uint *)p)[i] = as_uint(v.x) ^ (as_uint(v.y) << 16); }
float __attribute__((overloadable)) fmax(float a, float b) { return __builtin_fmaxf(a, b); }
float __attribute__((overloadable)) fma(float a, float b, float c) {
  return __builtin_fmaf(a, b, c); }
int __attribute__((overloadable)) isfinite(float x) { return __builtin_isfinite(x); }
float __attribute__((overloadable)) exp(float x) {
  return __nvvm_ex2_approx_f(x * 1.4426950408889634f); }
float __attribute__((overloadable)) erf(float x) { return x / (1.0f + __builtin_fabsf(x)); }
""" + "".join(f"""
float __attribute__((overloadable)) vload_half(size_t i, const {space} half *p) {{
  ushort h = ((const {space} ushort *)p)[i]; float f;
  __asm__("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }}"""
                for space in _SPACES) + "".join(f"""
void __attribute__((overloadable)) vstore_half(float v, size_t i, {space} half *p) {{
  ushort h; __asm__("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
  (({space} ushort *)p)[i] = h; }}""" for space in _SPACES[:2]) + "\n"


def available() -> bool:
    """Whether clang-15 and ptxas are on the PATH."""
    return all(shutil.which(t) for t in TOOLS)


def assemble(source: str, work: Path, *ptxas: str) -> str:
    """ptxas's log of OpenCL C ``source`` (:data:`BUILTINS` put before it) through clang's
    PTX, expanded and assembled for sm_90a (``ptxas``: more options) into ``work/x.cubin``;
    a RuntimeError naming the step that failed, with its message."""
    (work / "k.cl").write_text(BUILTINS + source)
    done = subprocess.run(["clang-15", "-S", "-x", "cl", "-cl-std=CL1.2", "-O2", "-target",
                           "nvptx64-nvidia-nvcl", "-march=sm_80", "-Dasm=__asm__",
                           str(work / "k.cl"), "-o", str(work / "k.ptx")],
                          capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"clang: {done.stderr[-1500:]}")
    ptx = re.sub(r"\.target\s+sm_80[^\n]*", ".target sm_90", (work / "k.ptx").read_text())
    (work / "x.ptx").write_text(wgmma_ptx.expand(ptx))
    done = subprocess.run(["ptxas", "-arch=sm_90a", "-v", *ptxas, str(work / "x.ptx"), "-o",
                           str(work / "x.cubin")], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"ptxas: {done.stderr[-1500:]}")
    return done.stderr


def summary(log: str) -> dict[str, Any]:
    """Registers, spilled bytes (stores) and serialized wgmma from a ptxas log."""
    regs = re.search(r"Used (\d+) registers", log)
    spill = re.search(r"(\d+) bytes spill stores", log)
    return {"registers": int(regs[1]) if regs else None,
            "spill_bytes": int(spill[1]) if spill else None,
            "serialized": "serialized" in log}
