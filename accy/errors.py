"""The exceptions accy raises. Every error names what was wrong and where."""

from __future__ import annotations


class AccyError(Exception):
    """Base class of every error accy raises on purpose."""


class ShapeError(AccyError):
    """An op was built with operands whose shapes or dtypes it cannot take."""


class IRParseError(AccyError):
    """The IR text form could not be read; the message gives line and column."""


class VerifyError(AccyError):
    """A product is malformed for its stage (bad type, op not allowed, broken plan)."""


class NotPreparedError(VerifyError):
    """A prepared job stopped (``prepare(..., until=...)``) before the stage that what was asked
    needs; the message names both stages and says to continue with ``accy.prepare(job)``."""


class InterpretError(AccyError):
    """The reference interpreter was given inputs that do not fit the function."""


class PipelineError(AccyError):
    """Pipeline text could not be read, or names an unknown pass, option or value."""


class EGraphError(AccyError):
    """The e-graph holds something unsound (an ill-typed term, a union of different types)."""


class PassFailure(AccyError):
    """A pass raised while running; the message names the pass and its spec."""


class CapabilityMismatchError(AccyError):
    """A kernel needs something the target profile does not offer (dtype, op, limits)."""


class KernelLookupError(AccyError, IndexError):
    """A prepared job was asked for a kernel index that does not exist."""


class WorkItemLookupError(AccyError, KeyError):
    """A prepared job was asked for a work item that no kernel implements."""


class DeviceError(AccyError):
    """No usable OpenCL platform or device, or a device selector matched nothing."""


class DeviceMismatchError(DeviceError):
    """A device tensor given to an executable lives on another device or OpenCL context; the
    message names the input (or ``out`` array) and both devices."""


class KernelBuildError(AccyError):
    """OpenCL rejected generated source; the message holds the build log and the bad line."""


class OptionError(PipelineError, ValueError):
    """A pass option was given a value it does not allow (out of range, not finite, not one of
    its choices, the wrong type); the message names the pass, the option, the value and what
    is allowed. Raised when pipeline text is read and when a pass is constructed in Python."""


class LimitExceededError(CapabilityMismatchError):
    """A launch or buffer is larger than the target allows (global size, work-groups, local
    size, bytes of one buffer or of all, host memory); raised before anything is launched or
    allocated. ``limits`` holds each excess as (what, how big, the limit)."""

    def __init__(self, message: str, limits: tuple[tuple[str, int, int], ...] = ()) -> None:
        super().__init__(message)
        self.limits = tuple(limits)


class TargetProfileError(AccyError, ValueError):
    """A saved target profile that cannot be read: not JSON, an unknown field or a value of
    the wrong kind (the message names the file and the field)."""


class BackendLookupError(AccyError, LookupError):
    """A backend name that no backend is registered under (the message lists those that are)."""


class GenericTargetWarning(UserWarning):
    """A job prepared for the generic profile (``accy.prepare`` given no ``target`` or
    ``device``) runs on a real device, whose kernels were chosen for no device: prepare with
    ``device=`` or ``target=`` for this one's."""
