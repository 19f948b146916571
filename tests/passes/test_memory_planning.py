"""The memory stage: in-place bufferization, peak bytes, memory spaces, vector widths."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import accy
from accy.backends.opencl.render import render
from accy.builder import einsum
from accy.ir.interpret import interpret
from accy.passes.memory.layout_planning import vector_width
from accy.plans import SlotRole
from accy.target import TargetProfile

f32 = accy.f32


def pipeline(buffers: str = "", spaces: str = "", layout: str = "", rows: bool = True) -> str:
    """accy-default with options on the memory passes (``rows=False``: without row fusion, for
    tests about slots shared between the kernels of a reduction and its consumers)."""
    memory = (f"bufferization-planning{{{buffers}}},memory-space-planning{{{spaces}}},"
              f"layout-planning{{{layout}}}")
    dispatch = "accy-dispatch" if rows else "fusion-planning{row-fusion=false},schedule-planning"
    return f"accy-contract,accy-tensor,{dispatch},{memory},accy-kernel,accy-target".replace(
        "{}", "")


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def check_runs(program: accy.Program, job: accy.PreparedJob, device, *inputs) -> None:
    got = job.run(*inputs, device=device)
    want = interpret(program, list(inputs))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def slot(job: accy.PreparedJob, node) -> int:
    return job.product.buffers.slot_of(0, node).id


def position(job: accy.PreparedJob, node) -> int:
    """Schedule position of the work item that writes ``node``."""
    p = job.product
    for pos, item in enumerate(p.schedule.items):
        if any(out is node for out in p.fusion.groups[item.group].outputs):
            return pos
    raise KeyError(node)


# bufferization-planning: in place ---------------------------------------------------------


@accy.function
def squares(a: f32[64], b: f32[64]):
    """t0 = a+b, t(k+1) = t(k)*t(k): each t is read by two kernels, the square last."""
    t = a + b
    outs = []
    for _ in range(4):
        outs.append(t - 1.0)
        t = t * t
    return (*outs, t)


def intermediates(job: accy.PreparedJob) -> list:
    return [s for s in job.product.buffers.slots if s.role is SlotRole.intermediate]


def test_in_place_chain_uses_fewer_slots() -> None:
    in_place = accy.prepare(squares, until="memory")
    reuse_only = accy.prepare(squares, pipeline(buffers="in-place=false"), until="memory")
    neither = accy.prepare(squares, pipeline(buffers="in-place=false reuse=false"),
                           until="memory")
    (shared,) = intermediates(in_place)  # t0..t3 all in one slot, each written over the last
    assert len(shared.values) == 4
    assert len(intermediates(reuse_only)) == 2 and len(intermediates(neither)) == 4
    plans = [j.product.buffers for j in (in_place, reuse_only, neither)]
    assert [len(p) for p in plans] == [8, 9, 11]
    assert plans[0].in_place == 3 and plans[1].in_place == plans[2].in_place == 0
    assert [p.allocated_bytes for p in plans] == [8 * 256, 9 * 256, 11 * 256]
    # in place, the square's input and output are one slot: one buffer less live at a time
    assert plans[0].peak_bytes == 8 * 256 == plans[1].peak_bytes
    assert len({p.bytes_moved for p in plans}) == 1  # where, not how much
    stats = dict(in_place.record("memory").passes[0].stats)
    assert stats["in-place"] == 3 and stats["slots"] == 8
    assert stats["allocated-bytes"] == 8 * 256 and stats["peak-bytes"] == 8 * 256


def test_in_place_kernel_reads_and_writes_one_slot_without_restrict() -> None:
    job = accy.prepare(squares)
    aliased = [k for k in job.kernels if len({a.slot for a in k.args}) < len(k.args)]
    assert len(aliased) == 3
    for k in aliased:
        source = render(k)
        assert "restrict" not in source.splitlines()[1]
        (inp,) = [a for a in k.args if not a.is_output]
        (out,) = [a for a in k.args if a.is_output]
        assert inp.slot == out.slot
    others = [k for k in job.kernels if k not in aliased]
    assert all("restrict" in render(k) for k in others)


def test_in_place_chain_matches_numpy(device) -> None:
    a, b = rand(64, seed=1) * 0.5, rand(64, seed=2) * 0.5
    for options in ("", "in-place=false", "in-place=false reuse=false"):
        job = accy.prepare(squares, pipeline(buffers=options))
        check_runs(squares, job, device, a, b)


@accy.function
def scaled(a: f32[8, 8], b: f32[8, 8]):
    x = a + b
    s = x.sum(axes=(1,), keepdims=True)
    y = x * s  # x in step (s is broadcast, but s is not the slot written over)
    return s * 2.0, y - 1.0, y * 3.0


def test_in_place_over_input_read_in_step_while_another_is_broadcast(device) -> None:
    job = accy.prepare(scaled, pipeline(rows=False))  # row fusion: one kernel, no such step
    fn = scaled.functions[0]
    y = fn.results[1].srcs[0]
    x = y.srcs[0]
    assert slot(job, y) == slot(job, x)
    check_runs(scaled, job, device, rand(8, 8, seed=3), rand(8, 8, seed=4))


@accy.function
def transposed(a: f32[8, 8], b: f32[8, 8]):
    x = a + b
    y = x.T + 1.0  # reads x[j, i] where it writes y[i, j]
    return x - 1.0, y - 1.0, y * 3.0


@accy.function
def read_later(a: f32[64], b: f32[64]):
    x = a + b
    y = x * 2.0  # x is read again after this kernel
    return y - 1.0, (y - x) * y


@accy.function
def recast(a: f32[64], b: f32[64]):
    x = a + b
    y = x.astype(accy.DType.i32)  # another type
    return x - 1.0, y - 1, y * 3


@accy.function
def from_params(a: f32[64], b: f32[64]):
    y = a * b  # reads parameters only
    return y - 1.0, y * 3.0


@accy.function
def broadcast_back(a: f32[8, 8], b: f32[8, 8]):
    x = a + b
    y = x[:, :1].broadcast_to(8, 8) + x  # column 0 of x is read by every element of a row
    return x - 1.0, y - 1.0, y * 3.0


@pytest.mark.parametrize("program", [transposed, read_later, recast, from_params,
                                     broadcast_back],
                         ids=["movement", "read-later", "other-type", "params", "broadcast"])
def test_in_place_is_refused_where_illegal(program: accy.Program, device) -> None:
    job = accy.prepare(program)
    plan = job.product.buffers
    assert plan.in_place == 0
    assert all(len(s.values) == 1 for s in plan.slots)  # nothing shares a slot
    for k in job.kernels:
        assert len({a.slot for a in k.args}) == len(k.args)
    inputs = [rand(*p.type.shape, seed=i) for i, p in enumerate(program.functions[0].params)]
    check_runs(program, job, device, *inputs)


def test_in_place_never_takes_a_result_or_multi_output_group() -> None:
    def two_outputs(a, b):
        x = a + b
        y = x * 2.0
        return x - 1.0, y, y * x  # multi-output: y is written with its consumer's kernel

    program = accy.builder.trace(two_outputs, f32[64], f32[64])
    text = pipeline().replace("accy-dispatch", "fusion-planning{policy=multi-output},"
                                               "schedule-planning")
    job = accy.prepare(program, text, until="memory")
    assert job.product.buffers.in_place == 0


# peak bytes ---------------------------------------------------------------------------------


def test_peak_counts_only_live_slots() -> None:
    @accy.function
    def relay(a: f32[256]):
        x = a * 2.0  # 1 KiB each
        y = x.sum()  # x read by two kernels, so it gets a slot
        z = x + y
        return z, y

    plan = accy.prepare(relay, pipeline(rows=False), until="memory").product.buffers
    kib = 1024
    assert plan.allocated_bytes == sum(s.nbytes for s in plan.slots) == 3 * kib + 4
    # a, x, z and y are all live at the last kernel (x read while z is written)
    assert plan.peak_bytes == 3 * kib + 4


def test_peak_drops_dead_intermediates() -> None:
    @accy.function
    def phases(a: f32[256]):
        x = a * 2.0
        s = x.sum() + x.max()  # x dies here
        w = (a + s) * 3.0
        return w.sum() + w.max()

    job = accy.prepare(phases, pipeline(buffers="reuse=false in-place=false", rows=False),
                       until="memory")
    plan = job.product.buffers
    assert plan.peak_bytes < plan.allocated_bytes


# memory-space-planning ----------------------------------------------------------------------


@accy.function
def affine(x: f32[32, 64], w: f32[64], s: f32[32, 1]):
    return (x * w + s) * np.full(64, 0.5, np.float32)


def spaces(job: accy.PreparedJob) -> dict[SlotRole, set[str]]:
    p = job.product
    out: dict[SlotRole, set[str]] = {}
    for sl in p.buffers.slots:
        out.setdefault(sl.role, set()).add(p.spaces.space_of(sl.id))
    return out


def test_read_only_slots_go_to_constant_memory() -> None:
    job = accy.prepare(affine)
    assert spaces(job) == {SlotRole.input: {"constant"}, SlotRole.constant: {"constant"},
                           SlotRole.output: {"global"}}
    (k,) = job.kernels
    assert [a.space for a in k.args] == ["constant"] * 4 + ["global"]
    head = render(k).splitlines()[1]
    assert head.count("__constant float* restrict") == 4
    assert "__global float* restrict out0" in head
    stats = dict(job.record("memory").passes[1].stats)
    assert stats == {"constant": 4, "global": 1}


def test_use_constant_false_keeps_global() -> None:
    job = accy.prepare(affine, pipeline(spaces="use-constant=false"))
    assert {s.space for s in job.product.spaces.spaces} == {"global"}
    assert "__constant" not in job.kernel_source(0)
    assert all(a.space == "global" for a in job.kernels[0].args)


def test_constant_memory_limits_per_kernel() -> None:
    # 8 KiB x, 256 B w, 128 B s, 256 B constant: with 1 KiB only the small three fit
    job = accy.prepare(affine, target=TargetProfile(constant_mem_bytes=1024))
    by_size = {sl.nbytes: job.product.spaces.space_of(sl.id)
               for sl in job.product.buffers.slots if sl.role is not SlotRole.output}
    assert by_size == {8192: "global", 256: "constant", 128: "constant"}
    # 300 B: the 128 B slot first, then one 256 B slot would overflow the kernel's budget
    job = accy.prepare(affine, target=TargetProfile(constant_mem_bytes=300))
    placed = [sl.nbytes for sl in job.product.buffers.slots
              if job.product.spaces.space_of(sl.id) == "constant"]
    assert placed == [128]
    # two arguments at most: the smallest two
    job = accy.prepare(affine, target=TargetProfile(max_constant_args=2))
    (k,) = job.kernels
    assert sum(a.space == "constant" for a in k.args) == 2
    reasons = {s.reason for s in job.product.spaces.spaces if s.space == "global"}
    assert any("no constant memory left" in r for r in reasons)


def test_constant_args_match_numpy(device) -> None:
    x, w, s = rand(32, 64, seed=5), rand(64, seed=6), rand(32, 1, seed=7)
    for text in (pipeline(), pipeline(spaces="use-constant=false")):
        job = accy.prepare(affine, text)
        check_runs(affine, job, device, x, w, s)
    job = accy.prepare(affine, device="pocl")  # the device's own constant limits
    assert job.target.constant_mem_bytes == device.info.max_constant_buffer_size
    assert "__constant" in job.kernel_source(0)
    check_runs(affine, job, device, x, w, s)


def test_spaces_are_in_the_fingerprint() -> None:
    on = accy.prepare(affine, until="memory")
    off = accy.prepare(affine, pipeline(spaces="use-constant=false"), until="memory")
    assert on.product.buffers == off.product.buffers
    assert on.product.fingerprint() != off.product.fingerprint()
    full_on, full_off = accy.prepare(on), accy.prepare(off)
    assert full_on.kernels[0].fingerprint() != full_off.kernels[0].fingerprint()


def test_target_profile_takes_constant_limits_from_device() -> None:
    from accy.backends.opencl.runtime import DeviceInfo

    info = DeviceInfo("P", "D", "V", "1", "OpenCL 3.0", 1024, 49152, 132, 1 << 30, (), False,
                      True, 1, max_constant_buffer_size=65536, max_constant_args=9)
    profile = TargetProfile.from_device(info)
    assert profile.constant_mem_bytes == 65536 and profile.max_constant_args == 9
    assert TargetProfile().constant_mem_bytes == 64 * 1024
    assert TargetProfile().max_constant_args == 8
    assert profile.fingerprint() != TargetProfile.from_device(
        DeviceInfo("P", "D", "V", "1", "OpenCL 3.0", 1024, 49152, 132, 1 << 30, (), False,
                   True, 1, max_constant_buffer_size=65536, max_constant_args=8)).fingerprint()


# layout-planning ----------------------------------------------------------------------------


@pytest.mark.parametrize(("shape", "itemsize", "alignment", "width"), [
    ((2, 3, 4), 4, 64, 4), ((8,), 4, 64, 8), ((4, 16), 4, 64, 16), ((16,), 8, 64, 8),
    ((7,), 4, 64, 1), ((16,), 4, 16, 4), ((), 4, 64, 1), ((0,), 4, 64, 1), ((6,), 1, 64, 2),
    ((32,), 2, 64, 16), ((32,), 8, 8, 1),
])
def test_vector_width(shape, itemsize, alignment, width) -> None:
    assert vector_width(shape, itemsize, alignment) == width


def test_layout_records_vector_widths() -> None:
    @accy.function
    def mixed(a: f32[4, 6], b: f32[6], c: accy.f64[3, 8]):
        return a + b, c * 2.0

    job = accy.prepare(mixed, pipeline(layout="alignment=16"), until="memory")
    lay = {x.slot: x for x in job.product.layout.layouts}
    by_slot = {s.id: s.values[0].type for s in job.product.buffers.slots}
    for sid, t in by_slot.items():
        assert lay[sid].strides == tuple(
            int(np.prod(t.shape[i + 1:])) for i in range(len(t.shape)))
        assert lay[sid].vector_width == vector_width(t.shape, t.dtype.itemsize, 16)
    widths = sorted(x.vector_width for x in lay.values())
    assert widths == [2, 2, 2, 2, 2]  # f32 rows of 6 -> 2; f64 rows of 8 at 16 B -> 2
    stats = dict(job.record("memory").passes[2].stats)
    assert stats == {"vector width 2": 5}


GPU = TargetProfile(device="gpu-like", device_type="gpu", compute_units=132,
                    max_work_group_size=1024, local_mem_bytes=48 * 1024)


@pytest.mark.parametrize(("spec", "target", "stats"), [
    ("ik,jk->ij", GPU, {"local tile rows padded by 4": 2}),  # both copied along K: padded
    ("ki,jk->ij", GPU, {"local tile rows padded by 4": 1}),  # only Y transposes
    ("ki,kj->ij", GPU, {}),  # both tiles copied along their rows
    ("ik,jk->ij", dataclasses.replace(GPU, device_type="cpu"), {}),  # no banks on CPUs
])
def test_layout_reports_bank_padding_of_local_tiles(spec, target, stats) -> None:
    @accy.function
    def mm(a: f32[256, 256], b: f32[256, 256]):
        return einsum(spec, a, b)

    job = accy.prepare(mm, target=target, until="memory")
    got = dict(job.record("memory").passes[2].stats)
    assert {k: v for k, v in got.items() if k.startswith("local")} == stats
