"""Kernelization gives a work item the kernels built for an earlier one of the same local
structure (``kernelization{reuse=true}``, the default): the kernels must be exactly those a
fresh build gives (entry names, work items, slots, bodies), and the job must compute the same."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import HealthCheck, given, settings

import accy
from accy.builder import einsum, trace
from accy.differential import check_end_to_end
from accy.kernels import ir
from accy.kernels.ir import per_body
from accy.passes.kernel.kernelization import local_key
from accy.passes.spec import parse_pipeline
from accy.testing import programs

FRESH = parse_pipeline("accy-default").replacing("kernelization{reuse=false}")
F32 = accy.f32


def layers(count: int, rows: int = 4, width: int = 8) -> accy.Program:
    """``count`` layers with weights of their own: linear, GELU, layernorm, and a sum over
    every element (a two-kernel reduction) added back."""

    def net(x, *weights):
        for w, b in zip(weights[::2], weights[1::2], strict=True):
            h = (einsum("ri,oi->ro", x, w) + b).gelu()
            mu = h.mean(axes=-1, keepdims=True)
            x = (h - mu) / ((h - mu) * (h - mu) + 1e-5).mean(axes=-1, keepdims=True).sqrt()
            x = x + x.sum() * 1e-3
        return x

    return trace(net, F32[rows, width], *(t for _ in range(count)
                                          for t in (F32[width, width], F32[width])))


def reused(job: accy.PreparedJob) -> int:
    kernel = next(r for r in job.records if r.stage.value == "kernel")
    stats = dict(next(p for p in kernel.passes if p.spec.startswith("kernelization")).stats)
    return stats["work items reusing an earlier one's kernels"]


def assert_same_kernels(program: accy.Program) -> tuple[accy.PreparedJob, accy.PreparedJob]:
    again, fresh = accy.prepare(program), accy.prepare(program, FRESH)
    assert again.product.kernels == fresh.product.kernels
    assert [k.fingerprint() for k in again.product.kernels] == [
        k.fingerprint() for k in fresh.product.kernels]
    assert [again.kernel_source(i) for i in range(again.kernel_count)] == [
        fresh.kernel_source(i) for i in range(fresh.kernel_count)]
    return again, fresh


def test_repeated_layers_reuse_kernels_and_equal_a_fresh_build() -> None:
    job, fresh = assert_same_kernels(layers(4))
    assert reused(job) > 0 and reused(fresh) == 0
    assert job.generators() == fresh.generators()
    # the layers' kernels are the first layer's, renamed and given other slots, sharing bodies
    bodies = {id(k.body) for k in job.product.kernels}
    assert len(bodies) < job.kernel_count
    assert len({k.entry for k in job.product.kernels}) == job.kernel_count


def test_reused_kernels_compute_the_program(rng) -> None:
    program = layers(3)
    args = [rng.standard_normal(p.type.shape).astype(np.float32)
            for p in program.functions[0].params]
    assert check_end_to_end(program, args).status == "ok"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(max_nodes=10, functions=(1, 2)))
def test_random_programs_get_the_kernels_of_a_fresh_build(program) -> None:
    assert_same_kernels(program)


def test_the_key_leaves_out_names_and_places_only() -> None:
    """Two layers differ only in their weights' parameters: equal keys; a layer of another
    width does not share the key."""
    job = accy.prepare(layers(2), until="kernel")
    fusion, outline = job.product.fusion, job.product.outline
    items = job.product.schedule.items
    keys = [local_key(fusion.groups[i.group], o, i.kind)
            for i, o in zip(items, outline.outlines, strict=True)]
    assert len(set(keys)) < len(keys)
    other = accy.prepare(layers(1, width=16), until="kernel").product
    others = {local_key(other.fusion.groups[i.group], o, i.kind)
              for i, o in zip(other.schedule.items, other.outline.outlines, strict=True)}
    assert not others & set(keys)


def test_per_body_keeps_values_by_body_object(monkeypatch) -> None:
    monkeypatch.setattr(ir, "_PER_BODY", {})
    monkeypatch.setattr(ir, "PER_BODY_KEPT", 2)
    calls: list[int] = []

    def compute(n: int):
        return lambda: calls.append(n) or n

    a, b, c = (ir.Barrier(),), (ir.Barrier(),), (ir.Return(),)
    assert per_body("x", a, compute(1)) == 1 and per_body("x", a, compute(9)) == 1
    assert per_body("x", b, compute(2)) == 2  # equal but another object: its own value
    assert per_body("y", a, compute(3)) == 3  # another kind of value
    assert per_body("x", c, compute(4)) == 4
    assert per_body("x", a, compute(5)) == 5  # dropped (oldest first), computed again
    assert calls == [1, 2, 3, 4, 5]
    assert len(ir._PER_BODY) == 2


def test_a_kernel_fingerprint_follows_its_header() -> None:
    k = next(iter(accy.prepare(layers(1)).product.kernels))
    flip = {"constant": "global", "global": "constant"}
    moved = dataclasses.replace(k, args=tuple(
        a if a.is_output else dataclasses.replace(a, space=flip[a.space]) for a in k.args))
    assert moved.body is k.body and moved.body_fingerprint() != k.body_fingerprint()
    same = dataclasses.replace(k, entry="other", work_item=99)
    assert same.body_fingerprint() == k.body_fingerprint()
    assert same.fingerprint() != k.fingerprint()
