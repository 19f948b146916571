"""The sharing search (``accy.egraph.sharing``): merged contractions come out of extraction."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import accy
import rewrites
from accy.cli import main as accy_main
from accy.differential import check_end_to_end
from accy.egraph import sharing
from accy.egraph.convert import extract, to_egraph
from accy.egraph.cost import program_cost
from accy.egraph.driver import saturate
from accy.egraph.live import LiveSelection
from accy.ir.ops import Op
from accy.passes import rewriting
from accy.passes.pipelines import PIPELINES
from accy.testing import programs

rewrites.load()
RULESETS = ("canonical", "algebra", "einsum", "layout", "concat", "merge")
MULTI = sorted(n for n, info in rewrites.RULES.items() if info.multi)


@pytest.fixture(scope="module")
def bench(experiment_script):
    return experiment_script("bench_tensat")


def _einsums(program: accy.Program) -> int:
    return sum(n.op is Op.EINSUM for n in program.nodes())


def _saturated(program: accy.Program, iterations: int = 4):
    peg = to_egraph(program)
    saturate(peg, RULESETS, rules=rewriting.select(RULESETS), iterations=iterations,
             node_limit=50_000, time_limit_s=600, capped=MULTI, capped_iterations=2)
    return peg


@pytest.mark.parametrize("name", ["nasrnn", "inception", "bert_attention"])
def test_shared_merges_are_extracted_where_they_pay(bench, name):
    sz = bench.SIZES["tiny"]
    program, merged = bench.PROGRAMS[name](sz), bench.PROGRAMS[name](sz, merged=True)
    peg = _saturated(program)
    before = program_cost(program, "kernels")
    alone = extract(peg, "kernels", input_cost=before, options={"sharing": False})
    shared = extract(peg, "kernels", input_cost=before)
    # per-class extraction keeps every contraction: a slice alone costs the whole merge
    assert _einsums(alone.program) == _einsums(program)
    assert shared.sharing is not None and shared.sharing.shares_kept >= 1
    assert shared.cost == program_cost(shared.program, "kernels")
    assert shared.cost <= program_cost(merged, "kernels") < alone.cost
    assert _einsums(shared.program) == _einsums(merged)


def test_sharing_never_takes_a_merge_the_cost_model_prices_dearer(bench):
    program = bench.nasrnn(bench.SIZES["small"])
    peg = _saturated(program, iterations=3)
    before = program_cost(program, "flops-bytes")  # concatenating weights costs bytes
    out = extract(peg, "flops-bytes", input_cost=before)
    assert out.cost <= before and _einsums(out.program) == _einsums(program)


def test_tree_extraction_has_no_sharing_search(bench):
    peg = _saturated(bench.nasrnn(bench.SIZES["tiny"]), iterations=2)
    assert extract(peg, "kernels", extractor="tree").sharing is None


def test_the_work_cap_stops_the_search_and_keeps_what_it_found(bench, monkeypatch):
    program = bench.nasrnn(bench.SIZES["tiny"])
    peg = _saturated(program)
    monkeypatch.setattr(sharing, "MAX_WORK", -1)
    out = extract(peg, "kernels")
    assert out.sharing.stopped == "work" and out.sharing.saved == 0
    assert out.cost <= program_cost(program, "kernels")


def _walked(live: LiveSelection, roots: list[int]) -> int:
    seen: set[int] = set()
    stack = list(roots)
    total = 0
    while stack:
        c = stack.pop()
        if c not in seen:
            seen.add(c)
            total += live.picks[c].own
            stack.extend(live.picks[c].operands)
    return total


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(max_nodes=12, functions=(1, 2)))
def test_every_kept_move_is_priced_right_and_lowers_the_cost(p):
    checked = []
    commit, init = LiveSelection.commit, LiveSelection.__init__

    def recording_init(self, picks, roots):
        self.roots_ = list(roots)
        init(self, picks, roots)

    def checked_commit(self):
        assert self.total == _walked(self, self.roots_)
        checked.append(self.total)
        commit(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(LiveSelection, "__init__", recording_init)
        mp.setattr(LiveSelection, "commit", checked_commit)
        peg = to_egraph(p)
        saturate(peg, ("canonical", "algebra", "activation", "layout"), iterations=3,
                 time_limit_s=600)
        without = extract(peg, "kernels", options={"sharing": False})
        out = extract(peg, "kernels")
    assert out.cost == program_cost(out.program, "kernels") <= without.cost
    assert out.cost <= program_cost(p, "kernels")


def _pipeline(options: str) -> str:
    tensor = PIPELINES["accy-tensor"].text.replace("saturate,", f"saturate{{{options}}},")
    return f"accy-contract,{tensor}"


def test_the_saturate_pass_merges_projections_of_one_input_through_the_builder():
    @accy.function
    def gates(x: accy.f32[16, 32], w1: accy.f32[32, 24], w2: accy.f32[32, 24]):
        return (x @ w1).relu() + (x @ w2).sigmoid()

    options = "rulesets=canonical,algebra,einsum,layout,concat,merge cost=kernels"
    merged = accy.prepare(gates, _pipeline(options), until="tensor")
    alone = accy.prepare(gates, _pipeline(options + " sharing=false"), until="tensor")
    einsums = [n for n in merged.program.nodes() if n.op is Op.EINSUM]
    assert len(einsums) == 1 and any(s.op is Op.CONCAT for s in einsums[0].srcs)
    assert _einsums(alone.program) == 2
    rng = np.random.default_rng(0)
    args = [rng.uniform(-1, 1, t.shape).astype(np.float32)
            for t in (p.type for p in gates.function().params)]
    full = ",".join([_pipeline(options), "accy-dispatch", "accy-memory", "accy-kernel",
                     "accy-target"])
    assert check_end_to_end(gates, args, pipeline=full).status == "ok"


def test_statistics_report_the_search(tmp_path, capsys):
    b = accy.Builder()
    f = b.begin_function("main", [accy.f32[8, 16], accy.f32[16, 8], accy.f32[16, 8]],
                         ["x", "w1", "w2"])
    x, w1, w2 = (f.param(i) for i in range(3))
    f.return_(x @ w1 + (x @ w2).exp())
    f.finish()
    path = tmp_path / "p.accy"
    path.write_text(accy.print_program(b.finish()))
    pipeline = _pipeline("rulesets=canonical,einsum,concat,merge cost=kernels")
    assert accy_main(["prepare", str(path), "--until", "tensor", "--statistics",
                      "--pipeline", pipeline]) == 0
    out = capsys.readouterr().out
    assert re.search(r"sharing: [1-9]\d* of \d+ shares", out), out


def test_convolutions_of_one_input_merge_into_one_over_concatenated_weights(device):
    @accy.function
    def branches(x: accy.f32[2, 8, 9, 9], w1: accy.f32[4, 8, 3, 3], w2: accy.f32[6, 8, 3, 3],
                 w3: accy.f32[5, 8, 1, 1]):
        a = accy.conv2d(x, w1, padding=1).relu()
        b = accy.conv2d(x, w2, padding=1).sigmoid()
        return a + b[:, :4], accy.conv2d(x, w3)  # the 1x1 kernel has another size: alone

    options = "rulesets=canonical,algebra,einsum,layout,concat,merge cost=kernels"
    saturated = _pipeline(options).split(",conv-lowering")[0]
    job = accy.prepare(branches, saturated, until="tensor")
    convs = [n for n in job.program.nodes() if n.op is Op.CONV2D]
    assert len(convs) == 2
    merged = [n for n in convs if n.srcs[1].op is Op.CONCAT]
    assert len(merged) == 1 and merged[0].type.shape[1] == 10
    rng = np.random.default_rng(1)
    args = [rng.uniform(-1, 1, p.type.shape).astype(np.float32)
            for p in branches.function().params]
    full = ",".join([_pipeline(options), "accy-dispatch", "accy-memory", "accy-kernel",
                     "accy-target"])
    assert check_end_to_end(branches, args, pipeline=full).status == "ok"
