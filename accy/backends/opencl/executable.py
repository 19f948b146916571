"""Running a prepared function through OpenCL: buffers per slot, kernels in schedule order."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from accy.backends.opencl.runtime import Runtime, select_device
from accy.errors import InterpretError
from accy.ir.ops import Op
from accy.plans import SlotRole
from accy.target import status_error

if TYPE_CHECKING:
    from accy.job import PreparedJob


class Executable:
    """One function of a prepared job, ready to run: ``outputs = exe(*inputs)``.

    Kernels are built (cached) when the executable is made, up to ``max_threads`` programs at
    once (the kernels are the same as a serial build's); device buffers are reused across
    calls. ``last_kernel_ns`` holds each kernel's time (OpenCL profiling events) of the last call.
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
            verdict = legality.kernels[index]
            error = status_error(verdict.status)
            if error is not None:
                raise error(f"kernel {index} ({kernel.entry}) is {verdict.status.value}: "
                            f"{verdict.detail}")
        self.runtime = device if isinstance(device, Runtime) else select_device(device)
        self.buffers = product.buffers
        sources = [job.kernel_source(i) for i, _ in mine]
        self.runtime.build_many(sources, max_threads=max_threads)
        self.steps = [(k, self.runtime.kernel(src, k.entry))
                      for (_, k), src in zip(mine, sources, strict=True)]
        self.key = (job.product.fingerprint(), self.fi)
        self.last_kernel_ns: list[int] = []
        self._constants_written = False
        self._zeroed: set[tuple] = set()

    def _buffer(self, slot: int) -> object:
        return self.runtime.buffer((*self.key, slot), self.buffers.slots[slot].nbytes)

    def _scratch(self, work_item: int, arg) -> object:
        key = (*self.key, "scratch", work_item, arg.name)
        nbytes = arg.scratch_elems * arg.dtype.itemsize
        fresh = key not in self._zeroed
        buf = self.runtime.buffer(key, nbytes)
        if fresh:
            self.runtime.write(buf, np.zeros(arg.scratch_elems, arg.dtype.numpy))
            self._zeroed.add(key)
        return buf

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

    def __call__(self, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        arrays = self._check(inputs)
        slots = [s for s in self.buffers.slots if s.function == self.fi]
        for s in slots:
            if s.role is SlotRole.input:
                self.runtime.write(self._buffer(s.id), arrays[s.values[0].attr("index")])
            elif s.role is SlotRole.constant and not self._constants_written:
                self.runtime.write(self._buffer(s.id), s.values[0].value)
        self._constants_written = True
        events = []
        for kernel, cl_kernel in self.steps:
            if not math.prod(kernel.geometry.global_size):
                continue  # an empty domain: nothing to compute
            args = [self._scratch(kernel.work_item, a) if a.is_scratch
                    else self._buffer(a.slot) for a in kernel.args]
            events.append(self.runtime.launch(cl_kernel, kernel.geometry.global_size,
                                              kernel.geometry.local_size, args))
        self.last_kernel_ns = [self.runtime.elapsed_ns(e) for e in events]
        results = []
        for node in self.function.results:
            if node.op is Op.PARAM:
                results.append(arrays[node.attr("index")].copy())
            elif node.op is Op.CONSTANT:
                results.append(node.value.copy())
            else:
                slot = self.buffers.slot_of(self.fi, node)
                out = np.empty(node.type.shape, node.type.dtype.numpy)
                results.append(self.runtime.read(self._buffer(slot.id), out))
        return tuple(results)
