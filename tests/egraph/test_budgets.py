"""Budgets that hold: the worker killed at the deadline, bounded steps after a node-limit
overshoot, region-by-region saturation, budgets that scale with the program."""

from __future__ import annotations

import pickle
import time

import numpy as np
import pytest

import accy
from accy.builder import einsum, trace
from accy.egraph import defaults
from accy.egraph.convert import to_egraph
from accy.egraph.driver import saturate
from accy.egraph.split import split, stitch
from accy.ir.interpret import interpret
from accy.ir.ops import Op
from accy.passes import rewrite_worker as worker
from accy.passes import rewriting
from accy.passes.tensor.saturate import DEFAULT_RULESETS, Saturate

# A bound that holds on a very loaded machine: the mechanism (a kill at the deadline) is what
# the tests check; the time only has to be far below the minutes the run would take.
GENEROUS_S = 20.0


def elementwise_dag(ops: int, seed: int = 0) -> accy.Program:
    """Random adds, multiplies, subtractions and maxima over four vectors, values reused
    often: fast-math's reassociation and distribution make its e-graph explode."""
    rng = np.random.default_rng(seed)
    b = accy.Builder()
    t = b.tensor(accy.DType.f32, (16,))
    f = b.begin_function("dag", [t] * 4, ["a", "b", "c", "d"])
    pool = [f.param(i) for i in range(4)]
    for _ in range(ops):
        x = pool[len(pool) - 1 - min(int(rng.geometric(0.2)) - 1, len(pool) - 1)]
        y = pool[int(rng.integers(len(pool)))]
        k = int(rng.integers(5))
        pool.append(x + y if k == 0 else x * y if k == 1 else x - y if k == 2
                    else accy.maximum(x, y) if k == 3 else x * 2.0)
    f.return_(pool[-1])
    f.finish()
    return b.finish()


def _inputs(program: accy.Program, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(0.5, 1.5, p.type.shape).astype(np.float32)
            for p in program.function().params]


@pytest.fixture(scope="module")
def fast_names() -> tuple[str, ...]:
    return rewriting.select(DEFAULT_RULESETS, fast_math=True)


def test_explosive_program_is_killed_at_the_deadline_keeping_the_last_good_iteration(
        fast_names):
    worker.warm_up()  # start-up is not what this test times
    program = elementwise_dag(1500)  # step 4 of fast-math grows it 40x and takes minutes here
    limit = 3.0
    start = time.perf_counter()
    out = rewriting.rewrite_program(program, DEFAULT_RULESETS, fast_names, iterations=12,
                                    node_limit=10**8, time_limit_s=limit, cost="flops-bytes",
                                    isolate=True)
    elapsed = time.perf_counter() - start
    assert elapsed < limit + GENEROUS_S
    assert out.worker in ("killed", "finished")  # finished: it predicted the explosion
    if out.report is not None:
        assert out.report.stop_reason == "time_limit"
    if out.changed:  # a good iteration came back before the deadline: it is kept
        assert out.cost_after < out.cost_before
        xs = _inputs(program)
        np.testing.assert_allclose(interpret(out.program, xs)[0], interpret(program, xs)[0],
                                   rtol=1e-4)


def test_unpredicted_step_is_killed(fast_names):
    """A limit far below what building the e-graph of 1500 operations takes: the worker
    cannot send anything before the deadline, so it is killed and the input is kept."""
    worker.warm_up()
    program = elementwise_dag(1500)
    start = time.perf_counter()
    out = rewriting.rewrite_program(program, DEFAULT_RULESETS, fast_names, iterations=12,
                                    node_limit=10**8, time_limit_s=0.005, cost="flops-bytes",
                                    isolate=True)
    assert time.perf_counter() - start < 0.005 + GENEROUS_S
    assert out.worker == "killed" and not out.changed and out.program is program
    worker.warm_up()  # a replacement was started at the kill: it becomes ready


def test_killed_worker_keeps_its_checkpoint_or_the_input(fast_names):
    """Whatever the worker sent before the kill (a checkpoint's extraction) is kept if it is
    cheaper, else the input: never a dearer or unequal program."""
    worker.warm_up()
    program = elementwise_dag(1500)
    out = rewriting.rewrite_program(program, DEFAULT_RULESETS, fast_names, iterations=12,
                                    node_limit=10**8, time_limit_s=0.3, cost="flops-bytes",
                                    isolate=True)
    assert out.worker in ("killed", "finished")
    if out.changed:
        assert out.cost_after < out.cost_before
        xs = _inputs(program)
        np.testing.assert_allclose(interpret(out.program, xs)[0], interpret(program, xs)[0],
                                   rtol=1e-4)
    else:
        assert out.program is program
    worker.warm_up()


def test_first_step_overshoot_keeps_a_bounded_iteration(fast_names):
    program = elementwise_dag(400)
    eg, _ = rewriting._WARM.take(DEFAULT_RULESETS, fast_names)
    eg.push()
    peg = to_egraph(program, eg)
    free = saturate(peg, DEFAULT_RULESETS, rules=fast_names, iterations=1)
    for _ in range(free.checkpoints + 1):
        eg.pop()
    eg.push()
    peg = to_egraph(program, eg)
    grown = free.e_nodes - free.initial_e_nodes
    limit = free.initial_e_nodes + grown // 3  # the unbounded first step overshoots it
    report = saturate(peg, DEFAULT_RULESETS, rules=fast_names, iterations=3, node_limit=limit)
    assert not report.iterations[0].kept  # the first step overshot and was rolled back
    assert report.bounded_match_limit is not None
    assert report.kept_iterations >= 1 and report.e_nodes > report.initial_e_nodes
    assert report.e_nodes <= limit
    for _ in range(report.checkpoints + 1):
        eg.pop()


def _two_regions() -> accy.Program:
    @accy.function
    def two(a: accy.f32[8], b: accy.f32[8], c: accy.f32[8]):
        x = a * b + a * c  # factors in the first region
        y = (x * 1.0) + (x * 1.0)
        return y.exp().T.T + x

    return two


def test_split_and_stitch_round_trip():
    program = _two_regions()
    ops = rewriting.operations(program)
    regions = split(program, -(-ops // 2))
    assert regions is not None and len(regions) == 2
    assert sum(r.size for r in regions) == ops
    assert stitch(program, regions, [r.program for r in regions]) == program
    assert split(program, 0) is None and split(program, ops) is None


def _unrolled(steps: int) -> accy.Program:
    """A loop unrolled: step t reads xs[t] through a projection computed from parameters only
    (the depth-first order reaches every step's projection before the first step)."""
    def loop(xs, h, w):
        for t in range(steps):
            h = (einsum("k,kj->j", xs[t:t + 1].reshape(4), w) + h).tanh()
        return h

    return trace(loop, accy.f32[steps, 4], accy.f32[4], accy.f32[4, 4])


def test_split_keeps_an_unrolled_loops_steps_together():
    program = _unrolled(12)
    regions = split(program, -(-rewriting.operations(program) // 3))
    assert regions is not None and len(regions) == 3
    # the state and a step's projections cross a cut: 7 values exported in all, where the
    # program's own (depth-first) order exports 13, most later steps' projections from the
    # first region
    assert sum(len(r.outputs) for r in regions) == 7
    assert stitch(program, regions, [r.program for r in regions]) == program


def test_region_by_region_matches_whole_program_and_interpret(fast_names):
    program = _two_regions()
    ops = rewriting.operations(program)
    budget = dict(iterations=12, node_limit=20_000, time_limit_s=30.0, cost="flops-bytes")
    whole = rewriting.rewrite_program(program, DEFAULT_RULESETS, fast_names, **budget)
    halves = rewriting.rewrite_program(program, DEFAULT_RULESETS, fast_names, **budget,
                                       region_size=-(-ops // 2))
    assert len(halves.regions) == 2 and whole.changed and halves.changed
    assert halves.cost_after == whole.cost_after
    xs = _inputs(program)
    for out in (whole, halves):
        np.testing.assert_allclose(interpret(out.program, xs)[0], interpret(program, xs)[0],
                                   rtol=1e-5)


def test_defaults_scale_with_size():
    assert defaults.scaled_time_limit(10) == defaults.DEFAULT_TIME_LIMIT_S
    assert defaults.scaled_time_limit(1000) == defaults.DEFAULT_TIME_LIMIT_S
    assert defaults.scaled_time_limit(10_000) == 10 * defaults.DEFAULT_TIME_LIMIT_S
    assert defaults.scaled_node_limit(100) == defaults.DEFAULT_NODE_LIMIT
    assert defaults.scaled_node_limit(5000) == 100_000
    s = Saturate()
    assert (s.node_limit, s.time_limit, s.region_size) == (
        defaults.DEFAULT_NODE_LIMIT, 0.0, defaults.DEFAULT_REGION_SIZE)
    out = rewriting.rewrite_program(elementwise_dag(40), DEFAULT_RULESETS,
                                    rewriting.select(DEFAULT_RULESETS), iterations=2,
                                    node_limit=None, time_limit_s=None, cost="flops-bytes")
    assert out.time_limit_s == defaults.DEFAULT_TIME_LIMIT_S
    assert out.report is None or out.report.node_limit == defaults.DEFAULT_NODE_LIMIT


def test_region_size_option_in_pipeline_text():
    p = accy.parse_pipeline("saturate{region-size=500 time-limit=1.5}")
    s = p.passes[0] if hasattr(p, "passes") else list(p)[0]
    assert s.region_size == 500 and s.time_limit == 1.5
    with pytest.raises(Exception):  # noqa: B017,PT011 - the option's range is checked
        accy.parse_pipeline("saturate{region-size=-1}")


# a script's program of over 100 operations (saturated in a worker when one is ready)
SCRIPT_PROGRAM = (
    "import accy\n"
    "from accy.passes import rewriting\n"
    "from accy.passes.tensor.saturate import DEFAULT_RULESETS\n"
    "@accy.function\n"
    "def f(x: accy.f32[8, 8], w: accy.f32[8, 8]):\n"
    "    y = x\n"
    "    for i in range(40):\n"
    "        y = (y @ w).T.T + (x * 1.0) + (y @ w).T.T\n"
    "    return y\n")


def run_script(folder, text: str) -> str:
    """The standard output of ``text`` run as a script of its own in ``folder`` (a fresh
    interpreter, ``__main__`` without a guard), which must succeed."""
    import subprocess
    import sys

    script = folder / "script.py"
    script.write_text(text)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, cwd=folder)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_script_without_a_main_guard_saturates_in_a_worker(tmp_path):
    # multiprocessing's spawn ran the caller's main module again in each worker, so a script
    # without ``if __name__ == "__main__":`` failed; workers are plain interpreters now
    runs = tmp_path / "runs.txt"
    stdout = run_script(tmp_path,
        "import os\n"
        f"open({str(runs)!r}, 'a').write(f'{{os.getpid()}}\\n')\n"
        + SCRIPT_PROGRAM +
        "names = rewriting.select(DEFAULT_RULESETS)\n"
        "out = rewriting.rewrite_program(f, DEFAULT_RULESETS, names, iterations=4,\n"
        "    node_limit=None, time_limit_s=60.0, cost='flops-bytes', isolate=True)\n"
        "print('worker:', out.worker, 'changed:', out.changed)\n")
    assert "worker: finished changed: True" in stdout
    assert len(runs.read_text().split()) == 1  # the script's top level ran once


def test_the_first_prepare_of_a_process_saturates_without_waiting_for_a_worker(tmp_path):
    """A fresh process has no warm worker: the automatic choice saturates in the process
    (``late``) instead of spending its budget on a worker's start, which left Inception-v3's
    first ``accy.prepare`` with the worker killed and nothing saturated."""
    stdout = run_script(tmp_path,
        SCRIPT_PROGRAM +
        "job = accy.prepare(f, 'saturate{time-limit=30}')\n"
        "(run,) = [p for r in job.records for p in r.passes if p.spec.startswith('saturate')]\n"
        "stats = dict(run.stats)\n"
        "cheaper = stats['cost-after'] < stats['cost-before']\n"
        "print('worker:', stats['worker'], 'cheaper:', cheaper)\n")
    assert "worker: late cheaper: True" in stdout


def test_a_cost_model_of_the_callers_script_saturates_in_process(monkeypatch):
    # a model class defined in the caller's script pickles by reference to __main__, which the
    # worker's interpreter does not import: such a model is priced in the calling process
    import pickle
    import sys
    import types

    from accy.egraph.cost import cost_model

    model = cost_model("flops-bytes")
    assert worker.eligible(model, tuple(DEFAULT_RULESETS))
    script = types.ModuleType("__main__")
    script.ScriptModel = type("ScriptModel", (type(model),), {"__module__": "__main__"})
    monkeypatch.setitem(sys.modules, "__main__", script)
    scripted = object.__new__(script.ScriptModel)
    scripted.__dict__.update(model.__dict__)
    assert b"__main__" in pickle.dumps(scripted)
    assert not worker.eligible(scripted, tuple(DEFAULT_RULESETS))


def test_patience_in_the_worker_keeps_the_cheapest_extraction():
    """The worker counts no-gain extractions at its checkpoints: whatever it stops at, the
    result is the cheapest extraction, as cheap as the run without patience."""
    worker.warm_up()

    @accy.function
    def chain(a: accy.f32[32, 4], b: accy.f32[4, 32], c: accy.f32[32, 4]):
        return (a @ b) @ c

    names = rewriting.select(DEFAULT_RULESETS, fast_math=True)
    outs = [rewriting.rewrite_program(chain, DEFAULT_RULESETS, names, iterations=12,
                                      node_limit=None, time_limit_s=60.0, cost="flops-bytes",
                                      isolate=True, patience=p) for p in (0, 1)]
    assert all(o.worker == "finished" for o in outs)
    assert outs[1].report.stop_reason in ("saturated", "no_gain")
    assert outs[1].cost_after == outs[0].cost_after < outs[0].cost_before


@accy.function
def _recomputed(a: accy.f32[64], b: accy.f32[64]):
    u = a * b  # regions of 3: u and its exps | b * a, * 1, u + ... | the sum
    return u.exp().exp() + (u + (b * a) * 1.0)  # b * a, in the second region, is u


def test_region_context_finds_what_a_region_recomputes():
    names = rewriting.select(DEFAULT_RULESETS)
    budget = dict(iterations=12, node_limit=20_000, time_limit_s=30.0, cost="flops-bytes",
                  region_size=3, isolate=False)
    outs = {depth: rewriting.rewrite_program(_recomputed, DEFAULT_RULESETS, names, **budget,
                                             region_context=depth) for depth in (0, 1, 2)}
    assert len(outs[0].regions) == 3  # b * a stays: u is opaque there
    assert sum(n.op is Op.MUL for n in outs[0].program.nodes()) == 2
    for depth in (1, 2):
        out = outs[depth]
        assert out.changed and out.cost_after < outs[0].cost_after
        assert sum(n.op is Op.MUL for n in out.program.nodes()) == 1
        xs = _inputs(_recomputed)
        np.testing.assert_allclose(interpret(out.program, xs)[0],
                                   interpret(_recomputed, xs)[0], rtol=1e-6)
    # the same through the worker, whose task carries the context
    worker.warm_up()
    out = rewriting.rewrite_program(_recomputed, DEFAULT_RULESETS, names,
                                    **{**budget, "isolate": True}, region_context=2)
    assert out.cost_after == outs[2].cost_after


def test_split_context_defines_the_inputs():
    regions = split(_recomputed, 3, context=2)
    assert regions is not None and regions[0].context is None  # it reads parameters only
    ctx = regions[1].context
    assert [regions[1].inputs[i].op for i in ctx.defines] == [Op.MUL]  # u
    assert ctx.program.functions[0].params == regions[1].program.functions[0].params
    # the last region reads exp(exp(u)) and u + ...: both need values it does not read
    assert regions[2].context is None
    assert split(_recomputed, 3, context=0)[1].context is None
    with pytest.raises(ValueError, match="context must be a non-negative int"):
        split(_recomputed, 3, context=-1)


def test_patience_counts_gains_above_rounding():
    assert defaults.pays(90, 100) and not defaults.pays(100, 100)
    best = 372_196_079_790  # a cost model's rounding shaves two units: not a gain
    assert not defaults.pays(best - 2, best) and defaults.pays(best - best // 1000, best)


def test_contract_passes_scale_their_budgets_and_split_large_programs():
    # canonicalize kept a fixed second and one e-graph: a 10,000-op program was killed before
    # its first extraction and gained nothing; now its budgets scale as saturate's do
    from accy.passes.contract.canonicalize import Canonicalize
    from accy.passes.contract.constant_fold import ConstantFold

    for p in (Canonicalize(), ConstantFold()):
        assert (p.time_limit, p.region_size) == (0.0, defaults.DEFAULT_REGION_SIZE)

    @accy.function
    def ones(x: accy.f32[8]):
        for _ in range(60):
            x = (x * 1.0).exp() + x
        return x

    whole = accy.prepare(ones, "canonicalize", until="contract")
    cut = accy.prepare(ones, "canonicalize{region-size=40}", until="contract")
    stats = dict(cut.records[-1].passes[0].stats)
    assert "regions-saturated" in stats and "regions-saturated" not in dict(
        whole.records[-1].passes[0].stats)
    # every x * 1.0 is gone either way
    for job in (whole, cut):
        assert not any(n.op is Op.MUL for n in job.product.program.nodes())


def test_large_constants_travel_to_the_worker_as_references():
    """The worker's e-graph holds large constants by reference, so their bytes stay here: the
    task carries references (a uniform constant, which enters e-graphs as ``full``, and small
    ones keep their bytes), and the worker's extraction comes back with the original bytes,
    the same program as a run in this process."""
    rng = np.random.default_rng(0)
    w1, w2 = (rng.standard_normal((300, 300)).astype(np.float32) for _ in range(2))
    ones, small = np.ones((300, 300), np.float32), rng.standard_normal(300).astype(np.float32)

    def fn(x):
        y = accy.transpose(accy.transpose(x @ accy.constant(w1), (1, 0)), (1, 0))
        y = (y * 1.0 + accy.constant(small)) @ accy.constant(ones)
        return y @ accy.transpose(accy.constant(w2), (1, 0)) + y @ accy.constant(w1)

    program = trace(fn, accy.f32[8, 300], name="f")
    model = rewriting.capped("flops-bytes", program, 1 << 16)
    names = rewriting.select(DEFAULT_RULESETS)
    task = worker.Task(program, tuple(DEFAULT_RULESETS), tuple(names), 4, 20_000, 60.0, None,
                       model, "greedy-dag", {}, 0)
    refs = worker._by_reference(task)
    assert sorted(len(b) for _, b in refs.values()) == [w1.nbytes, w2.nbytes]  # not ones, small
    shipped = len(worker._dumps(task, lambda b: refs[id(b)][0] if id(b) in refs else None))
    assert shipped < ones.nbytes + 50_000 < 3 * w1.nbytes < len(pickle.dumps(task))
    worker.warm_up()

    def run(isolate: bool) -> rewriting.Outcome:
        return rewriting.rewrite_program(trace(fn, accy.f32[8, 300], name="f"),
                                         DEFAULT_RULESETS, names, iterations=4,
                                         node_limit=None, time_limit_s=GENEROUS_S,
                                         cost="flops-bytes", isolate=isolate)

    here = run(False)
    x = [rng.standard_normal((8, 300)).astype(np.float32)]
    # twice: the second task's stand-ins meet nodes the first interned, whose stand-ins went
    # back as zeros before they were recognised by their bytes
    for _ in range(2):
        out = run(True)
        assert out.worker == "finished" and out.changed
        assert out.program == here.program
        np.testing.assert_allclose(interpret(out.program, x)[0], interpret(program, x)[0],
                                   rtol=1e-4, atol=1e-3)
