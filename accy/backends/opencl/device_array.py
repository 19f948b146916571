"""Device-resident tensors and asynchronous calls.

:class:`DeviceArray` is accy's own thin tensor type: one OpenCL buffer that its holder owns,
with a shape, a dtype and the :class:`~accy.backends.opencl.runtime.Runtime` (device, context
and queue) it lives on. Why not ``pyopencl.array.Array``: executables must check where a tensor
lives, pass its buffer to kernels and hand out results cheaply; a ``pyopencl.array.Array``
carries an allocator, strides, an offset and an event list that every call would have to
check and maintain (and it costs tens of microseconds to make). Interoperability stays: an
executable also accepts C-contiguous ``pyopencl.array.Array`` inputs and ``out=`` arrays of its
context (see :func:`buffer_of`), and :meth:`DeviceArray.as_pyopencl` views one as a
``pyopencl.array.Array`` without a copy.

Ordering: every command accy enqueues on a device (copies, kernels, reads) goes to its
runtime's one in-order queue, so a tensor written by a call (even one not waited for) is
read by later calls, ``get()`` and chained executables only after the writes are done.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyopencl as cl

from accy.errors import DeviceMismatchError, InterpretError

if TYPE_CHECKING:
    from accy.backends.opencl.runtime import Runtime


class DeviceArray:
    """A tensor in device memory: ``buffer`` (a ``cl.Buffer`` of at least ``nbytes``),
    ``shape``, ``dtype`` (numpy) and ``runtime``, C-contiguous.

    Made by :func:`to_device`, :meth:`empty`, or returned by executables
    (``exe(..., to_host=False)``, ``exe.enqueue(...)``); each is the holder's own buffer, never
    one an executable reuses. ``get()`` (alias ``to_numpy()``, and ``np.asarray(d)``) copies
    it to the host, after every command enqueued before on its runtime's queue.
    """

    __slots__ = ("buffer", "shape", "dtype", "runtime")

    def __init__(self, runtime: Runtime, buffer: cl.Buffer, shape: tuple[int, ...],
                 dtype: np.dtype | type | str) -> None:
        self.runtime = runtime
        self.buffer = buffer
        self.shape = tuple(int(n) for n in shape)
        self.dtype = np.dtype(dtype)
        if buffer.size < self.nbytes:
            raise InterpretError(f"device array {self.dtype}{list(self.shape)} needs "
                                 f"{self.nbytes} bytes, its buffer has {buffer.size}")

    @classmethod
    def empty(cls, runtime: Runtime, shape: tuple[int, ...] | int,
              dtype: np.dtype | type | str) -> DeviceArray:
        """An uninitialised device array of its own new buffer."""
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        dtype = np.dtype(dtype)
        return cls(runtime, runtime.allocate(math.prod(shape) * dtype.itemsize), shape, dtype)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def device(self) -> str:
        """The device's identity (``DeviceInfo.key``: platform, device, driver)."""
        return self.runtime.info.key

    def get(self, out: np.ndarray | None = None) -> np.ndarray:
        """The values as a numpy array (``out`` if given, else a new one); blocks until every
        command enqueued before on the queue (e.g. the call computing them) is done."""
        if out is None:
            out = np.empty(self.shape, self.dtype)
        elif out.shape != self.shape or out.dtype != self.dtype:
            raise InterpretError(f"get(out=): out must be {self.dtype}{list(self.shape)}, got "
                                 f"{out.dtype}{list(out.shape)}")
        return self.runtime.read(self.buffer, out)

    to_numpy = get

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        host = self.get()
        return host if dtype is None else host.astype(dtype, copy=False)

    def as_pyopencl(self) -> Any:
        """A ``pyopencl.array.Array`` over the same buffer (no copy) on the runtime's queue."""
        import pyopencl.array as cl_array

        return cl_array.Array(self.runtime.queue, self.shape, self.dtype, data=self.buffer)

    def __repr__(self) -> str:
        return f"DeviceArray({self.dtype}{list(self.shape)} on {self.runtime.info.key!r})"


def to_device(array: Any, device: str | Runtime | Any | None = None) -> DeviceArray:
    """``array`` (anything numpy takes) copied into a new :class:`DeviceArray` on ``device``:
    a selector string (see :func:`accy.select_device`), a ``Runtime``, an executable (its
    runtime), or ``None`` for ``ACCY_DEVICE`` / PoCL. The copy is complete on return, so
    ``array`` may change afterwards."""
    from accy.backends.opencl.runtime import Runtime, select_device

    if isinstance(device, Runtime):
        runtime = device
    elif device is None or isinstance(device, str):
        runtime = select_device(device)
    elif isinstance(getattr(device, "runtime", None), Runtime):
        runtime = device.runtime
    else:
        raise TypeError(f"to_device: device must be a selector, a Runtime or an executable, "
                        f"not {type(device).__name__}")
    host = np.ascontiguousarray(array)
    return DeviceArray(runtime, allocate_from(runtime, host), host.shape, host.dtype)


def allocate_from(runtime: Runtime, array: np.ndarray) -> cl.Buffer:
    """A new buffer on ``runtime`` holding a copy of C-contiguous ``array``, made and filled in
    one step (``CL_MEM_COPY_HOST_PTR``: the copy is done on return)."""
    if not array.nbytes:
        return runtime.allocate(0)
    return cl.Buffer(runtime.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
                     hostbuf=array)


def copy_buffer(runtime: Runtime, dst: cl.Buffer, src: cl.Buffer, nbytes: int
                ) -> cl.Event | None:
    """Enqueue a device-to-device copy of ``nbytes`` on the runtime's queue (not waited for);
    ``None`` when there is nothing to copy."""
    if not nbytes:
        return None
    return cl.enqueue_copy(runtime.queue, dst, src, byte_count=nbytes)


def _is_pyopencl_array(x: Any) -> bool:
    cls = type(x)
    return cls.__name__ == "Array" and cls.__module__.startswith("pyopencl")


def is_device_tensor(x: Any) -> bool:
    """Whether ``x`` is a tensor in device memory that executables take: a
    :class:`DeviceArray` or a ``pyopencl.array.Array``."""
    return isinstance(x, DeviceArray) or _is_pyopencl_array(x)


def buffer_of(x: Any, runtime: Runtime, what: str, want: tuple[tuple[int, ...], np.dtype],
              type_text: str) -> cl.Buffer:
    """The buffer of device tensor ``x`` for an executable on ``runtime``, after checking it:
    shape and dtype (``want``; ``InterpretError`` naming ``what`` and ``type_text``), and that
    it lives in ``runtime``'s context (``DeviceMismatchError`` naming ``what`` and both
    devices). A ``pyopencl.array.Array`` must be C-contiguous at offset 0; commands pending
    on a queue other than the runtime's are waited for first (the runtime's queue is in order,
    another one is not ordered with it)."""
    shape, dtype = want
    if x.shape != shape or x.dtype != dtype:
        raise InterpretError(f"{what} must be {type_text}, got {x.dtype}{list(x.shape)}")
    if isinstance(x, DeviceArray):
        if x.runtime is not runtime and x.runtime.context != runtime.context:
            raise DeviceMismatchError(
                f"{what} lives on {x.runtime.info.key!r} (another device or context), the "
                f"executable runs on {runtime.info.key!r}: copy it with accy.to_device("
                f"x.get(), device) or run an executable on its device")
        return x.buffer
    if x.context != runtime.context:  # a pyopencl array
        raise DeviceMismatchError(
            f"{what} is a pyopencl array of another context (device "
            f"{x.context.devices[0].name.strip()!r}), the executable runs on "
            f"{runtime.info.key!r}")
    if not x.flags.c_contiguous or x.offset:
        raise InterpretError(f"{what}: a pyopencl array must be C-contiguous at offset 0")
    if x.queue is not None and x.queue != runtime.queue and x.events:
        cl.wait_for_events(x.events)
    return x.base_data


class PendingCall:
    """An asynchronous call in flight (``exe.enqueue(...)`` / ``exe(..., wait=False)``).

    ``results``: the results as device tensors, usable at once as inputs of later calls on the
    same device (the queue orders them); ``events``: the OpenCL events of the call's commands
    in the order enqueued (input copies, kernels, result copies), ``kernel_events`` the
    kernels' alone. ``wait()`` blocks until the call is done and returns
    the results; ``get()`` returns them as numpy arrays; ``kernel_ns`` each kernel's time (and
    the executable's ``last_kernel_ns`` for the thread that waited); ``done`` says without
    blocking whether it has finished. Dropping a handle without waiting is fine: the call
    completes, and its executable reuses its buffers only after that.
    """

    __slots__ = ("results", "events", "kernel_events", "_on_wait", "_kernel_ns")

    def __init__(self, results: tuple[Any, ...], events: Sequence[cl.Event],
                 kernel_events: Sequence[cl.Event],
                 on_wait: Callable[[list[int]], None] | None = None) -> None:
        self.results = results
        self.events = list(events)
        self.kernel_events = list(kernel_events)
        self._on_wait = on_wait
        self._kernel_ns: list[int] | None = None

    @property
    def done(self) -> bool:
        return all(e.command_execution_status == cl.command_execution_status.COMPLETE
                   for e in self.events)

    def wait(self) -> tuple[DeviceArray, ...]:
        if self._kernel_ns is None:
            if self.events:
                cl.wait_for_events(self.events)
            self._kernel_ns = [int(e.profile.end) - int(e.profile.start)
                               for e in self.kernel_events]
        if self._on_wait is not None:
            self._on_wait(self._kernel_ns)
        return self.results

    @property
    def kernel_ns(self) -> list[int]:
        """Each launched kernel's time in ns (waits for the call)."""
        self.wait()
        assert self._kernel_ns is not None
        return list(self._kernel_ns)

    def get(self) -> tuple[np.ndarray, ...]:
        """The results as numpy arrays (waits for the call)."""
        return tuple(np.asarray(r.get()) for r in self.wait())

    def __repr__(self) -> str:
        state = "done" if self.done else "pending"
        return f"PendingCall({len(self.results)} results, {state})"
