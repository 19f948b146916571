"""NaN constants in kernels: PoCL's ``exp`` and ``tanh`` of a NaN its compiler could see (the
``NAN`` literal, even behind a select) returned arbitrary finite values (`accy fuzz`: a
softmax over a concat with a NaN constant gave 1.2e-24 and 1.0 for NaN and NaN)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pyopencl")

import accy  # noqa: E402
from accy.backends.opencl.render import render  # noqa: E402
from accy.builder import trace  # noqa: E402
from accy.target import TargetProfile  # noqa: E402

NAN = float("nan")

PROGRAMS = {
    "exp of a select": lambda x: accy.exp(accy.where(x > 0, NAN, x)),
    "tanh of a select": lambda x: accy.tanh(accy.where(x > 0, x, NAN)),
    "softmax over a concat": lambda x: accy.softmax(
        accy.concat([accy.softmax(accy.constant(np.full(1, NAN, x.dtype.numpy)), 0), x[:1]],
                    0), 0),
}


@pytest.mark.parametrize("dtype", [accy.f32, accy.f64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", PROGRAMS)
def test_math_of_a_nan_constant_is_nan(device, name, dtype):
    target = TargetProfile.from_device(device.info)
    if dtype.dtype not in target.dtypes:
        pytest.skip(f"the device has no {dtype.dtype.value}")
    prog = trace(PROGRAMS[name], dtype[16], name="f")
    x = np.linspace(-2, 2, 16).astype(dtype.dtype.numpy)
    (got,) = accy.prepare(prog, target=target).run(x, device=device)
    (want,) = accy.interpret(prog, [x])
    assert np.isnan(want).any()
    np.testing.assert_allclose(got, want, rtol=1e-6)  # NaN where NaN is wanted, only there


def test_a_nan_literal_is_read_from_a_volatile_helper():
    prog = trace(PROGRAMS["softmax over a concat"], accy.f32[16], name="f")
    job = accy.prepare(prog, target=TargetProfile(device_type="cpu"))
    (source,) = [render(k) for k in job.kernels]
    assert "accy_nanf()" in source and "volatile float v = NAN" in source
    assert source.count("NAN") == 1  # only inside the helper
