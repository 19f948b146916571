"""Tensor-stage lowering passes: what they remove, and that `interpret` agrees before/after."""

import numpy as np
import pytest

import accy
from accy.builder import cross_entropy, trace
from accy.errors import InterpretError, PipelineError
from accy.ir.ops import Op
from accy.ir.program import Program, Stage
from accy.passes.spec import parse_pipeline
from accy.plans import LaunchPlan

RNG = np.random.default_rng(7)


def lowered(program: Program, pipeline: str) -> Program:
    return accy.prepare(program, pipeline, until=Stage.tensor).products[Stage.tensor].program


def ops_of(program: Program) -> list[Op]:
    return [n.op for n in program.nodes()]


def assert_same_meaning(before: Program, after: Program, inputs, rtol=1e-5, atol=1e-6):
    for want, got in zip(accy.interpret(before, inputs), accy.interpret(after, inputs),
                         strict=True):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("name", ["relu", "gelu", "sigmoid", "softmax", "log_softmax"])
def test_activation_lowering_removes_the_activation(name):
    method = name if name != "log_softmax" else "log_softmax"
    program = trace(lambda x: getattr(x, method)(), accy.f32[4, 9], name="act")
    after = lowered(program, f"activation-lowering{{ops={name}}}")
    assert Op(name) not in ops_of(after)
    x = RNG.standard_normal((4, 9)).astype(np.float32) * 30  # large: stability matters
    assert_same_meaning(program, after, [x])


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_f16_gelu_is_computed_in_f32_and_rounded_once(approximate):
    """interpret's gelu rounds once to f16; the lowered form computes in f32 and rounds once
    (in f16 steps it was up to 2,000 ulps off where gelu is small)."""
    program = trace(lambda x: x.gelu(approximate=approximate), accy.f16[4096], name="g")
    after = lowered(program, "activation-lowering")
    assert [n.type.dtype for n in after.nodes() if n.op is Op.ERF or n.op is Op.TANH] == \
        [accy.DType.f32]
    x = RNG.uniform(-8, 8, 4096).astype(np.float16)
    (want,), (got,) = accy.interpret(program, [x]), accy.interpret(after, [x])
    ulps = np.abs(got.astype(np.float64) - want) / np.spacing(np.abs(want))
    assert got.dtype == np.float16 and ulps.max() <= 4 and np.mean(got == want) > 0.9


def test_f16_sigmoid_is_the_nearest_half_computed_in_f32_and_rounded_once():
    """interpret's f16 sigmoid is the nearest half of the exact value (in f16 steps 14% of
    inputs were not); the lowered form computes in f32 and rounds once."""
    x = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    x = x[np.isfinite(x)]
    program = trace(lambda v: v.sigmoid(), accy.f16[x.size], name="s")
    (want,) = accy.interpret(program, [x])
    with np.errstate(over="ignore"):
        exact = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
    np.testing.assert_array_equal(want, exact.astype(np.float16))
    after = lowered(program, "activation-lowering")
    assert {n.type.dtype for n in after.nodes() if n.op is Op.EXP} == {accy.DType.f32}
    (got,) = accy.interpret(after, [x])
    ulps = np.abs(got.view(np.int16).astype(np.int32) - want.view(np.int16).astype(np.int32))
    assert got.dtype == np.float16 and ulps.max() <= 1 and np.mean(ulps == 0) > 0.99


def test_lowered_softmax_is_stable_for_huge_inputs():
    program = trace(lambda x: x.softmax(-1), accy.f32[2, 3], name="sm")
    after = lowered(program, "activation-lowering{ops=softmax}")
    x = np.array([[1000.0, 1001.0, 1002.0], [-1000.0, 0.0, 1000.0]], np.float32)
    (got,) = accy.interpret(after, [x])
    assert np.all(np.isfinite(got))
    assert_same_meaning(program, after, [x])


def test_default_keeps_rowwise_activations():
    program = trace(lambda x: x.softmax(-1) + x.gelu(), accy.f32[4, 8], name="mix")
    after = lowered(program, "accy-tensor")
    assert Op.SOFTMAX in ops_of(after) and Op.GELU not in ops_of(after)
    assert Op.ERF in ops_of(after)


def test_activation_kernel_library_disabled_lowers_the_row_activations_too():
    program = trace(lambda x: x.softmax(-1) + x.log_softmax(-1) + x.gelu(), accy.f32[4, 8],
                    name="mix")
    kept = ops_of(lowered(program, "activation-lowering{kernel-library=enabled}"))
    assert Op.SOFTMAX in kept and Op.LOG_SOFTMAX in kept and Op.GELU not in kept
    after = lowered(program, "activation-lowering{kernel-library=disabled}")
    assert not {Op.SOFTMAX, Op.LOG_SOFTMAX, Op.GELU} & set(ops_of(after))
    assert_same_meaning(program, after, [RNG.standard_normal((4, 8)).astype(np.float32)])


def test_unknown_activation_is_an_error():
    program = trace(lambda x: x.relu(), accy.f32[4], name="r")
    with pytest.raises(PipelineError, match="'swish'; allowed: each item: one of relu"):
        lowered(program, "activation-lowering{ops=swish}")  # when the text is read


LOWER_LOSS = "loss-lowering{kernel-library=disabled}"


def test_loss_lowering_keeps_float_cross_entropy_for_the_row_kernel(device):
    """kernel-library=enabled (the default): cross-entropy stays whole and the row-softmax
    generator builds its row-loss and mean kernels; disabled lowers it."""
    program = trace(cross_entropy, accy.f32[6, 5], accy.i32[6], name="xent")
    assert Op.CROSS_ENTROPY in ops_of(lowered(program, "loss-lowering"))
    assert Op.CROSS_ENTROPY not in ops_of(lowered(program, LOWER_LOSS))
    logits = RNG.standard_normal((6, 5)).astype(np.float32)
    labels = RNG.integers(0, 5, 6).astype(np.int32)
    (want,) = accy.interpret(program, [logits, labels])
    for option in ("", "{kernel-library=disabled}"):
        job = accy.prepare(program, parse_pipeline("accy-default").replacing(
            f"loss-lowering{option}"))
        kernels = [k.entry for k in job.kernels]
        assert any(k.startswith("cross_entropy") for k in kernels) == (option == ""), kernels
        (got,) = job.executable(device=device)(logits, labels)
        np.testing.assert_allclose(got, want, rtol=1e-5)


def test_loss_lowering_uses_parallel_ops():
    program = trace(cross_entropy, accy.f32[6, 5], accy.i32[6], name="xent")
    after = lowered(program, LOWER_LOSS)
    assert Op.CROSS_ENTROPY not in ops_of(after) and Op.LOG_SOFTMAX in ops_of(after)
    assert Op.GATHER in ops_of(after) and Op.EQ not in ops_of(after)  # no one-hot mask
    logits = RNG.standard_normal((6, 5)).astype(np.float32)
    labels = RNG.integers(0, 5, 6).astype(np.int32)
    assert_same_meaning(program, after, [logits, labels])


def test_loss_lowering_batched_labels():
    program = trace(cross_entropy, accy.f32[2, 3, 4], accy.i64[2, 3], name="xent")
    after = lowered(program, LOWER_LOSS)
    logits = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    labels = RNG.integers(0, 4, (2, 3)).astype(np.int64)
    assert_same_meaning(program, after, [logits, labels])


def test_loss_lowering_keeps_infinite_losses():
    # a one-hot mask gave 0 * -inf = nan for the +inf logit's entry; the gather never reads it
    program = trace(cross_entropy, accy.f32[3, 3], accy.i32[3], name="xent")
    after = lowered(program, LOWER_LOSS)
    logits = np.float32([[np.inf, 0, 1], [0, 1, 2], [-np.inf, 3, 0]])
    labels = np.int32([1, 2, 0])
    (want,) = accy.interpret(program, [logits, labels])
    (got,) = accy.interpret(after, [logits, labels])
    assert want == np.inf and got == np.inf
    labels = np.int32([0, 2, 1])  # the +inf logit's own label: log-softmax there is nan
    assert np.isnan(accy.interpret(program, [logits, labels])[0])
    assert np.isnan(accy.interpret(after, [logits, labels])[0])


def test_loss_lowering_clamps_labels_into_their_row():
    program = trace(cross_entropy, accy.f32[2, 3], accy.i64[2], name="xent")
    after = lowered(program, LOWER_LOSS)
    logits = RNG.standard_normal((2, 3)).astype(np.float32)
    with pytest.raises(InterpretError, match="label 3"):  # invalid input before lowering
        accy.interpret(program, [logits, np.int64([3, -1])])
    (got,) = accy.interpret(after, [logits, np.int64([3, -1])])
    (want,) = accy.interpret(program, [logits, np.int64([2, 0])])
    assert got == want  # each label clamped into [0, classes), never read from another row


def test_loss_lowering_of_scalar_and_empty_labels():
    program = trace(cross_entropy, accy.f32[4], accy.i32[()], name="xent")
    after = lowered(program, LOWER_LOSS)
    logits = RNG.standard_normal(4).astype(np.float32)
    assert_same_meaning(program, after, [logits, np.int32(3)])
    empty = trace(cross_entropy, accy.f32[0, 5], accy.i32[0], name="xent")
    (got,) = accy.interpret(lowered(empty, LOWER_LOSS),
                            [np.zeros((0, 5), np.float32), np.zeros(0, np.int32)])
    assert got.shape == () and np.isnan(got)


def test_shape_layout_propagation_folds_chains():
    def chain(x):
        y = x.transpose(1, 0).transpose(1, 0)  # identity
        z = y.reshape(6, 4).reshape(24).reshape(4, 6)  # identity overall
        return (z + 1.0).broadcast_to(4, 6)[0:4, 0:6]

    program = trace(chain, accy.f32[4, 6], name="moves")
    after = lowered(program, "shape-layout-propagation")
    assert ops_of(after).count(Op.TRANSPOSE) == 0 and ops_of(after).count(Op.RESHAPE) == 0
    assert Op.BROADCAST not in ops_of(after) and Op.SLICE not in ops_of(after)
    assert_same_meaning(program, after, [RNG.standard_normal((4, 6)).astype(np.float32)])


def test_shape_layout_propagation_composes_transposes():
    program = trace(lambda x: x.transpose(1, 2, 0).transpose(2, 0, 1).transpose(0, 2, 1),
                    accy.f32[2, 3, 4], name="t")
    after = lowered(program, "shape-layout-propagation")
    assert ops_of(after).count(Op.TRANSPOSE) == 1
    assert_same_meaning(program, after, [RNG.standard_normal((2, 3, 4)).astype(np.float32)])


def test_seed_tensor_lowering_options_round_trip_and_share_one_launch_plan():
    """The seed's lowering options in MLIR syntax; indexing-lowering and loss-lowering each set
    their fields of the product's launch plan and keep the other's."""
    seed = ("activation-lowering{kernel-library=enabled},einsum-lowering{strategy=beam "
            "exact-state-limit=64 beam-width=8 auto-beam-width=16 kernel-library=enabled},"
            "indexing-lowering{kernel-library=enabled gather-thread-blocks=4 "
            "scatter-thread-blocks=5},loss-lowering{kernel-library=enabled "
            "row-sparse-cross-entropy-thread-blocks=4}")  # the seed's test, MLIR syntax
    parsed = parse_pipeline(seed)
    assert parse_pipeline(parsed.text(full=True)) == parsed == parse_pipeline(parsed.text())
    for option in seed.replace("{", " ").replace("}", " ").replace(",", " ").split():
        assert "=" not in option or option in parsed.text(full=True), option
    text = ("indexing-lowering{gather-thread-blocks=4 scatter-thread-blocks=5},"
            "loss-lowering{row-sparse-cross-entropy-thread-blocks=4}")
    assert parse_pipeline(text).text() == text
    full = parse_pipeline("loss-lowering{kernel-library=enabled}").text(full=True)
    assert "kernel-library=enabled" in full and "row-sparse-cross-entropy-thread-blocks=0" in full
    with pytest.raises(PipelineError, match="0 <= row-sparse-cross-entropy-thread-blocks"):
        parse_pipeline("loss-lowering{row-sparse-cross-entropy-thread-blocks=-2}")
    program = trace(cross_entropy, accy.f32[6, 5], accy.i32[6], name="xent")
    job = accy.prepare(program, text, until=Stage.tensor)
    assert job.products[Stage.tensor].launch == LaunchPlan(gather=4, scatter_add=5,
                                                           cross_entropy=4)


@pytest.mark.parametrize("kept", [False, True], ids=["lowered", "kept"])
def test_gelu_at_infinities_and_nan_matches_interpret_on_opencl(device, kept):
    """x * Phi(x) is -inf * 0 at -inf in the formula; the function (and interpret) give 0."""
    import accy

    @accy.function
    def f(x: accy.f32[6]):
        return x.gelu(), x.gelu(approximate="tanh")

    x = np.array([-np.inf, np.inf, np.nan, -3.0, 0.0, 2.0], np.float32)
    pipeline = accy.parse_pipeline("accy-default")
    if kept:
        pipeline = pipeline.replacing("activation-lowering{ops=relu}")
    got = accy.prepare(f, pipeline).run(x, device=device)
    for g, w in zip(got, accy.interpret(f, [x]), strict=True):
        assert g[0] == 0 and g[1] == np.inf and np.isnan(g[2])
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
