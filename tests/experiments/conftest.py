"""Shared fixtures of the experiment tests: the OpenCL device (skip without one)."""

from __future__ import annotations

import pytest

from accy.errors import DeviceError


@pytest.fixture(scope="session")
def device() -> object:
    """The default OpenCL runtime; the test is skipped when there is none."""
    from accy.backends.opencl.runtime import select_device

    try:
        return select_device(None)
    except DeviceError as exc:
        pytest.skip(f"no usable OpenCL device: {exc}")
