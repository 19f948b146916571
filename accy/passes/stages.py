"""Importing this module registers every built-in pass (one module per pass)."""

from accy.passes.contract import canonicalize, constant_fold  # noqa: F401
from accy.passes.dispatch import fusion_planning, schedule_planning  # noqa: F401
from accy.passes.kernel import kernel_outlining_planning, kernelization  # noqa: F401
from accy.passes.memory import (  # noqa: F401
    bufferization_planning,
    layout_planning,
    memory_space_planning,
)
from accy.passes.target import backend_legalization  # noqa: F401
from accy.passes.tensor import (  # noqa: F401
    activation_lowering,
    contraction_padding,
    conv_lowering,
    dtype_legalization,
    einsum_lowering,
    indexing_lowering,
    loss_lowering,
    saturate,
    shape_layout_propagation,
)
