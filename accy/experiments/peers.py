"""The peer the GPU benchmarks compare with in the same run: torch on a CUDA device (eager,
``torch.compile``, cuBLAS, cuDNN), when the machine has it."""

from __future__ import annotations

from typing import Any


def cuda_torch() -> tuple[Any | None, str | None]:
    """(torch, None) when torch with a CUDA device is importable, else (None, the reason
    benchmarks print in its place)."""
    try:
        import torch
    except ImportError as e:
        return None, f"torch is not installed ({e})"
    if not torch.cuda.is_available():
        return None, f"torch {torch.__version__} sees no CUDA device"
    return torch, None
