"""``accy demo``: build the seed's programs, prepare them, print everything, run them."""

from __future__ import annotations

import numpy as np

from accy.backends.registry import get_backend
from accy.builder import Builder, FunctionBuilder, Value
from accy.ir.interpret import interpret
from accy.ir.printer import print_program
from accy.ir.program import Program, Stage
from accy.ir.types import DType
from accy.job import PreparedJob, prepare


def _program(name: str, arity: int, size: int, body, dtype: DType = DType.f32) -> Program:
    b = Builder()
    t = b.tensor(dtype, (size,))
    f = b.begin_function(name, [t] * arity, "abc"[:arity])
    f.return_(*body(f, *(f.param(i) for i in range(arity))))
    f.finish()
    return b.finish()


def _chain(f: FunctionBuilder, a: Value, b: Value) -> tuple[Value, ...]:
    return (f.max(f.sub(f.mul(f.add(a, b), b), b), b),)


def _const_add(f: FunctionBuilder, a: Value) -> tuple[Value, ...]:
    return (a * (f.constant(np.full(a.shape, 1.0, np.float32)) + f.constant(2.0)),)


def demo_programs(size: int) -> list[tuple[str, Program]]:
    """The seed's programs: add, add+mul (two results), the add/mul/sub/max chain, a fold."""
    return [
        ("a + b (seed row 3)", _program("add", 2, 4, lambda f, a, b: (a + b,))),
        ("(a + b, (a + b) * c) (seed row 4)",
         _program("add_mul", 3, 4, lambda f, a, b, c: (a + b, (a + b) * c))),
        ("max(((a + b) * b) - b, b) (seed row 5)", _program("chain", 2, 16, _chain)),
        (f"the same chain on {size} elements", _program("chain_large", 2, size, _chain)),
        ("a * (1 + 2): the constant add folds away (seed row 8)",
         _program("fold", 1, 8, _const_add)),
    ]


def _show_job(job: PreparedJob, show_source: bool) -> None:
    print(f"pipeline: {job.pipeline.text()}")
    print("  stage      time (ms)  passes  hits  misses  fingerprint")
    for r in job.records:
        print(f"  {r.stage.value:<9} {r.elapsed_ns / 1e6:10.3f}  {r.pass_runs:6d}  "
              f"{r.analysis_hits:4d}  {r.analysis_misses:6d}  {r.fingerprint}")
    print(f"kernels: {job.kernel_count}")
    for s in job.kernel_summaries():
        print(f"  [{s.index}] {s.entry}: {s.argument_count} args, body {s.body_fingerprint[:12]}, "
              f"{s.schedule_kind.value}, global {s.geometry.global_size} local "
              f"{s.geometry.local_size}, {s.status.value}")
        if show_source:
            print("      " + job.kernel_source(s.index).replace("\n", "\n      ").rstrip())


def run_demo(device: str | None = None, size: int = 1 << 20, show_source: bool = True,
             seed: int = 0) -> float:
    """Prepare and run the demo programs; returns the worst relative error against numpy."""
    rng = np.random.default_rng(seed)
    backend = get_backend()
    runtime, target = backend.open(device)
    print(f"device: {backend.describe_device(runtime)}\ntarget profile: {target.describe()}")
    worst = 0.0
    for title, program in demo_programs(size):
        print(f"\n=== {title} ===")
        print(print_program(program), end="")
        job = prepare(program, target=target)
        contracted = job.products[Stage.contract].program
        if contracted != program:
            print("after the contract stage:\n" + print_program(contracted), end="")
        _show_job(job, show_source)
        fn = program.function()
        inputs = [rng.standard_normal(p.type.shape).astype(np.float32) for p in fn.params]
        exe = job.executable(device=runtime)
        exe(*inputs)  # the first call builds and warms up; time the second
        outputs = exe(*inputs)
        expected = interpret(program, inputs)
        for i, (got, want) in enumerate(zip(outputs, expected, strict=True)):
            scale = max(float(np.max(np.abs(want))), np.finfo(np.float32).tiny)
            err = float(np.max(np.abs(got.astype(np.float64) - want))) / scale
            worst = max(worst, err)
            print(f"result {i}: max error {err:.3g} relative to numpy's magnitude")
        times = ", ".join(f"{ns / 1e3:.1f} us" for ns in exe.last_kernel_ns)
        print(f"ran on {backend.describe_device(runtime)}: kernel time {times}")
    print(f"\nworst relative error over all programs: {worst:.3g}")
    return worst
