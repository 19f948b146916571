"""Target profiles: what a backend device offers, recorded on every prepared job.

A profile is built from a real OpenCL device (:meth:`TargetProfile.from_device`) or written by
hand. ``backend-legalization`` checks every kernel against it before anything is launched:
dtypes, ops, and the limits (:meth:`TargetProfile.launch_excess`,
:meth:`TargetProfile.memory_excess`): global size per dimension (``size_t`` of the device's
address bits), work-groups per dimension, local size per dimension and in all, bytes of each
buffer (``max_mem_alloc_size``) and of all buffers of a function (``global_mem_size``). A kernel
over a limit is ``exceeds_limits`` with each excess as a :class:`LimitExcess` (what, how big,
the limit); running it raises :class:`~accy.errors.LimitExceededError`. The executable checks
the device's own limits and the host's free memory again before building or allocating
(:func:`launch_refusal`), so an oversized job fails with numbers instead of a driver crash.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import TYPE_CHECKING, Any, Literal, get_args, get_origin, get_type_hints

from accy.errors import (
    AccyError,
    CapabilityMismatchError,
    LimitExceededError,
    TargetProfileError,
)
from accy.ir.memo import memoized
from accy.ir.types import DType

if TYPE_CHECKING:
    from accy.backends.opencl.runtime import DeviceInfo

OPENCL_C = "opencl-c"

TF32_MMA = "mma.m16n8k8.tf32"
"""PTX ``mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32`` (sm_80+) through inline asm in
OpenCL C: the name ``TargetProfile.tensor_cores`` lists when the device's probe passed."""
F16_MMA = "mma.m16n8k16.f16"
"""PTX ``mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32``: f16 operands, f32 accumulators."""
CP_ASYNC = "cp.async.cg.16"
"""PTX ``cp.async.cg.shared.global`` 16-byte copies with ``commit_group`` / ``wait_group``
(sm_80+), addressing local memory by ``(uint)(size_t)`` of a ``__local`` pointer: what the mma
generators' multi-stage pipeline needs (the probe runs one such copy before listing it)."""
TF32_SATFINITE = "cvt.rna.satfinite.tf32"
"""PTX ``cvt.rna.satfinite.tf32.f32``: TF32 rounding that gives the largest finite TF32 for an
infinity or a value rounding past it (NaN stays NaN). The 3xTF32 split takes its big part so:
an infinite ``x`` splits as the largest TF32 plus ``small = x - big`` infinite (plain rounding
gives ``inf - inf``, NaN), and an ``x`` above the largest TF32 does not overflow. The ``f32``
policy needs it for 3xtf32."""
WGMMA_F16 = "wgmma.m64nNk16.f16"
"""PTX ``wgmma.mma_async`` m64nNk16 with f16 operands (A from registers, B from local memory by
descriptor) and f32 accumulators, an ``sm_90a`` feature NVIDIA's OpenCL compiler does not emit:
written as markers in inline asm and expanded in the program's PTX, built for ``sm_90a``
(:mod:`accy.kernels.wgmma_ptx`). Probed on compute capability 9.0 only."""
WGMMA_TF32 = "wgmma.m64nNk8.tf32"
"""PTX ``wgmma.mma_async`` m64nNk8 with TF32 operands (A from registers, B from local memory as
K-major core matrices) and f32 accumulators, deferred and built as ``WGMMA_F16``; probed on
compute capability 9.0 only, where the tf32 and 3xtf32 policies take it
(:mod:`accy.kernels.wgmma_tf32`)."""
TMA_COPY = "cp.async.bulk.tensor"
"""PTX ``cp.async.bulk.tensor`` (Hopper's TMA) from a tensor map the kernel writes from a
template the CUDA driver encoded, completing on an ``mbarrier``, deferred and built as
``WGMMA_F16`` (:mod:`accy.kernels.tma`); probed on compute capability 9.0 where the CUDA driver
library loads. ``wgmma-f16`` copies B with it (:mod:`accy.kernels.wgmma_tma`)."""
TMA_TF32 = "cp.async.bulk.tensor.tf32"
"""``TMA_COPY`` from a tensor map of data type TFLOAT32, which rounds each f32 it copies to TF32
to nearest (what the probe checks: not truncated); ``wgmma-tf32`` copies both operands with it
under the ``tf32`` policy (:mod:`accy.kernels.wgmma_ss`)."""
TENSOR_CORE_SHAPES = (TF32_MMA, F16_MMA, CP_ASYNC, TF32_SATFINITE, WGMMA_F16, WGMMA_TF32,
                      TMA_COPY, TMA_TF32)

PRECISIONS = ("f32", "ieee", "tf32", "3xtf32")
"""Precision policies for f32 contractions (``kernelization{precision=...}``): ``f32`` (the
default) f32 accuracy by the fastest kernels the target has: ``3xtf32`` where it recorded TF32
tensor cores (and ``TF32_SATFINITE``), ``ieee`` elsewhere (:func:`resolve_precision`); ``ieee`` f32
products and sums (every generator); ``tf32`` operands rounded to TF32 (10 explicit mantissa bits)
on tensor cores, f32 sums (opt-in, as torch's ``allow_tf32``); ``3xtf32`` each operand split as big
+ small TF32 parts, three products summed (CUTLASS's "3xTF32"), about f32 accuracy.
:func:`accy.error_bounds.error_bounds` takes the resolved names."""


def resolve_precision(policy: str, target: TargetProfile) -> str:
    """The concrete policy ``policy`` means on ``target``: ``f32`` becomes ``3xtf32`` where
    the target's probe found TF32 tensor cores and the saturating TF32 rounding (so that
    infinities stay infinities), else ``ieee``; the others stay."""
    if policy not in PRECISIONS:
        raise ValueError(f"precision {policy!r}: one of {', '.join(PRECISIONS)}")
    if policy != "f32":
        return policy
    return "3xtf32" if {TF32_MMA, TF32_SATFINITE} <= set(target.tensor_cores) else "ieee"


DEVICE_TYPES = ("cpu", "gpu", "accelerator")  # TargetProfile.device_type, as OpenCL names them

MAX_WORK_GROUPS = 2**31 - 1
"""Work-groups per dimension a launch may have. OpenCL bounds only the global size (by
``size_t``), but drivers count groups in 32 bits: PoCL dies (SIGILL) at 2**32 groups, CUDA-based
drivers take 2**31 - 1 in dimension 0. No device query says it, so every profile carries this."""


@dataclass(frozen=True)
class LimitExcess:
    """One limit a kernel's launch or buffers exceed: what, how big, the limit."""

    what: str  # "global size (dimension 0)", "buffer out0 (bytes)", ...
    size: int
    limit: int

    def __str__(self) -> str:
        return f"{self.what} {self.size} exceeds the limit {self.limit}"

    def numbers(self) -> tuple[str, int, int]:
        return (self.what, self.size, self.limit)


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
    device_type: str = "gpu"  # one of DEVICE_TYPES: which kernel shapes suit it
    native_vector_bytes: int = 16  # the SIMD width the device prefers (float lanes * 4)
    atomics64: bool = False  # 64-bit global atomics (cl_khr_int64_base_atomics)
    # limits of launches and buffers (the generic values suit any recent device)
    # local size per dimension; () = max_work_group_size in each of 3 (hand-written profiles)
    max_work_item_sizes: tuple[int, ...] = ()
    max_mem_alloc_size: int = 1 << 30  # bytes of one buffer (CL_DEVICE_MAX_MEM_ALLOC_SIZE)
    global_mem_size: int = 4 << 30  # bytes of all buffers at once (CL_DEVICE_GLOBAL_MEM_SIZE)
    address_bits: int = 64  # size_t of the device: global sizes stay below 2**address_bits
    max_work_groups: int = MAX_WORK_GROUPS  # per dimension (see MAX_WORK_GROUPS)
    # matrix and copy instructions the device compiled and ran at selection (runtime.py's
    # second probe): names from TENSOR_CORE_SHAPES; empty unless detected, so nothing assumes
    # tensor cores
    tensor_cores: tuple[str, ...] = ()
    # bytes of local memory a work-group may declare in static arrays, where the device allows
    # more than local_mem_bytes (the size it reports, which also bounds __local arguments):
    # NVIDIA's OpenCL builds static arrays up to the multiprocessor's opt-in limit (227 KiB on
    # compute capability 9.0), found by a probe (runtime.py); 0: local_mem_bytes. Generators
    # that declare their local memory statically and were measured with more read
    # group_local_bytes
    static_local_bytes: int = 0

    @property
    def group_local_bytes(self) -> int:
        """The local memory a work-group's static arrays may take (see static_local_bytes)."""
        return max(self.local_mem_bytes, self.static_local_bytes)

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
            max_work_item_sizes=tuple(info.max_work_item_sizes),
            max_mem_alloc_size=info.max_mem_alloc_size or info.global_mem_size,
            global_mem_size=info.global_mem_size,
            address_bits=info.address_bits,
            tensor_cores=tuple(getattr(info, "tensor_cores", ())),
            static_local_bytes=getattr(info, "static_local_bytes", 0),
        )

    @property
    def usable_dtypes(self) -> frozenset[DType]:
        """The dtypes kernels may use here: ``dtypes``, and f16 wherever f32 is. OpenCL C stores
        f16 without ``cl_khr_fp16`` (``vload_half``/``vstore_half``), and accy's kernels compute
        f16 in float, rounding every f16 value, so ``dtypes`` lists f16 only for devices that
        compute it natively (what ``dtype-legalization`` asks)."""
        return self.dtypes | ({DType.f16} if DType.f32 in self.dtypes else frozenset())

    @memoized
    def fingerprint(self) -> str:
        """A digest of what kernels are generated and judged for. Memory capacities
        (``max_mem_alloc_size``, ``global_mem_size``) are left out: drivers of host devices
        (PoCL) report them from the memory free when the process starts, and a stamp must not
        change with that; a verdict they change is in the legality report's fingerprint."""
        text = repr((self.backend, self.device, sorted(d.value for d in self.dtypes),
                     sorted(self.artifact_formats), self.math_tier, self.max_work_group_size,
                     self.local_mem_bytes, self.compute_units, self.constant_mem_bytes,
                     self.max_constant_args, self.device_type, self.native_vector_bytes,
                     self.atomics64, self.max_work_item_sizes, self.address_bits,
                     self.max_work_groups)
                    + ((self.tensor_cores,) if self.tensor_cores else ())
                    + ((self.static_local_bytes,) if self.static_local_bytes else ()))
        return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()

    def describe(self) -> str:
        dts = ",".join(sorted(d.value for d in self.dtypes))
        return (f"{self.backend} on {self.device}: dtypes {dts}; formats "
                f"{','.join(sorted(self.artifact_formats))}; math {self.math_tier}; "
                f"max work-group {self.max_work_group_size}; local memory "
                f"{self.local_mem_bytes} B; constant memory {self.constant_mem_bytes} B in "
                f"{self.max_constant_args} args; {self.compute_units} compute units "
                f"({self.device_type}, {self.native_vector_bytes}-byte vectors"
                f"{', 64-bit atomics' if self.atomics64 else ''}); work-items per dimension "
                f"{list(self.work_item_sizes)}; buffers up to {self.max_mem_alloc_size} B, "
                f"{self.global_mem_size} B in all; {self.address_bits}-bit sizes"
                + (f"; tensor cores {','.join(self.tensor_cores)}" if self.tensor_cores else "")
                + (f"; static local arrays up to {self.static_local_bytes} B"
                   if self.static_local_bytes else ""))

    def to_dict(self) -> dict[str, Any]:
        """The profile as JSON values (sets and tuples as sorted or ordered lists), which
        :meth:`from_dict` reads back equal: a device's profile saved for planning elsewhere,
        without the device (:meth:`save`, ``accy target --save``)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, frozenset):
                value = sorted(v.value if isinstance(v, DType) else v for v in value)
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "target profile"
                  ) -> TargetProfile:
        """The profile :meth:`to_dict` wrote (fields left out take their defaults); a
        :class:`~accy.errors.TargetProfileError` (a ``ValueError``) naming ``where`` and the
        field for an unknown field or a value of the wrong kind."""
        if not isinstance(data, Mapping):
            raise TargetProfileError(f"{where}: expected an object of fields, got "
                                     f"{type(data).__name__}")
        known = get_type_hints(cls)
        values: dict[str, Any] = {}
        for name, value in data.items():
            if name not in known:
                raise TargetProfileError(f"{where}: unknown field {name!r} (known: "
                                         f"{', '.join(sorted(known))})")
            try:
                values[name] = _field_value(known[name], value)
            except (TypeError, ValueError) as e:
                raise TargetProfileError(f"{where}: field {name!r}: {e}") from None
        return cls(**values)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`to_dict` to the JSON file ``path`` (:meth:`load` reads it back)."""
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(self.to_dict(), fh, indent=1)
            fh.write("\n")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> TargetProfile:
        """The profile saved in the JSON file ``path``: by :meth:`save`, or a record holding
        one as ``target_profile`` (``experiments/ab_gemm.py``'s and ``sweep_gemm.py``'s); a
        :class:`~accy.errors.TargetProfileError` naming the file for anything else (an
        ``OSError`` where it cannot be read)."""
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise TargetProfileError(f"{path}: not JSON ({e})") from None
        if isinstance(data, dict) and "target_profile" in data:
            data = data["target_profile"]
        return cls.from_dict(data, where=str(path))

    @property
    def work_item_sizes(self) -> tuple[int, ...]:
        """The most work-items of a work-group per dimension (``max_work_item_sizes``, else
        ``max_work_group_size`` in each of three dimensions)."""
        return self.max_work_item_sizes or (self.max_work_group_size,) * 3

    @property
    def max_global_size(self) -> int:
        """The largest global size of one dimension: what the device's ``size_t`` holds."""
        return 2**self.address_bits - 1

    def launch_excess(self, global_size: Iterable[int], local_size: Iterable[int]
                      ) -> tuple[LimitExcess, ...]:
        """The limits a launch of this geometry exceeds (empty when it fits)."""
        gsize, lsize = tuple(global_size), tuple(local_size)
        out = []
        caps = self.work_item_sizes
        if len(gsize) > len(caps):
            out.append(LimitExcess("dimensions", len(gsize), len(caps)))
        for d, g in enumerate(gsize):
            if g > self.max_global_size:
                out.append(LimitExcess(f"global size (dimension {d})", g, self.max_global_size))
            if d < len(lsize) and lsize[d] > 0 and -(-g // lsize[d]) > self.max_work_groups:
                out.append(LimitExcess(f"work-groups (dimension {d})", -(-g // lsize[d]),
                                       self.max_work_groups))
        for d, (lo, cap) in enumerate(zip(lsize, caps, strict=False)):
            if lo > cap:
                out.append(LimitExcess(f"local size (dimension {d})", lo, cap))
        if math.prod(lsize) > self.max_work_group_size:
            out.append(LimitExcess("work-group size", math.prod(lsize),
                                   self.max_work_group_size))
        return tuple(out)

    def memory_excess(self, buffer_bytes: Mapping[str, int], total_bytes: int
                      ) -> tuple[LimitExcess, ...]:
        """The limits a kernel's buffers exceed: each of ``buffer_bytes`` (name -> bytes)
        against ``max_mem_alloc_size``, ``total_bytes`` (every buffer its function holds)
        against ``global_mem_size``."""
        out = [LimitExcess(f"buffer {name} (bytes)", n, self.max_mem_alloc_size)
               for name, n in buffer_bytes.items() if n > self.max_mem_alloc_size]
        if total_bytes > self.global_mem_size:
            out.append(LimitExcess("all buffers of the function (bytes)", total_bytes,
                                   self.global_mem_size))
        return tuple(out)


def _field_value(kind: Any, value: Any) -> Any:
    """``value`` read from JSON as a field of type ``kind`` (resolved by
    :func:`typing.get_type_hints`: ``int``, ``tuple[str, ...]``, ``frozenset[DType]``,
    ``Literal[...]``...), or a ``TypeError`` / ``ValueError``."""
    origin, args = get_origin(kind), get_args(kind)
    if origin in (tuple, frozenset):
        if not isinstance(value, list):
            raise TypeError(f"expected a list, got {value!r}")
        return origin(_field_value(args[0], v) for v in value)
    if origin is Literal:
        if value not in args:
            raise ValueError(f"expected one of {list(args)}, got {value!r}")
        return value
    if kind is DType:
        return DType(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TypeError(f"expected {kind.__name__}, got {value!r}")
    return value


class KernelStatus(Enum):
    """Legality of one kernel under a target profile."""

    legal = "legal"
    unsupported_dtype = "unsupported_dtype"
    unsupported_op = "unsupported_op"
    unsupported_artifact = "unsupported_artifact"
    exceeds_limits = "exceeds_limits"


def status_error(status: KernelStatus) -> type[AccyError] | None:
    """The error a kernel of this status raises when launched (None when legal):
    :class:`LimitExceededError` (a :class:`CapabilityMismatchError`) for ``exceeds_limits``."""
    if status is KernelStatus.legal:
        return None
    return LimitExceededError if status is KernelStatus.exceeds_limits else CapabilityMismatchError


def legality_error(index: int, entry: str, verdict: Any) -> AccyError | None:
    """The error running kernel ``index`` (its ``KernelLegality`` verdict) raises, None when
    it is legal; a :class:`LimitExceededError` carries the verdict's limits as numbers."""
    error = status_error(verdict.status)
    if error is None:
        return None
    message = f"kernel {index} ({entry}) is {verdict.status.value}: {verdict.detail}"
    if error is LimitExceededError:
        return LimitExceededError(message, tuple(x.numbers() for x in verdict.limits))
    return error(message)


# --- what a product's kernels need (duck-typed: plans and kernels import this module) -----


def function_bytes(product: Any, kernels: Iterable[Any]) -> dict[int, int]:
    """Bytes an executable of each function holds: its slots and its kernels' scratch."""
    totals: dict[int, int] = {}
    for s in product.buffers.slots:
        totals[s.function] = totals.get(s.function, 0) + s.nbytes
    scratch: dict[tuple[int, str], tuple[int, int]] = {}
    for k in kernels:
        fn = product.schedule.item(k.work_item).function
        for a in k.args:
            if a.is_scratch:  # one buffer per (work item, name), as the executable holds it
                scratch[(k.work_item, a.name)] = (fn, a.scratch_elems * a.dtype.itemsize)
    for fn, n in scratch.values():
        totals[fn] = totals.get(fn, 0) + n
    return totals


def kernel_excess(profile: TargetProfile, product: Any, kernel: Any,
                  totals: Mapping[int, int]) -> tuple[LimitExcess, ...]:
    """Every limit of ``profile`` that ``kernel`` (of ``product``) exceeds: its launch, each
    buffer argument, and all buffers of its function (``totals``: :func:`function_bytes`)."""
    slots = product.buffers.slots
    sizes = {a.name: (a.scratch_elems * a.dtype.itemsize if a.is_scratch
                      else slots[a.slot].nbytes) for a in kernel.args}
    fn = product.schedule.item(kernel.work_item).function
    return (profile.launch_excess(kernel.geometry.global_size, kernel.geometry.local_size)
            + profile.memory_excess(sizes, totals.get(fn, 0)))


def host_available_bytes() -> int | None:
    """Memory the host can still give (``MemAvailable`` of /proc/meminfo, else the free
    physical pages); None where neither is known."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def launch_refusal(product: Any, kernels: Iterable[tuple[int, Any]], fi: int,
                   info: Any | None, available: int | None = None
                   ) -> LimitExceededError | None:
    """Why function ``fi`` of ``product`` must not run on the device of ``info`` (a
    ``DeviceInfo``), checked before anything is built or allocated; None when it may.

    The job was legalized for its own profile, maybe not this device's: ``kernels`` (index,
    kernel) are checked again against ``TargetProfile.from_device(info)``, and a job prepared
    for wider vectors than the device's compiler handles (``DeviceInfo.max_vector_floats``: a
    PoCL whose LLVM targets a CPU without AVX-512, where 16-float vectors aborted the process
    or computed wrong sums) is refused. The host must hold the results (fresh arrays each
    call) and, where the device shares host memory, every buffer too: more than
    ``available`` (default: :func:`host_available_bytes`) is refused rather than left to the
    OOM killer.
    """
    widest = 4 * getattr(info, "max_vector_floats", 0)
    if widest and product.target.native_vector_bytes > widest:
        what = "vector width (bytes)"
        return LimitExceededError(
            f"the job was prepared for {product.target.native_vector_bytes}-byte vectors; the "
            f"compiler of {info.name} fails on vectors wider than {widest} bytes (its LLVM "
            f"targets a CPU without AVX-512): prepare the job for this device (prepare(..., "
            f"device=...) or TargetProfile.from_device)",
            ((what, product.target.native_vector_bytes, widest),))
    kernels = list(kernels)
    totals = function_bytes(product, [k for _, k in kernels])
    if info is not None:
        profile = TargetProfile.from_device(info)
        for index, k in kernels:
            excess = kernel_excess(profile, product, k, totals)
            if excess:
                return LimitExceededError(
                    f"kernel {index} ({k.entry}) exceeds the limits of {info.name}: "
                    f"{'; '.join(map(str, excess))}", tuple(x.numbers() for x in excess))
    results = product.program.functions[fi].results
    need = sum(math.prod(n.type.shape) * n.type.dtype.itemsize for n in results)
    if info is not None and getattr(info, "host_unified_memory", False):
        need += totals.get(fi, 0)
    available = host_available_bytes() if available is None else available
    if available is not None and need > available:
        what = "host memory for results and buffers (bytes)"
        return LimitExceededError(f"function {product.program.functions[fi].name} needs "
                                  f"{need} bytes of host memory, {available} are free",
                                  ((what, need, available),))
    return None
