"""K split summed in the product kernel (``split_k.fused``): the last of a tile's work-groups,
counted in by an atomic counter after a fence, sums the chunks and applies the epilogue.
Run on PoCL (its work-groups are threads: OpenCL's fence reaches them) in the tiled
contraction's GPU tiles, which split K (a GPU's own fence decides there), through the public
front end, against the two-kernel form to the bit and numpy, over calls reusing the counters."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import accy
from accy.backends.opencl.render import render, stmts
from accy.ir.types import DType
from accy.kernels import split_k
from accy.kernels.ir import AtomicAdd, Fence, Kernel, KernelArg, Lit, idx
from accy.plans import LaunchGeometry, ScheduleKind

M, N, K = 8, 256, 16384  # PoCL's tiles split K here: 16 chunks


def _program():
    return accy.trace(lambda a, b, bias: (a @ b + bias).relu(), accy.f32[M, K], accy.f32[K, N],
                      accy.f32[N])


def _inputs(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, s).astype(np.float32) for s in ((M, K), (K, N), (N,))]


def test_fence_and_counter_render_per_target(profiles):
    counter = AtomicAdd("count", idx(3), Lit(1, DType.i32), DType.i32, "ticket")
    assert stmts((counter, Fence()), "") == [
        "int ticket = atomic_add(&count[3L], ((int)1));", "mem_fence(CLK_GLOBAL_MEM_FENCE);"]
    with pytest.raises(TypeError, match="keeping the old value"):
        stmts((dataclasses.replace(counter, dtype=DType.f32),), "")
    kernel = Kernel("k", 0, ScheduleKind.flat, (1,), (KernelArg("count", DType.i32, True, 0),),
                    (Fence(),), LaunchGeometry((1,), (1,)), ())
    cpu, gpu = profiles["device"], profiles["gpu-tiles"]
    ptx = dataclasses.replace(gpu, tensor_cores=("mma.m16n8k8.tf32",))
    assert "mem_fence(CLK_GLOBAL_MEM_FENCE);" in render(kernel, cpu)
    assert "mem_fence(CLK_GLOBAL_MEM_FENCE);" in render(kernel, gpu)  # (never fused there)
    # NVIDIA compiles OpenCL's mem_fence to membar.cta: the work-group's scope only
    assert 'asm volatile("fence.acq_rel.gpu;" ::: "memory");' in render(kernel, ptx)


def test_which_products_sum_their_chunks_themselves(profiles, monkeypatch):
    monkeypatch.setattr(split_k, "FUSED", True)
    gpu = profiles["gpu-tiles"]
    # a GPU whose OpenCL fence is the work-group's (no probe ran PTX): a second kernel
    assert accy.prepare(_program(), target=gpu).kernel_count == 2
    assert not split_k.device_fence(gpu) and split_k.device_fence(profiles["device"])
    assert split_k.device_fence(dataclasses.replace(gpu, tensor_cores=("mma.m16n8k8.tf32",)))
    monkeypatch.setattr(split_k, "device_fence", lambda target: True)
    (kernel,) = accy.prepare(_program(), target=gpu).kernels
    counts = [a for a in kernel.args if a.name == "scratch0_count"]
    assert len(counts) == 1 and counts[0].dtype is DType.i32 and counts[0].is_scratch
    monkeypatch.setattr(split_k, "FUSED", False)
    assert accy.prepare(_program(), target=gpu).kernel_count == 2
    monkeypatch.setattr(split_k, "FUSED", True)
    monkeypatch.setattr(split_k, "FIXUP_ITEMS", 1)  # more elements a work-item than that
    assert accy.prepare(_program(), target=gpu).kernel_count == 2


def test_fused_split_matches_the_second_kernel_to_the_bit_over_calls(device, profiles,
                                                                     monkeypatch):
    """The counters restore themselves: the same executable called on new inputs sums them
    again (a counter left at its count would never name a last work-group, and the output
    would keep the first call's values)."""
    monkeypatch.setattr(split_k, "device_fence", lambda target: True)  # (PoCL's threads)
    monkeypatch.setattr(split_k, "FUSED", True)
    gpu = profiles["gpu-tiles"]
    calls = [_inputs(seed) for seed in (1, 2, 3)]
    fused = accy.prepare(_program(), target=gpu)
    assert fused.kernel_count == 1
    fused = fused.executable(device=device)
    monkeypatch.setattr(split_k, "FUSED", False)
    two = accy.prepare(_program(), target=gpu)
    assert two.kernel_count == 2
    two = two.executable(device=device)
    for xs in calls:
        (got,) = fused(*xs)
        (want,) = two(*xs)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
        exact = np.maximum(xs[0].astype(np.float64) @ xs[1] + xs[2], 0)
        np.testing.assert_allclose(got, exact, rtol=1e-5, atol=1e-3)
