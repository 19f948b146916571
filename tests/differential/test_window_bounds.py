"""Error bounds of the window ops (conv2d as a contraction, avg_pool2d as a reduction,
max_pool2d and pad by the largest error in the window): judged against the magnitude of
their terms, with the output's own shape."""

from __future__ import annotations

import numpy as np
import pytest

import accy
from accy.builder import trace
from accy.differential import DifferentialFailure, assert_close
from accy.error_bounds import error_bounds
from accy.ir.types import DType

RTOL = {DType.f32: 1e-5, DType.f64: 1e-12}


def test_convolution_is_judged_against_the_magnitude_of_its_terms() -> None:
    def conv(x, w):
        return accy.conv2d(x, w)

    program = trace(conv, accy.f32[1, 1, 1, 3], accy.f32[1, 1, 1, 3])
    x = np.float32([1e8, 1.0, -1e8]).reshape(1, 1, 1, 3)
    w = np.ones((1, 1, 1, 3), np.float32)
    # summed in another order the 1 may be lost: within rtol of the sum of |terms|
    assert assert_close([np.zeros((1, 1, 1, 1), np.float32)], [np.ones((1, 1, 1, 1),
                        np.float32)], program, [x, w]) == (1, 0)
    with pytest.raises(DifferentialFailure, match="differ"):  # dropping a term is not
        assert_close([np.full((1, 1, 1, 1), 1e8, np.float32)], [np.ones((1, 1, 1, 1),
                     np.float32)], program, [x, w])


def test_pools_and_pads_keep_their_output_shape() -> None:
    def f(x):
        p = accy.max_pool2d(x, 2, stride=2) + accy.avg_pool2d(x, 2, stride=2)
        return accy.pad(p, (0, 0, 1, 1, 0, 0, 1, 1), 0.0).relu()

    program = trace(f, accy.f32[1, 2, 4, 4])
    x = np.random.default_rng(0).standard_normal((1, 2, 4, 4)).astype(np.float32)
    (bound,) = error_bounds(program, [x], RTOL)
    assert bound.value.shape == bound.error.shape == bound.unstable.shape == (1, 2, 4, 4)
    assert np.all(bound.error > 0) and not bound.unstable.any()
    (want,) = accy.interpret(program, [x])
    assert assert_close([want], [want], program, [x]) == (32, 0)
    with pytest.raises(DifferentialFailure):
        assert_close([want + np.float32(1e-3)], [want], program, [x])
