"""Running a prepared function through OpenCL: buffers per slot, kernels in schedule order."""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyopencl as cl

from accy.backends.opencl.bound import BoundExecutable
from accy.backends.opencl.device_array import (
    DeviceArray,
    PendingCall,
    buffer_of,
    copy_buffer,
    is_device_tensor,
    to_device,
)
from accy.backends.opencl.render import BUFFER_ALIGN
from accy.backends.opencl.runtime import Runtime, select_device
from accy.errors import DeviceError, InterpretError
from accy.ir.ops import Op
from accy.ir.program import Stage
from accy.plans import SlotRole
from accy.target import launch_refusal, legality_error

if TYPE_CHECKING:
    from accy.job import PreparedJob
    from accy.kernels.ir import Kernel

_COMPLETE = cl.command_execution_status.COMPLETE
MAX_PENDING_FRAMES = 8


@dataclass(frozen=True)
class _Launch:
    """One kernel launch of every call: its program and geometry, and which arguments are the
    same in every call of a frame (``static``: constants, scratch, intermediates) and which
    may change per call (``dynamic``: input and result slots, ``(arg index, slot)``)."""

    kernel: Kernel
    program: cl.Program
    global_size: tuple[int, ...]
    local_size: tuple[int, ...] | None
    dynamic: tuple[tuple[int, int], ...]


@dataclass
class _Frame:
    """The device memory one call works in: a buffer per slot it computes or copies (results,
    intermediates, inputs where they are copied), the zero-filled scratch of its work items,
    and a kernel object per launch whose static arguments are set once. One call at a time
    enqueues in a frame; frames are reused across calls once that call's commands are done.

    ``current[i]`` holds the buffer each dynamic argument of launch ``i`` is set to, so a call
    sets only those that changed. ``last`` is the last command of the latest call enqueued in
    the frame (``None`` once that call was waited for), ``keep`` the host objects (arrays,
    buffers over host arrays, copy events) its commands use until ``last`` completes."""

    buffers: dict[int, cl.Buffer] = field(default_factory=dict)  # slot -> buffer
    scratch: dict[tuple[int, str], cl.Buffer] = field(default_factory=dict)  # (item, arg)
    kernels: list[cl.Kernel] = field(default_factory=list)
    current: list[list[object]] = field(default_factory=list)
    last: cl.Event | None = None
    keep: list[object] = field(default_factory=list)

    def idle(self) -> bool:
        return self.last is None or self.last.command_execution_status <= _COMPLETE


def _enqueue_kernel(runtime: Runtime, kernel: cl.Kernel, launch: _Launch) -> cl.Event:
    """Enqueue a frame's own kernel object with its arguments as set: no lock is needed (one
    call at a time uses a frame), unlike the runtime's shared kernels (:meth:`Runtime.launch`).
    OpenCL captures the arguments at the enqueue, so the next call may set them again at once.
    """
    try:
        return cl.enqueue_nd_range_kernel(runtime.queue, kernel, launch.global_size,
                                          launch.local_size)
    except cl.Error as exc:
        raise DeviceError(
            f"launching kernel {launch.kernel.entry!r} on {runtime.info.key} with global size "
            f"{launch.global_size}, local size {launch.local_size} failed: {exc}") from exc


class Executable:
    """One function of a prepared job, ready to run: ``outputs = exe(*inputs)``.

    Kernels are built (cached) when the executable is made, up to ``max_threads`` programs at
    once (the kernels are the same as a serial build's); constants are written to the device
    then, once. Device buffers of intermediates are reused across calls.

    Inputs are numpy arrays or device tensors (:class:`DeviceArray`, see :func:`to_device`,
    or C-contiguous ``pyopencl.array.Array``), positionally or by parameter name
    (``exe(x, w=w)``); a device tensor must live in the executable's context
    (``DeviceMismatchError`` otherwise) and is used in place, never copied. ``to_host=False``
    returns the results as new :class:`DeviceArray` s the caller owns (chain them into other
    executables on the device without host round trips); ``wait=False`` (or :meth:`enqueue`)
    returns a :class:`PendingCall` at once, with device results and the events (numpy inputs
    are copied on the host first, so they may change after the call returns; device tensors
    are read when the call runs). ``bind(w=...)`` gives a :class:`BoundExecutable` with those
    inputs fixed on the device (copied there once). A parameter named ``out``, ``to_host`` or
    ``wait`` can only be passed positionally.

    Threads: calling one executable from several threads at once is safe, and so is running
    several executables (of one program or of different ones) at once. Each call runs in a
    frame of device buffers and kernel objects of its own, taken from the executable's free
    frames (a new one when all are busy) and given back when its commands are enqueued; a free
    frame is reused only once the call that used it has finished on the device (when an
    asynchronous call's frame is still pending and ``max_pending`` free frames are, the next
    call waits for the oldest). Buffers belong to the executable, never to another; nothing is
    locked while kernels run, and calls share only the runtime's in-order queue.

    ``last_kernel_ns`` holds each launched kernel's time (OpenCL profiling events) of the last
    call *made by the reading thread* (for an asynchronous call: the last one the thread
    waited for): a call from another thread never changes what a thread reads after its own
    call, and a thread that made no call reads ``[]``.

    ``exe(*inputs, out=arrays)`` writes the results into ``arrays`` (one per result, of its
    shape and dtype: C-contiguous writeable numpy arrays, or device tensors) and returns them:
    reusing them across calls spares allocating fresh results every call. Aliasing rule: an
    ``out`` array must not overlap an input, and holds the result of the latest call it was
    given to. Without ``out`` every call returns fresh arrays.

    On a device whose memory the host shares (``DeviceInfo.host_unified_memory``: PoCL, CPU
    drivers) numpy inputs and ``out`` arrays are not copied: their buffers wrap the host arrays
    for the duration of the call, kernels read the inputs and write the results in place.
    (Fresh numpy results are still read from device buffers: kernels writing fresh memory would
    take its page faults, and ``last_kernel_ns`` would count them.)
    """

    max_pending = MAX_PENDING_FRAMES  # free frames with pending calls before a call waits

    def __init__(self, job: PreparedJob, function: str | None = None,
                 device: str | Runtime | None = None, max_threads: int = 1) -> None:
        job.require_stage(Stage.target, "running")  # names how far the job was prepared
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
        programs = self.runtime.build_many(sources, max_threads=max_threads)
        # the runtime's cached kernel objects (shared with other executables of the same
        # sources), for callers that launch them through Runtime.launch; calls use the
        # frames' own kernel objects
        self.steps = [(k, self.runtime.kernel(src, k.entry))
                      for (_, k), src in zip(mine, sources, strict=True)]
        # read-only, so one buffer per constant serves every frame; written here, once, before
        # any call can read it. Buffers are the executable's own, never pooled by program: two
        # executables of one program sharing them returned each other's results (issue #12)
        self._constants: dict[int, cl.Buffer] = {}  # slot -> buffer
        for s in self.buffers.slots:
            if s.function == self.fi and s.role is SlotRole.constant:
                self._constants[s.id] = self.runtime.allocate(s.nbytes)
                self.runtime.write(self._constants[s.id], s.values[0].value)
        fn = self.function
        # per parameter: name, shape, numpy dtype, type text (for errors), all computed once
        self._params = [(name, tuple(p.type.shape), np.dtype(p.type.dtype.numpy), str(p.type))
                        for name, p in zip(fn.param_names, fn.params, strict=True)]
        self._input_slots = [(s.values[0].attr("index"), s.id) for s in self.buffers.slots
                             if s.function == self.fi and s.role is SlotRole.input]
        # per result: ("param", index) | ("constant", node) | ("slot", slot id)
        self._results: list[tuple[str, Any]] = [
            ("param", n.attr("index")) if n.op is Op.PARAM else
            ("constant", n) if n.op is Op.CONSTANT else
            ("slot", self.buffers.slot_of(self.fi, n).id) for n in fn.results]
        self._result_types = [(tuple(n.type.shape), np.dtype(n.type.dtype.numpy), str(n.type))
                              for n in fn.results]
        self._result_nbytes = [math.prod(shape) * dtype.itemsize
                               for shape, dtype, _ in self._result_types]
        dynamic = {slot for _, slot in self._input_slots} | {
            x for kind, x in self._results if kind == "slot"}
        self._launches = [
            _Launch(k, program, tuple(k.geometry.global_size),
                    None if k.geometry.local_size is None else tuple(k.geometry.local_size),
                    tuple((j, a.slot) for j, a in enumerate(k.args)
                          if not a.is_scratch and a.slot in dynamic))
            for (_, k), program in zip(mine, programs, strict=True)
            if math.prod(k.geometry.global_size)]  # an empty domain: nothing to compute
        self._dynamic = dynamic
        self._unified = self.runtime.info.host_unified_memory
        self._free: list[_Frame] = []  # frames no call is using, the latest given back last
        self._frames_lock = threading.Lock()  # guards _free only, never held while running
        self._times = threading.local()  # .ns: the kernel times of this thread's last call

    @property
    def last_kernel_ns(self) -> list[int]:
        """Each launched kernel's time in ns in the reading thread's last call (see the class
        doc); ``[]`` before that thread's first call."""
        return getattr(self._times, "ns", [])

    def _set_times(self, ns: list[int]) -> None:
        self._times.ns = ns

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(self.function.param_names)

    # frames --------------------------------------------------------------------------------
    def _take_frame(self) -> _Frame:
        """A free frame whose last call has finished (the latest given back first), else a new
        one, else (``max_pending`` free frames all pending) the oldest, once it finishes."""
        with self._frames_lock:
            for i in range(len(self._free) - 1, -1, -1):
                if self._free[i].idle():
                    frame = self._free.pop(i)
                    break
            else:
                frame = (self._free.pop(0) if len(self._free) >= self.max_pending
                         else None)
        if frame is None:
            return self._new_frame()
        if frame.last is not None:
            frame.last.wait()  # outside the lock: other calls go on meanwhile
        frame.last = None
        frame.keep = []
        return frame

    def _give_frame(self, frame: _Frame) -> None:
        with self._frames_lock:
            self._free.append(frame)

    def _new_frame(self) -> _Frame:
        frame = _Frame()
        for launch in self._launches:
            kernel = cl.Kernel(launch.program, launch.kernel.entry)
            for j, a in enumerate(launch.kernel.args):
                if a.is_scratch:
                    kernel.set_arg(j, self._scratch(frame, launch.kernel.work_item, a))
                elif a.slot not in self._dynamic:
                    kernel.set_arg(j, self._buffer(frame, a.slot))
            frame.kernels.append(kernel)
            frame.current.append([None] * len(launch.dynamic))
        return frame

    def _buffer(self, frame: _Frame, slot: int) -> cl.Buffer:
        if slot in self._constants:
            return self._constants[slot]
        if slot not in frame.buffers:
            frame.buffers[slot] = self.runtime.allocate(self.buffers.slots[slot].nbytes)
        return frame.buffers[slot]

    def _scratch(self, frame: _Frame, work_item: int, arg) -> cl.Buffer:
        key = (work_item, arg.name)
        if key not in frame.scratch:
            buf = self.runtime.allocate(arg.scratch_elems * arg.dtype.itemsize)
            self.runtime.write(buf, np.zeros(arg.scratch_elems, arg.dtype.numpy))
            frame.scratch[key] = buf
        return frame.scratch[key]

    # checking ------------------------------------------------------------------------------
    def _gather(self, inputs: tuple, named: Mapping[str, Any],
                bound: Mapping[int, Any]) -> list[Any]:
        """The inputs in parameter order from positional ``inputs``, ``named`` ones and the
        ``bound`` ones (index -> device tensor)."""
        fn = self.function
        free = [i for i in range(len(self._params)) if i not in bound]
        if not named and not bound:
            if len(inputs) != len(fn.params):
                raise InterpretError(f"function {fn.name} takes {len(fn.params)} inputs "
                                     f"({', '.join(fn.param_names)}), {len(inputs)} given")
            return list(inputs)
        values: dict[int, Any] = dict(bound)
        index = {name: i for i, (name, *_) in enumerate(self._params)}
        for name, x in named.items():
            if name not in index:
                raise InterpretError(f"function {fn.name} has no input {name!r} (inputs: "
                                     f"{', '.join(fn.param_names)})")
            if index[name] in bound:
                raise InterpretError(f"function {fn.name}: input {name} is bound")
            values[index[name]] = x
        rest = [i for i in free if i not in values]
        if len(inputs) != len(rest):
            names = ", ".join(self._params[i][0] for i in rest)
            raise InterpretError(f"function {fn.name} takes {len(rest)} more inputs "
                                 f"({names}), {len(inputs)} given")
        values.update(zip(rest, inputs, strict=True))
        return [values[i] for i in range(len(self._params))]

    def _check(self, inputs: list[Any]) -> list[np.ndarray | cl.Buffer]:
        """Each input as a C-contiguous numpy array, or the buffer of a device tensor."""
        fn = self.function
        checked: list[np.ndarray | cl.Buffer] = []
        for (name, shape, dtype, text), x in zip(self._params, inputs, strict=True):
            if not isinstance(x, np.ndarray) and is_device_tensor(x):
                checked.append(buffer_of(x, self.runtime, f"function {fn.name}: input {name}",
                                         (shape, dtype), text))
                continue
            arr = np.asarray(x)
            if arr.shape != shape or arr.dtype != dtype:
                raise InterpretError(f"function {fn.name}: input {name} must be {text}, got "
                                     f"{arr.dtype}{list(arr.shape)}")
            checked.append(np.asarray(arr, order="C"))  # (ascontiguousarray makes 0-d 1-d)
        return checked

    def _outputs(self, out: Any, ins: list[np.ndarray | cl.Buffer], to_host: bool,
                 wait: bool) -> tuple[list[Any], list[cl.Buffer | None]]:
        """This call's result objects (``out`` checked against the results, else fresh numpy
        arrays or, with ``to_host=False`` or ``wait=False``, fresh device arrays) and each
        one's device buffer (``None`` for a numpy array)."""
        fn = self.function
        if out is None:
            if to_host and wait:
                return [np.empty(shape, dtype) for shape, dtype, _ in self._result_types], [
                    None] * len(self._result_types)
            fresh = [DeviceArray.empty(self.runtime, shape, dtype)
                     for shape, dtype, _ in self._result_types]
            return fresh, [d.buffer for d in fresh]
        out = (out,) if isinstance(out, np.ndarray) or is_device_tensor(out) else tuple(out)
        if len(out) != len(fn.results):
            raise InterpretError(f"function {fn.name} has {len(fn.results)} results, "
                                 f"out= gives {len(out)} arrays")
        arrays = [x for x in ins if isinstance(x, np.ndarray)]
        in_bufs = {x.int_ptr for x in ins if isinstance(x, cl.Buffer)}
        bufs: list[cl.Buffer | None] = []
        for i, ((shape, dtype, text), arr) in enumerate(
                zip(self._result_types, out, strict=True)):
            if is_device_tensor(arr):
                buf = buffer_of(arr, self.runtime, f"function {fn.name}: out[{i}]",
                                (shape, dtype), text)
                if buf.int_ptr in in_bufs:
                    raise InterpretError(f"function {fn.name}: out[{i}] overlaps an input")
                if any(b is not None and b.int_ptr == buf.int_ptr for b in bufs):
                    raise InterpretError(f"function {fn.name}: out[{i}] overlaps another out "
                                         f"array")
                bufs.append(buf)
                continue
            if not wait:
                raise InterpretError(f"function {fn.name}: out[{i}] must be a device tensor "
                                     f"in an asynchronous call (wait=False)")
            if not isinstance(arr, np.ndarray) or arr.shape != shape or arr.dtype != dtype:
                got = (f"{arr.dtype}{list(arr.shape)}" if isinstance(arr, np.ndarray)
                       else type(arr).__name__)
                raise InterpretError(f"function {fn.name}: out[{i}] must be a numpy array "
                                     f"of {text}, got {got}")
            if not (arr.flags.c_contiguous and arr.flags.writeable):
                raise InterpretError(f"function {fn.name}: out[{i}] must be C-contiguous "
                                     f"and writeable")
            if any(np.may_share_memory(arr, x) for x in arrays):
                raise InterpretError(f"function {fn.name}: out[{i}] overlaps an input")
            if any(isinstance(o, np.ndarray) and np.may_share_memory(arr, o)
                   for o in out[:i]):
                raise InterpretError(f"function {fn.name}: out[{i}] overlaps another out array")
            bufs.append(None)
        return list(out), bufs

    # calling -------------------------------------------------------------------------------
    def __call__(self, *inputs: Any, out: Any = None, to_host: bool = True, wait: bool = True,
                 **named: Any) -> tuple[Any, ...] | PendingCall:
        """Run the function on ``inputs`` (positional, or by parameter name); ``out``: arrays
        to write the results into; ``to_host=False``: return device arrays; ``wait=False``:
        return a :class:`PendingCall` without waiting (see the class doc)."""
        return self._call(self._gather(inputs, named, {}), out, to_host, wait)

    def enqueue(self, *inputs: Any, out: Any = None, **named: Any) -> PendingCall:
        """Start a call and return its :class:`PendingCall` without waiting (``out`` must
        be device tensors, if given)."""
        return self._call(self._gather(inputs, named, {}), out, False, False)

    def bind(self, **named: Any) -> BoundExecutable:
        """A :class:`BoundExecutable` with the named inputs fixed: device tensors of this
        context are kept as they are, anything else is checked and copied to the device now,
        once (so changing the numpy array later does not change the bound input)."""
        return BoundExecutable(self, self._bound(named, {}))

    def to_device(self, array: Any) -> DeviceArray:
        """``array`` copied to a new :class:`DeviceArray` on this executable's device."""
        return to_device(array, self.runtime)

    def _bound(self, named: Mapping[str, Any], already: Mapping[int, Any]) -> dict[int, Any]:
        fn = self.function
        index = {name: i for i, (name, *_) in enumerate(self._params)}
        bound = dict(already)
        for name, x in named.items():
            if name not in index:
                raise InterpretError(f"function {fn.name} has no input {name!r} (inputs: "
                                     f"{', '.join(fn.param_names)})")
            i = index[name]
            if i in bound:
                raise InterpretError(f"function {fn.name}: input {name} is bound already")
            _, shape, dtype, text = self._params[i]
            if is_device_tensor(x) and not isinstance(x, np.ndarray):
                buffer_of(x, self.runtime, f"function {fn.name}: input {name}", (shape, dtype),
                          text)  # checked now: a mistake shows at bind(), not at a call
                bound[i] = x
                continue
            arr = np.asarray(x)
            if arr.shape != shape or arr.dtype != dtype:
                raise InterpretError(f"function {fn.name}: input {name} must be {text}, got "
                                     f"{arr.dtype}{list(arr.shape)}")
            bound[i] = to_device(arr, self.runtime)
        return bound

    def _call(self, inputs: list[Any], out: Any, to_host: bool, wait: bool
              ) -> tuple[Any, ...] | PendingCall:
        ins = self._check(inputs)
        if not wait:  # a queued call reads numpy inputs as they are now, not when it runs
            ins = [x.copy() if isinstance(x, np.ndarray) else x for x in ins]
        results, bufs = self._outputs(out, ins, to_host, wait)
        frame = self._take_frame()
        # a failed call may leave scratch that kernels restore (counters) half-done: its frame
        # is dropped rather than given back
        events, kernels, keep = self._enqueue(frame, ins, results, bufs, wait, out is not None)
        if not wait:
            frame.last = events[-1] if events else None
            frame.keep = keep
            self._give_frame(frame)
            return PendingCall(tuple(results), events, kernels, self._set_times)
        if events:
            events[-1].wait()  # the in-order queue: the last command done means all are
        self._times.ns = [int(e.profile.end) - int(e.profile.start) for e in kernels]
        self._give_frame(frame)
        return tuple(results)

    def _enqueue(self, frame: _Frame, ins: list[np.ndarray | cl.Buffer], results: list[Any],
                 bufs: list[cl.Buffer | None], wait: bool, into_out: bool
                 ) -> tuple[list[cl.Event], list[cl.Event], list[object]]:
        """Enqueue one call in ``frame`` (which no other call uses meanwhile): input copies,
        kernels, result copies; with ``wait``, also read numpy results back. Returns every
        event in the order enqueued, the kernels' events, and the host objects the commands
        use until they are done."""
        runtime = self.runtime
        unified = self._unified
        bound: dict[int, cl.Buffer] = {}  # slot -> the buffer it is for this call only
        keep: list[object] = []
        transient: set[int] = set()  # slots bound to buffers over host arrays
        events: list[cl.Event] = []
        for index, slot in self._input_slots:
            x = ins[index]
            if isinstance(x, cl.Buffer):
                bound[slot] = x  # a device tensor: used in place
            elif unified and x.nbytes and x.ctypes.data % BUFFER_ALIGN == 0:
                bound[slot] = runtime.host_buffer(x, writable=False)
                keep.append(bound[slot])
                transient.add(slot)
            else:
                event = runtime.write(self._buffer(frame, slot), x, wait=False)
                if event is not None:
                    events.append(event)
                    keep.append(x)
        written: dict[int, int] = {}  # result slot -> the result the kernels write it into
        for r, (kind, slot) in enumerate(self._results):
            if kind != "slot" or slot in written:
                continue
            if bufs[r] is not None:
                bound[slot] = bufs[r]
                written[slot] = r
            elif (unified and into_out and results[r].nbytes  # numpy out, used in place
                  and results[r].ctypes.data % BUFFER_ALIGN == 0):
                bound[slot] = runtime.host_buffer(results[r], writable=True)
                written[slot] = r
                transient.add(slot)
        kernels: list[cl.Event] = []
        for launch, kernel, current in zip(self._launches, frame.kernels, frame.current,
                                           strict=True):
            for pos, (j, slot) in enumerate(launch.dynamic):
                buf = bound.get(slot)
                if buf is None:
                    buf = self._buffer(frame, slot)
                if current[pos] is not buf:  # set only what changed since the frame's last call
                    kernel.set_arg(j, buf)
                    # a buffer over a caller's numpy array is new every call: not remembered,
                    # so the frame does not keep the array alive after the call
                    current[pos] = None if slot in transient else buf
            kernels.append(_enqueue_kernel(runtime, kernel, launch))
        events += kernels
        # results the kernels did not write in place: into device results by device copies,
        # into numpy results by reads (blocking, so after the kernels on the in-order queue)
        for r, (kind, x) in enumerate(self._results):
            dst = bufs[r]
            if dst is not None:
                if kind == "param":
                    src = ins[x]
                    event = (copy_buffer(runtime, dst, src, self._result_nbytes[r])
                             if isinstance(src, cl.Buffer)
                             else runtime.write(dst, src, wait=False))
                    keep.append(src)
                elif kind == "constant":  # (as np.copyto would: in the result's dtype)
                    shape, dtype, _ = self._result_types[r]
                    value = np.ascontiguousarray(np.broadcast_to(
                        np.asarray(x.value, dtype=dtype), shape))
                    event = runtime.write(dst, value, wait=False)
                    keep.append(value)
                elif written[x] != r:  # the same value returned twice: a copy of its own
                    event = copy_buffer(runtime, dst, bound[x], self._result_nbytes[r])
                else:
                    continue
                if event is not None:
                    events.append(event)
        for slot, r in written.items():
            if bufs[r] is None:
                runtime.sync(bound[slot], results[r])  # numpy out over a host buffer
        for r, (kind, x) in enumerate(self._results):
            if bufs[r] is not None:
                continue
            host = results[r]
            if kind == "param":
                src = ins[x]
                if isinstance(src, cl.Buffer):
                    runtime.read(src, host)
                else:
                    np.copyto(host, src)
            elif kind == "constant":
                np.copyto(host, x.value)
            elif x not in written:
                runtime.read(self._buffer(frame, x), host)
            elif written[x] != r:  # the same value returned twice
                w = written[x]
                if bufs[w] is None:
                    np.copyto(host, results[w])
                else:
                    runtime.read(bound[x], host)
        return events, kernels, keep

