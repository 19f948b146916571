"""The differential suite's OpenCL device fixture (its count of programs checked is printed by
tests/conftest.py)."""

from __future__ import annotations

import pytest

from accy.errors import DeviceError
from accy.ir.types import DType


@pytest.fixture(scope="session")
def device_dtypes() -> list[DType]:
    """The dtypes of the default OpenCL device (skips the test when there is none)."""
    from accy.backends.opencl.runtime import select_device
    from accy.target import TargetProfile

    try:
        runtime = select_device()
    except DeviceError as e:
        pytest.skip(f"no OpenCL device: {str(e).splitlines()[0]}")
    return sorted(TargetProfile.from_device(runtime.info).usable_dtypes, key=lambda d: d.value)

