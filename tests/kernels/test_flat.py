"""vector-flat: which groups it takes, the kernels it builds, and their results on PoCL."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import accy
from accy.backends.opencl.render import expr, render, stmts
from accy.builder import Builder, select, trace
from accy.ir.types import DType
from accy.kernels import flat
from accy.kernels.ir import (
    INDEX,
    Kernel,
    KernelArg,
    Lane,
    Let,
    Lit,
    LocalArray,
    Var,
    VectorLoad,
    VectorStore,
    free_vars,
    idx,
)
from accy.plans import LaunchGeometry, ScheduleKind
from accy.target import TargetProfile

f32 = accy.f32


def chain(n: int) -> accy.Program:
    return trace(lambda a, b: accy.maximum((a + b) * b - b, b), f32[n], f32[n], name="chain")


# kernel IR and rendering -------------------------------------------------------------------


def test_vector_nodes_render_golden() -> None:
    load = VectorLoad("in0", Var("gid"), 4)
    assert expr(load) == "vload4(gid, in0)"
    assert expr(Lane(Var("x1"), 3)) == "x1.s3"
    assert expr(Lane(Var("x1"), 15)) == "x1.sf"
    assert expr(Lane(load, 0)) == "(vload4(gid, in0)).s0"
    body = (Let("x1", DType.f32, load, lanes=4),
            Let("b", DType.bool, VectorLoad("in1", Var("gid"), 8), lanes=8),
            VectorStore("out0", Var("gid"), DType.f32,
                        tuple(Lane(Var("x1"), i) for i in range(4))))
    assert stmts(body, "") == [
        "const float4 x1 = vload4(gid, in0);",
        "const uchar8 b = vload8(gid, in1);",
        "vstore4((float4)(x1.s0, x1.s1, x1.s2, x1.s3), gid, out0);",
    ]


def test_vector_widths_outside_opencl_are_errors() -> None:
    with pytest.raises(ValueError, match="no vectors of 5 lanes"):
        expr(VectorLoad("in0", idx(0), 5))
    with pytest.raises(ValueError, match="no vectors of 6 lanes"):
        stmts((VectorStore("out0", idx(0), DType.f32, (Lit(1.0, DType.f32),) * 6),), "")


def test_free_vars_of_vector_nodes() -> None:
    assert free_vars(Lane(VectorLoad("in0", Var("i"), 4), 1)) == {"i"}
    assert free_vars(VectorLoad("in0", idx(3), 2)) == frozenset()


def test_a_whole_vector_kernel_renders() -> None:
    k = Kernel("copy4", 0, ScheduleKind.flat, (8,),
               (KernelArg("in0", DType.f32, False, 0), KernelArg("out0", DType.f32, True, 1)),
               (Let("gid", INDEX, Lit(0, INDEX)),
                Let("x", DType.f32, VectorLoad("in0", Var("gid"), 4), lanes=4),
                VectorStore("out0", Var("gid"), DType.f32,
                            tuple(Lane(Var("x"), i) for i in range(4)))),
               LaunchGeometry((2,), (2,)))
    text = render(k)  # arguments' bases are 16-byte aligned: vector pointers, not vloadN
    assert "const float4 x = ((__global const float4*)in0)[gid];" in text
    assert "((__global float4*)out0)[gid] = (float4)(x.s0, x.s1, x.s2, x.s3);" in text


def test_vector_pointers_only_where_the_base_is_aligned_to_the_vector() -> None:
    """vloadN / vstoreN promise only the element's alignment (NVIDIA's compiler splits them);
    arguments (16 bytes) and local arrays declared aligned are read through vector pointers,
    wider vectors and unaligned local arrays keep the functions; f16 buffers are read as
    vectors of words (2-8 halves; 16 keep vload_half16)."""
    gid = Var("gid")
    k = Kernel("k", 0, ScheduleKind.flat, (8,),
               (KernelArg("in0", DType.f32, False, 0), KernelArg("in1", DType.f16, False, 1),
                KernelArg("out0", DType.f32, True, 2)),
               (LocalArray("t", DType.f32, 64, 16), LocalArray("u", DType.f32, 64),
                Let("a", DType.f32, VectorLoad("in0", gid, 8), lanes=8),
                Let("b", DType.f32, VectorLoad("t", gid, 4), lanes=4),
                Let("c", DType.f32, VectorLoad("u", gid, 4), lanes=4),
                Let("d", DType.f32, VectorLoad("in1", gid, 4), lanes=4),
                Let("e", DType.f32, VectorLoad("t", gid, 8), lanes=8),
                VectorStore("out0", gid, DType.f32, tuple(Lane(Var("b"), i) for i in range(4))),
                VectorStore("t", gid, DType.f32, tuple(Lane(Var("c"), i) for i in range(2)))),
               LaunchGeometry((2,), (2,)))
    text = render(k)
    for line in ("const float8 a = vload8(gid, in0);",
                 "const float4 b = ((__local float4*)t)[gid];",
                 "const float4 c = vload4(gid, u);",
                 "const float4 d = accy_unpack_half4(((__global const uint2*)in1)[gid]);",
                 "const float8 e = vload8(gid, t);",
                 "((__global float4*)out0)[gid] = (float4)(b.s0, b.s1, b.s2, b.s3);",
                 "((__local float2*)t)[gid] = (float2)(c.s0, c.s1);"):
        assert line in text, line


# which groups --------------------------------------------------------------------------------


def test_vector_width_is_16_bytes_of_the_widest_dtype() -> None:
    t = TargetProfile()
    assert flat.vector_width([DType.f32], t) == 4
    assert flat.vector_width([DType.f64, DType.f32], t) == 2
    assert flat.vector_width([DType.bool], t) == 16
    assert flat.vector_width([DType.f16], t) == 8


def test_chain_becomes_one_vector_kernel(used) -> None:
    job = accy.prepare(chain(4096))
    assert used(job) == {"vector-flat": 1}
    (k,) = job.kernels
    assert k.geometry == LaunchGeometry((1024,), (256,))  # 4096 / 4 work-items
    src = job.kernel_source(0)
    assert src.count("float4*)in") == 2 and "((__global float4*)out0)[gid] = (float4)(" in src
    assert "if" not in src  # no tail, no padding
    assert accy.prepare(chain(4096)).kernel_source(0) == src  # deterministic


def test_disable_switches_it_off(used, pipe) -> None:
    job = accy.prepare(chain(4096), pipe("disable=vector-flat"))
    assert used(job) == {"loop-nest": 1}
    assert "vload" not in job.kernel_source(0)


@pytest.mark.parametrize("why, fn, types, other", [
    ("small", lambda a: a * 2.0, (f32[512],), "loop-nest"),
    ("transpose", lambda a: a.T + 1.0, (f32[64, 32],), "loop-nest"),
    ("inner broadcast", lambda a, c: a + c, (f32[64, 32], f32[64, 1]), "row-movement"),
    ("size not a multiple of W", lambda a, c: a + c, (f32[512, 3], f32[3]), "loop-nest"),
    ("slice", lambda a: a[:, 1:] * 2.0, (f32[64, 33],), "row-movement"),
])
def test_declines_what_vectors_cannot_read(used, why, fn, types, other) -> None:
    job = accy.prepare(trace(fn, *types, name="f"))
    assert used(job) == {other: 1}, why


def test_declines_on_cpu_targets(used) -> None:
    cpu = TargetProfile(device_type="cpu")
    assert used(accy.prepare(chain(4096), target=cpu)) == {"loop-nest": 1}


# results -------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1024, 1025, 1031, 4099, 1 << 16])
def test_chain_with_tails(check, rng, n) -> None:
    a, b = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    job = check(chain(n), [a, b], generator="vector-flat", rtol=0, atol=0)
    src = job.kernel_source(0)
    assert ("} else {" in src) == bool(n % 4)


def test_nan_propagates_through_max(check, rng) -> None:
    a, b = (rng.standard_normal(2048).astype(np.float32) for _ in range(2))
    a[::7], b[::11] = np.nan, np.nan
    check(chain(2048), [a, b], generator="vector-flat", rtol=0, atol=0)


def test_broadcast_rows_scalars_and_constants(check, rng) -> None:
    b = Builder()
    f = b.begin_function("f", [b.tensor(DType.f32, (33, 64)), b.tensor(DType.f32, (64,)),
                               b.tensor(DType.f32, ()), b.tensor(DType.f32, (1, 1))])
    x, row, s, one = (f.param(i) for i in range(4))
    c = f.constant(np.linspace(-1, 1, 64, dtype=np.float32))
    f.return_(((x * row + s) * c - one).exp() + 0.5)
    f.finish()
    prog = b.finish()
    args = [rng.standard_normal(t.type.shape).astype(np.float32)
            for t in prog.functions[0].params]
    job = check(prog, args, generator="vector-flat")
    src = job.kernel_source(0)
    assert "(gid % 16L)" in src  # the row and the constant: 64 / 4 vectors per row
    assert "[0L]" in src  # the scalars


def test_reshape_and_explicit_broadcast(check, rng) -> None:
    def fn(x, r):
        return x.reshape(32, 64) * r.broadcast_to(32, 64)

    x, r = (rng.standard_normal(n).astype(np.float32) for n in (2048, 64))
    check(trace(fn, f32[2048], f32[64], name="f"), [x, r], generator="vector-flat")


def test_compare_select_cast_and_bool_outputs(check, rng) -> None:
    def fn(a, b):
        mask = a > b
        return select(mask, a, b * 2.0), mask, (a * 3.0).astype(DType.i32)

    a, b = (rng.standard_normal(1030).astype(np.float32) for _ in range(2))
    prog = trace(fn, f32[1030], f32[1030], name="f")
    job = check(prog, [a, b], generator="vector-flat", rtol=0, atol=0)
    assert all("4*)out0)[gid] = " in job.kernel_source(i) for i in range(job.kernel_count)
               if job.kernels[i].schedule_kind is ScheduleKind.flat)


def test_integers(check, rng) -> None:
    a = rng.integers(-100, 100, 3000).astype(np.int32)
    b = rng.integers(-100, 100, 3000).astype(np.int32)
    prog = trace(lambda a, b: accy.maximum(a * b - a, b), accy.i32[3000], accy.i32[3000],
                 name="f")
    check(prog, [a, b], generator="vector-flat")


def test_f64_uses_two_lanes(check, device, rng) -> None:
    target = TargetProfile.from_device(device.info)
    if DType.f64 not in target.dtypes:
        pytest.skip("device without f64")
    target = dataclasses.replace(target, device_type="gpu")
    prog = trace(lambda a: a * a + 1.0, accy.f64[2049], name="f")
    job = check(prog, [rng.standard_normal(2049)], generator="vector-flat", target=target)
    assert "double2*)in0)[" in job.kernel_source(0)


def test_multi_output_group(check, rng, pipe) -> None:
    def fn(a, b):
        t = a + b
        return t, t * b

    prog = trace(fn, f32[4096], f32[4096], name="f")
    a, b = (rng.standard_normal(4096).astype(np.float32) for _ in range(2))
    job = check(prog, [a, b], generator="vector-flat",
                pipeline=pipe().replace("accy-dispatch",
                                        "fusion-planning{policy=multi-output},schedule-planning"))
    assert job.kernel_count == 1 and job.kernel_source(0).count("float4*)out") == 2


def test_in_place_outputs_read_before_they_write(check, rng) -> None:
    def fn(a, b):
        t = (a + b).exp()  # an intermediate its consumer may overwrite
        return t * 2.0 - b

    a, b = (rng.standard_normal(4096).astype(np.float32) for _ in range(2))
    check(trace(fn, f32[4096], f32[4096], name="f"), [a, b], generator="vector-flat")


def test_job_generators_count_the_work_items_each_generator_built() -> None:
    program = trace(lambda a, b: ((a + b) * 2.0, (a * b).sum()), accy.f32[64], accy.f32[64],
                    name="f")
    assert accy.prepare(program, until="dispatch").generators() == {}
    job = accy.prepare(program)
    assert sum(job.generators().values()) == len(job.product.schedule.items) == 2
    loop_only = accy.prepare(program, "accy-contract,accy-tensor,accy-dispatch,accy-memory,"
                             "kernel-outlining-planning,kernelization{disable=vector-flat,"
                             "tree-reduction},accy-target")
    assert loop_only.generators() == {"loop-nest": 2}
