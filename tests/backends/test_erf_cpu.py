"""erf on CPU targets: the renderer's vector helper ``accy_erf`` (PoCL's own erf of a vector is a
scalar call a lane). Its accuracy over f32 on the default device against float64's erf, its
special values, that CPU targets get it through the public front end (a GELU), and that
other targets and f64 keep the built-in."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy.special import erf

import accy
from accy.backends.opencl.render import render
from accy.builder import trace
from accy.target import TargetProfile


@pytest.fixture(scope="module")
def cpu(device):
    """The default device's profile, typed a CPU (PoCL is one; the helper is CPU-only)."""
    return dataclasses.replace(TargetProfile.from_device(device.info), device_type="cpu")


def erf_program(n: int, dtype=accy.f32) -> accy.Program:
    return trace(lambda x: x.erf(), dtype[n], name="f")


def test_accy_erf_is_within_two_ulp_of_float64(device, cpu):
    grid = np.linspace(-6.0, 6.0, 400_001, dtype=np.float32)
    tiny = np.float32(10.0) ** np.linspace(-37, 0.5, 20_000, dtype=np.float32)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 0.927734375, -0.927734375,
                        np.nextafter(np.float32(0.927734375), np.float32(1)), 3.0e38, 1e-45],
                       dtype=np.float32)
    x = np.concatenate([grid, tiny, -tiny, special])
    job = accy.prepare(erf_program(x.size), target=cpu)
    assert "accy_erf(" in job.kernel_source(0)
    (got,) = job.run(x, device=device)
    want = erf(x.astype(np.float64))
    finite = np.isfinite(x)
    ulp = np.spacing(np.abs(want[finite]).astype(np.float32)).astype(np.float64)
    err = np.abs(got[finite].astype(np.float64) - want[finite]) / ulp
    assert err.max() <= 2.0, (err.max(), x[finite][err.argmax()])
    assert got[x.size - 10] == 0 and np.signbit(got[x.size - 9])  # erf(-0) = -0
    assert list(got[x.size - 8: x.size - 6]) == [1.0, -1.0] and np.isnan(got[x.size - 6])


def test_a_gelu_epilogue_on_the_cpu_takes_it(device, cpu):
    @accy.function
    def mlp(x: accy.f32[64, 96], w: accy.f32[96, 160], b: accy.f32[160]):
        return accy.gelu(x @ w + b)

    job = accy.prepare(mlp, target=cpu)
    assert "accy_erf(" in job.kernel_source(0)
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((64, 96), (96, 160),
                                                                   (160,)))
    (out,) = job.run(x, w, b, device=device)
    h = x.astype(np.float64) @ w + b
    np.testing.assert_allclose(out, 0.5 * h * (1 + erf(h / np.sqrt(2))), rtol=1e-5, atol=1e-5)


def test_other_targets_and_f64_keep_the_built_in(cpu):
    gpu = accy.prepare(erf_program(64), target=TargetProfile(max_work_group_size=1024))
    assert "accy_erf" not in gpu.kernel_source(0) and "erf(" in gpu.kernel_source(0)
    f64 = accy.prepare(erf_program(64, accy.f64), target=cpu)
    assert "accy_erf" not in f64.kernel_source(0)
    k = accy.prepare(erf_program(64), target=cpu).kernels[0]
    assert "accy_erf" not in render(k) and "accy_erf" in render(k, cpu)
