"""The pyopencl runtime: device discovery and selection, cached builds, buffers, launches.

Builds are cached twice: in memory per process (``_PROGRAMS``), and on disk across processes
(:mod:`accy.backends.opencl.build_cache`); :meth:`Runtime.build_many` joins a job's kernel
sources into few programs (:mod:`accy.backends.opencl.batching`).

``select_device(selector)`` picks a device and returns its ``Runtime`` (one per device and per
selector string in a process). Every candidate device is probed by building and running a tiny
kernel first, because a platform can be listed yet unable to compile anything (the PoCL bundled
with the PyPI wheel uses an LLVM too old for some newer CPUs: "unknown target CPU 'generic'").
Devices that fail the probe are skipped, and the reason is kept for error messages. A PoCL
device whose compiler targets a CPU without AVX-512 while reporting vectors of 16 floats (the
PyPI wheel's LLVM 14 on a CPU newer than it knows, e.g. AMD Zen 4) is given vectors of 8:
LLVM aborts the process on some 16-float operations there
(:func:`accy.backends.opencl.pocl.pocl_vector_width`).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import numpy as np
import pyopencl as cl

from accy.backends.opencl import batching, build_cache, tensor_cores
from accy.backends.opencl.builds import BuildStats, ProgramCache, build_error, in_threads
from accy.backends.opencl.builds import digest as _digest
from accy.backends.opencl.builds import error_sites as _error_sites  # noqa: F401 (tests)
from accy.backends.opencl.icd import IcdDecision, register_nvidia_icd
from accy.backends.opencl.pocl import pocl_vector_width
from accy.backends.opencl.tensor_cores import build_program, compute_capability
from accy.errors import DeviceError, KernelBuildError

ENV_VAR = "ACCY_DEVICE"
DEFAULT_SELECTOR = "pocl"

INSTALL_HINT = (
    "Install an OpenCL platform:\n"
    "  - PoCL (CPU) from PyPI: pip install 'accy[pocl]'\n"
    "    (its LLVM is too old for some newer CPUs; if builds fail with\n"
    '    "unknown target CPU", use the distribution package instead)\n'
    "  - PoCL (CPU) on Debian/Ubuntu: apt-get install pocl-opencl-icd\n"
    "  - NVIDIA GPUs: install the NVIDIA driver, which ships the OpenCL ICD"
)

_PROBE_SOURCE = "__kernel void accy_probe(__global int *out) { out[get_global_id(0)] = 42; }\n"

_LOCK = threading.RLock()
# (device key, digest of one source) -> built program, least recently used first, at most
# PROGRAM_CACHE_SIZE distinct programs (executables hold their kernels, so evicting a program
# only means rebuilding it when a new executable needs it again)
_PROGRAMS = ProgramCache()
PROGRAM_CACHE_SIZE = 512
_PROBES: dict[str, Runtime | str] = {}  # device key -> working runtime or failure reason
_SELECTED: dict[str, Runtime] = {}  # selector string -> runtime
_BUILDING: dict[tuple[str, str], threading.Lock] = {}  # one build per (device, digest) at once
_ICD_CHECKED = False  # whether register_nvidia_icd ran (once, before the first platform query)
_ICD_DECISION: IcdDecision | None = None  # what it decided, for error messages


@dataclass(frozen=True)
class DeviceInfo:
    """What accy needs to know about one OpenCL device (plain data, safe to record)."""

    platform: str
    name: str
    vendor: str
    driver_version: str
    opencl_version: str
    max_work_group_size: int
    local_mem_size: int
    compute_units: int
    global_mem_size: int
    extensions: tuple[str, ...]
    fp16: bool
    fp64: bool
    preferred_vector_width_float: int
    max_constant_buffer_size: int = 64 * 1024
    max_constant_args: int = 8
    device_type: str = "gpu"  # "cpu", "gpu" or "accelerator" (from CL_DEVICE_TYPE)
    host_unified_memory: bool = False  # device and host share memory (CPU devices, iGPUs)
    # launch and buffer limits (TargetProfile.from_device; 0 / () where not known)
    max_mem_alloc_size: int = 0
    max_work_item_sizes: tuple[int, ...] = ()
    address_bits: int = 64
    # NVIDIA compute capability (cl_nv_device_attribute_query), () elsewhere
    compute_capability: tuple[int, ...] = ()
    # matrix instructions that built and ran at selection (tensor_cores.py); what
    # TargetProfile.from_device records, never assumed from the name or capability alone
    tensor_cores: tuple[str, ...] = ()
    # bytes of static __local arrays a work-group may declare, where a probe found more than
    # local_mem_size (tensor_cores.probe_static_local); 0: local_mem_size
    static_local_bytes: int = 0
    # the widest float vectors its compiler handles, where selection found a limit (pocl.py);
    # 0: none known. Jobs prepared for wider vectors are refused (target.launch_refusal)
    max_vector_floats: int = 0

    @property
    def key(self) -> str:
        """``platform:device:driver``, the identity used in cache keys and records."""
        return f"{self.platform}:{self.name}:{self.driver_version}"

    @classmethod
    def of(cls, device: cl.Device) -> DeviceInfo:
        """Read the info of a pyopencl device."""
        extensions = tuple(sorted(device.extensions.split()))
        try:
            double_config = int(device.double_fp_config)
        except cl.Error:
            double_config = 0
        return cls(
            platform=device.platform.name.strip(),
            name=device.name.strip(),
            vendor=device.vendor.strip(),
            driver_version=device.driver_version.strip(),
            opencl_version=device.version.strip(),
            max_work_group_size=int(device.max_work_group_size),
            local_mem_size=int(device.local_mem_size),
            compute_units=int(device.max_compute_units),
            global_mem_size=int(device.global_mem_size),
            extensions=extensions,
            fp16="cl_khr_fp16" in extensions,
            fp64="cl_khr_fp64" in extensions or double_config != 0,
            preferred_vector_width_float=int(device.preferred_vector_width_float),
            max_constant_buffer_size=int(device.max_constant_buffer_size),
            max_constant_args=int(device.max_constant_args),
            device_type=("cpu" if device.type & cl.device_type.CPU else
                         "gpu" if device.type & cl.device_type.GPU else "accelerator"),
            host_unified_memory=_host_unified(device),
            max_mem_alloc_size=int(device.max_mem_alloc_size),
            max_work_item_sizes=tuple(int(n) for n in device.max_work_item_sizes),
            address_bits=int(device.address_bits),
            compute_capability=(compute_capability(device)
                                if "cl_nv_device_attribute_query" in extensions else ()),
        )


def _host_unified(device: cl.Device) -> bool:
    """CL_DEVICE_HOST_UNIFIED_MEMORY (deprecated in OpenCL 2.0: False where it is not known)."""
    try:
        return bool(device.host_unified_memory)
    except (cl.Error, AttributeError):
        return False


def _platforms() -> list[cl.Platform]:
    """Every OpenCL platform, or ``[]`` when no ICD is installed."""
    global _ICD_CHECKED, _ICD_DECISION
    with _LOCK:
        if not _ICD_CHECKED:  # before the loader reads its vendor list (see icd.py)
            _ICD_CHECKED = True
            _ICD_DECISION = register_nvidia_icd()
    try:
        return list(cl.get_platforms())
    except cl.Error:  # PLATFORM_NOT_FOUND_KHR when the ICD loader finds nothing
        return []


def _devices() -> list[tuple[int, int, cl.Device]]:
    """``(platform index, device index, device)`` for every device of every platform."""
    found: list[tuple[int, int, cl.Device]] = []
    for p_index, platform in enumerate(_platforms()):
        try:
            devices = platform.get_devices()
        except cl.Error:  # DEVICE_NOT_FOUND: a platform with no devices
            continue
        found.extend((p_index, d_index, device) for d_index, device in enumerate(devices))
    return found


def list_devices() -> list[DeviceInfo]:
    """Every device of every platform, in platform order, without probing them."""
    return [DeviceInfo.of(device) for _, _, device in _devices()]


def _first_error_line(text: str) -> str:
    """The most telling line of a failure: the first that mentions an error, else the first."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if "error" in line.lower() and "clBuildProgram failed" not in line:
            return line
    return lines[0] if lines else "unknown failure"


def _probe(device: cl.Device) -> Runtime | str:
    """The device's runtime if it builds and runs a tiny kernel, else why it does not."""
    info = DeviceInfo.of(device)
    with _LOCK:
        if info.key not in _PROBES:
            try:
                runtime = Runtime(device)
                kernel = runtime.kernel(_PROBE_SOURCE, "accy_probe")
                out = np.zeros(4, dtype=np.int32)
                buf = runtime.allocate(out.nbytes)
                runtime.launch(kernel, (4,), None, [buf])
                if not (runtime.read(buf, out) == 42).all():
                    raise DeviceError("probe kernel ran but produced wrong results")
                if _is_pocl(device) and info.preferred_vector_width_float > 8:
                    width = pocl_vector_width(runtime.context, runtime.device,
                                              info.preferred_vector_width_float)
                    if width < info.preferred_vector_width_float:
                        runtime.info = replace(runtime.info, preferred_vector_width_float=width,
                                               max_vector_floats=width)
                cores = tensor_cores.probe_tensor_cores(runtime, _is_nvidia(device))
                if cores:  # recorded on the runtime's info: TargetProfile.from_device reads it
                    runtime.info = replace(
                        runtime.info, tensor_cores=cores,
                        static_local_bytes=tensor_cores.probe_static_local(runtime))
                _PROBES[info.key] = runtime
            except (cl.Error, KernelBuildError, DeviceError) as exc:
                _PROBES[info.key] = _first_error_line(str(exc))
        return _PROBES[info.key]


def _is_pocl(device: cl.Device) -> bool:
    text = f"{device.platform.name} {device.platform.vendor}".lower()
    return "portable computing language" in text or "pocl" in text


def _is_nvidia(device: cl.Device) -> bool:
    return "nvidia" in f"{device.platform.name} {device.platform.vendor}".lower()


def _part_matches(part: str, index: int, texts: Sequence[str]) -> bool:
    """A selector part matches by index, by case-insensitive substring, or when empty."""
    part = part.strip().lower()
    if not part:
        return True
    if part.isdigit():
        return int(part) == index
    return any(part in text.lower() for text in texts)


def _matches(selector: str, p_index: int, d_index: int, device: cl.Device) -> bool:
    """Whether a device is a candidate for the selector (before probing)."""
    sel = selector.strip().lower()
    if sel == "pocl":
        return _is_pocl(device)
    if sel == "nvidia":
        return _is_nvidia(device)
    if sel in ("cpu", "gpu"):
        wanted = cl.device_type.CPU if sel == "cpu" else cl.device_type.GPU
        return bool(device.type & wanted)
    platform = device.platform
    platform_texts = (platform.name, platform.vendor, platform.version)
    device_texts = (device.name, device.vendor)
    if ":" in sel:
        p_part, d_part = sel.split(":", 1)
        return _part_matches(p_part, p_index, platform_texts) and _part_matches(
            d_part, d_index, device_texts
        )
    return _part_matches(sel, -1, platform_texts + device_texts)  # bare substring, any part


def _no_match_message(selector: str, devices: list[tuple[int, int, cl.Device]]) -> str:
    lines = [f"no usable OpenCL device matches selector {selector!r}; devices:"]
    for p_index, d_index, device in devices:
        entry = (
            f"  {p_index}:{d_index}: {device.platform.name.strip()} / {device.name.strip()}"
            f" (driver {device.driver_version.strip()})"
        )
        reason = _PROBES.get(DeviceInfo.of(device).key)
        if isinstance(reason, str):
            entry += f" -- skipped: {reason}"
        lines.append(entry)
    if "nvidia" in selector.lower() and _ICD_DECISION is not None:
        lines.append(f"NVIDIA OpenCL driver registration: {_ICD_DECISION.reason}")
    lines.append(
        "selectors: pocl, nvidia, cpu, gpu, or PLATFORM:DEVICE (index or substring, "
        f"either may be empty); set {ENV_VAR} to choose a default"
    )
    return "\n".join(lines)


def select_device(selector: str | None = None) -> Runtime:
    """The runtime of the first device that matches ``selector`` and passes the probe.

    ``None`` means ``$ACCY_DEVICE``, else ``"pocl"``. Selectors: ``pocl``, ``nvidia``, ``cpu``,
    ``gpu``, or ``PLATFORM:DEVICE`` where each part is an index or a case-insensitive substring
    (empty means any); a bare other word is a substring of platform, vendor or device name.
    The same selector string returns the same ``Runtime`` within a process.
    """
    if selector is None:
        selector = os.environ.get(ENV_VAR, "").strip() or DEFAULT_SELECTOR
    with _LOCK:
        if selector in _SELECTED:
            return _SELECTED[selector]
        devices = _devices()
        if not devices:
            raise DeviceError(f"no OpenCL platform or device found.\n{INSTALL_HINT}")
        for p_index, d_index, device in devices:
            if _matches(selector, p_index, d_index, device):
                found = _probe(device)
                if isinstance(found, Runtime):
                    _SELECTED[selector] = found
                    return found
        raise DeviceError(_no_match_message(selector, devices))


def _launch_lock(kernel: cl.Kernel) -> threading.Lock:
    """The lock serialising ``kernel``'s set-arguments-and-enqueue steps, kept on the kernel
    object itself (made on first use), so it lives and dies with the kernel."""
    lock = getattr(kernel, "_accy_launch_lock", None)
    if lock is None:
        with _LOCK:  # two first launches at once must not make two locks
            lock = getattr(kernel, "_accy_launch_lock", None)
            if lock is None:
                lock = kernel._accy_launch_lock = threading.Lock()
    return lock


class Runtime:
    """One OpenCL device with its context, a profiling queue, and build and buffer caches.

    Thread-safe: the caches are guarded by a lock held only to look up and insert (builds run
    outside it, in parallel), the queue is an OpenCL command queue (thread-safe since OpenCL
    1.1; commands of different threads interleave in it), and :meth:`launch` locks per kernel.

    The queue is in order (no ``OUT_OF_ORDER_EXEC_MODE``): device tensors, chained and
    asynchronous calls rely on each command running after the ones enqueued before it.

    ``cache_dir``: the folder of the on-disk build cache (made private), ``False`` for none,
    ``None`` (default) for what the environment says at each build (see
    :mod:`accy.backends.opencl.build_cache`: ``ACCY_BUILD_CACHE``, ``ACCY_BUILD_CACHE_DIR``,
    ``ACCY_BUILD_CACHE_MIB``); ``cache_bytes`` bounds a ``cache_dir`` given here.
    """

    def __init__(self, device: cl.Device, cache_dir: str | os.PathLike[str] | Literal[False]
                 | None = None, cache_bytes: int | None = None) -> None:
        self.device = device
        self.info = DeviceInfo.of(device)
        self.context = cl.Context([device])
        self.queue = cl.CommandQueue(
            self.context, device, properties=cl.command_queue_properties.PROFILING_ENABLE
        )
        self._builds = 0
        self.stats = BuildStats()
        self._cache_dir = cache_dir
        self._cache_bytes = cache_bytes
        self._is_pocl = _is_pocl(device)
        # what the binaries depend on besides source and options
        self._identity = (device.platform.name.strip(), device.platform.version.strip(),
                          self.info.name, self.info.vendor, self.info.opencl_version,
                          self.info.driver_version)
        self._kernels: OrderedDict[tuple[str, str], cl.Kernel] = OrderedDict()

    def __repr__(self) -> str:
        return f"Runtime({self.info.key!r})"

    def disk_cache(self) -> build_cache.DiskCache | None:
        """The on-disk build cache builds use now, or None (off)."""
        if self._cache_dir is False:
            return None
        if self._cache_dir is not None:
            max_bytes = (build_cache.max_bytes_from(os.environ) if self._cache_bytes is None
                         else self._cache_bytes)
            return build_cache.open_cache(Path(self._cache_dir), max_bytes)
        return build_cache.from_environment(self._is_pocl)

    def build(self, source: str, options: tuple[str, ...] = ()) -> cl.Program:
        """The program built from ``source``; a cached build is reused without recompiling.

        Thread-safe; the compile runs outside the global lock (pyopencl releases the GIL in
        ``clBuildProgram``), so different sources build in parallel and one source once.
        Looks in memory, then in the disk cache, then compiles (and stores the binary).
        """
        options = tuple(options)
        cache_key = (self.info.key, _digest(source, options))
        with _LOCK:
            program = self._cached(cache_key)
            if program is not None:
                return program
            one_at_a_time = _BUILDING.setdefault(cache_key, threading.Lock())
        with one_at_a_time:
            with _LOCK:
                program = self._cached(cache_key)
                if program is not None:
                    return program
            try:
                program = self._compile(source, options, sources=1)
            except cl.Error as exc:
                log = re.sub(r"(clBuildProgram failed: \w+)( - \1)+", r"\1", str(exc))
                raise build_error(self.info.key, source, options, log) from None
            with _LOCK:
                _PROGRAMS.remember([cache_key], program, PROGRAM_CACHE_SIZE)
                _BUILDING.pop(cache_key, None)
            return program

    def _compile(self, source: str, options: tuple[str, ...], sources: int) -> cl.Program:
        """``source`` built: loaded from the disk cache when there, else compiled (and its
        binary stored). Raises ``cl.Error`` when compiling fails; a cached binary that fails
        to load is dropped and the source compiled instead."""
        cache = self.disk_cache()
        key = (build_cache.entry_key(self._identity, options, _digest(source, ()))
               if cache is not None else "")
        if cache is not None:
            start = time.perf_counter_ns()
            program = build_cache.load_program(cache, key, self.context, self.device, options)
            if program is not None:
                with _LOCK:
                    self.stats.loaded += 1
                    self.stats.loaded_sources += sources
                    self.stats.load_ns += time.perf_counter_ns() - start
                return program
        start = time.perf_counter_ns()
        program = build_program(self.context, self.device, source, options)
        with _LOCK:
            self._builds += 1
            self.stats.compiled += 1
            self.stats.compiled_sources += sources
            self.stats.compile_ns += time.perf_counter_ns() - start
        if cache is not None:
            start = time.perf_counter_ns()
            stored = build_cache.store_program(cache, key, program)
            with _LOCK:
                self.stats.stored += stored
                self.stats.store_ns += time.perf_counter_ns() - start
        return program

    def _cached(self, cache_key: tuple[str, str]) -> cl.Program | None:
        program = _PROGRAMS.get(cache_key)
        if program is None or program.context != self.context:
            return None
        _PROGRAMS.move_to_end(cache_key)
        return program

    def build_many(self, sources: Sequence[str], options: tuple[str, ...] = (),
                   max_threads: int = 1, batch: bool = True) -> list[cl.Program]:
        """The programs of ``sources`` in order, distinct sources built ``max_threads`` at once.

        With ``batch`` (default) the sources not built yet are joined into few programs
        (:mod:`~accy.backends.opencl.batching`: bounded in size, built ``max_threads`` at once),
        so several sources may share one program; each source's kernels are in its program. A
        batch that fails is built again source by source, so a failure raises the build error
        (quoting the bad line) of the first failing source in order, as serial :meth:`build`
        calls would.
        """
        if isinstance(max_threads, bool) or not isinstance(max_threads, int) or max_threads < 1:
            raise ValueError(f"max_threads must be a positive int, got {max_threads!r}")
        options = tuple(options)
        distinct = list(dict.fromkeys(sources))
        if batch:
            groups = [g for g in batching.batches(self._missing(distinct, options)) if len(g) > 1]
            in_threads(lambda g: self._build_batch(g, options), groups, max_threads)
        # what is left (sources built alone, failed batches) builds source by source
        threads = max_threads if len(self._missing(distinct, options)) > 1 else 1
        built = dict(zip(distinct, in_threads(lambda s: self.build(s, options), distinct,
                                             threads), strict=True))
        return [built[s] for s in sources]

    def _missing(self, sources: list[str], options: tuple[str, ...]) -> list[str]:
        """The ``sources`` with no program in memory yet."""
        with _LOCK:
            return [s for s in sources
                    if self._cached((self.info.key, _digest(s, options))) is None]

    def _build_batch(self, group: list[str], options: tuple[str, ...]) -> None:
        """Build ``group`` joined into one program and cache it under each source; on failure
        cache nothing (the sources are then built one by one, to name the bad one)."""
        try:
            program = self._compile(batching.join(group), options, sources=len(group))
        except cl.Error:
            with _LOCK:
                self.stats.failed_batches += 1
            return
        with _LOCK:
            _PROGRAMS.remember([(self.info.key, _digest(s, options)) for s in group], program,
                              PROGRAM_CACHE_SIZE)

    def kernel(self, source: str, entry: str, options: tuple[str, ...] = ()) -> cl.Kernel:
        """The kernel ``entry`` of ``source``; the same object for the same arguments."""
        options = tuple(options)
        key = (_digest(source, options), entry)
        with _LOCK:
            found = self._kernels.get(key)
            if found is not None:
                self._kernels.move_to_end(key)
                return found
        program = self.build(source, options)  # not under the lock: builds may run in parallel
        with _LOCK:
            if key not in self._kernels:
                names = sorted(n for n in program.kernel_names.split(";") if n)
                if entry not in names:
                    raise KernelBuildError(
                        f"kernel {entry!r} is not defined by the source on {self.info.key}; "
                        f"it defines: {', '.join(names) or '(no kernels)'}"
                    )
                self._kernels[key] = cl.Kernel(program, entry)
                while len(self._kernels) > PROGRAM_CACHE_SIZE:
                    self._kernels.popitem(last=False)
            return self._kernels[key]

    def allocate(self, nbytes: int) -> cl.Buffer:
        """A new device buffer of ``nbytes`` (at least 1) that only its holder uses; freed when
        no one holds it."""
        if nbytes < 0:
            raise DeviceError(f"negative buffer size {nbytes} on {self.info.key}")
        return cl.Buffer(self.context, cl.mem_flags.READ_WRITE, size=max(nbytes, 1))

    def host_buffer(self, array: np.ndarray, writable: bool) -> cl.Buffer:
        """A buffer over ``array``'s own memory (``CL_MEM_USE_HOST_PTR``), for this call only.

        On a device with host-unified memory kernels then read and write the array in place,
        with no copy; :meth:`sync` makes their writes visible before the host reads them.
        ``array`` must be C-contiguous and not empty, and stay alive while the buffer is used.
        """
        if not array.flags.c_contiguous or not array.nbytes:
            raise DeviceError(f"host buffer over a non-contiguous or empty array "
                              f"({array.dtype}{list(array.shape)}) on {self.info.key}")
        access = cl.mem_flags.READ_WRITE if writable else cl.mem_flags.READ_ONLY
        return cl.Buffer(self.context, access | cl.mem_flags.USE_HOST_PTR, hostbuf=array)

    def sync(self, buf: cl.Buffer, array: np.ndarray) -> None:
        """Make kernel writes to a :meth:`host_buffer` over ``array`` visible to the host: map
        and unmap it (no copy where memory is unified; OpenCL requires the map)."""
        mapped, _ = cl.enqueue_map_buffer(self.queue, buf, cl.map_flags.READ, 0, array.shape,
                                          array.dtype, is_blocking=True)
        mapped.base.release(self.queue)

    def write(self, buf: cl.Buffer, array: np.ndarray, wait: bool = True) -> cl.Event | None:
        """Copy ``array`` to ``buf``; ``wait=False`` only enqueues the copy and returns its
        event (``array`` must then stay unchanged until the event completes)."""
        host = np.ascontiguousarray(array)
        self._check_fits(buf, host)
        if host.nbytes:
            return cl.enqueue_copy(self.queue, buf, host, is_blocking=wait)
        return None

    def read(self, buf: cl.Buffer, out: np.ndarray) -> np.ndarray:
        """Fill ``out`` from ``buf`` (blocking) and return ``out``."""
        contiguous = out.flags.c_contiguous and out.flags.writeable
        host = out if contiguous else np.empty(out.shape, dtype=out.dtype)
        self._check_fits(buf, host)
        if host.nbytes:
            cl.enqueue_copy(self.queue, host, buf, is_blocking=True)
        if host is not out:
            out[...] = host
        return out

    def _check_fits(self, buf: cl.Buffer, host: np.ndarray) -> None:
        if host.nbytes > buf.size:
            raise DeviceError(
                f"array of {host.nbytes} bytes ({host.dtype}{list(host.shape)}) does not fit "
                f"a device buffer of {buf.size} bytes on {self.info.key}"
            )

    def launch(
        self,
        kernel: cl.Kernel,
        global_size: tuple[int, ...],
        local_size: tuple[int, ...] | None,
        args: Sequence[cl.Buffer | np.generic],
    ) -> cl.Event:
        """Set the kernel's arguments and enqueue it over an NDRange; return its event.

        Thread-safe for a kernel object shared between threads (:meth:`kernel` hands out one
        per source and entry): OpenCL forbids setting one kernel's arguments from two threads
        at once, and the enqueue must see the arguments this call set, so both run under the
        kernel's own lock. OpenCL captures the arguments at the enqueue, so the lock is not
        held while the kernel runs, and launches of different kernels never wait on it.
        """
        try:
            with _launch_lock(kernel):
                kernel.set_args(*args)
                return cl.enqueue_nd_range_kernel(
                    self.queue,
                    kernel,
                    tuple(global_size),
                    None if local_size is None else tuple(local_size),
                )
        except (cl.Error, TypeError) as exc:  # TypeError: wrong number of args
            raise DeviceError(
                f"launching kernel {kernel.function_name!r} on {self.info.key} with "
                f"global size {tuple(global_size)}, local size {local_size} and "
                f"{len(args)} args failed: {exc}"
            ) from exc

    def elapsed_ns(self, event: cl.Event) -> int:
        """Wait for ``event`` and return its profiled run time (end - start) in nanoseconds."""
        event.wait()
        return int(event.profile.end) - int(event.profile.start)

    def finish(self) -> None:
        """Wait for everything enqueued so far."""
        self.queue.finish()

    def build_count(self) -> int:
        """How many real (uncached) builds this runtime has done."""
        return self._builds
