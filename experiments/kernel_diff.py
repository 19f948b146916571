"""Kernel-diff gate: the generated OpenCL source of a fixed program set, for review.

    python experiments/kernel_diff.py                 # print every kernel's source
    python experiments/kernel_diff.py --check [FILE]  # compare with the snapshot; exit 1 + diff
    python experiments/kernel_diff.py --update [FILE] # rewrite the snapshot

Like tinygrad's process replay: a change that alters generated kernels shows up as a diff of
``experiments/kernels.snapshot.txt`` in review. The programs (the seed's, a reduction, a
softmax, a matmul, a gather/scatter, a cross-entropy, a broadcasted chain) are prepared with
``accy-default`` for the generic :class:`~accy.target.TargetProfile`, and a product under
each tensor-core policy for a written-down NVIDIA profile (``TENSOR_CORES``), so the text does
not depend on the machine; it needs no OpenCL device. Last, the plans (generators, kernels'
entries and launch geometry; no source) of ``bench_gpu``'s default set for an H100's saved
profile (:func:`plans`): a rule that moves them shows too. A program that fails to prepare
prints its error in place of its kernels, so a fix or a regression shows up in the diff too.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

import accy
from accy.builder import Builder, cross_entropy, einsum, gather, scatter_add, trace
from accy.ir.types import DType
from accy.kernels import tma
from accy.passes.spec import parse_pipeline
from accy.target import TENSOR_CORE_SHAPES, TargetProfile

SNAPSHOT = Path(__file__).with_name("kernels.snapshot.txt")
PIPELINE = "accy-default"
f32, i32 = accy.f32, accy.i32


def traced(name: str, fn: Callable, *types: accy.TensorType) -> accy.Program:
    return trace(fn, *types, name=name)


def seed_add() -> accy.Program:
    """Seed row 3: ``a + b`` on f32[4]."""
    return traced("add", lambda a, b: a + b, f32[4], f32[4])


def seed_two_results() -> accy.Program:
    """Seed row 4: ``(a+b, (a+b)*c)`` on f32[4]."""
    def add_mul(a, b, c):
        s = a + b
        return s, s * c

    return traced("add_mul", add_mul, f32[4], f32[4], f32[4])


def seed_max_chain() -> accy.Program:
    """Seed row 5: ``max(((a+b)*b)-b, b)`` on f32[16]."""
    return traced("max_chain", lambda a, b: accy.maximum(((a + b) * b) - b, b),
                  f32[16], f32[16])


def seed_outer_einsum() -> accy.Program:
    """Seed row 6: einsum ``ab,cd->ac``."""
    return traced("outer", lambda x, y: einsum("ab,cd->ac", x, y), f32[3, 4], f32[5, 6])


def seed_attention_einsum() -> accy.Program:
    """Seed row 7: einsum ``bqd,bkd,bkv->bqv``."""
    return traced("attention", lambda q, k, v: einsum("bqd,bkd,bkv->bqv", q, k, v),
                  f32[2, 3, 4], f32[2, 5, 4], f32[2, 5, 6])


def seed_constants() -> accy.Program:
    """Seed row 8: two constants added, then multiplied into a parameter."""
    b = Builder()
    f = b.begin_function("consts", [b.tensor(DType.f32, (3,))], ["x"])
    c1 = f.constant(np.array([1, 2, 3], np.float32))
    c2 = f.constant(np.array([10, 20, 30], np.float32))
    f.return_(f.add(c1, c2), f.mul(f.param(0), f.add(c1, c2)))
    f.finish()
    return b.finish()


def reduction() -> accy.Program:
    """Row sums and a full mean of an f32[64, 32]."""
    return traced("sums", lambda x: (x.sum(axes=(1,)), x.mean()), f32[64, 32])


def softmax() -> accy.Program:
    """Row softmax of f32[16, 128]."""
    return traced("softmax", lambda x: x.softmax(axis=-1), f32[16, 128])


def matmul() -> accy.Program:
    """f32[32, 64] @ f32[64, 16]."""
    return traced("matmul", lambda a, b: a @ b, f32[32, 64], f32[64, 16])


def gather_scatter() -> accy.Program:
    """Rows gathered by index, then scatter-added back into a table."""
    def gs(table, idx, upd):
        return gather(table, idx, axis=0), scatter_add(table, idx, upd, axis=0)

    return traced("gather_scatter", gs, f32[10, 8], i32[6], f32[6, 8])


def cross_entropy_loss() -> accy.Program:
    """Mean cross-entropy of f32[8, 10] logits against i32[8] labels."""
    return traced("loss", lambda logits, labels: cross_entropy(logits, labels),
                  f32[8, 10], i32[8])


def broadcast_chain() -> accy.Program:
    """A bias and a scale broadcast along rows, a gelu and a clamp: one fused kernel."""
    def chain(x, bias, scale):
        return accy.minimum(((x + bias) * scale).gelu(), 6.0)

    return traced("chain", chain, f32[32, 64], f32[64], f32[32, 1])


def gemm(dtype: accy.DType = accy.f32) -> accy.Program:
    """A 256x256x256 product with a bias and a relu: the tensor-core kernels' epilogue."""
    return traced("gemm", lambda a, b, c: (a @ b + c).relu(), dtype[256, 256],
                  dtype[256, 256], dtype[256])


def gemm_f16() -> accy.Program:
    """The same product in f16 (f16 tensor cores, f32 accumulators)."""
    return gemm(accy.f16)


def gemm_long_k() -> accy.Program:
    """A 512x512x4100 product with a bias and a relu: K split over work-groups (a shorter last
    chunk), the chunks' partial sums added by a second kernel with the epilogue."""
    return traced("gemm_long_k", lambda a, b, c: (a @ b + c).relu(), f32[512, 4100],
                  f32[4100, 512], f32[512])


def attention(dtype: accy.DType = accy.f32) -> accy.Program:
    """Scaled attention, 2 heads of 128 x 64: one tensor-core kernel, scores in registers."""
    t = dtype[1, 2, 128, 64]
    return traced("attention", lambda q, k, v: einsum(
        "bhqk,bhkd->bhqd", (einsum("bhqd,bhkd->bhqk", q, k) * 0.125).softmax(), v), t, t, t)


def attention_f16() -> accy.Program:
    """The same attention in f16 (f16 tensor cores; the softmax in f32)."""
    return attention(accy.f16)


PROGRAMS: tuple[tuple[str, Callable[[], accy.Program]], ...] = (
    ("seed-add", seed_add), ("seed-two-results", seed_two_results),
    ("seed-max-chain", seed_max_chain), ("seed-outer-einsum", seed_outer_einsum),
    ("seed-attention-einsum", seed_attention_einsum), ("seed-constants", seed_constants),
    ("reduction", reduction), ("softmax", softmax), ("matmul", matmul),
    ("gather-scatter", gather_scatter), ("cross-entropy", cross_entropy_loss),
    ("broadcast-chain", broadcast_chain),
)

# The tensor-core kernels (inline PTX mma.sync, cp.async), which no device here can build:
# generated for a written-down profile of an NVIDIA GPU whose probe found them (an H200's
# limits), under each precision policy that takes them.
TENSOR_CORES = TargetProfile(
    device="NVIDIA-like GPU (profile: compute capability 9.0, 132 units, 48 KiB local)",
    dtypes=frozenset({DType.f32, DType.i32, DType.i64, DType.bool, DType.f64}),
    max_work_group_size=1024, local_mem_bytes=48 * 1024, compute_units=132,
    max_constant_args=9, device_type="gpu", native_vector_bytes=4, atomics64=True,
    max_work_item_sizes=(1024, 1024, 64), tensor_cores=TENSOR_CORE_SHAPES)
TENSOR_CORE_PROGRAMS: tuple[tuple[str, Callable[[], accy.Program], str], ...] = (
    ("gemm-tf32", gemm, "accy-default,kernelization{precision=tf32}"),
    ("gemm-3xtf32", gemm, "accy-default,kernelization{precision=3xtf32}"),
    ("gemm-f16", gemm_f16, PIPELINE),
    ("gemm-long-k-3xtf32", gemm_long_k, "accy-default,kernelization{precision=3xtf32}"),
    ("attention-3xtf32", attention, PIPELINE),
    ("attention-f16", attention_f16, PIPELINE),
)


# bench_gpu's default set at its full size, planned for an H100's saved profile (the one
# ab_gemm --plans-only reads), tensor maps planned offline: each program's generators and its
# kernels' entries and launch geometry (no source), so that a rule moving the GPU's plans of
# those programs shows in review
PLAN_PROFILE = Path(__file__).resolve().parents[1] / "papers" / "data" / "h100_profile.json"


def plans() -> list[str]:
    """The plans section: a header line a program, a line a kernel."""
    here = str(Path(__file__).resolve().parent)
    if here not in sys.path:
        sys.path.insert(0, here)
    import bench_gpu_programs as bp

    target = TargetProfile.load(PLAN_PROFILE)
    lines = [f"# {len(bp.PROGRAMS)} programs of bench_gpu's default set planned for "
             f"{target.device} ({PLAN_PROFILE.name}; tensor maps planned offline)", ""]
    with tma.offline():
        for name, spec in bp.PROGRAMS.items():
            dims = " ".join(f"{a}={n}" for a, n in spec.full.items())
            head = f"=== {name} ({spec.dtype}, {dims})"
            try:
                job = accy.prepare(bp.program(spec, spec.full), PIPELINE, target=target)
            except accy.AccyError as exc:  # shown, not raised, as render_program does
                lines += [head, f"!!! {type(exc).__name__}: {str(exc).strip()[:200]}"]
                continue
            lines.append(f"{head}: " + ", ".join(
                f"{g} {n}" for g, n in sorted(job.generators().items())))
            lines += [f"--- kernel {k.index}: {k.entry}, global {list(k.geometry.global_size)}, "
                      f"local {list(k.geometry.local_size)}" for k in job.kernel_summaries()]
    return [*lines, ""]


def render_program(name: str, make: Callable[[], accy.Program],
                   target: TargetProfile | None = None, pipeline: str = PIPELINE
                   ) -> list[str]:
    """The section of one program: a header, then each kernel's summary line and source."""
    lines = [f"=== {name}: {(make.__doc__ or '').strip()}"]
    try:
        pipe = parse_pipeline(PIPELINE).replacing(pipeline.split(",", 1)[1]).text() \
            if "," in pipeline else pipeline
        job = accy.prepare(make(), pipe, target=target or TargetProfile())
        kernels = job.kernel_summaries()
    except accy.AccyError as exc:  # shown, not raised: a failure is a diff like any other
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return [*lines, f"!!! {type(exc).__name__}: {first}", ""]
    for k in kernels:
        g = k.geometry
        lines.append(f"--- kernel {k.index}: {k.entry} (work item {k.work_item}, "
                     f"{k.schedule_kind.value}, global {list(g.global_size)}, "
                     f"local {list(g.local_size)}, {k.status.value if k.status else '-'})")
        lines.extend(job.kernel_source(k.index).rstrip("\n").splitlines())
    lines.append("")
    return lines


def generate() -> str:
    """The whole snapshot text (deterministic: same accy, same text)."""
    lines = [f"# accy kernel-diff snapshot: {len(PROGRAMS)} programs, pipeline {PIPELINE}, "
             f"target {TargetProfile().device}", ""]
    for name, make in PROGRAMS:
        lines.extend(render_program(name, make))
    lines += [f"# {len(TENSOR_CORE_PROGRAMS)} programs for target {TENSOR_CORES.device}", ""]
    for name, make, pipeline in TENSOR_CORE_PROGRAMS:
        lines.extend(render_program(f"{name} ({pipeline})", make, TENSOR_CORES, pipeline))
    return "\n".join([*lines, *plans()])


def check(path: Path = SNAPSHOT, text: str | None = None) -> tuple[bool, str]:
    """Whether ``path`` holds exactly the generated text, and the unified diff when not."""
    text = generate() if text is None else text
    old = path.read_text() if path.exists() else ""
    if old == text:
        return True, ""
    diff = difflib.unified_diff(old.splitlines(keepends=True), text.splitlines(keepends=True),
                                fromfile=str(path), tofile="generated")
    return False, "".join(diff)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", nargs="?", const=str(SNAPSHOT), metavar="FILE",
                      help="compare with a snapshot (default: %(const)s); exit 1 with a diff")
    mode.add_argument("--update", nargs="?", const=str(SNAPSHOT), metavar="FILE",
                      help="rewrite a snapshot (default: %(const)s)")
    args = parser.parse_args(argv)
    text = generate()
    if args.check:
        same, diff = check(Path(args.check), text)
        if same:
            print(f"kernels unchanged ({args.check})")
            return 0
        sys.stdout.write(diff)
        print(f"\ngenerated kernels differ from {args.check}; review the diff, then run "
              f"experiments/kernel_diff.py --update")
        return 1
    if args.update:
        Path(args.update).write_text(text)
        print(f"wrote {args.update}")
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
