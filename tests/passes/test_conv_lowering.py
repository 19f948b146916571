"""conv-lowering: the lowered program computes what the window ops mean, in the interpreter
and on the OpenCL device."""

from __future__ import annotations

import numpy as np
import pytest

import accy
from accy.builder import trace
from accy.ir.ops import Op, OpKind
from accy.ir.printer import print_program
from accy.passes.pipelines import PIPELINES

RNG = np.random.default_rng(11)


def net(x, w, dw):
    y = accy.conv2d(x, w, stride=(2, 1), padding=(1, 2, 0, 1), dilation=(1, 2))
    z = accy.conv2d(y.relu(), dw, padding=1, groups=2)
    return (accy.max_pool2d(z, 3, stride=2, padding=1), accy.avg_pool2d(z, 2, 1, (1, 0, 0, 1)),
            accy.avg_pool2d(y, 3, 2, 1, count_include_pad=True),
            accy.pad(x, [(0, 0), (1, 0), (2, 1), (0, 3)], 0.25))


def program(dtype=accy.f64):
    return trace(net, dtype[2, 3, 10, 9], dtype[4, 3, 3, 2], dtype[6, 2, 3, 3], name="net")


def inputs(dtype=np.float64):
    return [RNG.standard_normal(s).astype(dtype) for s in
            ((2, 3, 10, 9), (4, 3, 3, 2), (6, 2, 3, 3))]


def lowered(method: str):
    job = accy.prepare(program(), f"conv-lowering{{method={method}}}", until="tensor")
    return job.program


@pytest.mark.parametrize("method", ["im2col", "offsets"])
def test_lowered_program_matches_interpret(method):
    low = lowered(method)
    text = print_program(low)
    assert not any(n.op.kind is OpKind.WINDOW for n in low.functions[0].nodes()), text
    assert "einsum(" in text and "slice(" in text
    accy.verify(low, accy.Stage.dispatch)
    xs = inputs()
    for got, want in zip(accy.interpret(low, xs), accy.interpret(program(), xs), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_direct_keeps_conv_and_pools_and_lowers_pads():
    low = lowered("direct")
    ops = {n.op.value for n in low.functions[0].nodes()}
    assert {"conv2d", "max_pool2d", "avg_pool2d"} <= ops and "pad" not in ops
    accy.verify(low, accy.Stage.dispatch)
    xs = inputs()
    for got, want in zip(accy.interpret(low, xs), accy.interpret(program(), xs), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_tensor_pipeline_lowers_window_ops_after_saturation():
    assert PIPELINES["accy-tensor"].text.startswith("saturate,conv-lowering,")


@pytest.mark.parametrize("method", ["direct", "im2col", "offsets"])
def test_runs_on_the_device(device, method):
    prog = program(accy.f32)
    pipeline = PIPELINES["accy-default"].text.replace(
        "accy-tensor", PIPELINES["accy-tensor"].text.replace(
            "conv-lowering", f"conv-lowering{{method={method}}}"))
    job = accy.prepare(prog, pipeline)
    xs = inputs(np.float32)
    got = job.run(*xs, device=device)
    want = accy.interpret(prog, xs, precision="float64")
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def test_max_pool_of_negative_inputs_ignores_the_padding(device):
    prog = trace(lambda x: accy.max_pool2d(x, 3, 1, 1), accy.f32[1, 2, 5, 5], name="pool")
    x = -1.0 - RNG.random((1, 2, 5, 5)).astype(np.float32)
    (got,) = accy.prepare(prog).run(x, device=device)
    np.testing.assert_array_equal(got, accy.interpret(prog, [x])[0])


def test_auto_takes_im2col_for_pointwise_convs_on_gpu_targets_only():
    import dataclasses

    from accy.target import TargetProfile

    @accy.function
    def f(x: accy.f32[2, 8, 5, 5], w: accy.f32[4, 8, 1, 1], v: accy.f32[4, 8, 3, 3]):
        return accy.conv2d(x, w), accy.conv2d(x, v, padding=1)

    ops = {}
    for kind in ("cpu", "gpu"):
        target = dataclasses.replace(TargetProfile(), device_type=kind)
        job = accy.prepare(f, target=target, until="tensor")
        ops[kind] = [n.op for n in job.program.nodes()]
    assert ops["cpu"].count(Op.CONV2D) == 2 and Op.EINSUM not in ops["cpu"]
    assert ops["gpu"].count(Op.CONV2D) == 1 and ops["gpu"].count(Op.EINSUM) == 1
