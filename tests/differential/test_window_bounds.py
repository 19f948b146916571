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


def test_bounds_of_a_network_contract_pairwise(monkeypatch) -> None:
    """A many-operand einsum's bounds are contracted pairwise, as the interpreter's value is:
    numpy's einsum loops over every letter at once (`accy fuzz`, dims up to 24: a worker spent
    minutes in one bound), here 64^6 multiply-adds."""
    import opt_einsum

    import accy.error_bounds

    calls, contract = [], opt_einsum.contract

    def pairwise(*args, **kw):
        calls.append(args[0])
        return contract(*args, **kw)

    monkeypatch.setattr(accy.error_bounds.opt_einsum, "contract", pairwise)
    program = trace(lambda a, b, c, d, e: accy.einsum("ab,bc,cd,de,ef->af", a, b, c, d, e),
                    *(accy.f32[64, 64],) * 5)
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((64, 64)).astype(np.float32) for _ in range(5)]
    (bound,) = error_bounds(program, xs, RTOL)
    assert calls and set(calls) == {"ab,bc,cd,de,ef->af"}
    np.testing.assert_allclose(bound.value, np.linalg.multi_dot([x.astype(np.float64)
                                                                 for x in xs]), rtol=1e-9)
    mags = [np.abs(x.astype(np.float64)) for x in xs]
    assert np.all(bound.error >= 1e-5 * np.linalg.multi_dot(mags))  # a term's rounding at least
