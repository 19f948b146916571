"""Multi-pattern rules (rule sets ``merge`` and ``concat``, issue #13 item 3): the merges find
the one contraction over concatenated weights of attention's Q, K and V projections, the
merged form computes what the program does (on OpenCL too), and
``saturate{multi-pattern-iterations=N}`` caps the rounds in which multi-pattern rules run."""

from __future__ import annotations

import json

import numpy as np
import pytest
from egglog import eq

import rewrites
from accy.cli import main as accy_main
from accy.differential import check_end_to_end
from accy.egraph.convert import term, to_egraph
from accy.egraph.driver import saturate
from accy.ir.interpret import interpret
from accy.ir.ops import Op
from accy.ir.program import Program
from accy.passes import rewriting
from accy.passes.pipelines import PIPELINES
from accy.testing import assert_close

rewrites.load()
MULTI = sorted(n for n, info in rewrites.RULES.items() if info.multi)
RULESETS = ("canonical", "algebra", "einsum", "layout", "concat", "merge")


@pytest.fixture(scope="module")
def bench(experiment_script):
    return experiment_script("bench_tensat")


@pytest.fixture(scope="module")
def small(bench):
    return bench.SIZES["tiny"]


def _inputs(program: Program, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, p.type.shape).astype(np.float32)
            for p in program.function().params]


def _saturated(program: Program, cap: int | None, iterations: int = 4):
    names = rewriting.select(RULESETS)
    peg = to_egraph(program)
    report = saturate(peg, RULESETS, rules=names, iterations=iterations, node_limit=50_000,
                      time_limit_s=600, capped=MULTI, capped_iterations=cap)
    return peg, report


def _contains(peg, other: Program) -> bool:
    """Whether ``other``'s result is in the e-class of the saturated program's result."""
    mine, theirs = term(peg.program.function().results[0]), term(other.function().results[0])
    peg.egraph.register(theirs)
    peg.egraph.run(0)  # rebuild: the registered term lands in its congruent e-class
    return peg.egraph.check_bool(eq(mine).to(theirs))


def test_the_merge_rules_are_the_multi_pattern_ones():
    assert MULTI == ["merge-conv-shared-input", "merge-shared-first", "merge-shared-second"]
    assert all(rewrites.rule_info(n).policy == "exact" for n in MULTI)


def test_rule_names_appear_in_accy_rules(capsys):
    assert accy_main(["rules"]) == 0
    out = capsys.readouterr().out
    for name in ("merge-shared-first", "merge-shared-second", "slice-concat-head",
                 "concat-adjacent-slices", "concat-of-einsums-shared-first",
                 "einsum-of-concat-shared-second", "concat-of-add", "slice-slice"):
        assert name in out


def test_qkv_merges_into_one_contraction_over_concatenated_weights(bench, small):
    program, merged = bench.bert_attention(small), bench.bert_attention(small, merged=True)
    # the merged form: one contraction x @ concat(Wq, Wk, Wv), Q, K and V slices of it
    contractions = [n for n in merged.nodes() if n.op is Op.EINSUM
                    and any(s.op is Op.CONCAT for s in n.srcs)]
    assert len(contractions) == 1 and len(contractions[0].srcs[1].srcs) == 3
    assert sum(n.op is Op.EINSUM for n in merged.nodes()) == 4  # merged, scores, context, out
    peg, report = _saturated(program, cap=2, iterations=4)
    assert report.matches()["merge-shared-first"] > 0
    assert _contains(peg, merged)
    args = _inputs(program)
    assert_close(interpret(merged, args), interpret(program, args), program, args)


def test_one_multi_pattern_iteration_merges_pairs_only(bench, small):
    program, merged = bench.bert_attention(small), bench.bert_attention(small, merged=True)
    peg, report = _saturated(program, cap=1, iterations=4)
    # Q, K, V: three pairs, each matched in both orders, in the first iteration only
    assert report.matches()["merge-shared-first"] == 6
    assert not _contains(peg, merged)  # a three-way merge needs a second round


def test_no_multi_pattern_iteration_means_no_merge(bench, small):
    _, report = _saturated(bench.bert_attention(small), cap=0)
    assert all(report.matches()[n] == 0 for n in MULTI)
    assert report.matches()["slice-slice"] == 0  # nothing else builds slices here


def test_the_cap_bounds_the_e_graph(bench, small):
    sizes = [_saturated(bench.nasrnn(small), cap=cap, iterations=3)[1].e_nodes
             for cap in (0, 1, 2)]
    assert sizes[0] < sizes[1] < sizes[2]


def test_saturate_option_reaches_the_driver(bench, small):
    program = bench.nasrnn(small)
    matches = {}
    for cap in (0, 1):
        outcome = rewriting.rewrite_program(
            program, RULESETS, rewriting.select(RULESETS), iterations=3, node_limit=50_000,
            time_limit_s=600, cost="flops-bytes", multi_pattern_iterations=cap)
        assert outcome.report is not None
        matches[cap] = outcome.report.matches()["merge-shared-first"]
    assert matches[0] == 0 and matches[1] == 24  # 4 + 4 projections: 2 x 12 ordered pairs


def test_bad_cap_is_an_error(bench, small):
    peg = to_egraph(bench.nasrnn(small))
    with pytest.raises(ValueError, match="capped_iterations"):
        saturate(peg, RULESETS, capped=MULTI, capped_iterations=-1)


def _pipeline(saturate_options: str) -> str:
    tensor = PIPELINES["accy-tensor"].text.replace("saturate,", f"saturate{{{saturate_options}}},")
    return ",".join(["accy-contract", tensor, "accy-dispatch", "accy-memory", "accy-kernel",
                     "accy-target"])


@pytest.mark.parametrize("name", ["bert_attention", "nasrnn", "nasrnn_stack",
                                  "transformer_block", "mlp_stack", "inception"])
def test_merged_programs_match_interpret_on_opencl(bench, small, name: str):
    program, merged = bench.PROGRAMS[name](small), bench.PROGRAMS[name](small, merged=True)
    args = _inputs(program)
    assert_close(interpret(merged, args), interpret(program, args), program, args)
    assert check_end_to_end(merged, args).status == "ok"
    options = "rulesets=canonical,algebra,einsum,layout,concat,merge multi-pattern-iterations=1"
    assert check_end_to_end(program, args, pipeline=_pipeline(options)).status == "ok"


def test_bench_tensat_smoke(bench, tmp_path):
    out = tmp_path / "t.json"
    result = bench.main(["--size", "tiny", "--programs", "bert_attention", "--caps", "0,1",
                         "--iterations", "3", "--repeats", "1", "--out", str(out)])
    data = json.loads(out.read_text())
    assert data == json.loads(json.dumps(result))
    assert [r["cap"] for r in data["saturation"]] == [0, 1]
    for row in data["saturation"]:
        assert row["cost_after"] <= row["cost_before"] and not row["merged_in_egraph"]
        assert row["einsums_before"] == 6 and row["einsums_merged"] == 4
    (kernels,) = data["kernels"]
    assert set(kernels["kernels"]) == {"original", "merged", "saturated:kernels"}
    # the pipeline's saturate with the merge rules extracts Q, K and V as one contraction
    assert kernels["saturate"]["saturated:kernels"]["sharing"].split()[0] != "0"
    if "kernel_ms" in kernels:  # OpenCL ran: all agree
        assert max(kernels["max_abs_diff"].values()) < 1e-4
