"""Deep programs do not crash (issue #12 item 3).

A traced chain of N elementwise ops is a path N nodes deep, so every walk over programs and
kernels must be iterative. These tests build programs far deeper than Python's recursion
limit and take them through the text form, the interpreter, every stage and PoCL.

Runtime: the 20,000-op chain spends most of its time in PoCL compiling 20 kernels of 1,000 ops
(fusion-planning's ``max-ops`` default); on a loaded 2-core machine the test takes 1-2 minutes.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import accy
from accy.differential import assert_close
from accy.ir.interpret import interpret
from accy.ir.parser import parse_program
from accy.ir.printer import print_program
from accy.ir.program import Program, Stage
from accy.ir.verify import verify

DEEP = 20_000  # ops in the long chain: 20x Python's default recursion limit
SIZE = 256


def chain(ops: int) -> Program:
    """``x = x * 1.0001 + 0.5`` repeated: ``ops`` ops, each reading the one before."""
    b = accy.Builder()
    fb = b.begin_function("chain", [accy.f32[SIZE]])
    x = fb.param(0)
    for _ in range(ops // 2):
        x = x * 1.0001 + 0.5
    fb.return_(x)
    fb.finish()
    return b.finish()


def mixed_chain(ops: int) -> Program:
    """Add, mul and max with a second input in turn: ``ops`` ops deep."""
    b = accy.Builder()
    fb = b.begin_function("mixed", [accy.f32[SIZE], accy.f32[SIZE]])
    x, y = fb.param(0), fb.param(1)
    for i in range(ops):
        x = (x + y, x * 0.999, accy.maximum(x, y))[i % 3]
    fb.return_(x)
    fb.finish()
    return b.finish()


def random_dag(nodes: int, seed: int = 0, window: int = 4) -> Program:
    """A random elementwise DAG: each op reads the previous value (so the DAG is as deep as it
    is large) and, for binary ops, a random one of the ``window`` values before it or a
    parameter (random sharing, broadcasts included).

    The window keeps sharing local: fusion-planning gives a value consumed by two kernels its
    own kernel, so sharing across a ``max-ops`` cut splits the values near the cut into small
    kernels; max-ops therefore cuts only where no earlier value is read later, which a short
    window makes common."""
    rng = np.random.default_rng(seed)
    b = accy.Builder()
    fb = b.begin_function("dag", [accy.f32[8, 32], accy.f32[32], accy.f32[8, 32]])
    params = [fb.param(0), fb.param(1), fb.param(2)]
    vals = [params[2]]
    unary = (lambda a: a.tanh(), lambda a: -a, abs, lambda a: a.sigmoid(), lambda a: a * 0.5)
    binary = (lambda a, c: a + c, lambda a, c: a * c, lambda a, c: a - c, accy.maximum,
              accy.minimum)
    while len(vals) < nodes:
        a = vals[-1]
        if rng.random() < 0.3:
            vals.append(unary[rng.integers(len(unary))](a))
        else:
            pool = params + vals[-window:]
            c = pool[rng.integers(len(pool))]
            vals.append(binary[rng.integers(len(binary))](a, c))
    fb.return_(vals[-1])
    fb.finish()
    return b.finish()


def test_deep_program_text_interpret_and_pickle():
    p = chain(DEEP)
    assert len(p.functions[0].nodes()) > DEEP
    text = print_program(p)
    back = parse_program(text)
    assert back == p and back.fingerprint() == p.fingerprint()
    assert print_program(back) == text
    verify(back, Stage.semantic)
    assert pickle.loads(pickle.dumps(p)) == p
    x = np.linspace(-1, 1, SIZE, dtype=np.float32)
    want = x
    for _ in range(DEEP // 2):
        want = want * np.float32(1.0001) + np.float32(0.5)
    (got,) = interpret(back, [x])
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_20000_op_chain_prepares_and_runs_on_pocl(device):
    p = mixed_chain(DEEP)
    job = accy.prepare(p, "accy-default", device="pocl")
    # max-ops (1000 by default) splits the chain: one huge kernel takes PoCL minutes to compile
    assert job.kernel_count == DEEP // 1000
    rng = np.random.default_rng(1)
    x, y = (rng.standard_normal(SIZE).astype(np.float32) for _ in range(2))
    (got,) = job.run(x, y)
    (want,) = interpret(p, [x, y])
    assert_close([got], [want], p, [x, y])
    ref = x
    for i in range(DEEP):
        ref = (ref + y, ref * np.float32(0.999), np.maximum(ref, y))[i % 3]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_random_5000_node_dag_through_every_stage(device):
    p = random_dag(5000)
    assert len(p.functions[0].nodes()) >= 5000
    assert parse_program(print_program(p)) == p
    rng = np.random.default_rng(2)
    inputs = [rng.standard_normal(n.type.shape).astype(np.float32)
              for n in p.functions[0].params]
    want = interpret(p, inputs)
    job = p
    for stage in Stage:
        if stage is Stage.semantic:
            continue
        job = accy.prepare(job, "accy-default", device="pocl", until=stage)  # verifies each pass
        assert job.stage is stage
    got = job.run(*inputs)
    assert_close(got, want, p, inputs)


@pytest.mark.parametrize("device_kind", ["cpu", "gpu"])
def test_unsplit_deep_groups_kernelize(device_kind):
    """Without the group cap, a 2,000-op chain is one kernel's body: for the loop nest (CPU),
    the vectorised elementwise generator (GPU), and as the prologue of reductions and of row
    softmax."""
    b = accy.Builder()
    for name, tail in (("flat", lambda x: x), ("total", lambda x: x.sum(axes=1)),
                       ("soft", lambda x: x.softmax())):
        fb = b.begin_function(name, [accy.f32[64, 64]])
        x = fb.param(0)
        for _ in range(1000):
            x = x * 1.0001 + 0.5
        fb.return_(tail(x))
        fb.finish()
    pipe = accy.parse_pipeline("accy-default").replacing("fusion-planning{max-ops=0}")
    target = accy.TargetProfile(device_type=device_kind, compute_units=8)
    job = accy.prepare(b.finish(), pipe, target=target, until=Stage.kernel)
    assert job.kernel_count == 3
    assert set(job.generators()) >= {"vector-flat" if device_kind == "gpu" else "loop-nest",
                                     "tree-reduction"}
    for i in range(3):  # a line per op at least
        assert len(job.kernel_source(i).splitlines()) >= 2000
