"""direct-conv: conv2d and pools kept by ``conv-lowering{method=direct}`` (the default) match
the interpreter on the OpenCL device, with the device's own tiles, with GPU-style tiles (a
profile saying ``device_type="gpu"``: scalar pixels, work-groups side by side; the kernels are
portable OpenCL C, so PoCL runs them too) and through the loop-nest fallback."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import accy
from accy.builder import trace
from accy.kernels import conv
from accy.target import TargetProfile

FALLBACK = ("accy-contract,accy-tensor,accy-dispatch,accy-memory,kernel-outlining-planning,"
            "kernelization{disable=direct-conv},accy-target")


@pytest.fixture(scope="module")
def profiles(device) -> dict[str, TargetProfile]:
    real = TargetProfile.from_device(device.info)
    gpu_like = dataclasses.replace(real, device_type="gpu",
                                   max_work_group_size=min(256, real.max_work_group_size))
    # a CPU reporting 4-byte native vectors (Oclgrind does): runs of one pixel, whose aligned
    # rows once stored nothing of their last run (results silently wrong)
    narrow = dataclasses.replace(real, device_type="cpu", native_vector_bytes=4)
    return {"device": real, "gpu-tiles": gpu_like, "narrow-cpu": narrow}


# direct everywhere (conv-lowering's auto takes im2col for 1x1 convs on GPU-typed targets)
DIRECT = accy.parse_pipeline("accy-default").replacing("conv-lowering{method=direct}")


def run(device, prog: accy.Program, inputs: list[np.ndarray], target=None,
        pipeline=DIRECT, generator: str | None = "direct-conv",
        tol: float = 2e-5) -> accy.PreparedJob:
    job = accy.prepare(prog, pipeline, target=target)
    if generator is not None:
        assert generator in job.generators(), job.generators()
    got = job.run(*inputs, device=device)
    want = accy.interpret(prog, inputs, precision="float64")
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == inputs[0].dtype
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
    return job


CASES = [  # x shape, w shape, conv2d keywords
    ((1, 3, 8, 8), (4, 3, 3, 3), {"padding": 1}),
    ((2, 6, 9, 11), (4, 3, 3, 3), {"padding": (1, 2), "stride": 2, "groups": 2}),
    ((1, 4, 10, 7), (8, 4, 3, 2), {"padding": (0, 1, 2, 0), "dilation": (2, 1)}),
    ((1, 8, 5, 5), (16, 8, 1, 1), {}),
    ((1, 3, 13, 17), (5, 3, 7, 7), {"stride": 2, "padding": 3}),
    ((1, 12, 6, 6), (12, 1, 3, 3), {"padding": 1, "groups": 12}),  # depthwise
    ((1, 8, 9, 9), (6, 4, 3, 3), {"stride": (3, 2), "dilation": 2, "groups": 2}),
    ((2, 16, 20, 20), (32, 16, 3, 3), {"padding": 1}),  # several tiles of every kind
    ((2, 6, 13, 11), (16, 3, 3, 2), {"groups": 2, "dilation": (2, 1)}),  # valid: in place
    ((3, 16, 7, 7), (24, 16, 1, 1), {}),  # in place, the last tile overlapping the one before
    # more than UNROLLED_TAPS taps: a loop over the kernel's rows, phases from the stride
    ((1, 2, 19, 17), (3, 2, 8, 7), {"stride": (2, 3), "padding": 2, "dilation": (1, 2)}),
]


@pytest.mark.parametrize("profile", ["device", "gpu-tiles", "narrow-cpu"])
@pytest.mark.parametrize("xs, ws, kw", CASES)
def test_conv_matches_interpret(device, profiles, profile, xs, ws, kw):
    prog = trace(lambda x, w: accy.conv2d(x, w, **kw), accy.f32[xs], accy.f32[ws], name="c")
    rng = np.random.default_rng(0)
    job = run(device, prog, [rng.standard_normal(s).astype(np.float32) for s in (xs, ws)],
              profiles[profile])
    copies = [k.entry.endswith("_windows") for k in job.kernels]
    if kw.get("stride", 1) != 1 or kw.get("padding", 0) != 0:
        assert copies == [True, False]
    elif profile == "device" and profiles[profile].device_type == "cpu":
        assert copies == [False]  # stride 1, no padding: the input read in place, no copy
        # (GPU tiles only where a work-group's pixels fit the image)


@pytest.mark.parametrize("xs, ws, kw", CASES[:4])
def test_loop_nest_fallback_matches_interpret(device, xs, ws, kw):
    prog = trace(lambda x, w: accy.conv2d(x, w, **kw), accy.f32[xs], accy.f32[ws], name="c")
    rng = np.random.default_rng(1)
    run(device, prog, [rng.standard_normal(s).astype(np.float32) for s in (xs, ws)],
        pipeline=FALLBACK, generator="loop-nest")


@pytest.mark.parametrize("profile", ["device", "gpu-tiles"])
def test_bias_and_relu_are_the_epilogue_of_one_work_item(device, profiles, profile):
    def f(x, w, b, skip):
        y = accy.conv2d(x, w, padding=1) + b.reshape(1, 6, 1, 1)
        return accy.maximum(y + skip, 0.0)

    prog = trace(f, accy.f32[2, 4, 7, 9], accy.f32[6, 4, 3, 3], accy.f32[6],
                 accy.f32[2, 6, 7, 9], name="block")
    rng = np.random.default_rng(2)
    shapes = [(2, 4, 7, 9), (6, 4, 3, 3), (6,), (2, 6, 7, 9)]
    job = run(device, prog, [rng.standard_normal(s).astype(np.float32) for s in shapes],
              profiles[profile])
    (group,) = [g for g in job.product.fusion.groups if g.kind.value == "contraction"]
    assert sorted(n.op.value for n in group.nodes if n.srcs) == [
        "add", "add", "conv2d", "max", "reshape"]
    assert group.outputs[0].op.value == "max"


def test_f64(device, profiles):
    if accy.DType.f64 not in profiles["device"].dtypes:
        pytest.skip("the device has no f64")
    prog = trace(lambda x, w: accy.conv2d(x, w, stride=2, padding=1, groups=3),
                 accy.f64[1, 6, 11, 10], accy.f64[9, 2, 3, 3], name="c")
    rng = np.random.default_rng(3)
    run(device, prog, [rng.standard_normal(s) for s in ((1, 6, 11, 10), (9, 2, 3, 3))],
        profiles["device"], tol=1e-12)


@pytest.mark.parametrize("profile", ["device", "gpu-tiles", "narrow-cpu"])
@pytest.mark.parametrize("dtype", [accy.f32, accy.f64])
def test_epilogues_of_other_dtypes_store_their_own(device, profiles, profile, dtype):
    """Results of a comparison (bool) and a cast (i32) after a conv and a pool: their vector
    stores once wrote the conv's floats into them (`accy fuzz`: f64 into bool overran the
    buffer and corrupted the heap; f32 into i32 stored float bits)."""
    if dtype is accy.f64 and accy.DType.f64 not in profiles[profile].dtypes:
        pytest.skip("the device has no f64")

    def f(x, w, t):  # each result the one epilogue of its conv or pool
        return (accy.conv2d(x, w, padding=1) < t,
                accy.conv2d(x, w, padding=(0, 1)).astype(accy.DType.i32),
                (accy.max_pool2d(x, 2, (2, 1)) > t).astype(accy.DType.i32))

    prog = trace(f, dtype[2, 3, 9, 17], dtype[4, 3, 3, 3], dtype[()], name="f")
    rng = np.random.default_rng(4)  # small integers: every sum exact, so results compare
    inputs = [rng.integers(-3, 4, s).astype(dtype.dtype.numpy)
              for s in ((2, 3, 9, 17), (4, 3, 3, 3))] + [np.asarray(0.5, dtype.dtype.numpy)]
    job = accy.prepare(prog, DIRECT, target=profiles[profile])
    assert job.generators().get("direct-conv") == 3, job.generators()
    for got, want in zip(job.run(*inputs, device=device), accy.interpret(prog, inputs),
                         strict=True):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


POOLS = [
    lambda x: accy.max_pool2d(x, 2),
    lambda x: accy.max_pool2d(x, 3, 2, 1),
    lambda x: accy.avg_pool2d(x, 3, 1, 1),
    lambda x: accy.avg_pool2d(x, (3, 2), (2, 1), (1, 0, 1, 1), count_include_pad=True),
    lambda x: accy.maximum(accy.avg_pool2d(x, (3, 2), (2, 1), (1, 0, 1, 1)), 0.0),
]


@pytest.mark.parametrize("pipeline", ["accy-default", FALLBACK])
@pytest.mark.parametrize("profile", ["device", "gpu-tiles", "narrow-cpu"])
@pytest.mark.parametrize("pool", range(len(POOLS)))
def test_pools_match_interpret(device, profiles, profile, pool, pipeline):
    prog = trace(POOLS[pool], accy.f32[2, 3, 9, 11], name="pool")
    x = np.random.default_rng(pool).standard_normal((2, 3, 9, 11)).astype(np.float32)
    x[0, 1, 4, 4] = np.nan  # max propagates NaN, as numpy's
    x[1, 2] = -5.0 - np.abs(x[1, 2])  # negative windows: a -inf pad never wins a max
    run(device, prog, [x], profiles[profile], pipeline,
        "direct-conv" if pipeline == "accy-default" else "loop-nest")


@settings(max_examples=12, deadline=None)
@given(st.data())
def test_random_convs_match_interpret(device, profiles, data):
    d = data.draw
    groups = d(st.sampled_from([1, 2, 3]))
    cg, og = d(st.integers(1, 4)), d(st.integers(1, 5))
    kh, kw = d(st.integers(1, 4)), d(st.integers(1, 4))
    sh, sw, dh, dw = (d(st.integers(1, 3)) for _ in range(4))
    pads = tuple(d(st.integers(0, 2)) for _ in range(4))
    h = d(st.integers(max(1, (kh - 1) * dh + 1 - pads[0] - pads[2]), 12))
    w = d(st.integers(max(1, (kw - 1) * dw + 1 - pads[1] - pads[3]), 12))
    n = d(st.integers(1, 2))
    xs, ws = (n, groups * cg, h, w), (groups * og, cg, kh, kw)
    prog = trace(lambda x, k: accy.conv2d(x, k, stride=(sh, sw), padding=pads,
                                          dilation=(dh, dw), groups=groups),
                 accy.f32[xs], accy.f32[ws], name="c")
    rng = np.random.default_rng(0)
    run(device, prog, [rng.standard_normal(s).astype(np.float32) for s in (xs, ws)],
        profiles[d(st.sampled_from(["device", "gpu-tiles"]))])


def test_tiles_follow_the_target():
    s = conv.ConvShape(1, 64, 56, 56, 64, 1, 3, 3, 1, 1, 1, 1, 1, 1, 56, 56)
    cpu = TargetProfile(device_type="cpu", native_vector_bytes=64)
    assert conv.choose_tiles(s, accy.DType.f32, cpu) == conv.ConvTiles(8, 3, 16, 1)
    narrow = TargetProfile(device_type="cpu", native_vector_bytes=32)
    assert conv.choose_tiles(s, accy.DType.f32, narrow) == conv.ConvTiles(4, 3, 8, 1)
    gpu = TargetProfile(device_type="gpu", max_work_group_size=1024, compute_units=4)
    assert conv.choose_tiles(s, accy.DType.f32, gpu) == conv.ConvTiles(8, 8, 1, 128)
    # 132 units: 8 channel tiles x 3 pixel tiles would leave most idle; shorter pixel runs
    big = dataclasses.replace(gpu, compute_units=132)
    assert conv.choose_tiles(s, accy.DType.f32, big) == conv.ConvTiles(8, 1, 1, 64)
    pointwise = dataclasses.replace(s, kh=1, kw=1, top=0, left=0)  # read in place
    assert pointwise.copy_free and conv.choose_tiles(pointwise, accy.DType.f32, cpu) == (
        conv.ConvTiles(8, 3, 16, 1, False, True))
    assert not s.copy_free
    grouped = dataclasses.replace(s, o=128, c=128, groups=32)  # 4 channels per group
    assert conv.choose_tiles(grouped, accy.DType.f32, cpu).tm == 4
    # the padded copy: stride 2 splits into 4 phases of (OH + 1) x (OW + 1)
    s2 = dataclasses.replace(s, sh=2, sw=2, oh=28, ow=28)
    assert (s2.hq, s2.wq, s2.block) == (29, 29, 4 * 29 * 29)
    assert s2.tap(1, 1) == 3 * 29 * 29 and s2.tap(2, 2) == 29 + 1


def test_declines_a_group_it_cannot_build():
    prog = trace(lambda x, w: accy.conv2d(x, w).sum(), accy.f32[1, 2, 5, 5],
                 accy.f32[3, 2, 3, 3], name="c")
    job = accy.prepare(prog)
    for group in job.product.fusion.groups:
        found = conv.analyse(group)
        assert isinstance(found, str) == (group.kind.value != "contraction"), found


def test_tiles_that_do_not_fit_are_refused():
    prog = trace(lambda x, w: accy.conv2d(x, w), accy.f32[1, 2, 5, 5], accy.f32[6, 2, 3, 3],
                 name="c")
    job = accy.prepare(prog, until="kernel")
    item = job.product.schedule.items[0]
    group = job.product.fusion.groups[item.group]
    with pytest.raises(ValueError, match="tm must divide"):
        conv.build(group, job.product.outline.outlines[0], item.kind, TargetProfile(),
                   conv.ConvTiles(4, 1, 1, 1))


@settings(max_examples=12, deadline=None)
@given(st.data())
def test_random_pools_match_interpret(device, profiles, data):
    d = data.draw
    kh, kw = d(st.integers(1, 4)), d(st.integers(1, 4))
    sh, sw = d(st.integers(1, 3)), d(st.integers(1, 3))
    pads = (d(st.integers(0, kh - 1)), d(st.integers(0, kw - 1)),
            d(st.integers(0, kh - 1)), d(st.integers(0, kw - 1)))
    shape = (d(st.integers(1, 2)), d(st.integers(1, 4)),
             d(st.integers(max(1, kh - pads[0] - pads[2]), 13)),
             d(st.integers(max(1, kw - pads[1] - pads[3]), 13)))
    if d(st.booleans()):
        def pool(x):
            return accy.max_pool2d(x, (kh, kw), (sh, sw), pads)
    else:
        include = d(st.booleans())

        def pool(x):
            return accy.avg_pool2d(x, (kh, kw), (sh, sw), pads, count_include_pad=include)
    prog = trace(pool, accy.f32[shape], name="pool")
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32) - 3.0
    run(device, prog, [x], profiles[d(st.sampled_from(["device", "gpu-tiles"]))])


def test_in_place_convs_read_within_their_input_under_oclgrind(capfd):
    """On Oclgrind (a simulator checking every access; where installed, through
    ``OCL_ICD_VENDORS``): pixels past a conv's output rows, read in place, read past the
    input's end in its last channel (never stored) until clamped."""
    from accy.backends.opencl.runtime import select_device
    from accy.errors import DeviceError

    try:
        sim = select_device("oclgrind")
    except DeviceError:
        pytest.skip("Oclgrind is not installed")
    for xs, ws, kw in (CASES[8], CASES[9]):
        prog = trace(lambda x, w: accy.conv2d(x, w, **kw), accy.f32[xs], accy.f32[ws],  # noqa: B023
                     name="c")
        rng = np.random.default_rng(0)
        run(sim, prog, [rng.standard_normal(s).astype(np.float32) for s in (xs, ws)],
            TargetProfile.from_device(sim.info))
    assert "Invalid" not in capfd.readouterr().err
