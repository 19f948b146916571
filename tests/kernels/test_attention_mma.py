"""mma-attention-tf32 / -3xtf32 without a GPU: selection (tensor-core targets under a TF32
policy, auto-fused where the default f32 policy takes it, never on PoCL or under ieee), and
whole generated kernels run on PoCL through the job's own executable with their PTX replaced
by C (``mma.sync`` and ``cvt.rna`` as in test_mma_generator, ``shfl.sync.bfly`` by an
exchange through local memory), checked against the interpreter: scales, additive and causal
masks, ragged query and key counts, an epilogue with a reshape, K and V read along the
sequence (scalar copies), both policies. Speed: ``experiments/bench_gpu.py`` on an H200."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from mma_emulation import emulated_async, emulated_wgmma
from test_attention import heads, matmul_attention
from test_mma_generator import NV, emulated, emulated_builds

import accy
from accy.builder import einsum, trace
from accy.ir.interpret import interpret
from accy.ir.types import DType, TensorType
from accy.kernels import attention_mma_plan
from accy.passes.spec import parse_pipeline
from accy.target import CP_ASYNC, F16_MMA, TF32_MMA, TF32_SATFINITE

f32 = accy.f32
SAT = dataclasses.replace(NV, tensor_cores=(TF32_MMA, TF32_SATFINITE))  # default f32: 3xtf32
F16 = dataclasses.replace(NV, dtypes=NV.dtypes | {DType.f16},
                          tensor_cores=(TF32_MMA, TF32_SATFINITE, F16_MMA, CP_ASYNC))
KEEP_F16 = parse_pipeline("accy-default").replacing("dtype-legalization{f16=keep}").text()


def precision(policy: str, attention: str = "auto") -> str:
    return parse_pipeline("accy-default").replacing(
        f"kernelization{{precision={policy}}}").replacing(
        f"fusion-planning{{attention={attention}}}").text()


_SHFL = re.compile(r'asm volatile\("shfl\.sync\.bfly\.b32 %0, %1, (\d+), 0x1f, 0xffffffff;" : '
                   r'"=r"\((\w+)\) : "r"\((.*)\)\);$', re.M)
EMULATED_SHFL = r"""
#define ACCY_EMU_SHFL(d, x, m) { \
  const uint l_ = get_local_id(0) % 32, w_ = get_local_id(0) / 32; \
  emu_s[w_][l_] = (x); barrier(CLK_LOCAL_MEM_FENCE); \
  d = emu_s[w_][l_ ^ (m)]; barrier(CLK_LOCAL_MEM_FENCE); }
"""


_F16X2 = re.compile(r'asm\("cvt\.rn\.f16x2\.f32 %0, %1, %2;" : "=r"\((\w+)\) : '
                    r'"f"\((.*)\), "f"\((.*)\)\);$', re.M)
_EX2 = re.compile(r'asm\("ex2\.approx\.ftz\.f32 %0, %1;" : "=f"\((\w+)\) : "f"\((.*)\)\);$',
                  re.M)
EMULATED_F16X2 = r"""
#define ACCY_EMU_F16X2(d, hi, lo) { __private ushort h_[2]; \
  vstore_half((lo), 0, (__private half*)h_); vstore_half((hi), 1, (__private half*)h_); \
  d = (int)((uint)h_[0] | ((uint)h_[1] << 16)); }
"""


def emulated_attention(src: str, mode: str = "eager") -> str:
    """``src`` with ``shfl.sync.bfly`` by a warp exchange through local memory (every lane
    runs the same shuffles: uniform barriers), ``cvt.rn.f16x2`` by two ``vstore_half``, then
    the mma and cvt as :func:`test_mma_generator.emulated` (TF32) or
    :func:`mma_emulation.emulated_async` (f16: its cp.async copies ``mode``, "eager" or
    "deferred" to the wait that covers them; with :func:`mma_emulation.emulated_wgmma`'s
    wgmma steps first where there are some) replace them."""
    src = _SHFL.sub(lambda m: f"ACCY_EMU_SHFL({m[2]}, {m[3]}, {m[1]});", src)
    if "f16.f16" in src or "@@RSTEP" in src:  # f16: mma.sync or wgmma
        src = EMULATED_F16X2 + _F16X2.sub(
            lambda m: f"ACCY_EMU_F16X2({m[1]}, {m[2]}, {m[3]});", src)
        src = _EX2.sub(lambda m: f"{m[1]} = exp2({m[2]});", src)
        src = emulated_wgmma(src, mode) if "@@RSTEP" in src else emulated_async(src, mode)
    else:
        src = emulated(src)
    lines = src.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("__kernel"))
    lines.insert(at + 1, "  __local int emu_s[8][32];")
    lines.insert(at, EMULATED_SHFL)
    return "\n".join(lines) + "\n"


def run_emulated(device, prog: accy.Program, inputs, pipeline: str = "accy-default",
                 target=SAT, policy: str = "3xtf32", mode: str = "eager",
                 generator: str | None = None) -> str:
    """Prepare for ``target``, check the one kernel is the tensor-core attention (or
    ``generator``'s), run it emulated on PoCL and compare with the interpreter (tf32: its
    rounding's bound); the kernel's source."""
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("the emulation is checked on PoCL")
    job = accy.prepare(prog, pipeline, target=target)
    assert job.generators() == {generator or f"mma-attention-{policy}": 1}
    src = job.kernel_source(0)
    job._sources[0] = emulated_attention(src, mode)
    with emulated_builds(device):
        (got,) = job.executable(device=device)(*inputs)
    (want,) = interpret(prog, list(inputs))
    tol = {"3xtf32": 1e-5, "tf32": 3e-3, "f16": 1e-2}[policy]
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    return src


def data(rng, prog: accy.Program) -> list[np.ndarray]:
    return [rng.standard_normal(p.type.shape).astype(np.float32) for p in prog.functions[0].params]


def f16_heads(rng, b: int, h: int, shapes, scale: float) -> tuple[accy.Program, list]:
    """f16 attention over Q, K and V of ``(b, h, n, d)`` for ``(n, d)`` in ``shapes``, scores
    scaled by ``scale``, and f16 inputs for it."""

    def f(q, k, v):
        s = einsum("bhqd,bhkd->bhqk", q, k) * scale
        return einsum("bhqk,bhkd->bhqd", accy.softmax(s, -1), v)

    prog = trace(f, *[TensorType((b, h, n, d), DType.f16) for n, d in shapes], name="attn16")
    return prog, [x.astype(np.float16) for x in data(rng, prog)]


@pytest.mark.parametrize("shape, mask", [
    ((1, 2, 64, 64, 16, 16), "none"),  # whole tiles
    ((2, 1, 70, 45, 24, 8), "additive"),  # ragged queries and keys, a mask operand
    ((1, 2, 40, 72, 16, 32), "causal"),  # a constant mask bounding the keys a block reads
    ((1, 1, 140, 50, 8, 16), "causal"),  # three query blocks, the last ragged
])
def test_emulated_kernel_matches_the_interpreter(device, rng, shape, mask):
    prog = heads(*shape, mask=mask)
    run_emulated(device, prog, data(rng, prog))


def test_tf32_policy_rounds_the_operands(device, rng):
    prog = heads(1, 1, 133, 40, 16, 16)  # 4 warps of 32 queries, a ragged second query block
    inputs = data(rng, prog)
    src = run_emulated(device, prog, inputs, precision("tf32", "always"), NV, "tf32")
    # one product per fragment pair and fragment row, per key tile of 32: S 4 key x 2 head
    # fragments, P V 4 key x 2 value fragments (3xtf32: three each)
    assert src.count("mma.sync") == 2 * 16 and "_s)" not in src
    assert "reqd_work_group_size(128, 1, 1)" in src


def test_epilogue_and_reshape_through_the_matmul_spelling(device, rng):
    prog = matmul_attention(2, 48, 16)
    run_emulated(device, prog, data(rng, prog))


def test_keys_and_values_along_the_sequence_are_copied_scalar(device, rng):
    """K and V stored feature-major (their sequence contiguous): scalar copies."""

    def f(q, kt, vt):
        s = einsum("bqd,bdk->bqk", q, kt) * 0.25
        return einsum("bqk,bek->bqe", accy.softmax(s, -1), vt)

    prog = trace(f, f32[2, 50, 16], f32[2, 16, 37], f32[2, 8, 37], name="attn_t")
    assert "vload4" not in run_emulated(device, prog, data(rng, prog))


@pytest.mark.parametrize("mode", ["eager", "deferred"])
def test_f16_attention_on_f16_tensor_cores(device, rng, mode):
    """f16 operands, scores, softmax and output kept f16 (as on the H200 at full size): the
    f16 kernel, its probabilities rounded to f16 for P V, against the interpreter's f16."""
    prog, inputs = f16_heads(rng, 2, 1, ((140, 16), (70, 16), (70, 32)), 0.25)
    src = run_emulated(device, prog, inputs, KEEP_F16, F16, "f16", mode)
    assert "mma.sync.aligned.m16n8k16" in src and "ldmatrix" in src
    assert "cp.async.wait_group 1;" in src  # three stages


@pytest.mark.parametrize("mode", ["eager", "deferred"])
def test_f16_attention_promoted_around_its_products(device, rng, mode):
    """On a target without native f16 (the H200's OpenCL) dtype-legalization keeps the f16
    products for f16 tensor cores and computes the scale and softmax in f32, the
    probabilities cast back to f16: that group is fused and built by the f16 kernel."""
    storage = dataclasses.replace(F16, dtypes=NV.dtypes)  # f16 stored, not computed
    prog, inputs = f16_heads(rng, 1, 2, ((130, 32), (96, 32), (96, 64)), 0.125)
    run_emulated(device, prog, inputs, target=storage, policy="f16", mode=mode)


@pytest.mark.parametrize("policy, form", [("3xtf32", (2, 2)), ("tf32", (4, 2)),
                                          ("f16", (2, 2))])
def test_warps_of_two_fragment_rows(device, rng, monkeypatch, policy, form):
    """Warps taking two m16 fragment rows (32 queries) share each K and V fragment between
    them: ragged query blocks (the last one's second fragment row past the queries), a causal
    mask bounding the keys a block reads, every policy."""
    monkeypatch.setitem(attention_mma_plan.FORMS, policy, (form,))
    if policy == "f16":
        prog, inputs = f16_heads(rng, 1, 2, ((75, 16), (70, 16), (70, 32)), 0.25)
        src = run_emulated(device, prog, inputs, KEEP_F16, F16, "f16", "deferred")
        # two rows: S 8 key x 1 head, P V 4 key x 4 value fragments, the row sums 4 key
        per_tile = 2 * (8 + 4 * 4 + 4)
        # the shuffles are the row maxima's (2 rows x 2 halves x 2), the sums need none
        assert "fa_ones" in src and src.count("shfl.sync") == 8
    else:
        prog = heads(1, 1, 75, 50, 8, 16, mask="causal")
        inputs = data(rng, prog)
        src = run_emulated(device, prog, inputs, precision(policy, "always"),
                           SAT if policy == "3xtf32" else NV, policy)
        # S 4 x 1, P V 4 x 2; twice: the loops of whole tiles and of those the mask cuts
        per_tile = 2 * 2 * (4 + 4 * 2) * (3 if policy == "3xtf32" else 1)
    assert src.count("mma.sync") == per_tile
    assert f"reqd_work_group_size({32 * form[0]}, 1, 1)" in src


@pytest.mark.parametrize("static, split", [(0, False), (227 * 1024, True)])
def test_key_tiles_split_as_copied_where_they_fit_the_same_key_tile(device, rng, static,
                                                                     split):
    """3xtf32: the work-item copying K and V into local memory splits them into big and small
    TF32 parts (int words, 16-byte groups) where twice the words fit the key tile of 32 the
    unsplit form takes: heads of 64 need 70 KB, over the 48 KB the device reports, within
    half the static local memory of an H200 (the unsplit form: float tiles, split as read).
    A ragged key tile and causal mask; both checked in emulation."""
    prog = heads(1, 2, 40, 45, 64, 64, mask="causal")
    target = dataclasses.replace(SAT, static_local_bytes=static)
    src = run_emulated(device, prog, data(rng, prog), target=target)
    assert ("__local int k_tile" in src) is split
    assert ("__local float k_tile" in src) is not split
    # split: one 16-byte load a B fragment (its big and small register pairs); per tile of 32
    # keys S takes 4 x 8 K fragments, P V 4 x 8 V fragments, in each of the causal mask's two
    # loops (whole tiles, then those it cuts)
    assert len(re.findall(r"int4 fa_[kv]\d+_\d+_g = ", src)) == (2 * 64 if split else 0)


def test_eight_warps_of_one_row_with_split_tiles(device, rng):
    """Heads of 96 (two fragment rows over the register budget) on an H200's static local
    memory: 8 warps of one row, split tiles, slots that do not divide the tile (K's 384 and
    V's 32 per 256 work-items), ragged queries and keys; in emulation."""
    prog = heads(1, 1, 130, 45, 96, 8, mask="additive")
    target = dataclasses.replace(SAT, static_local_bytes=227 * 1024)
    src = run_emulated(device, prog, data(rng, prog), target=target)
    assert "reqd_work_group_size(256, 1, 1)" in src and "__local int k_tile" in src


def test_split_3xtf32_forms():
    """3xtf32 with split key tiles: heads of 64 take 4 warps of two fragment rows (their
    registers fit); of 88 or 120, 8 warps of one row (measured faster than 4 on an H100)."""
    target = dataclasses.replace(SAT, static_local_bytes=227 * 1024)
    for d, threads, rows in ((64, 128, 2), (88, 256, 1), (120, 256, 1)):
        src = accy.prepare(heads(1, 2, 512, 512, d, d), target=target).kernel_source(0)
        assert "__local int k_tile" in src
        assert f"reqd_work_group_size({threads}, 1, 1)" in src
        assert ("fa_s1_0_0" in src) is (rows == 2)  # a second fragment row's scores


@pytest.mark.parametrize("d", range(8, 129, 8))
def test_split_fragment_loads_fall_in_distinct_banks(d):
    """The split tiles' rows (attention_mma_plan.split_rows): a warp's 16-byte fragment loads
    are served 8 lanes at a time; each 8 lanes' words (K: row g, group t; V: row pair t,
    group g) cover the 32 banks once."""
    rows = attention_mma_plan.split_rows(d, d)
    for first in range(0, 32, 8):
        lanes = range(first, first + 8)
        for words in ([(lane // 4) * rows["k"] + 4 * (lane % 4) for lane in lanes],
                      [(lane % 4) * rows["v"] + 4 * (lane // 4) for lane in lanes]):
            assert len({(w + i) % 32 for w in words for i in range(4)}) == 32


def test_two_fragment_rows_a_warp_where_their_registers_fit():
    """tf32 heads of 64 features: 8 warps of two fragment rows (160 registers a lane); of
    128 (key tiles of 16 in local memory): two rows would hold 288, so 4 warps of one row
    (144)."""
    for d, threads, rows, bk in ((64, 256, 2, 32), (128, 128, 1, 16)):
        src = accy.prepare(heads(1, 1, 256, 64, d, d), precision("tf32"),
                           target=NV).kernel_source(0)
        assert f"reqd_work_group_size({threads}, 1, 1)" in src
        # per fragment row: S and P V, bk / 8 key x d / 8 feature fragments each
        assert src.count("mma.sync") == rows * 2 * (bk // 8) * (d // 8)


def test_f16_row_sums_on_tensor_cores_where_their_registers_fit(rng):
    """f16: the probabilities' row sums come from mma with B all ones (no chain of adds)
    where the 4 accumulators a fragment row fit MAX_REGISTERS: heads of 64 (two rows, 160 +
    8), not of 128 (224 + 8: the sums by adds)."""
    for d, sums in ((64, True), (128, False)):
        prog, _ = f16_heads(rng, 1, 2, ((256, d), (256, d), (256, d)), 0.125)
        job = accy.prepare(prog, KEEP_F16, target=F16)
        assert job.generators() == {"mma-attention-f16": 1}
        assert ("fa_ones" in job.kernel_source(0)) is sums


LAZY = re.compile(r"if \(+up\d+ \|\| ")  # the rescale under its warp's rows' moves, or'ed


@pytest.mark.parametrize("policy", ["3xtf32", "f16"])
@pytest.mark.parametrize("rising", [True, False])
def test_lazy_rescale_with_maxima_moving_far_or_little(device, rng, policy, rising):
    """Where O's multiplies outnumber a tile's exponentials (value features over the key
    tile: ``Tiles.lazy``) a warp skips the rescale unless a row's maximum rose by over
    2^RESCALE in exp. Scores rising along the keys far more than that a tile rescale at every
    tile; falling ones keep the first tile's maxima while the later tiles' probabilities are
    summed against them. V near 1: the interpreter's f16 rounds these large scores, which
    moves the weights by about 1%."""
    ramp = np.linspace(0.2, 12.0, 96)[:: 1 if rising else -1, None]
    q, k, v = (np.abs(rng.standard_normal((1, 2, n, d))) for n, d in ((130, 32), (96, 32),
                                                                        (96, 128)))
    inputs = [q, k * ramp, 1.0 + 0.1 * v]
    if policy == "f16":
        storage = dataclasses.replace(F16, dtypes=NV.dtypes)
        prog, _ = f16_heads(rng, 1, 2, ((130, 32), (96, 32), (96, 128)), 0.25)
        src = run_emulated(device, prog, [x.astype(np.float16) for x in inputs],
                           target=storage, policy="f16")
    else:
        prog = heads(1, 2, 130, 96, 32, 128)
        src = run_emulated(device, prog, [x.astype(np.float32) for x in inputs])
    assert LAZY.search(src)


def test_lazy_only_where_the_rescale_outweighs_the_exponentials(rng):
    """f16 heads of 64 take 64-key tiles: the rescale is every tile's there (the branch cost
    more than it saved on the H200); of 128, 32-key tiles: lazy; f32 (32-key tiles): lazy."""
    for d, lazy in ((64, False), (128, True)):
        prog, _ = f16_heads(rng, 1, 2, ((256, d), (256, d), (256, d)), 0.125)
        job = accy.prepare(prog, KEEP_F16, target=F16)
        assert job.generators() == {"mma-attention-f16": 1}
        assert bool(LAZY.search(job.kernel_source(0))) is lazy
    assert LAZY.search(accy.prepare(heads(1, 1, 256, 64, 64, 64), precision("tf32"),
                                    target=NV).kernel_source(0))


def test_f16_scale_folded_into_the_exponent(rng):
    """Promoted f16 (the scale and softmax in f32, as on the H200): a positive constant scale
    goes into the exponent's coefficient, no multiply a score, through a causal mask (compared
    by the indices); a negative one, an f16 multiply (native f16) or another constant mask
    after it is evaluated as written."""
    storage = dataclasses.replace(F16, dtypes=NV.dtypes)
    coef = "0.180336877"  # 0.125 log2(e)

    def source(scale, target=storage, pipeline="accy-default", mask=None):
        prog, _ = f16_heads(rng, 1, 2, ((130, 32), (96, 32), (96, 64)), scale)
        if mask is not None:
            def f(q, k, v):
                s = einsum("bhqd,bhkd->bhqk", q, k) * scale
                s = accy.where(accy.constant(mask), s, -np.inf)
                return einsum("bhqk,bhkd->bhqd", accy.softmax(s, -1), v)

            prog = trace(f, *[p.type for p in prog.functions[0].params], name="masked16")
        job = accy.prepare(prog, pipeline, target=target)
        assert job.generators() == {"mma-attention-f16": 1}
        return job.kernel_source(0)

    src = source(0.125)
    assert coef in src and "* 0.125f)" not in src
    assert coef not in source(-0.125) and "* -0.125f)" in source(-0.125)
    assert coef not in source(0.125, F16, KEEP_F16)  # f16 scores, rounded after the scale
    causal = np.tril(np.ones((130, 96), bool))
    assert coef in source(0.125, mask=causal)
    causal[7, 3] = False
    assert coef not in source(0.125, mask=causal)


def test_auto_fuses_where_the_default_policy_takes_tensor_cores():
    prog = heads(1, 2, 128, 128, 64, 64)
    assert accy.prepare(prog, target=SAT).generators() == {"mma-attention-3xtf32": 1}
    # without the saturating rounding the default f32 policy is ieee: three kernels
    assert "mma-attention-3xtf32" not in accy.prepare(prog, target=NV).generators()
    # an explicit ieee policy keeps the three kernels (the work-group form is slower), unless
    # attention=always asks for the fused one
    assert "fused-attention" not in accy.prepare(prog, precision("ieee"), target=SAT).generators()
    assert accy.prepare(prog, precision("ieee", "always"), target=SAT).generators() == {
        "fused-attention": 1}
    # an explicit tf32 policy fuses without the saturating rounding too
    assert accy.prepare(prog, precision("tf32"), target=NV).generators() == {
        "mma-attention-tf32": 1}
    # heads of features not a multiple of 8, or too wide: the three kernels
    for d in (12, 136):
        assert "mma-attention-3xtf32" not in accy.prepare(
            heads(1, 1, 64, 64, d, 16), target=SAT).generators()


def test_never_on_the_pocl_device(device):
    if "Portable Computing Language" not in device.info.platform:
        pytest.skip("PoCL's probe finds no tensor cores")
    job = accy.prepare(heads(1, 2, 64, 64, 16, 16), target=accy.TargetProfile.from_device(
        device.info))
    assert not any(g.startswith("mma") for g in job.generators())


@pytest.mark.parametrize("s, d", [(75, 32), (64, 48), (70, 64), (66, 40), (80, 56), (70, 36)],
                         ids=["odd-keys-32", "48-features", "odd-keys-64", "40-features",
                              "56-features", "36-features"])
def test_f16_attention_of_any_keys_and_32_features_is_fused_without_cl_khr_fp16(device, s, d):
    """dtype-legalization keeps an f16 attention's values product in f16 whatever its shape
    (dtype_legalization.attention_values: 32 or 48 features, an odd number of keys, which the
    GEMM rule refuses; 36 features padded with zeros to 40 in Q, K and V, the result sliced
    back: attention_padding), so on a target without cl_khr_fp16 the attention is one
    mma-attention-f16 kernel (and the padding's copies); 40 or 56 features (whole 16-byte
    rows, not whole mma steps) are padded to 48 or 64 inside the kernel (zeros copied into
    K's tiles, zero query registers); checked in emulation against the interpreter."""
    rng = np.random.default_rng(s + d)
    scale = 1.0 / np.sqrt(d)

    def f(q, k, v):
        return einsum("bhqk,bhkd->bhqd", accy.softmax(einsum("bhqd,bhkd->bhqk", q, k) * scale,
                                                      -1), v)

    types = [TensorType((1, 2, s, d), DType.f16)] * 3
    prog = trace(f, *types, name="attn16")
    job = accy.prepare(prog, "accy-default", target=dataclasses.replace(F16, dtypes=NV.dtypes))
    copies = {} if d % 8 == 0 else {"row-movement": 4}  # Q, K, V padded; the result sliced
    assert job.generators() == {"mma-attention-f16": 1, **copies}
    if d % 16 and not copies:  # K's chunks past d zero-filled, query registers past d zero
        src = job.kernel_source(0)
        assert f"* 8L) < {d}L)) ? ((int)16) : ((int)0))" in src
        assert f" < {d}L) ? vload_half(" in src
    inputs = [rng.standard_normal(t.shape).astype(np.float16) for t in types]
    for i in range(len(job.kernels)):
        if "asm" in job.kernel_source(i):
            job._sources[i] = emulated_attention(job.kernel_source(i))
    with emulated_builds(device):
        (got,) = job.executable(device=device)(*inputs)
    (want,) = interpret(prog, list(inputs))
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64),
                               rtol=1e-2, atol=1e-2)
