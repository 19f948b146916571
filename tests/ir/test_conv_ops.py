"""conv2d, max_pool2d, avg_pool2d and pad: shapes, the interpreter against direct loops, text
round trip, builder errors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import accy
from accy.builder import BuilderError
from accy.builder import trace as _trace
from accy.errors import ShapeError
from accy.ir.ops import Op, OpKind
from accy.ir.parser import parse_program
from accy.ir.printer import print_program

RNG = np.random.default_rng(3)


def trace(fn, *examples):
    return _trace(fn, *examples, name="f")


def conv_loops(x, w, stride, pads, dilation, groups):
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    top, left, bottom, right = pads
    xp = np.zeros((n, c, h + top + bottom, wd + left + right))
    xp[:, :, top:top + h, left:left + wd] = x
    oh = (h + top + bottom - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + left + right - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for b, oc, i, j in itertools.product(range(n), range(o), range(oh), range(ow)):
        g = oc // og
        for ci, p, q in itertools.product(range(cg), range(kh), range(kw)):
            out[b, oc, i, j] += (xp[b, g * cg + ci, i * stride[0] + p * dilation[0],
                                    j * stride[1] + q * dilation[1]] * w[oc, ci, p, q])
    return out


def pool_loops(x, kernel, stride, pads, kind, include_pad=False):
    n, c, h, wd = x.shape
    top, left, bottom, right = pads
    oh = (h + top + bottom - kernel[0]) // stride[0] + 1
    ow = (wd + left + right - kernel[1]) // stride[1] + 1
    out = np.zeros((n, c, oh, ow))
    for i, j in itertools.product(range(oh), range(ow)):
        r0, c0 = i * stride[0] - top, j * stride[1] - left
        rows = slice(max(r0, 0), min(r0 + kernel[0], h))
        cols = slice(max(c0, 0), min(c0 + kernel[1], wd))
        win = x[:, :, rows, cols]
        if kind == "max":
            out[:, :, i, j] = win.max(axis=(2, 3))
        else:
            count = kernel[0] * kernel[1] if include_pad else win.shape[2] * win.shape[3]
            out[:, :, i, j] = win.sum(axis=(2, 3)) / count
    return out


CONVS = [  # stride, padding (top, left, bottom, right), dilation, groups
    ((1, 1), (0, 0, 0, 0), (1, 1), 1),
    ((2, 2), (1, 1, 1, 1), (1, 1), 2),
    ((1, 2), (2, 0, 1, 3), (2, 1), 1),
    ((3, 1), (1, 2, 0, 0), (1, 2), 4),
]


@pytest.mark.parametrize("stride, pads, dilation, groups", CONVS)
def test_conv2d_interpret_matches_loops(stride, pads, dilation, groups):
    x, w = RNG.standard_normal((2, 4, 9, 8)), RNG.standard_normal((8, 4 // groups, 3, 2))
    p = trace(lambda x, w: accy.conv2d(x, w, stride=stride, padding=pads, dilation=dilation,
                                       groups=groups), x, w)
    want = conv_loops(x, w, stride, pads, dilation, groups)
    assert p.functions[0].results[0].type.shape == want.shape
    np.testing.assert_allclose(accy.interpret(p, [x, w])[0], want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kernel, stride, pads", [
    ((2, 2), (2, 2), (0, 0, 0, 0)), ((3, 3), (1, 1), (1, 1, 1, 1)),
    ((3, 2), (2, 1), (2, 0, 1, 1)), ((1, 3), (1, 3), (0, 1, 0, 2)),
])
@pytest.mark.parametrize("kind", ["max", "avg", "avg-include-pad"])
def test_pools_interpret_match_loops(kernel, stride, pads, kind):
    x = RNG.standard_normal((2, 3, 7, 8))
    if kind == "max":
        p = trace(lambda x: accy.max_pool2d(x, kernel, stride, pads), x)
    else:
        p = trace(lambda x: accy.avg_pool2d(x, kernel, stride, pads,
                                            count_include_pad=kind != "avg"), x)
    want = pool_loops(x, kernel, stride, pads, kind[:3], kind != "avg")
    np.testing.assert_allclose(accy.interpret(p, [x])[0], want, rtol=1e-12, atol=1e-12)


def test_pad_pairs_and_flat_forms_agree_with_numpy():
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    p = trace(lambda x: (accy.pad(x, [(0, 1), (2, 0), (1, 3)], 1.5),
                         accy.pad(x, [0, 2, 1, 1, 0, 3])), x)
    a, b = accy.interpret(p, [x])
    np.testing.assert_array_equal(a, np.pad(x, [(0, 1), (2, 0), (1, 3)], constant_values=1.5))
    np.testing.assert_array_equal(b, np.pad(x, [(0, 1), (2, 0), (1, 3)]))


def test_window_ops_round_trip_as_text_and_verify():
    def f(x, w):
        y = accy.conv2d(x, w, stride=2, padding=(1, 0), dilation=(1, 2), groups=2)
        return (accy.max_pool2d(y, 2, padding=1), accy.avg_pool2d(y, 3, 1, 1, True),
                accy.pad(x, [(0, 0), (0, 0), (1, 1), (0, 2)], -1.0))
    p = trace(f, accy.f32[1, 4, 9, 9], accy.f32[6, 2, 3, 3])
    text = print_program(p)
    assert "conv2d(%x, %w) {dilations=[1, 2], groups=2, pads=[1, 0, 1, 0]" in text
    assert "count_include_pad=true" in text
    assert parse_program(text) == p
    accy.verify(p)
    assert {Op.CONV2D, Op.MAX_POOL2D, Op.AVG_POOL2D, Op.PAD} == {
        o for o in Op if o.kind is OpKind.WINDOW}


def test_stage_rules_forbid_pads_after_the_tensor_stage_but_keep_conv_and_pools():
    p = trace(lambda x: accy.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)]), accy.f32[1, 1, 4, 4])
    accy.verify(p, accy.Stage.tensor)
    with pytest.raises(accy.AccyError, match="pad may not appear at stage dispatch"):
        accy.verify(p, accy.Stage.dispatch)
    # conv-lowering{method=direct} keeps these for the direct-conv kernel generator
    kept = trace(lambda x, w: accy.max_pool2d(accy.conv2d(x, w), 2), accy.f32[1, 1, 4, 4],
                 accy.f32[1, 1, 1, 1])
    accy.verify(kept, accy.Stage.target)


@pytest.mark.parametrize("make, match", [
    (lambda x, w: accy.conv2d(x, w, groups=3), "groups=3 must divide"),
    (lambda x, w: accy.conv2d(x, x.reshape(4, 5, 5)), r"weights \[O, C/groups, KH, KW\]"),
    (lambda x, w: accy.conv2d(x, w, stride=0), r"strides must be 2 integers >= 1"),
    (lambda x, w: accy.conv2d(x, w, padding=-1), r"pads must be 4 integers >= 0"),
    (lambda x, w: accy.conv2d(x, w, dilation=9), "does not fit"),
    (lambda x, w: accy.max_pool2d(x, 2, padding=2), "smaller than the kernel"),
    (lambda x, w: accy.avg_pool2d(x.reshape(4, 25), 2), r"needs a float input \[N, C, H, W\]"),
    (lambda x, w: accy.pad(x, [1, 1]), "pads must be 8 integers"),
])
def test_shape_errors_name_the_op(make, match):
    with pytest.raises(ShapeError, match=match):
        trace(make, accy.f32[1, 4, 5, 5], accy.f32[2, 4, 3, 3])


@pytest.mark.parametrize("make, match", [
    (lambda x: accy.conv2d(x, x, stride=1.5), "conv2d: stride must be an integer"),
    (lambda x: accy.conv2d(x, x, padding=(1, 2, 3)), "conv2d: padding must be an integer or"),
    (lambda x: accy.max_pool2d(x, "2"), "max_pool2d: kernel_size must be an integer"),
    (lambda x: accy.pad(x, 3), "pad: pads must be a list"),
    (lambda x: accy.pad(x, [(1, 2, 3)] * 4), r"pad: pads must be \(before, after\) pairs"),
])
def test_builder_errors(make, match):
    with pytest.raises(BuilderError, match=match):
        trace(make, accy.f32[1, 1, 4, 4])


def test_saturate_passes_window_ops_through():
    p = trace(lambda x, w: accy.max_pool2d(accy.conv2d(x, w, padding=1).relu(), 2),
              accy.f32[1, 2, 6, 6], accy.f32[3, 2, 3, 3])
    job = accy.prepare(p, "accy-contract,saturate", until="tensor")
    assert print_program(job.program).count("conv2d(") == 1
