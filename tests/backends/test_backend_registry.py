"""The backend registry: OpenCL registered by name, lookups, the errors for unknown names, and
the OpenCL backend pairing a device with its profile (the one place that pairing lives)."""

from __future__ import annotations

import pytest

import accy
from accy.backends import registry
from accy.backends.registry import (
    DEFAULT_BACKEND,
    Backend,
    get_backend,
    register_backend,
    registered,
    registration,
)
from accy.errors import BackendLookupError, PassFailure
from accy.target import OPENCL_C, TargetProfile


def test_opencl_is_registered_by_name() -> None:
    assert DEFAULT_BACKEND == "opencl" and "opencl" in registered()
    assert registration("opencl").artifact_format == OPENCL_C
    backend = get_backend("opencl")
    assert isinstance(backend, Backend) and backend.name == "opencl"
    assert backend.artifact_format == OPENCL_C
    assert get_backend() is backend  # the default, loaded once


def test_unknown_backend_names_the_registered_ones() -> None:
    with pytest.raises(BackendLookupError, match=r"unknown backend 'metal' \(registered: opencl"):
        get_backend("metal")
    with pytest.raises(BackendLookupError, match="registered: opencl"):
        registration("cuda")


def test_duplicate_registration_is_refused() -> None:
    with pytest.raises(ValueError, match="backend 'opencl' is already registered"):
        register_backend("opencl", OPENCL_C, lambda: get_backend("opencl"))


def test_prepare_refuses_an_unknown_backend() -> None:
    @accy.function
    def f(a: accy.f32[8]):
        return a + 1.0

    with pytest.raises(BackendLookupError, match=r"unknown backend 'vulkan' \(registered: "):
        accy.prepare(f, backend="vulkan")
    with pytest.raises(PassFailure, match=r"unknown backend 'vulkan' \(registered: "):
        accy.prepare(f, target=TargetProfile(backend="vulkan"))
    with pytest.raises(ValueError, match="target is for backend 'other', not 'opencl'"):
        accy.prepare(f, target=TargetProfile(backend="other"), backend="opencl")


class _Fake(Backend):
    """A second backend as a test registers it: it renders the kernel's entry only."""

    name = "fake"
    artifact_format = "fake-text"

    def select_device(self, selector=None):
        return ("fake-device", selector)

    def is_device(self, obj):
        return isinstance(obj, tuple) and obj[:1] == ("fake-device",)

    def target_profile(self, device):
        return TargetProfile(backend="fake", device=str(device[1]),
                             artifact_formats=frozenset({"fake-text"}))

    def render(self, kernel, target=None):
        return f"fake {kernel.entry}"

    def build(self, device, sources, max_threads=1):
        self.built = list(sources)

    def executable(self, job, function, device, max_threads=1):
        raise NotImplementedError  # not reached here

    def elapsed_ns(self, device, event):
        return 0


def test_a_second_backend_goes_through_the_registry(monkeypatch) -> None:
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(registry, "_LOADED", dict(registry._LOADED))
    fake = _Fake()
    register_backend("fake", "fake-text", lambda: fake, "for the test")
    assert registered() == ("opencl", "fake")

    @accy.function
    def f(a: accy.f32[8]):
        return a * 2.0

    job = accy.prepare(f, device="dev0", backend="fake")
    assert job.target.backend == "fake" and job.target.device == "dev0"
    assert job.product.legality.is_legal  # its format is the backend's
    assert job.kernel_source(0) == f"fake {job.kernels[0].entry}"
    assert job.build(("fake-device", "dev0")) == ("fake-device", "dev0")
    assert fake.built == [job.kernel_source(0)]
    # a generic profile of the backend when no device is named
    generic = accy.prepare(f, backend="fake")
    assert generic.target.artifact_formats == frozenset({"fake-text"})
    # the OpenCL format alone is not this backend's: legal nowhere
    other = accy.prepare(f, target=TargetProfile(backend="fake"))
    assert not other.product.legality.is_legal
    assert "not the fake backend's fake-text" in other.product.legality.kernels[0].detail


def test_opencl_backend_pairs_device_and_profile(device) -> None:
    backend = get_backend("opencl")
    runtime, target = backend.open(device)
    assert runtime is device
    assert target == TargetProfile.from_device(device.info)
    assert backend.is_device(device)
    assert not backend.is_device("pocl") and not backend.is_device(None)
