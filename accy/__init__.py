"""accy: an e-graph-based optimizing compiler research framework for tensor programs.

Build a program (``Builder`` or ``@accy.function``), ``prepare`` it through the six stages
(contract, tensor, dispatch, memory, kernel, target) and run the kernels through OpenCL::

    import accy, numpy as np

    @accy.function
    def chain(a: accy.f32[1024], b: accy.f32[1024]):
        return accy.maximum((a + b) * b - b, b)

    job = accy.prepare(chain, device="pocl")  # kernels for that device (ACCY_DEVICE's, ...)
    (out,) = job.run(np.ones(1024, np.float32), np.ones(1024, np.float32))

Traced values take operators (``+``, ``@``, ``<``, ``==`` ... build ops) and methods; every op
also has a numpy-style function here (``accy.einsum``, ``accy.where``, ``accy.gather``,
``accy.one_hot``, ``accy.constant``, ...: :mod:`accy.functions`), and docs/OPS.md lists every
op with its semantics. The IR is in :mod:`accy.ir`; passes in :mod:`accy.passes`.
"""

from accy.builder import (
    Builder,
    avg_pool2d,
    bool_,
    conv2d,
    f16,
    f32,
    f64,
    function,
    i32,
    i64,
    max_pool2d,
    maximum,
    minimum,
    pad,
    trace,
)
from accy.contraction import opt_einsum_bridge  # noqa: F401  (registers accy-* in opt_einsum)
from accy.errors import AccyError, DeviceMismatchError, GenericTargetWarning
from accy.explain import explain
from accy.functions import (  # noqa: A004  (abs, max, sum: numpy's names)
    abs,  # noqa: F401  (accy.abs; not in __all__, like max and sum)
    arange,
    astype,
    broadcast_to,
    ceil,
    concat,
    constant,
    cos,
    cross_entropy,
    einsum,
    erf,
    exp,
    floor,
    gather,
    gelu,
    log,
    log_softmax,
    matmul,
    max,  # noqa: F401
    mean,
    one_hot,
    reciprocal,
    relu,
    reshape,
    rsqrt,
    scatter_add,
    select,
    sigmoid,
    sin,
    softmax,
    sqrt,
    sum,  # noqa: F401
    tanh,
    transpose,
    where,
)
from accy.ir.interpret import interpret
from accy.ir.parser import parse_program
from accy.ir.printer import print_program
from accy.ir.program import Program, Stage
from accy.ir.types import DType, TensorType
from accy.ir.verify import verify
from accy.job import JobFileError, PreparedJob, load_job, prepare
from accy.passes.spec import parse_pipeline
from accy.target import TargetProfile

__version__ = "0.1.0"

# the device-tensor API imports pyopencl, so it loads on first use (``import accy`` stays
# light and works without an OpenCL driver)
_LAZY = {
    "DeviceArray": "accy.backends.opencl.device_array",
    "PendingCall": "accy.backends.opencl.device_array",
    "to_device": "accy.backends.opencl.device_array",
    "Executable": "accy.backends.opencl.executable",
    "BoundExecutable": "accy.backends.opencl.executable",
    "select_device": "accy.backends.opencl.runtime",
}


def __getattr__(name: str):
    if name == "onnx":  # accy.onnx.load: imports the onnx package on first use
        import importlib

        return importlib.import_module("accy.onnx")
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'accy' has no attribute {name!r}")

# accy.abs, accy.max and accy.sum stay out: `from accy import *` must not hide builtins
__all__ = [
    "AccyError", "BoundExecutable", "Builder", "DType", "DeviceArray", "DeviceMismatchError",
    "Executable", "GenericTargetWarning", "JobFileError", "PendingCall", "PreparedJob",
    "Program", "Stage",
    "TargetProfile", "TensorType", "arange", "astype", "avg_pool2d", "bool_", "broadcast_to",
    "ceil", "concat", "constant", "conv2d", "cos", "cross_entropy", "einsum", "erf", "exp",
    "explain", "f16", "f32", "f64", "floor", "function", "gather", "gelu", "i32", "i64",
    "interpret", "load_job", "log", "log_softmax", "matmul", "max_pool2d", "maximum", "mean",
    "minimum", "one_hot", "onnx", "pad", "parse_pipeline", "parse_program", "prepare",
    "print_program", "reciprocal", "relu", "reshape", "rsqrt", "scatter_add", "select",
    "select_device", "sigmoid", "sin", "softmax", "sqrt", "tanh", "to_device", "trace",
    "transpose", "verify", "where",
]
