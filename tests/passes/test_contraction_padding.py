"""contraction-padding: f32 products whose summed rows are not whole 16-byte vectors get the
summed axis padded with zeros in both operands on TF32 tensor-core targets, where the product
does enough work per operand element copied; the result is unchanged."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import accy
from accy.builder import einsum, trace
from accy.ir.ops import Op
from accy.ir.program import Stage
from accy.ir.types import DType, TensorType
from accy.target import CP_ASYNC, F16_MMA, TF32_MMA, TargetProfile
from accy.testing import assert_close

TENSOR_CORES = TargetProfile(device="tf32 gpu", device_type="gpu",
                             tensor_cores=(TF32_MMA, CP_ASYNC))


def product(m: int, n: int, k: int, batch: int = 0, b_along_k: bool = False,
            dtype: DType = DType.f32) -> accy.Program:
    lead = (batch,) if batch else ()
    spec = ("bmk,bnk->bmn" if b_along_k else "bmk,bkn->bmn") if batch else (
        "mk,nk->mn" if b_along_k else "mk,kn->mn")
    types = [TensorType((*lead, m, k), dtype),
             TensorType((*lead, *((n, k) if b_along_k else (k, n))), dtype)]
    return trace(lambda a, b: einsum(spec, a, b), *types, name="product")


def tensor_stage(prog: accy.Program, target: TargetProfile, spec: str = "accy-tensor"):
    job = accy.prepare(prog, spec, target=target, until=Stage.tensor)
    (record,) = [p for p in job.record("tensor").passes
                 if p.spec.startswith("contraction-padding")]
    return job.products[Stage.tensor].program, dict(record.stats)


@pytest.mark.parametrize("m, n, k, batch, b_along_k", [
    (1100, 1100, 101, 0, False), (1100, 1300, 95, 2, False), (1200, 1100, 313, 0, True)])
def test_summed_rows_padded_to_16_bytes_with_the_result_unchanged(m, n, k, batch, b_along_k):
    prog = product(m, n, k, batch, b_along_k)
    after, stats = tensor_stage(prog, TENSOR_CORES)
    assert stats == {"padded": 1}
    (mm,) = [x for x in after.nodes() if x.op is Op.EINSUM]
    assert [s.type.shape[-1 if s is mm.srcs[0] or b_along_k else -2] for s in mm.srcs] == \
        [-(-k // 4) * 4] * 2
    assert mm.type.shape == prog.functions[0].results[0].type.shape  # nothing to slice
    rng = np.random.default_rng(k)
    inputs = [rng.standard_normal(p.type.shape).astype(np.float32)
              for p in prog.functions[0].params]
    assert_close(accy.interpret(after, inputs), accy.interpret(prog, inputs), prog, inputs)


@pytest.mark.parametrize("target, prog, why", [
    (TENSOR_CORES, product(1100, 1100, 104), "rows already whole vectors"),
    (TENSOR_CORES, product(30, 2500, 7629), "skinny: 2MN/(M+N) = 59, bound by its reads"),
    (TENSOR_CORES, product(226, 274, 34045), "long K over small M and N: 248 flops/element"),
    (TENSOR_CORES, product(300, 300, 101), "300 flops an element copied, under 1024"),
    (TargetProfile(device="cpu"), product(1100, 1100, 101), "no tensor cores"),
    (TENSOR_CORES, product(40, 3000, 101), "M below the tensor cores' minimum"),
])
def test_left_alone(target, prog, why):
    after, stats = tensor_stage(prog, target)
    assert stats == {"padded": 0}, why
    assert not any(x.op is Op.CONCAT for x in after.nodes())


def test_a_batch_letter_last_is_never_padded():
    """A's last letter kept in the output (a batch letter, here after a summed one) is not
    the summed rows: padding it would grow the result."""
    types = [TensorType((1100, 64, 5), DType.f32), TensorType((1000, 64, 5), DType.f32)]
    prog = trace(lambda a, b: einsum("mkb,nkb->bmn", a, b), *types, name="batch_last")
    after, stats = tensor_stage(prog, TENSOR_CORES, "contraction-padding{intensity=16}")
    assert stats == {"padded": 0} and after.nodes() == prog.nodes()


@pytest.mark.parametrize("m, n, k, padded", [
    (434, 446, 67471, True),  # 2MN/(M+N) = 440 over a long K: H100 0.71x -> 0.84x
    (700, 600, 20001, True),  # 646: 0.81x -> 1.08x (wgmma-3xtf32, K split)
    (1000, 1030, 521, False),  # 1015 over a short K: padded it lost 0.60x -> 0.55x
    (500, 700, 1203, False),  # 583: 0.63x -> 0.55x
    (316, 250, 97767, False),  # 279: 0.76x -> 0.64x at 128
])
def test_a_long_k_pads_from_a_lower_intensity(m, n, k, padded):
    _, stats = tensor_stage(product(m, n, k), TENSOR_CORES)
    assert stats == {"padded": int(padded)}
    _, stats = tensor_stage(product(m, n, k), TENSOR_CORES,
                            "einsum-lowering,contraction-padding{long-k=0 large-flops=0}")
    assert stats == {"padded": 0}


@pytest.mark.parametrize("m, n, k, padded", [
    (1298, 445, 8643, True),  # 663 flops an element, 10.0 GFLOP: H100 1.39x padded
    (3404, 305, 5690, True),  # 560, 11.8 GFLOP: 1.59x
    (759, 883, 3353, False),  # 816 but 4.5 GFLOP, under 2^33
    (168, 785, 21649, False),  # 277 over a long K and 5.7 GFLOP: under long-intensity
])
def test_a_large_product_pads_from_the_lower_intensity(m, n, k, padded):
    """From ``large-flops`` (2MNK >= 2^33) as over a long K: ``long-intensity``;
    ``large-flops=0`` turns that off (the padded ones' K is under ``long-k``)."""
    _, stats = tensor_stage(product(m, n, k), TENSOR_CORES)
    assert stats == {"padded": int(padded)}
    _, stats = tensor_stage(product(m, n, k), TENSOR_CORES,
                            "einsum-lowering,contraction-padding{large-flops=0}")
    assert stats == {"padded": 0}


def test_large_flops_count_every_batch_entry():
    """Two entries of 759x883x3353 (4.5 GFLOP each, 9.0 in all) are over ``large-flops`` as
    one entry of 9 GFLOP would be (H100, "Forty-third session": 60 batches of 0.2-8 GFLOP an
    entry, 8.6-16.6 in all, 40 faster padded, 1.11x); one entry is not."""
    _, stats = tensor_stage(product(759, 883, 3353, batch=2), TENSOR_CORES)
    assert stats == {"padded": 1}
    _, stats = tensor_stage(product(759, 883, 3353), TENSOR_CORES)
    assert stats == {"padded": 0}
    _, stats = tensor_stage(product(759, 883, 3353, batch=2), TENSOR_CORES,
                            "einsum-lowering,contraction-padding{large-flops=9000000000}")
    assert stats == {"padded": 0}


def test_options_and_the_default_pipeline():
    prog = product(300, 300, 101)
    _, stats = tensor_stage(prog, TENSOR_CORES, "einsum-lowering,contraction-padding{"
                                                "intensity=256 multiple=1}")
    assert stats == {"padded": 0}
    _, stats = tensor_stage(prog, TENSOR_CORES, "einsum-lowering,contraction-padding{"
                                                "intensity=301}")
    assert stats == {"padded": 0}  # 2MN/(M+N) = 300
    after, stats = tensor_stage(prog, TENSOR_CORES, "einsum-lowering,contraction-padding{"
                                                    "intensity=300 multiple=8}")
    assert stats == {"padded": 1}
    (mm,) = [x for x in after.nodes() if x.op is Op.EINSUM]
    assert mm.srcs[0].type.shape == (300, 104)


F16_CORES = TargetProfile(device="f16 gpu", device_type="gpu",
                          tensor_cores=(TF32_MMA, CP_ASYNC, F16_MMA))


@settings(max_examples=25, deadline=None)
@given(m=st.integers(64, 90), n=st.integers(64, 90), k=st.integers(32, 70),
       batch=st.sampled_from([0, 2]), b_along_k=st.booleans(),
       dtype=st.sampled_from([DType.f16, DType.f32]), seed=st.integers(0, 2**16))
def test_padded_products_compute_what_the_program_does(m, n, k, batch, b_along_k, dtype, seed):
    """Whatever the shape: f16 products (dtype-legalization's padded_product, on a target with
    f16 tensor cores but no f16 arithmetic) and f32 ones (contraction-padding, its intensity
    lowered to take these sizes), padded or not, interpret as the program does."""
    prog = product(m, n, k, batch, b_along_k, dtype)
    pipeline = ("dtype-legalization,einsum-lowering,contraction-padding{intensity=16}")
    job = accy.prepare(prog, pipeline, target=F16_CORES, until=Stage.tensor)
    after = job.products[Stage.tensor].program
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal(p.type.shape).astype(dtype.numpy)
              for p in prog.functions[0].params]
    assert_close(accy.interpret(after, inputs), accy.interpret(prog, inputs), prog, inputs)
    odd = k % (2 if dtype is DType.f16 else 4) or (dtype is DType.f16 and n % 2 and not b_along_k)
    assert any(x.op is Op.CONCAT for x in after.nodes()) == bool(odd)
