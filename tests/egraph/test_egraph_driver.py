"""Budgeted saturation: every stop reason, rollback, run reports, rule selection."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from egraph_support import F32, T, chain, factor_programs, func, mk, prog, toy_rules

from accy.egraph import driver
from accy.egraph.convert import extract, from_egraph, term, to_egraph
from accy.egraph.driver import (
    IterationStats,
    _predicted_end,
    egraph_size,
    equivalent,
    saturate,
    select_rules,
)
from accy.egraph.rules import RuleSet
from accy.egraph.sorts import Tensor, new_egraph, tensors, types
from accy.errors import EGraphError
from accy.ir.interpret import interpret
from accy.ir.ops import Op


def test_toy_rules_prove_factoring_and_report_matches():
    spread, factored = factor_programs(1024)
    proved, report = equivalent(term(spread.function().results[0]),
                                term(factored.function().results[0]), toy_rules())
    assert proved and report.stop_reason == "saturated"
    matches = report.matches()
    assert set(matches) == {"add-commute", "mul-commute", "add-assoc", "factor"}
    assert matches["factor"] >= 1 and matches["add-commute"] >= 1
    json.dumps(report.to_dict())  # JSON-ready for stage records and result files
    assert "factor" in report.format()


def test_disabled_rule_proves_nothing():
    spread, factored = factor_programs(8)
    proved, report = equivalent(term(spread.function().results[0]),
                                term(factored.function().results[0]), toy_rules(),
                                disable=["factor"])
    assert not proved
    assert "factor" not in report.matches()


def test_saturated_report_per_iteration():
    spread, _ = factor_programs(8)
    peg = to_egraph(spread)
    report = saturate(peg, toy_rules())
    assert report.stop_reason == "saturated" and not report.rolled_back
    assert report.initial_e_nodes == len(spread.nodes())
    assert [it.index for it in report.iterations] == list(range(1, len(report.iterations) + 1))
    assert all(it.kept for it in report.iterations)
    assert report.e_nodes == report.iterations[-1].e_nodes
    assert (report.e_nodes, report.e_classes) == egraph_size(peg.egraph)
    assert sum(report.matches().values()) == sum(it.matches for it in report.iterations)


def test_iteration_limit():
    peg = to_egraph(chain(8))
    report = saturate(peg, toy_rules(), iterations=2)
    assert report.stop_reason == "iteration_limit"
    assert len(report.iterations) == 2 and report.kept_iterations == 2


def test_on_step_can_stop_with_no_gain():
    peg = to_egraph(chain(8))
    seen = []

    def on_step(report):
        seen.append(report.kept_iterations)
        return "no_gain" if report.kept_iterations == 2 else True

    report = saturate(peg, toy_rules(), iterations=10, on_step=on_step)
    assert report.stop_reason == "no_gain" and not report.predicted
    assert seen == [1, 2] and report.kept_iterations == 2


def test_on_step_must_return_a_stop_reason():
    with pytest.raises(ValueError, match="on_step returned 'tired'.*no_gain"):
        saturate(to_egraph(chain(8)), toy_rules(), on_step=lambda r: "tired")


def test_node_limit_rolls_back_the_step_that_overshot():
    peg = to_egraph(chain(8))
    start = egraph_size(peg.egraph)
    limit = start[0] + 3  # the first step adds more than three e-nodes
    report = saturate(peg, toy_rules(), node_limit=limit)
    assert report.stop_reason == "node_limit" and report.rolled_back and not report.predicted
    assert report.iterations[0].e_nodes > limit and not report.iterations[0].kept
    # then bounded steps (every toy rule matches more than the bound: they change nothing)
    assert report.bounded_match_limit is not None
    assert egraph_size(peg.egraph) == start == (report.e_nodes, report.e_classes)
    assert report.e_nodes <= limit
    assert from_egraph(peg) == peg.program  # the e-graph is whole after the rollback


def test_node_limit_later_keeps_earlier_steps():
    peg = to_egraph(chain(10))
    report = saturate(peg, toy_rules(), node_limit=2_000)
    assert report.stop_reason == "node_limit"
    assert report.kept_iterations >= 1
    assert egraph_size(peg.egraph)[0] == report.e_nodes <= 2_000


def test_input_over_the_node_limit_stops_before_any_step():
    report = saturate(to_egraph(chain(4)), toy_rules(), node_limit=2)
    assert report.stop_reason == "node_limit" and report.predicted and not report.iterations


def test_time_limit_keeps_the_step_that_ended_past_it():
    peg = to_egraph(chain(8))
    start = egraph_size(peg.egraph)
    report = saturate(peg, toy_rules(), time_limit_s=1e-9)
    assert report.stop_reason == "time_limit" and not report.rolled_back
    assert report.kept_iterations == 1 and not report.predicted
    assert egraph_size(peg.egraph) == (report.e_nodes, report.e_classes) != start


def test_next_step_predicted_past_the_time_limit_does_not_start():
    def it(seconds: float) -> IterationStats:
        return IterationStats(1, 10, 10, 1, seconds, kept=True)

    now = time.perf_counter()
    # the last step took 8x the one before: the next is predicted to take 8x again
    assert 0.64 <= _predicted_end([it(0.01), it(0.08)], 1.0, now) < 0.7
    assert 0.4 <= _predicted_end([it(0.1)], 4.0, now) < 0.45  # growth in e-nodes
    assert 1.6 <= _predicted_end([it(0.001), it(0.1)], 1.0, now) < 1.65  # capped at 16x


def test_checkpoints_only_near_the_node_limit():
    far = saturate(to_egraph(chain(6)), toy_rules(), node_limit=100_000)
    assert far.stop_reason == "saturated" and far.kept_iterations > 3
    assert far.checkpoints == 1  # the input only: no step started near the limit
    peg = to_egraph(chain(8))
    near = saturate(peg, toy_rules(), node_limit=1_000)
    assert near.stop_reason == "node_limit" and near.rolled_back_iterations == 1
    # the input, then before the steps from 96 e-nodes on; the bounded step after the
    # overshoot (which changed nothing) pushed one more
    assert near.checkpoints == 3 and near.bounded_match_limit is not None
    assert egraph_size(peg.egraph) == (near.e_nodes, near.e_classes)
    for _ in range(near.checkpoints):
        peg.egraph.pop()
    assert egraph_size(peg.egraph)[0] == near.initial_e_nodes


def test_rollback_to_the_input_is_followed_by_bounded_steps(monkeypatch):
    monkeypatch.setattr(driver, "_CHECKPOINT_GROWTH", 1)  # no checkpoint but the input
    peg = to_egraph(chain(8))
    start = egraph_size(peg.egraph)
    report = saturate(peg, toy_rules(), node_limit=1_000)
    assert report.stop_reason == "node_limit" and report.bounded_match_limit is not None
    first = next(i for i, it in enumerate(report.iterations) if it.kept)
    assert first > 1 and not any(it.kept for it in report.iterations[:first])
    assert f"({first} rolled back)" in report.format()
    # the steps rolled back to the input are redone with a match limit, and kept
    assert report.kept_iterations >= 1 and report.e_nodes > start[0]
    assert egraph_size(peg.egraph) == (report.e_nodes, report.e_classes)
    assert sum(report.matches().values()) == sum(
        it.matches for it in report.iterations if it.kept)
    assert from_egraph(peg).function().results[0].type == peg.program.function().results[0].type


def test_a_small_input_is_restored_by_the_caller_instead_of_pushed(monkeypatch):
    monkeypatch.setattr(driver, "_CHECKPOINT_GROWTH", 1)  # "small": within the node limit
    eg = new_egraph()
    eg.push()  # the caller's own checkpoint, below the program
    program = chain(8)
    peg = to_egraph(program, eg)
    start = egraph_size(eg)
    restored = []

    def restore():
        restored.append(1)
        eg.pop()
        eg.push()
        to_egraph(program, eg)

    # far from the node limit: no push at all, nothing to restore
    far = saturate(peg, toy_rules(), node_limit=100_000, restore=restore)
    assert far.stop_reason == "saturated" and far.checkpoints == 0 and not restored
    restore()
    restored.clear()
    # the first step overshoots: the input comes back through ``restore``, then bounded steps
    report = saturate(peg, toy_rules(), node_limit=start[0] + 3, restore=restore)
    assert report.stop_reason == "node_limit" and report.rolled_back and restored
    assert report.checkpoints == 0 and report.bounded_match_limit is not None
    assert egraph_size(eg) == start == (report.e_nodes, report.e_classes)
    assert from_egraph(peg) == program  # the old handles name the reloaded program
    eg.pop()
    assert egraph_size(eg)[0] == 0


def test_rules_option_selects_and_unknown_names_list_valid_ones():
    rs = toy_rules()
    assert [r.name for r in select_rules([rs], rules=["factor", "add-commute"])] == [
        "add-commute", "factor"]
    assert [r.name for r in select_rules([rs], disable=["toy"])] == []
    with pytest.raises(KeyError, match="valid names: toy, add-assoc"):
        select_rules([rs], disable=["distribute"])
    with pytest.raises(KeyError, match="unknown rule set 'nope'"):
        select_rules(["nope"])


@pytest.mark.parametrize("match_limit", [1, 3, 50])
def test_match_limit_backoff_saturates_and_extracts(match_limit):
    program = chain(6)
    peg = to_egraph(program)
    report = saturate(peg, toy_rules(), match_limit=match_limit, iterations=10)
    assert report.stop_reason in ("saturated", "iteration_limit")
    assert (report.e_nodes, report.e_classes) == egraph_size(peg.egraph)
    out = extract(peg)
    x = [np.full(8, i + 1, np.float32) for i in range(6)]
    np.testing.assert_array_equal(interpret(out.program, x)[0], interpret(program, x)[0])


@pytest.mark.parametrize("kw", [{"iterations": -1}, {"node_limit": 0}, {"time_limit_s": 0},
                                {"match_limit": 0}])
def test_bad_limits(kw):
    with pytest.raises(ValueError):
        saturate(to_egraph(chain(2)), toy_rules(), **kw)


def test_rule_that_unites_different_types_is_reported_and_undone():
    (x,) = tensors("x")
    (t,) = types("t")
    bad = RuleSet("bad", "unsound", register=False)
    bad.rewrite("neg-to-sum", Tensor.neg(x, t), Tensor.reduce_sum(x, "[0]", False, "f32[]"))
    p = prog(func("f", [T(F32, 4)], lambda a: mk(Op.NEG, a)))
    peg = to_egraph(p)
    with pytest.raises(EGraphError, match="different types"):
        saturate(peg, bad)
    assert from_egraph(peg) == p  # popped back to the last good e-graph


def test_saturation_is_deterministic():
    runs = []
    for _ in range(2):
        peg = to_egraph(chain(7))
        # a time limit no run nears: the node limit and saturation decide, not the machine
        report = saturate(peg, toy_rules(), node_limit=5_000, time_limit_s=600.0)
        runs.append(([(i.e_nodes, i.e_classes, i.matches, i.kept) for i in report.iterations],
                     report.matches(), report.stop_reason, extract(peg).program))
    assert runs[0] == runs[1]
