"""row-movement: which groups it takes, the kernels it builds, and their results on PoCL."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import accy
from accy.builder import trace
from accy.ir.interpret import interpret
from accy.kernels import rowmove
from accy.plans import LaunchGeometry
from accy.target import TargetProfile

f32 = accy.f32
GPU = TargetProfile()  # the NVIDIA-like default profile
CPU = TargetProfile(device_type="cpu")


def padded(a):
    return accy.pad(a, [(0, 0), (0, 3)])


TAKEN = [
    ("pad", padded, (f32[37, 61],)),
    ("slice", lambda a: a[:, 2:50], (f32[37, 61],)),
    ("inner broadcast", lambda a, c: a + c, (f32[64, 32], f32[64, 1])),
    ("leading concat", lambda a, b: accy.concat([a, b * 2.0], axis=0), (f32[5, 40], f32[7, 40])),
    ("last concat of computed pieces", lambda a, b: accy.concat([a + 1.0, b[:, 1:]], axis=1),
     (f32[9, 20], f32[9, 31])),
    ("transpose keeping the last axis", lambda a: accy.transpose(a, (1, 0, 2))[:, 1:, :],
     (f32[6, 5, 33],)),
    ("reshape keeping the last axis", lambda a: accy.reshape(a[1:], (3, 8, 24)),
     (f32[25, 24],)),
    ("conv-style pad of rows and columns", lambda a: accy.pad(a, [(0, 0), (1, 1), (2, 2)]),
     (f32[3, 17, 19],)),
]


@pytest.mark.parametrize("why, fn, types", TAKEN, ids=[t[0] for t in TAKEN])
def test_takes_movement_along_rows_and_matches_the_interpreter(check, device, rng, why, fn,
                                                               types):
    prog = trace(fn, *types, name="f")
    inputs = [rng.standard_normal(t.shape).astype(np.float32) for t in types]
    # the device's own profile, and a GPU's launch geometry
    for target in (TargetProfile.from_device(device.info), GPU):
        job = accy.prepare(prog, target=target)
        assert job.generators() == {"row-movement": 1}, why
        check(prog, inputs, target=target, rtol=0, atol=0)


@pytest.mark.parametrize("why, fn, types", [
    ("a scalar parameter", lambda a, v: accy.pad(a, [(2, 3)], v), (f32[5], f32[()])),
    ("nan", lambda a: accy.pad(a, [(0, 1)], float("nan")), (f32[1],)),
], ids=["scalar parameter", "nan"])
def test_pads_one_axis_with_a_fill_of_rank_0(check, device, rng, why, fn, types):
    """The fill is read at no coordinates (`accy fuzz` found an IndexError building it)."""
    prog = trace(fn, *types, name="f")
    inputs = [rng.standard_normal(t.shape).astype(np.float32) for t in types]
    target = TargetProfile.from_device(device.info)
    assert accy.prepare(prog, target=target).generators() == {"row-movement": 1}, why
    check(prog, inputs, target=target, rtol=0, atol=0)


@pytest.mark.parametrize("why, fn, types", [
    ("contiguous elementwise", lambda a: a * 2.0 + 1.0, (f32[64, 32],)),
    ("strided last axis", lambda a: a[:, ::2] * 2.0, (f32[64, 64],)),
    ("transpose moving the last axis", lambda a: a.T + 1.0, (f32[64, 32],)),
    ("reshape of the last axis", lambda a: accy.reshape(a[:, 1:], (40, 2, 16)), (f32[40, 33],)),
])
def test_declines(used, why, fn, types) -> None:
    for target in (CPU, GPU):
        assert "row-movement" not in used(accy.prepare(trace(fn, *types, name="f"),
                                                       target=target)), why


def test_short_rows_on_cpus_only(used) -> None:
    """Rows shorter than MIN_ROW stay in the loop nest on GPUs; CPUs take them from
    MIN_ROW_CPU (a channel concat of 13x13 images, as SqueezeNet's)."""
    prog = trace(lambda a, b: accy.concat([a, b], axis=1), f32[1, 8, 13, 13], f32[1, 8, 13, 13],
                 name="f")
    assert used(accy.prepare(prog, target=GPU)) == {"loop-nest": 1}
    assert used(accy.prepare(prog, target=CPU)) == {"row-movement": 1}
    one = trace(lambda a: a[1:] * 2.0, f32[64, 1], name="f")
    assert used(accy.prepare(one, target=CPU)) == {"loop-nest": 1}


def test_pad_kernel_reads_rows_without_division_or_clamp() -> None:
    job = accy.prepare(trace(padded, f32[2937, 2937], name="f"), target=CPU)
    src = job.kernel_source(0)
    assert "get_global_id(1)" in src and "/" not in src and "%" not in src
    assert "clamp" not in src  # the copied piece is read only where it is selected
    assert "(c1 < 2937L) ? in0[((row2 * 2937L) + c1)] : 0.0f" in src
    assert job.kernels[0].geometry == LaunchGeometry((2944, 2938), (128, 2))


def test_geometry_pads_rows_least() -> None:
    assert rowmove.geometry((10, 257), GPU) == LaunchGeometry((288, 16), (32, 8))
    assert rowmove.geometry((7, 1000), GPU) == LaunchGeometry((1024, 7), (256, 1))
    assert rowmove.geometry((100, 16), GPU) == LaunchGeometry((16, 112), (16, 16))


def test_rows_past_a_grid_dimension_go_on_in_slabs(device, rng, monkeypatch) -> None:
    """More row groups than MAX_GROUPS (NVIDIA's grid limit, 65535) continue along launch
    dimension 2: here with the limit set to 3, 20 rows of 40 in groups of 4 rows make 2 slabs
    of 3 groups (12 rows), the last 4 rows of the second slab idle."""
    monkeypatch.setattr(rowmove, "MAX_GROUPS", 3)
    assert rowmove.geometry((20, 40), GPU) == LaunchGeometry((64, 12, 2), (64, 4, 1))
    assert rowmove.geometry((5, 3, 40), GPU) == LaunchGeometry((64, 8, 2), (64, 4, 1))
    prog = trace(padded, f32[20, 40], name="f")
    x = rng.standard_normal((20, 40)).astype(np.float32)
    for target in (TargetProfile.from_device(device.info), GPU):
        job = accy.prepare(prog, target=target)
        assert job.generators() == {"row-movement": 1}
        np.testing.assert_array_equal(job.run(x, device=device)[0],
                                      np.pad(x, [(0, 0), (0, 3)]))


def test_disable_gives_the_loop_nest_the_same_results(check, rng, pipe) -> None:
    prog = trace(padded, f32[33, 45], name="f")
    x = [rng.standard_normal((33, 45)).astype(np.float32)]
    check(prog, x, pipeline=pipe("disable=row-movement"), generator="loop-nest")
    check(prog, x, generator="row-movement")


def test_through_the_front_end(device, rng) -> None:
    @accy.function
    def f(x: f32[20, 70], y: f32[20, 5]):
        return accy.concat([x[:, 3:], y], axis=1) * 0.5

    job = accy.prepare(f)
    assert job.generators() == {"row-movement": 1}
    x, y = rng.standard_normal((20, 70)), rng.standard_normal((20, 5))
    (got,) = job.run(x.astype(np.float32), y.astype(np.float32), device=device)
    np.testing.assert_array_equal(
        got, (np.concatenate([x[:, 3:], y], axis=1) * 0.5).astype(np.float32))


@settings(max_examples=15, deadline=None)
@given(st.data())
def test_random_row_movement_matches_the_interpreter(device, data) -> None:
    """A random leading shape and row, sliced along the row, padded on both ends, concatenated
    with a computed piece, its leading axes transposed: exactly the interpreter's values on
    the device's profile and a GPU-style one."""
    lead = tuple(data.draw(st.lists(st.integers(1, 6), min_size=1, max_size=3), label="lead"))
    n = data.draw(st.integers(rowmove.MIN_ROW_CPU, 90), label="row")
    lo = data.draw(st.integers(0, n // 2), label="lo")
    hi = data.draw(st.integers(lo + 1, n), label="hi")
    before, after = data.draw(st.integers(0, 5), label="before"), data.draw(
        st.integers(0, 5), label="after")
    perm = tuple(data.draw(st.permutations(range(len(lead))), label="perm")) + (len(lead),)

    def fn(a):
        s = a[(slice(None),) * len(lead) + (slice(lo, hi),)]
        p = accy.pad(s, [(0, 0)] * len(lead) + [(before, after)])
        return accy.transpose(accy.concat([p, a * 2.0], axis=-1), perm)

    prog = trace(fn, f32[(*lead, n)], name="f")
    x = [np.random.default_rng(n).standard_normal((*lead, n)).astype(np.float32)]
    own = TargetProfile.from_device(device.info)
    gpu_like = dataclasses.replace(own, device_type="gpu")
    want = interpret(prog, x)[0]
    row = hi - lo + before + after + n
    for target in (own, gpu_like):
        job = accy.prepare(prog, target=target)
        short = target.device_type != "cpu" and row < rowmove.MIN_ROW
        assert set(job.generators()) == {"loop-nest" if short else "row-movement"}
        np.testing.assert_array_equal(job.run(*x, device=device)[0], want)


def test_gpu_work_items_take_several_elements() -> None:
    """On GPUs each work-item writes UNROLL_BYTES (four f32): along the row where the row
    fills the work-groups' widths, else over rows; fewer where the launch would not fill the
    compute units; one on CPUs."""
    h200 = dataclasses.replace(GPU, compute_units=132)
    pad = trace(padded, f32[4085, 4085], name="f")
    job = accy.prepare(pad, target=h200)
    assert job.kernels[0].geometry == LaunchGeometry((1024, 4085), (256, 1))
    src = job.kernel_source(0)
    assert "min((c1 + 768L), 4087L)" in src
    assert src.rindex("in0[") < src.index("out0[")  # all four loads before the first store
    short = trace(padded, f32[40000, 45], name="f")  # 48-wide rows: four rows a work-item
    job = accy.prepare(short, target=h200)
    assert job.kernels[0].geometry == LaunchGeometry((64, 10000), (64, 4))
    small = trace(padded, f32[64, 61], name="f")
    assert accy.prepare(small, target=h200).kernels[0].geometry.global_size == (64, 64)
    assert accy.prepare(pad, target=CPU).kernels[0].geometry.global_size == (4096, 4085)


def test_rows_of_the_domains_leading_shape_are_read_without_division() -> None:
    """A pad of attention-shaped features (7, 11, 1299, 40 -> 48): every row reads its input
    at the row number times 40, without the divisions that find its leading coordinates; a
    leading broadcast still reads through them."""
    h200 = dataclasses.replace(GPU, compute_units=132)
    def features(a):
        return accy.pad(a, [(0, 0)] * (a.type.rank - 1) + [(0, 3)])

    pad = trace(features, f32[7, 11, 1299, 37], name="f")
    src = accy.prepare(pad, target=h200).kernel_source(0)
    assert "/" not in src and "%" not in src and "((row2 * 37L) + c1)" in src
    wide = trace(lambda a: features(accy.broadcast_to(a, (7, 11, 37))), f32[11, 37], name="f")
    assert "%" in accy.prepare(wide, target=h200).kernel_source(0)


@settings(max_examples=15, deadline=None)
@given(st.data())
def test_random_unrolled_rows_match_the_interpreter(device, data) -> None:
    """Work-items of several elements (any split between the row and the rows, the launch
    clamped past the ends, rows in slabs) give exactly the interpreter's values."""
    lead = tuple(data.draw(st.lists(st.integers(1, 40), min_size=1, max_size=2), label="lead"))
    n = data.draw(st.integers(rowmove.MIN_ROW, 700), label="row")
    before, after = data.draw(st.integers(0, 9), label="before"), data.draw(
        st.integers(1, 9), label="after")

    def fn(a):
        rest = a[(slice(None),) * len(lead) + (slice(1, None),)]
        edges = [(0, 0)] * len(lead) + [(before, after)]
        return accy.concat([accy.pad(rest, edges), a * 2.0], axis=-1)

    prog = trace(fn, f32[(*lead, n)], name="f")
    x = [np.random.default_rng(n).standard_normal((*lead, n)).astype(np.float32)]
    gpu_like = dataclasses.replace(TargetProfile.from_device(device.info), device_type="gpu")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rowmove, "MIN_ITEMS_PER_UNIT", 1)
        mp.setattr(rowmove, "UNROLL_BYTES", 4 << data.draw(st.integers(1, 3), label="unroll"))
        if data.draw(st.booleans(), label="slabs"):  # about as many slabs as row groups a slab
            mp.setattr(rowmove, "MAX_GROUPS", max(2, math.isqrt(math.prod(lead) - 1) + 1))
        job = accy.prepare(prog, target=gpu_like)
    assert job.generators() == {"row-movement": 1}
    np.testing.assert_array_equal(job.run(*x, device=device)[0], interpret(prog, x)[0])


def test_in_place_rows_are_not_computed_again_by_other_work_items(device, rng) -> None:
    """`accy fuzz` (GPU-typed kernels on PoCL): a broadcast group written in place over its
    input clamped the work-items' extra rows past the end to the last row, so another
    work-item computed that row again from the input its own work-item had overwritten
    already (about half the runs: the last row pow(pow(x, b), b)). In place, a work-item
    takes one element where the launch would overhang."""
    def fn(a, b):  # f16 maths in f32: a's cast is an intermediate, which pow overwrites
        p = (accy.abs(a) + 1.0) ** b
        return -a, -p, p

    prog = trace(fn, accy.f16[11, 22, 34], accy.f16[11, 22, 1], name="f")
    gpu_like = dataclasses.replace(TargetProfile.from_device(device.info), device_type="gpu",
                                   max_work_group_size=min(256, device.info.max_work_group_size))
    job = accy.prepare(prog, target=gpu_like)
    (k,) = [k for k in job.kernels if "pow" in k.entry]
    slots = [a.slot for a in k.args]
    assert len(set(slots)) < len(slots)  # an output in place over an input
    assert "min(" not in job.kernel_source(job.kernels.index(k))
    a = rng.integers(-2, 3, (11, 22, 34)).astype(np.float16)
    b = rng.integers(0, 3, (11, 22, 1)).astype(np.float16)
    want = interpret(prog, [a, b])
    for _ in range(6):  # a race: each run of the clamped kernel failed about half the time
        for got, ref in zip(job.run(a, b, device=device), want, strict=True):
            np.testing.assert_array_equal(got, ref)
