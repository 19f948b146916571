"""The egglog passes: saturate (tensor), canonicalize and constant-fold (contract): options
from pipeline text, ablation, policies, budgets, statistics, and the commands that show them."""

from __future__ import annotations

import numpy as np
import pytest

import accy
from accy.cli import main
from accy.egraph.rules import RULESETS
from accy.errors import PassFailure, PipelineError
from accy.ir.ops import Op
from accy.ir.printer import print_program
from accy.passes.spec import parse_pipeline

CONTRACT = "constant-fold,canonicalize"


@accy.function
def factor(a: accy.f32[256], b: accy.f32[256], c: accy.f32[256]):
    return a * b + a * c


@accy.function
def chain(a: accy.f32[32, 4], b: accy.f32[4, 32], c: accy.f32[32, 4]):
    return (a @ b) @ c


@accy.function
def plain(a: accy.f32[16], b: accy.f32[16]):
    return accy.maximum((a + b) * b - b, b)


def saturated(program: accy.Program, text: str) -> tuple[accy.PreparedJob, dict]:
    job = accy.prepare(program, f"{CONTRACT},{text}", until="tensor")
    return job, dict(job.record("tensor").passes[0].stats)


def test_fast_math_from_pipeline_text_factors():
    job, stats = saturated(factor, "saturate{fast-math=true}")
    assert stats["changed"] and stats["rules-fired"]["factor-mul-add"] >= 1
    assert [n.op for n in job.program.nodes() if n.op in (Op.MUL, Op.ADD)] == [Op.ADD, Op.MUL]
    assert stats["cost-after"] < stats["cost-before"]


def test_ablation_from_pipeline_text_alone():
    job, stats = saturated(factor, "saturate{fast-math=true disable=factor-mul-add}")
    assert not stats["changed"] and "factor-mul-add" not in stats.get("rules-fired", {})
    assert job.program == factor
    job, stats = saturated(chain, "saturate{fast-math=true rules=einsum}")
    assert stats["changed"] and set(stats["rules-fired"]) <= {
        r.name for r in RULESETS["einsum"].rules}
    job, stats = saturated(chain, "saturate{fast-math=true disable=einsum}")
    assert not stats["changed"]


def test_pipeline_text_round_trips():
    text = ("saturate{rulesets=algebra,einsum rules=factor-mul-add,einsum disable=einsum-split "
            "iterations=3 node-limit=500 time-limit=0.5 cost=flops fast-math=true}")
    p = parse_pipeline(text)
    assert parse_pipeline(p.text()) == p and parse_pipeline(p.text(full=True)) == p
    s = p.passes[0]
    assert s.rules == ("factor-mul-add", "einsum") and s.time_limit == 0.5 and s.fast_math


@pytest.mark.parametrize("text,message,error", [
    ("saturate{disable=factor-mul-ad}", "did you mean 'factor-mul-add'", PipelineError),
    ("saturate{rulesets=no-such-set}", "valid rule sets: canonical", PipelineError),
    ("saturate{cost=no-such-model}", "valid cost models: .*flops-bytes", PassFailure),
    ("saturate{rules=factor-mul-add}", "fast-math=true", PassFailure),
    ("canonicalize{disable=factor-mul-add}", "not in the selected rule sets", PassFailure),
])
def test_bad_names_fail_and_list_valid_ones(text, message, error):
    # unknown rule and rule-set names when the text is read; the rest when the pass runs
    with pytest.raises(error, match=message):
        accy.prepare(factor, f"{CONTRACT},{text}", until="tensor")


def test_programs_without_a_match_skip_the_egraph():
    job, stats = saturated(plain, "saturate")
    assert stats["stop-reason"] == "skipped: no rule matches the program"
    assert job.program == plain


def test_ties_keep_the_input():
    # commutativity matches everything here; the mirrored program costs the same
    job, stats = saturated(factor, "saturate{rules=add-commute,mul-commute,sub-zero}")
    assert job.program == factor and not stats["changed"]


def test_statistics_carry_the_run_report():
    _, stats = saturated(chain, "saturate{fast-math=true patience=0}")
    assert stats["stop-reason"] == "saturated"
    iterations = stats["per-iteration"]
    assert iterations and all({"e-nodes", "e-classes", "matches", "seconds", "kept"} <= set(i)
                              for i in iterations)
    assert "->" in stats["e-nodes"] and stats["iterations"] == len(iterations)
    assert set(stats["rule-seconds"]) == set(stats["rules-fired"])
    assert "saturation: saturated after" in stats["report"]
    assert "einsum-split" in stats["report"]


@pytest.mark.parametrize("options,reason", [
    # a generous time limit where another budget is tested: a loaded machine must not hit it
    ("iterations=1 time-limit=600", "iteration_limit"),
    ("node-limit=40 time-limit=600", "node_limit"),
    ("time-limit=0.000001", "time_limit"),
])
def test_budgets_stop_saturation(options, reason):
    job, stats = saturated(chain, f"saturate{{fast-math=true {options}}}")
    assert stats["stop-reason"] == reason
    x = [np.ones(p.type.shape, np.float32) for p in chain.function().params]
    np.testing.assert_allclose(accy.interpret(job.program, x)[0],
                               accy.interpret(chain, x)[0], rtol=1e-5)


def test_saturation_is_deterministic():
    # a time limit no run nears: saturation, not the machine's speed, ends both runs
    a, _ = saturated(chain, "saturate{fast-math=true time-limit=600}")
    b, _ = saturated(chain, "saturate{fast-math=true time-limit=600}")
    assert print_program(a.program) == print_program(b.program)
    assert a.stamps() == b.stamps()


def test_constants_gather_under_fast_math_and_saturate_folds_them():
    @accy.function
    def consts(x: accy.f32[8]):
        return (x + 1.0) + 2.0

    job = accy.prepare(consts, "canonicalize", until="contract")
    assert job.program == consts  # reassociation rounds differently: fast-math only
    job = accy.prepare(consts, "canonicalize{fast-math=true}", until="contract")
    outer = job.program.function().results[0]
    assert outer.op is Op.ADD and outer.srcs[0].op is Op.PARAM  # x + (1 + 2)
    job = accy.prepare(consts, "saturate{fast-math=true}", until="tensor")
    (add,) = (n for n in job.program.nodes() if n.op is Op.ADD)
    assert next(s for s in add.srcs if s.op is Op.CONSTANT).value == 3.0


def test_canonicalize_simplifies_and_finite_math_is_asked_for():
    @accy.function
    def ident(x: accy.f32[8], y: accy.f32[8]):
        negated = -(x * 1.0)
        return -negated + y * 0.0

    job = accy.prepare(ident, "canonicalize", until="contract")
    assert [n.op for n in job.program.nodes() if n.op is not Op.PARAM][-1] is Op.ADD
    assert Op.NEG not in {n.op for n in job.program.nodes()}
    assert Op.MUL in {n.op for n in job.program.nodes()}  # y * 0.0 stays: finite-math
    job = accy.prepare(ident, "canonicalize{finite-math=true}", until="contract")
    ops = [n.op for n in job.program.nodes()]
    assert Op.MUL not in ops and Op.NEG not in ops and Op.ADD not in ops  # x + 0 -> x too


def test_constant_fold_rules_can_be_switched_off():
    @accy.function
    def splats(x: accy.f32[8]):
        return x * (x.fb.constant(np.full(8, 1.5, np.float32)) * 2.0)

    job = accy.prepare(splats, "constant-fold", until="contract")
    stats = dict(job.record("contract").passes[0].stats)
    assert (stats["folded-by-rules"], stats["folded-by-evaluation"]) == (1, 0)
    job = accy.prepare(splats, "constant-fold{disable=fold}", until="contract")
    stats = dict(job.record("contract").passes[0].stats)
    assert (stats["folded-by-rules"], stats["folded-by-evaluation"]) == (0, 1)
    job = accy.prepare(splats, "constant-fold{max-elements=4}", until="contract")
    assert job.program == splats  # an 8-element result is over the cap, for both steps


def test_rules_command_lists_rule_sets_rules_and_policies(capsys):
    assert main(["rules"]) == 0
    out = capsys.readouterr().out
    for name in ("canonical", "fold", "algebra", "einsum", "activation", "layout"):
        assert out.count(f"{name}  (") == 1
    assert "factor-mul-add" in out and "fast-math" in out and "finite-math" in out
    assert main(["rules", "einsum", "--policy", "fast-math"]) == 0
    out = capsys.readouterr().out
    assert "einsum-split" in out and "einsum-swap-01" not in out and "algebra" not in out
    assert main(["rules", "nope"]) == 2


def test_prepare_statistics_show_the_saturation_report(tmp_path, capsys):
    path = tmp_path / "t.accy"
    path.write_text(
        "func @t(%x: f32[4,3]) -> (f32[4,3]) {\n"
        "  %0 = transpose(%x) {perm=[1, 0]} : f32[3,4]\n"
        "  %1 = exp(%0) : f32[3,4]\n"
        "  %2 = transpose(%1) {perm=[1, 0]} : f32[4,3]\n"
        "  return %2\n}\n")
    assert main(["prepare", str(path), "--until", "tensor", "--statistics"]) == 0
    out = capsys.readouterr().out
    # a few matches a step: patience never extracts between steps, saturation ends it
    assert "stop-reason: saturated" in out and "rules-fired" in out
    assert "transpose-through-exp" in out and "iteration  e-nodes  e-classes" in out


@pytest.mark.parametrize("limit", [1, 4, 1000])
def test_match_limit_from_pipeline_text_saturates_and_extracts(limit):
    job, stats = saturated(chain, f"saturate{{fast-math=true match-limit={limit} iterations=8}}")
    assert stats["stop-reason"] in ("saturated", "no_gain", "iteration_limit")
    assert stats["cost-after"] <= stats["cost-before"]
    x = [np.full(p.type.shape, i + 1, np.float32) for i, p in enumerate(chain.function().params)]
    np.testing.assert_allclose(accy.interpret(job.program, x)[0],
                               accy.interpret(chain, x)[0], rtol=1e-5)


def test_match_limit_must_be_positive():
    with pytest.raises(PipelineError, match="got -1; allowed: 0 <= match-limit"):  # when read
        accy.prepare(factor, f"{CONTRACT},saturate{{fast-math=true match-limit=-1}}",
                     until="tensor")


@accy.function
def shared_matmul(a: accy.f32[64, 64], b: accy.f32[64, 64], x: accy.f32[32, 100]):
    m = a @ b  # used twice; m.T alone is cheaper as one einsum b^T a^T: a second matmul
    return m + m.T, x.softmax(-1).log()


@pytest.mark.parametrize("extractor", ["greedy-dag", "tree", "ilp"])
def test_regions_keep_the_log_softmax_win_and_one_matmul(extractor):
    # a time limit no loaded machine reaches: region acceptance stops at the pass's deadline
    job, stats = saturated(shared_matmul, f"saturate{{extractor={extractor} time-limit=3600}}")
    ops = [n.op for n in job.program.nodes()]
    assert ops.count(Op.EINSUM) == 1 and ops.count(Op.LOG_SOFTMAX) == 1
    assert stats["changed"] and stats["cost-after"] < stats["cost-before"]
    assert stats["extractor"] == extractor and not stats["regions"].startswith("0 kept")
    x = [np.random.default_rng(i).random(p.type.shape, np.float32)
         for i, p in enumerate(shared_matmul.function().params)]
    for got, want in zip(accy.interpret(job.program, x), accy.interpret(shared_matmul, x),
                         strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_extractor_option_round_trips_and_rejects_unknown_names():
    p = parse_pipeline("saturate{extractor=tree}")
    assert "extractor=tree" in str(p)
    with pytest.raises(Exception, match="greedy-dag"):
        parse_pipeline("saturate{extractor=best}")


def test_pass_and_driver_share_one_set_of_defaults():
    import inspect

    from accy.egraph import defaults, driver
    from accy.passes.tensor.saturate import Saturate

    pass_defaults = {o.field: o.default for o in Saturate.options()}
    sig = inspect.signature(driver.saturate).parameters
    # node-limit=0 and time-limit=0: scaled with the program, the driver's defaults when small
    assert (pass_defaults["iterations"], pass_defaults["node_limit"],
            defaults.scaled_time_limit(1), pass_defaults["extractor"]) == (
        sig["iterations"].default, sig["node_limit"].default, sig["time_limit_s"].default,
        defaults.DEFAULT_EXTRACTOR)
    assert pass_defaults["time_limit"] == 0.0


def test_issue13_backoff_dangling_e_nodes_do_not_break_extraction():
    # issue #13: with match-limit, egglog's backoff scheduler applies a banned rule's matches
    # over e-class ids merged away meanwhile; extraction failed with "e-class N has no
    # e-nodes of accy's sorts" from iteration 9 on this 734-node program (experiments/
    # bench_saturation.random_program(600, 1)). A time limit it cannot reach: the run stops
    # by iterations on any machine.
    from pathlib import Path

    from accy.ir.parser import parse_program

    path = Path(__file__).parents[1] / "egraph" / "data" / "issue13_backoff_dangling.accy"
    program = parse_program(path.read_text())
    job = accy.prepare(program, "saturate{fast-math=true match-limit=1000 iterations=9 "
                       "node-limit=1000000 time-limit=600}", until="tensor")
    stats = dict(job.record("tensor").passes[0].stats)
    assert stats["stop-reason"] == "iteration_limit"
    assert stats["dangling-e-nodes"] > 0  # the case is exercised
    assert stats["cost-after"] < stats["cost-before"]
    rng = np.random.default_rng(0)
    x = [rng.random(p.type.shape, np.float32) for p in program.function().params]
    np.testing.assert_allclose(accy.interpret(job.program, x)[0],
                               accy.interpret(program, x)[0], rtol=1e-3, atol=1e-3)


def test_patience_extracts_after_enough_matches_and_stops_once_the_gain_stops(monkeypatch):
    """In-process patience (``rewriting._Stepwise``): a step is extracted once the steps since
    the last extraction matched as often as the e-graph has e-nodes (cheaper steps go on); an
    unchanged e-graph counts as an extraction that found nothing; no gain counts only after
    a first gain; the result is the cheapest extraction, the later one on a tie."""
    from types import SimpleNamespace as NS

    from accy.passes import rewriting

    monkeypatch.setattr(rewriting.worker, "guard", lambda *args: (True, False))
    costs, made = iter([90, 80, 80]), []

    def extract():
        made.append(next(costs))
        return NS(cost=made[-1])

    step = rewriting._Stepwise(None, None, "greedy-dag", 100, None, 1e18, patience=2)
    step.extract = extract

    def report(e_nodes, e_classes, matches):
        return NS(iterations=[NS(matches=matches)], e_nodes=e_nodes, e_classes=e_classes)

    assert step.on_step(report(50, 10, 20)) is True and made == []  # 20 < 50: step on
    assert step.on_step(report(60, 12, 45)) is True and made == [90]  # 65 >= 60: a gain
    assert step.on_step(report(70, 12, 80)) is True and made == [90, 80]  # cheaper
    assert step.on_step(report(70, 12, 90)) is True and made == [90, 80]  # same e-graph
    assert step.on_step(report(75, 12, 90)) == "no_gain" and made == [90, 80, 80]
    assert step.final(report(75, 12, 0)).cost == 80 and made == [90, 80, 80]
    # a whole pass: patience changes when saturation stops, never what it finds here
    _, full = saturated(chain, "saturate{fast-math=true patience=0}")
    for patience in (1, 2):
        _, stats = saturated(chain, f"saturate{{fast-math=true patience={patience}}}")
        assert stats["cost-after"] == full["cost-after"] < full["cost-before"]
