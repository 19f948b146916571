"""backend-legalization: check every kernel against the target profile before any launch.

The target's backend must be registered (:mod:`accy.backends.registry`; an unknown name is a
``BackendLookupError`` listing the registered ones). A kernel is legal when the target takes
its backend's artifact format (OpenCL C for ``opencl``), every dtype and op it uses, and its
launch and buffers fit the profile's limits: global size per dimension (the device's ``size_t``),
work-groups per dimension, local size per dimension and in all, each buffer argument's bytes
(``max_mem_alloc_size``) and the bytes of every buffer its function holds (``global_mem_size``,
scratch included). Over a limit it is ``exceeds_limits``, with every excess as numbers in
``KernelLegality.limits`` (and the detail); running it raises ``LimitExceededError`` before
anything is allocated or launched.
"""

from __future__ import annotations

from dataclasses import dataclass

from accy.backends.registry import registration
from accy.ir.program import Stage
from accy.kernels.exprs import supported
from accy.kernels.ir import Kernel
from accy.passes.analysis import analysis
from accy.passes.base import Pass
from accy.passes.registry import register
from accy.plans import KernelLegality, LegalityReport
from accy.product import Product
from accy.target import KernelStatus, TargetProfile, function_bytes, kernel_excess


@analysis("kernel-requirements")
def kernel_requirements(product: Product) -> tuple[tuple[frozenset, tuple, int, bool], ...]:
    """Per kernel: the dtypes it touches, its (op, dtype) pairs, its work-group size, and
    whether it adds 64-bit values atomically."""
    return tuple(
        (dtypes, k.ops, k.geometry.local_size[0], atomics64)
        for k, (dtypes, atomics64) in ((k, k.body_facts()) for k in product.kernels)
    )


def check(kernel: Kernel, reqs: tuple, target: TargetProfile, product: Product | None = None,
          totals: dict[int, int] | None = None) -> KernelLegality:
    """``kernel``'s verdict; its buffers are checked when ``product`` (with its buffer plan
    and schedule) and ``totals`` (:func:`accy.target.function_bytes`) are given."""
    dtypes, ops, _local, atomics64 = reqs  # (the launch is checked whole below)
    fmt = registration(target.backend).artifact_format  # unknown backend: BackendLookupError
    if fmt not in target.artifact_formats:
        takes = ", ".join(sorted(target.artifact_formats)) or "no format"
        return KernelLegality(0, KernelStatus.unsupported_artifact,
                              f"target {target.device} takes {takes}, not the "
                              f"{target.backend} backend's {fmt}")
    missing = sorted(d.value for d in dtypes - target.usable_dtypes)
    if missing:
        return KernelLegality(0, KernelStatus.unsupported_dtype,
                              f"{kernel.entry} uses {', '.join(missing)}, which "
                              f"{target.device} lacks")
    bad = sorted({f"{op.value}:{dt.value}" for op, dt in ops
                  if op.is_elementwise and not supported(op, dt)})
    if bad:
        return KernelLegality(0, KernelStatus.unsupported_op,
                              f"{kernel.entry}: no OpenCL form for {', '.join(bad)}")
    if atomics64 and not target.atomics64:
        return KernelLegality(0, KernelStatus.unsupported_op,
                              f"{kernel.entry}: 64-bit atomics, which {target.device} lacks "
                              f"(cl_khr_int64_base_atomics)")
    if product is not None and totals is not None:
        excess = kernel_excess(target, product, kernel, totals)
    else:
        excess = target.launch_excess(kernel.geometry.global_size, kernel.geometry.local_size)
    if excess:
        return KernelLegality(0, KernelStatus.exceeds_limits,
                              f"{kernel.entry}: {'; '.join(map(str, excess))} "
                              f"(target {target.device})", excess)
    return KernelLegality(0, KernelStatus.legal, "")


@register
@dataclass(frozen=True)
class BackendLegalization(Pass):
    """Mark each kernel legal, or why not (dtype, op, artifact, limits), for the target profile."""

    name = "backend-legalization"
    stage = Stage.target
    preserves = frozenset({"uses", "liveness", "slot-map", "kernel-requirements"})

    def run(self, ctx, product):
        kernels = product.require("kernels", self.name, "kernelization")
        target = product.target or TargetProfile()
        registration(target.backend)  # before any kernel: an unknown backend is an error
        reqs = ctx.analysis("kernel-requirements", product)
        totals = function_bytes(product, kernels)
        verdicts = []
        for i, (k, r) in enumerate(zip(kernels, reqs, strict=True)):
            v = check(k, r, target, product, totals)
            verdicts.append(KernelLegality(i, v.status, v.detail, v.limits))
        report = LegalityReport(target.fingerprint(), tuple(verdicts))
        ctx.stat("illegal", sum(v.status is not KernelStatus.legal for v in verdicts))
        return product.replace(target=target, legality=report)
