"""Executables with some inputs fixed on the device: ``exe.bind(w=w, table=t)``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accy.backends.opencl.device_array import DeviceArray, PendingCall
    from accy.backends.opencl.executable import Executable
    from accy.backends.opencl.runtime import Runtime


class BoundExecutable:
    """An executable with some inputs fixed on its device (``exe.bind(w=w, table=t)``).

    Calls pass only the other inputs, positionally in parameter order or by name, with the
    executable's keywords (``out``, ``to_host``, ``wait``); ``enqueue``, ``bind`` (fixing more
    inputs), ``runtime``, ``function`` and ``last_kernel_ns`` work as on the executable. The
    bound tensors live on the device for as long as this object: each call uses them in place,
    with no copy. Thread-safe like the executable (it holds nothing a call changes).
    """

    def __init__(self, executable: Executable, bound: dict[int, Any]) -> None:
        self.executable = executable
        self.bound = bound  # parameter index -> device tensor

    @property
    def runtime(self) -> Runtime:
        return self.executable.runtime

    @property
    def function(self):
        return self.executable.function

    @property
    def last_kernel_ns(self) -> list[int]:
        return self.executable.last_kernel_ns

    @property
    def param_names(self) -> tuple[str, ...]:
        """The inputs a call still passes, in order."""
        return tuple(name for i, name in enumerate(self.executable.param_names)
                     if i not in self.bound)

    def __call__(self, *inputs: Any, out: Any = None, to_host: bool = True, wait: bool = True,
                 **named: Any) -> tuple[Any, ...] | PendingCall:
        exe = self.executable
        return exe._call(exe._gather(inputs, named, self.bound), out, to_host, wait)

    def enqueue(self, *inputs: Any, out: Any = None, **named: Any) -> PendingCall:
        exe = self.executable
        return exe._call(exe._gather(inputs, named, self.bound), out, False, False)

    def bind(self, **named: Any) -> BoundExecutable:
        return BoundExecutable(self.executable, self.executable._bound(named, self.bound))

    def to_device(self, array: Any) -> DeviceArray:
        return self.executable.to_device(array)

    def __repr__(self) -> str:
        names = ", ".join(self.executable.param_names[i] for i in sorted(self.bound))
        return f"BoundExecutable({self.function.name}, bound: {names})"
