"""Launch and buffer sizes are checked before any launch (issue #12 item 4).

Oversized launch options and buffers are prepared against a small hand-written profile and
against the real device's profile: ``backend-legalization`` reports ``exceeds_limits`` with the
numbers (what, how big, the limit), running raises :class:`LimitExceededError` before anything
is built or allocated, and this process goes on to run a legal job. No test allocates more
than a few kilobytes: the oversized jobs are only prepared, never fed inputs.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

import accy
from accy.builder import gather, trace
from accy.errors import CapabilityMismatchError, LimitExceededError, PipelineError
from accy.ir.program import Program
from accy.passes.base import COUNT_MAX
from accy.passes.spec import parse_pipeline
from accy.target import (
    MAX_WORK_GROUPS,
    KernelStatus,
    LimitExcess,
    TargetProfile,
    host_available_bytes,
    launch_refusal,
    status_error,
)


def embedding() -> Program:
    return trace(lambda table, ids: gather(table, ids, axis=0) * 2.0,
                 accy.f32[10, 4], accy.i32[6], name="emb")


def with_blocks(blocks: int) -> str:
    return parse_pipeline("accy-default").replacing(
        f"indexing-lowering{{gather-thread-blocks={blocks}}}").text()


def adder(n: int) -> Program:
    return trace(lambda a, b: a + b, accy.f32[n], accy.f32[n], name=f"add{n}")


def verdicts(job: accy.PreparedJob) -> list:
    return list(job.product.legality.kernels)


def limits_of(job: accy.PreparedJob) -> dict[str, tuple[int, int]]:
    return {x.what: (x.size, x.limit) for v in verdicts(job) for x in v.limits}


def still_alive(device) -> None:
    """This process runs a legal job correctly after the refusals."""
    a = np.arange(4, dtype=np.float32)
    (out,) = accy.prepare(adder(4)).run(a, a, device=device)
    np.testing.assert_array_equal(out, 2 * a)


# profiles ---------------------------------------------------------------------------------


def test_generic_profile_has_sane_limits() -> None:
    p = TargetProfile()
    assert 0 < p.max_mem_alloc_size <= p.global_mem_size
    assert p.work_item_sizes == (p.max_work_group_size,) * 3  # hand-written: one cap
    wide = TargetProfile(max_work_group_size=1024)
    assert wide.launch_excess((4096,), (1024,)) == ()  # a wider device needs no second field
    assert p.address_bits == 64 and p.max_global_size == 2**64 - 1
    assert p.max_work_groups == MAX_WORK_GROUPS == COUNT_MAX  # options stay within legality
    assert "buffers up to" in p.describe()


def test_profile_from_device_carries_its_limits(device) -> None:
    info = device.info
    p = TargetProfile.from_device(info)
    assert p.max_mem_alloc_size == info.max_mem_alloc_size > 0
    assert p.global_mem_size == info.global_mem_size > 0
    assert p.max_work_group_size == info.max_work_group_size
    assert p.max_work_item_sizes == info.max_work_item_sizes and len(p.max_work_item_sizes) >= 1
    assert p.address_bits == info.address_bits in (32, 64)
    smaller = dataclasses.replace(p, max_mem_alloc_size=p.max_mem_alloc_size // 2)
    # memory capacities vary with the memory free at start-up (PoCL): stamps must not; a
    # verdict they change is in the legality report's fingerprint instead
    assert smaller.fingerprint() == p.fingerprint()


def test_exceeds_limits_maps_to_a_named_error() -> None:
    error = status_error(KernelStatus.exceeds_limits)
    assert error is LimitExceededError and issubclass(error, CapabilityMismatchError)
    assert status_error(KernelStatus.unsupported_dtype) is CapabilityMismatchError


def test_profile_checks_are_plain_numbers() -> None:
    p = TargetProfile(max_work_item_sizes=(64, 8, 1), max_work_group_size=64, address_bits=32,
                      max_work_groups=100, max_mem_alloc_size=10, global_mem_size=25)
    assert p.launch_excess((128,), (64,)) == ()
    whats = {x.what: (x.size, x.limit) for x in p.launch_excess((2**32, 16), (64, 16))}
    assert whats == {"global size (dimension 0)": (2**32, 2**32 - 1),
                     "work-groups (dimension 0)": (2**26, 100),
                     "local size (dimension 1)": (16, 8), "work-group size": (1024, 64)}
    assert p.launch_excess((1, 1, 1, 1), (1, 1, 1, 1))[0] == LimitExcess("dimensions", 4, 3)
    assert [x.numbers() for x in p.memory_excess({"in0": 10, "out0": 11}, 26)] == [
        ("buffer out0 (bytes)", 11, 10), ("all buffers of the function (bytes)", 26, 25)]
    assert str(LimitExcess("work-group size", 9, 8)) == "work-group size 9 exceeds the limit 8"


# oversized launch options -----------------------------------------------------------------


@pytest.mark.parametrize("text", [
    "indexing-lowering{gather-thread-blocks=4294967296}",  # SIGILL in PoCL before
    "indexing-lowering{gather-thread-blocks=1e20}",  # std::bad_cast in pyopencl before
    "indexing-lowering{scatter-thread-blocks=-1}",
])
def test_launch_options_past_what_legalization_allows_are_refused_when_read(text) -> None:
    with pytest.raises(PipelineError, match="gather-thread-blocks|scatter-thread-blocks"):
        accy.prepare(embedding(), parse_pipeline("accy-tensor").replacing(text))


def test_work_groups_over_a_small_profile(device) -> None:
    profile = TargetProfile(max_work_groups=1000)
    job = accy.prepare(embedding(), with_blocks(5000), target=profile)
    statuses = [v.status for v in verdicts(job)]
    assert KernelStatus.exceeds_limits in statuses
    assert limits_of(job)["work-groups (dimension 0)"] == (5000, 1000)
    bad = next(v for v in verdicts(job) if v.status is KernelStatus.exceeds_limits)
    assert "5000" in bad.detail and "1000" in bad.detail
    table, ids = np.ones((10, 4), np.float32), np.zeros(6, np.int32)
    with pytest.raises(LimitExceededError, match="work-groups") as info:
        job.run(table, ids, device=device)
    assert ("work-groups (dimension 0)", 5000, 1000) in info.value.limits
    still_alive(device)


def test_global_size_over_the_devices_size_t(device) -> None:
    """The most work-groups an option allows, on a device with 32-bit sizes: the global size
    (work-groups x local size) does not fit its size_t."""
    profile = dataclasses.replace(TargetProfile.from_device(device.info), address_bits=32)
    job = accy.prepare(embedding(), with_blocks(COUNT_MAX), target=profile)
    (size, limit) = limits_of(job)["global size (dimension 0)"]
    assert size > limit == 2**32 - 1 and size % COUNT_MAX == 0
    with pytest.raises(LimitExceededError) as info:
        job.executable(device=device)
    assert ("global size (dimension 0)", size, limit) in info.value.limits
    still_alive(device)


# oversized buffers ------------------------------------------------------------------------


def test_buffers_over_a_small_profile(device) -> None:
    profile = TargetProfile(max_mem_alloc_size=1 << 20, global_mem_size=8 << 20)
    job = accy.prepare(adder(1 << 20), target=profile)  # three 4 MiB buffers
    (verdict,) = verdicts(job)
    assert verdict.status is KernelStatus.exceeds_limits
    assert job.kernel_summary(0).status is KernelStatus.exceeds_limits
    assert limits_of(job) == {"buffer in0 (bytes)": (4 << 20, 1 << 20),
                              "buffer in1 (bytes)": (4 << 20, 1 << 20),
                              "buffer out0 (bytes)": (4 << 20, 1 << 20),
                              "all buffers of the function (bytes)": (12 << 20, 8 << 20)}
    with pytest.raises(LimitExceededError, match="4194304 exceeds the limit 1048576") as info:
        job.executable(device=device)
    assert ("all buffers of the function (bytes)", 12 << 20, 8 << 20) in info.value.limits
    fits = accy.prepare(adder(1 << 16), target=profile)  # 256 KiB buffers are legal
    assert fits.product.legality.is_legal
    still_alive(device)


def test_buffers_over_the_real_devices_limits(device) -> None:
    """Buffers twice the device's largest allocation, prepared for the device's own profile:
    legalization refuses them with the device's numbers; nothing is allocated."""
    info = device.info
    n = 2 * info.max_mem_alloc_size // 4 + 1024  # f32 elements, past max_mem_alloc_size
    job = accy.prepare(adder(n), target=TargetProfile.from_device(info))
    (verdict,) = verdicts(job)
    assert verdict.status is KernelStatus.exceeds_limits
    found = limits_of(job)
    assert found["buffer out0 (bytes)"] == (4 * n, info.max_mem_alloc_size)
    if 12 * n > info.global_mem_size:
        assert found["all buffers of the function (bytes)"] == (12 * n, info.global_mem_size)
    with pytest.raises(LimitExceededError) as error:
        job.executable(device=device)
    assert ("buffer out0 (bytes)", 4 * n, info.max_mem_alloc_size) in error.value.limits
    still_alive(device)


def test_executable_checks_the_devices_own_limits(device) -> None:
    """A job legal for a generous hand-written profile is refused on a smaller device before
    anything is built or allocated."""
    info = device.info
    roomy = TargetProfile(max_mem_alloc_size=1 << 50, global_mem_size=1 << 52)
    n = info.max_mem_alloc_size // 4 + 1024
    job = accy.prepare(adder(n), target=roomy)
    assert job.product.legality.is_legal
    with pytest.raises(LimitExceededError, match=f"limits of {re.escape(info.name)}") as error:
        job.executable(device=device)
    assert ("buffer out0 (bytes)", 4 * n, info.max_mem_alloc_size) in error.value.limits
    still_alive(device)


def test_host_memory_is_checked_before_allocating(device) -> None:
    """Results (and on host-shared devices every buffer) must fit the host's free memory."""
    assert (host_available_bytes() or 1) > 0
    job = accy.prepare(adder(1024))
    kernels = list(enumerate(job.kernels))
    assert launch_refusal(job.product, kernels, 0, device.info, available=1 << 30) is None
    refusal = launch_refusal(job.product, kernels, 0, device.info, available=1000)
    assert isinstance(refusal, LimitExceededError)
    ((what, need, free),) = refusal.limits
    assert what.startswith("host memory") and free == 1000
    assert need >= 4096  # the result at least; with host-shared memory the buffers too
    assert need == 4096 + (3 * 4096 if device.info.host_unified_memory else 0)
    assert launch_refusal(job.product, kernels, 0, None, available=1000) is not None
    still_alive(device)


def test_jobs_for_wider_vectors_than_the_compiler_handles_are_refused(device, monkeypatch
                                                                      ) -> None:
    """A device whose compiler fails on wide vectors (``max_vector_floats``: a PoCL whose LLVM
    targets a CPU without AVX-512) refuses a job prepared for wider ones before anything is
    built, naming the widths; a job prepared for its own profile runs."""
    narrow = dataclasses.replace(device.info, preferred_vector_width_float=8,
                                 max_vector_floats=8)
    monkeypatch.setattr(device, "info", narrow)
    wide = accy.prepare(adder(4096), target=TargetProfile(device_type="cpu",
                                                          native_vector_bytes=64))
    with pytest.raises(LimitExceededError, match="64-byte vectors") as info:
        wide.executable(device=device)
    assert info.value.limits == (("vector width (bytes)", 64, 32),)
    own = accy.prepare(adder(4096), target=TargetProfile.from_device(narrow))
    assert own.product.target.native_vector_bytes == 32
    x = np.arange(4096, dtype=np.float32)
    (got,) = own.executable(device=device)(x, x)
    np.testing.assert_array_equal(got, 2 * x)
