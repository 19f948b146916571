"""Shared fixtures of the kernel-generator tests: pipelines, generator statistics and a
differential check (the OpenCL ``device`` fixture is in tests/conftest.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
import pytest

import accy
from accy.ir.interpret import interpret
from accy.kernels import tma
from accy.target import TargetProfile


def pipeline(kernelization: str = "", tensor: str = "accy-tensor") -> str:
    """accy-default with ``kernelization{...}`` options, and another tensor stage if given
    (``""``: none, so cross-entropy reaches the kernels unlowered)."""
    kernel = f"kernelization{{{kernelization}}}" if kernelization else "kernelization"
    stages = ["accy-contract", tensor, "accy-dispatch", "accy-memory",
              "kernel-outlining-planning", kernel, "accy-target"]
    return ",".join(s for s in stages if s)


@pytest.fixture(scope="session")
def used() -> Callable[[accy.PreparedJob], dict[str, int]]:
    """Generator name -> work items it built (:meth:`accy.PreparedJob.generators`)."""
    return accy.PreparedJob.generators


@pytest.fixture(scope="session")
def pipe() -> Callable[..., str]:
    """:func:`pipeline` for the test modules."""
    return pipeline


Check = Callable[..., accy.PreparedJob]


@pytest.fixture
def check(device) -> Check:
    """``check(program, inputs, generator=..., ...)``: prepare, run twice, compare with the
    interpreter (NaNs equal), require bit-equal repeated runs and the expected generator."""

    def run(program: accy.Program, inputs: Sequence[np.ndarray], *, generator: str | None = None,
            pipeline: str = "accy-default", target: TargetProfile | None = None,
            rtol: float = 1e-5, atol: float = 1e-6) -> accy.PreparedJob:
        job = accy.prepare(program, pipeline, target=target)
        if generator is not None:
            assert generator in job.generators(), job.generators()
        exe = job.executable(device=device)
        first = exe(*inputs)
        again = exe(*inputs)
        want = interpret(program, list(inputs))
        for got, same, ref in zip(first, again, want, strict=True):
            assert got.shape == ref.shape and got.dtype == ref.dtype
            np.testing.assert_array_equal(got, same)  # scratch and counters left clean
            if got.dtype.kind in "fc":
                np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol, equal_nan=True)
            else:
                np.testing.assert_array_equal(got, ref)
        return job

    return run


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.fixture(scope="module")
def profiles(device) -> dict[str, TargetProfile]:
    """The device's own profile and a GPU-style one on it (the tiled-contraction tests run
    both; test_direct_conv has its own)."""
    real = TargetProfile.from_device(device.info)
    gpu_like = dataclasses.replace(real, device_type="gpu", compute_units=4,
                                   max_work_group_size=min(256, real.max_work_group_size))
    return {"device": real, "gpu-tiles": gpu_like}


@pytest.fixture(scope="module")
def cpu(profiles) -> TargetProfile:
    """The device's profile as a CPU with AVX-512-wide vectors and 2 compute units (the
    streamed CPU products' tests)."""
    return dataclasses.replace(profiles["device"], device_type="cpu", native_vector_bytes=64,
                               compute_units=2)


@pytest.fixture
def encodes(monkeypatch) -> list[tuple]:
    """Tensor-map templates encode (as stand-in words) without a CUDA driver; the geometries
    asked, (dims, strides, box, data type), in order."""
    asked = []

    def template(dtype, dims, strides, box, swizzle=tma.SWIZZLE_128B):
        asked.append((dims, strides, box, dtype))
        return tuple(range(0x100, 0x110))

    monkeypatch.setattr(tma, "template", template)
    return asked
