"""What the tiled-contraction test modules share: a CPU profile, programs of one einsum and
its epilogue, and a check against numpy in float64 (the ``profiles`` fixture is in
conftest.py)."""

from __future__ import annotations

import numpy as np

import accy
from accy.builder import einsum
from accy.ir.types import DType, TensorType
from accy.target import TargetProfile

AVX512 = TargetProfile(device="avx512-like", device_type="cpu", compute_units=2,
                       max_work_group_size=4096, local_mem_bytes=1 << 20, native_vector_bytes=64)


def program(spec: str, shapes: list[tuple[int, ...]], dtype: DType = DType.f32,
            epilogue=None, extra: list[tuple[int, ...]] = ()) -> accy.Program:
    b = accy.Builder()
    f = b.begin_function("f", [TensorType(s, dtype) for s in [*shapes, *extra]])
    xs = [f.param(i) for i in range(len(shapes) + len(extra))]
    out = einsum(spec, xs[0], xs[1])
    results = epilogue(out, *xs[2:]) if epilogue else out
    f.return_(*(results if isinstance(results, tuple) else (results,)))
    f.finish()
    return b.finish()


def check(device, prog: accy.Program, target: TargetProfile, reference, seed: int = 0
          ) -> None:
    job = accy.prepare(prog, target=target)
    assert any(k.fixed_local_size for k in job.kernels), "tiled-contraction was not chosen"
    fn = prog.functions[0]
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal(p.type.shape).astype(p.type.dtype.numpy) for p in fn.params]
    outs = job.run(*inputs, device=device)
    refs = reference(*(x.astype(np.float64) for x in inputs))
    refs = refs if isinstance(refs, tuple) else (refs,)
    tol = 1e-5 if fn.params[0].type.dtype is DType.f32 else 1e-12
    for out, ref in zip(outs, refs, strict=True):
        assert out.shape == ref.shape and out.dtype == fn.params[0].type.dtype.numpy
        scale = max(1.0, float(np.abs(ref).max()))
        np.testing.assert_allclose(out, ref, rtol=tol, atol=tol * scale * 8)


def operand_shapes(form: str, size: dict[str, int]) -> list[tuple[int, ...]]:
    """The shapes of an einsum ``form``'s two operands at letter sizes ``size``."""
    return [tuple(size[c] for c in side) for side in form.split("->")[0].split(",")]


def matches_twice(device, job, spec: str, shapes, relu: bool, dtype: DType = DType.f32,
                  seed: int = 4) -> None:
    """``job`` (the einsum ``spec``, a relu epilogue or none) against numpy in float64 on
    ``device``, called twice with new inputs (scratch copies are rewritten each call)."""
    rng = np.random.default_rng(seed)
    for _ in range(2):
        x, y = (rng.standard_normal(s).astype(dtype.numpy) for s in shapes)
        (out,) = job.run(x, y, device=device)
        ref = np.einsum(spec, x.astype(np.float64), y.astype(np.float64))
        ref = np.maximum(ref, 0) if relu else ref
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(ref).max()))
