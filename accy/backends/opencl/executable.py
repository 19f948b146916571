"""Running a prepared function through OpenCL: buffers per slot, kernels in schedule order."""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from accy.backends.opencl.runtime import Runtime, select_device
from accy.errors import InterpretError
from accy.ir.ops import Op
from accy.plans import SlotRole
from accy.target import launch_refusal, legality_error

if TYPE_CHECKING:
    from accy.job import PreparedJob


@dataclass
class _Frame:
    """The device memory one call works in: a buffer per slot it computes or copies (results,
    intermediates, inputs where they are copied) and the zero-filled scratch of its work
    items. One call at a time uses a frame; frames are reused across calls."""

    buffers: dict[int, object] = field(default_factory=dict)  # slot -> buffer
    scratch: dict[tuple[int, str], object] = field(default_factory=dict)  # (item, arg) -> buf


class Executable:
    """One function of a prepared job, ready to run: ``outputs = exe(*inputs)``.

    Kernels are built (cached) when the executable is made, up to ``max_threads`` programs at
    once (the kernels are the same as a serial build's); constants are written to the device
    then, once. Device buffers of intermediates are reused across calls.

    Threads: calling one executable from several threads at once is safe, and so is running
    several executables (of one program or of different ones) at once. Each call runs in a
    frame of device buffers of its own, taken from the executable's free frames (a new one when
    all are busy, so the executable holds as many frames as calls ever overlapped) and given
    back when it returns; the buffers belong to the executable, never to another. Nothing is
    locked while kernels run: calls only share the device queue (kernels from different
    threads interleave on it) and, for the instant of setting arguments and enqueueing, a
    kernel object (see :meth:`Runtime.launch`).

    ``last_kernel_ns`` holds each launched kernel's time (OpenCL profiling events) of the last
    call *made by the reading thread*: a call from another thread never changes what a thread
    reads after its own call, and a thread that made no call reads ``[]``.

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
        # the runtime's cached kernel objects, shared with other executables of the same
        # sources: Runtime.launch sets their arguments and enqueues them as one locked step
        self.steps = [(k, self.runtime.kernel(src, k.entry))
                      for (_, k), src in zip(mine, sources, strict=True)]
        # read-only, so one buffer per constant serves every frame; written here, once, before
        # any call can read it. Buffers are the executable's own, never pooled by program: two
        # executables of one program sharing them returned each other's results (issue #12)
        self._constants: dict[int, object] = {}  # slot -> buffer
        for s in self.buffers.slots:
            if s.function == self.fi and s.role is SlotRole.constant:
                self._constants[s.id] = self.runtime.allocate(s.nbytes)
                self.runtime.write(self._constants[s.id], s.values[0].value)
        self._free: list[_Frame] = []  # frames no call is using, the latest given back last
        self._frames_lock = threading.Lock()  # guards _free only, never held while running
        self._times = threading.local()  # .ns: the kernel times of this thread's last call

    @property
    def last_kernel_ns(self) -> list[int]:
        """Each launched kernel's time in ns in the reading thread's last call (see the class
        doc); ``[]`` before that thread's first call."""
        return getattr(self._times, "ns", [])

    def _take_frame(self) -> _Frame:
        with self._frames_lock:
            return self._free.pop() if self._free else _Frame()

    def _give_frame(self, frame: _Frame) -> None:
        with self._frames_lock:
            self._free.append(frame)

    def _buffer(self, frame: _Frame, slot: int) -> object:
        if slot in self._constants:
            return self._constants[slot]
        if slot not in frame.buffers:
            frame.buffers[slot] = self.runtime.allocate(self.buffers.slots[slot].nbytes)
        return frame.buffers[slot]

    def _scratch(self, frame: _Frame, work_item: int, arg) -> object:
        key = (work_item, arg.name)
        if key not in frame.scratch:
            buf = self.runtime.allocate(arg.scratch_elems * arg.dtype.itemsize)
            self.runtime.write(buf, np.zeros(arg.scratch_elems, arg.dtype.numpy))
            frame.scratch[key] = buf
        return frame.scratch[key]

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
        class doc for the aliasing rule and threads)."""
        arrays = self._check(inputs)
        results = self._outputs(out, arrays)
        frame = self._take_frame()
        # a failed call may leave scratch that kernels restore (counters) half-done: its frame
        # is dropped rather than given back
        done = self._run(frame, arrays, results, out is not None)
        self._give_frame(frame)
        return done

    def _run(self, frame: _Frame, arrays: list[np.ndarray], results: list[np.ndarray],
             into_out: bool) -> tuple[np.ndarray, ...]:
        """One call in ``frame``, which no other call uses meanwhile."""
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
                    self.runtime.write(self._buffer(frame, s.id), host)
        written = {}  # result slot -> the array the kernels write it into
        for node, host in zip(self.function.results, results, strict=True):
            if node.op not in (Op.PARAM, Op.CONSTANT):
                slot = self.buffers.slot_of(self.fi, node).id
                if unified and into_out and host.nbytes and slot not in written:
                    bound[slot] = self.runtime.host_buffer(host, writable=True)
                    written[slot] = host
        events = []
        for kernel, cl_kernel in self.steps:
            if not math.prod(kernel.geometry.global_size):
                continue  # an empty domain: nothing to compute
            args = [self._scratch(frame, kernel.work_item, a) if a.is_scratch
                    else bound[a.slot] if a.slot in bound else self._buffer(frame, a.slot)
                    for a in kernel.args]
            events.append(self.runtime.launch(cl_kernel, kernel.geometry.global_size,
                                              kernel.geometry.local_size, args))
        self._times.ns = [self.runtime.elapsed_ns(e) for e in events]
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
                    self.runtime.read(self._buffer(frame, slot), host)
        return tuple(results)
