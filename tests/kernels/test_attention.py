"""fused-attention: Q Kᵀ, a scale or mask, a softmax over the keys and P V as one kernel with
an online softmax, against the interpreter on PoCL; fusion-planning{attention=off} gives
the kernels of before."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

import accy
from accy.builder import einsum, trace
from accy.experiments.suite import SUITE
from accy.kernels import attention, attention_plan
from accy.kernels.ir import VectorStore, walk_stmts
from accy.passes.spec import parse_pipeline
from accy.target import TargetProfile

f32 = accy.f32
GPU = TargetProfile(max_work_group_size=1024, compute_units=132)
CPU = TargetProfile(device_type="cpu", max_work_group_size=4096, compute_units=2,
                    native_vector_bytes=32)  # AVX2: 8 lanes, two queries per work-item
OFF = parse_pipeline("accy-default").replacing("fusion-planning{attention=off}").text()
ALWAYS = parse_pipeline("accy-default").replacing("fusion-planning{attention=always}").text()


@pytest.fixture
def check(check):
    """The kernels conftest's ``check`` under ``attention=always``: ``auto`` fuses only where
    the fused kernel pays (``test_auto_fuses_where_the_fused_kernel_pays``)."""

    def run(program, inputs, *, pipeline="accy-default", target=None, **kw):
        if pipeline == "accy-default":
            pipeline = ALWAYS
        return check(program, inputs, pipeline=pipeline, target=target, **kw)

    return run


def test_auto_fuses_where_the_fused_kernel_pays() -> None:
    """GPUs without tensor cores and CPUs keep the three kernels (on a CPU the product reads
    K transposed first); a CPU fuses where the scores (and the probabilities, each a buffer
    of its own) would not fit one buffer; ``always`` fuses."""
    prog = heads(1, 2, 33, 33, 16, 16)
    three = {"tiled-contraction": 2, "row-softmax": 1}
    assert accy.prepare(prog, target=GPU).generators() == three
    job = accy.prepare(prog, target=CPU)
    assert job.generators() == three
    assert [k.entry.endswith("_yt") for k in job.kernels] == [True, False, False, False]
    held = 2 * 33 * 33 * 4  # the scores (2 heads), f32: one buffer, as the probabilities
    for limit, want in ((held, three), (held - 1, {"fused-attention": 1})):
        small = dataclasses.replace(CPU, max_mem_alloc_size=limit)
        assert accy.prepare(prog, target=small).generators() == want
    for target in (GPU, CPU):
        assert accy.prepare(prog, ALWAYS, target=target).generators() == {"fused-attention": 1}


def heads(b: int, h: int, sq: int, sk: int, d: int, dv: int, *, scale: bool = True,
          mask: str = "none") -> accy.Program:
    """Batched multi-head attention in einsum spelling; ``mask``: none, additive (a [sq, sk]
    parameter added to the scores) or causal (a constant lower triangle through where)."""

    def scores(q, k):
        s = einsum("bhqd,bhkd->bhqk", q, k)
        return s * (1.0 / math.sqrt(d)) if scale else s

    def plain(q, k, v):
        return einsum("bhqk,bhkd->bhqd", accy.softmax(scores(q, k), -1), v)

    def additive(q, k, v, m):
        return einsum("bhqk,bhkd->bhqd", accy.softmax(scores(q, k) + m, -1), v)

    def causal(q, k, v):  # aligned at the bottom right when there are more keys
        tri = accy.constant(np.tril(np.ones((sq, sk), dtype=bool), max(0, sk - sq)))
        s = accy.where(tri, scores(q, k), -np.inf)
        return einsum("bhqk,bhkd->bhqd", accy.softmax(s, -1), v)

    types = [f32[b, h, sq, d], f32[b, h, sk, d], f32[b, h, sk, dv]]
    f = {"none": plain, "additive": additive, "causal": causal}[mask]
    return trace(f, *types, *([f32[sq, sk]] if mask == "additive" else []), name="attn")


def matmul_attention(b: int, s: int, d: int) -> accy.Program:
    """The matmul spelling: softmax(q @ kᵀ / sqrt(d)) @ v, then a bias and a reshape."""

    def f(q, k, v, bias):
        p = accy.softmax(accy.matmul(q, k.transpose((0, 2, 1))) / math.sqrt(d), -1)
        return (accy.matmul(p, v) + bias).reshape(b * s, d)

    return trace(f, f32[b, s, d], f32[b, s, d], f32[b, s, d], f32[d], name="mm_attn")


def inputs(prog: accy.Program, rng: np.random.Generator) -> list[np.ndarray]:
    out = []
    for p in prog.functions[0].params:
        shape = p.type.shape
        if len(shape) == 2 and prog.functions[0].name == "attn":  # the additive mask: a few -inf
            m = np.where(rng.random(shape) < 0.3, -np.inf, 0.0).astype(np.float32)
            m[0, :] = -np.inf  # the first query masked throughout: nan, as the reference
            out.append(m)
        else:
            out.append(rng.standard_normal(shape).astype(np.float32))
    return out


@pytest.mark.parametrize("shape", [
    (1, 1, 1, 1, 4, 4),  # one query, one key
    (1, 2, 5, 7, 8, 8),  # shorter than a tile
    (2, 3, 33, 70, 16, 12),  # partial query and key tiles, several heads, dv != d
    (1, 2, 9, 11, 6, 5),  # features read in pairs and one at a time
    (1, 2, 130, 97, 64, 64),  # several key tiles and a tail not a multiple of the step
    (1, 2, 70, 45, 128, 96),  # a wide head: the output rows in local memory on GPUs
])
@pytest.mark.parametrize("target", [None, GPU, "device"], ids=["generic", "gpu", "pocl"])
def test_matches_the_interpreter(check, device, rng, shape, target) -> None:
    if target == "device":
        target = TargetProfile.from_device(device.info)
    prog = heads(*shape)
    job = check(prog, inputs(prog, rng), generator="fused-attention", target=target,
                rtol=2e-5, atol=2e-6)
    assert job.generators() == {"fused-attention": 1}
    cpu = attention.plan(job.product.fusion.groups[0], job.target)[1].cpu
    assert job.kernel_count == (2 if cpu else 1)  # the CPU form: K transposed, attention
    if cpu:  # the transposing copy: a vector of Kt a work-item, many work-items a group
        kt = job.kernels[0]
        assert kt.geometry.local_size[0] > 1
        assert any(isinstance(s, VectorStore) for s in walk_stmts(kt.body)) == (cpu > 1)


@pytest.mark.parametrize("mask", ["additive", "causal"])
@pytest.mark.parametrize("scale", [True, False])
@pytest.mark.parametrize("target", [None, CPU], ids=["generic", "cpu"])
def test_masks(check, rng, mask, scale, target) -> None:
    prog = heads(2, 2, 19, 21, 8, 8, scale=scale, mask=mask)
    job = check(prog, inputs(prog, rng), generator="fused-attention", target=target,
                rtol=2e-5, atol=2e-6)
    assert job.generators() == {"fused-attention": 1}


@pytest.mark.parametrize("sq, sk", [(130, 130), (70, 101), (33, 1)])
@pytest.mark.parametrize("target", [None, CPU], ids=["generic", "cpu"])
def test_causal_skips_masked_key_tiles(check, rng, sq, sk, target) -> None:
    """A constant causal mask bounds the keys each query block reads (the key tiles after
    it are skipped), with the same results."""
    prog = heads(1, 2, sq, sk, 16, 16, mask="causal")
    job = check(prog, inputs(prog, rng), generator="fused-attention", target=target,
                rtol=2e-5, atol=2e-6)
    a, tiles = attention.plan(job.product.fusion.groups[0], job.target)
    block = tiles.rows if tiles.cpu else tiles.bq
    want = None if sk == 1 else max(0, sk - sq)
    assert attention_plan.key_stop(a, block) == want
    assert ("kstop" in job.kernel_source(job.kernel_count - 1)) == (want is not None)
    # key <= query + offset (a mask allowing every key is gone before kernelization)
    assert attention_plan.triangle(a) == (None if sk == 1 else max(0, sk - sq))


def _mask_attention(mask: np.ndarray, b: int = 2) -> attention_plan.Attention:
    """The attention analysis of causal-style attention through ``where(mask, s, -inf)``."""
    sq, sk = mask.shape[-2:]

    def f(q, k, v):
        s = accy.where(accy.constant(mask), einsum("bhqd,bhkd->bhqk", q, k) * 0.25, -np.inf)
        return einsum("bhqk,bhkd->bhqd", accy.softmax(s, -1), v)

    prog = trace(f, f32[b, 1, sq, 8], f32[b, 1, sk, 8], f32[b, 1, sk, 8], name="attn")
    job = accy.prepare(prog, ALWAYS, target=GPU)
    return attention.plan(job.product.fusion.groups[0], job.target)[0]


def test_triangle_only_for_the_same_lower_triangle_everywhere() -> None:
    """The causal mask a kernel may compare by indices: ``np.tri`` at an offset from -1 up,
    the same at every batch index; not a mask with a hole, one that differs along the batch,
    nor a diagonal further down."""
    for offset in (-1, 0, 3, 10):
        assert attention_plan.triangle(_mask_attention(np.tri(9, 12, offset, dtype=bool))) \
            == offset
    holed = np.tri(9, 12, 0, dtype=bool)
    holed[5, 2] = False
    varies = np.stack([np.tri(9, 12, 0, dtype=bool), np.tri(9, 12, 1, dtype=bool)])[:, None]
    for mask in (holed, varies, np.tri(9, 12, -2, dtype=bool)):
        assert attention_plan.triangle(_mask_attention(mask)) is None


@pytest.mark.parametrize("target", [None, CPU], ids=["generic", "cpu"])
def test_matmul_spelling_with_epilogue(check, rng, target) -> None:
    prog = matmul_attention(3, 37, 16)
    job = check(prog, inputs(prog, rng), generator="fused-attention", target=target,
                rtol=2e-5, atol=2e-6)
    assert job.generators() == {"fused-attention": 1}


def test_suite_attention(check) -> None:
    bench = SUITE["attention"]
    prog = bench.program("ci")
    job = check(prog, bench.inputs("ci", seed=0), generator="fused-attention",
                rtol=2e-5, atol=2e-5)
    off = accy.prepare(prog, OFF)
    assert off.generators() == {"tiled-contraction": 6, "row-softmax": 1}
    assert job.generators() == {"tiled-contraction": 4, "fused-attention": 1}


def test_ablation_gives_the_kernels_of_before(check, rng) -> None:
    prog = heads(2, 2, 33, 33, 16, 16, mask="additive")
    data = inputs(prog, rng)
    on = check(prog, data, generator="fused-attention", rtol=2e-5, atol=2e-6)
    off = check(prog, data, pipeline=OFF, rtol=2e-5, atol=2e-6)
    assert on.kernel_count == 1
    assert off.generators() == {"tiled-contraction": 2, "row-softmax": 1}
    (fusion,) = [p for p in on.record("dispatch").passes if p.spec.startswith("fusion-planning")]
    assert dict(fusion.stats)["attention groups"] == 1


def test_disabled_generator_falls_back_to_the_loop_nest(check, rng) -> None:
    prog = heads(1, 2, 6, 5, 4, 4)
    pipe = parse_pipeline(ALWAYS).replacing("kernelization{disable=fused-attention}").text()
    job = check(prog, inputs(prog, rng), pipeline=pipe, rtol=2e-5, atol=2e-6)
    assert job.generators() == {"loop-nest": 1}


def test_not_merged() -> None:
    """What is not an attention keeps its kernels: a softmax over the queries, a softmax
    also returned, scores read besides the softmax, f64."""

    def over_queries(q, k, v):
        return einsum("hqk,hkd->hqd", accy.softmax(einsum("hqd,hkd->hqk", q, k), 1), v)

    def returned(q, k, v):
        p = accy.softmax(einsum("hqd,hkd->hqk", q, k), -1)
        return einsum("hqk,hkd->hqd", p, v), p

    def scores_reused(q, k, v):
        s = einsum("hqd,hkd->hqk", q, k)
        return einsum("hqk,hkd->hqd", accy.softmax(s, -1), v) + s.sum(axes=-1, keepdims=True)

    for f in (over_queries, returned, scores_reused):
        job = accy.prepare(trace(f, f32[2, 8, 4], f32[2, 8, 4], f32[2, 8, 4]), ALWAYS)
        assert "fused-attention" not in job.generators(), f.__name__
    def plain(q, k, v):
        return einsum("hqk,hkd->hqd", accy.softmax(einsum("hqd,hkd->hqk", q, k), -1), v)

    assert "fused-attention" in accy.prepare(trace(plain, *[f32[2, 8, 4]] * 3),
                                             ALWAYS).generators()
    f64 = accy.f64[2, 8, 4]
    assert "fused-attention" not in accy.prepare(trace(plain, f64, f64, f64),
                                                 ALWAYS).generators()


def test_tiles() -> None:
    a = attention_plan.analyse(*_group(heads(2, 4, 512, 512, 64, 64)))
    assert not isinstance(a, str)
    assert (a.nq, a.nk, a.d, a.dv, a.batch) == (512, 512, 64, 64, (2, 4))
    assert attention.choose_tiles(a, GPU) == attention.Tiles(64, 32, 8, True)
    assert attention.choose_tiles(a, TargetProfile(local_mem_bytes=16 * 1024)).bk == 32
    small = TargetProfile(local_mem_bytes=12 * 1024)
    assert attention.choose_tiles(a, small).bk == 16  # K and V rows of 16 keys: 8 KiB
    assert attention.choose_tiles(a, CPU) == attention.Tiles(1, 1, 1, False, False, 8, 8, 2)
    wide = attention_plan.analyse(*_group(heads(1, 2, 512, 512, 128, 128)))
    assert not isinstance(wide, str)
    nvidia = TargetProfile(max_work_group_size=1024, local_mem_bytes=48 * 1024)
    # the output rows (padded to 132) and K, V tiles of 8 keys: 41 KiB of the 48
    assert attention.choose_tiles(wide, nvidia) == attention.Tiles(64, 8, 8, True, True)
    assert attention.choose_tiles(wide, GPU) == attention.Tiles(32, 8, 8, True, True)  # 32 KiB
    avx512 = TargetProfile(device_type="cpu", native_vector_bytes=64)
    assert attention.choose_tiles(a, avx512) == attention.Tiles(1, 1, 1, False, False, 16, 16,
                                                                4)
    short = attention_plan.analyse(*_group(heads(1, 1, 5, 3, 8, 8)))
    assert not isinstance(short, str)
    assert attention.choose_tiles(short, GPU) == attention.Tiles(8, 4, 8, True)
    wide = accy.prepare(heads(1, 1, 4, 4, 300, 300)).product.program.functions[0]
    assert "over" in attention_plan.analyse([n for n in wide.nodes() if n.srcs], wide.results)


def _group(prog: accy.Program) -> tuple:
    """(nodes, outputs) of the merged attention group."""
    groups = accy.prepare(prog, ALWAYS).product.fusion.groups
    (g,) = [g for g in groups if any(n.op.value == "softmax" for n in g.nodes)]
    return g.nodes, g.outputs


@pytest.mark.parametrize("passes, fused", [
    ("fusion-planning{policy=multi-output attention=always}", True),
    ("fusion-planning{max-ops=3 attention=always}", False),  # the merged group would have five ops
])
def test_fusion_options(check, passes, fused) -> None:
    bench = SUITE["attention"]
    pipeline = parse_pipeline("accy-default").replacing(passes).text()
    job = check(bench.program("ci"), bench.inputs("ci", seed=0), pipeline=pipeline,
                rtol=2e-5, atol=2e-5)
    assert ("fused-attention" in job.generators()) == fused, job.generators()


SIZES = {"b": 2, "h": 3, "q": 7, "k": 10, "d": 8, "e": 4}


@pytest.mark.parametrize("scores, values", [
    ("bhqd,bhdk->bhqk", "bhqk,bhke->bhqe"),  # K stored features first
    ("qhd,khd->hkq", "hkq,khe->qhe"),  # the keys before the queries: softmax along axis 1
    ("dqb,kbd->bqk", "bqk,bek->qbe"),  # V's features not contiguous (no CPU form)
    ("qd,kd->qk", "qk,ke->qe"),  # no batch letter
])
@pytest.mark.parametrize("target", [None, CPU], ids=["generic", "cpu"])
def test_layouts(check, rng, scores, values, target) -> None:
    (tq, tk), out = scores.split("->")[0].split(","), scores.split("->")[1]
    tv = values.split("->")[0].split(",")[1]

    def f(q, k, v):
        return einsum(values, accy.softmax(einsum(scores, q, k) * 0.5, out.index("k")), v)

    types = [f32[tuple(SIZES[c] for c in t)] for t in (tq, tk, tv)]
    prog = trace(f, *types)
    data = [rng.standard_normal(t.shape).astype(np.float32) for t in types]
    job = check(prog, data, target=target, rtol=2e-5, atol=2e-6)
    assert "fused-attention" in job.generators()  # (V's features strided: no CPU form)
    cpu = attention.plan(job.product.fusion.groups[-1], job.target)[1].cpu
    assert bool(cpu) == (target is CPU and tv.index("e") == len(tv) - 1)


@pytest.mark.parametrize("mask", ["none", "additive", "causal"])
def test_end_to_end_check(device, rng, mask) -> None:
    """accy.differential.check_end_to_end (the device's own profile, error bounds against the
    interpreter) with attention on and off."""
    from accy.differential import check_end_to_end

    prog = heads(2, 3, 45, 45, 16, 16, mask=mask)
    data = inputs(prog, rng)
    for pipeline in ("accy-default", OFF):
        result = check_end_to_end(prog, data, pipeline=pipeline)
        assert result.ok and result.compared > 0, (pipeline, result)
