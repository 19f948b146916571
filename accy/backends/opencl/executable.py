"""Running a prepared function through OpenCL: buffers per slot, kernels in schedule order."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from accy.backends.opencl.runtime import Runtime, select_device
from accy.errors import InterpretError
from accy.ir.ops import Op
from accy.plans import SlotRole
from accy.target import launch_refusal, legality_error

if TYPE_CHECKING:
    from accy.job import PreparedJob


class Executable:
    """One function of a prepared job, ready to run: ``outputs = exe(*inputs)``.

    Kernels are built (cached) when the executable is made, up to ``max_threads`` programs at
    once (the kernels are the same as a serial build's); device buffers of intermediates are
    reused across calls. ``last_kernel_ns`` holds each kernel's time (OpenCL profiling events)
    of the last call.

    ``exe(*inputs, out=arrays)`` writes the results into ``arrays`` (one per result, of its
    shape and dtype, C-contiguous and writeable) and returns them: reusing them across calls
    spares allocating (and page-faulting) fresh result arrays every call. Aliasing rule: an
    ``out`` array must not overlap an input, and holds the result of the latest call it was
    given to. Without ``out`` every call returns fresh arrays.

    On a device whose memory the host shares (``DeviceInfo.host_unified_memory``: PoCL, CPU
    drivers) inputs and ``out`` arrays are not copied: their buffers wrap the host arrays for
    the duration of the call, kernels read the inputs and write the results in place. (Fresh
    results are still read from device buffers: kernels writing fresh memory would take its
    page faults, and ``last_kernel_ns`` would count them.)
    """

    def __init__(self, job: PreparedJob, function: str | None = None,
                 device: str | Runtime | None = None, max_threads: int = 1) -> None:
        product = job.product
        self.function = product.program.function(function)
        self.fi = product.program.functions.index(self.function)
        legality = product.require("legality", "running", "backend-legalization")
        mine = [(i, k) for i, k in enumerate(job.kernels)
                if product.schedule.item(k.work_item).function == self.fi]
        for index, kernel in mine:  # before any device work: legality needs no device
            error = legality_error(index, kernel.entry, legality.kernels[index])
            if error is not None:
                raise error
        self.runtime = device if isinstance(device, Runtime) else select_device(device)
        # the job may have been legalized for another profile: this device's limits and the
        # host's free memory, before anything is built or allocated (no driver crash, no OOM)
        refusal = launch_refusal(product, mine, self.fi, getattr(self.runtime, "info", None))
        if refusal is not None:
            raise refusal
        self.buffers = product.buffers
        sources = [job.kernel_source(i) for i, _ in mine]
        self.runtime.build_many(sources, max_threads=max_threads)
        self.steps = [(k, self.runtime.kernel(src, k.entry))
                      for (_, k), src in zip(mine, sources, strict=True)]
        self.key = (job.product.fingerprint(), self.fi)
        self.last_kernel_ns: list[int] = []
        self._constants_written = False
        # the device buffers this executable uses, held here: the runtime's pool may forget
        # them (see Runtime.buffer), and constants and zeroed scratch are written only once
        self._held: dict[tuple, object] = {}

    def _buffer(self, slot: int) -> object:
        key = (*self.key, slot)
        if key not in self._held:
            self._held[key] = self.runtime.buffer(key, self.buffers.slots[slot].nbytes)
        return self._held[key]

    def _scratch(self, work_item: int, arg) -> object:
        key = (*self.key, "scratch", work_item, arg.name)
        if key not in self._held:
            buf = self.runtime.buffer(key, arg.scratch_elems * arg.dtype.itemsize)
            self.runtime.write(buf, np.zeros(arg.scratch_elems, arg.dtype.numpy))
            self._held[key] = buf
        return self._held[key]

    def _check(self, inputs: tuple) -> list[np.ndarray]:
        fn = self.function
        if len(inputs) != len(fn.params):
            raise InterpretError(f"function {fn.name} takes {len(fn.params)} inputs "
                                 f"({', '.join(fn.param_names)}), {len(inputs)} given")
        arrays = []
        for name, p, x in zip(fn.param_names, fn.params, inputs, strict=True):
            arr = np.asarray(x)
            t = p.type
            if arr.shape != t.shape or arr.dtype != t.dtype.numpy:
                raise InterpretError(f"function {fn.name}: input {name} must be {t}, got "
                                     f"{arr.dtype}{list(arr.shape)}")
            arrays.append(np.asarray(arr, order="C"))  # (ascontiguousarray makes 0-d 1-d)
        return arrays

    def _outputs(self, out: tuple | list | None, arrays: list[np.ndarray]
                 ) -> list[np.ndarray]:
        """The result arrays of this call: ``out`` checked against the results, else fresh."""
        fn = self.function
        if out is None:
            return [np.empty(n.type.shape, n.type.dtype.numpy) for n in fn.results]
        out = (out,) if isinstance(out, np.ndarray) else tuple(out)
        if len(out) != len(fn.results):
            raise InterpretError(f"function {fn.name} has {len(fn.results)} results, "
                                 f"out= gives {len(out)} arrays")
        for i, (node, arr) in enumerate(zip(fn.results, out, strict=True)):
            t = node.type
            if not isinstance(arr, np.ndarray) or arr.shape != t.shape or (
                    arr.dtype != t.dtype.numpy):
                got = (f"{arr.dtype}{list(arr.shape)}" if isinstance(arr, np.ndarray)
                       else type(arr).__name__)
                raise InterpretError(f"function {fn.name}: out[{i}] must be a numpy array "
                                     f"of {t}, got {got}")
            if not (arr.flags.c_contiguous and arr.flags.writeable):
                raise InterpretError(f"function {fn.name}: out[{i}] must be C-contiguous "
                                     f"and writeable")
            if any(np.may_share_memory(arr, x) for x in arrays):
                raise InterpretError(f"function {fn.name}: out[{i}] overlaps an input")
            if any(np.may_share_memory(arr, o) for o in out[:i]):
                raise InterpretError(f"function {fn.name}: out[{i}] overlaps another out array")
        return list(out)

    def __call__(self, *inputs: np.ndarray, out: tuple | list | np.ndarray | None = None
                 ) -> tuple[np.ndarray, ...]:
        """Run the function on ``inputs``; ``out``: arrays to write the results into (see the
        class doc for the aliasing rule)."""
        arrays = self._check(inputs)
        results = self._outputs(out, arrays)
        unified = self.runtime.info.host_unified_memory
        bound = {}  # slot -> a buffer over a host array, for this call only
        for s in self.buffers.slots:
            if s.function != self.fi:
                continue
            if s.role is SlotRole.input:
                host = arrays[s.values[0].attr("index")]
                if unified and host.nbytes:
                    bound[s.id] = self.runtime.host_buffer(host, writable=False)
                else:
                    self.runtime.write(self._buffer(s.id), host)
            elif s.role is SlotRole.constant and not self._constants_written:
                self.runtime.write(self._buffer(s.id), s.values[0].value)
        self._constants_written = True
        written = {}  # result slot -> the array the kernels write it into
        for node, host in zip(self.function.results, results, strict=True):
            if node.op not in (Op.PARAM, Op.CONSTANT):
                slot = self.buffers.slot_of(self.fi, node).id
                if unified and out is not None and host.nbytes and slot not in written:
                    bound[slot] = self.runtime.host_buffer(host, writable=True)
                    written[slot] = host
        events = []
        for kernel, cl_kernel in self.steps:
            if not math.prod(kernel.geometry.global_size):
                continue  # an empty domain: nothing to compute
            args = [self._scratch(kernel.work_item, a) if a.is_scratch
                    else bound[a.slot] if a.slot in bound else self._buffer(a.slot)
                    for a in kernel.args]
            events.append(self.runtime.launch(cl_kernel, kernel.geometry.global_size,
                                              kernel.geometry.local_size, args))
        self.last_kernel_ns = [self.runtime.elapsed_ns(e) for e in events]
        for slot, host in written.items():
            self.runtime.sync(bound[slot], host)
        for node, host in zip(self.function.results, results, strict=True):
            if node.op is Op.PARAM:
                np.copyto(host, arrays[node.attr("index")])
            elif node.op is Op.CONSTANT:
                np.copyto(host, node.value)
            else:
                slot = self.buffers.slot_of(self.fi, node).id
                if slot in written and written[slot] is not host:
                    np.copyto(host, written[slot])  # the same value returned twice
                elif slot not in written:
                    self.runtime.read(self._buffer(slot), host)
        return tuple(results)
