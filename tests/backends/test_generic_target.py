"""A job prepared for no device (the generic profile) warns when it runs on one."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("pyopencl")

import accy  # noqa: E402

f32 = accy.f32


@accy.function
def chain(a: f32[256], b: f32[256]):
    return accy.maximum((a + b) * b - b, b)


def inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return (rng.standard_normal(256, dtype=np.float32),
            rng.standard_normal(256, dtype=np.float32))


def test_running_a_generic_job_warns_naming_the_device_and_the_fix(device) -> None:
    job = accy.prepare(chain)
    a, b = inputs()
    with pytest.warns(accy.GenericTargetWarning) as caught:
        (out,) = job.run(a, b, device=device)
    np.testing.assert_allclose(out, np.maximum((a + b) * b - b, b), rtol=1e-6)  # still right
    message = str(caught[0].message)
    assert device.info.name in message and "device=" in message and "target=" in message
    assert caught[0].filename == __file__  # the caller's line, not accy's
    with pytest.warns(accy.GenericTargetWarning) as made:
        job.executable(device=device)
    assert made[0].filename == __file__


@pytest.mark.parametrize("how", ["device", "target"])
def test_a_job_prepared_for_a_device_or_a_chosen_profile_does_not_warn(device, how) -> None:
    if how == "device":
        job = accy.prepare(chain, device=device)
    else:  # a hand-written profile is the user's choice
        job = accy.prepare(chain, target=accy.TargetProfile(compute_units=8))
    a, b = inputs()
    with warnings.catch_warnings():
        warnings.simplefilter("error", accy.GenericTargetWarning)
        (out,) = job.run(a, b, device=device)
    np.testing.assert_allclose(out, np.maximum((a + b) * b - b, b), rtol=1e-6)
